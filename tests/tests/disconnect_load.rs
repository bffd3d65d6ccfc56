//! Many clients leaving mid-stream at once (SPEC §7, §11). Its own test binary: under
//! `wrangler dev`, tearing down many requests at once makes the isolate's shared Wasm executor
//! poll other requests' relays where no I/O is allowed (see `src/clock.rs`, `in_request`), which
//! would disturb unrelated tests running beside it — cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use switchyard_e2e::{chat_body, route, unique, Stack};

/// Clients leaving mid-stream, 16 at a time. Under `wrangler dev` some of these relays are polled
/// after the runtime tore their request down (see `clock::in_request`): they cannot settle, and
/// their holds stay open for the cron sweep. What must hold regardless: the Worker keeps
/// answering, and the books stay consistent — balance = credits − Σ charges, held = Σ open holds.
#[test]
fn concurrent_disconnects_keep_the_ledger_consistent() {
    let s = Arc::new(Stack::from_env());
    let provider = s.mock_provider(&unique("l"), "chunks/30/20", false);
    let model = s.model(
        vec![route("r0", &provider, "u", json!({}))],
        Some(json!({"disconnect_grace_ms": 300, "idle_timeout_ms": 2000})),
    );
    let key = Arc::new(s.new_key(10.0));
    let mut threads = Vec::new();
    for _ in 0..16 {
        let (s, key, model) = (s.clone(), key.clone(), model.clone());
        threads.push(std::thread::spawn(move || {
            for _ in 0..4 {
                s.chat_stream_then_leave(&key, &chat_body(&model, true), "data: ");
            }
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    std::thread::sleep(Duration::from_secs(2));
    let r = s.chat(&key, &chat_body(&model, false));
    assert_eq!(r.status, 200, "the Worker still answers: {}", r.text());
    let c = s.credits(&key);
    let (balance, held) = (
        c["balance_micros"].as_i64().unwrap(),
        c["held_micros"].as_i64().unwrap(),
    );
    assert_eq!(
        balance,
        c["credits_total_micros"].as_i64().unwrap() - c["charges_total_micros"].as_i64().unwrap()
    );
    assert_eq!(held, c["open_holds_micros"].as_i64().unwrap(), "held = Σ open holds");
    eprintln!("disconnects: 64 clients left mid-stream; {held} µ$ still held for the sweep");
}
