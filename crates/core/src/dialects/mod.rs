//! The dialects: everything one API knows, one folder each, behind one trait and one registry.
//!
//! A dialect folder (`chat/`, `messages/`, `responses/`, `gemini/`, `converse/`) holds how a
//! request in that API is parsed and validated (`mod.rs`: [`ClientRequest`], stream events as
//! [`EventInfo`], whole bodies as [`BodyInfo`]), how it is read into and written from the neutral
//! request (`request.rs`), and how its answers are read into and written from neutral answer
//! events (`answer.rs`). [`neutral`] is the form between them (SPEC §19). Everything else asks
//! `of` which dialect — the one registry — instead of matching on [`Api`]; adding a dialect is a
//! folder, an [`Api`] variant and a line in `of` (docs/ARCHITECTURE.md says how).

/// The [`Dialect`] methods every client dialect's folder answers the same way, from the parts it
/// has under the same names: `inspect_body` and `STREAM` in its `mod.rs`, `request::read`, and
/// `answer::{Reader, Writer, read_body, write_body}`. Used inside each folder's `impl Dialect`.
macro_rules! folder_parts {
    () => {
        fn inspect_body(&self, body: &[u8]) -> Result<BodyInfo, Verdict> {
            inspect_body(body)
        }
        fn stream(&self) -> &'static StreamDialect {
            &STREAM
        }
        fn read_request(&self, body: &Body) -> Result<Neutral, Unable> {
            request::read(body)
        }
        fn answer_reader(&self) -> Box<dyn AnswerReader> {
            Box::<answer::Reader>::default()
        }
        fn answer_writer(&self, ctx: AnswerContext) -> Box<dyn AnswerWriter> {
            Box::new(answer::Writer::new(ctx))
        }
        fn read_answer(&self, body: &Value) -> Result<Answer, Verdict> {
            answer::read_body(body)
        }
        fn write_answer(&self, answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
            answer::write_body(answer, ctx)
        }
    };
}

pub mod body;
pub mod chat;
pub mod converse;
pub mod external;
pub mod gemini;
pub mod messages;
pub mod neutral;
pub mod responses;

use serde::Deserialize;
use serde_json::Value;

use body::Body;
use neutral::answer::{Answer, AnswerContext, AnswerReader, AnswerWriter};
use neutral::request::{Neutral, Setting, Unable, Writer};

use crate::api::Api;
use crate::classify::Verdict;
use crate::error::{ApiError, ErrorShape};
use crate::sse::{SseEvent, Upstream};
use crate::tools::{Declared, ServerTool, ServerTools, ToolUses};

/// What one dialect knows. Each folder implements it once; [`of`] is the registry.
pub(crate) trait Dialect: Sync {
    /// How errors name it ("Chat Completions").
    fn name(&self) -> &'static str;
    /// A client's request body parsed and validated; `path` is Gemini's (model, stream), which it
    /// names in the path. A dialect only routes speak refuses.
    fn parse_request(&self, bytes: &[u8], path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError>;
    /// A whole non-stream answer: usage and output size, or why it is no answer.
    fn inspect_body(&self, body: &[u8]) -> Result<BodyInfo, Verdict>;
    /// Its streams, as the gate and the relay read and end them.
    fn stream(&self) -> &'static StreamDialect;
    /// How an error is said to a client of this dialect.
    fn error_shape(&self) -> ErrorShape;
    /// Sets the output limit in a client's `body` that set none (it is always written, so the
    /// upstream cannot produce more than was held).
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64);
    /// The field that holds the conversation.
    fn conversation_field(&self) -> &'static str;
    /// How a client writing this dialect names `setting` (in errors and dropped-field lists).
    fn setting_name(&self, setting: Setting) -> &'static str;
    /// A one-turn request (`text` from the user, at most `max_output_tokens` out, not streamed)
    /// as a client of it writes one: a route's health check (SPEC §10). `None` for a dialect only
    /// routes speak.
    fn one_turn(&self, _model: &str, _text: &str, _max_output_tokens: u64) -> Option<Value> {
        None
    }
    /// Which of its endpoints `path` is (SPEC §2), with the part of the path that names the
    /// model for a dialect that names it there (Gemini). `None` for a dialect only routes speak.
    fn endpoint<'a>(&self, _path: &'a str) -> Option<(Action, Option<&'a str>)> {
        None
    }
    /// Speaks OpenAI's shared fields (`store`, `metadata`, `service_tier`…), carried between the
    /// two OpenAI dialects and dropped for the rest.
    fn openai_shared(&self) -> bool {
        false
    }
    /// Its answers carry several choices (`n`, `candidateCount`).
    fn many_choices(&self) -> bool {
        false
    }
    /// A client's body read into the neutral request.
    fn read_request(&self, body: &Body) -> Result<Neutral, Unable>;
    /// The neutral request written for a route serving `upstream_model`.
    fn write_request(&self, w: &mut Writer, upstream_model: &str) -> Result<Vec<u8>, Unable>;
    /// Reads a route's stream events into neutral answer events.
    fn answer_reader(&self) -> Box<dyn AnswerReader>;
    /// Writes neutral answer events as this client's stream.
    fn answer_writer(&self, ctx: AnswerContext) -> Box<dyn AnswerWriter>;
    /// Reads a route's whole answer body.
    fn read_answer(&self, body: &Value) -> Result<Answer, Verdict>;
    /// Writes a whole answer as this client's body.
    fn write_answer(&self, answer: &Answer, ctx: &AnswerContext) -> Vec<u8>;
    /// Its token-count surface (SPEC §21), when its providers have one.
    fn counting(&self) -> Option<&'static Counting> {
        None
    }
}

/// A dialect's token counting (SPEC §21): a client's count request read as the generation request
/// it counts, a route's generation body written as its provider's count body, and the answers.
/// Each folder that has one keeps it in `counting.rs`.
#[derive(Debug)]
pub struct Counting {
    /// A client's count request as the generation request whose input it counts (what the
    /// dialect's parser then validates).
    pub request: fn(&[u8]) -> Result<Vec<u8>, ApiError>,
    /// A route's generation body (for `model`) as the provider's count endpoint takes it: only
    /// the fields that endpoint accepts.
    pub body: fn(&[u8], &str) -> Result<Vec<u8>, ApiError>,
    /// Where the provider's count answer has the number (a JSON pointer).
    pub tokens_at: &'static str,
    /// The count as this dialect's clients get it; `estimated`: no route counted it.
    pub answer: fn(u64, bool) -> Value,
}

/// A generation body with only `names` of its fields, its model `model`: the count request of a
/// dialect whose count endpoint takes the generation request's input fields as they are.
pub(crate) fn counted_fields(generation: &[u8], model: &str, names: &[&str]) -> Result<Vec<u8>, ApiError> {
    let mut body = Body::parse(generation)?;
    body.keep_only(names);
    Ok(body.write_with_model(model, generation.len()))
}

/// A count answer, marked `"estimated": true` when no route counted it.
pub(crate) fn count_answer(mut answer: Value, estimated: bool) -> Value {
    if let (true, Some(fields)) = (estimated, answer.as_object_mut()) {
        fields.insert("estimated".into(), Value::Bool(true));
    }
    answer
}

/// The token counting of `api`, when it has one.
pub fn counting(api: Api) -> Option<&'static Counting> {
    of(api).counting()
}

/// What the relay needs from a dialect's streams: what an event means, how a broken stream
/// ends, and the end-of-stream sentinel for a stream that finished without it. Each dialect
/// folder has its `STREAM`.
#[derive(Debug)]
pub struct StreamDialect {
    /// What an event means, read from its data as JSON (`None`: it has no data, or data that is
    /// not JSON) — parsed once, by whoever had it first.
    pub inspect: fn(&SseEvent, Option<&Value>) -> EventInfo,
    /// (stream id, model, message) → the bytes that end a broken stream.
    pub error_frame: fn(&str, &str, &str) -> Vec<u8>,
    pub done_frame: &'static [u8],
    /// After commit an upstream error event is passed as sent (its SDK reads it); otherwise it
    /// is replaced by [`StreamDialect::error_frame`].
    pub pass_error_events: bool,
}

impl StreamDialect {
    /// The stream dialect of a client API.
    pub fn of(api: Api) -> &'static StreamDialect {
        of(api).stream()
    }
}

/// One event of the client's stream: the bytes it gets, and its data as JSON when Switchyard
/// has it already — it wrote the event (a translation, a decoded Bedrock frame) or the gate read
/// it — so the gate and the relay never parse what was written or read before.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientEvent {
    pub ev: SseEvent,
    pub data: Data,
}

/// What is known of a [`ClientEvent`]'s data.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    /// Text as the upstream sent it, not read yet.
    Unread,
    /// Its JSON (the same value its bytes carry).
    Json(Value),
    /// Written by Switchyard from a typed chunk: what it means, said by its writer (what the
    /// dialect's inspector reads from its bytes; the translation tests hold the two equal). Never
    /// a chunk with usage: the relay writes the charge into that one's [`Data::Json`].
    Known(Box<EventInfo>),
    /// Read, or written by Switchyard: no JSON (no data, `[DONE]`, an unreadable event).
    NotJson,
}

impl ClientEvent {
    /// An event Switchyard wrote from `data` (the one serialisation).
    pub fn written(name: Option<&str>, data: Value) -> ClientEvent {
        ClientEvent {
            ev: SseEvent::written(name, &data),
            data: Data::Json(data),
        }
    }

    /// An event Switchyard wrote from a typed chunk, with what it means.
    pub fn known(ev: SseEvent, info: EventInfo) -> ClientEvent {
        ClientEvent {
            ev,
            data: Data::Known(Box::new(info)),
        }
    }

    /// An event Switchyard wrote that carries no JSON.
    pub fn text(ev: SseEvent) -> ClientEvent {
        ClientEvent {
            ev,
            data: Data::NotJson,
        }
    }

    /// What the event means in `dialect`: its data parsed here if nobody read it before (the one
    /// parse of a native event), then kept for the relay (the charge goes into it).
    pub fn inspect(&mut self, dialect: &StreamDialect) -> EventInfo {
        if self.ev.oversize {
            // Past the event cap: whatever it said, it is malformed (SPEC §15).
            return EventInfo {
                malformed: true,
                ..EventInfo::default()
            };
        }
        match &self.data {
            Data::Unread => {
                self.data = match self.ev.json() {
                    Some(v) => Data::Json(v),
                    None => Data::NotJson,
                }
            }
            // Said once, taken once.
            Data::Known(_) => {
                if let Data::Known(info) = std::mem::replace(&mut self.data, Data::NotJson) {
                    return *info;
                }
            }
            Data::Json(_) | Data::NotJson => {}
        }
        let json = match &self.data {
            Data::Json(v) => Some(v),
            _ => None,
        };
        (dialect.inspect)(&self.ev, json)
    }
}

/// An upstream's event, not read yet.
impl From<SseEvent> for ClientEvent {
    fn from(ev: SseEvent) -> ClientEvent {
        ClientEvent { ev, data: Data::Unread }
    }
}

/// An upstream event passed to a client of its own dialect: a decoded frame is written once and
/// keeps its JSON.
impl From<Upstream> for ClientEvent {
    fn from(ev: Upstream) -> ClientEvent {
        match ev {
            Upstream::Sse(ev) => ClientEvent::from(ev),
            Upstream::Json { name, data } => ClientEvent::written(Some(&name), data),
        }
    }
}

impl From<Api> for ErrorShape {
    fn from(api: Api) -> ErrorShape {
        of(api).error_shape()
    }
}

/// The registry: the dialect that speaks `api`.
pub(crate) fn of(api: Api) -> &'static dyn Dialect {
    match api {
        Api::Chat => &chat::Chat,
        Api::Messages => &messages::Messages,
        Api::Responses => &responses::Responses,
        Api::Gemini => &gemini::Gemini,
        Api::Converse => &converse::Converse,
    }
}

/// What a client asks of a dialect's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// A generation (`/v1/messages`, `…:generateContent`).
    Generate,
    /// A count of the input's tokens (SPEC §21).
    Count,
}

/// A request path as one of a client dialect's endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    pub api: Api,
    pub action: Action,
    /// The part of the path that names the model, for a dialect that names it there (Gemini's
    /// `{model}:{method}` for a generation, `{model}` for a count), still percent-encoded.
    pub in_path: Option<&'a str>,
}

/// The client dialect endpoint `path` is, asked of every registered client dialect (the HTTP
/// router's one question; the method is the router's to check).
pub fn endpoint(path: &str) -> Option<Endpoint<'_>> {
    Api::ALL.into_iter().find_map(|api| {
        let (action, in_path) = of(api).endpoint(path)?;
        Some(Endpoint { api, action, in_path })
    })
}

/// A client asked for a dialect only routes speak.
fn spoken_by_routes(name: &str) -> String {
    format!("{name} is spoken by routes, not by clients")
}

/// Characters per token when the upstream gave no count (SPEC §7).
pub const CHARS_PER_TOKEN: usize = 4;
/// What a generated image counts in an estimate, in tokens: Google's published count for an
/// output image up to 1024×1024 (the usual size); other media without a transcript count one.
pub const IMAGE_OUTPUT_TOKENS: usize = 1290;

/// Largest request body accepted (SPEC §13).
pub const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

/// Token counts of one answer, as charged (SPEC §17). `input_tokens` is every input token; the
/// cache counts are parts of it, so the uncached input is what is left of it
/// ([`Usage::uncached_input_tokens`]). Output includes reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input written to the prompt cache (Anthropic's 5-minute cache; any cache write elsewhere).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Input written to Anthropic's 1-hour cache.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
}

impl Usage {
    /// Plain input and output, no cache.
    pub fn plain(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            output_tokens,
            ..Usage::default()
        }
    }

    /// Input neither read from nor written to a cache.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens
            .saturating_sub(self.cache_read_tokens)
            .saturating_sub(self.cache_write_tokens)
            .saturating_sub(self.cache_write_1h_tokens)
    }
}

/// Token counts as an upstream reported them, each when it did: an Anthropic stream reports input
/// at its start and output at its end, so a stream cut in between knows only the input. Each
/// dialect maps its own fields in once (SPEC §17): `input_tokens` is every input token, the cache
/// counts are parts of it. `cache_write_tokens` without `cache_write_1h_tokens` is a total of
/// writes whose split was not given (charged as 5-minute writes unless an earlier report split
/// them, [`Reported::update`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reported {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cache_read_tokens: Option<u64>,
    pub cache_write_tokens: Option<u64>,
    pub cache_write_1h_tokens: Option<u64>,
    /// The uses of the provider's priced tools the answer reports (SPEC §21).
    pub tool_uses: ToolUses,
}

impl Reported {
    /// Every count at once.
    pub fn both(u: Usage) -> Reported {
        Reported {
            input_tokens: Some(u.input_tokens),
            output_tokens: Some(u.output_tokens),
            cache_read_tokens: Some(u.cache_read_tokens),
            cache_write_tokens: Some(u.cache_write_tokens),
            cache_write_1h_tokens: Some(u.cache_write_1h_tokens),
            ..Reported::default()
        }
    }

    /// Takes the counts `newer` has (a later report replaces an earlier one). Cache writes given
    /// as a total without their split ([`Reported::cache_write_1h_tokens`] `None`: Anthropic's
    /// `message_delta`) keep the split an earlier report gave, scaled to the new total — a
    /// later event never turns 1-hour writes into 5-minute ones.
    pub fn update(&mut self, newer: Reported) {
        let (writes, writes_1h) = match (newer.cache_write_tokens, newer.cache_write_1h_tokens) {
            (Some(total), None) => self.split_like_before(total),
            (five_minutes, one_hour) => (
                five_minutes.or(self.cache_write_tokens),
                one_hour.or(self.cache_write_1h_tokens),
            ),
        };
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_read_tokens = newer.cache_read_tokens.or(self.cache_read_tokens);
        self.cache_write_tokens = writes;
        self.cache_write_1h_tokens = writes_1h;
        self.tool_uses.update(newer.tool_uses);
    }

    /// `total` cache writes split as this report split its own: the same share in the 1-hour
    /// cache (all 5-minute writes when it gave no 1-hour ones).
    fn split_like_before(&self, total: u64) -> (Option<u64>, Option<u64>) {
        let (five_minutes, one_hour) = (
            self.cache_write_tokens.unwrap_or(0),
            self.cache_write_1h_tokens.unwrap_or(0),
        );
        if one_hour == 0 {
            return (Some(total), self.cache_write_1h_tokens);
        }
        let before = u128::from(five_minutes) + u128::from(one_hour);
        let hour = u64::try_from(u128::from(total) * u128::from(one_hour) / before).unwrap_or(total);
        (Some(total - hour.min(total)), Some(hour.min(total)))
    }

    pub fn is_empty(&self) -> bool {
        self.input_tokens.is_none() && self.output_tokens.is_none()
    }
}

/// A non-negative token count field of a usage object; absent or not a count → `None`.
pub(crate) fn count(v: Option<&Value>, pointer: &str) -> Option<u64> {
    v.and_then(|v| v.pointer(pointer)).and_then(Value::as_u64)
}

/// `json` (a whole answer or one stream event's data, in any dialect) with `cost` (USD) added to
/// its usage object — top-level `usage` (chat, messages, a whole responses answer) or
/// `response.usage` (the responses stream's `response.completed`). `None` if it has neither.
pub fn with_cost(json: &[u8], cost_usd: f64) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(json).ok()?;
    if !add_cost(&mut v, cost_usd) {
        return None;
    }
    serde_json::to_vec(&v).ok()
}

/// Adds `cost` (USD) to the usage object of `v` as [`with_cost`] does; false if it has none.
pub fn add_cost(v: &mut Value, cost_usd: f64) -> bool {
    let usage = match v.get("usage").is_some_and(Value::is_object) {
        true => v.get_mut("usage"),
        false => v.get_mut("response").and_then(|r| r.get_mut("usage")),
    };
    match usage.and_then(Value::as_object_mut) {
        Some(usage) => {
            usage.insert("cost".into(), serde_json::json!(cost_usd));
            true
        }
        None => false,
    }
}

/// What one stream event means to the gateway, whatever the dialect.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EventInfo {
    /// Carries output: text, reasoning, a tool call or a refusal (the commit point, SPEC §6).
    pub content: bool,
    /// Characters of output it carries (for estimates when usage never comes).
    pub output_chars: usize,
    /// A finish reason was given: the answer (or one of its choices) is complete.
    pub finished: bool,
    /// How many choices (chat `n`, Gemini `candidateCount`) finished in this event; 0 is read as
    /// 1 when `finished` (the dialects with one answer).
    pub finishes: u32,
    /// Why it finished, when the event says (SPEC §18: an empty answer may be explained).
    pub finish: Option<FinishReason>,
    /// The end-of-stream sentinel (`[DONE]`, `message_stop`, `response.completed`).
    pub done: bool,
    /// Usage reported in this event.
    pub usage: Reported,
    /// The event carries usage and nothing else (dropped unless the client asked for it).
    pub usage_only: bool,
    /// An error event's payload.
    pub error: Option<Value>,
    /// Not parseable.
    pub malformed: bool,
    /// A keep-alive: a comment or an event with no data, Anthropic's `ping`. Before commit it is
    /// neither held nor counted toward the held-event cap (SPEC §6).
    pub keepalive: bool,
    /// The stream's id and model, for the error frame.
    pub id: Option<String>,
    pub model: Option<String>,
}

/// A whole non-stream answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BodyInfo {
    pub usage: Reported,
    pub output_chars: usize,
    /// Why the answer ended, where the body says.
    pub finish: Option<FinishReason>,
    /// The upstream's id of the answer (a Responses `resp_…`: state it keeps, SPEC §17).
    pub id: Option<String>,
}

/// Why an answer ended, as far as it can explain an answer with no output (SPEC §18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// The model's own end (`stop`, `end_turn`, `STOP`, `completed`): also what a client's stop
    /// sequence looks like in the dialects that do not say which.
    Natural,
    /// The client's stop sequence, said so (Anthropic's `stop_sequence`).
    StopSequence,
    /// The output limit (`length`, `max_tokens`, `MAX_TOKENS`, `max_output_tokens`).
    Limit,
    /// A content filter (`content_filter`, `refusal`, `SAFETY`…).
    Filtered,
    /// Anything else (a tool call, an unknown reason).
    Other,
}

impl FinishReason {
    /// An empty answer that ended this way is the answer the client's parameters asked for, not
    /// a failure of the route: its output limit, its stop sequence (`client_stop`: it set one),
    /// or a content filter.
    pub fn explains_empty(self, client_stop: bool) -> bool {
        match self {
            FinishReason::Limit | FinishReason::Filtered | FinishReason::StopSequence => true,
            FinishReason::Natural => client_stop,
            FinishReason::Other => false,
        }
    }
}

/// The request's `provider` object: routing preferences every attempt obeys (SPEC §3).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderPrefs {
    #[serde(default)]
    pub order: Option<Vec<String>>,
    #[serde(default)]
    pub only: Option<Vec<String>>,
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
    #[serde(default)]
    pub max_price: Option<MaxPrice>,
    #[serde(default)]
    pub allow_fallbacks: Option<bool>,
    #[serde(default)]
    pub sort: Option<Sort>,
}

/// Highest acceptable route price, USD per million tokens.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxPrice {
    #[serde(default)]
    pub prompt: Option<f64>,
    #[serde(default)]
    pub completion: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Sort {
    Price,
    Latency,
    Throughput,
}

/// A validated client request, whatever its dialect.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientRequest {
    pub api: Api,
    pub model: String,
    pub stream: bool,
    /// Output token limit the client set, if any (per completion).
    pub max_tokens: Option<u64>,
    /// Completions asked for (chat `n`; 1 elsewhere): the hold covers every one (SPEC §11).
    pub completions: u64,
    /// Chat streams: did the client ask for the usage chunk?
    pub include_usage: bool,
    /// The request set a stop sequence: an empty answer that stopped is one (SPEC §18).
    pub stop_sequences: bool,
    pub provider: ProviderPrefs,
    /// Body size in bytes, for the input-token estimate.
    pub body_len: usize,
    /// The client's `anthropic-version` and `anthropic-beta` headers, passed to `x-api-key`
    /// providers.
    pub anthropic_version: Option<String>,
    pub anthropic_beta: Option<String>,
    /// The client's `x-switchyard-session` header: the conversation's name (SPEC §8a).
    pub session: Option<String>,
    /// Responses `previous_response_id`: the stored response this request continues, which only
    /// the route that produced it knows (SPEC §17).
    pub previous_response_id: Option<String>,
    /// The first field naming input that is not in the body (a stored response, a file, a remote
    /// image): the hold then covers the whole context window (SPEC §17).
    pub external_input: Option<String>,
    /// The tools the provider runs and bills per use that the request declares, and what bounds
    /// their uses (SPEC §21): only a route pricing them serves it.
    pub server_tools: ServerTools,
    /// The body without Switchyard's own fields (`provider`, `models`), keys in the client's order,
    /// values as the client wrote them (SPEC §18: never built into a tree).
    body: Body,
}

/// Parses and validates a request body in `api`'s dialect. Gemini names the model and the mode in
/// the path, not the body: `path` is (model, stream) for it and ignored by the others.
///
/// A tool the provider runs and bills per use is noted in [`ClientRequest::server_tools`] when a
/// route can price it (SPEC §21: web search), and refused here otherwise (SPEC §17: Switchyard
/// never serves at an unknown cost); input the body only names is noted in
/// [`ClientRequest::external_input`] for the hold.
pub fn parse_request(api: Api, bytes: &[u8], path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
    let mut request = of(api).parse_request(bytes, path)?;
    request.server_tools = server_tools(&request)?;
    request.external_input = external::external_input(&request.body);
    request.stop_sequences = has_stop_sequences(&request.body);
    Ok(request)
}

/// A generation request whose input a client asks to count (SPEC §21): validated as
/// [`parse_request`] does, except that a tool billed per use is no reason to refuse — counting
/// runs none. `gemini_model`: the model Gemini names in the path.
pub(crate) fn parse_counted(api: Api, bytes: &[u8], gemini_model: Option<&str>) -> Result<ClientRequest, ApiError> {
    of(api).parse_request(bytes, gemini_model.map(|m| (m, false)))
}

/// The request's priced server tools (SPEC §21), or the 400 for one no route can price (a tool of
/// another kind, or one grouped in a Responses `namespace`, which holds the client's own tools).
fn server_tools(request: &ClientRequest) -> Result<ServerTools, ApiError> {
    let mut tools = ServerTools::default();
    for t in external::provider_tools(&request.body) {
        let Some(tool) = ServerTool::of_kind(&t.kind).filter(|_| !t.grouped) else {
            return Err(ApiError::invalid(
                format!(
                    "`{}`: the tool `{}` runs at the provider and is billed per use; no route of \
                     this gateway has a price for it, so it is not served. Use function tools.",
                    t.param, t.kind
                ),
                Some(&t.param),
            ));
        };
        tools.declared.push(Declared {
            tool,
            param: t.param,
            max_uses: t.max_uses,
        });
    }
    if !tools.is_empty() {
        match request.api {
            Api::Responses => tools.max_tool_calls = optional_u64(&request.body, "max_tool_calls")?,
            Api::Chat => tools.per_answer = Some(request.completions),
            _ => {}
        }
    }
    Ok(tools)
}

/// A whole non-stream answer in `api`'s dialect: usage and output size, or why it is no answer.
/// An answer with no output is none (SPEC §4) unless its finish reason explains it
/// ([`FinishReason::explains_empty`]; `client_stop`: the request set a stop sequence).
pub fn inspect_body(api: Api, body: &[u8], client_stop: bool) -> Result<BodyInfo, Verdict> {
    let info = of(api).inspect_body(body)?;
    if info.output_chars == 0 && !info.finish.is_some_and(|f| f.explains_empty(client_stop)) {
        return Err(Verdict::bad("response has no output"));
    }
    Ok(info)
}

/// Whether a body sets a stop sequence: chat `stop`, Anthropic `stop_sequences`, Gemini
/// `generationConfig.stopSequences` (a non-empty string or list).
fn has_stop_sequences(body: &Body) -> bool {
    let set = |v: Option<&Value>| match v {
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        _ => false,
    };
    set(body.hint("stop").as_ref())
        || set(body.hint("stop_sequences").as_ref())
        || set(body
            .hint("generationConfig")
            .as_ref()
            .and_then(|g| g.get("stopSequences")))
}

impl ClientRequest {
    /// A parsed request in `api`'s dialect with what every dialect starts from: no output limit,
    /// one completion, no usage chunk asked for, and none of the client's headers yet (the handler
    /// adds them). Each dialect's `parse_request` sets what its body says beyond that.
    pub(crate) fn parsed(
        api: Api,
        model: String,
        stream: bool,
        provider: ProviderPrefs,
        body: Body,
        body_len: usize,
    ) -> ClientRequest {
        ClientRequest {
            api,
            model,
            stream,
            max_tokens: None,
            completions: 1,
            include_usage: false,
            stop_sequences: false,
            provider,
            body_len,
            anthropic_version: None,
            anthropic_beta: None,
            session: None,
            previous_response_id: None,
            external_input: None,
            server_tools: ServerTools::default(),
            body,
        }
    }

    /// The input tokens the hold covers (SPEC §17): the body's estimate, or the whole
    /// `context_window` when the request names input it does not carry.
    pub fn held_input_tokens(&self, context_window: u64) -> u64 {
        match self.external_input {
            Some(_) => context_window.max(crate::billing::body_input_tokens(self.body_len)),
            None => crate::billing::body_input_tokens(self.body_len),
        }
    }

    /// The conversation this request belongs to (SPEC §8a): the client's `x-switchyard-session`
    /// header (`session`), else the body's `user`, `prompt_cache_key` or Anthropic
    /// `metadata.user_id`, else a hash of its system prompt and first user message — the same
    /// for every turn of one conversation.
    pub fn conversation(&self, session: Option<&str>) -> String {
        let named = session.map(str::to_string).or_else(|| {
            let b = &self.body;
            [
                b.hint("user"),
                b.hint("prompt_cache_key"),
                b.hint("metadata").and_then(|m| m.get("user_id").cloned()),
            ]
            .into_iter()
            .flatten()
            .find_map(|v| v.as_str().filter(|s| !s.is_empty()).map(str::to_string))
        });
        if let Some(name) = named {
            return format!("id:{name}");
        }
        let b = &self.body;
        let messages = ["messages", "input", "contents"].iter().find_map(|f| b.raw(f));
        let (first_system, first_user) = messages.map(external::first_turns).unwrap_or_default();
        let system = ["system", "instructions", "systemInstruction"]
            .iter()
            .find_map(|f| b.raw(f).map(|r| r.get().to_string()))
            .or(first_system)
            .unwrap_or_else(|| "null".into());
        let first_user = first_user
            .or_else(|| {
                (b.shape("input") == body::Shape::String)
                    .then(|| b.raw("input").map(|r| r.get().to_string()))
                    .flatten()
            })
            .unwrap_or_else(|| "null".into());
        format!("h:{:016x}", crate::spread::hash64(&[&system, &first_user]))
    }

    /// The body as parsed (Switchyard's own fields removed), for translation (SPEC §19).
    pub(crate) fn body(&self) -> &Body {
        &self.body
    }

    /// The body to send to a route: the client's, with `model` set to the route's upstream model.
    /// Chat streams also ask the upstream for usage (SPEC §7).
    /// The output limit every route gets (per completion): the client's, else the model's
    /// `max_output_tokens` — written into the body in the dialect's field when the client set none,
    /// so the upstream cannot produce more than was held. Called once, before the hold.
    pub fn limit_output(&mut self, model_max_output_tokens: u64) -> u64 {
        if let Some(limit) = self.max_tokens {
            return limit;
        }
        of(self.api).limit_output(&mut self.body, model_max_output_tokens);
        self.max_tokens = Some(model_max_output_tokens);
        model_max_output_tokens
    }

    /// The uses of the provider's priced tools the hold covers, told to the upstream where its API
    /// bounds them (SPEC §21), as [`ClientRequest::limit_output`] tells it the output limit: a
    /// Responses request without `max_tool_calls` gets `default_uses` there, an Anthropic web
    /// search tool without `max_uses` gets it there. Gemini and Chat have no such field: their
    /// uses past the held ones are cut at settlement. Called once, before the hold.
    pub fn limit_tool_uses(&mut self, default_uses: u64) {
        if self.server_tools.is_empty() {
            return;
        }
        match self.api {
            Api::Responses if self.server_tools.max_tool_calls.is_none() => {
                self.body.set("max_tool_calls", &Value::from(default_uses));
                self.server_tools.max_tool_calls = Some(default_uses);
            }
            Api::Messages => {
                let Some(Ok(mut tools)) = self
                    .body
                    .raw("tools")
                    .map(|r| serde_json::from_str::<Vec<Value>>(r.get()))
                else {
                    return;
                };
                for d in self.server_tools.declared.iter_mut().filter(|d| d.max_uses.is_none()) {
                    let index = d.param.strip_prefix("tools[").and_then(|p| p.strip_suffix(']'));
                    let tool = index
                        .and_then(|i| i.parse::<usize>().ok())
                        .and_then(|i| tools.get_mut(i));
                    if let Some(Value::Object(tool)) = tool {
                        tool.insert("max_uses".into(), Value::from(default_uses));
                        d.max_uses = Some(default_uses);
                    }
                }
                self.body.set("tools", &Value::Array(tools));
            }
            _ => {}
        }
    }

    /// The most output tokens the request can produce: the limit times the completions.
    pub fn held_output_tokens(&self, model_max_output_tokens: u64) -> u64 {
        self.max_tokens
            .unwrap_or(model_max_output_tokens)
            .saturating_mul(self.completions)
    }

    /// The body a route gets: the client's JSON, keys in its order, with `model` set to the
    /// route's upstream model — written straight from the parsed body, no copy of it per attempt
    /// (SPEC §15). Everything else Switchyard changes was changed once, at parse time
    /// (`provider` and `models` removed, a chat stream's usage asked for) or by
    /// [`ClientRequest::limit_output`].
    pub fn upstream_body(&self, upstream_model: &str) -> Vec<u8> {
        self.body.write_with_model(upstream_model, self.body_len)
    }

    /// An Anthropic conversation with a `system` message among its `messages` (the
    /// `mid-conversation-system` beta, generally available to Claude Code, which sends it without
    /// the header). Read from the bytes: a `"role"` key whose value is `"system"` (quotes inside a
    /// string are escaped, so text that mentions it does not count).
    pub fn has_system_turns(&self) -> bool {
        if self.api != Api::Messages {
            return false;
        }
        let Some(raw) = self.body.raw("messages") else {
            return false;
        };
        let text = raw.get();
        text.match_indices("\"role\"").any(|(at, key)| {
            let rest = text[at + key.len()..].trim_start();
            rest.strip_prefix(':')
                .is_some_and(|value| value.trim_start().starts_with("\"system\""))
        })
    }

    /// (function name, namespace) of the request's Responses `namespace` tools — none in another
    /// dialect (SPEC §21: flattened for a route of another dialect, and its calls written back
    /// with their namespace).
    pub fn tool_namespaces(&self) -> Vec<(String, String)> {
        match self.api {
            Api::Responses => responses::request::namespaces(&self.body),
            _ => Vec::new(),
        }
    }

    /// The Anthropic headers a route gets when its provider takes them
    /// (`ProviderKind::takes_anthropic_headers`): `anthropic-version` (the client's, else the
    /// default) and the client's `anthropic-beta`.
    pub fn anthropic_headers(&self) -> Vec<(&'static str, String)> {
        let version = self
            .anthropic_version
            .clone()
            .unwrap_or_else(|| messages::DEFAULT_VERSION.to_string());
        let mut headers = vec![("anthropic-version", version)];
        if let Some(beta) = &self.anthropic_beta {
            headers.push(("anthropic-beta", beta.clone()));
        }
        headers
    }
}

/// Shared first steps of the dialects that name the model in the body: size limit, JSON object,
/// `model`, then Switchyard's own fields ([`own_fields`]).
pub(crate) fn parse_common(bytes: &[u8]) -> Result<(Body, String, ProviderPrefs), ApiError> {
    let mut body = parse_object(bytes)?;
    let model = match body.small("model")? {
        Some(Value::String(m)) if !m.trim().is_empty() => m,
        Some(Value::String(_)) | None => {
            return Err(ApiError::invalid("`model` is required.", Some("model")));
        }
        Some(_) => return Err(ApiError::invalid("`model` must be a string.", Some("model"))),
    };
    let provider = own_fields(&mut body, &model)?;
    Ok((body, model, provider))
}

/// The body as a JSON object's fields, at most [`MAX_BODY_BYTES`].
pub(crate) fn parse_object(bytes: &[u8]) -> Result<Body, ApiError> {
    if bytes.len() > MAX_BODY_BYTES {
        return Err(ApiError::invalid("Request body is larger than 10 MiB.", None));
    }
    Body::parse(bytes)
}

/// Takes Switchyard's own fields out of the body: `models` (at most `model` itself) and the
/// `provider` preferences.
pub(crate) fn own_fields(body: &mut Body, model: &str) -> Result<ProviderPrefs, ApiError> {
    let models = body.small("models")?;
    body.remove("models");
    match models {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            if list.len() > 1 {
                return Err(ApiError::invalid(
                    "`models` with more than one entry is not supported: Switchyard never substitutes another model.",
                    Some("models"),
                ));
            }
            if let Some(only) = list.first() {
                if only.as_str() != Some(model) {
                    return Err(ApiError::invalid("`models` may only repeat `model`.", Some("models")));
                }
            }
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "`models` must be an array of model ids.",
                Some("models"),
            ))
        }
    }
    let provider = body.small("provider")?;
    body.remove("provider");
    match provider {
        None | Some(Value::Null) => Ok(ProviderPrefs::default()),
        Some(v) => serde_json::from_value::<ProviderPrefs>(v)
            .map_err(|e| ApiError::invalid(format!("Invalid `provider`: {e}."), Some("provider"))),
    }
}

/// Why an event has no JSON to read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoJson {
    /// A comment, a keep-alive: no data at all.
    NoData,
    /// Data that is not JSON.
    Malformed,
}

impl From<NoJson> for EventInfo {
    fn from(why: NoJson) -> EventInfo {
        EventInfo {
            malformed: why == NoJson::Malformed,
            keepalive: why == NoJson::NoData,
            ..EventInfo::default()
        }
    }
}

/// An event's data as JSON (`json`, already parsed; `None` when it is not JSON) and its type (the
/// data's `type`, else the `event:` name).
pub(crate) fn event_json<'a>(ev: &'a SseEvent, json: Option<&'a Value>) -> Result<(&'a Value, &'a str), NoJson> {
    if !ev.has_data {
        return Err(NoJson::NoData);
    }
    let v = json.ok_or(NoJson::Malformed)?;
    Ok((v, event_kind(v, ev.event.as_deref())))
}

/// An event's type: its data's `type`, else its name.
pub(crate) fn event_kind<'a>(v: &'a Value, name: Option<&'a str>) -> &'a str {
    v.get("type").and_then(Value::as_str).or(name).unwrap_or("")
}

/// The JSON of a frame's first `data:` line (tests of the error frames).
#[cfg(test)]
pub(crate) fn frame_data(frame: &[u8]) -> Value {
    let text = String::from_utf8_lossy(frame);
    let line = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
    serde_json::from_str(line).unwrap_or(Value::Null)
}

/// Reads an optional non-negative integer field.
pub(crate) fn optional_u64(body: &Body, field: &str) -> Result<Option<u64>, ApiError> {
    match body.small(field)?.as_ref() {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| ApiError::invalid(format!("`{field}` must be a non-negative integer."), Some(field))),
    }
}

/// Reads an optional boolean field.
pub(crate) fn optional_bool(body: &Body, field: &str) -> Result<Option<bool>, ApiError> {
    match body.small(field)?.as_ref() {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::invalid(
            format!("`{field}` must be true or false."),
            Some(field),
        )),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::neutral::answer::{body as answer_body, AnswerContext};
    use super::neutral::request::{neutral_of, write};
    use super::*;

    const EVERY: [Api; 5] = [Api::Chat, Api::Messages, Api::Responses, Api::Gemini, Api::Converse];

    /// SPEC §21: each dialect's answer counts its web searches the way the provider reports them,
    /// whole and streamed; a stream's reports add up to the whole answer's count.
    #[test]
    fn each_dialect_counts_its_web_searches_whole_and_streamed() {
        let search = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
                            "action": {"type": "search", "query": "q"}});
        let message = json!({"type": "message", "id": "m", "role": "assistant", "status": "completed",
                             "content": [{"type": "output_text", "text": "hi", "annotations": []}]});
        let response = json!({"id": "r", "object": "response", "status": "completed", "model": "m",
                              "output": [search, search, message],
                              "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}});
        let anthropic_usage =
            |n: u32| json!({"input_tokens": 3, "output_tokens": 1, "server_tool_use": {"web_search_requests": n}});
        let grounded = |n: usize| {
            json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hi"}]}, "finishReason": "STOP",
                                   "groundingMetadata": {"webSearchQueries": vec!["q"; n]}}],
                   "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1}})
        };
        // (dialect, whole answer, stream events, searches)
        let table: Vec<(Api, Value, Vec<Value>, u64)> = vec![
            (
                Api::Responses,
                response.clone(),
                vec![
                    json!({"type": "response.output_item.done", "output_index": 0, "item": search}),
                    json!({"type": "response.output_item.done", "output_index": 1, "item": search}),
                    json!({"type": "response.output_item.done", "output_index": 2, "item": message}),
                    json!({"type": "response.completed", "response": response}),
                ],
                2,
            ),
            (
                Api::Messages,
                json!({"id": "msg", "type": "message", "role": "assistant", "model": "m",
                       "content": [{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {"query": "q"}},
                                   {"type": "text", "text": "hi"}],
                       "stop_reason": "end_turn", "usage": anthropic_usage(3)}),
                vec![
                    json!({"type": "message_start", "message": {"id": "msg", "model": "m", "usage": anthropic_usage(0)}}),
                    json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": anthropic_usage(3)}),
                ],
                3,
            ),
            (Api::Gemini, grounded(2), vec![grounded(0), grounded(2)], 2),
        ];
        let tariff = |held| crate::tools::ToolTariff {
            held: vec![(ServerTool::WebSearch, held)],
            prices: [("web_search".to_string(), 0.01)].into_iter().collect(),
            per_answer: false,
        };
        for (api, whole, events, want) in table {
            let info = inspect_body(api, whole.to_string().as_bytes(), false).unwrap();
            let (charges, clamped) = tariff(10).settle(&info.usage.tool_uses);
            assert_eq!(
                (charges[0].uses, charges[0].cost_micros, clamped),
                (want, want as i64 * 10_000, false),
                "{api:?} whole"
            );
            let mut streamed = Reported::default();
            for e in &events {
                streamed.update((of(api).stream().inspect)(&SseEvent::from_data(&e.to_string()), Some(e)).usage);
            }
            let (charges, _) = tariff(10).settle(&streamed.tool_uses);
            assert_eq!(charges[0].uses, want, "{api:?} streamed");
            // More than was held: cut to it, and flagged.
            let (charges, clamped) = tariff(1).settle(&streamed.tool_uses);
            assert_eq!((charges[0].uses, clamped), (1, true), "{api:?}");
        }
    }

    /// SPEC §21: the uses held are the uses the upstream is told, where its API has a field.
    #[test]
    fn the_held_tool_uses_are_told_to_the_upstream_where_its_api_bounds_them() {
        let limited = |api: Api, body: Value| {
            let mut r = parse_request(api, body.to_string().as_bytes(), Some(("m", false))).unwrap();
            r.limit_tool_uses(4);
            let sent: Value = serde_json::from_slice(&r.upstream_body("up")).unwrap();
            (sent, r.server_tools.held(4))
        };
        let web = |n| vec![(ServerTool::WebSearch, n)];
        // Responses: `max_tool_calls` written when absent, kept when set.
        let (sent, held) = limited(
            Api::Responses,
            json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]}),
        );
        assert_eq!((sent["max_tool_calls"].clone(), held), (json!(4), web(4)));
        let (sent, held) = limited(
            Api::Responses,
            json!({"model": "m", "input": "hi", "max_tool_calls": 2, "tools": [{"type": "web_search"}]}),
        );
        assert_eq!((sent["max_tool_calls"].clone(), held), (json!(2), web(2)));
        // Anthropic: `max_uses` on each web search tool without one; the client's own tools untouched.
        let (sent, held) = limited(
            Api::Messages,
            json!({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}],
                   "tools": [{"name": "f", "input_schema": {}},
                             {"type": "web_search_20250305", "name": "web_search"},
                             {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]}),
        );
        assert_eq!(sent["tools"][0], json!({"name": "f", "input_schema": {}}));
        assert_eq!(
            (
                sent["tools"][1]["max_uses"].clone(),
                sent["tools"][2]["max_uses"].clone()
            ),
            (json!(4), json!(1))
        );
        assert_eq!(held, web(5));
        // Gemini has no field: the body is as sent, the policy's uses held.
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]});
        let (sent, held) = limited(Api::Gemini, body.clone());
        assert_eq!((sent["tools"].clone(), held), (body["tools"].clone(), web(4)));
        // No priced tool: nothing written.
        let (sent, held) = limited(Api::Responses, json!({"model": "m", "input": "hi"}));
        assert_eq!((sent.get("max_tool_calls"), held), (None, vec![]));
    }

    /// Every client endpoint is found by its path, and only those: the router's one question.
    #[test]
    fn each_path_is_the_endpoint_of_one_dialect() {
        let found = |path| endpoint(path).map(|e| (e.api, e.action, e.in_path));
        let gen = Action::Generate;
        assert_eq!(found("/v1/chat/completions"), Some((Api::Chat, gen, None)));
        assert_eq!(found("/v1/messages"), Some((Api::Messages, gen, None)));
        assert_eq!(
            found("/v1/messages/count_tokens"),
            Some((Api::Messages, Action::Count, None))
        );
        assert_eq!(found("/v1/responses"), Some((Api::Responses, gen, None)));
        assert_eq!(
            found("/v1/responses/input_tokens"),
            Some((Api::Responses, Action::Count, None))
        );
        assert_eq!(
            found("/v1beta/models/g%2Dx:generateContent"),
            Some((Api::Gemini, gen, Some("g%2Dx:generateContent")))
        );
        assert_eq!(
            found("/v1beta/models/g-x:countTokens"),
            Some((Api::Gemini, Action::Count, Some("g-x")))
        );
        for other in [
            "/v1/models",
            "/v1/messages/batches",
            "/v1/chat/completions/",
            "/v1/converse",
            "/",
            "/v1beta/other",
        ] {
            assert_eq!(found(other), None, "{other}");
        }
    }

    /// A one-turn request as a client writes it in `api`.
    fn plain_request(api: Api) -> Value {
        match api {
            Api::Chat => json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            Api::Messages => json!({"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}),
            Api::Responses => json!({"model": "m", "input": "hi"}),
            Api::Gemini => json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}),
            Api::Converse => json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}]}),
        }
    }

    /// A whole one-word answer as a route in `api` gives it.
    fn plain_answer(api: Api) -> Value {
        match api {
            Api::Chat => json!({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}),
            Api::Messages => json!({"id": "msg", "type": "message", "role": "assistant", "model": "m",
                "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 3, "output_tokens": 1}}),
            Api::Responses => json!({"id": "resp", "object": "response", "status": "completed", "model": "m",
                "output": [{"type": "message", "id": "msg", "role": "assistant", "status": "completed",
                            "content": [{"type": "output_text", "text": "hello", "annotations": []}]}],
                "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}}),
            Api::Gemini => json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "hello"}]},
                "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 1, "totalTokenCount": 4}}),
            Api::Converse => json!({"output": {"message": {"role": "assistant", "content": [{"text": "hello"}]}},
                "stopReason": "end_turn", "usage": {"inputTokens": 3, "outputTokens": 1, "totalTokens": 4}}),
        }
    }

    /// The registry's completeness check: every registered dialect has every part. A client
    /// dialect parses a plain request, reads it into the neutral form and names every setting;
    /// every dialect writes that form for a route (and a client dialect parses what it wrote);
    /// every dialect's plain answer is read and written back for every client, whose own
    /// inspector finds the answer in it. A dialect added to the registry with a part left out
    /// (or a stub) fails here.
    #[test]
    fn every_registered_dialect_has_every_part() {
        for client in Api::ALL {
            let d = of(client);
            assert!(!d.name().is_empty());
            for setting in Setting::ALL {
                assert!(!d.setting_name(setting).is_empty(), "{client:?} names no {setting:?}");
            }
            let path = Some(("m", false));
            let request = parse_request(client, plain_request(client).to_string().as_bytes(), path)
                .unwrap_or_else(|e| panic!("{client:?} refused its own plain request: {e:?}"));
            let neutral = neutral_of(&request).unwrap_or_else(|e| panic!("{client:?} read into neutral: {e}"));
            // Its one-turn request (a route's health check) is one its own parser takes as asked.
            let one = d
                .one_turn("m", "hi", 16)
                .unwrap_or_else(|| panic!("{client:?} writes no one-turn request"));
            let one = parse_request(client, one.to_string().as_bytes(), path)
                .unwrap_or_else(|e| panic!("{client:?} refused its own one-turn request: {e:?}"));
            assert_eq!((one.max_tokens, one.stream), (Some(16), false), "{client:?}");
            // The output limit, written in the dialect's own field, is read back by its parser.
            // (Messages requires its own, so its plain request's 16 stays.)
            let mut limited = request.clone();
            let limit = request.max_tokens.unwrap_or(77);
            assert_eq!(limited.limit_output(77), limit);
            let again = parse_request(client, &limited.upstream_body("m"), path).expect("a limited body parses");
            assert_eq!(
                again.max_tokens,
                Some(limit),
                "{client:?} wrote its limit where it does not read it"
            );
            // A broken stream ends in the dialect's own error frame.
            let frame = (d.stream().error_frame)("g", "m", "the provider broke");
            assert!(
                String::from_utf8_lossy(&frame).contains("the provider broke"),
                "{client:?}"
            );
            for route in EVERY {
                let written = write(route, &neutral, "up", 64)
                    .unwrap_or_else(|e| panic!("{client:?} → {route:?} not written: {e}"));
                let v: Value = serde_json::from_slice(&written.body).expect("a written body is JSON");
                let text = v.to_string();
                assert!(text.contains("hi"), "{client:?} → {route:?} lost the turn: {text}");
                if route.is_client() {
                    parse_request(route, &written.body, path)
                        .unwrap_or_else(|e| panic!("{route:?} refused what it wrote for {client:?}: {e:?}"));
                }
            }
        }
        let ctx = AnswerContext {
            id: "g".into(),
            model: "m".into(),
            created: 1,
            choices: 1,
            ..AnswerContext::default()
        };
        for upstream in EVERY {
            let answer = plain_answer(upstream).to_string();
            let info = inspect_body(upstream, answer.as_bytes(), false)
                .unwrap_or_else(|v| panic!("{upstream:?}'s own answer not inspected: {v:?}"));
            assert_eq!(info.output_chars, 5, "{upstream:?}");
            for client in Api::ALL {
                let out = answer_body(upstream, client, answer.as_bytes(), &ctx)
                    .unwrap_or_else(|v| panic!("{upstream:?} → {client:?}: {v:?}"));
                let seen = inspect_body(client, &out, false)
                    .unwrap_or_else(|v| panic!("{client:?} cannot read what it was written from {upstream:?}: {v:?}"));
                assert_eq!(seen.output_chars, 5, "{upstream:?} → {client:?}");
            }
        }
        assert!(parse_request(Api::Converse, plain_request(Api::Converse).to_string().as_bytes(), None).is_err());
    }
}
