//! OpenAI Responses answers in translation: stream events and `response` bodies read into neutral
//! events, and neutral events written as them.
//!
//! A stream is `response.created` and `response.in_progress`, then output items one after another
//! — a `message` (`msg_…`: `output_item.added`, `content_part.added`, `output_text.delta`s,
//! `output_text.done`, `content_part.done`, `output_item.done`), a `reasoning` item (`rs_…`, its
//! summary: `reasoning_summary_part.added`, `reasoning_summary_text.delta`s, `….done`s), a
//! `function_call` (`fc_…`, its `call_id` the upstream's call id: `output_item.added`,
//! `function_call_arguments.delta`s, `.done`, `output_item.done`) — then `response.completed` (or
//! `response.incomplete`) with every item and the usage. Every event has a `sequence_number`,
//! counting from 0.

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::classify::{classify_error_payload, Verdict};
use crate::dialects::count;
use crate::dialects::neutral::answer::{
    index_at, items_at, keep, text_at, Answer, AnswerContext, AnswerReader, AnswerWriter, CachedTokens, Choice, Event,
    Part, ReasoningTokens, Tokens, UpstreamError, MAX_KEPT_BYTES,
};
use crate::dialects::responses::{failed_payload, finish_reason, usage_of};
use crate::dialects::{ClientEvent, FinishReason};

/// A `response` object's usage counts (SPEC §17) and its reasoning tokens.
fn tokens(response: Option<&Value>) -> Tokens {
    Tokens {
        counts: usage_of(response),
        reasoning: count(response, "/usage/output_tokens_details/reasoning_tokens"),
    }
}

/// Reads a Responses upstream's events.
#[derive(Debug, Default)]
pub(crate) struct Reader;

impl AnswerReader for Reader {
    fn read(&mut self, v: &Value, kind: &str, out: &mut Vec<Event>) {
        let delta = || text_at(v, "/delta").map(str::to_string);
        let call = index_at(v, "/output_index");
        match kind {
            "error" => out.push(Event::Error(UpstreamError::from_payload(v))),
            "response.failed" => out.push(Event::Error(UpstreamError::from_payload(&failed_payload(
                v.get("response"),
            )))),
            "response.output_item.added" => {
                let item = v.get("item").unwrap_or(&Value::Null);
                if let (Some(call), Some(Part::Call { id, name, arguments })) = (call, item_part(item, "")) {
                    out.push(Event::ToolStart {
                        choice: 0,
                        call,
                        id,
                        name,
                    });
                    if !arguments.is_empty() {
                        out.push(Event::ToolArgs {
                            choice: 0,
                            call,
                            fragment: arguments,
                        });
                    }
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(text) = delta() {
                    out.push(Event::Text { choice: 0, text });
                }
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let Some(text) = delta() {
                    out.push(Event::Reasoning { choice: 0, text });
                }
            }
            "response.function_call_arguments.delta" => {
                if let (Some(call), Some(fragment)) = (call, delta()) {
                    out.push(Event::ToolArgs {
                        choice: 0,
                        call,
                        fragment,
                    });
                }
            }
            "response.completed" | "response.incomplete" => {
                let response = v.get("response");
                out.push(Event::Finish {
                    choice: 0,
                    reason: finish_reason(response),
                });
                out.push(Event::Usage(tokens(response)));
                out.push(Event::End);
            }
            _ => {} // lifecycle and `.done` events: what they repeat was read from the deltas
        }
    }
}

/// A function-call output item as a call: its arguments as far as the item has them, else
/// `no_arguments`.
fn item_part(item: &Value, no_arguments: &str) -> Option<Part> {
    (item.get("type").and_then(Value::as_str) == Some("function_call")).then(|| Part::Call {
        id: text_at(item, "/call_id").unwrap_or_default().to_string(),
        name: text_at(item, "/name").unwrap_or_default().to_string(),
        arguments: text_at(item, "/arguments").unwrap_or(no_arguments).to_string(),
    })
}

/// A whole Responses answer: its output items in order, its status and usage.
pub(crate) fn read_body(v: &Value) -> Result<Answer, Verdict> {
    if v.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(classify_error_payload(&failed_payload(Some(v))));
    }
    let items = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no output"))?;
    let mut parts = Vec::new();
    for item in items {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => parts.extend(item_part(item, "{}")),
            Some("reasoning") => {
                let texts = items_at(item, "/summary").chain(items_at(item, "/content"));
                parts.extend(
                    texts
                        .filter_map(|t| text_at(t, "/text"))
                        .map(|t| Part::Reasoning(t.into())),
                );
            }
            _ => {
                let texts = items_at(item, "/content").filter_map(|c| text_at(c, "/text").or(text_at(c, "/refusal")));
                parts.extend(texts.map(|t| Part::Text(t.into())));
            }
        }
    }
    Ok(Answer {
        choices: vec![Choice {
            parts,
            finish: Some(finish_reason(Some(v))),
        }],
        usage: tokens(Some(v)),
    })
}

/// What an output item holds.
#[derive(Debug, Clone, Copy)]
enum Kind<'a> {
    Message,
    Reasoning,
    /// A function call: the upstream's call id and the function's name.
    Call {
        id: &'a str,
        name: &'a str,
    },
}

impl Part {
    /// The kind of item it goes in, and its text (a call's: its arguments).
    fn kind_text(&self) -> (Kind<'_>, &str) {
        match self {
            Part::Text(t) => (Kind::Message, t),
            Part::Reasoning(t) => (Kind::Reasoning, t),
            Part::Call { id, name, arguments } => (Kind::Call { id, name }, arguments),
        }
    }
}

/// An output item, as the stream's events and the final response carry it.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Item {
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<Content>,
    },
    Reasoning {
        id: String,
        summary: Vec<Content>,
    },
    FunctionCall {
        id: String,
        status: &'static str,
        call_id: String,
        name: String,
        /// The client's namespace of a flattened tool (`AnswerContext::namespaces`).
        #[serde(skip_serializing_if = "Option::is_none")]
        namespace: Option<String>,
        arguments: String,
    },
}

/// A message's text part or a reasoning item's summary part.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Content {
    /// `annotations` and `logprobs` are required by the schema; none are carried.
    OutputText {
        text: String,
        annotations: [(); 0],
        logprobs: [(); 0],
    },
    SummaryText {
        text: String,
    },
}

/// The events an item's text streams in: its delta and done events, the field naming its text
/// in the done event, and the events of the part that holds it (none for a call).
struct Names {
    delta: &'static str,
    done: &'static str,
    text: &'static str,
    part: Option<PartNames>,
}

/// A message's or reasoning item's part: its index field and its added and done events.
struct PartNames {
    index: &'static str,
    added: &'static str,
    done: &'static str,
}

impl Item {
    /// The `n`th output item (`ctx` names it), empty and in progress.
    fn new(ctx: &AnswerContext, kind: Kind<'_>, n: usize) -> Item {
        match kind {
            Kind::Message => Item::Message {
                id: ctx.item_id("msg_", n),
                status: "in_progress",
                role: "assistant",
                content: vec![Content::OutputText {
                    text: String::new(),
                    annotations: [],
                    logprobs: [],
                }],
            },
            Kind::Reasoning => Item::Reasoning {
                id: ctx.item_id("rs_", n),
                summary: vec![Content::SummaryText { text: String::new() }],
            },
            Kind::Call { id, name } => Item::FunctionCall {
                id: ctx.item_id("fc_", n),
                status: "in_progress",
                call_id: ctx.call_id("call_", id, n),
                name: name.to_string(),
                namespace: ctx.namespace_of(name),
                arguments: String::new(),
            },
        }
    }

    /// Text of `kind` continues this item (a call is never continued).
    fn holds(&self, kind: Kind<'_>) -> bool {
        matches!(
            (self, kind),
            (Item::Message { .. }, Kind::Message) | (Item::Reasoning { .. }, Kind::Reasoning)
        )
    }

    fn id(&self) -> &str {
        match self {
            Item::Message { id, .. } | Item::Reasoning { id, .. } | Item::FunctionCall { id, .. } => id,
        }
    }

    /// Its part's text, or a call's arguments.
    fn text_mut(&mut self) -> Option<&mut String> {
        match self {
            Item::Message { content, .. } | Item::Reasoning { summary: content, .. } => {
                content.first_mut().map(|c| match c {
                    Content::OutputText { text, .. } | Content::SummaryText { text } => text,
                })
            }
            Item::FunctionCall { arguments, .. } => Some(arguments),
        }
    }

    fn text(&self) -> &str {
        match self {
            Item::Message { content, .. } | Item::Reasoning { summary: content, .. } => match content.first() {
                Some(Content::OutputText { text, .. } | Content::SummaryText { text }) => text,
                None => "",
            },
            Item::FunctionCall { arguments, .. } => arguments,
        }
    }

    /// Its part, as `content_part.*` / `reasoning_summary_part.*` carry it.
    fn part(&self) -> Option<&Content> {
        match self {
            Item::Message { content, .. } | Item::Reasoning { summary: content, .. } => content.first(),
            Item::FunctionCall { .. } => None,
        }
    }

    /// As `output_item.added` shows it: no part yet.
    fn added(&self) -> Item {
        let mut shell = self.clone();
        if let Item::Message { content, .. } | Item::Reasoning { summary: content, .. } = &mut shell {
            content.clear();
        }
        shell
    }

    fn complete(&mut self) {
        if let Item::Message { status, .. } | Item::FunctionCall { status, .. } = self {
            *status = "completed";
        }
    }

    fn names(&self) -> Names {
        match self {
            Item::Message { .. } => Names {
                delta: "response.output_text.delta",
                done: "response.output_text.done",
                text: "text",
                part: Some(PartNames {
                    index: "content_index",
                    added: "response.content_part.added",
                    done: "response.content_part.done",
                }),
            },
            Item::Reasoning { .. } => Names {
                delta: "response.reasoning_summary_text.delta",
                done: "response.reasoning_summary_text.done",
                text: "text",
                part: Some(PartNames {
                    index: "summary_index",
                    added: "response.reasoning_summary_part.added",
                    done: "response.reasoning_summary_part.done",
                }),
            },
            Item::FunctionCall { .. } => Names {
                delta: "response.function_call_arguments.delta",
                done: "response.function_call_arguments.done",
                text: "arguments",
                part: None,
            },
        }
    }

    /// The fields that place an event in this item (the `output_index`th): its id, its index and
    /// its part's index.
    fn place(&self, output_index: usize) -> Map<String, Value> {
        let mut fields = Map::new();
        fields.insert("item_id".into(), Value::from(self.id()));
        fields.insert("output_index".into(), Value::from(output_index));
        if let Some(part) = self.names().part {
            fields.insert(part.index.into(), Value::from(0));
        }
        fields
    }
}

/// A Responses usage object: only the counts the upstream reported.
#[derive(Debug, Serialize)]
struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    input_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    input_tokens_details: Option<CachedTokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_tokens: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_tokens_details: Option<ReasoningTokens>,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_tokens: Option<u64>,
}

fn usage(t: &Tokens) -> Option<Usage> {
    (!t.counts.is_empty()).then(|| Usage {
        input_tokens: t.counts.input_tokens,
        input_tokens_details: t.cached_detail(),
        output_tokens: t.counts.output_tokens,
        output_tokens_details: t.reasoning_detail(),
        total_tokens: t.total(),
    })
}

#[derive(Debug, Serialize)]
struct Incomplete {
    reason: &'static str,
}

/// A `response` object, with every field OpenAI's schema requires (typed clients generated from
/// it refuse one without). The request's settings it echoes (`instructions`, `tools`,
/// `tool_choice`, sampling, `metadata`) are not the answer's: written as their defaults.
#[derive(Debug, Serialize)]
struct Response<'a> {
    id: String,
    object: &'static str,
    created_at: u64,
    status: &'static str,
    error: Option<Value>,
    incomplete_details: Option<Incomplete>,
    instructions: Option<()>,
    model: &'a str,
    output: &'a [Item],
    tools: [(); 0],
    tool_choice: &'static str,
    parallel_tool_calls: bool,
    temperature: Option<()>,
    top_p: Option<()>,
    metadata: Option<()>,
    usage: Option<Usage>,
}

impl<'a> Response<'a> {
    fn new(ctx: &'a AnswerContext, status: &'static str, output: &'a [Item]) -> Response<'a> {
        Response {
            id: ctx.answer_id("resp_"),
            object: "response",
            created_at: ctx.created,
            status,
            error: None,
            incomplete_details: None,
            instructions: None,
            model: &ctx.model,
            output,
            tools: [],
            tool_choice: "auto",
            parallel_tool_calls: true,
            temperature: None,
            top_p: None,
            metadata: None,
            usage: None,
        }
    }

    /// The finished response: `completed`, or `incomplete` for the output limit or a filter.
    fn finished(ctx: &'a AnswerContext, reason: FinishReason, output: &'a [Item], t: &Tokens) -> Response<'a> {
        let incomplete = match reason {
            FinishReason::Limit => Some("max_output_tokens"),
            FinishReason::Filtered => Some("content_filter"),
            _ => None,
        };
        Response {
            incomplete_details: incomplete.map(|reason| Incomplete { reason }),
            usage: usage(t),
            ..Response::new(
                ctx,
                if incomplete.is_some() {
                    "incomplete"
                } else {
                    "completed"
                },
                output,
            )
        }
    }
}

/// Writes neutral events as Responses stream events.
#[derive(Debug)]
pub(crate) struct Writer {
    ctx: AnswerContext,
    sequence: u64,
    /// The open item and, for a function call, its upstream number.
    open: Option<(Item, Option<u32>)>,
    /// The items done, for `response.completed`.
    done: Vec<Item>,
    /// Bytes of text the items may still keep.
    budget: usize,
    usage: Tokens,
    finish: Option<FinishReason>,
}

impl Writer {
    pub(crate) fn new(ctx: AnswerContext) -> Writer {
        Writer {
            ctx,
            sequence: 0,
            open: None,
            done: Vec::new(),
            budget: MAX_KEPT_BYTES,
            usage: Tokens::default(),
            finish: None,
        }
    }

    /// One event: its type, its `sequence_number` (the next), then `fields`.
    fn emit(&mut self, out: &mut Vec<ClientEvent>, kind: &str, fields: Map<String, Value>) {
        let mut data = Map::new();
        data.insert("type".into(), Value::from(kind));
        data.insert("sequence_number".into(), Value::from(self.sequence));
        data.extend(fields);
        self.sequence += 1;
        out.push(ClientEvent::written(Some(kind), Value::Object(data)));
    }

    fn emit_response(&mut self, out: &mut Vec<ClientEvent>, kind: &str, response: Value) {
        let mut fields = Map::new();
        fields.insert("response".into(), response);
        self.emit(out, kind, fields);
    }

    /// Makes an item of `kind` the open one (a call: always a new one, numbered `call` upstream).
    fn open(&mut self, kind: Kind<'_>, call: Option<u32>, out: &mut Vec<ClientEvent>) {
        if call.is_none() && self.open.as_ref().is_some_and(|(item, _)| item.holds(kind)) {
            return;
        }
        self.close(out);
        let index = self.done.len();
        let item = Item::new(&self.ctx, kind, index);
        let mut fields = Map::new();
        fields.insert("output_index".into(), Value::from(index));
        fields.insert("item".into(), json!(item.added()));
        self.emit(out, "response.output_item.added", fields);
        if let (Some(names), Some(part)) = (item.names().part, item.part()) {
            let mut fields = item.place(index);
            fields.insert("part".into(), json!(part));
            self.emit(out, names.added, fields);
        }
        self.open = Some((item, call));
    }

    /// A delta of the open item's text.
    fn append(&mut self, delta: &str, out: &mut Vec<ClientEvent>) {
        let index = self.done.len();
        let Some((item, _)) = self.open.as_mut() else {
            return;
        };
        if let Some(text) = item.text_mut() {
            keep(text, delta, &mut self.budget);
        }
        let mut fields = item.place(index);
        fields.insert("delta".into(), Value::from(delta));
        if let Item::Message { .. } = item {
            fields.insert("logprobs".into(), json!([]));
        }
        let kind = item.names().delta;
        self.emit(out, kind, fields);
    }

    fn close(&mut self, out: &mut Vec<ClientEvent>) {
        let Some((mut item, _)) = self.open.take() else {
            return;
        };
        item.complete();
        let index = self.done.len();
        let names = item.names();
        let mut fields = item.place(index);
        if let Item::FunctionCall { name, .. } = &item {
            fields.insert("name".into(), Value::from(name.as_str()));
        }
        fields.insert(names.text.into(), Value::from(item.text()));
        if let Item::Message { .. } = item {
            fields.insert("logprobs".into(), json!([]));
        }
        self.emit(out, names.done, fields);
        if let (Some(part_names), Some(part)) = (names.part, item.part()) {
            let mut fields = item.place(index);
            fields.insert("part".into(), json!(part));
            self.emit(out, part_names.done, fields);
        }
        let mut fields = Map::new();
        fields.insert("output_index".into(), Value::from(index));
        fields.insert("item".into(), json!(item));
        self.emit(out, "response.output_item.done", fields);
        self.done.push(item);
    }
}

impl AnswerWriter for Writer {
    fn write(&mut self, ev: Event, out: &mut Vec<ClientEvent>) {
        match ev {
            Event::Start => {
                let response = json!(Response::new(&self.ctx, "in_progress", &[]));
                self.emit_response(out, "response.created", response.clone());
                self.emit_response(out, "response.in_progress", response);
            }
            Event::Text { text, .. } => {
                self.open(Kind::Message, None, out);
                self.append(&text, out);
            }
            Event::Reasoning { text, .. } => {
                self.open(Kind::Reasoning, None, out);
                self.append(&text, out);
            }
            Event::ToolStart { call, id, name, .. } => self.open(Kind::Call { id: &id, name: &name }, Some(call), out),
            Event::ToolArgs { call, fragment, .. } => {
                if self.open.as_ref().is_some_and(|(_, open)| *open == Some(call)) {
                    self.append(&fragment, out);
                }
            }
            Event::Finish { reason, .. } => {
                self.finish = Some(reason);
                self.close(out);
            }
            Event::Usage(t) => self.usage.update(t),
            Event::Error(e) => {
                let response = Response {
                    error: Some(e.object_with(&[("code", Value::from(e.names().openai_code))])),
                    ..Response::new(&self.ctx, "failed", &[])
                };
                let response = json!(response);
                self.emit_response(out, "response.failed", response);
            }
            Event::End => {
                self.close(out);
                let reason = self.finish.unwrap_or(FinishReason::Natural);
                let response = Response::finished(&self.ctx, reason, &self.done, &self.usage);
                let kind = match response.status {
                    "incomplete" => "response.incomplete",
                    _ => "response.completed",
                };
                let response = json!(response);
                self.emit_response(out, kind, response);
            }
        }
    }
}

/// A whole answer as a `response` (its first choice): consecutive text in one message item,
/// consecutive reasoning in one reasoning item, each call its own item.
pub(crate) fn write_body(answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
    let none = Choice::default();
    let choice = answer.choices.first().unwrap_or(&none);
    let mut items: Vec<Item> = Vec::new();
    for part in &choice.parts {
        let (kind, text) = part.kind_text();
        if !items.last().is_some_and(|last| last.holds(kind)) {
            let mut item = Item::new(ctx, kind, items.len());
            item.complete();
            items.push(item);
        }
        if let Some(kept) = items.last_mut().and_then(Item::text_mut) {
            kept.push_str(text);
        }
    }
    let response = Response::finished(ctx, choice.reason(), &items, &answer.usage);
    serde_json::to_vec(&response).unwrap_or_default()
}
