//! A client that stops reading a stream (SPEC §7, issue 12): the relay keeps at most a few chunks
//! queued for it and stops reading the upstream meanwhile, instead of buffering the whole answer
//! in the isolate — and, once the client reads again, it gets every byte; unless it stopped for
//! longer than `idle_timeout_ms`: then it is gone (issue 23), and its stream ends.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::io::Read;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, route, sse_events, unique, Stack};

/// 1000 events of 64 KiB each: about 64 MiB, far more than the relay's queue and the buffers
/// between the mock and the client (sockets, `wrangler dev`'s proxy: about 14 MiB here) hold.
const EVENTS: u64 = 1000;
const SCENARIO: &str = "chunks/1000/0/pad/65536";

#[test]
fn a_client_that_stops_reading_stops_the_upstream_and_then_gets_everything() {
    let s = Stack::from_env();
    let label = unique("bp");
    let provider = s.mock_provider(&label, SCENARIO, false);
    let model = s.model(
        vec![route("r0", &provider, "u", json!({}))],
        Some(json!({"stream_cap_ms": 120000, "idle_timeout_ms": 60000})),
    );
    let key = s.new_key(5.0);
    let (_, mut reader) = open_stream(&s, &key, &model);
    let mut seen = vec![0u8; 4096];
    let n = reader.read(&mut seen).unwrap();
    assert!(n > 0);

    // The client reads nothing for 4 s: the upstream must be held back once the buffers are
    // full, not drained into the isolate.
    std::thread::sleep(Duration::from_secs(3));
    let written = s.mock_stats(&label, SCENARIO)["stream_events"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let later = s.mock_stats(&label, SCENARIO)["stream_events"].as_u64().unwrap();
    eprintln!("events written while the client did not read: {written} at 3 s, {later} at 4 s");
    assert!(
        later < EVENTS / 2 && later == written,
        "the upstream was read on while the client read nothing: {written} then {later} of {EVENTS} events"
    );

    // Reading again, the client gets the whole answer.
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    let text = String::from_utf8_lossy(&seen[..n]).into_owned() + &String::from_utf8_lossy(&rest);
    let padding = "x".repeat(65536);
    let content = sse_events(&text)
        .iter()
        .filter_map(|(_, data)| serde_json::from_str::<Value>(data).ok())
        .filter(|e| {
            e["choices"][0]["delta"]["content"]
                .as_str()
                .is_some_and(|c| c.ends_with(&padding))
        })
        .count() as u64;
    assert_eq!(content, EVENTS, "every content event arrived");
    assert!(
        text.trim_end().ends_with("data: [DONE]"),
        "{}",
        &text[text.len().saturating_sub(300)..]
    );
}

/// A client that stops reading for longer than `idle_timeout_ms` is gone (issue 23, item 9), even
/// though nothing signalled its departure: the upstream is aborted after the disconnect grace, the
/// generation is recorded and the hold settled while the client still reads nothing, and when it
/// reads again its stream ends — it never hangs.
#[test]
fn a_client_that_stops_reading_past_the_idle_timeout_is_let_go_and_its_stream_ends() {
    let s = Stack::from_env();
    let label = unique("stall");
    let provider = s.mock_provider(&label, SCENARIO, false);
    let model = s.model(
        vec![route("r0", &provider, "u", json!({}))],
        Some(json!({"stream_cap_ms": 120000, "idle_timeout_ms": 2000, "disconnect_grace_ms": 0})),
    );
    let key = s.new_key(5.0);
    let (gen, mut reader) = open_stream(&s, &key, &model);
    let mut first = vec![0u8; 4096];
    assert!(reader.read(&mut first).unwrap() > 0);

    // The client reads nothing from here on. Within a few idle windows the request is over.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let g = loop {
        let g = s.generation_if_any(&key, &gen);
        if let Some(g) = g.filter(|g| g["outcome"] == "broken") {
            break g;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a client that stopped reading kept its request open past 20 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let delivered = g["delivered_output"].as_u64().unwrap();
    assert!(delivered > 0, "charged for what was delivered: {g}");
    assert_eq!(g["attempts"][0]["message"], "the client disconnected", "{g}");
    let c = s.credits(&key);
    assert_eq!(
        c["held_micros"], 0,
        "the hold is settled while the client still reads nothing: {c}"
    );
    let written = s.mock_stats(&label, SCENARIO)["stream_events"].as_u64().unwrap();
    assert!(
        written < EVENTS,
        "the upstream was aborted: {written} of {EVENTS} events written"
    );

    // Reading again, the client gets what was queued and then the end of the stream, not a hang.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut rest = Vec::new();
        let r = reader.read_to_end(&mut rest);
        let _ = tx.send((r.is_ok(), rest.len()));
    });
    let (_, got) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the stream of a client let go must end, not hang");
    assert!(
        (got as u64) < EVENTS * 65536,
        "the stream was cut, not delivered whole: {got} bytes"
    );
}

/// A chat stream of `model` for `key`, answered 200: its generation id and its body, unread.
fn open_stream(s: &Stack, key: &str, model: &str) -> (String, impl Read + Send + 'static) {
    let agent = ureq::Agent::new_with_config(ureq::Agent::config_builder().http_status_as_error(false).build());
    let response = agent
        .post(format!("{}/v1/chat/completions", s.gateway))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .send(chat_body(model, true).to_string())
        .expect("stream request");
    assert_eq!(response.status().as_u16(), 200);
    let gen = response
        .headers()
        .get("x-generation-id")
        .and_then(|v| v.to_str().ok())
        .expect("x-generation-id")
        .to_string();
    (gen, response.into_body().into_reader())
}
