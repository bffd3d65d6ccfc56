//! Keyrings (core `keyrings`, `src/keyring.rs`): an isolate reads a key it has no fresh copy of
//! from the key's keyring — and the catalog from its catalog keyring — which answers from its own
//! copy while that is younger than `keyrings::FRESH_MS` and else reads from D1 first (a D1 call
//! of its own; calls that come while it is under way wait for the same read, as in the Worker).
//! Without keyrings (`Params::keyrings` false, before session 24) the isolate reads D1 itself.

use switchyard_core::keyrings::{catalog_ring, ring};

/// The catalog among a keyring's copies (no key is this number).
const CATALOG: u32 = u32::MAX;

use super::*;

impl World {
    /// Where request `id`'s key is read — its keyring, or its ledger — and how long it waits.
    pub(super) fn key_store(&self, id: u32) -> (Obj, Kind, u64, u64) {
        match self.p.keyrings {
            true => {
                let key = self.reqs[id as usize].key;
                let iso = self.reqs[id as usize].iso;
                let ring = Obj::KeyRing(ring(&format!("k{key}"), u64::from(iso)));
                (ring, Kind::KeyRead, 0, D1_DEADLINE_MS + KEYRING_MARGIN_MS)
            }
            false => (self.ledger(id), Kind::D1Key, READ_STATEMENTS, D1_DEADLINE_MS),
        }
    }

    /// Where isolate `iso` reads the catalog — its catalog keyring, or the home database — and
    /// how long it waits.
    pub(super) fn catalog_store(&self, iso: u32) -> (Obj, Kind, u64, u64) {
        match self.p.keyrings {
            true => {
                let ring = Obj::KeyRing(catalog_ring(u64::from(iso)));
                (ring, Kind::CatalogRead, 0, D1_DEADLINE_MS + KEYRING_MARGIN_MS)
            }
            false => (Obj::D1(0), Kind::D1Catalog, READ_STATEMENTS, D1_DEADLINE_MS),
        }
    }

    /// Keyring `n` serves call `id` (a read of a request's key, or an early read): from its copy,
    /// or after reading the key from its ledger.
    pub(super) fn ring_read(&mut self, n: u32, id: u32) {
        let now_ms = self.ms();
        let Some(call) = self.calls.get(id as usize).and_then(|c| c.as_ref()) else {
            return;
        };
        let key = match call.then {
            Then::Req(req) if self.reqs[req as usize].stage == Stage::Catalog => CATALOG,
            Then::Req(req) => self.reqs[req as usize].key,
            Then::Refreshed { key: Some(key), .. } => key,
            Then::Refreshed { key: None, .. } => CATALOG,
            _ => return,
        };
        let copy = self.keyrings.get(&n).and_then(|c| c.fresh(&key, now_ms));
        let Some(call) = self.calls.get_mut(id as usize).and_then(|c| c.as_mut()) else {
            return;
        };
        match copy {
            Some((total, read_ms)) => call.read = Some((read_ms, total)),
            None => {
                call.deferred = true;
                let waiting = self.ring_waiting.entry((n, key)).or_default();
                waiting.push(id);
                if waiting.len() == 1 {
                    let (ledger, kind) = match key {
                        CATALOG => (0, Kind::D1Catalog),
                        _ => (self.ledger_of_account(self.account_of_key(key)), Kind::D1Key),
                    };
                    let then = Then::RingRead { ring: n, key };
                    self.call(u32::MAX, Obj::D1(ledger), kind, READ_STATEMENTS, D1_DEADLINE_MS, then);
                }
            }
        }
    }

    /// Keyring `n`'s read of `key` came back (or failed): it keeps the copy, and answers the calls
    /// waiting on it, each over its own way back (or fails them).
    pub(super) fn ring_answered(&mut self, n: u32, key: u32, ok: bool) {
        let now_ms = self.ms();
        let total = match key {
            CATALOG => 0,
            _ => {
                let ledger = self.ledger_of_account(self.account_of_key(key));
                self.settled_total.get(&ledger).copied().unwrap_or(0)
            }
        };
        if ok {
            self.keyrings.entry(n).or_default().keep(key, total, now_ms);
        }
        for waiting in self.ring_waiting.remove(&(n, key)).unwrap_or_default() {
            let Some(call) = self.calls.get_mut(waiting as usize).and_then(|c| c.as_mut()) else {
                continue;
            };
            call.read = ok.then_some((now_ms, total));
            let back = self.now + call.half_rtt_us;
            let deadline = call.deadline_us;
            if ok && back <= deadline {
                self.at(
                    back,
                    Ev::Reply {
                        call: waiting,
                        ok: true,
                    },
                );
            } else {
                self.at(
                    deadline.max(self.now),
                    Ev::Reply {
                        call: waiting,
                        ok: false,
                    },
                );
            }
        }
    }

    /// Isolate `iso` has read `key` (`read`: when D1 read it and the ledger's counter then; none:
    /// read from the ledger just now): its copy of the key, the account's balance snapshot and the
    /// ledger's pace date from that read.
    pub(super) fn key_read(&mut self, iso: u32, key: u32, read: Option<(u64, u64)>) {
        let account = self.account_of_key(key);
        let ledger = self.ledger_of_account(account);
        let (at_ms, total) = read.unwrap_or_else(|| (self.ms(), self.settled_total.get(&ledger).copied().unwrap_or(0)));
        let isolate = &mut self.isolates[iso as usize];
        isolate.keys.insert(key, at_ms);
        // A newer snapshot of the account (another key's read, a balance read) is kept
        // (`billing::learn`).
        let snapshot = isolate.balances.entry(account).or_insert(at_ms);
        *snapshot = (*snapshot).max(at_ms);
        self.learn_pace(iso, ledger, total, at_ms);
    }

    /// The account `key` belongs to.
    fn account_of_key(&self, key: u32) -> u32 {
        key / self.p.keys_per_account.max(1) as u32
    }
}
