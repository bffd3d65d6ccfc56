//! Money rows that stay bounded and charges that survive a slow D1 (issue 33, SPEC §22): a
//! settled hold leaves no row; every money write has a deadline, and what misses it is replayed
//! from the outbox exactly once; unknown keys are refused without a D1 read. This binary reads the
//! Worker's local D1 directly (`Stack::d1_query`) to see the rows behind the API.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, fast_policy, unique, Api, Stack, APIS};

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
    assert_eq!(
        charged,
        recorded_charges(&s, &key, &ids),
        "the ledger is what was delivered"
    );
    assert_eq!(c["balance_micros"].as_i64(), Some(1_000_000 - charged), "{c}");
    assert_eq!(c["charges_total_micros"].as_i64(), Some(charged), "{c}");
    let (holds, _, _, _) = settled_books(&s, &poor, 10);
    assert!(holds.is_empty(), "{holds:?}");
}

// ---- 2: a deadline on every money write -------------------------------------------------------

/// Switchyard's code in an error answer of `api`'s dialect (Gemini keeps it in `details`), and
/// whether the rest of the answer has that dialect's shape for a 503.
fn dialect_code(api: Api, v: &Value) -> (String, bool) {
    match api {
        Api::Gemini => (
            v["error"]["details"][0]["reason"].as_str().unwrap_or("").to_string(),
            v["error"]["code"] == 503 && v["error"]["status"] == "UNAVAILABLE",
        ),
        Api::Messages => (
            v["error"]["code"].as_str().unwrap_or("").to_string(),
            v["type"] == "error" && v["error"]["type"] == "overloaded_error",
        ),
        Api::Chat | Api::Responses => (
            v["error"]["code"].as_str().unwrap_or("").to_string(),
            v["error"]["type"] == "service_unavailable",
        ),
    }
}

/// The drill of issue 33: every D1 statement of the account takes 5 s (the store's `d1-slow-…`
/// drill) for 20 s, under load from a client of each dialect. Every request is served or refused
/// 503 `storage_unavailable` in its dialect — never a 500; every answer served is charged exactly
/// what its record says, once the outbox has replayed what missed its deadline; nothing stays
/// held and no hold row is left.
#[test]
fn money_a_slow_d1_loses_no_charge_and_answers_no_500() {
    let s = Stack::from_env();
    let ok = model(&s, &["ok"], fast_policy());
    let now = unix_ms();
    let (from, until) = (now + 3_000, now + 23_000);
    let key = account_key(&s, &format!("d1-slow-{from}-{until}-{}", unique("a")), 100.0);

    // Before: an answer on the awaited path (the isolate learns the balance for the fast path).
    let r = s.send(Api::Chat, &key, &Api::Chat.body(&ok, false), &[]);
    assert_eq!(r.status, 200, "{}", r.text());
    let mut served = vec![r.header("x-generation-id").unwrap().to_string()];
    std::thread::sleep(Duration::from_millis(from.saturating_sub(unix_ms()) + 100));

    // During: a client of each dialect, stream and not; each request starts early enough to end
    // inside the window (one waiting for D1 gives up after its 5 s deadline).
    let outcomes: Vec<(Api, u16, String, Option<String>)> = std::thread::scope(|scope| {
        let clients: Vec<_> = APIS
            .iter()
            .map(|&api| {
                let (s, key, ok) = (&s, &key, &ok);
                scope.spawn(move || {
                    let mut seen = vec![];
                    let mut stream = false;
                    while unix_ms() + 7_000 < until {
                        let r = s.send(api, key, &api.body(ok, stream), &[]);
                        seen.push((api, r.status, r.text(), r.header("x-generation-id").map(str::to_string)));
                        stream = !stream;
                    }
                    seen
                })
            })
            .collect();
        clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    let mut refused = 0;
    for (api, status, text, id) in &outcomes {
        match status {
            200 => served.push(id.clone().expect("a served answer has its generation id")),
            503 => {
                let (code, shaped) = dialect_code(*api, &serde_json::from_str(text).unwrap());
                assert_eq!(code, "storage_unavailable", "{api:?}: {text}");
                assert!(shaped, "a 503 in the {api:?} dialect: {text}");
                refused += 1;
            }
            _ => panic!("{api:?} answered {status} while D1 was slow: {text}"),
        }
    }
    assert!(served.len() > 1, "the fast path served during the drill: {outcomes:?}");
    eprintln!("slow D1: {} served, {refused} refused 503", served.len());

    // After: the outbox replays; each served answer is charged once, what its record says.
    let account = s.credits(&key)["account_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_millis(until.saturating_sub(unix_ms()) + 60_000);
    loop {
        let n = s.d1_query(&format!(
            "SELECT COUNT(*) AS n FROM ledger WHERE account_id = '{account}' AND kind = 'charge'"
        ))[0]["n"]
            .as_u64()
            .unwrap();
        if n as usize >= served.len() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "60 s after the drill, {n} of {} answers charged: {}",
            served.len(),
            s.credits(&key)
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let (holds, charged, charges, c) = settled_books(&s, &key, 10);
    assert!(holds.is_empty(), "no hold row left: {holds:?}");
    let recorded = recorded_charges(&s, &key, &served);
    assert_eq!(charged, recorded, "the ledger is what was delivered: {c}");
    assert_eq!(charges as usize, served.len(), "one charge per answer served");
    assert_eq!(c["balance_micros"].as_i64(), Some(100_000_000 - charged), "{c}");
}
