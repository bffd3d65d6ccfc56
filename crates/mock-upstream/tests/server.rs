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
    let headers = [
        ("Host", "mock"),
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer sk-test"),
    ];
    send_with(stream, method, path, &headers, body.as_bytes());
}

/// Sends a request with exactly these headers (and `Content-Length`).
fn send_with(stream: &mut TcpStream, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) {
    let mut req = format!("{method} {path} HTTP/1.1\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body);
    stream.write_all(&bytes).unwrap();
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
            resp.chunks.push(String::from_utf8_lossy(&buf).into_owned());
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

fn call_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)], body: &str) -> Resp {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    send_with(&mut s, "POST", path, headers, body.as_bytes());
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

// ---------------------------------------------------------------- AWS Bedrock

use mock_upstream::crypto::{hex, hmac_sha256, sha256};
use mock_upstream::sigv4::format_amz_date;

const BEDROCK_BODY: &str =
    r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
const HAIKU: &str = "anthropic.claude-3-haiku-20240307-v1%3A0";

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A SigV4 signer of the test's own: the canonical request written out for these requests
/// (paths of unreserved characters and `%XX` escapes, which the service encodes once more; no
/// query; the headers given, signed in sorted order).
struct Signer {
    key_id: &'static str,
    secret: &'static str,
    region: &'static str,
    token: Option<&'static str>,
    /// Unix seconds.
    at: i64,
}

impl Default for Signer {
    fn default() -> Self {
        Signer {
            key_id: "AKIAMOCKSWITCHYARD",
            secret: "mock-secret-key-for-switchyard-tests",
            region: "us-east-1",
            token: None,
            at: unix_now(),
        }
    }
}

impl Signer {
    /// The headers of a signed POST of `body` to `path` (Host, Content-Type, X-Amz-Date, the
    /// token if any, Authorization).
    fn sign(&self, path: &str, body: &str) -> Vec<(String, String)> {
        let amz_date = format_amz_date(self.at);
        let date = &amz_date[..8];
        let mut headers = vec![
            ("content-type".to_string(), "application/json".to_string()),
            ("host".to_string(), "mock".to_string()),
            ("x-amz-date".to_string(), amz_date.clone()),
        ];
        if let Some(t) = self.token {
            headers.push(("x-amz-security-token".to_string(), t.to_string()));
        }
        let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
        let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
        let signed = signed.join(";");
        let canonical = format!(
            "POST\n{}\n\n{canonical_headers}\n{signed}\n{}",
            path.replace('%', "%25"),
            hex(&sha256(body.as_bytes()))
        );
        let scope = format!("{date}/{}/bedrock/aws4_request", self.region);
        let to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex(&sha256(canonical.as_bytes()))
        );
        let k_date = hmac_sha256(format!("AWS4{}", self.secret).as_bytes(), date.as_bytes());
        let k_region = hmac_sha256(&k_date, self.region.as_bytes());
        let k_service = hmac_sha256(&k_region, b"bedrock");
        let k_signing = hmac_sha256(&k_service, b"aws4_request");
        let signature = hex(&hmac_sha256(&k_signing, to_sign.as_bytes()));
        headers.push((
            "authorization".to_string(),
            format!(
                "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={signed}, Signature={signature}",
                self.key_id
            ),
        ));
        headers
    }
}

fn post_headers(addr: SocketAddr, path: &str, headers: &[(String, String)], body: &str) -> Resp {
    let borrowed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    call_with(addr, path, &borrowed, body)
}

/// A request signed by `signer` over `body`, sent as is.
fn bedrock(addr: SocketAddr, signer: &Signer, path: &str, body: &str) -> Resp {
    post_headers(addr, path, &signer.sign(path, body), body)
}

/// The status, the exception named in `x-amzn-errortype` and the message of a Bedrock error.
fn aws_error(r: &Resp) -> (u16, String, String) {
    let ty = r.header("x-amzn-errortype").unwrap_or_default();
    let name = ty.split(':').next().unwrap_or_default().to_string();
    let message = r.json()["message"].as_str().unwrap_or_default().to_string();
    (r.status, name, message)
}

#[test]
fn a_signed_invoke_is_answered_with_the_messages_body() {
    let addr = server();
    let path = format!("/br/model/{HAIKU}/invoke");
    let r = bedrock(addr, &Signer::default(), &path, BEDROCK_BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], "anthropic.claude-3-haiku-20240307-v1:0");
    assert_eq!(v["content"][0]["text"], "Hello from the mock upstream,");
    assert_eq!(v["usage"]["output_tokens"], 5);
    assert_eq!(r.header("x-amzn-bedrock-output-token-count"), Some("5"));
    assert_eq!(
        r.header("x-amzn-bedrock-input-token-count"),
        Some((BEDROCK_BODY.len() / 4).to_string().as_str())
    );
    // The scenario applies as for the other dialects; errors in Bedrock's shape.
    let r = bedrock(
        addr,
        &Signer::default(),
        &format!("/br/status/429/retry-after/2/model/{HAIKU}/invoke"),
        BEDROCK_BODY,
    );
    assert_eq!(aws_error(&r).0, 429);
    assert_eq!(aws_error(&r).1, "ThrottlingException");
    assert_eq!(r.header("retry-after"), Some("2"));
    let r = bedrock(
        addr,
        &Signer::default(),
        &format!("/br/status/503/model/{HAIKU}/invoke"),
        BEDROCK_BODY,
    );
    assert_eq!(
        (aws_error(&r).0, aws_error(&r).1.as_str()),
        (503, "ServiceUnavailableException")
    );
    let stats = call(addr, "GET", "/_stats/br", "").json();
    assert_eq!(stats["requests"], 1);
    assert_eq!(stats["last_request"]["path"], format!("/br/model/{HAIKU}/invoke"));
}

#[test]
fn a_signature_that_does_not_hold_is_refused_as_aws_refuses_it() {
    let addr = server();
    let path = format!("/sig/model/{HAIKU}/invoke");
    let good = Signer::default().sign(&path, BEDROCK_BODY);
    assert_eq!(post_headers(addr, &path, &good, BEDROCK_BODY).status, 200);

    // The body changed after signing.
    let changed = BEDROCK_BODY.replace("hi", "ho");
    let r = post_headers(addr, &path, &good, &changed);
    let (status, name, message) = aws_error(&r);
    assert_eq!((status, name.as_str()), (403, "InvalidSignatureException"), "{message}");
    assert!(
        message.starts_with("The request signature we calculated does not match"),
        "{message}"
    );
    // A signed header's value changed after signing.
    let mut other_type = good.clone();
    other_type[0].1 = "application/json; charset=utf-8".into();
    assert_eq!(
        aws_error(&post_headers(addr, &path, &other_type, BEDROCK_BODY)).1,
        "InvalidSignatureException"
    );
    // The path changed after signing (another model).
    let other_path = path.replace("haiku", "sonnet");
    assert_eq!(
        aws_error(&post_headers(addr, &other_path, &good, BEDROCK_BODY)).1,
        "InvalidSignatureException"
    );
    // The wrong secret.
    let wrong = Signer {
        secret: "not-the-secret",
        ..Signer::default()
    };
    assert_eq!(
        aws_error(&bedrock(addr, &wrong, &path, BEDROCK_BODY)).1,
        "InvalidSignatureException"
    );
    // A date ten minutes old, correctly signed.
    let stale = Signer {
        at: unix_now() - 600,
        ..Signer::default()
    };
    let (status, name, message) = aws_error(&bedrock(addr, &stale, &path, BEDROCK_BODY));
    assert_eq!((status, name.as_str()), (403, "InvalidSignatureException"));
    assert!(message.starts_with("Signature expired: "), "{message}");
    // A key id the service does not know.
    let stranger = Signer {
        key_id: "AKIAUNKNOWN",
        ..Signer::default()
    };
    assert_eq!(
        aws_error(&bedrock(addr, &stranger, &path, BEDROCK_BODY)),
        (
            403,
            "UnrecognizedClientException".to_string(),
            "The security token included in the request is invalid.".to_string()
        )
    );
    // A token the service did not issue.
    let token = Signer {
        token: Some("made-up"),
        ..Signer::default()
    };
    assert_eq!(
        aws_error(&bedrock(addr, &token, &path, BEDROCK_BODY)).1,
        "UnrecognizedClientException"
    );
    // Not a SigV4 authorization at all, or none.
    let mut bearer = good.clone();
    bearer.last_mut().unwrap().1 = "Bearer sk-test".into();
    assert_eq!(
        aws_error(&post_headers(addr, &path, &bearer, BEDROCK_BODY)).1,
        "IncompleteSignatureException"
    );
    let r = call(addr, "POST", &path, BEDROCK_BODY);
    assert_eq!(aws_error(&r).1, "IncompleteSignatureException");
    let unsigned: Vec<(String, String)> = good[..good.len() - 1].to_vec();
    assert_eq!(
        aws_error(&post_headers(addr, &path, &unsigned, BEDROCK_BODY)).1,
        "MissingAuthenticationTokenException"
    );
    // Refused before anything else: no request reached the scenario's behaviour.
    let r = bedrock(
        addr,
        &wrong,
        &format!("/sig/status/500/model/{HAIKU}/invoke"),
        BEDROCK_BODY,
    );
    assert_eq!(r.status, 403);
}

#[test]
fn a_session_token_must_come_signed() {
    let secrets = mock_upstream::Secrets {
        aws: mock_upstream::sigv4::Credentials {
            session_token: Some("session-1".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let addr = mock_upstream::spawn_with(0, mock_upstream::Shared::with_secrets(secrets))
        .unwrap()
        .0;
    let path = format!("/tok/model/{HAIKU}/invoke");
    let with_token = Signer {
        token: Some("session-1"),
        region: "eu-west-3",
        ..Signer::default()
    };
    assert_eq!(bedrock(addr, &with_token, &path, BEDROCK_BODY).status, 200);
    assert_eq!(
        aws_error(&bedrock(addr, &Signer::default(), &path, BEDROCK_BODY)).1,
        "UnrecognizedClientException"
    );
    // The token sent but left out of the signed headers.
    let mut headers = Signer::default().sign(&path, BEDROCK_BODY);
    headers.push(("x-amz-security-token".into(), "session-1".into()));
    let (status, name, message) = aws_error(&post_headers(addr, &path, &headers, BEDROCK_BODY));
    assert_eq!((status, name.as_str()), (403, "IncompleteSignatureException"));
    assert!(message.contains("x-amz-security-token"), "{message}");
}

#[test]
fn a_temporary_credential_beside_the_usual_one_needs_its_token() {
    let secrets = mock_upstream::Secrets {
        aws_temporary: Some(mock_upstream::sigv4::Credentials {
            access_key_id: "ASIAMOCKTEMPORARY".into(),
            secret_access_key: "temporary-secret".into(),
            session_token: Some("session-2".into()),
        }),
        ..Default::default()
    };
    let addr = mock_upstream::spawn_with(0, mock_upstream::Shared::with_secrets(secrets))
        .unwrap()
        .0;
    let path = format!("/tmp/model/{HAIKU}/converse");
    let body = r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;
    let temporary = Signer {
        key_id: "ASIAMOCKTEMPORARY",
        secret: "temporary-secret",
        token: Some("session-2"),
        ..Signer::default()
    };
    assert_eq!(bedrock(addr, &temporary, &path, body).status, 200);
    assert_eq!(
        bedrock(addr, &Signer::default(), &path, body).status,
        200,
        "the usual key still works"
    );
    let without_token = Signer {
        token: None,
        ..temporary
    };
    assert_eq!(
        aws_error(&bedrock(addr, &without_token, &path, body)).1,
        "UnrecognizedClientException"
    );
    let wrong_token = Signer {
        token: Some("session-1"),
        ..temporary
    };
    assert_eq!(
        aws_error(&bedrock(addr, &wrong_token, &path, body)).1,
        "UnrecognizedClientException"
    );
}

#[test]
fn a_signed_converse_is_answered_in_converse_shapes() {
    let addr = server();
    let body = r#"{"messages":[{"role":"user","content":[{"text":"hi"}]}],"inferenceConfig":{"maxTokens":32}}"#;
    let r = bedrock(addr, &Signer::default(), &format!("/cv/model/{HAIKU}/converse"), body);
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["stopReason"], "end_turn");
    assert!(v["output"]["message"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("Hello"));
    assert!(v["usage"]["inputTokens"].as_u64().unwrap() > 0);
    let with_model = r#"{"model":"x","messages":[{"role":"user","content":[{"text":"hi"}]}]}"#;
    let (status, name, message) = aws_error(&bedrock(
        addr,
        &Signer::default(),
        &format!("/cv/model/{HAIKU}/converse"),
        with_model,
    ));
    assert_eq!((status, name.as_str()), (400, "ValidationException"), "{message}");
    assert!(message.contains("[model]"), "{message}");
}

#[test]
fn bedrock_bodies_carry_the_version_and_neither_model_nor_stream() {
    let addr = server();
    let path = format!("/bb/model/{HAIKU}/invoke");
    let refused = |body: &str| {
        let r = bedrock(addr, &Signer::default(), &path, body);
        let (status, name, message) = aws_error(&r);
        assert_eq!(
            (status, name.as_str()),
            (400, "ValidationException"),
            "{body}: {message}"
        );
        message
    };
    let with_model = BEDROCK_BODY.replacen('{', r#"{"model":"claude-3-haiku","#, 1);
    assert_eq!(
        refused(&with_model),
        "Malformed input request: #: extraneous key [model] is not permitted, please reformat your input and try again."
    );
    let streamed = BEDROCK_BODY.replacen('{', r#"{"stream":true,"#, 1);
    assert!(refused(&streamed).contains("extraneous key [stream]"));
    let unversioned = BEDROCK_BODY.replace(r#""anthropic_version":"bedrock-2023-05-31","#, "");
    assert!(refused(&unversioned).contains("required key [anthropic_version] not found"));
    let dated = BEDROCK_BODY.replace("bedrock-2023-05-31", "2023-06-01");
    assert!(refused(&dated).contains("anthropic_version"));
    // The Messages rules hold too: an OpenAI-shaped tool is a translation bug.
    let tools = BEDROCK_BODY.replacen(
        '{',
        r#"{"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"#,
        1,
    );
    assert!(refused(&tools).contains("#/tools/0/type"));
    // A Messages body for Anthropic itself is not one for Bedrock, and the reverse.
    let anthropic = r#"{"model":"c","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#;
    assert!(refused(anthropic).contains("anthropic_version"));
    assert_eq!(call(addr, "POST", "/bb/messages", BEDROCK_BODY).status, 400);
}

/// One eventstream message: its string headers and payload.
#[derive(Debug)]
struct Message {
    headers: Vec<(String, String)>,
    payload: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// CRC-32 (IEEE), table-driven: the test's own, so a wrong CRC in the mock cannot pass itself.
fn crc32(data: &[u8]) -> u32 {
    let table: Vec<u32> = (0..256u32)
        .map(|n| (0..8).fold(n, |c, _| if c & 1 == 1 { 0xEDB8_8320 ^ (c >> 1) } else { c >> 1 }))
        .collect();
    !data
        .iter()
        .fold(!0u32, |c, &b| table[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8))
}

/// Decodes `application/vnd.amazon.eventstream` messages, checking both CRCs of each; returns
/// them and the bytes of an incomplete message left at the end.
fn decode_eventstream(mut bytes: &[u8]) -> (Vec<Message>, Vec<u8>) {
    assert_eq!(crc32(b"123456789"), 0xCBF4_3926, "the check value");
    let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let mut messages = Vec::new();
    while bytes.len() >= 12 {
        let total = be32(&bytes[0..4]) as usize;
        let headers_len = be32(&bytes[4..8]) as usize;
        assert_eq!(be32(&bytes[8..12]), crc32(&bytes[..8]), "prelude CRC");
        if bytes.len() < total {
            break;
        }
        assert_eq!(
            be32(&bytes[total - 4..total]),
            crc32(&bytes[..total - 4]),
            "message CRC"
        );
        let mut headers = Vec::new();
        let mut h = &bytes[12..12 + headers_len];
        while !h.is_empty() {
            let name_len = usize::from(h[0]);
            let name = String::from_utf8(h[1..1 + name_len].to_vec()).unwrap();
            assert_eq!(h[1 + name_len], 7, "string header");
            let value_len = usize::from(u16::from_be_bytes([h[2 + name_len], h[3 + name_len]]));
            let value = String::from_utf8(h[4 + name_len..4 + name_len + value_len].to_vec()).unwrap();
            headers.push((name, value));
            h = &h[4 + name_len + value_len..];
        }
        messages.push(Message {
            headers,
            payload: bytes[12 + headers_len..total - 4].to_vec(),
        });
        bytes = &bytes[total..];
    }
    (messages, bytes.to_vec())
}

/// Standard base64 (with padding) decoded.
fn unbase64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::new();
    for group in s.as_bytes().chunks(4) {
        let digits: Vec<u8> = group.iter().filter(|c| **c != b'=').map(|c| value(*c)).collect();
        let n = digits
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | u32::from(*d) << (18 - 6 * i));
        out.extend_from_slice(&n.to_be_bytes()[1..digits.len()]);
    }
    out
}

/// The Messages events a chunk stream carries (each chunk's `bytes`, decoded).
fn chunk_events(messages: &[Message]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m.header(":message-type") == Some("event"))
        .map(|m| {
            assert_eq!(m.header(":event-type"), Some("chunk"));
            assert_eq!(m.header(":content-type"), Some("application/json"));
            let payload: Value = serde_json::from_slice(&m.payload).unwrap();
            assert!(payload["p"].is_string(), "padding");
            serde_json::from_slice(&unbase64(payload["bytes"].as_str().unwrap())).unwrap()
        })
        .collect()
}

#[test]
fn a_streamed_invoke_is_one_eventstream_chunk_per_messages_event() {
    let addr = server();
    let path = format!("/bs/cache/2/3/model/{HAIKU}/invoke-with-response-stream");
    let r = bedrock(addr, &Signer::default(), &path, BEDROCK_BODY);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("application/vnd.amazon.eventstream"));
    assert!(r.complete);
    let (messages, rest) = decode_eventstream(&r.body);
    assert!(rest.is_empty());
    let events = chunk_events(&messages);
    assert_eq!(events.len(), messages.len());
    // The same events the Messages dialect streams, in order, as its SSE `data:` lines.
    let sse = call(
        addr,
        "POST",
        "/bs/cache/2/3/messages",
        r#"{"model":"anthropic.claude-3-haiku-20240307-v1:0","max_tokens":64,"messages":[{"role":"user","content":"hi"}],"stream":true}"#,
    );
    let sse_events: Vec<Value> = sse.datas().iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    let types = |v: &[Value]| {
        v.iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(types(&events), types(&sse_events));
    assert_eq!(events[0]["message"]["model"], "anthropic.claude-3-haiku-20240307-v1:0");
    let text: String = events.iter().filter_map(|e| e["delta"]["text"].as_str()).collect();
    assert_eq!(text, "Hello from the mock upstream,");
    let delta = events.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["usage"]["output_tokens"], 5);
    let stop = events.last().unwrap();
    assert_eq!(stop["type"], "message_stop");
    assert_eq!(
        stop["amazon-bedrock-invocationMetrics"],
        serde_json::json!({"inputTokenCount": BEDROCK_BODY.len() / 4, "outputTokenCount": 5,
                           "invocationLatency": 0, "firstByteLatency": 0,
                           "cacheReadInputTokenCount": 2, "cacheWriteInputTokenCount": 3})
    );
    assert_eq!(
        call(addr, "GET", "/_stats/bs/cache/2/3", "").json()["stream_events"],
        (messages.len() + sse_events.len()) as u64
    );
}

#[test]
fn stream_failures_are_exception_messages_and_cut_frames() {
    let addr = server();
    let signer = Signer::default();
    let stream_path = |scenario: &str| format!("/bx/{scenario}/model/{HAIKU}/invoke-with-response-stream");
    let r = bedrock(
        addr,
        &signer,
        &stream_path("error-event-after/2/rate_limit"),
        BEDROCK_BODY,
    );
    assert_eq!(r.status, 200);
    let (messages, rest) = decode_eventstream(&r.body);
    assert!(rest.is_empty());
    let last = messages.last().unwrap();
    assert_eq!(last.header(":message-type"), Some("exception"));
    assert_eq!(last.header(":exception-type"), Some("throttlingException"));
    assert_eq!(last.header(":content-type"), Some("application/json"));
    let payload: Value = serde_json::from_slice(&last.payload).unwrap();
    assert_eq!(payload["message"], "Rate limit reached for requests");
    let deltas = chunk_events(&messages[..messages.len() - 1])
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .count();
    assert_eq!(deltas, 2);

    let r = bedrock(addr, &signer, &stream_path("error-event-first"), BEDROCK_BODY);
    let (messages, _) = decode_eventstream(&r.body);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].header(":exception-type"), Some("modelStreamErrorException"));

    // Cut in the middle of the frame after the second content event.
    let r = bedrock(addr, &signer, &stream_path("cut-after/2"), BEDROCK_BODY);
    assert!(!r.complete);
    let (messages, rest) = decode_eventstream(&r.body);
    assert!(!rest.is_empty(), "a partial frame is left at the cut");
    let events = chunk_events(&messages);
    assert_eq!(events.iter().filter(|e| e["type"] == "content_block_delta").count(), 2);
    assert!(events.iter().all(|e| e["type"] != "message_stop"));

    // A malformed event: its bytes are not JSON.
    let r = bedrock(addr, &signer, &stream_path("malformed-event/1"), BEDROCK_BODY);
    let (messages, _) = decode_eventstream(&r.body);
    let payload: Value = serde_json::from_slice(&messages[1].payload).unwrap();
    assert_eq!(unbase64(payload["bytes"].as_str().unwrap()), b"{not json");
}

// ---------------------------------------------------------------- Azure OpenAI

const AZURE_KEY: [(&str, &str); 3] = [
    ("Host", "mock"),
    ("Content-Type", "application/json"),
    ("api-key", "mock-azure-key"),
];

#[test]
fn azure_answers_with_its_content_filter_annotations() {
    let addr = server();
    let r = call_with(addr, "/az/openai/v1/chat/completions", &AZURE_KEY, CHAT);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello from the mock upstream,");
    assert_eq!(
        v["choices"][0]["content_filter_results"]["hate"],
        serde_json::json!({"filtered": false, "severity": "safe"})
    );
    assert_eq!(v["prompt_filter_results"][0]["prompt_index"], 0);
    // Streamed: first the prompt's results without choices, then the usual chunks, annotated.
    let r = call_with(
        addr,
        "/az/openai/v1/chat/completions?api-version=preview",
        &AZURE_KEY,
        CHAT_STREAM,
    );
    let d = r.datas();
    let first: Value = serde_json::from_str(&d[0]).unwrap();
    assert_eq!(first["choices"], serde_json::json!([]));
    assert!(first["prompt_filter_results"].is_array());
    let content: Value = serde_json::from_str(&d[2]).unwrap();
    assert_eq!(content["choices"][0]["delta"]["content"], "Hello ");
    assert!(content["choices"][0]["content_filter_results"]["violence"].is_object());
    assert_eq!(d.last().unwrap(), "[DONE]");
    // Responses on the v1 API, as the dialect answers.
    let r = call_with(
        addr,
        "/az/openai/v1/responses?api-version=v1",
        &AZURE_KEY,
        r#"{"model":"gpt-4o-deployment","input":"hi"}"#,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "gpt-4o-deployment");
    // A deployment's URL: the body need not name the model.
    let r = call_with(
        addr,
        "/az/tool-call/openai/deployments/my-gpt/chat/completions?api-version=2024-10-21",
        &AZURE_KEY,
        &format!(r#"{{"messages":[{{"role":"user","content":"Weather?"}}],"tools":[{WEATHER_TOOL}]}}"#),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "my-gpt");
    assert_eq!(r.json()["choices"][0]["finish_reason"], "tool_calls");
    // Bodies are validated as Chat's.
    let r = call_with(
        addr,
        "/az/openai/v1/chat/completions",
        &AZURE_KEY,
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"billing":1}"#,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["param"], "billing");
}

#[test]
fn azure_urls_and_keys() {
    let addr = server();
    let denied = serde_json::json!({"error": {"code": "401", "message": "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key for an active subscription and use a correct regional API endpoint for your resource."}});
    let path = "/azk/openai/v1/chat/completions";
    // No key; another key; a bearer token carrying the right key.
    for headers in [
        vec![("Host", "mock")],
        vec![("Host", "mock"), ("api-key", "wrong")],
        vec![("Host", "mock"), ("Authorization", "Bearer mock-azure-key")],
    ] {
        let r = call_with(addr, path, &headers, CHAT);
        assert_eq!((r.status, r.json()), (401, denied.clone()), "{headers:?}");
    }
    let not_found = serde_json::json!({"error": {"code": "404", "message": "Resource not found"}});
    for target in [
        "/azk/openai/deployments/d/chat/completions",
        "/azk/openai/deployments/d/chat/completions?api-version=",
        "/azk/openai/deployments/d/chat/completions?api-version=latest",
    ] {
        let r = call_with(addr, target, &AZURE_KEY, CHAT);
        assert_eq!((r.status, r.json()), (404, not_found.clone()), "{target}");
    }
    let r = call_with(
        addr,
        "/azk/openai/deployments/d/chat/completions?api-version=2025-04-01-preview",
        &AZURE_KEY,
        CHAT,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = call_with(
        addr,
        "/azk/openai/v1/chat/completions?api-version=2024-10-21",
        &AZURE_KEY,
        CHAT,
    );
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["code"], "BadRequest");
    // Every request is counted under its key, refused or not.
    assert_eq!(call(addr, "GET", "/_stats/azk", "").json()["requests"], 8);
}

#[test]
fn azure_content_filter_errors() {
    let addr = server();
    let r = call_with(
        addr,
        "/azf/status/400/content_filter/openai/v1/chat/completions",
        &AZURE_KEY,
        CHAT,
    );
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "content_filter");
    assert!(e["message"].as_str().unwrap().starts_with(
        "The response was filtered due to the prompt triggering Azure OpenAI's content management policy"
    ));
    assert_eq!(e["innererror"]["code"], "ResponsibleAIPolicyViolation");
    // Other errors keep OpenAI's shape.
    let r = call_with(
        addr,
        "/azf/status/429/rate_limit/openai/v1/chat/completions",
        &AZURE_KEY,
        CHAT,
    );
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
}

#[test]
fn an_error_in_its_own_words_and_an_unknown_conversation() {
    let addr = server();
    let r = call(
        addr,
        "POST",
        "/w/status/400/message/Invalid%20request:%20key=sk-abc%20refused/chat/completions",
        r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["message"], "Invalid request: key=sk-abc refused");
    // The mock keeps no conversations: every id is one OpenAI would not find.
    let r = call(addr, "POST", "/c/responses", r#"{"model":"m","input":"hi","conversation":"conv_x"}"#);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.json()["error"]["message"], "Conversation with id 'conv_x' not found.");
    let r = call(addr, "POST", "/c/responses", r#"{"model":"m","input":"hi"}"#);
    assert_eq!(r.status, 200, "{}", r.text());
}
