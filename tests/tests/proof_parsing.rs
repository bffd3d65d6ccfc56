//! One key cannot stall the isolate with the shape of its body (issue 31, SPEC §18a "work is
//! linear in the input"): bodies built to make a parser or translator quadratic are answered or
//! refused quickly while another key's stream runs through whole; one key's uploads cannot take
//! the isolate's body budget, and a body trickled below the floor rate is cut off with 408;
//! a body nested deeper than the limit is a 400 naming it, and nothing goes upstream.
//!
//! Every test's name starts with `linear_` (`E2E_ONLY=linear_ scripts/test`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, unique, Api, Reply, Stack, APIS};

/// A zero-priced mock route speaking `api`, with the given scenario.
fn free_route(s: &Stack, api: Api, scenario: &str) -> (Value, String) {
    let label = unique("l");
    let provider = s.mock_provider_with_auth(&label, scenario, true, api.provider_auth());
    let route = json!({"id": "r0", "provider": provider, "upstream_model": "up", "apis": [api.name()],
                       "price": {"input_per_mtok": 0.0, "output_per_mtok": 0.0}});
    (route, label)
}

/// A model with one free route of `api` and a context window no body reaches.
fn big_model(s: &Stack, api: Api, scenario: &str) -> (String, String) {
    let (route, label) = free_route(s, api, scenario);
    let model = unique("m");
    let doc = json!({"context_window": 100_000_000u64, "max_output_tokens": 64, "routes": [route],
                     "policy": {"nonstream_base_ms": 20000, "last_route_min_ms": 20000}});
    let r = s.admin("PUT", &format!("/admin/models/{model}"), Some(doc));
    assert_eq!(r.status, 200, "adding model: {}", r.text());
    (model, label)
}

/// Runs `heavy` while another key streams 40 chunks 100 ms apart from a model whose idle timeout
/// is 2 s: an isolate stalled for longer cuts that stream. Returns the heavy reply and how long it
/// took, after checking the neighbour's stream ended whole. A heavy request refused unread with
/// 503 `gateway_busy` (other tests' large bodies hold the isolate's budget: the client is told
/// to retry after 1 s) is tried again, beside a new stream, for at most 60 s.
fn beside_a_stream(s: &Stack, heavy: impl Fn() -> Reply) -> (Reply, Duration) {
    let (route, _) = free_route(s, Api::Chat, "chunks/40/100");
    let model = s.model(vec![route], Some(json!({"idle_timeout_ms": 2000})));
    let neighbour = s.new_key(10.0);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (r, took) = std::thread::scope(|scope| {
            let stream = scope.spawn(|| s.chat(&neighbour, &chat_body(&model, true)));
            std::thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            let r = heavy();
            let took = started.elapsed();
            let n = stream.join().unwrap();
            assert_eq!(n.status, 200, "{}", n.text());
            let text = n.text();
            assert!(
                text.trim_end().ends_with("data: [DONE]") && !text.contains(r#""finish_reason":"error""#),
                "the neighbour's stream ended whole: …{}",
                &text[text.len().saturating_sub(300)..]
            );
            let g = s.generation(&neighbour, n.header("x-generation-id").unwrap());
            assert_eq!(g["outcome"], "answered", "{g}");
            (r, took)
        });
        if r.status != 503 || !r.text().contains("gateway_busy") || Instant::now() > deadline {
            return (r, took);
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Answered (200) or refused as the client's (4xx), never a 5xx, within `limit`.
fn answered_or_refused(what: &str, r: &Reply, took: Duration, limit: Duration) {
    assert!(
        r.status == 200 || (400..500).contains(&r.status),
        "{what}: answered or refused, not {}: {}",
        r.status,
        &r.text()[..r.text().len().min(500)]
    );
    assert!(took < limit, "{what}: took {took:?}");
}

#[test]
fn linear_ten_mib_of_top_level_keys_is_refused_at_once_beside_a_whole_stream() {
    // `{"k0000001":0,…}`: ~800k keys. Each key was looked up among the ones before it, ~3×10¹¹
    // comparisons: minutes of CPU with every other request on the isolate stalled.
    let s = Stack::from_env();
    let (model, label) = big_model(&s, Api::Chat, "lenient");
    let key = s.new_key(10.0);
    let mut text = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":"hi"}}]"#);
    let mut i = 0u32;
    while text.len() < (10 << 20) - 32 {
        text.push_str(&format!(r#","k{i:07}":0"#));
        i += 1;
    }
    text.push('}');
    let (r, took) = beside_a_stream(&s, || s.chat_raw(&key, text.as_bytes()));
    answered_or_refused("800k top-level keys", &r, took, Duration::from_secs(8));
    if r.status != 200 {
        assert!(
            r.json()["error"]["message"].as_str().unwrap().contains("fields"),
            "{}",
            r.text()
        );
        assert_eq!(s.mock_stats(&label, "lenient")["requests"], 0);
    }
    assert_eq!(s.credits(&key)["held_micros"], 0);
}

/// `n` tool calls and their results, answered in the reverse order, in `api`'s dialect.
fn tool_history(api: Api, model: &str, n: usize) -> Value {
    let ids: Vec<String> = (0..n).map(|i| format!("call_{i:06}")).collect();
    let names: Vec<String> = (0..n).map(|i| format!("f{i:06}")).collect();
    let back = (0..n).rev();
    match api {
        Api::Chat => {
            let calls: Vec<Value> = (0..n)
                .map(|i| json!({"id": ids[i], "type": "function", "function": {"name": names[i], "arguments": "{}"}}))
                .collect();
            let mut messages = vec![
                json!({"role": "user", "content": "go"}),
                json!({"role": "assistant", "content": null, "tool_calls": calls}),
            ];
            messages.extend(back.map(|i| json!({"role": "tool", "tool_call_id": ids[i], "content": "ok"})));
            json!({"model": model, "messages": messages})
        }
        Api::Messages => {
            let uses: Vec<Value> = (0..n)
                .map(|i| json!({"type": "tool_use", "id": ids[i], "name": names[i], "input": {}}))
                .collect();
            let results: Vec<Value> = back
                .map(|i| json!({"type": "tool_result", "tool_use_id": ids[i], "content": "ok"}))
                .collect();
            json!({"model": model, "max_tokens": 64, "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": uses},
                {"role": "user", "content": results}]})
        }
        Api::Responses => {
            let mut input = vec![json!({"role": "user", "content": "go"})];
            input.extend(
                (0..n)
                    .map(|i| json!({"type": "function_call", "call_id": ids[i], "name": names[i], "arguments": "{}"})),
            );
            input.extend(back.map(|i| json!({"type": "function_call_output", "call_id": ids[i], "output": "ok"})));
            json!({"model": model, "input": input})
        }
        Api::Gemini => {
            // Gemini answers a call by its name: each response was matched by scanning the calls
            // still open, and removed from the middle of a list.
            let calls: Vec<Value> = (0..n)
                .map(|i| json!({"functionCall": {"name": names[i], "args": {}}}))
                .collect();
            let responses: Vec<Value> = back
                .map(|i| json!({"functionResponse": {"name": names[i], "response": {"ok": true}}}))
                .collect();
            json!({"model": model, "contents": [
                {"role": "user", "parts": [{"text": "go"}]},
                {"role": "model", "parts": calls},
                {"role": "user", "parts": responses}]})
        }
    }
}

#[test]
fn linear_forty_thousand_tool_calls_translate_quickly_beside_a_whole_stream() {
    // Each client dialect's tool history, translated into another dialect's: 40k calls and their
    // results in the reverse order.
    let s = Stack::from_env();
    let key = s.new_key(10.0);
    for (client, route) in [
        (Api::Gemini, Api::Chat),
        (Api::Chat, Api::Gemini),
        (Api::Messages, Api::Responses),
        (Api::Responses, Api::Messages),
    ] {
        let (model, label) = big_model(&s, route, "lenient");
        let body = tool_history(client, &model, 40_000);
        let (r, took) = beside_a_stream(&s, || s.send(client, &key, &body, &[]));
        let what = format!("{client:?} tool history to a {route:?} route");
        answered_or_refused(&what, &r, took, Duration::from_secs(8));
        assert_eq!(r.status, 200, "{what}: {}", &r.text()[..r.text().len().min(500)]);
        assert_eq!(s.mock_stats(&label, "lenient")["requests"], 1, "{what}");
    }
}

/// The gateway's `host:port`.
fn address(s: &Stack) -> String {
    s.gateway
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string()
}

/// Opens a chat request declaring `declared` bytes of body and sends `first` of them.
fn upload(s: &Stack, api: Api, key: &str, declared: usize, first: &[u8]) -> TcpStream {
    let host = address(s);
    let mut conn = TcpStream::connect(&host).unwrap();
    conn.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    let (name, value) = api.auth_header(key);
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {host}\r\n{name}: {value}\r\ncontent-type: application/json\r\ncontent-length: {declared}\r\n\r\n",
        api.path()
    );
    conn.write_all(head.as_bytes()).unwrap();
    conn.write_all(first).unwrap();
    conn.flush().unwrap();
    conn
}

/// The status and body of the answer on `conn`, read within `within` (`None`: no answer by then).
fn answer(conn: &mut TcpStream, within: Duration) -> Option<(u16, String)> {
    conn.set_read_timeout(Some(within)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    let deadline = Instant::now() + within;
    loop {
        match conn.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(&got);
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().to_string())
                })
                .and_then(|v| v.parse::<usize>().ok());
            if length.is_some_and(|n| got.len() >= end + 4 + n) {
                break;
            }
        }
        if Instant::now() > deadline {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

#[test]
fn linear_one_keys_slow_uploads_leave_room_for_another_keys_body() {
    // Key A opens three uploads declaring 10, 10 and 4 MiB and sends most of each, then waits (well
    // above the floor rate). The isolate's body budget was taken by declared lengths, with no cap
    // per key: every other key got 503 gateway_busy until A's bodies were done.
    let s = Stack::from_env();
    let (model, _) = big_model(&s, Api::Chat, "lenient");
    let a = s.new_key(10.0);
    let b = s.new_key(10.0);
    let prefix = |n: usize| {
        let mut p = format!(r#"{{"model":"{model}","messages":[{{"role":"user","content":""#).into_bytes();
        p.resize(n, b'a');
        p
    };
    let mut uploads = Vec::new();
    for (declared, sent) in [(10 << 20, 9 << 20), (10 << 20, 9 << 20), (4 << 20, 3 << 20)] {
        let first = prefix(sent);
        let s = s.clone();
        let a = a.clone();
        uploads.push(std::thread::spawn(move || upload(&s, Api::Chat, &a, declared, &first)));
    }
    let conns: Vec<TcpStream> = uploads.into_iter().map(|h| h.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(1500));
    // Key B: a body of 4 MiB, normal speed.
    let mut text = String::with_capacity(4 << 20);
    text.push_str(&format!(
        r#"{{"model":"{model}","messages":[{{"role":"user","content":""#
    ));
    while text.len() < 4 << 20 {
        text.push_str("bbbbbbbbbbbbbbbb");
    }
    text.push_str(r#""}]}"#);
    // Other tests' large bodies may hold the rest of the budget for a moment (503, retry after
    // 1 s); A's uploads hold theirs for as long as this test runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let r = loop {
        let r = s.chat_raw(&b, text.as_bytes());
        if r.status != 503 || Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        r.status,
        200,
        "another key is served: {}",
        &r.text()[..r.text().len().min(500)]
    );
    drop(conns);
}

#[test]
fn linear_a_body_trickled_below_the_floor_rate_gets_408_in_the_clients_dialect() {
    // A client declares 100 kB and sends 20 bytes, then nothing: the read had no timeout, so the
    // request (and its share of the budget) waited for as long as the client kept the connection.
    let s = Stack::from_env();
    let key = s.new_key(10.0);
    std::thread::scope(|scope| {
        let runs: Vec<_> = [Api::Chat, Api::Messages]
            .into_iter()
            .map(|api| {
                let (s, key) = (&s, &key);
                scope.spawn(move || {
                    let started = Instant::now();
                    let mut conn = upload(s, api, key, 100_000, br#"{"model":"m","messages""#);
                    let got = answer(&mut conn, Duration::from_secs(30));
                    (api, got, started.elapsed())
                })
            })
            .collect();
        for run in runs {
            let (api, got, took) = run.join().unwrap();
            let (status, body) = got.unwrap_or_else(|| panic!("{api:?}: no answer within 30 s"));
            assert_eq!(status, 408, "{api:?}: {body}");
            assert!(
                took < Duration::from_secs(20),
                "{api:?}: cut off in bounded time: {took:?}"
            );
            let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{api:?}: {e}: {body}"));
            match api {
                Api::Messages => assert_eq!(v["type"], "error", "{v}"),
                _ => assert_eq!(v["error"]["code"], "request_timeout", "{v}"),
            }
            assert!(v["error"]["message"].as_str().unwrap().contains("KiB/s"), "{v}");
        }
    });
}

/// `body` with `deep` (arrays nested `depth` deep around a string) set in a field no dialect reads.
fn nested_in(body: &Value, depth: usize) -> Vec<u8> {
    let mut text = body.to_string();
    text.pop(); // the closing brace
    text.push_str(r#","x_unread":"#);
    text.push_str(&"[".repeat(depth));
    text.push_str(r#""x""#);
    text.push_str(&"]".repeat(depth));
    text.push('}');
    text.into_bytes()
}

#[test]
fn linear_a_body_nested_ten_thousand_deep_is_a_400_naming_the_limit_in_each_dialect() {
    // Forwarded as bytes, such a body went upstream: the provider failed, every route was tried
    // and the client got a 5xx it had provoked. Now: a 400 naming the limit, nothing sent.
    let s = Stack::from_env();
    for api in APIS {
        let (model, label) = big_model(&s, api, "lenient");
        let key = s.new_key(1.0);
        let (path, body) = api.request(&api.body(&model, false));
        let (name, value) = api.auth_header(&key);
        let r = s.request(
            "POST",
            &format!("{}{path}", s.gateway),
            &[(name, value.as_str()), ("content-type", "application/json")],
            Some(&nested_in(&body, 10_000)),
        );
        assert_eq!(r.status, 400, "{api:?}: {}", r.text());
        let v = r.json();
        match api {
            Api::Messages => assert_eq!(v["type"], "error", "{v}"),
            Api::Gemini => assert_eq!(v["error"]["status"], "INVALID_ARGUMENT", "{v}"),
            _ => assert_eq!(v["error"]["type"], "invalid_request_error", "{v}"),
        }
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains("128 deep"), "{api:?}: names the limit: {message}");
        assert_eq!(
            s.mock_stats(&label, "lenient")["requests"],
            0,
            "{api:?}: nothing went upstream"
        );
        let c = s.credits(&key);
        assert_eq!(
            (c["held_micros"].as_u64(), c["charges_total_micros"].as_u64()),
            (Some(0), Some(0)),
            "{c}"
        );
        // At the limit, the same body is served.
        let r = s.request(
            "POST",
            &format!("{}{path}", s.gateway),
            &[(name, value.as_str()), ("content-type", "application/json")],
            Some(&nested_in(&body, 100)),
        );
        assert_eq!(r.status, 200, "{api:?}: {}", r.text());
    }
}
