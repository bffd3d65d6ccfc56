//! OpenAI Chat Completions (`POST /v1/chat/completions`): request validation, what each stream
//! event means (content, finish, usage, error), non-stream bodies, and the error frame.

pub(crate) mod answer;
pub(crate) mod request;

use serde_json::{json, Value};

use super::body::{Body, Shape};
use super::neutral::answer::Answer;
use super::neutral::answer::AnswerContext;
use super::neutral::answer::AnswerReader;
use super::neutral::answer::AnswerWriter;
use super::neutral::request::Neutral;
use super::neutral::request::Setting;
use super::neutral::request::Unable;
use super::neutral::request::Writer;
use super::CHARS_PER_TOKEN;
use super::{
    count, optional_bool, optional_u64, parse_common, BodyInfo, ClientRequest, EventInfo, FinishReason, Reported,
};
use super::{Action, Dialect, StreamDialect};
use crate::api::Api;
use crate::classify::Verdict;
use crate::error::{ApiError, ErrorShape};
use crate::sse::SseEvent;

/// The most completions one request may ask for (`n`).
pub const MAX_COMPLETIONS: u64 = 128;

/// Parses and validates a Chat Completions request body.
pub fn parse_request(bytes: &[u8]) -> Result<ClientRequest, ApiError> {
    let (body, model, provider) = parse_common(bytes)?;
    match body.shape("messages") {
        Shape::Array => {}
        Shape::EmptyArray => return Err(ApiError::invalid("`messages` must not be empty.", Some("messages"))),
        Shape::Absent => return Err(ApiError::invalid("`messages` is required.", Some("messages"))),
        _ => return Err(ApiError::invalid("`messages` must be an array.", Some("messages"))),
    }
    let mut body = body;
    let stream = optional_bool(&body, "stream")?.unwrap_or(false);
    let max_tokens = match (
        optional_u64(&body, "max_completion_tokens")?,
        optional_u64(&body, "max_tokens")?,
    ) {
        // Both set: the larger is held, and only it goes upstream (SPEC §11).
        (Some(a), Some(b)) => {
            body.remove(if a >= b { "max_tokens" } else { "max_completion_tokens" });
            Some(a.max(b))
        }
        (a, b) => a.or(b),
    };
    let completions = match optional_u64(&body, "n")? {
        None => 1,
        Some(n @ 1..=MAX_COMPLETIONS) => n,
        Some(_) => {
            return Err(ApiError::invalid(
                format!("`n` must be between 1 and {MAX_COMPLETIONS}."),
                Some("n"),
            ))
        }
    };
    let include_usage = match body.small("stream_options")? {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "`stream_options.include_usage` must be true or false.",
                    Some("stream_options.include_usage"),
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "`stream_options` must be an object.",
                Some("stream_options"),
            ))
        }
    };
    if stream {
        // The upstream always reports usage (SPEC §7); whether the client sees it was read above.
        request_usage(&mut body);
    }
    Ok(ClientRequest {
        max_tokens,
        completions,
        include_usage,
        ..ClientRequest::parsed(Api::Chat, model, stream, provider, body, bytes.len())
    })
}

/// OpenAI Chat Completions streams.
pub const STREAM: StreamDialect = StreamDialect {
    inspect,
    error_frame,
    done_frame: DONE_FRAME,
    pass_error_events: false,
};

/// The Chat Completions dialect ([`super::of`]).
pub(crate) struct Chat;

impl Dialect for Chat {
    folder_parts!();
    fn name(&self) -> &'static str {
        "Chat Completions"
    }
    fn parse_request(&self, bytes: &[u8], _path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
        parse_request(bytes)
    }
    fn error_shape(&self) -> ErrorShape {
        ErrorShape::OpenAi
    }
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64) {
        body.set("max_completion_tokens", &Value::from(max_output_tokens));
    }
    fn conversation_field(&self) -> &'static str {
        "messages"
    }
    fn one_turn(&self, model: &str, text: &str, max_output_tokens: u64) -> Option<Value> {
        Some(json!({"model": model, "stream": false, "max_tokens": max_output_tokens,
                    "messages": [{"role": "user", "content": text}]}))
    }
    fn endpoint<'a>(&self, path: &'a str) -> Option<(Action, Option<&'a str>)> {
        (path == "/v1/chat/completions").then_some((Action::Generate, None))
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
            Setting::Format => "response_format",
            Setting::Thinking | Setting::ShowReasoning => "reasoning_effort",
            Setting::ToolChoice => "tool_choice",
            Setting::Parallel => "parallel_tool_calls",
            Setting::User => "user",
            Setting::Verbosity => "verbosity",
        }
    }
    fn openai_shared(&self) -> bool {
        true
    }
    fn many_choices(&self) -> bool {
        true
    }
    fn write_request(&self, w: &mut Writer, upstream_model: &str) -> Result<Vec<u8>, Unable> {
        request::write(w, upstream_model)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ClientRequest, ApiError> {
        parse_request(v.to_string().as_bytes())
    }

    fn param_of(e: ApiError) -> Option<String> {
        match e {
            ApiError::InvalidRequest { param, .. } => param,
            other => panic!("expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn reads_the_fields_the_gateway_needs() {
        let r = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,
            "max_tokens": 50, "stream_options": {"include_usage": true},
            "provider": {"only": ["a"], "allow_fallbacks": false}, "models": ["m"]}),
        )
        .unwrap();
        assert_eq!(r.model, "m");
        assert!(r.stream && r.include_usage);
        assert_eq!(r.max_tokens, Some(50));
        assert_eq!(r.provider.only, Some(vec!["a".to_string()]));
        assert_eq!(r.provider.allow_fallbacks, Some(false));
    }

    #[test]
    fn the_hold_covers_every_completion_and_the_larger_limit() {
        let r = parse(json!({"model": "m", "messages": [{}], "n": 3, "max_tokens": 10})).unwrap();
        assert_eq!((r.completions, r.held_output_tokens(1000)), (3, 30));
        let both =
            parse(json!({"model": "m", "messages": [{}], "max_completion_tokens": 1, "max_tokens": 100000})).unwrap();
        assert_eq!(both.max_tokens, Some(100_000), "the larger is held");
        let sent: Value = serde_json::from_slice(&both.upstream_body("u")).unwrap();
        assert_eq!(sent["max_tokens"], 100_000);
        assert!(sent.get("max_completion_tokens").is_none(), "and only it is forwarded");
        for n in [0, 129] {
            assert_eq!(
                param_of(parse(json!({"model": "m", "messages": [{}], "n": n})).unwrap_err()).as_deref(),
                Some("n")
            );
        }
    }

    #[test]
    fn a_stream_asks_the_upstream_for_usage_whatever_the_client_asked() {
        let r = parse(json!({"model": "m", "messages": [{}], "stream": true})).unwrap();
        assert!(!r.include_usage, "the client did not ask");
        let sent: Value = serde_json::from_slice(&r.upstream_body("u")).unwrap();
        assert_eq!(
            sent["stream_options"]["include_usage"], true,
            "the upstream is asked all the same"
        );
        let asked =
            parse(json!({"model": "m", "messages": [{}], "stream": true, "stream_options": {"include_usage": true}}))
                .unwrap();
        assert!(asked.include_usage);
    }

    #[test]
    fn the_held_limit_is_forwarded_when_the_client_set_none() {
        let mut r = parse(json!({"model": "m", "messages": [{}]})).unwrap();
        assert_eq!(r.limit_output(4096), 4096);
        let sent: Value = serde_json::from_slice(&r.upstream_body("u")).unwrap();
        assert_eq!(sent["max_completion_tokens"], 4096);
        let mut own = parse(json!({"model": "m", "messages": [{}], "max_tokens": 50})).unwrap();
        assert_eq!(own.limit_output(4096), 50);
        let sent: Value = serde_json::from_slice(&own.upstream_body("u")).unwrap();
        assert_eq!(
            (sent["max_tokens"].as_u64(), sent.get("max_completion_tokens")),
            (Some(50), None)
        );
    }

    #[test]
    fn upstream_body_rewrites_model_keeps_order_and_drops_own_fields() {
        let raw = r#"{"temperature":0.5,"model":"public/m","messages":[{"role":"user","content":"hi"}],"provider":{"sort":"price"},"models":["public/m"],"zeta":1}"#;
        let r = parse_request(raw.as_bytes()).unwrap();
        let out = String::from_utf8(r.upstream_body("up-7")).unwrap();
        assert_eq!(
            out,
            r#"{"temperature":0.5,"model":"up-7","messages":[{"role":"user","content":"hi"}],"zeta":1}"#
        );
    }

    #[test]
    fn bad_input_is_a_400_naming_the_field() {
        assert!(matches!(
            parse_request(b"{not json"),
            Err(ApiError::InvalidRequest { .. })
        ));
        assert!(matches!(parse_request(b"[1]"), Err(ApiError::InvalidRequest { .. })));
        assert_eq!(
            param_of(parse(json!({"messages": [{}]})).unwrap_err()).as_deref(),
            Some("model")
        );
        assert_eq!(
            param_of(parse(json!({"model": 3, "messages": [{}]})).unwrap_err()).as_deref(),
            Some("model")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m"})).unwrap_err()).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m", "messages": [{}], "stream": "yes"})).unwrap_err()).as_deref(),
            Some("stream")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m", "messages": [{}], "max_tokens": -1})).unwrap_err()).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m", "messages": [{}], "models": ["m", "n"]})).unwrap_err()).as_deref(),
            Some("models")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m", "messages": [{}], "provider": {"only": "a"}})).unwrap_err()).as_deref(),
            Some("provider")
        );
        assert_eq!(
            param_of(parse(json!({"model": "m", "messages": [{}], "provider": {"colour": 1}})).unwrap_err()).as_deref(),
            Some("provider")
        );
        let big = vec![b' '; super::super::MAX_BODY_BYTES + 1];
        assert!(matches!(parse_request(&big), Err(ApiError::InvalidRequest { .. })));
    }
}

/// What one Chat Completions stream event means to the gateway (its data parsed here).
pub fn inspect_event(ev: &SseEvent) -> EventInfo {
    inspect(ev, ev.json().as_ref())
}

/// What one Chat Completions stream event means to the gateway, its data parsed already (`json`; `None`: not JSON).
pub fn inspect(ev: &SseEvent, json: Option<&Value>) -> EventInfo {
    if !ev.has_data {
        // A comment, a keep-alive, an empty event.
        return EventInfo {
            keepalive: true,
            ..EventInfo::default()
        };
    }
    let Some(v) = json else {
        // `[DONE]` is the one data that is not JSON.
        let done = ev.data.trim() == "[DONE]";
        return EventInfo {
            done,
            malformed: !done,
            ..EventInfo::default()
        };
    };
    if crate::classify::is_error_payload(v) {
        return EventInfo {
            error: Some(v.clone()),
            ..EventInfo::default()
        };
    }
    let mut info = EventInfo::default();
    let choices = v.get("choices").and_then(Value::as_array);
    for choice in choices.into_iter().flatten() {
        if let Some(delta) = choice.get("delta") {
            let chars = message_chars(delta);
            if chars > 0 || has_tool_call(delta) || has_audio(delta) {
                info.content = true;
                info.output_chars += chars;
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            info.finished = true;
            info.finishes += 1;
            info.finish = Some(finish_reason(reason));
        }
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        info.usage = usage_from(u);
        info.usage_only = choices.is_none_or(|c| c.is_empty());
    }
    info.id = v.get("id").and_then(Value::as_str).map(str::to_string);
    info.model = v.get("model").and_then(Value::as_str).map(str::to_string);
    info
}

/// Characters of output in a message or a stream delta: its text, reasoning and refusal, audio's
/// transcript, and of each tool call only what the model generated — the function's name and its
/// arguments, not the JSON around them (SPEC §7's estimate).
fn message_chars(m: &Value) -> usize {
    let len = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, |s| s.chars().count());
    let text: usize = ["content", "reasoning", "reasoning_content", "refusal"]
        .iter()
        .map(|f| len(m.get(*f)))
        .sum();
    // Audio counts its transcript, at least a token (a delta may carry audio data alone).
    let audio = m
        .get("audio")
        .filter(|a| a.is_object())
        .map_or(0, |a| len(a.get("transcript")).max(CHARS_PER_TOKEN));
    let calls: usize = m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| len(c.pointer("/function/name")) + len(c.pointer("/function/arguments")))
        .sum();
    text + audio + calls
}

fn has_tool_call(m: &Value) -> bool {
    m.get("tool_calls")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// Audio output (`audio: {id, data, transcript}`) is content even with no text.
fn has_audio(m: &Value) -> bool {
    m.get("audio").is_some_and(Value::is_object)
}

pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Natural,
        "length" => FinishReason::Limit,
        "content_filter" => FinishReason::Filtered,
        _ => FinishReason::Other,
    }
}

/// A Chat usage object (SPEC §17): `prompt_tokens` is every input token, of which
/// `prompt_tokens_details.cached_tokens` were read from the cache; `completion_tokens` includes
/// reasoning.
pub(crate) fn usage_from(u: &Value) -> Reported {
    let u = Some(u);
    Reported {
        input_tokens: count(u, "/prompt_tokens"),
        output_tokens: count(u, "/completion_tokens"),
        cache_read_tokens: count(u, "/prompt_tokens_details/cached_tokens"),
        ..Reported::default()
    }
}

/// A whole non-stream Chat Completions body: its usage and output size if it is a valid answer,
/// else why not.
pub fn inspect_body(body: &[u8]) -> Result<BodyInfo, Verdict> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Verdict::bad("unparseable response body"))?;
    if crate::classify::is_error_payload(&v) {
        return Err(crate::classify::classify_error_payload(&v));
    }
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no choices"))?;
    let messages = || choices.iter().filter_map(|c| c.get("message"));
    let mut output_chars: usize = messages().map(message_chars).sum();
    if output_chars == 0 && messages().any(has_tool_call) {
        output_chars = 1; // output all the same: a call with no name or arguments
    }
    Ok(BodyInfo {
        usage: v.get("usage").map(usage_from).unwrap_or_default(),
        output_chars,
        finish: choices
            .iter()
            .find_map(|c| c.get("finish_reason").and_then(Value::as_str))
            .map(finish_reason),
        id: None,
    })
}

/// Sets `stream_options.include_usage` so the upstream reports usage at the end of a stream
/// (SPEC §7); the relay drops that chunk again unless the client asked for it.
pub fn request_usage(body: &mut Body) {
    // `stream_options` was read (and found an object or absent) before this is called.
    let mut opts = match body.hint("stream_options") {
        Some(v @ Value::Object(_)) => v,
        _ => Value::Object(Default::default()),
    };
    if let Some(o) = opts.as_object_mut() {
        o.insert("include_usage".into(), Value::Bool(true));
    }
    body.set("stream_options", &opts);
}

/// The chat error frame that ends a broken stream (SPEC §7), followed by `[DONE]`.
pub fn error_frame(id: &str, model: &str, message: &str) -> Vec<u8> {
    let frame = serde_json::json!({
        "id": id,
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}],
        "error": {"code": 502, "message": message, "metadata": {"error_type": "provider_unavailable"}},
    });
    format!("data: {frame}\n\ndata: [DONE]\n\n").into_bytes()
}

/// `[DONE]`, for a stream that finished but closed without it.
pub const DONE_FRAME: &[u8] = b"data: [DONE]\n\n";

#[cfg(test)]
mod stream_tests {
    use super::*;
    use crate::classify::FailureClass;

    fn ev(data: &str) -> SseEvent {
        SseEvent::from_data(data)
    }

    #[test]
    fn content_detection() {
        let role = inspect_event(&ev(
            r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#,
        ));
        assert!(!role.content, "a role-only chunk is not content");
        assert_eq!(role.id.as_deref(), Some("c1"));
        let text = inspect_event(&ev(r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#));
        assert!(text.content);
        assert_eq!(text.output_chars, 2);
        assert!(inspect_event(&ev(r#"{"choices":[{"delta":{"reasoning":"hmm"}}]}"#)).content);
        assert!(
            inspect_event(&ev(
                r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}"#
            ))
            .content
        );
        assert!(inspect_event(&ev(r#"{"choices":[{"delta":{"refusal":"no"}}]}"#)).content);
        let comment = SseEvent {
            raw: b": keep-alive\n\n".to_vec(),
            ..SseEvent::default()
        };
        assert_eq!(
            inspect_event(&comment),
            EventInfo {
                keepalive: true,
                ..EventInfo::default()
            }
        );
        assert!(inspect_event(&ev("[DONE]")).done);
        assert!(inspect_event(&ev("{not json")).malformed);
        assert!(inspect_event(&ev(r#"{"error":{"message":"boom"}}"#)).error.is_some());
    }

    #[test]
    fn a_tool_call_counts_what_the_model_generated_not_its_json() {
        // SPEC §7's estimate: a call delta's name and arguments, not the wrapping around them.
        let call = inspect_event(&ev(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_abcdefghijklmnop","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
        ));
        assert!(call.content);
        assert_eq!(call.output_chars, "get_weather".len());
        let args = inspect_event(&ev(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"c"}}]}}]}"#,
        ));
        assert_eq!(args.output_chars, 3);
    }

    #[test]
    fn cached_prompt_tokens_are_part_of_the_input() {
        let u = inspect_event(&ev(
            r#"{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":800}}}"#,
        ))
        .usage;
        assert_eq!(
            (u.input_tokens, u.cache_read_tokens, u.output_tokens),
            (Some(1000), Some(800), Some(7))
        );
    }

    #[test]
    fn finish_and_usage() {
        let fin = inspect_event(&ev(r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#));
        assert!(fin.finished && !fin.content);
        let usage = inspect_event(&ev(
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#,
        ));
        assert_eq!(
            usage.usage,
            Reported {
                input_tokens: Some(5),
                output_tokens: Some(7),
                ..Reported::default()
            }
        );
        assert!(usage.usage_only);
        let both = inspect_event(&ev(
            r#"{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}"#,
        ));
        assert!(both.content && both.finished && !both.usage_only);
    }

    #[test]
    fn non_stream_bodies() {
        let ok = inspect_body(br#"{"choices":[{"message":{"role":"assistant","content":"Hello"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#).unwrap();
        assert_eq!(
            ok.usage,
            Reported {
                input_tokens: Some(3),
                output_tokens: Some(2),
                ..Reported::default()
            }
        );
        assert_eq!(ok.output_chars, 5);
        assert_eq!(inspect_body(b"{trunc").unwrap_err().class, FailureClass::BadResponse);
        assert_eq!(inspect_body(b"{}").unwrap_err().class, FailureClass::BadResponse);
        for empty in [
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"role":"assistant","content":""},"finish_reason":"stop"}]}"#,
            r#"{"choices":[{"message":{"role":"assistant","content":null}}]}"#,
        ] {
            assert_eq!(
                super::super::inspect_body(Api::Chat, empty.as_bytes(), false)
                    .unwrap_err()
                    .class,
                FailureClass::BadResponse,
                "{empty}"
            );
        }
        // SPEC §18: an empty answer the client's parameters explain is an answer.
        let judged =
            |body: &str, client_stop: bool| super::super::inspect_body(Api::Chat, body.as_bytes(), client_stop);
        let ended = |reason: &str| {
            format!(r#"{{"choices":[{{"message":{{"role":"assistant","content":""}},"finish_reason":"{reason}"}}]}}"#)
        };
        assert!(judged(&ended("length"), false).is_ok(), "its max_tokens");
        assert!(judged(&ended("content_filter"), false).is_ok(), "a content filter");
        assert!(judged(&ended("stop"), true).is_ok(), "its stop sequence");
        assert!(
            judged(&ended("stop"), false).is_err(),
            "an empty end with no stop sequence is no answer"
        );
        assert!(
            judged(r#"{"choices":[{"message":{"role":"assistant","content":null,"audio":{"id":"a","data":"UklGR"}},"finish_reason":"stop"}]}"#, false).is_ok(),
            "audio is output"
        );
        // Audio counts its transcript, or a token when a delta carries data alone (issue 23, 5).
        let audio = inspect_body(br#"{"choices":[{"message":{"content":null,"audio":{"id":"a","data":"UklGR","transcript":"Hello there"}}}]}"#).unwrap();
        assert_eq!(audio.output_chars, 11);
        let delta = inspect_event(&ev(
            r#"{"choices":[{"index":0,"delta":{"audio":{"id":"a","data":"UklGR"}}}]}"#,
        ));
        assert!(delta.content);
        assert_eq!(delta.output_chars, CHARS_PER_TOKEN);
        assert!(
            inspect_body(br#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"t"}]}}]}"#).is_ok(),
            "a tool call is an answer"
        );
        assert_eq!(
            inspect_body(br#"{"error":{"message":"The server is overloaded"}}"#)
                .unwrap_err()
                .class,
            FailureClass::Overloaded
        );
    }

    #[test]
    fn error_frame_shape() {
        let f = String::from_utf8(error_frame("c1", "m", "cut")).unwrap();
        assert!(f.starts_with("data: {"));
        assert!(f.ends_with("data: [DONE]\n\n"));
        let first = crate::dialects::frame_data(f.as_bytes());
        assert_eq!(first["choices"][0]["finish_reason"], "error");
        assert_eq!(first["error"]["metadata"]["error_type"], "provider_unavailable");
    }
}
