//! Gathering an isolate's background writes into batches: the first item queued under a key waits
//! a moment and then sends everything queued by then; the items that arrive meanwhile ride along.
//! Settlements (D1) and health reports (Durable Objects) both use it.
//!
//! An urgent item, a full queue, or a queue whose flusher is overdue (its task was lost) is sent at
//! once by the caller that finds it so: nothing waits for a flusher that will never come. A rider
//! does not trust the flusher either (SPEC §18: no write depends on another request's task
//! finishing): it keeps a copy of its item and checks its ticket on its own timer — sent, it is
//! done; still queued past the flusher's time, it sends the queue itself; the flusher's batch has
//! been under way too long (its task died mid-send), it sends its copy alone (the writes are
//! idempotent).
//!
//! A batch that fails is not sent again item by item (that multiplies the calls on a store that is
//! already saturated): its items rejoin the queue, ahead of whatever was queued since, and go out
//! together with the next batch `retry_ms` later — sent by whichever of their callers checks first.
//! An item whose batch has failed `max_sends` times is given back to the caller that saw the last
//! failure, for its fallback (the outbox, or nothing for advisory writes); its rider learns it is
//! handled. So a store that refuses everything sees each batch's worth of items once per
//! `retry_ms`, not once per item. Time is an argument; the waiting itself is the caller's
//! (`src/batch.rs`).

use std::collections::HashMap;

/// How a kind of item is batched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// How long the first item waits for others; also how often a rider checks its ticket.
    pub wait_ms: u64,
    /// Items past which the queue is sent at once.
    pub max_items: usize,
    /// Age of the oldest item past which the queue is sent at once (its flusher is gone).
    pub overdue_ms: u64,
    /// How long a batch may be under way before its riders take it for lost and send their own.
    pub lost_ms: u64,
    /// How long a failed batch's items wait, queued, before they are sent again.
    pub retry_ms: u64,
    /// Failed sends after which an item is given back for its caller's fallback.
    pub max_sends: u32,
}

/// Health reports, per isolate and object (`src/health.rs`): routine outcomes (successes) are
/// gathered for up to 200 ms and sent in one call; failures and probes go at once (other isolates
/// should learn of them promptly). A call that fails rejoins the next one a second later, twice at
/// most; then the outcomes are dropped (health is advisory, and the isolate's own snapshot has
/// them already).
pub const HEALTH_REPORTS: Rules = Rules {
    wait_ms: 200,
    max_items: 64,
    overdue_ms: 2_000,
    lost_ms: 5_000,
    retry_ms: 1_000,
    max_sends: 3,
};

/// Settlements, per isolate (`src/billing.rs`): those within 10 ms share one D1 batch of at most
/// 64 (five set statements, whatever its size); a batch under way for 5 s is taken for lost by its
/// riders; a batch D1 refused rejoins the next one 200 ms later, three sends at most, then the
/// outbox.
pub const SETTLEMENTS: Rules = Rules {
    wait_ms: 10,
    max_items: 64,
    overdue_ms: 100,
    lost_ms: 5_000,
    retry_ms: 200,
    max_sends: 3,
};

/// Fast-path hold rows, per isolate (`src/billing.rs`): those due within 200 ms share one D1
/// batch of at most 64 (two set statements, whatever its size); a batch D1 refused rejoins the
/// next one a second later, twice at most — then the rows are left to their settlements, which
/// settle a hold whether or not its row was written.
pub const FAST_HOLDS: Rules = Rules {
    wait_ms: 200,
    max_items: 64,
    overdue_ms: 1_000,
    lost_ms: 5_000,
    retry_ms: 1_000,
    max_sends: 2,
};

/// A busy account's settlements and fast holds, per isolate, on their way to its desk
/// (`src/billing.rs`, `crate::desks`): those within 20 ms share one call of at most 64; a call under
/// way for 5 s is taken for lost by its riders; a call the desk did not answer rejoins the next one
/// 200 ms later, twice at most — then a settlement is written to its ledger itself (and the outbox
/// after that), a hold is left to its settlement.
pub const DESK_ITEMS: Rules = Rules {
    wait_ms: 20,
    max_items: 64,
    overdue_ms: 200,
    lost_ms: 5_000,
    retry_ms: 200,
    max_sends: 2,
};

/// An item's place in its key's batches: what a rider checks.
pub type Ticket = u64;

/// What the caller who queued an item does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Wait this long, then [`Batches::take`] and send.
    FlushAfter(u64),
    /// [`Batches::take`] and send now.
    FlushNow,
    /// Another caller means to send it: wait this long, then [`Batches::check`] the ticket.
    Ride(u64),
}

/// What a rider learns from its ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Sent with its batch: nothing more to do.
    Sent,
    /// Not settled yet either way: check again after this long.
    Wait(u64),
    /// Still queued and its flusher is overdue: [`Batches::take`] the queue and send it.
    Flush,
    /// Its batch was lost under way (its sender died) or its ticket forgotten: send the rider's
    /// own copy alone.
    Alone,
}

/// Where a taken ticket stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Sending {
        since_ms: u64,
    },
    /// Written, or given back to a sender's fallback after its last failed send.
    Sent,
}

struct Queue<T> {
    items: Vec<(Ticket, T)>,
    /// When its flusher is overdue: set by the first item's rules.
    due_ms: u64,
}

/// A batch taken to send.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken<T> {
    pub items: Vec<T>,
    /// Which of `items` is the sender's own (none when a rider took it for an overdue flusher).
    pub own: Option<usize>,
    /// The other items' tickets, to tell their riders with [`Batches::sent`] (written) or [`Batches::failed`].
    pub riders: Vec<Ticket>,
    /// Every item's ticket, in the order of `items`.
    pub tickets: Vec<Ticket>,
}

/// What a failed batch leaves its sender (see [`Batches::failed`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Failed<T> {
    /// The items out of sends, for the sender's fallback.
    pub given_up: Vec<T>,
    /// The sender's own ticket if its item rejoined the queue: it waits on it as a rider.
    pub rejoined: Option<Ticket>,
}

/// Queues by key (e.g. one per model), and the fate of the tickets taken from them.
pub struct Batches<T> {
    queues: HashMap<String, Queue<T>>,
    fates: HashMap<Ticket, Fate>,
    /// Failed sends so far of the items that have failed at least once.
    sends: HashMap<Ticket, u32>,
    next_ticket: Ticket,
}

impl<T> Default for Batches<T> {
    fn default() -> Self {
        Batches {
            queues: HashMap::new(),
            fates: HashMap::new(),
            sends: HashMap::new(),
            next_ticket: 0,
        }
    }
}

/// Fates remembered at most; past it the oldest are forgotten and their riders send alone (a
/// rider that died never reads its fate).
const MAX_FATES: usize = 4096;

impl<T> Batches<T> {
    /// Queues `item` under `key` at `now_ms` and says who sends it.
    pub fn push(&mut self, key: &str, item: T, urgent: bool, now_ms: u64, rules: &Rules) -> (Ticket, Role) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let due_ms = now_ms.saturating_add(rules.overdue_ms);
        let queue = self.queues.entry(key.to_string()).or_insert_with(|| Queue {
            items: Vec::new(),
            due_ms,
        });
        let first = queue.items.is_empty();
        if first {
            queue.due_ms = due_ms;
        }
        queue.items.push((ticket, item));
        let role = if urgent || queue.items.len() >= rules.max_items || now_ms > queue.due_ms {
            Role::FlushNow
        } else if first {
            Role::FlushAfter(rules.wait_ms)
        } else {
            Role::Ride(rules.wait_ms.saturating_mul(2))
        };
        (ticket, role)
    }

    /// Queues `item` under `key` with no one to send it (its task can do no I/O): whoever queues
    /// or checks under `key` next sends it.
    pub fn leave(&mut self, key: &str, item: T) {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let queue = self.queues.entry(key.to_string()).or_insert_with(|| Queue {
            items: Vec::new(),
            due_ms: 0,
        });
        queue.due_ms = 0;
        queue.items.push((ticket, item));
    }

    /// Everything queued under `key` (empty when another caller sent it already), for the caller
    /// holding ticket `own` to send; the other tickets are under way from `now_ms` until
    /// [`Batches::sent`] or [`Batches::failed`]. A queue that does not hold `own` and is not
    /// overdue is left alone: its own first item's caller sends it when its wait ends (a flusher
    /// whose batch a full queue sent early must not send the next batch early, half full).
    pub fn take(&mut self, key: &str, own: Ticket, now_ms: u64) -> Taken<T> {
        let someone_elses = self
            .queues
            .get(key)
            .is_some_and(|q| now_ms <= q.due_ms && !q.items.iter().any(|(t, _)| *t == own));
        let queued = match someone_elses {
            true => Vec::new(),
            false => self.queues.remove(key).map(|q| q.items).unwrap_or_default(),
        };
        if self.fates.len() + queued.len() > MAX_FATES {
            self.fates.clear();
        }
        let mut taken = Taken {
            items: Vec::with_capacity(queued.len()),
            own: None,
            riders: Vec::new(),
            tickets: Vec::with_capacity(queued.len()),
        };
        for (ticket, item) in queued {
            taken.tickets.push(ticket);
            if ticket == own {
                taken.own = Some(taken.items.len());
            } else {
                self.fates.insert(ticket, Fate::Sending { since_ms: now_ms });
                taken.riders.push(ticket);
            }
            taken.items.push(item);
        }
        taken
    }

    /// The batch holding `tickets` was written: its riders learn it.
    pub fn sent(&mut self, tickets: &[Ticket]) {
        for ticket in tickets {
            self.sends.remove(ticket);
            if let Some(fate) = self.fates.get_mut(ticket) {
                *fate = Fate::Sent;
            }
        }
    }

    /// The batch `taken` from `key` failed at `now_ms`: its items rejoin the queue under `key`
    /// ahead of those queued since, to go out with the next batch; a queue they start is due
    /// `retry_ms` from now (its callers' checks send it then). Items that have now failed
    /// `max_sends` times are given back instead, and their riders told they are handled.
    pub fn failed(&mut self, key: &str, taken: Taken<T>, now_ms: u64, rules: &Rules) -> Failed<T> {
        let own = taken.own.and_then(|i| taken.tickets.get(i).copied());
        let mut given_up = Vec::new();
        let mut rejoin = Vec::new();
        for (ticket, item) in taken.tickets.into_iter().zip(taken.items) {
            let sends = self.sends.entry(ticket).or_insert(0);
            *sends += 1;
            if *sends >= rules.max_sends {
                self.sends.remove(&ticket);
                self.fates.insert(ticket, Fate::Sent);
                given_up.push(item);
            } else {
                self.fates.remove(&ticket);
                rejoin.push((ticket, item));
            }
        }
        let rejoined = own.filter(|t| rejoin.iter().any(|(r, _)| r == t));
        if !rejoin.is_empty() {
            let queue = self.queues.entry(key.to_string()).or_insert_with(|| Queue {
                items: Vec::new(),
                due_ms: now_ms.saturating_add(rules.retry_ms),
            });
            rejoin.append(&mut queue.items);
            queue.items = rejoin;
        }
        if self.sends.len() > MAX_FATES {
            self.sends.clear(); // forgotten counts: those items get their full sends again
        }
        Failed { given_up, rejoined }
    }

    /// What the rider holding `ticket` (queued under `key`) does now.
    pub fn check(&mut self, key: &str, ticket: Ticket, now_ms: u64, rules: &Rules) -> Check {
        if let Some(queue) = self
            .queues
            .get(key)
            .filter(|q| q.items.iter().any(|(t, _)| *t == ticket))
        {
            return if now_ms > queue.due_ms {
                Check::Flush
            } else {
                Check::Wait(rules.wait_ms)
            };
        }
        match self.fates.get(&ticket).copied() {
            Some(Fate::Sending { since_ms }) if now_ms.saturating_sub(since_ms) <= rules.lost_ms => {
                Check::Wait(rules.wait_ms)
            }
            Some(Fate::Sent) => {
                self.fates.remove(&ticket);
                Check::Sent
            }
            // Lost under way, or forgotten: the rider's copy goes alone.
            _ => {
                self.fates.remove(&ticket);
                Check::Alone
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        wait_ms: 10,
        max_items: 3,
        overdue_ms: 100,
        lost_ms: 1_000,
        retry_ms: 50,
        max_sends: 3,
    };

    #[test]
    fn the_first_item_waits_and_takes_those_that_came_meanwhile() {
        let mut b = Batches::default();
        let (t1, role) = b.push("k", 1, false, 0, &RULES);
        assert_eq!(role, Role::FlushAfter(10));
        let (t2, role) = b.push("k", 2, false, 5, &RULES);
        assert_eq!(role, Role::Ride(20));
        assert_eq!(
            b.push("other", 9, false, 5, &RULES).1,
            Role::FlushAfter(10),
            "keys are apart"
        );
        assert_eq!(
            b.check("k", t2, 8, &RULES),
            Check::Wait(10),
            "still queued, its flusher not late"
        );
        assert_eq!(
            b.take("k", t1, 10),
            Taken {
                items: vec![1, 2],
                own: Some(0),
                riders: vec![t2],
                tickets: vec![t1, t2]
            }
        );
        assert_eq!(
            b.take("k", t1, 10).items,
            Vec::<i32>::new(),
            "the late flusher finds nothing"
        );
        assert_eq!(b.check("k", t2, 20, &RULES), Check::Wait(10), "under way");
        b.sent(&[t2]);
        assert_eq!(b.check("k", t2, 30, &RULES), Check::Sent);
        assert_eq!(
            b.push("k", 3, false, 40, &RULES).1,
            Role::FlushAfter(10),
            "a new batch starts"
        );
    }

    #[test]
    fn urgent_full_or_overdue_queues_go_at_once() {
        let mut b = Batches::default();
        let (t, role) = b.push("k", 1, true, 0, &RULES);
        assert_eq!(role, Role::FlushNow, "urgent");
        b.take("k", t, 0);
        b.push("k", 1, false, 0, &RULES);
        b.push("k", 2, false, 1, &RULES);
        let (full, role) = b.push("k", 3, false, 2, &RULES);
        assert_eq!(role, Role::FlushNow, "full");
        assert_eq!(b.take("k", full, 2).items, vec![1, 2, 3]);
        b.push("k", 1, false, 0, &RULES);
        assert_eq!(
            b.push("k", 2, false, 101, &RULES).1,
            Role::FlushNow,
            "its flusher is overdue: the task was lost"
        );
        assert_eq!(b.take("k", 0, 101).items, vec![1, 2]);
    }

    #[test]
    fn a_queue_is_overdue_by_its_first_items_rules() {
        let mut b = Batches::default();
        let slow = Rules {
            wait_ms: 1_500,
            overdue_ms: 5_000,
            ..RULES
        };
        assert_eq!(b.push("k", 1, false, 0, &slow).1, Role::FlushAfter(1_500));
        let (t2, role) = b.push("k", 2, false, 1_000, &RULES);
        assert_eq!(role, Role::Ride(20), "not overdue: the flusher waits 1.5 s");
        assert_eq!(b.check("k", t2, 4_000, &RULES), Check::Wait(10));
        assert_eq!(b.check("k", t2, 5_001, &RULES), Check::Flush);
    }

    #[test]
    fn a_rider_whose_flusher_never_came_sends_the_queue_itself() {
        let mut b = Batches::default();
        b.push("k", 1, false, 0, &RULES); // its flusher's task dies before taking
        let (t2, _) = b.push("k", 2, false, 5, &RULES);
        assert_eq!(b.check("k", t2, 50, &RULES), Check::Wait(10));
        assert_eq!(b.check("k", t2, 101, &RULES), Check::Flush);
        let taken = b.take("k", t2, 101);
        assert_eq!(
            (taken.items, taken.own, taken.riders),
            (vec![1, 2], Some(1), vec![0]),
            "the dead flusher's item goes too"
        );
    }

    #[test]
    fn a_rider_sends_its_own_copy_when_the_batch_was_lost_under_way() {
        let mut b = Batches::default();
        let (t1, _) = b.push("k", 1, false, 0, &RULES);
        let (t2, _) = b.push("k", 2, false, 1, &RULES);
        let others = b.take("k", t1, 10).riders;
        assert_eq!(others, vec![t2]);
        assert_eq!(
            b.check("k", t2, 1_000, &RULES),
            Check::Wait(10),
            "still within its time"
        );
        assert_eq!(
            b.check("k", t2, 1_011, &RULES),
            Check::Alone,
            "the flusher died mid-send"
        );
        assert_eq!(
            b.check("k", 999, 0, &RULES),
            Check::Alone,
            "a ticket nobody knows goes alone"
        );
    }

    #[test]
    fn a_failed_batch_rejoins_the_next_one_and_is_given_up_after_its_sends() {
        let rules = Rules { max_items: 10, ..RULES };
        let mut b = Batches::default();
        let (t1, _) = b.push("k", 1, false, 0, &rules);
        let (t2, _) = b.push("k", 2, false, 1, &rules);
        let taken = b.take("k", t1, 10);
        let failed = b.failed("k", taken, 20, &rules);
        assert_eq!(
            failed,
            Failed {
                given_up: vec![],
                rejoined: Some(t1)
            }
        );
        assert_eq!(
            b.check("k", t2, 30, &rules),
            Check::Wait(10),
            "queued again, not sent alone"
        );
        let (t3, role) = b.push("k", 3, false, 40, &rules);
        assert_eq!(role, Role::Ride(20), "a new item joins the failed batch's queue");
        assert_eq!(b.check("k", t3, 70, &rules), Check::Wait(10));
        assert_eq!(
            b.check("k", t1, 71, &rules),
            Check::Flush,
            "due retry_ms after the failure"
        );
        let taken = b.take("k", t1, 71);
        assert_eq!(
            (taken.items.clone(), taken.own),
            (vec![1, 2, 3], Some(0)),
            "one batch, failed items first"
        );
        assert_eq!(b.failed("k", taken, 80, &rules).given_up, Vec::<i32>::new());
        let taken = b.take("k", t3, 200);
        let failed = b.failed("k", taken, 210, &rules);
        assert_eq!(failed.given_up, vec![1, 2], "their third failed send: given back");
        assert_eq!(failed.rejoined, Some(t3), "the sender's own item has sends left");
        assert_eq!(
            b.check("k", t2, 220, &rules),
            Check::Sent,
            "handled by the sender's fallback"
        );
        let taken = b.take("k", t3, 300);
        assert_eq!(taken.items, vec![3]);
        b.sent(&taken.riders);
        assert!(
            b.sends.get(&t3).is_some_and(|n| *n == 2),
            "the sender forgets its own count when told"
        );
    }

    /// The class: under a store that refuses every call, the calls issued for N items offered in
    /// batches stay within 1.1 × the batches a working store would take plus the retries of the
    /// last ones (never one call per item), and every item is written or given back exactly once.
    #[test]
    fn a_saturated_store_sees_no_more_calls_than_offered() {
        for seed in 0..50u64 {
            let mut rng = seed.wrapping_mul(6364136223846793005).wrapping_add(7);
            let mut next = || {
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                rng >> 33
            };
            let rules = Rules {
                max_items: 16,
                wait_ms: 10,
                overdue_ms: 100,
                lost_ms: 5_000,
                retry_ms: 200,
                max_sends: 3,
            };
            let run = |refuse: bool, next: &mut dyn FnMut() -> u64| {
                let mut b: Batches<u64> = Batches::default();
                let mut calls = 0u64;
                let mut handled: Vec<u64> = Vec::new();
                let mut waiting: Vec<(u64, Ticket)> = Vec::new(); // (check at, ticket)
                let mut now = 0;
                let mut item = 0;
                while now < 30_000 || !waiting.is_empty() {
                    now += 1;
                    if now < 30_000 && next().is_multiple_of(4) {
                        let (ticket, role) = b.push("k", item, false, now, &rules);
                        item += 1;
                        let at = match role {
                            Role::FlushNow => now,
                            Role::FlushAfter(ms) | Role::Ride(ms) => now + ms,
                        };
                        waiting.push((at, ticket));
                    }
                    let due: Vec<(u64, Ticket)> = waiting.iter().copied().filter(|(at, _)| *at <= now).collect();
                    waiting.retain(|(at, _)| *at > now);
                    for (_, ticket) in due {
                        match b.check("k", ticket, now, &rules) {
                            Check::Sent => {}
                            Check::Wait(ms) => waiting.push((now + ms, ticket)),
                            Check::Alone => panic!("seed {seed}: nobody died, yet an item went alone"),
                            Check::Flush => {
                                let taken = b.take("k", ticket, now);
                                calls += 1;
                                if refuse {
                                    let f = b.failed("k", taken, now, &rules);
                                    handled.extend(f.given_up);
                                    if let Some(t) = f.rejoined {
                                        waiting.push((now + rules.wait_ms, t));
                                    }
                                } else {
                                    b.sent(&taken.tickets);
                                    handled.extend(taken.items);
                                }
                            }
                        }
                    }
                }
                handled.sort();
                (calls, handled, item)
            };
            let (offered, written, n) = run(false, &mut next);
            assert_eq!(
                written,
                (0..n).collect::<Vec<_>>(),
                "seed {seed}: every item written once"
            );
            let (issued, given_up, n) = run(true, &mut next);
            assert_eq!(
                given_up,
                (0..n).collect::<Vec<_>>(),
                "seed {seed}: every item given back once"
            );
            assert!(
                issued as f64 <= 1.1 * offered as f64,
                "seed {seed}: {issued} calls issued against a saturated store, {offered} offered ({n} items)"
            );
        }
    }

    #[test]
    fn an_item_left_without_a_sender_goes_with_the_next_one_queued_or_checked() {
        let mut b = Batches::default();
        b.leave("k", 1);
        assert_eq!(b.push("k", 2, false, 5_000, &RULES).1, Role::FlushNow);
        assert_eq!(b.take("k", 1, 5_000).items, vec![1, 2]);
        b.push("k", 3, false, 6_000, &RULES);
        let (rider, _) = b.push("k", 4, false, 6_001, &RULES);
        b.leave("k", 5);
        assert_eq!(
            b.check("k", rider, 6_002, &RULES),
            Check::Flush,
            "a rider checking sends it too"
        );
    }

    /// A full queue sent at once leaves the next batch to its own first item: the flusher of the
    /// sent batch, waking, does not send the next one early and half full.
    #[test]
    fn a_flusher_whose_batch_went_out_full_leaves_the_next_batch_alone() {
        let rules = Rules {
            wait_ms: 10,
            max_items: 3,
            overdue_ms: 100,
            lost_ms: 5_000,
            retry_ms: 200,
            max_sends: 3,
        };
        let mut b = Batches::default();
        let (first, role) = b.push("k", 0, false, 0, &rules);
        assert_eq!(role, Role::FlushAfter(10));
        b.push("k", 1, false, 1, &rules);
        let (third, role) = b.push("k", 2, false, 2, &rules);
        assert_eq!(role, Role::FlushNow);
        let full = b.take("k", third, 2);
        assert_eq!(full.items, vec![0, 1, 2]);
        b.sent(&full.tickets);
        let (next, role) = b.push("k", 3, false, 5, &rules);
        assert_eq!(role, Role::FlushAfter(10), "the next batch has its own flusher");
        b.push("k", 4, false, 6, &rules);
        let early = b.take("k", first, 10);
        assert!(
            early.items.is_empty(),
            "the first flusher, waking at 10, sends nothing: {:?}",
            early.items
        );
        assert_eq!(
            b.check("k", first, 10, &rules),
            Check::Sent,
            "its own item went out with the full batch"
        );
        let on_time = b.take("k", next, 15);
        assert_eq!(on_time.items, vec![3, 4], "the next batch goes at its own time, whole");
        // A queue whose flusher is overdue is anyone's.
        b.push("k", 5, false, 20, &rules);
        assert_eq!(b.take("k", first, 121).items, vec![5]);
    }
}
