//! What one stream costs the core from the upstream's bytes to the client's (issue 32: each
//! event decoded once): the framing, the translator, the gate until the first content and the
//! relay after it, as the Worker drives them (`src/upstream.rs`, `src/relay.rs`), over streams of
//! [`EVENTS`] events — a Bedrock InvokeModel stream translated to chat and relayed to a Messages
//! client as it is, a ConverseStream translated to Messages, an Anthropic SSE stream translated to
//! chat, and a native chat stream. Figures, not assertions: an ignored test, run in release
//! (`cargo test --release -p switchyard-bench stream_bench -- --ignored --nocapture`); it uses
//! only the core API the Worker uses, so the same file measures an older commit the same way.

use std::time::Instant;

use serde_json::{json, Value};

use switchyard_core::api::Api;
use switchyard_core::catalog::Price;
use switchyard_core::dialects::neutral::answer::{AnswerContext, StreamTranslator};
use switchyard_core::dialects::StreamDialect;
use switchyard_core::generation::{Tariff, UsageLimits};
use switchyard_core::providers::bedrock::eventstream::encode;
use switchyard_core::redact::Redactor;
use switchyard_core::relay::{After, Before, Framing, Gate, Incoming};

/// Events per stream (a short answer of about sixty text deltas).
const EVENTS: usize = 66;
/// Bytes per upstream read, about what a network read hands the Worker for these streams.
const READ: usize = 1024;

/// One text delta's words.
fn word(i: usize) -> String {
    format!(" word{i} and more")
}

/// An Anthropic Messages stream of [`EVENTS`] events, as JSON.
fn anthropic() -> Vec<Value> {
    let mut events = vec![
        json!({"type": "message_start", "message": {"id": "msg_01", "type": "message", "role": "assistant",
               "model": "claude-x", "content": [], "stop_reason": null, "stop_sequence": null,
               "usage": {"input_tokens": 120, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ];
    for i in 0..EVENTS - 5 {
        events.push(json!({"type": "content_block_delta", "index": 0,
                           "delta": {"type": "text_delta", "text": word(i)}}));
    }
    events.push(json!({"type": "content_block_stop", "index": 0}));
    events.push(
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                       "usage": {"output_tokens": 90}}),
    );
    events.push(json!({"type": "message_stop"}));
    events
}

/// A ConverseStream of [`EVENTS`] events: (`:event-type`, payload).
fn converse() -> Vec<(&'static str, Value)> {
    let mut events = vec![("messageStart", json!({"role": "assistant"}))];
    for i in 0..EVENTS - 4 {
        events.push((
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": word(i)}}),
        ));
    }
    events.push(("contentBlockStop", json!({"contentBlockIndex": 0})));
    events.push(("messageStop", json!({"stopReason": "end_turn"})));
    events.push((
        "metadata",
        json!({"usage": {"inputTokens": 120, "outputTokens": 90, "totalTokens": 210}, "metrics": {"latencyMs": 800}}),
    ));
    events
}

/// A chat stream of [`EVENTS`] events, `[DONE]` last, the usage chunk before it.
fn chat_sse() -> Vec<u8> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
               "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]})
    };
    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    for i in 0..EVENTS - 4 {
        events.push(chunk(json!({"content": word(i)}), Value::Null));
    }
    events.push(chunk(json!({}), json!("stop")));
    events.push(
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-x",
                       "choices": [], "usage": {"prompt_tokens": 120, "completion_tokens": 90, "total_tokens": 210}}),
    );
    let mut bytes: Vec<u8> = events
        .iter()
        .flat_map(|e| format!("data: {e}\n\n").into_bytes())
        .collect();
    bytes.extend_from_slice(b"data: [DONE]\n\n");
    bytes
}

/// The Anthropic stream as Anthropic's SSE.
fn anthropic_sse() -> Vec<u8> {
    anthropic()
        .iter()
        .flat_map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or_default()).into_bytes())
        .collect()
}

/// The Anthropic stream as Bedrock's InvokeModelWithResponseStream frames (base64 in `bytes`).
fn invoke_frames() -> Vec<u8> {
    anthropic()
        .iter()
        .flat_map(|e| {
            let payload = json!({"bytes": base64(e.to_string().as_bytes()), "p": "abcdefghij"}).to_string();
            encode(
                &[
                    (":event-type", "chunk"),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                payload.as_bytes(),
            )
        })
        .collect()
}

/// The ConverseStream as Bedrock's frames.
fn converse_frames() -> Vec<u8> {
    converse()
        .iter()
        .flat_map(|(kind, payload)| {
            encode(
                &[
                    (":event-type", kind),
                    (":content-type", "application/json"),
                    (":message-type", "event"),
                ],
                payload.to_string().as_bytes(),
            )
        })
        .collect()
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(match i <= group.len() {
                true => char::from(ABC[(n >> (18 - 6 * i) & 63) as usize]),
                false => '=',
            });
        }
    }
    out
}

/// One case: a label, the upstream's framing and dialect, the client's dialect, the bytes.
struct Case {
    label: &'static str,
    framing: Framing,
    upstream: Api,
    client: Api,
    bytes: Vec<u8>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            label: "Bedrock InvokeModel → chat client (translated)",
            framing: Framing::BedrockEventStream,
            upstream: Api::Messages,
            client: Api::Chat,
            bytes: invoke_frames(),
        },
        Case {
            label: "Bedrock InvokeModel → Messages client (as it is)",
            framing: Framing::BedrockEventStream,
            upstream: Api::Messages,
            client: Api::Messages,
            bytes: invoke_frames(),
        },
        Case {
            label: "Bedrock ConverseStream → Messages client (translated)",
            framing: Framing::ConverseEventStream,
            upstream: Api::Converse,
            client: Api::Messages,
            bytes: converse_frames(),
        },
        Case {
            label: "Anthropic SSE → chat client (translated)",
            framing: Framing::Sse,
            upstream: Api::Messages,
            client: Api::Chat,
            bytes: anthropic_sse(),
        },
        Case {
            label: "chat SSE → Responses client (translated)",
            framing: Framing::Sse,
            upstream: Api::Chat,
            client: Api::Responses,
            bytes: chat_sse(),
        },
        Case {
            label: "chat SSE → Gemini client (translated)",
            framing: Framing::Sse,
            upstream: Api::Chat,
            client: Api::Gemini,
            bytes: chat_sse(),
        },
        Case {
            label: "chat SSE → chat client (native)",
            framing: Framing::Sse,
            upstream: Api::Chat,
            client: Api::Chat,
            bytes: chat_sse(),
        },
    ]
}

fn tariff() -> Tariff {
    Tariff {
        price: Price::per_mtok(3.0, 15.0),
        held_micros: Some(10_000_000),
        limits: UsageLimits {
            max_tokens: 4096,
            max_input_tokens: 100_000,
            body_len: 500,
        },
        tools: Default::default(),
    }
}

/// The client's bytes for one stream, as the Worker's driver produces them: reads of [`READ`]
/// bytes through the framing (and translator), the gate until it commits, then the relay (priced,
/// the usage chunk asked for).
fn run(case: &Case) -> Vec<u8> {
    let translator = (case.upstream != case.client).then(|| {
        let ctx = AnswerContext {
            id: "gen-1".into(),
            model: "client-model".into(),
            created: 1,
            choices: 1,
            ..AnswerContext::default()
        };
        StreamTranslator::new(case.upstream, case.client, ctx)
    });
    let dialect = StreamDialect::of(case.client);
    let mut incoming = Incoming::new(case.framing, translator);
    let mut gate = Some(Gate::new(dialect, true, false, 1, Redactor::default()));
    let mut relay: Option<switchyard_core::relay::Relay> = None;
    let mut sent = Vec::new();
    let mut events = Vec::new();
    let reads: Vec<&[u8]> = case.bytes.chunks(READ).collect();
    for at in 0..=reads.len() {
        match reads.get(at) {
            Some(read) => incoming.push(read, &mut events),
            None => incoming.close(&mut events),
        }
        if let Some(usage) = incoming.upstream_usage() {
            match (&mut gate, &mut relay) {
                (Some(g), _) => g.note_upstream_usage(usage),
                (None, Some(r)) => r.note_upstream_usage(usage),
                _ => {}
            }
        }
        for ev in events.drain(..) {
            if let Some(g) = &mut gate {
                match g.on_event(ev) {
                    Before::Hold => {}
                    Before::Commit(head) => {
                        sent.extend(head);
                        let mut r = gate.take().map(Gate::into_relay);
                        if let Some(r) = &mut r {
                            r.price_with(tariff());
                        }
                        relay = r;
                    }
                    Before::Fail(v) => panic!("{}: {v:?}", case.label),
                }
            } else if let Some(r) = &mut relay {
                match r.on_event(ev) {
                    After::Send(bytes) => sent.extend(bytes),
                    After::Skip => {}
                    After::End { bytes, .. } => {
                        sent.extend(bytes);
                        return sent;
                    }
                }
            }
        }
    }
    // The upstream closed without its end sentinel.
    if let Some(After::End { bytes, .. }) = relay.as_mut().map(|r| r.on_close()) {
        sent.extend(bytes);
    }
    sent
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// The benchmark rows: per case, the median and p99 of one whole stream in µs, and the median per
/// event in ns. `STREAM_BENCH_RUNS` (default 3000) streams per case after a warm-up of 300.
#[test]
#[ignore]
fn stream_bench() {
    let runs: usize = std::env::var("STREAM_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    println!("| stream ({EVENTS} events) | client bytes | median µs/stream | p99 µs/stream | median ns/event |");
    println!("|---|---|---|---|---|");
    // `STREAM_BENCH_DUMP=DIR`: each case's client bytes into DIR/<case number>, to compare builds.
    let dump = std::env::var("STREAM_BENCH_DUMP").ok();
    // `STREAM_BENCH_ONLY=TEXT`: only the cases whose label contains TEXT.
    let only = std::env::var("STREAM_BENCH_ONLY").unwrap_or_default();
    for (n, case) in cases().into_iter().enumerate() {
        if !case.label.contains(&only) {
            continue;
        }
        let out = run(&case);
        if let Some(dir) = &dump {
            std::fs::write(format!("{dir}/{n}"), &out).expect("the dump directory is writable");
        }
        assert!(
            out.windows(4).any(|w| w == b"word"),
            "{}: no text reached the client",
            case.label
        );
        assert!(
            // Gemini's chunks have no field for it.
            case.client == Api::Gemini || String::from_utf8_lossy(&out).contains("\"cost\":"),
            "{}: the final usage event carries the charge",
            case.label
        );
        for _ in 0..300 {
            std::hint::black_box(run(&case));
        }
        let mut times: Vec<f64> = (0..runs)
            .map(|_| {
                let start = Instant::now();
                std::hint::black_box(run(&case));
                start.elapsed().as_secs_f64() * 1e6
            })
            .collect();
        times.sort_by(f64::total_cmp);
        let median = percentile(&times, 0.5);
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.0} |",
            case.label,
            out.len(),
            median,
            percentile(&times, 0.99),
            median * 1000.0 / EVENTS as f64
        );
    }
}
