//! Requests written for one dialect, sent to a route that speaks another (SPEC §19): the client's
//! body is read into a [`Neutral`] request ([`read`]) and written in the route's dialect
//! ([`write()`]), or the field that cannot be carried is named ([`Unable`]). Each dialect's reader
//! and writer live in its own file.
//!
//! The body is never built into a `serde_json::Value` tree (SPEC §18): every field is read from the
//! raw JSON the [`Body`] keeps, into typed structs that refuse a wrong shape at its first value;
//! lists are walked one element at a time (`each`); schemas, tool arguments and tool results stay
//! raw JSON text; short lists (stop sequences…) hold at most 1024 entries. A neutral request holds
//! at most [`MAX_PARTS`] turns, parts and tools.
//!
//! What is carried, and what is not (C chat, M messages, R responses, G gemini):
//!
//! | Neutral | C | M | R | G | not representable |
//! |---|---|---|---|---|---|
//! | system | system/developer messages | `system`, `system` messages in the conversation | `instructions` (parts joined by a blank line), later system items | `systemInstruction` | M, G: a system turn after the conversation started is moved into the system prompt |
//! | turns | messages | messages (same-role turns merged) | input items | contents (`user`/`model`) | audio, files and documents anywhere: unable |
//! | images | `image_url` (URL or `data:`) | `image` base64 / url | `input_image` | `inlineData`, `fileData` (image, not a Google file) | G: an image by URL (unable); M: types other than jpeg/png/gif/webp (unable) |
//! | tool calls / results | `tool_calls`, `tool` messages | `tool_use`, `tool_result` | `function_call`, `function_call_output` | `functionCall`, `functionResponse` (name found by call id) | images in a tool result to C, G: unable |
//! | reasoning in history | — | `thinking` (signed), `redacted_thinking` | `reasoning` (encrypted) | `thought` parts, `thoughtSignature` | signed or encrypted: unable anywhere but its own dialect; unsigned text: dropped (providers ignore earlier reasoning) |
//! | tools | `function` | client tools | `function` | `functionDeclarations` | built-in tools, custom (grammar) tools: unable; `strict` dropped by M, G |
//! | tool choice | auto/none/required/function | auto/none/any/tool | same as C | AUTO/NONE/ANY + one name | several allowed names, `allowed_tools`, VALIDATED: unable |
//! | parallel tool calls | `parallel_tool_calls` | `disable_parallel_tool_use` | `parallel_tool_calls` | — | G: dropped |
//! | stop | `stop` | `stop_sequences` | — | `stopSequences` | R: unable |
//! | temperature, top_p | yes | yes | yes | yes | M with thinking on: temperature ≠ 1, top_p < 0.95 unable |
//! | top_k | `top_k` (OpenAI-compatible servers) | `top_k` | — | `topK` | R: unable |
//! | output limit | `max_completion_tokens` | `max_tokens` (the caller's default when none) | `max_output_tokens` | `maxOutputTokens` | always written |
//! | JSON mode / schema | `response_format` | `output_config.format` (schema only) | `text.format` | `responseMimeType` + `responseJsonSchema` | M: JSON mode without a schema unable; schema name/description/strict dropped by M, G |
//! | reasoning effort / budget | `reasoning_effort` | `thinking` budget (1024 ≤ b < max_tokens) | `reasoning.effort` | `thinkingConfig.thinkingBudget` | C, R: "reasoning off" dropped |
//! | reasoning text wanted | — | inherent | `reasoning.summary` | `includeThoughts` | C: dropped |
//! | n / candidates | `n` | — | — | `candidateCount` | M, R: more than one unable |
//! | seed, presence/frequency penalty | yes | — | — | yes | M, R: unable |
//! | verbosity | `verbosity` | — | `text.verbosity` | — | M, G: unable |
//! | user id | `user` | `metadata.user_id` | `user` | — | G: dropped |
//! | `metadata`, `store`, `service_tier`, `safety_identifier`, `prompt_cache_key(_retention)` | yes | — | yes | — | carried between C and R, else dropped; R gets `store: false` unless the client stored |
//! | no effect on the answer | `prediction`, a message's `name` | `cache_control`, `citations`, `service_tier`, `inference_geo`, `context_management` clearing thinking, a tool's `defer_loading`, `input_examples`, `eager_input_streaming`, `allowed_callers` with `direct` | `truncation`, `include`, `max_tool_calls`, `client_metadata`, items' `id`/`status` | `safetySettings`, `labels`, a declaration's `response` | dropped (listed) |
//! | state held upstream | — | `container`, `mcp_servers`, other `context_management` edits, a tool only code execution calls | `previous_response_id`, `conversation`, `prompt`, `item_reference`, `background` | `cachedContent` | unable |
//! | answer shape | `logprobs`, `top_logprobs`, `logit_bias`, audio output | — | `top_logprobs`, logprobs in `include` | `responseLogprobs`, non-text modalities, speech | unable |
//!
//! Bedrock Converse, a dialect only routes speak (SPEC §20), has a writer and no reader; its own
//! file says what it carries.
//!
//! Any field not in this table is unable (never dropped unseen). [`Written::dropped`] lists each
//! kind of dropped field once, list indexes as `[*]` (`messages[*].content[*].cache_control`).

#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::marker::PhantomData;

use serde::de::{Deserializer, Error as _, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};
use serde_json::value::RawValue;

use crate::api::Api;
use crate::dialects;
use crate::dialects::body::Body;
use crate::dialects::ClientRequest;
use crate::error::ApiError;

/// The most turns, parts and tools one neutral request holds (a bound on its memory, SPEC §18).
pub const MAX_PARTS: usize = 100_000;

/// The most entries a short list (stop sequences, modality names…) may have.
const MAX_FEW: usize = 1024;

/// A request in no dialect: what the four APIs share, read from the client's body.
#[derive(Debug, Clone)]
pub struct Neutral {
    /// The client's dialect: fields are named in its words.
    pub from: Api,
    /// The conversation; consecutive turns of one role are one turn.
    pub turns: Vec<Turn>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    pub parallel_tool_calls: Option<bool>,
    pub stop: Vec<String>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    /// The client's output limit (per completion).
    pub max_output_tokens: Option<u64>,
    pub response_format: Option<ResponseFormat>,
    pub thinking: Option<Thinking>,
    /// The client wants the reasoning text in the answer (Gemini `includeThoughts`, Responses
    /// `reasoning.summary`, Anthropic thinking on).
    pub show_reasoning: Option<bool>,
    /// OpenAI `verbosity` (`low`, `medium`, `high`).
    pub verbosity: Option<String>,
    /// Completions asked for (chat `n`, Gemini `candidateCount`).
    pub candidates: Option<u64>,
    pub seed: Option<i64>,
    pub presence_penalty: Option<f64>,
    pub frequency_penalty: Option<f64>,
    /// The end user's id (chat and Responses `user`, Anthropic `metadata.user_id`).
    pub user: Option<String>,
    pub stream: bool,
    /// The client asked for usage in its stream (chat's `stream_options.include_usage`; the other
    /// dialects always report it).
    pub stream_usage: bool,
    /// Fields the two OpenAI dialects share with one meaning and no effect on the answer
    /// (`metadata`, `store`, `service_tier`…): written as sent between them, dropped elsewhere.
    pub shared: Vec<Extra>,
    /// Fields read but carried nowhere, because they do not change the answer.
    pub dropped: Vec<String>,
    pub(crate) parts: usize,
}

/// The fields of [`Neutral::shared`], read by both OpenAI dialects.
pub(crate) const OPENAI_SHARED: [&str; 6] = [
    "metadata",
    "store",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
];

/// A field written as the client sent it.
#[derive(Debug, Clone)]
pub struct Extra {
    pub field: String,
    pub value: Box<RawValue>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    /// The role's word in the OpenAI APIs.
    pub(crate) fn openai(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub role: Role,
    pub parts: Vec<Part>,
}

/// One piece of a turn, with where the client wrote it (`messages[2].content[0]`).
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub at: String,
    pub content: Content,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(String),
    Image(Image),
    ToolCall(ToolCall),
    ToolResult(ToolResult),
    Reasoning(Reasoning),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub source: ImageSource,
    /// OpenAI's `detail` (`low`, `high`, `auto`).
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ImageSource {
    Base64 { media_type: String, data: String },
    Url(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text (an object).
    pub arguments: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub call_id: String,
    /// The function's name, where the client's dialect says it (Gemini).
    pub name: Option<String>,
    pub content: Vec<Piece>,
    pub is_error: bool,
}

/// What a tool result holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    Text(String),
    Image(Image),
}

/// Reasoning from an earlier answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Reasoning {
    pub text: String,
    pub seal: Option<Seal>,
}

/// Reasoning only the provider that wrote it can read back: an Anthropic signature or redacted
/// thinking, an OpenAI `encrypted_content`, a Gemini `thoughtSignature`.
#[derive(Debug, Clone, PartialEq)]
pub struct Seal {
    pub by: Api,
    pub data: String,
    /// Anthropic `redacted_thinking` (`data` is the whole block).
    pub redacted: bool,
    /// The Responses reasoning item's id.
    pub id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Tool {
    pub at: String,
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Option<Box<RawValue>>,
    pub strict: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Function(String),
}

#[derive(Debug, Clone)]
pub enum ResponseFormat {
    Text,
    JsonObject,
    JsonSchema(JsonSchema),
}

#[derive(Debug, Clone)]
pub struct JsonSchema {
    pub name: Option<String>,
    pub description: Option<String>,
    pub schema: Box<RawValue>,
    pub strict: Option<bool>,
}

/// How much the model reasons before it answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Thinking {
    /// Explicitly none (Anthropic `disabled`, Gemini budget 0, OpenAI `none`).
    Off,
    /// The model decides (Gemini budget -1, Anthropic `adaptive`).
    Auto,
    Effort(Effort),
    /// A budget in tokens.
    Budget(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl Effort {
    pub(crate) fn parse(word: &str) -> Option<Effort> {
        Some(match word.to_ascii_lowercase().as_str() {
            "minimal" => Effort::Minimal,
            "low" => Effort::Low,
            "medium" => Effort::Medium,
            "high" => Effort::High,
            "xhigh" => Effort::Xhigh,
            "max" => Effort::Max,
            _ => return None,
        })
    }

    /// The word the OpenAI APIs take (`max` is their `xhigh`).
    pub(crate) fn openai(self) -> &'static str {
        match self {
            Effort::Minimal => "minimal",
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
            Effort::Xhigh | Effort::Max => "xhigh",
        }
    }

    /// A thinking budget for the APIs that take tokens.
    pub(crate) fn budget(self) -> u64 {
        match self {
            Effort::Minimal => 1024,
            Effort::Low => 2048,
            Effort::Medium => 8192,
            Effort::High => 24_576,
            Effort::Xhigh | Effort::Max => 32_768,
        }
    }

    fn of_budget(tokens: u64) -> Effort {
        match tokens {
            0..=4095 => Effort::Low,
            4096..=16_383 => Effort::Medium,
            _ => Effort::High,
        }
    }
}

impl Thinking {
    /// The effort the OpenAI APIs get: none for `Off` and `Auto` (the route's default).
    pub(crate) fn effort(self) -> Option<Effort> {
        match self {
            Thinking::Effort(e) => Some(e),
            Thinking::Budget(b) => Some(Effort::of_budget(b)),
            Thinking::Off | Thinking::Auto => None,
        }
    }
}

/// A field a route cannot take, in words fit for a 400.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unable {
    /// The client's field, as a path (`messages[2].content[0]`, `tools[1]`, `n`).
    pub field: String,
    pub reason: String,
}

impl Unable {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Unable {
        Unable {
            field: field.into(),
            reason: reason.into(),
        }
    }

    /// The 400 `invalid_request` a client gets when no route could take its request.
    pub fn to_api_error(&self) -> ApiError {
        ApiError::invalid(self.to_string(), Some(&self.field))
    }
}

impl fmt::Display for Unable {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "`{}`: {}.", self.field, self.reason)
    }
}

/// A request written for a route.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub body: Vec<u8>,
    /// The client's fields left out because they do not change the answer (for the attempt's
    /// record).
    pub dropped: Vec<String>,
}

/// Reads a body in `api`'s dialect (Gemini's model and stream mode are in the path, not here).
pub fn read(api: Api, body: &Body) -> Result<Neutral, Unable> {
    let dialect = dialects::of(api);
    let neutral = dialect.read_request(body)?;
    if !neutral.turns.iter().any(|t| t.role != Role::System) {
        return Err(Unable::new(
            dialect.conversation_field(),
            "holds no user or assistant turn",
        ));
    }
    Ok(neutral)
}

/// Writes `neutral` in `api`'s dialect for `upstream_model` (Gemini names the model in the path:
/// not in its body). The output limit is always written: the client's, else
/// `default_max_output_tokens`.
pub fn write(
    api: Api,
    neutral: &Neutral,
    upstream_model: &str,
    default_max_output_tokens: u64,
) -> Result<Written, Unable> {
    let mut w = Writer {
        n: neutral,
        to: api,
        max_output_tokens: neutral.max_output_tokens.unwrap_or(default_max_output_tokens),
        dropped: neutral.dropped.clone(),
    };
    let body = dialects::of(api).write_request(&mut w, upstream_model)?;
    Ok(Written {
        body,
        dropped: compact(w.dropped),
    })
}

/// Dropped fields once each, list indexes as `[*]` (`messages[*].content[*].cache_control`): a
/// long conversation records what kind of field was left out, not every place.
fn compact(dropped: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut seen = HashSet::new();
    for field in dropped {
        let mut shape = String::with_capacity(field.len());
        let mut in_index = false;
        for c in field.chars() {
            match c {
                '[' => {
                    in_index = true;
                    shape.push_str("[*]");
                }
                ']' => in_index = false,
                _ if in_index => {}
                _ => shape.push(c),
            }
        }
        if seen.insert(shape.clone()) {
            out.push(shape);
        }
    }
    out
}

/// A body in `from`'s dialect, written for a route that speaks `to`; `stream` is the client's
/// mode (for Gemini it comes from the path). The tests' way in; a request's own is [`neutral_of`].
#[cfg(test)]
pub fn translate(
    from: Api,
    body: &Body,
    to: Api,
    upstream_model: &str,
    stream: bool,
    default_max_output_tokens: u64,
) -> Result<Written, Unable> {
    let mut neutral = read(from, body)?;
    neutral.stream = stream;
    write(to, &neutral, upstream_model, default_max_output_tokens)
}

/// A parsed client request, written for a route that speaks `to` (its mode, output limit and
/// usage wish as the request says).
#[cfg(test)]
pub fn translate_request(
    request: &ClientRequest,
    to: Api,
    upstream_model: &str,
    default_max_output_tokens: u64,
) -> Result<Written, Unable> {
    write(to, &neutral_of(request)?, upstream_model, default_max_output_tokens)
}

/// A parsed client request in the neutral form, with its mode, output limit and usage wish as the
/// request says: read once, written for as many routes as it is translated for.
pub fn neutral_of(request: &ClientRequest) -> Result<Neutral, Unable> {
    let mut neutral = read(request.api, request.body())?;
    neutral.stream = request.stream;
    neutral.stream_usage = request.api != Api::Chat || request.include_usage;
    neutral.max_output_tokens = request.max_tokens.or(neutral.max_output_tokens);
    Ok(neutral)
}

/// How the errors name a dialect.
fn api_name(api: Api) -> &'static str {
    dialects::of(api).name()
}

/// A setting a dialect names in its own way (`stop` / `stop_sequences` /
/// `generationConfig.stopSequences`): each dialect spells it in `Dialect::setting_name`, so an
/// error names the field the client wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Stop,
    Temperature,
    TopP,
    TopK,
    Candidates,
    Seed,
    Presence,
    Frequency,
    Format,
    Thinking,
    ShowReasoning,
    ToolChoice,
    Parallel,
    User,
    Verbosity,
}

impl Setting {
    /// Every setting (the registry's completeness test spells each in every client dialect).
    pub const ALL: [Setting; 15] = [
        Setting::Stop,
        Setting::Temperature,
        Setting::TopP,
        Setting::TopK,
        Setting::Candidates,
        Setting::Seed,
        Setting::Presence,
        Setting::Frequency,
        Setting::Format,
        Setting::Thinking,
        Setting::ShowReasoning,
        Setting::ToolChoice,
        Setting::Parallel,
        Setting::User,
        Setting::Verbosity,
    ];
}

/// One neutral request being written in a route's dialect.
pub(crate) struct Writer<'a> {
    pub(crate) n: &'a Neutral,
    to: Api,
    pub(crate) max_output_tokens: u64,
    pub(crate) dropped: Vec<String>,
}

impl<'a> Writer<'a> {
    /// A setting's name in the client's dialect.
    fn name(&self, setting: Setting) -> &'static str {
        dialects::of(self.n.from).setting_name(setting)
    }

    /// The setting cannot go to this route: `why` completes "<dialect> routes …".
    pub(crate) fn unable(&self, setting: Setting, why: &str) -> Unable {
        Unable::new(self.name(setting), format!("{} routes {why}", api_name(self.to)))
    }

    pub(crate) fn drop_setting(&mut self, setting: Setting) {
        let name = self.name(setting);
        self.dropped.push(name.to_string());
    }

    /// Refuses the first of `settings` that is set (this route has no field for it).
    pub(crate) fn refuse_set(&self, settings: &[(bool, Setting)]) -> Result<(), Unable> {
        match settings.iter().find(|(set, _)| *set) {
            Some((_, names)) => Err(self.unable(*names, "have no such setting")),
            None => Ok(()),
        }
    }

    /// More than one completion, to a route that answers one.
    pub(crate) fn refuse_candidates(&self) -> Result<(), Unable> {
        match self.n.candidates {
            Some(n) if n > 1 => Err(self.unable(Setting::Candidates, "answer with one completion only")),
            _ => Ok(()),
        }
    }

    /// The OpenAI-shared fields: written by the other OpenAI dialect, dropped by the rest.
    pub(crate) fn shared(&mut self) -> &'a [Extra] {
        if dialects::of(self.to).openai_shared() && dialects::of(self.n.from).openai_shared() {
            return &self.n.shared;
        }
        self.dropped.extend(self.n.shared.iter().map(|e| e.field.clone()));
        &[]
    }

    /// Reasoning from an earlier answer, for a route that cannot read it back in its own form:
    /// signed reasoning is refused, plain text is dropped (providers ignore earlier reasoning).
    pub(crate) fn other_reasoning(&mut self, part: &Part, reasoning: &Reasoning) -> Result<(), Unable> {
        match &reasoning.seal {
            Some(seal) => Err(Unable::new(
                &part.at,
                format!(
                    "is reasoning signed by {}, which only its own routes can read back; {} routes cannot take it",
                    api_name(seal.by),
                    api_name(self.to)
                ),
            )),
            None => {
                self.dropped.push(part.at.clone());
                Ok(())
            }
        }
    }

    /// A part this route has no place for.
    pub(crate) fn no_place(&self, part: &Part, what: &str) -> Unable {
        Unable::new(&part.at, format!("{} routes cannot take {what}", api_name(self.to)))
    }

    /// Tool choice for a route, or `None` when there are no tools (it is then dropped).
    pub(crate) fn tool_choice(&mut self) -> Option<&'a ToolChoice> {
        let choice = self.n.tool_choice.as_ref()?;
        if self.n.tools.is_empty() {
            self.drop_setting(Setting::ToolChoice);
            return None;
        }
        Some(choice)
    }

    /// Whether tool calls may run in parallel, for a route, or `None` when there are no tools (it
    /// is then dropped).
    pub(crate) fn parallel_tool_calls(&mut self) -> Option<bool> {
        let parallel = self.n.parallel_tool_calls?;
        if self.n.tools.is_empty() {
            self.drop_setting(Setting::Parallel);
            return None;
        }
        Some(parallel)
    }

    /// A JSON schema's name, description and strictness, for a route with no place for them.
    pub(crate) fn drop_schema_details(&mut self, schema: &JsonSchema) {
        let fields = [
            (schema.name.is_some(), "name"),
            (schema.description.is_some(), "description"),
            (schema.strict.is_some(), "strict"),
        ];
        let base = self.name(Setting::Format);
        drop_present(&mut self.dropped, base, &fields);
    }

    /// `strict` on tools, for a route with no place for it.
    pub(crate) fn drop_tool_strictness(&mut self) {
        let strict = self.n.tools.iter().filter(|t| t.strict.is_some());
        self.dropped.extend(strict.map(|t| format!("{}.strict", t.at)));
    }

    /// The tool names of earlier calls, by call id (Gemini answers a call by its name).
    pub(crate) fn call_names(&self) -> HashMap<&'a str, &'a str> {
        let n: &'a Neutral = self.n;
        n.turns
            .iter()
            .flat_map(|t| &t.parts)
            .filter_map(|p| match &p.content {
                Content::ToolCall(c) => Some((c.id.as_str(), c.name.as_str())),
                _ => None,
            })
            .collect()
    }
}

impl Neutral {
    pub(crate) fn new(from: Api) -> Neutral {
        Neutral {
            from,
            turns: Vec::new(),
            tools: Vec::new(),
            tool_choice: None,
            parallel_tool_calls: None,
            stop: Vec::new(),
            temperature: None,
            top_p: None,
            top_k: None,
            max_output_tokens: None,
            response_format: None,
            thinking: None,
            show_reasoning: None,
            verbosity: None,
            candidates: None,
            seed: None,
            presence_penalty: None,
            frequency_penalty: None,
            user: None,
            stream: false,
            stream_usage: from != Api::Chat,
            shared: Vec::new(),
            dropped: Vec::new(),
            parts: 0,
        }
    }

    /// Counts one more turn, part or tool against [`MAX_PARTS`].
    fn count(&mut self, at: &str) -> Result<(), Unable> {
        self.parts += 1;
        match self.parts > MAX_PARTS {
            true => Err(Unable::new(
                at,
                format!("the request has more than {MAX_PARTS} turns, parts and tools, too many to translate"),
            )),
            false => Ok(()),
        }
    }

    pub(crate) fn add_tool(&mut self, tool: Tool) -> Result<(), Unable> {
        self.count(&tool.at)?;
        self.tools.push(tool);
        Ok(())
    }

    /// Adds a part, to the last turn when it has the same role.
    pub(crate) fn push(&mut self, role: Role, at: String, content: Content) -> Result<(), Unable> {
        self.count(&at)?;
        let part = Part { at, content };
        match self.turns.last_mut() {
            Some(turn) if turn.role == role => turn.parts.push(part),
            _ => {
                self.count(&part.at)?;
                self.turns.push(Turn {
                    role,
                    parts: vec![part],
                });
            }
        }
        Ok(())
    }

    /// A field both OpenAI dialects have, kept as sent.
    pub(crate) fn share(&mut self, field: &str, value: &RawValue) {
        self.shared.push(Extra {
            field: field.to_string(),
            value: value.to_owned(),
        });
    }
}

// ---- reading ----

/// Whether a raw value is `null` (read as absent).
pub(crate) fn is_null(raw: &RawValue) -> bool {
    raw.get().trim() == "null"
}

/// serde's message without the position inside the fragment (meaningless to the client).
fn reason_of(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_string(),
        None => message.to_string(),
    }
}

/// A value of `raw` as `T`, or why not, naming `at`.
pub(crate) fn parse<'a, T: Deserialize<'a>>(raw: &'a RawValue, at: &str) -> Result<T, Unable> {
    serde_json::from_str(raw.get()).map_err(|e| Unable::new(at, reason_of(&e.to_string())))
}

/// Walks the array `raw`, one element at a time (no list of them is built): `f` gets each
/// element's index and value; the first element that is not a `T`, or that `f` refuses, stops it.
pub(crate) fn each<'a, T, F>(raw: &'a RawValue, at: &str, mut f: F) -> Result<(), Unable>
where
    T: Deserialize<'a>,
    F: FnMut(usize, T) -> Result<(), Unable>,
{
    let mut failed = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let walk = Each {
        at,
        f: &mut f,
        failed: &mut failed,
        item: PhantomData,
    };
    match de.deserialize_seq(walk) {
        Ok(()) => Ok(()),
        Err(e) => Err(failed.unwrap_or_else(|| Unable::new(at, reason_of(&e.to_string())))),
    }
}

struct Each<'s, T, F> {
    at: &'s str,
    f: &'s mut F,
    failed: &'s mut Option<Unable>,
    item: PhantomData<T>,
}

impl<'de, T, F> Visitor<'de> for Each<'_, T, F>
where
    T: Deserialize<'de>,
    F: FnMut(usize, T) -> Result<(), Unable>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let item = match seq.next_element::<T>() {
                Ok(Some(item)) => item,
                Ok(None) => return Ok(()),
                Err(e) => {
                    *self.failed = Some(Unable::new(format!("{}[{i}]", self.at), reason_of(&e.to_string())));
                    return Err(e);
                }
            };
            if let Err(unable) = (self.f)(i, item) {
                *self.failed = Some(unable);
                return Err(A::Error::custom("refused"));
            }
            i += 1;
        }
    }
}

/// Walks the object `raw` one field at a time (no map of them is built): `f` gets each name and
/// raw value.
pub(crate) fn each_field<'a, F>(raw: &'a RawValue, at: &str, mut f: F) -> Result<(), Unable>
where
    F: FnMut(String, &'a RawValue) -> Result<(), Unable>,
{
    let mut failed = None;
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let walk = Fields {
        f: &mut f,
        failed: &mut failed,
    };
    match de.deserialize_map(walk) {
        Ok(()) => Ok(()),
        Err(e) => Err(failed.unwrap_or_else(|| Unable::new(at, reason_of(&e.to_string())))),
    }
}

struct Fields<'s, F> {
    f: &'s mut F,
    failed: &'s mut Option<Unable>,
}

impl<'de, F> Visitor<'de> for Fields<'_, F>
where
    F: FnMut(String, &'de RawValue) -> Result<(), Unable>,
{
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some((key, value)) = map.next_entry::<String, &'de RawValue>()? {
            if let Err(unable) = (self.f)(key, value) {
                *self.failed = Some(unable);
                return Err(A::Error::custom("refused"));
            }
        }
        Ok(())
    }
}

/// A short list: one with more than [`MAX_FEW`] entries is refused at the first one past it, so
/// no list of tiny values is built (SPEC §18).
pub(crate) struct Few<T>(pub(crate) Vec<T>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Few<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Few<T>, D::Error> {
        d.deserialize_seq(FewVisitor(PhantomData))
    }
}

struct FewVisitor<T>(PhantomData<T>);

impl<'de, T: Deserialize<'de>> Visitor<'de> for FewVisitor<T> {
    type Value = Few<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a list of at most {MAX_FEW} entries")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Few<T>, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            if items.len() == MAX_FEW {
                return Err(A::Error::custom(format!("more than {MAX_FEW} entries")));
            }
            items.push(item);
        }
        Ok(Few(items))
    }
}

/// A content field: a string, or a list walked with `each`.
pub(crate) enum TextOr<'a> {
    Text(String),
    List(&'a RawValue),
}

pub(crate) fn text_or_list<'a>(raw: &'a RawValue, at: &str) -> Result<TextOr<'a>, Unable> {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => parse(raw, at).map(TextOr::Text),
        Some(b'[') => Ok(TextOr::List(raw)),
        _ => Err(Unable::new(at, "must be a string or an array")),
    }
}

/// A setting that is a word or an object: the word, or `None` for an object.
pub(crate) fn word_or_object(raw: &RawValue, at: &str) -> Result<Option<String>, Unable> {
    match raw.get().trim_start().as_bytes().first() {
        Some(b'"') => parse(raw, at).map(Some),
        Some(b'{') => Ok(None),
        _ => Err(Unable::new(at, "must be a string or an object")),
    }
}

/// The `type` of an object, read before the object itself (its other fields depend on it).
#[derive(Deserialize)]
#[serde(expecting = "an object")]
struct Tag {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

pub(crate) fn tag_of(raw: &RawValue, at: &str) -> Result<Option<String>, Unable> {
    parse::<Tag>(raw, at).map(|t| t.kind)
}

/// A string or a list of strings (stop sequences).
pub(crate) fn strings(raw: &RawValue, at: &str) -> Result<Vec<String>, Unable> {
    match text_or_list(raw, at)? {
        TextOr::Text(s) => Ok(vec![s]),
        TextOr::List(list) => parse::<Few<String>>(list, at).map(|few| few.0),
    }
}

/// An image given by URL: a `data:` URL is the image itself (base64).
pub(crate) fn image_from_url(url: String, detail: Option<String>, at: &str) -> Result<Image, Unable> {
    let Some(rest) = url
        .get(..5)
        .filter(|p| p.eq_ignore_ascii_case("data:"))
        .map(|_| &url[5..])
    else {
        return Ok(Image {
            source: ImageSource::Url(url),
            detail,
        });
    };
    let Some((media_type, data)) = rest.split_once(";base64,") else {
        return Err(Unable::new(at, "a `data:` URL must be base64 (`data:<type>;base64,…`)"));
    };
    Ok(Image {
        source: ImageSource::Base64 {
            media_type: media_type.to_string(),
            data: data.to_string(),
        },
        detail,
    })
}

/// Notes each field of `at` that is present (`true`) as dropped.
pub(crate) fn drop_present(dropped: &mut Vec<String>, at: &str, fields: &[(bool, &str)]) {
    let present = fields.iter().filter(|(set, _)| *set);
    dropped.extend(present.map(|(_, field)| format!("{at}.{field}")));
}

/// The field is not understood, so it is not carried (never dropped unseen).
pub(crate) fn unknown(field: &str) -> Unable {
    Unable::new(
        field,
        "is not a field the gateway can translate, so it cannot be sent to a route of another API",
    )
}

/// A field whose meaning lives at the provider (stored state, built-in tools, output other APIs
/// cannot return).
pub(crate) fn not_carried(field: impl Into<String>, why: &str) -> Unable {
    Unable::new(field, format!("{why}; it cannot be sent to a route of another API"))
}

/// A JSON object text for a function's arguments (`""` is no arguments).
pub(crate) fn arguments_object(arguments: &str, at: &str) -> Result<Box<RawValue>, Unable> {
    let text = arguments.trim();
    let text = if text.is_empty() { "{}" } else { text };
    match RawValue::from_string(text.to_string()) {
        Ok(raw) if raw.get().starts_with('{') => Ok(raw),
        _ => Err(Unable::new(at, "the tool call's arguments are not a JSON object")),
    }
}

// ---- writing ----

/// A JSON object written field by field straight into its bytes.
pub(crate) struct JsonObject {
    buf: Vec<u8>,
}

impl JsonObject {
    pub(crate) fn new(capacity: usize) -> JsonObject {
        let mut buf = Vec::with_capacity(capacity);
        buf.push(b'{');
        JsonObject { buf }
    }

    pub(crate) fn field<T: Serialize + ?Sized>(&mut self, key: &str, value: &T) -> Result<(), Unable> {
        if self.buf.len() > 1 {
            self.buf.push(b',');
        }
        let written = serde_json::to_writer(&mut self.buf, key).and_then(|()| {
            self.buf.push(b':');
            serde_json::to_writer(&mut self.buf, value)
        });
        written.map_err(|e| Unable::new(key, format!("could not be written: {e}")))
    }

    /// Writes the field when it has a value.
    pub(crate) fn opt<T: Serialize>(&mut self, key: &str, value: Option<T>) -> Result<(), Unable> {
        match value {
            Some(v) => self.field(key, &v),
            None => Ok(()),
        }
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.push(b'}');
        self.buf
    }
}

/// The size a written body starts with room for (the client's content, plus some).
pub(crate) fn capacity(n: &Neutral) -> usize {
    let text: usize = n
        .turns
        .iter()
        .flat_map(|t| &t.parts)
        .map(|p| match &p.content {
            Content::Text(t) => t.len(),
            Content::Image(Image {
                source: ImageSource::Base64 { data, .. },
                ..
            }) => data.len(),
            Content::ToolCall(c) => c.arguments.len(),
            _ => 64,
        })
        .sum();
    text + 1024
}

/// An image as a URL: its own, or a `data:` URL of its bytes (written without a copy of them).
pub(crate) struct ImageUrl<'a>(pub(crate) &'a ImageSource);

impl Serialize for ImageUrl<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            ImageSource::Url(url) => s.serialize_str(url),
            ImageSource::Base64 { media_type, data } => s.collect_str(&DataUrl(media_type, data)),
        }
    }
}

struct DataUrl<'a>(&'a str, &'a str);

impl fmt::Display for DataUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "data:{};base64,{}", self.0, self.1)
    }
}

/// The text of a system turn's parts (readers put only text there).
pub(crate) fn system_text(part: &Part) -> Result<&str, Unable> {
    match &part.content {
        Content::Text(t) => Ok(t),
        _ => Err(Unable::new(&part.at, "a system prompt holds text only")),
    }
}

/// The text parts of a tool result joined, or `None` when it holds an image.
pub(crate) fn result_text(result: &ToolResult) -> Option<Cow<'_, str>> {
    let mut texts = result.content.iter().map(|p| match p {
        Piece::Text(t) => Some(t.as_str()),
        Piece::Image(_) => None,
    });
    match result.content.len() {
        0 => Some(Cow::Borrowed("")),
        1 => texts.next().flatten().map(Cow::Borrowed),
        _ => texts.collect::<Option<Vec<&str>>>().map(|t| Cow::Owned(t.concat())),
    }
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}
