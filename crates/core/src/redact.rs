//! What of an upstream's text may reach a client, a record or a log (SPEC §15): every upstream
//! text leaves an attempt through one [`Redactor`], which removes the route's own secrets (its
//! key, an AWS secret or session token, a minted access token) and every key-like token,
//! whatever credential the route has — none at all included (SPEC: "key-like tokens redacted from
//! any upstream text a client sees").
//!
//! Key-like tokens, each starting where a word starts (not after a letter or digit):
//! - `sk-…` (OpenAI `sk-`, `sk-proj-`, Anthropic `sk-ant-`, masked `sk-abc***xyz` included);
//! - Google API keys `AIza…` (20 or more key characters after the prefix);
//! - AWS access key ids `AKIA…` / `ASIA…` (16 upper-case letters or digits after the prefix);
//! - a bearer credential: `Bearer <token>` (the word kept, the token removed).
//!
//! A client that sends such text itself may see it redacted in the provider's echo: acceptable.
//! The work is linear in the text.

/// What a removed secret reads as.
pub const REDACTED: &str = "[redacted]";

/// The secrets of one route's attempt; every upstream text the client or the record sees passes
/// through [`Redactor::text`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for these secrets (empty ones ignored).
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Redactor {
        Redactor {
            secrets: secrets
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }

    /// `text` without the route's secrets and without any key-like token.
    pub fn text(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        key_like(&out)
    }
}

/// A character a key is written with (masks and separators included).
fn key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'*' | b'.')
}

/// Whether a token may start at byte `at`: not inside a word of key characters (`task-sk-1` is
/// no key).
fn starts_word(bytes: &[u8], at: usize) -> bool {
    at == 0 || !key_char(bytes[at - 1])
}

/// The length of the run of `ok` bytes from `from`, without trailing `.` or `-` (punctuation after
/// a key is not part of it).
fn run(bytes: &[u8], from: usize, ok: fn(u8) -> bool) -> usize {
    let tail = &bytes[from.min(bytes.len())..];
    let mut n = tail.iter().take_while(|b| ok(**b)).count();
    while n > 0 && matches!(tail[n - 1], b'.' | b'-') {
        n -= 1;
    }
    n
}

/// The length of the key-like token starting at `at` that is to be removed, and how many of its
/// first bytes are kept (the word `Bearer `), if one starts there.
fn token_at(bytes: &[u8], at: usize) -> Option<(usize, usize)> {
    if !starts_word(bytes, at) {
        return None;
    }
    let rest = &bytes[at..];
    let run = |from: usize, ok: fn(u8) -> bool| run(rest, from, ok);
    if rest.starts_with(b"sk-") {
        return Some((3 + run(3, key_char), 0));
    }
    if rest.starts_with(b"AIza") {
        let n = run(4, key_char);
        return (n >= 20).then_some((4 + n, 0));
    }
    if rest.starts_with(b"AKIA") || rest.starts_with(b"ASIA") {
        let n = run(4, |b| b.is_ascii_uppercase() || b.is_ascii_digit());
        return (n >= 16).then_some((4 + n, 0));
    }
    if rest.len() > 7 && rest[..7].eq_ignore_ascii_case(b"bearer ") {
        let n = run(7, |b| key_char(b) || matches!(b, b'+' | b'/' | b'=' | b'~'));
        return (n >= 8).then_some((7 + n, 7));
    }
    None
}

/// `text` with every key-like token replaced by [`REDACTED`].
fn key_like(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        // Tokens are ASCII and start on an ASCII byte: `at` is always a char boundary here.
        match token_at(bytes, at) {
            Some((len, kept)) => {
                out.push_str(&text[copied..at + kept]);
                out.push_str(REDACTED);
                at += len;
                copied = at;
            }
            None => at += 1,
        }
    }
    out.push_str(&text[copied..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_token_shape_is_removed_wherever_it_stands() {
        let tokens = [
            "sk-abcdefghijklmnopqrstuvwx",
            "sk-proj-AbC123_def-456",
            "sk-ant-api03-AbCdEf_GhIj-KlMn",
            "sk-abc***xyz",
            "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv",
            "AKIAIOSFODNN7EXAMPLE",
            "ASIAY34FZKBOKMUTVV7A",
        ];
        let places: [(&str, &str); 7] = [
            ("", ""),
            ("key=", " was refused"),
            ("Incorrect API key provided: ", "."),
            ("{\"message\":\"bad key ", " given\"}"),
            ("{\"k\":\"", "\"}"),
            ("(", ")"),
            ("line one\nkey: ", "\nline three"),
        ];
        for token in tokens {
            for (before, after) in places {
                let text = format!("{before}{token}{after}");
                let got = Redactor::default().text(&text);
                assert_eq!(got, format!("{before}{REDACTED}{after}"), "{text}");
            }
        }
        for (before, after) in places {
            let text = format!("{before}Bearer eyJhbGciOi.J9-xyz_123{after}");
            assert_eq!(
                Redactor::default().text(&text),
                format!("{before}Bearer {REDACTED}{after}"),
                "{text}"
            );
            let text = format!("{before}authorization: bearer ya29.a0AfH6SMBx{after}");
            assert_eq!(
                Redactor::default().text(&text),
                format!("{before}authorization: bearer {REDACTED}{after}"),
                "{text}"
            );
        }
    }

    #[test]
    fn text_that_only_looks_alike_stays() {
        for text in [
            "task-sk-1 stays",
            "risk-free",
            "AIza is short",
            "AKIA1234",
            "a bearer of news",
            "Bearer short",
            "nothing here",
            "überall sk",
            "",
        ] {
            assert_eq!(Redactor::default().text(text), text);
        }
    }

    #[test]
    fn the_routes_own_secrets_go_whatever_their_shape() {
        let r = Redactor::new(["UPSTREAM-SECRET-1", "", "aws/secret+KEY"]);
        assert_eq!(
            r.text("key UPSTREAM-SECRET-1 and aws/secret+KEY refused, sk-x1 too"),
            "key [redacted] and [redacted] refused, [redacted] too"
        );
        assert_eq!(r.text("é ü — no secret"), "é ü — no secret");
        // Without any secret, key-like tokens still go (a route with no key, SPEC §15).
        assert_eq!(Redactor::new([]).text("key=sk-abc"), "key=[redacted]");
    }
}
