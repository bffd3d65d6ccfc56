//! Route health (issue 4, SPEC §8, §9, §14) end to end, with cooldowns shrunk through `policy`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use switchyard_e2e::{chat_body, route, unique, Stack};

/// Small cooldowns: 1.5 s doubling to 6 s.
fn policy() -> Value {
    json!({"cooldown_ms": 1500, "cooldown_max_ms": 6000, "stream_first_content_ms": 500, "nonstream_base_ms": 500,
           "nonstream_per_20_tokens_ms": 0, "last_route_min_ms": 1000})
}

struct Model {
    s: Arc<Stack>,
    id: String,
    key: String,
    routes: Vec<(String, String)>,
}

impl Model {
    /// Routes over mock scenarios; each provider on its own account unless `accounts` names one.
    /// These are the live probes of §8 alone: the routes opt out of verification checks (SPEC §8a,
    /// tests/tests/verify.rs).
    fn new(scenarios: &[&str]) -> Model {
        Model::with_policy(scenarios, policy())
    }

    /// [`Model::new`] with its own policy.
    fn with_policy(scenarios: &[&str], policy: Value) -> Model {
        let s = Arc::new(Stack::from_env());
        let routes: Vec<(&str, Value)> = scenarios.iter().map(|sc| (*sc, json!({"verify": false}))).collect();
        let (objects, routes) = s.mock_routes(&routes);
        let id = s.model(objects, Some(policy));
        let key = s.new_key(10.0);
        Model { s, id, key, routes }
    }

    fn seen(&self, i: usize) -> u64 {
        let (label, scenario) = &self.routes[i];
        self.s.mock_stats(label, scenario)["requests"].as_u64().unwrap()
    }

    fn ask(&self) -> u16 {
        self.s.chat(&self.key, &chat_body(&self.id, false)).status
    }

    fn admin_health(&self) -> Value {
        let r = self.s.admin("GET", &format!("/admin/health/{}", self.id), None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    fn route_health(&self, i: usize) -> Value {
        self.admin_health()["routes"][i].clone()
    }

    /// Route `i`'s health once its state is one of `want` (or after 5 s): a request's health
    /// report reaches the model's object just after its answer (through the isolate's shard:
    /// within 100 ms for a failure or probe, 1 s for a success), so a read at once may come first.
    fn route_health_when(&self, i: usize, want: &[&str]) -> Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let h = self.route_health(i);
            if want.contains(&h["state"].as_str().unwrap_or("")) || std::time::Instant::now() > deadline {
                return h;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

#[test]
fn a_route_failing_three_times_moves_to_the_end() {
    let m = Model::new(&["status/503", "ok"]);
    for n in 1..=3 {
        assert_eq!(m.ask(), 200);
        assert_eq!(
            m.seen(0),
            n,
            "the failing route is still tried while it has failed fewer than 3 times"
        );
    }
    assert_eq!(m.ask(), 200);
    assert_eq!(m.seen(0), 3, "the 4th request goes straight to the second route");
    assert_eq!(m.seen(1), 4);
    // Demoted: cooling, or already past its 1.5 s cooldown when a loaded machine reads it.
    let h = m.route_health_when(0, &["cooling", "probe_due"]);
    assert!(
        ["cooling", "probe_due"].contains(&h["state"].as_str().unwrap_or("")),
        "{h}"
    );
    assert_eq!(h["breaker"]["cooldown_level"], 1, "{h}");
    assert_eq!(h["breaker"]["consecutive_failures"], 3);
}

#[test]
fn an_overloaded_route_is_demoted_after_one_failure() {
    let m = Model::new(&["status/503/overloaded", "ok"]);
    assert_eq!(m.ask(), 200);
    assert_eq!(m.ask(), 200);
    assert_eq!((m.seen(0), m.seen(1)), (1, 2));
}

#[test]
fn the_probe_after_the_cooldown_is_exactly_one_request_and_a_failed_probe_doubles_the_cooldown() {
    let m = Model::new(&["status/503", "ok"]);
    for _ in 0..3 {
        m.ask();
    }
    let first = m.route_health_when(0, &["cooling", "probe_due"])["breaker"].clone();
    let first_cooldown = first["demoted_until_ms"].as_u64().unwrap() - first["demoted_at_ms"].as_u64().unwrap();
    assert_eq!(first_cooldown, 1500);
    std::thread::sleep(Duration::from_millis(1700));
    let threads: Vec<_> = (0..10)
        .map(|_| {
            let (s, key, id) = (m.s.clone(), m.key.clone(), m.id.clone());
            std::thread::spawn(move || s.chat(&key, &chat_body(&id, false)).status)
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    assert_eq!(m.seen(0), 4, "exactly one probe for ten requests arriving together");
    let again = m.route_health_when(0, &["cooling"])["breaker"].clone();
    let cooldown = again["demoted_until_ms"].as_u64().unwrap() - again["demoted_at_ms"].as_u64().unwrap();
    assert_eq!(cooldown, 3000, "a failed probe doubles the cooldown: {again}");
}

#[test]
fn a_route_that_recovers_takes_its_traffic_back() {
    // Down for 4 s from its first request: long enough that a loaded machine's first three
    // requests all fail (a third one answered would leave the route undemoted).
    let m = Model::new(&["down-for/4000", "ok"]);
    // The mock counts its 4 s from the first request it sees, which a loaded machine may deliver
    // well after the test sends it: count from that request's answer, which comes after.
    assert_eq!(m.ask(), 200);
    let started = std::time::Instant::now();
    for _ in 1..3 {
        assert_eq!(m.ask(), 200);
    }
    assert_eq!(m.seen(0), 3);
    assert_eq!(m.ask(), 200);
    assert_eq!(m.seen(0), 3, "demoted while down");
    // Past both the route's 4 s down and its 1.5 s cooldown: the next request probes it.
    std::thread::sleep(
        Duration::from_millis(4_300)
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1_800)),
    );
    let r = m.s.chat(&m.key, &chat_body(&m.id, false));
    assert_eq!(r.status, 200);
    let g = m.s.generation(&m.key, r.header("x-generation-id").unwrap());
    assert_eq!(
        g["route"],
        "r0",
        "the probe succeeded: the route is back in its place (r0 saw {} requests)",
        m.seen(0)
    );
    let r = m.s.chat(&m.key, &chat_body(&m.id, false));
    assert_eq!(
        m.s.generation(&m.key, r.header("x-generation-id").unwrap())["route"],
        "r0"
    );
    assert_eq!(m.route_health_when(0, &["healthy"])["state"], "healthy");
}

#[test]
fn an_account_failure_sends_another_model_on_that_account_elsewhere() {
    let s = Arc::new(Stack::from_env());
    let account = unique("acct");
    let provider = |label: &str, scenario: &str| s.provider_on_account(label, scenario, &account);
    // A cooldown long enough to still be running when it is read, however loaded the machine.
    let slow_cooldown = switchyard_e2e::with(policy(), json!({"cooldown_ms": 30000, "cooldown_max_ms": 60000}));
    let (broken_label, shared_label, other_label) = (unique("l"), unique("l"), unique("l"));
    let broken = provider(&broken_label, "status/401/invalid_key");
    let shared = provider(&shared_label, "ok");
    let other = s.mock_provider(&other_label, "ok", false);
    let m1 = s.model(
        vec![
            route("r0", &broken, "u", json!({})),
            route("r1", &other, "u", json!({})),
        ],
        Some(slow_cooldown.clone()),
    );
    let m2 = s.model(
        vec![
            route("r0", &shared, "u", json!({})),
            route("r1", &other, "u", json!({})),
        ],
        Some(slow_cooldown.clone()),
    );
    let key = s.new_key(10.0);
    assert_eq!(
        s.chat(&key, &chat_body(&m1, false)).status,
        200,
        "m1 falls back past its account failure"
    );
    let r = s.chat(&key, &chat_body(&m2, false));
    assert_eq!(r.status, 200);
    assert_eq!(
        s.mock_stats(&shared_label, "ok")["requests"],
        0,
        "m2 skips the route on the failed account"
    );
    assert_eq!(s.generation(&key, r.header("x-generation-id").unwrap())["route"], "r1");
    // The account's object hears of it from m1's object (through m1's shard, within 100 ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let h = loop {
        let h = s.admin("GET", &format!("/admin/health/{m1}"), None).json();
        if h["routes"][0]["account_state"] == "cooling" || std::time::Instant::now() > deadline {
            break h;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        h["routes"][0]["breaker"]["consecutive_failures"], 0,
        "not counted against the model's route"
    );
    assert_eq!(h["routes"][0]["account_state"], "cooling", "{h}");
}

fn api_model(s: &Stack, id: &str) -> Value {
    let v = s
        .request("GET", &format!("{}/api/health/models", s.gateway), &[], None)
        .json();
    v["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("{id} missing: {v}"))
}

/// The model's entry once `ready` holds (the report is cached per isolate for a few seconds, SPEC
/// §15), or the last one seen after 6 s.
fn api_model_when(s: &Stack, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    loop {
        let m = api_model(s, id);
        if ready(&m) || std::time::Instant::now() > deadline {
            return m;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn status_words_follow_the_last_hour_of_real_requests() {
    let quiet = Model::new(&["ok"]);
    assert_eq!(api_model(&quiet.s, &quiet.id)["status"], "no_recent_requests");

    let good = Model::new(&["ok"]);
    for _ in 0..20 {
        assert_eq!(good.ask(), 200);
    }
    let degraded = Model::new(&["flaky/10"]); // one in ten fails: 90 % answered
    for _ in 0..20 {
        degraded.ask();
    }
    let down = Model::new(&["status/500"]);
    for _ in 0..4 {
        assert_eq!(down.ask(), 502);
    }
    let few = Model::new(&["status/500", "ok"]); // a later route answered: counted as answered
    for _ in 0..5 {
        assert_eq!(few.ask(), 200);
    }
    std::thread::sleep(Duration::from_millis(500));
    let word = |m: &Model, w: &str| api_model_when(&m.s, &m.id, |v| v["status"] == w)["status"].clone();
    assert_eq!(word(&good, "operational"), "operational");
    assert_eq!(word(&degraded, "degraded"), "degraded");
    assert_eq!(word(&down, "down"), "down");
    assert_eq!(word(&few, "operational"), "operational");
    let d = api_model(&down.s, &down.id);
    assert_eq!((d["healthy_routes"].as_u64(), d["routes"].as_u64()), (Some(0), Some(1)));
}

#[test]
fn the_api_and_the_status_page_agree() {
    // A cooldown that outlasts the test however loaded the machine: the page must show it.
    let slow_cooldown = switchyard_e2e::with(policy(), json!({"cooldown_ms": 60000, "cooldown_max_ms": 60000}));
    let m = Model::with_policy(&["status/503/overloaded", "ok"], slow_cooldown);
    m.ask();
    let ours = api_model_when(&m.s, &m.id, |v| v["order"][0]["id"] == "r1");
    assert_eq!(ours["order"][0]["id"], "r1", "the demoted route is listed last");
    assert_eq!(ours["order"][1]["state"], "cooling");
    // The page's report may be one built a moment before the API's (each isolate rebuilds it
    // every 3 s, and a build in flight serves the last one): it shows the demotion soon after.
    let deadline = std::time::Instant::now() + Duration::from_secs(6);
    let section = loop {
        let page = m.s.request("GET", &format!("{}/status", m.s.gateway), &[], None).text();
        let section = page
            .split("<section>")
            .find(|s| s.contains(&format!("<span>{}</span>", m.id)))
            .unwrap()
            .to_string();
        if section.contains("demoted until") || std::time::Instant::now() > deadline {
            break section;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(section.contains("demoted until"), "{section}");
    // Other tests change health concurrently: compare a page with an API answer taken on both
    // sides of it that did not change in between.
    let api_now = || {
        let r =
            m.s.request("GET", &format!("{}/api/health/models", m.s.gateway), &[], None);
        assert_eq!(r.status, 200);
        let mut v = r.json();
        v.as_object_mut().unwrap().remove("generated_at_ms");
        v
    };
    let (v, html) = (0..20)
        .find_map(|_| {
            let before = api_now();
            let page = m.s.request("GET", &format!("{}/status", m.s.gateway), &[], None);
            assert_eq!(page.status, 200);
            assert!(page.header("content-type").unwrap().starts_with("text/html"));
            (api_now() == before).then(|| (before, page.text()))
        })
        .expect("health kept changing");
    assert!(v["total"].as_u64().unwrap() >= 1);
    for model in v["models"].as_array().unwrap() {
        let id = model["id"].as_str().unwrap();
        let section = html
            .split("<section>")
            .find(|s| s.contains(&format!("<span>{id}</span>")))
            .unwrap_or_else(|| panic!("{id} not on /status"));
        assert!(section.contains(model["label"].as_str().unwrap()), "{id}: {section}");
        assert!(
            section.contains(&format!(
                "{} / {} routes healthy",
                model["healthy_routes"], model["routes"]
            )),
            "{section}"
        );
    }
}

#[test]
fn admin_reset_restores_every_route() {
    // A cooldown long enough to still be running when it is read, however loaded the machine
    // (CI once read 1.5 s of it already over): only the reset may bring the route back.
    let m = Model::with_policy(
        &["status/503/overloaded", "ok"],
        switchyard_e2e::with(policy(), json!({"cooldown_ms": 30000, "cooldown_max_ms": 60000})),
    );
    m.ask();
    assert_eq!(m.route_health_when(0, &["cooling"])["state"], "cooling");
    let r = m.s.admin("POST", &format!("/admin/health/{}/reset", m.id), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(m.route_health(0)["state"], "healthy");
    m.ask();
    assert_eq!(m.seen(0), 2, "tried again in its place after the reset");
}

/// The history (issue 26): the requests of an outage over an hour ago show in that hour's bar — on
/// the API and the page — while the present word reads the last hour only. The requests fail now,
/// at the mock; the history drill (`x-switchyard-test-fault: past-<ms>`) has route health learn of
/// them as of the middle of an hour that ended over ten minutes before the last hour began,
/// through the same report every request makes.
#[test]
fn an_outage_an_hour_ago_shows_in_that_hours_bar() {
    const HOUR: u64 = 3_600_000;
    let m = Model::new(&["status/503"]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let hour = (now - 100 * 60_000) / HOUR * HOUR;
    let ago = now - (hour + HOUR / 2); // 70 to 130 minutes
    let drill = format!("past-{ago}");
    for _ in 0..3 {
        let r = m.s.request(
            "POST",
            &format!("{}/v1/chat/completions", m.s.gateway),
            &[
                ("authorization", &format!("Bearer {}", m.key)),
                ("content-type", "application/json"),
                ("x-switchyard-test-fault", &drill),
            ],
            Some(chat_body(&m.id, false).to_string().as_bytes()),
        );
        assert!(r.status >= 500, "{} {}", r.status, r.text());
    }
    let bar = |v: &Value| {
        v["history"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h["start_ms"] == hour)
            .cloned()
            .unwrap_or(Value::Null)
    };
    let v = api_model_when(&m.s, &m.id, |v| bar(v)["status"] == "down");
    assert_eq!(
        bar(&v),
        json!({"start_ms": hour, "answered": 0, "unanswered": 3, "status": "down", "label": "Down"}),
        "{v}"
    );
    let history = v["history"].as_array().unwrap();
    assert_eq!(history.len(), 24);
    let at = history.iter().position(|h| h["start_ms"] == hour);
    assert!(
        matches!(at, Some(21 | 22)),
        "one or two bars before the current hour: {v}"
    );
    assert_eq!(history[23]["status"], "no_recent_requests", "nothing this hour: {v}");
    assert_eq!(
        v["status"], "no_recent_requests",
        "the present reads the last hour only"
    );
    assert_eq!(v["order"][0]["chart"].as_array().map(Vec::len), Some(12));
    // The page says the same, as text in that hour's bar.
    let page = m.s.request("GET", &format!("{}/status", m.s.gateway), &[], None).text();
    let section = page
        .split("<section>")
        .find(|s| s.contains(&format!("<span>{}</span>", m.id)))
        .unwrap();
    let secs = hour / 1000;
    let label = format!("{:02}:00 UTC: Down, 0 of 3 answered", (secs / 3600) % 24);
    assert!(
        section.contains(&format!(
            "<span class=\"bar down\" role=\"listitem\" title=\"{label}\">"
        )),
        "{section}"
    );
    assert!(section.contains("<svg role=\"img\""), "{section}");
}

/// A burst of status hits builds the report once per isolate (issue 23, item 13): while one request
/// rebuilds an expired report (made slow by the drill `slow-report-<ms>`), the others are served
/// the last one at once — none of them builds its own or waits for the build. A stale report is
/// only served for the catalog it was built from, so the rule is checked in a round during which
/// no other test changed the catalog.
#[test]
fn a_burst_of_status_hits_rebuilds_the_report_once() {
    let s = Arc::new(Stack::from_env());
    let url = format!("{}/api/health/models", s.gateway);
    let generated = move |s: &Stack, fault: Option<&str>| {
        let headers: Vec<(&str, &str)> = fault.map(|f| ("x-switchyard-test-fault", f)).into_iter().collect();
        let started = std::time::Instant::now();
        let r = s.request("GET", &url, &headers, None);
        assert_eq!(r.status, 200);
        (r.json()["generated_at_ms"].as_u64().unwrap(), started.elapsed())
    };
    let version = |s: &Stack| {
        s.admin("GET", "/admin/catalog", None).json()["version"]
            .as_i64()
            .unwrap()
    };
    for _ in 0..8 {
        // The isolate's catalog (reloaded every 5 s) is the stored one once that has held 5 s.
        let before = version(&s);
        std::thread::sleep(Duration::from_millis(5500));
        let (warm, _) = generated(&s, None);
        std::thread::sleep(Duration::from_millis(3300)); // past the report's 3 s
        let slow = {
            let (s, generated) = (s.clone(), generated.clone());
            std::thread::spawn(move || generated(&s, Some("slow-report-2500")))
        };
        std::thread::sleep(Duration::from_millis(400));
        let burst: Vec<(u64, Duration)> = (0..12)
            .map(|_| {
                let (s, generated) = (s.clone(), generated.clone());
                std::thread::spawn(move || generated(&s, None))
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let (rebuilt, took) = slow.join().unwrap();
        if version(&s) != before {
            continue; // another test changed the catalog: a build of its own was right
        }
        assert!(
            took >= Duration::from_millis(2500) && rebuilt > warm,
            "the drill's build: {rebuilt} in {took:?}"
        );
        for (at, took) in &burst {
            assert!(
                *at < rebuilt,
                "a hit during the rebuild built its own report ({at}, the rebuild began at {rebuilt}): {burst:?}"
            );
            assert!(
                *took < Duration::from_millis(1500),
                "a hit waited for the rebuild: {burst:?}"
            );
        }
        return;
    }
    panic!("the catalog never stayed unchanged for a round of 12 s");
}
