//! Desks (`src/desk.rs`, core `desks`): a busy ledger's settlements and fast holds, gathered
//! across isolates before D1. Each isolate reads the ledger's settlement counter with an
//! account's balance (the key's read, the balance snapshot's) and in each settlement batch's
//! answer, and keeps a core `Pace` per ledger; while the pace calls for desks, its items for the
//! ledger go to its desk (core `desks::pick`) in the isolate's batch (`DESK_BATCH`), and the desk
//! writes what it holds to the ledger as one D1 call `FLUSH_MS` after its first item —
//! settlements and fast holds together.

use switchyard_core::desks::{self, FLUSH_MOST, FLUSH_MS};

use super::*;

/// A batch item that is a fast hold (the request's id with this bit); without it, a settlement.
pub(super) const HOLD_BIT: u32 = 1 << 31;

/// A desk's state.
#[derive(Default)]
pub(super) struct Desk {
    /// Items kept, in arrival order.
    held: Vec<u32>,
    /// A flush is due (its event is scheduled) or under way.
    busy: bool,
    /// Flushes D1 refused in a row.
    tries: u32,
    /// The ledger's counter as its last flush's answer gave it, and when: in each answer to an
    /// isolate (`src/desk.rs`), whose pace learns from it.
    counter: Option<(u64, u64)>,
}

impl World {
    /// Isolate `iso` read `account`'s balance on `ledger`, and the ledger's counter with it.
    pub(super) fn read_balance(&mut self, iso: u32, account: u32, ledger: u8) {
        let now_ms = self.ms();
        self.isolates[iso as usize].balances.insert(account, now_ms);
        self.read_pace(iso, ledger);
    }

    /// Isolate `iso` read `ledger`'s settlement counter (with a balance, or in a settlement
    /// batch's answer).
    pub(super) fn read_pace(&mut self, iso: u32, ledger: u8) {
        let now_ms = self.ms();
        let total = self.settled_total.get(&ledger).copied().unwrap_or(0);
        self.learn_pace(iso, ledger, total, now_ms);
    }

    pub(super) fn learn_pace(&mut self, iso: u32, ledger: u8, total: u64, at_ms: u64) {
        let isolate = &mut self.isolates[iso as usize];
        isolate.paces.entry(ledger).or_default().read(total, at_ms);
    }

    /// A desk answered isolate `iso`'s batch: with the counter its last flush read.
    pub(super) fn desk_answered(&mut self, iso: u32, ledger: u8, n: u32) {
        if let Some((total, at_ms)) = self.desks.get(&(ledger, n)).and_then(|d| d.counter) {
            self.learn_pace(iso, ledger, total, at_ms);
        }
    }

    /// Where request `id`'s settlement or fast hold (`hold`) goes from isolate `iso`: its ledger's
    /// desk while the isolate's pace calls for desks, else the isolate's batch for the ledger.
    pub(super) fn money_batch(&mut self, iso: u32, id: u32, hold: bool) -> (Which, u32) {
        let ledger = self.ledger_of(id);
        let from = self.p.desk_from_per_s;
        let desks = self.isolates[iso as usize]
            .paces
            .get_mut(&ledger)
            .map_or(0, |p| p.desks(from));
        if desks > 0 {
            let n = desks::pick(u64::from(iso), desks);
            let item = if hold { id | HOLD_BIT } else { id };
            return (Which::Desk(ledger, n), item);
        }
        match hold {
            true => (Which::Hold(ledger), id),
            false => (Which::Settle(ledger), id),
        }
    }

    /// A desk's items that still mean something: settlements not written yet, holds of requests
    /// still running.
    pub(super) fn live(&self, item: u32) -> bool {
        let req = &self.reqs[(item & !HOLD_BIT) as usize];
        match item & HOLD_BIT != 0 {
            true => req.end_ms == 0,
            false => req.settled == Settled::Open,
        }
    }

    /// A desk's call arrived: it keeps the items and, when it was idle, flushes `FLUSH_MS` later.
    pub(super) fn desk_keep(&mut self, ledger: u8, n: u32, items: &[u32]) {
        let desk = self.desks.entry((ledger, n)).or_default();
        desk.held.extend_from_slice(items);
        if !desk.busy {
            desk.busy = true;
            self.after_ms(FLUSH_MS, Ev::DeskFlush { ledger, n });
        }
    }

    /// A desk writes what it holds (at most `FLUSH_MOST` items) to its ledger.
    pub(super) fn desk_flush(&mut self, ledger: u8, n: u32) {
        let mut held = std::mem::take(&mut self.desks.entry((ledger, n)).or_default().held);
        held.retain(|item| self.live(*item));
        let rest = held.split_off(held.len().min(FLUSH_MOST));
        let desk = self.desks.entry((ledger, n)).or_default();
        desk.held = rest;
        if held.is_empty() {
            desk.busy = !desk.held.is_empty();
            if desk.busy {
                self.after_ms(0, Ev::DeskFlush { ledger, n });
            }
            return;
        }
        let holds = held.iter().filter(|i| *i & HOLD_BIT != 0).count() as u64;
        let settlements = held.len() as u64 - holds;
        let work = Work {
            statements: SETTLE_STATEMENTS * u64::from(settlements > 0) + HOLD_STATEMENTS * u64::from(holds > 0),
            rows: SETTLE_ROWS * settlements + holds,
        };
        let then = Then::DeskFlushed { ledger, n, items: held };
        self.call(u32::MAX, Obj::D1(ledger), Kind::D1Desk, work, D1_DEADLINE_MS, then);
    }

    /// A desk's flush came back: done, or tried again (the items back in front), or — after
    /// `DESK_TRIES` — its settlements handed to the outbox in one call and its holds left to them.
    pub(super) fn desk_flushed(&mut self, ledger: u8, n: u32, items: Vec<u32>, ok: bool) {
        let counter = (self.settled_total.get(&ledger).copied().unwrap_or(0), self.now / 1_000);
        let desk = self.desks.entry((ledger, n)).or_default();
        if ok {
            desk.tries = 0;
            desk.counter = Some(counter);
            let next = if desk.held.len() >= FLUSH_MOST { 0 } else { FLUSH_MS };
            desk.busy = !desk.held.is_empty();
            if desk.busy {
                self.after_ms(next, Ev::DeskFlush { ledger, n });
            }
            return;
        }
        desk.tries += 1;
        if desk.tries < DESK_TRIES {
            let retry = DESK_RETRY_MS * u64::from(desk.tries);
            let mut held = items;
            held.append(&mut desk.held);
            desk.held = held;
            self.after_ms(retry, Ev::DeskFlush { ledger, n });
            return;
        }
        desk.tries = 0;
        desk.busy = !desk.held.is_empty();
        if desk.busy {
            self.after_ms(FLUSH_MS, Ev::DeskFlush { ledger, n });
        }
        let settlements: Vec<u32> = items.into_iter().filter(|i| i & HOLD_BIT == 0).collect();
        if !settlements.is_empty() {
            let shard = Obj::Outbox((u64::from(n) % OUTBOX_SHARDS) as u32);
            self.call(
                u32::MAX,
                shard,
                Kind::Keep,
                0,
                OUTBOX_DEADLINE_MS,
                Then::KeepAll(settlements),
            );
        }
    }
}
