//! A client that goes away after commit (SPEC §7): the upstream is read on for
//! `disconnect_grace_ms`, then aborted, and the generation records what was delivered.
//!
//! Before commit, "nothing more is tried for a client that left" relies on `request.signal`
//! (`enable_request_signal`), which workerd behind `wrangler dev`'s and Miniflare's entry proxy
//! never aborts (checked: a client gone after 150 ms still shows `aborted == false` at 2 s). That
//! rule is therefore proven in `crates/core/src/plan.rs` (`nothing_more_is_tried_after_the_client_left`).
//!
//! Nor does workerd there cancel a departed client's handler, which the deployed runtime does.
//! The abandonment drill (`x-switchyard-test-fault: abandon-<ms>`, honoured only under
//! `SWITCHYARD_TEST_FAULTS`) makes the handler stop waiting for its request, as a cancelled
//! handler would: the request must still finish — settle or release its hold, write its record —
//! because its work runs under `ctx.wait_until`, not in the handler.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::Duration;

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, Api, Stack};

fn model(s: &Stack, scenarios: &[&str], policy: Value) -> String {
    let (routes, _) = s.mock_routes(&scenarios.iter().map(|sc| (*sc, json!({}))).collect::<Vec<_>>());
    s.model(routes, Some(policy))
}

#[test]
fn after_a_disconnect_the_upstream_is_read_to_its_end_within_the_grace_window() {
    let s = Stack::from_env();
    let model = model(&s, &["chunks/20/100"], json!({"disconnect_grace_ms": 10000}));
    let key = s.new_key(1.0);
    let (gen, read) = s.chat_stream_then_leave(&key, &chat_body(&model, true), "Hello");
    assert!(read.contains("data: "));
    let g = wait_final(&s, &key, &gen, |g| g["delivered_output"].as_u64().unwrap_or(0) > 0);
    assert_eq!(g["outcome"], "answered", "{g}");
    assert_eq!(g["estimated"], false, "the upstream's own count");
    assert_eq!(g["usage"]["output_tokens"], 20);
    // Charged for the upstream's count at the route's price (1 µ$ in, 2 µ$ out per token).
    let c = wait_settled(&s, &key);
    let u = &g["usage"];
    let expected = u["input_tokens"].as_i64().unwrap() + 2 * u["output_tokens"].as_i64().unwrap();
    assert_eq!(c["charges_total_micros"], expected, "{c}");
}

#[test]
fn with_no_grace_the_upstream_is_aborted_when_the_client_leaves() {
    let s = Stack::from_env();
    let model = model(&s, &["chunks/30/100"], json!({"disconnect_grace_ms": 0}));
    let key = s.new_key(1.0);
    let (gen, _) = s.chat_stream_then_leave(&key, &chat_body(&model, true), "Hello");
    let g = wait_final(&s, &key, &gen, |g| g["outcome"] != "failed");
    assert_eq!(g["outcome"], "broken", "{g}");
    let delivered = g["delivered_output"].as_u64().unwrap();
    assert!(
        (1..30).contains(&delivered),
        "charged for what was received, not the whole answer: {delivered}"
    );
}

#[test]
fn an_answer_that_arrives_after_the_handler_is_gone_is_still_settled_and_recorded() {
    let s = Stack::from_env();
    let model = model(&s, &["first-content-after/700"], json!({"nonstream_base_ms": 5000}));
    let key = s.new_key(1.0);
    let r = s.send(
        Api::Chat,
        &key,
        &chat_body(&model, false),
        &[("x-switchyard-test-fault", "abandon-150")],
    );
    assert_eq!(r.status, 500, "the handler gave up before the answer: {}", r.text());
    let gen = r.header("x-generation-id").unwrap().to_string();
    let g = wait_final(&s, &key, &gen, |g| g["outcome"] == "answered");
    let c = wait_settled(&s, &key);
    let u = &g["usage"];
    let expected = u["input_tokens"].as_i64().unwrap() + 2 * u["output_tokens"].as_i64().unwrap();
    assert!(expected > 0, "{g}");
    assert_eq!(
        c["charges_total_micros"], expected,
        "charged once, what the upstream reported: {c}"
    );
}

#[test]
fn a_request_whose_handler_is_gone_still_fails_over_and_releases_its_hold() {
    let s = Stack::from_env();
    let model = model(
        &s,
        &["hang", "status/400/invalid"],
        json!({"nonstream_base_ms": 600, "nonstream_per_20_tokens_ms": 0}),
    );
    let key = s.new_key(1.0);
    let r = s.send(
        Api::Chat,
        &key,
        &chat_body(&model, false),
        &[("x-switchyard-test-fault", "abandon-100")],
    );
    assert_eq!(r.status, 500, "{}", r.text());
    let gen = r.header("x-generation-id").unwrap().to_string();
    let c = wait_settled(&s, &key);
    assert_eq!(c["charges_total_micros"], 0, "{c}");
    let g = wait_final(&s, &key, &gen, |g| g["outcome"] == "failed");
    let attempts: Vec<&str> = g["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["route"].as_str().unwrap())
        .collect();
    assert_eq!(attempts, ["r0", "r1"], "both routes tried after the handler left: {g}");
}

/// The key's credits once no hold is open.
fn wait_settled(s: &Stack, key: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let c = s.credits(key);
        if c["held_micros"] == 0 {
            return c;
        }
        assert!(std::time::Instant::now() < deadline, "hold never settled: {c}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wait_final(s: &Stack, key: &str, gen: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let g = s.generation(key, gen);
        if done(&g) {
            return g;
        }
        assert!(std::time::Instant::now() < deadline, "generation never finalised: {g}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
