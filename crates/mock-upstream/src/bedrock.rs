//! The AWS Bedrock fake: InvokeModel and InvokeModelWithResponseStream for Anthropic models,
//! signed with AWS Signature Version 4, answered in Bedrock's shapes around the Messages
//! dialect.
//!
//! Paths (after the usual `/<label>/<scenario…>` prefix, see [`crate::scenario`]):
//! `POST …/model/<model id>/invoke` and `POST …/model/<model id>/invoke-with-response-stream`,
//! the model id percent-encoded as the SDKs send it (`anthropic.claude-3-haiku-20240307-v1%3A0`).
//!
//! Authentication ([`authenticate`], [`crate::sigv4`]): the signature is recomputed from the
//! request as received for service `bedrock`, the region being the one the credential scope
//! names, with the credentials read at start from `MOCK_AWS_ACCESS_KEY_ID`,
//! `MOCK_AWS_SECRET_ACCESS_KEY` and `MOCK_AWS_SESSION_TOKEN` (defaults `AKIAMOCKSWITCHYARD`,
//! `mock-secret-key-for-switchyard-tests`, no token) — or, for a request naming its key id, the
//! temporary credential of `MOCK_AWS_TEMP_*`, whose token is then required. A refusal is a 403 with
//! `x-amzn-errortype: <Exception>:<namespace>` and `{"message": …}`:
//! `MissingAuthenticationTokenException` (no `Authorization`), `IncompleteSignatureException`
//! (a malformed one, no `x-amz-date`, `host` / `x-amz-date` / `x-amz-security-token` not
//! signed), `UnrecognizedClientException` (unknown key id or session token),
//! `InvalidSignatureException` (wrong scope, a date more than 5 minutes off — "Signature
//! expired" — or a signature that does not match).
//!
//! The body is an Anthropic Messages body for Bedrock: `anthropic_version` must be
//! `bedrock-2023-05-31`, `model` and `stream` must be absent, the rest as the Messages API
//! ([`crate::validate::check_on`]); a refusal is a 400 `ValidationException` in Bedrock's words
//! (`Malformed input request: #: extraneous key [model] is not permitted, …`).
//!
//! Answers: `invoke` returns the Messages body (the model named as in the path), with Bedrock's
//! `X-Amzn-Bedrock-*-Token-Count` and `-Invocation-Latency` headers; errors are
//! `x-amzn-errortype: <Exception>:…` + `{"message": …}` ([`exception_name`]).
//! `invoke-with-response-stream` answers `application/vnd.amazon.eventstream` ([`stream_plan`]):
//! one `chunk` event per Messages stream event, its payload `{"bytes": <base64 of the event's
//! JSON>, "p": <padding>}`; `message_stop` also carries `amazon-bedrock-invocationMetrics`; a
//! mid-stream error is an `exception` message ([`stream_exception`]); `cut-after/N` sends half
//! of the frame after the N-th content event, then cuts; `malformed-event/I` is a chunk whose
//! bytes are not JSON; `held/N` and `first-content-after` wait silently (an eventstream has no
//! comments to keep a connection alive with).

use crate::crypto::base64;
use crate::dialect::{self, ReqInfo, Step};
use crate::eventstream::frame;
use crate::http::{JsonReply, Request};
use crate::json::Obj;
use crate::scenario::{Api, Behavior, ErrorKind, Scenario};
use crate::sigv4::{self, Credentials};
use crate::validate::{self, Problem};

/// The SigV4 service name of the runtime API.
pub const SERVICE: &str = "bedrock";
/// The content type of a streamed answer.
pub const EVENTSTREAM: &str = "application/vnd.amazon.eventstream";
/// The alphabet of the `p` padding field (a prefix of it, its length varying by event).
const PADDING: &str = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
/// The namespaces AWS appends to `x-amzn-errortype`: the service's own exceptions and the
/// request layer's (authentication).
const BEDROCK_NS: &str = "http://internal.amazon.com/coral/com.amazon.bedrock/";
const CORAL_NS: &str = "http://internal.amazon.com/coral/com.amazon.coral.service/";

/// A Bedrock error: `status`, `x-amzn-errortype: <name>:<namespace>`, `{"message": …}`.
fn aws_error(status: u16, name: &str, namespace: &str, message: &str) -> JsonReply {
    JsonReply::new(status, Obj::new().str("message", message).build())
        .header("x-amzn-errortype", format!("{name}:{namespace}"))
}

/// Verifies the request's signature (`now`: Unix seconds); a refusal is Bedrock's 403.
pub fn authenticate(req: &Request, creds: &Credentials, now: i64) -> Result<(), JsonReply> {
    match sigv4::verify(req, creds, SERVICE, now) {
        Ok(_) => Ok(()),
        Err(r) => Err(aws_error(403, r.error_type(), CORAL_NS, r.message())),
    }
}

/// The exception Bedrock names for an HTTP status.
pub fn exception_name(status: u16) -> &'static str {
    match status {
        400 => "ValidationException",
        401 | 403 => "AccessDeniedException",
        404 => "ResourceNotFoundException",
        408 => "ModelTimeoutException",
        424 => "ModelErrorException",
        429 => "ThrottlingException",
        503 | 529 => "ServiceUnavailableException",
        500..=599 => "InternalServerException",
        _ => "ValidationException",
    }
}

/// An error answer with `status`, in Bedrock's shape.
pub fn error_reply(status: u16, message: &str) -> JsonReply {
    aws_error(status, exception_name(status), BEDROCK_NS, message)
}

/// The 400 for a body Bedrock would not take.
pub fn validation_reply(p: &Problem) -> JsonReply {
    error_reply(400, &validate::bedrock_message(p))
}

/// Bedrock's usage headers on a non-stream answer (none with `no-usage`).
pub fn invoke_headers(info: &ReqInfo, sc: &Scenario) -> Vec<(&'static str, String)> {
    if sc.no_usage {
        return Vec::new();
    }
    let mut h = vec![
        ("X-Amzn-Bedrock-Input-Token-Count", info.prompt_tokens.to_string()),
        (
            "X-Amzn-Bedrock-Output-Token-Count",
            dialect::output_tokens(info, sc).to_string(),
        ),
        (
            "X-Amzn-Bedrock-Invocation-Latency",
            dialect::nonstream_delay_ms(sc).to_string(),
        ),
    ];
    if info.cache != (0, 0) {
        h.push(("X-Amzn-Bedrock-Cache-Read-Input-Token-Count", info.cache.0.to_string()));
        h.push(("X-Amzn-Bedrock-Cache-Write-Input-Token-Count", info.cache.1.to_string()));
    }
    h
}

/// The head of a streamed answer (beside `Transfer-Encoding: chunked`).
pub fn stream_headers() -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", EVENTSTREAM.to_string()),
        ("X-Amzn-Bedrock-Content-Type", "application/json".to_string()),
    ]
}

/// The exception a mid-stream error of `kind` becomes (the first letter lower-case, as the
/// stream's `:exception-type` spells them): throttling for rate and quota limits, service
/// unavailable for overload, validation for a request the model refuses, internal server for
/// the kinds that cannot happen once a stream has started, and by default (no kind: Anthropic's
/// mid-stream "Overloaded") a model stream error.
pub fn stream_exception(kind: Option<ErrorKind>) -> &'static str {
    match kind {
        None => "modelStreamErrorException",
        Some(ErrorKind::RateLimit | ErrorKind::Quota) => "throttlingException",
        Some(ErrorKind::Overloaded) => "serviceUnavailableException",
        Some(
            ErrorKind::ContextLength | ErrorKind::UnsupportedParam | ErrorKind::Invalid | ErrorKind::ContentFilter,
        ) => "validationException",
        Some(ErrorKind::Credit | ErrorKind::InvalidKey | ErrorKind::ModelNotFound) => "internalServerException",
    }
}

/// `amazon-bedrock-invocationMetrics`: the token counts, and the latencies the scenario's
/// waits stand for.
fn invocation_metrics(info: &ReqInfo, sc: &Scenario) -> Obj {
    let mut o = Obj::new()
        .num("inputTokenCount", info.prompt_tokens)
        .num("outputTokenCount", dialect::output_tokens(info, sc))
        .num("invocationLatency", dialect::nonstream_delay_ms(sc))
        .num("firstByteLatency", sc.first_content_after_ms.unwrap_or(0));
    if info.cache != (0, 0) {
        o = o
            .num("cacheReadInputTokenCount", info.cache.0)
            .num("cacheWriteInputTokenCount", info.cache.1);
    }
    o
}

/// The event name and data of an SSE event (`None`: a comment, no data).
fn sse_parts(event: &str) -> Option<(Option<&str>, &str)> {
    let name = event.lines().find_map(|l| l.strip_prefix("event: "));
    let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
    Some((name, data))
}

/// The frame of the `index`-th Messages event (`name`, `data`).
fn event_frame(name: Option<&str>, data: &str, index: usize, info: &ReqInfo, sc: &Scenario) -> Vec<u8> {
    if name == Some("error") {
        return exception_frame(info, sc);
    }
    let json = if name == Some("message_stop") && !sc.no_usage {
        Obj::new()
            .str("type", "message_stop")
            .obj("amazon-bedrock-invocationMetrics", invocation_metrics(info, sc))
            .build()
    } else {
        data.to_string()
    };
    let payload = Obj::new()
        .str("bytes", &base64(json.as_bytes()))
        .str("p", padding(index))
        .build();
    let headers = [
        (":event-type", "chunk"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ];
    frame(&headers, payload.as_bytes())
}

/// The exception message a mid-stream error of the scenario's kind becomes.
pub(crate) fn exception_frame(info: &ReqInfo, sc: &Scenario) -> Vec<u8> {
    let e = dialect::event_error(sc.error_kind, &info.model_name);
    let exception = stream_exception(sc.error_kind);
    let mut payload = Obj::new().str("message", &e.an_message);
    if exception == "modelStreamErrorException" {
        payload = payload
            .num("originalStatusCode", u64::from(e.code))
            .str("originalMessage", &e.an_message);
    }
    let headers = [
        (":exception-type", exception),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    ];
    frame(&headers, payload.build().as_bytes())
}

/// The padding of the `index`-th event (its length varies with the index, as AWS's does).
pub(crate) fn padding(index: usize) -> &'static str {
    &PADDING[..index * 7 % PADDING.len() + 1]
}

/// One Messages event (its name, data and index among the framed ones) as its eventstream frame,
/// or `None` for an event the stream does not carry.
pub(crate) type FrameOf = fn(Option<&str>, &str, usize, &ReqInfo, &Scenario) -> Option<Vec<u8>>;

/// The Messages stream plan with each event as its frame (by `frame_of`), comments dropped and
/// waits silent (an eventstream has no keep-alive).
fn reframe(steps: Vec<Step>, info: &ReqInfo, sc: &Scenario, frame_of: FrameOf) -> Vec<Step> {
    let mut out = Vec::with_capacity(steps.len());
    let mut index = 0;
    for step in steps {
        match step {
            Step::Event(text) => {
                if let Some(f) = sse_parts(&text).and_then(|(name, data)| frame_of(name, data, index, info, sc)) {
                    out.push(Step::Frame(f));
                    index += 1;
                }
            }
            Step::Wait { ms, .. } => out.push(Step::Wait { ms, keepalive: false }),
            other => out.push(other),
        }
    }
    out
}

/// An InvokeModel stream carries every Messages event.
fn invoke_frame(name: Option<&str>, data: &str, index: usize, info: &ReqInfo, sc: &Scenario) -> Option<Vec<u8>> {
    Some(event_frame(name, data, index, info, sc))
}

/// The steps of an `invoke-with-response-stream` answer: the Messages stream plan for `sc`,
/// reframed; a cut comes after half of the frame that would have come next.
pub fn stream_plan(info: &ReqInfo, sc: &Scenario) -> Vec<Step> {
    plan_with(info, sc, invoke_frame)
}

/// The Messages stream plan for `sc`, each event framed by `frame_of`; a cut comes after half of
/// the frame that would have come next.
pub(crate) fn plan_with(info: &ReqInfo, sc: &Scenario, frame_of: FrameOf) -> Vec<Step> {
    let mut steps = reframe(dialect::stream_plan(Api::Messages, info, sc), info, sc, frame_of);
    if steps.last() == Some(&Step::Cut) {
        let whole = Scenario {
            behavior: Behavior::Normal,
            ..sc.clone()
        };
        let sent = steps.iter().filter(|s| matches!(s, Step::Frame(_))).count();
        let next = reframe(dialect::stream_plan(Api::Messages, info, &whole), info, sc, frame_of)
            .into_iter()
            .filter_map(|s| match s {
                Step::Frame(f) => Some(f),
                _ => None,
            })
            .nth(sent);
        if let Some(f) = next {
            steps.insert(steps.len() - 1, Step::Frame(f[..f.len() / 2].to_vec()));
        }
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::crc32;
    use crate::scenario::parse_scenario;
    use serde_json::Value;

    fn info(sc: &Scenario) -> ReqInfo {
        let body =
            r#"{"anthropic_version":"bedrock-2023-05-31","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut i = ReqInfo::from_body(body.as_bytes()).model_from_path("anthropic.claude-3-haiku-20240307-v1:0", true);
        i.cache = sc.cache.unwrap_or_default();
        i
    }

    /// (headers, payload) of one whole frame (CRCs checked).
    fn parse(f: &[u8]) -> (Vec<(String, String)>, Value) {
        let total = u32::from_be_bytes([f[0], f[1], f[2], f[3]]) as usize;
        let head_len = u32::from_be_bytes([f[4], f[5], f[6], f[7]]) as usize;
        assert_eq!(total, f.len());
        assert_eq!(f[8..12], crc32(&f[..8]).to_be_bytes());
        assert_eq!(f[total - 4..], crc32(&f[..total - 4]).to_be_bytes());
        let mut headers = Vec::new();
        let mut at = 12;
        while at < 12 + head_len {
            let n = usize::from(f[at]);
            let name = String::from_utf8(f[at + 1..at + 1 + n].to_vec()).unwrap();
            assert_eq!(f[at + 1 + n], 7);
            let len = usize::from(u16::from_be_bytes([f[at + 2 + n], f[at + 3 + n]]));
            let value = String::from_utf8(f[at + 4 + n..at + 4 + n + len].to_vec()).unwrap();
            headers.push((name, value));
            at += 4 + n + len;
        }
        (headers, serde_json::from_slice(&f[12 + head_len..total - 4]).unwrap())
    }

    fn frames(steps: &[Step]) -> Vec<&Vec<u8>> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Frame(f) => Some(f),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn statuses_name_bedrock_exceptions() {
        for (status, name) in [
            (400, "ValidationException"),
            (404, "ResourceNotFoundException"),
            (424, "ModelErrorException"),
            (429, "ThrottlingException"),
            (500, "InternalServerException"),
            (503, "ServiceUnavailableException"),
        ] {
            let r = error_reply(status, "m");
            assert_eq!(r.status, status);
            assert_eq!(r.body, r#"{"message":"m"}"#);
            assert_eq!(r.headers, [("x-amzn-errortype", format!("{name}:{BEDROCK_NS}"))]);
        }
    }

    #[test]
    fn a_stream_is_one_chunk_per_messages_event_with_metrics_at_the_stop() {
        let sc = parse_scenario("cache/3/4").unwrap();
        let i = info(&sc);
        let sse = dialect::stream_plan(Api::Messages, &i, &sc);
        let plan = stream_plan(&i, &sc);
        let sent = frames(&plan);
        let datas: Vec<&str> = sse
            .iter()
            .filter_map(|s| match s {
                Step::Event(e) => sse_parts(e).map(|(_, d)| d),
                _ => None,
            })
            .collect();
        assert_eq!(sent.len(), datas.len());
        for (k, (f, data)) in sent.iter().zip(&datas).enumerate() {
            let (headers, payload) = parse(f);
            assert_eq!(
                headers,
                [
                    (":event-type".to_string(), "chunk".to_string()),
                    (":content-type".to_string(), "application/json".to_string()),
                    (":message-type".to_string(), "event".to_string())
                ]
            );
            let bytes = payload["bytes"].as_str().unwrap();
            assert!(!payload["p"].as_str().unwrap().is_empty());
            if k + 1 < sent.len() {
                assert_eq!(bytes, base64(data.as_bytes()), "event {k}");
            } else {
                assert_eq!(
                    bytes,
                    base64(
                        br#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":25,"outputTokenCount":5,"invocationLatency":0,"firstByteLatency":0,"cacheReadInputTokenCount":3,"cacheWriteInputTokenCount":4}}"#
                    )
                );
            }
        }
        let nu = parse_scenario("no-usage").unwrap();
        let plan = stream_plan(&info(&nu), &nu);
        let last = frames(&plan).last().unwrap().as_slice();
        assert_eq!(parse(last).1["bytes"], base64(br#"{"type":"message_stop"}"#).as_str());
    }

    #[test]
    fn errors_become_exception_frames() {
        for (scenario, exception) in [
            ("error-event-first", "modelStreamErrorException"),
            ("error-event-after/2/rate_limit", "throttlingException"),
            ("error-event-after/1/overloaded", "serviceUnavailableException"),
            ("error-event-after/1/context_length", "validationException"),
            ("error-event-after/1/model_not_found", "internalServerException"),
        ] {
            let sc = parse_scenario(scenario).unwrap();
            let plan = stream_plan(&info(&sc), &sc);
            let (headers, payload) = parse(frames(&plan).last().unwrap());
            assert_eq!(
                headers,
                [
                    (":exception-type".to_string(), exception.to_string()),
                    (":content-type".to_string(), "application/json".to_string()),
                    (":message-type".to_string(), "exception".to_string())
                ],
                "{scenario}"
            );
            assert!(payload["message"].is_string(), "{scenario}");
        }
    }

    #[test]
    fn a_cut_comes_in_the_middle_of_a_frame() {
        let sc = parse_scenario("cut-after/2/first-content-after/300").unwrap();
        let i = info(&sc);
        let plan = stream_plan(&i, &sc);
        assert_eq!(plan.last(), Some(&Step::Cut));
        assert!(plan.iter().all(|s| !matches!(s, Step::Wait { keepalive: true, .. })));
        assert!(plan.iter().all(|s| !matches!(s, Step::Event(_))));
        let whole = stream_plan(&i, &parse_scenario("first-content-after/300").unwrap());
        let (cut, whole) = (frames(&plan), frames(&whole));
        // message_start, content_block_start, ping, two deltas, then half of the third delta.
        assert_eq!(cut.len(), 6);
        assert_eq!(cut[..5], whole[..5]);
        assert_eq!(*cut[5], whole[5][..whole[5].len() / 2]);
    }

    #[test]
    fn usage_headers() {
        let sc = parse_scenario("chunks/3/10").unwrap();
        let h = invoke_headers(&info(&sc), &sc);
        assert_eq!(
            h,
            [
                ("X-Amzn-Bedrock-Input-Token-Count", "25".to_string()),
                ("X-Amzn-Bedrock-Output-Token-Count", "3".to_string()),
                ("X-Amzn-Bedrock-Invocation-Latency", "20".to_string())
            ]
        );
        assert!(invoke_headers(&info(&sc), &parse_scenario("no-usage").unwrap()).is_empty());
    }
}
