//! Incremental Server-Sent Events parser, independent of how the bytes were split into chunks.
//!
//! The gateway relays SSE byte for byte, so every event keeps its exact raw bytes (`raw`, including
//! its terminating blank line); the parsed `event` name and `data` are only for decisions. Lines end
//! with `\n`, `\r\n` or `\r`; an event ends at a blank line. Invariant: the concatenation of every
//! event's `raw` (plus [`SseParser::finish`]'s remainder) equals the input — except an event longer
//! than [`MAX_EVENT_BYTES`], which comes out once as an `oversize` event holding its first bytes,
//! the rest of it dropped (SPEC §15: it counts as malformed). Each byte is scanned once, however
//! the input is split.
//!
//! Event data is parsed by [`SseEvent::json`] (a frame's by [`parse_json`]) and written by
//! [`SseEvent::written`]: the one parser and the one writer of stream event JSON, each used at
//! most once per event (issue 32; the tests count them). An upstream event reaches the translator
//! or the gate as [`Upstream`] text, or as JSON a binary frame carried, already decoded.

use serde::Serialize;
use serde_json::Value;

/// The largest event kept whole (SPEC §15).
pub const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// One event as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The exact bytes of the event, terminator included.
    pub raw: Vec<u8>,
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`; empty when there were none.
    pub data: String,
    /// Whether any `data:` line was present (comments and bare `event:` lines have none).
    pub has_data: bool,
    /// The event passed [`MAX_EVENT_BYTES`]: `raw` holds its start only; it is malformed.
    pub oversize: bool,
}

impl SseEvent {
    /// A `data:`-only event, as its raw bytes would carry it (tests and error frames).
    pub fn from_data(data: &str) -> SseEvent {
        SseEvent {
            raw: format!("data: {data}\n\n").into_bytes(),
            event: None,
            data: data.into(),
            has_data: true,
            oversize: false,
        }
    }

    /// An event Switchyard writes from `data` (JSON, or a typed chunk serialised as JSON), named
    /// `name` (`event: <name>` before its one `data:` line) when it has one: the one place a
    /// decoded or translated event is serialised.
    pub fn written(name: Option<&str>, data: &impl Serialize) -> SseEvent {
        counted::wrote();
        // Serialising JSON values and the dialects' own chunk types cannot fail.
        let data = serde_json::to_string(data).unwrap_or_default();
        let raw = match name {
            Some(name) => format!("event: {name}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        };
        SseEvent {
            raw: raw.into_bytes(),
            event: name.map(str::to_string),
            data,
            has_data: true,
            oversize: false,
        }
    }

    /// Its data as JSON: `None` without data or when the data is not JSON.
    pub fn json(&self) -> Option<Value> {
        match self.has_data {
            true => {
                counted::parsed();
                serde_json::from_str(self.data.trim()).ok()
            }
            false => None,
        }
    }
}

/// A frame's JSON payload parsed: with [`SseEvent::json`], the one parser of stream event data
/// and of the frames that carry it, so a test can count how often an event is parsed (`counted`).
pub fn parse_json(payload: &[u8]) -> Option<Value> {
    counted::parsed();
    serde_json::from_slice(payload).ok()
}

/// An upstream event as a stream reader hands it on: server-sent text still to read, or the JSON
/// a binary frame carried, decoded where the frame was (SPEC §20) — never written out as text to
/// be parsed again.
#[derive(Debug, Clone, PartialEq)]
pub enum Upstream {
    Sse(SseEvent),
    /// An event of `name` (Anthropic's `type`, a Converse `:event-type`) with its data.
    Json {
        name: String,
        data: Value,
    },
}

/// How many times this thread parsed and wrote event JSON (tests prove each event is parsed
/// and written at most once); nothing outside tests.
pub(crate) mod counted {
    #[cfg(test)]
    thread_local! {
        static COUNTS: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
    }

    #[cfg(test)]
    pub(crate) fn parsed() {
        COUNTS.with(|c| c.set((c.get().0 + 1, c.get().1)));
    }

    #[cfg(test)]
    pub(crate) fn wrote() {
        COUNTS.with(|c| c.set((c.get().0, c.get().1 + 1)));
    }

    /// (parses, writes) since the last call.
    #[cfg(test)]
    pub(crate) fn take() -> (usize, usize) {
        COUNTS.with(|c| c.replace((0, 0)))
    }

    #[cfg(not(test))]
    pub(crate) fn parsed() {}

    #[cfg(not(test))]
    pub(crate) fn wrote() {}
}

#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// Start of the line being scanned (bytes before it belong to complete lines).
    line_start: usize,
    /// Where scanning resumes: bytes before it hold no line terminator to act on.
    scanned: usize,
    /// The event being received passed the cap: its bytes are dropped up to its blank line.
    dropping: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Bytes received but not yet part of a complete event.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Feeds a chunk; complete events are appended to `out` in order.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) {
        self.buf.extend_from_slice(chunk);
        let mut event_start = 0;
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b != b'\n' && b != b'\r' {
                i += 1;
                continue;
            }
            // A line ends at i. A `\r` at the very end may be the first half of `\r\n`: wait.
            let term_len = if b == b'\r' {
                match self.buf.get(i + 1) {
                    None => break,
                    Some(b'\n') => 2,
                    Some(_) => 1,
                }
            } else {
                1
            };
            let blank = i == self.line_start;
            i += term_len;
            self.line_start = i;
            if blank {
                if self.dropping {
                    self.dropping = false; // the oversize event's end: drop its tail
                } else {
                    out.push(parse_event(&self.buf[event_start..i]));
                }
                event_start = i;
            }
        }
        self.scanned = i;
        if !self.dropping && self.buf.len() - event_start > MAX_EVENT_BYTES {
            let mut ev = parse_event(&self.buf[event_start..event_start + MAX_EVENT_BYTES]);
            ev.oversize = true;
            out.push(ev);
            self.dropping = true;
        }
        if self.dropping {
            // Nothing scanned is needed any more: remember only whether the current line has begun
            // (then the next terminator ends it, and only a terminator right after ends the event).
            let line_begun = self.line_start < self.scanned;
            self.buf.drain(..self.scanned);
            self.line_start = if line_begun { usize::MAX } else { 0 };
            self.scanned = 0;
            return;
        }
        if event_start > 0 {
            self.buf.drain(..event_start);
            self.line_start -= event_start;
            self.scanned -= event_start;
        }
    }

    /// The stream ended: whatever is left (an event without its blank line) as one event.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let rest = std::mem::take(&mut self.buf);
        self.line_start = 0;
        self.scanned = 0;
        if std::mem::take(&mut self.dropping) || rest.is_empty() {
            return None;
        }
        Some(parse_event(&rest))
    }
}

fn parse_event(raw: &[u8]) -> SseEvent {
    let mut ev = SseEvent {
        raw: raw.to_vec(),
        ..SseEvent::default()
    };
    let text = String::from_utf8_lossy(raw);
    for line in text.split(['\n', '\r']) {
        if line.is_empty() || line.starts_with(':') {
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if ev.has_data {
                    ev.data.push('\n');
                }
                ev.data.push_str(value);
                ev.has_data = true;
            }
            "event" => ev.event = Some(value.to_string()),
            _ => {}
        }
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.push(c, &mut out);
        }
        out.extend(p.finish());
        out
    }

    const SAMPLE: &[u8] = b": keep-alive\n\ndata: {\"a\":1}\n\nevent: message_start\ndata: {\"type\":\"message_start\"}\r\n\r\ndata: line1\ndata: line2\n\ndata: [DONE]\r\rdata: tail-without-blank-line";

    #[test]
    fn parses_fields_and_keeps_raw_bytes() {
        let events = parse_all(&[SAMPLE]);
        assert_eq!(events.len(), 6);
        assert!(!events[0].has_data, "a comment has no data");
        assert_eq!(events[1].data, "{\"a\":1}");
        assert_eq!(events[2].event.as_deref(), Some("message_start"));
        assert_eq!(events[3].data, "line1\nline2");
        assert_eq!(events[4].data, "[DONE]");
        assert_eq!(events[5].data, "tail-without-blank-line");
        let joined: Vec<u8> = events.iter().flat_map(|e| e.raw.clone()).collect();
        assert_eq!(joined, SAMPLE);
    }

    /// Property: any split of the input into chunks gives the same events.
    #[test]
    fn any_split_gives_the_same_events() {
        let whole = parse_all(&[SAMPLE]);
        for a in 0..=SAMPLE.len() {
            for b in a..=SAMPLE.len() {
                let got = parse_all(&[&SAMPLE[..a], &SAMPLE[a..b], &SAMPLE[b..]]);
                assert_eq!(got, whole, "split at {a}/{b}");
            }
        }
        // Many small random splits (deterministic LCG), including byte-by-byte.
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..500 {
            let mut chunks = Vec::new();
            let mut at = 0;
            while at < SAMPLE.len() {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let len = 1 + (seed >> 33) as usize % 7;
                let end = (at + len).min(SAMPLE.len());
                chunks.push(&SAMPLE[at..end]);
                at = end;
            }
            assert_eq!(parse_all(&chunks), whole);
        }
    }

    #[test]
    fn waits_for_the_second_half_of_crlf() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"data: x\r\n\r", &mut out);
        assert!(out.is_empty(), "a trailing \\r may be half of \\r\\n");
        p.push(b"\ndata: y\n\n", &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].raw, b"data: x\r\n\r\n");
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn an_event_past_the_cap_comes_out_once_as_oversize_and_the_stream_goes_on() {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"data: ok\n\ndata: ", &mut out);
        let big = vec![b'x'; 64 * 1024];
        for _ in 0..20 {
            p.push(&big, &mut out); // 1.25 MiB of one line, in chunks
        }
        assert!(
            p.buffered() < 128 * 1024,
            "the dropped event is not kept: {}",
            p.buffered()
        );
        p.push(b"\n\ndata: after\n\n", &mut out);
        let kinds: Vec<(bool, usize)> = out.iter().map(|e| (e.oversize, e.raw.len())).collect();
        assert_eq!(kinds, vec![(false, 10), (true, MAX_EVENT_BYTES), (false, 13)]);
        assert_eq!(out[2].data, "after");
    }

    #[test]
    fn a_long_line_in_small_chunks_is_scanned_once() {
        // Scanning restarts where it stopped, so this is linear; before, every chunk rescanned the
        // line from its start. (The count is of the parser's work, not a timing.)
        let mut p = SseParser::new();
        let mut out = Vec::new();
        p.push(b"data: ", &mut out);
        for _ in 0..100_000 {
            p.push(b"y", &mut out);
            assert_eq!(p.scanned, p.buf.len(), "nothing left to rescan");
        }
        p.push(b"\n\n", &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].data.len(), 100_000);
    }
}
