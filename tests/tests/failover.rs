//! Failover before first content (issue 3, SPEC §4–§7), end to end: each test names the rule it
//! proves and checks both what the client got and what the upstream saw (`/_stats`).
//! Deadlines are shrunk through the model's `policy`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, fast_policy, pairs, route, unique, Api, Fixture, Reply, Stack};

/// The second route answered after the first failed with `class`; each upstream saw one request.
fn assert_fell_back(f: &Fixture, r: &Reply, class: &str) {
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.seen(0), 1, "the failing route was tried once");
    assert_eq!(f.seen(1), 1, "the next route answered");
    assert_eq!(f.attempts(r), pairs(&[("r0", class), ("r1", "answered")]));
}

/// Content of an SSE body: the `data:` payloads.
fn data_lines(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(str::to_string)
        .collect()
}

#[test]
fn falls_back_on_connect_failure() {
    let s = Stack::from_env();
    let dead = unique("p");
    let r = s.admin(
        "PUT",
        &format!("/admin/providers/{dead}"),
        Some(json!({"base_url": "http://127.0.0.1:9/v1", "auth": "bearer"})),
    );
    assert_eq!(r.status, 200);
    let label = unique("l");
    let ok = s.mock_provider(&label, "ok", false);
    let model = s.model(
        vec![route("r0", &dead, "u", json!({})), route("r1", &ok, "u", json!({}))],
        Some(fast_policy()),
    );
    let key = s.new_key(1.0);
    for stream in [false, true] {
        let r = s.chat(&key, &chat_body(&model, stream));
        assert_eq!(r.status, 200, "{}", r.text());
        let g = s.generation(&key, r.header("x-generation-id").unwrap());
        assert_eq!(g["attempts"][0]["failure_class"], "connect");
        assert_eq!(g["route"], "r1");
    }
    assert_eq!(s.mock_stats(&label, "ok")["requests"], 2);
}

#[test]
fn falls_back_on_connection_reset() {
    let f = Fixture::new(&["reset", "ok"]);
    let r = f.send(true);
    assert_fell_back(&f, &r, "connect");
}

macro_rules! status_falls_back {
    ($($name:ident: $scenario:expr => $class:expr;)*) => {$(
        #[test]
        fn $name() {
            let f = Fixture::new(&[$scenario, "ok"]);
            let r = f.send(false);
            assert_fell_back(&f, &r, $class);
        }
    )*};
}

status_falls_back! {
    falls_back_on_401_as_account: "status/401" => "account";
    falls_back_on_402_as_account: "status/402" => "account";
    falls_back_on_403_as_account: "status/403" => "account";
    falls_back_on_404_as_model_unavailable: "status/404" => "model_unavailable";
    falls_back_on_408: "status/408" => "upstream_5xx";
    falls_back_on_409: "status/409" => "upstream_5xx";
    falls_back_on_425: "status/425" => "upstream_5xx";
    falls_back_on_429_as_rate_limited: "status/429/rate_limit" => "rate_limited";
    falls_back_on_429_overloaded_as_overloaded: "status/429/overloaded" => "overloaded";
    falls_back_on_500: "status/500" => "upstream_5xx";
    falls_back_on_502: "status/502" => "upstream_5xx";
    falls_back_on_503: "status/503" => "upstream_5xx";
    falls_back_on_504: "status/504" => "upstream_5xx";
    falls_back_on_400_with_a_credit_body_as_account: "status/400/credit" => "account";
    falls_back_on_200_with_an_error_body: "error-body-200" => "bad_response";
}

#[test]
fn falls_back_when_the_first_event_is_an_error() {
    let f = Fixture::new(&["error-event-first", "ok"]);
    let r = f.send(true);
    assert_fell_back(&f, &r, "bad_response");
    assert!(
        !r.text().contains("error"),
        "nothing of the failed route reaches the client: {}",
        r.text()
    );
}

#[test]
fn falls_back_on_a_malformed_first_event() {
    let f = Fixture::new(&["malformed-event/0", "ok"]);
    let r = f.send(true);
    assert_fell_back(&f, &r, "bad_response");
    assert!(!r.text().contains("{not json"));
}

#[test]
fn falls_back_when_a_route_hangs_past_the_deadline() {
    let f = Fixture::new(&["hang", "ok"]);
    let r = f.send(true);
    assert_fell_back(&f, &r, "timeout");
    let g = f.generation(&r);
    let waited = g["attempts"][0]["duration_ms"].as_u64().unwrap();
    assert!(
        (300..1400).contains(&waited),
        "the hanging route was cut at its 400 ms deadline, not the last-route one: {waited} ms"
    );
}

#[test]
fn falls_back_when_first_content_is_late_though_headers_came_at_once() {
    let f = Fixture::new(&["first-content-after/3000", "ok"]);
    let r = f.send(true);
    assert_fell_back(&f, &r, "timeout");
    assert!(
        !r.text().contains("keep-alive"),
        "held-back events of the failed route are discarded"
    );
}

#[test]
fn does_not_fall_back_on_a_plain_400() {
    let f = Fixture::new(&["status/400/invalid", "ok"]);
    let r = f.send(false);
    assert_eq!(r.status, 400, "{}", r.text());
    let v = r.json();
    assert_eq!(v["error"]["code"], "upstream_invalid_request");
    assert!(v["error"]["message"].as_str().unwrap().contains("temperature"));
    assert!(v["generation_id"].as_str().is_some());
    assert_eq!(f.seen(0), 1, "the upstream saw exactly one request");
    assert_eq!(f.seen(1), 0, "no fallback");
    assert_eq!(f.attempts(&r), pairs(&[("r0", "invalid_request")]));
}

#[test]
fn context_length_falls_back_only_to_a_larger_window() {
    let f = Fixture::build(
        Api::Chat,
        &["status/400/context_length", "ok", "ok"],
        &[
            json!({"context_window": 8192}),
            json!({"context_window": 8192}),
            json!({"context_window": 32768}),
        ],
        fast_policy(),
        false,
    );
    let r = f.send(false);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        (f.seen(0), f.seen(1), f.seen(2)),
        (1, 0, 1),
        "the same-size window is skipped"
    );
    assert_eq!(f.attempts(&r), pairs(&[("r0", "context_length"), ("r2", "answered")]));
}

#[test]
fn context_length_with_nowhere_to_go_is_a_400_with_the_models_message() {
    let f = Fixture::build(
        Api::Chat,
        &["status/400/context_length", "ok"],
        &[json!({"context_window": 8192}), json!({"context_window": 4096})],
        fast_policy(),
        false,
    );
    let r = f.send(false);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "upstream_invalid_request");
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("context length"));
    assert_eq!(f.seen(1), 0);
}

#[test]
fn unsupported_param_falls_back_only_to_routes_not_listing_it() {
    let f = Fixture::build(
        Api::Chat,
        &["status/400/unsupported_param", "ok", "ok"],
        &[json!({}), json!({"unsupported_params": ["logprobs"]}), json!({})],
        fast_policy(),
        false,
    );
    let r = f.send_with(json!({"logprobs": true}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((f.seen(0), f.seen(1), f.seen(2)), (1, 0, 1));
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r0", "unsupported_param"), ("r2", "answered")])
    );
}

#[test]
fn allow_fallbacks_false_makes_one_try() {
    let f = Fixture::new(&["status/503", "ok"]);
    let r = f.send_with(json!({"provider": {"allow_fallbacks": false}}));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!((f.seen(0), f.seen(1)), (1, 0));
    // The key's setting applies when the request says nothing.
    let account = f.s.admin("POST", "/admin/accounts", Some(json!({}))).json();
    let id = account["id"].as_str().unwrap();
    f.s.admin(
        "POST",
        &format!("/admin/accounts/{id}/credit"),
        Some(json!({"amount_usd": 1})),
    );
    let key =
        f.s.admin(
            "POST",
            "/admin/keys",
            Some(json!({"account_id": id, "allow_fallbacks": false})),
        )
        .json();
    let r = f.s.chat(key["key"].as_str().unwrap(), &chat_body(&f.model, false));
    assert_eq!(r.status, 502);
    assert_eq!((f.seen(0), f.seen(1)), (2, 0));
    // …and the request overrides the key.
    let r = f.s.chat(key["key"].as_str().unwrap(), &{
        let mut b = chat_body(&f.model, false);
        b["provider"] = json!({"allow_fallbacks": true});
        b
    });
    assert_eq!(r.status, 200);
    assert_eq!((f.seen(0), f.seen(1)), (3, 1));
}

#[test]
fn provider_only_ignore_and_order_are_obeyed() {
    let f = Fixture::new(&["ok", "ok", "ok"]);
    let r = f.send_with(json!({"provider": {"only": ["r2"]}}));
    assert_eq!(r.status, 200);
    assert_eq!((f.seen(0), f.seen(1), f.seen(2)), (0, 0, 1));
    let r = f.send_with(json!({"provider": {"ignore": ["r0"]}}));
    assert_eq!(r.status, 200);
    assert_eq!((f.seen(0), f.seen(1), f.seen(2)), (0, 1, 1));
    let r = f.send_with(json!({"provider": {"order": ["r2", "r1"]}}));
    assert_eq!(r.status, 200);
    assert_eq!((f.seen(0), f.seen(1), f.seen(2)), (0, 1, 2));
    let r = f.send_with(json!({"provider": {"only": ["nobody"]}}));
    assert_eq!(r.status, 400, "a filter that leaves no route is the client's error");
    let r = f.send_with(json!({"models": [f.model.clone(), "other/model"]}));
    assert_eq!(r.status, 400, "models with more than one entry");
}

#[test]
fn filters_apply_to_every_attempt() {
    let f = Fixture::new(&["status/503", "status/503", "ok"]);
    let r = f.send_with(json!({"provider": {"ignore": ["r2"]}}));
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(
        (f.seen(0), f.seen(1), f.seen(2)),
        (1, 1, 0),
        "a failover never reaches an ignored route"
    );
}

#[test]
fn a_slow_route_gets_one_more_try() {
    // r0 answers after 900 ms: past its 400 ms deadline, within the 1.5 s of the one more try.
    let f = Fixture::new(&["first-content-after/900", "status/500"]);
    let r = f.send(true);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!((f.seen(0), f.seen(1)), (2, 1));
    assert_eq!(
        f.attempts(&r),
        pairs(&[("r0", "timeout"), ("r1", "upstream_5xx"), ("r0", "answered")])
    );
    assert_eq!(f.generation(&r)["attempts"][2]["extra_try"], true);
}

#[test]
fn the_last_route_gets_the_longer_deadline() {
    // r1 answers after 900 ms: too late for the 400 ms deadline, in time for the last route's 1.5 s.
    let f = Fixture::new(&["hang", "first-content-after/900"]);
    let r = f.send(true);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(f.attempts(&r), pairs(&[("r0", "timeout"), ("r1", "answered")]));
    assert_eq!(f.seen(1), 1, "answered on its first try, no extra try needed");
}

#[test]
fn every_route_failing_is_a_502_with_the_exact_message_and_a_fetchable_generation() {
    let f = Fixture::new(&["status/500", "status/502"]);
    let r = f.send(false);
    assert_eq!(r.status, 502);
    let v = r.json();
    assert_eq!(v["error"]["code"], "provider_error");
    assert_eq!(
        v["error"]["message"],
        format!(
            "Model {} is not available right now. Nothing was charged. Retry in a moment.",
            f.model
        )
    );
    let gen = v["generation_id"].as_str().unwrap();
    assert_eq!(Some(gen), r.header("x-generation-id"));
    let g = f.s.generation(&f.key, gen);
    assert_eq!(g["outcome"], "failed");
    assert_eq!(g["total_cost"], 0.0);
    assert_eq!(f.attempts(&r), pairs(&[("r0", "upstream_5xx"), ("r1", "upstream_5xx")]));
    // Another account cannot read it.
    let other = f.s.new_key(1.0);
    let auth = format!("Bearer {other}");
    let r = f.s.request(
        "GET",
        &format!("{}/v1/generation?id={gen}", f.s.gateway),
        &[("authorization", &auth)],
        None,
    );
    assert_eq!(r.status, 404);
}

#[test]
fn every_route_overloaded_is_a_503_with_available_models_and_retry_after() {
    let f = Fixture::new(&["status/503/overloaded/retry-after/7", "status/429/overloaded"]);
    let r = f.send(false);
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.header("retry-after"), Some("7"));
    let v = r.json();
    assert_eq!(v["error"]["code"], "upstream_capacity_exhausted");
    assert!(v["error"]["available_models"].is_array());
    assert!(v["generation_id"].is_string());
}

#[test]
fn non_stream_fails_over() {
    let f = Fixture::new(&["status/503", "ok"]);
    let r = f.send(false);
    assert_fell_back(&f, &r, "upstream_5xx");
    assert_eq!(r.json()["object"], "chat.completion");
    assert_eq!(r.json()["model"], "up1", "the answer is the second route's");
}

#[test]
fn a_stream_cut_after_content_ends_with_an_error_frame_then_done_and_no_usage_chunk() {
    let f = Fixture::new(&["cut-after/2", "ok"]);
    let r = f.send_with(json!({"stream": true, "stream_options": {"include_usage": true}}));
    assert_eq!(r.status, 200, "committed before the cut");
    let data = data_lines(&r.text());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{}", r.text());
    let frame: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(frame["choices"][0]["finish_reason"], "error");
    assert_eq!(frame["error"]["code"], 502);
    assert_eq!(frame["error"]["metadata"]["error_type"], "provider_unavailable");
    assert!(!r.text().contains("\"usage\""), "no usage chunk after a cut");
    assert_eq!(f.seen(1), 0, "never a splice from another route");
    let g = f.generation(&r);
    assert_eq!(g["outcome"], "broken");
    assert_eq!(g["estimated"], true, "no usage came: the delivered output is estimated");
    assert!(g["delivered_output"].as_u64().unwrap() >= 1);
}

#[test]
fn a_stalled_stream_ends_with_an_error_frame_after_the_idle_timeout() {
    let f = Fixture::new(&["stall-after/2/5000", "ok"]);
    let started = std::time::Instant::now();
    let r = f.send(true);
    assert!(
        started.elapsed() < std::time::Duration::from_millis(4500),
        "ended by the 700 ms idle timeout, not the upstream"
    );
    let data = data_lines(&r.text());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(
        data[data.len() - 2].contains("\"finish_reason\":\"error\""),
        "{}",
        r.text()
    );
    assert_eq!(f.generation(&r)["outcome"], "broken");
}

#[test]
fn a_finished_stream_without_done_is_finalised() {
    let f = Fixture::new(&["no-done", "ok"]);
    let r = f.send(true);
    assert_eq!(r.status, 200);
    let data = data_lines(&r.text());
    assert_eq!(
        data.last().map(String::as_str),
        Some("[DONE]"),
        "[DONE] added: {}",
        r.text()
    );
    assert!(!r.text().contains("\"finish_reason\":\"error\""));
    assert_eq!(f.generation(&r)["outcome"], "answered");
}

#[test]
fn a_malformed_event_after_commit_is_dropped_and_the_stream_goes_on() {
    let f = Fixture::new(&["malformed-event/3", "ok"]);
    let r = f.send(true);
    assert_eq!(r.status, 200);
    let text = r.text();
    assert!(!text.contains("{not json"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"));
    assert!(!text.contains("\"finish_reason\":\"error\""));
    let g = f.generation(&r);
    assert_eq!(g["outcome"], "answered");
    assert_eq!(g["attempts"][0]["malformed_events"], 1, "counted on the attempt");
}

#[test]
fn an_error_event_after_content_ends_with_an_error_frame_then_done() {
    let f = Fixture::new(&["error-event-after/2", "ok"]);
    let r = f.send(true);
    assert_eq!(r.status, 200);
    let data = data_lines(&r.text());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"), "{}", r.text());
    let frame: Value = serde_json::from_str(&data[data.len() - 2]).unwrap();
    assert_eq!(frame["choices"][0]["finish_reason"], "error");
    assert!(
        frame["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server had an error"),
        "{frame}"
    );
    assert_eq!(f.seen(1), 0, "never a splice from another route");
    assert_eq!(f.generation(&r)["outcome"], "broken");
}

#[test]
fn a_stream_longer_than_the_cap_ends_with_an_error_frame() {
    let mut policy = fast_policy();
    policy["stream_cap_ms"] = json!(800);
    let f = Fixture::build(Api::Chat, &["chunks/40/100"], &[], policy, false);
    let r = f.send(true);
    let data = data_lines(&r.text());
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    assert!(data[data.len() - 2].contains("maximum duration"), "{}", r.text());
    let g = f.generation(&r);
    assert_eq!(g["outcome"], "broken");
    assert!(
        g["delivered_output"].as_u64().unwrap() < 40,
        "cut at the cap, charged for what was delivered"
    );
}

#[test]
fn usage_is_taken_from_the_upstream_and_the_chunk_passed_only_when_asked() {
    let f = Fixture::new(&["ok"]);
    let r = f.send(true);
    assert!(!r.text().contains("\"usage\""), "not asked: no usage chunk");
    let g = f.generation(&r);
    assert_eq!(g["estimated"], false, "usage was requested from the upstream");
    assert_eq!(g["usage"]["output_tokens"], 5);
    let r = f.send_with(json!({"stream": true, "stream_options": {"include_usage": true}}));
    assert!(r.text().contains("\"usage\""), "asked: the usage chunk is passed");
}

#[test]
fn the_attempts_log_lists_every_try_with_its_class() {
    let f = Fixture::new(&["status/500", "status/429/rate_limit", "error-body-200", "ok"]);
    let r = f.send(false);
    assert_eq!(r.status, 200);
    assert_eq!(
        f.attempts(&r),
        pairs(&[
            ("r0", "upstream_5xx"),
            ("r1", "rate_limited"),
            ("r2", "bad_response"),
            ("r3", "answered")
        ])
    );
    let g = f.generation(&r);
    assert_eq!(g["route"], "r3");
    assert_eq!(g["attempts"][0]["http_status"], 500);
    assert_eq!(g["attempts"][0]["cost"], 0.0, "failed attempts cost nothing");
    assert!(g["attempts"][3]["cost"].as_f64().unwrap() > 0.0);
}
