//! Bedrock Converse answers in translation (SPEC §20): ConverseStream events and Converse bodies
//! read into neutral events. No client speaks Converse, so there is no writer.
//!
//! A stream (its event-stream frames decoded by `providers::bedrock::converse_stream`, each an event named by
//! its `:event-type` with the frame's JSON payload) is `messageStart`, then blocks by
//! `contentBlockIndex` — `contentBlockStart` (a tool call's `toolUseId` and `name`; text blocks
//! have none), `contentBlockDelta` (`text`, `toolUse.input` fragments, `reasoningContent.text`),
//! `contentBlockStop` — then `messageStop` (`stopReason`) and `metadata` (`usage`, `metrics`),
//! the last event: the answer ends there. An exception frame arrives as an `error` event whose
//! payload the classifier reads as the exception's class.

use serde_json::Value;

use crate::classify::Verdict;
use crate::dialects::converse::{finish_reason, usage_of};
use crate::dialects::neutral::answer::{
    index_at, text_at, Answer, AnswerReader, Choice, Event, Part, Tokens, UpstreamError,
};

/// Reads a Converse upstream's events.
#[derive(Debug, Default)]
pub(crate) struct Reader {
    /// `messageStop` was read: the `metadata` after it ends the answer.
    stopped: bool,
}

impl AnswerReader for Reader {
    fn read(&mut self, v: &Value, kind: &str, out: &mut Vec<Event>) {
        let block = index_at(v, "/contentBlockIndex");
        match kind {
            "error" => out.push(Event::Error(UpstreamError::from_payload(v))),
            "contentBlockStart" => {
                if let (Some(call), Some(tool)) = (block, v.pointer("/start/toolUse")) {
                    out.push(Event::ToolStart {
                        choice: 0,
                        call,
                        id: text_at(tool, "/toolUseId").unwrap_or_default().to_string(),
                        name: text_at(tool, "/name").unwrap_or_default().to_string(),
                    });
                }
            }
            "contentBlockDelta" => {
                let delta = v.get("delta").unwrap_or(&Value::Null);
                if let Some(text) = text_at(delta, "/text") {
                    out.push(Event::Text {
                        choice: 0,
                        text: text.to_string(),
                    });
                }
                if let Some(text) = text_at(delta, "/reasoningContent/text") {
                    out.push(Event::Reasoning {
                        choice: 0,
                        text: text.to_string(),
                    });
                }
                if let (Some(call), Some(fragment)) = (block, text_at(delta, "/toolUse/input")) {
                    out.push(Event::ToolArgs {
                        choice: 0,
                        call,
                        fragment: fragment.to_string(),
                    });
                }
            }
            "messageStop" => {
                let reason = v.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                out.push(Event::Finish {
                    choice: 0,
                    reason: finish_reason(reason),
                });
                self.stopped = true;
            }
            "metadata" => {
                if v.get("usage").is_some_and(Value::is_object) {
                    out.push(Event::Usage(Tokens {
                        counts: usage_of(v.get("usage")),
                        reasoning: None,
                    }));
                }
                if self.stopped {
                    out.push(Event::End);
                }
            }
            _ => {} // messageStart, contentBlockStop, unknown events
        }
    }
}

/// A content block as a part: text, reasoning text, a tool use; `None` for empty or other blocks.
fn block_part(b: &Value) -> Option<Part> {
    if let Some(text) = text_at(b, "/text") {
        return Some(Part::Text(text.to_string()));
    }
    if let Some(text) = text_at(b, "/reasoningContent/reasoningText/text") {
        return Some(Part::Reasoning(text.to_string()));
    }
    let tool = b.get("toolUse")?;
    Some(Part::Call {
        id: text_at(tool, "/toolUseId").unwrap_or_default().to_string(),
        name: text_at(tool, "/name").unwrap_or_default().to_string(),
        arguments: match tool.get("input") {
            Some(input @ Value::Object(_)) => input.to_string(),
            _ => "{}".to_string(),
        },
    })
}

/// A whole Converse answer: its message's blocks, stop reason and usage.
pub(crate) fn read_body(v: &Value) -> Result<Answer, Verdict> {
    let blocks = v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .ok_or_else(|| Verdict::bad("response has no output message"))?;
    let choice = Choice {
        parts: blocks.iter().filter_map(block_part).collect(),
        finish: v.get("stopReason").and_then(Value::as_str).map(finish_reason),
    };
    Ok(Answer {
        choices: vec![choice],
        usage: Tokens {
            counts: usage_of(v.get("usage")),
            reasoning: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::api::Api;
    use crate::classify::{classify_error_payload, FailureClass};
    use crate::dialects::neutral::answer::{body, AnswerContext, StreamTranslator};
    use crate::dialects::{chat, gemini, messages, responses, EventInfo, FinishReason, Reported};
    use crate::sse::SseEvent;

    const CLIENTS: [Api; 4] = [Api::Chat, Api::Messages, Api::Responses, Api::Gemini];

    fn ev(kind: &str, data: Value) -> SseEvent {
        let data = data.to_string();
        SseEvent {
            raw: format!("event: {kind}\ndata: {data}\n\n").into_bytes(),
            event: Some(kind.to_string()),
            data,
            has_data: true,
            oversize: false,
        }
    }

    fn inspect(client: Api, e: &SseEvent) -> EventInfo {
        match client {
            Api::Chat | Api::Converse => chat::inspect_event(e),
            Api::Messages => messages::inspect_event(e),
            Api::Responses => responses::inspect_event(e),
            Api::Gemini => gemini::inspect_event(e),
        }
    }

    fn ctx() -> AnswerContext {
        AnswerContext {
            id: "gen1".into(),
            model: "claude".into(),
            created: 1,
            choices: 1,
            ..AnswerContext::default()
        }
    }

    /// Text, a tool call in two fragments, the stop, then usage with cache reads and writes.
    fn stream() -> Vec<SseEvent> {
        vec![
            ev("messageStart", json!({"role": "assistant"})),
            ev(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "hmm"}}}),
            ),
            ev(
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "s"}}}),
            ),
            ev("contentBlockStop", json!({"contentBlockIndex": 0})),
            ev(
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"text": "Hello"}}),
            ),
            ev("contentBlockStop", json!({"contentBlockIndex": 1})),
            ev(
                "contentBlockStart",
                json!({"contentBlockIndex": 2, "start": {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather"}}}),
            ),
            ev(
                "contentBlockDelta",
                json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "{\"city\":"}}}),
            ),
            ev(
                "contentBlockDelta",
                json!({"contentBlockIndex": 2, "delta": {"toolUse": {"input": "\"Paris\"}"}}}),
            ),
            ev("contentBlockStop", json!({"contentBlockIndex": 2})),
            ev("messageStop", json!({"stopReason": "tool_use"})),
            ev(
                "metadata",
                json!({"usage": {"inputTokens": 10, "outputTokens": 20, "totalTokens": 50,
                                 "cacheReadInputTokens": 15, "cacheWriteInputTokens": 5},
                       "metrics": {"latencyMs": 300}}),
            ),
        ]
    }

    fn translate(client: Api, events: &[SseEvent]) -> (Vec<SseEvent>, StreamTranslator) {
        let mut t = StreamTranslator::new(Api::Converse, client, ctx());
        let mut out = Vec::new();
        for e in events {
            out.extend(t.on_event(e));
        }
        out.extend(t.on_end());
        (out, t)
    }

    #[test]
    fn a_stream_reaches_every_client_with_its_text_call_finish_and_usage() {
        for client in CLIENTS {
            let (out, t) = translate(client, &stream());
            let infos: Vec<EventInfo> = out.iter().map(|e| inspect(client, e)).collect();
            let text: String = out.iter().map(|e| e.data.clone()).collect();
            assert!(text.contains("Hello"), "{client:?}: {text}");
            assert!(
                text.contains("get_weather") && text.contains("tooluse_1"),
                "{client:?}: {text}"
            );
            assert!(infos.iter().any(|i| i.content), "{client:?}");
            assert!(infos.iter().any(|i| i.finished), "{client:?}");
            assert!(infos.iter().all(|i| !i.malformed && i.error.is_none()), "{client:?}");
            if client != Api::Gemini {
                assert!(infos.iter().any(|i| i.done), "{client:?}: the answer ends");
            }
            // The charge counts every input token, cache reads and writes included (SPEC §17).
            assert_eq!(
                t.usage(),
                Reported {
                    tool_uses: Default::default(),
                    input_tokens: Some(30),
                    output_tokens: Some(20),
                    cache_read_tokens: Some(15),
                    cache_write_tokens: Some(5),
                    cache_write_1h_tokens: Some(0),
                },
                "{client:?}"
            );
            let mut seen = Reported::default();
            infos.iter().for_each(|i| seen.update(i.usage));
            assert_eq!(seen.output_tokens, Some(20), "{client:?}");
            assert_eq!(seen.cache_read_tokens, Some(15), "{client:?}");
        }
        let (out, _) = translate(Api::Chat, &stream());
        let finish = out.iter().find_map(|e| {
            let v: Value = serde_json::from_str(&e.data).ok()?;
            v.pointer("/choices/0/finish_reason")?.as_str().map(str::to_string)
        });
        assert_eq!(finish.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn a_stream_without_its_metadata_ends_at_the_close_and_one_cut_before_the_stop_does_not() {
        let mut events = stream();
        events.pop();
        let (out, _) = translate(Api::Messages, &events);
        assert!(out.iter().any(|e| messages::inspect_event(e).done), "finished: closed");
        let (out, _) = translate(Api::Messages, &stream()[..6]);
        assert!(
            !out.iter().any(|e| messages::inspect_event(e).done),
            "cut: the relay ends it"
        );
    }

    #[test]
    fn an_exception_mid_stream_is_an_error_of_its_class_in_the_clients_dialect() {
        // The `error` event `providers::bedrock::converse_stream` makes of a `throttlingException` frame.
        let error = ev(
            "error",
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "Too many tokens"}}),
        );
        for client in CLIENTS {
            let mut events = stream()[..5].to_vec();
            events.push(error.clone());
            let (out, _) = translate(client, &events);
            let payload = out.iter().find_map(|e| inspect(client, e).error);
            let payload = payload.unwrap_or_else(|| panic!("{client:?}: an error event"));
            assert_eq!(
                classify_error_payload(&payload).class,
                FailureClass::RateLimited,
                "{client:?}"
            );
        }
    }

    #[test]
    fn a_whole_answer_reaches_every_client() {
        let answer = json!({
            "output": {"message": {"role": "assistant", "content": [
                {"text": "Hello"},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 10, "outputTokens": 20, "totalTokens": 30},
            "metrics": {"latencyMs": 300},
        });
        for client in CLIENTS {
            let out = body(Api::Converse, client, answer.to_string().as_bytes(), &ctx()).unwrap();
            let info = crate::dialects::inspect_body(client, &out, false).unwrap();
            assert_eq!(info.usage.input_tokens, Some(10), "{client:?}");
            assert_eq!(info.usage.output_tokens, Some(20), "{client:?}");
            let text = String::from_utf8(out).unwrap();
            assert!(text.contains("Hello") && text.contains("Paris"), "{client:?}: {text}");
        }
        let out = body(Api::Converse, Api::Chat, answer.to_string().as_bytes(), &ctx()).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(v["choices"][0]["message"]["tool_calls"][0]["id"], "tooluse_1");
        let limited = json!({"output": {"message": {"role": "assistant", "content": []}}, "stopReason": "max_tokens",
                             "usage": {"inputTokens": 1, "outputTokens": 0, "totalTokens": 1}});
        let info = crate::dialects::inspect_body(Api::Converse, limited.to_string().as_bytes(), false).unwrap();
        assert_eq!(
            info.finish,
            Some(FinishReason::Limit),
            "an empty answer its limit explains"
        );
    }
}
