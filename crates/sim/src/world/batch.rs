//! An isolate's batches (`src/batch.rs`: `gather`, `turn`, `run`): the core's `Batches` decides who
//! sends what; a failed batch rejoins the next one, an item out of sends goes to its fallback.

use super::*;

impl World {
    /// The item `req` (its `ticket`) checks its batch again in `ms`: sending it then (`flush`), or
    /// seeing whether it went.
    fn batch_again(&mut self, ms: u64, iso: u32, which: Which, ticket: Ticket, req: u32, flush: bool) {
        self.after_ms(
            ms,
            Ev::Batch {
                iso,
                which,
                ticket,
                req,
                flush,
            },
        );
    }

    pub(super) fn batches(&mut self, iso: u32, which: Which) -> &mut Batches<u32> {
        let isolate = &mut self.isolates[iso as usize];
        match which {
            Which::Settle(_) => &mut isolate.settle,
            Which::Hold(_) => &mut isolate.holds,
            Which::Desk(..) => &mut isolate.desk,
            Which::Report(_) => &mut isolate.reports,
        }
    }

    pub(super) fn push(&mut self, iso: u32, which: Which, req: u32, urgent: bool) {
        let now_ms = self.ms();
        let (ticket, role) = self
            .batches(iso, which)
            .push(&which.key(), req, urgent, now_ms, which.rules());
        match role {
            Role::FlushNow => self.batch_turn(iso, which, ticket, req, true),
            Role::FlushAfter(ms) => self.batch_again(ms, iso, which, ticket, req, true),
            Role::Ride(ms) => self.batch_again(ms, iso, which, ticket, req, false),
        }
    }

    pub(super) fn batch_turn(&mut self, iso: u32, which: Which, ticket: Ticket, req: u32, flush: bool) {
        let now_ms = self.ms();
        let (key, rules) = (which.key(), which.rules());
        if !flush {
            match self.batches(iso, which).check(&key, ticket, now_ms, rules) {
                Check::Sent => return,
                Check::Wait(ms) => return self.batch_again(ms, iso, which, ticket, req, false),
                Check::Flush => {}
                Check::Alone => return self.send_alone(iso, which, req),
            }
        }
        let taken = self.batches(iso, which).take(&key, ticket, now_ms);
        if taken.items.is_empty() {
            // A rider took the queue, this item with it: ride on that batch.
            return self.batch_again(rules.wait_ms, iso, which, ticket, req, false);
        }
        let n = taken.items.len() as u64;
        let (obj, kind, work) = match which {
            Which::Settle(ledger) => (Obj::D1(ledger), Kind::D1Settle, settle_work(n)),
            Which::Hold(ledger) => {
                // Rows whose requests settled meanwhile are left out; none left, no call.
                let rows = taken
                    .items
                    .iter()
                    .filter(|r| self.reqs[**r as usize].end_ms == 0)
                    .count() as u64;
                if rows == 0 {
                    return self.batch_done(iso, which, taken, req, true, None);
                }
                (Obj::D1(ledger), Kind::D1HoldFast, hold_work(rows))
            }
            Which::Desk(ledger, n) => {
                // What settled or was written meanwhile is left out; none left, no call.
                if !taken.items.iter().any(|i| self.live(*i)) {
                    return self.batch_done(iso, which, taken, req, true, None);
                }
                (Obj::Desk(ledger, n), Kind::DeskKeep, Work::default())
            }
            Which::Report(obj) => (obj, Kind::Observe, Work::default()),
        };
        let timeout = match which {
            Which::Settle(_) | Which::Hold(_) => D1_DEADLINE_MS,
            Which::Desk(..) => DESK_DEADLINE_MS,
            Which::Report(_) => HEALTH_TIMEOUT_MS,
        };
        self.call(
            iso,
            obj,
            kind,
            work,
            timeout,
            Then::Batch {
                iso,
                which,
                taken,
                own: req,
            },
        );
    }

    pub(super) fn send_alone(&mut self, iso: u32, which: Which, req: u32) {
        let (obj, kind, work, timeout) = match which {
            Which::Settle(ledger) => (Obj::D1(ledger), Kind::D1Settle, settle_work(1), D1_DEADLINE_MS),
            Which::Hold(ledger) => (Obj::D1(ledger), Kind::D1HoldFast, hold_work(1), D1_DEADLINE_MS),
            Which::Desk(ledger, n) => (Obj::Desk(ledger, n), Kind::DeskKeep, Work::default(), DESK_DEADLINE_MS),
            Which::Report(obj) => (obj, Kind::Observe, Work::default(), HEALTH_TIMEOUT_MS),
        };
        self.call(iso, obj, kind, work, timeout, Then::Alone { which, req });
    }

    pub(super) fn batch_done(
        &mut self,
        iso: u32,
        which: Which,
        taken: Taken<u32>,
        own: u32,
        ok: bool,
        reply: Option<ModelHealth>,
    ) {
        let now_ms = self.ms();
        if ok {
            // The answer brings the ledger's settlement counter (`src/store.rs` `settle_here`; a
            // desk's, as of its last flush): the isolate's pace learns from it.
            match which {
                Which::Settle(ledger) => self.read_pace(iso, ledger),
                Which::Desk(ledger, n) => self.desk_answered(iso, ledger, n),
                _ => {}
            }
            self.batches(iso, which).sent(&taken.tickets);
            if let (Which::Report(obj), Some(health)) = (which, reply) {
                self.remember(iso, obj, health);
            }
            return;
        }
        let own_rejoins = taken.own.is_some();
        let failed = self
            .batches(iso, which)
            .failed(&which.key(), taken, now_ms, which.rules());
        for item in failed.given_up {
            self.give_up(iso, which, item);
        }
        if let (Some(ticket), true) = (failed.rejoined, own_rejoins) {
            self.batch_again(which.rules().wait_ms, iso, which, ticket, own, false);
        }
    }

    /// An item whose batch failed its last send: a settlement to the outbox, a hold to its
    /// settlement, a report dropped.
    pub(super) fn give_up(&mut self, iso: u32, which: Which, req: u32) {
        match which {
            Which::Settle(_) => {
                let shard = Obj::Outbox((req as u64 % OUTBOX_SHARDS) as u32);
                self.call(iso, shard, Kind::Keep, 0, OUTBOX_DEADLINE_MS, Then::Keep(req));
            }
            // Left to its settlement, which settles the hold unwritten.
            Which::Hold(_) => {}
            // A desk that did not take it: a settlement is written to its ledger by the isolate
            // (the outbox after that), a hold is left to its settlement.
            Which::Desk(..) if req & desk::HOLD_BIT != 0 => {}
            Which::Desk(..) => {
                let ledger = self.ledger_of(req);
                self.push(iso, Which::Settle(ledger), req, false);
            }
            Which::Report(_) => self.totals.reports_dropped += 1,
        }
    }
}

/// A settlement batch of `n`: one round of set statements (`src/store.rs` `settle_round`),
/// [`SETTLE_ROWS`] rows per settlement.
fn settle_work(n: u64) -> Work {
    Work {
        statements: SETTLE_STATEMENTS,
        rows: SETTLE_ROWS * n,
    }
}

/// A batch of `n` fast holds' rows: one round of set statements (`src/store.rs` `hold_fast`).
fn hold_work(n: u64) -> Work {
    Work {
        statements: HOLD_STATEMENTS,
        rows: n,
    }
}
