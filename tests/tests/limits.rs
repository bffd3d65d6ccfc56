//! Per-key `rpm` and `max_concurrent`, per-route `max_concurrency` with its queue, and the leases
//! behind them (SPEC §10), against the real Worker and its Durable Objects.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, route, unique, Reply, Stack};

/// A model whose routes are these mock scenarios (route `r<i>`), each with its route fields.
fn model(s: &Stack, routes: &[(&str, Value)], policy: Value) -> String {
    s.model(s.mock_routes(routes).0, Some(policy))
}

fn send(s: &Stack, key: &str, model: &str, stream: bool) -> (Reply, Duration) {
    let start = Instant::now();
    let r = s.chat(key, &chat_body(model, stream));
    (r, start.elapsed())
}

/// Sends `n` requests at once (each on its own thread, `stagger` apart); the replies in order.
fn parallel(s: &Stack, key: &str, model: &str, n: usize, stagger: Duration) -> Vec<(Reply, Duration)> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|i| {
                let (s, key, model) = (s.clone(), key.to_string(), model.to_string());
                std::thread::sleep(if i == 0 { Duration::ZERO } else { stagger });
                scope.spawn(move || send(&s, &key, &model, true))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn code(r: &Reply) -> String {
    r.json()["error"]["code"].as_str().unwrap_or_default().to_string()
}

/// The key's credits once it has nothing in flight and nothing held.
fn settled(s: &Stack, key: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let c = s.credits(key);
        if c["held_micros"] == 0 && c["key"]["in_flight"].as_u64().unwrap_or(0) == 0 {
            return c;
        }
        assert!(Instant::now() < deadline, "never settled: {c}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn rpm_admits_its_requests_then_waits_then_refuses_until_the_window_slides() {
    let s = Stack::from_env();
    let model = model(&s, &[("ok", json!({}))], json!({}));
    let key = s.new_key_with(1.0, json!({"rpm": 3}));
    for remaining in [2, 1, 0] {
        let (r, _) = send(&s, &key, &model, false);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
        assert_eq!(
            r.header("x-ratelimit-remaining-requests"),
            Some(remaining.to_string().as_str())
        );
        let reset = r.header("x-ratelimit-reset-requests").unwrap();
        let secs: u64 = reset.strip_suffix('s').unwrap().parse().unwrap();
        assert!((1..=61).contains(&secs), "{reset}");
    }
    let c = settled(&s, &key);
    assert_eq!(
        (c["key"]["rpm"].as_u64(), c["key"]["requests_in_window"].as_u64()),
        (Some(3), Some(3)),
        "{c}"
    );

    let (r, waited) = send(&s, &key, &model, false);
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(code(&r), "key_rate_limited");
    assert_eq!(
        r.json()["error"]["message"],
        "This API key has reached its rate or concurrency limit."
    );
    assert_eq!(r.json()["error"]["type"], "rate_limit_exceeded");
    assert!(
        waited >= Duration::from_millis(1_900),
        "waited {waited:?} for room first"
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=61).contains(&retry), "{retry}");
    // The refusal carries the window too, as the answers did.
    assert_eq!(r.header("x-ratelimit-limit-requests"), Some("3"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    let reset = r.header("x-ratelimit-reset-requests").unwrap();
    assert_eq!(reset, format!("{retry}s"), "the window resets when retry-after says");
    let g = s.generation(&key, r.header("x-generation-id").unwrap());
    assert_eq!(
        (&g["outcome"], &g["total_cost"], &g["hold_path"]),
        (&json!("rejected"), &json!(0.0), &json!(null)),
        "a 429 holds and charges nothing: {g}"
    );

    // Once the window has slid past the first request, the key passes again.
    std::thread::sleep(Duration::from_secs(retry));
    let (r, _) = send(&s, &key, &model, false);
    assert_eq!(r.status, 200, "after retry-after: {}", r.text());
}

#[test]
fn concurrency_admits_its_slots_and_a_slot_freed_within_the_wait_admits_a_waiter() {
    let s = Stack::from_env();
    // Streams of about 3 s: two run, three wait 2 s and are refused.
    let slow = model(&s, &[("chunks/10/300", json!({}))], json!({}));
    let key = s.new_key_with(1.0, json!({"max_concurrent": 2}));
    let replies = parallel(&s, &key, &slow, 5, Duration::from_millis(100));
    let ok = replies.iter().filter(|(r, _)| r.status == 200).count();
    let limited: Vec<_> = replies.iter().filter(|(r, _)| r.status == 429).collect();
    assert_eq!(
        (ok, limited.len()),
        (2, 3),
        "{:?}",
        replies.iter().map(|(r, _)| r.status).collect::<Vec<_>>()
    );
    for (r, waited) in &limited {
        assert_eq!(code(r), "key_rate_limited");
        assert_eq!(r.header("retry-after"), Some("1"));
        assert!(*waited >= Duration::from_millis(1_900), "{waited:?}");
    }
    let c = settled(&s, &key);
    assert_eq!(c["key"]["max_concurrent"], 2);

    // Streams of about 1 s: the third request waits for the first slot to free, then runs.
    let quick = model(&s, &[("chunks/5/200", json!({}))], json!({}));
    let replies = parallel(&s, &key, &quick, 3, Duration::from_millis(100));
    assert!(
        replies.iter().all(|(r, _)| r.status == 200),
        "{:?}",
        replies.iter().map(|(r, _)| r.status).collect::<Vec<_>>()
    );
    let waited = replies[2].1;
    assert!(
        waited >= replies[0].1 + Duration::from_millis(300),
        "the third waited for a slot: {replies:?}",
        replies = replies.iter().map(|(_, d)| d).collect::<Vec<_>>()
    );
}

#[test]
fn no_ending_leaks_a_slot() {
    let s = Stack::from_env();
    // A short idle timeout: a departure `wrangler dev` does not report is noticed within 1 s of
    // the client's queue filling (SPEC §7).
    let policy = json!({"nonstream_base_ms": 300, "nonstream_per_20_tokens_ms": 0, "stream_first_content_ms": 300,
                        "last_route_min_ms": 300, "disconnect_grace_ms": 0, "idle_timeout_ms": 1000});
    let ok = model(&s, &[("ok", json!({}))], policy.clone());
    let failing = model(&s, &[("status/500", json!({}))], policy.clone());
    let hanging = model(&s, &[("hang", json!({}))], policy.clone());
    let long = model(&s, &[("chunks/40/50", json!({}))], policy.clone());
    let key = s.new_key_with(5.0, json!({"max_concurrent": 6}));
    // 4 clients × 50 requests: answered, failed upstream, timed out, left mid-stream, left
    // before the answer — never more than the limit at once, so none is refused.
    std::thread::scope(|scope| {
        for t in 0..4 {
            let (s, key) = (s.clone(), key.clone());
            let (ok, failing, hanging, long) = (ok.clone(), failing.clone(), hanging.clone(), long.clone());
            scope.spawn(move || {
                for i in 0..50 {
                    match (t + i) % 5 {
                        0 => assert_eq!(s.chat(&key, &chat_body(&ok, i % 2 == 0)).status, 200),
                        1 => assert_eq!(s.chat(&key, &chat_body(&failing, false)).status, 502),
                        2 => assert_eq!(s.chat(&key, &chat_body(&hanging, true)).status, 502),
                        3 => {
                            let (_, status, _) = s.chat_stream_maybe_leave(&key, &chat_body(&long, true), "data: ");
                            assert_eq!(status, 200);
                        }
                        _ => {
                            s.chat_abandoned(&key, &chat_body(&hanging, false), 100);
                        }
                    }
                }
            });
        }
    });
    // Every slot came back: the key shows none in flight, and a burst gets all six at once.
    settled(&s, &key);
    let slow = model(&s, &[("chunks/10/200", json!({}))], json!({}));
    let replies = parallel(&s, &key, &slow, 6, Duration::ZERO);
    assert!(
        replies.iter().all(|(r, _)| r.status == 200),
        "{:?}",
        replies.iter().map(|(r, _)| (r.status, r.text())).collect::<Vec<_>>()
    );
    assert!(
        replies.iter().all(|(_, d)| *d < Duration::from_millis(3_000)),
        "none waited for a slot"
    );
}

#[test]
fn a_slot_whose_holder_died_expires_with_its_lease() {
    let s = Stack::from_env();
    // Short limits make a short lease: 500 + 500 + 1000 + 1000 + 0 + 5000 ms margin = 8 s.
    let policy = json!({"key_wait_ms": 500, "capacity_wait_ms": 500, "pre_content_budget_ms": 1000,
                        "stream_cap_ms": 1000, "disconnect_grace_ms": 0});
    let provider = s.mock_provider(&unique("lim"), "ok", false);
    // The drill (tests only): a model whose id has `fault-leak-slots` never gives its slots back.
    let model = unique("fault-leak-slots");
    let doc = json!({"context_window": 8192, "max_output_tokens": 1024, "policy": policy,
                     "routes": [route("r0", &provider, "u", json!({}))]});
    assert_eq!(s.admin("PUT", &format!("/admin/models/{model}"), Some(doc)).status, 200);
    let key = s.new_key_with(1.0, json!({"max_concurrent": 1}));
    let start = Instant::now();
    assert_eq!(send(&s, &key, &model, false).0.status, 200);
    let (r, _) = send(&s, &key, &model, false);
    assert_eq!(
        (r.status, code(&r)),
        (429, "key_rate_limited".to_string()),
        "the dead holder's slot is taken"
    );
    std::thread::sleep(Duration::from_millis(8_200).saturating_sub(start.elapsed()));
    let (r, _) = send(&s, &key, &model, false);
    assert_eq!(r.status, 200, "the lease expired: {}", r.text());
}

#[test]
fn a_full_route_is_skipped_then_requests_queue_in_order_then_are_refused() {
    let s = Stack::from_env();
    let capped = json!({"max_concurrency": 1});
    // Streams of about 1.5 s on two routes of one slot each.
    let model = model(
        &s,
        &[("chunks/6/250", capped.clone()), ("chunks/6/250", capped.clone())],
        json!({"capacity_wait_ms": 4000}),
    );
    let key = s.new_key(5.0);
    // Two at once: one per route, neither queued.
    let replies = parallel(&s, &key, &model, 2, Duration::from_millis(50));
    let mut routes: Vec<_> = replies
        .iter()
        .map(|(r, _)| r.header("x-switchyard-route").unwrap().to_string())
        .collect();
    routes.sort();
    assert_eq!(routes, ["r0", "r1"], "the full route was passed over");
    assert!(replies.iter().all(|(r, _)| r.header("x-queued-ms").is_none()));

    // One slot, three at once: the first runs, the others queue and are admitted in arrival
    // order as the slot frees.
    let single = model_with_wait(&s, 4000);
    let replies = parallel(&s, &key, &single, 3, Duration::from_millis(150));
    assert!(
        replies.iter().all(|(r, _)| r.status == 200),
        "{:?}",
        replies.iter().map(|(r, _)| r.status).collect::<Vec<_>>()
    );
    let queued: Vec<u64> = replies
        .iter()
        .map(|(r, _)| r.header("x-queued-ms").map_or(0, |v| v.parse().unwrap()))
        .collect();
    assert_eq!(queued[0], 0, "{queued:?}");
    assert!(queued[1] > 500, "{queued:?}");
    assert!(queued[2] > queued[1] + 800, "first come, first served: {queued:?}");

    // A queue longer than capacity_wait_ms: refused, and the admin view showed the load.
    let short = model_with_wait(&s, 300);
    let replies = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..2)
            .map(|_| {
                let (s, key, short) = (s.clone(), key.clone(), short.clone());
                std::thread::sleep(Duration::from_millis(50));
                scope.spawn(move || send(&s, &key, &short, true))
            })
            .collect();
        // The late one goes once an earlier one holds the slot (on a loaded machine the spawned
        // requests may reach the object later than their stagger says).
        s.until_slot_held(&short, std::time::Instant::now() + Duration::from_secs(5));
        let late = send(&s, &key, &short, true);
        let mut all: Vec<_> = runs.into_iter().map(|h| h.join().unwrap()).collect();
        all.push(late);
        all
    });
    let (late, waited) = &replies[2];
    assert_eq!(late.status, 429, "{}", late.text());
    assert_eq!(code(late), "capacity_busy");
    assert_eq!(
        late.json()["error"]["message"],
        "All upstream capacity for this model is busy. Retry shortly."
    );
    assert_eq!(late.header("retry-after"), Some("1"));
    assert!(*waited >= Duration::from_millis(280), "{waited:?}");
    // Nothing held while queued, nothing charged for the 429: it was refused before any hold.
    let g = s.generation(&key, late.header("x-generation-id").unwrap());
    assert_eq!(
        (&g["outcome"], &g["total_cost"], &g["hold_path"]),
        (&json!("rejected"), &json!(0.0), &json!(null)),
        "{g}"
    );
    assert_eq!(g["error_code"], "capacity_busy");
    assert_eq!(settled(&s, &key)["held_micros"], 0);
}

/// One route of one slot, streams of about 1.5 s, and `capacity_wait_ms`.
fn model_with_wait(s: &Stack, wait_ms: u64) -> String {
    model(
        s,
        &[("chunks/6/250", json!({"max_concurrency": 1}))],
        json!({"capacity_wait_ms": wait_ms}),
    )
}

#[test]
fn admin_health_shows_each_routes_load_and_a_queued_request_holds_nothing() {
    let s = Stack::from_env();
    let model = model_with_wait(&s, 4000);
    // The running request's key and the queued one's.
    let keys = [s.new_key(1.0), s.new_key(1.0)];
    std::thread::scope(|scope| {
        for (i, key) in keys.iter().enumerate() {
            let (s, key, model) = (s.clone(), key.clone(), model.clone());
            scope.spawn(move || {
                std::thread::sleep(Duration::from_millis(100 * i as u64));
                assert_eq!(send(&s, &key, &model, true).0.status, 200);
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        let h = s.admin("GET", &format!("/admin/health/{model}"), None).json();
        let r0 = &h["routes"][0];
        assert_eq!(
            (&r0["max_concurrency"], &r0["in_flight"], &r0["queued"]),
            (&json!(1), &json!(1), &json!(1)),
            "{h}"
        );
        // The running request's fast hold is written in a batch within about a quarter second of
        // its admission (SPEC §11); a loaded machine may take longer: waited for, ≤ 3 s.
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut running = s.credits(&keys[0]);
        while running["held_micros"].as_i64().unwrap() == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            running = s.credits(&keys[0]);
        }
        let queued = s.credits(&keys[1]);
        assert!(running["held_micros"].as_i64().unwrap() > 0, "{running}");
        assert_eq!(
            queued["held_micros"], 0,
            "nothing is held while a request queues: {queued}"
        );
    });
    let h = s.admin("GET", &format!("/admin/health/{model}"), None).json();
    assert_eq!(h["routes"][0]["queued"], 0, "{h}");
}

#[test]
fn a_key_whose_slot_holders_vanished_is_usable_again_within_seconds() {
    // SPEC §18: under the default policy a lease once lived as long as the longest possible
    // request (≈ 70 min). Now it is short and renewed while its holder lives: the drill model
    // (`fault-leak-slots`) neither renews nor gives back its slots, as a Worker that died would.
    let s = Stack::from_env();
    let provider = s.mock_provider(&unique("lim"), "ok", false);
    let model = unique("fault-leak-slots");
    let doc = json!({"context_window": 8192, "max_output_tokens": 1024,
                     "routes": [route("r0", &provider, "u", json!({}))]});
    assert_eq!(s.admin("PUT", &format!("/admin/models/{model}"), Some(doc)).status, 200);
    let key = s.new_key_with(1.0, json!({"max_concurrent": 2}));
    let start = Instant::now();
    assert_eq!(send(&s, &key, &model, false).0.status, 200);
    assert_eq!(send(&s, &key, &model, false).0.status, 200);
    let (r, _) = send(&s, &key, &model, false);
    assert_eq!(
        (r.status, code(&r)),
        (429, "key_rate_limited".to_string()),
        "both slots are held by the dead"
    );
    std::thread::sleep(Duration::from_millis(15_500).saturating_sub(start.elapsed()));
    let (r, _) = send(&s, &key, &model, false);
    assert_eq!(r.status, 200, "the leases ran out within 15 s: {}", r.text());
}

#[test]
fn a_slot_held_by_a_long_request_is_renewed_past_its_lease() {
    // A live holder keeps its slot however long it runs: a 40 s stream on a key of one slot
    // (lease 15 s) still holds it at 20 s, and gives it back when it ends.
    let s = Stack::from_env();
    let (routes, _) = s.mock_routes(&[("chunks/20/1000", json!({}))]);
    let model = s.model(routes, Some(json!({"idle_timeout_ms": 5000})));
    let (quick, _) = s.mock_routes(&[("ok", json!({}))]);
    let quick = s.model(quick, None);
    let key = s.new_key_with(1.0, json!({"max_concurrent": 1}));
    std::thread::scope(|scope| {
        let long = scope.spawn(|| send(&s, &key, &model, true));
        std::thread::sleep(Duration::from_millis(17_000));
        let (r, _) = send(&s, &key, &quick, false);
        assert_eq!(
            (r.status, code(&r)),
            (429, "key_rate_limited".to_string()),
            "the live stream keeps its slot: {}",
            r.text()
        );
        assert_eq!(long.join().unwrap().0.status, 200);
    });
    let (r, _) = send(&s, &key, &quick, false);
    assert_eq!(r.status, 200, "given back at the end: {}", r.text());
}
