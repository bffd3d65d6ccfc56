//! API keys: how a key is read from a request, minted, and hashed for storage.
//!
//! Invariant: only the SHA-256 hex digest of a key is ever stored or compared; the plaintext
//! exists once, in the response that creates it.

use std::collections::{BTreeMap, HashMap};

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

/// Hex digits of a key's ledger (`crate::ledgers`), of its random part, and of its checksum.
const LEDGER_HEX: usize = 2;
const RANDOM_HEX: usize = 64;
const CHECKSUM_HEX: usize = 8;

/// What a presented key's text alone says about it (SPEC §22: unknown keys cost no storage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyShape {
    /// A key as [`mint_key`] makes them: `sk-sy-`, 2 hex digits naming its account's ledger, 64
    /// of randomness and the 8 of their checksum, which holds — or one minted before keys carried
    /// their ledger (64 + 8 digits; ledger 0). Looked up in that ledger.
    Checked { ledger: u8 },
    /// A key minted before keys carried a checksum (`sk-sy-` and 64 hex digits; ledger 0): its
    /// customer keeps it, so it is still looked up (and, unknown, remembered as such like any
    /// other).
    Legacy,
    /// Anything else — another shape, or a checksum that does not hold: refused 401 without a
    /// lookup.
    Malformed,
}

/// The shape of `key` (see [`KeyShape`]).
pub fn key_shape(key: &str) -> KeyShape {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return KeyShape::Malformed;
    };
    if !rest.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return KeyShape::Malformed;
    }
    let checked = |body: usize| rest[body..] == checksum(&rest[..body]);
    match rest.len() {
        RANDOM_HEX => KeyShape::Legacy,
        n if n == RANDOM_HEX + CHECKSUM_HEX && checked(RANDOM_HEX) => KeyShape::Checked { ledger: 0 },
        n if n == LEDGER_HEX + RANDOM_HEX + CHECKSUM_HEX && checked(LEDGER_HEX + RANDOM_HEX) => {
            match u8::from_str_radix(&rest[..LEDGER_HEX], 16) {
                Ok(ledger) if ledger < crate::ledgers::MAX_LEDGERS => KeyShape::Checked { ledger },
                _ => KeyShape::Malformed,
            }
        }
        _ => KeyShape::Malformed,
    }
}

impl KeyShape {
    /// The ledger to look the key up in; `None` for a malformed key — refused without a lookup (a
    /// mistyped or invented key costs no D1 query).
    pub fn ledger(self) -> Option<u8> {
        match self {
            KeyShape::Checked { ledger } => Some(ledger),
            KeyShape::Legacy => Some(0),
            KeyShape::Malformed => None,
        }
    }
}

/// A key's checksum: the first 4 bytes of SHA-256 over `switchyard-key:` and the hex before it
/// (its ledger and random part), in hex. Not a secret — it tells a key Switchyard minted from a mistyped or invented one without
/// asking storage; an unknown key with a valid checksum is looked up once and then remembered.
fn checksum(body_hex: &str) -> String {
    let digest = Sha256::digest(format!("switchyard-key:{body_hex}").as_bytes());
    hex(&digest[..CHECKSUM_HEX / 2])
}

/// The stored form of a key: lower-case hex SHA-256 of its exact bytes.
pub fn hash_key(key: &str) -> String {
    hex(&Sha256::digest(key.as_bytes()))
}

/// A new plaintext key for an account on `ledger`, from 32 random bytes (the caller supplies the
/// randomness), with its checksum.
pub fn mint_key(random: &[u8; 32], ledger: u8) -> String {
    let body = format!("{}{}", hex(&[ledger]), hex(random));
    let sum = checksum(&body);
    format!("{KEY_PREFIX}{body}{sum}")
}

/// Key hashes no key has, remembered for `ttl_ms` each, the least recently used forgotten first
/// past `capacity` (an isolate's negative cache: a flood of unknown keys keeps it at its size, and
/// the keys asked for most stay in it).
#[derive(Debug, Clone)]
pub struct UnknownKeys {
    capacity: usize,
    ttl_ms: u64,
    next: u64,
    /// Hash → (when found unknown, its place in `order`).
    seen: HashMap<String, (u64, u64)>,
    /// Place → hash, least recently used first.
    order: BTreeMap<u64, String>,
}

impl UnknownKeys {
    pub fn new(capacity: usize, ttl_ms: u64) -> UnknownKeys {
        UnknownKeys {
            capacity: capacity.max(1),
            ttl_ms,
            next: 0,
            seen: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Whether `hash` was found unknown within the TTL (it becomes the most recently used).
    pub fn known_unknown(&mut self, hash: &str, now_ms: u64) -> bool {
        let Some((at, place)) = self.seen.get(hash).copied() else {
            return false;
        };
        self.order.remove(&place);
        if now_ms.saturating_sub(at) >= self.ttl_ms {
            self.seen.remove(hash);
            return false;
        }
        self.place(hash, at);
        true
    }

    /// Remembers that no key has `hash`, as of `now_ms`.
    pub fn remember(&mut self, hash: &str, now_ms: u64) {
        if let Some((_, place)) = self.seen.remove(hash) {
            self.order.remove(&place);
        }
        self.place(hash, now_ms);
        while self.seen.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.seen.remove(&oldest);
        }
    }

    /// Forgets `hash` (a key with it exists now).
    pub fn forget(&mut self, hash: &str) {
        if let Some((_, place)) = self.seen.remove(hash) {
            self.order.remove(&place);
        }
    }

    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    fn place(&mut self, hash: &str, at: u64) {
        self.next += 1;
        self.seen.insert(hash.to_string(), (at, self.next));
        self.order.insert(self.next, hash.to_string());
    }
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
        let key = mint_key(&[0xab; 32], 3);
        assert!(key.starts_with(KEY_PREFIX));
        assert_eq!(key.len(), KEY_PREFIX.len() + 2 + 64 + 8);
        assert!(secrets_equal("x", "x"));
        assert!(!secrets_equal("x", "y"));
    }

    #[test]
    fn only_minted_shapes_are_looked_up() {
        assert!(key_shape(&mint_key(&[7; 32], 0)).ledger().is_some());
        assert_eq!(key_shape(&mint_key(&[7; 32], 5)), KeyShape::Checked { ledger: 5 });
        assert_eq!(key_shape(&mint_key(&[7; 32], 5)).ledger(), Some(5));
        // A key minted before keys carried their ledger: checked, on ledger 0.
        let random = "7".repeat(64);
        let unplaced = format!("sk-sy-{random}{}", checksum(&random));
        assert_eq!(key_shape(&unplaced), KeyShape::Checked { ledger: 0 });
        // A key minted before the checksum: still looked up.
        let legacy = format!("sk-sy-{}", "ab".repeat(32));
        assert_eq!(key_shape(&legacy), KeyShape::Legacy);
        assert_eq!(key_shape(&legacy).ledger(), Some(0));
        assert!(key_shape(&legacy).ledger().is_some());
        // A ledger past the most there can be, with a checksum that holds: refused.
        let body = format!("ff{random}");
        assert_eq!(
            key_shape(&format!("sk-sy-{body}{}", checksum(&body))),
            KeyShape::Malformed
        );
        for bad in [
            "",
            "sk-sy-",
            "sk-sy-not-a-real-key",
            "sk-live-abc",
            &format!("sk-sy-{}", "A".repeat(64)),
            &format!("sk-sy-{}", "a".repeat(72)),
            &format!("sk-sy-{}", "a".repeat(74)),
            &format!("sk-sy-{}", "a".repeat(65)),
        ] {
            assert_eq!(key_shape(bad).ledger(), None, "{bad}");
        }
    }

    /// Known checksum: the format is a contract with every key already handed out.
    #[test]
    fn the_checksum_is_sha256_of_the_ledger_and_random_part_truncated() {
        let key = mint_key(&[0; 32], 0x2a);
        let body = format!("2a{}", "0".repeat(64));
        let digest = Sha256::digest(format!("switchyard-key:{body}").as_bytes());
        assert_eq!(key, format!("sk-sy-{body}{}", hex(&digest[..4])));
    }

    proptest::proptest! {
        /// Any change to one hex digit of a minted key — the kind a typo or a guess makes — fails
        /// its checksum (or, in the checksum, no longer matches), so it is never looked up; a
        /// random key of the right length passes only by a 1-in-2^32 chance.
        #[test]
        fn a_changed_digit_fails_the_checksum(random in proptest::array::uniform32(0u8..), ledger in 0u8..crate::ledgers::MAX_LEDGERS, at in 0usize..74, digit in 0u8..16) {
            let key = mint_key(&random, ledger);
            proptest::prop_assert_eq!(key_shape(&key), KeyShape::Checked { ledger });
            let mut bytes = key.into_bytes();
            let i = KEY_PREFIX.len() + at;
            let new = b"0123456789abcdef"[digit as usize];
            proptest::prop_assume!(bytes[i] != new);
            bytes[i] = new;
            let changed = String::from_utf8(bytes).unwrap_or_default();
            proptest::prop_assert_eq!(key_shape(&changed), KeyShape::Malformed);
        }

        /// The negative cache never holds more than its capacity, and holds exactly the most
        /// recently used unexpired hashes a plain list would (the model: most recent last).
        #[test]
        fn unknown_keys_stay_bounded_and_forget_the_least_recently_used(
            ops in proptest::collection::vec((0u8..3, 0u8..12, 0u64..50), 1..200),
        ) {
            let (cap, ttl) = (4, 120);
            let mut cache = UnknownKeys::new(cap, ttl);
            let mut model: Vec<(String, u64)> = Vec::new();
            let mut now = 0;
            for (op, k, dt) in ops {
                now += dt;
                let hash = format!("h{k}");
                match op {
                    0 => {
                        cache.remember(&hash, now);
                        model.retain(|(h, _)| *h != hash);
                        model.push((hash, now));
                        if model.len() > cap {
                            model.remove(0);
                        }
                    }
                    1 => {
                        let want = match model.iter().position(|(h, _)| *h == hash) {
                            Some(i) if now - model[i].1 < ttl => {
                                let e = model.remove(i);
                                model.push(e);
                                true
                            }
                            Some(i) => {
                                model.remove(i);
                                false
                            }
                            None => false,
                        };
                        proptest::prop_assert_eq!(cache.known_unknown(&hash, now), want);
                    }
                    _ => {
                        cache.forget(&hash);
                        model.retain(|(h, _)| *h != hash);
                    }
                }
                proptest::prop_assert!(cache.len() <= cap);
                proptest::prop_assert_eq!(cache.len(), model.len());
            }
        }
    }
}
