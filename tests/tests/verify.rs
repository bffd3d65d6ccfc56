//! Verification (issue 14, SPEC §8a) end to end: a demoted route comes back only after a check —
//! one small known request from the model's Durable Object alarm — passes; an idle route is
//! checked once per `verify_idle_ms`, never twice at once; checks are paid by the platform, and the
//! status surfaces say when a route was last verified. Rechecks (SPEC §8b): a demoted route that
//! recovers is back long before its cooldown would have ended, and one that flaps backs off.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use switchyard_e2e::{unique, with, Reply, Stack, CHECK_PROMPT};

/// Demoted at the first failure, 1 s cooldown doubling to 8 s; idle checks as given.
fn policy(verify_idle_ms: u64) -> Value {
    json!({"demote_after": 1, "demote_after_overloaded": 1, "cooldown_ms": 1000, "cooldown_max_ms": 8000,
           "nonstream_base_ms": 4000, "nonstream_per_20_tokens_ms": 0, "verify_idle_ms": verify_idle_ms})
}

struct Model {
    s: Stack,
    id: String,
    key: String,
    routes: Vec<(String, String)>,
    /// The user prompt of this model's requests, so the mock tells them from checks.
    prompt: String,
}

/// Demoted at the first failure for a 20 s cooldown, rechecked every `recheck_ms` meanwhile
/// (doubling with each demotion, SPEC §8b); snapshots refreshed every 200 ms, so a request learns
/// of a passed recheck promptly.
fn recheck_policy(recheck_ms: u64) -> Value {
    with(
        policy(0),
        json!({"cooldown_ms": 20000, "cooldown_max_ms": 160000, "recheck_ms": recheck_ms,
               "health_snapshot_ms": 200}),
    )
}

impl Model {
    fn new(routes: &[(&str, Value)], verify_idle_ms: u64) -> Model {
        Model::with_policy(routes, policy(verify_idle_ms))
    }

    fn with_policy(routes: &[(&str, Value)], policy: Value) -> Model {
        let s = Stack::from_env();
        let (objects, routes) = s.mock_routes(routes);
        let id = s.model(objects, Some(policy));
        let key = s.new_key(10.0);
        Model {
            s,
            id,
            key,
            routes,
            prompt: unique("user prompt"),
        }
    }

    fn ask(&self) -> Reply {
        self.ask_with(&self.key)
    }

    fn ask_with(&self, key: &str) -> Reply {
        self.ask_body(key, json!({}))
    }

    /// A request of this model's with `extra` top-level fields.
    fn ask_body(&self, key: &str, extra: Value) -> Reply {
        let body = json!({"model": self.id, "max_tokens": 20,
                          "messages": [{"role": "user", "content": self.prompt}]});
        let r = self.s.chat(key, &with(body, extra));
        assert_eq!(r.status, 200, "{}", r.text());
        r
    }

    /// Requests route `i` got: (from users, checks), and the most in flight at once.
    fn seen(&self, i: usize) -> (u64, u64, u64) {
        let (label, scenario) = &self.routes[i];
        let st = self.s.mock_stats(label, scenario);
        let by = |p: &str| st["by_prompt"][p].as_u64().unwrap_or(0);
        (
            by(&self.prompt),
            by(CHECK_PROMPT),
            st["max_in_flight"].as_u64().unwrap_or(0),
        )
    }

    fn route_health(&self, i: usize) -> Value {
        let r = self.s.admin("GET", &format!("/admin/health/{}", self.id), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["routes"][i].clone()
    }

    /// Route `i`'s health once `ready` holds (or after 5 s): a request's report reaches the
    /// model's object through the isolate's shard just after its answer, so a read at once may
    /// come first.
    fn route_health_until(&self, i: usize, ready: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let h = self.route_health(i);
            if ready(&h) || Instant::now() > deadline {
                return h;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn checks(&self) -> Vec<Value> {
        let r = self.s.admin("GET", &format!("/admin/checks/{}", self.id), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()["checks"].as_array().unwrap().clone()
    }

    /// What the key was charged and the sum of its generations' costs, once the two agree (each
    /// settlement lands in D1 shortly after its answer) or after 15 s.
    fn key_spend(&self, replies: &[Reply]) -> (i64, i64) {
        let micros = |usd: f64| (usd * 1e6).round() as i64;
        let generations: i64 = replies
            .iter()
            .map(|r| {
                let g = self.s.generation(&self.key, r.header("x-generation-id").unwrap());
                micros(g["total_cost"].as_f64().unwrap())
            })
            .sum();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let c = self.s.credits(&self.key);
            let charged = 10_000_000 - c["balance_micros"].as_i64().unwrap();
            if charged == generations || Instant::now() >= deadline {
                return (charged, generations);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A route that answers 200 with an error object, or 200 with no content, fails its checks: it
/// stays demoted past its cooldown, each failed cooldown check doubling the next cooldown (failed
/// rechecks in between leave it as it is), and no user request reaches it after the ones that
/// demoted it. The checks are on the platform ledger, not the key.
/// (An empty answer is a failure client content can provoke, SPEC §18: the first failures come
/// from two keys, which is proof without a confirmation check.)
#[test]
fn a_route_answering_200_without_a_real_answer_stays_demoted() {
    let scenarios = ["error-body-200", "chunks/0/0"];
    let models: Vec<Model> = scenarios
        .iter()
        .map(|sc| Model::new(&[(sc, json!({})), ("ok", json!({}))], 0))
        .collect();
    let mut replies: Vec<Vec<Reply>> = models.iter().map(|_| Vec::new()).collect();
    for (m, rs) in models.iter().zip(&mut replies) {
        let other = m.s.new_key(1.0);
        let r = m.ask();
        assert_eq!(r.header("x-switchyard-route"), Some("r1"), "r0 failed, r1 answered");
        rs.push(r);
        let r = m.ask_with(&other);
        assert_eq!(
            r.header("x-switchyard-route"),
            Some("r1"),
            "r0 failed again, for another key"
        );
    }
    // 1 s cooldown, failed check; 2 s, with a recheck 1 s in (the interval is at most the first
    // cooldown, SPEC §8b) and the end's check, both failed; 4 s, rechecked every second: at most
    // five checks within 5.5 s, at least three.
    let until = Instant::now() + Duration::from_millis(5_500);
    while Instant::now() < until {
        for (m, rs) in models.iter().zip(&mut replies) {
            let r = m.ask();
            assert_eq!(
                r.header("x-switchyard-route"),
                Some("r1"),
                "{}: a user request reached r0",
                m.routes[0].1
            );
            rs.push(r);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for (m, rs) in models.iter().zip(&replies) {
        let sc = &m.routes[0].1;
        let (users, checks, _) = m.seen(0);
        // The second key's request may find r0 already demoted by the first one's confirmation
        // check; either way no later user request reaches it.
        assert!(
            (1..=2).contains(&users),
            "{sc}: only the requests that demoted r0 reached it, saw {users}"
        );
        assert!(
            (3..=7).contains(&checks),
            "{sc}: checks at ~1, 2, 3, 4, 5 s (and a confirmation), saw {checks}"
        );
        let h = m.route_health(0);
        assert_ne!(h["state"], "healthy", "{sc}: {h}");
        assert_eq!(h["last_check"]["passed"], false, "{sc}: {h}");
        assert!(
            ["cooldown", "recheck"].contains(&h["last_check"]["kind"].as_str().unwrap()),
            "{sc}: {h}"
        );
        assert!(h["last_check"]["reason"].as_str().unwrap().contains(':'), "{sc}: {h}");
        assert!(
            h["breaker"]["cooldown_level"].as_u64().unwrap() >= 3,
            "{sc}: each failed check doubles: {h}"
        );
        // Rechecks go on meanwhile: compare the ledger with the mock's count when no check
        // happened between the two reads.
        let deadline = Instant::now() + Duration::from_secs(5);
        let (booked, checks) = loop {
            let booked = m.checks();
            let (_, checks, _) = m.seen(0);
            if booked.len() as u64 == checks || Instant::now() > deadline {
                break (booked, checks);
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(
            booked.len() as u64,
            checks,
            "{sc}: one platform ledger row per check: {booked:?}"
        );
        assert!(
            booked.iter().all(|c| c["route"] == "r0" && c["passed"] == 0),
            "{sc}: {booked:?}"
        );
        // A recheck the alarm runs late, past the cooldown's end, stands in for the end's check.
        let kinds = |k: &str| booked.iter().filter(|c| c["kind"] == k).count();
        assert!(
            kinds("cooldown") >= 1
                && kinds("recheck") >= 1
                && kinds("cooldown") + kinds("recheck") + kinds("confirm") == booked.len(),
            "{sc}: the ends' checks and the rechecks between them: {booked:?}"
        );
        let (charged, generations) = m.key_spend(rs);
        assert_eq!(charged, generations, "{sc}: the key paid for its own requests only");
    }
}

/// A route that heals passes its check, and only then does live traffic probe it — and win it back.
#[test]
fn a_route_that_heals_passes_its_check_then_is_probed_by_live_traffic() {
    // 503 for the first 2.5 s: the cooldown's check (at ~1 s) fails; the next cooldown, 2 s, has
    // a recheck at ~2 s (failed, or passed if it ran late, SPEC §8b), and its end's check at ~3 s
    // passes.
    let m = Model::new(&[("down-for/2500", json!({})), ("ok", json!({}))], 0);
    let mut replies = vec![m.ask()];
    assert_eq!(replies[0].header("x-switchyard-route"), Some("r1"));
    let deadline = Instant::now() + Duration::from_secs(12);
    let probed = loop {
        let passed_before = m.route_health(0)["last_check"]["passed"] == true;
        let r = m.ask();
        let route = r.header("x-switchyard-route").unwrap().to_string();
        replies.push(r);
        if route == "r0" {
            assert!(passed_before, "live traffic reached r0 before a check passed");
            break true;
        }
        assert!(Instant::now() < deadline, "r0 never came back");
        std::thread::sleep(Duration::from_millis(150));
    };
    assert!(probed);
    let (users, checks, _) = m.seen(0);
    assert_eq!(users, 2, "the demoting request and the live probe");
    // Failed checks, then one passed — or, on a machine loaded enough that the cooldown's
    // check runs after the outage's 2.5 s (CI once ran it 1.5 s late), that one check passing.
    assert!((1..=3).contains(&checks), "failed checks, then one passed: {checks}");
    let h = m.route_health_until(0, |h| h["state"] == "healthy");
    assert_eq!(h["state"], "healthy", "{h}");
    assert_eq!(h["last_check"]["passed"], true, "{h}");
    let booked = m.checks();
    assert_eq!(booked.len() as u64, checks, "{booked:?}");
    assert_eq!(booked[0]["passed"], 1, "newest first: {booked:?}");
    assert!(booked[1..].iter().all(|c| c["passed"] == 0), "{booked:?}");
    assert!(
        booked[0]["amount_micros"].as_i64().unwrap() > 0,
        "a real answer costs: {booked:?}"
    );
    let (charged, generations) = m.key_spend(&replies);
    assert_eq!(charged, generations, "the passed check's cost is the platform's");
    // The status surfaces say when r0 was last verified.
    let r0 = |e: &Value| {
        e["order"]
            .as_array()
            .and_then(|o| o.iter().find(|x| x["id"] == "r0").cloned())
    };
    let entry = report_entry(&m, 5, |e| r0(e).is_some_and(|r| !r["last_verified_ms"].is_null()));
    assert_eq!(
        r0(&entry).unwrap()["last_verified_ms"],
        h["last_check"]["at_ms"],
        "{entry}"
    );
}

/// SPEC §8b: a demoted route that recovers is rechecked while its cooldown runs, and the first
/// recheck that passes ends the cooldown: the next request probes it — once — and it is back in
/// place well before its 20 s cooldown would have ended. Every request is answered meanwhile; the
/// rechecks are on `/admin/checks` and the platform ledger, with their cost, not on the key.
#[test]
fn a_recovered_route_is_back_after_a_passed_recheck_long_before_its_cooldown_ends() {
    // 503 for its first 2.5 s; rechecked every 1.5 s: at ~1.5 s (failed), ~3 s (passed).
    let m = Model::with_policy(&[("down-for/2500", json!({})), ("ok", json!({}))], recheck_policy(1500));
    let demoted = Instant::now();
    let mut replies = vec![m.ask()];
    assert_eq!(
        replies[0].header("x-switchyard-route"),
        Some("r1"),
        "r0 failed and is demoted"
    );
    let (back, probed_ms) = loop {
        let r = m.ask();
        let answered_ms = epoch_ms();
        let route = r.header("x-switchyard-route").unwrap().to_string();
        replies.push(r);
        if route == "r0" {
            break (demoted.elapsed(), answered_ms);
        }
        assert!(
            demoted.elapsed() < Duration::from_secs(12),
            "r0 not back after 12 s: its recheck never passed"
        );
        std::thread::sleep(Duration::from_millis(150));
    };
    let (users, checks, most) = m.seen(0);
    assert_eq!(users, 2, "the demoting request and one live probe");
    assert!((1..=3).contains(&checks), "rechecks at ~1.5 s and ~3 s, saw {checks}");
    assert_eq!(most, 1);
    // Back in place: once the isolate's snapshot has caught up with the probe (a stale copy is
    // served while one refresh runs, SPEC §22 — within a second here), requests go to r0 first.
    let caught_up = Instant::now();
    loop {
        let r = m.ask();
        let on_r0 = r.header("x-switchyard-route") == Some("r0");
        replies.push(r);
        if on_r0 {
            break;
        }
        assert!(
            caught_up.elapsed() < Duration::from_secs(2),
            "r0 not served again after its probe"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    for _ in 0..3 {
        let r = m.ask();
        assert_eq!(r.header("x-switchyard-route"), Some("r0"));
        replies.push(r);
    }
    assert!(
        back < Duration::from_secs(12),
        "back after {back:?}, the cooldown is 20 s"
    );
    let h = m.route_health_until(0, |h| h["state"] == "healthy");
    assert_eq!(h["state"], "healthy", "{h}");
    assert_eq!(h["breaker"]["cooldown_level"], 0, "{h}");
    assert_eq!(
        (&h["last_check"]["kind"], &h["last_check"]["passed"]),
        (&json!("recheck"), &json!(true)),
        "{h}"
    );
    let booked = m.checks();
    assert_eq!(booked.len() as u64, checks, "one ledger row per recheck: {booked:?}");
    assert!(
        booked.iter().all(|c| c["route"] == "r0" && c["kind"] == "recheck"),
        "{booked:?}"
    );
    assert_eq!(booked[0]["passed"], 1, "newest first: {booked:?}");
    assert!(booked[1..].iter().all(|c| c["passed"] == 0), "{booked:?}");
    assert!(
        booked[0]["created_at"].as_i64().unwrap() <= probed_ms,
        "live traffic reached r0 (answered at {probed_ms}) before a recheck passed: {booked:?}"
    );
    assert!(
        booked[0]["amount_micros"].as_i64().unwrap() > 0,
        "a real answer costs the platform: {booked:?}"
    );
    let (charged, generations) = m.key_spend(&replies);
    assert_eq!(charged, generations, "the rechecks' cost is the platform's");
}

/// Now, as the ledger's `created_at` counts it (ms since the epoch, the same host's clock).
fn epoch_ms() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

/// SPEC §8b: a route that passes its checks but fails live traffic — it rejects the `temperature`
/// every request here carries, which the check does not send — flaps: each passed recheck ends its
/// cooldown, its one live probe fails, and the demotion that follows is a level up, so the rechecks
/// back off (1 s, 2 s, 4 s …) instead of hammering it. Every request is answered by r1.
#[test]
fn a_flapping_route_backs_off_its_rechecks() {
    let m = Model::with_policy(
        &[("reject-field/temperature/503", json!({})), ("ok", json!({}))],
        recheck_policy(1000),
    );
    let ask = || {
        let r = m.ask_body(&m.key, json!({"temperature": 0.5}));
        assert_eq!(
            r.header("x-switchyard-route"),
            Some("r1"),
            "every request answered by r1"
        );
        r
    };
    let mut replies = vec![ask()];
    // Rechecks at ~1 s, then ~2 s and ~4 s after each failed probe: four by ~16 s.
    let deadline = Instant::now() + Duration::from_secs(30);
    while m.seen(0).1 < 4 {
        assert!(
            Instant::now() < deadline,
            "fewer than four rechecks in 30 s: {:?}",
            m.seen(0)
        );
        replies.push(ask());
        std::thread::sleep(Duration::from_millis(150));
    }
    let (users, checks, most) = m.seen(0);
    assert_eq!(most, 1);
    // One live probe per passed recheck (the last one's may still be to come), after the first
    // request that demoted it.
    assert!(
        (checks..=checks + 1).contains(&users),
        "{users} requests reached r0 for {checks} passed rechecks"
    );
    // A check's booking is written after its answer reached the mock: wait for the last one.
    let booked_by = Instant::now() + Duration::from_secs(5);
    let mut booked = m.checks();
    while (booked.len() as u64) < checks && Instant::now() < booked_by {
        std::thread::sleep(Duration::from_millis(100));
        booked = m.checks();
    }
    booked.reverse(); // oldest first
    assert_eq!(booked.len() as u64, checks, "{booked:?}");
    assert!(
        booked.iter().all(|c| c["kind"] == "recheck" && c["passed"] == 1),
        "{booked:?}"
    );
    let at: Vec<i64> = booked.iter().map(|c| c["created_at"].as_i64().unwrap()).collect();
    let gaps: Vec<i64> = at.windows(2).map(|w| w[1] - w[0]).collect();
    // Each recheck comes a whole interval after the probe that failed after the previous one, and
    // the interval doubles: without the back-off they would be ~1 s apart.
    for (i, gap) in gaps.iter().enumerate() {
        assert!(
            *gap >= 2_000 << i,
            "recheck gaps {gaps:?} ms: the {i}th is under {} ms",
            2_000 << i
        );
    }
    let h = m.route_health_until(0, |h| h["breaker"]["cooldown_level"].as_u64() >= Some(3));
    assert!(
        h["breaker"]["cooldown_level"].as_u64().unwrap() >= 3,
        "each failed probe is a level up: {h}"
    );
    let (charged, generations) = m.key_spend(&replies);
    assert_eq!(charged, generations, "the rechecks' cost is the platform's");
}

/// A healthy route that nobody uses is checked once per `verify_idle_ms`, one check at a time
/// even when a check outlasts the interval; `verify: false` opts a route out.
#[test]
fn an_idle_route_is_checked_once_per_interval_never_twice_at_once() {
    // r1's answers take 2.5 s, longer than the 2 s interval.
    let m = Model::new(
        &[
            ("ok", json!({"verify": false})),
            ("first-content-after/2500", json!({})),
            ("ok", json!({"verify": false})),
        ],
        2000,
    );
    let start = Instant::now();
    m.ask(); // the model's object learns of the model; r1 and r2 never see a user
    std::thread::sleep(Duration::from_millis(10_000));
    let elapsed = start.elapsed().as_millis() as u64;
    let (users, checks, most) = m.seen(1);
    assert_eq!(users, 0);
    // A check every 2 s after the previous one ended (each takes 2.5 s): at ~2, ~6.5, ~11 s.
    assert!((2..=3).contains(&checks), "{checks} checks of r1 in {elapsed} ms");
    assert_eq!(most, 1, "two checks of r1 ran at once");
    assert_eq!(m.seen(0).1, 0, "r0 opted out");
    assert_eq!(m.seen(2).1, 0, "r2 opted out");
    let h = m.route_health(1);
    assert_eq!(h["last_check"]["kind"], "idle", "{h}");
    assert_eq!(h["last_check"]["passed"], true, "{h}");
    assert_eq!(h["state"], "healthy", "{h}");
}

/// A model whose only evidence is older than `verify_idle_ms` is not Operational until something
/// answers again (here its route opted out of checks, so nothing does). The public report is
/// cached for up to 3 s, so each word is awaited.
#[test]
fn old_evidence_is_not_operational() {
    // The evidence is old after 15 s; it reaches the public report within ≈ 7 s (its report from
    // the isolate's shard within 1.2 s, the report rebuilt every 3 s, the isolate's copy of it 3 s),
    // and the test allows a loaded machine 13 s.
    let m = Model::new(&[("ok", json!({"verify": false}))], 15_000);
    m.ask();
    let asked = Instant::now();
    assert_eq!(status_when(&m, "operational", 13), "operational");
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "too slow to see the fresh word"
    );
    assert_eq!(status_when(&m, "unverified", 25), "unverified");
    assert!(
        asked.elapsed() >= Duration::from_secs(15),
        "unverified before the evidence was old"
    );
    m.ask();
    assert_eq!(status_when(&m, "operational", 13), "operational");
}

/// The model's entry in `GET /api/health/models`, once `ready` holds (or after `secs`).
fn report_entry(m: &Model, secs: u64, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let r =
            m.s.request("GET", &format!("{}/api/health/models", m.s.gateway), &[], None);
        assert_eq!(r.status, 200, "{}", r.text());
        let report = r.json();
        let entry = report["models"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["id"] == m.id.as_str())
            .cloned();
        let entry = entry.unwrap_or(Value::Null);
        if ready(&entry) || Instant::now() >= deadline {
            return entry;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The model's status word once it is `want` (or whatever it is after `secs`).
fn status_when(m: &Model, want: &str, secs: u64) -> String {
    report_entry(m, secs, |e| e["status"] == want)["status"]
        .as_str()
        .unwrap_or("")
        .to_string()
}
