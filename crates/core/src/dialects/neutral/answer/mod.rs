//! Answers from a route of another dialect, turned into the client's (SPEC §19).
//!
//! A reader of the upstream's dialect turns each stream event into neutral [`Event`]s and a writer
//! of the client's dialect turns those into client events, one upstream event at a time, as they
//! arrive ([`StreamTranslator`]); a whole non-stream answer goes through a neutral answer the same
//! way ([`body`]). This module owns that neutral form, the translator, and the rules every pair
//! shares; `chat`, `messages`, `responses` and `gemini` own one dialect's reader and writer each,
//! `converse` (Bedrock's, which only routes speak) a reader.
//!
//! The readers reuse the dialect modules' own mappings (usage fields, finish reasons, error
//! payloads), and every writer writes what the client dialect's inspector (`dialects::*::
//! inspect_event`, `inspect_body`) reads back, so the gateway decides on translated events as on
//! native ones: the commit point is the first translated content event, a finish is a finish, the
//! usage read from the client's fields is the upstream's (SPEC §17), and an upstream error event
//! becomes an error event of the client's dialect that the classifier reads as the same class.
//!
//! Each event is decoded once and written once: a reader takes the upstream event's JSON (parsed
//! by the translator, or decoded from a Bedrock frame), and a written client event keeps the JSON
//! it was written from ([`ClientEvent`]), which the inspector reads instead of parsing the bytes —
//! or, for a typed chat or Gemini chunk (serialised without building JSON), what it means to the
//! gateway, said by its writer (the tests hold it equal to what the inspector reads).
//!
//! Decisions:
//! - Every event and body carries every field its dialect's published schema requires (SPEC §21:
//!   strict clients such as the Vercel AI SDK validate them). A count the upstream has not reported
//!   is left out where the schema allows, and written 0 where it requires one (Messages'
//!   `message_start` input and output, `message_delta` output, a whole message's both): the
//!   gateway never reads a translated answer's usage — it charges from the translator's report
//!   (streams) or the upstream's own body — so a stream cut before its usage stays estimated
//!   (SPEC §7), as it would natively. A Responses `response` echoes request settings the schema
//!   requires (`instructions`, `tools`, `tool_choice`, sampling, `metadata`) as their defaults, and
//!   its text carries empty `logprobs`.
//! - Cache writes have a field only in Messages; [`StreamTranslator::usage`] keeps them (the
//!   upstream's own reading) for a client of another dialect. Reasoning tokens have none in
//!   Messages (its output includes thinking).
//! - Chat reasoning is written as `reasoning_content` (DeepSeek's, vLLM's and SGLang's field, the
//!   one their clients read); `reasoning` is read too. Responses reasoning is written as a
//!   reasoning item's summary (`response.reasoning_summary_text.delta`), the form clients show.
//! - The chat usage chunk is always written: the relay reads it and drops it unless the client
//!   asked for it (SPEC §7), as for a native stream, so the context does not carry that wish.
//! - Finish reasons map through [`FinishReason`]; a choice that called a tool and ended naturally
//!   (Gemini says `STOP`, Responses `completed`) ends as the client's tool-call reason.
//! - Malformed upstream events become one unreadable event of the client's: the gate fails the
//!   route on it before commit and the relay drops and counts it after, as for a native stream.
//!   Keep-alives and unknown event types are dropped.
//! - Per-stream state is small: the open block or item, the tool calls' numbers, the usage so far,
//!   the finish. Only protocols that repeat output keep it, at most [`MAX_KEPT_BYTES`]: Responses
//!   (its `.done` events and `response.completed` carry every item whole: SDKs and agent loops take
//!   the final answer, tool calls included, from `response.completed`) and Gemini (a
//!   `functionCall` is emitted whole, so the current call's arguments wait for its end).
//! - Messages and Responses clients get choice 0; chat and Gemini clients get every choice up to
//!   [`AnswerContext::choices`]. Blocks and items follow each other: an argument fragment for a
//!   tool call that is no longer the open one (upstreams send calls in order) is dropped.
//! - Left out: signatures of thinking (Anthropic `signature_delta`, Gemini `thoughtSignature`,
//!   Responses `encrypted_content`: only their own provider can read them back), refusals (carried
//!   as text), citations, logprobs, audio and media parts.

use std::collections::BTreeSet;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::api::Api;
use crate::classify::{classify_error_payload, is_error_payload, FailureClass, Verdict};
use crate::dialects;
use crate::dialects::{event_kind, ClientEvent, FinishReason, Reported};
use crate::sse::{SseEvent, Upstream};

/// The most choices a translated answer carries (chat's `n` cap).
pub const MAX_CHOICES: u32 = 128;
/// The most output bytes a writer keeps to repeat (Responses items, one Gemini call's arguments).
pub const MAX_KEPT_BYTES: usize = 4 * 1024 * 1024;
/// The most tool calls a reader or writer tracks per stream; later ones are dropped.
pub const MAX_CALLS: usize = 1024;

/// What the client's dialect needs that the upstream's events may lack.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerContext {
    /// The id the answer's ids derive from (the gateway's generation id): `chatcmpl-<id>`,
    /// `msg_<id>`, `resp_<id>`, Gemini's `responseId` `<id>`, and the items' `msg_<id>_<n>` ….
    pub id: String,
    /// The model name the client asked for, shown in every answer.
    pub model: String,
    /// Unix time in seconds (chat `created`, Responses `created_at`).
    pub created: u64,
    /// Choices asked for (chat `n`, Gemini `candidateCount`); a stream is complete when each has
    /// finished. Clamped to 1..=[`MAX_CHOICES`], and 1 for Messages and Responses clients.
    pub choices: u32,
    /// (function name, namespace) of a Responses client's `namespace` tools, flattened for a
    /// route of another dialect: a call of one is written back with its namespace.
    pub namespaces: Vec<(String, String)>,
}

impl AnswerContext {
    /// The namespace a called function belongs to, when the client grouped it in one.
    pub(crate) fn namespace_of(&self, function: &str) -> Option<String> {
        self.namespaces
            .iter()
            .find(|(name, _)| name == function)
            .map(|(_, space)| space.clone())
    }

    /// The answer's own id in a dialect: `prefix` then the context's id.
    pub(crate) fn answer_id(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.id)
    }

    /// The id of the `n`th item or tool call where the upstream gave none.
    pub(crate) fn item_id(&self, prefix: &str, n: usize) -> String {
        format!("{prefix}{}_{n}", self.id)
    }

    /// A tool call's id: the upstream's, else the `n`th generated one.
    pub(crate) fn call_id(&self, prefix: &str, id: &str, n: usize) -> String {
        match id.is_empty() {
            true => self.item_id(prefix, n),
            false => id.to_string(),
        }
    }

    /// The context with its choices as a `client` answer can carry them.
    fn for_client(&self, client: Api) -> AnswerContext {
        let choices = match dialects::of(client).many_choices() {
            true => self.choices.clamp(1, MAX_CHOICES),
            false => 1,
        };
        AnswerContext {
            choices,
            ..self.clone()
        }
    }
}

/// Token counts as the upstream reported them (SPEC §17), plus the reasoning part of the output
/// where its dialect says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Tokens {
    pub counts: Reported,
    pub reasoning: Option<u64>,
}

impl Tokens {
    /// Takes the counts `newer` has (a later report replaces an earlier one).
    pub(crate) fn update(&mut self, newer: Tokens) {
        self.counts.update(newer.counts);
        self.reasoning = newer.reasoning.or(self.reasoning);
    }

    /// Every input and output token, when both are known.
    pub(crate) fn total(&self) -> Option<u64> {
        Some(self.counts.input_tokens?.saturating_add(self.counts.output_tokens?))
    }

    /// The reasoning part of the output, never more than the output.
    pub(crate) fn reasoning_part(&self) -> Option<u64> {
        Some(self.reasoning?.min(self.counts.output_tokens?))
    }

    /// Every cache write (5-minute and 1-hour).
    pub(crate) fn cache_writes(&self) -> u64 {
        let c = &self.counts;
        c.cache_write_tokens
            .unwrap_or(0)
            .saturating_add(c.cache_write_1h_tokens.unwrap_or(0))
    }
}

/// An upstream error: its error object as sent, and its class as read in the upstream's dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamError {
    pub error: Map<String, Value>,
    pub class: FailureClass,
}

/// The message of an error that carries none.
const NO_MESSAGE: &str = "The provider reported an error.";

impl UpstreamError {
    /// From an error payload as a dialect's inspector reports it (`EventInfo::error`): the object
    /// the classifier reads — `error`, a Responses `response.error`, or the payload itself.
    pub fn from_payload(payload: &Value) -> UpstreamError {
        let root = match payload {
            Value::Array(items) => items.first().unwrap_or(payload),
            other => other,
        };
        let error = match (root.get("error"), root.pointer("/response/error")) {
            (Some(Value::Object(e)), _) | (_, Some(Value::Object(e))) => e.clone(),
            (Some(Value::String(s)), _) => message_only(s),
            _ => match root {
                Value::Object(flat) => {
                    let mut e = flat.clone();
                    e.remove("sequence_number");
                    if e.get("type").and_then(Value::as_str) == Some("error") {
                        e.remove("type");
                    }
                    e
                }
                Value::String(s) => message_only(s),
                _ => Map::new(),
            },
        };
        UpstreamError {
            error,
            class: classify_error_payload(payload).class,
        }
    }

    /// The human message.
    pub fn message(&self) -> String {
        match self.error.get("message").and_then(Value::as_str) {
            Some(m) if !m.trim().is_empty() => m.to_string(),
            _ => NO_MESSAGE.to_string(),
        }
    }

    /// The error object with `defaults` for the fields it lacks (the upstream's own fields stay:
    /// they are what the class was read from).
    pub(crate) fn object_with(&self, defaults: &[(&str, Value)]) -> Value {
        let mut error = self.error.clone();
        error.insert("message".into(), Value::from(self.message()));
        for (key, value) in defaults {
            if !error.contains_key(*key) {
                error.insert((*key).to_string(), value.clone());
            }
        }
        Value::Object(error)
    }

    /// The class's names in each dialect, for the fields an error object lacks.
    pub(crate) fn names(&self) -> ClassNames {
        let (anthropic_type, openai_code, http_code, google_status) = match self.class {
            FailureClass::Account => ("authentication_error", "invalid_api_key", 403, "PERMISSION_DENIED"),
            FailureClass::ContentPolicy => ("invalid_request_error", "content_filter", 400, "INVALID_ARGUMENT"),
            FailureClass::Overloaded => ("overloaded_error", "server_is_overloaded", 503, "UNAVAILABLE"),
            FailureClass::RateLimited => ("rate_limit_error", "rate_limit_exceeded", 429, "RESOURCE_EXHAUSTED"),
            // A stream's error payload is one of the classes above or `bad_response`.
            _ => ("api_error", "server_error", 500, "INTERNAL"),
        };
        ClassNames {
            anthropic_type,
            openai_code,
            http_code,
            google_status,
        }
    }
}

/// A failure class's names: Anthropic's error `type`, OpenAI's `code`, the HTTP code and Google's
/// `status`. Each says no more than the class does, so an error object given them is still read
/// as that class.
pub(crate) struct ClassNames {
    pub(crate) anthropic_type: &'static str,
    pub(crate) openai_code: &'static str,
    pub(crate) http_code: u16,
    pub(crate) google_status: &'static str,
}

fn message_only(message: &str) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("message".into(), Value::from(message));
    e
}

/// One step of an answer, whatever its dialect.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The answer begins: written before its first other event, unless that is an error.
    Start,
    /// Output text of a choice.
    Text { choice: u32, text: String },
    /// Reasoning (thinking) text of a choice.
    Reasoning { choice: u32, text: String },
    /// A tool call begins: `call` numbers it within the upstream's stream; `id` is the
    /// upstream's call id (empty when it gave none).
    ToolStart {
        choice: u32,
        call: u32,
        id: String,
        name: String,
    },
    /// The next fragment of a call's JSON arguments.
    ToolArgs { choice: u32, call: u32, fragment: String },
    /// A choice finished.
    Finish { choice: u32, reason: FinishReason },
    /// Usage so far (a later report replaces an earlier one, count by count).
    Usage(Tokens),
    /// The upstream reported an error: the stream ends with it.
    Error(UpstreamError),
    /// The upstream's end of stream (`[DONE]`, `message_stop`, `response.completed`); Gemini
    /// streams have none, their end is the stream's close after every choice finished.
    End,
}

impl Event {
    pub(crate) fn choice(&self) -> Option<u32> {
        match self {
            Event::Text { choice, .. }
            | Event::Reasoning { choice, .. }
            | Event::ToolStart { choice, .. }
            | Event::ToolArgs { choice, .. }
            | Event::Finish { choice, .. } => Some(*choice),
            _ => None,
        }
    }
}

/// An upstream event whose data is not JSON.
#[derive(Debug)]
pub(crate) struct Unreadable;

/// Reads one dialect's upstream stream events, their data parsed once by the translator (or
/// decoded from a binary frame).
pub(crate) trait AnswerReader: std::fmt::Debug {
    /// The neutral events of one upstream event of type `kind` (its data's `type`, else its
    /// name) whose data is `v`, in order.
    fn read(&mut self, v: &Value, kind: &str, out: &mut Vec<Event>);
    /// The neutral events of an event whose data is not JSON: unreadable, except a dialect's
    /// sentinel (chat's `[DONE]`).
    fn read_text(&mut self, _data: &str, _out: &mut Vec<Event>) -> Result<(), Unreadable> {
        Err(Unreadable)
    }
}

/// Writes neutral events as one dialect's client events.
pub(crate) trait AnswerWriter: std::fmt::Debug {
    fn write(&mut self, ev: Event, out: &mut Vec<ClientEvent>);
}

fn reader(api: Api) -> Box<dyn AnswerReader> {
    dialects::of(api).answer_reader()
}

/// The writer of a client's dialect (Converse, no client's, gets chat's).
fn writer(api: Api, ctx: AnswerContext) -> Box<dyn AnswerWriter> {
    dialects::of(api).answer_writer(ctx)
}

/// One upstream stream translated into the client's dialect, event by event (never buffered
/// whole). Feed it every upstream event ([`StreamTranslator::push`]), then call
/// [`StreamTranslator::close`] when the upstream closed; what comes out goes to the client
/// dialect's `relay::Gate` and `Relay` with the JSON each event was written from (or what it
/// means), so they read it without parsing it: an upstream event is parsed once (here, unless its
/// frame was decoded already) and each client event written once.
#[derive(Debug)]
pub struct StreamTranslator {
    reader: Box<dyn AnswerReader>,
    writer: Box<dyn AnswerWriter>,
    pub(crate) choices: u32,
    started: bool,
    finished: BTreeSet<u32>,
    pub(crate) usage: Tokens,
    /// Ended (the upstream's end, or an error): nothing more is written.
    closed: bool,
}

impl StreamTranslator {
    pub fn new(upstream: Api, client: Api, ctx: AnswerContext) -> StreamTranslator {
        let ctx = ctx.for_client(client);
        StreamTranslator {
            reader: reader(upstream),
            choices: ctx.choices,
            writer: writer(client, ctx),
            started: false,
            finished: BTreeSet::new(),
            usage: Tokens::default(),
            closed: false,
        }
    }

    /// The client events for one upstream event, each with the exact bytes to send, appended to
    /// `out`.
    pub fn push(&mut self, ev: &Upstream, out: &mut Vec<ClientEvent>) {
        if self.closed {
            return;
        }
        let mut events = Vec::new();
        let read = match ev {
            Upstream::Json { name, data } => {
                self.reader.read(data, event_kind(data, Some(name)), &mut events);
                Ok(())
            }
            Upstream::Sse(ev) if ev.oversize => Err(Unreadable),
            Upstream::Sse(ev) => match ev.json() {
                Some(v) => {
                    self.reader.read(&v, event_kind(&v, ev.event.as_deref()), &mut events);
                    Ok(())
                }
                None if !ev.has_data => Ok(()), // a comment, a keep-alive
                None => self.reader.read_text(ev.data.trim(), &mut events),
            },
        };
        if read.is_err() {
            out.push(unreadable());
            return;
        }
        for e in events {
            self.write(e, out);
        }
    }

    /// The upstream closed normally: the client's closing events if every choice finished and the
    /// upstream's own end did not close the answer already (Gemini, or a sentinel never sent).
    /// Otherwise nothing — the stream is broken, and the relay ends it with the client's error
    /// frame (SPEC §7).
    pub fn close(&mut self, out: &mut Vec<ClientEvent>) {
        if !self.closed && self.finished.len() >= self.choices as usize {
            self.write(Event::End, out);
        }
    }

    /// [`StreamTranslator::push`] of one SSE event, as the client's bytes (tests).
    #[cfg(test)]
    pub(crate) fn on_event(&mut self, ev: &SseEvent) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.push(&Upstream::Sse(ev.clone()), &mut out);
        out.into_iter().map(|e| e.ev).collect()
    }

    /// [`StreamTranslator::close`], as the client's bytes (tests).
    #[cfg(test)]
    pub(crate) fn on_end(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        self.close(&mut out);
        out.into_iter().map(|e| e.ev).collect()
    }

    /// The usage as the upstream reported it, read in its own dialect (cache writes included,
    /// which only a Messages client's fields can carry).
    pub fn usage(&self) -> Reported {
        self.usage.counts
    }

    fn write(&mut self, e: Event, out: &mut Vec<ClientEvent>) {
        if self.closed || e.choice().is_some_and(|c| c >= self.choices) {
            return;
        }
        match &e {
            Event::Usage(t) => self.usage.update(*t),
            Event::Finish { choice, .. } => {
                self.finished.insert(*choice);
            }
            Event::Error(_) | Event::End => self.closed = true,
            _ => {}
        }
        if !self.started && !matches!(e, Event::Error(_)) {
            self.started = true;
            self.writer.write(Event::Start, out);
        }
        self.writer.write(e, out);
    }
}

/// A whole neutral answer (non-stream).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Answer {
    pub(crate) choices: Vec<Choice>,
    pub(crate) usage: Tokens,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Choice {
    pub(crate) parts: Vec<Part>,
    pub(crate) finish: Option<FinishReason>,
}

impl Choice {
    pub(crate) fn has_calls(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Call { .. }))
    }

    /// How it ended: as said, else naturally.
    pub(crate) fn reason(&self) -> FinishReason {
        self.finish.unwrap_or(FinishReason::Natural)
    }

    /// Its text parts joined (`None` without any), or its reasoning parts'.
    pub(crate) fn joined(&self, reasoning: bool) -> Option<String> {
        let mut texts = self.parts.iter().filter_map(|p| match (p, reasoning) {
            (Part::Text(t), false) | (Part::Reasoning(t), true) => Some(t.as_str()),
            _ => None,
        });
        let first = texts.next()?.to_string();
        Some(texts.fold(first, |acc, t| acc + t))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Reasoning(String),
    /// A whole tool call: the upstream's id (empty when it gave none), its JSON arguments.
    Call {
        id: String,
        name: String,
        arguments: String,
    },
}

impl Part {
    /// The part as stream events of `choice`; a whole call (numbered `call`) begins and carries
    /// its arguments in one fragment.
    pub(crate) fn into_events(self, choice: u32, call: u32, out: &mut Vec<Event>) {
        match self {
            Part::Text(text) => out.push(Event::Text { choice, text }),
            Part::Reasoning(text) => out.push(Event::Reasoning { choice, text }),
            Part::Call { id, name, arguments } => {
                out.push(Event::ToolStart { choice, call, id, name });
                out.push(Event::ToolArgs {
                    choice,
                    call,
                    fragment: arguments,
                });
            }
        }
    }
}

/// A whole non-stream answer from `upstream`, written in `client`'s dialect: text, reasoning,
/// tool calls, finish reasons and usage of every choice the client can carry. An error payload
/// or a body that is no answer is the verdict the upstream's inspector would give.
pub fn body(upstream: Api, client: Api, bytes: &[u8], ctx: &AnswerContext) -> Result<Vec<u8>, Verdict> {
    let v: Value = serde_json::from_slice(bytes).map_err(|_| Verdict::bad("unparseable response body"))?;
    if is_error_payload(&v) {
        return Err(classify_error_payload(&v));
    }
    let mut answer = dialects::of(upstream).read_answer(&v)?;
    let ctx = ctx.for_client(client);
    answer.choices.truncate(ctx.choices as usize);
    Ok(dialects::of(client).write_answer(&answer, &ctx))
}

/// One client event of typed `data` kept as JSON beside its bytes (a chat or Gemini chunk with
/// usage: the relay writes the charge into it).
pub(crate) fn frame(name: Option<&str>, data: &impl Serialize) -> ClientEvent {
    // Serializing the module's own types and JSON values cannot fail.
    ClientEvent::written(name, serde_json::to_value(data).unwrap_or_default())
}

/// What an unreadable upstream event becomes: an event every client inspector reads as malformed.
fn unreadable() -> ClientEvent {
    ClientEvent::text(SseEvent::from_data("(unreadable upstream event)"))
}

/// A non-empty string at `pointer`.
pub(crate) fn text_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The elements of an array at `pointer` (none if it is not one).
pub(crate) fn items_at<'a>(v: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    v.pointer(pointer).and_then(Value::as_array).into_iter().flatten()
}

/// An index field: absent or null is 0; anything but a `u32` is none.
pub(crate) fn index_at(v: &Value, pointer: &str) -> Option<u32> {
    match v.pointer(pointer) {
        None | Some(Value::Null) => Some(0),
        Some(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
    }
}

/// Appends `more` to what a writer keeps, within its budget of [`MAX_KEPT_BYTES`]: past it,
/// nothing more is kept (what was kept stays a prefix of the output).
pub(crate) fn keep(kept: &mut String, more: &str, budget: &mut usize) {
    if more.len() <= *budget {
        kept.push_str(more);
        *budget -= more.len();
    } else {
        *budget = 0;
    }
}

/// A tool call's arguments as the JSON object the dialects that carry calls whole need (`{}`
/// when they are not one: a call cut by the output limit).
pub(crate) fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => json!({}),
    }
}

/// A choice that called a tool and ended naturally ended to call it.
pub(crate) fn ended_for_tools(reason: FinishReason, tools: bool) -> bool {
    tools && matches!(reason, FinishReason::Natural | FinishReason::Other)
}

/// OpenAI's `cached_tokens` detail (chat `prompt_tokens_details`, Responses
/// `input_tokens_details`).
#[derive(Debug, Serialize)]
pub(crate) struct CachedTokens {
    cached_tokens: u64,
}

/// OpenAI's `reasoning_tokens` detail (chat `completion_tokens_details`, Responses
/// `output_tokens_details`).
#[derive(Debug, Serialize)]
pub(crate) struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl Tokens {
    pub(crate) fn cached_detail(&self) -> Option<CachedTokens> {
        self.counts.input_tokens?;
        Some(CachedTokens {
            cached_tokens: self.counts.cache_read_tokens.unwrap_or(0),
        })
    }

    pub(crate) fn reasoning_detail(&self) -> Option<ReasoningTokens> {
        self.counts.output_tokens?;
        Some(ReasoningTokens {
            reasoning_tokens: self.reasoning_part().unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests;

/// The gateway's own gate and relay on translated streams. Kept out of `tests` so that the module
/// check (`scripts/check-modules`, which skips a file's trailing test module) sees no `relay`
/// import here: only a test uses it.
#[cfg(test)]
mod through_the_relay {
    use super::tests::{
        as_usage, commit_index, fixture_usage, inspect, pairs, translate, until_content, upstream, upstream_errors,
        Scenario,
    };
    use super::*;
    use crate::catalog::Price;
    use crate::dialects::StreamDialect;
    use crate::generation::{Tariff, UsageLimits};
    use crate::relay::{After, Before, Gate, Relay};

    fn frames(bytes: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        crate::sse::SseParser::new().push(bytes, &mut events);
        events
    }

    fn gate(client: Api, wants_usage: bool) -> Gate {
        Gate::new(
            StreamDialect::of(client),
            wants_usage,
            false,
            1,
            crate::redact::Redactor::default(),
        )
    }

    /// Runs client events through a gate, then its relay once committed: the index of the
    /// committing event, the bytes sent, the relay and how it ended (`None`: still open).
    fn relay(client: Api, wants_usage: bool, out: Vec<SseEvent>) -> (usize, Vec<u8>, Relay, Option<After>) {
        let mut gate = gate(client, wants_usage);
        let mut events = out.into_iter().enumerate();
        let (at, mut sent) = loop {
            let (i, ev) = events.next().expect("the stream commits");
            match gate.on_event(ev) {
                Before::Hold => {}
                Before::Commit(held) => break (i, held),
                Before::Fail(verdict) => panic!("the route failed: {verdict:?}"),
            }
        };
        let mut relay = gate.into_relay();
        relay.price_with(Tariff {
            price: Price::per_mtok(1.0, 2.0),
            held_micros: Some(10_000_000),
            limits: UsageLimits {
                max_tokens: 1000,
                max_input_tokens: 100_000,
                body_len: 30,
            },
            tools: Default::default(),
        });
        for (_, ev) in events {
            match relay.on_event(ev) {
                After::Send(bytes) => sent.extend(bytes),
                After::Skip => {}
                end @ After::End { .. } => return (at, sent, relay, Some(end)),
            }
        }
        (at, sent, relay, None)
    }

    #[test]
    fn translated_streams_commit_end_and_are_billed_as_native_ones() {
        for (up, client) in pairs() {
            for scenario in [Scenario::Text, Scenario::Tools, Scenario::Reasoning] {
                for wants_usage in [false, true] {
                    let label = format!("{up:?} → {client:?}, {scenario:?}, usage asked: {wants_usage}");
                    let out = translate(up, client, &upstream(up, scenario));
                    let (at, mut sent, mut relay, end) = relay(client, wants_usage, out);
                    assert_eq!(at, commit_index(client, scenario), "{label}");
                    // Gemini has no sentinel: its relay finalises at the close, every choice finished.
                    let end = end.unwrap_or_else(|| relay.on_close());
                    let After::End { bytes, broken: None } = end else {
                        panic!("{label}: {end:?}");
                    };
                    sent.extend(bytes);
                    assert_eq!(as_usage(relay.delivery().usage), fixture_usage(up), "{label}");
                    // The final usage event carries the charge, where the client sees usage at all.
                    let priced = String::from_utf8(sent).unwrap().contains("\"cost\":");
                    let sees_usage = client != Api::Gemini && (client != Api::Chat || wants_usage);
                    assert_eq!(priced, sees_usage, "{label}");
                }
            }
        }
    }

    #[test]
    fn a_translated_stream_that_breaks_ends_with_the_client_error_frame() {
        for (up, client) in pairs() {
            let label = format!("{up:?} → {client:?}");
            let (_, _, mut relay, end) = relay(client, false, translate(up, client, &until_content(up)));
            assert!(end.is_none(), "{label}");
            let After::End { bytes, broken: Some(_) } = relay.on_close() else {
                panic!("{label}: a cut stream is broken");
            };
            let data: Value = serde_json::from_str(&frames(&bytes)[0].data).unwrap();
            let ended = match client {
                Api::Converse => unreachable!("Converse has its own tests"),
                Api::Chat => data["choices"][0]["finish_reason"] == "error",
                Api::Messages => data["type"] == "error",
                Api::Responses => data["type"] == "response.failed",
                Api::Gemini => data["error"]["status"] == "UNAVAILABLE",
            };
            assert!(ended, "{label}: {data}");
        }
    }

    #[test]
    fn an_upstream_error_after_commit_ends_the_client_stream_in_its_dialect() {
        for (up, error) in upstream_errors() {
            let class = classify_error_payload(&inspect(up, &error).error.unwrap()).class;
            for client in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini] {
                if client == up {
                    continue;
                }
                let label = format!("{up:?} → {client:?}: {}", error.data);
                let mut events = until_content(up);
                events.push(error.clone());
                let (_, _, _, end) = relay(client, false, translate(up, client, &events));
                let Some(After::End {
                    bytes,
                    broken: Some(why),
                }) = end
                else {
                    panic!("{label}: {end:?}");
                };
                assert!(why.starts_with("upstream error event"), "{label}");
                let frames = frames(&bytes);
                if client == Api::Chat {
                    // The relay's own chat frame: an error chunk, then `[DONE]`.
                    assert_eq!(frames.len(), 2, "{label}");
                    assert!(frames[0].data.contains("\"finish_reason\":\"error\""), "{label}");
                    assert_eq!(frames[1].data, "[DONE]", "{label}");
                } else {
                    // The translated error event, passed as the client's SDK reads it.
                    let payload = inspect(client, &frames[0]).error.unwrap();
                    assert_eq!(classify_error_payload(&payload).class, class, "{label}");
                }
            }
        }
    }
}
