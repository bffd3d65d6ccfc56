//! The commit point and the after-commit rules for one upstream stream (SPEC §6, §7).
//!
//! The driver feeds every parsed SSE event to a [`Relay`] and does what the returned [`Step`] says.
//! Before commit, events are held back; the first content event commits the route and releases
//! them; an error event, a malformed event or a close before content fails the route. After
//! commit, events pass through byte for byte except an unrequested usage chunk (dropped) and
//! malformed events (dropped, counted); an error, a cut, an idle or over-long stream ends with the
//! dialect's error frame — never a silent close, never a splice from another route.

use crate::catalog::Api;
use crate::classify::{classify_error_payload, FailureClass, Verdict};
use crate::dialect::{chat, EventInfo, Usage};
use crate::sse::SseEvent;

/// Held-back events past which the route commits anyway (SPEC §6).
pub const MAX_HELD_EVENTS: usize = 64;
/// Held-back bytes past which the route commits anyway (SPEC §6).
pub const MAX_HELD_BYTES: usize = 256 * 1024;

/// What the driver does next.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Before commit: keep the event back, keep reading.
    Hold,
    /// Commit the route: send the response head, then these bytes (everything held back).
    Commit(Vec<u8>),
    /// After commit: send these bytes.
    Send(Vec<u8>),
    /// After commit: nothing to send for this event.
    Skip,
    /// Before commit: the route failed; try the next one.
    Fail(Verdict),
    /// After commit: send these last bytes and stop reading the upstream.
    End { bytes: Vec<u8>, broken: Option<String> },
}

/// What the relay needs from a dialect: what an event means, how a broken stream ends, and the
/// end-of-stream sentinel for a stream that finished without it.
#[derive(Debug)]
pub struct StreamDialect {
    pub inspect: fn(&SseEvent) -> EventInfo,
    /// (stream id, model, message) → the bytes that end a broken stream.
    pub error_frame: fn(&str, &str, &str) -> Vec<u8>,
    pub done_frame: &'static [u8],
}

/// OpenAI Chat Completions streams.
pub const CHAT: StreamDialect = StreamDialect {
    inspect: chat::inspect_event,
    error_frame: chat::error_frame,
    done_frame: chat::DONE_FRAME,
};

impl StreamDialect {
    /// The stream dialect of a client API, where it is implemented (`None`: the API is not
    /// served yet).
    pub fn of(api: Api) -> Option<&'static StreamDialect> {
        match api {
            Api::Chat => Some(&CHAT),
            Api::Messages | Api::Responses => None,
        }
    }
}

/// One attempt's stream, from the first byte to the end.
#[derive(Debug)]
pub struct Relay {
    dialect: &'static StreamDialect,
    client_wants_usage: bool,
    committed: bool,
    held: Vec<u8>,
    held_events: usize,
    usage: Option<Usage>,
    output_chars: usize,
    finished: bool,
    malformed_dropped: u32,
    id: String,
    model: String,
}

fn bad(message: &str) -> Verdict {
    Verdict {
        class: FailureClass::BadResponse,
        message: Some(message.to_string()),
        param: None,
        retry_after_ms: None,
    }
}

impl Relay {
    pub fn new(dialect: &'static StreamDialect, client_wants_usage: bool) -> Relay {
        Relay {
            dialect,
            client_wants_usage,
            committed: false,
            held: Vec::new(),
            held_events: 0,
            usage: None,
            output_chars: 0,
            finished: false,
            malformed_dropped: 0,
            id: String::new(),
            model: String::new(),
        }
    }

    pub fn committed(&self) -> bool {
        self.committed
    }

    /// Usage the upstream reported, if it did.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Characters of output relayed (the estimate's basis when usage never came).
    pub fn output_chars(&self) -> usize {
        self.output_chars
    }

    /// Malformed events dropped after commit.
    pub fn malformed_dropped(&self) -> u32 {
        self.malformed_dropped
    }

    fn error_frame(&self, message: &str) -> Vec<u8> {
        (self.dialect.error_frame)(&self.id, &self.model, message)
    }

    pub fn on_event(&mut self, ev: SseEvent) -> Step {
        let info = (self.dialect.inspect)(&ev);
        if self.id.is_empty() {
            if let Some(id) = &info.id {
                self.id = id.clone();
            }
        }
        if self.model.is_empty() {
            if let Some(m) = &info.model {
                self.model = m.clone();
            }
        }
        if let Some(u) = info.usage {
            self.usage = Some(u);
        }
        self.finished |= info.finished;
        if self.committed {
            self.after_commit(ev, info)
        } else {
            self.before_commit(ev, info)
        }
    }

    fn before_commit(&mut self, ev: SseEvent, info: EventInfo) -> Step {
        if let Some(payload) = &info.error {
            return Step::Fail(classify_error_payload(payload));
        }
        if info.malformed {
            return Step::Fail(bad("malformed event before the first content"));
        }
        if info.done {
            return Step::Fail(bad("stream ended before the first content"));
        }
        if info.usage_only && !self.client_wants_usage {
            return Step::Hold;
        }
        self.held.extend_from_slice(&ev.raw);
        self.held_events += 1;
        self.output_chars += info.output_chars;
        if info.content || self.held_events >= MAX_HELD_EVENTS || self.held.len() >= MAX_HELD_BYTES {
            self.committed = true;
            return Step::Commit(std::mem::take(&mut self.held));
        }
        Step::Hold
    }

    fn after_commit(&mut self, ev: SseEvent, info: EventInfo) -> Step {
        if let Some(payload) = &info.error {
            let message = classify_error_payload(payload)
                .message
                .unwrap_or_else(|| "The provider reported an error mid-stream.".to_string());
            return Step::End {
                bytes: self.error_frame(&message),
                broken: Some(format!("upstream error event: {message}")),
            };
        }
        if info.malformed {
            self.malformed_dropped += 1;
            return Step::Skip;
        }
        self.output_chars += info.output_chars;
        if info.done {
            return Step::End {
                bytes: ev.raw,
                broken: None,
            };
        }
        if info.usage_only && !self.client_wants_usage {
            return Step::Skip;
        }
        Step::Send(ev.raw)
    }

    /// The upstream closed its body normally.
    pub fn on_close(&mut self) -> Step {
        if !self.committed {
            return Step::Fail(bad("stream closed before the first content"));
        }
        if self.finished {
            // Finished but no sentinel: finalise at once (SPEC §7).
            return Step::End {
                bytes: self.dialect.done_frame.to_vec(),
                broken: None,
            };
        }
        self.on_broken("the provider closed the stream before it finished")
    }

    /// The stream broke: a read error (cut), the idle timeout or the stream cap. Before commit
    /// that is a failure of the route (`class`); after it, the client gets the error frame.
    pub fn on_broken_with(&mut self, class: FailureClass, reason: &str) -> Step {
        if !self.committed {
            return Step::Fail(Verdict {
                class,
                message: Some(reason.to_string()),
                param: None,
                retry_after_ms: None,
            });
        }
        Step::End {
            bytes: self.error_frame(reason),
            broken: Some(reason.to_string()),
        }
    }

    fn on_broken(&mut self, reason: &str) -> Step {
        self.on_broken_with(FailureClass::Connect, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent::from_data(data)
    }

    const ROLE: &str = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    const HI: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
    const FIN: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    const USAGE: &str = r#"{"id":"c1","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#;

    #[test]
    fn holds_until_content_then_releases_everything() {
        let mut r = Relay::new(&CHAT, false);
        let keepalive = SseEvent {
            raw: b": keep-alive\n\n".to_vec(),
            ..SseEvent::default()
        };
        assert_eq!(r.on_event(keepalive.clone()), Step::Hold);
        assert_eq!(r.on_event(ev(ROLE)), Step::Hold);
        let Step::Commit(bytes) = r.on_event(ev(HI)) else {
            panic!("content commits")
        };
        let expected = [keepalive.raw, ev(ROLE).raw, ev(HI).raw].concat();
        assert_eq!(bytes, expected);
        assert!(r.committed());
        assert_eq!(r.on_event(ev(FIN)), Step::Send(ev(FIN).raw));
        assert_eq!(
            r.on_event(ev(USAGE)),
            Step::Skip,
            "usage chunk dropped: the client did not ask"
        );
        assert_eq!(
            r.usage(),
            Some(Usage {
                input_tokens: 4,
                output_tokens: 1
            })
        );
        assert_eq!(
            r.on_event(ev("[DONE]")),
            Step::End {
                bytes: ev("[DONE]").raw,
                broken: None
            }
        );
    }

    #[test]
    fn usage_chunk_passes_when_asked() {
        let mut r = Relay::new(&CHAT, true);
        r.on_event(ev(HI));
        assert_eq!(r.on_event(ev(USAGE)), Step::Send(ev(USAGE).raw));
    }

    #[test]
    fn failures_before_commit_fall_back() {
        for bad_event in [
            ev(r#"{"error":{"message":"boom","type":"server_error"}}"#),
            ev("{oops"),
            ev("[DONE]"),
        ] {
            let mut r = Relay::new(&CHAT, false);
            r.on_event(ev(ROLE));
            assert!(matches!(r.on_event(bad_event), Step::Fail(_)));
        }
        let mut r = Relay::new(&CHAT, false);
        r.on_event(ev(ROLE));
        assert!(matches!(r.on_close(), Step::Fail(v) if v.class == FailureClass::BadResponse));
        let mut r = Relay::new(&CHAT, false);
        let overloaded = ev(r#"{"error":{"message":"The server is overloaded","type":"server_error"}}"#);
        assert!(matches!(r.on_event(overloaded), Step::Fail(v) if v.class == FailureClass::Overloaded));
    }

    #[test]
    fn after_commit_errors_end_with_the_error_frame() {
        let mut r = Relay::new(&CHAT, false);
        r.on_event(ev(ROLE));
        r.on_event(ev(HI));
        assert_eq!(r.on_event(ev("{bad")), Step::Skip, "malformed after commit is dropped");
        assert_eq!(r.malformed_dropped(), 1);
        let Step::End { bytes, broken } = r.on_event(ev(r#"{"error":{"message":"mid-stream failure"}}"#)) else {
            panic!()
        };
        assert!(broken.is_some());
        let text = String::from_utf8(bytes).unwrap();
        assert!(
            text.contains("\"finish_reason\":\"error\"")
                && text.contains("mid-stream failure")
                && text.ends_with("data: [DONE]\n\n")
        );
        assert!(text.contains("\"id\":\"c1\"") && text.contains("\"model\":\"m\""));
    }

    #[test]
    fn close_after_finish_is_finalised_and_a_cut_is_broken() {
        let mut r = Relay::new(&CHAT, false);
        r.on_event(ev(HI));
        r.on_event(ev(FIN));
        assert_eq!(
            r.on_close(),
            Step::End {
                bytes: chat::DONE_FRAME.to_vec(),
                broken: None
            }
        );
        let mut r = Relay::new(&CHAT, false);
        r.on_event(ev(HI));
        assert!(matches!(r.on_close(), Step::End { broken: Some(_), .. }));
        let mut r = Relay::new(&CHAT, false);
        r.on_event(ev(HI));
        assert!(matches!(
            r.on_broken_with(FailureClass::Timeout, "idle"),
            Step::End { broken: Some(_), .. }
        ));
    }

    #[test]
    fn commits_when_the_hold_cap_is_reached() {
        let mut r = Relay::new(&CHAT, false);
        for _ in 0..MAX_HELD_EVENTS - 1 {
            assert_eq!(r.on_event(ev(ROLE)), Step::Hold);
        }
        assert!(matches!(r.on_event(ev(ROLE)), Step::Commit(_)));
    }
}
