//! Anthropic Messages answers in translation: stream events and `message` bodies read into
//! neutral events, and neutral events written as them.
//!
//! A stream is `message_start` (written when the first block opens or the answer ends, so that
//! it carries the input tokens when the upstream has said them by then), then blocks one after
//! another — each opened by `content_block_start` (`text`, `thinking`, or `tool_use` with its id
//! and name), its deltas (`text_delta`, `thinking_delta`, `input_json_delta`), and closed by
//! `content_block_stop` before the next opens — then `message_delta` with the stop reason and
//! the usage, and `message_stop`.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::classify::Verdict;
use crate::dialects::messages::{finish_reason, usage_of};
use crate::dialects::neutral::answer::{
    arguments_object, ended_for_tools, index_at, text_at, Answer, AnswerContext, AnswerReader, AnswerWriter, Choice,
    Event, Part, Tokens, UpstreamError,
};
use crate::dialects::{ClientEvent, FinishReason, Reported};

/// Reads a Messages upstream's events.
#[derive(Debug, Default)]
pub(crate) struct Reader;

impl AnswerReader for Reader {
    fn read(&mut self, v: &Value, kind: &str, out: &mut Vec<Event>) {
        let block = index_at(v, "/index");
        match kind {
            "error" => out.push(Event::Error(UpstreamError::from_payload(v))),
            "message_start" => {
                // Its output count is a placeholder; the real one comes with `message_delta`.
                let counts = Reported {
                    output_tokens: None,
                    ..usage_of(v.pointer("/message/usage"))
                };
                out.push(Event::Usage(Tokens {
                    counts,
                    reasoning: None,
                }));
            }
            "content_block_start" => {
                if let (Some(call), Some(b)) = (block, v.get("content_block")) {
                    start_block(b, call, out);
                }
            }
            "content_block_delta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                if let Some(text) = text_at(delta, "/text") {
                    Part::Text(text.to_string()).into_events(0, 0, out);
                }
                if let Some(text) = text_at(delta, "/thinking") {
                    Part::Reasoning(text.to_string()).into_events(0, 0, out);
                }
                if let (Some(call), Some(fragment)) = (block, text_at(delta, "/partial_json")) {
                    out.push(Event::ToolArgs {
                        choice: 0,
                        call,
                        fragment: fragment.to_string(),
                    });
                }
            }
            "message_delta" => {
                if let Some(reason) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    out.push(Event::Finish {
                        choice: 0,
                        reason: finish_reason(reason),
                    });
                }
                if v.get("usage").is_some_and(Value::is_object) {
                    out.push(Event::Usage(Tokens {
                        counts: usage_of(v.get("usage")),
                        reasoning: None,
                    }));
                }
            }
            "message_stop" => out.push(Event::End),
            _ => {} // ping, content_block_stop, unknown events
        }
    }
}

/// The events of a `content_block_start` (numbered `call` if it is a tool call): its text, its
/// thinking, or a tool call (with its input, when a provider sends it whole here).
fn start_block(b: &Value, call: u32, out: &mut Vec<Event>) {
    match block_part(b) {
        Some(Part::Call { id, name, arguments }) => {
            out.push(Event::ToolStart {
                choice: 0,
                call,
                id,
                name,
            });
            if arguments != "{}" {
                out.push(Event::ToolArgs {
                    choice: 0,
                    call,
                    fragment: arguments,
                });
            }
        }
        Some(part) => part.into_events(0, call, out),
        None => {}
    }
}

/// A content block as a part: text, thinking, a tool use; `None` for empty or other blocks.
fn block_part(b: &Value) -> Option<Part> {
    match b.get("type").and_then(Value::as_str)? {
        "text" => text_at(b, "/text").map(|t| Part::Text(t.to_string())),
        "thinking" => text_at(b, "/thinking").map(|t| Part::Reasoning(t.to_string())),
        "tool_use" => Some(Part::Call {
            id: text_at(b, "/id").unwrap_or_default().to_string(),
            name: text_at(b, "/name").unwrap_or_default().to_string(),
            arguments: match b.get("input") {
                Some(input @ Value::Object(_)) => input.to_string(),
                _ => "{}".to_string(),
            },
        }),
        _ => None,
    }
}

/// A whole Messages answer: its blocks, stop reason and usage.
pub(crate) fn read_body(v: &Value) -> Result<Answer, Verdict> {
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no content"))?;
    let choice = Choice {
        parts: blocks.iter().filter_map(block_part).collect(),
        finish: v.get("stop_reason").and_then(Value::as_str).map(finish_reason),
    };
    Ok(Answer {
        choices: vec![choice],
        usage: Tokens {
            counts: usage_of(v.get("usage")),
            reasoning: None,
        },
    })
}

/// The `stop_reason` for how the answer ended (`tools`: it called one).
fn stop_reason(reason: FinishReason, tools: bool) -> &'static str {
    match reason {
        _ if ended_for_tools(reason, tools) => "tool_use",
        FinishReason::StopSequence => "stop_sequence",
        FinishReason::Limit => "max_tokens",
        FinishReason::Filtered => "refusal",
        FinishReason::Natural | FinishReason::Other => "end_turn",
    }
}

/// A Messages usage object (SPEC §17): `input_tokens` is the uncached input only, beside the
/// cache reads and writes; only what the upstream reported.
#[derive(Debug, Default, Serialize)]
struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_read_input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cache_creation: Option<CacheCreation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_tokens: Option<u64>,
}

#[derive(Debug, Serialize)]
struct CacheCreation {
    ephemeral_5m_input_tokens: u64,
    ephemeral_1h_input_tokens: u64,
}

fn usage(t: &Tokens) -> Usage {
    let c = &t.counts;
    let input = c.input_tokens.map(|_| {
        let one_hour = c.cache_write_1h_tokens.unwrap_or(0);
        let split = (one_hour > 0).then(|| CacheCreation {
            ephemeral_5m_input_tokens: c.cache_write_tokens.unwrap_or(0),
            ephemeral_1h_input_tokens: one_hour,
        });
        let uncached = crate::dialects::Usage {
            input_tokens: c.input_tokens.unwrap_or(0),
            cache_read_tokens: c.cache_read_tokens.unwrap_or(0),
            cache_write_tokens: c.cache_write_tokens.unwrap_or(0),
            cache_write_1h_tokens: one_hour,
            output_tokens: 0,
        }
        .uncached_input_tokens();
        (uncached, t.cache_writes(), c.cache_read_tokens.unwrap_or(0), split)
    });
    match input {
        Some((uncached, writes, reads, split)) => Usage {
            input_tokens: Some(uncached),
            cache_creation_input_tokens: Some(writes),
            cache_read_input_tokens: Some(reads),
            cache_creation: split,
            output_tokens: c.output_tokens,
        },
        None => Usage {
            output_tokens: c.output_tokens,
            ..Usage::default()
        },
    }
}

/// `message_delta`'s usage: the output count always present (the schema requires it; 0 when the
/// upstream never said it — the gateway charges from the translator's own report, not this).
fn delta_usage(t: &Tokens) -> Usage {
    let known = usage(t);
    Usage {
        output_tokens: Some(known.output_tokens.unwrap_or(0)),
        ..known
    }
}

/// A whole message's usage: both counts always present (0 when the upstream never said one — the
/// gateway charges from the upstream's own body, not this).
fn body_usage(t: &Tokens) -> Usage {
    let known = usage(t);
    Usage {
        input_tokens: Some(known.input_tokens.unwrap_or(0)),
        output_tokens: Some(known.output_tokens.unwrap_or(0)),
        ..known
    }
}

/// `message_start`'s usage: what the upstream said so far, both counts always present.
fn start_usage(t: &Tokens) -> Usage {
    let known = usage(t);
    Usage {
        input_tokens: Some(known.input_tokens.unwrap_or(0)),
        output_tokens: Some(0),
        ..known
    }
}

/// A content block as `content_block_start` opens it and a body carries it.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text { text: &'a str },
    Thinking { thinking: &'a str, signature: &'a str },
    ToolUse { id: String, name: &'a str, input: Value },
}

/// The block open in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text,
    Thinking,
    /// A tool call, by its upstream number.
    Tool(u32),
}

/// Writes neutral events as Messages stream events.
#[derive(Debug)]
pub(crate) struct Writer {
    ctx: AnswerContext,
    started: bool,
    /// The open block and its index.
    open: Option<(Open, u32)>,
    next_block: u32,
    tools: bool,
    usage: Tokens,
    finish: Option<FinishReason>,
}

impl Writer {
    pub(crate) fn new(ctx: AnswerContext) -> Writer {
        Writer {
            ctx,
            started: false,
            open: None,
            next_block: 0,
            tools: false,
            usage: Tokens::default(),
            finish: None,
        }
    }

    fn event(out: &mut Vec<ClientEvent>, kind: &str, fields: Value) {
        let mut data = Map::new();
        data.insert("type".into(), Value::from(kind));
        if let Value::Object(fields) = fields {
            data.extend(fields);
        }
        out.push(ClientEvent::written(Some(kind), Value::Object(data)));
    }

    fn start(&mut self, out: &mut Vec<ClientEvent>) {
        if std::mem::replace(&mut self.started, true) {
            return;
        }
        let message = json!({
            "id": self.ctx.answer_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": self.ctx.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            // Anthropic's schema requires both counts here (strict clients validate it): input
            // not reported yet is written 0, the real count follows in `message_delta`.
            "usage": start_usage(&self.usage),
        });
        Writer::event(out, "message_start", json!({ "message": message }));
    }

    fn close(&mut self, out: &mut Vec<ClientEvent>) {
        if let Some((_, index)) = self.open.take() {
            Writer::event(out, "content_block_stop", json!({ "index": index }));
        }
    }

    /// Makes `kind` the open block (closing another), opened as `block`; its index.
    fn open(&mut self, kind: Open, block: Block<'_>, out: &mut Vec<ClientEvent>) -> u32 {
        self.start(out);
        if let Some((open, index)) = self.open {
            if open == kind {
                return index;
            }
        }
        self.close(out);
        let index = self.next_block;
        self.next_block += 1;
        self.open = Some((kind, index));
        Writer::event(
            out,
            "content_block_start",
            json!({ "index": index, "content_block": block }),
        );
        index
    }

    fn delta(out: &mut Vec<ClientEvent>, index: u32, delta: Value) {
        Writer::event(out, "content_block_delta", json!({ "index": index, "delta": delta }));
    }
}

impl AnswerWriter for Writer {
    fn write(&mut self, ev: Event, out: &mut Vec<ClientEvent>) {
        match ev {
            Event::Start => {} // `message_start` waits for the first block or the end
            Event::Text { text, .. } => {
                let index = self.open(Open::Text, Block::Text { text: "" }, out);
                Writer::delta(out, index, json!({"type": "text_delta", "text": text}));
            }
            Event::Reasoning { text, .. } => {
                let block = Block::Thinking {
                    thinking: "",
                    signature: "",
                };
                let index = self.open(Open::Thinking, block, out);
                Writer::delta(out, index, json!({"type": "thinking_delta", "thinking": text}));
            }
            Event::ToolStart { call, id, name, .. } => {
                let block = Block::ToolUse {
                    id: self.ctx.call_id("toolu_", &id, self.next_block as usize),
                    name: &name,
                    input: json!({}),
                };
                self.tools = true;
                self.open(Open::Tool(call), block, out);
            }
            Event::ToolArgs { call, fragment, .. } => {
                if let Some((Open::Tool(open), index)) = self.open {
                    if open == call {
                        Writer::delta(
                            out,
                            index,
                            json!({"type": "input_json_delta", "partial_json": fragment}),
                        );
                    }
                }
            }
            Event::Finish { reason, .. } => {
                self.finish = Some(reason);
                self.close(out);
            }
            Event::Usage(t) => self.usage.update(t),
            Event::Error(e) => {
                let error = e.object_with(&[("type", Value::from(e.names().anthropic_type))]);
                Writer::event(out, "error", json!({ "error": error }));
            }
            Event::End => {
                self.start(out);
                self.close(out);
                let reason = stop_reason(self.finish.unwrap_or(FinishReason::Natural), self.tools);
                let delta = json!({
                    "delta": {"stop_reason": reason, "stop_sequence": null},
                    "usage": delta_usage(&self.usage),
                });
                Writer::event(out, "message_delta", delta);
                Writer::event(out, "message_stop", json!({}));
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Message<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<Block<'a>>,
    stop_reason: &'static str,
    stop_sequence: Option<()>,
    usage: Usage,
}

/// A whole answer as a Messages `message` (its first choice).
pub(crate) fn write_body(answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
    let none = Choice::default();
    let choice = answer.choices.first().unwrap_or(&none);
    let content = choice.parts.iter().enumerate().map(|(n, part)| match part {
        Part::Text(text) => Block::Text { text },
        Part::Reasoning(thinking) => Block::Thinking {
            thinking,
            signature: "",
        },
        Part::Call { id, name, arguments } => Block::ToolUse {
            id: ctx.call_id("toolu_", id, n),
            name,
            input: arguments_object(arguments),
        },
    });
    let message = Message {
        id: ctx.answer_id("msg_"),
        kind: "message",
        role: "assistant",
        model: &ctx.model,
        content: content.collect(),
        stop_reason: stop_reason(choice.reason(), choice.has_calls()),
        stop_sequence: None,
        usage: body_usage(&answer.usage),
    };
    serde_json::to_vec(&message).unwrap_or_default()
}
