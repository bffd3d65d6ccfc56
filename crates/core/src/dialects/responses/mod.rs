//! OpenAI Responses (`POST /v1/responses`): request validation, what each stream event means
//! (content, end, usage, error), non-stream bodies, and the `response.failed` event that ends a
//! broken stream.
//!
//! The commit point (SPEC §6) is the first non-empty `response.output_text.delta`, reasoning
//! delta, `response.refusal.delta` or `response.function_call_arguments.delta`; the lifecycle
//! events before it (`response.created`, `response.in_progress`, `response.output_item.added`,
//! `response.content_part.added`) are held back. `response.completed` (or `response.incomplete`)
//! ends the stream and carries the usage; `error` and `response.failed` are errors.

pub(crate) mod answer;
mod counting;
pub(crate) mod request;

use crate::tools::ToolUses;
use serde_json::{json, Value};

use super::body::Body;
use super::body::Shape;
use super::neutral::answer::Answer;
use super::neutral::answer::AnswerContext;
use super::neutral::answer::AnswerReader;
use super::neutral::answer::AnswerWriter;
use super::neutral::request::Neutral;
use super::neutral::request::Setting;
use super::neutral::request::Unable;
use super::neutral::request::Writer;
use super::{
    count, event_json, optional_bool, optional_u64, parse_common, BodyInfo, ClientRequest, EventInfo, FinishReason,
    Reported,
};
use super::{Action, Dialect, StreamDialect};
use crate::api::Api;
use crate::classify::{classify_error_payload, is_error_payload, Verdict};
use crate::error::{ApiError, ErrorShape};
use crate::sse::SseEvent;

/// Parses and validates a Responses request body.
///
/// State an upstream holds that the gateway cannot place with its route is refused here, before
/// any route is tried (SPEC §17, §18a): a `conversation` (the gateway has no conversations
/// endpoint, so no id is one it created) and a stored `prompt` (it lives at one upstream project,
/// and no route is known to hold it). Sent on, each was a 404 at every route, read as the model
/// missing there.
pub fn parse_request(bytes: &[u8]) -> Result<ClientRequest, ApiError> {
    let (body, model, provider) = parse_common(bytes)?;
    if !matches!(body.shape("conversation"), Shape::Absent | Shape::Null) {
        return Err(ApiError::invalid(
            "`conversation` is not served: this gateway has no conversations endpoint, so no \
             conversation id is one it can send to the route that holds it. Continue a \
             conversation with `previous_response_id` (a response this gateway relayed) or send \
             its turns in `input`.",
            Some("conversation"),
        ));
    }
    if body.shape("prompt") == Shape::Object {
        return Err(ApiError::invalid(
            "`prompt` (a stored prompt) is not served: it lives at one upstream project, and this \
             gateway cannot know which route holds it. Send the prompt's text in `instructions` \
             and `input`.",
            Some("prompt"),
        ));
    }
    match body.shape("input") {
        Shape::String | Shape::Array => {}
        Shape::EmptyString | Shape::EmptyArray => {
            return Err(ApiError::invalid("`input` must not be empty.", Some("input")))
        }
        Shape::Absent => return Err(ApiError::invalid("`input` is required.", Some("input"))),
        _ => {
            return Err(ApiError::invalid(
                "`input` must be a string or an array of input items.",
                Some("input"),
            ))
        }
    }
    let stream = optional_bool(&body, "stream")?.unwrap_or(false);
    // A background response is queued at the provider and answered later, to a retrieval this
    // gateway does not serve: its `queued` answer is no answer, and every route would start a
    // billed generation for nothing. Refused before any route (SPEC §17).
    if optional_bool(&body, "background")? == Some(true) {
        return Err(ApiError::invalid(
            "`background` responses are not served: the provider keeps them and answers later, which \
             this gateway cannot relay or charge. Send the request without `background`.",
            Some("background"),
        ));
    }
    let max_tokens = optional_u64(&body, "max_output_tokens")?;
    let previous_response_id = match body.small("previous_response_id")? {
        None | Some(Value::Null) => None,
        Some(Value::String(id)) if !id.is_empty() => Some(id),
        Some(_) => {
            return Err(ApiError::invalid(
                "`previous_response_id` must be a response id.",
                Some("previous_response_id"),
            ))
        }
    };
    Ok(ClientRequest {
        max_tokens,
        previous_response_id,
        ..ClientRequest::parsed(Api::Responses, model, stream, provider, body, bytes.len())
    })
}

/// The usage of a `response` object (SPEC §17): `input_tokens` is every input token, of which
/// `input_tokens_details.cached_tokens` were read from the cache; `output_tokens` includes
/// reasoning. Its `web_search_call` output items are the web searches it made (SPEC §21).
pub(crate) fn usage_of(response: Option<&Value>) -> Reported {
    let usage = response.and_then(|r| r.get("usage"));
    let searches = response
        .and_then(|r| r.get("output"))
        .and_then(Value::as_array)
        .map(|items| u32::try_from(items.iter().filter(|i| is_web_search_call(i)).count()).unwrap_or(u32::MAX));
    Reported {
        input_tokens: count(usage, "/input_tokens"),
        output_tokens: count(usage, "/output_tokens"),
        cache_read_tokens: count(usage, "/input_tokens_details/cached_tokens"),
        tool_uses: ToolUses::web_searches(searches.filter(|n| *n > 0)),
        ..Reported::default()
    }
}

/// An output item that is a web search the provider ran.
fn is_web_search_call(item: &Value) -> bool {
    item.get("type").and_then(Value::as_str) == Some("web_search_call")
}

/// Why a `response` object ended: `completed`, or `incomplete` for its
/// `incomplete_details.reason` (the output limit or a content filter).
pub(crate) fn finish_reason(response: Option<&Value>) -> FinishReason {
    let status = response.and_then(|r| r.get("status")).and_then(Value::as_str);
    let why = response
        .and_then(|r| r.pointer("/incomplete_details/reason"))
        .and_then(Value::as_str);
    match (status, why) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Limit,
        (Some("incomplete"), Some("content_filter")) => FinishReason::Filtered,
        (Some("completed"), _) => FinishReason::Natural,
        _ => FinishReason::Other,
    }
}

/// A `response.failed` event's error as an error payload the classifier reads.
pub(crate) fn failed_payload(response: Option<&Value>) -> Value {
    let error = response
        .and_then(|r| r.get("error"))
        .filter(|e| e.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"message": "The provider reported the response as failed."}));
    json!({ "error": error })
}

/// What one Responses stream event means to the gateway (its data parsed here).
pub fn inspect_event(ev: &SseEvent) -> EventInfo {
    inspect(ev, ev.json().as_ref())
}

/// What one Responses stream event means to the gateway, its data parsed already (`json`; `None`: not JSON).
pub fn inspect(ev: &SseEvent, json: Option<&Value>) -> EventInfo {
    let (v, kind) = match event_json(ev, json) {
        Ok(parsed) => parsed,
        Err(why) => return why.into(), // a comment or keep-alive, or malformed
    };
    let response = v.get("response");
    let mut info = EventInfo {
        id: response
            .and_then(|r| r.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string),
        model: response
            .and_then(|r| r.get("model"))
            .and_then(Value::as_str)
            .map(str::to_string),
        ..EventInfo::default()
    };
    match kind {
        "error" => info.error = Some(v.clone()),
        "response.failed" => info.error = Some(failed_payload(response)),
        "response.completed" | "response.incomplete" => {
            info.finished = true;
            info.finish = Some(finish_reason(response));
            info.done = true;
            info.usage = usage_of(response);
        }
        "response.output_text.delta"
        | "response.refusal.delta"
        | "response.reasoning_text.delta"
        | "response.reasoning_summary_text.delta"
        | "response.function_call_arguments.delta" => {
            let chars = v.get("delta").and_then(Value::as_str).map_or(0, |d| d.chars().count());
            info.content = chars > 0;
            info.output_chars = chars;
        }
        // A finished web search: one use, counted as the stream goes (SPEC §21).
        "response.output_item.done" if v.get("item").is_some_and(is_web_search_call) => {
            info.usage.tool_uses.web_search_calls = 1;
        }
        _ => {} // lifecycle events: passed through, held before commit
    }
    info
}

/// A whole non-stream Responses body: its usage and output size if it is a completed answer with
/// output, else why not.
pub fn inspect_body(body: &[u8]) -> Result<BodyInfo, Verdict> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Verdict::bad("unparseable response body"))?;
    if v.get("status").and_then(Value::as_str) == Some("failed") {
        return Err(classify_error_payload(&failed_payload(Some(&v))));
    }
    if is_error_payload(&v) {
        return Err(classify_error_payload(&v));
    }
    let items = v
        .get("output")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no output"))?;
    let str_len = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, |s| s.chars().count());
    let output_chars: usize = items
        .iter()
        .map(|item| match item.get("type").and_then(Value::as_str) {
            Some("function_call") => str_len(item.get("name")) + str_len(item.get("arguments")),
            _ => item
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|part| str_len(part.get("text")) + str_len(part.get("refusal")))
                .sum(),
        })
        .sum();
    Ok(BodyInfo {
        usage: usage_of(Some(&v)),
        output_chars,
        finish: Some(finish_reason(Some(&v))),
        id: v.get("id").and_then(Value::as_str).map(str::to_string),
    })
}

/// The `response.failed` event that ends a broken stream (SPEC §7).
pub fn error_frame(id: &str, model: &str, message: &str) -> Vec<u8> {
    let data = json!({
        "type": "response.failed",
        "response": {
            "id": id,
            "object": "response",
            "status": "failed",
            "model": model,
            "output": [],
            "error": {"code": "server_error", "message": message},
        },
    });
    format!("event: response.failed\ndata: {data}\n\n").into_bytes()
}

/// Nothing: a Responses stream ends with `response.completed`, which is also its finish.
pub const DONE_FRAME: &[u8] = b"";

/// OpenAI Responses streams.
pub const STREAM: StreamDialect = StreamDialect {
    inspect,
    error_frame,
    done_frame: DONE_FRAME,
    pass_error_events: true,
};

/// The OpenAI Responses dialect ([`super::of`]).
pub(crate) struct Responses;

impl Dialect for Responses {
    folder_parts!();
    fn counting(&self) -> Option<&'static super::Counting> {
        Some(&counting::COUNTING)
    }
    fn name(&self) -> &'static str {
        "OpenAI Responses"
    }
    fn parse_request(&self, bytes: &[u8], _path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
        parse_request(bytes)
    }
    fn error_shape(&self) -> ErrorShape {
        ErrorShape::OpenAi
    }
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64) {
        body.set("max_output_tokens", &Value::from(max_output_tokens));
    }
    fn conversation_field(&self) -> &'static str {
        "input"
    }
    fn one_turn(&self, model: &str, text: &str, max_output_tokens: u64) -> Option<Value> {
        Some(json!({"model": model, "stream": false, "max_output_tokens": max_output_tokens, "input": text}))
    }
    fn endpoint<'a>(&self, path: &'a str) -> Option<(Action, Option<&'a str>)> {
        match path {
            "/v1/responses" => Some((Action::Generate, None)),
            "/v1/responses/input_tokens" => Some((Action::Count, None)),
            _ => None,
        }
    }
    fn setting_name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Stop => "stop",
            Setting::Temperature => "temperature",
            Setting::TopP => "top_p",
            Setting::TopK => "top_k",
            Setting::Candidates => "n",
            Setting::Seed => "seed",
            Setting::Presence => "presence_penalty",
            Setting::Frequency => "frequency_penalty",
            Setting::Format => "text.format",
            Setting::Thinking => "reasoning.effort",
            Setting::ShowReasoning => "reasoning.summary",
            Setting::ToolChoice => "tool_choice",
            Setting::Parallel => "parallel_tool_calls",
            Setting::User => "user",
            Setting::Verbosity => "text.verbosity",
        }
    }
    fn openai_shared(&self) -> bool {
        true
    }
    fn write_request(&self, w: &mut Writer, upstream_model: &str) -> Result<Vec<u8>, Unable> {
        request::write(w, upstream_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;

    fn event(data: Value) -> SseEvent {
        let name = data["type"].as_str().unwrap_or("").to_string();
        SseEvent {
            raw: format!("event: {name}\ndata: {data}\n\n").into_bytes(),
            event: Some(name),
            data: data.to_string(),
            has_data: true,
            oversize: false,
        }
    }

    #[test]
    fn requires_input_and_reads_max_output_tokens() {
        let ok = parse_request(br#"{"model":"m","input":"hi","max_output_tokens":30,"stream":true}"#).unwrap();
        assert_eq!((ok.api, ok.max_tokens, ok.stream), (Api::Responses, Some(30), true));
        for (body, param) in [
            (r#"{"model":"m"}"#, "input"),
            (r#"{"model":"m","input":""}"#, "input"),
            (r#"{"model":"m","input":3}"#, "input"),
            (
                r#"{"model":"m","input":"x","max_output_tokens":"9"}"#,
                "max_output_tokens",
            ),
        ] {
            match parse_request(body.as_bytes()) {
                Err(ApiError::InvalidRequest { param: p, .. }) => assert_eq!(p.as_deref(), Some(param)),
                other => panic!("{body}: expected a 400, got {other:?}"),
            }
        }
    }

    #[test]
    fn a_background_response_is_refused_naming_the_field() {
        // SPEC §17: its `queued` answer is no answer; every route would bill one for nothing.
        for body in [
            r#"{"model":"m","input":"hi","background":true}"#,
            r#"{"model":"m","input":"hi","background":true,"stream":true}"#,
            r#"{"model":"m","input":"hi","background":"yes"}"#,
        ] {
            match parse_request(body.as_bytes()) {
                Err(ApiError::InvalidRequest { param, message }) => {
                    assert_eq!(param.as_deref(), Some("background"), "{body}");
                    assert!(message.contains("`background`"), "{message}");
                }
                other => panic!("{body}: expected a 400, got {other:?}"),
            }
        }
        for body in [
            r#"{"model":"m","input":"hi","background":false}"#,
            r#"{"model":"m","input":"hi","background":null}"#,
        ] {
            assert!(parse_request(body.as_bytes()).is_ok(), "{body}");
        }
    }

    #[test]
    fn lifecycle_is_held_and_deltas_commit() {
        let created = inspect_event(&event(
            json!({"type": "response.created", "response": {"id": "resp_1", "model": "gpt", "status": "in_progress"}}),
        ));
        assert!(!created.content);
        assert_eq!(
            (created.id.as_deref(), created.model.as_deref()),
            (Some("resp_1"), Some("gpt"))
        );
        for held in [
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ] {
            assert!(!inspect_event(&event(json!({"type": held}))).content, "{held}");
        }
        for delta in [
            "response.output_text.delta",
            "response.refusal.delta",
            "response.reasoning_text.delta",
            "response.function_call_arguments.delta",
        ] {
            assert!(
                inspect_event(&event(json!({"type": delta, "delta": "x"}))).content,
                "{delta}"
            );
        }
        assert!(!inspect_event(&event(json!({"type": "response.output_text.delta", "delta": ""}))).content);
    }

    #[test]
    fn cached_input_tokens_are_part_of_the_input() {
        let body = br#"{"object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hi"}]}],"usage":{"input_tokens":500,"input_tokens_details":{"cached_tokens":400},"output_tokens":3}}"#;
        let u = inspect_body(body).unwrap().usage;
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (Some(500), Some(400), Some(3))
        );
    }

    #[test]
    fn completed_ends_with_usage_and_failures_are_errors() {
        let done = inspect_event(&event(json!({"type": "response.completed",
            "response": {"id": "resp_1", "status": "completed", "usage": {"input_tokens": 4, "output_tokens": 6}}})));
        assert!(done.done && done.finished);
        assert_eq!((done.usage.input_tokens, done.usage.output_tokens), (Some(4), Some(6)));
        let failed = inspect_event(&event(json!({"type": "response.failed",
            "response": {"id": "resp_1", "status": "failed", "error": {"code": "server_error", "message": "The server is overloaded"}}})));
        assert_eq!(
            classify_error_payload(failed.error.as_ref().unwrap()).class,
            FailureClass::Overloaded
        );
        let error = inspect_event(&event(
            json!({"type": "error", "code": "rate_limit_exceeded", "message": "Rate limit reached"}),
        ));
        assert_eq!(
            classify_error_payload(error.error.as_ref().unwrap()).class,
            FailureClass::RateLimited
        );
    }

    #[test]
    fn non_stream_bodies_need_completed_output() {
        let ok = inspect_body(br#"{"object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"Hello"}]}],"usage":{"input_tokens":2,"output_tokens":1}}"#).unwrap();
        assert_eq!((ok.output_chars, ok.usage.output_tokens), (5, Some(1)));
        assert!(inspect_body(br#"{"object":"response","status":"completed","output":[{"type":"function_call","name":"f","arguments":"{}"}]}"#).is_ok());
        assert_eq!(
            super::super::inspect_body(
                Api::Responses,
                br#"{"object":"response","status":"completed","output":[]}"#,
                false
            )
            .unwrap_err()
            .class,
            FailureClass::BadResponse
        );
        let limited = br#"{"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"output":[]}"#;
        assert!(super::super::inspect_body(Api::Responses, limited, false).is_ok());
        assert_eq!(
            inspect_body(br#"{"object":"response","status":"failed","error":{"code":"rate_limit_exceeded","message":"Rate limit reached"}}"#)
                .unwrap_err()
                .class,
            FailureClass::RateLimited
        );
    }

    #[test]
    fn the_error_frame_is_a_failed_response() {
        let text = String::from_utf8(error_frame("resp_1", "gpt", "cut")).unwrap();
        assert!(text.starts_with("event: response.failed\ndata: "));
        let data = crate::dialects::frame_data(text.as_bytes());
        assert_eq!(data["response"]["status"], "failed");
        assert_eq!(data["response"]["error"]["message"], "cut");
        assert_eq!(data["response"]["id"], "resp_1");
    }
}
