//! Where per-request detail lives (SPEC §22): a generation's record (its attempts inline) is not a
//! D1 row but a row of a SQLite Durable Object named from the record's id — the day the id was
//! issued and the shard its `rand_a` bits name (`crate::ids::uuid_v7_in`) — so a lookup asks one
//! object and scans nothing. Each isolate mints its ids in one shard of [`SHARDS`] an hour
//! ([`shard_at`]), so its records go to one object at a time, in batches. A day's object deletes itself whole
//! [`KEPT_DAYS`] after its day began: every record is found for at least 30 days, and nothing is
//! kept for longer than 31.
//!
//! The route a Responses answer came from (`previous_response_id`, SPEC §17) is found by the
//! upstream's response id, which names no shard: those pins go to one of [`PIN_SHARDS`] objects
//! chosen by a hash of (account, response id), each pin kept [`KEPT_DAYS`] and swept by the
//! object's alarm in bounded steps.

use serde::{Deserialize, Serialize};

use crate::generation::GenerationRecord;
use crate::ids::{issued_ms, shard_of};

/// Record shards per day. An id keeps its shard in 12 bits, so this may grow to 4,096 without
/// moving a record: ids issued before keep naming the shard they went to. At ≈ 1.4 KB a record
/// (docs/SCALE.md) 2,048 shards keep a day's object under a SQLite Durable Object's 10 GB up to
/// ≈ 170,000 req/s.
pub const SHARDS: u16 = 2_048;
/// How long an isolate mints its ids in one shard: then it moves to another, so however busy one
/// isolate is, no day's object takes more than an hour of it.
pub const SHARD_FOR_MS: u64 = 3_600_000;
/// Objects that keep response pins.
pub const PIN_SHARDS: u64 = 256;
/// How long a day's records, and a pin, are kept.
pub const KEPT_DAYS: u64 = 31;
pub const DAY_MS: u64 = 86_400_000;
/// Pins deleted per sweep step of a pin object (its alarm comes back at once while more are due).
pub const PIN_SWEEP_STEP: u32 = 2_000;
/// How often a pin object that holds pins sweeps.
pub const PIN_SWEEP_EVERY_MS: u64 = 3_600_000;

/// The shard an isolate mints its ids in at `now_ms`: drawn from its own random `seed` and the
/// hour, so it stays for [`SHARD_FOR_MS`] and then moves, and isolates spread over the shards.
pub fn shard_at(seed: u64, now_ms: u64) -> u16 {
    let hour = (now_ms / SHARD_FOR_MS).to_string();
    (crate::spread::hash64(&[&seed.to_string(), &hour]) % u64::from(SHARDS)) as u16
}

/// The object that keeps the record of generation `id`, while it is kept at `now_ms`: `None`
/// for an id that names no shard of ours (issued before records left D1: look there) or whose
/// day is past [`KEPT_DAYS`].
pub fn object(id: &str, now_ms: u64) -> Option<String> {
    let shard = shard_of(id).filter(|s| *s < SHARDS)?;
    let day = issued_ms(id)? / DAY_MS;
    let name = format!("records:{day}:{shard}");
    (now_ms < forget_at_ms(day)).then_some(name)
}

/// When the records of `day` (days since the Unix epoch) are deleted.
pub fn forget_at_ms(day: u64) -> u64 {
    day.saturating_add(KEPT_DAYS).saturating_mul(DAY_MS)
}

/// The object that keeps the pin of `response_id` for `account`.
pub fn pin_object(account: &str, response_id: &str) -> String {
    format!("pins:{}", crate::spread::hash64(&[account, response_id]) % PIN_SHARDS)
}

/// What an object of the `RECORDS` class keeps, read from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shelf {
    /// One day's records of one shard: deleted whole at `forget_at_ms`.
    Day { forget_at_ms: u64 },
    /// Response pins, each kept [`KEPT_DAYS`].
    Pins,
}

impl Shelf {
    pub fn of(name: &str) -> Option<Shelf> {
        if let Some(n) = name.strip_prefix("pins:") {
            return n.parse::<u64>().ok().filter(|n| *n < PIN_SHARDS).map(|_| Shelf::Pins);
        }
        let (day, shard) = name.strip_prefix("records:")?.split_once(':')?;
        let day: u64 = day.parse().ok()?;
        shard.parse::<u16>().ok().filter(|s| *s < SHARDS)?;
        Some(Shelf::Day {
            forget_at_ms: forget_at_ms(day),
        })
    }
}

/// Pins written before this are swept at `now_ms`.
pub fn pins_forgotten_before(now_ms: u64) -> u64 {
    now_ms.saturating_sub(KEPT_DAYS * DAY_MS)
}

/// A Responses answer's route, found by the upstream's response id (SPEC §17).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pin {
    pub account_id: String,
    pub response_id: String,
    pub route: String,
    pub at_ms: u64,
}

impl Pin {
    /// The pin a record makes: a Responses answer with its upstream's id and a route.
    pub fn of(record: &GenerationRecord) -> Option<Pin> {
        Some(Pin {
            account_id: record.account_id.clone(),
            response_id: record.upstream_response_id.clone()?,
            route: record.route.clone()?,
            at_ms: record.created_at_ms,
        })
    }
}

/// One call to a records object: what to keep there.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Keep {
    #[serde(default)]
    pub records: Vec<GenerationRecord>,
    #[serde(default)]
    pub pins: Vec<Pin>,
}

/// One call to a records object: a record, if it is `account_id`'s.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Find {
    pub id: String,
    pub account_id: String,
}

/// One call to a pin object: the route of `response_id`, if `account_id` received it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FindPin {
    pub account_id: String,
    pub response_id: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{uuid_v7, uuid_v7_in};

    const NOW: u64 = 1_764_555_000_123;

    #[test]
    fn a_record_is_found_in_its_days_object_for_at_least_30_days_and_at_most_31() {
        for shard in [0, 7, SHARDS - 1] {
            for issued in [NOW - NOW % DAY_MS, NOW, NOW - NOW % DAY_MS + DAY_MS - 1] {
                let id = format!("gen-{}", uuid_v7_in(issued, shard, [9; 10]));
                let day = issued / DAY_MS;
                let name = format!("records:{day}:{shard}");
                assert_eq!(object(&id, issued), Some(name.clone()));
                assert_eq!(object(&id, issued + 30 * DAY_MS), Some(name.clone()), "30 days on");
                assert_eq!(object(&id, issued + 31 * DAY_MS), None, "past 31 days");
                assert_eq!(
                    Shelf::of(&name),
                    Some(Shelf::Day {
                        forget_at_ms: forget_at_ms(day)
                    })
                );
                let kept = forget_at_ms(day) - issued;
                assert!(kept > 30 * DAY_MS && kept <= 31 * DAY_MS, "kept {kept} ms");
            }
        }
    }

    #[test]
    fn ids_that_name_no_shard_of_ours_are_not_looked_for_in_an_object() {
        let outside = format!("gen-{}", uuid_v7_in(NOW, SHARDS, [1; 10]));
        assert_eq!(object(&outside, NOW), None);
        assert_eq!(object("gen-2f1c0b8e-5d2a-4c1e-9f00-0123456789ab", NOW), None, "v4");
        assert_eq!(object("nope", NOW), None);
        // An id minted before the shard bits (random rand_a) may name one: its object answers
        // "none", and the caller looks in D1.
        let old = format!("gen-{}", uuid_v7(NOW, [0; 10]));
        assert_eq!(object(&old, NOW), Some(format!("records:{}:0", NOW / DAY_MS)));
    }

    #[test]
    fn names_that_are_not_ours_have_no_shelf() {
        assert_eq!(Shelf::of("pins:0"), Some(Shelf::Pins));
        assert_eq!(Shelf::of(&format!("pins:{PIN_SHARDS}")), None);
        assert_eq!(Shelf::of(&format!("records:1:{SHARDS}")), None);
        for name in ["records:", "records:x:1", "records:1", "pins:", "model:x", ""] {
            assert_eq!(Shelf::of(name), None, "{name}");
        }
    }

    #[test]
    fn pins_spread_over_their_objects_and_each_response_has_one() {
        let mut counts = vec![0u32; PIN_SHARDS as usize];
        for i in 0..25_600 {
            let name = pin_object("acct-1", &format!("resp_{i}"));
            assert_eq!(name, pin_object("acct-1", &format!("resp_{i}")), "deterministic");
            assert_eq!(Shelf::of(&name), Some(Shelf::Pins));
            let n: usize = name["pins:".len()..].parse().unwrap_or(usize::MAX);
            counts[n] += 1;
        }
        let (min, max) = (counts.iter().min(), counts.iter().max());
        assert!(
            min.is_some_and(|m| *m > 50) && max.is_some_and(|m| *m < 160),
            "{min:?}..{max:?} of 100 each"
        );
    }

    #[test]
    fn pins_are_swept_after_the_same_time_records_are() {
        assert_eq!(pins_forgotten_before(NOW), NOW - KEPT_DAYS * DAY_MS);
        assert_eq!(pins_forgotten_before(5), 0);
    }

    #[test]
    fn an_isolate_keeps_its_shard_for_the_hour_then_moves_and_isolates_spread() {
        let hour = SHARD_FOR_MS;
        let t = 1_764_555_000_000 - 1_764_555_000_000 % hour;
        for seed in [1u64, 7, 12_345] {
            assert_eq!(shard_at(seed, t), shard_at(seed, t + hour - 1), "one hour, one shard");
        }
        let moved = (0..50u64).filter(|s| shard_at(*s, t) != shard_at(*s, t + hour)).count();
        assert!(moved >= 45, "the next hour, another shard: {moved} of 50 moved");
        let mut used = std::collections::BTreeSet::new();
        for seed in 0..4_096u64 {
            let s = shard_at(seed, t);
            assert!(s < SHARDS);
            used.insert(s);
        }
        assert!(
            used.len() > 1_500,
            "4,096 isolates use {} of {SHARDS} shards",
            used.len()
        );
    }
}
