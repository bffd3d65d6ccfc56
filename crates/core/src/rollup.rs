//! The ledger's retention (SPEC §22): per-request charges rolled up into hourly totals per
//! (account, key, model) once a week old, hours into days once five weeks old — by the cron job, a
//! bounded amount per run, each step one transaction (the totals added and the rows deleted
//! together), so a run cut short or run twice adds nothing twice. The dates each run works to are
//! decided here; the statements are the store's.

/// Per-request charges are kept this long (longer than any settlement can still arrive: the
/// outbox replays within hours, a hold's own row is kept 7 days after it expires).
pub const RAW_KEPT_MS: u64 = 8 * DAY_MS;
/// Hourly totals are kept this long, then added into their day.
pub const HOURLY_KEPT_MS: u64 = 35 * DAY_MS;
/// The most charges one run rolls up: at one run a minute, ≈ 330 charges/s kept up with.
pub const MAX_CHARGES_PER_RUN: u64 = 20_000;

pub const HOUR_MS: u64 = 3_600_000;
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// What one run does at `now_ms`: charges created before `charges_before` become hours, hours
/// starting before `hours_before` become days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Run {
    pub charges_before: u64,
    pub hours_before: u64,
}

/// The run at `now_ms`, given the oldest hourly total's start (`None`: there is none). Hours are
/// turned into days one day per run at most, and only whole days: a day's total is written once
/// all its hours are.
pub fn run(now_ms: u64, oldest_hour: Option<u64>) -> Run {
    let charges_before = now_ms.saturating_sub(RAW_KEPT_MS);
    let cutoff = day_start(now_ms.saturating_sub(HOURLY_KEPT_MS));
    let hours_before = match oldest_hour {
        Some(oldest) => cutoff.min(day_start(oldest).saturating_add(DAY_MS)),
        None => cutoff,
    };
    Run {
        charges_before,
        hours_before,
    }
}

/// The start of the hour `ms` is in.
pub fn hour_start(ms: u64) -> u64 {
    ms - ms % HOUR_MS
}

/// The start of the (UTC) day `ms` is in.
pub fn day_start(ms: u64) -> u64 {
    ms - ms % DAY_MS
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn charges_wait_a_week_and_hours_five_weeks() {
        let now = 100 * DAY_MS + 5 * HOUR_MS + 123;
        let r = run(now, None);
        assert_eq!(r.charges_before, now - 8 * DAY_MS);
        assert_eq!(r.hours_before, 65 * DAY_MS, "whole days only");
        // An old backlog of hours: one day of it per run.
        let r = run(now, Some(10 * DAY_MS + 7 * HOUR_MS));
        assert_eq!(r.hours_before, 11 * DAY_MS);
    }

    proptest! {
        /// A run never reaches into what must be kept, never splits a day, and makes progress
        /// on a backlog.
        #[test]
        fn a_run_keeps_what_must_be_kept(now in 40 * DAY_MS..4_000 * DAY_MS, back in 0u64..4_000 * DAY_MS) {
            let oldest = now.saturating_sub(back);
            let r = run(now, Some(oldest));
            prop_assert!(r.charges_before + RAW_KEPT_MS <= now);
            prop_assert!(r.hours_before + HOURLY_KEPT_MS <= now);
            prop_assert_eq!(r.hours_before % DAY_MS, 0);
            if day_start(oldest) + DAY_MS <= day_start(now - HOURLY_KEPT_MS) {
                prop_assert!(r.hours_before > oldest, "progress on a backlog");
            }
            prop_assert_eq!(hour_start(oldest) % HOUR_MS, 0);
        }
    }
}
