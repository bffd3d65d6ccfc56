//! The isolate's budget for request bodies in flight (SPEC §18, §18a): one client's large bodies
//! must not push the isolate — and every other request it serves — past its memory, and one key's
//! bodies must not take the whole budget. A request takes its body's share as the bytes arrive
//! (core `bodies::may_take` decides) and gives it back when the request is done with its body.

use std::cell::RefCell;
use std::collections::HashMap;

use switchyard_core::bodies::may_take;

/// What the isolate's requests hold: in all, and per key.
#[derive(Default)]
struct InFlight {
    held: usize,
    by_key: HashMap<String, usize>,
}

thread_local! {
    static IN_FLIGHT: RefCell<InFlight> = RefCell::new(InFlight::default());
}

/// A body's share of the isolate's budget, given back when the request is done with it.
pub struct BodyShare {
    key: String,
    bytes: usize,
}

impl BodyShare {
    /// An empty share for a body of key `key_id`.
    pub fn new(key_id: &str) -> BodyShare {
        BodyShare {
            key: key_id.to_string(),
            bytes: 0,
        }
    }

    /// Whether `more` bytes would fit now (nothing taken): a body whose declared length cannot
    /// fit is refused before a byte of it is read.
    pub fn fits(&self, more: usize) -> bool {
        IN_FLIGHT.with(|cell| {
            let in_flight = cell.borrow();
            let key_held = in_flight.by_key.get(&self.key).copied().unwrap_or(0);
            may_take(in_flight.held, key_held, more)
        })
    }

    /// Takes `more` bytes as they arrive; `false` (503 `gateway_busy`) when the isolate's budget
    /// or the key's share would be passed.
    pub fn grow(&mut self, more: usize) -> bool {
        IN_FLIGHT.with(|cell| {
            let mut in_flight = cell.borrow_mut();
            let key_held = in_flight.by_key.get(&self.key).copied().unwrap_or(0);
            if !may_take(in_flight.held, key_held, more) {
                return false;
            }
            in_flight.held += more;
            in_flight.by_key.insert(self.key.clone(), key_held + more);
            self.bytes += more;
            true
        })
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        IN_FLIGHT.with(|cell| {
            let mut in_flight = cell.borrow_mut();
            in_flight.held = in_flight.held.saturating_sub(self.bytes);
            let left = in_flight
                .by_key
                .get(&self.key)
                .copied()
                .unwrap_or(0)
                .saturating_sub(self.bytes);
            match left {
                0 => in_flight.by_key.remove(&self.key),
                n => in_flight.by_key.insert(self.key.clone(), n),
            };
        })
    }
}
