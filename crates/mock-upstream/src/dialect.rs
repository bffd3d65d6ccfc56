//! Response bodies for the three provider dialects: normal answers
//! (non-stream JSON and SSE stream plans), error bodies and error events.
//!
//! Everything here is a pure function of the request and the scenario, so the
//! same request always yields byte-identical output (fixed ids, fixed
//! `created` times, no counters).

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
}

impl ReqInfo {
    /// Reads the fields the mock uses; an unparseable body counts as `{}`.
    pub fn from_body(body: &[u8]) -> ReqInfo {
        let v: serde_json::Value = serde_json::from_slice(body).unwrap_or(serde_json::Value::Null);
        let model = v.get("model");
        let model_json = model
            .and_then(|m| serde_json::to_string(m).ok())
            .unwrap_or_else(|| string("mock-model"));
        let model_name = match model {
            Some(serde_json::Value::String(s)) => s.clone(),
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
            prompt_tokens: ((body.len() / 4) as u64).max(1),
            cache: (0, 0),
        }
    }

    /// A Gemini request: the model and the mode come from the path.
    pub fn for_gemini(mut self, model: &str, stream: bool) -> ReqInfo {
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

// ---------------------------------------------------------------- non-stream

fn total(a: u64, b: u64) -> u64 {
    a.saturating_add(b)
}

/// The normal non-stream answer.
pub fn nonstream_body(api: Api, info: &ReqInfo, sc: &Scenario) -> String {
    let n = sc.chunks as u64;
    let text: String = content_pieces(sc.chunks).concat();
    match api {
        Api::Chat => {
            let choice = Obj::new()
                .num("index", 0)
                .obj("message", Obj::new().str("role", "assistant").str("content", &text))
                .str("finish_reason", "stop")
                .build();
            let mut o = Obj::new()
                .str("id", "chatcmpl-mock")
                .str("object", "chat.completion")
                .num("created", CREATED)
                .raw("model", &info.model_json)
                .raw("choices", &array(vec![choice]));
            if !sc.no_usage {
                o = o.obj("usage", chat_usage(info, n));
            }
            o.build()
        }
        Api::Messages => {
            let mut o = Obj::new()
                .str("id", "msg_mock")
                .str("type", "message")
                .str("role", "assistant")
                .raw("model", &info.model_json)
                .raw(
                    "content",
                    &array(vec![Obj::new().str("type", "text").str("text", &text).build()]),
                )
                .str("stop_reason", "end_turn")
                .null("stop_sequence");
            if !sc.no_usage {
                o = o.obj("usage", messages_usage(info, n));
            }
            o.build()
        }
        Api::Responses => responses_object(info, "completed", Some(&text), if sc.no_usage { None } else { Some(n) }),
        Api::Gemini => gemini_chunk(info, &text, Some("STOP"), (!sc.no_usage).then_some(n)),
    }
}

/// A Gemini `GenerateContentResponse`: one candidate with `text`, its finish reason if any, and
/// usage (`Some(output tokens)`) if any.
fn gemini_chunk(info: &ReqInfo, text: &str, finish: Option<&str>, usage_n: Option<u64>) -> String {
    let mut candidate = Obj::new().obj(
        "content",
        Obj::new()
            .raw("parts", &array(vec![Obj::new().str("text", text).build()]))
            .str("role", "model"),
    );
    if let Some(reason) = finish {
        candidate = candidate.str("finishReason", reason); // Google omits it until the end
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

/// Anthropic usage: `input_tokens` is the uncached prompt only; cache reads and writes are
/// their own fields (writes to the 5-minute cache).
fn messages_usage(info: &ReqInfo, output: u64) -> Obj {
    let (read, write) = info.cache;
    Obj::new()
        .num("input_tokens", info.prompt_tokens)
        .num("cache_creation_input_tokens", write)
        .num("cache_read_input_tokens", read)
        .obj(
            "cache_creation",
            Obj::new()
                .num("ephemeral_5m_input_tokens", write)
                .num("ephemeral_1h_input_tokens", 0),
        )
        .num("output_tokens", output)
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

/// A Responses `response` object. `text` None = no output yet; `usage_n`
/// None = no usage field.
fn responses_object(info: &ReqInfo, status: &str, text: Option<&str>, usage_n: Option<u64>) -> String {
    let output = match text {
        Some(t) => array(vec![responses_item(Some(t)).build()]),
        None => "[]".to_string(),
    };
    let mut o = Obj::new()
        .str("id", "resp_mock")
        .str("object", "response")
        .num("created_at", CREATED)
        .str("status", status)
        .raw("model", &info.model_json)
        .raw("output", &output);
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

// ---------------------------------------------------------------- streams

/// One step of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// A complete SSE event (or comment), written and flushed as one chunk.
    Event(String),
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
    let choice = Obj::new()
        .num("index", 0)
        .obj("delta", delta)
        .opt_str("finish_reason", finish)
        .build();
    Obj::new()
        .str("id", "chatcmpl-mock")
        .str("object", "chat.completion.chunk")
        .num("created", CREATED)
        .raw("model", &info.model_json)
        .raw("choices", &array(vec![choice]))
        .build()
}

/// Events before the first content.
fn preamble(api: Api, b: &mut Builder, info: &ReqInfo, sc: &Scenario) {
    match api {
        Api::Chat => {
            let d = chat_chunk(info, Obj::new().str("role", "assistant").str("content", ""), None);
            b.event(None, &d);
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
                msg = msg.obj(
                    "usage",
                    messages_usage(info, 1),
                );
            }
            b.event(
                Some("message_start"),
                &Obj::new().str("type", "message_start").obj("message", msg).build(),
            );
            b.event(
                Some("content_block_start"),
                &Obj::new()
                    .str("type", "content_block_start")
                    .num("index", 0)
                    .obj("content_block", Obj::new().str("type", "text").str("text", ""))
                    .build(),
            );
            b.event(Some("ping"), &Obj::new().str("type", "ping").build());
        }
        Api::Responses => {
            for ty in ["response.created", "response.in_progress"] {
                let d = Obj::new()
                    .str("type", ty)
                    .num("sequence_number", b.seq())
                    .raw("response", &responses_object(info, "in_progress", None, None))
                    .build();
                b.event(Some(ty), &d);
            }
            let d = Obj::new()
                .str("type", "response.output_item.added")
                .num("sequence_number", b.seq())
                .num("output_index", 0)
                .obj("item", responses_item(None))
                .build();
            b.event(Some("response.output_item.added"), &d);
            let d = Obj::new()
                .str("type", "response.content_part.added")
                .num("sequence_number", b.seq())
                .str("item_id", "msg_mock")
                .num("output_index", 0)
                .num("content_index", 0)
                .obj("part", output_text_part(""))
                .build();
            b.event(Some("response.content_part.added"), &d);
        }
        Api::Gemini => {} // the first chunk already carries content
    }
}

/// One content event.
fn content(api: Api, b: &mut Builder, info: &ReqInfo, text: &str) {
    match api {
        Api::Chat => {
            let d = chat_chunk(info, Obj::new().str("content", text), None);
            b.event(None, &d);
        }
        Api::Messages => {
            let d = Obj::new()
                .str("type", "content_block_delta")
                .num("index", 0)
                .obj("delta", Obj::new().str("type", "text_delta").str("text", text))
                .build();
            b.event(Some("content_block_delta"), &d);
        }
        Api::Responses => {
            let d = Obj::new()
                .str("type", "response.output_text.delta")
                .num("sequence_number", b.seq())
                .str("item_id", "msg_mock")
                .num("output_index", 0)
                .num("content_index", 0)
                .str("delta", text)
                .build();
            b.event(Some("response.output_text.delta"), &d);
        }
        Api::Gemini => b.event(None, &gemini_chunk(info, text, None, None)),
    }
}

/// One data event with no content in it: an empty delta (Anthropic: an empty text delta;
/// Responses: `response.in_progress`; Gemini: a chunk with empty text).
fn empty_event(api: Api, b: &mut Builder, info: &ReqInfo) {
    match api {
        Api::Chat => {
            let d = chat_chunk(info, Obj::new().str("content", ""), None);
            b.event(None, &d);
        }
        Api::Messages => {
            let d = Obj::new()
                .str("type", "content_block_delta")
                .num("index", 0)
                .obj("delta", Obj::new().str("type", "text_delta").str("text", ""))
                .build();
            b.event(Some("content_block_delta"), &d);
        }
        Api::Responses => {
            let d = Obj::new()
                .str("type", "response.in_progress")
                .num("sequence_number", b.seq())
                .raw("response", &responses_object(info, "in_progress", None, None))
                .build();
            b.event(Some("response.in_progress"), &d);
        }
        Api::Gemini => b.event(None, &gemini_chunk(info, "", None, None)),
    }
}

/// Events after the content: finish, usage, end marker.
fn finish(api: Api, b: &mut Builder, info: &ReqInfo, sc: &Scenario, text: &str) {
    let n = sc.chunks as u64;
    match api {
        Api::Chat => {
            b.event(None, &chat_chunk(info, Obj::new(), Some("stop")));
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
            b.event(
                Some("content_block_stop"),
                &Obj::new().str("type", "content_block_stop").num("index", 0).build(),
            );
            let mut d = Obj::new()
                .str("type", "message_delta")
                .obj("delta", Obj::new().str("stop_reason", "end_turn").null("stop_sequence"));
            if !sc.no_usage {
                d = d.obj("usage", Obj::new().num("output_tokens", n));
            }
            b.event(Some("message_delta"), &d.build());
            if !sc.no_done {
                b.event(Some("message_stop"), &Obj::new().str("type", "message_stop").build());
            }
        }
        Api::Responses => {
            let common = |ty: &str, seq: u64| {
                Obj::new()
                    .str("type", ty)
                    .num("sequence_number", seq)
                    .str("item_id", "msg_mock")
                    .num("output_index", 0)
                    .num("content_index", 0)
            };
            let d = common("response.output_text.done", b.seq()).str("text", text).build();
            b.event(Some("response.output_text.done"), &d);
            let d = common("response.content_part.done", b.seq())
                .obj("part", output_text_part(text))
                .build();
            b.event(Some("response.content_part.done"), &d);
            let d = Obj::new()
                .str("type", "response.output_item.done")
                .num("sequence_number", b.seq())
                .num("output_index", 0)
                .obj("item", responses_item(Some(text)))
                .build();
            b.event(Some("response.output_item.done"), &d);
            if !sc.no_done {
                let usage = if sc.no_usage { None } else { Some(n) };
                let d = Obj::new()
                    .str("type", "response.completed")
                    .num("sequence_number", b.seq())
                    .raw("response", &responses_object(info, "completed", Some(text), usage))
                    .build();
                b.event(Some("response.completed"), &d);
            }
        }
        // No end marker: the finish reason (with the usage) is the last chunk.
        Api::Gemini => b.event(None, &gemini_chunk(info, "", Some("STOP"), (!sc.no_usage).then_some(n))),
    }
}

/// The in-stream error event.
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
    let pieces = content_pieces(sc.chunks);
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
        match sc.pad {
            // `pad/N` on a stream: each content event carries N more bytes of text.
            Some(n) => content(api, &mut b, info, &format!("{piece}{}", "x".repeat(n))),
            None => content(api, &mut b, info, piece),
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
        _ => finish(api, &mut b, info, sc, &pieces.concat()),
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
    use serde_json::Value;

    fn info(body: &str) -> ReqInfo {
        ReqInfo::from_body(body.as_bytes())
    }

    /// The data payloads of the Event steps (comments skipped).
    fn datas(steps: &[Step]) -> Vec<String> {
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
        let d = datas(&stream_plan(Api::Chat, &i, &Scenario::default()));
        assert_eq!(d.len(), 8);
        assert!(!d.iter().any(|x| x.contains("usage")));
        let sc = parse_scenario("no-done").unwrap();
        let d = datas(&stream_plan(Api::Chat, &i, &sc));
        assert!(d.last().unwrap().contains("\"finish_reason\":\"stop\""));
        let i = info(r#"{"model":"m","stream":true,"stream_options":{"include_usage":true}}"#);
        let d = datas(&stream_plan(Api::Chat, &i, &parse_scenario("no-usage").unwrap()));
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
        let i = info(r#"{"contents":[{"parts":[{"text":"hi"}]}]}"#).for_gemini("gem-1", true);
        let sc = Scenario::default();
        let v: Value = serde_json::from_str(&nonstream_body(Api::Gemini, &i, &sc)).unwrap();
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["text"],
            "Hello from the mock upstream,"
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(v["usageMetadata"]["candidatesTokenCount"], 5);
        assert_eq!(v["modelVersion"], "gem-1");
        let d = datas(&stream_plan(Api::Gemini, &i, &sc));
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
}
