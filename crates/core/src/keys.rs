//! API keys: how a key is read from a request, minted, and hashed for storage.
//!
//! Invariant: only the SHA-256 hex digest of a key is ever stored or compared; the plaintext
//! exists once, in the response that creates it.

use sha2::{Digest, Sha256};

/// Prefix of every key Switchyard mints.
pub const KEY_PREFIX: &str = "sk-sy-";

/// The key a client presented: `Authorization: Bearer <key>` first, then `x-api-key: <key>`
/// (Anthropic SDKs). Blank values count as absent.
pub fn presented_key<'a>(authorization: Option<&'a str>, x_api_key: Option<&'a str>) -> Option<&'a str> {
    let bearer = authorization.and_then(|value| {
        let value = value.trim();
        let (scheme, rest) = value.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    });
    bearer
        .filter(|k| !k.is_empty())
        .or_else(|| x_api_key.map(str::trim).filter(|k| !k.is_empty()))
}

/// Whether `key` has the shape [`mint_key`] gives every key: anything else is refused without a
/// lookup (a malformed key costs no D1 query).
pub fn well_formed(key: &str) -> bool {
    key.strip_prefix(KEY_PREFIX)
        .is_some_and(|rest| rest.len() == 64 && rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
}

/// The stored form of a key: lower-case hex SHA-256 of its exact bytes.
pub fn hash_key(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}

/// A new plaintext key from 32 random bytes (the caller supplies the randomness).
pub fn mint_key(random: &[u8; 32]) -> String {
    format!("{KEY_PREFIX}{}", hex(random))
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 0x0f) as usize] as char);
    }
    out
}

/// Constant-time comparison for secrets of equal visibility (the admin token).
pub fn secrets_equal(a: &str, b: &str) -> bool {
    let (a, b) = (hash_key(a), hash_key(b));
    a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bearer_then_x_api_key() {
        assert_eq!(presented_key(Some("Bearer sk-1"), None), Some("sk-1"));
        assert_eq!(presented_key(Some("bearer   sk-1 "), Some("sk-2")), Some("sk-1"));
        assert_eq!(presented_key(None, Some("sk-2")), Some("sk-2"));
        assert_eq!(presented_key(Some("Basic abc"), Some("sk-2")), Some("sk-2"));
        assert_eq!(presented_key(Some("Bearer "), Some(" ")), None);
        assert_eq!(presented_key(None, None), None);
    }

    #[test]
    fn hashes_are_sha256_hex() {
        assert_eq!(
            hash_key("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let key = mint_key(&[0xab; 32]);
        assert!(key.starts_with(KEY_PREFIX));
        assert_eq!(key.len(), KEY_PREFIX.len() + 64);
        assert!(secrets_equal("x", "x"));
        assert!(!secrets_equal("x", "y"));
    }

    #[test]
    fn only_minted_shapes_are_looked_up() {
        assert!(well_formed(&mint_key(&[7; 32])));
        for bad in [
            "",
            "sk-sy-",
            "sk-sy-not-a-real-key",
            "sk-live-abc",
            &format!("sk-sy-{}", "A".repeat(64)),
        ] {
            assert!(!well_formed(bad), "{bad}");
        }
    }
}
