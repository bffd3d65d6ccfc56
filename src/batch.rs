//! An isolate's batches of background writes (settlements, health reports): the waiting half of
//! `switchyard_core::batch`, which decides who sends what.

use std::cell::RefCell;
use std::thread::LocalKey;

use switchyard_core::batch::{Batches, Role, Rules};

use crate::runtime::clock::{now_ms, sleep};

/// Queues `item` under `key` in `batches`. Returns the batch this caller must send now — after
/// waiting for others to join when it was the first — or nothing when another caller sends it.
pub async fn gather<T: 'static>(
    batches: &'static LocalKey<RefCell<Batches<T>>>,
    key: &str,
    item: T,
    urgent: bool,
    rules: &Rules,
) -> Vec<T> {
    let role = batches.with(|b| b.borrow_mut().push(key, item, urgent, now_ms(), rules));
    match role {
        Role::Ride => return Vec::new(),
        Role::FlushAfter(ms) => sleep(ms).await,
        Role::FlushNow => {}
    }
    batches.with(|b| b.borrow_mut().take(key))
}
