//! Bedrock's ConverseStream read as events (SPEC §20): each `event` frame becomes an event named
//! by its `:event-type` (`messageStart`, `contentBlockStart`, `contentBlockDelta`,
//! `contentBlockStop`, `messageStop`, `metadata`) carrying the frame's JSON payload, parsed once
//! here and handed on as it is (`Upstream::Json`) to the Converse answer reader
//! (`dialects::converse::answer`), which turns it into the client's events. An exception or
//! error frame becomes an `error` event of its class (as an InvokeModel stream's does), so the
//! gate fails the route before content and the relay ends a committed stream with the client's
//! error frame; a frame that fails its CRC ends the stream the same way, and nothing after it is
//! read.

use serde_json::Value;

use super::eventstream::Frame;
use super::invoke_stream::{exception_event, FrameStream};
use crate::sse::{parse_json, SseEvent, Upstream};

/// A ConverseStream answer, read as its events.
pub fn stream() -> FrameStream {
    FrameStream::new(event_of)
}

/// The event a frame stands for; `None` for a frame with no event type.
fn event_of(frame: &Frame) -> Option<Upstream> {
    if let Some(error) = exception_event(frame) {
        return Some(error);
    }
    let kind = frame.event_type()?;
    Some(match parse_json(&frame.payload) {
        Some(payload @ Value::Object(_)) => Upstream::Json {
            name: kind.to_string(),
            data: payload,
        },
        // Unreadable: a malformed event, as a provider's broken SSE line would be.
        _ => Upstream::Sse(SseEvent {
            raw: b"data: {\n\n".to_vec(),
            event: Some(kind.to_string()),
            data: "{".into(),
            has_data: true,
            ..SseEvent::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::testing::{event, frame};
    use super::*;
    use crate::classify::{classify_error_payload, FailureClass};
    use crate::dialects::messages;

    /// A ConverseStream answer: text, a tool call, the stop and the usage.
    fn answer() -> Vec<(&'static str, Value)> {
        vec![
            ("messageStart", json!({"role": "assistant", "p": "abc"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hi"}, "p": "ab"}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            (
                "contentBlockStart",
                json!({"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "get"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "{\"a\":"}}}),
            ),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 1, "delta": {"toolUse": {"input": "1}"}}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 1})),
            ("messageStop", json!({"stopReason": "tool_use"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 5, "outputTokens": 9, "totalTokens": 14}, "metrics": {"latencyMs": 80}}),
            ),
        ]
    }

    fn decode(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut stream = stream();
        let mut out = Vec::new();
        for chunk in chunks {
            stream.push(chunk, &mut out);
        }
        out.into_iter()
            .map(|e| crate::dialects::ClientEvent::from(e).ev)
            .collect()
    }

    #[test]
    fn frames_become_named_events_with_their_payloads() {
        let bytes: Vec<u8> = answer().iter().flat_map(|(k, v)| event(k, v)).collect();
        let out = decode(&[&bytes]);
        let got: Vec<(String, Value)> = out
            .iter()
            .map(|e| (e.event.clone().unwrap(), serde_json::from_str(&e.data).unwrap()))
            .collect();
        let want: Vec<(String, Value)> = answer().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        assert_eq!(got, want);
        assert!(
            out[1].raw.starts_with(b"event: contentBlockDelta\ndata: {"),
            "{:?}",
            out[1]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn the_events_are_the_same_however_the_bytes_are_split(
            cuts in prop::collection::vec(any::<usize>(), 0..16),
        ) {
            let bytes: Vec<u8> = answer().iter().flat_map(|(k, v)| event(k, v)).collect();
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
            points.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for p in points {
                chunks.push(&bytes[at..p]);
                at = p;
            }
            chunks.push(&bytes[at..]);
            let whole = decode(&[&bytes]);
            prop_assert_eq!(decode(&chunks), whole);
        }
    }

    #[test]
    fn exceptions_and_broken_frames_end_the_stream_as_errors_of_their_class() {
        let cases = [
            ("throttlingException", FailureClass::RateLimited),
            ("serviceUnavailableException", FailureClass::Overloaded),
            ("modelStreamErrorException", FailureClass::BadResponse),
            ("internalServerException", FailureClass::BadResponse),
            // A stream's error event reads as a failed answer, not as the client's fault.
            ("validationException", FailureClass::BadResponse),
        ];
        for (exception, class) in cases {
            let out = decode(&[&frame(
                &[(":exception-type", exception), (":message-type", "exception")],
                br#"{"message":"stopped"}"#,
            )]);
            let payload = messages::inspect_event(&out[0]).error.expect("an error event");
            assert_eq!(classify_error_payload(&payload).class, class, "{exception}");
        }
        let mut bad = event(
            "contentBlockDelta",
            &json!({"contentBlockIndex": 0, "delta": {"text": "x"}}),
        );
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let out = decode(&[&bad, &event("messageStop", &json!({"stopReason": "end_turn"}))]);
        assert_eq!(out.len(), 1, "nothing is read after a broken frame");
        assert!(messages::inspect_event(&out[0]).error.is_some());
        let garbled = decode(&[&frame(
            &[(":event-type", "contentBlockDelta"), (":message-type", "event")],
            b"not json",
        )]);
        assert_eq!(garbled[0].data, "{", "an unreadable payload is a malformed event");
    }
}

/// ConverseStream frames as Bedrock encodes them, for tests here and of the relay.
#[cfg(test)]
pub(crate) mod testing {
    use serde_json::Value;

    /// A frame as Bedrock encodes it (headers of string type), CRCs and all.
    pub(crate) fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        crate::providers::bedrock::eventstream::encode(headers, payload)
    }

    pub(crate) fn event(kind: &str, payload: &Value) -> Vec<u8> {
        frame(
            &[
                (":event-type", kind),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.to_string().as_bytes(),
        )
    }
}
