//! Anthropic Messages (`POST /v1/messages`): request validation, what each stream event means
//! (content, finish, usage, error), non-stream bodies, and the error event that ends a broken
//! stream.
//!
//! The commit point (SPEC §6) is the first `content_block_delta` with non-empty `text`,
//! `thinking` or `partial_json`, or a `tool_use` block that names its tool; `message_start`,
//! `ping` and empty block starts are held back. Input tokens come from `message_start`, output
//! tokens from `message_delta` (its count is the total so far).

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

/// The `anthropic-version` sent upstream when the client sent none.
pub const DEFAULT_VERSION: &str = "2023-06-01";

/// Parses and validates a Messages request body.
pub fn parse_request(bytes: &[u8]) -> Result<ClientRequest, ApiError> {
    let (body, model, provider) = parse_common(bytes)?;
    match body.shape("messages") {
        Shape::Array => {}
        Shape::EmptyArray => return Err(ApiError::invalid("`messages` must not be empty.", Some("messages"))),
        Shape::Absent => return Err(ApiError::invalid("`messages` is required.", Some("messages"))),
        _ => return Err(ApiError::invalid("`messages` must be an array.", Some("messages"))),
    }
    let max_tokens = match optional_u64(&body, "max_tokens")? {
        Some(0) => {
            return Err(ApiError::invalid(
                "`max_tokens` must be at least 1.",
                Some("max_tokens"),
            ))
        }
        Some(n) => n,
        None => return Err(ApiError::invalid("`max_tokens` is required.", Some("max_tokens"))),
    };
    let stream = optional_bool(&body, "stream")?.unwrap_or(false);
    Ok(ClientRequest {
        max_tokens: Some(max_tokens),
        ..ClientRequest::parsed(Api::Messages, model, stream, provider, body, bytes.len())
    })
}

fn text_len(v: Option<&Value>) -> usize {
    v.and_then(Value::as_str).map_or(0, |s| s.chars().count())
}

/// What one Messages stream event means to the gateway (its data parsed here).
pub fn inspect_event(ev: &SseEvent) -> EventInfo {
    inspect(ev, ev.json().as_ref())
}

/// What one Messages stream event means to the gateway, its data parsed already (`json`; `None`: not JSON).
pub fn inspect(ev: &SseEvent, json: Option<&Value>) -> EventInfo {
    let (v, kind) = match event_json(ev, json) {
        Ok(parsed) => parsed,
        Err(why) => return why.into(), // a comment or keep-alive, or malformed
    };
    let mut info = EventInfo::default();
    match kind {
        "error" => info.error = Some(v.clone()),
        "message_start" => {
            let message = v.get("message");
            info.id = message
                .and_then(|m| m.get("id"))
                .and_then(Value::as_str)
                .map(str::to_string);
            info.model = message
                .and_then(|m| m.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string);
            // Its output count is a placeholder; the real one comes with `message_delta`.
            info.usage = Reported {
                output_tokens: None,
                ..usage_of(message.and_then(|m| m.get("usage")))
            };
        }
        "content_block_start" => {
            let block = v.get("content_block");
            let named_tool = block
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
                .map_or(0, |b| text_len(b.get("name")));
            let chars = named_tool + text_len(block.and_then(|b| b.get("text")));
            info.content = chars > 0;
            info.output_chars = chars;
        }
        "content_block_delta" => {
            let delta = v.get("delta");
            let chars: usize = ["text", "thinking", "partial_json"]
                .iter()
                .map(|f| text_len(delta.and_then(|d| d.get(*f))))
                .sum();
            info.content = chars > 0;
            info.output_chars = chars;
        }
        "message_delta" => {
            let reason = v.pointer("/delta/stop_reason").and_then(Value::as_str);
            info.finished = reason.is_some();
            info.finish = reason.map(finish_reason);
            // Its counts are the totals so far (input and cache too, where the API sends them).
            info.usage = usage_of(v.get("usage"));
        }
        "message_stop" => info.done = true,
        "ping" => info.keepalive = true,
        _ => {} // ping, content_block_stop, unknown events: passed through, held before commit
    }
    info
}

/// A whole non-stream Messages body: its usage and output size if it is an answer with output,
/// else why not.
pub fn inspect_body(body: &[u8]) -> Result<BodyInfo, Verdict> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Verdict::bad("unparseable response body"))?;
    if is_error_payload(&v) {
        return Err(classify_error_payload(&v));
    }
    let blocks = v
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no content"))?;
    let output_chars: usize = blocks
        .iter()
        .map(|b| {
            let tool = if b.get("type").and_then(Value::as_str) == Some("tool_use") {
                text_len(b.get("name")) + b.get("input").map_or(0, |i| i.to_string().len())
            } else {
                0
            };
            text_len(b.get("text")) + text_len(b.get("thinking")) + tool
        })
        .sum();
    Ok(BodyInfo {
        usage: usage_of(v.get("usage")),
        output_chars,
        finish: v.get("stop_reason").and_then(Value::as_str).map(finish_reason),
        id: None,
    })
}

pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" => FinishReason::Natural,
        "stop_sequence" => FinishReason::StopSequence,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Limit,
        "refusal" => FinishReason::Filtered,
        _ => FinishReason::Other,
    }
}

/// A Messages usage object (SPEC §17). Its `input_tokens` are the uncached input only: every input
/// token is that plus `cache_creation_input_tokens` plus `cache_read_input_tokens`. Cache writes
/// split by `cache_creation.ephemeral_5m_input_tokens` / `ephemeral_1h_input_tokens` when given.
/// The input counts are taken only from an object that has `input_tokens` (a `message_delta`
/// may carry output alone). Sums saturate.
pub(crate) fn usage_of(u: Option<&Value>) -> Reported {
    let output_tokens = count(u, "/output_tokens");
    // Server tools' uses, the totals so far (SPEC §21).
    let web_searches = count(u, "/server_tool_use/web_search_requests").map(|n| u32::try_from(n).unwrap_or(u32::MAX));
    let Some(uncached) = count(u, "/input_tokens") else {
        return Reported {
            output_tokens,
            tool_uses: ToolUses::web_searches(web_searches),
            ..Reported::default()
        };
    };
    let read = count(u, "/cache_read_input_tokens").unwrap_or(0);
    // Without `cache_creation` (a `message_delta`) the writes are a total whose split is not
    // given: `None` for the 1-hour part, so an earlier split stands (`Reported::update`).
    let (write_5m, write_1h) = match u.and_then(|u| u.get("cache_creation")).filter(|c| c.is_object()) {
        Some(split) => (
            count(Some(split), "/ephemeral_5m_input_tokens").unwrap_or(0),
            Some(count(Some(split), "/ephemeral_1h_input_tokens").unwrap_or(0)),
        ),
        None => (count(u, "/cache_creation_input_tokens").unwrap_or(0), None),
    };
    Reported {
        input_tokens: Some(
            uncached
                .saturating_add(read)
                .saturating_add(write_5m)
                .saturating_add(write_1h.unwrap_or(0)),
        ),
        output_tokens,
        cache_read_tokens: Some(read),
        cache_write_tokens: Some(write_5m),
        cache_write_1h_tokens: write_1h,
        tool_uses: ToolUses::web_searches(web_searches),
    }
}

/// The `event: error` that ends a broken stream (SPEC §7).
pub fn error_frame(_id: &str, _model: &str, message: &str) -> Vec<u8> {
    let data = serde_json::json!({
        "type": "error",
        "error": {"type": "api_error", "message": message},
    });
    format!("event: error\ndata: {data}\n\n").into_bytes()
}

/// Anthropic Messages streams.
pub const STREAM: StreamDialect = StreamDialect {
    inspect,
    error_frame,
    done_frame: DONE_FRAME,
    pass_error_events: true,
};

/// The Anthropic Messages dialect ([`super::of`]).
pub(crate) struct Messages;

impl Dialect for Messages {
    folder_parts!();
    fn counting(&self) -> Option<&'static super::Counting> {
        Some(&counting::COUNTING)
    }
    fn name(&self) -> &'static str {
        "Anthropic Messages"
    }
    fn parse_request(&self, bytes: &[u8], _path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
        parse_request(bytes)
    }
    fn error_shape(&self) -> ErrorShape {
        ErrorShape::Anthropic
    }
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64) {
        body.set("max_tokens", &Value::from(max_output_tokens));
    }
    fn conversation_field(&self) -> &'static str {
        "messages"
    }
    fn one_turn(&self, model: &str, text: &str, max_output_tokens: u64) -> Option<Value> {
        Some(json!({"model": model, "stream": false, "max_tokens": max_output_tokens,
                    "messages": [{"role": "user", "content": text}]}))
    }
    fn endpoint<'a>(&self, path: &'a str) -> Option<(Action, Option<&'a str>)> {
        match path {
            "/v1/messages" => Some((Action::Generate, None)),
            "/v1/messages/count_tokens" => Some((Action::Count, None)),
            _ => None,
        }
    }
    fn setting_name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Stop => "stop_sequences",
            Setting::Temperature => "temperature",
            Setting::TopP => "top_p",
            Setting::TopK => "top_k",
            Setting::Candidates => "n",
            Setting::Seed => "seed",
            Setting::Presence => "presence_penalty",
            Setting::Frequency => "frequency_penalty",
            Setting::Format => "output_config.format",
            Setting::Thinking | Setting::ShowReasoning => "thinking",
            Setting::ToolChoice => "tool_choice",
            Setting::Parallel => "tool_choice.disable_parallel_tool_use",
            Setting::User => "metadata.user_id",
            Setting::Verbosity => "verbosity",
        }
    }
    fn write_request(&self, w: &mut Writer, upstream_model: &str) -> Result<Vec<u8>, Unable> {
        request::write(w, upstream_model)
    }
}

#[cfg(test)]
mod usage_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cache_reads_and_writes_are_input_beside_the_uncached_tokens() {
        // SPEC §17: Anthropic's `input_tokens` are the uncached input only.
        let flat = json!({"input_tokens": 10, "cache_creation_input_tokens": 200, "cache_read_input_tokens": 700,
                          "output_tokens": 5});
        assert_eq!(
            usage_of(Some(&flat)),
            Reported {
                tool_uses: Default::default(),
                input_tokens: Some(910),
                output_tokens: Some(5),
                cache_read_tokens: Some(700),
                cache_write_tokens: Some(200),
                cache_write_1h_tokens: None, // a total, its split not given
            }
        );
        let split = json!({"input_tokens": 10, "cache_creation_input_tokens": 300, "cache_read_input_tokens": 0,
                           "cache_creation": {"ephemeral_5m_input_tokens": 100, "ephemeral_1h_input_tokens": 200},
                           "output_tokens": 5});
        let u = usage_of(Some(&split));
        assert_eq!(
            (u.input_tokens, u.cache_write_tokens, u.cache_write_1h_tokens),
            (Some(310), Some(100), Some(200))
        );
        // A message_delta with output alone keeps the input of message_start.
        let mut r = usage_of(Some(&flat));
        r.update(usage_of(Some(&json!({"output_tokens": 42}))));
        assert_eq!(
            (r.input_tokens, r.output_tokens, r.cache_read_tokens),
            (Some(910), Some(42), Some(700))
        );
        // The stream's message_start carries the cache counts.
        let start = inspect_event(&SseEvent::from_data(
            &json!({"type": "message_start", "message": {"id": "m", "usage": flat}}).to_string(),
        ));
        assert_eq!((start.usage.input_tokens, start.usage.output_tokens), (Some(910), None));
    }

    /// The stream's events as Anthropic sends them: message_start splits the cache writes
    /// (`cache_creation`), message_delta repeats only their cumulative total.
    fn stream_usage(split: (u64, u64), delta_total: Option<u64>) -> Reported {
        let (five, hour) = split;
        let start = json!({"type": "message_start", "message": {"id": "m", "usage": {
            "input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": five + hour,
            "cache_creation": {"ephemeral_5m_input_tokens": five, "ephemeral_1h_input_tokens": hour},
            "output_tokens": 1}}});
        let mut delta_usage = json!({"output_tokens": 7});
        if let Some(total) = delta_total {
            delta_usage = json!({"input_tokens": 10, "cache_read_input_tokens": 0,
                                 "cache_creation_input_tokens": total, "output_tokens": 7});
        }
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": delta_usage});
        let mut seen = Reported::default();
        for ev in [start, delta] {
            seen.update(inspect_event(&SseEvent::from_data(&ev.to_string())).usage);
        }
        seen
    }

    #[test]
    fn a_later_total_of_cache_writes_keeps_the_split_of_message_start() {
        // Issue 31: message_delta's unsplit total used to turn 1-hour writes into 5-minute ones.
        let writes = |r: Reported| (r.cache_write_tokens, r.cache_write_1h_tokens, r.input_tokens);
        for (split, total, want) in [
            ((0, 300), Some(300), (Some(0), Some(300), Some(310))),
            ((100, 200), Some(300), (Some(100), Some(200), Some(310))),
            ((100, 200), None, (Some(100), Some(200), Some(310))),
            ((300, 0), Some(300), (Some(300), Some(0), Some(310))),
            // A total that changed keeps the share of each cache.
            ((100, 300), Some(800), (Some(200), Some(600), Some(810))),
            ((0, 0), Some(40), (Some(40), Some(0), Some(50))),
        ] {
            assert_eq!(
                writes(stream_usage(split, total)),
                want,
                "split {split:?}, then total {total:?}"
            );
        }
        // Charged: the 1-hour writes at the 1-hour price, whatever event came last.
        let price = crate::catalog::Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cache_write_per_mtok: Some(3.75),
            cache_write_1h_per_mtok: Some(6.0),
            ..crate::catalog::Price::per_mtok(3.0, 15.0)
        };
        let limits = crate::generation::UsageLimits {
            max_tokens: 100,
            max_input_tokens: 1000,
            body_len: 40,
        };
        let (usage, _, _) = crate::generation::settle_usage(stream_usage((0, 300), Some(300)), 0, limits);
        assert_eq!(crate::generation::cost_micros(usage, &price), 10 * 3 + 300 * 6 + 7 * 15);
    }
}

/// `message_stop`, for a stream that finished but closed without it.
pub const DONE_FRAME: &[u8] = b"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use serde_json::json;

    fn event(name: &str, data: Value) -> SseEvent {
        let raw = format!("event: {name}\ndata: {data}\n\n");
        SseEvent {
            raw: raw.into_bytes(),
            event: Some(name.to_string()),
            data: data.to_string(),
            has_data: true,
            oversize: false,
        }
    }

    #[test]
    fn requires_messages_and_max_tokens() {
        let ok = parse_request(
            json!({"model": "m", "max_tokens": 64, "stream": true, "messages": [{"role": "user", "content": "hi"}]})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        assert_eq!((ok.api, ok.max_tokens, ok.stream), (Api::Messages, Some(64), true));
        let param = |body: Value| match parse_request(body.to_string().as_bytes()) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        };
        assert_eq!(
            param(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})).as_deref(),
            Some("max_tokens")
        );
        assert_eq!(
            param(json!({"model": "m", "max_tokens": 5})).as_deref(),
            Some("messages")
        );
        assert_eq!(
            param(json!({"model": "m", "max_tokens": 0, "messages": [{}]})).as_deref(),
            Some("max_tokens")
        );
    }

    #[test]
    fn the_commit_point_is_the_first_non_empty_delta_or_a_named_tool() {
        let start = inspect_event(&event(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        ));
        assert!(!start.content);
        assert_eq!(
            (start.id.as_deref(), start.model.as_deref()),
            (Some("msg_1"), Some("claude"))
        );
        assert_eq!(
            start.usage,
            Reported {
                tool_uses: Default::default(),
                input_tokens: Some(12),
                output_tokens: None,
                cache_read_tokens: Some(0),
                cache_write_tokens: Some(0),
                cache_write_1h_tokens: None,
            }
        );
        let empty_block =
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}});
        assert!(!inspect_event(&event("content_block_start", empty_block)).content);
        assert!(!inspect_event(&event("ping", json!({"type": "ping"}))).content);
        let tool = json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}});
        assert!(inspect_event(&event("content_block_start", tool)).content);
        for delta in [
            json!({"type": "text_delta", "text": "Hi"}),
            json!({"type": "thinking_delta", "thinking": "hm"}),
            json!({"type": "input_json_delta", "partial_json": "{\""}),
        ] {
            let d = json!({"type": "content_block_delta", "index": 0, "delta": delta});
            assert!(inspect_event(&event("content_block_delta", d)).content);
        }
        let empty = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ""}});
        assert!(!inspect_event(&event("content_block_delta", empty)).content);
    }

    #[test]
    fn finish_usage_end_and_errors() {
        let delta = inspect_event(&event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}}),
        ));
        assert!(delta.finished);
        assert_eq!(delta.usage.output_tokens, Some(9));
        assert!(inspect_event(&event("message_stop", json!({"type": "message_stop"}))).done);
        let overloaded = inspect_event(&event(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ));
        assert_eq!(
            classify_error_payload(overloaded.error.as_ref().unwrap()).class,
            FailureClass::Overloaded
        );
        let bad = SseEvent {
            raw: b"event: content_block_delta\ndata: {oops\n\n".to_vec(),
            event: Some("content_block_delta".into()),
            data: "{oops".into(),
            has_data: true,
            oversize: false,
        };
        assert!(inspect_event(&bad).malformed);
    }

    #[test]
    fn non_stream_bodies_need_output() {
        let ok = inspect_body(
            br#"{"type":"message","content":[{"type":"text","text":"Hello"}],"usage":{"input_tokens":3,"output_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(
            (ok.usage.input_tokens, ok.usage.output_tokens, ok.output_chars),
            (Some(3), Some(2), 5)
        );
        assert!(
            inspect_body(br#"{"type":"message","content":[{"type":"tool_use","name":"f","input":{"a":1}}]}"#).is_ok()
        );
        assert_eq!(
            super::super::inspect_body(Api::Messages, br#"{"type":"message","content":[]}"#, false)
                .unwrap_err()
                .class,
            FailureClass::BadResponse
        );
        for reason in ["max_tokens", "stop_sequence", "refusal"] {
            let body = format!(r#"{{"type":"message","content":[],"stop_reason":"{reason}"}}"#);
            assert!(
                super::super::inspect_body(Api::Messages, body.as_bytes(), false).is_ok(),
                "{reason}"
            );
        }
        assert_eq!(
            inspect_body(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#)
                .unwrap_err()
                .class,
            FailureClass::Overloaded
        );
    }

    #[test]
    fn the_error_frame_is_an_anthropic_error_event() {
        let text = String::from_utf8(error_frame("msg_1", "m", "cut")).unwrap();
        assert!(text.starts_with("event: error\ndata: "));
        let data = crate::dialects::frame_data(text.as_bytes());
        assert_eq!(
            data,
            json!({"type": "error", "error": {"type": "api_error", "message": "cut"}})
        );
    }
}
