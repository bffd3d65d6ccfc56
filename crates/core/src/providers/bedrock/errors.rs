//! Bedrock's errors read into failure classes (SPEC §4): a failed HTTP answer by its error type
//! (the `x-amzn-errortype` header, else the body's `__type`), and a stream's exception frames
//! (`:exception-type`, whose names are the same types in camelCase) and error frames
//! (`:error-code`). A type not listed here is read like any provider's error
//! ([`crate::classify`]).

use serde_json::Value;

use super::eventstream::Frame;
use crate::classify::{classify_error_payload, classify_status, FailureClass, Verdict};

/// Bedrock's error types and their classes; a `ValidationException` is read further
/// ([`CONTEXT_PHRASES`], [`MODEL_PHRASES`]).
const ERROR_CLASSES: &[(&str, FailureClass)] = &[
    ("ThrottlingException", FailureClass::RateLimited),
    ("ServiceQuotaExceededException", FailureClass::RateLimited),
    ("ServiceUnavailableException", FailureClass::Overloaded),
    ("ModelNotReadyException", FailureClass::ModelUnavailable),
    ("ResourceNotFoundException", FailureClass::ModelUnavailable),
    ("ModelTimeoutException", FailureClass::Timeout),
    ("InternalServerException", FailureClass::Upstream5xx),
    ("ModelStreamErrorException", FailureClass::Upstream5xx),
    ("ModelErrorException", FailureClass::Upstream5xx),
    ("AccessDeniedException", FailureClass::Account),
    ("UnrecognizedClientException", FailureClass::Account),
    ("InvalidSignatureException", FailureClass::Account),
    ("ExpiredTokenException", FailureClass::Account),
    ("ValidationException", FailureClass::InvalidRequest),
];

/// A `ValidationException` saying the input is longer than the model takes.
const CONTEXT_PHRASES: &[&str] = &["input is too long", "too many input tokens", "prompt is too long"];

/// A `ValidationException` about the route's model id rather than the request: another route
/// may serve it.
const MODEL_PHRASES: &[&str] = &["model identifier is invalid", "on-demand throughput isn"];

/// How much of a body that is not JSON is kept as the message.
const TEXT_MESSAGE_LIMIT: usize = 1024;

/// Classifies a failed Bedrock HTTP answer: its status, its `x-amzn-errortype` header (the type
/// before any `:`) and its body (`{"message": …}`, maybe with `__type`).
pub fn classify_bedrock(status: u16, error_type: Option<&str>, body: &[u8]) -> Verdict {
    let json = serde_json::from_slice::<Value>(body).ok();
    let kind = error_type
        .or_else(|| json.as_ref()?.get("__type")?.as_str())
        .map(error_name);
    let message = message_of(json.as_ref(), body);
    match kind.and_then(|kind| class_of(kind, message.as_deref())) {
        Some(class) => Verdict::new(class, message.as_deref().or(kind).unwrap_or_default()),
        None => classify_status(status, None, body),
    }
}

/// Classifies an exception that ended a stream: its `:exception-type` and its payload
/// (`{"message": …}`; plain text is taken as the message).
pub fn classify_exception(exception_type: &str, payload: &[u8]) -> Verdict {
    let json = serde_json::from_slice::<Value>(payload).ok();
    let kind = error_name(exception_type);
    let message = message_of(json.as_ref(), payload);
    match (class_of(kind, message.as_deref()), json) {
        (Some(class), _) => Verdict::new(class, message.as_deref().unwrap_or(kind)),
        (None, Some(json)) => classify_error_payload(&json),
        (None, None) => Verdict::bad(message.as_deref().unwrap_or(kind)),
    }
}

/// The verdict on a frame that is not an event: an exception, an error (by its `:error-code` and
/// `:error-message`) or a frame of no known `:message-type`. `None` for an event.
pub fn classify_frame(frame: &Frame) -> Option<Verdict> {
    match frame.message_type() {
        Some("event") => None,
        Some("exception") => Some(classify_exception(
            frame.exception_type().unwrap_or_default(),
            &frame.payload,
        )),
        Some("error") => Some(classify_exception(
            frame.error_code().unwrap_or_default(),
            frame.error_message().unwrap_or_default().as_bytes(),
        )),
        _ => Some(Verdict::bad("event stream frame of no known :message-type")),
    }
}

/// The class of a Bedrock error type (any case), if it is one of [`ERROR_CLASSES`].
fn class_of(kind: &str, message: Option<&str>) -> Option<FailureClass> {
    let (_, class) = ERROR_CLASSES.iter().find(|(name, _)| name.eq_ignore_ascii_case(kind))?;
    if *class != FailureClass::InvalidRequest {
        return Some(*class);
    }
    let text = message.unwrap_or_default().to_lowercase();
    let says = |phrases: &[&str]| phrases.iter().any(|p| text.contains(p));
    Some(if says(CONTEXT_PHRASES) {
        FailureClass::ContextLength
    } else if says(MODEL_PHRASES) {
        FailureClass::ModelUnavailable
    } else {
        FailureClass::InvalidRequest
    })
}

/// The bare type of `ValidationException:http://…` or `com.amazon.coral.service#ExpiredTokenException`.
fn error_name(raw: &str) -> &str {
    let before_colon = raw.split(':').next().unwrap_or(raw);
    before_colon.rsplit('#').next().unwrap_or(before_colon).trim()
}

/// A JSON body's `message` (or `Message`); a body that is not JSON, as text.
fn message_of(json: Option<&Value>, body: &[u8]) -> Option<String> {
    let text = match json {
        Some(json) => ["message", "Message"]
            .iter()
            .find_map(|key| json.get(*key)?.as_str())?
            .to_string(),
        None => String::from_utf8_lossy(&body[..body.len().min(TEXT_MESSAGE_LIMIT)]).into_owned(),
    };
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::bedrock::eventstream::HeaderValue;
    use FailureClass::*;

    /// `x-amzn-errortype` as Bedrock sends it.
    fn header(kind: &str) -> String {
        format!("{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/")
    }

    #[test]
    fn each_error_type_has_its_class() {
        let table: &[(u16, &str, &str, FailureClass)] = &[
            (429, "ThrottlingException", "Too many requests, please wait before trying again.", RateLimited),
            (503, "ServiceUnavailableException", "Bedrock is unable to process your request.", Overloaded),
            (429, "ModelNotReadyException", "Model is not ready to serve inference requests.", ModelUnavailable),
            (408, "ModelTimeoutException", "Model has timed out in processing the request.", Timeout),
            (500, "InternalServerException", "The server encountered an internal error.", Upstream5xx),
            (424, "ModelStreamErrorException", "The model stream errored.", Upstream5xx),
            (400, "ValidationException", "Malformed input request: #: required key [messages] not found", InvalidRequest),
            (400, "ValidationException", "Input is too long for requested model.", ContextLength),
            (400, "ValidationException", "Too many input tokens. Max input tokens: 8192, request input token count: 9001", ContextLength),
            (400, "ValidationException", "prompt is too long: 210000 tokens > 200000 maximum", ContextLength),
            (400, "ValidationException", "The provided model identifier is invalid.", ModelUnavailable),
            (
                400,
                "ValidationException",
                "Invocation of model ID anthropic.claude-3-5-sonnet-20241022-v2:0 with on-demand throughput isn’t supported. Retry your request with the ID or ARN of an inference profile that contains this model.",
                ModelUnavailable,
            ),
            (403, "AccessDeniedException", "You don't have access to the model with the specified model ID.", Account),
            (403, "UnrecognizedClientException", "The security token included in the request is invalid.", Account),
            (403, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided.", Account),
            (403, "ExpiredTokenException", "The security token included in the request is expired", Account),
            (404, "ResourceNotFoundException", "Could not resolve the foundation model from the provided model identifier.", ModelUnavailable),
            (424, "ModelErrorException", "Received 500 from the model.", Upstream5xx),
            (400, "ServiceQuotaExceededException", "Your request exceeds the service quota for your account.", RateLimited),
        ];
        for (status, kind, message, class) in table {
            let body = serde_json::json!({ "message": message }).to_string();
            let verdict = classify_bedrock(*status, Some(&header(kind)), body.as_bytes());
            assert_eq!(verdict, Verdict::new(*class, message), "{kind}: {message}");
            // The same type in the body alone, as `__type` (namespaced or bare).
            let body = serde_json::json!({ "__type": format!("com.amazon.bedrock#{kind}"), "message": message });
            let verdict = classify_bedrock(*status, None, body.to_string().as_bytes());
            assert_eq!(verdict.class, *class, "__type {kind}");
            // Mid-stream, as the camelCase member name of the stream's union.
            let mut member = kind.to_string();
            member[..1].make_ascii_lowercase();
            let body = serde_json::json!({ "message": message }).to_string();
            assert_eq!(classify_exception(&member, body.as_bytes()).class, *class, "{member}");
        }
    }

    #[test]
    fn the_header_wins_over_the_body_and_a_missing_message_is_the_type() {
        let v = classify_bedrock(
            429,
            Some("ThrottlingException"),
            br#"{"__type":"ValidationException","Message":"Rate exceeded"}"#,
        );
        assert_eq!(v, Verdict::new(RateLimited, "Rate exceeded"));
        let v = classify_bedrock(403, Some(&header("ExpiredTokenException")), b"");
        assert_eq!(v, Verdict::new(Account, "ExpiredTokenException"));
        let v = classify_bedrock(
            403,
            None,
            br#"{"__type":"com.amazon.coral.service#UnrecognizedClientException"}"#,
        );
        assert_eq!(v, Verdict::new(Account, "UnrecognizedClientException"));
    }

    #[test]
    fn unknown_types_are_read_like_any_providers_error() {
        let body = br#"{"message":"Something else went wrong"}"#;
        assert_eq!(
            classify_bedrock(400, Some(&header("ConflictException")), body).class,
            InvalidRequest
        );
        assert_eq!(
            classify_bedrock(502, None, b"<html>Bad Gateway</html>").class,
            Upstream5xx
        );
        assert_eq!(classify_bedrock(429, None, b"").class, RateLimited);
        assert_eq!(
            classify_exception("someNewException", br#"{"message":"server is overloaded"}"#).class,
            Overloaded
        );
        assert_eq!(
            classify_exception("someNewException", b"not json"),
            Verdict::bad("not json")
        );
        assert_eq!(classify_exception("", b""), Verdict::bad(""));
    }

    #[test]
    fn frames_that_are_not_events_get_a_verdict() {
        let frame = |headers: &[(&str, &str)], payload: &[u8]| Frame {
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), HeaderValue::String(v.to_string())))
                .collect(),
            payload: payload.to_vec(),
        };
        let event = frame(&[(":message-type", "event"), (":event-type", "chunk")], b"{}");
        assert_eq!(classify_frame(&event), None);
        let exception = frame(
            &[
                (":message-type", "exception"),
                (":exception-type", "modelStreamErrorException"),
            ],
            br#"{"message":"stream broke","originalStatusCode":500}"#,
        );
        assert_eq!(
            classify_frame(&exception),
            Some(Verdict::new(Upstream5xx, "stream broke"))
        );
        let error = frame(
            &[
                (":message-type", "error"),
                (":error-code", "ThrottlingException"),
                (":error-message", "slow down"),
            ],
            b"",
        );
        assert_eq!(classify_frame(&error), Some(Verdict::new(RateLimited, "slow down")));
        assert_eq!(classify_frame(&frame(&[], b"")).map(|v| v.class), Some(BadResponse));
    }

    #[test]
    fn long_text_messages_are_cut() {
        let body = "x".repeat(5000);
        let v = classify_exception("throttlingException", body.as_bytes());
        assert_eq!(
            (v.class, v.message.map(|m| m.len())),
            (RateLimited, Some(TEXT_MESSAGE_LIMIT))
        );
    }
}
