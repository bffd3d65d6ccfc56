//! Chat Completions answers in translation: `chat.completion.chunk`s and `chat.completion` bodies
//! read into neutral events, and neutral events written as them.
//!
//! A stream opens with a role chunk for every choice, then one chunk per delta: `content`,
//! `reasoning_content`, `tool_calls` (id, type and name on a call's first fragment only, then
//! `arguments` fragments under the same index); each choice's `finish_reason` comes in its own
//! chunk; at the end come the usage chunk (`choices: []`) and `data: [DONE]`.

use std::collections::{BTreeSet, HashMap};

use serde::Serialize;
use serde_json::{json, Value};

use crate::classify::{is_error_payload, Verdict};
use crate::dialects::chat::{finish_reason, usage_from};
use crate::dialects::neutral::answer::{
    ended_for_tools, frame, index_at, items_at, text_at, Answer, AnswerContext, AnswerReader, AnswerWriter,
    CachedTokens, Choice, Event, Part, ReasoningTokens, Tokens, Unreadable, UpstreamError, MAX_CALLS,
};
use crate::dialects::{count, ClientEvent, EventInfo, FinishReason};
use crate::sse::SseEvent;

/// A chat usage object's counts (SPEC §17) and its reasoning tokens.
fn tokens(u: &Value) -> Tokens {
    Tokens {
        counts: usage_from(u),
        reasoning: count(Some(u), "/completion_tokens_details/reasoning_tokens"),
    }
}

/// A message's or delta's reasoning (`reasoning_content`, else `reasoning`) and text (`content`,
/// a string or text parts, then `refusal`), the non-empty ones in that order.
fn texts(m: &Value) -> Vec<Part> {
    let mut parts = Vec::new();
    if let Some(r) = text_at(m, "/reasoning_content").or_else(|| text_at(m, "/reasoning")) {
        parts.push(Part::Reasoning(r.to_string()));
    }
    match m.get("content") {
        Some(Value::String(s)) if !s.is_empty() => parts.push(Part::Text(s.clone())),
        Some(Value::Array(items)) => {
            let texts = items.iter().filter_map(|p| text_at(p, "/text"));
            parts.extend(texts.map(|t| Part::Text(t.to_string())));
        }
        _ => {}
    }
    if let Some(r) = text_at(m, "/refusal") {
        parts.push(Part::Text(r.to_string()));
    }
    parts
}

/// Reads a chat upstream's chunks.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// (choice, tool index) of the calls begun: some providers repeat a call's id and name on
    /// every fragment.
    calls: BTreeSet<(u32, u32)>,
}

impl AnswerReader for Reader {
    fn read(&mut self, v: &Value, _kind: &str, out: &mut Vec<Event>) {
        if is_error_payload(v) {
            out.push(Event::Error(UpstreamError::from_payload(v)));
            return;
        }
        for choice in items_at(v, "/choices") {
            let Some(c) = index_at(choice, "/index") else {
                continue;
            };
            if let Some(delta) = choice.get("delta") {
                self.delta(c, delta, out);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                out.push(Event::Finish {
                    choice: c,
                    reason: finish_reason(reason),
                });
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            out.push(Event::Usage(tokens(u)));
        }
    }

    /// `[DONE]`, the end; any other text is unreadable.
    fn read_text(&mut self, data: &str, out: &mut Vec<Event>) -> Result<(), Unreadable> {
        match data {
            "[DONE]" => {
                out.push(Event::End);
                Ok(())
            }
            _ => Err(Unreadable),
        }
    }
}

impl Reader {
    fn delta(&mut self, choice: u32, delta: &Value, out: &mut Vec<Event>) {
        for part in texts(delta) {
            part.into_events(choice, 0, out);
        }
        for call in items_at(delta, "/tool_calls") {
            let Some(n) = index_at(call, "/index") else {
                continue;
            };
            let id = text_at(call, "/id");
            let name = text_at(call, "/function/name");
            let begins = id.is_some() || name.is_some();
            if begins && self.calls.len() < MAX_CALLS && self.calls.insert((choice, n)) {
                out.push(Event::ToolStart {
                    choice,
                    call: n,
                    id: id.unwrap_or_default().to_string(),
                    name: name.unwrap_or_default().to_string(),
                });
            }
            if let Some(fragment) = text_at(call, "/function/arguments") {
                out.push(Event::ToolArgs {
                    choice,
                    call: n,
                    fragment: fragment.to_string(),
                });
            }
        }
    }
}

/// A whole chat answer: every choice's message and finish reason, and the usage.
pub(crate) fn read_body(v: &Value) -> Result<Answer, Verdict> {
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no choices"))?;
    let choices = choices
        .iter()
        .map(|c| {
            let message = c.get("message").unwrap_or(&Value::Null);
            let mut parts = texts(message);
            for call in items_at(message, "/tool_calls") {
                parts.push(Part::Call {
                    id: text_at(call, "/id").unwrap_or_default().to_string(),
                    name: text_at(call, "/function/name").unwrap_or_default().to_string(),
                    arguments: text_at(call, "/function/arguments").unwrap_or("{}").to_string(),
                });
            }
            Choice {
                parts,
                finish: c.get("finish_reason").and_then(Value::as_str).map(finish_reason),
            }
        })
        .collect();
    Ok(Answer {
        choices,
        usage: v.get("usage").filter(|u| u.is_object()).map(tokens).unwrap_or_default(),
    })
}

/// Chat's `finish_reason` for how a choice ended (`tools`: it called one).
fn finish_word(reason: FinishReason, tools: bool) -> &'static str {
    match reason {
        _ if ended_for_tools(reason, tools) => "tool_calls",
        FinishReason::Limit => "length",
        FinishReason::Filtered => "content_filter",
        FinishReason::Natural | FinishReason::StopSequence | FinishReason::Other => "stop",
    }
}

/// A chat usage object: only the counts the upstream reported.
#[derive(Debug, Serialize)]
struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt_tokens_details: Option<CachedTokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    completion_tokens_details: Option<ReasoningTokens>,
}

fn usage(t: &Tokens) -> Usage {
    Usage {
        prompt_tokens: t.counts.input_tokens,
        completion_tokens: t.counts.output_tokens,
        total_tokens: t.total(),
        prompt_tokens_details: t.cached_detail(),
        completion_tokens_details: t.reasoning_detail(),
    }
}

#[derive(Debug, Serialize)]
struct Chunk<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<ChunkChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Debug, Serialize)]
struct ChunkChoice<'a> {
    index: u32,
    delta: Delta<'a>,
    logprobs: Option<()>,
    finish_reason: Option<&'static str>,
}

#[derive(Debug, Default, Serialize)]
struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<[CallDelta<'a>; 1]>,
}

#[derive(Debug, Serialize)]
struct CallDelta<'a> {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    function: FunctionDelta<'a>,
}

#[derive(Debug, Serialize)]
struct FunctionDelta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    arguments: &'a str,
}

/// Writes neutral events as chat chunks.
#[derive(Debug)]
pub(crate) struct Writer {
    ctx: AnswerContext,
    id: String,
    /// The chat index of each (choice, upstream call number) begun: a hash lookup per fragment,
    /// never a scan of the calls before it (SPEC §18a).
    calls: HashMap<(u32, u32), usize>,
    /// Per choice, how many tool calls it has begun.
    calls_per_choice: Vec<usize>,
    calls_made: usize,
    usage: Tokens,
}

impl Writer {
    pub(crate) fn new(ctx: AnswerContext) -> Writer {
        Writer {
            id: ctx.answer_id("chatcmpl-"),
            ctx,
            calls: HashMap::new(),
            calls_per_choice: Vec::new(),
            calls_made: 0,
            usage: Tokens::default(),
        }
    }

    /// A chunk: with usage, as its JSON (the relay writes the charge into it); else with what it
    /// means to the gateway, said here (what `chat::inspect` reads from its bytes).
    fn chunk(&self, choices: Vec<ChunkChoice<'_>>, usage: Option<Usage>) -> ClientEvent {
        let info = usage.is_none().then(|| self.info(&choices));
        let chunk = Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.ctx.created,
            model: &self.ctx.model,
            choices,
            usage,
        };
        match info {
            Some(info) => ClientEvent::known(SseEvent::written(None, &chunk), info),
            None => frame(None, &chunk),
        }
    }

    /// What a chunk of `choices` without usage means to the gateway, as `chat::inspect` reads it:
    /// output of each delta (its text, reasoning and calls' names and arguments; a call is
    /// output even when empty), each finish, the chunk's id and model.
    fn info(&self, choices: &[ChunkChoice<'_>]) -> EventInfo {
        let chars = |t: Option<&str>| t.map_or(0, |t| t.chars().count());
        let mut info = EventInfo {
            id: Some(self.id.clone()),
            model: Some(self.ctx.model.clone()),
            ..EventInfo::default()
        };
        for choice in choices {
            let d = &choice.delta;
            let calls = d
                .tool_calls
                .as_ref()
                .map_or(0, |[c]| chars(c.function.name) + chars(Some(c.function.arguments)));
            let output = chars(d.content) + chars(d.reasoning_content) + calls;
            if output > 0 || d.tool_calls.is_some() {
                info.content = true;
                info.output_chars += output;
            }
            if let Some(reason) = choice.finish_reason {
                info.finished = true;
                info.finishes += 1;
                info.finish = Some(finish_reason(reason));
            }
        }
        info
    }

    /// A chunk of one choice's delta or finish.
    fn one(&self, index: u32, delta: Delta<'_>, finish_reason: Option<&'static str>) -> ClientEvent {
        let choice = ChunkChoice {
            index,
            delta,
            logprobs: None,
            finish_reason,
        };
        self.chunk(vec![choice], None)
    }

    /// How many tool calls `choice` has begun.
    fn calls_of(&mut self, choice: u32) -> &mut usize {
        let at = choice as usize;
        if self.calls_per_choice.len() <= at {
            self.calls_per_choice.resize(at + 1, 0);
        }
        &mut self.calls_per_choice[at]
    }

    /// The chat index of an upstream call of `choice`.
    fn call_index(&self, choice: u32, call: u32) -> Option<usize> {
        self.calls.get(&(choice, call)).copied()
    }
}

impl AnswerWriter for Writer {
    fn write(&mut self, ev: Event, out: &mut Vec<ClientEvent>) {
        match ev {
            Event::Start => {
                let roles = (0..self.ctx.choices).map(|index| ChunkChoice {
                    index,
                    delta: Delta {
                        role: Some("assistant"),
                        content: Some(""),
                        ..Delta::default()
                    },
                    logprobs: None,
                    finish_reason: None,
                });
                out.push(self.chunk(roles.collect(), None));
            }
            Event::Text { choice, text } => {
                let delta = Delta {
                    content: Some(&text),
                    ..Delta::default()
                };
                out.push(self.one(choice, delta, None));
            }
            Event::Reasoning { choice, text } => {
                let delta = Delta {
                    reasoning_content: Some(&text),
                    ..Delta::default()
                };
                out.push(self.one(choice, delta, None));
            }
            Event::ToolStart { choice, call, id, name } => {
                let begun = self.calls_of(choice);
                if *begun >= MAX_CALLS {
                    return;
                }
                let index = *begun;
                *begun += 1;
                self.calls.entry((choice, call)).or_insert(index);
                let id = self.ctx.call_id("call_", &id, self.calls_made);
                self.calls_made += 1;
                let call = CallDelta {
                    index,
                    id: Some(&id),
                    kind: Some("function"),
                    function: FunctionDelta {
                        name: Some(&name),
                        arguments: "",
                    },
                };
                let delta = Delta {
                    tool_calls: Some([call]),
                    ..Delta::default()
                };
                out.push(self.one(choice, delta, None));
            }
            Event::ToolArgs { choice, call, fragment } => {
                let Some(index) = self.call_index(choice, call) else {
                    return;
                };
                let call = CallDelta {
                    index,
                    id: None,
                    kind: None,
                    function: FunctionDelta {
                        name: None,
                        arguments: &fragment,
                    },
                };
                let delta = Delta {
                    tool_calls: Some([call]),
                    ..Delta::default()
                };
                out.push(self.one(choice, delta, None));
            }
            Event::Finish { choice, reason } => {
                let tools = self.calls_per_choice.get(choice as usize).is_some_and(|n| *n > 0);
                out.push(self.one(choice, Delta::default(), Some(finish_word(reason, tools))));
            }
            Event::Usage(t) => self.usage.update(t),
            // An error chunk: the relay ends the stream with chat's error frame (SPEC §7).
            Event::Error(e) => out.push(ClientEvent::written(None, json!({ "error": e.object_with(&[]) }))),
            Event::End => {
                if !self.usage.counts.is_empty() {
                    out.push(self.chunk(Vec::new(), Some(usage(&self.usage))));
                }
                out.push(ClientEvent::text(SseEvent::from_data("[DONE]")));
            }
        }
    }
}

#[derive(Debug, Serialize)]
struct Completion<'a> {
    id: String,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: Vec<BodyChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Usage>,
}

#[derive(Debug, Serialize)]
struct BodyChoice<'a> {
    index: usize,
    message: Message<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Debug, Serialize)]
struct Message<'a> {
    role: &'static str,
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Debug, Serialize)]
struct ToolCall<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    function: Function<'a>,
}

#[derive(Debug, Serialize)]
struct Function<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// A whole answer as a `chat.completion`.
pub(crate) fn write_body(answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
    let mut calls_made = 0;
    let mut choices = Vec::with_capacity(answer.choices.len());
    for (index, choice) in answer.choices.iter().enumerate() {
        let mut tool_calls = Vec::new();
        for part in &choice.parts {
            if let Part::Call { id, name, arguments } = part {
                tool_calls.push(ToolCall {
                    id: ctx.call_id("call_", id, calls_made),
                    kind: "function",
                    function: Function { name, arguments },
                });
                calls_made += 1;
            }
        }
        choices.push(BodyChoice {
            index,
            message: Message {
                role: "assistant",
                content: choice.joined(false),
                reasoning_content: choice.joined(true),
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_word(choice.reason(), choice.has_calls()),
        });
    }
    let completion = Completion {
        id: ctx.answer_id("chatcmpl-"),
        object: "chat.completion",
        created: ctx.created,
        model: &ctx.model,
        choices,
        usage: (!answer.usage.counts.is_empty()).then(|| usage(&answer.usage)),
    };
    serde_json::to_vec(&completion).unwrap_or_default()
}
