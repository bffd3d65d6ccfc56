//! Bedrock's InvokeModelWithResponseStream read as the Anthropic stream it carries (SPEC §20): each
//! `chunk` frame holds one Messages event, base64 in `{"bytes": …}`, and becomes that event —
//! its JSON, parsed once here and handed on as it is ([`Upstream::Json`]): written as the SSE
//! event the Anthropic API would have sent only for a Messages client, read as it is by the
//! translator for the others. An exception or error frame becomes the Anthropic `error` event of
//! its class (so the gate fails the route before content and the relay ends a committed stream
//! with the client's error, as for any provider); a frame that fails its CRC ends the stream the
//! same way.

use base64::Engine;
use serde_json::{json, Value};

use super::errors::classify_frame;
use super::eventstream::{Decoder, Frame};
use crate::classify::FailureClass;
use crate::sse::{parse_json, SseEvent, Upstream};

/// One Bedrock response stream, decoded as it arrives: each frame read into its event by the
/// API's reader ([`FrameStream::invoke`]: InvokeModel's chunks; `converse_stream::stream`:
/// ConverseStream's events).
#[derive(Debug)]
pub struct FrameStream {
    decoder: Decoder,
    frames: Vec<Frame>,
    read: fn(&Frame) -> Option<Upstream>,
    /// A frame failed: nothing after it can be read.
    failed: bool,
}

impl FrameStream {
    /// A stream whose frames `read` turns into events.
    pub fn new(read: fn(&Frame) -> Option<Upstream>) -> FrameStream {
        FrameStream {
            decoder: Decoder::default(),
            frames: Vec::new(),
            read,
            failed: false,
        }
    }

    /// An InvokeModelWithResponseStream answer, read as the Anthropic events it carries.
    pub fn invoke() -> FrameStream {
        FrameStream::new(event_of)
    }

    /// The events of the frames `bytes` completes, appended to `out`.
    pub fn push(&mut self, bytes: &[u8], out: &mut Vec<Upstream>) {
        if self.failed {
            return;
        }
        let decoded = self.decoder.push(bytes, &mut self.frames);
        out.extend(self.frames.drain(..).filter_map(|f| (self.read)(&f)));
        if let Err(e) = decoded {
            self.failed = true;
            out.push(error_event(FailureClass::BadResponse, &e.to_string()));
        }
    }
}

/// The Anthropic event a frame stands for; `None` for an event of no meaning to the answer.
fn event_of(frame: &Frame) -> Option<Upstream> {
    if let Some(error) = exception_event(frame) {
        return Some(error);
    }
    if frame.event_type() != Some("chunk") {
        return None;
    }
    let inner = parse_json(&frame.payload)
        .and_then(|v| {
            base64::engine::general_purpose::STANDARD
                .decode(v.get("bytes")?.as_str()?)
                .ok()
        })
        .and_then(|bytes| parse_json(&bytes));
    Some(match inner {
        Some(event) => Upstream::Json {
            name: event
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("message")
                .to_string(),
            data: event,
        },
        // Unreadable: a malformed event, as a provider's broken SSE line would be.
        None => Upstream::Sse(SseEvent {
            raw: b"data: {\n\n".to_vec(),
            data: "{".into(),
            has_data: true,
            ..SseEvent::default()
        }),
    })
}

/// The Anthropic `error` event whose type the classifier reads as `class` (a Converse stream's
/// exceptions become the same event).
pub(super) fn error_event(class: FailureClass, message: &str) -> Upstream {
    let kind = match class {
        FailureClass::Overloaded => "overloaded_error",
        FailureClass::RateLimited => "rate_limit_error",
        FailureClass::Account => "permission_error",
        FailureClass::ModelUnavailable => "not_found_error",
        FailureClass::InvalidRequest | FailureClass::ContextLength => "invalid_request_error",
        _ => "api_error",
    };
    Upstream::Json {
        name: "error".into(),
        data: json!({"type": "error", "error": {"type": kind, "message": message}}),
    }
}

/// The `error` event of a frame that is not an event (an exception, an error), by its class;
/// `None` for an event.
pub(super) fn exception_event(frame: &Frame) -> Option<Upstream> {
    let verdict = classify_frame(frame)?;
    let message = verdict
        .message
        .unwrap_or_else(|| "The provider's stream reported an error.".into());
    Some(error_event(verdict.class, &message))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify_error_payload;
    use crate::dialects::messages;

    /// A frame as Bedrock encodes it (headers of string type), CRCs and all.
    fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
        crate::providers::bedrock::eventstream::encode(headers, payload)
    }

    fn chunk(event: &Value) -> Vec<u8> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(event.to_string());
        let payload = json!({"bytes": b64, "p": "abcdef"}).to_string();
        frame(
            &[
                (":event-type", "chunk"),
                (":content-type", "application/json"),
                (":message-type", "event"),
            ],
            payload.as_bytes(),
        )
    }

    /// The events as a Messages client gets them.
    fn sse(out: &[Upstream]) -> Vec<SseEvent> {
        out.iter()
            .map(|e| crate::dialects::ClientEvent::from(e.clone()).ev)
            .collect()
    }

    #[test]
    fn chunks_become_the_anthropic_events_they_carry_however_the_bytes_are_split() {
        let events = [
            json!({"type": "message_start", "message": {"id": "msg_1", "role": "assistant", "content": [],
                   "model": "claude", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "message_stop"}),
        ];
        let bytes: Vec<u8> = events.iter().flat_map(chunk).collect();
        for step in [1, 7, bytes.len()] {
            let mut stream = FrameStream::invoke();
            let mut out = Vec::new();
            for piece in bytes.chunks(step) {
                stream.push(piece, &mut out);
            }
            let out = sse(&out);
            let names: Vec<_> = out.iter().map(|e| e.event.clone().unwrap()).collect();
            assert_eq!(
                names,
                [
                    "message_start",
                    "content_block_start",
                    "content_block_delta",
                    "message_stop"
                ]
            );
            let delta = messages::inspect_event(&out[2]);
            assert!(delta.content && delta.output_chars == 2, "{delta:?}");
            assert_eq!(messages::inspect_event(&out[0]).usage.input_tokens, Some(12));
            assert!(messages::inspect_event(&out[3]).done);
        }
    }

    #[test]
    fn exceptions_and_broken_frames_end_the_stream_as_errors_of_their_class() {
        let cases = [
            ("throttlingException", FailureClass::RateLimited),
            ("serviceUnavailableException", FailureClass::Overloaded),
            // A server error inside a stream is what any provider's error event is (SPEC §4).
            ("modelStreamErrorException", FailureClass::BadResponse),
        ];
        for (exception, class) in cases {
            let mut out = Vec::new();
            FrameStream::invoke().push(
                &frame(
                    &[(":exception-type", exception), (":message-type", "exception")],
                    br#"{"message":"slow down"}"#,
                ),
                &mut out,
            );
            let info = messages::inspect_event(&sse(&out)[0]);
            let payload = info.error.expect("an error event");
            assert_eq!(classify_error_payload(&payload).class, class, "{exception}");
        }
        let mut bad = chunk(&json!({"type": "ping"}));
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let mut stream = FrameStream::invoke();
        let mut out = Vec::new();
        stream.push(&bad, &mut out);
        stream.push(&chunk(&json!({"type": "message_stop"})), &mut out);
        assert_eq!(out.len(), 1, "nothing is read after a broken frame");
        assert!(messages::inspect_event(&sse(&out)[0]).error.is_some());
    }
}
