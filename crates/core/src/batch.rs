//! Gathering an isolate's background writes into batches: the first item queued under a key waits
//! a moment and then sends everything queued by then; the items that arrive meanwhile ride along.
//! Settlements (D1) and health reports (Durable Objects) both use it.
//!
//! An urgent item, a full queue, or a queue whose flusher is overdue (its task was lost) is sent at
//! once by the caller that finds it so: nothing waits for a flusher that will never come. Time is
//! an argument; the waiting itself is the caller's (`src/batch.rs`).

use std::collections::HashMap;

/// How a kind of item is batched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// How long the first item waits for others.
    pub wait_ms: u64,
    /// Items past which the queue is sent at once.
    pub max_items: usize,
    /// Age of the oldest item past which the queue is sent at once.
    pub overdue_ms: u64,
}

/// What the caller who queued an item does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Wait this long, then [`Batches::take`] and send.
    FlushAfter(u64),
    /// [`Batches::take`] and send now.
    FlushNow,
    /// Nothing: another caller sends this item.
    Ride,
}

struct Queue<T> {
    items: Vec<T>,
    since_ms: u64,
}

/// Queues by key (e.g. one per model).
pub struct Batches<T> {
    queues: HashMap<String, Queue<T>>,
}

impl<T> Default for Batches<T> {
    fn default() -> Self {
        Batches { queues: HashMap::new() }
    }
}

impl<T> Batches<T> {
    /// Queues `item` under `key` at `now_ms` and says who sends it.
    pub fn push(&mut self, key: &str, item: T, urgent: bool, now_ms: u64, rules: &Rules) -> Role {
        let queue = self.queues.entry(key.to_string()).or_insert_with(|| Queue {
            items: Vec::new(),
            since_ms: now_ms,
        });
        let first = queue.items.is_empty();
        if first {
            queue.since_ms = now_ms;
        }
        queue.items.push(item);
        if urgent || queue.items.len() >= rules.max_items || now_ms.saturating_sub(queue.since_ms) > rules.overdue_ms {
            Role::FlushNow
        } else if first {
            Role::FlushAfter(rules.wait_ms)
        } else {
            Role::Ride
        }
    }

    /// Everything queued under `key` (empty when another caller sent it already).
    pub fn take(&mut self, key: &str) -> Vec<T> {
        self.queues.remove(key).map(|q| q.items).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        wait_ms: 10,
        max_items: 3,
        overdue_ms: 100,
    };

    #[test]
    fn the_first_item_waits_and_takes_those_that_came_meanwhile() {
        let mut b = Batches::default();
        assert_eq!(b.push("k", 1, false, 0, &RULES), Role::FlushAfter(10));
        assert_eq!(b.push("k", 2, false, 5, &RULES), Role::Ride);
        assert_eq!(
            b.push("other", 9, false, 5, &RULES),
            Role::FlushAfter(10),
            "keys are apart"
        );
        assert_eq!(b.take("k"), vec![1, 2]);
        assert_eq!(b.take("k"), Vec::<i32>::new(), "the late flusher finds nothing");
        assert_eq!(
            b.push("k", 3, false, 20, &RULES),
            Role::FlushAfter(10),
            "a new batch starts"
        );
    }

    #[test]
    fn urgent_full_or_overdue_queues_go_at_once() {
        let mut b = Batches::default();
        assert_eq!(b.push("k", 1, true, 0, &RULES), Role::FlushNow, "urgent");
        b.take("k");
        b.push("k", 1, false, 0, &RULES);
        b.push("k", 2, false, 1, &RULES);
        assert_eq!(b.push("k", 3, false, 2, &RULES), Role::FlushNow, "full");
        b.take("k");
        b.push("k", 1, false, 0, &RULES);
        assert_eq!(
            b.push("k", 2, false, 101, &RULES),
            Role::FlushNow,
            "its flusher is overdue: the task was lost"
        );
        assert_eq!(b.take("k"), vec![1, 2]);
    }
}
