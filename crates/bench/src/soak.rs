//! `switchyard-bench soak`: the load of scripts/soak (issue 33). Sets up a model per kind of
//! request and [`ACCOUNTS`] accounts with a key each (spread over the ledgers, SPEC §22) on a
//! running Switchyard through its admin API, then drives
//! `--requests` requests on `--concurrency` connections — a fixed mix by request number: mostly
//! non-stream chat, some streaming chat, some Responses requests (each leaves a pin), some
//! requests to a model whose only route fails (settlements that charge nothing) — while firing the
//! Worker's cron every `--cron-every-s` (Miniflare's `/cdn-cgi/handler/scheduled`). Then it runs
//! the cron once more, waits until nothing is held (`GET /v1/credits`), looks up generation
//! records from the start, middle and end of the run (`GET /v1/generation`: every one must be
//! found) and continues Responses answers from each (`previous_response_id`: their pins).
//!
//! It writes what it saw as JSON (`--json`) for scripts/soak, which reads the databases' sizes
//! from their files; it fails when a sampled record is missing, a continuation fails, or more than
//! 0.1 % of the requests got an answer their kind does not expect. With `--resume-file` it then
//! waits for the gateway to come back on the same storage with part of its ledger aged, and runs
//! the retention job over it ([`after_restart`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http::{Call, Client, Url};
use crate::stats::Pct;
use crate::{json_headers, machine_info, need, unique, Admin, Opts};

/// The kinds of request, by request number (`i % 20`): 14 chat, 3 streaming chat, 2 Responses,
/// 1 to the failing model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Chat,
    Stream,
    Responses,
    Failing,
}

const KINDS: [Kind; 4] = [Kind::Chat, Kind::Stream, Kind::Responses, Kind::Failing];

impl Kind {
    fn of(i: usize) -> Kind {
        match i % 20 {
            0..=13 => Kind::Chat,
            14..=16 => Kind::Stream,
            17 | 18 => Kind::Responses,
            _ => Kind::Failing,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Chat => "chat",
            Kind::Stream => "chat_stream",
            Kind::Responses => "responses",
            Kind::Failing => "failing_route",
        }
    }

    /// The status this kind is answered with.
    fn expected(self, status: u16) -> bool {
        match self {
            Kind::Failing => (500..600).contains(&status),
            _ => status == 200,
        }
    }
}

/// Accounts the load is spread over (request `i` is account `i % ACCOUNTS`'s): placed by their
/// ids, they spread over the deployment's ledgers.
const ACCOUNTS: usize = 8;

/// What one request got.
struct Done {
    kind: Kind,
    /// Whose key sent it (an index into the run's keys).
    key: usize,
    /// 0: no HTTP answer.
    status: u16,
    ms: f64,
    generation_id: Option<String>,
    /// A Responses answer's id (what `previous_response_id` names).
    response_id: Option<String>,
    error: Option<String>,
}

/// Ids taken from each age window of the run, and continuations from each.
const SAMPLES_PER_WINDOW: usize = 12;
const CONTINUATIONS_PER_WINDOW: usize = 2;
/// How long settlements may take to finish after the last request.
const SETTLE_WAIT: Duration = Duration::from_secs(300);

pub fn run(o: &Opts) -> Result<(), String> {
    let gw = Url::parse(need(&o.gateway, "--gateway")?)?;
    let mock = need(&o.mock, "--mock")?.trim_end_matches('/').to_string();
    if o.requests == 0 || o.concurrency == 0 {
        return Err("--requests and --concurrency must be at least 1".into());
    }
    let mut admin = Admin {
        base: gw.clone(),
        token: need(&o.admin_token, "--admin-token")?.to_string(),
        client: Client::new(Duration::from_secs(60)),
    };
    let machine = machine_info();
    let label = unique("sysoak");
    eprintln!("switchyard-bench soak: setting up the catalog on {gw} (mock label {label})");
    let m_chat = admin.mock_model(&mock, &label, "chat", "ok", "chat")?;
    let m_responses = admin.mock_model(&mock, &label, "responses", "ok", "responses")?;
    let m_failing = admin.mock_model(&mock, &label, "failing", "status/500", "chat")?;
    let mut keys = Vec::with_capacity(ACCOUNTS);
    let mut ledgers = Vec::with_capacity(ACCOUNTS);
    for _ in 0..ACCOUNTS {
        let (account, key) = admin.funded_key(100_000.0)?;
        ledgers.push(account["ledger"].clone());
        keys.push(key);
    }

    let chat_url = gw.join("/v1/chat/completions");
    let responses_url = gw.join("/v1/responses");
    let chat = |key: &str, model: &str, stream: bool| {
        let body = json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "Say hello"}]});
        Call::post_json(chat_url.clone(), json_headers(Some(key)), &body, stream)
    };
    let responses = |key: &str, input: &str| {
        Call::post_json(
            responses_url.clone(),
            json_headers(Some(key)),
            &json!({"model": m_responses, "input": input}),
            false,
        )
    };
    // Each key's call of each kind, in the order of [`KINDS`].
    let calls: Vec<[Call; 4]> = keys
        .iter()
        .map(|key| {
            [
                chat(key, &m_chat, false),
                chat(key, &m_chat, true),
                responses(key, "Say hello"),
                chat(key, &m_failing, false),
            ]
        })
        .collect();
    let call_of = |key: usize, kind: Kind| &calls[key][KINDS.iter().position(|k| *k == kind).unwrap_or(0)];

    // One of each first: a broken setup fails here, not as 200,000 errors. These and the
    // continuations at the end are the run's extra requests (each leaves its record too).
    let mut extras: Vec<Done> = Vec::new();
    let mut probe = Client::new(Duration::from_secs(60));
    for kind in KINDS {
        let d = one(&mut probe, call_of(0, kind), kind, 0);
        if !kind.expected(d.status) {
            return Err(format!(
                "probe {}: status {}: {}",
                kind.name(),
                d.status,
                d.error.unwrap_or_default()
            ));
        }
        extras.push(d);
    }

    eprintln!(
        "switchyard-bench soak: {} requests on {} connections, the cron every {} s",
        o.requests, o.concurrency, o.cron_every_s
    );
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<Option<Done>>> = Mutex::new((0..o.requests).map(|_| None).collect());
    let cron_url = gw.join("/cdn-cgi/handler/scheduled?cron=*+*+*+*+*");
    let started = Instant::now();
    let cron = std::thread::scope(|s| {
        for _ in 0..o.concurrency {
            s.spawn(|| {
                let mut client = Client::new(Duration::from_secs(120));
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= o.requests {
                        break;
                    }
                    let (kind, key) = (Kind::of(i), i % ACCOUNTS);
                    let d = match kind {
                        // Each its own input: the upstream names each answer apart, each a pin.
                        Kind::Responses => one(
                            &mut client,
                            &responses(&keys[key], &format!("Say hello ({i})")),
                            kind,
                            key,
                        ),
                        _ => one(&mut client, call_of(key, kind), kind, key),
                    };
                    if let Ok(mut all) = done.lock() {
                        all[i] = Some(d);
                    }
                }
            });
        }
        // The cron as Cloudflare fires it (every minute), and progress lines, until the load ends.
        let watcher = s.spawn(|| {
            let mut client = Client::new(Duration::from_secs(120));
            let mut runs = Vec::new();
            let mut last_cron = Instant::now();
            let mut last_note = Instant::now();
            while next.load(Ordering::Relaxed) < o.requests {
                std::thread::sleep(Duration::from_millis(200));
                if last_cron.elapsed() >= Duration::from_secs(o.cron_every_s) {
                    last_cron = Instant::now();
                    runs.push(fire_cron(&mut client, &cron_url));
                }
                if last_note.elapsed() >= Duration::from_secs(10) {
                    last_note = Instant::now();
                    let n = next.load(Ordering::Relaxed).min(o.requests);
                    eprintln!(
                        "  {n} requests sent, {:.0} req/s",
                        n as f64 / started.elapsed().as_secs_f64()
                    );
                }
            }
            runs
        });
        watcher.join().unwrap_or_default()
    });
    let seconds = started.elapsed().as_secs_f64();
    let done: Vec<Done> = done
        .into_inner()
        .map_err(|_| "a load thread panicked")?
        .into_iter()
        .flatten()
        .collect();
    if done.len() != o.requests {
        return Err(format!(
            "{} of {} requests have no result",
            o.requests - done.len(),
            o.requests
        ));
    }
    eprintln!(
        "switchyard-bench soak: {} requests in {seconds:.0} s ({:.0} req/s)",
        o.requests,
        o.requests as f64 / seconds
    );

    // The retention run after the load, then every settlement finished.
    let mut client = Client::new(Duration::from_secs(120));
    let mut cron = cron;
    cron.push(fire_cron(&mut client, &cron_url));
    let settle_started = Instant::now();
    let credits = all_settled(&mut client, &gw, &keys)?;
    let settle_wait = settle_started.elapsed().as_secs_f64();

    // Lookups and continuations from each age window of the run: its first, middle and last
    // requests (the last window: its final 100).
    let n = done.len();
    let windows = [("start", 0), ("middle", n / 2), ("end", n.saturating_sub(100))];
    let mut samples = serde_json::Map::new();
    let mut missing = Vec::new();
    let mut continuations = Vec::new();
    let mut continuation_failures = Vec::new();
    let mut sampled: Vec<(usize, String)> = Vec::new();
    for (name, from) in windows {
        let ids = sample(&done[from..], |d| d.generation_id.as_deref(), SAMPLES_PER_WINDOW);
        let mut found = 0;
        for (kind, key, id) in &ids {
            sampled.push((*key, id.to_string()));
            match lookup(&mut client, &gw, &keys[*key], id) {
                Ok(()) => found += 1,
                Err(e) => missing.push(format!("{} {id} ({name}): {e}", kind.name())),
            }
        }
        let responses = sample(&done[from..], |d| d.response_id.as_deref(), CONTINUATIONS_PER_WINDOW);
        let mut continued = 0;
        for (_, key, response_id) in &responses {
            // A continuation from the key that got the answer: a pin is its account's.
            let body = json!({"model": m_responses, "input": "And then?", "previous_response_id": response_id});
            let call = Call::post_json(responses_url.clone(), json_headers(Some(&keys[*key])), &body, false);
            let d = one(&mut client, &call, Kind::Responses, *key);
            match d.status {
                200 => continued += 1,
                _ => continuation_failures.push(format!(
                    "{response_id} ({name}): status {}: {}",
                    d.status,
                    d.error.as_deref().unwrap_or("")
                )),
            }
            extras.push(d);
        }
        continuations.push(json!({"window": name, "asked": responses.len(), "ok": continued}));
        samples.insert(
            name.to_string(),
            json!({"from_request": from + 1, "asked": ids.len(), "found": found,
                   "kinds": ids.iter().map(|(k, _, _)| k.name()).collect::<Vec<_>>()}),
        );
    }
    // The extra requests' records and settlements too, so the databases are measured at rest.
    for d in &extras {
        if let Some(id) = &d.generation_id {
            sampled.push((d.key, id.clone()));
            if let Err(e) = lookup(&mut client, &gw, &keys[d.key], id) {
                missing.push(format!("{} {id} (an extra request): {e}", d.kind.name()));
            }
        }
    }
    let credits_after = all_settled(&mut client, &gw, &keys)?;

    let mut kinds = serde_json::Map::new();
    let mut unexpected = Vec::new();
    for kind in KINDS {
        let of_kind: Vec<&Done> = done.iter().filter(|d| d.kind == kind).collect();
        let expected: Vec<f64> = of_kind
            .iter()
            .filter(|d| kind.expected(d.status))
            .map(|d| d.ms)
            .collect();
        for d in of_kind.iter().filter(|d| !kind.expected(d.status)) {
            unexpected.push(format!(
                "{}: status {}: {}",
                kind.name(),
                d.status,
                d.error.as_deref().unwrap_or("")
            ));
        }
        kinds.insert(
            kind.name().to_string(),
            json!({"requests": of_kind.len(), "as_expected": expected.len(),
                   "with_generation_id": of_kind.iter().filter(|d| d.generation_id.is_some()).count(),
                   "ms": Pct::of(&expected).to_json()}),
        );
    }
    let answered = done.iter().filter(|d| d.status == 200).count();
    let failed = done.iter().filter(|d| (500..600).contains(&d.status)).count();
    let mut result = json!({
        "mode": "soak",
        "gateway": gw.to_string(),
        "machine": machine,
        "requests": o.requests,
        "concurrency": o.concurrency,
        "accounts": ACCOUNTS,
        "ledgers": ledgers,
        "seconds": (seconds * 10.0).round() / 10.0,
        "requests_per_s": (o.requests as f64 / seconds).round(),
        "kinds": kinds,
        "answered_200": answered,
        "answered_5xx": failed,
        "unexpected": unexpected.len(),
        "first_unexpected": unexpected.iter().take(5).collect::<Vec<_>>(),
        "cron": {"runs": cron.len(), "failed": cron.iter().filter(|ok| !**ok).count()},
        "settle_wait_s": (settle_wait * 10.0).round() / 10.0,
        "credits": credits,
        "credits_after_continuations": credits_after,
        "samples": samples,
        "missing": missing,
        "continuations": continuations,
        "continuation_failures": continuation_failures,
        "extra_requests": extras.len(),
        "extra_answered_200": extras.iter().filter(|d| d.status == 200).count(),
        "extra_answered_5xx": extras.iter().filter(|d| (500..600).contains(&d.status)).count(),
        "extra_responses_200": extras.iter().filter(|d| d.kind == Kind::Responses && d.status == 200).count(),
    });
    write_json(o, &result)?;
    println!("{}", summary(&result));
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "{} sampled records not found: {}",
            missing.len(),
            missing.join("; ")
        ));
    }
    if !continuation_failures.is_empty() {
        problems.push(format!("continuations failed: {}", continuation_failures.join("; ")));
    }
    if unexpected.len() * 1000 > o.requests {
        problems.push(format!(
            "{} requests got an answer their kind does not expect (first: {})",
            unexpected.len(),
            unexpected.first().map(String::as_str).unwrap_or("?")
        ));
    }
    if cron.iter().any(|ok| !ok) {
        problems.push("a cron run failed".into());
    }
    if let Some(file) = &o.resume_file {
        let (retention, found_problems) = after_restart(file, &keys, &sampled, &credits_after)?;
        println!(
            "retention: {} cron runs ({} failed) in {} s after the restart; balances unchanged: {}; {} of {} records \
             found again",
            retention["cron_runs"],
            retention["cron_failed"],
            retention["cron_seconds"],
            retention["balances_unchanged"],
            retention["found"],
            retention["lookups"]
        );
        result["retention"] = retention;
        write_json(o, &result)?;
        problems.extend(found_problems);
    }
    match problems.is_empty() {
        true => Ok(()),
        false => Err(problems.join("\n")),
    }
}

fn write_json(o: &Opts, result: &Value) -> Result<(), String> {
    if let Some(path) = &o.json {
        // Whole or not at all: scripts/soak reads it while this process waits (`--resume-file`).
        let text = serde_json::to_string_pretty(result).map_err(|e| e.to_string())?;
        let partial = format!("{path}.partial");
        std::fs::write(&partial, text + "\n").map_err(|e| format!("{partial}: {e}"))?;
        std::fs::rename(&partial, path).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

/// The retention phase (`--resume-file`): scripts/soak stops the gateway, ages part of the ledger
/// in its D1 file as if a week had passed, starts it again on the same files and writes
/// `URL RUNS` into `file`. Then the cron runs RUNS times (the roll-up's bounded steps); the
/// accounts' balances must not move, and every record looked up before must still be found.
fn after_restart(
    file: &str,
    keys: &[String],
    ids: &[(usize, String)],
    before: &Value,
) -> Result<(Value, Vec<String>), String> {
    eprintln!("switchyard-bench soak: waiting for {file} (the restarted gateway's URL and the cron runs)");
    let deadline = Instant::now() + Duration::from_secs(3_600);
    let line = loop {
        match std::fs::read_to_string(file) {
            Ok(text) if text.ends_with('\n') => break text,
            _ if Instant::now() >= deadline => return Err(format!("{file} never came")),
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    let mut parts = line.split_whitespace();
    let gw = Url::parse(parts.next().ok_or_else(|| format!("{file}: no URL"))?)?;
    let runs: usize = parts
        .next()
        .and_then(|r| r.parse().ok())
        .ok_or_else(|| format!("{file}: no number of cron runs"))?;
    let mut client = Client::new(Duration::from_secs(600));
    let cron_url = gw.join("/cdn-cgi/handler/scheduled?cron=*+*+*+*+*");
    let started = Instant::now();
    let failed = (0..runs).filter(|_| !fire_cron(&mut client, &cron_url)).count();
    let cron_seconds = started.elapsed().as_secs_f64();
    let after = all_settled(&mut client, &gw, keys)?;
    let mut problems = Vec::new();
    if failed > 0 {
        problems.push(format!("{failed} of {runs} cron runs failed after the restart"));
    }
    let money = |all: &Value| {
        let of = |v: &Value| {
            json!([
                v["balance_micros"],
                v["charges_total_micros"],
                v["credits_total_micros"],
                v["key"]["spent_micros"]
            ])
        };
        all.as_array().map(|a| a.iter().map(of).collect::<Vec<_>>())
    };
    let unchanged = money(&after) == money(before);
    if !unchanged {
        problems.push(format!(
            "the retention run moved the balances: before {before}, after {after}"
        ));
    }
    let mut found = 0;
    for (key, id) in ids {
        match lookup(&mut client, &gw, &keys[*key], id) {
            Ok(()) => found += 1,
            Err(e) => problems.push(format!("after the restart and the retention run, {id}: {e}")),
        }
    }
    let retention = json!({
        "cron_runs": runs,
        "cron_failed": failed,
        "cron_seconds": (cron_seconds * 10.0).round() / 10.0,
        "balances_unchanged": unchanged,
        "credits": after,
        "lookups": ids.len(),
        "found": found,
    });
    Ok((retention, problems))
}

fn one(client: &mut Client, call: &Call, kind: Kind, key: usize) -> Done {
    match client.send(call) {
        Ok(t) => {
            let response_id = match (kind, t.status) {
                (Kind::Responses, 200) => serde_json::from_slice::<Value>(&t.body)
                    .ok()
                    .and_then(|v| v["id"].as_str().map(str::to_string)),
                _ => None,
            };
            let error = (!kind.expected(t.status))
                .then(|| String::from_utf8_lossy(&t.body).chars().take(300).collect::<String>());
            Done {
                kind,
                key,
                status: t.status,
                ms: t.total_ms,
                generation_id: t.generation_id,
                response_id,
                error,
            }
        }
        Err(e) => Done {
            kind,
            key,
            status: 0,
            ms: f64::NAN,
            generation_id: None,
            response_id: None,
            error: Some(e.to_string()),
        },
    }
}

/// Runs the Worker's scheduled event once; true when it ran to completion.
fn fire_cron(client: &mut Client, url: &Url) -> bool {
    let call = Call {
        method: "GET",
        url: url.clone(),
        headers: Vec::new(),
        body: Vec::new(),
        sse: false,
    };
    client.send(&call).is_ok_and(|t| t.status == 200)
}

/// `n` values `pick` finds in `done`, first ones first, with their kinds and keys: at least one
/// of each kind that has one, when there are enough.
fn sample<'a>(done: &'a [Done], pick: impl Fn(&'a Done) -> Option<&'a str>, n: usize) -> Vec<(Kind, usize, &'a str)> {
    let mut out: Vec<(Kind, usize, &str)> = Vec::new();
    for kind in KINDS {
        if let Some((key, v)) = done
            .iter()
            .filter(|d| d.kind == kind)
            .find_map(|d| pick(d).map(|v| (d.key, v)))
        {
            out.push((kind, key, v));
        }
    }
    for d in done {
        if out.len() >= n {
            break;
        }
        if let Some(v) = pick(d) {
            if !out.iter().any(|(_, _, o)| *o == v) {
                out.push((d.kind, d.key, v));
            }
        }
    }
    out.truncate(n);
    out
}

/// `GET /v1/generation?id=`: Ok when the record is found with that id (written just after the
/// answer: a 404 is asked again for 5 s).
fn lookup(client: &mut Client, gw: &Url, key: &str, id: &str) -> Result<(), String> {
    let call = Call {
        method: "GET",
        url: gw.join(&format!("/v1/generation?id={id}")),
        headers: json_headers(Some(key)),
        body: Vec::new(),
        sse: false,
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = client.send(&call).map_err(|e| e.to_string())?;
        match t.status {
            200 => {
                let v: Value = serde_json::from_slice(&t.body).map_err(|e| e.to_string())?;
                return match v["id"].as_str() == Some(id) {
                    true => Ok(()),
                    false => Err(format!("another record: {v}")),
                };
            }
            404 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
            s => return Err(format!("status {s}: {}", String::from_utf8_lossy(&t.body))),
        }
    }
}

/// [`settled_credits`] of every key, as a JSON array in their order.
fn all_settled(client: &mut Client, gw: &Url, keys: &[String]) -> Result<Value, String> {
    keys.iter()
        .map(|key| settled_credits(client, gw, key))
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

/// `GET /v1/credits` once nothing is held (every settlement done), within [`SETTLE_WAIT`].
fn settled_credits(client: &mut Client, gw: &Url, key: &str) -> Result<Value, String> {
    let call = Call {
        method: "GET",
        url: gw.join("/v1/credits"),
        headers: json_headers(Some(key)),
        body: Vec::new(),
        sse: false,
    };
    let deadline = Instant::now() + SETTLE_WAIT;
    loop {
        let t = client.send(&call).map_err(|e| format!("GET /v1/credits: {e}"))?;
        let v: Value = serde_json::from_slice(&t.body).unwrap_or(Value::Null);
        if t.status == 200 && v["held_micros"] == 0 && v["open_holds_micros"] == 0 {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            return Err(format!("still held after {} s: {v}", SETTLE_WAIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A few lines for the terminal (scripts/soak prints the full table).
fn summary(r: &Value) -> String {
    let mut s = format!(
        "soak: {} requests in {} s ({} req/s) on {} connections; {} answered 200, {} 5xx, {} unexpected; \
         cron runs {} (failed {}); settled {} s after the last request\n",
        r["requests"],
        r["seconds"],
        r["requests_per_s"],
        r["concurrency"],
        r["answered_200"],
        r["answered_5xx"],
        r["unexpected"],
        r["cron"]["runs"],
        r["cron"]["failed"],
        r["settle_wait_s"]
    );
    for (name, v) in r["samples"].as_object().into_iter().flatten() {
        s.push_str(&format!("  lookups ({name}): {} of {} found\n", v["found"], v["asked"]));
    }
    for v in r["continuations"].as_array().into_iter().flatten() {
        s.push_str(&format!(
            "  continuations ({}): {} of {} answered\n",
            v["window"], v["ok"], v["asked"]
        ));
    }
    s
}
