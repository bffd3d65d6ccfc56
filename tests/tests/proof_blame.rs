//! What one client's request makes an upstream say is the client's (SPEC §18a): an error that
//! echoes the request's own field names or text blames no route or account, whatever phrase it
//! holds; state the gateway cannot place (`conversation`, a stored `prompt`) is refused before any
//! route is tried; and no key-like token an upstream wrote reaches a client or the record
//! (SPEC §15).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{fast_policy, pairs, with, Api, Fixture, Stack, APIS};

/// Deadlines that do not matter to these tests: generous, so a loaded machine fails none of them.
fn relaxed() -> Value {
    with(
        fast_policy(),
        json!({"stream_first_content_ms": 10000, "nonstream_base_ms": 10000, "last_route_min_ms": 10000,
               "idle_timeout_ms": 10000}),
    )
}

/// Another key's plain requests are still answered by r0, and the model's health shows nothing
/// of r0 cooling or demoted.
fn r0_still_serves_everyone(f: &Fixture) {
    let other = f.s.new_key(1.0);
    for _ in 0..3 {
        let r = f.s.send(f.api, &other, &f.api.body(&f.model, false), &[]);
        assert_eq!(r.status, 200, "{:?}: {}", f.api, r.text());
        let g = f.s.generation(&other, r.header("x-generation-id").unwrap());
        assert_eq!(
            g["route"], "r0",
            "{:?}: another key's request still goes to r0 first: {g}",
            f.api
        );
    }
    // Every report has reached the model's object (through the isolate's shard, within 1 s).
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let health = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
    assert!(
        !health.to_string().contains("cooling"),
        "{:?}: nothing cools: {health}",
        f.api
    );
    assert_eq!(health["routes"][0]["state"], "healthy", "{:?}: {health}", f.api);
}

#[test]
fn blame_a_field_named_like_an_account_failure_cools_no_account() {
    // Each provider names an argument it does not know in its 400 ("Unrecognized request
    // argument supplied: invalid api key", "invalid api key: Extra inputs are not permitted",
    // `Unknown name "invalid api key"`…). The phrase once read as a broken upstream key: r0's
    // account cooled for every key at the first such request.
    for api in APIS {
        let f = Fixture::build(api, &["ok", "lenient"], &[], relaxed(), false);
        let r = f.send_with(json!({"invalid api key": 1}));
        assert_eq!(
            r.status,
            200,
            "{api:?}: the route that takes the field answers: {}",
            r.text()
        );
        assert_eq!(
            f.attempts(&r),
            pairs(&[("r0", "unsupported_param"), ("r1", "answered")]),
            "{api:?}: the 400 is about the request's own field"
        );
        r0_still_serves_everyone(&f);
    }
}

#[test]
fn blame_a_field_named_like_a_missing_model_demotes_no_route() {
    // "Unrecognized request argument supplied: model not found" once read as the model missing at
    // r0: three such requests from one key demoted r0 for everyone.
    for api in [Api::Chat, Api::Messages] {
        let f = Fixture::build(api, &["ok", "lenient"], &[], relaxed(), false);
        for _ in 0..4 {
            let r = f.send_with(json!({"model not found": true, "The model does not exist": 1}));
            assert_eq!(r.status, 200, "{api:?}: {}", r.text());
            assert_eq!(
                f.attempts(&r),
                pairs(&[("r0", "unsupported_param"), ("r1", "answered")]),
                "{api:?}"
            );
        }
        r0_still_serves_everyone(&f);
    }
}

#[test]
fn blame_state_the_gateway_cannot_place_is_refused_before_any_route() {
    // A Responses `conversation` lives at one upstream project, and Switchyard has no
    // conversations endpoint: no id is one it can place. Sent on, it was a 404 at every route,
    // read as the model missing there — three requests from one key demoted every route. A
    // stored `prompt` is the same: no route is known to hold it.
    let f = Fixture::build(Api::Responses, &["ok", "ok"], &[], relaxed(), false);
    for (field, value) in [
        ("conversation", json!("conv_x")),
        ("conversation", json!({"id": "conv_y"})),
        ("prompt", json!({"id": "pmpt_x", "version": "2"})),
    ] {
        for _ in 0..3 {
            let r = f.send_with(json!({ field: value.clone() }));
            assert_eq!(r.status, 400, "{field}: refused by the gateway: {}", r.text());
            let e = r.json();
            assert_eq!(e["error"]["param"], field, "{e}");
            assert!(e["error"]["message"].as_str().unwrap().contains(field), "{e}");
        }
    }
    assert_eq!((f.seen(0), f.seen(1)), (0, 0), "nothing reached an upstream");
    r0_still_serves_everyone(&f);
}

/// The token the upstream's message carries; the client never sent it.
const TOKEN: &str = "sk-abcdefghijklmnopqrstuvwx";

/// A 400 whose message carries key-like tokens: an `sk-` key, a Google key, a bearer token.
const LEAKY: &str = "status/400/message/Invalid%20request:%20key=sk-abcdefghijklmnopqrstuvwx%20\
                     (AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv,%20Bearer%20eyJhbGciOiJIUzI1NiJ9.e30)%20refused";

fn assert_no_token(s: &Stack, key: &str, r: &switchyard_e2e::Reply, what: &str) {
    assert_eq!(
        r.status,
        400,
        "{what}: the provider's 400 is the client's: {}",
        r.text()
    );
    let text = r.text();
    assert!(
        text.contains("Invalid request"),
        "{what}: the provider's words are relayed: {text}"
    );
    for secret in [TOKEN, "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv", "eyJhbGciOiJIUzI1NiJ9"] {
        assert!(!text.contains(secret), "{what}: the answer carries {secret}: {text}");
        let g = s.generation(key, r.header("x-generation-id").unwrap());
        assert!(
            g["attempts"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("Invalid request")),
            "{what}: the record keeps the client's error: {g}"
        );
        assert!(
            !g.to_string().contains(secret),
            "{what}: the record carries {secret}: {g}"
        );
    }
}

#[test]
fn blame_key_like_tokens_in_an_upstream_error_reach_no_client() {
    let s = Stack::from_env();
    // A route whose provider has no key of its own: nothing to redact but what looks like a key.
    let (routes, _) = s.mock_routes(&[(LEAKY, json!({}))]);
    let model = s.model(routes, Some(relaxed()));
    let key = s.new_key(1.0);
    for stream in [false, true] {
        let r = s.chat(&key, &switchyard_e2e::chat_body(&model, stream));
        assert_no_token(&s, &key, &r, &format!("keyless route, stream={stream}"));
    }
    // A route with a key, in each dialect.
    for api in APIS {
        let f = Fixture::build(api, &[LEAKY], &[], relaxed(), false);
        let r = f.send(false);
        assert_no_token(&f.s, &f.key, &r, &format!("{api:?}"));
    }
}
