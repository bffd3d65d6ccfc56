//! The cron sweep of expired holds (SPEC §11). Its own test binary: it writes to the Worker's local
//! D1 directly (as a crash would leave it), which is only reliable while no other suite keeps the
//! database busy — cargo runs test binaries one at a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use switchyard_e2e::{unique, Stack};

#[test]
fn an_expired_hold_is_swept() {
    let s = Stack::from_env();
    let key = s.new_key(1.0);
    let account = s.credits(&key)["account_id"].as_str().unwrap().to_string();
    // A crash between hold and settlement: a hold written, never settled, already expired.
    s.d1_execute(&format!(
        "INSERT INTO holds (generation_id, account_id, key_id, amount_micros, path, state, created_at, expires_at) \
         VALUES ('{}', '{account}', 'k', 5000, 'awaited', 'open', 0, 1); \
         UPDATE accounts SET held_micros = held_micros + 5000 WHERE id = '{account}';",
        unique("gen-crashed")
    ));
    assert_eq!(s.credits(&key)["held_micros"], 5000);
    s.trigger_cron();
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        let c = s.credits(&key);
        if c["held_micros"] == 0 || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(c["held_micros"], 0, "the expired hold was released: {c}");
    assert_eq!(c["balance_micros"], 1_000_000, "nothing charged");
    assert_eq!(c["open_holds_micros"], 0);
}
