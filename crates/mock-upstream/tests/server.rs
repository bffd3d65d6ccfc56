//! End-to-end tests: a server on a free port (in-process, plus one run of
//! the real binary), driven by a raw `TcpStream` HTTP/1.1 client.

// Client helpers are test code: failing loudly is what they should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

#[derive(Debug, Default)]
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// Chunks of a chunked body, in order.
    chunks: Vec<String>,
    /// The body ended as announced (terminating chunk / full Content-Length).
    complete: bool,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
    /// `data:` payloads of the SSE body.
    fn datas(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }
}

fn server() -> SocketAddr {
    mock_upstream::spawn(0).unwrap().0
}

fn send(stream: &mut TcpStream, method: &str, path: &str, body: &str) {
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: mock\r\nContent-Type: application/json\r\nAuthorization: Bearer sk-test\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).unwrap();
}

fn read_line<R: BufRead>(r: &mut R) -> Option<String> {
    let mut s = String::new();
    match r.read_line(&mut s) {
        Ok(0) | Err(_) => None,
        Ok(_) => Some(s.trim_end_matches(['\r', '\n']).to_string()),
    }
}

/// Reads one response; tolerates truncation (then `complete` is false).
fn read_resp<R: BufRead>(r: &mut R) -> Resp {
    let mut resp = Resp::default();
    let status_line = read_line(r).expect("no status line");
    resp.status = status_line.split(' ').nth(1).unwrap().parse().unwrap();
    while let Some(l) = read_line(r) {
        if l.is_empty() {
            break;
        }
        let (k, v) = l.split_once(':').unwrap();
        resp.headers.push((k.trim().to_lowercase(), v.trim().to_string()));
    }
    if resp.header("transfer-encoding") == Some("chunked") {
        loop {
            let Some(size_line) = read_line(r) else {
                return resp;
            };
            let size = usize::from_str_radix(size_line.trim(), 16).unwrap();
            if size == 0 {
                let _ = read_line(r);
                resp.complete = true;
                return resp;
            }
            let mut buf = vec![0u8; size + 2];
            if r.read_exact(&mut buf).is_err() {
                return resp;
            }
            buf.truncate(size);
            resp.chunks.push(String::from_utf8(buf.clone()).unwrap());
            resp.body.extend_from_slice(&buf);
        }
    } else if let Some(cl) = resp.header("content-length") {
        let cl: usize = cl.parse().unwrap();
        let mut buf = Vec::new();
        let _ = r.take(cl as u64).read_to_end(&mut buf);
        resp.complete = buf.len() == cl;
        resp.body = buf;
    }
    resp
}

fn call(addr: SocketAddr, method: &str, path: &str, body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    send(&mut s, method, path, body);
    read_resp(&mut BufReader::new(s))
}

const CHAT_STREAM: &str = r#"{"model":"gpt-mock","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}"#;
const CHAT: &str = r#"{"model":"gpt-mock","messages":[{"role":"user","content":"hi"}]}"#;

#[test]
fn ok_chat_stream_role_first_done_last() {
    let addr = server();
    let r = call(addr, "POST", "/t1/chat/completions", CHAT_STREAM);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert!(r.complete);
    // One SSE event per chunk.
    assert!(r
        .chunks
        .iter()
        .all(|c| c.ends_with("\n\n") && c.matches("data: ").count() == 1));
    let d = r.datas();
    let first: Value = serde_json::from_str(&d[0]).unwrap();
    assert_eq!(first["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(first["model"], "gpt-mock");
    assert_eq!(d.last().unwrap(), "[DONE]");
    let usage: Value = serde_json::from_str(&d[d.len() - 2]).unwrap();
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    // Deterministic: byte-identical second time.
    let again = call(addr, "POST", "/t1/chat/completions", CHAT_STREAM);
    assert_eq!(r.body, again.body);
}

#[test]
fn status_429_overloaded_retry_after() {
    let addr = server();
    let r = call(
        addr,
        "POST",
        "/t2/status/429/overloaded/retry-after/7/chat/completions",
        CHAT,
    );
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert!(r.text().contains("overloaded"));
    assert_eq!(r.json()["error"]["type"], "server_error");
    let r = call(
        addr,
        "POST",
        "/t2/status/529/overloaded/messages",
        r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(r.status, 529);
    assert_eq!(
        r.text(),
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
    );
    let r = call(
        addr,
        "POST",
        "/t2/status/400/context_length/responses",
        r#"{"model":"x","input":"hi"}"#,
    );
    assert_eq!(r.json()["error"]["code"], "context_length_exceeded");
}

#[test]
fn flaky_alternates_and_stats_count() {
    let addr = server();
    let statuses: Vec<u16> = (0..4)
        .map(|_| call(addr, "POST", "/t3/flaky/2/chat/completions", CHAT).status)
        .collect();
    assert_eq!(statuses, [200, 503, 200, 503]);
    let s = call(addr, "GET", "/_stats/t3/flaky/2", "").json();
    assert_eq!(s["requests"], 4);
    assert_eq!(s["last_request"]["method"], "POST");
    assert_eq!(s["last_request"]["path"], "/t3/flaky/2/chat/completions");
    assert_eq!(s["last_request"]["headers"]["authorization"], "Bearer sk-test");
    assert_eq!(s["last_request"]["body"]["model"], "gpt-mock");
    let s = call(addr, "GET", "/_stats/never", "").json();
    assert_eq!(
        s,
        serde_json::json!({"requests":0,"last_request":null,"stream_events":0,"by_prompt":null,"max_in_flight":0})
    );
    assert_eq!(call(addr, "POST", "/_reset", "").json(), serde_json::json!({"ok":true}));
    assert_eq!(call(addr, "GET", "/_stats/t3/flaky/2", "").json()["requests"], 0);
    // After reset the count starts again.
    assert_eq!(call(addr, "POST", "/t3/flaky/2/chat/completions", CHAT).status, 200);
}

#[test]
fn cut_after_truncates() {
    let addr = server();
    let r = call(addr, "POST", "/t4/cut-after/2/chat/completions", CHAT_STREAM);
    assert_eq!(r.status, 200);
    assert!(!r.complete, "no terminating chunk expected");
    assert_eq!(r.chunks.len(), 3, "role + 2 content: {:?}", r.chunks);
    assert!(!r.text().contains("[DONE]") && !r.text().contains("finish_reason\":\"stop"));
    let r = call(addr, "POST", "/t4/cut-after/2/chat/completions", CHAT);
    assert!(!r.complete);
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
}

#[test]
fn malformed_event_1() {
    let addr = server();
    let r = call(addr, "POST", "/t5/malformed-event/1/chat/completions", CHAT_STREAM);
    assert!(r.complete);
    assert_eq!(r.chunks[1], "data: {not json\n\n");
    assert_eq!(r.datas().last().unwrap(), "[DONE]");
    let r = call(addr, "POST", "/t5/malformed-event/1/chat/completions", CHAT);
    assert_eq!(r.status, 200);
    assert!(serde_json::from_slice::<Value>(&r.body).is_err());
}

#[test]
fn keep_alive_and_chunked_request_body() {
    let addr = server();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    send(
        &mut s,
        "POST",
        "/t6/messages",
        r#"{"model":"claude","max_tokens":9,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    let a = read_resp(&mut r);
    assert!(a.complete);
    assert!(a.text().starts_with("event: message_start\n"));
    assert!(a
        .text()
        .ends_with("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"));
    let body = r#"{"model":"gpt-r","input":"hi"}"#;
    let req = format!(
        "POST /t6/responses HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
        10,
        &body[..10],
        body.len() - 10,
        &body[10..]
    );
    s.write_all(req.as_bytes()).unwrap();
    let b = read_resp(&mut r);
    assert_eq!(b.status, 200);
    assert_eq!(b.json()["model"], "gpt-r");
    assert_eq!(
        b.json()["output"][0]["content"][0]["text"],
        "Hello from the mock upstream,"
    );
    let stats = call(addr, "GET", "/_stats/t6", "").json();
    assert_eq!(stats["requests"], 2);
    assert_eq!(stats["last_request"]["body"]["input"], "hi");
}

#[test]
fn reset_is_a_connection_reset() {
    let addr = server();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    send(&mut s, "POST", "/t7/reset/chat/completions", CHAT);
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
        Ok(n) => {
            assert_eq!(n, 0, "no bytes expected");
            if cfg!(target_os = "linux") {
                panic!("expected RST on Linux, got a clean EOF");
            }
        }
    }
}

#[test]
fn hang_writes_nothing() {
    let addr = server();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(600))).unwrap();
    send(&mut s, "POST", "/t8/hang/chat/completions", CHAT);
    let mut buf = [0u8; 64];
    let e = s.read(&mut buf).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut));
    assert_eq!(call(addr, "GET", "/_stats/t8/hang", "").json()["requests"], 1);
}

#[test]
fn first_content_after_sends_preamble_then_keepalives() {
    let addr = server();
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    send(
        &mut s,
        "POST",
        "/t9/first-content-after/700/chunks/2/0/responses",
        r#"{"model":"m","input":"x","stream":true}"#,
    );
    let r = read_resp(&mut BufReader::new(s));
    assert!(t.elapsed() >= Duration::from_millis(700));
    assert!(r.complete);
    let keepalives = r.chunks.iter().filter(|c| c.as_str() == ": keep-alive\n\n").count();
    assert_eq!(keepalives, 3, "{:?}", r.chunks);
    assert!(r.chunks[3].starts_with("event: response.content_part.added"));
    assert_eq!(r.chunks[4], ": keep-alive\n\n");
    assert!(r.text().contains("event: response.completed"));
}

#[test]
fn down_for_then_up() {
    let addr = server();
    assert_eq!(
        call(addr, "POST", "/t10/down-for/1000/retry-after/1/chat/completions", CHAT).status,
        503
    );
    let r = call(addr, "POST", "/t10/down-for/1000/retry-after/1/chat/completions", CHAT);
    assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    std::thread::sleep(Duration::from_millis(1050));
    assert_eq!(
        call(addr, "POST", "/t10/down-for/1000/retry-after/1/chat/completions", CHAT).status,
        200
    );
}

#[test]
fn error_events_and_bodies() {
    let addr = server();
    let r = call(addr, "POST", "/t11/error-event-first/chat/completions", CHAT_STREAM);
    assert_eq!(r.status, 200);
    assert!(r.complete);
    assert_eq!(r.datas().len(), 1);
    assert!(r.datas()[0].starts_with("{\"error\":"));
    let r = call(
        addr,
        "POST",
        "/t11/error-event-after/2/messages",
        r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    assert!(r.text().ends_with("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"));
    assert_eq!(r.text().matches("content_block_delta").count(), 2 * 2);
    let r = call(addr, "POST", "/t11/error-body-200/chat/completions", CHAT_STREAM);
    assert_eq!((r.status, r.header("content-type")), (200, Some("application/json")));
    assert_eq!(r.json()["error"]["type"], "server_error");
}

#[test]
fn not_found_and_bad_scenario() {
    let addr = server();
    assert_eq!(call(addr, "POST", "/t12/completions", CHAT).status, 404);
    assert_eq!(call(addr, "GET", "/_health", "").text(), "ok");
    let r = call(addr, "POST", "/t12/status/abc/chat/completions", CHAT);
    assert_eq!(r.status, 400);
    assert!(r.text().contains("bad scenario"));
}

#[test]
fn binary_prints_port_and_serves() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mock-upstream"))
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let line = read_line(&mut out).unwrap();
    let port: u16 = line
        .strip_prefix("mock-upstream listening on 127.0.0.1:")
        .unwrap()
        .parse()
        .unwrap();
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let r = call(addr, "POST", "/bin/no-usage/chat/completions", CHAT);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.status, 200);
    assert!(r.json().get("usage").is_none());
}

/// A 400 whose body is exactly `want` (the dialect's shape, naming the field).
fn assert_rejected(addr: SocketAddr, path: &str, body: &str, want: Value) {
    let r = call(addr, "POST", path, body);
    assert_eq!((r.status, r.json()), (400, want), "{path} {body}");
}

#[test]
fn invalid_requests_get_the_dialects_400_naming_the_field() {
    let addr = server();
    assert_rejected(
        addr,
        "/v1/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"billing":1}"#,
        serde_json::json!({"error": {"message": "Unrecognized request argument supplied: billing",
                                     "type": "invalid_request_error", "param": "billing", "code": null}}),
    );
    assert_rejected(
        addr,
        "/v1/messages",
        r#"{"model":"c","messages":[{"role":"user","content":"hi"}]}"#,
        serde_json::json!({"type": "error", "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"}}),
    );
    assert_rejected(
        addr,
        "/v1/responses",
        r#"{"model":"m","input":"hi","tools":[{"type":"function","function":{"name":"f"}}]}"#,
        serde_json::json!({"error": {"message": "Missing required parameter: 'tools[0].name'.", "type": "invalid_request_error",
                                     "param": "tools[0].name", "code": "missing_required_parameter"}}),
    );
    assert_rejected(
        addr,
        "/v1beta/models/g:generateContent",
        r#"{"model":"g","contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#,
        serde_json::json!({"error": {"code": 400, "message": "Invalid JSON payload received. Unknown name \"model\": Cannot find field.",
                                     "status": "INVALID_ARGUMENT"}}),
    );
    let r = call(addr, "POST", "/v1/messages", "{not json");
    assert_eq!((r.status, r.json()["type"].as_str()), (400, Some("error")));
    // Before the scenario: a route that would fail still rejects the body first, and counts it.
    let r = call(
        addr,
        "POST",
        "/v/status/503/chat/completions",
        r#"{"model":"m","messages":[]}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("'messages'"));
    assert_eq!(call(addr, "GET", "/_stats/v/status/503", "").json()["requests"], 1);
}

#[test]
fn lenient_turns_validation_off_and_reject_field_comes_first() {
    let addr = server();
    let odd = r#"{"model":"m","messages":[{"role":"user","content":[0,0]}],"first":true}"#;
    assert_eq!(call(addr, "POST", "/l/chat/completions", odd).status, 400);
    let r = call(addr, "POST", "/l/lenient/chat/completions", odd);
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call(
        addr,
        "POST",
        "/l/reject-field/first/500/responses",
        r#"{"model":"m","input":"hi","first":true}"#,
    );
    assert_eq!(r.status, 500, "{}", r.text());
    assert!(r.text().contains("first"));
}

const WEATHER_TOOL: &str = r#"{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}},"required":["city","unit"]}}}"#;

#[test]
fn a_chat_tool_round_trip() {
    let addr = server();
    // Turn 1: the model calls the tool (streamed).
    let ask = format!(
        r#"{{"model":"m","stream":true,"stream_options":{{"include_usage":true}},"messages":[{{"role":"user","content":"Weather in Paris?"}}],"tools":[{WEATHER_TOOL}]}}"#
    );
    let r = call(addr, "POST", "/rt/tool-call/chat/completions", &ask);
    assert_eq!(r.status, 200, "{}", r.text());
    let (mut id, mut name, mut arguments) = (String::new(), String::new(), String::new());
    let mut finish = None;
    for d in r.datas().iter().filter(|d| *d != "[DONE]") {
        let v: Value = serde_json::from_str(d).unwrap();
        let choice = &v["choices"][0];
        if let Some(call) = choice["delta"]["tool_calls"].get(0) {
            id.push_str(call["id"].as_str().unwrap_or(""));
            name.push_str(call["function"]["name"].as_str().unwrap_or(""));
            arguments.push_str(call["function"]["arguments"].as_str().unwrap_or(""));
        }
        if let Some(f) = choice["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert_eq!(
        (id.as_str(), name.as_str(), finish.as_deref()),
        ("call_mock_0", "get_weather", Some("tool_calls"))
    );
    let args: Value = serde_json::from_str(&arguments).unwrap();
    assert_eq!(
        args,
        serde_json::json!({"city": "mock", "unit": "celsius"}),
        "the arguments follow the tool's schema"
    );
    // Turn 2: the result goes back; the answer repeats it (and the same scenario still applies).
    let answer = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"Weather in Paris?"}},
            {{"role":"assistant","content":null,"tool_calls":[{{"id":"{id}","type":"function","function":{{"name":"{name}","arguments":{}}}}}]}},
            {{"role":"tool","tool_call_id":"{id}","content":"22C and sunny"}}],"tools":[{WEATHER_TOOL}]}}"#,
        serde_json::to_string(&arguments).unwrap()
    );
    let r = call(addr, "POST", "/rt/tool-call/chat/completions", &answer);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "The tool said: 22C and sunny");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // A result for a call that was never made is the client's bug: 400.
    let wrong = answer.replace(r#""tool_call_id":"call_mock_0""#, r#""tool_call_id":"call_other""#);
    assert_eq!(call(addr, "POST", "/rt/tool-call/chat/completions", &wrong).status, 400);
}

#[test]
fn an_anthropic_tool_round_trip_with_parallel_calls() {
    let addr = server();
    let tools = r#"[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]"#;
    let ask = format!(
        r#"{{"model":"c","max_tokens":256,"messages":[{{"role":"user","content":"Weather?"}}],"tools":{tools}}}"#
    );
    let r = call(addr, "POST", "/art/tool-call/2/no-usage/messages", &ask);
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    assert!(v.get("usage").is_none());
    let uses = v["content"].as_array().unwrap();
    assert_eq!(uses.len(), 2);
    let results: Vec<Value> = uses
        .iter()
        .enumerate()
        .map(|(i, u)| serde_json::json!({"type": "tool_result", "tool_use_id": u["id"], "content": format!("result {i}")}))
        .collect();
    let answer = serde_json::json!({"model": "c", "max_tokens": 256, "tools": serde_json::from_str::<Value>(tools).unwrap(),
        "messages": [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": uses},
                     {"role": "user", "content": results}]});
    let r = call(addr, "POST", "/art/tool-call/2/no-usage/messages", &answer.to_string());
    assert_eq!(
        r.json()["content"][0]["text"],
        "The tool said: result 0 | result 1",
        "{}",
        r.text()
    );
    // Answering only one of the two calls is refused, naming the turn.
    let mut partial = answer.clone();
    partial["messages"][2]["content"].as_array_mut().unwrap().pop();
    let r = call(addr, "POST", "/art/tool-call/2/no-usage/messages", &partial.to_string());
    assert_eq!(r.status, 400);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("messages.1:"),
        "{}",
        r.text()
    );
}

#[test]
fn json_and_image_answers() {
    let addr = server();
    let body = r#"{"model":"m","input":"?","stream":true,"text":{"format":{"type":"json_schema","name":"w","schema":{"type":"object","properties":{"answer":{"type":"string"},"score":{"type":"number"}},"required":["answer","score"]}}}}"#;
    let r = call(addr, "POST", "/j/json/responses", body);
    let last: Value = serde_json::from_str(r.datas().last().unwrap()).unwrap();
    let text = last["response"]["output"][0]["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        serde_json::json!({"answer": "mock", "score": 1})
    );
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"what is this?"},{"inlineData":{"mimeType":"image/png","data":"iVBORw0KGgo="}}]}]}"#;
    let r = call(addr, "POST", "/j/echo-images/models/g:generateContent", body);
    assert_eq!(
        r.json()["candidates"][0]["content"]["parts"][0]["text"],
        "images: 1",
        "{}",
        r.text()
    );
}
