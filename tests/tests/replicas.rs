//! What must hold across isolates, on replicas of the Worker (`tests/replicas.mjs`: isolates of the
//! same script sharing their Durable Objects and D1; `scripts/test` starts 16): a key's limits and a
//! route's capacity are one limit, not one per isolate (SPEC §10); the public report is built once
//! for every isolate, and a model's health object hears from its shards, not from the isolates
//! (SPEC §22).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, note, route, unique, Reply, Stack};

/// A one-route model over `scenario` with the route's extra fields, once both replicas serve it
/// to `key`.
fn model(replicas: &[Stack], key: &str, scenario: &str, extra: Value, policy: Value) -> String {
    let s = &replicas[0];
    let provider = s.mock_provider(&unique("rep"), scenario, false);
    let model = s.model(vec![route("r0", &provider, "u", extra)], Some(policy));
    // Each isolate caches the catalog for a few seconds: wait until both list the model.
    let auth = format!("Bearer {key}");
    for r in replicas {
        let deadline = Instant::now() + Duration::from_secs(15);
        let models = || {
            r.request(
                "GET",
                &format!("{}/v1/models", r.gateway),
                &[("authorization", &auth)],
                None,
            )
        };
        while !models().text().contains(&model) {
            assert!(Instant::now() < deadline, "a replica never saw {model}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    model
}

/// Sends one streamed request per entry of `to` (a replica index each), all at once, `gap` apart.
fn at_once(replicas: &[Stack; 2], key: &str, model: &str, to: &[usize], gap: Duration) -> Vec<Reply> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = to
            .iter()
            .map(|&i| {
                let s = replicas[i].clone();
                let (key, model) = (key.to_string(), model.to_string());
                std::thread::sleep(gap);
                scope.spawn(move || s.chat(&key, &chat_body(&model, true)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn isolates(replies: &[Reply]) -> BTreeSet<String> {
    replies
        .iter()
        .map(|r| {
            r.header("x-switchyard-isolate")
                .expect("isolate header (test faults on)")
                .to_string()
        })
        .collect()
}

#[test]
fn the_two_replicas_are_two_isolates() {
    let replicas = Stack::replicas();
    let seen: BTreeSet<String> = replicas
        .iter()
        .map(|s| s.request("GET", &format!("{}/v1/models", s.gateway), &[], None))
        .map(|r| r.header("x-switchyard-isolate").unwrap().to_string())
        .collect();
    assert_eq!(seen.len(), 2, "{seen:?}");
}

#[test]
fn a_keys_concurrency_is_one_limit_across_isolates() {
    let replicas = Stack::replicas();
    // Streams of about 3 s; two slots for the key, whichever isolate serves it. Two streams on
    // the first isolate take both; the second isolate, asked next, finds none. A limit kept per
    // isolate would answer all four (two each) or, at one slot each, 200/429 on each isolate.
    // The order depends only on the first isolate's second request reaching the key's object
    // before the second isolate's first, sent 200 ms later.
    let key = replicas[0].new_key_with(1.0, json!({"max_concurrent": 2}));
    let model = model(&replicas, &key, "chunks/10/300", json!({}), json!({}));
    let replies = at_once(&replicas, &key, &model, &[0, 0, 1, 1], Duration::from_millis(200));
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429, 429], "in the order sent: replica 0, 0, 1, 1");
    assert_eq!(isolates(&replies).len(), 2, "both isolates answered");
}

#[test]
fn a_keys_rpm_is_one_window_across_isolates() {
    let replicas = Stack::replicas();
    let key = replicas[0].new_key_with(1.0, json!({"rpm": 2}));
    let model = model(&replicas, &key, "ok", json!({}), json!({"key_wait_ms": 200}));
    for (i, want) in [(0, 200), (1, 200), (0, 429), (1, 429)] {
        let r = replicas[i].chat(&key, &chat_body(&model, false));
        assert_eq!(r.status, want, "request on replica {i}: {}", r.text());
    }
}

/// SPEC §22: a key limiting concurrency past one object's share (core `SLOTS_PER_SHARD`: 32)
/// keeps its slots in several objects, exact in total. A key of 40 slots (two objects of 20),
/// sent 48 streams of about 3 s at once over two isolates with no wait for room, answers exactly
/// 40 — whichever object each request picked first — and both objects took calls, the key's
/// single object none.
#[test]
fn a_keys_slots_over_several_objects_are_one_limit() {
    let replicas = Stack::replicas();
    let (key, key_id) = limited_key(&replicas[0], json!({"max_concurrent": 40}));
    let model = model(&replicas, &key, "chunks/10/300", json!({}), json!({"key_wait_ms": 0}));
    forty_of_48_over_two_objects(
        &replicas,
        &key,
        &model,
        "LIMITS.acquire",
        [format!("key:{key_id}:0"), format!("key:{key_id}:1")],
        Some(format!("key:{key_id}")),
    );
}

/// SPEC §22: a key with `rpm` alone past one object's share (core `RPM_PER_SHARD`: 12,000) keeps
/// its window over several objects, exact in total; each isolate takes its permits from the one
/// it picks, and the rate-limit headers speak of the key's whole window. A key of 24,000 rpm (two
/// objects of 12,000), 20 requests on each of two isolates: all answered, each isolate's permit
/// calls went to one of the two objects, none to the key's single object, and the headers say
/// 24,000.
#[test]
fn a_large_rpm_keys_window_is_spread_over_objects_and_its_headers_speak_of_the_whole() {
    let replicas = Stack::replicas();
    let (key, key_id) = limited_key(&replicas[0], json!({"rpm": 24_000}));
    let model = model(&replicas, &key, "ok", json!({}), json!({}));
    for r in &replicas {
        for _ in 0..20 {
            let reply = r.chat(&key, &chat_body(&model, false));
            assert_eq!(reply.status, 200, "{}", reply.text());
            assert_eq!(reply.header("x-ratelimit-limit-requests"), Some("24000"));
            let remaining: u32 = reply.header("x-ratelimit-remaining-requests").unwrap().parse().unwrap();
            assert!((23_000..24_000).contains(&remaining), "remaining {remaining}");
        }
    }
    let permits = |r: &Stack, name: &str| both(&object_calls(r, name), "LIMITS.permits");
    for (i, r) in replicas.iter().enumerate() {
        let shards = [
            permits(r, &format!("key:{key_id}:0")),
            permits(r, &format!("key:{key_id}:1")),
        ];
        assert!(
            shards.iter().filter(|n| **n > 0).count() == 1,
            "replica {i} took its permits from one object: {shards:?}"
        );
        assert_eq!(
            permits(r, &format!("key:{key_id}")),
            0,
            "the key's single object was not asked"
        );
    }
}

#[test]
fn a_routes_capacity_is_one_queue_across_isolates() {
    let replicas = Stack::replicas();
    let key = replicas[0].new_key(1.0);
    let model = model(
        &replicas,
        &key,
        "chunks/6/250",
        json!({"max_concurrency": 1}),
        json!({"capacity_wait_ms": 5000}),
    );
    let replies = at_once(&replicas, &key, &model, &[0, 1], Duration::from_millis(100));
    assert!(replies.iter().all(|r| r.status == 200), "{replies:?}");
    let queued: Vec<u64> = replies
        .iter()
        .map(|r| r.header("x-queued-ms").map_or(0, |v| v.parse().unwrap()))
        .collect();
    assert_eq!(queued[0], 0, "{queued:?}");
    assert!(
        queued[1] > 500,
        "the other isolate's request waited for the one slot: {queued:?}"
    );
}

/// SPEC §22: a model whose capped routes allow more than one object's share (core
/// `SLOTS_PER_SHARD`: 32, on its smallest cap) keeps its capacity over several objects, exact in
/// total. A route of 40 (two objects of 20), 48 streams of about 3 s at once over two isolates
/// with no wait for room: exactly 40 answered, both objects asked (`capacity:0:<model>`,
/// `capacity:1:<model>`).
#[test]
fn a_routes_capacity_over_several_objects_is_one_limit() {
    let replicas = Stack::replicas();
    let key = replicas[0].new_key(5.0);
    let model = model(
        &replicas,
        &key,
        "chunks/10/300",
        json!({"max_concurrency": 40, "verify": false}),
        json!({"capacity_wait_ms": 0}),
    );
    forty_of_48_over_two_objects(
        &replicas,
        &key,
        &model,
        "LIMITS/capacity.acquire",
        [format!("capacity:0:{model}"), format!("capacity:1:{model}")],
        None,
    );
}

/// Sends 48 streams of about 3 s at once, half on each replica, to a limit of 40 kept by the two
/// objects `objects` with no wait for room: exactly 40 answered and 8 refused, each object asked
/// (`kind`) at least for its 20, and `unasked` (the limit's single object) never.
fn forty_of_48_over_two_objects(
    replicas: &[Stack; 2],
    key: &str,
    model: &str,
    kind: &str,
    objects: [String; 2],
    unasked: Option<String>,
) {
    let to: Vec<usize> = (0..48).map(|i| i % 2).collect();
    let replies = at_once(replicas, key, model, &to, Duration::from_millis(5));
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 40, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 8, "{statuses:?}");
    let asked = |name: &str| -> u64 { replicas.iter().map(|r| both(&object_calls(r, name), kind)).sum() };
    let (first, second) = (asked(&objects[0]), asked(&objects[1]));
    assert!(
        first >= 20 && second >= 20,
        "each object gave its 20: {first} and {second} calls"
    );
    if let Some(name) = unasked {
        assert_eq!(asked(&name), 0, "the single object was not asked");
    }
}

/// The isolate's storage calls so far on object `name`: `<kind>.<blocking|background>` → count.
fn object_calls(s: &Stack, name: &str) -> Value {
    test_calls(s, &format!("object={name}"))["object"].clone()
}

/// `GET /__test/calls?<query>` on the replica `s`.
fn test_calls(s: &Stack, query: &str) -> Value {
    let r = s.request("GET", &format!("{}/__test/calls?{query}", s.gateway), &[], None);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// `calls[kind]`, blocking and background together (`kind` without the suffix).
fn both(calls: &Value, kind: &str) -> u64 {
    ["blocking", "background"]
        .iter()
        .map(|tag| calls[format!("{kind}.{tag}")].as_u64().unwrap_or(0))
        .sum()
}

/// The `Full` calls the model's object has had from each replica: (blocking — a report the isolate
/// built itself —, background — the status object's, which runs in the first replica).
fn full_calls(replicas: &[Stack; 2], model: &str) -> [(u64, u64); 2] {
    replicas.each_ref().map(|s| {
        let c = object_calls(s, &format!("model:{model}"));
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        (n("HEALTH.full.blocking"), n("HEALTH.full.background"))
    })
}

fn catalog_version(s: &Stack) -> i64 {
    s.admin("GET", "/admin/catalog", None).json()["version"]
        .as_i64()
        .unwrap()
}

/// The public report is built once per interval for the whole deployment (SPEC §22), not once per
/// isolate: status hits on both replicas in the same few seconds make no isolate build a report of
/// its own, and cost the model's health object at most one `Full` call between them. (Each fetch
/// is slowed by the drill `slow-report-<ms>`, so the hits overlap.)
#[test]
fn the_status_report_is_built_once_for_every_isolate() {
    let replicas = Stack::replicas();
    let key = replicas[0].new_key(1.0);
    let model = model(&replicas, &key, "ok", json!({"verify": false}), json!({}));
    // Both isolates hold the catalog with the model (and built a report listing it, for
    // `/v1/models`); once that report is older than its 3 s, the next status hits need a new one.
    std::thread::sleep(Duration::from_millis(3_500));
    let version = catalog_version(&replicas[0]);
    let before = full_calls(&replicas, &model);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let hits: Vec<_> = (0..8)
            .map(|i| {
                let s = replicas[i % 2].clone();
                scope.spawn(move || {
                    let path = if i % 4 < 2 { "/status" } else { "/api/health/models" };
                    let fault = [("x-switchyard-test-fault", "slow-report-1500")];
                    s.request("GET", &format!("{}{path}", s.gateway), &fault, None).status
                })
            })
            .collect();
        hits.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let after = full_calls(&replicas, &model);
    let answer = replicas[1].request("GET", &format!("{}/api/health/models", replicas[1].gateway), &[], None);
    assert!(
        answer.text().contains(&model),
        "the report lists the model: {}",
        answer.text()
    );
    // No isolate built a report of its own: every build was the status object's.
    for (i, (b, a)) in before.iter().zip(after).enumerate() {
        assert_eq!(
            a.0 - b.0,
            0,
            "replica {i} built its own report ({} Full calls)",
            a.0 - b.0
        );
    }
    let builds: u64 = before.iter().zip(after).map(|(b, a)| (a.0 + a.1) - (b.0 + b.1)).sum();
    // A catalog changed by another test meanwhile is a new report to build.
    let changes = (catalog_version(&replicas[0]) - version) as u64;
    assert!(
        builds <= 1 + changes,
        "status hits on two isolates made {builds} Full calls to the model's object (catalog changes: {changes})"
    );
}

/// SPEC §22, issue 34: a model's health object hears from the model's shards, not from the
/// isolates. Sixteen isolates serve one model for 5 s (two clients each): none of them calls the
/// model's object or an account's object but for its first snapshot of the model (the objects run
/// in replica 0, whose isolate makes the shards' calls too — in the background, never for a
/// request); each asks its shard for a
/// snapshot about once a second; and the model's object gets at most about four calls a second per
/// shard in use — fewer than the isolates' own calls to their shards, which before the shards
/// went to the model's object itself.
#[test]
fn sixteen_isolates_reach_the_models_health_object_through_its_shards_only() {
    let replicas: Vec<Stack> = (0..16).map(Stack::replica).collect();
    let key = replicas[0].new_key(5.0);
    let model = model(&replicas, &key, "ok", json!({"verify": false}), json!({}));
    let object = format!("model:{model}");
    // Each isolate's shard of the model; its calls to it counted apart from other tests' models.
    let shard_of: Vec<String> = replicas
        .iter()
        .map(|s| {
            test_calls(s, &format!("shard_of={model}"))["shard"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let shards: BTreeSet<&String> = shard_of.iter().collect();
    let totals = |s: &Stack| test_calls(s, "")["all"].clone();
    let calls = |i: usize| (totals(&replicas[i]), object_calls(&replicas[i], &shard_of[i]));
    let before: Vec<(Value, Value)> = (0..replicas.len()).map(calls).collect();
    let before_model: Vec<Value> = replicas.iter().map(|s| object_calls(s, &object)).collect();
    let object_before = object_calls(&replicas[0], &object);
    let started = Instant::now();
    let run = Duration::from_secs(5);
    let answered: u64 = std::thread::scope(|scope| {
        let clients: Vec<_> = replicas
            .iter()
            .flat_map(|s| [s, s])
            .map(|s| {
                let (key, model) = (&key, &model);
                scope.spawn(move || {
                    let mut n = 0;
                    while started.elapsed() < run {
                        let r = s.chat(key, &chat_body(model, false));
                        assert_eq!(r.status, 200, "{}", r.text());
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().unwrap()).sum()
    });
    let secs = started.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(1_500)); // the last reports forwarded
    let after: Vec<(Value, Value)> = (0..replicas.len()).map(calls).collect();
    let object_after = object_calls(&replicas[0], &object);
    let all = |i: usize, kind: &str| both(&after[i].0, kind) - both(&before[i].0, kind);
    let to_shard = |i: usize, kind: &str| both(&after[i].1, kind) - both(&before[i].1, kind);

    for i in 0..replicas.len() {
        // Its first snapshot of the model, read from the model's object while its first request
        // waited: nothing else (other tests' models on the same replicas wait on theirs).
        let blocking = |v: &Value| v["HEALTH.snapshot.blocking"].as_u64().unwrap_or(0);
        let waited = blocking(&after[i].0) - blocking(&before[i].0);
        let on_model = blocking(&object_calls(&replicas[i], &object)) - blocking(&before_model[i]);
        assert!(
            on_model <= 1,
            "replica {i} waited on the model's object {on_model} times"
        );
        if i > 0 {
            assert_eq!(
                all(i, "HEALTH.snapshot"),
                waited,
                "replica {i} asked a health object itself"
            );
            assert_eq!(
                all(i, "HEALTH.observe"),
                0,
                "replica {i} reported to a health object itself"
            );
        }
        let snapshots = to_shard(i, "HEALTH_SHARDS.snapshot");
        assert!(
            snapshots as f64 <= secs + 2.0,
            "replica {i}: {snapshots} snapshot calls to its shard in {secs:.1} s"
        );
    }
    let to_shards: u64 = (0..replicas.len())
        .map(|i| to_shard(i, "HEALTH_SHARDS.snapshot") + to_shard(i, "HEALTH_SHARDS.report"))
        .sum();
    let at_object = ["HEALTH.snapshot", "HEALTH.observe"]
        .iter()
        .map(|kind| both(&object_after, kind) - both(&object_before, kind))
        .sum::<u64>();
    let bound = shards.len() as f64 * (4.0 * (secs + 1.5) + 2.0);
    // docs/SCALE.md's estimate (not its bound): a shard whose k isolates each ask it about once a
    // second calls the model's object f(k) times a second — its 1 s flush, and a renewal when a
    // snapshot call finds its copy older than 250 ms — from its first snapshot call (about a
    // second in: each isolate's first snapshot comes from the model's object), then once more
    // for the reports of the last second. The count is within ±20 % of it (issue 34).
    let per_second = |k: usize| [0.0, 1.0, 1.5, 1.8, 2.1, 2.35].get(k).copied().unwrap_or(2.35);
    let estimate: f64 = shards
        .iter()
        .map(|shard| per_second(shard_of.iter().filter(|s| s == shard).count()) * (secs - 1.0).max(0.0) + 1.0)
        .sum();
    note(&format!(
        "replicas: 16 isolates, {answered} answers in {secs:.1} s ({:.0}/s) over {} shards: {to_shards} calls \
         to the shards, {at_object} to the model's object (estimate {estimate:.0}, bound {bound:.0})",
        answered as f64 / secs,
        shards.len()
    ));
    assert!(at_object > 0, "the shards forwarded the reports");
    assert!(
        (at_object as f64 - estimate).abs() <= 0.2 * estimate,
        "{at_object} calls to the model's object from {} shards in {secs:.1} s: docs/SCALE.md's estimate is \
         {estimate:.0} (±20 %)",
        shards.len()
    );
    assert!(
        (at_object as f64) <= bound,
        "{at_object} calls to the model's object from {} shards in {secs:.1} s (bound {bound:.0})",
        shards.len()
    );
    assert!(
        at_object < to_shards,
        "the model's object ({at_object} calls) took fewer calls than the isolates made ({to_shards})"
    );
}

/// SPEC §9, §22: an upstream account's breaker reaches every model on the account through the
/// models' objects, on every isolate, without any isolate asking the account's object. A 401 on
/// model `m1`'s first route, served by replica 1, cools the account; model `m2` (its first route
/// on the same account), served by replica 2 only, stops trying that route within a few seconds
/// (the account's object told by `m1`'s object, `m2`'s object asking its accounts every 2 s, its
/// shards' copy renewed, the isolate's snapshot refreshed) — and neither replica called the
/// account's object itself.
#[test]
fn an_account_failure_on_one_isolate_reaches_another_models_requests_on_another() {
    let replicas: Vec<Stack> = (0..3).map(Stack::replica).collect();
    let s = &replicas[0];
    let key = s.new_key(5.0);
    let account = unique("acct");
    let on_account = |label: &str, scenario: &str| s.provider_on_account(label, scenario, &account);
    let (broken_l, shared_l) = (unique("l"), unique("l"));
    let broken = on_account(&broken_l, "status/401/invalid_key");
    let shared = on_account(&shared_l, "ok");
    let other = s.mock_provider(&unique("l"), "ok", false);
    let policy = json!({"cooldown_ms": 60000, "cooldown_max_ms": 60000, "health_snapshot_ms": 500});
    let routes = |first: &str| {
        vec![
            route("r0", first, "u", json!({"verify": false})),
            route("r1", &other, "u", json!({"verify": false})),
        ]
    };
    let m1 = s.model(routes(&broken), Some(policy.clone()));
    let m2 = s.model(routes(&shared), Some(policy));
    let served_by = |r: &Reply, s: &Stack| s.generation(&key, r.header("x-generation-id").unwrap())["route"].clone();
    // Replica 2 serves m2 on its account's route (waiting for it to know the model).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = replicas[2].chat(&key, &chat_body(&m2, false));
        if r.status == 200 && served_by(&r, &replicas[2]) == "r0" {
            break;
        }
        assert!(Instant::now() < deadline, "m2 never served on r0: {}", r.text());
        std::thread::sleep(Duration::from_millis(200));
    }
    let object = format!("account:{account}");
    let own_calls = |i: usize| both(&object_calls(&replicas[i], &object), "HEALTH.snapshot");
    let before = [own_calls(1), own_calls(2)];
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = replicas[1].chat(&key, &chat_body(&m1, false));
        if r.status == 200 {
            assert_eq!(served_by(&r, &replicas[1]), "r1", "past the 401");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "m1 never answered on replica 1: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let failed = Instant::now();
    let reached = loop {
        let r = replicas[2].chat(&key, &chat_body(&m2, false));
        assert_eq!(r.status, 200, "{}", r.text());
        if served_by(&r, &replicas[2]) == "r1" {
            break failed.elapsed();
        }
        assert!(
            failed.elapsed() < Duration::from_secs(10),
            "m2 on replica 2 still tried the cooling account's route 10 s after the failure"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    note(&format!(
        "accounts: a 401 on one isolate reached another model's requests on another isolate in {:.2} s",
        reached.as_secs_f64()
    ));
    let after = [own_calls(1), own_calls(2)];
    assert_eq!(before, after, "no isolate asked the account's object itself");
    // The objects run in replica 0: there, m1's object told the account's object, and m2's asked.
    let told = object_calls(&replicas[0], &object);
    assert!(
        both(&told, "HEALTH.observe") >= 1 && both(&told, "HEALTH.snapshot") >= 1,
        "the models' objects told and asked the account's object: {told}"
    );
}

/// A new funded key with `limits` (`rpm`, `max_concurrent`): its plaintext and its id (its limit
/// objects' names).
fn limited_key(s: &Stack, limits: Value) -> (String, String) {
    let mut fields = limits;
    let account = s.admin("POST", "/admin/accounts", Some(json!({})));
    assert_eq!(account.status, 201, "{}", account.text());
    let account_id = account.json()["id"].as_str().unwrap().to_string();
    let credit = s.admin(
        "POST",
        &format!("/admin/accounts/{account_id}/credit"),
        Some(json!({"amount_usd": 5.0})),
    );
    assert_eq!(credit.status, 200, "{}", credit.text());
    fields["account_id"] = json!(account_id);
    let key = s.admin("POST", "/admin/keys", Some(fields));
    assert_eq!(key.status, 201, "{}", key.text());
    let v = key.json();
    (
        v["key"].as_str().unwrap().to_string(),
        v["id"].as_str().unwrap().to_string(),
    )
}

/// SPEC §22: a key with `rpm` alone is still one window across isolates when its isolates spend
/// permits taken in batches — and a busy isolate makes a call per batch, not per request. Two
/// replicas, two clients each, 200 ms of wait for room: a key of 120 rpm (batches of at most 2) is sent
/// 160 requests and answers no more than 120 of them; a key of 3,000 rpm (batches up to 50) is
/// sent 120 requests and answers them all with fewer than half as many calls to its object.
#[test]
fn an_rpm_keys_permits_keep_one_window_and_spare_its_object() {
    let replicas: Vec<Stack> = (0..2).map(Stack::replica).collect();
    let s = &replicas[0];
    let provider = s.mock_provider(&unique("rep"), "ok", false);
    let model = s.model(
        vec![route("r0", &provider, "u", json!({"verify": false}))],
        Some(json!({"key_wait_ms": 200})),
    );
    let run = |rpm: u32, requests: usize| -> (usize, usize, u64) {
        let (key, key_id) = limited_key(s, json!({"rpm": rpm}));
        // Both replicas know the model (and the key) before the clock starts.
        for r in &replicas {
            let deadline = Instant::now() + Duration::from_secs(15);
            while r.chat(&key, &chat_body(&model, false)).status != 200 {
                assert!(Instant::now() < deadline, "a replica never served {model}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        assert_eq!(s.chat(&key, &chat_body(&model, false)).status, 200);
        let object = format!("key:{key_id}");
        let calls = |r: &Stack| {
            let c = object_calls(r, &object);
            both(&c, "LIMITS.acquire") + both(&c, "LIMITS.permits")
        };
        let before: u64 = replicas.iter().map(calls).sum();
        let sent = std::sync::atomic::AtomicUsize::new(0);
        let statuses: Vec<u16> = std::thread::scope(|scope| {
            let clients: Vec<_> = replicas
                .iter()
                .flat_map(|r| [r, r])
                .map(|r| {
                    let (key, model, sent) = (&key, &model, &sent);
                    scope.spawn(move || {
                        let mut seen = Vec::new();
                        while sent.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < requests {
                            seen.push(r.chat(key, &chat_body(model, false)).status);
                        }
                        seen
                    })
                })
                .collect();
            clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
        });
        let after: u64 = replicas.iter().map(calls).sum();
        assert!(statuses.iter().all(|s| *s == 200 || *s == 429), "{statuses:?}");
        let ok = statuses.iter().filter(|s| **s == 200).count();
        // The warm-up answers (one per replica, and `first`) count in the window too.
        (ok + replicas.len() + 1, statuses.len(), after - before)
    };
    let (answered, sent, calls) = run(120, 160);
    note(&format!(
        "permits: 120 rpm, {sent} sent on 2 isolates: {answered} answered in the window, {calls} calls to its object"
    ));
    assert!(answered <= 120, "{answered} answered by a key of 120 rpm");
    assert!(
        answered >= 90,
        "permits left unspent cost the key {} of its 120",
        120 - answered
    );
    let (answered, sent, calls) = run(3_000, 120);
    note(&format!(
        "permits: 3,000 rpm, {sent} sent on 2 isolates: {answered} answered, {calls} calls to its object"
    ));
    assert_eq!(answered, sent + 3, "every request of a key far from its limit");
    assert!(
        (calls as usize) * 2 < sent,
        "{calls} calls to the key's object for {sent} requests"
    );
}

/// SPEC §22: isolates read a key through its keyrings, each of which reads it from D1 once for
/// all the isolates asking it while its copy is fresh (2 s): eight isolates' first requests with
/// a new key, sent together, each wait on a keyring once and never on D1 — and the key is read
/// from D1 at most once per keyring it has (4; eight reads would be one per isolate, as before
/// keyrings). The isolates read the catalog through keyrings too.
#[test]
fn a_key_eight_isolates_read_at_once_is_read_once_per_keyring() {
    let replicas: Vec<Stack> = (0..9).map(Stack::replica).collect();
    let first = replicas[0].new_key(5.0);
    let model = model(&replicas, &first, "ok", json!({"verify": false}), json!({}));
    let key = replicas[0].new_key(5.0);
    let auth = format!("Bearer {key}");
    let asked = replicas[0].request(
        "GET",
        &format!("{}/__test/calls?keyring=1", replicas[0].gateway),
        &[("authorization", &auth)],
        None,
    );
    let counted_as = asked.json()["key_reads"].as_str().unwrap().to_string();
    // The keyrings run in replica 0, with the other objects.
    let d1_reads = || both(&object_calls(&replicas[0], &counted_as), "KEYS.d1_read");
    assert_eq!(d1_reads(), 0, "a new key was never read");
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let handles: Vec<_> = replicas[1..]
            .iter()
            .map(|s| {
                let (key, model) = (key.clone(), model.clone());
                scope.spawn(move || s.chat(&key, &chat_body(&model, false)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r.status, 200, "replica {}: {}", i + 1, r.text());
        let calls: Value = serde_json::from_str(r.header("x-switchyard-calls").unwrap()).unwrap();
        assert_eq!(calls["KEYS.read"], 1, "replica {}: {calls}", i + 1);
        assert!(
            calls.get("D1.key").is_none(),
            "replica {} read D1 itself: {calls}",
            i + 1
        );
    }
    assert_eq!(isolates(&replies).len(), 8, "eight isolates");
    let reads = d1_reads();
    note(&format!(
        "keyrings: eight isolates' first requests with one key, {reads} D1 read(s) of it"
    ));
    assert!(
        (1..=4).contains(&reads),
        "{reads} D1 reads of the key for eight isolates"
    );
    for (i, s) in replicas.iter().enumerate().skip(1) {
        let all = test_calls(s, "")["all"].clone();
        assert!(
            both(&all, "KEYS.catalog") > 0,
            "replica {i} read the catalog through a keyring: {all}"
        );
    }
}
