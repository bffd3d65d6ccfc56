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
        let (obj, kind, statements) = match which {
            Which::Settle(ledger) => (Obj::D1(ledger), Kind::D1Settle, SETTLE_STATEMENTS * n),
            Which::Report(obj) => (obj, Kind::Observe, 0),
        };
        let timeout = match which {
            Which::Settle(_) => D1_DEADLINE_MS,
            Which::Report(_) => HEALTH_TIMEOUT_MS,
        };
        self.call(
            iso,
            obj,
            kind,
            statements,
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
        let (obj, kind, statements, timeout) = match which {
            Which::Settle(ledger) => (Obj::D1(ledger), Kind::D1Settle, SETTLE_STATEMENTS, D1_DEADLINE_MS),
            Which::Report(obj) => (obj, Kind::Observe, 0, HEALTH_TIMEOUT_MS),
        };
        self.call(iso, obj, kind, statements, timeout, Then::Alone { which, req });
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

    /// An item whose batch failed its last send: a settlement to the outbox, a report dropped.
    pub(super) fn give_up(&mut self, iso: u32, which: Which, req: u32) {
        match which {
            Which::Settle(_) => {
                let shard = Obj::Outbox((req as u64 % OUTBOX_SHARDS) as u32);
                self.call(iso, shard, Kind::Keep, 0, OUTBOX_DEADLINE_MS, Then::Keep(req));
            }
            Which::Report(_) => self.totals.reports_dropped += 1,
        }
    }
}
