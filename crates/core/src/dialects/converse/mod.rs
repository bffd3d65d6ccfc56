//! What an answer of AWS Bedrock's Converse API means (SPEC §20): a dialect only routes speak, so
//! there is no request to parse here — only the whole answer ([`inspect_body`]), its stop reasons
//! (`finish_reason`) and its usage (`usage_of`), which the Converse answer reader
//! (`dialects::neutral::answer`) reuses for the stream's `messageStop` and `metadata` events.
//!
//! A Converse answer: `{"output": {"message": {"role": "assistant", "content": [{"text"} |
//! {"toolUse": {toolUseId, name, input}} | {"reasoningContent": {"reasoningText": {text,
//! signature}} | {"redactedContent"}}]}}, "stopReason", "usage", "metrics": {"latencyMs"}}`.

pub(crate) mod answer;
pub(crate) mod request;

use serde_json::Value;

use super::body::Body;
use super::neutral::answer::Answer;
use super::neutral::answer::AnswerContext;
use super::neutral::answer::AnswerReader;
use super::neutral::answer::AnswerWriter;
use super::neutral::request::Neutral;
use super::neutral::request::Setting;
use super::neutral::request::Unable;
use super::neutral::request::Writer;
use super::ClientRequest;
use super::{count, BodyInfo, FinishReason, Reported};
use super::{Dialect, StreamDialect};
use crate::classify::{classify_error_payload, is_error_payload, Verdict};
use crate::error::{ApiError, ErrorShape};

/// A whole Converse answer: usage, output size and stop reason, or why it is no answer.
pub fn inspect_body(body: &[u8]) -> Result<BodyInfo, Verdict> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Verdict::bad("unparseable response body"))?;
    if is_error_payload(&v) {
        return Err(classify_error_payload(&v));
    }
    let blocks = v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no output message"))?;
    Ok(BodyInfo {
        usage: usage_of(v.get("usage")),
        output_chars: blocks.iter().map(block_chars).sum(),
        finish: v.get("stopReason").and_then(Value::as_str).map(finish_reason),
        id: None,
    })
}

/// Characters of output in one content block (text, reasoning text, a tool call's name and input).
pub(crate) fn block_chars(block: &Value) -> usize {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map_or(0, str::len);
    let tool = block.get("toolUse").map_or(0, |t| {
        text(t.get("name")) + t.get("input").map_or(0, |i| i.to_string().len())
    });
    text(block.get("text")) + text(block.pointer("/reasoningContent/reasoningText/text")) + tool
}

/// A Converse `stopReason`.
pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" => FinishReason::Natural,
        "stop_sequence" => FinishReason::StopSequence,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Limit,
        "content_filtered" | "guardrail_intervened" => FinishReason::Filtered,
        _ => FinishReason::Other,
    }
}

/// A Converse usage object (SPEC §17): `inputTokens` is the uncached input, beside
/// `cacheReadInputTokens` and `cacheWriteInputTokens`; a cache write is split by its `cacheDetails`
/// (`{"ttl": "5m" | "1h", "inputTokens"}`) when given. The input counts are taken only from an
/// object that has `inputTokens`. Sums saturate.
pub(crate) fn usage_of(u: Option<&Value>) -> Reported {
    let output_tokens = count(u, "/outputTokens");
    let Some(uncached) = count(u, "/inputTokens") else {
        return Reported {
            output_tokens,
            ..Reported::default()
        };
    };
    let read = count(u, "/cacheReadInputTokens").unwrap_or(0);
    let writes = count(u, "/cacheWriteInputTokens").unwrap_or(0);
    let hour: u64 = u
        .and_then(|u| u.get("cacheDetails"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|d| d.get("ttl").and_then(Value::as_str) == Some("1h"))
        .filter_map(|d| count(Some(d), "/inputTokens"))
        .fold(0, u64::saturating_add);
    let hour = hour.min(writes);
    Reported {
        input_tokens: Some(uncached.saturating_add(read).saturating_add(writes)),
        output_tokens,
        cache_read_tokens: Some(read),
        cache_write_tokens: Some(writes - hour),
        cache_write_1h_tokens: Some(hour),
        ..Reported::default()
    }
}

/// The Bedrock Converse dialect ([`super::of`]): spoken by routes only, so a client's request in
/// it is refused, and what a client would be written in it is chat's (never asked for).
pub(crate) struct Converse;

impl Dialect for Converse {
    fn name(&self) -> &'static str {
        "Bedrock Converse"
    }
    fn parse_request(&self, _bytes: &[u8], _path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
        Err(ApiError::invalid(
            format!("{}.", super::spoken_by_routes(self.name())),
            None,
        ))
    }
    fn inspect_body(&self, body: &[u8]) -> Result<BodyInfo, Verdict> {
        inspect_body(body)
    }
    fn stream(&self) -> &'static StreamDialect {
        super::chat::Chat.stream()
    }
    fn error_shape(&self) -> ErrorShape {
        // An error about it is said the OpenAI way.
        ErrorShape::OpenAi
    }
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64) {
        super::chat::Chat.limit_output(body, max_output_tokens)
    }
    fn conversation_field(&self) -> &'static str {
        "messages"
    }
    fn setting_name(&self, setting: Setting) -> &'static str {
        super::chat::Chat.setting_name(setting)
    }
    fn read_request(&self, _body: &Body) -> Result<Neutral, Unable> {
        Err(Unable::new("", super::spoken_by_routes(self.name())))
    }
    fn write_request(&self, w: &mut Writer, _upstream_model: &str) -> Result<Vec<u8>, Unable> {
        request::write(w)
    }
    fn answer_reader(&self) -> Box<dyn AnswerReader> {
        Box::<answer::Reader>::default()
    }
    fn answer_writer(&self, ctx: AnswerContext) -> Box<dyn AnswerWriter> {
        super::chat::Chat.answer_writer(ctx)
    }
    fn read_answer(&self, body: &Value) -> Result<Answer, Verdict> {
        answer::read_body(body)
    }
    fn write_answer(&self, answer: &Answer, ctx: &AnswerContext) -> Vec<u8> {
        super::chat::Chat.write_answer(answer, ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use serde_json::json;

    #[test]
    fn an_answer_has_its_usage_output_and_stop_reason() {
        let body = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"reasoningContent": {"reasoningText": {"text": "hmm", "signature": "sig"}}},
                {"text": "Hello"},
                {"toolUse": {"toolUseId": "t1", "name": "get", "input": {"a": 1}}},
            ]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 7, "totalTokens": 47,
                      "cacheReadInputTokens": 20, "cacheWriteInputTokens": 10},
            "metrics": {"latencyMs": 120},
        });
        let info = inspect_body(body.to_string().as_bytes()).unwrap();
        assert_eq!(info.output_chars, 3 + 5 + 3 + 7);
        assert_eq!(info.finish, Some(FinishReason::Other));
        assert_eq!(
            info.usage,
            Reported {
                tool_uses: Default::default(),
                input_tokens: Some(40),
                output_tokens: Some(7),
                cache_read_tokens: Some(20),
                cache_write_tokens: Some(10),
                cache_write_1h_tokens: Some(0),
            }
        );
    }

    #[test]
    fn an_hours_cache_writes_are_told_apart_and_never_exceed_the_writes() {
        let u = json!({"inputTokens": 1, "outputTokens": 2, "cacheWriteInputTokens": 30,
                       "cacheDetails": [{"ttl": "1h", "inputTokens": 25}, {"ttl": "5m", "inputTokens": 5}]});
        let r = usage_of(Some(&u));
        assert_eq!((r.cache_write_tokens, r.cache_write_1h_tokens), (Some(5), Some(25)));
        assert_eq!(r.input_tokens, Some(31));
        let absurd = json!({"inputTokens": 1, "cacheWriteInputTokens": 3,
                            "cacheDetails": [{"ttl": "1h", "inputTokens": 99}]});
        let r = usage_of(Some(&absurd));
        assert_eq!((r.cache_write_tokens, r.cache_write_1h_tokens), (Some(0), Some(3)));
        let huge = json!({"inputTokens": u64::MAX, "cacheReadInputTokens": 5});
        assert_eq!(usage_of(Some(&huge)).input_tokens, Some(u64::MAX));
        assert_eq!(usage_of(Some(&json!({"outputTokens": 4}))).input_tokens, None);
    }

    #[test]
    fn stop_reasons_and_empty_or_broken_answers() {
        assert_eq!(finish_reason("end_turn"), FinishReason::Natural);
        assert_eq!(finish_reason("max_tokens"), FinishReason::Limit);
        assert_eq!(finish_reason("stop_sequence"), FinishReason::StopSequence);
        assert_eq!(finish_reason("content_filtered"), FinishReason::Filtered);
        assert_eq!(finish_reason("guardrail_intervened"), FinishReason::Filtered);
        assert_eq!(finish_reason("tool_use"), FinishReason::Other);
        assert!(inspect_body(b"{").is_err());
        assert!(inspect_body(br#"{"stopReason":"end_turn"}"#).is_err());
        let error = inspect_body(br#"{"error":{"type":"rate_limit_error","message":"slow"}}"#).unwrap_err();
        assert_eq!(error.class, FailureClass::RateLimited);
    }
}
