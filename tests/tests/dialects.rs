//! The failover fault matrix for every client API (issue 10, SPEC §4–§7, §13): one table of
//! scenarios, each driven through Chat Completions, Anthropic Messages, OpenAI Responses and
//! Google Gemini, each
//! checked in its own dialect — what the client got, what the attempts log says, what the
//! upstreams saw. Deadlines are shrunk through the model's `policy`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{attempts_of, fast_policy, route, sse_events, unique, Api, Fixture, Reply, Stack, APIS};

/// What to say when an assertion fails.
fn context(f: &Fixture, stream: bool, r: &Reply) -> String {
    format!(
        "{:?} stream={stream} model={}: {} {}",
        f.api,
        f.model,
        r.status,
        r.text()
    )
}

/// The client got a whole, successful answer in its dialect (and nothing of a failed route).
fn assert_answer(api: Api, stream: bool, r: &Reply, ctx: &str) {
    assert_eq!(r.status, 200, "{ctx}");
    if !stream {
        let v = r.json();
        match api {
            Api::Chat => assert_eq!(v["object"], "chat.completion", "{ctx}"),
            Api::Messages => {
                assert_eq!(v["type"], "message", "{ctx}");
                assert!(!v["content"][0]["text"].as_str().unwrap().is_empty(), "{ctx}");
            }
            Api::Responses => {
                assert_eq!(
                    (v["object"].as_str(), v["status"].as_str()),
                    (Some("response"), Some("completed")),
                    "{ctx}"
                );
            }
            Api::Gemini => {
                let text = v["candidates"][0]["content"]["parts"][0]["text"].as_str();
                assert!(text.is_some_and(|t| !t.is_empty()), "{ctx}");
                assert_eq!(v["candidates"][0]["finishReason"], "STOP", "{ctx}");
            }
        }
        return;
    }
    let events = sse_events(&r.text());
    let named = |n: &str| events.iter().filter(|(e, _)| e.as_deref() == Some(n)).count();
    let last = events.last().expect("events");
    match api {
        Api::Chat => {
            assert_eq!(last.1, "[DONE]", "{ctx}");
            assert!(!r.text().contains("\"finish_reason\":\"error\""), "{ctx}");
            assert!(!r.text().contains("\"error\""), "{ctx}");
        }
        Api::Messages => {
            assert_eq!(last.0.as_deref(), Some("message_stop"), "{ctx}");
            assert_eq!(
                named("message_start"),
                1,
                "one message_start, the answering route's: {ctx}"
            );
            assert_eq!(named("error"), 0, "{ctx}");
        }
        Api::Responses => {
            assert_eq!(last.0.as_deref(), Some("response.completed"), "{ctx}");
            assert_eq!(
                named("response.created"),
                1,
                "one response.created, the answering route's: {ctx}"
            );
            assert_eq!(named("error") + named("response.failed"), 0, "{ctx}");
        }
        Api::Gemini => {
            let last: Value = serde_json::from_str(&last.1).unwrap();
            assert_eq!(
                last["candidates"][0]["finishReason"], "STOP",
                "the finish chunk ends it: {ctx}"
            );
            assert!(!r.text().contains("\"error\""), "{ctx}");
        }
    }
}

/// A committed stream ended badly, and said so in its dialect as its last event.
fn assert_broken_end(api: Api, r: &Reply, ctx: &str) {
    assert_eq!(r.status, 200, "committed first: {ctx}");
    let events = sse_events(&r.text());
    match api {
        Api::Chat => {
            assert_eq!(events.last().unwrap().1, "[DONE]", "{ctx}");
            let frame: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
            assert_eq!(frame["choices"][0]["finish_reason"], "error", "{ctx}");
        }
        Api::Messages => {
            let (name, data) = events.last().unwrap();
            assert_eq!(name.as_deref(), Some("error"), "{ctx}");
            let data: Value = serde_json::from_str(data).unwrap();
            assert_eq!(data["type"], "error", "{ctx}");
            assert!(data["error"]["message"].as_str().is_some(), "{ctx}");
            assert!(!r.text().contains("message_stop"), "no clean end after a break: {ctx}");
        }
        Api::Responses => {
            let (name, _) = events.last().unwrap();
            assert!(matches!(name.as_deref(), Some("response.failed" | "error")), "{ctx}");
            assert!(
                !r.text().contains("response.completed"),
                "no clean end after a break: {ctx}"
            );
        }
        Api::Gemini => {
            let data: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
            assert!(data["error"]["status"].is_string(), "a Gemini error chunk: {ctx}");
            assert!(!r.text().contains("finishReason"), "no clean end after a break: {ctx}");
        }
    }
}

/// An error response in the client's dialect with Switchyard's code.
fn assert_error(api: Api, r: &Reply, status: u16, code: &str, ctx: &str) {
    assert_eq!(r.status, status, "{ctx}");
    let v = r.json();
    if api == Api::Gemini {
        // Google's shape: the HTTP status as `code`, its status word, Switchyard's code in details.
        let word = match status {
            400 | 405 => "INVALID_ARGUMENT",
            401 => "UNAUTHENTICATED",
            402 => "FAILED_PRECONDITION",
            404 => "NOT_FOUND",
            429 => "RESOURCE_EXHAUSTED",
            502 | 503 => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        assert_eq!(
            (v["error"]["code"].as_u64(), v["error"]["status"].as_str()),
            (Some(u64::from(status)), Some(word)),
            "{ctx}"
        );
        assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{ctx}");
        let info = &v["error"]["details"][0];
        assert_eq!(info["reason"], code, "{ctx}");
        assert!(info["metadata"]["generation_id"].as_str().is_some(), "{ctx}");
        return;
    }
    assert_eq!(v["error"]["code"], code, "{ctx}");
    assert!(v["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{ctx}");
    assert!(v["generation_id"].as_str().is_some(), "{ctx}");
    let (openai, anthropic) = match status {
        400 => ("invalid_request_error", "invalid_request_error"),
        401 => ("authentication_error", "authentication_error"),
        402 => ("insufficient_quota", "billing_error"),
        404 => ("invalid_request_error", "not_found_error"),
        405 => ("invalid_request_error", "invalid_request_error"),
        503 => ("service_unavailable", "overloaded_error"),
        _ => ("api_error", "api_error"),
    };
    match api {
        Api::Messages => {
            assert_eq!(v["type"], "error", "{ctx}");
            assert_eq!(v["error"]["type"], anthropic, "{ctx}");
        }
        Api::Chat | Api::Responses => assert_eq!(v["error"]["type"], openai, "{ctx}"),
        Api::Gemini => unreachable!("returned above"),
    }
}

/// What a row of the table expects.
#[derive(Clone, Copy)]
enum Expect {
    /// Route 0 failed with this class, route 1 answered; each upstream saw one request.
    FellBack(&'static str),
    /// No fallback: the client got this status and code; route 1 was never asked.
    Refused(u16, &'static str, &'static str),
    /// Committed, then ended badly with the dialect's error ending; route 1 was never asked.
    Broken,
    /// Committed and answered; the attempt dropped this many malformed events.
    Answered { malformed: u64 },
}

/// One row: the routes' mock scenarios, stream or not, the policy tweak, what must happen.
struct Case {
    scenarios: &'static [&'static str],
    stream: bool,
    policy: Option<(&'static str, u64)>,
    expect: Expect,
}

fn run(case: &Case) {
    for api in APIS {
        let mut policy = fast_policy();
        if let Some((k, v)) = case.policy {
            policy[k] = json!(v);
        }
        let f = Fixture::build(api, case.scenarios, &[], policy, false);
        let r = f.send(case.stream);
        let ctx = context(&f, case.stream, &r);
        let g = f.generation(&r);
        assert_eq!(g["api"], api.name(), "the record names the API: {ctx}");
        match case.expect {
            Expect::FellBack(class) => {
                assert_answer(api, case.stream, &r, &ctx);
                assert_eq!(
                    attempts_of(&g),
                    vec![("r0".into(), class.into()), ("r1".into(), "answered".into())],
                    "{ctx}"
                );
                assert_eq!((f.seen(0), f.seen(1)), (1, 1), "{ctx}");
                assert_eq!(g["outcome"], "answered", "{ctx}");
            }
            Expect::Refused(status, code, class) => {
                assert_error(api, &r, status, code, &ctx);
                assert_eq!(attempts_of(&g), vec![("r0".into(), class.into())], "{ctx}");
                assert_eq!(f.seen(1), 0, "{ctx}");
                assert_eq!(g["total_cost"], 0.0, "{ctx}");
            }
            Expect::Broken => {
                assert_broken_end(api, &r, &ctx);
                assert_eq!(f.seen(1), 0, "never a splice from another route: {ctx}");
                assert_eq!(g["outcome"], "broken", "{ctx}");
                assert_eq!(g["error_code"], "stream_broken", "{ctx}");
            }
            Expect::Answered { malformed } => {
                assert_answer(api, case.stream, &r, &ctx);
                assert_eq!(g["outcome"], "answered", "{ctx}");
                assert_eq!(g["attempts"][0]["malformed_events"], malformed, "{ctx}");
                assert_eq!(f.seen(1), 0, "{ctx}");
            }
        }
    }
}

/// The table: one test per row, each run through every API.
macro_rules! matrix {
    ($($name:ident: [$($scenario:literal),+], $stream:literal, $policy:expr, $expect:expr;)+) => {
        $(
            #[test]
            fn $name() {
                run(&Case { scenarios: &[$($scenario),+], stream: $stream, policy: $policy, expect: $expect });
            }
        )+
    };
}

matrix! {
    // Before the first content: every class that falls back (SPEC §4), streamed and not.
    a_reset_connection_falls_back: ["reset", "ok"], true, None, Expect::FellBack("connect");
    a_reset_connection_falls_back_non_stream: ["reset", "ok"], false, None, Expect::FellBack("connect");
    a_5xx_falls_back: ["status/503", "ok"], true, None, Expect::FellBack("upstream_5xx");
    a_5xx_falls_back_non_stream: ["status/500", "ok"], false, None, Expect::FellBack("upstream_5xx");
    a_rate_limit_falls_back: ["status/429/rate_limit", "ok"], true, None, Expect::FellBack("rate_limited");
    an_overloaded_529_falls_back: ["status/529/overloaded", "ok"], false, None, Expect::FellBack("overloaded");
    a_broken_upstream_account_falls_back: ["status/401/invalid_key", "ok"], false, None, Expect::FellBack("account");
    a_missing_upstream_model_falls_back: ["status/404/model_not_found", "ok"], true, None, Expect::FellBack("model_unavailable");
    an_error_body_with_200_falls_back: ["error-body-200/rate_limit", "ok"], false, None, Expect::FellBack("rate_limited");
    a_500_that_mentions_load_is_a_5xx_not_overloaded: ["status/500/overloaded", "ok"], false, None, Expect::FellBack("upstream_5xx");
    an_empty_success_is_no_answer: ["chunks/0/0", "ok"], false, None, Expect::FellBack("bad_response");
    an_empty_stream_is_no_answer: ["chunks/0/0", "ok"], true, None, Expect::FellBack("bad_response");
    a_content_policy_refusal_falls_back: ["status/400/content_filter", "ok"], false, None, Expect::FellBack("content_policy");
    // The commit point (SPEC §6): errors, malformed events and silence before content.
    an_overloaded_error_event_before_content_falls_back: ["error-event-first/overloaded", "ok"], true, None, Expect::FellBack("overloaded");
    a_malformed_first_event_falls_back: ["malformed-event/0", "ok"], true, None, Expect::FellBack("bad_response");
    a_hanging_route_falls_back_at_its_deadline: ["hang", "ok"], true, None, Expect::FellBack("timeout");
    late_first_content_falls_back_at_the_deadline: ["first-content-after/1200", "ok"], true, None, Expect::FellBack("timeout");
    a_hanging_route_falls_back_non_stream: ["hang", "ok"], false, None, Expect::FellBack("timeout");
    // Client errors do not fall back (SPEC §4, §13).
    a_plain_400_is_refused_without_fallback: ["status/400/invalid", "ok"], false, None, Expect::Refused(400, "upstream_invalid_request", "invalid_request");
    // After commit (SPEC §7): never a silent close, never a splice.
    a_cut_after_content_ends_with_the_dialects_error: ["cut-after/2", "ok"], true, None, Expect::Broken;
    an_error_event_after_content_ends_the_stream: ["error-event-after/2", "ok"], true, None, Expect::Broken;
    a_stall_after_content_ends_at_the_idle_timeout: ["stall-after/2/5000", "ok"], true, None, Expect::Broken;
    a_stream_past_its_cap_ends_with_the_dialects_error: ["chunks/40/100", "ok"], true, Some(("stream_cap_ms", 800)), Expect::Broken;
    // Eight chunks: event 5 is content in every dialect (Gemini has no events before content).
    a_malformed_event_after_commit_is_dropped: ["chunks/8/0/malformed-event/5", "ok"], true, None, Expect::Answered { malformed: 1 };
    a_healthy_route_answers_non_stream: ["ok", "ok"], false, None, Expect::Answered { malformed: 0 };
}

#[test]
fn a_stream_that_ends_without_its_end_event_is_finalised_when_it_finished_else_broken() {
    for api in APIS {
        let f = Fixture::build(api, &["no-done", "ok"], &[], fast_policy(), false);
        let r = f.send(true);
        let ctx = context(&f, true, &r);
        let g = f.generation(&r);
        match api {
            // The answer finished (`finish_reason`, `message_delta.stop_reason`): the end marker
            // is added. Gemini has no end marker: its finish chunk is the end.
            Api::Chat | Api::Messages | Api::Gemini => {
                assert_answer(api, true, &r, &ctx);
                assert_eq!(g["outcome"], "answered", "{ctx}");
            }
            // `response.completed` is both the finish and the end: without it the answer is cut.
            Api::Responses => {
                assert_broken_end(api, &r, &ctx);
                assert_eq!(g["outcome"], "broken", "{ctx}");
            }
        }
        assert_eq!(f.seen(1), 0, "{ctx}");
    }
}

#[test]
fn usage_comes_from_the_upstream_in_every_dialect() {
    for api in APIS {
        for stream in [false, true] {
            let f = Fixture::build(api, &["chunks/7/0"], &[], fast_policy(), false);
            let r = f.send(stream);
            let ctx = context(&f, stream, &r);
            assert_answer(api, stream, &r, &ctx);
            let g = f.generation(&r);
            assert_eq!(g["estimated"], false, "{ctx}");
            assert_eq!(g["usage"]["output_tokens"], 7, "{ctx}");
            assert!(g["usage"]["input_tokens"].as_u64().unwrap() > 0, "{ctx}");
            assert!(g["total_cost"].as_f64().unwrap() > 0.0, "{ctx}");
        }
    }
}

#[test]
fn a_cut_anthropic_stream_keeps_the_reported_input_and_estimates_the_output() {
    let f = Fixture::build(Api::Messages, &["cut-after/2"], &[], fast_policy(), false);
    let r = f.send(true);
    let g = f.generation(&r);
    let ctx = context(&f, true, &r);
    assert_eq!(g["outcome"], "broken", "{ctx}");
    assert_eq!(g["estimated"], true, "{ctx}");
    let seen = f.s.mock_stats(&f.routes[0].0, &f.routes[0].1);
    let body_len = seen["last_request"]["body"].to_string().len() as u64;
    assert_eq!(
        g["usage"]["input_tokens"].as_u64().unwrap(),
        (body_len / 4).max(1),
        "message_start's input count (the mock's) is kept: {ctx}"
    );
}

#[test]
fn every_route_failing_is_a_502_in_the_clients_dialect() {
    for api in APIS {
        let f = Fixture::build(api, &["status/500", "status/502"], &[], fast_policy(), false);
        let r = f.send(false);
        let ctx = context(&f, false, &r);
        assert_error(api, &r, 502, "provider_error", &ctx);
        assert_eq!(
            r.json()["error"]["message"],
            format!(
                "Model {} is not available right now. Nothing was charged. Retry in a moment.",
                f.model
            ),
            "{ctx}"
        );
    }
}

#[test]
fn every_route_overloaded_is_a_503_with_retry_after_in_the_clients_dialect() {
    for api in APIS {
        let f = Fixture::build(
            api,
            &["status/529/overloaded", "status/429/rate_limit/retry-after/3"],
            &[],
            fast_policy(),
            false,
        );
        let r = f.send(true);
        let ctx = context(&f, true, &r);
        assert_error(api, &r, 503, "upstream_capacity_exhausted", &ctx);
        assert_eq!(r.header("retry-after"), Some("3"), "{ctx}");
        let v = r.json();
        match api {
            Api::Gemini => assert!(
                v["error"]["details"][0]["metadata"]["available_models"].is_string(),
                "{ctx}"
            ),
            _ => assert!(v["error"]["available_models"].is_array(), "{ctx}"),
        }
    }
}

#[test]
fn a_model_without_a_route_for_the_api_is_503_supply_not_configured() {
    // Only a model that forbids translation (SPEC §19) lacks a route for an API.
    let s = Stack::from_env();
    let label = unique("l");
    let provider = s.mock_provider(&label, "ok", false);
    let model = s.model(
        vec![route("r0", &provider, "u", json!({}))],
        Some(json!({"translate": false})),
    );
    let key = s.new_key(1.0);
    for api in [Api::Messages, Api::Responses] {
        let r = s.send(api, &key, &api.body(&model, false), &[]);
        assert_error(api, &r, 503, "supply_not_configured", &format!("{api:?}: {}", r.text()));
    }
    assert_eq!(s.mock_stats(&label, "ok")["requests"], 0, "no route was tried");
}

#[test]
fn client_errors_are_shaped_for_the_clients_dialect() {
    let s = Stack::from_env();
    let label = unique("l");
    let key = s.new_key(1.0);
    let broke = s.new_key(0.000_001); // 1 µ$: no route's hold fits
    for api in [Api::Messages, Api::Responses] {
        let provider = s.mock_provider_with_auth(&label, "ok", false, api.provider_auth());
        let model = s.model(vec![route("r0", &provider, "u", json!({"apis": [api.name()]}))], None);
        let ctx = |what: &str, r: &Reply| format!("{api:?} {what}: {} {}", r.status, r.text());
        let r = s.send(api, &key, &json!({"model": model}), &[]);
        assert_error(api, &r, 400, "invalid_request", &ctx("missing field", &r));
        let r = s.send(api, "sk-sy-not-a-real-key", &api.body(&model, false), &[]);
        assert_error(api, &r, 401, "invalid_api_key", &ctx("bad key", &r));
        let r = s.send(api, &broke, &api.body(&model, false), &[]);
        assert_error(api, &r, 402, "insufficient_balance", &ctx("no credit", &r));
        let r = s.send(api, &key, &api.body("no/such-model", false), &[]);
        assert_error(api, &r, 404, "model_not_found", &ctx("unknown model", &r));
        let r = s.request(
            "GET",
            &format!("{}{}", s.gateway, api.path()),
            &[("authorization", &format!("Bearer {key}"))],
            None,
        );
        assert_error(api, &r, 405, "method_not_allowed", &ctx("GET", &r));
    }
    assert_eq!(s.mock_stats(&label, "ok")["requests"], 0, "nothing reached an upstream");
}

#[test]
fn anthropic_routes_get_the_clients_version_and_beta_headers_and_the_key_as_x_api_key() {
    let s = Stack::from_env();
    let label = unique("l");
    let provider = s.mock_provider_with_auth(&label, "ok", true, "x-api-key");
    let model = s.model(
        vec![route("r0", &provider, "claude-up", json!({"apis": ["messages"]}))],
        None,
    );
    let key = s.new_key(1.0);
    let body = Api::Messages.body(&model, false);
    let r = s.send(
        Api::Messages,
        &key,
        &body,
        &[
            ("anthropic-version", "2023-06-01"),
            ("anthropic-beta", "tools-2024-04-04"),
        ],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = &s.mock_stats(&label, "ok")["last_request"];
    assert_eq!(seen["path"], format!("/{label}/ok/messages"));
    assert_eq!(seen["headers"]["x-api-key"], s.upstream_key);
    assert!(
        seen["headers"]["authorization"].is_null(),
        "the key goes as x-api-key only"
    );
    assert_eq!(seen["headers"]["anthropic-version"], "2023-06-01");
    assert_eq!(seen["headers"]["anthropic-beta"], "tools-2024-04-04");
    assert_eq!(seen["body"]["model"], "claude-up");
    let r = s.send(Api::Messages, &key, &body, &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let seen = &s.mock_stats(&label, "ok")["last_request"];
    assert_eq!(
        seen["headers"]["anthropic-version"], "2023-06-01",
        "the default version"
    );
    assert!(
        seen["headers"]["anthropic-beta"].is_null(),
        "no beta unless the client sent one"
    );
}

/// Gemini routes get the route's upstream model in the path and the upstream key as
/// `x-goog-api-key`; the client's key may come as `x-goog-api-key` or `?key=`; a stream needs
/// `alt=sse`, and an unknown method is a 404 — each in Google's error shape.
#[test]
fn gemini_routes_get_the_model_in_the_path_and_the_key_as_x_goog_api_key() {
    let s = Stack::from_env();
    let label = unique("l");
    let provider = s.mock_provider_with_auth(&label, "ok", true, "x-goog-api-key");
    let model = s.model(
        vec![route("r0", &provider, "gemini-up", json!({"apis": ["gemini"]}))],
        None,
    );
    let key = s.new_key(1.0);
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]});
    let bytes = body.to_string();
    let post = |path: &str, headers: &[(&str, &str)]| {
        let mut all = vec![("content-type", "application/json")];
        all.extend_from_slice(headers);
        s.request("POST", &format!("{}{path}", s.gateway), &all, Some(bytes.as_bytes()))
    };
    let r = post(&format!("/v1beta/models/{model}:generateContent?key={key}"), &[]);
    assert_eq!(r.status, 200, "the key as ?key=: {}", r.text());
    let seen = &s.mock_stats(&label, "ok")["last_request"];
    assert_eq!(seen["path"], format!("/{label}/ok/models/gemini-up:generateContent"));
    assert_eq!(seen["headers"]["x-goog-api-key"], s.upstream_key);
    assert!(
        seen["headers"]["authorization"].is_null(),
        "the key goes as x-goog-api-key only"
    );
    assert_eq!(
        seen["body"]["contents"], body["contents"],
        "the client's contents as sent"
    );
    assert_eq!(
        seen["body"]["generationConfig"]["maxOutputTokens"], 1024,
        "the held limit, forwarded"
    );
    let r = post(
        &format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
        &[("x-goog-api-key", &key)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        s.mock_stats(&label, "ok")["last_request"]["path"],
        format!("/{label}/ok/models/gemini-up:streamGenerateContent?alt=sse")
    );
    assert!(sse_events(&r.text()).len() >= 2, "{}", r.text());
    let r = post(
        &format!("/v1beta/models/{model}:streamGenerateContent"),
        &[("x-goog-api-key", &key)],
    );
    assert_error(Api::Gemini, &r, 400, "invalid_request", &r.text());
    let r = post(
        &format!("/v1beta/models/{model}:embedContent"),
        &[("x-goog-api-key", &key)],
    );
    assert_error(Api::Gemini, &r, 404, "not_found", &r.text());
    // Token counting (SPEC §21) is served: by the route's own `countTokens`.
    let r = post(
        &format!("/v1beta/models/{model}:countTokens"),
        &[("x-goog-api-key", &key)],
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.json()["totalTokens"].as_u64().is_some_and(|n| n > 0), "{}", r.text());
    assert_eq!(
        s.mock_stats(&label, "ok")["last_request"]["path"],
        format!("/{label}/ok/models/gemini-up:countTokens")
    );
    let r = post(&format!("/v1beta/models/{model}:generateContent"), &[]);
    assert_error(Api::Gemini, &r, 401, "invalid_api_key", &r.text());
    assert_eq!(
        s.mock_stats(&label, "ok")["requests"],
        3,
        "only the two good requests and the count reached it"
    );
}
