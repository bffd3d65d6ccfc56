//! Storage calls counted, and kept to their bounds (issue 34, SPEC §22): the Worker counts every
//! Durable Object call and D1 statement by kind (`x-switchyard-calls` on each response,
//! `GET /__test/calls` for the isolate), and these tests hold the status report and the health
//! snapshots to one fetch in flight per isolate.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, Stack};

/// The isolate's storage calls so far on object `name`, by `<kind>.<blocking|background>`, and the
/// isolate that answered.
fn object_calls(s: &Stack, name: &str) -> (String, Value) {
    let r = s.request("GET", &format!("{}/__test/calls?object={name}", s.gateway), &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    (v["isolate"].as_str().unwrap().to_string(), v["object"].clone())
}

/// The name of the isolate's health shard of `model` (one isolate under `wrangler dev`).
fn shard_of(s: &Stack, model: &str) -> String {
    let r = s.request(
        "GET",
        &format!("{}/__test/calls?shard_of={model}", s.gateway),
        &[],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["shard"].as_str().unwrap().to_string()
}

/// Taken by the tests whose counts a neighbour's load could change (a burst that must end within
/// one report interval; streams and probes that keep the isolate busy for seconds).
static QUIET: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn count(calls: &Value, kind: &str) -> u64 {
    calls[kind].as_u64().unwrap_or(0)
}

fn catalog_version(s: &Stack) -> i64 {
    s.admin("GET", "/admin/catalog", None).json()["version"]
        .as_i64()
        .unwrap()
}

/// A model of one healthy mock route (no verification checks) and a key for it.
fn model(s: &Stack) -> (String, String) {
    let (routes, _) = s.mock_routes(&[("ok", json!({"verify": false}))]);
    let id = s.model(routes, None);
    (id, s.new_key(10.0))
}

/// SPEC §22: a key in steady use is read again beside its requests (`ctx.wait_until`) once the
/// isolate's copy is 4 s old, so after its first read none of them waits for it (neither on its
/// keyring nor on D1): 11 s of requests,
/// four a second, on one key, and one blocking key read — where reading it on the request's path
/// every 5 s waited three times (at 0, 5 and 10 s). (Two allowed: `wrangler dev` may restart the
/// isolate once.)
#[test]
fn calls_a_key_in_steady_use_is_read_beside_its_requests() {
    let s = Stack::from_env();
    let (id, key) = model(&s);
    let started = Instant::now();
    let (mut waited, mut requests) = (0, 0);
    while started.elapsed() < Duration::from_secs(11) {
        let r = s.chat(&key, &chat_body(&id, false));
        assert_eq!(r.status, 200, "{}", r.text());
        let calls: Value = serde_json::from_str(r.header("x-switchyard-calls").unwrap()).unwrap();
        waited += count(&calls, "KEYS.read") + count(&calls, "D1.key");
        requests += 1;
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        (1..=2).contains(&waited),
        "{requests} requests over 11 s waited for {waited} reads of their key"
    );
}

/// Item 1: a request says which storage calls it waited on, by kind, and the isolate's counters
/// tell the blocking calls from the background ones, per object.
#[test]
fn calls_a_request_reports_the_storage_calls_it_waited_on() {
    let s = Stack::from_env();
    let (id, key) = model(&s);
    let object = format!("model:{id}");
    let r = s.chat(&key, &chat_body(&id, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let calls: Value = serde_json::from_str(r.header("x-switchyard-calls").expect("x-switchyard-calls")).unwrap();
    assert_eq!(
        count(&calls, "KEYS.read") + count(&calls, "D1.key"),
        1,
        "a new key is read once, waited on: from its keyring (which reads D1), or — an isolate's \
         very first read — from D1: {calls}"
    );
    assert_eq!(
        count(&calls, "HEALTH.snapshot"),
        1,
        "a model never asked before: its first snapshot, its accounts' breakers folded in, read \
         from the model's object itself, waited on — and no account's object: {calls}"
    );
    assert_eq!(
        count(&calls, "HEALTH_SHARDS.snapshot"),
        0,
        "not through the shard: {calls}"
    );
    // The outcome's report goes from `ctx.wait_until` to the isolate's shard, which forwards it to
    // the model's object within a second: background, both.
    let shard = shard_of(&s, &id);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, on) = object_calls(&s, &object);
        let (_, at_shard) = object_calls(&s, &shard);
        if count(&on, "HEALTH.observe.background") >= 1 {
            assert_eq!(count(&at_shard, "HEALTH_SHARDS.report.background"), 1, "{at_shard}");
            assert_eq!(count(&on, "HEALTH.snapshot.blocking"), 1, "{on}");
            assert_eq!(count(&on, "HEALTH.observe.blocking"), 0, "{on}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no report forwarded: {on} (shard: {at_shard})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Item 2: a burst of public status hits (each fetch made slow by the drill `slow-report-<ms>`,
/// so the hits overlap) costs the model's object at most one `Full` call — not one per hit, also
/// when the isolate has no report of its catalog yet — made by the status object, not the isolate.
#[test]
fn calls_a_burst_of_status_hits_builds_the_report_once() {
    let _quiet = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let s = Arc::new(Stack::from_env());
    let (id, _) = model(&s);
    let object = format!("model:{id}");
    // The isolate reloads the catalog within 5 s: then it has the model, and no report of it.
    std::thread::sleep(Duration::from_millis(5_500));
    let version = catalog_version(&s);
    let (isolate, before) = object_calls(&s, &object);
    let burst = Instant::now();
    let hits: Vec<_> = (0..24)
        .map(|i| {
            let s = s.clone();
            std::thread::spawn(move || {
                let path = if i % 2 == 0 { "/status" } else { "/api/health/models" };
                let r = s.request(
                    "GET",
                    &format!("{}{path}", s.gateway),
                    &[("x-switchyard-test-fault", "slow-report-1500")],
                    None,
                );
                assert_eq!(r.status, 200, "{}", r.text());
                r.header("x-switchyard-isolate").unwrap().to_string()
            })
        })
        .collect();
    let isolates: Vec<String> = hits.into_iter().map(|h| h.join().unwrap()).collect();
    // One report per 3 s interval: a loaded machine whose burst outlasts one may build again.
    let intervals = burst.elapsed().as_millis() as u64 / 3_000;
    let (after_isolate, after) = object_calls(&s, &object);
    eprintln!("status burst: before {before}, after {after}");
    assert!(
        isolates.iter().all(|i| *i == isolate) && after_isolate == isolate,
        "one isolate answered (wrangler dev)"
    );
    // The status object builds the report (its calls run in this isolate too, as background
    // ones): the isolate built none of its own.
    let blocking = count(&after, "HEALTH.full.blocking") - count(&before, "HEALTH.full.blocking");
    assert_eq!(blocking, 0, "the isolate built its own report");
    let full = |calls: &Value| count(calls, "HEALTH.full.blocking") + count(calls, "HEALTH.full.background");
    let builds = full(&after) - full(&before);
    // A catalog changed by another test mid-burst is a new report to build.
    let changes = (catalog_version(&s) - version) as u64;
    assert!(
        builds <= 1 + changes + intervals,
        "24 status hits made {builds} Full calls to the model's object (catalog changes: {changes}, \
         intervals the burst outlasted: {intervals})"
    );
}

/// Item 3: requests on one model in one isolate share one snapshot fetch at a time, and a model's
/// health that stops answering (the drill `fault-health-hang`: every call to the model's object
/// and its shards hangs 5 s, past the 300 ms timeout) is left alone with back-off — not called by
/// every request, each waiting 300 ms for it. Over 3 s of 8 concurrent clients: at most one
/// snapshot call per second, to the model's object (an isolate's first snapshot, never had) or its
/// shard together.
#[test]
fn calls_a_slow_health_object_gets_one_snapshot_call_per_interval() {
    let s = Arc::new(Stack::from_env());
    let (routes, _) = s.mock_routes(&[("ok", json!({"verify": false}))]);
    let id = format!("fault-health-hang-{}", switchyard_e2e::unique("m"));
    let doc = json!({"context_window": 8192, "max_output_tokens": 256, "routes": routes});
    let r = s.admin("PUT", &format!("/admin/models/{id}"), Some(doc));
    assert_eq!(r.status, 200, "{}", r.text());
    let key = s.new_key(10.0);
    let (object, shard) = (format!("model:{id}"), shard_of(&s, &id));
    let started = Instant::now();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (s, id, key) = (s.clone(), id.clone(), key.clone());
            std::thread::spawn(move || {
                let mut waited = Vec::new();
                while started.elapsed() < Duration::from_millis(3_000) {
                    let r = s.chat(&key, &chat_body(&id, false));
                    assert_eq!(r.status, 200, "{}", r.text());
                    let calls: Value = serde_json::from_str(r.header("x-switchyard-calls").unwrap()).unwrap();
                    waited.push(count(&calls, "HEALTH.snapshot") + count(&calls, "HEALTH_SHARDS.snapshot"));
                }
                waited
            })
        })
        .collect();
    let waited: Vec<u64> = workers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    let elapsed = started.elapsed();
    let (_, on) = object_calls(&s, &object);
    let (_, at_shard) = object_calls(&s, &shard);
    let snapshots = ["blocking", "background"]
        .iter()
        .map(|tag| {
            count(&on, &format!("HEALTH.snapshot.{tag}")) + count(&at_shard, &format!("HEALTH_SHARDS.snapshot.{tag}"))
        })
        .sum::<u64>();
    let intervals = elapsed.as_millis() as u64 / 1_000 + 1;
    eprintln!(
        "slow object: {} requests in {elapsed:?}, {snapshots} snapshot calls ({} requests waited on one): {on}",
        waited.len(),
        waited.iter().filter(|n| **n > 0).count()
    );
    assert!(
        snapshots <= intervals,
        "{} requests in {elapsed:?} made {snapshots} snapshot calls to the hanging model's health \
         (at most one per 1 s interval: {intervals}): {on} {at_shard}",
        waited.len()
    );
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `n` concurrent answered requests with `key`.
fn burst(s: &Arc<Stack>, key: &str, model: &str, n: usize) {
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (s, key, model) = (s.clone(), key.to_string(), model.to_string());
            std::thread::spawn(move || {
                let r = s.chat(&key, &chat_body(&model, false));
                assert_eq!(r.status, 200, "{}", r.text());
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// D1 settlement batches that carried `account`'s settlements so far, from requests (the
/// outbox's replays, `D1.replay`, are not counted).
fn settle_calls(s: &Stack, account: &str) -> u64 {
    let (_, on) = object_calls(s, &format!("account:{account}"));
    count(&on, "D1.settle.blocking") + count(&on, "D1.settle.background")
}

/// A request refused before a hold (a model that does not exist, a body without messages) has
/// nothing to charge or release: its settlement sends D1 no batch. Before, it sent an empty one,
/// which D1 refuses — three times, then the outbox kept it and replayed it every few seconds,
/// for ever. An answered request of the same account is settled in one batch (the count works).
#[test]
fn calls_a_refused_request_sends_d1_no_settlement() {
    let s = Stack::from_env();
    let (model, _) = model(&s);
    let account = format!("acct-{}", switchyard_e2e::unique("refused"));
    let key = s.named_account_key(&account, 10.0);
    for body in [chat_body("no-such-model", false), json!({"model": model})] {
        let r = s.chat(&key, &body);
        assert!((400..500).contains(&r.status), "refused: {} {}", r.status, r.text());
    }
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(
        settle_calls(&s, &account),
        0,
        "refused requests sent settlement batches"
    );
    let r = s.chat(&key, &chat_body(&model, false));
    assert_eq!(r.status, 200, "{}", r.text());
    let deadline = Instant::now() + Duration::from_secs(10);
    while settle_calls(&s, &account) == 0 {
        assert!(Instant::now() < deadline, "the answered request was never settled");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Item 4: settlements D1 refuses (the store's outage drill for one account) are sent again as
/// the batch they came in — rejoining the next batch — never one call per settlement (before:
/// each rider of a failed batch tried its own alone three times). The same burst on a working
/// account gives the calls offered; the refused burst may cost each of its batches at most three
/// sends (and may form one batch more than the control's, as its requests end). Nothing is lost: the outbox writes every charge once D1 is back.
#[test]
fn calls_settlements_refused_by_d1_rejoin_the_next_batch() {
    let s = Arc::new(Stack::from_env());
    let (model, _) = model(&s);
    let control = format!("acct-{}", switchyard_e2e::unique("c"));
    let control_key = s.named_account_key(&control, 100.0);
    let now = unix_ms();
    let (from, until) = (now + 3_000, now + 8_000);
    let refused = format!("d1-outage-{from}-{until}-{}", switchyard_e2e::unique("o"));
    let refused_key = s.named_account_key(&refused, 100.0);
    // Learn both balances (the answers after take the fast path, their settlements batched).
    burst(&s, &control_key, &model, 1);
    burst(&s, &refused_key, &model, 1);
    std::thread::sleep(Duration::from_millis(500));
    let control_before = settle_calls(&s, &control);
    burst(&s, &control_key, &model, 12);
    std::thread::sleep(Duration::from_millis(1_000));
    let offered = settle_calls(&s, &control) - control_before;
    std::thread::sleep(Duration::from_millis(from.saturating_sub(unix_ms()) + 200));
    let before = settle_calls(&s, &refused);
    burst(&s, &refused_key, &model, 12);
    std::thread::sleep(Duration::from_millis(2_000));
    let issued = settle_calls(&s, &refused) - before;
    assert!(
        unix_ms() < until,
        "the burst and its retries ran inside the outage window"
    );
    let (_, on) = object_calls(&s, &format!("account:{refused}"));
    eprintln!("12 settlements: {offered} D1 calls with D1 working, {issued} with D1 refusing them: {on}");
    assert!(offered >= 1, "the control burst was settled");
    // The refused burst may be gathered into one batch more than the control's was (its requests
    // end a little apart on a busy machine); before, each of the 12 went alone, three times.
    assert!(
        issued <= 3 * (offered + 1),
        "12 refused settlements cost {issued} D1 calls; the same burst offered {offered} \
         (each batch at most 3 sends, one batch more allowed)"
    );
    // After the outage the outbox replays them: nothing stays held.
    let c = s.settled_credits(&refused_key, 45);
    assert!(
        c["charges_total_micros"].as_i64().unwrap() > 0,
        "replayed and charged: {c}"
    );
}

/// SPEC §22: an isolate's slots on one object are renewed together — one `renew` call for all of
/// them when the renewal is due, not one per holder — and a model's capacity is an object of its
/// own (`capacity:0:<model>`), apart from its health object. Six 12-second streams hold six slots of a
/// capped route at once (lease 15 s, renewed every 5 s): their holders used to send ≈ 12 renewal
/// calls (two each); together they send one per ≥ 4.5 s — at most three in 12 s.
#[test]
fn calls_slots_held_together_are_renewed_by_one_call() {
    let _quiet = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let s = Arc::new(Stack::from_env());
    let (routes, _) = s.mock_routes(&[("chunks/24/500", json!({"verify": false, "max_concurrency": 8}))]);
    let id = s.model(routes, Some(json!({"idle_timeout_ms": 5000})));
    let key = s.new_key(10.0);
    let object = format!("capacity:0:{id}");
    let (isolate, before) = object_calls(&s, &object);
    let started = Instant::now();
    let streams: Vec<_> = (0..6)
        .map(|_| {
            let (s, key, id) = (s.clone(), key.clone(), id.clone());
            std::thread::spawn(move || {
                let r = s.chat(&key, &chat_body(&id, true));
                let text = r.text();
                (r.status, text, r.header("x-switchyard-isolate").map(str::to_string))
            })
        })
        .collect();
    for h in streams {
        let (status, text, answered_by) = h.join().unwrap();
        assert_eq!(status, 200, "{text}");
        assert!(text.contains("[DONE]"), "the stream ran to its end: {text}");
        assert_eq!(
            answered_by.as_deref(),
            Some(isolate.as_str()),
            "one isolate (wrangler dev)"
        );
    }
    let took = started.elapsed();
    std::thread::sleep(Duration::from_millis(500)); // the releases
    let (_, after) = object_calls(&s, &object);
    let calls = |v: &Value, what: &str| count(v, &format!("LIMITS/capacity.{what}.background"));
    let renewals = calls(&after, "renew") - calls(&before, "renew");
    let (acquired, released) = (
        count(&after, "LIMITS/capacity.acquire.blocking") - count(&before, "LIMITS/capacity.acquire.blocking"),
        calls(&after, "release") - calls(&before, "release"),
    );
    eprintln!("6 streams for {took:?}: {acquired} acquire, {renewals} renew, {released} release calls");
    assert_eq!((acquired, released), (6, 6), "{after}");
    // The model's health object takes none of them (SPEC §22: capacity apart from health).
    let (_, health) = object_calls(&s, &format!("model:{id}"));
    let capacity_calls: Vec<&String> = health
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.contains("capacity"))
        .collect();
    assert!(
        capacity_calls.is_empty(),
        "capacity calls on the health object: {health}"
    );
    assert!(
        took >= Duration::from_secs(11),
        "the streams held their slots past two renewals: {took:?}"
    );
    assert!(
        (1..=3).contains(&renewals),
        "{renewals} renewal calls for six slots over {took:?} (one per holder per 5 s would be ≈ 12)"
    );
}

/// SPEC §22: an upstream account's breaker that is back at rest is forgotten, by the account's
/// object and by the model objects' copies: the account's successes are no longer reported to
/// its object. An account fails once (a 401 on one provider), heals (a success on another
/// provider of the same account, once its cooldown ended), then carries eight more requests:
/// before, each was an `observe` call to the accounts object; now none is.
#[test]
fn calls_an_account_back_at_rest_is_forgotten_and_its_successes_cost_no_accounts_call() {
    let _quiet = QUIET.lock().unwrap_or_else(|e| e.into_inner());
    let s = Stack::from_env();
    let account = switchyard_e2e::unique("acct");
    let provider = |scenario: &str| {
        let id = switchyard_e2e::unique("p");
        let label = switchyard_e2e::unique("l");
        let body = json!({"base_url": format!("{}/{label}/{scenario}", s.mock), "auth": "bearer", "account": account});
        assert_eq!(
            s.admin("PUT", &format!("/admin/providers/{id}"), Some(body)).status,
            200
        );
        id
    };
    let policy = json!({"cooldown_ms": 500, "cooldown_max_ms": 500, "health_snapshot_ms": 200});
    let (broken, healthy) = (provider("status/401/invalid_key"), provider("ok"));
    let other = s.mock_provider(&switchyard_e2e::unique("l"), "ok", false);
    let route = |id: &str, p: &str| switchyard_e2e::route(id, p, "u", json!({"verify": false}));
    let failing = s.model(vec![route("r0", &broken), route("r1", &other)], Some(policy.clone()));
    let healing = s.model(vec![route("r0", &healthy)], Some(policy));
    let key = s.new_key(10.0);
    assert_eq!(
        s.chat(&key, &chat_body(&failing, false)).status,
        200,
        "past the account failure"
    );
    // The account's cooldown ends; the next request on it is its probe, and succeeds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        std::thread::sleep(Duration::from_millis(700));
        let r = s.chat(&key, &chat_body(&healing, false));
        let route = s.generation(&key, r.header("x-generation-id").unwrap())["route"].clone();
        if r.status == 200 && route == "r0" {
            break;
        }
        assert!(Instant::now() < deadline, "the account never healed: {}", r.text());
    }
    std::thread::sleep(Duration::from_millis(1_500)); // its report, and the snapshots after it
    let object = format!("account:{account}");
    let (_, before) = object_calls(&s, &object);
    for _ in 0..8 {
        let r = s.chat(&key, &chat_body(&healing, false));
        assert_eq!(r.status, 200, "{}", r.text());
        std::thread::sleep(Duration::from_millis(300)); // one report batch each
    }
    std::thread::sleep(Duration::from_millis(500));
    let (_, after) = object_calls(&s, &object);
    let observes = count(&after, "HEALTH.observe.background") - count(&before, "HEALTH.observe.background");
    let told = count(&before, "HEALTH.observe.background");
    assert!(told >= 2, "its object heard of the failure and the probe: {before}");
    eprintln!("accounts before {before}, after {after}");
    assert_eq!(
        observes, 0,
        "eight successes on a healed account made {observes} accounts calls"
    );
}
