//! Response bodies for the four provider dialects: normal answers (non-stream JSON and SSE
//! stream plans) — text, or tool calls ([`Answer`]) — error bodies and error events. Chat answers
//! carry Azure's content-filter annotations when [`ReqInfo::content_filters`] says so; the
//! Bedrock fake reframes the Messages stream plan ([`crate::bedrock`]).
//!
//! Everything here is a pure function of the request and the scenario, so the
//! same request always yields byte-identical output (fixed ids, fixed
//! `created` times, no counters). A Responses answer's id, which a later request names in
//! `previous_response_id`, is derived from its request: different requests get different ids, as
//! from OpenAI.

use serde_json::Value;

use crate::answer::{Answer, ToolCall};
use crate::azure;
use crate::crypto::{base64, hex, sha256};
use crate::json::{array, string, Obj};
use crate::scenario::{Api, Behavior, ErrorKind, Scenario};

/// Fixed creation time used in every body.
pub const CREATED: u64 = 1_700_000_000;
/// The words content events cycle through.
pub const WORDS: [&str; 9] = ["Hello", "from", "the", "mock", "upstream,", "have", "a", "nice", "day"];
/// What a malformed event is replaced by.
pub const MALFORMED_EVENT: &str = "data: {not json\n\n";
/// The SSE keep-alive comment sent while waiting for first content.
pub const KEEPALIVE: &str = ": keep-alive\n\n";

/// What the mock needs to know about a request body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqInfo {
    /// The request's `model`, as JSON (echoed verbatim); `"mock-model"` if absent.
    pub model_json: String,
    /// The model as text, for messages that name it.
    pub model_name: String,
    pub stream: bool,
    /// Chat: `stream_options.include_usage` is true.
    pub include_usage: bool,
    /// Request body bytes / 4, at least 1: the uncached prompt.
    pub prompt_tokens: u64,
    /// (read, write) prompt-cache tokens reported beside the uncached prompt, each in the
    /// dialect's own fields (scenario `cache/R/W`).
    pub cache: (u64, u64),
    /// The request marks a cache breakpoint with `cache_control.ttl` `1h`: Anthropic writes to its
    /// 1-hour cache (`cache_creation.ephemeral_1h_input_tokens`).
    pub cache_1h: bool,
    /// Responses `background: true`: a whole answer is the `queued` response, answered later.
    pub background: bool,
    /// What the answer says (the usual words unless the request decides, see [`crate::answer`]).
    pub answer: Answer,
    /// Web searches run before the answer (`searches/N`, see [`crate::answer::web_searches`]).
    pub searches: usize,
    /// Chat on Azure: `prompt_filter_results` (a first stream chunk of its own, without choices)
    /// and each choice's `content_filter_results`.
    pub content_filters: bool,
    /// A Responses answer's `id`: `resp_` and 24 hex digits of SHA-256 over the request.
    pub response_id: String,
}

impl ReqInfo {
    /// Reads the fields the mock uses; an unparseable body counts as `{}`.
    pub fn from_body(body: &[u8]) -> ReqInfo {
        let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        ReqInfo::from_json(&v, body.len())
    }

    /// Reads the fields the mock uses from a parsed body of `len` bytes.
    pub fn from_json(v: &Value, len: usize) -> ReqInfo {
        let model = v.get("model");
        let model_json = model
            .and_then(|m| serde_json::to_string(m).ok())
            .unwrap_or_else(|| string("mock-model"));
        let model_name = match model {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => "mock-model".to_string(),
        };
        ReqInfo {
            model_json,
            model_name,
            stream: v.get("stream").and_then(|s| s.as_bool()).unwrap_or(false),
            include_usage: v
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                .and_then(|b| b.as_bool())
                .unwrap_or(false),
            prompt_tokens: ((len / 4) as u64).max(1),
            cache: (0, 0),
            cache_1h: asks_1h_cache(v),
            background: v.get("background").and_then(Value::as_bool).unwrap_or(false),
            answer: Answer::Words,
            searches: 0,
            content_filters: false,
            response_id: format!("resp_{}", hex(&sha256(v.to_string().as_bytes())[..12])),
        }
    }

    /// A request whose model and mode come from the path (Gemini, Bedrock, an Azure deployment).
    pub fn model_from_path(mut self, model: &str, stream: bool) -> ReqInfo {
        self.model_json = string(model);
        self.model_name = model.to_string();
        self.stream = stream;
        self
    }
}

/// The content deltas: `n` words cycled, each followed by a space except the last.
pub fn content_pieces(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            let w = WORDS[i % WORDS.len()];
            if i + 1 < n {
                format!("{w} ")
            } else {
                w.to_string()
            }
        })
        .collect()
}

// ---------------------------------------------------------------- errors

/// One error, in both shapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrSpec {
    pub message: String,
    /// OpenAI `type` (`null` when `None`).
    pub oa_type: Option<String>,
    pub oa_param: Option<String>,
    pub oa_code: Option<String>,
    /// Anthropic `error.type`.
    pub an_type: String,
    /// Anthropic message (usually the same as `message`).
    pub an_message: String,
    /// Gemini `error.code`: the HTTP status it came with, else the kind's usual one.
    pub code: u16,
}

fn spec(
    msg: &str,
    oa_type: Option<&str>,
    param: Option<&str>,
    code: Option<&str>,
    an_type: &str,
    an_msg: Option<&str>,
) -> ErrSpec {
    ErrSpec {
        message: msg.to_string(),
        oa_type: oa_type.map(str::to_string),
        oa_param: param.map(str::to_string),
        oa_code: code.map(str::to_string),
        an_type: an_type.to_string(),
        an_message: an_msg.unwrap_or(msg).to_string(),
        code: 500,
    }
}

/// Google's status word for an error code.
fn gemini_status(code: u16) -> &'static str {
    match code {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        500 => "INTERNAL",
        503 | 529 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "UNKNOWN",
    }
}

/// The error for an HTTP error status (`status/<code>`, flaky/down-for 503s).
/// Without a kind the message is generic and only names the status.
pub fn status_error(kind: Option<ErrorKind>, status: u16, model: &str) -> ErrSpec {
    let e = match kind {
        Some(k) => kind_error(k, model),
        None => {
            let msg = format!("mock-upstream: simulated error with HTTP status {status}");
            let (oa, an) = match status {
                400 => ("invalid_request_error", "invalid_request_error"),
                401 => ("authentication_error", "authentication_error"),
                402 => ("billing_error", "billing_error"),
                403 => ("permission_error", "permission_error"),
                404 => ("not_found_error", "not_found_error"),
                413 => ("invalid_request_error", "request_too_large"),
                429 => ("rate_limit_error", "rate_limit_error"),
                529 => ("server_error", "overloaded_error"),
                500..=599 => ("server_error", "api_error"),
                _ => ("invalid_request_error", "invalid_request_error"),
            };
            spec(&msg, Some(oa), None, None, an, None)
        }
    };
    ErrSpec { code: status, ..e }
}

/// The error for error events and `error-body-200` (default: OpenAI
/// `server_error`, Anthropic `overloaded_error` "Overloaded").
pub fn event_error(kind: Option<ErrorKind>, model: &str) -> ErrSpec {
    match kind {
        Some(k) => kind_error(k, model),
        None => spec(
            "The server had an error while processing your request.",
            Some("server_error"),
            None,
            Some("server_error"),
            "overloaded_error",
            Some("Overloaded"),
        ),
    }
}

/// Realistic provider wording for each error kind.
pub fn kind_error(kind: ErrorKind, model: &str) -> ErrSpec {
    let code = match kind {
        ErrorKind::Overloaded => 503,
        ErrorKind::RateLimit => 429,
        ErrorKind::Credit | ErrorKind::Quota => 403,
        ErrorKind::InvalidKey => 401,
        ErrorKind::ModelNotFound => 404,
        _ => 400,
    };
    let e = match kind {
        ErrorKind::Overloaded => spec(
            "The server is currently overloaded, please try again later.",
            Some("server_error"),
            None,
            None,
            "overloaded_error",
            Some("Overloaded"),
        ),
        ErrorKind::RateLimit => spec(
            "Rate limit reached for requests",
            Some("requests"),
            None,
            Some("rate_limit_exceeded"),
            "rate_limit_error",
            None,
        ),
        ErrorKind::ContextLength => spec(
            "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
            Some("invalid_request_error"),
            Some("messages"),
            Some("context_length_exceeded"),
            "invalid_request_error",
            Some("prompt is too long: 9000 tokens > 8192 maximum"),
        ),
        ErrorKind::UnsupportedParam => spec(
            "Unsupported parameter: 'logprobs' is not supported with this model.",
            Some("invalid_request_error"),
            Some("logprobs"),
            Some("unsupported_parameter"),
            "invalid_request_error",
            None,
        ),
        ErrorKind::Credit => spec(
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            Some("invalid_request_error"),
            None,
            None,
            "invalid_request_error",
            None,
        ),
        ErrorKind::Quota => spec(
            "You exceeded your current quota, please check your plan and billing details.",
            Some("insufficient_quota"),
            None,
            Some("insufficient_quota"),
            "billing_error",
            None,
        ),
        ErrorKind::InvalidKey => spec(
            "Incorrect API key provided.",
            Some("invalid_request_error"),
            None,
            Some("invalid_api_key"),
            "authentication_error",
            None,
        ),
        ErrorKind::ContentFilter => spec(
            "The response was filtered due to the prompt triggering Azure OpenAI's content management policy.",
            Some("invalid_request_error"),
            Some("prompt"),
            Some("content_filter"),
            "invalid_request_error",
            None,
        ),
        ErrorKind::ModelNotFound => {
            let msg = format!("The model `{model}` does not exist or you do not have access to it.");
            spec(&msg, Some("invalid_request_error"), None, Some("model_not_found"), "not_found_error", None)
        }
        ErrorKind::Invalid => spec(
            "Invalid value for 'temperature': must be between 0 and 2.",
            Some("invalid_request_error"),
            Some("temperature"),
            None,
            "invalid_request_error",
            None,
        ),
    };
    ErrSpec { code, ..e }
}

/// A Gemini error object (`{"error": {"code", "message", "status"}}`).
fn gemini_error(e: &ErrSpec) -> String {
    Obj::new()
        .obj(
            "error",
            Obj::new()
                .num("code", u64::from(e.code))
                .str("message", &e.message)
                .str("status", gemini_status(e.code)),
        )
        .build()
}

/// An error response body in the dialect's shape.
pub fn error_body(api: Api, e: &ErrSpec) -> String {
    match api {
        Api::Gemini => gemini_error(e),
        Api::Messages => Obj::new()
            .str("type", "error")
            .obj(
                "error",
                Obj::new().str("type", &e.an_type).str("message", &e.an_message),
            )
            .build(),
        Api::Chat | Api::Responses => Obj::new()
            .obj(
                "error",
                Obj::new()
                    .str("message", &e.message)
                    .opt_str("type", e.oa_type.as_deref())
                    .opt_str("param", e.oa_param.as_deref())
                    .opt_str("code", e.oa_code.as_deref()),
            )
            .build(),
    }
}

// ---------------------------------------------------------------- answers

fn total(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// `text` cut into at most `n` pieces of about equal length (on character boundaries).
fn split(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if n == 0 || chars.is_empty() {
        return Vec::new();
    }
    chars
        .chunks(chars.len().div_ceil(n))
        .map(|c| c.iter().collect())
        .collect()
}

/// The content deltas of a text answer: the usual `n` words, or the answer's text in `n` pieces.
fn text_pieces(answer: &Answer, n: usize) -> Vec<String> {
    match answer {
        Answer::Text(text) => split(text, n),
        _ => content_pieces(n),
    }
}

/// The calls of the answer (none for a text answer).
fn calls(info: &ReqInfo) -> &[ToolCall] {
    match &info.answer {
        Answer::Calls(calls) => calls,
        _ => &[],
    }
}

/// Output tokens the usage reports: one per content event of a text answer; for calls, one per
/// four characters of their names and arguments.
pub fn output_tokens(info: &ReqInfo, sc: &Scenario) -> u64 {
    match &info.answer {
        Answer::Calls(calls) => {
            let chars: usize = calls.iter().map(|c| c.name.len() + c.arguments.len()).sum();
            chars.div_ceil(4).max(1) as u64
        }
        answer => text_pieces(answer, sc.chunks).len() as u64,
    }
}

/// The id of call `i`: `toolu_mock_<i>` for Anthropic, `call_mock_<i>` for OpenAI (Gemini's
/// calls carry none).
fn call_id(api: Api, i: usize) -> String {
    match api {
        Api::Messages => format!("toolu_mock_{i}"),
        _ => format!("call_mock_{i}"),
    }
}

/// A Chat `tool_calls` entry; `index` and the arguments as given in streams.
fn chat_tool_call(i: usize, call: &ToolCall, index: bool, arguments: &str) -> String {
    let o = if index {
        Obj::new().num("index", i as u64)
    } else {
        Obj::new()
    };
    o.str("id", &call_id(Api::Chat, i))
        .str("type", "function")
        .obj(
            "function",
            Obj::new().str("name", &call.name).str("arguments", arguments),
        )
        .build()
}

/// An Anthropic `tool_use` block with `input` (raw JSON).
fn tool_use_block(i: usize, call: &ToolCall, input: &str) -> Obj {
    Obj::new()
        .str("type", "tool_use")
        .str("id", &call_id(Api::Messages, i))
        .str("name", &call.name)
        .raw("input", input)
}

/// A Responses `function_call` output item.
fn responses_call(i: usize, call: &ToolCall, arguments: &str, status: &str) -> Obj {
    Obj::new()
        .str("type", "function_call")
        .str("id", &format!("fc_mock_{i}"))
        .str("call_id", &call_id(Api::Responses, i))
        .str("name", &call.name)
        .str("arguments", arguments)
        .str("status", status)
}

/// Gemini parts: the calls, each a whole `functionCall`, else one text part.
fn gemini_parts(calls: &[ToolCall], text: &str) -> String {
    if calls.is_empty() {
        return array(vec![Obj::new().str("text", text).build()]);
    }
    gemini_call_parts(calls)
}

/// `media`: a Chat `audio` object (no transcript) or a Gemini `inlineData` image part, its data
/// the base64 of `text` — output that is not text.
fn chat_audio(text: &str) -> Obj {
    Obj::new().str("id", "audio_mock").str("data", &base64(text.as_bytes()))
}

fn gemini_media_parts(text: &str) -> String {
    let data = Obj::new()
        .str("mimeType", "image/png")
        .str("data", &base64(text.as_bytes()));
    array(vec![Obj::new().obj("inlineData", data).build()])
}

fn gemini_call_parts(calls: &[ToolCall]) -> String {
    array(calls.iter().map(|c| {
        Obj::new()
            .obj(
                "functionCall",
                Obj::new().str("name", &c.name).raw("args", &c.arguments),
            )
            .build()
    }))
}

// ---------------------------------------------------------------- non-stream

/// The normal non-stream answer.
pub fn nonstream_body(api: Api, info: &ReqInfo, sc: &Scenario) -> String {
    let usage = (!sc.no_usage).then(|| output_tokens(info, sc));
    let text: String = text_pieces(&info.answer, sc.chunks).concat();
    let calls = calls(info);
    match api {
        Api::Chat => {
            let message = Obj::new().str("role", "assistant");
            let (message, finish) = if calls.is_empty() && sc.media {
                let audio = chat_audio(&text).num("expires_at", CREATED + 3600);
                (message.null("content").obj("audio", audio), "stop")
            } else if calls.is_empty() {
                (message.str("content", &text), "stop")
            } else {
                let list = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| chat_tool_call(i, c, false, &c.arguments));
                (message.null("content").raw("tool_calls", &array(list)), "tool_calls")
            };
            let mut choice = Obj::new()
                .num("index", 0)
                .obj("message", message)
                .str("finish_reason", finish);
            if info.content_filters {
                choice = choice.obj("content_filter_results", azure::filter_results(false));
            }
            let mut o = Obj::new()
                .str("id", "chatcmpl-mock")
                .str("object", "chat.completion")
                .num("created", CREATED)
                .raw("model", &info.model_json)
                .raw("choices", &array(vec![choice.build()]));
            if info.content_filters {
                o = o.raw("prompt_filter_results", &azure::prompt_filter_results());
            }
            if let Some(n) = usage {
                o = o.obj("usage", chat_usage(info, n));
            }
            o.build()
        }
        Api::Messages => {
            let (content, stop) = if calls.is_empty() {
                let mut blocks = Vec::new();
                for i in 0..info.searches {
                    let (call, result) = messages_search(i, true);
                    blocks.push(call.build());
                    blocks.push(result.build());
                }
                blocks.push(Obj::new().str("type", "text").str("text", &text).build());
                (array(blocks), "end_turn")
            } else {
                let blocks = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| tool_use_block(i, c, &c.arguments).build());
                (array(blocks), "tool_use")
            };
            let mut o = Obj::new()
                .str("id", "msg_mock")
                .str("type", "message")
                .str("role", "assistant")
                .raw("model", &info.model_json)
                .raw("content", &content)
                .str("stop_reason", stop)
                .null("stop_sequence");
            if let Some(n) = usage {
                o = o.obj("usage", messages_usage(info, n));
            }
            o.build()
        }
        // OpenAI queues a background response and answers at once with it, no output yet.
        Api::Responses if info.background => responses_object(info, "queued", "[]", None),
        Api::Responses => responses_object(info, "completed", &responses_output(info, calls, &text), usage),
        Api::Gemini if sc.media && calls.is_empty() => {
            gemini_chunk(info, &gemini_media_parts(&text), Some("STOP"), usage)
        }
        Api::Gemini => gemini_chunk(info, &gemini_parts(calls, &text), Some("STOP"), usage),
    }
}

/// A Gemini `GenerateContentResponse`: one candidate with `parts`, its finish reason if any, and
/// usage (`Some(output tokens)`) if any.
fn gemini_chunk(info: &ReqInfo, parts: &str, finish: Option<&str>, usage_n: Option<u64>) -> String {
    let mut candidate = Obj::new().obj("content", Obj::new().raw("parts", parts).str("role", "model"));
    if let Some(reason) = finish {
        candidate = candidate.str("finishReason", reason); // Google omits it until the end
        if info.searches > 0 {
            // Grounding with Google Search: the queries it ran, with the pages it read.
            let queries = (0..info.searches).map(|_| string(SEARCH_QUERY));
            let chunk = Obj::new().obj(
                "web",
                Obj::new()
                    .str("uri", "https://example.com/mock")
                    .str("title", "example.com"),
            );
            candidate = candidate.obj(
                "groundingMetadata",
                Obj::new()
                    .raw("webSearchQueries", &array(queries))
                    .raw("groundingChunks", &array(vec![chunk.build()])),
            );
        }
    }
    let candidate = candidate.num("index", 0).build();
    let mut o = Obj::new().raw("candidates", &array(vec![candidate]));
    if let Some(n) = usage_n {
        o = o.obj(
            "usageMetadata",
            Obj::new()
                .num("promptTokenCount", all_input(info))
                .num("cachedContentTokenCount", info.cache.0)
                .num("candidatesTokenCount", n)
                .num("totalTokenCount", total(all_input(info), n)),
        );
    }
    o.raw("modelVersion", &info.model_json)
        .str("responseId", "gemini-mock")
        .build()
}

/// Every input token of an OpenAI or Gemini usage: the uncached prompt, the cache reads and the
/// cache writes (which OpenAI bills as input and does not report apart).
fn all_input(info: &ReqInfo) -> u64 {
    total(info.prompt_tokens, total(info.cache.0, info.cache.1))
}

/// Chat usage: `prompt_tokens` counts every input token, `prompt_tokens_details.cached_tokens`
/// the cache reads among them.
fn chat_usage(info: &ReqInfo, n: u64) -> Obj {
    let p = all_input(info);
    Obj::new()
        .num("prompt_tokens", p)
        .num("completion_tokens", n)
        .num("total_tokens", total(p, n))
        .obj("prompt_tokens_details", Obj::new().num("cached_tokens", info.cache.0))
}

fn responses_usage(info: &ReqInfo, n: u64) -> Obj {
    let p = all_input(info);
    Obj::new()
        .num("input_tokens", p)
        .obj("input_tokens_details", Obj::new().num("cached_tokens", info.cache.0))
        .num("output_tokens", n)
        .num("total_tokens", total(p, n))
}

/// Whether any `cache_control` in a request asks for the 1-hour cache (`"ttl": "1h"`).
fn asks_1h_cache(v: &Value) -> bool {
    match v {
        Value::Object(o) => o.iter().any(|(k, child)| {
            (k == "cache_control" && child.get("ttl").and_then(Value::as_str) == Some("1h")) || asks_1h_cache(child)
        }),
        Value::Array(items) => items.iter().any(asks_1h_cache),
        _ => false,
    }
}

/// Anthropic usage: `input_tokens` is the uncached prompt only; cache reads and writes are
/// their own fields, the writes split by cache (the 1-hour one when the request asked for it).
fn messages_usage(info: &ReqInfo, output: u64) -> Obj {
    let write = info.cache.1;
    let (five_minutes, one_hour) = if info.cache_1h { (0, write) } else { (write, 0) };
    messages_totals(info, output).obj(
        "cache_creation",
        Obj::new()
            .num("ephemeral_5m_input_tokens", five_minutes)
            .num("ephemeral_1h_input_tokens", one_hour),
    )
}

/// The counts Anthropic's `message_delta` carries: the totals so far, input and cache too, but
/// not the split of the cache writes (`cache_creation`).
fn messages_totals(info: &ReqInfo, output: u64) -> Obj {
    let (read, write) = info.cache;
    let o = Obj::new()
        .num("input_tokens", info.prompt_tokens)
        .num("cache_creation_input_tokens", write)
        .num("cache_read_input_tokens", read)
        .num("output_tokens", output);
    match info.searches {
        0 => o,
        n => o.obj("server_tool_use", Obj::new().num("web_search_requests", n as u64)),
    }
}

fn output_text_part(text: &str) -> Obj {
    Obj::new()
        .str("type", "output_text")
        .str("text", text)
        .raw("annotations", "[]")
}

/// The Responses message item; `None` text = in progress, no content yet.
fn responses_item(text: Option<&str>) -> Obj {
    let o = Obj::new().str("type", "message").str("id", "msg_mock");
    match text {
        Some(t) => o
            .str("status", "completed")
            .str("role", "assistant")
            .raw("content", &array(vec![output_text_part(t).build()])),
        None => o
            .str("status", "in_progress")
            .str("role", "assistant")
            .raw("content", "[]"),
    }
}

/// A finished Responses `output`: the calls, else the web searches run and the message with `text`.
fn responses_output(info: &ReqInfo, calls: &[ToolCall], text: &str) -> String {
    if calls.is_empty() {
        let mut items: Vec<String> = (0..info.searches)
            .map(|i| responses_search(i, "completed").build())
            .collect();
        items.push(responses_item(Some(text)).build());
        return array(items);
    }
    array(
        calls
            .iter()
            .enumerate()
            .map(|(i, c)| responses_call(i, c, &c.arguments, "completed").build()),
    )
}

/// What every mock web search looked for.
const SEARCH_QUERY: &str = "mock search";

/// Responses web search `i` as an output item.
fn responses_search(i: usize, status: &str) -> Obj {
    Obj::new()
        .str("type", "web_search_call")
        .str("id", &format!("ws_mock_{i}"))
        .str("status", status)
        .obj("action", Obj::new().str("type", "search").str("query", SEARCH_QUERY))
}

/// Anthropic web search `i`: the `server_tool_use` block (its input given) and its result block.
fn messages_search(i: usize, input: bool) -> (Obj, Obj) {
    let id = format!("srvtoolu_mock_{i}");
    let query = if input {
        Obj::new().str("query", SEARCH_QUERY)
    } else {
        Obj::new()
    };
    let call = Obj::new()
        .str("type", "server_tool_use")
        .str("id", &id)
        .str("name", "web_search")
        .obj("input", query);
    let found = Obj::new()
        .str("type", "web_search_result")
        .str("url", "https://example.com/mock")
        .str("title", "Mock result")
        .str("encrypted_content", "bW9jaw==")
        .str("page_age", "April 1, 2025");
    let result = Obj::new()
        .str("type", "web_search_tool_result")
        .str("tool_use_id", &id)
        .raw("content", &array(vec![found.build()]));
    (call, result)
}

/// Where the text block (Anthropic) or message item (Responses) is: after the web searches'.
fn text_index(api: Api, info: &ReqInfo) -> usize {
    match api {
        Api::Messages => 2 * info.searches,
        _ => info.searches,
    }
}

/// A Responses `response` object with `output` (JSON); `usage_n` None = no usage field.
fn responses_object(info: &ReqInfo, status: &str, output: &str, usage_n: Option<u64>) -> String {
    let mut o = Obj::new()
        .str("id", &info.response_id)
        .str("object", "response")
        .num("created_at", CREATED)
        .str("status", status)
        .raw("model", &info.model_json)
        .raw("output", output);
    if let Some(n) = usage_n {
        o = o.obj("usage", responses_usage(info, n));
    }
    o.build()
}

/// The body sent for a non-stream `malformed-event`: the normal body cut in half.
pub fn malformed_nonstream_body(api: Api, info: &ReqInfo, sc: &Scenario) -> String {
    let body = nonstream_body(api, info, sc);
    let mut cut = body.len() / 2;
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    body[..cut].to_string()
}

/// One step of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A complete SSE event (or comment), written and flushed as one chunk.
    Event(String),
    /// Bytes of a binary stream (an eventstream frame, or part of one), written and flushed as
    /// one chunk.
    Frame(Vec<u8>),
    /// Wait this long; with `keepalive`, send [`KEEPALIVE`] every 200 ms meanwhile.
    Wait { ms: u64, keepalive: bool },
    /// Close the connection now, without the terminating chunk.
    Cut,
}

struct Builder {
    steps: Vec<Step>,
    /// Number of `data:` events written so far (Responses `sequence_number`).
    data_index: usize,
    malformed: Option<usize>,
}

impl Builder {
    fn event(&mut self, name: Option<&str>, data: &str) {
        let text = if self.malformed == Some(self.data_index) {
            MALFORMED_EVENT.to_string()
        } else {
            match name {
                Some(n) => format!("event: {n}\ndata: {data}\n\n"),
                None => format!("data: {data}\n\n"),
            }
        };
        self.data_index += 1;
        self.steps.push(Step::Event(text));
    }

    fn seq(&self) -> u64 {
        self.data_index as u64
    }

    fn wait(&mut self, ms: u64, keepalive: bool) {
        if ms > 0 {
            self.steps.push(Step::Wait { ms, keepalive });
        }
    }
}

fn chat_chunk(info: &ReqInfo, delta: Obj, finish: Option<&str>) -> String {
    let mut choice = Obj::new()
        .num("index", 0)
        .obj("delta", delta)
        .opt_str("finish_reason", finish);
    if info.content_filters {
        choice = choice.obj("content_filter_results", azure::filter_results(false));
    }
    let choice = choice.build();
    Obj::new()
        .str("id", "chatcmpl-mock")
        .str("object", "chat.completion.chunk")
        .num("created", CREATED)
        .raw("model", &info.model_json)
        .raw("choices", &array(vec![choice]))
        .build()
}

/// One content event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    /// Call `i` starts (id and name; Gemini: the whole call).
    CallStart(usize),
    /// A fragment of call `i`'s arguments.
    Args(usize, String),
    /// `media`: this text's bytes as Chat audio or a Gemini image.
    Media(String),
}

/// The content events of the answer: its text pieces, or for each call its start and its
/// arguments in at least two fragments (Gemini: whole calls).
fn stream_pieces(api: Api, info: &ReqInfo, sc: &Scenario) -> Vec<Piece> {
    let calls = calls(info);
    if calls.is_empty() {
        let media = sc.media && matches!(api, Api::Chat | Api::Gemini);
        return text_pieces(&info.answer, sc.chunks)
            .into_iter()
            .map(if media { Piece::Media } else { Piece::Text })
            .collect();
    }
    let mut pieces = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        pieces.push(Piece::CallStart(i));
        if api != Api::Gemini {
            let fragments = split(&call.arguments, sc.chunks.max(2));
            pieces.extend(fragments.into_iter().map(|f| Piece::Args(i, f)));
        }
    }
    pieces
}

/// Events before the first content.
fn preamble(api: Api, b: &mut Builder, info: &ReqInfo, sc: &Scenario) {
    let text = calls(info).is_empty();
    match api {
        Api::Chat => {
            if info.content_filters {
                // Azure's first chunk: the prompt's filter results, no choices, empty fields.
                let d = Obj::new()
                    .str("id", "")
                    .raw("choices", "[]")
                    .num("created", 0)
                    .str("model", "")
                    .str("object", "")
                    .raw("prompt_filter_results", &azure::prompt_filter_results())
                    .build();
                b.event(None, &d);
            }
            let role = Obj::new().str("role", "assistant");
            let delta = if text {
                role.str("content", "")
            } else {
                role.null("content")
            };
            b.event(None, &chat_chunk(info, delta, None));
        }
        Api::Messages => {
            let mut msg = Obj::new()
                .str("id", "msg_mock")
                .str("type", "message")
                .str("role", "assistant")
                .raw("model", &info.model_json)
                .raw("content", "[]")
                .null("stop_reason")
                .null("stop_sequence");
            if !sc.no_usage {
                msg = msg.obj("usage", messages_usage(info, 1));
            }
            b.event(
                Some("message_start"),
                &Obj::new().str("type", "message_start").obj("message", msg).build(),
            );
            if text {
                for i in 0..info.searches {
                    let (call, result) = messages_search(i, false);
                    block_start(b, 2 * i, call);
                    let query = Obj::new().str("query", SEARCH_QUERY).build();
                    block_delta(
                        b,
                        2 * i,
                        Obj::new().str("type", "input_json_delta").str("partial_json", &query),
                    );
                    block_stop(b, 2 * i);
                    block_start(b, 2 * i + 1, result);
                    block_stop(b, 2 * i + 1);
                }
                let block = Obj::new().str("type", "text").str("text", "");
                block_start(b, text_index(api, info), block);
            }
            b.event(Some("ping"), &Obj::new().str("type", "ping").build());
        }
        Api::Responses => {
            for ty in ["response.created", "response.in_progress"] {
                let d = Obj::new()
                    .str("type", ty)
                    .num("sequence_number", b.seq())
                    .raw("response", &responses_object(info, "in_progress", "[]", None))
                    .build();
                b.event(Some(ty), &d);
            }
            if text {
                for i in 0..info.searches {
                    output_item(b, "response.output_item.added", i, responses_search(i, "in_progress"));
                    for ty in [
                        "response.web_search_call.in_progress",
                        "response.web_search_call.searching",
                        "response.web_search_call.completed",
                    ] {
                        let d = Obj::new()
                            .str("type", ty)
                            .num("sequence_number", b.seq())
                            .str("item_id", &format!("ws_mock_{i}"))
                            .num("output_index", i as u64)
                            .build();
                        b.event(Some(ty), &d);
                    }
                    output_item(b, "response.output_item.done", i, responses_search(i, "completed"));
                }
                output_item(
                    b,
                    "response.output_item.added",
                    text_index(api, info),
                    responses_item(None),
                );
                let d = Obj::new()
                    .str("type", "response.content_part.added")
                    .num("sequence_number", b.seq())
                    .str("item_id", "msg_mock")
                    .num("output_index", text_index(api, info) as u64)
                    .num("content_index", 0)
                    .obj("part", output_text_part(""))
                    .build();
                b.event(Some("response.content_part.added"), &d);
            }
        }
        Api::Gemini => {} // the first chunk already carries content
    }
}

/// Anthropic `content_block_start` of block `index`.
fn block_start(b: &mut Builder, index: usize, block: Obj) {
    let d = Obj::new()
        .str("type", "content_block_start")
        .num("index", index as u64)
        .obj("content_block", block)
        .build();
    b.event(Some("content_block_start"), &d);
}

/// Anthropic `content_block_delta` of block `index`.
fn block_delta(b: &mut Builder, index: usize, delta: Obj) {
    let d = Obj::new()
        .str("type", "content_block_delta")
        .num("index", index as u64)
        .obj("delta", delta)
        .build();
    b.event(Some("content_block_delta"), &d);
}

/// Anthropic `content_block_stop` of block `index`.
fn block_stop(b: &mut Builder, index: usize) {
    let d = Obj::new()
        .str("type", "content_block_stop")
        .num("index", index as u64)
        .build();
    b.event(Some("content_block_stop"), &d);
}

/// Responses `response.output_item.added` / `.done` of output `index`.
fn output_item(b: &mut Builder, ty: &str, index: usize, item: Obj) {
    let d = Obj::new()
        .str("type", ty)
        .num("sequence_number", b.seq())
        .num("output_index", index as u64)
        .obj("item", item)
        .build();
    b.event(Some(ty), &d);
}

/// The end of Responses call `i`: its arguments, then the finished item.
fn responses_call_done(b: &mut Builder, i: usize, call: &ToolCall) {
    let d = Obj::new()
        .str("type", "response.function_call_arguments.done")
        .num("sequence_number", b.seq())
        .str("item_id", &format!("fc_mock_{i}"))
        .num("output_index", i as u64)
        .str("name", &call.name)
        .str("arguments", &call.arguments)
        .build();
    b.event(Some("response.function_call_arguments.done"), &d);
    output_item(
        b,
        "response.output_item.done",
        i,
        responses_call(i, call, &call.arguments, "completed"),
    );
}

/// One content event.
fn content(api: Api, b: &mut Builder, info: &ReqInfo, piece: &Piece) {
    match piece {
        Piece::Text(text) => match api {
            Api::Chat => b.event(None, &chat_chunk(info, Obj::new().str("content", text), None)),
            Api::Messages => block_delta(
                b,
                text_index(api, info),
                Obj::new().str("type", "text_delta").str("text", text),
            ),
            Api::Responses => {
                let d = Obj::new()
                    .str("type", "response.output_text.delta")
                    .num("sequence_number", b.seq())
                    .str("item_id", "msg_mock")
                    .num("output_index", text_index(api, info) as u64)
                    .num("content_index", 0)
                    .str("delta", text)
                    .build();
                b.event(Some("response.output_text.delta"), &d);
            }
            Api::Gemini => b.event(None, &gemini_chunk(info, &gemini_parts(&[], text), None, None)),
        },
        Piece::Media(text) => match api {
            Api::Gemini => b.event(None, &gemini_chunk(info, &gemini_media_parts(text), None, None)),
            _ => b.event(None, &chat_chunk(info, Obj::new().obj("audio", chat_audio(text)), None)),
        },
        Piece::CallStart(i) => call_start(api, b, info, *i),
        Piece::Args(i, fragment) => match api {
            Api::Chat => {
                let call = Obj::new()
                    .num("index", *i as u64)
                    .obj("function", Obj::new().str("arguments", fragment))
                    .build();
                let delta = Obj::new().raw("tool_calls", &array(vec![call]));
                b.event(None, &chat_chunk(info, delta, None));
            }
            Api::Messages => block_delta(
                b,
                *i,
                Obj::new().str("type", "input_json_delta").str("partial_json", fragment),
            ),
            Api::Responses => {
                let d = Obj::new()
                    .str("type", "response.function_call_arguments.delta")
                    .num("sequence_number", b.seq())
                    .str("item_id", &format!("fc_mock_{i}"))
                    .num("output_index", *i as u64)
                    .str("delta", fragment)
                    .build();
                b.event(Some("response.function_call_arguments.delta"), &d);
            }
            Api::Gemini => {} // calls come whole
        },
    }
}

/// The start of call `i` (and the end of the one before, where the dialect closes it).
fn call_start(api: Api, b: &mut Builder, info: &ReqInfo, i: usize) {
    let calls = calls(info);
    let Some(call) = calls.get(i) else {
        return;
    };
    match api {
        Api::Chat => {
            let delta = Obj::new().raw("tool_calls", &array(vec![chat_tool_call(i, call, true, "")]));
            b.event(None, &chat_chunk(info, delta, None));
        }
        Api::Messages => {
            if i > 0 {
                block_stop(b, i - 1);
            }
            block_start(b, i, tool_use_block(i, call, "{}"));
        }
        Api::Responses => {
            if let Some(before) = i.checked_sub(1).and_then(|j| calls.get(j)) {
                responses_call_done(b, i - 1, before);
            }
            output_item(
                b,
                "response.output_item.added",
                i,
                responses_call(i, call, "", "in_progress"),
            );
        }
        Api::Gemini => {
            let parts = gemini_parts(std::slice::from_ref(call), "");
            b.event(None, &gemini_chunk(info, &parts, None, None));
        }
    }
}

/// One data event with no content in it: an empty delta (Anthropic: an empty text delta, or a
/// ping when the answer is calls; Responses: `response.in_progress`; Gemini: a chunk with empty
/// text).
fn empty_event(api: Api, b: &mut Builder, info: &ReqInfo) {
    match api {
        Api::Chat => b.event(None, &chat_chunk(info, Obj::new().str("content", ""), None)),
        Api::Messages if calls(info).is_empty() => block_delta(
            b,
            text_index(api, info),
            Obj::new().str("type", "text_delta").str("text", ""),
        ),
        Api::Messages => b.event(Some("ping"), &Obj::new().str("type", "ping").build()),
        Api::Responses => {
            let d = Obj::new()
                .str("type", "response.in_progress")
                .num("sequence_number", b.seq())
                .raw("response", &responses_object(info, "in_progress", "[]", None))
                .build();
            b.event(Some("response.in_progress"), &d);
        }
        Api::Gemini => b.event(None, &gemini_chunk(info, &gemini_parts(&[], ""), None, None)),
    }
}

/// Events after the content: the end of the last block or call, finish, usage, end marker.
fn finish(api: Api, b: &mut Builder, info: &ReqInfo, sc: &Scenario, text: &str) {
    let n = output_tokens(info, sc);
    let calls = calls(info);
    match api {
        Api::Chat => {
            let reason = if calls.is_empty() { "stop" } else { "tool_calls" };
            b.event(None, &chat_chunk(info, Obj::new(), Some(reason)));
            if info.include_usage && !sc.no_usage {
                let d = Obj::new()
                    .str("id", "chatcmpl-mock")
                    .str("object", "chat.completion.chunk")
                    .num("created", CREATED)
                    .raw("model", &info.model_json)
                    .raw("choices", "[]")
                    .obj("usage", chat_usage(info, n))
                    .build();
                b.event(None, &d);
            }
            if !sc.no_done {
                b.event(None, "[DONE]");
            }
        }
        Api::Messages => {
            block_stop(b, calls.len().saturating_sub(1).max(text_index(api, info)));
            let reason = if calls.is_empty() { "end_turn" } else { "tool_use" };
            let mut d = Obj::new()
                .str("type", "message_delta")
                .obj("delta", Obj::new().str("stop_reason", reason).null("stop_sequence"));
            if !sc.no_usage {
                d = d.obj("usage", messages_totals(info, n));
            }
            b.event(Some("message_delta"), &d.build());
            if !sc.no_done {
                b.event(Some("message_stop"), &Obj::new().str("type", "message_stop").build());
            }
        }
        Api::Responses => {
            match calls.last() {
                Some(last) => responses_call_done(b, calls.len() - 1, last),
                None => {
                    let common = |ty: &str, seq: u64| {
                        Obj::new()
                            .str("type", ty)
                            .num("sequence_number", seq)
                            .str("item_id", "msg_mock")
                            .num("output_index", text_index(api, info) as u64)
                            .num("content_index", 0)
                    };
                    let d = common("response.output_text.done", b.seq()).str("text", text).build();
                    b.event(Some("response.output_text.done"), &d);
                    let d = common("response.content_part.done", b.seq())
                        .obj("part", output_text_part(text))
                        .build();
                    b.event(Some("response.content_part.done"), &d);
                    output_item(
                        b,
                        "response.output_item.done",
                        text_index(api, info),
                        responses_item(Some(text)),
                    );
                }
            }
            if !sc.no_done {
                let usage = if sc.no_usage { None } else { Some(n) };
                let d = Obj::new()
                    .str("type", "response.completed")
                    .num("sequence_number", b.seq())
                    .raw(
                        "response",
                        &responses_object(info, "completed", &responses_output(info, calls, text), usage),
                    )
                    .build();
                b.event(Some("response.completed"), &d);
            }
        }
        // No end marker: the finish reason (with the usage) is the last chunk.
        Api::Gemini => {
            let usage = (!sc.no_usage).then_some(n);
            b.event(None, &gemini_chunk(info, &gemini_parts(&[], ""), Some("STOP"), usage));
        }
    }
}

fn error_event(api: Api, b: &mut Builder, e: &ErrSpec) {
    match api {
        Api::Chat => {
            let d = Obj::new()
                .obj(
                    "error",
                    Obj::new()
                        .str("message", &e.message)
                        .opt_str("type", e.oa_type.as_deref())
                        .opt_str("code", e.oa_code.as_deref()),
                )
                .build();
            b.event(None, &d);
        }
        Api::Messages => {
            let d = Obj::new()
                .str("type", "error")
                .obj(
                    "error",
                    Obj::new().str("type", &e.an_type).str("message", &e.an_message),
                )
                .build();
            b.event(Some("error"), &d);
        }
        Api::Responses => {
            let code = e.oa_code.as_deref().or(e.oa_type.as_deref());
            let d = Obj::new()
                .str("type", "error")
                .num("sequence_number", b.seq())
                .opt_str("code", code)
                .str("message", &e.message)
                .opt_str("param", e.oa_param.as_deref())
                .build();
            b.event(Some("error"), &d);
        }
        Api::Gemini => b.event(None, &gemini_error(e)),
    }
}

/// The steps of a streamed answer for `sc` (behaviours `Normal`, `CutAfter`,
/// `ErrorEventFirst`, `ErrorEventAfter`; others are treated as `Normal`).
/// A plan not ending in [`Step::Cut`] ends with the terminating chunk.
pub fn stream_plan(api: Api, info: &ReqInfo, sc: &Scenario) -> Vec<Step> {
    let mut b = Builder {
        steps: Vec::new(),
        data_index: 0,
        malformed: sc.malformed_event,
    };
    if sc.behavior == Behavior::ErrorEventFirst {
        error_event(api, &mut b, &event_error(sc.error_kind, &info.model_name));
        return b.steps;
    }
    preamble(api, &mut b, info, sc);
    for _ in 0..sc.held.unwrap_or(0) {
        b.steps.push(Step::Event(KEEPALIVE.to_string()));
    }
    for _ in 0..sc.empty_events.unwrap_or(0) {
        empty_event(api, &mut b, info);
    }
    if let Some(ms) = sc.first_content_after_ms {
        b.wait(ms, true);
    }
    let pieces = stream_pieces(api, info, sc);
    let limit = match sc.behavior {
        Behavior::CutAfter(n) | Behavior::ErrorEventAfter(n) => n.min(pieces.len()),
        _ => pieces.len(),
    };
    let stall = sc.stall.map(|(n, ms)| (n.min(limit), ms));
    if let Some((0, ms)) = stall {
        b.wait(ms, false);
    }
    for (i, piece) in pieces[..limit].iter().enumerate() {
        if i > 0 {
            b.wait(sc.gap_ms, false);
        }
        match (piece, sc.pad) {
            // `pad/N` on a stream: each text event carries N more bytes of text.
            (Piece::Text(text), Some(n)) => {
                content(api, &mut b, info, &Piece::Text(format!("{text}{}", "x".repeat(n))))
            }
            _ => content(api, &mut b, info, piece),
        }
        if let Some((n, ms)) = stall {
            if n == i + 1 {
                b.wait(ms, false);
            }
        }
    }
    match sc.behavior {
        Behavior::CutAfter(_) => b.steps.push(Step::Cut),
        Behavior::ErrorEventAfter(_) => error_event(api, &mut b, &event_error(sc.error_kind, &info.model_name)),
        _ => {
            let text: String = text_pieces(&info.answer, sc.chunks).concat();
            finish(api, &mut b, info, sc, &text);
        }
    }
    b.steps
}

/// Total delay of a non-stream answer: the time the stream would have spent
/// waiting (first-content-after + stall + gaps between content events).
pub fn nonstream_delay_ms(sc: &Scenario) -> u64 {
    let gaps = (sc.chunks.saturating_sub(1) as u64).saturating_mul(sc.gap_ms);
    sc.first_content_after_ms
        .unwrap_or(0)
        .saturating_add(sc.stall.map(|s| s.1).unwrap_or(0))
        .saturating_add(gaps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::parse_scenario;
    use serde_json::{json, Value};

    fn info(body: &str) -> ReqInfo {
        ReqInfo::from_body(body.as_bytes())
    }

    #[test]
    fn a_responses_answer_is_named_by_its_request() {
        let sc = Scenario::default();
        let id = |body: &str| parsed(&nonstream_body(Api::Responses, &info(body), &sc))["id"].clone();
        let a = id(r#"{"model":"m","input":"Say hello (1)"}"#);
        assert!(
            a.as_str().is_some_and(|s| s.starts_with("resp_") && s.len() == 29),
            "{a}"
        );
        assert_eq!(
            a,
            id(r#"{"model":"m","input":"Say hello (1)"}"#),
            "the same request, the same id"
        );
        assert_ne!(
            a,
            id(r#"{"model":"m","input":"Say hello (2)"}"#),
            "another request, another id"
        );
        // A stream names its response once when it starts and again when it completes: the same id.
        let i = info(r#"{"model":"m","stream":true,"input":"Say hello (1)"}"#);
        let ids: Vec<Value> = datas(&stream_plan(Api::Responses, &i, &sc))
            .iter()
            .map(|d| parsed(d)["response"]["id"].clone())
            .filter(|v| !v.is_null())
            .collect();
        assert!(ids.len() >= 2, "{ids:?}");
        assert!(ids.iter().all(|v| *v == json!(i.response_id)), "{ids:?}");
    }

    /// The data payloads of the Event steps (comments skipped).
    pub(super) fn datas(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Event(e) => e.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string),
                _ => None,
            })
            .collect()
    }

    fn events(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Event(e) => e.lines().find_map(|l| l.strip_prefix("event: ")).map(str::to_string),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn media_answers_carry_audio_or_an_image_and_no_text() {
        let sc = parse_scenario("chunks/3/0/media").unwrap();
        let chat = info(r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#);
        let body: Value = serde_json::from_str(&nonstream_body(Api::Chat, &chat, &sc)).unwrap();
        let message = &body["choices"][0]["message"];
        assert!(message["content"].is_null(), "{body}");
        assert_eq!(message["audio"]["id"], "audio_mock");
        assert!(!message["audio"]["data"].as_str().unwrap().is_empty());
        let deltas: Vec<Value> = datas(&stream_plan(Api::Chat, &chat, &sc))
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect();
        assert!(deltas
            .iter()
            .all(|d| d["choices"][0]["delta"]["content"].as_str().unwrap_or("").is_empty()));
        assert_eq!(
            deltas
                .iter()
                .filter(|d| d["choices"][0]["delta"]["audio"].is_object())
                .count(),
            3
        );

        let gemini = info(r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#);
        let body: Value = serde_json::from_str(&nonstream_body(Api::Gemini, &gemini, &sc)).unwrap();
        let part = &body["candidates"][0]["content"]["parts"][0];
        assert_eq!(part["inlineData"]["mimeType"], "image/png", "{body}");
        assert!(part.get("text").is_none());
        let chunks = datas(&stream_plan(Api::Gemini, &gemini, &sc));
        let images = chunks.iter().filter(|d| d.contains("inlineData")).count();
        assert_eq!(images, 3, "{chunks:?}");
        // Other dialects answer in text as usual.
        let messages = info(r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}"#);
        assert!(nonstream_body(Api::Messages, &messages, &sc).contains("\"text\""));
    }

    #[test]
    fn pieces_cycle() {
        assert_eq!(content_pieces(5).concat(), "Hello from the mock upstream,");
        assert_eq!(
            content_pieces(11).concat(),
            "Hello from the mock upstream, have a nice day Hello from"
        );
        assert!(content_pieces(0).is_empty());
    }

    #[test]
    fn req_info() {
        let i = info(r#"{"model":"gpt-x","stream":true,"stream_options":{"include_usage":true}}"#);
        assert_eq!(i.model_json, "\"gpt-x\"");
        assert!(i.stream && i.include_usage);
        assert_eq!(i.prompt_tokens, 71 / 4);
        let i = info("nope");
        assert_eq!(i.model_json, "\"mock-model\"");
        assert_eq!(i.prompt_tokens, 1);
    }

    #[test]
    fn chat_stream_ok() {
        let i = info(r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#);
        let sc = Scenario::default();
        let steps = stream_plan(Api::Chat, &i, &sc);
        let d = datas(&steps);
        assert_eq!(d.len(), 1 + 5 + 1 + 1 + 1);
        let first: Value = serde_json::from_str(&d[0]).unwrap();
        assert_eq!(
            first["choices"][0]["delta"],
            serde_json::json!({"role":"assistant","content":""})
        );
        assert_eq!(first["model"], "m");
        let text: String = d[1..6]
            .iter()
            .map(|s| {
                serde_json::from_str::<Value>(s).unwrap()["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(text, "Hello from the mock upstream,");
        let fin: Value = serde_json::from_str(&d[6]).unwrap();
        assert_eq!(fin["choices"][0]["finish_reason"], "stop");
        let usage: Value = serde_json::from_str(&d[7]).unwrap();
        assert_eq!(usage["choices"], serde_json::json!([]));
        assert_eq!(usage["usage"]["completion_tokens"], 5);
        assert_eq!(d[8], "[DONE]");
        // Deterministic.
        assert_eq!(steps, stream_plan(Api::Chat, &i, &sc));
    }

    #[test]
    fn chat_stream_without_include_usage_or_done() {
        let i = info(r#"{"model":"m","stream":true}"#);
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &Scenario::default()));
        assert_eq!(d.len(), 8);
        assert!(!d.iter().any(|x| x.contains("usage")));
        let sc = parse_scenario("no-done").unwrap();
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &sc));
        assert!(d.last().unwrap().contains("\"finish_reason\":\"stop\""));
        let i = info(r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#);
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &parse_scenario("no-usage").unwrap()));
        assert!(!d.iter().any(|x| x.contains("usage")));
    }

    #[test]
    fn messages_stream_ok() {
        let i = info(r#"{"model":"claude","max_tokens":10,"messages":[],"stream":true}"#);
        let steps = stream_plan(Api::Messages, &i, &Scenario::default());
        assert_eq!(
            events(&steps),
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for d in datas(&steps) {
            let v: Value = serde_json::from_str(&d).unwrap();
            assert!(v["type"].is_string());
        }
        let d = datas(&steps);
        let start: Value = serde_json::from_str(&d[0]).unwrap();
        assert_eq!(start["message"]["usage"]["output_tokens"], 1);
        let delta: Value = serde_json::from_str(&d[9]).unwrap();
        assert_eq!(delta["usage"]["output_tokens"], 5);
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    }

    #[test]
    fn responses_stream_ok() {
        let i = info(r#"{"model":"gpt","input":"hi","stream":true}"#);
        let steps = stream_plan(Api::Responses, &i, &parse_scenario("chunks/2/0").unwrap());
        assert_eq!(
            events(&steps),
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (k, d) in datas(&steps).iter().enumerate() {
            let v: Value = serde_json::from_str(d).unwrap();
            assert_eq!(v["sequence_number"], k as u64);
        }
        let last: Value = serde_json::from_str(datas(&steps).last().unwrap()).unwrap();
        assert_eq!(last["response"]["usage"]["output_tokens"], 2);
        assert_eq!(last["response"]["output"][0]["content"][0]["text"], "Hello from");
    }

    #[test]
    fn cut_error_and_malformed() {
        let i = info(r#"{"model":"m","stream":true}"#);
        let steps = stream_plan(Api::Chat, &i, &parse_scenario("cut-after/2").unwrap());
        assert_eq!(steps.last(), Some(&Step::Cut));
        assert_eq!(datas(&steps).len(), 3);

        let steps = stream_plan(Api::Chat, &i, &parse_scenario("error-event-first").unwrap());
        assert_eq!(
            datas(&steps),
            [
                r#"{"error":{"message":"The server had an error while processing your request.","type":"server_error","code":"server_error"}}"#
            ]
        );

        let steps = stream_plan(Api::Messages, &i, &parse_scenario("error-event-after/1").unwrap());
        assert_eq!(events(&steps).last().unwrap(), "error");
        assert_eq!(
            datas(&steps).last().unwrap(),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        );

        let steps = stream_plan(Api::Responses, &i, &parse_scenario("error-event-after/0").unwrap());
        let last: Value = serde_json::from_str(datas(&steps).last().unwrap()).unwrap();
        assert_eq!(last["type"], "error");
        assert_eq!(last["code"], "server_error");
        assert_eq!(last["sequence_number"], 4);

        let steps = stream_plan(Api::Chat, &i, &parse_scenario("malformed-event/1").unwrap());
        assert_eq!(steps[1], Step::Event(MALFORMED_EVENT.into()));
        assert_eq!(datas(&steps).len(), 8);
    }

    #[test]
    fn held_comments_come_before_any_content() {
        let i = info(r#"{"model":"m","stream":true}"#);
        let steps = stream_plan(
            Api::Chat,
            &i,
            &parse_scenario("held/3/first-content-after/100").unwrap(),
        );
        let first_wait = steps.iter().position(|s| matches!(s, Step::Wait { .. })).unwrap();
        let held = steps[..first_wait]
            .iter()
            .filter(|s| **s == Step::Event(KEEPALIVE.into()))
            .count();
        assert_eq!(held, 3, "{steps:?}");
    }

    #[test]
    fn waits() {
        let i = info(r#"{"stream":true}"#);
        let steps = stream_plan(
            Api::Chat,
            &i,
            &parse_scenario("first-content-after/300/chunks/3/10/stall-after/2/50").unwrap(),
        );
        let waits: Vec<&Step> = steps.iter().filter(|s| !matches!(s, Step::Event(_))).collect();
        assert_eq!(
            waits,
            [
                &Step::Wait {
                    ms: 300,
                    keepalive: true
                },
                &Step::Wait {
                    ms: 10,
                    keepalive: false
                },
                &Step::Wait {
                    ms: 50,
                    keepalive: false
                },
                &Step::Wait {
                    ms: 10,
                    keepalive: false
                },
            ]
        );
        assert!(matches!(steps[1], Step::Wait { ms: 300, .. }));
        assert_eq!(
            nonstream_delay_ms(&parse_scenario("first-content-after/300/chunks/3/10/stall-after/2/50").unwrap()),
            370
        );
    }

    #[test]
    fn nonstream_bodies() {
        let i = info(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
        let sc = Scenario::default();
        let v: Value = serde_json::from_str(&nonstream_body(Api::Chat, &i, &sc)).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "Hello from the mock upstream,");
        assert_eq!(v["usage"]["total_tokens"], i.prompt_tokens + 5);
        let v: Value = serde_json::from_str(&nonstream_body(Api::Messages, &i, &sc)).unwrap();
        assert_eq!(v["content"][0]["text"], "Hello from the mock upstream,");
        assert_eq!(v["usage"]["output_tokens"], 5);
        let v: Value = serde_json::from_str(&nonstream_body(Api::Responses, &i, &sc)).unwrap();
        assert_eq!(v["output"][0]["content"][0]["text"], "Hello from the mock upstream,");
        let nu = parse_scenario("no-usage").unwrap();
        for api in [Api::Chat, Api::Messages, Api::Responses] {
            let v: Value = serde_json::from_str(&nonstream_body(api, &i, &nu)).unwrap();
            assert!(v.get("usage").is_none());
            assert!(serde_json::from_str::<Value>(&malformed_nonstream_body(api, &i, &sc)).is_err());
        }
    }

    #[test]
    fn error_bodies() {
        let e = status_error(Some(ErrorKind::Overloaded), 429, "m");
        let b = error_body(Api::Chat, &e);
        assert!(b.contains("overloaded"));
        let v: Value = serde_json::from_str(&b).unwrap();
        assert_eq!(v["error"]["param"], Value::Null);
        assert_eq!(
            error_body(Api::Messages, &e),
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        );
        let v: Value = serde_json::from_str(&error_body(
            Api::Responses,
            &kind_error(ErrorKind::UnsupportedParam, "m"),
        ))
        .unwrap();
        assert_eq!(v["error"]["param"], "logprobs");
        assert_eq!(v["error"]["code"], "unsupported_parameter");
        let g = status_error(None, 503, "m");
        assert!(!g.message.contains("overload") && g.message.contains("503"));
        assert!(kind_error(ErrorKind::ModelNotFound, "gpt-9")
            .message
            .contains("`gpt-9`"));
    }

    #[test]
    fn gemini_answers_streams_and_errors() {
        let i = info(r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#).model_from_path("gem-1", true);
        let sc = Scenario::default();
        let v: Value = serde_json::from_str(&nonstream_body(Api::Gemini, &i, &sc)).unwrap();
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["text"],
            "Hello from the mock upstream,"
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 5);
        assert_eq!(v["modelVersion"], "gem-1");
        let d = super::tests::datas(&stream_plan(Api::Gemini, &i, &sc));
        assert_eq!(d.len(), 5 + 1, "five content chunks, then the finish with usage");
        let first: Value = serde_json::from_str(&d[0]).unwrap();
        assert_eq!(first["candidates"][0]["content"]["parts"][0]["text"], "Hello ");
        assert!(first.get("usageMetadata").is_none());
        let last: Value = serde_json::from_str(&d[5]).unwrap();
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        assert_eq!(last["usageMetadata"]["promptTokenCount"], i.prompt_tokens);
        let e: Value = serde_json::from_str(&error_body(Api::Gemini, &status_error(None, 503, "m"))).unwrap();
        assert_eq!(
            (e["error"]["code"].as_u64(), e["error"]["status"].as_str()),
            (Some(503), Some("UNAVAILABLE"))
        );
        let e: Value =
            serde_json::from_str(&error_body(Api::Gemini, &event_error(Some(ErrorKind::RateLimit), "m"))).unwrap();
        assert_eq!(e["error"]["status"], "RESOURCE_EXHAUSTED");
        let cut = stream_plan(Api::Gemini, &i, &parse_scenario("error-event-after/2").unwrap());
        let d = datas(&cut);
        let err: Value = serde_json::from_str(d.last().unwrap()).unwrap();
        assert_eq!(err["error"]["code"], 500);
    }

    fn calls_info(body: &str, n: usize) -> ReqInfo {
        let call = ToolCall {
            name: "get_weather".into(),
            arguments: crate::answer::DEFAULT_ARGUMENTS.into(),
        };
        ReqInfo {
            answer: Answer::Calls(vec![call; n]),
            ..info(body)
        }
    }

    fn parsed(d: &str) -> Value {
        serde_json::from_str(d).unwrap()
    }

    /// Each call's arguments fragments joined, checked to be the whole arguments as JSON.
    fn assert_fragments_make_the_arguments(fragments: &[Vec<String>]) {
        for (i, f) in fragments.iter().enumerate() {
            assert!(f.len() >= 2, "call {i}: arguments in two fragments at least: {f:?}");
            let whole: Value = serde_json::from_str(&f.concat()).unwrap();
            assert_eq!(
                whole,
                serde_json::json!({"city": "Paris", "unit": "celsius"}),
                "call {i}"
            );
        }
    }

    #[test]
    fn chat_streams_calls_as_tool_call_deltas() {
        let i = calls_info(
            r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#,
            2,
        );
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &Scenario::default()));
        assert_eq!(
            parsed(&d[0])["choices"][0]["delta"],
            serde_json::json!({"role": "assistant", "content": null})
        );
        let mut fragments = vec![Vec::new(), Vec::new()];
        let mut starts = Vec::new();
        for chunk in &d[1..d.len() - 3] {
            let call = &parsed(chunk)["choices"][0]["delta"]["tool_calls"][0];
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(fragments[index].len(), 0, "id and name come first");
                assert_eq!(
                    (call["type"].as_str(), call["function"]["name"].as_str()),
                    (Some("function"), Some("get_weather"))
                );
                starts.push((index, id.to_string()));
            }
            fragments[index].push(call["function"]["arguments"].as_str().unwrap().to_string());
        }
        assert_eq!(starts, [(0, "call_mock_0".to_string()), (1, "call_mock_1".to_string())]);
        // The start's empty arguments take no part in the JSON.
        let fragments: Vec<Vec<String>> = fragments
            .into_iter()
            .map(|f| f.into_iter().filter(|x| !x.is_empty()).collect())
            .collect();
        assert_fragments_make_the_arguments(&fragments);
        let fin = parsed(&d[d.len() - 3]);
        assert_eq!(fin["choices"][0]["finish_reason"], "tool_calls");
        let usage = parsed(&d[d.len() - 2]);
        // One token per four characters of name and arguments: 2 × (11 + 33) / 4.
        assert_eq!(usage["usage"]["completion_tokens"], 22);
        assert_eq!(d.last().unwrap(), "[DONE]");
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &parse_scenario("no-usage").unwrap()));
        assert!(!d.iter().any(|x| x.contains("usage")), "no-usage holds for calls");
    }

    #[test]
    fn messages_streams_calls_as_tool_use_blocks() {
        let i = calls_info(r#"{"model":"claude","stream":true}"#, 2);
        let steps = stream_plan(Api::Messages, &i, &Scenario::default());
        let names = events(&steps);
        let d = datas(&steps);
        let mut want = vec!["message_start", "ping"];
        for _ in 0..2 {
            want.push("content_block_start");
            want.extend(std::iter::repeat_n("content_block_delta", 5));
            want.push("content_block_stop");
        }
        want.extend(["message_delta", "message_stop"]);
        assert_eq!(names, want);
        let mut fragments = vec![Vec::new(), Vec::new()];
        for (name, data) in names.iter().zip(&d) {
            let v = parsed(data);
            match name.as_str() {
                "content_block_start" => {
                    let index = v["index"].as_u64().unwrap();
                    assert_eq!(
                        v["content_block"],
                        serde_json::json!({"type": "tool_use", "id": format!("toolu_mock_{index}"), "name": "get_weather", "input": {}})
                    );
                }
                "content_block_delta" => {
                    assert_eq!(v["delta"]["type"], "input_json_delta");
                    let index = v["index"].as_u64().unwrap() as usize;
                    fragments[index].push(v["delta"]["partial_json"].as_str().unwrap().to_string());
                }
                "message_delta" => {
                    assert_eq!(v["delta"]["stop_reason"], "tool_use");
                    assert_eq!(v["usage"]["output_tokens"], 22);
                }
                _ => {}
            }
        }
        assert_fragments_make_the_arguments(&fragments);
        let stops: Vec<u64> = d
            .iter()
            .map(|x| parsed(x))
            .filter(|v| v["type"] == "content_block_stop")
            .map(|v| v["index"].as_u64().unwrap())
            .collect();
        assert_eq!(stops, [0, 1]);
        // Empty events before the calls are pings: no text block is open.
        let steps = stream_plan(Api::Messages, &i, &parse_scenario("empty-events/2").unwrap());
        assert_eq!(&events(&steps)[..4], ["message_start", "ping", "ping", "ping"]);
    }

    #[test]
    fn responses_streams_calls_as_function_call_items() {
        let i = calls_info(r#"{"model":"gpt","input":"hi","stream":true}"#, 2);
        let steps = stream_plan(Api::Responses, &i, &parse_scenario("chunks/2/0").unwrap());
        let mut want = vec!["response.created", "response.in_progress"];
        for _ in 0..2 {
            want.push("response.output_item.added");
            want.extend(["response.function_call_arguments.delta"; 2]);
            want.extend(["response.function_call_arguments.done", "response.output_item.done"]);
        }
        want.push("response.completed");
        assert_eq!(events(&steps), want);
        let d: Vec<Value> = datas(&steps).iter().map(|x| parsed(x)).collect();
        let mut fragments = vec![Vec::new(), Vec::new()];
        for (k, v) in d.iter().enumerate() {
            assert_eq!(v["sequence_number"], k as u64);
            let Some(index) = v["output_index"].as_u64() else {
                continue;
            };
            let item_id = format!("fc_mock_{index}");
            match v["type"].as_str().unwrap() {
                "response.output_item.added" | "response.output_item.done" => {
                    assert_eq!(v["item"]["type"], "function_call");
                    assert_eq!(v["item"]["id"], item_id.as_str());
                    assert_eq!(v["item"]["call_id"], format!("call_mock_{index}"));
                    assert_eq!(v["item"]["name"], "get_weather");
                }
                "response.function_call_arguments.delta" => {
                    assert_eq!(v["item_id"], item_id.as_str());
                    fragments[index as usize].push(v["delta"].as_str().unwrap().to_string());
                }
                _ => {
                    assert_eq!(v["item_id"], item_id.as_str());
                    assert_eq!(v["arguments"], crate::answer::DEFAULT_ARGUMENTS);
                }
            }
        }
        assert_fragments_make_the_arguments(&fragments);
        let done = &d[d.len() - 1]["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["output"][1]["arguments"], crate::answer::DEFAULT_ARGUMENTS);
        assert_eq!(done["output"][1]["status"], "completed");
        assert_eq!(done["usage"]["output_tokens"], 22);
    }

    #[test]
    fn gemini_streams_whole_function_calls() {
        let i = calls_info(r#"{"contents":[]}"#, 2).model_from_path("gem", true);
        let d: Vec<Value> = datas(&stream_plan(Api::Gemini, &i, &Scenario::default()))
            .iter()
            .map(|x| parsed(x))
            .collect();
        assert_eq!(d.len(), 3, "one chunk per call, then the finish");
        for chunk in &d[..2] {
            let call = &chunk["candidates"][0]["content"]["parts"][0]["functionCall"];
            assert_eq!(call["name"], "get_weather");
            assert_eq!(call["args"], serde_json::json!({"city": "Paris", "unit": "celsius"}));
            assert!(chunk["candidates"][0].get("finishReason").is_none());
        }
        assert_eq!(d[2]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(d[2]["usageMetadata"]["candidatesTokenCount"], 22);
    }

    #[test]
    fn calls_in_non_stream_answers() {
        let i = calls_info(r#"{"model":"m"}"#, 1);
        let sc = Scenario::default();
        let v = parsed(&nonstream_body(Api::Chat, &i, &sc));
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        let message = &v["choices"][0]["message"];
        assert!(message["content"].is_null());
        assert_eq!(
            message["tool_calls"],
            serde_json::json!([{"id": "call_mock_0", "type": "function",
                                "function": {"name": "get_weather", "arguments": crate::answer::DEFAULT_ARGUMENTS}}])
        );
        assert_eq!(v["usage"]["completion_tokens"], 11);
        let v = parsed(&nonstream_body(Api::Messages, &i, &sc));
        assert_eq!(v["stop_reason"], "tool_use");
        assert_eq!(
            v["content"],
            serde_json::json!([{"type": "tool_use", "id": "toolu_mock_0", "name": "get_weather",
                                "input": {"city": "Paris", "unit": "celsius"}}])
        );
        let v = parsed(&nonstream_body(Api::Responses, &i, &sc));
        assert_eq!(
            v["output"],
            serde_json::json!([{"type": "function_call", "id": "fc_mock_0", "call_id": "call_mock_0", "name": "get_weather",
                                "arguments": crate::answer::DEFAULT_ARGUMENTS, "status": "completed"}])
        );
        let v = parsed(&nonstream_body(Api::Gemini, &i, &sc));
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["functionCall"]["args"]["unit"],
            "celsius"
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        let nu = parse_scenario("no-usage").unwrap();
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini] {
            let v = parsed(&nonstream_body(api, &i, &nu));
            assert!(v.get("usage").is_none() && v.get("usageMetadata").is_none(), "{api:?}");
        }
    }

    #[test]
    fn a_text_answer_is_spread_over_the_content_events() {
        let i = ReqInfo {
            answer: Answer::Text("The tool said: 22C".into()),
            ..info(r#"{"model":"m","stream":true}"#)
        };
        let sc = Scenario::default();
        let d = super::tests::datas(&stream_plan(Api::Chat, &i, &sc));
        let text: String = d[1..6]
            .iter()
            .map(|x| {
                parsed(x)["choices"][0]["delta"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(text, "The tool said: 22C");
        let v = parsed(&nonstream_body(Api::Messages, &i, &sc));
        assert_eq!(v["content"][0]["text"], "The tool said: 22C");
        assert_eq!(v["usage"]["output_tokens"], 5);
        assert_eq!(split("abc", 5), ["a", "b", "c"]);
        assert!(split("abc", 0).is_empty());
    }
}

#[cfg(test)]
mod cache_tests {
    use super::*;
    use crate::scenario::parse_scenario;

    fn data_of(steps: &[Step], name: &str) -> Value {
        let data = steps
            .iter()
            .find_map(|s| match s {
                Step::Event(e) if e.starts_with(&format!("event: {name}\n")) => {
                    e.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_string)
                }
                _ => None,
            })
            .unwrap_or_default();
        serde_json::from_str(&data).unwrap_or(Value::Null)
    }

    #[test]
    fn anthropic_writes_the_cache_a_request_asks_for_and_its_delta_repeats_the_total_unsplit() {
        let sc = parse_scenario("cache/0/200").unwrap();
        for (ttl, five, hour) in [(r#""ttl":"1h""#, 0, 200), (r#""ttl":"5m""#, 200, 0), ("", 200, 0)] {
            let sep = if ttl.is_empty() { "" } else { "," };
            let body = format!(
                r#"{{"model":"c","stream":true,"max_tokens":9,"system":[{{"type":"text","text":"x","cache_control":{{"type":"ephemeral"{sep}{ttl}}}}}],"messages":[{{"role":"user","content":"hi"}}]}}"#
            );
            let mut info = ReqInfo::from_body(body.as_bytes());
            info.cache = sc.cache.unwrap_or_default();
            let steps = stream_plan(Api::Messages, &info, &sc);
            let start = data_of(&steps, "message_start");
            let split = &start["message"]["usage"]["cache_creation"];
            assert_eq!(
                (
                    split["ephemeral_5m_input_tokens"].as_u64(),
                    split["ephemeral_1h_input_tokens"].as_u64()
                ),
                (Some(five), Some(hour)),
                "{ttl}: {start}"
            );
            let delta = data_of(&steps, "message_delta");
            assert_eq!(delta["usage"]["cache_creation_input_tokens"], 200, "{delta}");
            assert!(delta["usage"].get("cache_creation").is_none(), "{delta}");
        }
    }

    /// A web search tool is answered as each provider answers it: Responses `web_search_call`
    /// items (whole and streamed, the message after them), Anthropic `server_tool_use` and
    /// `web_search_tool_result` blocks counted in `usage.server_tool_use.web_search_requests`,
    /// Gemini's `groundingMetadata.webSearchQueries` — never more searches than the request allows.
    #[test]
    fn web_searches_are_answered_in_each_providers_shape() {
        let sc = parse_scenario("searches/3").unwrap();
        let prepared = |api: Api, body: Value| {
            let mut i = ReqInfo::from_json(&body, 100);
            i.answer = crate::answer::decide(api, &body, &sc);
            i.searches = crate::answer::web_searches(api, &body, &sc, &i.answer);
            i
        };
        let responses = |extra: Value| {
            let mut b = serde_json::json!({"model": "m", "input": "hi", "tools": [{"type": "web_search"}]});
            for (k, v) in extra.as_object().unwrap() {
                b[k] = v.clone();
            }
            prepared(Api::Responses, b)
        };
        let whole: Value =
            serde_json::from_str(&nonstream_body(Api::Responses, &responses(serde_json::json!({})), &sc)).unwrap();
        let kinds: Vec<&str> = whole["output"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["web_search_call", "web_search_call", "web_search_call", "message"]
        );
        let limited = responses(serde_json::json!({"max_tool_calls": 2, "stream": true}));
        assert_eq!(limited.searches, 2, "the provider keeps to max_tool_calls");
        let d = super::tests::datas(&stream_plan(Api::Responses, &limited, &sc));
        let done = d
            .iter()
            .filter(|x| x.contains("response.output_item.done") && x.contains("web_search_call"))
            .count();
        assert_eq!(done, 2);
        let anthropic = |max_uses: Value| {
            prepared(
                Api::Messages,
                serde_json::json!({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "hi"}],
                                   "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": max_uses}]}),
            )
        };
        let whole: Value =
            serde_json::from_str(&nonstream_body(Api::Messages, &anthropic(serde_json::json!(5)), &sc)).unwrap();
        assert_eq!(whole["usage"]["server_tool_use"]["web_search_requests"], 3);
        assert_eq!(whole["content"][0]["type"], "server_tool_use");
        assert_eq!(whole["content"][6]["type"], "text");
        let d = super::tests::datas(&stream_plan(Api::Messages, &anthropic(serde_json::json!(1)), &sc));
        let delta: Value = serde_json::from_str(d.iter().find(|x| x.contains("message_delta")).unwrap()).unwrap();
        assert_eq!(delta["usage"]["server_tool_use"]["web_search_requests"], 1);
        let gemini = prepared(
            Api::Gemini,
            serde_json::json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]}),
        );
        let whole: Value = serde_json::from_str(&nonstream_body(Api::Gemini, &gemini, &sc)).unwrap();
        assert_eq!(
            whole["candidates"][0]["groundingMetadata"]["webSearchQueries"]
                .as_array()
                .unwrap()
                .len(),
            3
        );
        // No search tool, no searches.
        assert_eq!(
            prepared(Api::Responses, serde_json::json!({"model": "m", "input": "hi"})).searches,
            0
        );
    }
}
