//! Money rows that stay bounded and charges that survive a slow D1 (issue 33, SPEC §22): a
//! settled hold leaves no row; every money write has a deadline, and what misses it is replayed
//! from the outbox exactly once; unknown keys are refused without a D1 read. This binary reads the
//! Worker's local D1 directly (`Stack::d1_query`) to see the rows behind the API.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, fast_policy, unique, Stack};

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A new account named `id` with `credit_usd` and a key; returns the key.
fn account_key(s: &Stack, id: &str, credit_usd: f64) -> String {
    let r = s.admin("POST", "/admin/accounts", Some(json!({"id": id})));
    assert_eq!(r.status, 201, "{}", r.text());
    let r = s.admin(
        "POST",
        &format!("/admin/accounts/{id}/credit"),
        Some(json!({"amount_usd": credit_usd})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let r = s.admin("POST", "/admin/keys", Some(json!({"account_id": id})));
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["key"].as_str().unwrap().to_string()
}

/// A model over one mock scenario per route; returns its id.
fn model(s: &Stack, scenarios: &[&str], policy: Value) -> String {
    let routes: Vec<(&str, Value)> = scenarios.iter().map(|sc| (*sc, json!({}))).collect();
    let (routes, _) = s.mock_routes(&routes);
    s.model(routes, Some(policy))
}

/// The account's rows behind the API, once nothing is held any more (waits up to `secs`): its hold
/// rows by state, the sum and count of its ledger charges, and its credits.
fn settled_books(s: &Stack, key: &str, secs: u64) -> (Vec<Value>, i64, i64, Value) {
    let account = s.credits(key)["account_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(secs);
    let c = loop {
        let c = s.credits(key);
        if c["held_micros"] == 0 && c["open_holds_micros"] == 0 {
            break c;
        }
        assert!(Instant::now() < deadline, "still held after {secs} s: {c}");
        std::thread::sleep(Duration::from_millis(300));
    };
    let holds = s.d1_query(&format!(
        "SELECT state, COUNT(*) AS n FROM holds WHERE account_id = '{account}' GROUP BY state"
    ));
    let ledger = s.d1_query(&format!(
        "SELECT COALESCE(SUM(amount_micros), 0) AS charged, COUNT(*) AS n FROM ledger \
         WHERE account_id = '{account}' AND kind = 'charge'"
    ));
    let charged = ledger[0]["charged"].as_i64().unwrap();
    let n = ledger[0]["n"].as_i64().unwrap();
    (holds, charged, n, c)
}

/// What the generation records of `ids` say was charged, in micro-dollars (each must exist).
fn recorded_charges(s: &Stack, key: &str, ids: &[String]) -> i64 {
    ids.iter()
        .map(|id| (s.generation(key, id)["total_cost"].as_f64().unwrap() * 1e6).round() as i64)
        .sum()
}

// ---- 1: a settled hold leaves no row ------------------------------------------------------------

/// After answered, failed-over, refused and cancelled requests — on the fast path and the awaited
/// one — the holds table keeps no row of the account, and its balance is its credit less the sum
/// of its ledger, which is what its generation records say was delivered.
#[test]
fn money_settled_holds_leave_no_row_and_the_balance_is_the_ledger() {
    let s = Stack::from_env();
    let ok = model(&s, &["ok"], fast_policy());
    let failover = model(&s, &["status/500", "ok"], fast_policy());
    let refused = model(&s, &["status/400/content_filter"], fast_policy());
    let slow = model(&s, &["chunks/30/100"], json!({"disconnect_grace_ms": 0}));
    let key = s.new_key(1.0);

    let mut ids = vec![];
    let mut id_of = |r: &switchyard_e2e::Reply| ids.push(r.header("x-generation-id").unwrap().to_string());
    for stream in [false, true, false, true, false] {
        let r = s.chat(&key, &chat_body(&ok, stream));
        assert_eq!(r.status, 200, "{}", r.text());
        id_of(&r);
    }
    for stream in [false, true] {
        let r = s.chat(&key, &chat_body(&failover, stream));
        assert_eq!(r.status, 200, "{}", r.text());
        id_of(&r);
        let r = s.chat(&key, &chat_body(&refused, stream));
        assert_eq!(r.status, 400, "{}", r.text());
        id_of(&r);
    }
    let (cancelled, _) = s.chat_stream_then_leave(&key, &chat_body(&slow, true), "Hello");
    ids.push(cancelled);
    // A request the balance cannot cover holds nothing at all.
    let poor = s.new_key(0.000_001);
    let r = s.chat(&poor, &chat_body(&ok, false));
    assert_eq!(r.status, 402, "{}", r.text());

    let (holds, charged, charges, c) = settled_books(&s, &key, 30);
    assert!(holds.is_empty(), "settled holds leave no row: {holds:?}");
    assert!(charged > 0 && charges > 0, "{c}");
    assert_eq!(charged, recorded_charges(&s, &key, &ids), "the ledger is what was delivered");
    assert_eq!(c["balance_micros"].as_i64(), Some(1_000_000 - charged), "{c}");
    assert_eq!(c["charges_total_micros"].as_i64(), Some(charged), "{c}");
    let (holds, _, _, _) = settled_books(&s, &poor, 10);
    assert!(holds.is_empty(), "{holds:?}");
}
