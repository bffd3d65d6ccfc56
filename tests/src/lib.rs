//! The end-to-end harness: talks to the real Worker under `wrangler dev` and to the mock upstream,
//! both started by `scripts/test`, which passes their addresses in the environment:
//! `SWITCHYARD_URL`, `MOCK_URL`, `ADMIN_TOKEN`, `E2E_UPSTREAM_KEY_NAME` / `E2E_UPSTREAM_KEY`.
//!
//! Tests run concurrently against one Worker, so each one uses its own provider, model and mock
//! label ([`unique`]) and adds them with the single-entry admin endpoints, never by replacing the
//! whole catalog.

// This crate is test code, run natively: panics are how a test fails, and real clocks are fine.
#![allow(clippy::panic, clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{json, Value};

/// Addresses and secrets of the running stack.
#[derive(Clone)]
pub struct Stack {
    pub gateway: String,
    pub mock: String,
    pub admin_token: String,
    pub upstream_key_name: String,
    pub upstream_key: String,
    /// A `Host` header for every request (which replica of [`Stack::replicas`] answers).
    pub host: Option<String>,
    agent: ureq::Agent,
}

/// A response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run the end-to-end suite with scripts/test"))
}

/// How many answers so far came from `wrangler dev`'s proxy rather than the Worker (see
/// [`wrangler_restart`]). Tests that count money read it: such a request may still have been
/// served and charged by the Worker.
pub static WRANGLER_RESTARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether an answer is `wrangler dev`'s "Your worker restarted mid-request" 503: its dev proxy
/// lost the connection to the Worker (seen under storms of client disconnects), so the answer is
/// not the Worker's (no `x-request-id`). Counted in [`WRANGLER_RESTARTS`] and logged.
pub fn wrangler_restart(status: u16, has_request_id: bool, body: &[u8]) -> bool {
    let lost = is_wrangler_restart(status, has_request_id, body);
    if lost {
        WRANGLER_RESTARTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        note("wrangler dev's proxy lost a request (503 \"Your worker restarted mid-request\"); sent again");
    }
    lost
}

/// Whether a request failed because its connection was reset or closed before any answer.
fn connection_lost(e: &ureq::Error) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    text.contains("connection reset") || text.contains("peer disconnected") || text.contains("broken pipe")
}

/// A line for the end of the run: scripts/test prints these after every suite (cargo hides a
/// passing test's output) — what happened that passed anyway, and figures the docs keep.
pub fn note(line: &str) {
    eprintln!("note: {line}");
    if let Ok(path) = std::env::var("E2E_NOTES") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// A name no other test (or earlier run) uses.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{nanos:x}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A route object for [`Stack::model`]: id `r<index>` is set by the caller's order.
pub fn route(id: &str, provider: &str, upstream: &str, extra: Value) -> Value {
    let mut r = json!({"id": id, "provider": provider, "upstream_model": upstream, "apis": ["chat"],
                       "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}});
    if let (Some(obj), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            obj.insert(k.clone(), v.clone());
        }
    }
    r
}

/// A chat request body for `model`.
pub fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "Say hello"}]})
}

/// The three client APIs, for tests that drive each the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Chat,
    Messages,
    Responses,
    /// Gemini names the model and the mode in the path: its [`Api::body`] carries `model` and
    /// `stream` for [`Stack::send`] to move there.
    Gemini,
}

pub const APIS: [Api; 4] = [Api::Chat, Api::Messages, Api::Responses, Api::Gemini];

impl Api {
    /// The name in the catalog's `apis` and in `/v1/generation`.
    pub fn name(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Responses => "responses",
            Api::Gemini => "gemini",
        }
    }

    /// The path of a non-stream request for model `m` (the model only matters to Gemini).
    pub fn path(self) -> String {
        self.path_for("m", false)
    }

    /// The path of a request for `model`, stream or not.
    pub fn path_for(self, model: &str, stream: bool) -> String {
        match self {
            Api::Chat => "/v1/chat/completions".into(),
            Api::Messages => "/v1/messages".into(),
            Api::Responses => "/v1/responses".into(),
            Api::Gemini if stream => format!("/v1beta/models/{model}:streamGenerateContent?alt=sse"),
            Api::Gemini => format!("/v1beta/models/{model}:generateContent"),
        }
    }

    /// The path and the body as sent: Gemini's `model` and `stream` move from the body to the path.
    pub fn request(self, body: &Value) -> (String, Value) {
        if self != Api::Gemini {
            return (self.path_for("", false), body.clone());
        }
        let mut body = body.clone();
        let obj = body.as_object_mut().expect("a JSON object body");
        let model = obj
            .remove("model")
            .and_then(|m| m.as_str().map(str::to_string))
            .unwrap_or_default();
        let stream = obj.remove("stream").and_then(|s| s.as_bool()).unwrap_or(false);
        (self.path_for(&model, stream), body)
    }

    /// A minimal request for `model` in this API.
    pub fn body(self, model: &str, stream: bool) -> Value {
        match self {
            Api::Chat => chat_body(model, stream),
            Api::Messages => json!({"model": model, "stream": stream, "max_tokens": 256,
                                    "messages": [{"role": "user", "content": "Say hello"}]}),
            Api::Responses => json!({"model": model, "stream": stream, "input": "Say hello"}),
            Api::Gemini => json!({"model": model, "stream": stream,
                                  "contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}),
        }
    }

    /// How its SDK sends the key: `x-api-key` for Anthropic, a bearer token otherwise.
    pub fn auth_header(self, key: &str) -> (&'static str, String) {
        match self {
            Api::Messages => ("x-api-key", key.to_string()),
            Api::Gemini => ("x-goog-api-key", key.to_string()),
            Api::Chat | Api::Responses => ("authorization", format!("Bearer {key}")),
        }
    }

    /// How its providers take their key (the catalog's `auth`).
    pub fn provider_auth(self) -> &'static str {
        match self {
            Api::Messages => "x-api-key",
            Api::Gemini => "x-goog-api-key",
            Api::Chat | Api::Responses => "bearer",
        }
    }
}

/// The events of an SSE body as (event name, data), comments skipped.
pub fn sse_events(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter_map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event:") {
                    name = Some(n.trim().to_string());
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push(d.strip_prefix(' ').unwrap_or(d));
                }
            }
            (!data.is_empty()).then(|| (name, data.join("\n")))
        })
        .collect()
}

/// Deadlines small enough for tests: 400 ms first content, 1.5 s for the last route, 700 ms idle.
pub fn fast_policy() -> Value {
    json!({"stream_first_content_ms": 400, "reasoning_stream_first_content_ms": 400,
           "slow_route_stream_first_content_ms": 400, "nonstream_base_ms": 400,
           "nonstream_per_20_tokens_ms": 0, "last_route_min_ms": 1500, "idle_timeout_ms": 700})
}

/// `base` with `extra`'s fields set.
pub fn with(mut base: Value, extra: Value) -> Value {
    if let Some(extra) = extra.as_object() {
        for (k, v) in extra {
            base[k] = v.clone();
        }
    }
    base
}

/// A model of one API whose routes are mock scenarios, each on its own label and provider (which
/// sends the e2e upstream key), and a key with $10 — what most end-to-end tests start from.
pub struct Fixture {
    pub s: Stack,
    pub api: Api,
    pub model: String,
    pub key: String,
    /// Each route's mock (label, scenario), `r<i>` in order.
    pub routes: Vec<(String, String)>,
}

impl Fixture {
    /// A chat model with [`fast_policy`].
    pub fn new(scenarios: &[&str]) -> Fixture {
        Fixture::build(Api::Chat, scenarios, &[], fast_policy(), false)
    }

    /// A model of `api`: route `i` gets `extra[i]`'s fields; the model `policy` and `reasoning`.
    pub fn build(api: Api, scenarios: &[&str], extra: &[Value], policy: Value, reasoning: bool) -> Fixture {
        let s = Stack::from_env();
        let mut routes = Vec::new();
        let mut objects = Vec::new();
        for (i, scenario) in scenarios.iter().enumerate() {
            let label = unique("l");
            let provider = s.mock_provider_with_auth(&label, scenario, true, api.provider_auth());
            let fields = with(
                json!({"apis": [api.name()]}),
                extra.get(i).cloned().unwrap_or(json!({})),
            );
            objects.push(route(&format!("r{i}"), &provider, &format!("up{i}"), fields));
            routes.push((label, scenario.to_string()));
        }
        let model = unique("m");
        let doc = json!({"context_window": 8192, "max_output_tokens": 1024, "reasoning": reasoning,
                         "routes": objects, "policy": policy});
        let r = s.admin("PUT", &format!("/admin/models/{model}"), Some(doc));
        assert_eq!(r.status, 200, "adding model: {}", r.text());
        let key = s.new_key(10.0);
        Fixture {
            s,
            api,
            model,
            key,
            routes,
        }
    }

    /// The API's minimal request.
    pub fn send(&self, stream: bool) -> Reply {
        self.send_with(json!({"stream": stream}))
    }

    /// The API's minimal non-stream request with `fields` set.
    pub fn send_with(&self, fields: Value) -> Reply {
        let body = with(self.api.body(&self.model, false), fields);
        self.s.send(self.api, &self.key, &body, &[])
    }

    /// How many requests route `i`'s upstream saw from clients: the model's own checks (a
    /// failure one key could provoke is confirmed by one, SPEC §18a, which may reach the upstream
    /// before this is read) are not counted.
    pub fn seen(&self, i: usize) -> u64 {
        let (label, scenario) = &self.routes[i];
        let st = self.s.mock_stats(label, scenario);
        let checks = st["by_prompt"][CHECK_PROMPT].as_u64().unwrap_or(0);
        st["requests"].as_u64().unwrap() - checks
    }

    /// The request's record (`GET /v1/generation`).
    pub fn generation(&self, r: &Reply) -> Value {
        self.s
            .generation(&self.key, r.header("x-generation-id").expect("x-generation-id"))
    }

    /// The attempts log as (route, failure class or outcome).
    pub fn attempts(&self, r: &Reply) -> Vec<(String, String)> {
        attempts_of(&self.generation(r))
    }
}

/// A record's attempts as (route, failure class or outcome).
pub fn attempts_of(g: &Value) -> Vec<(String, String)> {
    g["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let class = a["failure_class"].as_str().or(a["outcome"].as_str()).unwrap();
            (a["route"].as_str().unwrap().to_string(), class.to_string())
        })
        .collect()
}

/// Owned pairs, for comparing with an attempts log.
pub fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

impl Stack {
    pub fn from_env() -> Stack {
        // A pooled connection is not reused once idle for 1 s: the servers in front of the Worker
        // close idle ones after a few seconds, and a request sent on one as it closes is lost
        // ("connection reset", "peer disconnected") — not something Switchyard did.
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .max_idle_age(Duration::from_secs(1))
            .build();
        Stack {
            gateway: env("SWITCHYARD_URL"),
            mock: env("MOCK_URL"),
            admin_token: env("ADMIN_TOKEN"),
            upstream_key_name: env("E2E_UPSTREAM_KEY_NAME"),
            upstream_key: env("E2E_UPSTREAM_KEY"),
            agent: ureq::Agent::new_with_config(config),
            host: None,
        }
    }

    /// The first two replicas of the Worker that `tests/replicas.mjs` runs (`REPLICAS_URL`): two
    /// isolates sharing their Durable Objects and D1.
    pub fn replicas() -> [Stack; 2] {
        [Stack::replica(0), Stack::replica(1)]
    }

    /// Replica `i` of the Worker that `tests/replicas.mjs` runs (`scripts/test` starts 16): replica
    /// 0 is reached at `REPLICAS_URL`, replica `i` there with `Host: replica-<i>.test`.
    pub fn replica(i: usize) -> Stack {
        Stack {
            gateway: env("REPLICAS_URL"),
            host: (i > 0).then(|| format!("replica-{i}.test")),
            ..Stack::from_env()
        }
    }

    /// Any request: `headers` as (name, value), `body` sent as is when present. A request that
    /// `wrangler dev`'s own proxy lost (see [`wrangler_restart`]) is sent again, up to twice; so
    /// is an idempotent one (not a POST) whose connection the local servers reset before any
    /// answer (CI saw `GET /v1/credits` and `PUT /admin/catalog` lost so, on a loaded machine).
    pub fn request(&self, method: &str, url: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Reply {
        let mut tries = 0;
        loop {
            tries += 1;
            let reply = match self.request_once(method, url, headers, body) {
                Ok(reply) => reply,
                Err(e) if method != "POST" && tries <= 2 && connection_lost(&e) => {
                    note(&format!(
                        "a {method} request's connection was reset before any answer; sent again"
                    ));
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    continue;
                }
                Err(e) => panic!("{method} {url} failed: {e}"),
            };
            if tries <= 2 && wrangler_restart(reply.status, reply.header("x-request-id").is_some(), &reply.body) {
                std::thread::sleep(std::time::Duration::from_millis(300));
                continue;
            }
            return reply;
        }
    }

    /// One request; `Err` when no answer came (the transport failed).
    fn request_once(
        &self,
        method: &str,
        url: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<Reply, ureq::Error> {
        let mut builder = ureq::http::Request::builder().method(method).uri(url);
        if let Some(host) = &self.host {
            builder = builder.header("host", host.as_str());
        }
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let result = match body {
            Some(b) => builder.body(b.to_vec()).map(|req| self.agent.run(req)),
            None => builder.body(()).map(|req| self.agent.run(req)),
        };
        let mut response = match result {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Err(e),
            Err(e) => panic!("bad request {method} {url}: {e}"),
        };
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = response
            .body_mut()
            .with_config()
            .limit(64 * 1024 * 1024)
            .read_to_vec()
            .unwrap_or_else(|e| panic!("{method} {url}: reading the body failed: {e}"));
        Ok(Reply { status, headers, body })
    }

    /// A chat request whose client gives up after `give_up_ms`; true if it got no answer by then.
    pub fn chat_abandoned(&self, key: &str, body: &Value, give_up_ms: u64) -> bool {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_millis(give_up_ms)))
            .build();
        let agent = ureq::Agent::new_with_config(config);
        let result = agent
            .post(format!("{}/v1/chat/completions", self.gateway))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .send(body.to_string())
            .and_then(|mut r| r.body_mut().read_to_vec());
        result.is_err()
    }

    /// A streaming chat request whose client reads until `marker` appears, then disconnects.
    /// Returns the generation id and what it read.
    pub fn chat_stream_then_leave(&self, key: &str, body: &Value, marker: &str) -> (String, String) {
        let (generation, status, text) = self.chat_stream_maybe_leave(key, body, marker);
        assert_eq!(status, 200, "{text}");
        (generation, text)
    }

    /// Like [`Stack::chat_stream_then_leave`], for requests that may also fail before commit:
    /// returns the generation id, the status, and what was read (the error body if not 200).
    pub fn chat_stream_maybe_leave(&self, key: &str, body: &Value, marker: &str) -> (String, u16, String) {
        for _ in 0..2 {
            if let Some(done) = self.chat_stream_maybe_leave_once(key, body, marker) {
                return done;
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        self.chat_stream_maybe_leave_once(key, body, marker)
            .expect("wrangler dev's proxy lost the request three times")
    }

    /// One try of [`Stack::chat_stream_maybe_leave`]; `None` when `wrangler dev`'s proxy lost it.
    fn chat_stream_maybe_leave_once(&self, key: &str, body: &Value, marker: &str) -> Option<(String, u16, String)> {
        use std::io::Read;
        let config = ureq::Agent::config_builder().http_status_as_error(false).build();
        let agent = ureq::Agent::new_with_config(config);
        let response = agent
            .post(format!("{}/v1/chat/completions", self.gateway))
            .header("authorization", format!("Bearer {key}"))
            .header("content-type", "application/json")
            .send(body.to_string())
            .expect("stream request");
        let status = response.status().as_u16();
        let generation = response
            .headers()
            .get("x-generation-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let Some(generation) = generation else {
            let mut response = response;
            let text = response.body_mut().read_to_string().unwrap_or_default();
            if wrangler_restart(status, false, text.as_bytes()) {
                return None;
            }
            panic!("no x-generation-id on a {status} answer: {text}");
        };
        if status != 200 {
            let mut response = response;
            let text = response.body_mut().read_to_string().unwrap_or_default();
            return Some((generation, status, text));
        }
        let mut reader = response.into_body().into_reader();
        let mut seen = Vec::new();
        let mut buf = [0u8; 256];
        while !String::from_utf8_lossy(&seen).contains(marker) {
            let n = reader.read(&mut buf).expect("reading the stream");
            assert!(
                n > 0,
                "stream ended before {marker:?}: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
        }
        drop(reader); // closes the connection mid-stream
        Some((generation, status, String::from_utf8_lossy(&seen).into_owned()))
    }

    /// The D1 database (its name) that keeps the money of `key`'s account: its ledger (SPEC §22),
    /// as the admin API reports it.
    pub fn ledger_db(&self, key: &str) -> String {
        let account = self.credits(key)["account_id"]
            .as_str()
            .expect("account id")
            .to_string();
        let a = self.admin("GET", &format!("/admin/accounts/{account}"), None);
        assert_eq!(a.status, 200, "{}", a.text());
        match a.json()["ledger"].as_u64().expect("the account's ledger") {
            0 => HOME_DB.to_string(),
            n => format!("switchyard-ledger-{n}"),
        }
    }

    /// Runs SQL on one of the Worker's local D1 databases (`db`: [`HOME_DB`] or a
    /// [`Stack::ledger_db`]) directly, as a crash would leave it, through `wrangler d1 execute`
    /// (`E2E_ROOT`, `E2E_D1_PERSIST`).
    pub fn d1_execute(&self, db: &str, sql: &str) {
        self.d1_run(db, sql, false);
    }

    /// The rows one SQL query reads from one of the Worker's local D1 databases (what a test looks
    /// at behind the API: rows kept, sums), through `wrangler d1 execute --json`.
    pub fn d1_query(&self, db: &str, sql: &str) -> Vec<Value> {
        let out = self.d1_run(db, sql, true);
        let parsed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("d1 query output {e}: {out}"));
        parsed[0]["results"].as_array().cloned().unwrap_or_default()
    }

    fn d1_run(&self, db: &str, sql: &str, json: bool) -> String {
        let root = env("E2E_ROOT");
        let persist = env("E2E_D1_PERSIST");
        let config = env("E2E_WRANGLER_CONFIG");
        // The running Worker holds the same SQLite file: retry while it is busy.
        let mut last = String::new();
        for attempt in 0..30u64 {
            let out = std::process::Command::new(format!("{root}/node_modules/.bin/wrangler"))
                .current_dir(&root)
                .env("CI", "1")
                .env("WRANGLER_SEND_METRICS", "false")
                .args([
                    "d1",
                    "execute",
                    db,
                    "-c",
                    &config,
                    "--local",
                    "--persist-to",
                    &persist,
                    "--command",
                    sql,
                ])
                .args(if json { &["--json"][..] } else { &[][..] })
                .output()
                .expect("running wrangler d1 execute");
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            last = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(100 * (attempt + 1)));
        }
        panic!("d1 execute failed: {last}");
    }

    /// Fires the Worker's cron trigger (`wrangler dev --test-scheduled`).
    pub fn trigger_cron(&self) {
        let r = self.request(
            "GET",
            &format!("{}/__scheduled?cron=*+*+*+*+*", self.gateway),
            &[],
            None,
        );
        assert!(r.status < 300, "cron trigger: {} {}", r.status, r.text());
    }

    /// Waits until `model`'s one-slot first route is held (`/admin/health` shows it in flight) —
    /// on a loaded machine a request may reach the object later than it was sent; panics once
    /// `deadline` passes.
    pub fn until_slot_held(&self, model: &str, deadline: std::time::Instant) {
        loop {
            let h = self.admin("GET", &format!("/admin/health/{model}"), None).json();
            if h["routes"][0]["in_flight"] == 1 {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "no request took the slot: {h}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An admin call with the admin token.
    pub fn admin(&self, method: &str, path: &str, body: Option<Value>) -> Reply {
        let auth = format!("Bearer {}", self.admin_token);
        let bytes = body.map(|b| b.to_string().into_bytes());
        self.request(
            method,
            &format!("{}{path}", self.gateway),
            &[("authorization", &auth), ("content-type", "application/json")],
            bytes.as_deref(),
        )
    }

    /// Adds a provider whose base URL is the mock under `label/scenario`, and returns its id.
    /// With `with_key`, the provider sends the e2e upstream key.
    pub fn mock_provider(&self, label: &str, scenario: &str, with_key: bool) -> String {
        self.mock_provider_with_auth(label, scenario, with_key, "bearer")
    }

    /// [`Stack::mock_provider`] with the catalog's `auth` scheme (`bearer` or `x-api-key`).
    pub fn mock_provider_with_auth(&self, label: &str, scenario: &str, with_key: bool, auth: &str) -> String {
        let id = unique("p");
        let mut provider = json!({"base_url": format!("{}/{label}/{scenario}", self.mock), "auth": auth});
        if with_key {
            provider["key_secret"] = json!(self.upstream_key_name);
        }
        let r = self.admin("PUT", &format!("/admin/providers/{id}"), Some(provider));
        assert_eq!(r.status, 200, "adding provider: {}", r.text());
        id
    }

    /// A provider on the mock's `scenario` (under `label`) billed to upstream account `account`
    /// (several such providers fail together on account-level errors, SPEC §9); its id.
    pub fn provider_on_account(&self, label: &str, scenario: &str, account: &str) -> String {
        let id = unique("p");
        let body =
            json!({"base_url": format!("{}/{label}/{scenario}", self.mock), "auth": "bearer", "account": account});
        let r = self.admin("PUT", &format!("/admin/providers/{id}"), Some(body));
        assert_eq!(r.status, 200, "adding provider: {}", r.text());
        id
    }

    /// Adds a model whose routes are the given (provider id, upstream model) pairs, in order,
    /// and returns its id.
    pub fn model_with_routes(&self, routes: &[(&str, &str)], policy: Option<Value>) -> String {
        let id = unique("m");
        let routes: Vec<Value> = routes
            .iter()
            .enumerate()
            .map(|(i, (provider, upstream))| {
                json!({"id": format!("r{i}"), "provider": provider, "upstream_model": upstream,
                       "apis": ["chat"], "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}})
            })
            .collect();
        let mut model = json!({"context_window": 8192, "max_output_tokens": 1024, "routes": routes});
        if let Some(p) = policy {
            model["policy"] = p;
        }
        let r = self.admin("PUT", &format!("/admin/models/{id}"), Some(model));
        assert_eq!(r.status, 200, "adding model: {}", r.text());
        id
    }

    /// Route objects `r0`, `r1`, … over mock scenarios, each on its own label and provider (which
    /// sends no upstream key), with each route's extra fields (see [`route`]); and each route's
    /// mock (label, scenario).
    pub fn mock_routes(&self, routes: &[(&str, Value)]) -> (Vec<Value>, Vec<(String, String)>) {
        routes
            .iter()
            .enumerate()
            .map(|(i, (scenario, extra))| {
                let label = unique("l");
                let provider = self.mock_provider(&label, scenario, false);
                (
                    route(&format!("r{i}"), &provider, "u", extra.clone()),
                    (label, scenario.to_string()),
                )
            })
            .unzip()
    }

    /// Adds a model with the given route objects (see [`route`]) and optional policy; returns its id.
    pub fn model(&self, routes: Vec<Value>, policy: Option<Value>) -> String {
        let id = unique("m");
        let mut model = json!({"context_window": 8192, "max_output_tokens": 1024, "routes": routes});
        if let Some(p) = policy {
            model["policy"] = p;
        }
        let r = self.admin("PUT", &format!("/admin/models/{id}"), Some(model));
        assert_eq!(r.status, 200, "adding model: {}", r.text());
        id
    }

    /// `GET /v1/generation?id=` with `key`, waiting up to 5 s for the record (it is written after
    /// the response, off the critical path).
    pub fn generation(&self, key: &str, id: &str) -> Value {
        self.generation_if_any(key, id)
            .unwrap_or_else(|| panic!("generation {id} never appeared"))
    }

    /// [`Stack::generation`], or `None` if it did not appear within 5 s.
    pub fn generation_if_any(&self, key: &str, id: &str) -> Option<Value> {
        let auth = format!("Bearer {key}");
        let url = format!("{}/v1/generation?id={id}", self.gateway);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let r = self.request("GET", &url, &[("authorization", &auth)], None);
            if r.status == 200 {
                return Some(r.json());
            }
            assert_eq!(r.status, 404, "{}", r.text());
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A fresh account with `credit_usd` and one key for it; returns the plaintext key.
    pub fn new_key(&self, credit_usd: f64) -> String {
        self.new_key_with(credit_usd, json!({}))
    }

    /// [`Stack::new_key`] with more fields for the key (`rpm`, `max_concurrent`, …).
    pub fn new_key_with(&self, credit_usd: f64, fields: Value) -> String {
        self.funded_key(json!({}), credit_usd, fields)
    }

    /// A key of a new account named `id` with `credit_usd` (the drills read account names:
    /// `d1-outage-…`, `d1-slow-…`, `fault-settle-writer-dies…`).
    pub fn named_account_key(&self, id: &str, credit_usd: f64) -> String {
        self.funded_key(json!({"id": id}), credit_usd, json!({}))
    }

    /// A new account (`account`: its fields), credited, and a key of it with `fields`.
    fn funded_key(&self, account: Value, credit_usd: f64, fields: Value) -> String {
        let account = self.admin("POST", "/admin/accounts", Some(account));
        assert_eq!(account.status, 201, "creating account: {}", account.text());
        let account_id = account.json()["id"].as_str().expect("account id").to_string();
        let credit = self.admin(
            "POST",
            &format!("/admin/accounts/{account_id}/credit"),
            Some(json!({"amount_usd": credit_usd})),
        );
        assert_eq!(credit.status, 200, "crediting: {}", credit.text());
        let key = self.admin(
            "POST",
            "/admin/keys",
            Some(with(json!({"account_id": account_id}), fields)),
        );
        assert_eq!(key.status, 201, "creating key: {}", key.text());
        key.json()["key"].as_str().expect("key").to_string()
    }

    /// `POST /v1/chat/completions` with a key and a raw body.
    pub fn chat_raw(&self, key: &str, body: &[u8]) -> Reply {
        let auth = format!("Bearer {key}");
        self.request(
            "POST",
            &format!("{}/v1/chat/completions", self.gateway),
            &[("authorization", &auth), ("content-type", "application/json")],
            Some(body),
        )
    }

    pub fn chat(&self, key: &str, body: &Value) -> Reply {
        self.chat_raw(key, body.to_string().as_bytes())
    }

    /// A request to `api`'s endpoint with `key` sent the way its SDK sends it, plus `headers`.
    pub fn send(&self, api: Api, key: &str, body: &Value, headers: &[(&str, &str)]) -> Reply {
        let (name, value) = api.auth_header(key);
        let mut all = vec![(name, value.as_str()), ("content-type", "application/json")];
        all.extend_from_slice(headers);
        let (path, body) = api.request(body);
        self.request(
            "POST",
            &format!("{}{path}", self.gateway),
            &all,
            Some(body.to_string().as_bytes()),
        )
    }

    /// The same request sent straight to the mock, as the gateway would send it to a route with
    /// this label/scenario and upstream model.
    pub fn direct_chat(&self, label: &str, scenario: &str, body: &Value) -> Reply {
        self.request(
            "POST",
            &format!("{}/{label}/{scenario}/chat/completions", self.mock),
            &[("content-type", "application/json")],
            Some(body.to_string().as_bytes()),
        )
    }

    /// `GET /v1/credits` for `key`: balance, held, ledger totals, the key's spend.
    pub fn credits(&self, key: &str) -> Value {
        let auth = format!("Bearer {key}");
        let r = self.request(
            "GET",
            &format!("{}/v1/credits", self.gateway),
            &[("authorization", &auth)],
            None,
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// `credits(key)` once the account holds nothing any more (settlement runs after the
    /// response); fails the test after `secs` seconds of open holds.
    pub fn settled_credits(&self, key: &str, secs: u64) -> Value {
        let deadline = std::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let c = self.credits(key);
            if c["held_micros"] == 0 && c["open_holds_micros"] == 0 {
                return c;
            }
            assert!(std::time::Instant::now() < deadline, "still held after {secs} s: {c}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the mock saw under `label/scenario`: `{"requests": n, "last_request": …}`.
    pub fn mock_stats(&self, label: &str, scenario: &str) -> Value {
        self.request("GET", &format!("{}/_stats/{label}/{scenario}", self.mock), &[], None)
            .json()
    }
}

/// The prompt of the model's own checks (core `verify::VERIFY_PROMPT`): a mock counts them apart
/// (`by_prompt`).
pub const CHECK_PROMPT: &str = "Reply with the single word: ready";

/// The Worker's home D1 database: the catalog, the directory of accounts, and ledger 0.
pub const HOME_DB: &str = "switchyard";

fn is_wrangler_restart(status: u16, has_request_id: bool, body: &[u8]) -> bool {
    status == 503 && !has_request_id && String::from_utf8_lossy(body).contains("Your worker restarted mid-request")
}

#[cfg(test)]
mod tests {
    use super::is_wrangler_restart as wrangler_restart;

    #[test]
    fn only_wrangler_dev_s_own_restart_answer_counts_as_lost() {
        let body = b"Your worker restarted mid-request. Please try sending the request again.";
        assert!(wrangler_restart(503, false, body));
        assert!(
            !wrangler_restart(503, true, body),
            "the Worker's own 503 carries x-request-id"
        );
        assert!(!wrangler_restart(502, false, body));
        assert!(!wrangler_restart(503, false, b"{\"error\":{}}"));
    }
}
