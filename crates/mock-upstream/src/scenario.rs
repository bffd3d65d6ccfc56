//! Path routing and the scenario grammar.
//!
//! A provider path is `/<prefix>/<api>`, `<api>` being `chat/completions`,
//! `messages` or `responses`, or Gemini's `models/<model>:generateContent` /
//! `models/<model>:streamGenerateContent` (the model and the mode from the path). `<prefix>` is zero or more free label segments
//! followed by scenario segments; the scenario starts at the first segment
//! that is a keyword (see [`KEYWORDS`]). The whole prefix (label + scenario,
//! no leading/trailing slash) is the *key* for stats and per-key state.
//!
//! Cloud hosts ([`route`], [`Host`]) take the same prefix before their own suffixes, check their
//! own credentials first, and answer every scenario in their shapes:
//!
//! ```text
//! Azure OpenAI (crate::azure) — Chat / Responses bodies, `api-key: <MOCK_AZURE_API_KEY>`
//!   <prefix>/openai/v1/chat/completions[?api-version=v1|preview]
//!   <prefix>/openai/v1/responses[?api-version=v1|preview]
//!   <prefix>/openai/deployments/<deployment>/chat/completions?api-version=YYYY-MM-DD[-preview]
//! AWS Bedrock (crate::bedrock) — Anthropic bodies with anthropic_version, SigV4 for `bedrock`
//!   <prefix>/model/<model id, percent-encoded>/invoke
//!   <prefix>/model/<model id, percent-encoded>/invoke-with-response-stream
//! Google Vertex AI (crate::vertex) — Gemini bodies, or Anthropic bodies with anthropic_version,
//! `Authorization: Bearer <a token minted by POST /token>`
//!   <prefix>/v1/projects/<p>/locations/<l>/publishers/google/models/<m>:generateContent
//!   <prefix>/v1/projects/<p>/locations/<l>/publishers/google/models/<m>:streamGenerateContent?alt=sse
//!   <prefix>/v1/projects/<p>/locations/<l>/publishers/anthropic/models/<m>:rawPredict
//!   <prefix>/v1/projects/<p>/locations/<l>/publishers/anthropic/models/<m>:streamRawPredict
//! AWS Bedrock Converse (crate::converse) — Converse bodies, the same signature
//!   <prefix>/model/<model id, percent-encoded>/converse
//!   <prefix>/model/<model id, percent-encoded>/converse-stream
//! ```
//!
//! Their credentials come from the environment at start: `MOCK_AZURE_API_KEY` (default
//! `mock-azure-key`), `MOCK_AWS_ACCESS_KEY_ID` (default `AKIAMOCKSWITCHYARD`),
//! `MOCK_AWS_SECRET_ACCESS_KEY` (default `mock-secret-key-for-switchyard-tests`) and
//! `MOCK_AWS_SESSION_TOKEN` (default: none; when set, requests must carry it, signed), and a second,
//! temporary AWS credential from `MOCK_AWS_TEMP_ACCESS_KEY_ID`, `MOCK_AWS_TEMP_SECRET_ACCESS_KEY`
//! and `MOCK_AWS_TEMP_SESSION_TOKEN` (requests signed with it must carry that token). Azure
//! refuses a missing or wrong `api-key` (a bearer token too) with 401, a deployment URL without
//! a dated `api-version` with 404; Bedrock refuses a signature that does not hold with 403 and
//! `x-amzn-errortype` (`MissingAuthenticationTokenException`, `IncompleteSignatureException`,
//! `UnrecognizedClientException`, `InvalidSignatureException`), a body with `model` or `stream`
//! or without `anthropic_version: bedrock-2023-05-31` with a 400 `ValidationException`. Scenario
//! errors on Bedrock are `x-amzn-errortype: <Exception>:…` + `{"message": …}` (by status:
//! 400 Validation, 404 ResourceNotFound, 424 ModelError, 429 Throttling, 500 InternalServer,
//! 503 ServiceUnavailable); its stream is `application/vnd.amazon.eventstream`, mid-stream errors
//! are exception messages by kind (see [`crate::bedrock::stream_exception`]), and `cut-after/N`
//! cuts in the middle of a frame. On Azure, `content_filter` answers in Azure's shape
//! (`innererror.code` `ResponsibleAIPolicyViolation`), e.g. `status/400/content_filter`.
//!
//! Scenario grammar (segments after the start, in any order, each at most once):
//!
//! ```text
//! scenario   := directive*                      (no keyword at all = ok)
//! directive  := "ok"
//!             | behaviour                       (at most one)
//!             | gate                            (at most one)
//!             | "chunks" / N / GAP_MS
//!             | "first-content-after" / MS
//!             | "held" / N                      (N keep-alive comments at once, before content)
//!             | "empty-events" / N              (N data events without content at once, before content)
//!             | "answer-status" / CODE          (non-stream answer with this 2xx status, text/plain)
//!             | "pad" / N                       (N bytes of padding in non-stream and error bodies, and in each stream content event)
//!             | "stall-after" / N / MS
//!             | "malformed-event" / I
//!             | "no-done" | "no-usage"
//!             | "cache" / READ / WRITE          (usage reports READ cache-read and WRITE cache-write tokens)
//!             | "reject-field" / NAME / CODE    (a body with top-level field NAME gets status CODE, its
//!                                                message echoing the field; other bodies go on as usual)
//!             | "retry-after" / SECS            (needs an error status)
//!             | "message" / TEXT                (an error's message is TEXT, percent-decoded — as a
//!                                                provider or a relay in front of one words its own)
//!             | error-kind                      (needs an error to shape)
//!             | "tool-call-to" / NAME / ARGS    (one call to the declared function tool NAME, with ARGS — a
//!                                                percent-encoded JSON object — as its arguments, as a model
//!                                                picks one of an agent's many tools; unless the last turn
//!                                                is a tool result or no tool NAME is declared: then as usual)
//!             | "tool-call" [ / N ]             (N calls, default 1, at most 16, to the request's first
//!                                                declared function tool — unless its last turn is a
//!                                                tool result, or it declares no tool: then as usual)
//!             | "searches" / N                  (a request declaring a web search tool — Responses
//!                                                `web_search*`, Anthropic `web_search_*`, Gemini
//!                                                `googleSearch` — is answered after N searches, default
//!                                                1, at most the request's `max_uses` / `max_tool_calls`)
//!             | "json"                          (the answer text is a JSON object for the request's
//!                                                response schema)
//!             | "echo-images"                   (the answer text is `images: N`, N the request's image parts)
//!             | "media"                         (Chat and Gemini answer without text: the answer's bytes
//!                                                as Chat `audio` data / a Gemini `inlineData` image)
//!             | "lenient"                       (no request validation)
//! behaviour  := "status" / CODE | "hang" | "reset" | "cut-after" / N
//!             | "error-event-first" | "error-event-after" / N | "error-body-200"
//! gate       := "flaky" / K | "down-for" / MS | "flaky-until" / K / MS
//!             | "down-first" / N                (the key's first N requests answer 503: a count, so a
//!                                                slow machine cannot stretch the outage past them)
//! error-kind := overloaded | rate_limit | context_length | unsupported_param
//!             | credit | quota | invalid_key | content_filter
//!             | model_not_found | invalid
//! ```
//!
//! Every provider request is validated first, in its dialect ([`crate::validate`]): a body the
//! real provider would reject gets its 400 naming the field, whatever the scenario (only
//! `reject-field`, which answers a field the test planted, comes before; `lenient` turns it off).
//!
//! Answers that use the request ([`crate::answer`]): `tool-call` answers with calls to the first
//! declared tool, arguments following its parameters' schema (or
//! `{"city":"Paris","unit":"celsius"}`), ids `call_mock_<i>` (Chat, Responses `call_id`, item id
//! `fc_mock_<i>`), `toolu_mock_<i>` (Messages), none (Gemini), streamed as each dialect streams
//! calls (arguments in at least two fragments; Gemini: whole `functionCall` parts), finished with
//! `tool_calls` / `tool_use` / a `function_call` output / `STOP`. A request whose last turn is a
//! tool result (Chat `tool` messages, Anthropic `tool_result` blocks, Responses
//! `function_call_output` items, Gemini `functionResponse` parts) is always answered
//! `The tool said: <each result's first 200 characters, joined by " | ">`. A text answer is spread
//! over `chunks` content events, one output token each; calls count one output token per four
//! characters of name and arguments (`no-usage` drops usage as ever).

use std::fmt;

use crate::http::percent_decode;

/// Which provider API a path addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// OpenAI Chat Completions (`…/chat/completions`).
    Chat,
    /// Anthropic Messages (`…/messages`).
    Messages,
    /// OpenAI Responses (`…/responses`).
    Responses,
    /// Google Gemini (`…/models/<model>:generateContent`, `…:streamGenerateContent`).
    Gemini,
}

/// The main thing a request does (at most one per scenario).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    Normal,
    Status(u16),
    Hang,
    Reset,
    CutAfter(usize),
    ErrorEventFirst,
    ErrorEventAfter(usize),
    ErrorBody200,
}

/// A per-key gate that turns some requests into 503s before the behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Every k-th request to the key answers 503.
    Flaky(u64),
    /// 503 until this many ms after the key's first request.
    DownFor(u64),
    /// Every k-th request answers 503 until this many ms after the key's first request; then none
    /// (a route that heals).
    FlakyUntil(u64, u64),
    /// The key's first n requests answer 503; then none.
    DownFirst(u64),
}

/// Realistic provider error bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    Overloaded,
    RateLimit,
    ContextLength,
    UnsupportedParam,
    Credit,
    Quota,
    InvalidKey,
    ContentFilter,
    ModelNotFound,
    Invalid,
}

impl ErrorKind {
    pub fn from_segment(s: &str) -> Option<ErrorKind> {
        Some(match s {
            "overloaded" => ErrorKind::Overloaded,
            "rate_limit" => ErrorKind::RateLimit,
            "context_length" => ErrorKind::ContextLength,
            "unsupported_param" => ErrorKind::UnsupportedParam,
            "credit" => ErrorKind::Credit,
            "quota" => ErrorKind::Quota,
            "invalid_key" => ErrorKind::InvalidKey,
            "content_filter" => ErrorKind::ContentFilter,
            "model_not_found" => ErrorKind::ModelNotFound,
            "invalid" => ErrorKind::Invalid,
            _ => return None,
        })
    }
}

/// Default number of content events.
pub const DEFAULT_CHUNKS: usize = 5;
/// Upper bound for `chunks/<n>` and the `<n>` of other directives.
pub const MAX_CHUNKS: usize = 100_000;
/// Upper bound for `tool-call/<n>`.
pub const MAX_TOOL_CALLS: usize = 16;

/// A parsed scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scenario {
    pub gate: Option<Gate>,
    pub behavior: Behavior,
    pub chunks: usize,
    pub gap_ms: u64,
    pub first_content_after_ms: Option<u64>,
    /// Keep-alive comments sent at once after the preamble, before any wait or content.
    pub held: Option<usize>,
    /// Data events that carry no content (an empty delta), sent at once after the preamble.
    pub empty_events: Option<usize>,
    /// A non-stream answer sent with this (2xx) status and `text/plain`.
    pub answer_status: Option<u16>,
    /// Bytes of padding added to non-stream answers and error bodies, and to each stream
    /// content event's text.
    pub pad: Option<usize>,
    /// (after n content events, pause ms)
    pub stall: Option<(usize, u64)>,
    /// 0-based index over all `data:` events written.
    pub malformed_event: Option<usize>,
    pub no_done: bool,
    pub no_usage: bool,
    pub retry_after: Option<u64>,
    pub error_kind: Option<ErrorKind>,
    /// (cache-read tokens, cache-write tokens) the usage reports beside the prompt.
    pub cache: Option<(u64, u64)>,
    /// (field, status): a request whose body has this top-level field fails with the status, the
    /// way a provider rejects (400) or chokes on (5xx) one request's content.
    pub reject_field: Option<(String, u16)>,
    /// `message/TEXT`: an error's message, in the dialect's error shape.
    pub message: Option<String>,
    /// `tool-call-to/NAME/ARGS`: answer with a call to the declared tool NAME, these arguments.
    pub tool_call_to: Option<(String, String)>,
    /// `tool-call/N`: answer with N calls to the request's first declared tool.
    pub tool_calls: Option<usize>,
    /// `searches/N`: a request declaring a web search tool gets N searches (default 1), no more
    /// than the request allows (Anthropic `max_uses`, Responses `max_tool_calls`).
    pub searches: Option<usize>,
    /// `json`: answer with a JSON object for the request's schema.
    pub json: bool,
    /// `echo-images`: answer with the number of the request's image parts.
    pub echo_images: bool,
    /// `media`: the answer is audio (Chat) or an image (Gemini), not text.
    pub media: bool,
    /// `lenient`: do not validate the request.
    pub lenient: bool,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            gate: None,
            behavior: Behavior::Normal,
            chunks: DEFAULT_CHUNKS,
            gap_ms: 0,
            first_content_after_ms: None,
            held: None,
            empty_events: None,
            answer_status: None,
            pad: None,
            stall: None,
            malformed_event: None,
            no_done: false,
            no_usage: false,
            retry_after: None,
            error_kind: None,
            cache: None,
            reject_field: None,
            message: None,
            tool_call_to: None,
            tool_calls: None,
            searches: None,
            json: false,
            echo_images: false,
            media: false,
            lenient: false,
        }
    }
}

/// Segments that start a scenario (everything before the first one is label).
pub const KEYWORDS: &[&str] = &[
    "ok",
    "status",
    "hang",
    "reset",
    "first-content-after",
    "cut-after",
    "stall-after",
    "error-event-first",
    "error-event-after",
    "error-body-200",
    "malformed-event",
    "no-done",
    "no-usage",
    "flaky",
    "down-for",
    "flaky-until",
    "down-first",
    "pad",
    "answer-status",
    "held",
    "empty-events",
    "chunks",
    "retry-after",
    "cache",
    "reject-field",
    "message",
    "tool-call-to",
    "tool-call",
    "searches",
    "json",
    "echo-images",
    "media",
    "lenient",
    "overloaded",
    "rate_limit",
    "context_length",
    "unsupported_param",
    "credit",
    "quota",
    "invalid_key",
    "content_filter",
    "model_not_found",
    "invalid",
];

/// `%XX` escapes decoded (a path segment's text); anything not an escape stays as written.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Why a scenario could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "mock-upstream: bad scenario: {}", self.0)
    }
}

fn segments(path: &str) -> Vec<&str> {
    let path = path.split('?').next().unwrap_or("");
    path.split('/').filter(|s| !s.is_empty()).collect()
}

/// Who answers a provider path: the provider itself, or a cloud that hosts its models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// The provider's own API.
    Direct,
    /// Azure OpenAI ([`crate::azure`]): the v1 API (`deployment` `None`, the body's `model` names
    /// the deployment) or a deployment's URL.
    Azure { deployment: Option<String> },
    /// AWS Bedrock ([`crate::bedrock`]): the model id from the path (percent-decoded), whether
    /// it is a stream (`invoke-with-response-stream`, `converse-stream`), and whether it is the
    /// Converse API ([`crate::converse`]) rather than InvokeModel. Either way the answer is made
    /// as a Messages answer and said in Bedrock's shapes.
    Bedrock {
        model: String,
        stream: bool,
        converse: bool,
    },
    /// Google Vertex AI ([`crate::vertex`]): the path's project, location, publisher, model and
    /// method (`generateContent`, `streamRawPredict`…).
    Vertex {
        project: String,
        location: String,
        publisher: String,
        model: String,
        method: String,
    },
}

/// Where a provider path goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    /// The dialect of the body and of the answer.
    pub api: Api,
    /// The prefix before the API suffix (label + scenario): the key for stats and state.
    pub key: String,
    pub host: Host,
    /// The provider's token-count endpoint ([`crate::count`]), not a generation.
    pub count: bool,
}

/// The actions of Bedrock's runtime API after `/model/<model id>/`: InvokeModel's, Converse's and
/// CountTokens'.
const BEDROCK_RUNTIME_API_ACTIONS: [&str; 5] = [
    "invoke",
    "invoke-with-response-stream",
    "converse",
    "converse-stream",
    "count-tokens",
];

/// Google Vertex AI's paths' parts: `…/v1/projects/P/locations/L/publishers/PUB/models/MODEL:METHOD` as the
/// route's host, and its dialect; `None` for another path.
fn vertex_route(segs: &[&str]) -> Option<(Api, usize, Host)> {
    let n = segs.len();
    if n < 9 {
        return None;
    }
    let at = n - 9;
    let shape = [segs[at], segs[at + 1], segs[at + 3], segs[at + 5], segs[at + 7]];
    if shape != ["v1", "projects", "locations", "publishers", "models"] {
        return None;
    }
    let decoded = |s: &str| String::from_utf8_lossy(&percent_decode(s)).into_owned();
    let (model, method) = segs[n - 1].rsplit_once(':')?;
    let publisher = decoded(segs[at + 6]);
    let api = if publisher == "anthropic" {
        Api::Messages
    } else {
        Api::Gemini
    };
    let host = Host::Vertex {
        project: decoded(segs[at + 2]),
        location: decoded(segs[at + 4]),
        publisher,
        model: decoded(model),
        method: method.to_string(),
    };
    Some((api, at, host))
}

/// Routes a provider path (the query, if any, is ignored). `None` when the path does not end in
/// one of the API suffixes, or is a control path.
pub fn route(path: &str) -> Option<Route> {
    let segs = segments(path);
    if segs.first().is_some_and(|s| s.starts_with('_')) {
        return None;
    }
    let n = segs.len();
    let ends = |tail: &[&str]| n >= tail.len() && segs[n - tail.len()..] == *tail;
    let decoded = |seg: &str| String::from_utf8_lossy(&percent_decode(seg)).into_owned();
    let mut count = false;
    let (api, prefix_len, host) = if let Some(vertex) = vertex_route(&segs) {
        if let Host::Vertex { model, method, .. } = &vertex.2 {
            count = method == "countTokens" || model == "count-tokens";
        }
        vertex
    } else if n >= 3 && segs[n - 3] == "model" && BEDROCK_RUNTIME_API_ACTIONS.contains(&segs[n - 1]) {
        count = segs[n - 1] == "count-tokens";
        let host = Host::Bedrock {
            model: decoded(segs[n - 2]),
            stream: segs[n - 1].ends_with("stream"),
            converse: segs[n - 1].starts_with("converse"),
        };
        (Api::Messages, n - 3, host)
    } else if ends(&["openai", "v1", "chat", "completions"]) {
        (Api::Chat, n - 4, Host::Azure { deployment: None })
    } else if ends(&["openai", "v1", "responses"]) {
        (Api::Responses, n - 3, Host::Azure { deployment: None })
    } else if n >= 5 && segs[n - 5..n - 3] == ["openai", "deployments"] && ends(&["chat", "completions"]) {
        let host = Host::Azure {
            deployment: Some(decoded(segs[n - 3])),
        };
        (Api::Chat, n - 5, host)
    } else if ends(&["chat", "completions"]) {
        (Api::Chat, n - 2, Host::Direct)
    } else if ends(&["messages", "count_tokens"]) {
        count = true;
        (Api::Messages, n - 2, Host::Direct)
    } else if ends(&["messages"]) {
        (Api::Messages, n - 1, Host::Direct)
    } else if ends(&["responses", "input_tokens"]) {
        count = true;
        (Api::Responses, n - 2, Host::Direct)
    } else if ends(&["responses"]) {
        (Api::Responses, n - 1, Host::Direct)
    } else if gemini_call(path).is_some() {
        (Api::Gemini, n - 2, Host::Direct)
    } else if n >= 2 && segs[n - 2] == "models" && segs[n - 1].ends_with(":countTokens") {
        count = true;
        (Api::Gemini, n - 2, Host::Direct)
    } else {
        return None;
    };
    Some(Route {
        api,
        key: segs[..prefix_len].join("/"),
        host,
        count,
    })
}

/// A Gemini path's (model, stream): `…/models/<model>:generateContent` or
/// `…/models/<model>:streamGenerateContent`.
pub fn gemini_call(path: &str) -> Option<(String, bool)> {
    let segs = segments(path);
    let n = segs.len();
    if n < 2 || segs[n - 2] != "models" {
        return None;
    }
    let (model, method) = segs[n - 1].rsplit_once(':')?;
    match method {
        "generateContent" => Some((model.to_string(), false)),
        "streamGenerateContent" => Some((model.to_string(), true)),
        _ => None,
    }
}

/// Normalises a key as given to `/_stats/<key>` (slashes trimmed, empty
/// segments dropped) so it matches the key of a provider path.
pub fn normalize_key(key: &str) -> String {
    segments(key).join("/")
}

/// Splits a key into (label, scenario segments).
pub fn split_label(key: &str) -> (String, Vec<&str>) {
    let segs: Vec<&str> = key.split('/').filter(|s| !s.is_empty()).collect();
    let start = segs.iter().position(|s| KEYWORDS.contains(s)).unwrap_or(segs.len());
    (segs[..start].join("/"), segs[start..].to_vec())
}

struct Cursor<'a> {
    segs: &'a [&'a str],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<&'a str> {
        let s = self.segs.get(self.pos).copied();
        if s.is_some() {
            self.pos += 1;
        }
        s
    }

    /// The next segment, if it is a number (an optional count), consumed.
    fn optional_count(&mut self) -> Option<usize> {
        let n = self.segs.get(self.pos)?.parse().ok()?;
        self.pos += 1;
        Some(n)
    }

    fn num<T: std::str::FromStr>(&mut self, after: &str, what: &str) -> Result<T, ScenarioError> {
        match self.next() {
            Some(s) => s
                .parse()
                .map_err(|_| ScenarioError(format!("`{after}` needs {what}, got `{s}`"))),
            None => Err(ScenarioError(format!("`{after}` needs {what}"))),
        }
    }

    fn count(&mut self, after: &str) -> Result<usize, ScenarioError> {
        let n: usize = self.num(after, "a count")?;
        if n > MAX_CHUNKS {
            return Err(ScenarioError(format!("`{after}/{n}`: at most {MAX_CHUNKS}")));
        }
        Ok(n)
    }
}

fn set_once<T>(slot: &mut Option<T>, v: T, name: &str) -> Result<(), ScenarioError> {
    if slot.is_some() {
        return Err(ScenarioError(format!("`{name}` given twice")));
    }
    *slot = Some(v);
    Ok(())
}

/// Parses the scenario part of a key (the label is skipped).
pub fn parse_scenario(key: &str) -> Result<Scenario, ScenarioError> {
    let (_label, segs) = split_label(key);
    let mut sc = Scenario::default();
    let mut behavior: Option<Behavior> = None;
    let mut chunks: Option<(usize, u64)> = None;
    let mut seen_flags: Vec<&str> = Vec::new();
    let mut c = Cursor { segs: &segs, pos: 0 };

    while let Some(seg) = c.next() {
        match seg {
            "ok" => {}
            "status" => {
                let code: u16 = c.num("status", "an HTTP status code")?;
                if !(200..=599).contains(&code) {
                    return Err(ScenarioError(format!("status {code} is not in 200..=599")));
                }
                set_once(
                    &mut behavior,
                    Behavior::Status(code),
                    "status/hang/reset/cut-after/error-*",
                )?;
            }
            "hang" => set_once(&mut behavior, Behavior::Hang, "status/hang/reset/cut-after/error-*")?,
            "reset" => set_once(&mut behavior, Behavior::Reset, "status/hang/reset/cut-after/error-*")?,
            "cut-after" => {
                let n = c.count("cut-after")?;
                set_once(
                    &mut behavior,
                    Behavior::CutAfter(n),
                    "status/hang/reset/cut-after/error-*",
                )?;
            }
            "error-event-first" => set_once(
                &mut behavior,
                Behavior::ErrorEventFirst,
                "status/hang/reset/cut-after/error-*",
            )?,
            "error-event-after" => {
                let n = c.count("error-event-after")?;
                set_once(
                    &mut behavior,
                    Behavior::ErrorEventAfter(n),
                    "status/hang/reset/cut-after/error-*",
                )?;
            }
            "error-body-200" => set_once(
                &mut behavior,
                Behavior::ErrorBody200,
                "status/hang/reset/cut-after/error-*",
            )?,
            "flaky" => {
                let k: u64 = c.num("flaky", "a period k >= 1")?;
                if k == 0 {
                    return Err(ScenarioError("`flaky/0`: k must be >= 1".into()));
                }
                set_once(&mut sc.gate, Gate::Flaky(k), "flaky/down-for")?;
            }
            "down-for" => {
                let ms: u64 = c.num("down-for", "milliseconds")?;
                set_once(&mut sc.gate, Gate::DownFor(ms), "flaky/down-for")?;
            }
            "flaky-until" => {
                let k: u64 = c.num("flaky-until", "a period k >= 1 (flaky-until/<k>/<ms>)")?;
                let ms: u64 = c.num("flaky-until", "milliseconds (flaky-until/<k>/<ms>)")?;
                if k == 0 {
                    return Err(ScenarioError("`flaky-until/0`: k must be >= 1".into()));
                }
                set_once(&mut sc.gate, Gate::FlakyUntil(k, ms), "flaky/down-for")?;
            }
            "down-first" => {
                let n: u64 = c.num("down-first", "a count of requests")?;
                set_once(&mut sc.gate, Gate::DownFirst(n), "flaky/down-for")?;
            }
            "chunks" => {
                let n = c.count("chunks")?;
                let gap: u64 = c.num("chunks", "a gap in milliseconds (chunks/<n>/<gap_ms>)")?;
                set_once(&mut chunks, (n, gap), "chunks")?;
            }
            "first-content-after" => {
                let ms: u64 = c.num("first-content-after", "milliseconds")?;
                set_once(&mut sc.first_content_after_ms, ms, "first-content-after")?;
            }
            "empty-events" => {
                let n = c.count("empty-events")?;
                set_once(&mut sc.empty_events, n, "empty-events")?;
            }
            "held" => {
                let n = c.count("held")?;
                set_once(&mut sc.held, n, "held")?;
            }
            "pad" => {
                let n: usize = c.num("pad", "a number of bytes")?;
                if n > 64 * 1024 * 1024 {
                    return Err(ScenarioError(format!("`pad/{n}`: at most 64 MiB")));
                }
                set_once(&mut sc.pad, n, "pad")?;
            }
            "answer-status" => {
                let code: u16 = c.num("answer-status", "a 2xx status")?;
                if !(200..300).contains(&code) {
                    return Err(ScenarioError(format!("`answer-status/{code}`: must be 2xx")));
                }
                set_once(&mut sc.answer_status, code, "answer-status")?;
            }
            "stall-after" => {
                let n = c.count("stall-after")?;
                let ms: u64 = c.num("stall-after", "milliseconds (stall-after/<n>/<ms>)")?;
                set_once(&mut sc.stall, (n, ms), "stall-after")?;
            }
            "malformed-event" => {
                let i = c.count("malformed-event")?;
                set_once(&mut sc.malformed_event, i, "malformed-event")?;
            }
            "retry-after" => {
                let s: u64 = c.num("retry-after", "seconds")?;
                set_once(&mut sc.retry_after, s, "retry-after")?;
            }
            "cache" => {
                let read: u64 = c.num("cache", "cache-read tokens (cache/<read>/<write>)")?;
                let write: u64 = c.num("cache", "cache-write tokens (cache/<read>/<write>)")?;
                set_once(&mut sc.cache, (read, write), "cache")?;
            }
            "reject-field" => {
                let name = c
                    .next()
                    .ok_or_else(|| ScenarioError("`reject-field` needs a field name".into()))?;
                let code: u16 = c.num("reject-field", "an HTTP status (reject-field/<name>/<code>)")?;
                if !(400..600).contains(&code) {
                    return Err(ScenarioError(format!("`reject-field`: {code} is not an error status")));
                }
                set_once(&mut sc.reject_field, (name.to_string(), code), "reject-field")?;
            }
            "message" => {
                let text = c.next().ok_or_else(|| ScenarioError("`message` needs a text".into()))?;
                set_once(&mut sc.message, percent_decoded(text), "message")?;
            }
            "tool-call-to" => {
                let usage = "`tool-call-to` needs a tool name and arguments (tool-call-to/<name>/<JSON object>)";
                let name = c.next().ok_or_else(|| ScenarioError(usage.into()))?;
                let args = percent_decoded(c.next().ok_or_else(|| ScenarioError(usage.into()))?);
                if !serde_json::from_str::<serde_json::Value>(&args).is_ok_and(|v| v.is_object()) {
                    return Err(ScenarioError(format!(
                        "`tool-call-to/{name}`: `{args}` is not a JSON object"
                    )));
                }
                set_once(&mut sc.tool_call_to, (name.to_string(), args), "tool-call-to")?;
            }
            "tool-call" => {
                let n = c.optional_count().unwrap_or(1);
                if !(1..=MAX_TOOL_CALLS).contains(&n) {
                    return Err(ScenarioError(format!("`tool-call/{n}`: 1 to {MAX_TOOL_CALLS} calls")));
                }
                set_once(&mut sc.tool_calls, n, "tool-call")?;
            }
            "searches" => {
                let n = c.optional_count().unwrap_or(1);
                if !(1..=MAX_TOOL_CALLS).contains(&n) {
                    return Err(ScenarioError(format!("`searches/{n}`: 1 to {MAX_TOOL_CALLS} searches")));
                }
                set_once(&mut sc.searches, n, "searches")?;
            }
            "no-done" | "no-usage" | "json" | "echo-images" | "media" | "lenient" => {
                if seen_flags.contains(&seg) {
                    return Err(ScenarioError(format!("`{seg}` given twice")));
                }
                seen_flags.push(seg);
                let flag = match seg {
                    "no-done" => &mut sc.no_done,
                    "no-usage" => &mut sc.no_usage,
                    "json" => &mut sc.json,
                    "echo-images" => &mut sc.echo_images,
                    "media" => &mut sc.media,
                    _ => &mut sc.lenient,
                };
                *flag = true;
            }
            other => match ErrorKind::from_segment(other) {
                Some(kind) => set_once(&mut sc.error_kind, kind, "error kind")?,
                None => return Err(ScenarioError(format!("unknown segment `{other}` in `{key}`"))),
            },
        }
    }

    sc.behavior = behavior.unwrap_or(Behavior::Normal);
    if let Some((n, gap)) = chunks {
        sc.chunks = n;
        sc.gap_ms = gap;
    }
    let has_error_status = matches!(sc.behavior, Behavior::Status(_)) || sc.gate.is_some();
    if sc.retry_after.is_some() && !has_error_status {
        return Err(ScenarioError(
            "`retry-after` needs `status/<code>`, `flaky/<k>` or `down-for/<ms>`".into(),
        ));
    }
    let has_error = has_error_status
        || matches!(
            sc.behavior,
            Behavior::ErrorEventFirst | Behavior::ErrorEventAfter(_) | Behavior::ErrorBody200
        );
    if sc.error_kind.is_some() && !has_error {
        return Err(ScenarioError(
            "an error kind needs `status/<code>`, `flaky/<k>`, `down-for/<ms>`, `error-event-*` or `error-body-200`"
                .into(),
        ));
    }
    Ok(sc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vertex_paths_name_project_location_publisher_model_and_method() {
        let path = "/l/status/429/v1/projects/p-1/locations/us-east5/publishers/anthropic/models/claude@1:rawPredict";
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let (api, at, host) = vertex_route(&segs).unwrap();
        assert_eq!((api, at), (Api::Messages, 3));
        assert_eq!(
            host,
            Host::Vertex {
                project: "p-1".into(),
                location: "us-east5".into(),
                publisher: "anthropic".into(),
                model: "claude@1".into(),
                method: "rawPredict".into()
            }
        );
        let gemini = [
            "v1",
            "projects",
            "p",
            "locations",
            "global",
            "publishers",
            "google",
            "models",
            "g:generateContent",
        ];
        assert_eq!(vertex_route(&gemini).unwrap().0, Api::Gemini);
        assert!(vertex_route(&["models", "g:generateContent"]).is_none());
    }

    /// The API and key of a path.
    fn split_api(path: &str) -> Option<(Api, String)> {
        route(path).map(|r| (r.api, r.key))
    }

    #[test]
    fn split_api_paths() {
        assert_eq!(
            split_api("/t-8f3a/status/503/chat/completions"),
            Some((Api::Chat, "t-8f3a/status/503".into()))
        );
        assert_eq!(split_api("/a/messages"), Some((Api::Messages, "a".into())));
        assert_eq!(split_api("/responses?x=1"), Some((Api::Responses, "".into())));
        assert_eq!(
            split_api("//x//hang/responses/"),
            Some((Api::Responses, "x/hang".into()))
        );
        assert_eq!(
            split_api("/lab/down-for/5/models/gem-1:streamGenerateContent?alt=sse"),
            Some((Api::Gemini, "lab/down-for/5".to_string()))
        );
        assert_eq!(
            gemini_call("/x/models/g:generateContent"),
            Some(("g".to_string(), false))
        );
        assert_eq!(gemini_call("/x/models/g:countTokens"), None);
        assert_eq!(split_api("/x/g:generateContent"), None);
        assert_eq!(split_api("/a/completions"), None);
        assert_eq!(split_api("/a/chat"), None);
        assert_eq!(split_api("/_stats/a/messages"), None);
        assert_eq!(split_api("/"), None);
        assert_eq!(route("/a/chat/completions").map(|r| r.host), Some(Host::Direct));
    }

    #[test]
    fn cloud_paths() {
        let bedrock = |path: &str| route(path).map(|r| (r.api, r.key, r.host));
        assert_eq!(
            bedrock("/br/status/503/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"),
            Some((
                Api::Messages,
                "br/status/503".into(),
                Host::Bedrock {
                    model: "anthropic.claude-3-haiku-20240307-v1:0".into(),
                    stream: false,
                    converse: false,
                }
            ))
        );
        assert_eq!(
            bedrock(
                "/model/arn%3Aaws%3Abedrock%3Aus-east-1%3A1%3Ainference-profile%2Fus.x/invoke-with-response-stream"
            ),
            Some((
                Api::Messages,
                "".into(),
                Host::Bedrock {
                    model: "arn:aws:bedrock:us-east-1:1:inference-profile/us.x".into(),
                    stream: true,
                    converse: false,
                }
            ))
        );
        assert_eq!(
            bedrock("/cv/status/429/model/meta.llama3-8b-instruct-v1%3A0/converse-stream"),
            Some((
                Api::Messages,
                "cv/status/429".into(),
                Host::Bedrock {
                    model: "meta.llama3-8b-instruct-v1:0".into(),
                    stream: true,
                    converse: true,
                }
            ))
        );
        assert_eq!(
            bedrock("/a/model/m/converse").map(|r| r.2),
            Some(Host::Bedrock {
                model: "m".into(),
                stream: false,
                converse: true,
            })
        );
        assert_eq!(
            bedrock("/az/tool-call/openai/v1/chat/completions?api-version=preview"),
            Some((Api::Chat, "az/tool-call".into(), Host::Azure { deployment: None }))
        );
        assert_eq!(
            bedrock("/openai/v1/responses"),
            Some((Api::Responses, "".into(), Host::Azure { deployment: None }))
        );
        assert_eq!(
            bedrock("/az/openai/deployments/gpt-4o%20mini/chat/completions?api-version=2024-10-21"),
            Some((
                Api::Chat,
                "az".into(),
                Host::Azure {
                    deployment: Some("gpt-4o mini".into())
                }
            ))
        );
        // Not Azure's shapes: the plain dialects, their prefix a label.
        assert_eq!(
            bedrock("/openai/chat/completions"),
            Some((Api::Chat, "openai".into(), Host::Direct))
        );
        assert_eq!(
            bedrock("/deployments/d/chat/completions"),
            Some((Api::Chat, "deployments/d".into(), Host::Direct))
        );
    }

    #[test]
    fn label_split() {
        assert_eq!(
            split_label("t-1/x/status/429/overloaded"),
            ("t-1/x".to_string(), vec!["status", "429", "overloaded"])
        );
        assert_eq!(split_label("t-1"), ("t-1".to_string(), vec![]));
        assert_eq!(split_label(""), ("".to_string(), vec![]));
    }

    #[test]
    fn no_keyword_is_ok() {
        assert_eq!(parse_scenario("label-only").unwrap(), Scenario::default());
        assert_eq!(parse_scenario("").unwrap(), Scenario::default());
        assert_eq!(parse_scenario("t/ok").unwrap(), Scenario::default());
    }

    #[test]
    fn status_with_options_any_order() {
        let a = parse_scenario("t/status/429/overloaded/retry-after/7").unwrap();
        let b = parse_scenario("t/status/429/retry-after/7/overloaded").unwrap();
        assert_eq!(a, b);
        assert_eq!(a.behavior, Behavior::Status(429));
        assert_eq!(a.retry_after, Some(7));
        assert_eq!(a.error_kind, Some(ErrorKind::Overloaded));
    }

    #[test]
    fn composition() {
        let s = parse_scenario("t/first-content-after/100/chunks/50/0").unwrap();
        assert_eq!(s.first_content_after_ms, Some(100));
        assert_eq!((s.chunks, s.gap_ms), (50, 0));
        let s = parse_scenario("flaky/3/cut-after/2/no-usage").unwrap();
        assert_eq!(s.gate, Some(Gate::Flaky(3)));
        assert_eq!(s.behavior, Behavior::CutAfter(2));
        assert!(s.no_usage);
        let s = parse_scenario("flaky-until/3/90000").unwrap();
        assert_eq!(s.gate, Some(Gate::FlakyUntil(3, 90_000)));
        assert!(parse_scenario("flaky-until/0/5").is_err());
        let s = parse_scenario("x/stall-after/2/500/malformed-event/1/no-done").unwrap();
        assert_eq!(s.stall, Some((2, 500)));
        assert_eq!(s.malformed_event, Some(1));
        assert!(s.no_done);
        let s = parse_scenario("down-for/1000/retry-after/1/overloaded").unwrap();
        assert_eq!(s.gate, Some(Gate::DownFor(1000)));
        assert_eq!(
            parse_scenario("down-first/3/ok").unwrap().gate,
            Some(Gate::DownFirst(3))
        );
        assert!(parse_scenario("down-first/3/flaky/2").is_err());
        let s = parse_scenario("error-event-after/3/rate_limit").unwrap();
        assert_eq!(s.behavior, Behavior::ErrorEventAfter(3));
        assert_eq!(s.error_kind, Some(ErrorKind::RateLimit));
    }

    #[test]
    fn errors() {
        for bad in [
            "status",
            "status/abc",
            "status/99",
            "status/500/hang",
            "flaky/0",
            "flaky/2/down-for/5",
            "chunks/5",
            "stall-after/1",
            "ok/bogus",
            "status/500/overloaded/rate_limit",
            "overloaded",
            "retry-after/3",
            "error-body-200/retry-after/3",
            "no-done/no-done",
            "chunks/1000000/0",
        ] {
            assert!(parse_scenario(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn answers_from_the_request() {
        let s = parse_scenario("t/tool-call/no-usage").unwrap();
        assert_eq!((s.tool_calls, s.no_usage), (Some(1), true));
        let s = parse_scenario("tool-call/3/chunks/2/0/json/echo-images/lenient").unwrap();
        assert_eq!(s.tool_calls, Some(3));
        assert_eq!((s.chunks, s.json, s.echo_images, s.lenient), (2, true, true, true));
        assert_eq!(split_label("lab/lenient").0, "lab");
        let s = parse_scenario("t/tool-call-to/Read/%7B%22file_path%22%3A%22%2Ftmp%2Fa.txt%22%7D").unwrap();
        assert_eq!(
            s.tool_call_to,
            Some(("Read".to_string(), r#"{"file_path":"/tmp/a.txt"}"#.to_string()))
        );
        for bad in [
            "tool-call-to",
            "tool-call-to/Read",
            "tool-call-to/Read/%5B1%5D",
            "tool-call-to/Read/nope",
            "tool-call/0",
            "tool-call/17",
            "tool-call/tool-call",
            "json/json",
            "lenient/lenient",
        ] {
            assert!(parse_scenario(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn normalize() {
        assert_eq!(normalize_key("/a//b/"), "a/b");
    }
}
