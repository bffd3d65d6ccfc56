//! Desks (SPEC §22): where a busy ledger's money is gathered across isolates before D1.
//!
//! Each isolate batches its own settlements and fast holds per ledger for a few milliseconds. A
//! ledger a thousand isolates write to gives each of them a trickle, so those batches hold one
//! item or two and their number grows with the isolates: at 100,000 req/s over 64 ledgers each
//! ledger would take about two D1 calls per request. A ledger that busy has *desks* instead:
//! Durable Objects (`desk:<ledger>:<n>`) that take its isolates' settlements and fast holds, keep
//! them in their own storage, and write what they hold to the ledger as one batch [`FLUSH_MS`]
//! after the first — so the ledger sees at most `desks × 1000 / FLUSH_MS` batches a second,
//! however many isolates there are.
//!
//! Whether a ledger is that busy is read from the ledger itself: every settlement counts in its
//! `ledger_pace.settlements_total`, which comes back with each read of an account's balance on it
//! (the key's read, the balance snapshot's) and with each settlement batch's answer. An isolate's
//! [`Pace`] turns two reads into the ledger's rate across all isolates, and the rate into a
//! number of desks ([`desks_for`]: none below the policy's `desk_from_per_s`, with hysteresis so
//! a ledger near the line does not flap). An isolate sends all its items for a ledger to one desk
//! ([`pick`], by the isolate's own number), so its batches stay as large as its traffic allows.
//! Which path an item takes changes nothing in the books: settlement and fast-hold writes are
//! idempotent and commute (`crate::settlement`).

use crate::spread::hash64;

/// How long a desk gathers before it writes to the ledger: from its first item held.
pub const FLUSH_MS: u64 = 250;
/// The most items one flush writes (the rest go in the next, at once).
pub const FLUSH_MOST: usize = 512;
/// Settlements a second one desk is sized for: each brings up to two calls (its fast hold, its
/// settlement) when isolates' batches hold one item each — 300 calls a second at most, ≈ 15 %
/// of a desk at the 0.5 ms a call measured (`bench/objects.mjs`). Room to spare on purpose: a
/// ledger D1 cannot keep up with counts its settlements late, so its isolates' paces call for
/// fewer desks than its traffic needs (docs/SCALE.md, "Desks for a busy ledger").
pub const PER_DESK_PER_S: u64 = 150;
/// The most desks a ledger has (a power of two, so desk names stay stable as the count moves).
pub const MAX_DESKS: u32 = 64;
/// Reads closer together than this teach nothing about the rate (the counter moves in batches).
pub const MIN_SPAN_MS: u64 = 1_000;

/// How many desks a ledger settling `per_s` a second has, given the policy's threshold
/// `from_per_s` (0: desks never) and how many it had (`now`): none below the threshold — or, once
/// it has desks, below half of it — else `per_s / PER_DESK_PER_S` rounded up to a power of two, at
/// most [`MAX_DESKS`].
pub fn desks_for(per_s: f64, from_per_s: u64, now: u32) -> u32 {
    if from_per_s == 0 || !per_s.is_finite() {
        return 0;
    }
    let line = if now > 0 {
        from_per_s as f64 / 2.0
    } else {
        from_per_s as f64
    };
    if per_s < line {
        return 0;
    }
    let wanted = (per_s / PER_DESK_PER_S as f64).ceil().max(1.0) as u32;
    wanted.min(MAX_DESKS).next_power_of_two().min(MAX_DESKS)
}

/// The desk (0-based) an isolate (its random seed) sends a ledger's items to.
pub fn pick(isolate: u64, desks: u32) -> u32 {
    (hash64(&["desk", &isolate.to_string()]) % u64::from(desks.max(1))) as u32
}

/// The object name of ledger `ledger`'s desk `n`.
pub fn name(ledger: u8, n: u32) -> String {
    format!("desk:{ledger}:{n}")
}

/// One isolate's view of a ledger's pace: its last read of `settlements_total`, the rate two
/// reads gave, and the desks it last called for ([`Pace::desks`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pace {
    /// The counter and when it was read (Unix ms); `None` before the first read.
    last: Option<(u64, u64)>,
    /// Settlements a second between the last two reads far enough apart.
    pub per_s: Option<f64>,
    /// Desks the ledger had at the last decision (0: settlements go straight to D1).
    had: u32,
}

impl Pace {
    /// Takes a read of the ledger's counter, `total` at `at_ms`. A read too soon after the last
    /// ([`MIN_SPAN_MS`]), or older than it, changes nothing; a counter that went back (a restore)
    /// starts over.
    pub fn read(&mut self, total: u64, at_ms: u64) {
        let Some((before, then)) = self.last else {
            self.last = Some((total, at_ms));
            return;
        };
        if at_ms < then.saturating_add(MIN_SPAN_MS) {
            return;
        }
        if total < before {
            *self = Pace {
                last: Some((total, at_ms)),
                ..Pace::default()
            };
            return;
        }
        let per_s = (total - before) as f64 * 1_000.0 / (at_ms - then) as f64;
        self.last = Some((total, at_ms));
        self.per_s = Some(per_s);
    }

    /// The desks the ledger has now under the policy's `from_per_s` ([`desks_for`]; none before
    /// a rate is known).
    pub fn desks(&mut self, from_per_s: u64) -> u32 {
        self.had = self.per_s.map_or(0, |per_s| desks_for(per_s, from_per_s, self.had));
        self.had
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_desks_below_the_line_and_none_when_the_policy_says_never() {
        assert_eq!(desks_for(99.0, 100, 0), 0);
        assert_eq!(desks_for(100.0, 100, 0), 1);
        assert_eq!(desks_for(1e6, 0, 0), 0, "0: never");
        assert_eq!(desks_for(f64::NAN, 100, 4), 0);
    }

    #[test]
    fn a_ledger_with_desks_keeps_them_down_to_half_the_line() {
        assert_eq!(desks_for(60.0, 100, 0), 0);
        assert_eq!(desks_for(60.0, 100, 1), 1);
        assert_eq!(desks_for(49.0, 100, 1), 0);
    }

    #[test]
    fn desks_grow_with_the_rate_in_powers_of_two_up_to_the_most() {
        assert_eq!(desks_for(150.0, 100, 0), 1);
        assert_eq!(desks_for(151.0, 100, 0), 2);
        assert_eq!(desks_for(500.0, 100, 0), 4);
        assert_eq!(desks_for(1_000.0, 100, 0), 8);
        assert_eq!(desks_for(4_800.0, 100, 0), 32);
        assert_eq!(desks_for(10_000.0, 100, 0), 64);
        assert_eq!(desks_for(1e9, 100, 0), MAX_DESKS);
    }

    #[test]
    fn two_reads_a_second_or_more_apart_give_the_rate() {
        let mut pace = Pace::default();
        pace.read(1_000, 10_000);
        assert_eq!((pace.per_s, pace.desks(100)), (None, 0), "one read: no rate");
        pace.read(1_400, 10_500);
        assert_eq!(pace.per_s, None, "half a second: too soon");
        pace.read(3_000, 12_000);
        assert_eq!(pace.per_s, Some(1_000.0));
        assert_eq!(pace.desks(100), 8);
        assert_eq!(pace.desks(0), 0, "the policy says never");
        assert_eq!(pace.desks(100), 8);
        pace.read(3_100, 14_000);
        assert_eq!(
            (pace.per_s, pace.desks(100)),
            (Some(50.0), 1),
            "above half the line: kept, one desk"
        );
        pace.read(3_150, 16_000);
        assert_eq!(pace.desks(100), 0, "25 a second: gone");
    }

    #[test]
    fn an_older_read_changes_nothing_and_a_counter_that_went_back_starts_over() {
        let mut pace = Pace::default();
        pace.read(0, 10_000);
        pace.read(5_000, 20_000);
        assert_eq!(pace.desks(100), 4);
        let before = pace;
        pace.read(9_000, 9_000);
        assert_eq!(pace, before, "a read from before the last");
        pace.read(10, 40_000);
        assert_eq!((pace.per_s, pace.desks(100)), (None, 0));
        pace.read(2_010, 42_000);
        assert_eq!(pace.per_s, Some(1_000.0));
    }

    #[test]
    fn an_isolate_keeps_one_desk_and_isolates_spread_over_them() {
        assert_eq!(pick(7, 8), pick(7, 8));
        assert_eq!(pick(7, 1), 0);
        assert_eq!(pick(7, 0), 0);
        let mut used = [0u32; 8];
        for isolate in 0..800u64 {
            used[pick(isolate, 8) as usize] += 1;
        }
        assert!(used.iter().all(|n| (60..=140).contains(n)), "{used:?}");
        assert_eq!(name(12, 3), "desk:12:3");
    }
}
