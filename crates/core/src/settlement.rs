//! The settlement rules (SPEC §11, §22) as the D1 statements of `src/store.rs` apply them, over a
//! model of the books: an account's balance and held amount, its hold rows, its ledger charges and
//! the `settled` marks of settlements that booked no charge. Each method here is one statement
//! group there, with the same guards, so what makes settlement exactly-once is tested natively: a
//! settlement is applied only while its hold row exists and deletes it; a hold row is never
//! written for a generation already settled (a ledger charge or a `settled` mark proves it, once
//! the hold is gone) nor for one whose hold expired more than a week ago (by then those proofs
//! may be rolled up, [`Books::retain`]); one charge per generation (the unique index on
//! `ledger.generation_id`) — whatever replays, duplicates and reorderings the batches, the outbox
//! and lost replies bring. The generation's record is not part of the books: it is kept apart
//! (`crate::records`).

use std::collections::{BTreeMap, BTreeSet};

/// One hold row: its amount and whether the sweep already released it (`expired`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldRow {
    pub amount: i64,
    pub expired: bool,
}

/// One settlement as the outbox keeps it: the generation, what it is charged, whether it had a
/// hold, and a fast-path hold that may not be written yet (written first, idempotently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settle {
    pub id: String,
    pub charge: i64,
    pub has_hold: bool,
    pub unwritten: Option<i64>,
    /// The retention period its hold was placed in (see [`Books::retain`]).
    pub born: u64,
}

/// One account's books in D1.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Books {
    pub balance: i64,
    pub held: i64,
    pub holds: BTreeMap<String, HoldRow>,
    /// Ledger charges by generation id (unique: a second one fails its whole batch).
    pub ledger: BTreeMap<String, i64>,
    /// `settled` marks: a settlement with a hold that booked no ledger charge.
    pub marks: BTreeSet<String>,
    /// Charges the retention run added to totals and deleted from the ledger.
    pub rolled: i64,
    /// Retention runs so far: each stands for the eight days after which charges are rolled up
    /// and marks deleted (holds expire within a day, expired ones are deleted after seven).
    pub epoch: u64,
}

/// A batch D1 refused as a whole (a constraint failed): nothing of it was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused;

impl Books {
    pub fn new(balance: i64) -> Books {
        Books {
            balance,
            ..Books::default()
        }
    }

    /// Whether the generation was settled: its charge or its mark is there.
    pub fn settled(&self, id: &str) -> bool {
        self.ledger.contains_key(id) || self.marks.contains(id)
    }

    /// The awaited hold: held only if the available balance covers it; true when placed.
    pub fn hold_atomic(&mut self, id: &str, amount: i64) -> bool {
        if self.balance - self.held < amount || self.holds.contains_key(id) {
            return false;
        }
        self.held += amount;
        self.holds.insert(id.to_string(), HoldRow { amount, expired: false });
        true
    }

    /// The fast path's hold row (`INSERT OR IGNORE … WHERE NOT settled AND expires_at + a week >
    /// now`, then the held amount only if the row was new): its deferred write, or written first
    /// by its settlement, or both. `born`: the retention period the hold was placed in.
    pub fn write_fast_hold(&mut self, id: &str, amount: i64, born: u64) {
        if self.holds.contains_key(id) || self.settled(id) || born < self.epoch {
            return;
        }
        self.held += amount;
        self.holds.insert(id.to_string(), HoldRow { amount, expired: false });
    }

    /// A settlement batch, one transaction, as `src/store.rs` writes it: in [`rounds`], each
    /// round five set statements over all its settlements. A settlement *applies* while its hold
    /// row is there (open or expired), or — a fast hold not written yet — while that row could be
    /// written ([`Books::write_fast_hold`]'s guards: not settled, not too old; written and settled
    /// in one go, it is never stored). One that applies releases its open hold, charges and books
    /// the charge; every settlement with a hold that left no ledger charge is marked `settled`
    /// (`INSERT OR IGNORE`), and its hold row is deleted.
    pub fn settle(&mut self, batch: &[Settle]) -> Result<(), Refused> {
        let mut next = self.clone();
        let with_hold: Vec<&Settle> = batch.iter().filter(|s| s.has_hold).collect();
        for round in rounds(&with_hold, |s| s.id.as_str()) {
            // Which apply, and what each releases: read before any statement of the round.
            let applying: Vec<(&Settle, i64)> = round
                .iter()
                .filter_map(|s| match next.holds.get(&s.id) {
                    Some(hold) => Some((**s, if hold.expired { 0 } else { hold.amount })),
                    None if s.unwritten.is_some() && !next.settled(&s.id) && s.born >= next.epoch => Some((**s, 0)),
                    None => None,
                })
                .collect();
            for (s, released) in &applying {
                next.held -= released;
                next.balance -= s.charge;
            }
            for (s, _) in &applying {
                if s.charge > 0 && next.ledger.insert(s.id.clone(), s.charge).is_some() {
                    return Err(Refused);
                }
            }
            for s in &round {
                if !next.ledger.contains_key(&s.id) {
                    next.marks.insert(s.id.clone());
                }
            }
            for s in &round {
                next.holds.remove(&s.id);
            }
        }
        *self = next;
        Ok(())
    }

    /// The sweep: every open hold is released (its expiry passed) and kept, expired, for its
    /// settlement.
    pub fn sweep(&mut self) {
        for hold in self.holds.values_mut().filter(|h| !h.expired) {
            hold.expired = true;
            self.held -= hold.amount;
        }
    }

    /// Eight days pass and the cron runs: every hold has expired (swept) and the expired ones
    /// are deleted, charges are added to their totals and deleted, marks are deleted.
    pub fn retain(&mut self) {
        self.sweep();
        self.holds.clear();
        self.rolled += self.ledger.values().sum::<i64>();
        self.ledger.clear();
        self.marks.clear();
        self.epoch += 1;
    }
}

/// A batch's items in rounds: the first item of each generation in the first round, a second one
/// (the same settlement delivered twice into one batch) in the next, and so on, each round in the
/// batch's order. A round names each generation once, so one set statement per rule applies it
/// exactly as one statement per item in order would (tested below against that).
pub fn rounds<'a, T>(items: &'a [T], id: impl Fn(&'a T) -> &'a str) -> Vec<Vec<&'a T>> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    let mut rounds: Vec<Vec<&T>> = Vec::new();
    for item in items {
        let n = seen.entry(id(item)).or_insert(0);
        if rounds.len() <= *n {
            rounds.push(Vec::new());
        }
        rounds[*n].push(item);
        *n += 1;
    }
    rounds
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A settlement of `id` with a hold, charged `charge`; `unwritten`: its fast hold's amount.
    fn one(id: &str, charge: i64, unwritten: Option<i64>) -> Settle {
        Settle {
            id: id.into(),
            charge,
            has_hold: true,
            unwritten,
            born: 0,
        }
    }

    /// One request: its hold, its charge (a share of it), its path, how many times its settlement
    /// is delivered, and whether a deferred hold write lands before or after it.
    #[derive(Debug, Clone)]
    struct Req {
        amount: i64,
        charge_pct: i64,
        fast: bool,
        copies: usize,
        early_write: bool,
        late_write: bool,
    }

    #[derive(Debug, Clone)]
    enum Event {
        Settle(Settle),
        Write(String, i64),
        Sweep,
    }

    fn req() -> impl Strategy<Value = Req> {
        (
            1..1_000i64,
            0..=100i64,
            any::<bool>(),
            1..=3usize,
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(amount, charge_pct, fast, copies, early_write, late_write)| Req {
                amount,
                charge_pct,
                fast,
                copies,
                early_write,
                late_write,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

        /// Replayed, duplicated, reordered and batched settlements, deferred hold writes landing
        /// before or after them, sweeps between them: each generation is charged exactly once, the
        /// balance is the credit less the ledger, nothing stays held and no hold row is left.
        #[test]
        fn settlement_is_exactly_once_under_replays_reorderings_and_duplicates(
            reqs in prop::collection::vec(req(), 1..8),
            order in prop::collection::vec(any::<u32>(), 64),
            batch_sizes in prop::collection::vec(1..4usize, 64),
            sweeps in prop::collection::vec(any::<bool>(), 64),
        ) {
            let credit = 1_000_000;
            let mut books = Books::new(credit);
            let mut events = Vec::new();
            let mut expected = BTreeMap::new();
            for (i, r) in reqs.iter().enumerate() {
                let id = format!("gen-{i}");
                let charge = r.amount * r.charge_pct / 100;
                if charge > 0 {
                    expected.insert(id.clone(), charge);
                }
                if r.fast {
                    if r.early_write {
                        events.push(Event::Write(id.clone(), r.amount));
                    }
                    if r.late_write {
                        events.push(Event::Write(id.clone(), r.amount));
                    }
                } else {
                    prop_assert!(books.hold_atomic(&id, r.amount));
                }
                let item = Settle {
                    id,
                    charge,
                    has_hold: true,
                    unwritten: r.fast.then_some(r.amount),
                    born: 0,
                };
                for _ in 0..r.copies {
                    events.push(Event::Settle(item.clone()));
                }
            }
            for (i, sweep) in sweeps.iter().enumerate().take(events.len()) {
                if *sweep && i % 5 == 0 {
                    events.push(Event::Sweep);
                }
            }
            // Any order: the outbox, batches and retries guarantee none.
            let mut keyed: Vec<(u32, Event)> =
                events.into_iter().enumerate().map(|(i, e)| (order[i % order.len()] ^ i as u32, e)).collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut pending: Vec<Settle> = Vec::new();
            let mut sizes = batch_sizes.iter().cycle();
            let mut want = *sizes.next().unwrap_or(&1);
            for (_, event) in keyed {
                match event {
                    Event::Settle(s) => {
                        pending.push(s);
                        if pending.len() >= want {
                            prop_assert_eq!(books.settle(&pending), Ok(()));
                            pending.clear();
                            want = *sizes.next().unwrap_or(&1);
                        }
                    }
                    Event::Write(id, amount) => books.write_fast_hold(&id, amount, 0),
                    Event::Sweep => books.sweep(),
                }
            }
            prop_assert_eq!(books.settle(&pending), Ok(()));
            prop_assert_eq!(&books.ledger, &expected, "each charge once");
            let charged: i64 = expected.values().sum();
            prop_assert_eq!(books.balance, credit - charged);
            prop_assert_eq!(books.held, 0);
            prop_assert!(books.holds.is_empty(), "no hold row left: {:?}", books.holds);
        }
    }

    /// The batch as one statement group per settlement, in order (the Worker's statements before
    /// the set statements): the rule [`Books::settle`] must keep.
    fn one_by_one(books: &Books, batch: &[Settle]) -> Result<Books, Refused> {
        let mut next = books.clone();
        for s in batch {
            if let Some(amount) = s.unwritten {
                next.write_fast_hold(&s.id, amount, s.born);
            }
            if s.has_hold {
                if let Some(hold) = next.holds.remove(&s.id) {
                    if !hold.expired {
                        next.held -= hold.amount;
                    }
                    next.balance -= s.charge;
                    if s.charge > 0 && next.ledger.insert(s.id.clone(), s.charge).is_some() {
                        return Err(Refused);
                    }
                }
                if !next.ledger.contains_key(&s.id) {
                    next.marks.insert(s.id.clone());
                }
            }
        }
        Ok(next)
    }

    /// A generation's state before a batch: its hold row (none, open, expired), a charge, a mark.
    fn before() -> impl Strategy<Value = (u8, bool, bool)> {
        (0..3u8, any::<bool>(), any::<bool>())
    }

    /// A settlement of one of four generations: charge, has a hold, a fast hold unwritten, born
    /// in the books' period or the one before.
    fn item() -> impl Strategy<Value = Settle> {
        (
            0..4u8,
            0..50i64,
            any::<bool>(),
            prop::option::of(1..100i64),
            any::<bool>(),
        )
            .prop_map(|(g, charge, has_hold, unwritten, old)| Settle {
                id: format!("g{g}"),
                charge,
                has_hold: has_hold || unwritten.is_some(),
                unwritten,
                born: u64::from(!old),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 4_000, ..ProptestConfig::default() })]

        /// The set statements, round by round, leave the books exactly as one statement group per
        /// settlement would — duplicates in a batch, holds open, expired or missing, charges and
        /// marks already there, holds too old to write included.
        #[test]
        fn set_statements_in_rounds_settle_as_one_by_one(
            gens in prop::collection::vec(before(), 4),
            batch in prop::collection::vec(item(), 0..10),
        ) {
            let mut books = Books::new(10_000);
            books.epoch = 1;
            for (i, (hold, charged, marked)) in gens.iter().enumerate() {
                let id = format!("g{i}");
                match hold {
                    1 => { books.holds.insert(id.clone(), HoldRow { amount: 70, expired: false }); books.held += 70; }
                    2 => { books.holds.insert(id.clone(), HoldRow { amount: 70, expired: true }); }
                    _ => {}
                }
                if *charged && *hold == 0 {
                    books.ledger.insert(id.clone(), 5);
                } else if *marked && *hold == 0 {
                    books.marks.insert(id);
                }
            }
            let mut set = books.clone();
            let result = set.settle(&batch);
            match one_by_one(&books, &batch) {
                Ok(expected) => { prop_assert_eq!(result, Ok(())); prop_assert_eq!(set, expected); }
                Err(refused) => { prop_assert_eq!(result, Err(refused)); prop_assert_eq!(set, books); }
            }
        }
    }

    #[test]
    fn rounds_put_a_repeated_generation_in_the_next_round() {
        let items = ["a", "b", "a", "c", "a", "b"];
        let rounds: Vec<Vec<&str>> = rounds(&items, |s| s)
            .into_iter()
            .map(|r| r.into_iter().copied().collect())
            .collect();
        assert_eq!(rounds, vec![vec!["a", "b", "c"], vec!["a", "b"], vec!["a"]]);
    }

    #[test]
    fn a_hold_is_never_written_again_for_a_settled_generation() {
        let mut books = Books::new(1_000);
        let s = one("g", 30, Some(100));
        assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
        assert_eq!((books.balance, books.held, books.holds.len()), (970, 0, 0));
        // The deferred write whose reply was lost lands after the settlement; then a replay.
        books.write_fast_hold("g", 100, 0);
        assert_eq!(books.settle(&[s.clone(), s]), Ok(()));
        assert_eq!((books.balance, books.held, books.holds.len()), (970, 0, 0));
    }

    #[test]
    fn without_the_settled_guard_a_replay_would_charge_twice() {
        // What the guard prevents: the hold row written again for a settled generation.
        let mut books = Books::new(1_000);
        let s = one("g", 30, None);
        books.hold_atomic("g", 100);
        assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
        books.holds.insert(
            "g".into(),
            HoldRow {
                amount: 100,
                expired: false,
            },
        );
        books.held += 100;
        assert_eq!(books.settle(&[s]), Err(Refused), "the unique charge refuses the batch");
    }

    #[test]
    fn a_free_settlement_is_marked_and_its_hold_never_comes_back() {
        let mut books = Books::new(1_000);
        let s = one("g", 0, Some(100));
        assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
        assert!(
            books.marks.contains("g") && books.ledger.is_empty(),
            "no charge, a mark"
        );
        books.write_fast_hold("g", 100, 0);
        assert_eq!((books.held, books.holds.len()), (0, 0), "the late write finds the mark");
    }

    #[test]
    fn once_its_proofs_are_rolled_up_a_hold_is_too_old_to_be_written() {
        let mut books = Books::new(1_000);
        let s = one("g", 30, Some(100));
        assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
        books.retain();
        assert!(!books.settled("g"), "the charge was rolled up: no proof left");
        // An outbox replay eight days on: its hold is too old to be written, so nothing is charged.
        assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
        books.write_fast_hold("g", 100, 0);
        assert_eq!(
            (books.balance, books.held, books.rolled, books.holds.len()),
            (970, 0, 30, 0)
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1_000, ..ProptestConfig::default() })]

        /// With the retention run between deliveries, a settlement is charged at most once (a
        /// copy that comes after its hold is gone charges nothing), and nothing stays held.
        #[test]
        fn retention_never_lets_a_replay_charge_twice(
            reqs in prop::collection::vec(req(), 1..6),
            order in prop::collection::vec(any::<u32>(), 64),
            retain_at in prop::collection::vec(0..40usize, 0..3),
        ) {
            let credit = 1_000_000;
            let mut books = Books::new(credit);
            let mut events = Vec::new();
            let mut charge_of = BTreeMap::new();
            for (i, r) in reqs.iter().enumerate() {
                let id = format!("gen-{i}");
                let charge = r.amount * r.charge_pct / 100;
                charge_of.insert(id.clone(), charge);
                if r.fast {
                    events.push(Event::Write(id.clone(), r.amount));
                } else {
                    prop_assert!(books.hold_atomic(&id, r.amount));
                }
                let item = Settle { id, charge, has_hold: true, unwritten: r.fast.then_some(r.amount), born: 0 };
                for _ in 0..r.copies {
                    events.push(Event::Settle(item.clone()));
                }
            }
            let mut keyed: Vec<(u32, Event)> =
                events.into_iter().enumerate().map(|(i, e)| (order[i % order.len()] ^ i as u32, e)).collect();
            keyed.sort_by_key(|(k, _)| *k);
            let mut charged: BTreeMap<String, i64> = BTreeMap::new();
            for (n, (_, event)) in keyed.into_iter().enumerate() {
                if retain_at.contains(&n) {
                    books.retain();
                }
                match event {
                    Event::Settle(s) => {
                        let before = books.balance;
                        prop_assert_eq!(books.settle(std::slice::from_ref(&s)), Ok(()));
                        *charged.entry(s.id.clone()).or_default() += before - books.balance;
                    }
                    Event::Write(id, amount) => books.write_fast_hold(&id, amount, 0),
                    Event::Sweep => books.sweep(),
                }
            }
            books.retain();
            for (id, paid) in &charged {
                prop_assert!(*paid == 0 || *paid == charge_of[id], "{} paid {} of {}", id, paid, charge_of[id]);
            }
            prop_assert_eq!(books.held, 0);
            prop_assert_eq!(books.balance + books.rolled, credit);
        }
    }
}
