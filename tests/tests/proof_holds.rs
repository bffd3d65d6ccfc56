//! Issue 31, "served past the hold" and "wrong answers" (SPEC §17, §18a, §19): every spelling a
//! provider accepts counts toward the hold as its canonical form; a request whose answer is not
//! an answer (`background`) or whose cost is unpriced (`web_search_options`) is refused before any
//! route; 1-hour cache writes are charged at their price in a stream; a conversation with tool
//! history but no tools is answered by a Converse route; a translated Responses answer leaves no
//! id a later request could continue. Every test's name starts `spelled_`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{fast_policy, route, sse_events, unique, with, Api, Fixture, Stack};

/// Deadlines that do not matter to these tests: generous, so a loaded machine fails none of them.
fn relaxed() -> Value {
    with(
        fast_policy(),
        json!({"stream_first_content_ms": 10000, "nonstream_base_ms": 10000, "last_route_min_ms": 10000}),
    )
}

/// A Gemini body with `parts` in its one user turn and `fields` beside `contents`.
fn gemini(model: &str, parts: Value, fields: Value) -> Value {
    with(
        json!({"model": model, "contents": [{"role": "user", "parts": parts}]}),
        fields,
    )
}

#[test]
fn spelled_gemini_snake_case_is_held_as_its_camel_case() {
    // Input at $100 per million tokens: a body's few tokens hold well under a cent, the model's
    // 8192-token context window $0.82 — more than the key's $0.10.
    let f = Fixture::build(
        Api::Gemini,
        &["ok"],
        &[json!({"price": {"input_per_mtok": 100.0, "output_per_mtok": 1.0}})],
        relaxed(),
        false,
    );
    let key = f.s.new_key(0.10);
    let limit = json!({"generationConfig": {"maxOutputTokens": 16}});
    let plain = gemini(
        &f.model,
        json!([{"text": "What happens in this video?"}]),
        limit.clone(),
    );
    let r = f.s.send(Api::Gemini, &key, &plain, &[]);
    assert_eq!(r.status, 200, "a body-only request fits: {}", r.text());
    let video = |data: &str, mime: &str, uri: &str| json!([{"text": "What happens in this video?"}, {data: {mime: "video/mp4", uri: "gs://bucket/ten-hours.mp4"}}]);
    // The same request in each spelling Google takes: each names input the body does not carry.
    let cases = [
        ("fileData", video("fileData", "mimeType", "fileUri"), limit.clone()),
        ("file_data", video("file_data", "mime_type", "file_uri"), limit.clone()),
        (
            "cachedContent",
            json!([{"text": "Summarise"}]),
            with(limit.clone(), json!({"cachedContent": "cachedContents/long-video"})),
        ),
        (
            "cached_content",
            json!([{"text": "Summarise"}]),
            json!({"generation_config": {"max_output_tokens": 16}, "cached_content": "cachedContents/long-video"}),
        ),
    ];
    let mut seen = Vec::new();
    for (spelling, parts, fields) in cases {
        let r = f.s.send(Api::Gemini, &key, &gemini(&f.model, parts, fields), &[]);
        seen.push((spelling, r.status, r.json()["error"]["status"].clone()));
    }
    // Held at the context window: more than the key has (402, in Google's error shape).
    let refused = seen[0].2.clone();
    assert!(refused.is_string(), "{seen:?}");
    let want = |s: &'static str| (s, 402, refused.clone());
    assert_eq!(
        seen,
        vec![
            want("fileData"),
            want("file_data"),
            want("cachedContent"),
            want("cached_content")
        ],
        "each spelling is held at the context window, as its camelCase form"
    );
    assert_eq!(f.seen(0), 1, "no refused request reached the route");
    // The served request settles after its response; the refused ones left nothing held.
    f.s.settled_credits(&key, 20);
}

#[test]
fn spelled_background_responses_are_refused_before_any_route() {
    let f = Fixture::build(Api::Responses, &["ok", "ok"], &[json!({}), json!({})], relaxed(), false);
    let before = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
    let r = f.send_with(json!({"background": true}));
    assert_eq!(r.status, 400, "{}", r.text());
    let e = &r.json()["error"];
    assert_eq!(
        (e["type"].as_str(), e["param"].as_str()),
        (Some("invalid_request_error"), Some("background")),
        "{e}"
    );
    assert!(e["message"].as_str().unwrap().contains("background"), "{e}");
    assert_eq!((f.seen(0), f.seen(1)), (0, 0), "no route started a billed generation");
    let g = f.generation(&r);
    assert_eq!(g["total_cost"].as_f64(), Some(0.0), "{g}");
    assert_eq!(g["attempts"], json!([]), "{g}");
    let after = f.s.admin("GET", &format!("/admin/health/{}", f.model), None).json();
    assert_eq!(after["routes"], before["routes"], "route health untouched");
    let r = f.send_with(json!({"background": false}));
    assert_eq!(r.status, 200, "a foreground request is served: {}", r.text());
}

#[test]
fn spelled_one_hour_cache_writes_in_a_stream_are_charged_at_the_hour_price() {
    // Input 3, output 15, 5-minute writes 3.75, 1-hour writes 6 (µ$ per token). The mock writes
    // 200 tokens to the cache the request asks for (`ttl: 1h`): its message_start splits them,
    // its message_delta carries only the cumulative total, as Anthropic's do.
    let price = json!({"price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0, "cache_read_per_mtok": 0.3,
                                 "cache_write_per_mtok": 3.75, "cache_write_1h_per_mtok": 6.0}});
    let f = Fixture::build(Api::Messages, &["cache/0/200"], &[price], relaxed(), false);
    let system = json!([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]);
    for stream in [false, true] {
        let r = f.send_with(json!({"stream": stream, "system": system}));
        assert_eq!(r.status, 200, "stream={stream}: {}", r.text());
        if stream {
            let delta = sse_events(&r.text())
                .into_iter()
                .find(|(name, _)| name.as_deref() == Some("message_delta"))
                .map(|(_, d)| serde_json::from_str::<Value>(&d).unwrap())
                .unwrap();
            assert_eq!(
                delta["usage"]["cache_creation_input_tokens"], 200,
                "the total, unsplit: {delta}"
            );
            assert!(delta["usage"].get("cache_creation").is_none(), "{delta}");
        }
        let g = f.generation(&r);
        let u = &g["usage"];
        assert_eq!(
            (u["cache_write_1h_tokens"].as_i64(), u["cache_write_tokens"].as_i64()),
            (Some(200), Some(0)),
            "stream={stream}: every write went to the 1-hour cache: {u}"
        );
        let (input, output) = (
            u["input_tokens"].as_i64().unwrap(),
            u["output_tokens"].as_i64().unwrap(),
        );
        let want = (input - 200) * 3 + 200 * 6 + output * 15;
        let cost = (g["total_cost"].as_f64().unwrap() * 1e6).round() as i64;
        assert_eq!(cost, want, "stream={stream}: 1-hour writes at 6 µ$ each, not 3.75: {g}");
    }
}

#[test]
fn spelled_tool_history_without_tools_is_answered_by_a_converse_route() {
    // A model whose only route is Bedrock Converse (the fake refuses tool blocks without a
    // `toolConfig`, as Bedrock does): an agent's last turn replays its tool calls but offers no tools.
    let s = Stack::from_env();
    let label = unique("l");
    let provider = unique("p");
    let r = s.admin(
        "PUT",
        &format!("/admin/providers/{provider}"),
        Some(
            json!({"base_url": format!("{}/{label}/ok", s.mock), "kind": "bedrock", "region": "us-east-1",
                    "access_key_secret": "E2E_AWS_ACCESS_KEY_ID", "secret_key_secret": "E2E_AWS_SECRET_ACCESS_KEY"}),
        ),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let converse = route(
        "r0",
        &provider,
        "meta.llama3-1-8b-instruct-v1:0",
        json!({"apis": ["converse"]}),
    );
    let model = s.model(vec![converse], Some(relaxed()));
    let key = s.new_key(1.0);
    let history = json!([
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 degrees and sunny"},
        {"role": "user", "content": "Summarise that in one sentence."}
    ]);
    for stream in [false, true] {
        let r = s.chat(&key, &json!({"model": model, "stream": stream, "messages": history}));
        assert_eq!(
            r.status,
            200,
            "stream={stream}: answered, not the route's 400 relayed: {}",
            r.text()
        );
        let g = s.generation(&key, r.header("x-generation-id").unwrap());
        assert_eq!(
            (g["outcome"].as_str(), g["route"].as_str()),
            (Some("answered"), Some("r0")),
            "{g}"
        );
    }
    let stats = s.mock_stats(&label, "ok");
    let sent = &stats["last_request"]["body"];
    let declared: Vec<&str> = sent["toolConfig"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["toolSpec"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        declared,
        ["get_weather"],
        "the tools the history used are declared: {sent}"
    );
}

#[test]
fn spelled_a_translated_responses_answer_leaves_no_id_to_continue() {
    // A Responses client on a model whose route speaks Chat: the answer's `resp_…` id is the
    // gateway's own, not one any upstream keeps — continuing it gets SPEC §17's wording.
    let f = Fixture::build(Api::Chat, &["ok"], &[json!({})], relaxed(), false);
    for stream in [false, true] {
        let body = json!({"model": f.model, "stream": stream, "input": "Say hello"});
        let r = f.s.send(Api::Responses, &f.key, &body, &[]);
        assert_eq!(r.status, 200, "stream={stream}: {}", r.text());
        let id = if stream {
            sse_events(&r.text())
                .into_iter()
                .filter_map(|(_, d)| serde_json::from_str::<Value>(&d).ok())
                .find_map(|v| v.pointer("/response/id").and_then(Value::as_str).map(str::to_string))
                .unwrap()
        } else {
            r.json()["id"].as_str().unwrap().to_string()
        };
        assert!(id.starts_with("resp_"), "{id}");
        let g = f.generation(&r);
        assert_eq!(g["attempts"][0]["translated"], true, "{g}");
        let next = json!({"model": f.model, "input": "And again", "previous_response_id": id});
        let r = f.s.send(Api::Responses, &f.key, &next, &[]);
        assert_eq!(r.status, 400, "stream={stream}: {}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], "previous_response_id", "{e}");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains("names no response of this model"),
            "stream={stream}: SPEC §17's wording, not a route's inability: {e}"
        );
    }
    assert_eq!(f.seen(0), 2, "the continuations reached no route");
}

#[test]
fn spelled_web_search_options_is_refused_naming_the_field() {
    let f = Fixture::build(Api::Chat, &["ok"], &[json!({})], relaxed(), false);
    for options in [json!({}), json!({"search_context_size": "low"})] {
        let r = f.send_with(json!({"web_search_options": options}));
        assert_eq!(r.status, 400, "{}", r.text());
        let e = &r.json()["error"];
        assert_eq!(e["param"], "web_search_options", "{e}");
        assert!(e["message"].as_str().unwrap().contains("billed per use"), "{e}");
        assert_eq!(f.generation(&r)["total_cost"].as_f64(), Some(0.0));
    }
    assert_eq!(f.seen(0), 0, "never sent at an unknown cost");
    assert_eq!(
        f.send_with(json!({"web_search_options": null})).status,
        200,
        "null sets nothing"
    );
}
