//! The commit point and the after-commit rules for one upstream stream (SPEC §6, §7), as two
//! types for the two phases.
//!
//! Before commit a [`Gate`] takes every event of the client's stream ([`ClientEvent`]: its bytes,
//! and its JSON when it was read or written before — never parsed twice) and says [`Before`]: hold it back, commit
//! the route (releasing everything held), or fail the route (an error event, a malformed event, the
//! end of the stream before content). On commit the driver turns the gate into a [`Relay`], which
//! says [`After`] for each event: pass it through byte for byte, skip it (an unrequested usage
//! chunk, a malformed event — counted), or end the stream; an error, a cut, an idle or over-long
//! stream ends with the dialect's error frame — never a silent close, never a splice from another
//! route.

use crate::api::Api;
use crate::classify::{classify_error_payload, Verdict};
use crate::dialects::neutral::answer::StreamTranslator;
use crate::dialects::{add_cost, ClientEvent, Data, EventInfo, Reported, StreamDialect};
use crate::generation::{Delivery, Tariff};
use crate::money::micros_to_usd;
use crate::providers::bedrock::converse_stream;
use crate::providers::bedrock::invoke_stream::FrameStream;
use crate::redact::Redactor;
use crate::sse::{SseEvent, SseParser, Upstream};

/// Held-back events past which the route commits anyway (SPEC §6).
pub const MAX_HELD_EVENTS: usize = 64;
/// Held-back bytes past which the route commits anyway (SPEC §6).
pub const MAX_HELD_BYTES: usize = 256 * 1024;

/// What to do with an event before commit.
#[derive(Debug, PartialEq)]
pub enum Before {
    /// Keep it back, keep reading.
    Hold,
    /// Commit the route: send the response head, then these bytes (everything held back).
    Commit(Vec<u8>),
    /// The route failed; try the next one.
    Fail(Verdict),
}

/// What to do with an event after commit.
#[derive(Debug, PartialEq)]
pub enum After {
    /// Send these bytes.
    Send(Vec<u8>),
    /// Nothing to send for this event.
    Skip,
    /// Send these last bytes and stop reading the upstream; `broken` says why it ended badly.
    End { bytes: Vec<u8>, broken: Option<String> },
}

/// Why a committed stream stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Break {
    /// The upstream connection broke.
    Cut,
    /// No data for `idle_timeout_ms`.
    Idle,
    /// The stream ran past `stream_cap_ms`.
    Cap,
}

impl Break {
    /// The message the client's error frame carries.
    pub fn message(self) -> &'static str {
        match self {
            Break::Cut => "The provider's connection broke mid-stream.",
            Break::Idle => "The provider stopped sending data.",
            Break::Cap => "The stream exceeded the maximum duration.",
        }
    }
}

/// How an upstream frames its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events (every dialect over HTTP).
    Sse,
    /// Bedrock's `application/vnd.amazon.eventstream` binary frames of InvokeModel (SPEC §20).
    BedrockEventStream,
    /// The same framing, of the Converse API (`converse` routes).
    ConverseEventStream,
}

/// Bedrock's stream framing's content type (SPEC §20); the client gets it as server-sent events.
const EVENT_STREAM: &str = "application/vnd.amazon.eventstream";

impl Framing {
    /// How a stream answered with `content_type` by a route speaking `api` is framed; `None` for
    /// an answer that is not a stream (often an error object).
    pub fn of(content_type: &str, api: Api) -> Option<Framing> {
        match content_type {
            t if t.starts_with("text/event-stream") => Some(Framing::Sse),
            t if t.starts_with(EVENT_STREAM) && api == Api::Converse => Some(Framing::ConverseEventStream),
            t if t.starts_with(EVENT_STREAM) => Some(Framing::BedrockEventStream),
            _ => None,
        }
    }
}

/// An upstream stream's bytes as the client's events: read from its framing and — when the route
/// speaks another dialect — translated as they arrive (SPEC §19), so the [`Gate`] and the
/// [`Relay`] only ever see the client's dialect.
///
/// Each event is decoded once: a Bedrock frame's JSON is parsed where the frame is decoded and
/// handed on parsed (to the translator's reader, or written once as the event a client of its own
/// dialect gets); a translated event carries the JSON it was written from, or what it means (a
/// typed chat or Gemini chunk). Only an event that arrived as text in the client's own dialect is
/// parsed downstream, once, by the gate or relay that reads it ([`ClientEvent::inspect`]).
pub struct Incoming {
    frames: Frames,
    translator: Option<StreamTranslator>,
    /// Server-sent events of the chunk being read.
    sse: Vec<SseEvent>,
    /// Upstream events of the chunk being read, as the framing decoded them.
    upstream: Vec<Upstream>,
}

enum Frames {
    Sse(SseParser),
    /// Bedrock's event-stream frames (InvokeModel's or ConverseStream's).
    Bedrock(FrameStream),
}

impl Incoming {
    /// A stream in `framing`, of the client's own dialect (`None`) or one to translate.
    pub fn new(framing: Framing, translator: Option<StreamTranslator>) -> Incoming {
        Incoming {
            frames: match framing {
                Framing::Sse => Frames::Sse(SseParser::new()),
                Framing::BedrockEventStream => Frames::Bedrock(FrameStream::invoke()),
                Framing::ConverseEventStream => Frames::Bedrock(converse_stream::stream()),
            },
            translator,
            sse: Vec::new(),
            upstream: Vec::new(),
        }
    }

    /// The client's events in `chunk`, appended to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<ClientEvent>) {
        match &mut self.frames {
            Frames::Sse(parser) => parser.push(chunk, &mut self.sse),
            Frames::Bedrock(stream) => stream.push(chunk, &mut self.upstream),
        }
        self.hand_on(out);
    }

    /// The upstream closed its body: its last event without a blank line, and (translated) the
    /// closing events of an answer that finished.
    pub fn close(&mut self, out: &mut Vec<ClientEvent>) {
        if let Frames::Sse(parser) = &mut self.frames {
            self.sse.extend(parser.finish());
        }
        self.hand_on(out);
        if let Some(t) = &mut self.translator {
            t.close(out);
        }
    }

    /// The events waiting in `sse` and `upstream` (one of them is empty) as the client's, into
    /// `out`: translated, or as they are.
    fn hand_on(&mut self, out: &mut Vec<ClientEvent>) {
        match &mut self.translator {
            Some(t) => {
                for ev in self.sse.drain(..).map(Upstream::Sse).chain(self.upstream.drain(..)) {
                    t.push(&ev, out);
                }
            }
            None => {
                out.extend(self.sse.drain(..).map(ClientEvent::from));
                out.extend(self.upstream.drain(..).map(ClientEvent::from));
            }
        }
    }

    /// The usage the upstream reported so far, in its own fields, when translated: the client's
    /// dialect may have no field for part of it (a cache write), and the charge counts every part
    /// (SPEC §17).
    pub fn upstream_usage(&self) -> Option<Reported> {
        self.translator.as_ref().map(StreamTranslator::usage)
    }
}

/// What both phases learn from the events: usage, output, whether the answer finished, and the
/// stream's id and model (for the error frame).
#[derive(Debug)]
struct Seen {
    dialect: &'static StreamDialect,
    client_wants_usage: bool,
    usage: Reported,
    output_chars: usize,
    /// Every choice finished (chat `n`, Gemini `candidateCount`: each needs its finish reason).
    finished: bool,
    /// Choices finished so far, of `completions`.
    finishes: u64,
    completions: u64,
    id: String,
    model: String,
    /// The route's secrets, and every key-like token, kept from the client (SPEC §15).
    redactor: Redactor,
    /// A translated stream: its usage is the upstream's own report (noted per chunk), never
    /// what the client's events say — a writer's placeholder (a `message_start` with 0 input
    /// tokens before the upstream said them) is not a count (SPEC §7: what was not reported
    /// is estimated).
    upstream_reports: bool,
}

impl Seen {
    fn see(&mut self, ev: &mut ClientEvent) -> EventInfo {
        let info = ev.inspect(self.dialect);
        if info.usage.is_empty() {
            // Only an event with usage is written again (with the charge): the rest drop their
            // JSON now.
            ev.data = Data::NotJson;
        }
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
        if !self.upstream_reports {
            self.usage.update(info.usage);
        }
        if info.finished {
            self.finishes += u64::from(info.finishes.max(1));
            self.finished = self.finishes >= self.completions;
        }
        info
    }

    /// An unrequested usage-only chunk: read for its usage, never sent.
    fn dropped_usage(&self, info: &EventInfo) -> bool {
        info.usage_only && !self.client_wants_usage
    }
}

/// One attempt's stream before commit.
#[derive(Debug)]
pub struct Gate {
    seen: Seen,
    held: Vec<u8>,
    held_events: usize,
    /// The request set a stop sequence (an empty answer that stopped is one, SPEC §18).
    client_stop: bool,
}

impl Gate {
    /// `redactor`: what of the upstream's text the client may see (the route's secrets and
    /// key-like tokens removed).
    /// `client_stop`: the request set a stop sequence; `completions`: the choices it asked for
    /// (the stream is finished when each has finished).
    pub fn new(
        dialect: &'static StreamDialect,
        client_wants_usage: bool,
        client_stop: bool,
        completions: u64,
        redactor: Redactor,
    ) -> Gate {
        Gate {
            seen: Seen {
                dialect,
                client_wants_usage,
                usage: Reported::default(),
                output_chars: 0,
                finished: false,
                finishes: 0,
                completions: completions.max(1),
                id: String::new(),
                model: String::new(),
                redactor,
                upstream_reports: false,
            },
            held: Vec::new(),
            held_events: 0,
            client_stop,
        }
    }

    /// One event of the client's stream (a [`SseEvent`] is one still to read).
    pub fn on_event(&mut self, ev: impl Into<ClientEvent>) -> Before {
        let mut ev: ClientEvent = ev.into();
        let info = self.seen.see(&mut ev);
        let ev = ev.ev;
        if let Some(payload) = &info.error {
            return Before::Fail(classify_error_payload(payload));
        }
        if info.malformed {
            return Before::Fail(Verdict::bad("malformed event before the first content"));
        }
        // An answer that ended empty by the client's limit, its stop sequence or a content filter
        // is the answer (SPEC §18): delivered and charged, not held against the route.
        if info.finish.is_some_and(|f| f.explains_empty(self.client_stop)) {
            self.held.extend_from_slice(&ev.raw);
            return Before::Commit(std::mem::take(&mut self.held));
        }
        if info.done {
            return Before::Fail(Verdict::bad("stream ended before the first content"));
        }
        if self.seen.dropped_usage(&info) {
            return Before::Hold;
        }
        self.held.extend_from_slice(&ev.raw);
        // Keep-alives are held (the client gets them at commit) but not counted: a chatty
        // upstream must not reach the held-event cap with them and commit before any content,
        // giving up its fallback (SPEC §6). The held-bytes cap still bounds them.
        if !info.keepalive {
            self.held_events += 1;
        }
        self.seen.output_chars += info.output_chars;
        if info.content || self.held_events >= MAX_HELD_EVENTS || self.held.len() >= MAX_HELD_BYTES {
            return Before::Commit(std::mem::take(&mut self.held));
        }
        Before::Hold
    }

    /// Usage the upstream reported in fields the client's dialect lacks (see
    /// [`Incoming::upstream_usage`]), taken before the chunk's events.
    pub fn note_upstream_usage(&mut self, usage: Reported) {
        self.seen.upstream_reports = true;
        self.seen.usage.update(usage);
    }

    /// The upstream closed before any content.
    pub fn on_close(&self) -> Verdict {
        Verdict::bad("stream closed before the first content")
    }

    /// The committed stream's relay (call after [`Before::Commit`]).
    pub fn into_relay(self) -> Relay {
        Relay {
            seen: self.seen,
            malformed_dropped: 0,
            tariff: None,
        }
    }
}

/// One committed stream, from the commit to its end.
#[derive(Debug)]
pub struct Relay {
    seen: Seen,
    malformed_dropped: u32,
    /// What the answer is charged from: the final usage event carries the charge as `cost`.
    tariff: Option<Tariff>,
}

impl Relay {
    /// The final usage event (usage complete, the answer finished) will carry the request's
    /// charge — the ledger's, from the same [`Tariff::settle`] — as `usage.cost` in USD.
    pub fn price_with(&mut self, tariff: Tariff) {
        self.tariff = Some(tariff);
    }

    /// `ev` as sent: with `cost` in its usage when it is the final usage event (its JSON, as
    /// read or written before, written again with the cost).
    fn priced(&self, ev: ClientEvent, info: &EventInfo) -> Vec<u8> {
        let usage = self.seen.usage;
        let complete = usage.input_tokens.is_some() && usage.output_tokens.is_some();
        let Some(tariff) = self
            .tariff
            .as_ref()
            .filter(|_| !info.usage.is_empty() && complete && self.seen.finished)
        else {
            return ev.ev.raw;
        };
        let cost = micros_to_usd(tariff.settle(usage, self.seen.output_chars).cost_micros);
        let Data::Json(mut v) = ev.data else {
            return ev.ev.raw;
        };
        match add_cost(&mut v, cost) {
            true => SseEvent::written(ev.ev.event.as_deref(), &v).raw,
            false => ev.ev.raw,
        }
    }

    /// One event of the client's stream (a [`SseEvent`] is one still to read).
    pub fn on_event(&mut self, ev: impl Into<ClientEvent>) -> After {
        let mut ev: ClientEvent = ev.into();
        let info = self.seen.see(&mut ev);
        if let Some(payload) = &info.error {
            let redactor = &self.seen.redactor;
            let message = classify_error_payload(payload)
                .message
                .map(|m| redactor.text(&m))
                .unwrap_or_else(|| "The provider reported an error mid-stream.".to_string());
            let bytes = if self.seen.dialect.pass_error_events {
                // As sent, but without a key in it (SPEC §15).
                redactor.text(&String::from_utf8_lossy(&ev.ev.raw)).into_bytes()
            } else {
                self.error_frame(&message)
            };
            return After::End {
                bytes,
                broken: Some(format!("upstream error event: {message}")),
            };
        }
        if info.malformed {
            self.malformed_dropped += 1;
            return After::Skip;
        }
        self.seen.output_chars += info.output_chars;
        if info.done {
            return After::End {
                bytes: self.priced(ev, &info),
                broken: None,
            };
        }
        if self.seen.dropped_usage(&info) {
            return After::Skip;
        }
        After::Send(self.priced(ev, &info))
    }

    /// Usage the upstream reported in fields the client's dialect lacks (see
    /// [`Incoming::upstream_usage`]), taken before the chunk's events.
    pub fn note_upstream_usage(&mut self, usage: Reported) {
        self.seen.upstream_reports = true;
        self.seen.usage.update(usage);
    }

    /// The upstream closed its body normally: finalised at once when the answer finished without
    /// its sentinel (SPEC §7), else a cut.
    pub fn on_close(&mut self) -> After {
        if self.seen.finished {
            return After::End {
                bytes: self.seen.dialect.done_frame.to_vec(),
                broken: None,
            };
        }
        self.end_broken("the provider closed the stream before it finished")
    }

    /// The stream stopped before its end: the client gets the error frame.
    pub fn on_break(&mut self, why: Break) -> After {
        self.end_broken(why.message())
    }

    /// What was delivered so far (`broken` is the caller's to say).
    pub fn delivery(&self) -> Delivery {
        Delivery {
            usage: self.seen.usage,
            output_chars: self.seen.output_chars,
            malformed: self.malformed_dropped,
            broken: None,
            response_id: (!self.seen.id.is_empty()).then(|| self.seen.id.clone()),
        }
    }

    fn end_broken(&self, reason: &str) -> After {
        After::End {
            bytes: self.error_frame(reason),
            broken: Some(reason.to_string()),
        }
    }

    fn error_frame(&self, message: &str) -> Vec<u8> {
        (self.seen.dialect.error_frame)(&self.seen.id, &self.seen.model, message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use crate::dialects::chat::{self, STREAM as CHAT};
    use crate::dialects::messages::{self, STREAM as MESSAGES};
    use crate::dialects::responses::STREAM as RESPONSES;

    /// The framing by content type and route dialect: server-sent events, Bedrock's frames (of
    /// InvokeModel, or of the Converse API on a `converse` route), or no stream at all.
    #[test]
    fn a_stream_is_framed_by_its_content_type_and_the_routes_dialect() {
        let sse = "text/event-stream; charset=utf-8";
        let frames = "application/vnd.amazon.eventstream";
        assert_eq!(Framing::of(sse, Api::Chat), Some(Framing::Sse));
        assert_eq!(Framing::of(frames, Api::Messages), Some(Framing::BedrockEventStream));
        assert_eq!(Framing::of(frames, Api::Converse), Some(Framing::ConverseEventStream));
        assert_eq!(Framing::of("application/json", Api::Converse), None);
        assert_eq!(Framing::of("", Api::Chat), None);
    }

    /// Issue 32: an event's JSON is parsed at most once and written at most once on every path,
    /// counted through the one parser and the one writer of event JSON (`sse::counted`): a Bedrock
    /// frame's wrapper and the event it carries, each once (the wrapper's base64 holds the event);
    /// a translated event read once and written once, and never read back by the gate; a native
    /// event read once, by the gate. Only the final usage event is written once more, with the
    /// charge in it.
    #[test]
    fn each_event_is_parsed_at_most_once_and_written_at_most_once() {
        use crate::dialects::neutral::answer::AnswerContext;
        use crate::providers::bedrock::converse_stream::testing::event;
        use crate::providers::bedrock::eventstream::encode;
        use crate::sse::counted;
        use base64::Engine;
        use serde_json::json;

        let anthropic = [
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
                   "model": "c", "content": [], "usage": {"input_tokens": 7, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}),
            json!({"type": "message_stop"}),
        ];
        let invoke: Vec<u8> = anthropic
            .iter()
            .flat_map(|e| {
                let b64 = base64::engine::general_purpose::STANDARD.encode(e.to_string());
                let payload = json!({ "bytes": b64 }).to_string();
                encode(
                    &[(":event-type", "chunk"), (":message-type", "event")],
                    payload.as_bytes(),
                )
            })
            .collect();
        let messages_sse: Vec<u8> = anthropic
            .iter()
            .flat_map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()).into_bytes())
            .collect();
        let converse = [
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hi there"}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("messageStop", json!({"stopReason": "end_turn"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 4, "outputTokens": 2, "totalTokens": 6}}),
            ),
        ];
        let converse_bytes: Vec<u8> = converse.iter().flat_map(|(k, v)| event(k, v)).collect();
        let chat_sse: Vec<u8> = [ROLE, HI, FIN, USAGE, "[DONE]"]
            .iter()
            .flat_map(|d| ev(d).raw)
            .collect();
        // (framing, upstream, client, bytes, upstream events, parses of each in the reader)
        let cases = [
            (
                Framing::BedrockEventStream,
                Api::Messages,
                Api::Chat,
                &invoke,
                anthropic.len(),
                2,
            ),
            (
                Framing::BedrockEventStream,
                Api::Messages,
                Api::Messages,
                &invoke,
                anthropic.len(),
                2,
            ),
            (
                Framing::ConverseEventStream,
                Api::Converse,
                Api::Messages,
                &converse_bytes,
                converse.len(),
                1,
            ),
            (
                Framing::Sse,
                Api::Messages,
                Api::Chat,
                &messages_sse,
                anthropic.len(),
                1,
            ),
            (Framing::Sse, Api::Chat, Api::Chat, &chat_sse, 5, 0),
        ];
        for (framing, up, client, bytes, upstream_events, parses_each) in cases {
            let label = format!("{framing:?} {up:?} → {client:?}");
            let ctx = AnswerContext {
                id: "g".into(),
                model: "m".into(),
                created: 1,
                choices: 1,
                ..AnswerContext::default()
            };
            let translator = (up != client).then(|| StreamTranslator::new(up, client, ctx));
            let mut incoming = Incoming::new(framing, translator);
            let mut events = Vec::new();
            counted::take();
            incoming.push(bytes, &mut events);
            incoming.close(&mut events);
            let (parsed, wrote) = counted::take();
            assert_eq!(parsed, upstream_events * parses_each, "{label}: the reader's parses");
            let written = events
                .iter()
                .filter(|e| matches!(e.data, Data::Json(_) | Data::Known(_)))
                .count();
            let unread = events.iter().filter(|e| e.data == Data::Unread).count();
            assert_eq!(wrote, written, "{label}: each client event written once, its JSON kept");
            assert_eq!(
                unread,
                if up == client && framing == Framing::Sse { 5 } else { 0 },
                "{label}"
            );

            let dialect = StreamDialect::of(client);
            let mut gate = Gate::new(dialect, true, false, 1, Redactor::default());
            let mut relay: Option<Relay> = None;
            let mut sent = Vec::new();
            for ev in events {
                match &mut relay {
                    None => match gate.on_event(ev) {
                        Before::Hold => {}
                        Before::Commit(held) => {
                            sent.extend(held);
                            let mut r =
                                std::mem::replace(&mut gate, Gate::new(dialect, true, false, 1, Redactor::default()))
                                    .into_relay();
                            r.price_with(tariff());
                            relay = Some(r);
                        }
                        Before::Fail(v) => panic!("{label}: {v:?}"),
                    },
                    Some(r) => match r.on_event(ev) {
                        After::Send(b) | After::End { bytes: b, broken: None } => sent.extend(b),
                        After::Skip => {}
                        other => panic!("{label}: {other:?}"),
                    },
                }
            }
            let (parsed, wrote) = counted::take();
            assert_eq!(
                parsed, unread,
                "{label}: the gate and the relay parse only what nobody read"
            );
            assert_eq!(wrote, 1, "{label}: only the final usage event, with its charge");
            let text = String::from_utf8(sent).unwrap();
            assert!(text.contains("\"cost\":") && text.contains("Hi"), "{label}: {text}");
        }
    }

    /// A ConverseStream, however its bytes are cut, reaches a chat client as chat chunks that the
    /// gate commits and the relay finishes, with the upstream's usage (cache reads included).
    #[test]
    fn a_converse_stream_is_framed_translated_and_relayed() {
        use crate::dialects::neutral::answer::AnswerContext;
        use crate::providers::bedrock::converse_stream::testing::event;
        use serde_json::json;
        let bytes: Vec<u8> = [
            ("messageStart", json!({"role": "assistant"})),
            (
                "contentBlockDelta",
                json!({"contentBlockIndex": 0, "delta": {"text": "Hi there"}}),
            ),
            ("contentBlockStop", json!({"contentBlockIndex": 0})),
            ("messageStop", json!({"stopReason": "end_turn"})),
            (
                "metadata",
                json!({"usage": {"inputTokens": 4, "outputTokens": 2, "totalTokens": 12,
                                          "cacheReadInputTokens": 6}, "metrics": {"latencyMs": 9}}),
            ),
        ]
        .iter()
        .flat_map(|(k, v)| event(k, v))
        .collect();
        for step in [1, 5, 64, bytes.len()] {
            let ctx = AnswerContext {
                id: "g".into(),
                model: "m".into(),
                created: 1,
                choices: 1,
                ..AnswerContext::default()
            };
            let translator = StreamTranslator::new(Api::Converse, Api::Chat, ctx);
            let mut incoming = Incoming::new(Framing::ConverseEventStream, Some(translator));
            let mut events = Vec::new();
            for chunk in bytes.chunks(step) {
                incoming.push(chunk, &mut events);
            }
            incoming.close(&mut events);
            let mut gate = Gate::new(&CHAT, true, false, 1, Redactor::default());
            let mut sent = Vec::new();
            let mut relay = None;
            for ev in events {
                match &mut relay {
                    None => match gate.on_event(ev) {
                        Before::Hold => {}
                        Before::Commit(held) => {
                            sent.extend(held);
                            relay = Some(
                                std::mem::replace(&mut gate, Gate::new(&CHAT, true, false, 1, Redactor::default()))
                                    .into_relay(),
                            );
                        }
                        Before::Fail(v) => panic!("step {step}: {v:?}"),
                    },
                    Some(r) => match r.on_event(ev) {
                        After::Send(b) | After::End { bytes: b, broken: None } => sent.extend(b),
                        After::Skip => {}
                        other => panic!("step {step}: {other:?}"),
                    },
                }
            }
            let text = String::from_utf8(sent).unwrap();
            assert!(
                text.contains("Hi there") && text.contains("\"finish_reason\":\"stop\""),
                "{text}"
            );
            assert!(text.ends_with("data: [DONE]\n\n"), "step {step}: {text}");
            let usage = incoming.upstream_usage().unwrap();
            assert_eq!(
                (usage.input_tokens, usage.cache_read_tokens, usage.output_tokens),
                (Some(10), Some(6), Some(2))
            );
        }
    }

    /// A translated stream's usage is the upstream's report, not the client's events: a chat
    /// stream cut after its text (no usage) reaches a Messages client whose `message_start` says
    /// 0 input tokens (the schema requires a count), yet the delivery has no input count, so the
    /// charge estimates it (SPEC §7) instead of billing 0.
    #[test]
    fn a_translated_streams_usage_is_the_upstreams_not_the_writers_placeholder() {
        use crate::dialects::neutral::answer::AnswerContext;
        let ctx = AnswerContext {
            id: "g".into(),
            model: "m".into(),
            created: 1,
            choices: 1,
            ..AnswerContext::default()
        };
        let translator = StreamTranslator::new(Api::Chat, Api::Messages, ctx);
        let mut incoming = Incoming::new(Framing::Sse, Some(translator));
        let mut events = Vec::new();
        incoming.push(format!("data: {ROLE}\n\ndata: {HI}\n\n").as_bytes(), &mut events);
        let mut gate = Gate::new(StreamDialect::of(Api::Messages), true, false, 1, Redactor::default());
        gate.note_upstream_usage(incoming.upstream_usage().unwrap());
        let mut sent = Vec::new();
        let mut relay = None;
        for e in events.drain(..) {
            match relay.as_mut() {
                None => {
                    if let Before::Commit(head) = gate.on_event(e) {
                        sent.extend(head);
                        relay = Some(
                            std::mem::replace(&mut gate, Gate::new(&CHAT, true, false, 1, Redactor::default()))
                                .into_relay(),
                        );
                    }
                }
                Some(r) => {
                    if let After::Send(b) = r.on_event(e) {
                        sent.extend(b)
                    }
                }
            }
        }
        let text = String::from_utf8(sent).unwrap();
        assert!(
            text.contains(r#""usage":{"input_tokens":0,"output_tokens":0}"#),
            "{text}"
        );
        let usage = relay.expect("committed on the text").delivery().usage;
        assert_eq!((usage.input_tokens, usage.output_tokens), (None, None), "{text}");
    }

    fn ev(data: &str) -> SseEvent {
        SseEvent::from_data(data)
    }

    const ROLE: &str = r#"{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
    const HI: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
    const FIN: &str = r#"{"id":"c1","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#;
    const USAGE: &str = r#"{"id":"c1","choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}"#;

    /// A relay committed on `events` (the last one must commit).
    fn committed(client_wants_usage: bool, events: &[&str]) -> Relay {
        let mut g = Gate::new(&CHAT, client_wants_usage, false, 1, Redactor::default());
        let mut last = Before::Hold;
        for e in events {
            last = g.on_event(ev(e));
        }
        assert!(matches!(last, Before::Commit(_)), "the last event commits");
        g.into_relay()
    }

    #[test]
    fn a_stream_of_several_choices_is_finished_only_when_each_has_finished() {
        // SPEC §18: with `n` = 2 the first choice's finish reason is not the end of the answer.
        let choice = |i: u32, delta: &str, finish: &str| {
            ev(&format!(
                r#"{{"choices":[{{"index":{i},"delta":{delta},"finish_reason":{finish}}}]}}"#
            ))
        };
        for (both, broken) in [(false, true), (true, false)] {
            let mut g = Gate::new(&CHAT, false, false, 2, Redactor::default());
            assert!(matches!(
                g.on_event(choice(0, r#"{"content":"a"}"#, "null")),
                Before::Commit(_)
            ));
            let mut r = g.into_relay();
            r.on_event(choice(1, r#"{"content":"b"}"#, "null"));
            r.on_event(choice(0, "{}", r#""stop""#));
            if both {
                r.on_event(choice(1, "{}", r#""stop""#));
            }
            match r.on_close() {
                After::End { broken: b, .. } => assert_eq!(b.is_some(), broken, "both finished: {both}"),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn keep_alives_never_reach_the_held_event_cap() {
        let mut g = Gate::new(&MESSAGES, false, false, 1, Redactor::default());
        for _ in 0..(MAX_HELD_EVENTS * 3) {
            assert_eq!(g.on_event(SseEvent::from_data(r#"{"type":"ping"}"#)), Before::Hold);
            let comment = SseEvent {
                raw: b": keep-alive\n\n".to_vec(),
                event: None,
                data: String::new(),
                has_data: false,
                oversize: false,
            };
            assert_eq!(g.on_event(comment), Before::Hold);
        }
        assert_eq!(g.held_events, 0, "none of them counts toward the cap");
    }

    #[test]
    fn an_empty_answer_its_limit_or_stop_explains_commits() {
        // SPEC §18: the client's max_tokens, its stop sequence or a content filter explain an
        // answer with no content; it is delivered, not failed as bad_response.
        let role = ev(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        let ended = |reason: &str| {
            ev(&format!(
                r#"{{"choices":[{{"index":0,"delta":{{}},"finish_reason":"{reason}"}}]}}"#
            ))
        };
        for (reason, client_stop, commits) in [
            ("length", false, true),
            ("content_filter", false, true),
            ("stop", true, true),
            ("stop", false, false),
        ] {
            let mut g = Gate::new(&CHAT, false, client_stop, 1, Redactor::default());
            assert_eq!(g.on_event(role.clone()), Before::Hold);
            let got = g.on_event(ended(reason));
            assert_eq!(
                matches!(got, Before::Commit(_)),
                commits,
                "{reason} client_stop={client_stop}: {got:?}"
            );
        }
    }

    #[test]
    fn holds_until_content_then_releases_everything() {
        let mut g = Gate::new(&CHAT, false, false, 1, Redactor::default());
        let keepalive = SseEvent {
            raw: b": keep-alive\n\n".to_vec(),
            ..SseEvent::default()
        };
        assert_eq!(g.on_event(keepalive.clone()), Before::Hold);
        assert_eq!(g.on_event(ev(ROLE)), Before::Hold);
        let Before::Commit(bytes) = g.on_event(ev(HI)) else {
            panic!("content commits")
        };
        let expected = [keepalive.raw, ev(ROLE).raw, ev(HI).raw].concat();
        assert_eq!(bytes, expected);
        let mut r = g.into_relay();
        assert_eq!(r.on_event(ev(FIN)), After::Send(ev(FIN).raw));
        assert_eq!(
            r.on_event(ev(USAGE)),
            After::Skip,
            "usage chunk dropped: the client did not ask"
        );
        assert_eq!(
            r.delivery().usage,
            Reported {
                input_tokens: Some(4),
                output_tokens: Some(1),
                ..Reported::default()
            }
        );
        assert_eq!(
            r.on_event(ev("[DONE]")),
            After::End {
                bytes: ev("[DONE]").raw,
                broken: None
            }
        );
    }

    #[test]
    fn usage_chunk_passes_when_asked() {
        let mut r = committed(true, &[HI]);
        assert_eq!(r.on_event(ev(USAGE)), After::Send(ev(USAGE).raw));
    }

    fn tariff() -> Tariff {
        Tariff {
            price: crate::catalog::Price::per_mtok(1.5, 10.0),
            held_micros: Some(1_000_000),
            limits: crate::generation::UsageLimits {
                max_tokens: 100,
                max_input_tokens: 100_000,
                body_len: 30,
            },
            tools: Default::default(),
        }
    }

    fn data_of(bytes: &[u8]) -> serde_json::Value {
        let text = String::from_utf8_lossy(bytes);
        let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn the_final_usage_chunk_carries_the_charge() {
        let mut r = committed(true, &[ROLE, HI]);
        r.price_with(tariff());
        assert_eq!(r.on_event(ev(FIN)), After::Send(ev(FIN).raw), "no usage: unchanged");
        let After::Send(bytes) = r.on_event(ev(USAGE)) else {
            panic!("sent")
        };
        let charged = tariff()
            .settle(r.delivery().usage, r.delivery().output_chars)
            .cost_micros;
        assert_eq!(charged, 16, "4 × 1.5 + 1 × 10 µ$");
        let v = data_of(&bytes);
        assert_eq!(v["usage"]["cost"], serde_json::json!(0.000016));
        assert_eq!(v["usage"]["prompt_tokens"], 4, "the rest as sent");
        assert!(bytes.ends_with(b"\n\n"));
        // Without a tariff (or before the answer finished) the event passes byte for byte.
        let mut plain = committed(true, &[ROLE, HI]);
        plain.on_event(ev(FIN));
        assert_eq!(plain.on_event(ev(USAGE)), After::Send(ev(USAGE).raw));
        let mut early = committed(true, &[ROLE, HI]);
        early.price_with(tariff());
        assert_eq!(
            early.on_event(ev(USAGE)),
            After::Send(ev(USAGE).raw),
            "not finished yet"
        );
    }

    #[test]
    fn anthropic_and_responses_final_events_carry_the_charge() {
        let mut g = Gate::new(&MESSAGES, false, false, 1, Redactor::default());
        g.on_event(named(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","model":"c","usage":{"input_tokens":7,"output_tokens":1}}}"#,
        ));
        g.on_event(named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ));
        let mut r = g.into_relay();
        r.price_with(tariff());
        let After::Send(bytes) = r.on_event(named(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        )) else {
            panic!("sent")
        };
        assert!(bytes.starts_with(b"event: message_delta\ndata: "));
        assert_eq!(
            data_of(&bytes)["usage"]["cost"],
            serde_json::json!(micros_to_usd(41)),
            "7 × 1.5 + 3 × 10, rounded"
        );

        let mut g = Gate::new(&RESPONSES, false, false, 1, Redactor::default());
        g.on_event(named(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
        ));
        let mut r = g.into_relay();
        r.price_with(tariff());
        let completed = named(
            "response.completed",
            r#"{"type":"response.completed","response":{"id":"r1","status":"completed","usage":{"input_tokens":2,"output_tokens":2}}}"#,
        );
        let After::End { bytes, broken: None } = r.on_event(completed) else {
            panic!("the end")
        };
        assert_eq!(
            data_of(&bytes)["response"]["usage"]["cost"],
            serde_json::json!(micros_to_usd(23))
        );
    }

    #[test]
    fn failures_before_commit_fall_back() {
        for bad_event in [
            ev(r#"{"error":{"message":"boom","type":"server_error"}}"#),
            ev("{oops"),
            ev("[DONE]"),
        ] {
            let mut g = Gate::new(&CHAT, false, false, 1, Redactor::default());
            g.on_event(ev(ROLE));
            assert!(matches!(g.on_event(bad_event), Before::Fail(_)));
        }
        let mut g = Gate::new(&CHAT, false, false, 1, Redactor::default());
        g.on_event(ev(ROLE));
        assert_eq!(g.on_close().class, FailureClass::BadResponse);
        let mut g = Gate::new(&CHAT, false, false, 1, Redactor::default());
        let overloaded = ev(r#"{"error":{"message":"The server is overloaded","type":"server_error"}}"#);
        assert!(matches!(g.on_event(overloaded), Before::Fail(v) if v.class == FailureClass::Overloaded));
    }

    #[test]
    fn after_commit_errors_end_with_the_error_frame() {
        let mut r = committed(false, &[ROLE, HI]);
        assert_eq!(r.on_event(ev("{bad")), After::Skip, "malformed after commit is dropped");
        assert_eq!(r.delivery().malformed, 1);
        let After::End { bytes, broken } = r.on_event(ev(r#"{"error":{"message":"mid-stream failure"}}"#)) else {
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
        let mut r = committed(false, &[HI]);
        r.on_event(ev(FIN));
        assert_eq!(
            r.on_close(),
            After::End {
                bytes: chat::DONE_FRAME.to_vec(),
                broken: None
            }
        );
        let mut r = committed(false, &[HI]);
        assert!(matches!(r.on_close(), After::End { broken: Some(_), .. }));
        for why in [Break::Cut, Break::Idle, Break::Cap] {
            let mut r = committed(false, &[HI]);
            let After::End { bytes, broken } = r.on_break(why) else {
                panic!("a break ends the stream")
            };
            assert_eq!(broken.as_deref(), Some(why.message()));
            assert!(String::from_utf8(bytes).unwrap().contains(why.message()));
        }
    }

    #[test]
    fn output_before_and_after_commit_is_counted_for_the_estimate() {
        let mut r = committed(false, &[ROLE, HI]);
        r.on_event(ev(HI));
        assert_eq!(r.delivery().output_chars, 4);
        assert!(r.delivery().usage.is_empty());
    }

    #[test]
    fn commits_when_the_hold_cap_is_reached() {
        let mut g = Gate::new(&CHAT, false, false, 1, Redactor::default());
        for _ in 0..MAX_HELD_EVENTS - 1 {
            assert_eq!(g.on_event(ev(ROLE)), Before::Hold);
        }
        assert!(matches!(g.on_event(ev(ROLE)), Before::Commit(_)));
    }

    fn named(name: &str, data: &str) -> SseEvent {
        SseEvent {
            raw: format!("event: {name}\ndata: {data}\n\n").into_bytes(),
            event: Some(name.to_string()),
            data: data.to_string(),
            has_data: true,
            oversize: false,
        }
    }

    #[test]
    fn anthropic_lifecycle_is_held_and_its_error_event_passed_as_sent_after_commit() {
        let start = named(
            "message_start",
            r#"{"type":"message_start","message":{"id":"msg_1","model":"c","usage":{"input_tokens":7,"output_tokens":1}}}"#,
        );
        let block = named(
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        );
        let ping = named("ping", r#"{"type":"ping"}"#);
        let hi = named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        );
        let mut g = Gate::new(&MESSAGES, false, false, 1, Redactor::default());
        for held in [&start, &block, &ping] {
            assert_eq!(g.on_event(held.clone()), Before::Hold, "lifecycle is held back");
        }
        let Before::Commit(head) = g.on_event(hi.clone()) else {
            panic!("text commits")
        };
        assert_eq!(head, [start.raw, block.raw, ping.raw, hi.raw].concat());
        let mut r = g.into_relay();
        let overloaded = named(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        let After::End { bytes, broken } = r.on_event(overloaded.clone()) else {
            panic!("an error event ends the stream")
        };
        assert_eq!(bytes, overloaded.raw, "passed as sent");
        assert!(broken.is_some());
        assert_eq!(r.delivery().usage.input_tokens, Some(7));
        assert_eq!(
            r.delivery().usage.output_tokens,
            None,
            "message_start's count is no count"
        );
    }

    #[test]
    fn an_anthropic_stream_finished_without_message_stop_gets_it() {
        let mut g = Gate::new(&MESSAGES, false, false, 1, Redactor::default());
        g.on_event(named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ));
        let mut r = g.into_relay();
        r.on_event(named(
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":3}}"#,
        ));
        assert_eq!(
            r.on_close(),
            After::End {
                bytes: messages::DONE_FRAME.to_vec(),
                broken: None
            }
        );
        let mut cut = Gate::new(&RESPONSES, false, false, 1, Redactor::default());
        cut.on_event(named(
            "response.output_text.delta",
            r#"{"type":"response.output_text.delta","delta":"Hi"}"#,
        ));
        let After::End { bytes, broken } = cut.into_relay().on_close() else {
            panic!("a cut ends the stream")
        };
        assert!(broken.is_some());
        assert!(String::from_utf8(bytes)
            .unwrap()
            .starts_with("event: response.failed\n"));
    }

    #[test]
    fn an_error_after_commit_never_carries_a_key() {
        let leaky = r#"{"error":{"message":"Incorrect API key provided: sk-live-123 (key UPSTREAM-KEY-1)"}}"#;
        let mut g = Gate::new(&CHAT, false, false, 1, Redactor::new(["UPSTREAM-KEY-1"]));
        g.on_event(ev(HI));
        let After::End { bytes, broken } = g.into_relay().on_event(ev(leaky)) else {
            panic!("an error ends the stream")
        };
        let text = String::from_utf8(bytes).unwrap() + &broken.unwrap();
        assert!(!text.contains("sk-live") && !text.contains("UPSTREAM-KEY-1"), "{text}");
        let mut g = Gate::new(&MESSAGES, false, false, 1, Redactor::new(["UPSTREAM-KEY-1"]));
        g.on_event(named(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ));
        let error = named(
            "error",
            r#"{"type":"error","error":{"type":"api_error","message":"bad key=sk-x1"}}"#,
        );
        let After::End { bytes, .. } = g.into_relay().on_event(error) else {
            panic!("an error ends the stream")
        };
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("key=[redacted]") && !text.contains("sk-x1"), "{text}");
        let data: serde_json::Value = crate::dialects::frame_data(text.as_bytes());
        assert_eq!(
            data["error"]["type"], "api_error",
            "still the upstream's event, still JSON"
        );
    }
}
