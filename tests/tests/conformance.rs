//! Where Chat Completions met the contract only in unit tests, or not at all (issue 11): each
//! test names the rule it proves, end to end, with timings shrunk through the model's `policy`.
//! (Empty answers, a 500 that mentions load and the content-policy fallback are rows of the
//! fault matrix in dialects.rs.)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, fast_policy, pairs, route, sse_events, unique, with, Api, Fixture, Reply, Stack};

/// A chat model on mock scenarios with this policy.
fn chat_fixture(scenarios: &[&str], policy: Value) -> Fixture {
    Fixture::build(Api::Chat, scenarios, &[], policy, false)
}

// ---- 3, 4: every request is on the record, and the record is there when the answer is ----------

#[test]
fn a_request_refused_before_any_route_is_on_the_record() {
    let s = Stack::from_env();
    let label = unique("l");
    let provider = s.mock_provider(&label, "ok", false);
    let model = s.model(vec![route("r0", &provider, "u", json!({}))], None);
    // A model that forbids translation (SPEC §19) has no route for a chat request.
    let messages_only = s.model(
        vec![route("r0", &provider, "u", json!({"apis": ["messages"]}))],
        Some(json!({"translate": false})),
    );
    let key = s.new_key(1.0);
    let broke = s.new_key(0.000_001);
    let (k, b) = (key.as_str(), broke.as_str());
    let cases: Vec<(&str, &str, Vec<u8>, u16, &str)> = vec![
        ("bad JSON", k, b"{not json".to_vec(), 400, "invalid_request"),
        (
            "unknown model",
            k,
            chat_body("no/such-model", false).to_string().into_bytes(),
            404,
            "model_not_found",
        ),
        (
            "no balance",
            b,
            chat_body(&model, false).to_string().into_bytes(),
            402,
            "insufficient_balance",
        ),
        (
            "no chat route",
            k,
            chat_body(&messages_only, false).to_string().into_bytes(),
            503,
            "supply_not_configured",
        ),
        (
            "no route left after the provider filters",
            k,
            with(chat_body(&model, false), json!({"provider": {"only": ["nobody"]}}))
                .to_string()
                .into_bytes(),
            400,
            "invalid_request",
        ),
    ];
    for (what, key, body, status, code) in cases {
        let r = s.chat_raw(key, &body);
        assert_eq!(r.status, status, "{what}: {}", r.text());
        let id = r.header("x-generation-id").expect("x-generation-id");
        assert_eq!(r.json()["generation_id"], id, "{what}");
        let g = s.generation(key, id);
        assert_eq!(g["outcome"], "rejected", "{what}: {g}");
        assert_eq!(g["error_code"], code, "{what}");
        assert_eq!(g["attempts"], json!([]), "{what}");
        assert_eq!(g["total_cost"], 0.0, "{what}");
        assert_eq!(g["hold_path"], Value::Null, "{what}: no hold was placed");
    }
    assert_eq!(s.mock_stats(&label, "ok")["requests"], 0, "nothing reached an upstream");
    assert_eq!(s.credits(k)["held_micros"], 0);
}

#[test]
fn the_record_is_there_as_soon_as_the_stream_was_read() {
    let f = Fixture::build(Api::Chat, &["ok"], &[], fast_policy(), false);
    for _ in 0..3 {
        let r = f.send_with(json!({"stream": true}));
        assert_eq!(r.status, 200);
        let id = r.header("x-generation-id").unwrap();
        // One lookup at once, no retry: the gateway waits for a record it issued moments ago.
        let g = f.s.request(
            "GET",
            &format!("{}/v1/generation?id={id}", f.s.gateway),
            &[("authorization", &format!("Bearer {}", f.key))],
            None,
        );
        assert_eq!(g.status, 200, "{}", g.text());
        assert_eq!(g.json()["outcome"], "answered");
    }
    let unknown = f.s.request(
        "GET",
        &format!(
            "{}/v1/generation?id=gen-2f1c0b8e-5d2a-4c1e-9f00-0123456789ab",
            f.s.gateway
        ),
        &[("authorization", &format!("Bearer {}", f.key))],
        None,
    );
    assert_eq!(unknown.status, 404, "an id this gateway never issued is not waited for");
}

// ---- 5: the stream cap counts from the request's start ------------------------------------------

#[test]
fn the_stream_cap_counts_from_the_request_start_not_from_commit() {
    // Content after 700 ms, then 10 chunks 100 ms apart: ~1.6 s from the start, ~0.9 s from commit.
    let policy = with(
        fast_policy(),
        json!({"stream_first_content_ms": 3000, "last_route_min_ms": 3000, "stream_cap_ms": 1100}),
    );
    let f = Fixture::build(
        Api::Chat,
        &["first-content-after/700/chunks/10/100"],
        &[],
        policy,
        false,
    );
    let started = Instant::now();
    let r = f.send_with(json!({"stream": true}));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "cut at the cap, not at the end"
    );
    let events = sse_events(&r.text());
    assert_eq!(events.last().unwrap().1, "[DONE]");
    assert!(events[events.len() - 2].1.contains("maximum duration"), "{}", r.text());
    let g = f.generation(&r);
    assert_eq!(g["outcome"], "broken");
    assert!(g["delivered_output"].as_u64().unwrap() < 10);
}

// ---- 6: content policy ---------------------------------------------------------------------------

#[test]
fn a_content_policy_refusal_counts_against_nothing_and_all_of_them_make_a_content_policy_400() {
    let f = chat_fixture(
        &["status/400/content_filter", "ok"],
        with(fast_policy(), json!({"demote_after": 1})),
    );
    let r = f.send_with(json!({}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.attempts(&r), pairs(&[("r0", "content_policy"), ("r1", "answered")]));
    // The report has reached the model's object (through the isolate's shard, within 1 s).
    std::thread::sleep(std::time::Duration::from_millis(1_300));
    let health = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
    let r0 = health["routes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["route"] == "r0")
        .unwrap();
    assert_eq!(
        r0["breaker"]["consecutive_failures"], 0,
        "not the route's fault: {health}"
    );
    assert_eq!(r0["state"], "healthy");
    let r = f.send_with(json!({}));
    assert_eq!(f.attempts(&r)[0].0, "r0", "still first: not demoted");

    let all = chat_fixture(
        &["status/400/content_filter", "status/400/content_filter"],
        fast_policy(),
    );
    let r = all.send_with(json!({}));
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "content_policy");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("content management policy"));
    assert_eq!((all.seen(0), all.seen(1)), (1, 1), "every route was asked");
}

// ---- 7: account failures skip ----------------------------------------------------------------------

#[test]
fn routes_on_a_cooling_account_are_skipped_by_other_models_and_tried_last_only_when_alone() {
    let s = Stack::from_env();
    let account = unique("acct");
    let on_account = |label: &str, scenario: &str| s.provider_on_account(label, scenario, &account);
    let (broken_l, twin_l, shared_l, alone_l, other_l, failing_l) = (
        unique("l"),
        unique("l"),
        unique("l"),
        unique("l"),
        unique("l"),
        unique("l"),
    );
    let broken = on_account(&broken_l, "status/401/invalid_key");
    let twin = on_account(&twin_l, "ok");
    let shared = on_account(&shared_l, "ok");
    let alone = on_account(&alone_l, "ok");
    let other = s.mock_provider(&other_l, "ok", false);
    let failing = s.mock_provider(&failing_l, "status/503", false);
    let policy = Some(fast_policy());
    // Within a request: after the account failure, the twin route on the same account is skipped.
    let m1 = s.model(
        vec![
            route("r0", &broken, "u", json!({})),
            route("r1", &twin, "u", json!({})),
            route("r2", &other, "u", json!({})),
        ],
        policy.clone(),
    );
    let key = s.new_key(10.0);
    let r = s.chat(&key, &chat_body(&m1, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let g = s.generation(&key, r.header("x-generation-id").unwrap());
    let tried: Vec<&str> = g["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["route"].as_str().unwrap())
        .collect();
    assert_eq!(tried, vec!["r0", "r2"], "the twin on the broken account was skipped");
    assert_eq!(s.mock_stats(&twin_l, "ok")["requests"], 0);

    // Another model: its route on the cooling account is left out even when the rest fail.
    let m2 = s.model(
        vec![
            route("r0", &failing, "u", json!({})),
            route("r1", &shared, "u", json!({})),
        ],
        policy.clone(),
    );
    let r = s.chat(&key, &chat_body(&m2, false));
    assert_eq!(r.status, 502, "{}", r.text());
    let g = s.generation(&key, r.header("x-generation-id").unwrap());
    assert_eq!(g["attempts"].as_array().unwrap().len(), 1, "{g}");
    assert_eq!(s.mock_stats(&shared_l, "ok")["requests"], 0, "skipped (SPEC §9)");

    // A model with nothing but such routes: tried, last, and the log says so.
    let m3 = s.model(vec![route("r0", &alone, "u", json!({}))], policy);
    let r = s.chat(&key, &chat_body(&m3, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let g = s.generation(&key, r.header("x-generation-id").unwrap());
    assert_eq!(g["attempts"][0]["last_resort"], true, "{g}");
    assert_eq!(s.mock_stats(&alone_l, "ok")["requests"], 1);
}

// ---- 8: provider.order does not override health ----------------------------------------------------

#[test]
fn provider_order_does_not_lift_a_demoted_route_ahead_of_healthy_ones() {
    let f = Fixture::build(
        Api::Chat,
        &["ok", "status/503"],
        &[],
        with(fast_policy(), json!({"demote_after": 1})),
        false,
    );
    let order = json!({"provider": {"order": ["r1"]}});
    let r = f.send_with(order.clone());
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r1", "upstream_5xx"), ("r0", "answered")]),
        "order obeyed while healthy"
    );
    let r = f.send_with(order);
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r0", "answered")]),
        "r1 is demoted: it goes after r0 despite `order`"
    );
    assert_eq!(f.seen(1), 1);
}

// ---- 9: the admin API takes the contract's names -------------------------------------------------

#[test]
fn a_key_takes_spend_limit_and_credits_names_it_the_same() {
    let s = Stack::from_env();
    let account = s.admin("POST", "/admin/accounts", Some(json!({})));
    let account_id = account.json()["id"].as_str().unwrap().to_string();
    let r = s.admin(
        "POST",
        "/admin/keys",
        Some(json!({"account_id": account_id, "spend_limit": 2.5})),
    );
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(r.json()["spend_limit"], 2.5);
    let key = r.json()["key"].as_str().unwrap().to_string();
    assert_eq!(s.credits(&key)["key"]["spend_limit"], 2.5);
}

// ---- 10: rules users feel, end to end with shrunk timings ------------------------------------------

/// The deadline the first route got, read from when it gave up: its attempt's duration.
fn first_attempt_ms(f: &Fixture, r: &Reply) -> u64 {
    let g = f.generation(r);
    assert_eq!(g["attempts"][0]["failure_class"], "timeout", "{g}");
    g["attempts"][0]["duration_ms"].as_u64().unwrap()
}

#[test]
fn reasoning_and_slow_routes_get_their_first_content_deadlines_and_the_longer_wins() {
    let policy = with(
        fast_policy(),
        json!({"stream_first_content_ms": 300, "reasoning_stream_first_content_ms": 900,
               "slow_route_stream_first_content_ms": 600, "last_route_min_ms": 3000}),
    );
    let slow = json!({"slow": true});
    for (reasoning, extra, at_least, below) in [
        (false, json!({}), 300, 590),
        (true, json!({}), 900, 1400),
        (false, slow.clone(), 600, 890),
        (true, slow, 900, 1400),
    ] {
        let f = Fixture::build(
            Api::Chat,
            &["hang", "ok"],
            &[extra.clone(), json!({})],
            policy.clone(),
            reasoning,
        );
        let r = f.send_with(json!({"stream": true}));
        assert_eq!(r.status, 200, "{}", r.text());
        let ms = first_attempt_ms(&f, &r);
        assert!(
            (at_least..below).contains(&ms),
            "reasoning={reasoning} {extra}: gave up after {ms} ms, expected {at_least}..{below}"
        );
    }
}

#[test]
fn the_non_stream_deadline_grows_with_max_tokens_up_to_its_cap() {
    let policy = with(
        fast_policy(),
        json!({"nonstream_base_ms": 300, "nonstream_per_20_tokens_ms": 100, "nonstream_cap_ms": 900,
               "last_route_min_ms": 3000}),
    );
    for (max_tokens, at_least, below) in [(40, 500, 790), (1000, 900, 1190)] {
        let f = Fixture::build(Api::Chat, &["hang", "ok"], &[], policy.clone(), false);
        let r = f.send_with(json!({"max_tokens": max_tokens}));
        assert_eq!(r.status, 200, "{}", r.text());
        let ms = first_attempt_ms(&f, &r);
        assert!(
            (at_least..below).contains(&ms),
            "max_tokens {max_tokens}: gave up after {ms} ms, expected {at_least}..{below} (300 + 100 per 20, capped at 900)"
        );
    }
}

#[test]
fn the_pre_content_budget_ends_the_attempts() {
    let policy = with(
        fast_policy(),
        json!({"stream_first_content_ms": 500, "last_route_min_ms": 500, "pre_content_budget_ms": 1200}),
    );
    let f = Fixture::build(Api::Chat, &["hang", "hang", "hang", "hang", "ok"], &[], policy, false);
    let started = Instant::now();
    let r = f.send_with(json!({"stream": true}));
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(f.seen(4), 0, "the budget ran out before the healthy route");
    assert!(f.seen(2) + f.seen(3) <= 1, "at most ~1.2 s of 500 ms attempts");
}

#[test]
fn max_attempts_limits_the_tries() {
    let f = chat_fixture(
        &["status/503", "status/503", "ok"],
        with(fast_policy(), json!({"max_attempts": 2})),
    );
    let r = f.send_with(json!({}));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!((f.seen(0), f.seen(1), f.seen(2)), (1, 1, 0));
}

#[test]
fn allow_fallbacks_of_the_account_and_of_the_platform_make_one_try() {
    // The platform (the model's policy) says no.
    let f = chat_fixture(
        &["status/503", "ok"],
        with(fast_policy(), json!({"allow_fallbacks": false})),
    );
    assert_eq!(f.send_with(json!({})).status, 502);
    assert_eq!(f.seen(1), 0);
    // The account says no (the key says nothing).
    let f = Fixture::build(Api::Chat, &["status/503", "ok"], &[], fast_policy(), false);
    let account =
        f.s.admin("POST", "/admin/accounts", Some(json!({"allow_fallbacks": false})));
    let account_id = account.json()["id"].as_str().unwrap().to_string();
    f.s.admin(
        "POST",
        &format!("/admin/accounts/{account_id}/credit"),
        Some(json!({"amount_usd": 1})),
    );
    let key =
        f.s.admin("POST", "/admin/keys", Some(json!({"account_id": account_id})))
            .json()["key"]
            .as_str()
            .unwrap()
            .to_string();
    let r = f.s.chat(&key, &chat_body(&f.model, false));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(f.seen(1), 0, "no fallback for this account");
    // The request itself may still allow it.
    let r = f.s.chat(
        &key,
        &with(
            chat_body(&f.model, false),
            json!({"provider": {"allow_fallbacks": true}}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
}

#[test]
fn max_price_and_sort_choose_the_routes() {
    let prices = [
        json!({"price": {"input_per_mtok": 5.0, "output_per_mtok": 20.0}}),
        json!({"price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}}),
        json!({"price": {"input_per_mtok": 0.5, "output_per_mtok": 1.0}}),
    ];
    let f = Fixture::build(Api::Chat, &["ok", "ok", "ok"], &prices, fast_policy(), false);
    let r = f.send_with(json!({"provider": {"max_price": {"completion": 1.5}}}));
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r2", "answered")]),
        "only the route within max_price"
    );
    let r = f.send_with(json!({"provider": {"sort": "price"}}));
    assert_eq!(f.attempts(&r), pairs(&[("r2", "answered")]), "cheapest first");
    let r = f.send_with(json!({"provider": {"max_price": {"prompt": 0.1}}}));
    assert_eq!(r.status, 400, "no route within max_price: {}", r.text());
    assert_eq!(r.json()["error"]["param"], "provider");
}

#[test]
fn sort_by_latency_puts_the_measured_fastest_first() {
    let f = chat_fixture(
        &["first-content-after/300", "ok"],
        with(fast_policy(), json!({"health_snapshot_ms": 200})),
    );
    for _ in 0..3 {
        // Measure both routes: the slow one by asking for it first.
        assert_eq!(
            f.send_with(json!({"stream": true, "provider": {"order": ["r0"]}}))
                .status,
            200
        );
        assert_eq!(
            f.send_with(json!({"stream": true, "provider": {"order": ["r1"]}}))
                .status,
            200
        );
    }
    // The stats reach the isolate through the health object's snapshot (refreshed every 200 ms
    // here): wait for them.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = f.send_with(json!({"stream": true, "provider": {"sort": "latency"}}));
        if f.attempts(&r)[0].0 == "r1" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sort: latency never put the fast route first"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn a_cooldown_doubles_but_never_beyond_its_cap() {
    let policy = with(
        fast_policy(),
        json!({"demote_after": 1, "cooldown_ms": 300, "cooldown_max_ms": 500}),
    );
    // The live probe of §8 alone: the route opts out of verification checks (SPEC §8a).
    let f = Fixture::build(
        Api::Chat,
        &["status/503", "ok"],
        &[json!({"verify": false})],
        policy,
        false,
    );
    let mut lengths = Vec::new();
    let mut last_demotion = 0;
    for _ in 0..4 {
        let r = f.send_with(json!({}));
        assert_eq!(r.status, 200);
        assert_eq!(
            f.attempts(&r)[0],
            ("r0".to_string(), "upstream_5xx".to_string()),
            "probed, failed"
        );
        // The failure reaches the health object just after the answer: wait for this demotion.
        let deadline = Instant::now() + Duration::from_secs(3);
        let breaker = loop {
            let h = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
            let r0 = h["routes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["route"] == "r0")
                .unwrap()
                .clone();
            let at = r0["breaker"]["demoted_at_ms"].as_u64().unwrap_or(0);
            if at > last_demotion {
                last_demotion = at;
                break r0["breaker"].clone();
            }
            assert!(
                Instant::now() < deadline,
                "the demotion never reached the health object: {h}"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        lengths.push(breaker["demoted_until_ms"].as_u64().unwrap() - last_demotion);
        // Wait out the cooldown so the next request probes r0 (and fails it again).
        std::thread::sleep(Duration::from_millis(650));
    }
    assert_eq!(lengths[0], 300, "{lengths:?}");
    assert!(lengths.iter().all(|l| *l <= 500), "capped: {lengths:?}");
    assert_eq!(*lengths.last().unwrap(), 500, "doubled up to the cap: {lengths:?}");
}

/// Events without content (empty deltas) count toward the cap; keep-alive comments do not
/// (SPEC §6, §18: tenants.rs `keep_alives_before_content_never_commit_a_route`).
#[test]
fn sixty_four_held_back_events_commit_the_route() {
    let f = Fixture::build(
        Api::Chat,
        &["empty-events/70/first-content-after/1200", "ok"],
        &[],
        fast_policy(),
        false,
    );
    let r = f.send_with(json!({"stream": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r0", "answered")]),
        "committed at the hold cap: no fallback at the 400 ms deadline"
    );
    assert_eq!(f.seen(1), 0);
    assert!(r.text().contains(r#""content":"""#), "the held events were released");
}
