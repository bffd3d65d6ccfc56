//! What of a client's request an upstream's error text repeats (SPEC §18a "echoes are the
//! client's"): any top-level field name (as a whole word or words, any case), or any run of
//! [`RUN`] or more bytes of the request's own text. A class that would blame a route or an
//! account is voided by an echo ([`crate::classify::Verdict::against`], which reads the request
//! through [`Asked`]): the words came from the request, so they say nothing of the route.
//!
//! The `model` field is not the client's words here: the gateway writes the route's model name
//! into it, and an upstream that truly lacks the model says so in those words.
//!
//! Work is linear in the request: the error text (at most [`TEXT_LIMIT`] bytes) is indexed once —
//! its word-bounded phrases shorter than [`RUN`] bytes in a set, the hashes of its [`RUN`]-byte
//! windows in a map — then each field name is one set look-up and the request's bytes are read
//! once with a rolling hash, a hit confirmed byte by byte.

use std::collections::{HashMap, HashSet};

use crate::classify::{Echo, Echoes};
use crate::dialects::body::Body;
use crate::dialects::ClientRequest;

/// How long a run of the request's text must be to count as an echo.
pub const RUN: usize = 16;

/// How much of an error's text is looked at (an error message is short; a longer body is cut).
pub const TEXT_LIMIT: usize = 4096;

/// A request, as an error text may echo it: its top-level field names and its text, `model` left
/// out; and whether it names state an upstream holds.
#[derive(Debug, Clone, Copy)]
pub struct Asked<'a> {
    body: &'a Body,
    names_upstream_state: bool,
}

impl<'a> Asked<'a> {
    /// The request as sent (after the gateway's own settings, such as the output limit).
    pub fn of(request: &'a ClientRequest) -> Asked<'a> {
        Asked {
            body: request.body(),
            names_upstream_state: request.external_input.is_some(),
        }
    }

    #[cfg(test)]
    fn new(body: &'a Body) -> Asked<'a> {
        Asked {
            body,
            names_upstream_state: false,
        }
    }

    fn fields(&self) -> impl Iterator<Item = (&'a str, &'a str)> {
        self.body
            .fields()
            .filter(|(name, _)| *name != "model")
            .map(|(name, value)| (name, value.get()))
    }
}

impl Echoes for Asked<'_> {
    fn echoed_in(&self, text: &str) -> Option<Echo> {
        let text = cut(text, TEXT_LIMIT).to_ascii_lowercase();
        let index = Index::new(text.as_bytes());
        for (name, _) in self.fields() {
            if index.has_phrase(name) || index.has_run(name.as_bytes()) {
                return Some(Echo::Field(name.to_string()));
            }
        }
        for (_, value) in self.fields() {
            if index.has_run(value.as_bytes()) {
                return Some(Echo::Text);
            }
        }
        None
    }

    fn names_upstream_state(&self) -> bool {
        self.names_upstream_state
    }
}

/// The first `limit` bytes of `text`, cut at a character boundary.
fn cut(text: &str, limit: usize) -> &str {
    let mut end = text.len().min(limit);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// An error text, lower-cased, indexed for look-ups.
struct Index<'t> {
    text: &'t [u8],
    /// Every word-bounded phrase shorter than [`RUN`] bytes.
    phrases: HashSet<&'t [u8]>,
    /// Each [`RUN`]-byte window's hash, and where the first such window starts.
    windows: HashMap<u64, Vec<usize>>,
}

/// The rolling hash's base (odd, so every power is invertible mod 2⁶⁴).
const BASE: u64 = 0x0100_0000_01b3;

impl<'t> Index<'t> {
    fn new(text: &'t [u8]) -> Index<'t> {
        let starts = |i: usize| i == 0 || !word_byte(text[i - 1]) || !word_byte(text[i]);
        let ends = |j: usize| j == text.len() || !word_byte(text[j]) || !word_byte(text[j - 1]);
        let mut phrases = HashSet::new();
        for i in (0..text.len()).filter(|&i| starts(i)) {
            for j in (i + 1..text.len().min(i + RUN - 1) + 1).filter(|&j| ends(j)) {
                phrases.insert(&text[i..j]);
            }
        }
        let mut windows: HashMap<u64, Vec<usize>> = HashMap::new();
        if text.len() >= RUN {
            let mut roll = Roll::new(&text[..RUN]);
            windows.entry(roll.hash).or_default().push(0);
            for at in 1..=text.len() - RUN {
                roll.slide(text[at - 1], text[at + RUN - 1]);
                windows.entry(roll.hash).or_default().push(at);
            }
        }
        Index { text, phrases, windows }
    }

    /// Whether `name` stands in the text as a phrase of its own (any case). A name of [`RUN`]
    /// bytes or more is found by [`Index::has_run`].
    fn has_phrase(&self, name: &str) -> bool {
        !name.is_empty() && name.len() < RUN && self.phrases.contains(name.to_ascii_lowercase().as_bytes())
    }

    /// Whether `bytes` (any case) share a run of [`RUN`] bytes with the text.
    fn has_run(&self, bytes: &[u8]) -> bool {
        if bytes.len() < RUN || self.windows.is_empty() {
            return false;
        }
        let lower = |b: u8| b.to_ascii_lowercase();
        let first: Vec<u8> = bytes[..RUN].iter().map(|b| lower(*b)).collect();
        let mut roll = Roll::new(&first);
        let mut at = 0;
        loop {
            if let Some(places) = self.windows.get(&roll.hash) {
                let window = &bytes[at..at + RUN];
                let same = |p: &usize| self.text[*p..*p + RUN].iter().zip(window).all(|(t, b)| *t == lower(*b));
                if places.iter().any(same) {
                    return true;
                }
            }
            if at + RUN >= bytes.len() {
                return false;
            }
            roll.slide(lower(bytes[at]), lower(bytes[at + RUN]));
            at += 1;
        }
    }
}

/// A polynomial hash of the last [`RUN`] bytes, updated in O(1) per byte.
struct Roll {
    hash: u64,
    /// BASE^(RUN-1), to take the oldest byte out.
    top: u64,
}

impl Roll {
    fn new(window: &[u8]) -> Roll {
        let hash = window
            .iter()
            .fold(0u64, |h, b| h.wrapping_mul(BASE).wrapping_add(u64::from(*b)));
        let top = (1..RUN).fold(1u64, |p, _| p.wrapping_mul(BASE));
        Roll { hash, top }
    }

    fn slide(&mut self, out: u8, next: u8) {
        self.hash = self
            .hash
            .wrapping_sub(u64::from(out).wrapping_mul(self.top))
            .wrapping_mul(BASE)
            .wrapping_add(u64::from(next));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(v: serde_json::Value) -> Body {
        Body::from_value(&v).unwrap()
    }

    #[test]
    fn field_names_as_whole_phrases_any_case() {
        let b = body(json!({"model": "gpt-4o", "messages": [], "invalid api key": 1, "n": 2}));
        let asked = Asked::new(&b);
        assert_eq!(
            asked.echoed_in("Unrecognized request argument supplied: Invalid API Key"),
            Some(Echo::Field("invalid api key".into()))
        );
        assert_eq!(
            asked.echoed_in("n: Extra inputs are not permitted"),
            Some(Echo::Field("n".into()))
        );
        // Inside another word is no echo; `model` is the gateway's.
        assert_eq!(
            asked.echoed_in("The model `gpt-4o` does not exist, no messagesx here"),
            None
        );
        assert_eq!(asked.echoed_in("internal error"), None);
        assert_eq!(asked.echoed_in(""), None);
    }

    #[test]
    fn runs_of_the_requests_text() {
        let b = body(json!({"model": "claude-3-5-sonnet-20241022",
                            "messages": [{"role": "user", "content": "Please repeat: Exceeded Your Current Quota now"}]}));
        let asked = Asked::new(&b);
        assert_eq!(
            asked.echoed_in("You exceeded your current quota, please check your plan"),
            Some(Echo::Text)
        );
        // Fifteen bytes in common are not enough; the model's name is not the client's text.
        assert_eq!(asked.echoed_in("exceeded your c"), None);
        assert_eq!(asked.echoed_in("model: claude-3-5-sonnet-20241022 not found"), None);
        // A long field name is found by its run.
        let b = body(json!({"a field name longer than sixteen": 1}));
        assert_eq!(
            Asked::new(&b).echoed_in("Unknown name \"a field name longer than sixteen\""),
            Some(Echo::Field("a field name longer than sixteen".into()))
        );
    }

    #[test]
    fn only_the_start_of_a_long_text_is_read_and_nothing_breaks_on_utf8() {
        let b = body(json!({"messages": "ééééééééééééééééééééé zzzzzzzzzzzzzzzzzzzz"}));
        let asked = Asked::new(&b);
        let far = format!("{}zzzzzzzzzzzzzzzzzzzz", "x".repeat(TEXT_LIMIT));
        assert_eq!(asked.echoed_in(&far), None);
        assert_eq!(asked.echoed_in(&far[TEXT_LIMIT - 4..]), Some(Echo::Text));
        // Cut inside a two-byte character: no panic.
        assert_eq!(
            asked.echoed_in(&format!("a{}", "é".repeat(TEXT_LIMIT))),
            Some(Echo::Text)
        );
        assert_eq!(asked.echoed_in("ééééééé"), None, "14 bytes");
    }
}
