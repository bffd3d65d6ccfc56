//! The hold bounds the charge (issue 12, SPEC §11): it covers every completion and the larger of
//! two limits, the upstream is told the limit that was held, a charge above the hold is capped
//! (the overrun recorded), and a key's spend limit is decided atomically with the balance.
//!
//! Routes here cost nothing for input and 10 $/Mtok (10 µ$ a token) for output, so a hold is
//! exactly 10 µ$ × the output tokens it covers.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{fast_policy, with, Api, Fixture, Stack};

const OUTPUT_ONLY: &str = r#"{"price": {"input_per_mtok": 0.0, "output_per_mtok": 10.0}}"#;

fn priced(api: Api, scenario: &str) -> Fixture {
    let price: Value = serde_json::from_str(OUTPUT_ONLY).unwrap();
    Fixture::build(api, &[scenario], &[price], fast_policy(), false)
}

/// A key on a fresh account credited `micros` µ$, with `fields` for the key.
fn key_with(s: &Stack, micros: u64, fields: Value) -> String {
    let account = s.admin("POST", "/admin/accounts", Some(json!({}))).json()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = s.admin(
        "POST",
        &format!("/admin/accounts/{account}/credit"),
        Some(json!({"amount_usd": micros as f64 / 1e6})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.admin(
        "POST",
        "/admin/keys",
        Some(with(json!({"account_id": account}), fields)),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["key"].as_str().unwrap().to_string()
}

fn chat(f: &Fixture, key: &str, fields: Value) -> switchyard_e2e::Reply {
    f.s.send(Api::Chat, key, &with(Api::Chat.body(&f.model, false), fields), &[])
}

fn last_body(f: &Fixture) -> Value {
    let (label, scenario) = &f.routes[0];
    f.s.mock_stats(label, scenario)["last_request"]["body"].clone()
}

#[test]
fn n_completions_are_all_held() {
    let f = priced(Api::Chat, "ok");
    let key = key_with(&f.s, 2_000, json!({})); // one completion of 100 tokens (1 000 µ$) fits, three do not
    let r = chat(&f, &key, json!({"n": 3, "max_tokens": 100}));
    assert_eq!(r.status, 402, "n = 3 holds 3 000 µ$: {}", r.text());
    assert_eq!(r.json()["error"]["code"], "insufficient_balance");
    let r = chat(&f, &key, json!({"n": 1, "max_tokens": 100}));
    assert_eq!(r.status, 200, "{}", r.text());
    let r = chat(&f, &key, json!({"n": 0}));
    assert_eq!((r.status, r.json()["error"]["param"].as_str()), (400, Some("n")));
}

#[test]
fn the_larger_of_two_limits_is_held_and_only_it_forwarded() {
    let f = priced(Api::Chat, "ok");
    let poor = key_with(&f.s, 500, json!({}));
    let r = chat(&f, &poor, json!({"max_completion_tokens": 1, "max_tokens": 100}));
    assert_eq!(r.status, 402, "100 tokens are held, not 1: {}", r.text());
    let r = chat(&f, &f.key, json!({"max_completion_tokens": 1, "max_tokens": 100}));
    assert_eq!(r.status, 200, "{}", r.text());
    let sent = last_body(&f);
    assert_eq!(sent["max_tokens"], 100);
    assert!(sent.get("max_completion_tokens").is_none(), "{sent}");
}

#[test]
fn the_held_output_limit_is_forwarded_in_each_dialect() {
    for (api, field) in [
        (Api::Chat, "/max_completion_tokens"),
        (Api::Responses, "/max_output_tokens"),
        (Api::Gemini, "/generationConfig/maxOutputTokens"),
    ] {
        let f = priced(api, "ok");
        let r = f.send(false);
        assert_eq!(r.status, 200, "{api:?}: {}", r.text());
        assert_eq!(
            last_body(&f).pointer(field),
            Some(&json!(1024)),
            "{api:?}: the model's max_output_tokens was held and sent"
        );
    }
    let f = priced(Api::Chat, "ok");
    assert_eq!(chat(&f, &f.key, json!({"max_tokens": 7})).status, 200);
    let sent = last_body(&f);
    assert_eq!(
        (sent["max_tokens"].as_u64(), sent.get("max_completion_tokens")),
        (Some(7), None)
    );
}

#[test]
fn output_past_the_forwarded_limit_is_cut_and_the_charge_stays_within_the_hold() {
    let f = priced(Api::Chat, "chunks/10/0"); // the upstream ignores the limit: 10 tokens
    for stream in [false, true] {
        let key = key_with(&f.s, 1_000_000, json!({}));
        let r = chat(&f, &key, json!({"max_tokens": 2, "stream": stream}));
        assert_eq!(r.status, 200, "{}", r.text());
        let g = f.s.generation(&key, r.header("x-generation-id").unwrap());
        // Output past the forwarded limit is more than the request could cause: cut to the
        // limit and flagged (SPEC §17), so the charge stays within the hold.
        assert_eq!(g["usage"]["output_tokens"], 2, "{g}");
        assert_eq!(g["usage"]["clamped"], true, "{g}");
        assert_eq!(g["total_cost"], 0.00002, "charged the 20 µ$ hold, not 100 µ$: {g}");
        assert_eq!(g["overrun"], 0.0, "{g}");
        let c = f.s.credits(&key);
        assert_eq!(c["charges_total_micros"], 20, "{c}");
        assert_eq!(c["held_micros"], 0);
    }
}

#[test]
fn a_spend_limit_holds_under_concurrency() {
    let f = priced(Api::Chat, "first-content-after/800");
    // Each request holds 1 000 µ$ (100 tokens); the limit covers exactly one at a time.
    let key = key_with(&f.s, 10_000_000, json!({"spend_limit": 0.001}));
    let results: Vec<(u16, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                scope.spawn(|| {
                    let r = chat(&f, &key, json!({"max_tokens": 100}));
                    (r.status, r.json())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results.iter().filter(|(s, _)| *s == 200).count();
    let refused = results
        .iter()
        .filter(|(s, v)| *s == 402 && v["error"]["code"] == "spend_limit_reached")
        .count();
    assert_eq!((ok, refused), (1, 15), "{results:?}");
    let c = f.s.credits(&key);
    assert!(c["key"]["spent_micros"].as_i64().unwrap() <= 1_000, "{c}");
}
