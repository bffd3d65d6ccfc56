//! An isolate's batches of background writes (settlements, health reports): the waiting half of
//! `switchyard_core::batch`, which decides who sends what. Every caller waits on its own timers
//! only — never on another request's task (SPEC §18: a flusher whose request died takes nobody's
//! write with it). A failed batch rejoins the queue and goes out with the next one ([`run`]).

use std::future::Future;

use std::cell::RefCell;
use std::thread::LocalKey;

use switchyard_core::batch::{Batches, Check, Role, Rules, Taken, Ticket};

use crate::runtime::clock::{in_request, now_ms, sleep};

/// What the caller of [`gather`] sends.
pub enum Turn<T> {
    /// A batch, its own item among them: send it, then tell the riders with [`finished`].
    Lead(Lead<T>),
    /// Its own item alone (its batch failed or was lost under way).
    Alone(T),
    /// Nothing: its item was sent with another caller's batch.
    Done,
}

/// A batch to send (the caller's own item among them), and the riders waiting to hear how it
/// went.
pub type Lead<T> = Taken<T>;

/// Queues `item` under `key` in `batches` and waits for its turn: to send a batch (after waiting
/// for others to join when it was the first), to send its item alone, or nothing.
pub async fn gather<T: Clone + 'static>(
    batches: &'static LocalKey<RefCell<Batches<T>>>,
    key: &str,
    item: T,
    urgent: bool,
    rules: &Rules,
) -> Turn<T> {
    let copy = item.clone();
    let (ticket, role) = batches.with(|b| b.borrow_mut().push(key, item, urgent, now_ms(), rules));
    let (wait, flush) = match role {
        Role::FlushAfter(ms) => (ms, true),
        Role::FlushNow => (0, true),
        Role::Ride(ms) => (ms, false),
    };
    turn(batches, key, ticket, copy, wait, flush, rules).await
}

/// Waits `wait`, then sends the queue (`flush`) or checks `ticket` as a rider, until its turn.
async fn turn<T: Clone + 'static>(
    batches: &'static LocalKey<RefCell<Batches<T>>>,
    key: &str,
    ticket: Ticket,
    copy: T,
    mut wait: u64,
    mut flush: bool,
    rules: &Rules,
) -> Turn<T> {
    loop {
        if wait > 0 {
            sleep(wait).await;
            if !in_request() {
                // No timers or I/O from here: the queue's next caller sends what is still queued.
                return Turn::Done;
            }
        }
        if !flush {
            match batches.with(|b| b.borrow_mut().check(key, ticket, now_ms(), rules)) {
                Check::Sent => return Turn::Done,
                Check::Wait(ms) => {
                    wait = ms;
                    continue;
                }
                Check::Flush => {}
                Check::Alone => return Turn::Alone(copy),
            }
        }
        let taken = batches.with(|b| b.borrow_mut().take(key, ticket, now_ms()));
        if !taken.items.is_empty() {
            return Turn::Lead(taken);
        }
        // Another caller sent this item already (a full or overdue queue): ride on that batch.
        (wait, flush) = (rules.wait_ms, false);
    }
}

/// What became of a caller's item in [`run`].
pub struct Outcome<T> {
    /// Its batch was lost under way (its sender died): the caller sends it alone.
    pub alone: Option<T>,
    /// Items whose batches failed `max_sends` times, the caller's own among them or not: the
    /// caller's fallback takes them (its riders were told they are handled).
    pub given_up: Vec<T>,
}

/// Queues `item` under `key` and sends batches with `send` (true: written) when its turn comes,
/// until its item is written, given up or left to another caller. A batch that fails rejoins the
/// queue (core `Batches::failed`) and goes out with the next one `retry_ms` later — never item by
/// item.
pub async fn run<T, F, Fut>(
    batches: &'static LocalKey<RefCell<Batches<T>>>,
    key: &str,
    item: T,
    urgent: bool,
    rules: &Rules,
    mut send: F,
) -> Outcome<T>
where
    T: Clone + 'static,
    F: FnMut(Vec<T>) -> Fut,
    Fut: Future<Output = bool>,
{
    let mut next = gather(batches, key, item, urgent, rules).await;
    let mut given_up = Vec::new();
    loop {
        let lead = match next {
            Turn::Lead(lead) => lead,
            Turn::Alone(item) => {
                return Outcome {
                    alone: Some(item),
                    given_up,
                }
            }
            Turn::Done => return Outcome { alone: None, given_up },
        };
        let own = lead.own.and_then(|i| lead.items.get(i).cloned());
        let ok = send(lead.items.clone()).await;
        let failed = batches.with(|b| {
            let mut b = b.borrow_mut();
            if ok {
                b.sent(&lead.tickets);
                None
            } else {
                Some(b.failed(key, lead, now_ms(), rules))
            }
        });
        let Some(failed) = failed else {
            return Outcome { alone: None, given_up };
        };
        given_up.extend(failed.given_up);
        match (failed.rejoined, own) {
            // Its item rejoined the queue: it waits on it as a rider (and may send it again).
            (Some(ticket), Some(copy)) => next = turn(batches, key, ticket, copy, rules.wait_ms, false, rules).await,
            _ => return Outcome { alone: None, given_up },
        }
    }
}

/// Queues `item` under `key` for the next caller to send, from a task that can do no I/O.
pub fn leave<T>(batches: &'static LocalKey<RefCell<Batches<T>>>, key: &str, item: T) {
    batches.with(|b| b.borrow_mut().leave(key, item));
}
