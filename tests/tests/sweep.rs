//! The cron sweep of expired holds (SPEC §11). Its own test binary: it writes to the Worker's local
//! D1 directly (as a crash would leave it), which is only reliable while no other suite keeps the
//! database busy — cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use switchyard_e2e::{unique, Stack};

/// Crashes between hold and settlement in accounts on several ledgers (SPEC §22): the one sweep
/// releases the expired holds of every ledger.
#[test]
fn an_expired_hold_is_swept_in_every_ledger() {
    let s = Stack::from_env();
    let keys: Vec<String> = (0..6).map(|_| s.new_key(1.0)).collect();
    let ledgers: Vec<String> = keys.iter().map(|k| s.ledger_db(k)).collect();
    let mut distinct = ledgers.clone();
    distinct.sort();
    distinct.dedup();
    assert!(
        distinct.len() >= 2,
        "six accounts all placed on one ledger: {ledgers:?}"
    );
    for (key, db) in keys.iter().zip(&ledgers) {
        let account = s.credits(key)["account_id"].as_str().unwrap().to_string();
        // A hold written, never settled, already expired.
        s.d1_execute(
            db,
            &format!(
                "INSERT INTO holds (generation_id, account_id, key_id, amount_micros, path, state, created_at, expires_at) \
                 VALUES ('{}', '{account}', 'k', 5000, 'awaited', 'open', 0, 1); \
                 UPDATE accounts SET held_micros = held_micros + 5000 WHERE id = '{account}';",
                unique("gen-crashed")
            ),
        );
    }
    let s = Stack::from_env(); // fresh connections after `wrangler d1 execute`
    for key in &keys {
        assert_eq!(s.credits(key)["held_micros"], 5000);
    }
    s.trigger_cron();
    let deadline = Instant::now() + Duration::from_secs(10);
    for (key, db) in keys.iter().zip(&ledgers) {
        let c = loop {
            let c = s.credits(key);
            if c["held_micros"] == 0 || Instant::now() > deadline {
                break c;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(c["held_micros"], 0, "the expired hold in {db} was released: {c}");
        assert_eq!(c["balance_micros"], 1_000_000, "nothing charged");
        assert_eq!(c["open_holds_micros"], 0);
    }
}
