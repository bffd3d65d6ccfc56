//! Charged for what the upstream billed (SPEC §17): prompt caching priced as the provider prices
//! it in every dialect, a hold that bounds input the body does not carry, no service at an
//! unknown cost, and reported usage the request cannot have caused cut and flagged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use serde_json::{json, Value};
use switchyard_e2e::{sse_events, Api, Fixture, Stack, APIS};

/// Deadlines that do not matter to these tests: generous, so a loaded machine fails none of them.
fn relaxed() -> Value {
    switchyard_e2e::with(
        switchyard_e2e::fast_policy(),
        json!({"stream_first_content_ms": 10000, "nonstream_base_ms": 10000, "last_route_min_ms": 10000}),
    )
}

/// Input 3, output 15, cache reads 0.3, cache writes 3.75 (USD per million tokens = µ$ per token).
fn cache_prices() -> Value {
    json!({"price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0,
                     "cache_read_per_mtok": 0.3, "cache_write_per_mtok": 3.75}})
}

/// The ledger's charges for the key's account, once no hold is open.
fn settled_charges(s: &Stack, key: &str) -> i64 {
    let c = s.settled_credits(key, 20);
    -(c["balance_micros"].as_i64().unwrap() - 10_000_000)
}

fn tokens(u: &Value, field: &str) -> i64 {
    u[field].as_i64().unwrap_or_else(|| panic!("usage has no {field}: {u}"))
}

#[test]
fn prompt_caching_is_charged_at_its_own_prices_in_every_dialect() {
    for api in APIS {
        // The mock reports 700 cache-read and 200 cache-write tokens beside the uncached prompt,
        // each dialect in its own fields (Anthropic: input_tokens uncached only).
        let f = Fixture::build(api, &["cache/700/200"], &[cache_prices()], relaxed(), false);
        let mut charged = 0;
        for stream in [false, true] {
            let r = f.send(stream);
            assert_eq!(r.status, 200, "{api:?} stream={stream}: {}", r.text());
            let g = f.generation(&r);
            let u = &g["usage"];
            let input = tokens(u, "input_tokens");
            let (read, write) = (tokens(u, "cache_read_tokens"), tokens(u, "cache_write_tokens"));
            assert_eq!(read, 700, "{api:?}: cache reads are part of the input: {u}");
            // Anthropic reports its writes apart; OpenAI and Google bill them as plain input.
            let want_write = if api == Api::Messages { 200 } else { 0 };
            assert_eq!(write, want_write, "{api:?}: {u}");
            assert!(input > 900, "{api:?}: every input token counts, cached or not: {u}");
            assert_eq!(g["estimated"], false);
            assert_eq!(u["clamped"], false);
            let uncached = input - read - write;
            let output = tokens(u, "output_tokens");
            let want = ((uncached * 3 * 1000) + (read * 300) + (write * 3750) + (output * 15 * 1000)) / 1000;
            let cost = (g["total_cost"].as_f64().unwrap() * 1e6).round() as i64;
            assert_eq!(
                cost, want,
                "{api:?} stream={stream}: uncached, reads, writes, output each at their price"
            );
            charged += cost;
            // The client's own usage shows the same cost (chat, messages, responses carry `cost`).
            if api != Api::Gemini {
                let shown = if stream {
                    sse_events(&r.text())
                        .iter()
                        .filter_map(|(_, d)| serde_json::from_str::<Value>(d).ok())
                        .find_map(|v| {
                            v.get("usage")
                                .or_else(|| v.pointer("/response/usage"))
                                .and_then(|u| u.get("cost"))
                                .and_then(Value::as_f64)
                        })
                } else {
                    r.json()["usage"]["cost"].as_f64()
                };
                if let Some(shown) = shown {
                    assert_eq!(
                        (shown * 1e6).round() as i64,
                        cost,
                        "{api:?} stream={stream}: usage.cost = the charge"
                    );
                } else {
                    assert!(
                        stream && api == Api::Chat,
                        "{api:?} stream={stream}: no usage.cost shown"
                    );
                }
            }
        }
        assert_eq!(
            settled_charges(&f.s, &f.key),
            charged,
            "{api:?}: the ledger charged what the records say"
        );
    }
}

#[test]
fn input_the_body_only_names_is_held_at_the_context_window() {
    // Input at $100 per million tokens: a body's ~60 tokens hold well under a cent, the model's
    // 8192-token context window $0.82 — more than this key's $0.10.
    let f = Fixture::build(
        Api::Chat,
        &["ok"],
        &[json!({"price": {"input_per_mtok": 100.0, "output_per_mtok": 1.0}})],
        relaxed(),
        false,
    );
    let key = f.s.new_key(0.10);
    let plain = json!({"model": f.model, "max_tokens": 16,
                       "messages": [{"role": "user", "content": [{"type": "text", "text": "What is in https://example.com/cat.png?"}]}]});
    let r = f.s.chat(&key, &plain);
    assert_eq!(r.status, 200, "a body-only request fits: {}", r.text());
    let remote = json!({"model": f.model, "max_tokens": 16,
                        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                                                  {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]});
    let r = f.s.chat(&key, &remote);
    assert_eq!(
        r.status,
        402,
        "a remote image's tokens are not in the body: held at the context window: {}",
        r.text()
    );
    assert_eq!(f.seen(0), 1, "the refused request never reached the route");
}

#[test]
fn a_tool_billed_per_use_is_refused_naming_the_field() {
    for (api, tools) in [
        (
            Api::Responses,
            json!([{"type": "function", "name": "f", "parameters": {}}, {"type": "web_search"}]),
        ),
        (
            Api::Messages,
            json!([{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]),
        ),
        (Api::Gemini, json!([{"googleSearch": {}}])),
    ] {
        let f = Fixture::build(api, &["ok"], &[json!({})], relaxed(), false);
        let r = f.send_with(json!({"tools": tools}));
        assert_eq!(r.status, 400, "{api:?}: {}", r.text());
        let body = r.text();
        let want = if api == Api::Gemini {
            "tools[0]"
        } else if api == Api::Responses {
            "tools[1]"
        } else {
            "tools[0]"
        };
        assert!(body.contains(want), "{api:?}: the error names the field: {body}");
        assert_eq!(f.seen(0), 0, "{api:?}: never sent at an unknown cost");
        let g = f.generation(&r);
        assert_eq!(g["total_cost"].as_f64(), Some(0.0), "{api:?}: nothing charged");
    }
}

#[test]
fn usage_the_request_cannot_have_caused_is_cut_and_flagged() {
    // The mock reports one output token per content event whatever the limit: 40 events against
    // a limit of 8 is output the request could not have caused.
    for stream in [false, true] {
        let f = Fixture::build(Api::Chat, &["chunks/40/0"], &[json!({})], relaxed(), false);
        let r = f.send_with(json!({"stream": stream, "max_tokens": 8}));
        assert_eq!(r.status, 200, "{}", r.text());
        let g = f.generation(&r);
        assert_eq!(
            g["usage"]["output_tokens"], 8,
            "stream={stream}: cut to the forwarded limit: {g}"
        );
        assert_eq!(g["usage"]["clamped"], true, "stream={stream}: and flagged");
        let normal = f.send_with(json!({"stream": stream, "max_tokens": 100}));
        let g = f.generation(&normal);
        assert_eq!(
            (g["usage"]["output_tokens"].as_i64(), g["usage"]["clamped"].as_bool()),
            (Some(40), Some(false))
        );
    }
}

#[test]
fn a_request_continuing_a_stored_response_goes_only_to_the_route_that_holds_it() {
    // SPEC §17: `previous_response_id` names state one upstream keeps. r0 fails requests that
    // carry `first`, so the first answer comes from r1; r1 then fails every second request.
    let f = Fixture::build(
        Api::Responses,
        &["reject-field/first/500", "flaky/2/lenient"],
        &[],
        relaxed(),
        false,
    );
    let unknown = f.send_with(json!({"previous_response_id": "resp_never_seen"}));
    assert_eq!(unknown.status, 400, "{}", unknown.text());
    assert!(unknown.text().contains("previous_response_id"), "{}", unknown.text());
    assert_eq!((f.seen(0), f.seen(1)), (0, 0), "an unknown id reaches no route");
    let first = f.send_with(json!({"first": true}));
    assert_eq!(first.status, 200, "{}", first.text());
    assert_eq!(f.generation(&first)["route"], "r1");
    let id = first.json()["id"].as_str().unwrap().to_string();
    // r1 fails this one: no fallback to r0, which cannot know the conversation.
    let r = f.send_with(json!({"previous_response_id": id}));
    assert_eq!(r.status, 503, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], "upstream_state_unavailable", "{}", r.text());
    assert_eq!(f.attempts(&r), switchyard_e2e::pairs(&[("r1", "upstream_5xx")]));
    assert_eq!(f.generation(&r)["total_cost"].as_f64(), Some(0.0), "nothing charged");
    assert_eq!(f.seen(0), 1, "r0 saw only the first request");
    let r = f.send_with(json!({"previous_response_id": id}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        f.generation(&r)["route"],
        "r1",
        "the conversation goes on where it is kept"
    );
}

#[test]
fn a_stream_of_two_choices_is_whole_only_when_both_finished() {
    // SPEC §18: with `n` = 2 one choice's finish reason is not the end of the answer. The mock
    // answers one choice and closes without `[DONE]`: for `n` = 1 that is a finished answer (the
    // sentinel is supplied), for `n` = 2 it is a broken stream, ended with the error frame.
    for (n, outcome) in [(1, "answered"), (2, "broken")] {
        let f = Fixture::build(Api::Chat, &["no-done"], &[], relaxed(), false);
        let r = f.send_with(json!({"stream": true, "n": n}));
        assert_eq!(r.status, 200, "{}", r.text());
        let g = f.generation(&r);
        assert_eq!(g["outcome"], outcome, "n = {n}: {g}");
        let text = r.text();
        assert_eq!(text.contains(r#""finish_reason":"error""#), n == 2, "n = {n}: {text}");
    }
}

/// SPEC §18 output is what the model generated: a streamed tool call whose upstream never reports
/// usage is estimated from its name and arguments — the characters the model produced — not from
/// the JSON of the deltas that carry them (10–20 times more).
#[test]
fn a_tool_call_without_usage_is_estimated_from_its_name_and_arguments() {
    let f = Fixture::build(Api::Chat, &["tool-call/no-usage"], &[], relaxed(), false);
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                       "required": ["city", "unit"]}}}]);
    let r = f.send_with(json!({"stream": true, "tools": tools}));
    assert_eq!(r.status, 200, "{}", r.text());
    let (mut name, mut arguments, mut delta_bytes) = (String::new(), String::new(), 0);
    for (_, data) in sse_events(&r.text()) {
        let Ok(v) = serde_json::from_str::<Value>(&data) else {
            continue;
        };
        for call in v["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            name += call["function"]["name"].as_str().unwrap_or_default();
            arguments += call["function"]["arguments"].as_str().unwrap_or_default();
            delta_bytes += data.len();
        }
    }
    assert_eq!(name, "get_weather");
    assert!(serde_json::from_str::<Value>(&arguments).is_ok(), "{arguments}");
    let g = f.generation(&r);
    assert_eq!(g["estimated"], true, "{g}");
    let expected = (name.len() + arguments.len()).div_ceil(4) as i64;
    assert_eq!(
        tokens(&g["usage"], "output_tokens"),
        expected,
        "name + arguments, {delta_bytes} bytes of deltas"
    );
}

/// Output that is not text — Chat audio, a Gemini image — is an answer (issue 23, item 5): it is
/// delivered from the first route, not judged empty and failed over, and charged from an estimate
/// when the upstream reports no usage.
#[test]
fn audio_or_an_image_without_text_is_an_answer_and_is_charged() {
    for api in [Api::Chat, Api::Gemini] {
        let f = Fixture::build(api, &["chunks/3/0/media/no-usage", "ok"], &[], relaxed(), false);
        for stream in [false, true] {
            let r = f.send(stream);
            assert_eq!(r.status, 200, "{api:?} stream {stream}: {}", r.text());
            let text = r.text();
            let media = match api {
                Api::Chat => "\"audio\"",
                _ => "\"inlineData\"",
            };
            assert!(
                text.contains(media),
                "{api:?} stream {stream}: the media reached the client: {text}"
            );
            assert_eq!(
                r.header("x-switchyard-route"),
                Some("r0"),
                "{api:?} stream {stream}: {text}"
            );
            let g = f.generation(&r);
            assert_eq!(g["outcome"], "answered", "{api:?} stream {stream}: {g}");
            assert_eq!(g["estimated"], true, "{g}");
            assert!(tokens(&g["usage"], "output_tokens") > 0, "{g}");
            assert!(g["total_cost"].as_f64().unwrap() > 0.0, "{g}");
        }
        assert_eq!(f.seen(1), 0, "{api:?}: the fallback route was never asked");
    }
}
