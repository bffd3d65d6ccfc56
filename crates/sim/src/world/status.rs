//! The public report (`src/http/status.rs`, `src/report.rs`): each isolate's copy refreshed from the
//! status object through a `Flight`, the status object rebuilding at most once per 3 s.

use super::*;

impl World {
    pub(super) fn public_hit(&mut self) {
        if self.now >= self.arrivals_end {
            return;
        }
        let gap = self.rng.exp(1e6 / self.p.public_hits) as u64;
        self.at(self.now + gap.max(1), Ev::PublicHit);
        let now_ms = self.ms();
        let iso = self.rng.below(self.isolates.len()) as u32;
        let isolate = &mut self.isolates[iso as usize];
        if isolate.status_flight.step(isolate.status_at, now_ms, &STATUS_REPORT) == Step::Fetch {
            self.call(
                iso,
                Obj::Status,
                Kind::StatusGet,
                0,
                STATUS_TIMEOUT_MS,
                Then::StatusFetch(iso),
            );
        }
    }

    pub(super) fn status_fetched(&mut self, iso: u32, ok: bool) {
        let now_ms = self.ms();
        let isolate = &mut self.isolates[iso as usize];
        let had = isolate.status_at.is_some();
        if ok || !had {
            isolate.status_at = Some(now_ms);
        }
        isolate.status_flight.done(ok || !had, now_ms, &STATUS_REPORT);
        if !ok && !had {
            // No report at all: the isolate builds its own, a `full` call to every object.
            self.full_calls(iso);
        }
    }

    /// The status object's copy, rebuilt when older than 3 s (the build taken as instant).
    pub(super) fn status_build(&mut self) {
        let now_ms = self.ms();
        if self.status_flight.step(self.status_at, now_ms, &STATUS_REPORT) == Step::Fetch {
            self.status_at = Some(now_ms);
            self.status_flight.done(true, now_ms, &STATUS_REPORT);
            self.full_calls(u32::MAX);
        }
    }

    /// A `full` call to every model's object and to the accounts' (`accounts`; in `Design::Sharded`
    /// each account's that a route uses), from isolate `iso` (`u32::MAX`: the status object, next to them).
    pub(super) fn full_calls(&mut self, iso: u32) {
        for m in 0..self.p.models.max(1) as u32 {
            self.call(iso, Obj::Model(m), Kind::Full, 0, HEALTH_TIMEOUT_MS, Then::Nothing);
        }
        let accounts: Vec<Obj> = match self.p.design {
            Design::Direct => vec![Obj::Accounts],
            Design::Sharded => {
                let used: std::collections::BTreeSet<u32> = self
                    .routes
                    .iter()
                    .flatten()
                    .filter_map(|(_, a)| a.strip_prefix("acct-")?.parse().ok())
                    .collect();
                used.into_iter().map(Obj::Account).collect()
            }
        };
        for obj in accounts {
            self.call(iso, obj, Kind::Full, 0, HEALTH_TIMEOUT_MS, Then::Nothing);
        }
    }
}
