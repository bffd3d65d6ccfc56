//! Failure classes (SPEC §4): how one failed attempt at a route is classified, and what each class
//! means for fallback, route/account health and the final error.
//!
//! This module owns reading an upstream's failure — a non-2xx status with its `retry-after` header and
//! body, or an error object that arrived with a 2xx status or as a stream error event — into a
//! [`Verdict`]. Classes that need no body (`connect`, `timeout`, `cancelled`) are chosen by the driver;
//! their meaning still lives here ([`FailureClass::blame`], [`FailureClass::may_fall_back`],
//! [`FailureClass::is_capacity`]). Matching works on lower-cased message text plus the error's
//! `type` / `code` / `status` strings, with URLs removed (OpenAI rate-limit messages link to
//! `/account/billing`, which must not read as a billing failure).
//!
//! Echoes are the client's (SPEC §18a): a class that would blame a route or an account and was
//! read from the error's words (or its bare status), not from a structured `type` / `code` /
//! `status` / `reason`, keeps those words in [`Verdict::read_from`]; the attempt then judges the
//! verdict [`Verdict::against`] the request that was sent, and words that repeat any of it (a
//! field name, a run of its text: [`Echoes`]) make the failure the client's. A 404 on a request
//! that names state an upstream holds is one the request can have provoked.

use serde_json::{Map, Value};

/// How one attempt at a route ended, when it failed (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    Connect,
    Timeout,
    #[serde(rename = "upstream_5xx")]
    Upstream5xx,
    RateLimited,
    Overloaded,
    ModelUnavailable,
    Account,
    BadResponse,
    ContextLength,
    UnsupportedParam,
    ContentPolicy,
    InvalidRequest,
    Cancelled,
    /// The request cannot be said in the route's dialect (SPEC §19): not sent, counts against
    /// nothing.
    Unable,
}

/// What a failure counts against (route health, the upstream account, or nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    Route,
    Account,
    Nothing,
}

impl FailureClass {
    /// Every class, for the tests that must cover each.
    #[cfg(test)]
    pub const ALL: [FailureClass; 14] = {
        use FailureClass::*;
        [
            Connect,
            Timeout,
            Upstream5xx,
            RateLimited,
            Overloaded,
            ModelUnavailable,
            Account,
            BadResponse,
            ContextLength,
            UnsupportedParam,
            ContentPolicy,
            InvalidRequest,
            Cancelled,
            Unable,
        ]
    };

    /// The class's wire name, as serialized and logged.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::Connect => "connect",
            FailureClass::Timeout => "timeout",
            FailureClass::Upstream5xx => "upstream_5xx",
            FailureClass::RateLimited => "rate_limited",
            FailureClass::Overloaded => "overloaded",
            FailureClass::ModelUnavailable => "model_unavailable",
            FailureClass::Account => "account",
            FailureClass::BadResponse => "bad_response",
            FailureClass::ContextLength => "context_length",
            FailureClass::UnsupportedParam => "unsupported_param",
            FailureClass::ContentPolicy => "content_policy",
            FailureClass::InvalidRequest => "invalid_request",
            FailureClass::Unable => "unable",
            FailureClass::Cancelled => "cancelled",
        }
    }

    /// What the failure counts against: the SPEC §4 "counts against" column.
    pub fn blame(self) -> Blame {
        match self {
            FailureClass::Connect
            | FailureClass::Timeout
            | FailureClass::Upstream5xx
            | FailureClass::RateLimited
            | FailureClass::Overloaded
            | FailureClass::ModelUnavailable
            | FailureClass::BadResponse => Blame::Route,
            FailureClass::Account => Blame::Account,
            FailureClass::ContextLength
            | FailureClass::UnsupportedParam
            | FailureClass::ContentPolicy
            | FailureClass::InvalidRequest
            | FailureClass::Cancelled
            | FailureClass::Unable => Blame::Nothing,
        }
    }

    /// Whether the request's own content can have provoked this failure (SPEC §18): a 500 (the
    /// server failed on this input), an answer that is no answer (an empty completion, an error
    /// object in a 2xx), a 403 on something the request named. Such failures from one key alone
    /// demote a route or account for nobody until a check confirms them. `http_status`: the
    /// upstream's status, if it answered.
    pub fn provokable(self, http_status: Option<u16>) -> bool {
        match self {
            FailureClass::Upstream5xx => http_status == Some(500),
            FailureClass::BadResponse => true,
            FailureClass::Account => http_status == Some(403),
            _ => false,
        }
    }

    /// Whether another route may be tried at all (context_length / unsupported_param: true, the driver
    /// then filters routes; invalid_request and cancelled: false).
    pub fn may_fall_back(self) -> bool {
        !matches!(self, FailureClass::InvalidRequest | FailureClass::Cancelled)
    }

    /// The request's own fault as the provider saw it: its message is shown to the client (in
    /// `/v1/generation`); for every other class only the class and status are (SPEC §14).
    pub fn is_client_caused(self) -> bool {
        matches!(
            self,
            FailureClass::InvalidRequest
                | FailureClass::ContextLength
                | FailureClass::UnsupportedParam
                | FailureClass::ContentPolicy
                | FailureClass::Unable
        )
    }

    /// Capacity-type failures that make the final error a 503 upstream_capacity_exhausted instead of
    /// 502 (overloaded, rate_limited).
    pub fn is_capacity(self) -> bool {
        matches!(self, FailureClass::Overloaded | FailureClass::RateLimited)
    }
}

/// The verdict on a failed upstream answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    pub class: FailureClass,
    /// The upstream's human message (from error.message / message / error as string), if any.
    pub message: Option<String>,
    /// For unsupported_param: the parameter name, from error.param or parsed from the message
    /// (e.g. "Unsupported parameter: 'logprobs' is not supported" -> "logprobs";
    /// "Unrecognized request argument supplied: foo" -> "foo").
    pub param: Option<String>,
    /// From a `retry-after` header value (seconds, possibly fractional; or an HTTP date -> ignore) in ms.
    pub retry_after_ms: Option<u64>,
    /// For a class that blames a route or an account and was not named by a structured field:
    /// the upstream's words it was read from, for [`Verdict::against`].
    pub read_from: Option<String>,
    /// The request can have provoked this failure beyond what its class says
    /// ([`FailureClass::provokable`]): a 404 on a request naming state an upstream holds.
    pub provoked: bool,
}

/// What of a request an upstream's text repeats ([`Echoes::echoed_in`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Echo {
    /// A top-level field name, as the client wrote it.
    Field(String),
    /// A run of the request's own text.
    Text,
}

/// The request an attempt sent, as far as judging its failure needs it (`crate::echo::Asked`).
pub trait Echoes {
    /// What of the request `text` repeats, if anything.
    fn echoed_in(&self, text: &str) -> Option<Echo>;
    /// The request names state an upstream holds (a stored response or conversation, a file, a
    /// remote image…): SPEC §17's external input.
    fn names_upstream_state(&self) -> bool;
}

impl Verdict {
    /// A failure of `class` with our own message.
    pub fn new(class: FailureClass, message: &str) -> Verdict {
        Verdict {
            class,
            message: Some(message.to_string()),
            param: None,
            retry_after_ms: None,
            read_from: None,
            provoked: false,
        }
    }

    /// The verdict once the request that was sent is known (SPEC §18a): a class of route or
    /// account blame read from words that repeat the request (its field names, a run of its text)
    /// is the client's — `context_length` or `unsupported_param` when the words say so, else
    /// `invalid_request` — whatever phrase they hold; a 404 on a request naming state an upstream
    /// holds (`http_status`) is provoked.
    pub fn against(self, request: &dyn Echoes, http_status: Option<u16>) -> Verdict {
        if let Some(echo) = self.read_from.as_deref().and_then(|text| request.echoed_in(text)) {
            let text = normalise(self.read_from.as_deref().unwrap_or_default());
            let class = if contains_any(&text, CONTEXT_WORDS) {
                FailureClass::ContextLength
            } else if contains_any(&text, PARAM_WORDS) {
                FailureClass::UnsupportedParam
            } else {
                FailureClass::InvalidRequest
            };
            let param = match echo {
                _ if class != FailureClass::UnsupportedParam => None,
                Echo::Field(name) => Some(name),
                Echo::Text => self
                    .param
                    .or_else(|| self.message.as_deref().and_then(param_from_message)),
            };
            return Verdict {
                class,
                param,
                read_from: None,
                provoked: false,
                ..self
            };
        }
        let provoked = self.provoked
            || (self.class == FailureClass::ModelUnavailable
                && http_status == Some(404)
                && request.names_upstream_state());
        Verdict { provoked, ..self }
    }

    /// A `bad_response`: the answer is not one (SPEC §4).
    pub fn bad(message: &str) -> Verdict {
        Verdict::new(FailureClass::BadResponse, message)
    }
}

/// How much of a non-JSON body (or of an unrecognised JSON one) is matched against.
const RAW_TEXT_LIMIT: usize = 2048;

/// A `retry-after` longer than this is treated as this (one day), so callers can add it to a clock.
const RETRY_AFTER_CAP_MS: u64 = 86_400_000;

/// Error `type` / `code` / `status` / `reason` values that say the upstream account is broken: key,
/// quota, credit, billing, permission (SPEC §4 `account`, §9, §18). Matched whole, against the
/// error's structured fields only — never against its message, which may echo the request.
const ACCOUNT_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_error",
    "billing_not_active",
    "billing_hard_limit_reached",
    "authentication_error",
    "permission_error",
    "permission_denied",
    "invalid_api_key",
    "api_key_invalid",
    "invalid_x_api_key",
    "account_deactivated",
    "account_inactive",
    "access_terminated",
    "insufficient_balance",
    "payment_required",
    "unauthenticated",
];

/// Whole phrases providers use in a broken account's message when no structured field says so
/// (Anthropic's low-credit 400 carries only `invalid_request_error`). Never single words: a
/// client that sends a field named `billing` gets it echoed in a 400 (SPEC §18).
const ACCOUNT_PHRASES: &[&str] = &[
    "exceeded your current quota",
    "credit balance is too low",
    "insufficient credit",
    "insufficient balance",
    "incorrect api key provided",
    "invalid api key",
    "invalid x-api-key",
    "api key not valid",
    "account is not active",
    "account has been deactivated",
    "organization has been disabled",
];

/// Wording of an upstream that is out of capacity (SPEC §4 `overloaded`).
const OVERLOAD_WORDS: &[&str] = &[
    "overloaded",
    "overload",
    "capacity",
    "too much load",
    "overloaded_error",
    "server is busy",
];

/// Wording of a plain rate limit, for errors that carry no status (2xx bodies, stream events).
const RATE_LIMIT_WORDS: &[&str] = &[
    "rate limit",
    "rate_limit",
    "rate-limit",
    "too many requests",
    "resource_exhausted",
    "resource has been exhausted",
];

/// Wording that alone says the model is not served here.
const MODEL_WORDS: &[&str] = &[
    "model_not_found",
    "no such model",
    "model not found",
    "cannot serve this model",
    "model is not available",
    "model_not_available",
    "unable to access model",
    "model_decommissioned",
    "has been decommissioned",
];

/// Wording that says the model is not served here only when the text is about a model.
const MODEL_WORDS_IF_ABOUT_MODEL: &[&str] = &["does not exist", "is not supported by this provider"];

/// Wording of a request longer than the route's context window.
const CONTEXT_WORDS: &[&str] = &[
    "context_length_exceeded",
    "context_length",
    "context length",
    "maximum context",
    "context window",
    "context_window",
    "prompt is too long",
    "too many tokens",
    "input is too long",
    "input token count",
    "reduce the length",
];

/// Wording of a route that rejects a request parameter (or a parameter's value).
const PARAM_WORDS: &[&str] = &[
    "unsupported_parameter",
    "unsupported parameter",
    "unsupported_value",
    "unsupported value",
    "is not supported with this model",
    "unrecognized request argument",
    "unknown parameter",
    "not supported for this model",
    "extra inputs are not permitted",
    "extra_forbidden",
    // Google's words for a field it does not know: `Unknown name "x": Cannot find field.`
    "cannot find field",
];

/// Wording of this provider's own content policy refusing the request.
const CONTENT_WORDS: &[&str] = &[
    "content_filter",
    "content filtering",
    "content management policy",
    "content policy",
    "content_policy",
    "responsibleaipolicyviolation",
    "safety system",
    "flagged",
];

/// Classifies an upstream HTTP answer that is a failure: any non-2xx status, with its body and
/// retry-after header. (A 2xx status given here is judged like [`classify_error_payload`].)
pub fn classify_status(status: u16, retry_after: Option<&str>, body: &[u8]) -> Verdict {
    let facts = Facts::from_body(body);
    let class = status_class(status, &facts);
    // A 4xx's words may be the request's own (SPEC §18a); a 2xx is judged as a payload.
    let words = match status {
        400..=499 => matches!(class, FailureClass::Account | FailureClass::ModelUnavailable),
        200..=299 => payload_read_from_words(class, &facts),
        _ => false,
    };
    facts.into_verdict(class, retry_after.and_then(parse_retry_after), words)
}

/// Classifies an error that arrived with a 2xx status: a non-stream 2xx body that is an error object,
/// or a stream error event's JSON payload (e.g. `{"error":{...}}` in chat,
/// `{"type":"error","error":{"type":"overloaded_error",...}}` in Anthropic,
/// `{"type":"error","code":"server_error","message":...}` or `response.failed` with `response.error` in
/// the Responses API). Account wording (or an embedded 401/402/403 code) -> Account;
/// overloaded/capacity wording -> Overloaded; rate-limit wording (or an embedded 429) -> RateLimited;
/// otherwise BadResponse.
pub fn classify_error_payload(payload: &Value) -> Verdict {
    let facts = Facts::from_value(payload, None);
    let class = payload_class(&facts);
    let words = payload_read_from_words(class, &facts);
    facts.into_verdict(class, None, words)
}

/// Whether an error payload's class of blame came from its words rather than a structured field
/// or code that names it.
fn payload_read_from_words(class: FailureClass, facts: &Facts) -> bool {
    match class {
        FailureClass::Account => !facts.names(class),
        FailureClass::Overloaded => !facts.kinds.iter().any(|k| k.contains("overload")),
        FailureClass::RateLimited => {
            facts.code != Some(429) && !facts.kinds.iter().any(|k| contains_any(k, RATE_LIMIT_WORDS))
        }
        _ => false,
    }
}

/// True when a JSON value is an error object rather than an answer: it has a top-level "error" that is
/// a non-null object or string, or "type":"error", or "object":"error" (some providers), and no
/// non-null "choices"/"content"/"output". A one-element-first array (Google streams) is judged by its
/// first element.
pub fn is_error_payload(payload: &Value) -> bool {
    let value = match payload {
        Value::Array(items) => match items.first() {
            Some(first) => first,
            None => return false,
        },
        other => other,
    };
    let Some(obj) = value.as_object() else {
        return false;
    };
    let is_answer = ["choices", "content", "output"]
        .iter()
        .any(|k| obj.get(*k).is_some_and(|v| !v.is_null()));
    if is_answer {
        return false;
    }
    matches!(obj.get("error"), Some(Value::Object(_) | Value::String(_)))
        || obj.get("type").and_then(Value::as_str) == Some("error")
        || obj.get("object").and_then(Value::as_str) == Some("error")
}

/// The SPEC §4 rules for a failed HTTP answer, in order.
fn status_class(status: u16, facts: &Facts) -> FailureClass {
    let text = facts.text.as_str();
    let client_error = (400..500).contains(&status);
    if (401..=403).contains(&status) {
        return FailureClass::Account;
    }
    if (200..300).contains(&status) {
        return payload_class(facts);
    }
    if client_error && facts.says_account() {
        return FailureClass::Account;
    }
    // Only the statuses that carry load (SPEC §4): a 500 or 502 that mentions load is still a 5xx.
    if matches!(status, 429 | 503 | 529) && contains_any(text, OVERLOAD_WORDS) {
        return FailureClass::Overloaded;
    }
    if status == 429 {
        return FailureClass::RateLimited;
    }
    if status == 404 || (matches!(status, 400 | 422) && says_model_missing(text)) {
        return FailureClass::ModelUnavailable;
    }
    if client_error && contains_any(text, CONTEXT_WORDS) {
        return FailureClass::ContextLength;
    }
    if matches!(status, 400 | 422) && contains_any(text, PARAM_WORDS) {
        return FailureClass::UnsupportedParam;
    }
    if contains_any(text, CONTENT_WORDS) {
        return FailureClass::ContentPolicy;
    }
    if matches!(status, 408 | 409 | 425) || (500..600).contains(&status) {
        return FailureClass::Upstream5xx;
    }
    if matches!(status, 400 | 413 | 422) {
        return FailureClass::InvalidRequest;
    }
    FailureClass::BadResponse
}

/// The rules for an error that came without a failing status.
fn payload_class(facts: &Facts) -> FailureClass {
    let text = facts.text.as_str();
    if facts.says_account() || matches!(facts.code, Some(401..=403)) {
        return FailureClass::Account;
    }
    // A refusal under the provider's content policy (e.g. Gemini's blocked prompt).
    if contains_any(text, CONTENT_WORDS) {
        return FailureClass::ContentPolicy;
    }
    if contains_any(text, OVERLOAD_WORDS) {
        return FailureClass::Overloaded;
    }
    if contains_any(text, RATE_LIMIT_WORDS) || facts.code == Some(429) {
        return FailureClass::RateLimited;
    }
    FailureClass::BadResponse
}

fn says_model_missing(text: &str) -> bool {
    contains_any(text, MODEL_WORDS) || (text.contains("model") && contains_any(text, MODEL_WORDS_IF_ABOUT_MODEL))
}

fn contains_any(text: &str, words: &[&str]) -> bool {
    words.iter().any(|w| text.contains(w))
}

/// What was read out of an error body or payload.
#[derive(Debug, Default)]
struct Facts {
    /// The human message, if the body was JSON and had one.
    message: Option<String>,
    /// The text to match: lower-cased, URLs removed, whitespace collapsed.
    text: String,
    /// The error's structured `type` / `code` / `status` / `reason` values, lower-cased, each whole.
    kinds: Vec<String>,
    /// An explicit parameter name (`error.param`, or a validation detail's `loc`).
    param: Option<String>,
    /// A numeric HTTP-like code inside the body (`error.code: 402` at OpenRouter, Google's `code`).
    code: Option<u16>,
    /// The raw body text (truncated) when it was not JSON, for parameter names in plain text.
    raw: Option<String>,
    /// The words matched, as the upstream wrote them (not normalised): what an echo is sought in.
    said: String,
}

impl Facts {
    fn from_body(body: &[u8]) -> Facts {
        match serde_json::from_slice::<Value>(body) {
            Ok(value @ (Value::Object(_) | Value::Array(_) | Value::String(_))) => {
                Facts::from_value(&value, Some(body))
            }
            _ => {
                let raw = truncated_text(body);
                Facts {
                    text: normalise(&raw),
                    said: raw.clone(),
                    raw: Some(raw),
                    ..Facts::default()
                }
            }
        }
    }

    /// `raw` is the body the value was parsed from, matched against when no known field has text.
    fn from_value(value: &Value, raw: Option<&[u8]>) -> Facts {
        let root = match value {
            Value::Array(items) => items.first().unwrap_or(value),
            other => other,
        };
        let mut facts = match root {
            Value::String(s) => Facts {
                message: non_empty(s),
                text: normalise(s),
                said: s.clone(),
                ..Facts::default()
            },
            Value::Object(obj) => Facts::from_object(obj),
            _ => Facts::default(),
        };
        if facts.text.is_empty() {
            let fallback = match raw {
                Some(bytes) => truncated_text(bytes),
                None => truncated_text(value.to_string().as_bytes()),
            };
            facts.text = normalise(&fallback);
            facts.said = fallback;
        }
        facts
    }

    fn from_object(root: &Map<String, Value>) -> Facts {
        // The error object: `error`, Responses' `response.error`, or the root itself
        // (`{"type":"error","code":…,"message":…}`, `{"object":"error",…}`, `{"detail":…}`).
        let error = root
            .get("error")
            .and_then(Value::as_object)
            .or_else(|| {
                root.get("response")
                    .and_then(|r| r.get("error"))
                    .and_then(Value::as_object)
            })
            .unwrap_or(root);

        let mut messages: Vec<String> = Vec::new();
        let mut pieces: Vec<String> = Vec::new();
        let mut param = error.get("param").and_then(Value::as_str).and_then(non_empty);

        match error.get("message") {
            Some(Value::String(s)) => messages.extend(non_empty(s)),
            Some(Value::Object(inner)) => {
                read_detail(inner.get("detail"), &mut messages, &mut pieces, &mut param);
                if let Some(s) = inner.get("message").and_then(Value::as_str) {
                    messages.extend(non_empty(s));
                }
            }
            _ => {}
        }
        if let Some(s) = root.get("error").and_then(Value::as_str) {
            messages.extend(non_empty(s));
        }
        if let Some(s) = root.get("message").and_then(Value::as_str) {
            messages.extend(non_empty(s));
        }
        read_detail(error.get("detail"), &mut messages, &mut pieces, &mut param);
        if !std::ptr::eq(error, root) {
            read_detail(root.get("detail"), &mut messages, &mut pieces, &mut param);
        }

        let mut kinds: Vec<String> = Vec::new();
        for key in ["type", "code", "status", "reason"] {
            kinds.extend(error.get(key).and_then(scalar_text));
        }
        for key in ["code", "error_type"] {
            kinds.extend(root.get(key).and_then(scalar_text));
        }
        if let Some(t) = root.get("type").and_then(Value::as_str) {
            if t != "error" {
                kinds.push(t.to_string());
            }
        }
        if let Some(inner) = error.get("innererror").and_then(Value::as_object) {
            kinds.extend(inner.get("code").and_then(scalar_text));
        }
        // OpenRouter wraps the provider's own error text in `metadata.raw`.
        if let Some(raw) = error.get("metadata").and_then(|m| m.get("raw")) {
            let raw = match raw {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            pieces.push(truncated_text(raw.as_bytes()));
        }
        // Google's `details: [{"reason": "API_KEY_INVALID", …}]`.
        if let Some(details) = error.get("details").and_then(Value::as_array) {
            kinds.extend(details.iter().filter_map(|d| d.get("reason")).filter_map(scalar_text));
        }
        // What an echo is sought in: the provider's words, not its structured codes.
        let said = messages
            .iter()
            .chain(pieces.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        pieces.extend(kinds.iter().cloned());
        let kinds: Vec<String> = kinds.iter().map(|k| k.trim().to_lowercase()).collect();

        let code = [error.get("code"), error.get("status"), root.get("code")]
            .into_iter()
            .flatten()
            .find_map(|v| v.as_u64().filter(|c| (100..600).contains(c)))
            .and_then(|c| u16::try_from(c).ok());

        let text = normalise(
            &messages
                .iter()
                .chain(pieces.iter())
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
        );
        Facts {
            message: messages.into_iter().next(),
            text,
            said,
            kinds,
            param,
            code,
            raw: None,
        }
    }

    /// A broken upstream account (SPEC §18: structured fields first, free text only as whole
    /// known phrases).
    fn says_account(&self) -> bool {
        self.names_account() || contains_any(&self.text, ACCOUNT_PHRASES)
    }

    /// A structured field names a broken account.
    fn names_account(&self) -> bool {
        self.kinds.iter().any(|k| ACCOUNT_CODES.contains(&k.as_str()))
    }

    /// A structured field (or an embedded 401–403 code) names the class itself, so no echo can
    /// have supplied it.
    fn names(&self, class: FailureClass) -> bool {
        match class {
            FailureClass::Account => self.names_account() || matches!(self.code, Some(401..=403)),
            FailureClass::ModelUnavailable => self.kinds.iter().any(|k| contains_any(k, MODEL_WORDS)),
            _ => false,
        }
    }

    /// `words`: the class was read from the error's words (or its bare status), which the
    /// request may have supplied — kept for [`Verdict::against`] unless a structured field names
    /// the class.
    fn into_verdict(self, class: FailureClass, retry_after_ms: Option<u64>, words: bool) -> Verdict {
        let read_from = (words && !self.names(class)).then(|| self.said.clone());
        let param = if class == FailureClass::UnsupportedParam {
            self.param.or_else(|| {
                self.message
                    .as_deref()
                    .or(self.raw.as_deref())
                    .and_then(param_from_message)
            })
        } else {
            None
        };
        Verdict {
            class,
            message: self.message,
            param,
            retry_after_ms,
            read_from,
            provoked: false,
        }
    }
}

/// Reads a pydantic/FastAPI validation `detail` (a string, or `[{"type","loc","msg"}]`).
fn read_detail(
    detail: Option<&Value>,
    messages: &mut Vec<String>,
    pieces: &mut Vec<String>,
    param: &mut Option<String>,
) {
    match detail {
        Some(Value::String(s)) => messages.extend(non_empty(s)),
        Some(Value::Array(items)) => {
            let mut msgs = Vec::new();
            for item in items {
                let kind = item.get("type").and_then(Value::as_str).unwrap_or("");
                let msg = item.get("msg").and_then(Value::as_str).unwrap_or("");
                msgs.extend(non_empty(msg));
                pieces.extend(non_empty(kind));
                let extra = kind == "extra_forbidden" || msg.to_ascii_lowercase().contains("extra inputs");
                if extra && param.is_none() {
                    *param = item
                        .get("loc")
                        .and_then(Value::as_array)
                        .and_then(|loc| loc.iter().rev().find_map(Value::as_str))
                        .filter(|p| *p != "body")
                        .and_then(non_empty);
                }
            }
            if !msgs.is_empty() {
                messages.push(msgs.join("; "));
            }
        }
        _ => {}
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => non_empty(s),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn non_empty(s: &str) -> Option<String> {
    if s.trim().is_empty() {
        None
    } else {
        Some(s.to_string())
    }
}

/// The first [`RAW_TEXT_LIMIT`] bytes as text (a cut multi-byte character becomes U+FFFD).
fn truncated_text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(&bytes[..bytes.len().min(RAW_TEXT_LIMIT)]).into_owned()
}

/// Lower-cases, drops URLs (words containing `://`) and collapses whitespace.
fn normalise(text: &str) -> String {
    text.to_lowercase()
        .split_whitespace()
        .filter(|word| !word.contains("://"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses a `retry-after` value in seconds (possibly fractional) into milliseconds; an HTTP date or
/// anything else gives `None`. Capped at one day.
fn parse_retry_after(value: &str) -> Option<u64> {
    let s = value.trim();
    let digits = s.bytes().filter(u8::is_ascii_digit).count();
    let dots = s.bytes().filter(|b| *b == b'.').count();
    if digits == 0 || dots > 1 || digits + dots != s.len() {
        return None;
    }
    let secs: f64 = s.parse().ok()?;
    if !secs.is_finite() || secs < 0.0 {
        return None;
    }
    let ms = (secs * 1000.0).round();
    if ms >= RETRY_AFTER_CAP_MS as f64 {
        Some(RETRY_AFTER_CAP_MS)
    } else {
        Some(ms as u64)
    }
}

/// The parameter a rejection names: the first quoted identifier ('x', "x" or `x`), else the word after
/// "…argument supplied:" / "…parameter:" / "…argument:".
fn param_from_message(message: &str) -> Option<String> {
    if let Some(p) = first_quoted_identifier(message) {
        return Some(p);
    }
    // ASCII lower-casing keeps byte offsets valid in `message`.
    let lower = message.to_ascii_lowercase();
    for lead in [
        "argument supplied:",
        "arguments supplied:",
        "parameter:",
        "parameters:",
        "argument:",
    ] {
        if let Some(at) = lower.find(lead) {
            let rest = message[at + lead.len()..]
                .trim_start()
                .trim_start_matches(['\'', '"', '`']);
            let end = rest.find(|c: char| !is_identifier_char(c)).unwrap_or(rest.len());
            let word = rest[..end].trim_end_matches(['.', '-']);
            if !word.is_empty() {
                return Some(word.to_string());
            }
        }
    }
    None
}

fn first_quoted_identifier(message: &str) -> Option<String> {
    let mut prev: Option<char> = None;
    for (at, c) in message.char_indices() {
        let opens = matches!(c, '\'' | '"' | '`') && !prev.is_some_and(char::is_alphanumeric);
        prev = Some(c);
        if !opens {
            continue;
        }
        let rest = &message[at + c.len_utf8()..];
        if let Some(close) = rest.find(c) {
            let inner = &rest[..close];
            if !inner.is_empty() && inner.len() <= 128 && inner.chars().all(is_identifier_char) {
                return Some(inner.to_string());
            }
        }
    }
    None
}

fn is_identifier_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '[' | ']')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use FailureClass::*;

    /// Real provider error bodies (ids and keys redacted) and the class each must get.
    const STATUS_TABLE: &[(&str, u16, &str, FailureClass)] = &[
        (
            "openai 429 tokens per min",
            429,
            r#"{"error":{"message":"Rate limit reached for gpt-4o in organization org-xxx on tokens per min (TPM): Limit 30000, Used 29000, Requested 2000. Please try again in 2s. Visit https://platform.openai.com/account/rate-limits to learn more.","type":"tokens","param":null,"code":"rate_limit_exceeded"}}"#,
            RateLimited,
        ),
        (
            "openai 429 free tier, links to account/billing",
            429,
            r#"{"error":{"message":"Rate limit reached for default-gpt-3.5-turbo in organization org-xxx on requests per min. Limit: 3 / min. Please try again in 20s. Contact us through our help center at help.openai.com if you continue to have issues. Please add a payment method to your account to increase your rate limit. Visit https://platform.openai.com/account/billing to add a payment method.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
            RateLimited,
        ),
        (
            "openai 429 insufficient_quota",
            429,
            r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, read the docs: https://platform.openai.com/docs/guides/error-codes/api-errors.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#,
            Account,
        ),
        (
            "openai 401 invalid_api_key",
            401,
            r#"{"error":{"message":"Incorrect API key provided: sk-proj-****abcd. You can find your API key at https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            Account,
        ),
        (
            "openai 400 context_length_exceeded",
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 130512 tokens. Please reduce the length of the messages.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            ContextLength,
        ),
        (
            "openai 400 unsupported_parameter max_tokens",
            400,
            r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#,
            UnsupportedParam,
        ),
        (
            "openai 400 unsupported_value temperature",
            400,
            r#"{"error":{"message":"Unsupported value: 'temperature' does not support 0.2 with this model. Only the default (1) value is supported.","type":"invalid_request_error","param":"temperature","code":"unsupported_value"}}"#,
            UnsupportedParam,
        ),
        (
            "openai 404 model_not_found",
            404,
            r#"{"error":{"message":"The model `gpt-5-turbo` does not exist or you do not have access to it.","type":"invalid_request_error","param":null,"code":"model_not_found"}}"#,
            ModelUnavailable,
        ),
        (
            "openai model_not_found sent as 400",
            400,
            r#"{"error":{"message":"The model `o9` does not exist or you do not have access to it.","type":"invalid_request_error","param":"model","code":"model_not_found"}}"#,
            ModelUnavailable,
        ),
        (
            "openai 500 server_error",
            500,
            r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error","param":null,"code":null}}"#,
            Upstream5xx,
        ),
        (
            "openai 503 engine overloaded",
            503,
            r#"{"error":{"message":"The engine is currently overloaded, please try again later","type":"server_error","param":null,"code":null}}"#,
            Overloaded,
        ),
        (
            "openai 400 prompt flagged",
            400,
            r#"{"error":{"message":"Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt.","type":"invalid_request_error","param":null,"code":"invalid_prompt"}}"#,
            ContentPolicy,
        ),
        (
            "anthropic 529 overloaded_error",
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_011CSHoEeqs5C35K2UUqR7Fy"}"#,
            Overloaded,
        ),
        (
            "anthropic 400 credit balance too low",
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits."}}"#,
            Account,
        ),
        (
            "anthropic 400 prompt is too long",
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            ContextLength,
        ),
        (
            "anthropic 401 authentication_error",
            401,
            r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            Account,
        ),
        (
            "anthropic 429 rate_limit_error",
            429,
            r#"{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate limit for your organization (xxx) of 50,000 input tokens per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try again later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options for a rate limit increase."}}"#,
            RateLimited,
        ),
        (
            "anthropic 400 max_tokens above the output limit",
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 100000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-20250514"}}"#,
            InvalidRequest,
        ),
        (
            "anthropic 404 not_found_error",
            404,
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-3-opus-20990101"}}"#,
            ModelUnavailable,
        ),
        (
            "anthropic 413 request_too_large",
            413,
            r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum size"}}"#,
            InvalidRequest,
        ),
        (
            "anthropic 403 permission_error",
            403,
            r#"{"type":"error","error":{"type":"permission_error","message":"Your API key does not have permission to use the specified resource."}}"#,
            Account,
        ),
        (
            "openrouter 402 insufficient credits",
            402,
            r#"{"error":{"code":402,"message":"Insufficient credits. This account never purchased credits. Make sure your key is on the correct account or org, and if so, purchase more at https://openrouter.ai/settings/credits"}}"#,
            Account,
        ),
        (
            "openrouter insufficient credits sent as 400",
            400,
            r#"{"error":{"code":402,"message":"Insufficient credits. Add more using https://openrouter.ai/credits"}}"#,
            Account,
        ),
        (
            "openrouter 429 temporarily rate-limited upstream",
            429,
            r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"google/gemini-2.0-flash-exp:free is temporarily rate-limited upstream. Please retry shortly, or add your own key to accumulate your rate limits: https://openrouter.ai/settings/integrations","provider_name":"Google AI Studio"}},"user_id":"user_xxx"}"#,
            RateLimited,
        ),
        (
            "openrouter 502 whose raw provider error says overloaded: a 502 is a 5xx",
            502,
            r#"{"error":{"message":"Provider returned error","code":502,"metadata":{"raw":"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}","provider_name":"Anthropic"}}}"#,
            Upstream5xx,
        ),
        (
            "azure 400 content_filter",
            400,
            r#"{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: https://go.microsoft.com/fwlink/?linkid=2198766","type":null,"param":"prompt","code":"content_filter","status":400,"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},"jailbreak":{"filtered":false,"detected":false},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"medium"}}}}}"#,
            ContentPolicy,
        ),
        (
            "azure 429 with retry text",
            429,
            r#"{"error":{"code":"429","message":"Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-02-01 have exceeded token rate limit of your current OpenAI S0 pricing tier. Please retry after 6 seconds."}}"#,
            RateLimited,
        ),
        (
            "google 429 RESOURCE_EXHAUSTED",
            429,
            r#"{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}"#,
            RateLimited,
        ),
        (
            "google 503 model overloaded",
            503,
            r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
            Overloaded,
        ),
        (
            "google 400 API key not valid",
            400,
            r#"{"error":{"code":400,"message":"API key not valid. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com"}]}}"#,
            Account,
        ),
        (
            "google 400 input token count",
            400,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            ContextLength,
        ),
        (
            "google streamed array error 500",
            500,
            r#"[{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}]"#,
            Upstream5xx,
        ),
        (
            "nginx 502 html page",
            502,
            "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n",
            Upstream5xx,
        ),
        ("empty 503", 503, "", Upstream5xx),
        ("envoy 503 no healthy upstream", 503, "no healthy upstream", Upstream5xx),
        ("cloudflare 524 timeout page", 524, "error code: 524", Upstream5xx),
        ("408 request timeout", 408, "Request Timeout", Upstream5xx),
        (
            "409 conflict",
            409,
            r#"{"error":{"message":"Another request is already in progress for this conversation.","type":"conflict"}}"#,
            Upstream5xx,
        ),
        ("425 too early", 425, "Too Early", Upstream5xx),
        (
            "413 request entity too large html",
            413,
            "<html><head><title>413 Request Entity Too Large</title></head><body><center><h1>413 Request Entity Too Large</h1></center><hr><center>nginx</center></body></html>",
            InvalidRequest,
        ),
        (
            "422 fastapi validation error",
            422,
            r#"{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required","input":{"model":"m"}}]}"#,
            InvalidRequest,
        ),
        (
            "vllm 400 maximum context length",
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
            ContextLength,
        ),
        (
            "vllm 404 model does not exist",
            404,
            r#"{"object":"error","message":"The model `llama-9` does not exist.","type":"NotFoundError","param":null,"code":404}"#,
            ModelUnavailable,
        ),
        (
            "mistral 422 extra inputs are not permitted",
            422,
            r#"{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","logit_bias"],"msg":"Extra inputs are not permitted","input":{"50256":-100},"url":"https://errors.pydantic.dev/2.6/v/extra_forbidden"}]},"type":"invalid_request_message_error","param":null,"code":null}"#,
            UnsupportedParam,
        ),
        (
            "together 400 extra inputs with param",
            400,
            r#"{"error":{"message":"Extra inputs are not permitted","type":"invalid_request_error","param":"parallel_tool_calls","code":null}}"#,
            UnsupportedParam,
        ),
        (
            "azure 400 unrecognized request argument",
            400,
            r#"{"error":{"message":"Unrecognized request argument supplied: reasoning_effort","type":"invalid_request_error","param":null,"code":null}}"#,
            UnsupportedParam,
        ),
        (
            "groq 400 model_decommissioned",
            400,
            r#"{"error":{"message":"The model `mixtral-8x7b-32768` has been decommissioned and is no longer supported. Please refer to https://console.groq.com/docs/deprecations for a recommendation on which model to use instead.","type":"invalid_request_error","code":"model_decommissioned"}}"#,
            ModelUnavailable,
        ),
        (
            "deepseek 402 insufficient balance",
            402,
            r#"{"error":{"message":"Insufficient Balance","type":"unknown_error","param":null,"code":"invalid_request_error"}}"#,
            Account,
        ),
        (
            "fireworks 400 plain invalid request",
            400,
            r#"{"error":{"object":"error","type":"invalid_request_error","message":"Invalid value for 'temperature': must be between 0 and 2."}}"#,
            InvalidRequest,
        ),
        ("500 body saying overloaded: a 500 is a 5xx", 500, "Server overloaded, try again", Upstream5xx),
        ("503 body saying overloaded", 503, "Server overloaded, try again", Overloaded),
        ("405 method not allowed", 405, r#"{"detail":"Method Not Allowed"}"#, BadResponse),
        ("410 gone", 410, "Gone", BadResponse),
        ("415 unsupported media type", 415, "Unsupported Media Type", BadResponse),
        ("302 redirect", 302, "<a href=\"/login\">Found</a>.", BadResponse),
    ];

    #[test]
    fn an_error_echoing_the_clients_words_is_not_an_account_failure() {
        // SPEC §18: a client that names a field `billing` or writes "authentication" gets it
        // echoed in a 400; the account is blamed only by structured fields or whole phrases.
        let echoes = [
            r#"{"error":{"message":"Unrecognized request argument supplied: billing","type":"invalid_request_error","param":null,"code":null}}"#,
            r#"{"error":{"message":"Invalid value for 'authentication': expected a string.","type":"invalid_request_error","param":"authentication","code":"invalid_value"}}"#,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages.0: the billing_error tag is not allowed here"}}"#,
        ];
        for body in echoes {
            let class = classify_status(400, None, body.as_bytes()).class;
            assert!(
                class.blame() == Blame::Nothing && class.is_client_caused(),
                "{body}: {class:?}"
            );
        }
        let structured = [
            (400, r#"{"error":{"message":"no","type":"billing_error"}}"#),
            (
                429,
                r#"{"error":{"message":"no","type":"insufficient_quota","code":"insufficient_quota"}}"#,
            ),
            (
                400,
                r#"{"error":{"code":400,"message":"no","status":"INVALID_ARGUMENT","details":[{"reason":"API_KEY_INVALID"}]}}"#,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
            ),
        ];
        for (status, body) in structured {
            assert_eq!(classify_status(status, None, body.as_bytes()).class, Account, "{body}");
        }
        let payload =
            serde_json::json!({"error": {"message": "field billing is unknown", "type": "invalid_request_error"}});
        assert_eq!(classify_error_payload(&payload).class, BadResponse);
    }

    #[test]
    fn real_error_bodies_get_their_class() {
        let mut wrong = Vec::new();
        for (name, status, body, want) in STATUS_TABLE {
            let got = classify_status(*status, None, body.as_bytes()).class;
            if got != *want {
                wrong.push(format!("{name}: {status} -> {got:?}, want {want:?}"));
            }
        }
        assert!(STATUS_TABLE.len() >= 30);
        assert!(wrong.is_empty(), "misclassified:\n{}", wrong.join("\n"));
    }

    #[test]
    fn payloads_that_arrived_with_2xx() {
        let table: Vec<(&str, Value, FailureClass)> = vec![
            (
                "anthropic stream overloaded_error",
                json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
                Overloaded,
            ),
            (
                "chat stream server_error",
                json!({"error":{"message":"The server had an error while processing your request.","type":"server_error"}}),
                BadResponse,
            ),
            (
                "200 body insufficient credits",
                json!({"error":{"message":"Insufficient credits"}}),
                Account,
            ),
            (
                "openrouter mid-stream 402 code",
                json!({"error":{"code":402,"message":"Provider returned error"}}),
                Account,
            ),
            (
                "openrouter stream 429 code",
                json!({"error":{"code":429,"message":"Provider returned error"}}),
                RateLimited,
            ),
            (
                "responses error event server_error",
                json!({"type":"error","code":"server_error","message":"The server had an error while processing your request.","param":null,"sequence_number":3}),
                BadResponse,
            ),
            (
                "responses response.failed rate limit",
                json!({"type":"response.failed","sequence_number":2,"response":{"id":"resp_1","object":"response","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached for o3 on tokens per min."},"output":[]}}),
                RateLimited,
            ),
            (
                "responses response.failed server_error",
                json!({"type":"response.failed","response":{"id":"resp_2","status":"failed","error":{"code":"server_error","message":"An error occurred while processing your request."}}}),
                BadResponse,
            ),
            (
                "anthropic stream api_error",
                json!({"type":"error","error":{"type":"api_error","message":"Internal server error"}}),
                BadResponse,
            ),
            (
                "google payload RESOURCE_EXHAUSTED",
                json!([{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}]),
                RateLimited,
            ),
            (
                "bare string error",
                json!({"error":"Service is at capacity"}),
                Overloaded,
            ),
        ];
        for (name, payload, want) in table {
            assert_eq!(classify_error_payload(&payload).class, want, "{name}");
        }
    }

    #[test]
    fn status_2xx_is_judged_like_a_payload() {
        let v = classify_status(200, None, br#"{"error":{"message":"Insufficient credits"}}"#);
        assert_eq!(v.class, Account);
        assert_eq!(classify_status(200, None, b"").class, BadResponse);
        assert_eq!(classify_status(200, None, b"not json").class, BadResponse);
    }

    #[test]
    fn messages_come_from_the_error_object() {
        let v = classify_status(
            529,
            Some("3"),
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            v,
            Verdict {
                class: Overloaded,
                message: Some("Overloaded".into()),
                param: None,
                retry_after_ms: Some(3000),
                read_from: None,
                provoked: false,
            }
        );
        let v = classify_status(400, None, br#"{"error":"Invalid model name passed in model=foo"}"#);
        assert_eq!(v.message.as_deref(), Some("Invalid model name passed in model=foo"));
        let v = classify_status(
            400,
            None,
            br#"{"object":"error","message":"bad thing","type":"BadRequestError"}"#,
        );
        assert_eq!(v.message.as_deref(), Some("bad thing"));
        let v = classify_status(
            422,
            None,
            br#"{"detail":[{"type":"missing","loc":["body","model"],"msg":"Field required"}]}"#,
        );
        assert_eq!(v.message.as_deref(), Some("Field required"));
        let v = classify_status(405, None, br#"{"detail":"Method Not Allowed"}"#);
        assert_eq!(v.message.as_deref(), Some("Method Not Allowed"));
        let v = classify_error_payload(
            &json!({"type":"response.failed","response":{"error":{"code":"server_error","message":"boom"}}}),
        );
        assert_eq!(v.message.as_deref(), Some("boom"));
        let v = classify_error_payload(&json!({"type":"error","code":"server_error","message":"boom2"}));
        assert_eq!(v.message.as_deref(), Some("boom2"));
    }

    #[test]
    fn non_json_bodies_have_no_message_and_are_matched_truncated() {
        let v = classify_status(502, None, b"<html><title>502 Bad Gateway</title></html>");
        assert_eq!(v.message, None);
        // Wording past the first 2 KiB is not read.
        let mut body = "x".repeat(RAW_TEXT_LIMIT).into_bytes();
        body.extend_from_slice(b" overloaded");
        assert_eq!(classify_status(503, None, &body).class, Upstream5xx);
        assert_eq!(classify_status(503, None, b"Server is busy").class, Overloaded);
        // A cut multi-byte character does not fail.
        let mut body = "a".repeat(RAW_TEXT_LIMIT - 1).into_bytes();
        body.extend_from_slice("é overloaded".as_bytes());
        assert_eq!(classify_status(503, None, &body).class, Upstream5xx);
    }

    #[test]
    fn overloaded_only_with_the_statuses_that_carry_it() {
        assert_eq!(classify_status(529, None, b"").class, Upstream5xx);
        assert_eq!(
            classify_status(429, None, br#"{"error":{"message":"Too much load, try later"}}"#).class,
            Overloaded
        );
        assert_eq!(classify_status(504, None, b"overloaded").class, Upstream5xx);
        assert_eq!(classify_status(400, None, b"overloaded").class, InvalidRequest);
    }

    #[test]
    fn unsupported_param_names_the_parameter() {
        let cases: &[(&str, &str)] = &[
            (
                r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#,
                "max_tokens",
            ),
            (
                r#"{"error":{"message":"Unsupported parameter: 'logprobs' is not supported","param":null}}"#,
                "logprobs",
            ),
            (
                r#"{"error":{"message":"Unrecognized request argument supplied: foo","param":null}}"#,
                "foo",
            ),
            (
                r#"{"error":{"message":"Unrecognized request arguments supplied: reasoning_effort, store"}}"#,
                "reasoning_effort",
            ),
            (
                r#"{"error":{"message":"Unknown parameter: 'response_format.json_schema.strict'."}}"#,
                "response_format.json_schema.strict",
            ),
            (
                r#"{"error":{"message":"This model's endpoint: \"top_k\" is not supported for this model"}}"#,
                "top_k",
            ),
            (r#"{"error":{"message":"Unknown parameter: seed."}}"#, "seed"),
            (
                r#"{"object":"error","message":{"detail":[{"type":"extra_forbidden","loc":["body","logit_bias"],"msg":"Extra inputs are not permitted"}]},"type":"invalid_request_message_error"}"#,
                "logit_bias",
            ),
            (
                r#"{"detail":[{"type":"extra_forbidden","loc":["body","n"],"msg":"Extra inputs are not permitted"}]}"#,
                "n",
            ),
            ("Unrecognized request argument supplied: top_a", "top_a"),
            (
                r#"{"error":{"code":400,"message":"Invalid JSON payload received. Unknown name \"topK\": Cannot find field.","status":"INVALID_ARGUMENT"}}"#,
                "topK",
            ),
        ];
        for (body, want) in cases {
            let v = classify_status(400, None, body.as_bytes());
            assert_eq!(v.class, UnsupportedParam, "{body}");
            assert_eq!(v.param.as_deref(), Some(*want), "{body}");
        }
        // Only an unsupported_param verdict carries a param.
        let v = classify_status(
            400,
            None,
            br#"{"error":{"message":"This model's maximum context length is 8192 tokens.","param":"messages","code":"context_length_exceeded"}}"#,
        );
        assert_eq!((v.class, v.param), (ContextLength, None));
        // No name to be found.
        let v = classify_status(400, None, br#"{"error":{"message":"unknown parameter"}}"#);
        assert_eq!((v.class, v.param), (UnsupportedParam, None));
    }

    #[test]
    fn param_from_message_edge_cases() {
        assert_eq!(
            param_from_message("Unsupported parameter: 'logprobs' is not supported").as_deref(),
            Some("logprobs")
        );
        assert_eq!(
            param_from_message("The model's option `tools[0].strict` is unknown").as_deref(),
            Some("tools[0].strict")
        );
        assert_eq!(param_from_message("'a b' then \"stop\"").as_deref(), Some("stop"));
        assert_eq!(param_from_message("nothing to see"), None);
        assert_eq!(param_from_message("parameter:   "), None);
    }

    #[test]
    fn retry_after_parsing() {
        assert_eq!(parse_retry_after("7"), Some(7000));
        assert_eq!(parse_retry_after("1.5"), Some(1500));
        assert_eq!(parse_retry_after(" 0 "), Some(0));
        assert_eq!(parse_retry_after("0.0004"), Some(0));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("garbage"), None);
        assert_eq!(parse_retry_after(""), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("1e3"), None);
        assert_eq!(parse_retry_after("1.2.3"), None);
        assert_eq!(parse_retry_after("."), None);
        assert_eq!(parse_retry_after("inf"), None);
        assert_eq!(parse_retry_after("NaN"), None);
        assert_eq!(
            parse_retry_after("99999999999999999999999999"),
            Some(RETRY_AFTER_CAP_MS)
        );
        // On every verdict, whatever the class.
        for status in [429, 503, 500, 400, 401, 404] {
            assert_eq!(
                classify_status(status, Some("2"), b"").retry_after_ms,
                Some(2000),
                "{status}"
            );
        }
        assert_eq!(
            classify_status(429, Some("Wed, 21 Oct 2015 07:28:00 GMT"), b"").retry_after_ms,
            None
        );
        assert_eq!(classify_error_payload(&json!({"error":"x"})).retry_after_ms, None);
    }

    #[test]
    fn error_payload_detection() {
        let errors = [
            json!({"error":{"message":"x","type":"server_error"}}),
            json!({"error":"x"}),
            json!({"error":{}}),
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            json!({"type":"error","code":"server_error","message":"x"}),
            json!({"object":"error","message":"x","type":"BadRequestError","code":400}),
            json!([{"error":{"code":500,"message":"x"}}]),
        ];
        for e in &errors {
            assert!(is_error_payload(e), "{e}");
        }
        let answers = [
            json!({"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}),
            json!({"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}),
            json!({"id":"resp_1","object":"response","status":"completed","error":null,"output":[{"type":"message","content":[]}]}),
            json!({"id":"chatcmpl-1","choices":[],"error":null}),
            json!({"error":null}),
            json!({"choices":[{"delta":{},"finish_reason":"error"}],"error":{"code":502,"message":"x"}}),
            json!("error"),
            json!([]),
            json!(null),
        ];
        for a in &answers {
            assert!(!is_error_payload(a), "{a}");
        }
    }

    #[test]
    fn class_properties_match_the_spec_table() {
        // (class, wire name, fall back?, counts against, capacity?) — SPEC §4 and §13.
        let table = [
            (Connect, "connect", true, Blame::Route, false),
            (Timeout, "timeout", true, Blame::Route, false),
            (Upstream5xx, "upstream_5xx", true, Blame::Route, false),
            (RateLimited, "rate_limited", true, Blame::Route, true),
            (Overloaded, "overloaded", true, Blame::Route, true),
            (ModelUnavailable, "model_unavailable", true, Blame::Route, false),
            (Account, "account", true, Blame::Account, false),
            (BadResponse, "bad_response", true, Blame::Route, false),
            (ContextLength, "context_length", true, Blame::Nothing, false),
            (UnsupportedParam, "unsupported_param", true, Blame::Nothing, false),
            (ContentPolicy, "content_policy", true, Blame::Nothing, false),
            (InvalidRequest, "invalid_request", false, Blame::Nothing, false),
            (Cancelled, "cancelled", false, Blame::Nothing, false),
            (Unable, "unable", true, Blame::Nothing, false),
        ];
        assert_eq!(table.len(), FailureClass::ALL.len());
        for (class, name, falls_back, blame, capacity) in table {
            assert_eq!(class.as_str(), name);
            assert_eq!(serde_json::to_value(class).unwrap(), json!(name));
            assert_eq!(class.may_fall_back(), falls_back, "{name}");
            assert_eq!(class.blame(), blame, "{name}");
            assert_eq!(class.is_capacity(), capacity, "{name}");
        }
        for class in FailureClass::ALL {
            assert!(table.iter().any(|row| row.0 == class));
        }
    }

    /// A chat request with `extra` fields, as the attempt judges it.
    fn chat_request(extra: Value) -> crate::dialects::ClientRequest {
        let mut body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]});
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            b.extend(e.clone());
        }
        crate::dialects::parse_request(crate::api::Api::Chat, body.to_string().as_bytes(), None).unwrap()
    }

    /// Each provider's 400 naming an argument it does not know, with `name` in it.
    fn unknown_field_errors(name: &str) -> Vec<(&'static str, String)> {
        vec![
            (
                "openai",
                json!({"error": {"message": format!("Unrecognized request argument supplied: {name}"),
                                 "type": "invalid_request_error", "param": null, "code": null}})
                .to_string(),
            ),
            (
                "anthropic",
                json!({"type": "error", "error": {"type": "invalid_request_error",
                                                  "message": format!("{name}: Extra inputs are not permitted")}})
                .to_string(),
            ),
            (
                "gemini",
                json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                                 "message": format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field.")}})
                .to_string(),
            ),
            ("plain text", format!("unknown field {name}")),
        ]
    }

    /// The blaming phrases: every account phrase, every wording of a missing model.
    fn blaming_phrases() -> Vec<String> {
        ACCOUNT_PHRASES
            .iter()
            .chain(MODEL_WORDS)
            .map(|p| p.to_string())
            .chain(MODEL_WORDS_IF_ABOUT_MODEL.iter().map(|w| format!("the model {w}")))
            .collect()
    }

    #[test]
    fn an_echo_of_the_request_is_the_clients_whatever_phrase_it_holds() {
        let mut wrong = Vec::new();
        for phrase in blaming_phrases() {
            for casing in [phrase.clone(), phrase.to_uppercase()] {
                // The phrase as a field name, echoed by each provider's unknown-field error.
                let named = chat_request(json!({ casing.clone(): 1 }));
                let asked = crate::echo::Asked::of(&named);
                let plain = chat_request(json!({}));
                for (who, body) in unknown_field_errors(&casing) {
                    for status in [400, 402, 404, 409, 422, 429] {
                        let raw = classify_status(status, None, body.as_bytes());
                        let v = raw.clone().against(&asked, Some(status));
                        // Never an account or a missing model; at the statuses that say the
                        // request is wrong, nothing at all (a 409 or 429 keeps its status's class).
                        let blames = matches!(v.class, Account | ModelUnavailable)
                            || (matches!(status, 400 | 404 | 422) && v.class.blame() != Blame::Nothing);
                        if blames || v.provoked {
                            wrong.push(format!("{who} {status} field {casing:?}: {:?}", v.class));
                        }
                        if v.class == UnsupportedParam && v.param.as_deref() != Some(casing.as_str()) {
                            wrong.push(format!("{who} {status} field {casing:?}: param {:?}", v.param));
                        }
                        // The same words, not the request's: their class stands.
                        let alone = raw.clone().against(&crate::echo::Asked::of(&plain), Some(status));
                        if alone.class != raw.class {
                            wrong.push(format!(
                                "{who} {status} {casing:?}: {:?} became {:?}",
                                raw.class, alone.class
                            ));
                        }
                    }
                }
                // The phrase in the request's text, quoted back in an error.
                let said = chat_request(
                    json!({"messages": [{"role": "user", "content": format!("Please repeat: {casing}")}]}),
                );
                let quoted = json!({"error": {"message": format!("Invalid 'messages[0].content': \"Please repeat: {casing}\" is not allowed"),
                                              "type": "invalid_request_error"}});
                for status in [400, 403, 404, 422] {
                    let v = classify_status(status, None, quoted.to_string().as_bytes())
                        .against(&crate::echo::Asked::of(&said), Some(status));
                    if v.class.blame() != Blame::Nothing {
                        wrong.push(format!("quoted {status} {casing:?}: {:?}", v.class));
                    }
                }
                // An error object in a 2xx or a stream event that echoes the field.
                let payload =
                    json!({"error": {"message": format!("Unrecognized request argument supplied: {casing}")}});
                let v = classify_error_payload(&payload).against(&asked, Some(200));
                if v.class.blame() != Blame::Nothing && !v.class.provokable(Some(200)) {
                    wrong.push(format!("payload {casing:?}: {:?}", v.class));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "blamed a route or account for the request's own words:\n{}",
            wrong.join("\n")
        );
    }

    #[test]
    fn without_an_echo_the_blaming_classes_stand() {
        // The test above can fail: these are the classes an echo would have had.
        let plain = chat_request(json!({}));
        let asked = crate::echo::Asked::of(&plain);
        let cases: &[(u16, &str, FailureClass)] = &[
            (
                400,
                r#"{"error":{"message":"Unrecognized request argument supplied: invalid api key"}}"#,
                Account,
            ),
            (
                400,
                r#"{"error":{"message":"Unrecognized request argument supplied: model not found"}}"#,
                ModelUnavailable,
            ),
            (
                404,
                r#"{"error":{"message":"The model `gpt-9` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}"#,
                ModelUnavailable,
            ),
            (
                400,
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
                Account,
            ),
            (
                401,
                r#"{"error":{"message":"Incorrect API key provided: sk-abc***.","code":"invalid_api_key"}}"#,
                Account,
            ),
        ];
        for (status, body, want) in cases {
            let v = classify_status(*status, None, body.as_bytes()).against(&asked, Some(*status));
            assert_eq!(v.class, *want, "{body}");
        }
    }

    #[test]
    fn a_structured_field_is_read_before_any_echo() {
        // The request names a field after the phrase, but the provider's own code says what broke.
        let named = chat_request(json!({"exceeded your current quota": 1, "model not found": 1}));
        let asked = crate::echo::Asked::of(&named);
        let quota = r#"{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert_eq!(
            classify_status(429, None, quota.as_bytes())
                .against(&asked, Some(429))
                .class,
            Account
        );
        let missing =
            r#"{"error":{"message":"The model `x` does not exist (model not found)","code":"model_not_found"}}"#;
        assert_eq!(
            classify_status(404, None, missing.as_bytes())
                .against(&asked, Some(404))
                .class,
            ModelUnavailable
        );
    }

    #[test]
    fn a_404_on_state_an_upstream_holds_is_provoked() {
        let continues = crate::dialects::parse_request(
            crate::api::Api::Responses,
            br#"{"model":"m","input":"hi","previous_response_id":"resp_x"}"#,
            None,
        )
        .unwrap();
        let body = br#"{"error":{"message":"Previous response with id 'resp_x' not found.","type":"invalid_request_error","param":"previous_response_id","code":"previous_response_not_found"}}"#;
        let v = classify_status(404, None, body).against(&crate::echo::Asked::of(&continues), Some(404));
        assert_eq!((v.class, v.provoked), (ModelUnavailable, true));
        let fresh = chat_request(json!({}));
        let v = classify_status(404, None, body).against(&crate::echo::Asked::of(&fresh), Some(404));
        assert_eq!(
            (v.class, v.provoked),
            (ModelUnavailable, false),
            "a plain request's 404 is the route's"
        );
    }
}
