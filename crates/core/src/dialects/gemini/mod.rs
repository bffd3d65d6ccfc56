//! Google Gemini (`POST /v1beta/models/{model}:generateContent` and
//! `…:streamGenerateContent?alt=sse`): request validation, what each stream chunk means (content,
//! finish, usage, error, a blocked prompt), non-stream bodies, and the error chunk that ends a
//! broken stream.
//!
//! Field names are read in camelCase only: the body is respelled once, when it is parsed
//! (`gemini_names`), so no reader sees Google's other spelling.
//!
//! The model and the mode come from the path, never the body. Every stream chunk is a whole
//! `GenerateContentResponse`; there is no end sentinel — a stream is complete when a candidate gave
//! its `finishReason`. The commit point (SPEC §6) is the first chunk whose candidate has a
//! non-empty text part (thoughts included) or a `functionCall`. A prompt the provider blocked
//! (`promptFeedback.blockReason`) is a `content_policy` failure. Usage comes from `usageMetadata`:
//! input `promptTokenCount`, output `candidatesTokenCount` + `thoughtsTokenCount` (each chunk
//! carries the totals so far).

pub(crate) mod answer;
mod counting;
pub mod names;
pub(crate) mod request;

use crate::tools::ToolUses;
use serde_json::{json, Map, Value};

use super::body::{Body, Shape};
use super::neutral::answer::Answer;
use super::neutral::answer::AnswerContext;
use super::neutral::answer::AnswerReader;
use super::neutral::answer::AnswerWriter;
use super::neutral::request::Neutral;
use super::neutral::request::Setting;
use super::neutral::request::Unable;
use super::neutral::request::Writer;
use super::{count, event_json, own_fields, parse_object, BodyInfo, ClientRequest, EventInfo, FinishReason, Reported};
use super::{Action, Dialect, StreamDialect};
use super::{CHARS_PER_TOKEN, IMAGE_OUTPUT_TOKENS};
use crate::api::Api;
use crate::classify::{classify_error_payload, is_error_payload, Verdict};
use crate::error::{ApiError, ErrorShape};
use crate::sse::SseEvent;
use names as gemini_names;

/// Parses and validates a Gemini request body for `model` (from the path).
pub fn parse_request(bytes: &[u8], model: &str, stream: bool) -> Result<ClientRequest, ApiError> {
    if model.trim().is_empty() {
        return Err(ApiError::invalid(
            "The path must name a model: /v1beta/models/{model}:generateContent.",
            None,
        ));
    }
    // Every reader of the body sees each field under one name (Google takes two).
    let (mut body, respelled) = gemini_names::camel_case(parse_object(bytes)?);
    let provider = own_fields(&mut body, model)?;
    match body.shape("contents") {
        Shape::Array => {}
        Shape::EmptyArray => return Err(ApiError::invalid("`contents` must not be empty.", Some("contents"))),
        Shape::Absent => return Err(ApiError::invalid("`contents` is required.", Some("contents"))),
        _ => return Err(ApiError::invalid("`contents` must be an array.", Some("contents"))),
    }
    let config = body.small("generationConfig")?;
    let config = match &config {
        None | Some(Value::Null) => None,
        Some(Value::Object(c)) => Some(c),
        Some(_) => {
            return Err(ApiError::invalid(
                "`generationConfig` must be an object.",
                Some("generationConfig"),
            ))
        }
    };
    let count = |field: &str| -> Result<Option<u64>, ApiError> {
        match config.and_then(|c| c.get(field)) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => match v.as_u64() {
                Some(n) if n >= 1 => Ok(Some(n)),
                _ => Err(ApiError::invalid(
                    format!("`generationConfig.{field}` must be a positive integer."),
                    Some(&format!("generationConfig.{field}")),
                )),
            },
        }
    };
    let max_tokens = count("maxOutputTokens")?;
    let completions = count("candidateCount")?.unwrap_or(1);
    Ok(ClientRequest {
        max_tokens,
        completions,
        ..ClientRequest::parsed(
            Api::Gemini,
            model.to_string(),
            stream,
            provider,
            body,
            bytes.len().saturating_sub(respelled),
        )
    })
}

/// Sets `generationConfig.maxOutputTokens` (the client set none).
pub(crate) fn limit_output(body: &mut Body, max_output_tokens: u64) {
    // `generationConfig` was read (an object, or absent) when the request was parsed.
    let mut config = match body.hint("generationConfig") {
        Some(c @ Value::Object(_)) => c,
        _ => Value::Object(Map::new()),
    };
    if let Some(c) = config.as_object_mut() {
        c.insert("maxOutputTokens".into(), Value::from(max_output_tokens));
    }
    body.set("generationConfig", &config);
}

/// Output characters in a response's candidates: text parts (thoughts too) and function calls.
fn output_chars(v: &Value) -> usize {
    let Some(candidates) = v.get("candidates").and_then(Value::as_array) else {
        return 0;
    };
    candidates
        .iter()
        .filter_map(|c| c.pointer("/content/parts").and_then(Value::as_array))
        .flatten()
        .map(|p| {
            let text = p.get("text").and_then(Value::as_str).map_or(0, |t| t.chars().count());
            // A call's name and arguments (the estimate's basis: what the model generated).
            let call = p.get("functionCall").map_or(0, |f| {
                f.get("name").and_then(Value::as_str).map_or(0, str::len)
                    + f.get("args").map_or(0, |a| a.to_string().len())
            });
            // Generated media (an image, audio) is output even without text (SPEC §7, §17).
            let media = p.get("inlineData").filter(|d| d.is_object()).map_or(0, |d| {
                let image = d
                    .get("mimeType")
                    .and_then(Value::as_str)
                    .is_some_and(|m| m.starts_with("image/"));
                CHARS_PER_TOKEN * if image { IMAGE_OUTPUT_TOKENS } else { 1 }
            });
            text + call + media
        })
        .sum()
}

/// How many candidates of a chunk finished.
fn finished(v: &Value) -> u32 {
    v.get("candidates").and_then(Value::as_array).map_or(0, |cs| {
        cs.iter()
            .filter(|c| {
                c.get("finishReason")
                    .and_then(Value::as_str)
                    .is_some_and(|r| r != "FINISH_REASON_UNSPECIFIED")
            })
            .count() as u32
    })
}

/// Why the first candidate that finished did: `STOP`, the output limit, or one of Google's
/// filters.
fn finish(v: &Value) -> Option<FinishReason> {
    let reason = v
        .get("candidates")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|c| c.get("finishReason").and_then(Value::as_str))?;
    Some(finish_reason(reason))
}

/// One candidate's `finishReason`: `STOP`, the output limit, or one of Google's filters.
pub(crate) fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "STOP" => FinishReason::Natural,
        "MAX_TOKENS" => FinishReason::Limit,
        "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII" | "IMAGE_SAFETY" => {
            FinishReason::Filtered
        }
        _ => FinishReason::Other,
    }
}

/// A chunk's `usageMetadata` (SPEC §17): input is `promptTokenCount` (of which
/// `cachedContentTokenCount` came from the cache) plus `toolUsePromptTokenCount`; output is
/// `candidatesTokenCount` plus `thoughtsTokenCount` (candidates exclude thoughts). Sums saturate.
pub(crate) fn usage(v: &Value) -> Reported {
    let web_searches = web_searches(v);
    let Some(u) = v.get("usageMetadata") else {
        return Reported {
            tool_uses: ToolUses::web_searches(web_searches),
            ..Reported::default()
        };
    };
    let n = |f: &str| count(Some(u), f);
    let sum = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    let input = sum(n("/promptTokenCount"), n("/toolUsePromptTokenCount"));
    Reported {
        input_tokens: input,
        output_tokens: sum(n("/candidatesTokenCount"), n("/thoughtsTokenCount")),
        cache_read_tokens: input.and(n("/cachedContentTokenCount")),
        tool_uses: ToolUses::web_searches(web_searches),
        ..Reported::default()
    }
}

/// The Google searches a chunk reports (SPEC §21): its candidates' `groundingMetadata.webSearchQueries`,
/// the queries grounding with Google Search ran so far.
fn web_searches(v: &Value) -> Option<u32> {
    let queries = v
        .get("candidates")
        .and_then(Value::as_array)?
        .iter()
        .filter_map(|c| {
            c.pointer("/groundingMetadata/webSearchQueries")
                .and_then(Value::as_array)
        })
        .map(|q| u32::try_from(q.len()).unwrap_or(u32::MAX))
        .reduce(u32::saturating_add)?;
    Some(queries)
}

/// A prompt the provider refused to answer, as an error payload the classifier reads as
/// `content_policy`.
pub(crate) fn blocked(v: &Value) -> Option<Value> {
    let reason = v.pointer("/promptFeedback/blockReason").and_then(Value::as_str)?;
    Some(json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                          "message": format!("content_policy: the provider blocked the prompt ({reason})")}}))
}

/// What one Gemini stream chunk means to the gateway (its data parsed here).
pub fn inspect_event(ev: &SseEvent) -> EventInfo {
    inspect(ev, ev.json().as_ref())
}

/// What one Gemini stream chunk means to the gateway, its data parsed already (`json`; `None`: not JSON).
pub fn inspect(ev: &SseEvent, json: Option<&Value>) -> EventInfo {
    let v = match event_json(ev, json) {
        Ok((v, _)) => v,
        Err(why) => return why.into(), // a comment or keep-alive, or malformed
    };
    if is_error_payload(v) {
        return EventInfo {
            error: Some(v.clone()),
            ..EventInfo::default()
        };
    }
    if let Some(error) = blocked(v) {
        return EventInfo {
            error: Some(error),
            ..EventInfo::default()
        };
    }
    let chars = output_chars(v);
    let finishes = finished(v);
    EventInfo {
        content: chars > 0,
        output_chars: chars,
        finished: finishes > 0,
        finishes,
        finish: finish(v),
        done: false,
        usage: usage(v),
        usage_only: false,
        error: None,
        malformed: false,
        keepalive: false,
        id: v.get("responseId").and_then(Value::as_str).map(str::to_string),
        model: v.get("modelVersion").and_then(Value::as_str).map(str::to_string),
    }
}

/// A whole non-stream Gemini body: its usage and output size if it is an answer with output, else
/// why not.
pub fn inspect_body(body: &[u8]) -> Result<BodyInfo, Verdict> {
    let v: Value = serde_json::from_slice(body).map_err(|_| Verdict::bad("unparseable response body"))?;
    if is_error_payload(&v) {
        return Err(classify_error_payload(&v));
    }
    if let Some(error) = blocked(&v) {
        return Err(classify_error_payload(&error));
    }
    Ok(BodyInfo {
        usage: usage(&v),
        output_chars: output_chars(&v),
        finish: finish(&v),
        id: None,
    })
}

/// The error chunk that ends a broken stream (SPEC §7): what Google sends, `UNAVAILABLE`.
pub fn error_frame(_id: &str, _model: &str, message: &str) -> Vec<u8> {
    let data = json!({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}});
    format!("data: {data}\n\n").into_bytes()
}

/// Gemini streams have no end sentinel: a finished stream simply closes.
pub const DONE_FRAME: &[u8] = b"";

/// Google Gemini streams (`alt=sse`).
pub const STREAM: StreamDialect = StreamDialect {
    inspect,
    error_frame,
    done_frame: DONE_FRAME,
    pass_error_events: true,
};

/// The Gemini dialect ([`super::of`]).
pub(crate) struct Gemini;

impl Dialect for Gemini {
    folder_parts!();
    fn counting(&self) -> Option<&'static super::Counting> {
        Some(&counting::COUNTING)
    }
    fn name(&self) -> &'static str {
        "Gemini"
    }
    fn parse_request(&self, bytes: &[u8], path: Option<(&str, bool)>) -> Result<ClientRequest, ApiError> {
        let (model, stream) = path.ok_or_else(|| ApiError::invalid("The model belongs in the path.", None))?;
        parse_request(bytes, model, stream)
    }
    fn error_shape(&self) -> ErrorShape {
        ErrorShape::Gemini
    }
    fn limit_output(&self, body: &mut Body, max_output_tokens: u64) {
        limit_output(body, max_output_tokens);
    }
    fn conversation_field(&self) -> &'static str {
        "contents"
    }
    /// The model is named in the path, not in the body.
    fn one_turn(&self, _model: &str, text: &str, max_output_tokens: u64) -> Option<Value> {
        Some(json!({"contents": [{"role": "user", "parts": [{"text": text}]}],
                    "generationConfig": {"maxOutputTokens": max_output_tokens}}))
    }
    /// `/v1beta/models/{model}:{method}`: the path's part after `models/` is handed on (the
    /// model, and for a generation its method); a count's is the model alone.
    fn endpoint<'a>(&self, path: &'a str) -> Option<(Action, Option<&'a str>)> {
        let rest = path.strip_prefix("/v1beta/models/")?;
        Some(match rest.strip_suffix(":countTokens") {
            Some(model) => (Action::Count, Some(model)),
            None => (Action::Generate, Some(rest)),
        })
    }
    fn setting_name(&self, setting: Setting) -> &'static str {
        match setting {
            Setting::Stop => "generationConfig.stopSequences",
            Setting::Temperature => "generationConfig.temperature",
            Setting::TopP => "generationConfig.topP",
            Setting::TopK => "generationConfig.topK",
            Setting::Candidates => "generationConfig.candidateCount",
            Setting::Seed => "generationConfig.seed",
            Setting::Presence => "generationConfig.presencePenalty",
            Setting::Frequency => "generationConfig.frequencyPenalty",
            Setting::Format => "generationConfig",
            Setting::Thinking => "generationConfig.thinkingConfig",
            Setting::ShowReasoning => "generationConfig.thinkingConfig.includeThoughts",
            Setting::ToolChoice | Setting::Parallel => "toolConfig",
            Setting::User => "user",
            Setting::Verbosity => "verbosity",
        }
    }
    fn many_choices(&self) -> bool {
        true
    }
    fn write_request(&self, w: &mut Writer, _upstream_model: &str) -> Result<Vec<u8>, Unable> {
        request::write(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;

    fn chunk(data: Value) -> SseEvent {
        SseEvent::from_data(&data.to_string())
    }

    fn text(t: &str) -> Value {
        json!({"candidates": [{"content": {"role": "model", "parts": [{"text": t}]}, "index": 0}],
               "modelVersion": "gemini-x", "responseId": "r1"})
    }

    #[test]
    fn the_model_and_mode_come_from_the_path_and_the_limit_from_generation_config() {
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                          "generationConfig": {"maxOutputTokens": 64, "candidateCount": 2},
                          "provider": {"only": ["r0"]}});
        let r = parse_request(body.to_string().as_bytes(), "gem", true).unwrap();
        assert_eq!(
            (r.api, r.model.as_str(), r.stream, r.max_tokens, r.completions),
            (Api::Gemini, "gem", true, Some(64), 2)
        );
        assert_eq!(r.provider.only, Some(vec!["r0".to_string()]));
        let up: Value = serde_json::from_slice(&r.upstream_body("upstream-model")).unwrap();
        assert!(up.get("model").is_none() && up.get("provider").is_none(), "{up}");
        assert_eq!(
            r.api.upstream_url("https://g/v1beta/", "u-1", r.stream),
            "https://g/v1beta/models/u-1:streamGenerateContent?alt=sse"
        );
        let mut plain = parse_request(br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#, "gem", false).unwrap();
        assert_eq!(
            plain.api.upstream_url("https://g/v1beta", "u", plain.stream),
            "https://g/v1beta/models/u:generateContent"
        );
        assert_eq!(plain.limit_output(300), 300);
        let up: Value = serde_json::from_slice(&plain.upstream_body("u")).unwrap();
        assert_eq!(up["generationConfig"]["maxOutputTokens"], 300);
        let param = |body: &str| match parse_request(body.as_bytes(), "gem", false) {
            Err(ApiError::InvalidRequest { param, .. }) => param,
            other => panic!("expected a 400, got {other:?}"),
        };
        assert_eq!(param(r#"{}"#).as_deref(), Some("contents"));
        assert_eq!(param(r#"{"contents":[]}"#).as_deref(), Some("contents"));
        assert_eq!(
            param(r#"{"contents":[{}],"generationConfig":{"maxOutputTokens":0}}"#).as_deref(),
            Some("generationConfig.maxOutputTokens")
        );
        assert!(parse_request(br#"{"contents":[{}]}"#, " ", false).is_err());
    }

    #[test]
    fn the_commit_point_is_the_first_chunk_with_text_a_thought_or_a_call() {
        assert!(!inspect_event(&chunk(text(""))).content);
        let info = inspect_event(&chunk(text("Hi")));
        assert!(info.content);
        assert_eq!(
            (info.id.as_deref(), info.model.as_deref()),
            (Some("r1"), Some("gemini-x"))
        );
        let thought = json!({"candidates": [{"content": {"parts": [{"text": "hmm", "thought": true}]}}]});
        assert!(inspect_event(&chunk(thought)).content);
        let call = json!({"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": {}}}]}}]});
        assert!(inspect_event(&chunk(call)).content);
        let meta_only = json!({"usageMetadata": {"promptTokenCount": 4}});
        assert!(!inspect_event(&chunk(meta_only)).content);
    }

    #[test]
    fn finish_usage_errors_and_blocked_prompts() {
        let last = json!({"candidates": [{"content": {"parts": [{"text": "."}]}, "finishReason": "STOP"}],
                          "usageMetadata": {"promptTokenCount": 7, "candidatesTokenCount": 5, "thoughtsTokenCount": 3}});
        let info = inspect_event(&chunk(last));
        assert!(info.finished && !info.done);
        assert_eq!(
            info.usage,
            Reported {
                input_tokens: Some(7),
                output_tokens: Some(8),
                ..Reported::default()
            }
        );
        // SPEC §17: cached content is part of the prompt, tool-use prompts are input too, and
        // counts near u64::MAX saturate instead of overflowing.
        let cached = json!({"candidates": [{"content": {"parts": [{"text": "."}]}, "finishReason": "STOP"}],
                            "usageMetadata": {"promptTokenCount": 100, "cachedContentTokenCount": 60,
                                              "toolUsePromptTokenCount": 20, "candidatesTokenCount": u64::MAX,
                                              "thoughtsTokenCount": 3}});
        assert_eq!(
            inspect_event(&chunk(cached)).usage,
            Reported {
                input_tokens: Some(120),
                output_tokens: Some(u64::MAX),
                cache_read_tokens: Some(60),
                ..Reported::default()
            }
        );
        let error =
            json!({"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}});
        let info = inspect_event(&chunk(error));
        assert_eq!(
            classify_error_payload(info.error.as_ref().unwrap()).class,
            FailureClass::RateLimited
        );
        let blocked = json!({"promptFeedback": {"blockReason": "SAFETY"}});
        let info = inspect_event(&chunk(blocked.clone()));
        assert_eq!(
            classify_error_payload(info.error.as_ref().unwrap()).class,
            FailureClass::ContentPolicy
        );
        assert_eq!(
            inspect_body(blocked.to_string().as_bytes()).unwrap_err().class,
            FailureClass::ContentPolicy
        );
        assert!(inspect_event(&SseEvent::from_data("{oops")).malformed);
    }

    #[test]
    fn non_stream_bodies_need_output() {
        let ok = json!({"candidates": [{"content": {"parts": [{"text": "Hello"}]}, "finishReason": "STOP"}],
                        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}});
        let info = inspect_body(ok.to_string().as_bytes()).unwrap();
        assert_eq!(
            (info.usage.input_tokens, info.usage.output_tokens, info.output_chars),
            (Some(3), Some(2), 5)
        );
        let empty = json!({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "STOP"}]});
        assert_eq!(
            super::super::inspect_body(Api::Gemini, empty.to_string().as_bytes(), false)
                .unwrap_err()
                .class,
            FailureClass::BadResponse
        );
        let limited = json!({"candidates": [{"content": {"parts": [{"text": ""}]}, "finishReason": "MAX_TOKENS"}]});
        assert!(super::super::inspect_body(Api::Gemini, limited.to_string().as_bytes(), false).is_ok());
        let image = json!({"candidates": [{"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": "iVBOR"}}]}, "finishReason": "STOP"}]});
        assert!(
            super::super::inspect_body(Api::Gemini, image.to_string().as_bytes(), false).is_ok(),
            "an image is output"
        );
        let counted = inspect_body(image.to_string().as_bytes()).unwrap().output_chars;
        assert_eq!(
            counted,
            IMAGE_OUTPUT_TOKENS * CHARS_PER_TOKEN,
            "an image counts as Google bills it"
        );
        let overloaded =
            json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}});
        assert_eq!(
            inspect_body(overloaded.to_string().as_bytes()).unwrap_err().class,
            FailureClass::Overloaded
        );
    }

    #[test]
    fn the_error_frame_is_a_gemini_error_chunk() {
        let text = String::from_utf8(error_frame("r", "m", "cut")).unwrap();
        assert!(text.starts_with("data: ") && text.ends_with("\n\n"));
        let data = crate::dialects::frame_data(text.as_bytes());
        assert_eq!(
            data,
            json!({"error": {"code": 502, "message": "cut", "status": "UNAVAILABLE"}})
        );
    }
}
