//! One fetch in flight per copy (SPEC §22): when an isolate's copy of something costly to fetch
//! (a health object's snapshot, the status report) goes stale, exactly one of the requests that
//! find it so fetches a new one; the others are served the stale copy meanwhile, and wait for the
//! fetch only when there is no copy at all. A fetch that failed or timed out backs off (doubling)
//! before the next is tried, the stale copy served meanwhile: a slow store is asked less, not
//! more. Time is an argument; the waiting and fetching are the caller's (`src/health.rs`,
//! `src/http/status.rs`).

/// How a kind of copy is refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// A copy younger than this is used as it is.
    pub fresh_ms: u64,
    /// A fetch under way longer than this is taken for lost (its task died): the next caller
    /// fetches.
    pub give_up_ms: u64,
    /// How often a caller without a copy checks whether the fetch under way has finished.
    pub poll_ms: u64,
    /// The first back-off after a failed fetch; it doubles with each failure in a row.
    pub backoff_ms: u64,
    /// The longest back-off.
    pub backoff_max_ms: u64,
}

/// What a caller does with the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The copy is fresh: use it.
    Fresh,
    /// Use the stale copy (a fetch is under way, or the last one failed and is backing off).
    Stale,
    /// Fetch a new copy (marked under way from now), then tell [`Flight::done`].
    Fetch,
    /// No copy, and a fetch is under way: check again after this long.
    Wait(u64),
    /// No copy, and fetches are backing off: go on without one.
    Without,
}

/// The fetch state of one copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flight {
    /// When the fetch under way started.
    since_ms: Option<u64>,
    /// Failed fetches in a row.
    failures: u32,
    /// No fetch before this (back-off).
    retry_at_ms: u64,
}

impl Flight {
    /// What a caller does at `now_ms`, given when its usable copy was fetched (`None`: no copy).
    /// A [`Step::Fetch`] marks the fetch under way.
    pub fn step(&mut self, copy_at_ms: Option<u64>, now_ms: u64, rules: &Rules) -> Step {
        if copy_at_ms.is_some_and(|at| now_ms.saturating_sub(at) < rules.fresh_ms) {
            return Step::Fresh;
        }
        let under_way = self
            .since_ms
            .is_some_and(|since| now_ms.saturating_sub(since) < rules.give_up_ms);
        let backing_off = now_ms < self.retry_at_ms;
        match (under_way || backing_off, copy_at_ms.is_some()) {
            (true, true) => Step::Stale,
            (true, false) if under_way => Step::Wait(rules.poll_ms),
            (true, false) => Step::Without,
            (false, _) => {
                self.since_ms = Some(now_ms);
                Step::Fetch
            }
        }
    }

    /// The fetch under way ended at `now_ms`: `ok` or not (failed, timed out). A failure backs off
    /// `backoff_ms` doubling per failure in a row, at most `backoff_max_ms`.
    pub fn done(&mut self, ok: bool, now_ms: u64, rules: &Rules) {
        self.since_ms = None;
        if ok {
            self.failures = 0;
            self.retry_at_ms = 0;
            return;
        }
        let doubling = rules.backoff_ms.saturating_mul(1u64 << self.failures.min(20));
        self.failures = self.failures.saturating_add(1);
        self.retry_at_ms = now_ms.saturating_add(doubling.min(rules.backoff_max_ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        fresh_ms: 1_000,
        give_up_ms: 500,
        poll_ms: 20,
        backoff_ms: 1_000,
        backoff_max_ms: 8_000,
    };

    #[test]
    fn a_fresh_copy_is_used_and_a_stale_one_fetched_by_one_caller_only() {
        let mut f = Flight::default();
        assert_eq!(f.step(Some(0), 999, &RULES), Step::Fresh);
        assert_eq!(
            f.step(Some(0), 1_000, &RULES),
            Step::Fetch,
            "stale: this caller fetches"
        );
        for now in [1_000, 1_100, 1_499] {
            assert_eq!(
                f.step(Some(0), now, &RULES),
                Step::Stale,
                "others get the stale copy at {now}"
            );
        }
        f.done(true, 1_200, &RULES);
        assert_eq!(f.step(Some(1_200), 1_300, &RULES), Step::Fresh);
        assert_eq!(
            f.step(Some(1_200), 2_200, &RULES),
            Step::Fetch,
            "no back-off after a success"
        );
    }

    #[test]
    fn without_a_copy_callers_wait_for_the_fetch_under_way() {
        let mut f = Flight::default();
        assert_eq!(f.step(None, 0, &RULES), Step::Fetch);
        assert_eq!(f.step(None, 10, &RULES), Step::Wait(20));
        assert_eq!(f.step(None, 499, &RULES), Step::Wait(20));
        assert_eq!(
            f.step(None, 500, &RULES),
            Step::Fetch,
            "the fetch was lost with its task"
        );
        assert_eq!(f.step(None, 501, &RULES), Step::Wait(20));
    }

    #[test]
    fn failed_fetches_back_off_doubling_and_serve_the_stale_copy_meanwhile() {
        let mut f = Flight::default();
        let mut now = 5_000;
        assert_eq!(f.step(Some(0), now, &RULES), Step::Fetch);
        let mut gaps = Vec::new();
        for _ in 0..6 {
            now += 300;
            f.done(false, now, &RULES);
            let failed = now;
            while f.step(Some(0), now, &RULES) == Step::Stale {
                now += 1;
            }
            gaps.push(now - failed); // the step that ended the loop fetched
        }
        assert_eq!(gaps, vec![1_000, 2_000, 4_000, 8_000, 8_000, 8_000]);
        f.done(false, now, &RULES);
        assert_eq!(
            f.step(None, now + 1, &RULES),
            Step::Without,
            "no copy, backing off: go on"
        );
        f.done(true, now + 2, &RULES);
        assert_eq!(
            f.step(None, now + 3, &RULES),
            Step::Fetch,
            "a success ends the back-off"
        );
    }

    /// The class: however many callers ask, at whatever times, fetches start at most once per
    /// `fresh_ms` while they succeed, never two under way at once, and after failures at most
    /// once per back-off.
    #[test]
    fn fetches_are_bounded_whatever_the_callers() {
        for seed in 0..200u64 {
            let mut f = Flight::default();
            let mut copy: Option<u64> = None;
            let mut under_way: Option<(u64, u64, bool)> = None; // (started, ends, ok)
            let mut starts = Vec::new();
            let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
            let mut next = || {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                rng >> 33
            };
            let mut now = 0u64;
            while now < 60_000 {
                now += next() % 7; // callers arrive every 0–6 ms
                if let Some((_, ends, ok)) = under_way {
                    if now >= ends {
                        f.done(ok, ends, &RULES);
                        if ok {
                            copy = Some(ends);
                        }
                        under_way = None;
                    }
                }
                if f.step(copy, now, &RULES) == Step::Fetch {
                    assert!(under_way.is_none(), "seed {seed}: two fetches under way at {now}");
                    let took = 5 + next() % 400;
                    let ok = next() % 3 != 0;
                    under_way = Some((now, now + took, ok));
                    starts.push(now);
                }
            }
            let minutes_bound = 60_000 / RULES.fresh_ms + 1;
            assert!(
                (starts.len() as u64) <= minutes_bound,
                "seed {seed}: {} fetches in 60 s",
                starts.len()
            );
        }
    }
}
