//! An isolate's batches of background writes (settlements, health reports): the waiting half of
//! `switchyard_core::batch`, which decides who sends what. Every caller waits on its own timers
//! only — never on another request's task (SPEC §18: a flusher whose request died takes nobody's
//! write with it).

use std::cell::RefCell;
use std::thread::LocalKey;

use switchyard_core::batch::{Batches, Check, Role, Rules, Taken};

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
    let (mut wait, mut flush) = match role {
        Role::FlushAfter(ms) => (ms, true),
        Role::FlushNow => (0, true),
        Role::Ride(ms) => (ms, false),
    };
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
        // A rider found the queue overdue and took it, this item with it: ride on that batch.
        (wait, flush) = (rules.wait_ms, false);
    }
}

/// Tells a batch's riders whether it was written.
pub fn finished<T>(batches: &'static LocalKey<RefCell<Batches<T>>>, lead: &Lead<T>, ok: bool) {
    batches.with(|b| b.borrow_mut().finished(&lead.riders, ok));
}

/// Queues `item` under `key` for the next caller to send, from a task that can do no I/O.
pub fn leave<T>(batches: &'static LocalKey<RefCell<Batches<T>>>, key: &str, item: T) {
    batches.with(|b| b.borrow_mut().leave(key, item));
}
