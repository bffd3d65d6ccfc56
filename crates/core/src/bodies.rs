//! Request bodies on their way in (SPEC §18, §18a): how much of the isolate's budget for bodies
//! one key may hold, and by when a body's next bytes must arrive. One key's uploads — however
//! many, however slow — must not leave every other key's request a 503, and a body that trickles
//! in is cut off (408) instead of holding its request, and its share, for as long as the client
//! keeps the connection open.
//!
//! A body's share is what has arrived of it, never what its `content-length` declares: a
//! declared length costs nothing until its bytes come. The share is held while the request holds
//! its body — until it commits or ends (every attempt before then may need the body again).

/// Bytes of request bodies one isolate holds at once. A body lives about twice while its request
/// runs (its fields, and the copy an attempt sends), under an isolate's 128 MB
/// (<https://developers.cloudflare.com/workers/platform/limits/#memory>): two 10 MiB bodies fit.
pub const BODY_BUDGET_BYTES: usize = 24 * 1024 * 1024;

/// The most one key's bodies hold at once: one body at the cap (`MAX_BODY_BYTES`) fits, and half
/// the budget always stays for the other keys.
pub const KEY_SHARE_BYTES: usize = BODY_BUDGET_BYTES / 2;

/// The slowest a body may arrive, on average from the start of its read, once
/// [`FLOOR_GRACE_MS`] has passed: 128 kbit/s, a poor mobile uplink.
pub const FLOOR_BYTES_PER_S: u64 = 16 * 1024;

/// How long a body may take before the floor rate applies (a slow start, a small body).
pub const FLOOR_GRACE_MS: u64 = 5_000;

/// Whether a key holding `key_held` bytes of bodies may take `more`, with the isolate holding
/// `held` in all: within the isolate's budget and within the key's share.
pub fn may_take(held: usize, key_held: usize, more: usize) -> bool {
    held.saturating_add(more) <= BODY_BUDGET_BYTES && key_held.saturating_add(more) <= KEY_SHARE_BYTES
}

/// When a body whose read began at `started_ms` and has `received` bytes so far must have more:
/// the grace, then one more millisecond per [`FLOOR_BYTES_PER_S`]/1000 bytes received. A body
/// that has all arrived by then never meets it.
pub fn next_bytes_due_ms(started_ms: u64, received: usize) -> u64 {
    let earned = (received as u64).saturating_mul(1000) / FLOOR_BYTES_PER_S;
    started_ms.saturating_add(FLOOR_GRACE_MS).saturating_add(earned)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn one_key_holds_at_most_its_share_and_the_rest_stays_for_the_others() {
        // (isolate held, the key's held, more, taken)
        let cases = [
            (0, 0, 10 * MIB, true),                   // one body at the cap
            (10 * MIB, 10 * MIB, 2 * MIB, true),      // up to the key's share
            (10 * MIB, 10 * MIB, 2 * MIB + 1, false), // past it
            (12 * MIB, 0, 12 * MIB, true),            // another key: the other half
            (12 * MIB, 0, 12 * MIB + 1, false),       // past the isolate's budget
            (BODY_BUDGET_BYTES, 0, 1, false),
            (0, 0, usize::MAX, false),
        ];
        for (held, key_held, more, taken) in cases {
            assert_eq!(may_take(held, key_held, more), taken, "{held} {key_held} {more}");
        }
        // Issue 31: one key's three bodies of 10, 10 and 4 MiB, taken as they arrive — the key
        // stops at its share, and another key's 10 MiB body still fits.
        let (mut held, mut key_held) = (0, 0);
        for body in [10 * MIB, 10 * MIB, 4 * MIB] {
            let mut got = 0;
            while got < body && may_take(held, key_held, 64 * 1024) {
                held += 64 * 1024;
                key_held += 64 * 1024;
                got += 64 * 1024;
            }
        }
        assert_eq!(key_held, KEY_SHARE_BYTES);
        assert!(may_take(held, 0, 10 * MIB));
    }

    #[test]
    fn the_floor_rate_gives_a_grace_then_time_in_proportion_to_what_arrived() {
        let start = 1_000_000;
        // (received, due after the start)
        let cases = [
            (0, FLOOR_GRACE_MS),
            (20, FLOOR_GRACE_MS + 1),
            (16 * 1024, FLOOR_GRACE_MS + 1000),
            (10 * MIB, FLOOR_GRACE_MS + 640_000),
        ];
        for (received, due) in cases {
            assert_eq!(next_bytes_due_ms(start, received), start + due, "{received}");
        }
        // A body keeping to the floor rate is never due; one below it is.
        let steady = |bytes_per_s: u64, seconds: u64| {
            (1..=seconds).all(|s| {
                let received = (bytes_per_s * s) as usize;
                next_bytes_due_ms(start, received) >= start + (s + 1) * 1000
            })
        };
        assert!(steady(FLOOR_BYTES_PER_S, 600));
        assert!(!steady(FLOOR_BYTES_PER_S / 2, 600));
        assert_eq!(next_bytes_due_ms(u64::MAX, usize::MAX), u64::MAX);
    }
}
