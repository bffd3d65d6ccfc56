//! Keyrings (SPEC §22): where isolates read API keys, so a ledger's key reads do not grow with
//! the isolates.
//!
//! Every isolate keeps the keys it serves for a few seconds and reads each again when its copy is
//! due. Read straight from the key's ledger, that is one D1 read per key per isolate every few
//! seconds — and, for the many keys an isolate sees less often than that, one per request: at
//! 100,000 req/s over 64 ledgers and a thousand isolates, thousands a second on a busy ledger. A
//! keyring is a Durable Object (`keys:<n>`: the key's hash picks [`SPREAD`] of them, the isolate's
//! seed one of those) that reads the key from its ledger and answers its isolates from that copy
//! while it is younger than [`FRESH_MS`]: a ledger then sees at most [`SPREAD`] reads per key per
//! [`FRESH_MS`], whatever the isolates. The answer carries when D1 was read, and an isolate counts its copy's age from that
//! read — so a revoked key, a new limit or a balance still reaches every isolate within the
//! isolate's own time-to-live of the read, as before keyrings. The first [`CATALOG_RINGS`]
//! keyrings read the catalog the same way for the isolates that ask them ([`catalog_ring`]), so
//! the home database's catalog reads do not grow with the isolates either.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::spread::hash64;

/// How many keyrings a deployment has (fixed: a key's keyring must not move).
pub const KEYRINGS: u32 = 256;
/// How many of them (the first) also read the catalog for the isolates: each isolate asks one,
/// by its seed, so the home database sees at most this many catalog reads per [`FRESH_MS`].
pub const CATALOG_RINGS: u32 = 16;
/// How long a keyring answers from its copy of a key (or of its absence) before reading it again.
pub const FRESH_MS: u64 = 2_000;
/// How long a keyring remembers that it forgot a key (a revocation): longer than any D1 read
/// begun before it can take, so such a read's answer is not kept as a copy.
pub const FORGOTTEN_MS: u64 = 10_000;
/// Past this many copies a keyring drops the stale ones before keeping another.
pub const MOST_COPIES: usize = 4_096;

/// How many keyrings read one key: each isolate asks one of them (by its seed), so a key that
/// every isolate uses (the busiest account's) loads each with a quarter of the isolates.
pub const SPREAD: u32 = 4;

/// The keyrings of the key with this hash: every one an isolate may read it through.
pub fn rings(key_hash: &str) -> Vec<u32> {
    (0..u64::from(SPREAD)).map(|lane| in_lane(key_hash, lane)).collect()
}

/// The keyring (0-based) through which an isolate (its random seed) reads the key with this hash.
pub fn ring(key_hash: &str, isolate: u64) -> u32 {
    in_lane(
        key_hash,
        hash64(&["keyring-lane", &isolate.to_string()]) % u64::from(SPREAD),
    )
}

/// The key's keyring in lane `lane` (< [`SPREAD`]): its first keyring, by its hash, and the next.
fn in_lane(key_hash: &str, lane: u64) -> u32 {
    let first = hash64(&["keyring", key_hash]) % u64::from(KEYRINGS);
    ((first + lane) % u64::from(KEYRINGS)) as u32
}

/// The keyring (0-based) an isolate (its random seed) reads the catalog through.
pub fn catalog_ring(isolate: u64) -> u32 {
    (hash64(&["catalog", &isolate.to_string()]) % u64::from(CATALOG_RINGS)) as u32
}

/// The object name of keyring `n`.
pub fn name(n: u32) -> String {
    format!("keys:{n}")
}

/// What an isolate asks a keyring.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum Call {
    /// The active key with this hash, looked up in `ledger` (the one the key names).
    Read { hash: String, ledger: u8 },
    /// The catalog; its document left out if its version is `held` (the caller has it).
    Catalog { held: Option<i64> },
    /// Drop the copy of the key with this hash (it was revoked): its next call reads D1.
    Forget { hash: String },
}

/// The stored catalog as a keyring answers with it: its version (0: none stored yet) and its
/// document (none: the caller holds this version, or none is stored).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CatalogText {
    pub version: i64,
    #[serde(default)]
    pub doc: Option<String>,
}

/// A keyring's answer: the key (`R`, the Worker's record) its read found — none: no active key
/// has that hash — and when D1 was read (Unix ms, before the read began); or that D1 could not be
/// read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answer<R> {
    pub found: Option<R>,
    #[serde(default)]
    pub read_at_ms: u64,
    #[serde(default)]
    pub unavailable: bool,
}

impl<R> Answer<R> {
    /// What a read at `read_at_ms` found.
    pub fn read(found: Option<R>, read_at_ms: u64) -> Answer<R> {
        Answer {
            found,
            read_at_ms,
            unavailable: false,
        }
    }

    /// D1 could not be read.
    pub fn unavailable() -> Answer<R> {
        Answer {
            found: None,
            read_at_ms: 0,
            unavailable: true,
        }
    }
}

/// A keyring's copies: what each read found (a key, or that there is none) and when (Unix ms).
#[derive(Debug, Clone)]
pub struct Copies<K, V> {
    /// `None`: forgotten at that time (a revocation), so that a read begun before it and ending
    /// after it is not kept.
    copies: HashMap<K, (Option<V>, u64)>,
}

impl<K, V> Default for Copies<K, V> {
    fn default() -> Self {
        Copies { copies: HashMap::new() }
    }
}

impl<K: Eq + Hash, V: Clone> Copies<K, V> {
    /// The copy of `key` and when it was read, if younger than [`FRESH_MS`] at `now_ms`.
    pub fn fresh(&self, key: &K, now_ms: u64) -> Option<(V, u64)> {
        match self.copies.get(key) {
            Some((Some(v), at)) if now_ms.saturating_sub(*at) < FRESH_MS => Some((v.clone(), *at)),
            _ => None,
        }
    }

    /// Keeps what a read of `key` begun at `read_ms` found — unless a later read's copy is there,
    /// or the key was forgotten since the read began (at the same millisecond too: the read may
    /// have come first). Past [`MOST_COPIES`], the stale copies go first.
    pub fn keep(&mut self, key: K, value: V, read_ms: u64) {
        match self.copies.get(&key) {
            Some((Some(_), at)) if *at > read_ms => return,
            Some((None, forgotten)) if *forgotten >= read_ms => return,
            _ => {}
        }
        if self.copies.len() >= MOST_COPIES && !self.copies.contains_key(&key) {
            self.copies.retain(|_, (copy, at)| {
                read_ms.saturating_sub(*at) < if copy.is_some() { FRESH_MS } else { FORGOTTEN_MS }
            });
            if self.copies.len() >= MOST_COPIES {
                self.copies.clear();
            }
        }
        self.copies.insert(key, (Some(value), read_ms));
    }

    /// Drops the copy of `key` at `now_ms`: no read begun before then is kept.
    pub fn forget(&mut self, key: K, now_ms: u64) {
        self.copies.insert(key, (None, now_ms));
    }

    pub fn len(&self) -> usize {
        self.copies.len()
    }

    pub fn is_empty(&self) -> bool {
        self.copies.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_has_a_few_keyrings_and_keys_spread_over_them() {
        assert_eq!(ring("abc", 7), ring("abc", 7), "an isolate asks the same keyring");
        let of_one: std::collections::HashSet<u32> = (0..1_000u64).map(|i| ring("abc", i)).collect();
        assert_eq!(of_one.len(), SPREAD as usize, "isolates spread over a key's keyrings");
        let all: std::collections::HashSet<u32> = rings("abc").into_iter().collect();
        assert_eq!(all, of_one, "`rings` names every keyring an isolate may ask");
        let mut used = std::collections::HashSet::new();
        for i in 0..10_000 {
            let r = ring(&format!("hash-{i}"), 1);
            assert!(r < KEYRINGS);
            used.insert(r);
        }
        assert_eq!(used.len(), KEYRINGS as usize, "10,000 keys reach every keyring");
        assert_eq!(name(7), "keys:7");
        let rings: std::collections::HashSet<u32> = (0..1_000u64).map(catalog_ring).collect();
        assert_eq!(
            rings.len(),
            CATALOG_RINGS as usize,
            "isolates spread over the catalog's keyrings"
        );
        assert_eq!(catalog_ring(42), catalog_ring(42));
    }

    #[test]
    fn calls_and_answers_on_the_wire() {
        let call = Call::Read {
            hash: "h".into(),
            ledger: 3,
        };
        let text = serde_json::to_string(&call).unwrap();
        assert_eq!(text, r#"{"call":"read","hash":"h","ledger":3}"#);
        assert_eq!(serde_json::from_str::<Call>(&text).unwrap(), call);
        let call = Call::Catalog { held: Some(4) };
        let text = serde_json::to_string(&call).unwrap();
        assert_eq!(text, r#"{"call":"catalog","held":4}"#);
        assert_eq!(serde_json::from_str::<Call>(&text).unwrap(), call);
        let a: Answer<u32> = serde_json::from_str(r#"{"found":7,"read_at_ms":5}"#).unwrap();
        assert_eq!((a.found, a.read_at_ms, a.unavailable), (Some(7), 5, false));
        let a: Answer<u32> = serde_json::from_str(r#"{"unavailable":true}"#).unwrap();
        assert_eq!(a, Answer::unavailable());
    }

    #[test]
    fn a_copy_is_served_while_fresh_and_never_replaced_by_an_older_read() {
        let mut c: Copies<&str, Option<u32>> = Copies::default();
        assert_eq!(c.fresh(&"k", 0), None);
        c.keep("k", Some(1), 10_000);
        assert_eq!(c.fresh(&"k", 10_000 + FRESH_MS - 1), Some((Some(1), 10_000)));
        assert_eq!(c.fresh(&"k", 10_000 + FRESH_MS), None, "stale: read again");
        c.keep("k", Some(0), 9_000);
        assert_eq!(
            c.fresh(&"k", 10_500),
            Some((Some(1), 10_000)),
            "an older read arrived late"
        );
        c.keep("k", None, 11_000);
        assert_eq!(c.fresh(&"k", 11_500), Some((None, 11_000)), "a key revoked since");
        c.forget("k", 11_500);
        assert_eq!(c.fresh(&"k", 11_500), None, "forgotten: read again");
    }

    #[test]
    fn a_read_begun_before_a_key_was_forgotten_is_not_kept() {
        let mut c: Copies<&str, Option<u32>> = Copies::default();
        c.keep("k", Some(1), 1_000);
        // Revoked at 1,500; a read begun at 1,200 (before) ends after it, with the old record.
        c.forget("k", 1_500);
        c.keep("k", Some(1), 1_200);
        assert_eq!(c.fresh(&"k", 1_600), None, "the old record is not served again");
        c.keep("k", Some(1), 1_500);
        assert_eq!(
            c.fresh(&"k", 1_600),
            None,
            "a read of the same millisecond may have come first"
        );
        // A read begun after the revocation finds no key, and that is kept.
        c.keep("k", None, 1_501);
        assert_eq!(c.fresh(&"k", 1_600), Some((None, 1_501)));
        // Under pressure, a recent mark stays while stale copies go.
        let mut c: Copies<u32, u8> = Copies::default();
        c.forget(0, 0);
        for i in 1..MOST_COPIES as u32 {
            c.keep(i, 0, 0);
        }
        c.keep(1_000_000, 1, FRESH_MS);
        assert_eq!(c.len(), 2, "the stale copies went, the mark stayed");
        c.keep(0, 1, 0);
        assert_eq!(
            c.fresh(&0, FRESH_MS),
            None,
            "a read begun with the mark is still refused"
        );
    }

    #[test]
    fn copies_stay_bounded_and_keep_the_fresh_ones() {
        let mut c: Copies<u32, u8> = Copies::default();
        for i in 0..MOST_COPIES as u32 {
            c.keep(i, 0, 0);
        }
        c.keep(1_000_000, 1, FRESH_MS); // every earlier copy is stale by now
        assert_eq!(c.len(), 1);
        for i in 0..MOST_COPIES as u32 * 2 {
            c.keep(i, 2, 5 * FRESH_MS);
        }
        assert!(c.len() <= MOST_COPIES);
        assert!(
            c.fresh(&(MOST_COPIES as u32 * 2 - 1), 5 * FRESH_MS).is_some(),
            "the newest is kept"
        );
    }
}
