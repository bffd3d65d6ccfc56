//! The isolate's budget for request bodies in flight (SPEC §18): one client's large bodies must
//! not push the isolate — and every other request it serves — past its memory. A request takes
//! its body's share before reading it and gives it back when the request is done.

use std::cell::Cell;

/// Bytes of request bodies one isolate holds at once. A body lives about twice while its request
/// runs (its fields, and the copy an attempt sends), under an isolate's 128 MB
/// (https://developers.cloudflare.com/workers/platform/limits/#memory): two 10 MiB bodies fit.
pub const BODY_BUDGET_BYTES: usize = 24 * 1024 * 1024;

thread_local! {
    static IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// A body's share of the isolate's budget, given back when the request is done with it.
pub struct BodyShare(usize);

impl BodyShare {
    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        self.0
    }

    /// Takes `bytes` of the budget, or `None` (503 `gateway_busy`) when it would go past it. A
    /// body alone larger than the budget cannot happen: the cap is below it.
    pub fn take(bytes: usize) -> Option<BodyShare> {
        IN_FLIGHT.with(|used| {
            let now = used.get();
            if now > 0 && now.saturating_add(bytes) > BODY_BUDGET_BYTES {
                return None;
            }
            used.set(now.saturating_add(bytes));
            Some(BodyShare(bytes))
        })
    }

    /// Takes more of the budget as a body without a declared length grows.
    pub fn grow(&mut self, bytes: usize) -> bool {
        match BodyShare::take(bytes) {
            Some(more) => {
                self.0 += more.0;
                std::mem::forget(more);
                true
            }
            None => false,
        }
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        IN_FLIGHT.with(|used| used.set(used.get().saturating_sub(self.0)));
    }
}

