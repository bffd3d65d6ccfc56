//! The answer translator against every (upstream → client) pair: realistic upstream streams and
//! bodies in, exact client JSON out, and the client dialect's own inspector reading the output as
//! the gateway will (commit point, finish, end, usage, errors).

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::dialects::{chat, gemini, messages, responses, EventInfo, Usage};
use crate::sse::SseParser;

const ALL: [Api; 4] = [Api::Chat, Api::Messages, Api::Responses, Api::Gemini];
const CREATED: u64 = 1_700_000_000;

pub(super) fn ctx(choices: u32) -> AnswerContext {
    AnswerContext {
        id: "gen1".into(),
        model: "client-model".into(),
        created: CREATED,
        choices,
        ..AnswerContext::default()
    }
}

/// Every (upstream, client) pair of different dialects: 12.
pub(super) fn pairs() -> Vec<(Api, Api)> {
    let mut pairs = Vec::new();
    for up in ALL {
        for client in ALL {
            if up != client {
                pairs.push((up, client));
            }
        }
    }
    pairs
}

/// One upstream event of `api` carrying `data` (Messages and Responses name their events).
fn sse(api: Api, data: &Value) -> SseEvent {
    match api {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Messages | Api::Responses => frame(Some(data["type"].as_str().unwrap_or_default()), data).ev,
        Api::Chat | Api::Gemini => SseEvent::from_data(&data.to_string()),
    }
}

fn translate_with(up: Api, client: Api, events: &[SseEvent], choices: u32) -> Vec<SseEvent> {
    let mut t = StreamTranslator::new(up, client, ctx(choices));
    let mut out = Vec::new();
    for e in events {
        out.extend(t.on_event(e));
    }
    out.extend(t.on_end());
    out
}

pub(super) fn translate(up: Api, client: Api, events: &[SseEvent]) -> Vec<SseEvent> {
    translate_with(up, client, events, 1)
}

/// The data of each client event as JSON (`[DONE]` as a string), after checking its framing.
fn datas(client: Api, out: &[SseEvent]) -> Vec<Value> {
    out.iter()
        .map(|ev| {
            let raw = String::from_utf8(ev.raw.clone()).unwrap();
            if ev.data == "[DONE]" {
                assert_eq!(raw, "data: [DONE]\n\n");
                return json!("[DONE]");
            }
            let v: Value = serde_json::from_str(&ev.data).unwrap();
            let expected_raw = match client {
                Api::Converse => unreachable!("Converse has its own tests"),
                Api::Messages | Api::Responses => {
                    format!("event: {}\ndata: {}\n\n", v["type"].as_str().unwrap(), ev.data)
                }
                Api::Chat | Api::Gemini => format!("data: {}\n\n", ev.data),
            };
            assert_eq!(raw, expected_raw, "framing");
            v
        })
        .collect()
}

pub(super) fn inspect(client: Api, ev: &SseEvent) -> EventInfo {
    match client {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => chat::inspect_event(ev),
        Api::Messages => messages::inspect_event(ev),
        Api::Responses => responses::inspect_event(ev),
        Api::Gemini => gemini::inspect_event(ev),
    }
}

/// What the client dialect's inspector reads from a translated stream.
#[derive(Debug, Default)]
struct Observed {
    first_content: Option<usize>,
    finishes: u32,
    finish: Option<FinishReason>,
    done: bool,
    usage: Reported,
    errors: Vec<Value>,
    malformed: usize,
}

fn observe(client: Api, out: &[SseEvent]) -> Observed {
    let mut seen = Observed::default();
    for (i, ev) in out.iter().enumerate() {
        let info = inspect(client, ev);
        if info.content && seen.first_content.is_none() {
            seen.first_content = Some(i);
        }
        if info.finished {
            seen.finishes += info.finishes.max(1);
            seen.finish = info.finish;
        }
        seen.done |= info.done;
        seen.usage.update(info.usage);
        seen.errors.extend(info.error);
        seen.malformed += usize::from(info.malformed);
    }
    seen
}

pub(super) fn as_usage(r: Reported) -> Usage {
    Usage {
        input_tokens: r.input_tokens.unwrap_or(0),
        output_tokens: r.output_tokens.unwrap_or(0),
        cache_read_tokens: r.cache_read_tokens.unwrap_or(0),
        cache_write_tokens: r.cache_write_tokens.unwrap_or(0),
        cache_write_1h_tokens: r.cache_write_1h_tokens.unwrap_or(0),
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream streams, written by hand in each dialect from a script of steps.

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scenario {
    Text,
    Tools,
    Reasoning,
}

#[derive(Debug, Clone)]
enum Step {
    Text(Vec<&'static str>),
    Think(Vec<&'static str>),
    Call {
        id: &'static str,
        name: &'static str,
        frags: Vec<&'static str>,
    },
}

impl Scenario {
    fn steps(self) -> Vec<Step> {
        match self {
            Scenario::Text => vec![Step::Text(vec!["Hello", " world"])],
            Scenario::Tools => vec![
                Step::Call {
                    id: "call_a",
                    name: "get_weather",
                    frags: vec![r#"{"city":"#, r#""Paris"}"#],
                },
                Step::Call {
                    id: "call_b",
                    name: "get_time",
                    frags: vec![r#"{"tz":"#, r#""CET"}"#],
                },
            ],
            Scenario::Reasoning => vec![Step::Think(vec!["Let me", " think."]), Step::Text(vec!["42"])],
        }
    }

    /// The steps as a client sees them from `up`: Gemini sends each call whole.
    fn seen_from(self, up: Api) -> Vec<Step> {
        self.steps()
            .into_iter()
            .map(|step| match (step, up) {
                (Step::Call { id, name, frags }, Api::Gemini) => Step::Call {
                    id,
                    name,
                    frags: vec![Box::leak(frags.concat().into_boxed_str())],
                },
                (step, _) => step,
            })
            .collect()
    }

    fn tools(self) -> bool {
        self == Scenario::Tools
    }
}

/// The usage of every fixture: 100 input tokens of which 40 cached, 20 output of which 5
/// reasoning (where the dialect says it).
pub(super) fn fixture_usage(up: Api) -> Usage {
    let _ = up;
    Usage {
        input_tokens: 100,
        output_tokens: 20,
        cache_read_tokens: 40,
        ..Usage::default()
    }
}

fn fixture_reasoning(up: Api) -> Option<u64> {
    (up != Api::Messages).then_some(5)
}

/// The upstream's text stream up to its first content (a stream committed, then cut).
pub(super) fn until_content(up: Api) -> Vec<SseEvent> {
    let mut events = upstream(up, Scenario::Text);
    let first = events.iter().position(|e| inspect(up, e).content).unwrap();
    events.truncate(first + 1);
    events
}

pub(super) fn upstream(up: Api, scenario: Scenario) -> Vec<SseEvent> {
    let steps = scenario.steps();
    let tools = scenario.tools();
    match up {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => chat_upstream(&steps, tools),
        Api::Messages => messages_upstream(&steps, tools),
        Api::Responses => responses_upstream(&steps),
        Api::Gemini => gemini_upstream(&steps),
    }
}

fn chat_upstream(steps: &[Step], tools: bool) -> Vec<SseEvent> {
    let chunk = |delta: Value, finish: Value| {
        sse(
            Api::Chat,
            &json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 1, "model": "up-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), Value::Null)];
    let mut calls = 0;
    for step in steps {
        match step {
            Step::Text(ds) => out.extend(ds.iter().map(|d| chunk(json!({"content": d}), Value::Null))),
            Step::Think(ds) => out.extend(ds.iter().map(|d| chunk(json!({"reasoning_content": d}), Value::Null))),
            Step::Call { id, name, frags } => {
                out.push(chunk(
                    json!({"tool_calls": [{"index": calls, "id": id, "type": "function",
                                           "function": {"name": name, "arguments": ""}}]}),
                    Value::Null,
                ));
                for f in frags {
                    out.push(chunk(
                        json!({"tool_calls": [{"index": calls, "function": {"arguments": f}}]}),
                        Value::Null,
                    ));
                }
                calls += 1;
            }
        }
    }
    out.push(chunk(json!({}), json!(if tools { "tool_calls" } else { "stop" })));
    out.push(sse(
        Api::Chat,
        &json!({"id": "chatcmpl-up", "object": "chat.completion.chunk", "choices": [],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                          "prompt_tokens_details": {"cached_tokens": 40},
                          "completion_tokens_details": {"reasoning_tokens": 5}}}),
    ));
    out.push(SseEvent::from_data("[DONE]"));
    out
}

/// A step as a Messages content block (as `content_block_start` opens it) and its deltas.
fn messages_block(step: &Step) -> (Value, Vec<Value>) {
    match step {
        Step::Text(ds) => (
            json!({"type": "text", "text": ""}),
            ds.iter().map(|d| json!({"type": "text_delta", "text": d})).collect(),
        ),
        Step::Think(ds) => (
            json!({"type": "thinking", "thinking": "", "signature": ""}),
            ds.iter()
                .map(|d| json!({"type": "thinking_delta", "thinking": d}))
                .collect(),
        ),
        Step::Call { id, name, frags } => (
            json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
            frags
                .iter()
                .map(|f| json!({"type": "input_json_delta", "partial_json": f}))
                .collect(),
        ),
    }
}

fn messages_upstream(steps: &[Step], tools: bool) -> Vec<SseEvent> {
    let ev = |v: Value| sse(Api::Messages, &v);
    let mut out = vec![
        ev(
            json!({"type": "message_start", "message": {"id": "msg_up", "type": "message", "role": "assistant",
            "model": "claude-up", "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 60, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40,
                      "output_tokens": 1}}}),
        ),
        ev(json!({"type": "ping"})),
    ];
    for (index, step) in steps.iter().enumerate() {
        let (block, mut deltas) = messages_block(step);
        if let Step::Think(_) = step {
            deltas.push(json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM"}));
        }
        out.push(ev(
            json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        for delta in deltas {
            out.push(ev(
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out.push(ev(json!({"type": "content_block_stop", "index": index})));
    }
    out.push(ev(json!({"type": "message_delta",
        "delta": {"stop_reason": if tools { "tool_use" } else { "end_turn" }, "stop_sequence": null},
        "usage": {"output_tokens": 20}})));
    out.push(ev(json!({"type": "message_stop"})));
    out
}

fn responses_upstream(steps: &[Step]) -> Vec<SseEvent> {
    let mut seq = 0;
    let mut out = Vec::new();
    let mut ev = |mut v: Value| {
        v["sequence_number"] = json!(seq);
        seq += 1;
        out.push(sse(Api::Responses, &v));
    };
    let response = json!({"id": "resp_up", "object": "response", "status": "in_progress", "model": "gpt-up",
                          "output": []});
    ev(json!({"type": "response.created", "response": response}));
    ev(json!({"type": "response.in_progress", "response": response}));
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::Text(ds) => {
                let id = format!("msg_up{i}");
                ev(json!({"type": "response.output_item.added", "output_index": i,
                          "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}}));
                ev(
                    json!({"type": "response.content_part.added", "item_id": id, "output_index": i, "content_index": 0,
                          "part": {"type": "output_text", "text": "", "annotations": []}}),
                );
                for d in ds {
                    ev(
                        json!({"type": "response.output_text.delta", "item_id": id, "output_index": i,
                              "content_index": 0, "delta": d}),
                    );
                }
                ev(
                    json!({"type": "response.output_text.done", "item_id": id, "output_index": i,
                          "content_index": 0, "text": ds.concat()}),
                );
                ev(json!({"type": "response.output_item.done", "output_index": i,
                          "item": {"id": id, "type": "message", "status": "completed", "role": "assistant",
                                   "content": [{"type": "output_text", "text": ds.concat(), "annotations": []}]}}));
            }
            Step::Think(ds) => {
                let id = format!("rs_up{i}");
                ev(json!({"type": "response.output_item.added", "output_index": i,
                          "item": {"id": id, "type": "reasoning", "summary": []}}));
                for d in ds {
                    ev(
                        json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": i,
                              "summary_index": 0, "delta": d}),
                    );
                }
                ev(json!({"type": "response.output_item.done", "output_index": i,
                          "item": {"id": id, "type": "reasoning",
                                   "summary": [{"type": "summary_text", "text": ds.concat()}]}}));
            }
            Step::Call { id, name, frags } => {
                let item = format!("fc_up{i}");
                ev(json!({"type": "response.output_item.added", "output_index": i,
                          "item": {"id": item, "type": "function_call", "status": "in_progress", "call_id": id,
                                   "name": name, "arguments": ""}}));
                for f in frags {
                    ev(
                        json!({"type": "response.function_call_arguments.delta", "item_id": item, "output_index": i,
                              "delta": f}),
                    );
                }
                ev(
                    json!({"type": "response.function_call_arguments.done", "item_id": item, "output_index": i,
                          "arguments": frags.concat()}),
                );
                ev(json!({"type": "response.output_item.done", "output_index": i,
                          "item": {"id": item, "type": "function_call", "status": "completed", "call_id": id,
                                   "name": name, "arguments": frags.concat()}}));
            }
        }
    }
    ev(
        json!({"type": "response.completed", "response": {"id": "resp_up", "object": "response",
        "status": "completed", "model": "gpt-up", "output": [],
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20,
                  "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 120}}}),
    );
    out
}

fn gemini_upstream(steps: &[Step]) -> Vec<SseEvent> {
    let chunk = |parts: Vec<Value>, last: bool| {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut v = json!({"candidates": [], "modelVersion": "gemini-up", "responseId": "r-up",
                           "usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 40}});
        if last {
            candidate["finishReason"] = json!("STOP");
            v["usageMetadata"] = json!({"promptTokenCount": 100, "cachedContentTokenCount": 40,
                "candidatesTokenCount": 15, "thoughtsTokenCount": 5, "totalTokenCount": 120});
        }
        v["candidates"] = json!([candidate]);
        sse(Api::Gemini, &v)
    };
    let mut out = Vec::new();
    let mut calls = Vec::new();
    for step in steps {
        match step {
            Step::Text(ds) => out.extend(ds.iter().map(|d| chunk(vec![json!({"text": d})], false))),
            Step::Think(ds) => out.extend(
                ds.iter()
                    .map(|d| chunk(vec![json!({"text": d, "thought": true})], false)),
            ),
            Step::Call { id, name, frags } => {
                let args: Value = serde_json::from_str(&frags.concat()).unwrap();
                calls.push(json!({"functionCall": {"id": id, "name": name, "args": args}}));
            }
        }
    }
    // Parallel calls arrive whole, together, in the last chunk.
    out.push(chunk(calls, true));
    out
}

// ---------------------------------------------------------------------------------------------
// What each client must get, exactly.

fn chat_expected(scenario: Scenario, up: Api) -> Vec<Value> {
    let chunk = |choices: Value| {
        json!({"id": "chatcmpl-gen1", "object": "chat.completion.chunk", "created": CREATED,
               "model": "client-model", "choices": choices})
    };
    let delta = |d: Value| chunk(json!([{"index": 0, "delta": d, "logprobs": null, "finish_reason": null}]));
    let mut out = vec![delta(json!({"role": "assistant", "content": ""}))];
    let mut calls = 0;
    for step in scenario.seen_from(up) {
        match step {
            Step::Text(ds) => out.extend(ds.iter().map(|d| delta(json!({"content": d})))),
            Step::Think(ds) => out.extend(ds.iter().map(|d| delta(json!({"reasoning_content": d})))),
            Step::Call { id, name, frags } => {
                out.push(delta(
                    json!({"tool_calls": [{"index": calls, "id": id, "type": "function",
                                                         "function": {"name": name, "arguments": ""}}]}),
                ));
                out.extend(
                    frags
                        .iter()
                        .map(|f| delta(json!({"tool_calls": [{"index": calls, "function": {"arguments": f}}]}))),
                );
                calls += 1;
            }
        }
    }
    let finish = if scenario.tools() { "tool_calls" } else { "stop" };
    out.push(chunk(
        json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": finish}]),
    ));
    let mut usage = chunk(json!([]));
    usage["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
        "prompt_tokens_details": {"cached_tokens": 40},
        "completion_tokens_details": {"reasoning_tokens": fixture_reasoning(up).unwrap_or(0)}});
    out.push(usage);
    out.push(json!("[DONE]"));
    out
}

fn messages_expected(scenario: Scenario, up: Api) -> Vec<Value> {
    let full = json!({"input_tokens": 60, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40});
    // Input not reported yet is written 0: Anthropic's schema requires the count.
    let mut start_usage = if up == Api::Gemini {
        full.clone()
    } else {
        json!({"input_tokens": 0})
    };
    start_usage["output_tokens"] = json!(0);
    let mut out = vec![
        json!({"type": "message_start", "message": {"id": "msg_gen1", "type": "message",
        "role": "assistant", "model": "client-model", "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": start_usage}}),
    ];
    for (index, step) in scenario.seen_from(up).iter().enumerate() {
        let (block, deltas) = messages_block(step);
        out.push(json!({"type": "content_block_start", "index": index, "content_block": block}));
        out.extend(
            deltas
                .into_iter()
                .map(|d| json!({"type": "content_block_delta", "index": index, "delta": d})),
        );
        out.push(json!({"type": "content_block_stop", "index": index}));
    }
    let mut usage = full;
    usage["output_tokens"] = json!(20);
    let reason = if scenario.tools() { "tool_use" } else { "end_turn" };
    out.push(
        json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": null},
                    "usage": usage}),
    );
    out.push(json!({"type": "message_stop"}));
    out
}

/// A Responses output item as the client sees it (`done`: completed, with its text).
fn responses_item(step: &Step, i: usize, done: bool) -> Value {
    let status = if done { "completed" } else { "in_progress" };
    match step {
        Step::Text(ds) => {
            let content = if done {
                json!([{"type": "output_text", "text": ds.concat(), "annotations": [], "logprobs": []}])
            } else {
                json!([])
            };
            json!({"type": "message", "id": format!("msg_gen1_{i}"), "status": status, "role": "assistant",
                   "content": content})
        }
        Step::Think(ds) => {
            let summary = if done {
                json!([{"type": "summary_text", "text": ds.concat()}])
            } else {
                json!([])
            };
            json!({"type": "reasoning", "id": format!("rs_gen1_{i}"), "summary": summary})
        }
        Step::Call { id, name, frags } => {
            json!({"type": "function_call", "id": format!("fc_gen1_{i}"), "status": status, "call_id": id,
                   "name": name, "arguments": if done { frags.concat() } else { String::new() }})
        }
    }
}

/// Responses events at one place `at` (an item's content or summary part): each of a `kind`, with
/// `key: value`.
fn events_at(at: Value) -> impl Fn(&str, &str, Value) -> Value {
    move |kind, key, value| {
        let mut v = at.clone();
        v["type"] = json!(kind);
        v[key] = value;
        v
    }
}

fn responses_expected(scenario: Scenario, up: Api) -> Vec<Value> {
    let mut out = Vec::new();
    let mut ev = |mut v: Value| {
        let seq = out.len();
        v.as_object_mut().unwrap().insert("sequence_number".into(), json!(seq));
        out.push(v);
    };
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": "resp_gen1", "object": "response", "created_at": CREATED, "status": status, "error": null,
               "incomplete_details": null, "instructions": null, "model": "client-model", "output": output,
               "tools": [], "tool_choice": "auto", "parallel_tool_calls": true, "temperature": null, "top_p": null,
               "metadata": null, "usage": usage})
    };
    ev(json!({"type": "response.created", "response": response("in_progress", json!([]), Value::Null)}));
    ev(json!({"type": "response.in_progress", "response": response("in_progress", json!([]), Value::Null)}));
    let steps = scenario.seen_from(up);
    for (i, step) in steps.iter().enumerate() {
        ev(json!({"type": "response.output_item.added", "output_index": i, "item": responses_item(step, i, false)}));
        let item_id = responses_item(step, i, false)["id"].clone();
        match step {
            Step::Text(ds) => {
                let with = events_at(json!({"item_id": item_id, "output_index": i, "content_index": 0}));
                ev(with(
                    "response.content_part.added",
                    "part",
                    json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []}),
                ));
                let logprobs = |mut v: Value| {
                    v["logprobs"] = json!([]);
                    v
                };
                for d in ds {
                    ev(logprobs(with("response.output_text.delta", "delta", json!(d))));
                }
                ev(logprobs(with("response.output_text.done", "text", json!(ds.concat()))));
                ev(with(
                    "response.content_part.done",
                    "part",
                    json!({"type": "output_text", "text": ds.concat(), "annotations": [], "logprobs": []}),
                ));
            }
            Step::Think(ds) => {
                let with = events_at(json!({"item_id": item_id, "output_index": i, "summary_index": 0}));
                ev(with(
                    "response.reasoning_summary_part.added",
                    "part",
                    json!({"type": "summary_text", "text": ""}),
                ));
                for d in ds {
                    ev(with("response.reasoning_summary_text.delta", "delta", json!(d)));
                }
                ev(with("response.reasoning_summary_text.done", "text", json!(ds.concat())));
                ev(with(
                    "response.reasoning_summary_part.done",
                    "part",
                    json!({"type": "summary_text", "text": ds.concat()}),
                ));
            }
            Step::Call { name, frags, .. } => {
                for f in frags {
                    ev(
                        json!({"type": "response.function_call_arguments.delta", "item_id": item_id,
                              "output_index": i, "delta": f}),
                    );
                }
                ev(
                    json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": i,
                          "name": name, "arguments": frags.concat()}),
                );
            }
        }
        ev(json!({"type": "response.output_item.done", "output_index": i, "item": responses_item(step, i, true)}));
    }
    let output: Vec<Value> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| responses_item(s, i, true))
        .collect();
    let usage = json!({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": fixture_reasoning(up).unwrap_or(0)}, "total_tokens": 120});
    ev(json!({"type": "response.completed", "response": response("completed", json!(output), usage)}));
    out
}

fn gemini_expected(scenario: Scenario, up: Api) -> Vec<Value> {
    let chunk = |parts: Value| {
        json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
               "modelVersion": "client-model", "responseId": "gen1"})
    };
    let mut out = Vec::new();
    for step in scenario.seen_from(up) {
        match step {
            Step::Text(ds) => out.extend(ds.iter().map(|d| chunk(json!([{"text": d}])))),
            Step::Think(ds) => out.extend(ds.iter().map(|d| chunk(json!([{"text": d, "thought": true}])))),
            Step::Call { id, name, frags } => {
                let args: Value = serde_json::from_str(&frags.concat()).unwrap();
                out.push(chunk(json!([{"functionCall": {"id": id, "name": name, "args": args}}])));
            }
        }
    }
    let mut usage = json!({"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 20,
                           "totalTokenCount": 120});
    if let Some(r) = fixture_reasoning(up) {
        usage["candidatesTokenCount"] = json!(20 - r);
        usage["thoughtsTokenCount"] = json!(r);
    }
    out.push(
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP",
                                    "index": 0}],
                    "usageMetadata": usage, "modelVersion": "client-model", "responseId": "gen1"}),
    );
    out
}

fn expected(client: Api, scenario: Scenario, up: Api) -> Vec<Value> {
    match client {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => chat_expected(scenario, up),
        Api::Messages => messages_expected(scenario, up),
        Api::Responses => responses_expected(scenario, up),
        Api::Gemini => gemini_expected(scenario, up),
    }
}

/// Where the client's inspector must see the first content (the commit point, SPEC §6): after
/// the role chunk (chat), `message_start` and a text or thinking block start (a `tool_use` start
/// names its tool: content), the lifecycle events and the part's start (Responses), at once
/// (Gemini).
pub(super) fn commit_index(client: Api, scenario: Scenario) -> usize {
    match (client, scenario) {
        (Api::Converse, _) => unreachable!("no client speaks Converse"),
        (Api::Chat, _) => 1,
        (Api::Messages, Scenario::Tools) => 1,
        (Api::Messages, _) => 2,
        (Api::Responses, Scenario::Tools) => 3,
        (Api::Responses, _) => 4,
        (Api::Gemini, _) => 0,
    }
}

fn check_stream(up: Api, client: Api, scenario: Scenario) {
    let out = translate(up, client, &upstream(up, scenario));
    let label = format!("{up:?} → {client:?}, {scenario:?}");
    let got = datas(client, &out);
    let want = expected(client, scenario, up);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{label}: event {i}");
    }
    assert_eq!(got.len(), want.len(), "{label}: {got:#?}");
    // The gateway's reading of the translated stream: the commit point, one finish, the end, the
    // upstream's usage, nothing malformed.
    let seen = observe(client, &out);
    assert_eq!(seen.first_content, Some(commit_index(client, scenario)), "{label}");
    assert_eq!(seen.finishes, 1, "{label}");
    assert_eq!(
        seen.done,
        client != Api::Gemini,
        "{label}: Gemini streams have no sentinel"
    );
    assert_eq!(as_usage(seen.usage), fixture_usage(up), "{label}");
    assert!(seen.errors.is_empty() && seen.malformed == 0, "{label}");
    // Chat's `tool_calls` and Anthropic's `tool_use` read as `Other`; Responses and Gemini end a
    // tool call as any answer.
    let finish = match scenario.tools() && matches!(client, Api::Chat | Api::Messages) {
        true => FinishReason::Other,
        false => FinishReason::Natural,
    };
    assert_eq!(seen.finish, Some(finish), "{label}");
}

#[test]
fn text_streams_of_every_pair() {
    for (up, client) in pairs() {
        check_stream(up, client, Scenario::Text);
    }
}

#[test]
fn two_parallel_tool_calls_in_fragments_of_every_pair() {
    for (up, client) in pairs() {
        check_stream(up, client, Scenario::Tools);
    }
}

#[test]
fn reasoning_streams_of_every_pair() {
    for (up, client) in pairs() {
        check_stream(up, client, Scenario::Reasoning);
    }
}

// ---------------------------------------------------------------------------------------------
// Whole bodies.

fn upstream_body(up: Api) -> Value {
    let weather = r#"{"city":"Paris"}"#;
    let time = r#"{"tz":"CET"}"#;
    match up {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => json!({"id": "chatcmpl-up", "object": "chat.completion", "created": 1, "model": "up",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello",
                "reasoning_content": "Let me think.",
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": weather}},
                    {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": time}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                      "prompt_tokens_details": {"cached_tokens": 40},
                      "completion_tokens_details": {"reasoning_tokens": 5}}}),
        Api::Messages => json!({"id": "msg_up", "type": "message", "role": "assistant", "model": "claude-up",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": "EqQB"},
                {"type": "text", "text": "Hello"},
                {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {"tz": "CET"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 60, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40,
                      "output_tokens": 20}}),
        Api::Responses => json!({"id": "resp_up", "object": "response", "status": "completed", "model": "gpt-up",
            "output": [
                {"id": "rs_1", "type": "reasoning", "summary": [{"type": "summary_text", "text": "Let me think."}]},
                {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]},
                {"id": "fc_1", "type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": weather},
                {"id": "fc_2", "type": "function_call", "call_id": "call_b", "name": "get_time", "arguments": time}],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20,
                      "output_tokens_details": {"reasoning_tokens": 5}, "total_tokens": 120}}),
        Api::Gemini => json!({"candidates": [{"content": {"role": "model", "parts": [
                {"text": "Let me think.", "thought": true},
                {"text": "Hello"},
                {"functionCall": {"id": "call_a", "name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"id": "call_b", "name": "get_time", "args": {"tz": "CET"}}}]},
            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 40, "candidatesTokenCount": 15,
                              "thoughtsTokenCount": 5, "totalTokenCount": 120},
            "modelVersion": "gemini-up", "responseId": "r-up"}),
    }
}

fn body_expected(client: Api, up: Api) -> Value {
    let r = fixture_reasoning(up);
    let weather = r#"{"city":"Paris"}"#;
    let time = r#"{"tz":"CET"}"#;
    match client {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => json!({"id": "chatcmpl-gen1", "object": "chat.completion", "created": CREATED,
            "model": "client-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello",
                "reasoning_content": "Let me think.",
                "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": weather}},
                    {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": time}}]},
                "logprobs": null, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120,
                      "prompt_tokens_details": {"cached_tokens": 40},
                      "completion_tokens_details": {"reasoning_tokens": r.unwrap_or(0)}}}),
        Api::Messages => json!({"id": "msg_gen1", "type": "message", "role": "assistant", "model": "client-model",
            "content": [
                {"type": "thinking", "thinking": "Let me think.", "signature": ""},
                {"type": "text", "text": "Hello"},
                {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_b", "name": "get_time", "input": {"tz": "CET"}}],
            "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 60, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 40,
                      "output_tokens": 20}}),
        Api::Responses => json!({"id": "resp_gen1", "object": "response", "created_at": CREATED,
            "status": "completed", "error": null, "incomplete_details": null, "instructions": null,
            "model": "client-model", "tools": [], "tool_choice": "auto", "parallel_tool_calls": true,
            "temperature": null, "top_p": null, "metadata": null,
            "output": [
                {"type": "reasoning", "id": "rs_gen1_0", "summary": [{"type": "summary_text", "text": "Let me think."}]},
                {"type": "message", "id": "msg_gen1_1", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Hello", "annotations": [], "logprobs": []}]},
                {"type": "function_call", "id": "fc_gen1_2", "status": "completed", "call_id": "call_a",
                 "name": "get_weather", "arguments": weather},
                {"type": "function_call", "id": "fc_gen1_3", "status": "completed", "call_id": "call_b",
                 "name": "get_time", "arguments": time}],
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40}, "output_tokens": 20,
                      "output_tokens_details": {"reasoning_tokens": r.unwrap_or(0)}, "total_tokens": 120}}),
        Api::Gemini => {
            let mut usage = json!({"promptTokenCount": 100, "cachedContentTokenCount": 40,
                                   "candidatesTokenCount": 20, "totalTokenCount": 120});
            if let Some(r) = r {
                usage["candidatesTokenCount"] = json!(20 - r);
                usage["thoughtsTokenCount"] = json!(r);
            }
            json!({"candidates": [{"content": {"role": "model", "parts": [
                    {"text": "Let me think.", "thought": true},
                    {"text": "Hello"},
                    {"functionCall": {"id": "call_a", "name": "get_weather", "args": {"city": "Paris"}}},
                    {"functionCall": {"id": "call_b", "name": "get_time", "args": {"tz": "CET"}}}]},
                "finishReason": "STOP", "index": 0}],
                "usageMetadata": usage, "modelVersion": "client-model", "responseId": "gen1"})
        }
    }
}

#[test]
fn whole_bodies_of_every_pair() {
    for (up, client) in pairs() {
        let label = format!("{up:?} → {client:?}");
        let bytes = body(up, client, upstream_body(up).to_string().as_bytes(), &ctx(1)).unwrap();
        let got: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(got, body_expected(client, up), "{label}");
        // The client dialect's inspector accepts it, with the upstream's usage and finish.
        let info = crate::dialects::inspect_body(client, &bytes, false).unwrap();
        assert_eq!(as_usage(info.usage), fixture_usage(up), "{label}");
        assert!(info.output_chars > 0, "{label}");
    }
}

#[test]
fn bodies_that_are_errors_or_no_answer_keep_their_verdict() {
    use crate::classify::FailureClass;
    let cases = [
        (
            Api::Chat,
            r#"{"error":{"message":"The server is overloaded"}}"#,
            FailureClass::Overloaded,
        ),
        (Api::Chat, r#"{"id":"x"}"#, FailureClass::BadResponse),
        (
            Api::Messages,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#,
            FailureClass::RateLimited,
        ),
        (
            Api::Responses,
            r#"{"status":"failed","output":[],"error":{"code":"rate_limit_exceeded","message":"Rate limit reached"}}"#,
            FailureClass::RateLimited,
        ),
        (
            Api::Gemini,
            r#"{"promptFeedback":{"blockReason":"SAFETY"}}"#,
            FailureClass::ContentPolicy,
        ),
        (Api::Gemini, "<html>", FailureClass::BadResponse),
    ];
    for (up, bytes, class) in cases {
        for client in ALL {
            assert_eq!(
                body(up, client, bytes.as_bytes(), &ctx(1)).unwrap_err().class,
                class,
                "{up:?} {bytes}"
            );
        }
    }
}

#[test]
fn several_choices_reach_chat_and_gemini_clients_and_choice_zero_the_others() {
    let chat_body = json!({"choices": [
        {"index": 0, "message": {"role": "assistant", "content": "A"}, "finish_reason": "stop"},
        {"index": 1, "message": {"role": "assistant", "content": "B"}, "finish_reason": "length"}]});
    let bytes = body(Api::Chat, Api::Gemini, chat_body.to_string().as_bytes(), &ctx(2)).unwrap();
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["candidates"][1]["content"]["parts"], json!([{"text": "B"}]));
    assert_eq!(
        (
            v["candidates"][0]["finishReason"].as_str(),
            v["candidates"][1]["finishReason"].as_str(),
            v["candidates"][1]["index"].as_u64()
        ),
        (Some("STOP"), Some("MAX_TOKENS"), Some(1))
    );
    assert!(v.get("usageMetadata").is_none(), "no usage reported, none written");
    let back = body(Api::Gemini, Api::Chat, &bytes, &ctx(2)).unwrap();
    let v: Value = serde_json::from_slice(&back).unwrap();
    assert_eq!(v["choices"][1]["message"]["content"], "B");
    assert_eq!(v["choices"][1]["finish_reason"], "length");
    let one = body(Api::Chat, Api::Messages, chat_body.to_string().as_bytes(), &ctx(2)).unwrap();
    let v: Value = serde_json::from_slice(&one).unwrap();
    assert_eq!(
        v["content"],
        json!([{"type": "text", "text": "A"}]),
        "a Messages answer is choice 0"
    );
}

#[test]
fn calls_without_an_id_get_one_per_call() {
    let bytes = json!({"candidates": [{"content": {"parts": [
        {"functionCall": {"name": "f", "args": {}}}, {"functionCall": {"name": "g"}}]}, "finishReason": "STOP"}]});
    let events = [sse(Api::Gemini, &bytes)];
    let ids = |client: Api| -> Vec<Value> {
        let out = translate(Api::Gemini, client, &events);
        let mut ids = Vec::new();
        for v in datas(client, &out) {
            for found in [
                v.pointer("/choices/0/delta/tool_calls/0/id"),
                v.pointer("/content_block/id"),
                v.pointer("/item/call_id")
                    .filter(|_| v["type"] == "response.output_item.added"),
            ]
            .into_iter()
            .flatten()
            {
                ids.push(found.clone());
            }
        }
        ids
    };
    assert_eq!(ids(Api::Chat), [json!("call_gen1_0"), json!("call_gen1_1")]);
    assert_eq!(ids(Api::Messages), [json!("toolu_gen1_0"), json!("toolu_gen1_1")]);
    assert_eq!(ids(Api::Responses), [json!("call_gen1_0"), json!("call_gen1_1")]);
    let out = translate(Api::Gemini, Api::Messages, &events);
    let partial: Vec<Value> = datas(Api::Messages, &out)
        .into_iter()
        .filter_map(|v| v.pointer("/delta/partial_json").cloned())
        .collect();
    assert_eq!(
        partial,
        [json!("{}"), json!("{}")],
        "a whole call: one fragment each, `{{}}` for none"
    );
}

// ---------------------------------------------------------------------------------------------
// Usage: the client's inspector reads back what the upstream's read (SPEC §17).

/// A short text stream of `up` reporting `u` (cache writes only where Messages has fields for
/// them) with `reasoning` tokens where the dialect says them.
fn usage_stream(up: Api, u: Usage, reasoning: u64) -> Vec<SseEvent> {
    let ev = |v: Value| sse(up, &v);
    match up {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => vec![
            ev(json!({"choices": [{"index": 0, "delta": {"content": "x"}}]})),
            ev(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            ev(
                json!({"choices": [], "usage": {"prompt_tokens": u.input_tokens, "completion_tokens": u.output_tokens,
                "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
                "completion_tokens_details": {"reasoning_tokens": reasoning}}}),
            ),
            SseEvent::from_data("[DONE]"),
        ],
        Api::Messages => vec![
            ev(
                json!({"type": "message_start", "message": {"usage": {"input_tokens": u.uncached_input_tokens(),
                "cache_read_input_tokens": u.cache_read_tokens,
                "cache_creation_input_tokens": u.cache_write_tokens + u.cache_write_1h_tokens,
                "cache_creation": {"ephemeral_5m_input_tokens": u.cache_write_tokens,
                                   "ephemeral_1h_input_tokens": u.cache_write_1h_tokens},
                "output_tokens": 1}}}),
            ),
            ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "x"}})),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
                      "usage": {"output_tokens": u.output_tokens}})),
            ev(json!({"type": "message_stop"})),
        ],
        Api::Responses => vec![
            ev(json!({"type": "response.output_text.delta", "output_index": 0, "delta": "x"})),
            ev(
                json!({"type": "response.completed", "response": {"status": "completed", "usage": {
                "input_tokens": u.input_tokens, "input_tokens_details": {"cached_tokens": u.cache_read_tokens},
                "output_tokens": u.output_tokens, "output_tokens_details": {"reasoning_tokens": reasoning}}}}),
            ),
        ],
        Api::Gemini => vec![ev(
            json!({"candidates": [{"content": {"parts": [{"text": "x"}]}, "finishReason": "STOP"}],
            "usageMetadata": {"promptTokenCount": u.input_tokens, "cachedContentTokenCount": u.cache_read_tokens,
                "candidatesTokenCount": u.output_tokens - reasoning, "thoughtsTokenCount": reasoning}}),
        )],
    }
}

fn reported(api: Api, events: &[SseEvent]) -> Reported {
    let mut r = Reported::default();
    for ev in events {
        r.update(inspect(api, ev).usage);
    }
    r
}

/// The reasoning tokens a dialect's stream reports, read by this module's reader.
fn reasoning_read(api: Api, events: &[SseEvent]) -> Option<u64> {
    let mut read = reader(api);
    let mut tokens = Tokens::default();
    for ev in events {
        let mut out = Vec::new();
        match ev.json() {
            Some(v) => read.read(&v, crate::dialects::event_kind(&v, ev.event.as_deref()), &mut out),
            None if ev.has_data => read.read_text(ev.data.trim(), &mut out).unwrap(),
            None => {}
        }
        for e in out {
            if let Event::Usage(t) = e {
                tokens.update(t);
            }
        }
    }
    tokens.reasoning
}

fn check_usage_round_trip(u: Usage, reasoning: u64) {
    for (up, client) in pairs() {
        let u = match up {
            Api::Messages => u,
            _ => Usage {
                input_tokens: u.input_tokens,
                output_tokens: u.output_tokens,
                cache_read_tokens: u.cache_read_tokens,
                ..Usage::default()
            },
        };
        let events = usage_stream(up, u, reasoning);
        let upstream_reading = reported(up, &events);
        assert_eq!(as_usage(upstream_reading), u, "{up:?} fixture");
        let mut t = StreamTranslator::new(up, client, ctx(1));
        let mut out = Vec::new();
        for e in &events {
            out.extend(t.on_event(e));
        }
        out.extend(t.on_end());
        assert_eq!(
            t.usage(),
            upstream_reading,
            "{up:?} → {client:?}: the upstream's own reading"
        );
        // Only Messages has fields for cache writes; every other count reads back the same.
        let want = match client {
            Api::Messages => u,
            _ => Usage {
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
                ..u
            },
        };
        assert_eq!(as_usage(reported(client, &out)), want, "{up:?} → {client:?}");
        if up != Api::Messages && client != Api::Messages {
            assert_eq!(
                reasoning_read(client, &out).unwrap_or(0),
                reasoning,
                "{up:?} → {client:?} reasoning"
            );
        }
    }
}

#[test]
fn usage_reads_back_the_same_for_every_pair() {
    check_usage_round_trip(
        Usage {
            input_tokens: 1000,
            output_tokens: 300,
            cache_read_tokens: 600,
            cache_write_tokens: 100,
            cache_write_1h_tokens: 50,
        },
        120,
    );
    check_usage_round_trip(Usage::plain(7, 3), 0);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn usage_round_trips_whatever_the_counts(
        input in 0u64..10_000_000_000, read in 0u64..=100, w5 in 0u64..=100, w1h in 0u64..=100,
        output in 0u64..10_000_000_000, reasoning in 0u64..=100,
    ) {
        // Cache parts never add up to more than the input, reasoning to more than the output.
        let part = |pct: u64, of: u64| of / 300 * pct;
        let u = Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: part(read, input),
            cache_write_tokens: part(w5, input),
            cache_write_1h_tokens: part(w1h, input),
        };
        check_usage_round_trip(u, output / 100 * reasoning);
    }
}

#[test]
fn a_count_not_reported_is_not_written() {
    // A chat stream cut after its text: no usage at all. A Messages client's `message_start`
    // says 0 input tokens (its schema requires a count); the translator reports none, and the
    // relay charges from the translator's report (relay.rs tests), so the input is estimated
    // (SPEC §7), not billed as 0.
    let events = [sse(
        Api::Chat,
        &json!({"choices": [{"index": 0, "delta": {"content": "Hi"}}]}),
    )];
    let mut t = StreamTranslator::new(Api::Chat, Api::Messages, ctx(1));
    let out: Vec<SseEvent> = events.iter().flat_map(|e| t.on_event(e)).collect();
    let start = datas(Api::Messages, &out)[0].clone();
    assert_eq!(
        start["message"]["usage"],
        json!({"input_tokens": 0, "output_tokens": 0})
    );
    assert!(t.usage().is_empty());
}

// ---------------------------------------------------------------------------------------------
// Shapes strict clients validate (SPEC §21): every event a writer writes carries every field its
// dialect's published schema requires — the Vercel AI SDK's zod schemas, typed clients generated
// from OpenAI's OpenAPI document — whatever the upstream said or left out.

/// The paths (dotted; `*` every element of an array) a client event of `client` must have, by
/// its type and the types of what it holds. A present `null` counts: the schemas say which
/// required fields are nullable.
fn required_fields(client: Api, v: &Value) -> Vec<String> {
    let kind = |path: &str| v.pointer(path).and_then(Value::as_str).unwrap_or_default().to_string();
    let mut req: Vec<String> = Vec::new();
    let mut add = |prefix: &str, fields: &[&str]| req.extend(fields.iter().map(|f| format!("{prefix}{f}")));
    // Responses: the `response` object (OpenAPI `Response`'s required list), its usage, its items.
    let response = |add: &mut dyn FnMut(&str, &[&str]), at: &str, r: &Value| {
        #[rustfmt::skip]
        add(at, &["id", "object", "created_at", "status", "error", "incomplete_details", "instructions", "model",
                  "tools", "output", "parallel_tool_calls", "metadata", "tool_choice", "temperature", "top_p"]);
        if r.get("usage").is_some_and(|u| !u.is_null()) {
            #[rustfmt::skip]
            add(&format!("{at}usage."), &["input_tokens", "input_tokens_details.cached_tokens", "output_tokens",
                                          "output_tokens_details.reasoning_tokens", "total_tokens"]);
        }
    };
    let item = |add: &mut dyn FnMut(&str, &[&str]), at: &str, it: &Value| match it["type"].as_str() {
        Some("message") => {
            add(at, &["id", "type", "role", "status", "content"]);
            for (i, _) in it["content"].as_array().into_iter().flatten().enumerate() {
                add(
                    &format!("{at}content.{i}."),
                    &["type", "text", "annotations", "logprobs"],
                );
            }
        }
        Some("function_call") => add(at, &["id", "type", "call_id", "name", "arguments", "status"]),
        Some("reasoning") => add(at, &["id", "type", "summary"]),
        _ => add(at, &["type"]),
    };
    match client {
        Api::Converse => unreachable!("no client speaks Converse"),
        Api::Chat if v.get("error").is_some() => add("", &["error.message"]),
        Api::Chat => {
            add("", &["id", "object", "created", "model", "choices"]);
            add("choices.*.", &["index", "delta", "finish_reason"]);
            if v.pointer("/choices/0/delta/tool_calls").is_some() {
                add("choices.*.delta.tool_calls.*.", &["index"]);
            }
            if v.get("usage").is_some_and(|u| !u.is_null()) {
                add("usage.", &["prompt_tokens", "completion_tokens", "total_tokens"]);
            }
        }
        Api::Messages => match kind("/type").as_str() {
            "message_start" => {
                #[rustfmt::skip]
                add("message.", &["id", "type", "role", "content", "model", "stop_reason", "stop_sequence",
                                  "usage.input_tokens", "usage.output_tokens"]);
            }
            "content_block_start" => {
                add("", &["index", "content_block.type"]);
                match kind("/content_block/type").as_str() {
                    "text" => add("content_block.", &["text"]),
                    "tool_use" => add("content_block.", &["id", "name", "input"]),
                    "thinking" => add("content_block.", &["thinking", "signature"]),
                    _ => {}
                }
            }
            "content_block_delta" => {
                add("", &["index", "delta.type"]);
                match kind("/delta/type").as_str() {
                    "text_delta" => add("delta.", &["text"]),
                    "input_json_delta" => add("delta.", &["partial_json"]),
                    "thinking_delta" => add("delta.", &["thinking"]),
                    _ => {}
                }
            }
            "content_block_stop" => add("", &["index"]),
            "message_delta" => add("", &["delta.stop_reason", "delta.stop_sequence", "usage.output_tokens"]),
            "error" => add("error.", &["type", "message"]),
            _ => {}
        },
        Api::Responses => {
            add("", &["type", "sequence_number"]);
            let t = kind("/type");
            match t.as_str() {
                "response.created"
                | "response.in_progress"
                | "response.completed"
                | "response.incomplete"
                | "response.failed" => {
                    response(&mut add, "response.", &v["response"]);
                    for (i, it) in v["response"]["output"].as_array().into_iter().flatten().enumerate() {
                        item(&mut add, &format!("response.output.{i}."), it);
                    }
                }
                "response.output_item.added" | "response.output_item.done" => {
                    add("", &["output_index", "item"]);
                    item(&mut add, "item.", &v["item"]);
                }
                "response.content_part.added" | "response.content_part.done" => {
                    #[rustfmt::skip]
                    add("", &["item_id", "output_index", "content_index", "part.type", "part.text", "part.annotations",
                              "part.logprobs"]);
                }
                "response.output_text.delta" => {
                    add("", &["item_id", "output_index", "content_index", "delta", "logprobs"]);
                }
                "response.output_text.done" => {
                    add("", &["item_id", "output_index", "content_index", "text", "logprobs"]);
                }
                "response.function_call_arguments.delta" => add("", &["item_id", "output_index", "delta"]),
                "response.function_call_arguments.done" => add("", &["item_id", "output_index", "arguments", "name"]),
                "response.reasoning_summary_part.added" | "response.reasoning_summary_part.done" => {
                    add(
                        "",
                        &["item_id", "output_index", "summary_index", "part.type", "part.text"],
                    );
                }
                "response.reasoning_summary_text.delta" => {
                    add("", &["item_id", "output_index", "summary_index", "delta"]);
                }
                "response.reasoning_summary_text.done" => {
                    add("", &["item_id", "output_index", "summary_index", "text"]);
                }
                "error" => add("", &["code", "message", "param"]),
                other => panic!("a Responses event the table does not know: {other}"),
            }
        }
        // Gemini's schema makes every field optional; a candidate's content holds its parts.
        Api::Gemini => {
            if v.get("candidates").is_some() {
                add("candidates.*.", &["content.parts", "content.role", "index"]);
            }
        }
    }
    req
}

/// The paths of `required` that `v` lacks.
fn missing_fields(v: &Value, required: &[String]) -> Vec<String> {
    fn lacks(v: &Value, path: &[&str], at: String, out: &mut Vec<String>) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        if *first == "*" {
            for (i, each) in v.as_array().into_iter().flatten().enumerate() {
                lacks(each, rest, format!("{at}.{i}"), out);
            }
            return;
        }
        let here = if at.is_empty() {
            first.to_string()
        } else {
            format!("{at}.{first}")
        };
        let next = match v {
            Value::Object(o) => o.get(*first),
            Value::Array(a) => first.parse::<usize>().ok().and_then(|i| a.get(i)),
            _ => None,
        };
        match next {
            Some(next) => lacks(next, rest, here, out),
            None => out.push(here),
        }
    }
    let mut out = Vec::new();
    for path in required {
        let parts: Vec<&str> = path.split('.').collect();
        lacks(v, &parts, String::new(), &mut out);
    }
    out
}

/// Upstream streams that report no usage at all (a provider that leaves it out, `no-usage`).
fn without_usage(up: Api) -> Vec<SseEvent> {
    let ev = |v: Value| sse(up, &v);
    match up {
        Api::Chat => vec![
            ev(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]})),
            ev(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})),
            SseEvent::from_data("[DONE]"),
        ],
        Api::Messages => vec![
            ev(json!({"type": "message_start", "message": {"id": "msg_1", "content": []}})),
            ev(json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            ev(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}})),
            ev(json!({"type": "content_block_stop", "index": 0})),
            ev(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}})),
            ev(json!({"type": "message_stop"})),
        ],
        Api::Responses => vec![
            ev(json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hi"})),
            ev(json!({"type": "response.completed", "response": {"status": "completed"}})),
        ],
        Api::Gemini => vec![ev(
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Hi"}]},
                                                      "finishReason": "STOP", "index": 0}]}),
        )],
        Api::Converse => unreachable!("Converse has its own tests"),
    }
}

#[test]
fn every_event_a_writer_writes_has_the_fields_its_dialects_schema_requires() {
    for (up, client) in pairs() {
        let mut streams: Vec<(String, Vec<SseEvent>)> = [Scenario::Text, Scenario::Tools, Scenario::Reasoning]
            .into_iter()
            .map(|s| (format!("{s:?}"), upstream(up, s)))
            .collect();
        streams.push(("no usage".into(), without_usage(up)));
        streams.push(("output limit".into(), empty_ending(up, true)));
        streams.push(("filtered".into(), empty_ending(up, false)));
        for (label, events) in streams {
            for (i, v) in datas(client, &translate(up, client, &events)).iter().enumerate() {
                if v == "[DONE]" {
                    continue;
                }
                let missing = missing_fields(v, &required_fields(client, v));
                assert!(
                    missing.is_empty(),
                    "{up:?} → {client:?}, {label}, event {i} lacks {missing:?}: {v}"
                );
            }
        }
    }
}

/// A whole upstream answer with no usage at all.
fn body_without_usage(up: Api) -> Value {
    let mut v = upstream_body(up);
    for key in ["usage", "usageMetadata"] {
        v.as_object_mut().unwrap().remove(key);
    }
    v
}

#[test]
fn whole_answers_have_the_fields_their_dialects_schema_requires() {
    // A body is the final event's object: Responses' `response`, Messages' `message` with its
    // usage, Chat's completion.
    for (up, client) in pairs() {
        for (label, upstream) in [("usage", upstream_body(up)), ("no usage", body_without_usage(up))] {
            let answer = body(up, client, upstream.to_string().as_bytes(), &ctx(1)).unwrap();
            let v: Value = serde_json::from_slice(&answer).unwrap();
            let required: Vec<String> = match client {
                Api::Responses => required_fields(client, &json!({"type": "response.completed", "response": v}))
                    .into_iter()
                    .filter_map(|p| p.strip_prefix("response.").map(str::to_string))
                    .collect(),
                #[rustfmt::skip]
                Api::Messages => ["id", "type", "role", "content", "model", "stop_reason", "stop_sequence",
                                  "usage.input_tokens", "usage.output_tokens"].map(String::from).to_vec(),
                #[rustfmt::skip]
                Api::Chat => ["id", "object", "created", "model", "choices", "choices.*.index", "choices.*.message",
                              "choices.*.finish_reason"].map(String::from).to_vec(),
                Api::Gemini => ["candidates.*.content.parts", "candidates.*.content.role"]
                    .map(String::from)
                    .to_vec(),
                Api::Converse => unreachable!("no client speaks Converse"),
            };
            let missing = missing_fields(&v, &required);
            assert!(
                missing.is_empty(),
                "{up:?} → {client:?}, {label}: lacks {missing:?}: {v}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finish reasons.

/// A stream of `up` that ends without output, by the output limit (`limit`) or a filter.
fn empty_ending(up: Api, limit: bool) -> Vec<SseEvent> {
    let ev = |v: Value| sse(up, &v);
    match up {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => vec![
            ev(json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})),
            ev(
                json!({"choices": [{"index": 0, "delta": {}, "finish_reason": if limit { "length" } else { "content_filter" }}]}),
            ),
            SseEvent::from_data("[DONE]"),
        ],
        Api::Messages => vec![
            ev(json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}})),
            ev(
                json!({"type": "message_delta", "delta": {"stop_reason": if limit { "max_tokens" } else { "refusal" }},
                      "usage": {"output_tokens": 0}}),
            ),
            ev(json!({"type": "message_stop"})),
        ],
        Api::Responses => vec![ev(
            json!({"type": "response.incomplete", "response": {"status": "incomplete",
            "incomplete_details": {"reason": if limit { "max_output_tokens" } else { "content_filter" }}}}),
        )],
        Api::Gemini => vec![ev(json!({"candidates": [{"content": {"parts": []},
            "finishReason": if limit { "MAX_TOKENS" } else { "SAFETY" }}]}))],
    }
}

#[test]
fn limits_and_filters_keep_their_meaning_and_explain_an_empty_answer() {
    for (up, client) in pairs() {
        for limit in [true, false] {
            let out = translate(up, client, &empty_ending(up, limit));
            let seen = observe(client, &out);
            let reason = if limit {
                FinishReason::Limit
            } else {
                FinishReason::Filtered
            };
            assert_eq!(seen.finish, Some(reason), "{up:?} → {client:?} limit={limit}");
            assert_eq!(seen.first_content, None, "no content: the finish commits (SPEC §18)");
            let words: Vec<Value> = datas(client, &out)
                .into_iter()
                .filter_map(|v| {
                    [
                        v.pointer("/choices/0/finish_reason").filter(|r| !r.is_null()),
                        v.pointer("/delta/stop_reason"),
                        v.pointer("/response/incomplete_details/reason"),
                        v.pointer("/candidates/0/finishReason"),
                    ]
                    .into_iter()
                    .flatten()
                    .next()
                    .cloned()
                })
                .collect();
            let want = match (client, limit) {
                (Api::Converse, _) => unreachable!("no client speaks Converse"),
                (Api::Chat, true) => "length",
                (Api::Chat, false) => "content_filter",
                (Api::Messages, true) => "max_tokens",
                (Api::Messages, false) => "refusal",
                (Api::Responses, true) => "max_output_tokens",
                (Api::Responses, false) => "content_filter",
                (Api::Gemini, true) => "MAX_TOKENS",
                (Api::Gemini, false) => "SAFETY",
            };
            assert_eq!(words, [json!(want)], "{up:?} → {client:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors: classified in the upstream's dialect, reported in the client's.

pub(super) fn upstream_errors() -> Vec<(Api, SseEvent)> {
    vec![
        (
            Api::Chat,
            sse(
                Api::Chat,
                &json!({"error": {"message": "Rate limit reached for requests",
                                                     "type": "requests", "code": "rate_limit_exceeded"}}),
            ),
        ),
        (
            Api::Messages,
            sse(
                Api::Messages,
                &json!({"type": "error",
            "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ),
        ),
        (
            Api::Responses,
            sse(
                Api::Responses,
                &json!({"type": "error", "code": "insufficient_quota",
            "message": "You exceeded your current quota", "param": null, "sequence_number": 3}),
            ),
        ),
        (
            Api::Responses,
            sse(
                Api::Responses,
                &json!({"type": "response.failed", "response": {"status": "failed",
            "error": {"code": "server_error", "message": "The server had an error while processing your request."}}}),
            ),
        ),
        (
            Api::Gemini,
            sse(
                Api::Gemini,
                &json!({"error": {"code": 429,
            "message": "Resource has been exhausted (e.g. check quota).", "status": "RESOURCE_EXHAUSTED"}}),
            ),
        ),
        (
            Api::Gemini,
            sse(Api::Gemini, &json!({"promptFeedback": {"blockReason": "SAFETY"}})),
        ),
        (Api::Chat, sse(Api::Chat, &json!({"error": "flat"}))),
    ]
}

#[test]
fn an_upstream_error_is_the_same_class_in_the_client_dialect() {
    for (up, error) in upstream_errors() {
        let upstream_payload = inspect(up, &error).error.unwrap();
        let class = classify_error_payload(&upstream_payload).class;
        for client in ALL.into_iter().filter(|c| *c != up) {
            let label = format!("{up:?} → {client:?}: {}", error.data);
            // Before any content: the error alone, no start events before it.
            let out = translate(up, client, std::slice::from_ref(&error));
            assert_eq!(out.len(), 1, "{label}");
            let seen = observe(client, &out);
            assert_eq!(seen.errors.len(), 1, "{label}");
            assert_eq!(classify_error_payload(&seen.errors[0]).class, class, "{label}");
            let v = datas(client, &out).remove(0);
            let message = match client {
                Api::Converse => unreachable!("Converse has its own tests"),
                Api::Chat => {
                    assert!(v["error"].is_object(), "{label}");
                    v.pointer("/error/message")
                }
                Api::Messages => {
                    assert_eq!(v["type"], "error");
                    assert!(v.pointer("/error/type").is_some_and(Value::is_string), "{label}");
                    v.pointer("/error/message")
                }
                Api::Responses => {
                    assert_eq!(
                        (v["type"].as_str(), v["sequence_number"].as_u64()),
                        (Some("response.failed"), Some(0))
                    );
                    assert_eq!(v["response"]["status"], "failed");
                    assert!(v.pointer("/response/error/code").is_some(), "{label}");
                    v.pointer("/response/error/message")
                }
                Api::Gemini => {
                    assert!(
                        v.pointer("/error/code").is_some_and(Value::is_number) || up != Api::Gemini,
                        "{label}"
                    );
                    assert!(v.pointer("/error/status").is_some(), "{label}");
                    v.pointer("/error/message")
                }
            };
            assert!(
                message.and_then(Value::as_str).is_some_and(|m| !m.is_empty()),
                "{label}"
            );
            // Mid-stream: after the text, the error ends the stream; nothing follows it.
            let mut t = StreamTranslator::new(up, client, ctx(1));
            let text = until_content(up);
            let before: Vec<SseEvent> = text.iter().flat_map(|e| t.on_event(e)).collect();
            assert!(observe(client, &before).first_content.is_some(), "{label}");
            let after = t.on_event(&error);
            let seen = observe(client, &after);
            assert_eq!(
                classify_error_payload(seen.errors.last().unwrap()).class,
                class,
                "{label}"
            );
            assert!(
                t.on_event(&text[0]).is_empty() && t.on_end().is_empty(),
                "{label}: closed"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Robustness.

#[test]
fn keepalives_unknown_events_and_unreadable_ones() {
    let comment = SseEvent {
        raw: b": keep-alive\n\n".to_vec(),
        ..SseEvent::default()
    };
    for (up, client) in pairs() {
        let label = format!("{up:?} → {client:?}");
        let mut t = StreamTranslator::new(up, client, ctx(1));
        assert!(t.on_event(&comment).is_empty(), "{label}");
        assert!(t.on_event(&sse(up, &json!({"type": "ping"}))).is_empty(), "{label}");
        assert!(
            t.on_event(&sse(up, &json!({"type": "something.new", "x": [1, 2]})))
                .is_empty(),
            "{label}"
        );
        assert!(t.on_event(&sse(up, &json!([1, "two", null]))).is_empty(), "{label}");
        let bad = SseEvent::from_data("{oops");
        let out = t.on_event(&bad);
        assert_eq!(
            observe(client, &out).malformed,
            1,
            "{label}: the relay drops and counts it"
        );
        let oversize = SseEvent {
            oversize: true,
            ..sse(up, &json!({"type": "message_stop"}))
        };
        assert_eq!(observe(client, &t.on_event(&oversize)).malformed, 1, "{label}");
        assert!(t.on_end().is_empty(), "{label}: never finished, so broken");
    }
}

#[test]
fn a_stream_cut_before_its_finish_gets_no_closing_events() {
    for (up, client) in pairs() {
        let events = until_content(up);
        let mut t = StreamTranslator::new(up, client, ctx(1));
        for e in &events {
            t.on_event(e);
        }
        assert!(
            t.on_end().is_empty(),
            "{up:?} → {client:?}: the relay ends it with the error frame"
        );
    }
}

#[test]
fn a_closed_stream_takes_nothing_more() {
    for (up, client) in pairs() {
        let events = upstream(up, Scenario::Text);
        let mut t = StreamTranslator::new(up, client, ctx(1));
        for e in &events {
            t.on_event(e);
        }
        let closing = t.on_end();
        assert!(
            closing.is_empty() || up == Api::Gemini,
            "{up:?} → {client:?}: closed by the upstream's end"
        );
        assert!(t.on_end().is_empty());
        assert!(t.on_event(&events[0]).is_empty());
    }
}

#[test]
fn several_choices_stream_to_chat_and_gemini_clients() {
    let chunk = |i: u32, delta: Value, finish: Value| {
        sse(
            Api::Chat,
            &json!({"choices": [{"index": i, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let chat = vec![
        chunk(0, json!({"content": "A"}), Value::Null),
        chunk(1, json!({"content": "B"}), Value::Null),
        chunk(7, json!({"content": "not asked for"}), Value::Null),
        chunk(0, json!({}), json!("stop")),
        chunk(1, json!({}), json!("length")),
        SseEvent::from_data("[DONE]"),
    ];
    let out = translate_with(Api::Chat, Api::Gemini, &chat, 2);
    let got = datas(Api::Gemini, &out);
    assert_eq!(got.len(), 3, "{got:#?}");
    assert_eq!(got[1]["candidates"][0]["index"], 1);
    assert_eq!(
        got[2]["candidates"],
        json!([{"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "STOP", "index": 0},
               {"content": {"role": "model", "parts": [{"text": ""}]}, "finishReason": "MAX_TOKENS", "index": 1}])
    );
    assert_eq!(
        observe(Api::Gemini, &out).finishes,
        2,
        "every candidate finished (SPEC §18)"
    );
    // And back: Gemini candidates as chat choices, closed when both finished.
    let gemini = vec![
        sse(
            Api::Gemini,
            &json!({"candidates": [{"content": {"parts": [{"text": "A"}]}, "index": 0},
                                               {"content": {"parts": [{"text": "B"}]}, "index": 1}]}),
        ),
        sse(
            Api::Gemini,
            &json!({"candidates": [{"content": {"parts": []}, "finishReason": "STOP", "index": 0}]}),
        ),
    ];
    let mut t = StreamTranslator::new(Api::Gemini, Api::Chat, ctx(2));
    for e in &gemini {
        t.on_event(e);
    }
    assert!(t.on_end().is_empty(), "one candidate still open: broken");
    let mut t = StreamTranslator::new(Api::Gemini, Api::Chat, ctx(2));
    let mut out = Vec::new();
    for e in &gemini {
        out.extend(t.on_event(e));
    }
    out.extend(t.on_event(&sse(
        Api::Gemini,
        &json!({"candidates": [{"content": {"parts": []}, "finishReason": "STOP", "index": 1}]}),
    )));
    out.extend(t.on_end());
    let got = datas(Api::Chat, &out);
    assert_eq!(
        got[0]["choices"].as_array().map(Vec::len),
        Some(2),
        "a role for each choice"
    );
    let seen = observe(Api::Chat, &out);
    assert_eq!((seen.finishes, seen.done), (2, true));
}

#[test]
fn a_fragment_of_a_call_already_closed_is_dropped_by_dialects_that_stream_blocks_in_order() {
    let call = |i: u32, body: Value| {
        sse(
            Api::Chat,
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": [
        {"index": i, "function": body}]}}]}),
        )
    };
    let start = |i: u32, id: &str| {
        sse(
            Api::Chat,
            &json!({"choices": [{"index": 0, "delta": {"tool_calls": [
            {"index": i, "id": id, "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}),
        )
    };
    let events = [
        start(0, "a"),
        start(1, "b"),
        call(0, json!({"arguments": "{}"})),
        call(1, json!({"arguments": "{}"})),
    ];
    let chat_args: Vec<Value> = datas(Api::Chat, &translate(Api::Chat, Api::Chat, &events))
        .into_iter()
        .filter_map(|v| v.pointer("/choices/0/delta/tool_calls/0/function/arguments").cloned())
        .filter(|a| a != "")
        .collect();
    assert_eq!(chat_args.len(), 2, "chat keeps interleaved calls apart by index");
    let partial: Vec<Value> = datas(Api::Messages, &translate(Api::Chat, Api::Messages, &events))
        .into_iter()
        .filter_map(|v| v.pointer("/delta/partial_json").cloned())
        .collect();
    assert_eq!(partial, [json!("{}")], "only the open block's");
}

/// One arbitrary upstream event of `up` from a small vocabulary: content, calls, finishes,
/// usage, errors, ends, junk, wrong types, huge strings.
fn arbitrary_event(up: Api, kind: u8, text: &str, n: u64) -> SseEvent {
    let big = "x".repeat((n % 3000) as usize);
    let i = n % 3;
    let v = match (up, kind % 9) {
        (_, 0) => return SseEvent::from_data(text),
        (_, 1) => json!({"type": text, "choices": text, "candidates": n, "delta": [text], "index": text}),
        (Api::Chat, 2) => json!({"choices": [{"index": i, "delta": {"content": text, "reasoning_content": text}}]}),
        (Api::Chat, 3) => {
            json!({"choices": [{"index": i, "delta": {"tool_calls": [{"index": i, "id": big, "function": {"name": text, "arguments": text}}]}}]})
        }
        (Api::Chat, 4) => {
            json!({"choices": [{"index": i, "delta": {"tool_calls": [{"index": n, "function": {"arguments": text}}]}}]})
        }
        (Api::Chat, 5) => json!({"choices": [{"index": i, "delta": {}, "finish_reason": text}]}),
        (Api::Chat, 6) => json!({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": n / 2}}),
        (Api::Chat, 7) => return SseEvent::from_data("[DONE]"),
        (Api::Messages, 2) => {
            json!({"type": "content_block_delta", "index": i, "delta": {"text": text, "thinking": text}})
        }
        (Api::Messages, 3) => {
            json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": big, "name": text}})
        }
        (Api::Messages, 4) => json!({"type": "content_block_delta", "index": n, "delta": {"partial_json": text}}),
        (Api::Messages, 5) => {
            json!({"type": "message_delta", "delta": {"stop_reason": text}, "usage": {"output_tokens": n}})
        }
        (Api::Messages, 6) => json!({"type": "message_start", "message": {"usage": {"input_tokens": n}}}),
        (Api::Messages, 7) => json!({"type": "message_stop"}),
        (Api::Responses, 2) => json!({"type": "response.output_text.delta", "delta": text}),
        (Api::Responses, 3) => {
            json!({"type": "response.output_item.added", "output_index": n, "item": {"type": "function_call", "call_id": big, "name": text}})
        }
        (Api::Responses, 4) => {
            json!({"type": "response.function_call_arguments.delta", "output_index": n % 2, "delta": text})
        }
        (Api::Responses, 5) => json!({"type": "response.reasoning_summary_text.delta", "delta": text}),
        (Api::Responses, 6 | 7) => {
            json!({"type": "response.completed", "response": {"status": text, "usage": {"input_tokens": n}}})
        }
        (Api::Gemini, 2) => {
            json!({"candidates": [{"index": i, "content": {"parts": [{"text": text}, {"text": text, "thought": true}]}}]})
        }
        (Api::Gemini, 3) => {
            json!({"candidates": [{"index": i, "content": {"parts": [{"functionCall": {"name": text, "id": big, "args": {"a": text}}}]}}]})
        }
        (Api::Gemini, 4) => {
            json!({"candidates": [{"index": n, "content": {"parts": [{"functionCall": {"name": text, "args": [n]}}]}}]})
        }
        (Api::Gemini, 5 | 7) => {
            json!({"candidates": [{"index": i, "finishReason": text}], "usageMetadata": {"promptTokenCount": n}})
        }
        (Api::Gemini, 6) => json!({"usageMetadata": {"promptTokenCount": text, "candidatesTokenCount": n}}),
        (_, _) => json!({"type": "error", "error": {"message": text}}),
    };
    sse(up, &v)
}

/// The invariants of a client stream: Messages blocks open and close in turn (all closed when the
/// answer ends), Responses sequence numbers count from 0, chat's `[DONE]` comes last.
fn check_invariants(client: Api, out: &[SseEvent]) {
    let mut open: Option<u64> = None;
    let mut sequence = 0;
    for (i, ev) in out.iter().enumerate() {
        let info = inspect(client, ev);
        let Ok(v) = serde_json::from_str::<Value>(&ev.data) else {
            assert!(info.malformed || ev.data == "[DONE]");
            if ev.data == "[DONE]" {
                assert_eq!(i, out.len() - 1, "[DONE] is last");
            }
            continue;
        };
        match client {
            Api::Converse => unreachable!("Converse has its own tests"),
            Api::Messages => match v["type"].as_str().unwrap() {
                "content_block_start" => {
                    assert_eq!(open, None, "a block opens only when none is open");
                    open = v["index"].as_u64();
                }
                "content_block_delta" => assert_eq!(open, v["index"].as_u64(), "a delta of the open block"),
                "content_block_stop" => assert_eq!(open.take(), v["index"].as_u64()),
                "message_delta" | "message_stop" => assert_eq!(open, None, "every block closed at the end"),
                _ => {}
            },
            Api::Responses => {
                assert_eq!(v["sequence_number"].as_u64(), Some(sequence), "{v}");
                sequence += 1;
            }
            Api::Chat | Api::Gemini => {}
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn arbitrary_upstream_events_never_break_a_client_stream(
        events in proptest::collection::vec((any::<u8>(), "[a-z{}\"\\[\\]:, ]{0,12}", any::<u64>()), 0..40),
        choices in 1u32..4,
    ) {
        for (up, client) in pairs() {
            let events: Vec<SseEvent> = events.iter().map(|(k, t, n)| arbitrary_event(up, *k, t, *n)).collect();
            let out = translate_with(up, client, &events, choices);
            check_invariants(client, &out);
        }
    }

    #[test]
    fn splitting_the_upstream_bytes_never_changes_the_client_stream(
        cuts in proptest::collection::vec(any::<usize>(), 0..24),
    ) {
        for (up, client) in pairs() {
            for scenario in [Scenario::Text, Scenario::Tools, Scenario::Reasoning] {
                let bytes: Vec<u8> = upstream(up, scenario).into_iter().flat_map(|e| e.raw).collect();
                let whole = translate_bytes(up, client, &[&bytes]);
                let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
                cuts.sort_unstable();
                let mut pieces = Vec::new();
                let mut from = 0;
                for cut in cuts {
                    pieces.push(&bytes[from..cut]);
                    from = cut;
                }
                pieces.push(&bytes[from..]);
                prop_assert_eq!(translate_bytes(up, client, &pieces), whole.clone());
            }
        }
    }
}

/// The client bytes for upstream bytes arriving in `pieces`.
fn translate_bytes(up: Api, client: Api, pieces: &[&[u8]]) -> Vec<u8> {
    let mut parser = SseParser::new();
    let mut t = StreamTranslator::new(up, client, ctx(1));
    let mut out = Vec::new();
    for piece in pieces {
        let mut events = Vec::new();
        parser.push(piece, &mut events);
        for e in &events {
            out.extend(t.on_event(e).into_iter().flat_map(|e| e.raw));
        }
    }
    if let Some(last) = parser.finish() {
        out.extend(t.on_event(&last).into_iter().flat_map(|e| e.raw));
    }
    out.extend(t.on_end().into_iter().flat_map(|e| e.raw));
    out
}

/// SPEC §21: a call to a tool the client grouped in a Responses `namespace` (flattened for a
/// route of another dialect) comes back with its namespace, whole and streamed; other calls
/// carry none.
#[test]
fn a_call_to_a_flattened_namespace_tool_is_written_back_with_its_namespace() {
    let ctx = AnswerContext {
        namespaces: vec![("get_weather".into(), "places".into())],
        ..ctx(1)
    };
    for up in [Api::Chat, Api::Messages, Api::Gemini] {
        let whole = body(up, Api::Responses, upstream_body(up).to_string().as_bytes(), &ctx).unwrap();
        let v: Value = serde_json::from_slice(&whole).unwrap();
        let calls: Vec<&Value> = v["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "function_call")
            .collect();
        assert_eq!(calls.len(), 2, "{up:?}: {v}");
        assert_eq!(calls[0]["namespace"], "places", "{up:?}: {v}");
        assert!(calls[1].get("namespace").is_none(), "{up:?}: {v}");

        let mut t = StreamTranslator::new(up, Api::Responses, ctx.clone());
        let mut out = Vec::new();
        for e in upstream(up, Scenario::Tools) {
            out.extend(t.on_event(&e));
        }
        out.extend(t.on_end());
        let added: Vec<Value> = out
            .iter()
            .filter(|e| e.event.as_deref() == Some("response.output_item.added"))
            .map(|e| serde_json::from_str::<Value>(&e.data).unwrap()["item"].clone())
            .filter(|i| i["type"] == "function_call")
            .collect();
        assert!(!added.is_empty(), "{up:?}");
        for item in added {
            let expected = (item["name"] == "get_weather").then_some("places");
            assert_eq!(item["namespace"].as_str(), expected, "{up:?}: {item}");
        }
    }
}

/// Issue 32: a translated event carries the JSON its bytes were written from, or what it means
/// (a typed chat or Gemini chunk), so the gate reads it without parsing them — the same value, and
/// the same meaning to the gateway, as parsing the bytes gives; an event written without JSON
/// (`[DONE]`, an unreadable one) says so.
fn check_carried_json(client: Api, out: &[crate::dialects::ClientEvent]) {
    use crate::dialects::{Data, StreamDialect};
    for e in out {
        let parsed = e.ev.json();
        match &e.data {
            Data::Json(v) => assert_eq!(Some(v), parsed.as_ref(), "{client:?}"),
            Data::Known(info) => {
                assert!(parsed.is_some(), "{client:?}: {:?}", e.ev.data);
                assert!(info.usage == Reported::default(), "{client:?}: a usage event keeps its JSON");
            }
            Data::NotJson => assert_eq!(parsed, None, "{client:?}: {:?}", e.ev.data),
            Data::Unread => panic!("{client:?}: a written event is never unread"),
        }
        let mut carried = e.clone();
        assert_eq!(
            carried.inspect(StreamDialect::of(client)),
            inspect(client, &e.ev),
            "{client:?}: {:?}",
            e.ev.data
        );
    }
}

/// Every pair's translation of `events`, as the relay gets it.
fn translate_carried(up: Api, client: Api, events: &[SseEvent], choices: u32) -> Vec<crate::dialects::ClientEvent> {
    let mut t = StreamTranslator::new(up, client, ctx(choices));
    let mut out = Vec::new();
    for e in events {
        t.push(&Upstream::Sse(e.clone()), &mut out);
    }
    t.close(&mut out);
    out
}

#[test]
fn a_translated_event_carries_the_json_its_bytes_say() {
    for (up, client) in pairs() {
        for scenario in [Scenario::Text, Scenario::Tools, Scenario::Reasoning] {
            check_carried_json(client, &translate_carried(up, client, &upstream(up, scenario), 1));
        }
    }
    for (up, error) in upstream_errors() {
        for client in ALL.into_iter().filter(|c| *c != up) {
            let mut events = until_content(up);
            events.push(error.clone());
            check_carried_json(client, &translate_carried(up, client, &events, 1));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn arbitrary_translated_events_carry_the_json_their_bytes_say(
        events in proptest::collection::vec((any::<u8>(), "[a-z{}\"\\[\\]:, ]{0,12}", any::<u64>()), 0..40),
        choices in 1u32..4,
    ) {
        for (up, client) in pairs() {
            let events: Vec<SseEvent> = events.iter().map(|(k, t, n)| arbitrary_event(up, *k, t, *n)).collect();
            check_carried_json(client, &translate_carried(up, client, &events, choices));
        }
    }
}
