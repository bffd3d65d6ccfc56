//! `switchyard-bench`: what Switchyard adds over calling the upstream directly (issue 6).
//!
//! Every measurement is a run of interleaved pairs — A through the gateway, B straight to the mock
//! with the same body — after a warm-up, so both sides see the same machine at the same moment.
//! "Added" is A's percentile minus B's percentile; the percentiles of the per-pair differences are
//! kept beside it. Results are written as JSON (`--json`) and rendered as Markdown (`report`).
//!
//! Modes (see `USAGE`): `gateway` sets up providers, models, an account and a key on a running
//! Switchyard through its admin API and measures everything; `echo` measures the same pairs through
//! the trivial worker-rs proxy in `bench/echo-worker` (the floor), `js-echo` through the plain JS
//! Worker in `bench/js-echo` (the JS floor); `target` measures non-stream
//! latency through any OpenAI-compatible gateway; `soak` is the load of scripts/soak (`soak.rs`);
//! `keys` times key lookups and the admin API for scripts/bench-keys (`keys.rs`).

// A native benchmark: real clocks are the point.
#![allow(clippy::disallowed_methods)]

mod http;
mod keys;
// Parse and translate time of the worst request bodies (tests and a benchmark row, no binary code).
#[cfg(test)]
mod parse;
mod report;
mod soak;
mod stats;
// What one stream costs the core, framing to client bytes (a benchmark row, no binary code).
#[cfg(test)]
mod stream;

use std::process::ExitCode;
use std::sync::Barrier;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::http::{Call, Client, Timing, Url};
use crate::stats::Pct;

const USAGE: &str = "\
usage:
  switchyard-bench gateway --gateway URL --admin-token TOKEN --mock URL [common]
      Sets up providers/models/account/key on a running Switchyard, then measures non-stream
      (concurrency 1 and 8), stream time to first content, a 200-chunk stream and the outage case.
  switchyard-bench echo --echo URL --mock URL [common]
      The same pairs through bench/echo-worker (a trivial worker-rs proxy to the mock): the floor.
  switchyard-bench js-echo --echo URL --mock URL [common]
      The pairs through bench/js-echo (a plain JS Worker): the JS floor — the pass-through, and
      streams read chunk by chunk in JS (/relay) or piped with batched inspection (/tee).
  switchyard-bench target --target URL --key KEY --model MODEL [--direct URL] [common]
      Non-stream, concurrency 1 and 8, through any OpenAI-compatible gateway. URL is the API base
      (the OpenAI SDK's base_url, e.g. http://127.0.0.1:4000/v1); requests go to URL/chat/completions.
      With --direct (an upstream base URL, e.g. http://127.0.0.1:9100/x/ok) each request is paired
      with the same body sent there, and the added latency is reported; without it, absolute only.
  switchyard-bench report [--primary N] RESULT.json...
      Renders one or more result files side by side as Markdown.
  switchyard-bench soak --gateway URL --admin-token TOKEN --mock URL [--requests N] [--concurrency C]
      [--cron-every-s S] [--json FILE] [--resume-file FILE]
      scripts/soak's load: a model per kind, an account and a key, then N requests (default
      200000) on C connections (default 16) — 70 % chat, 15 % streaming chat, 10 % Responses, 5 %
      to a model whose only route fails — firing the cron every S s (default 60; Miniflare's
      /cdn-cgi/handler/scheduled); then the cron once more, waits until nothing is held, looks up
      records from the run's start, middle and end and continues Responses answers from each.
      With --resume-file, then waits for FILE to say `URL RUNS` (the gateway restarted on the same
      storage, part of its ledger aged), fires the cron RUNS times, checks the balances did not
      move and looks every sampled record up again (results added to the --json file).
  switchyard-bench keys --gateway URL --admin-token TOKEN --mock URL [--requests N] [--json FILE]
      scripts/bench-keys's measurement: N accounts (default here: --requests, 200,000 — pass a
      few hundred), each timed through its life: created, credited, a key made, read back, the
      key's first request (a lookup no isolate has cached), a chat request (the awaited hold), an
      unknown key of the minted shape, the key revoked. p50/p99 per call, and the accounts made
      with their ledgers.
common:
  --label TEXT            column title in reports (default: the mode)
  --pairs N               measured pairs per measurement (default 1000)
  --warmup N              warm-up pairs per measurement (default 200)
  --outage-requests N     sequential requests in the outage case (default 200)
  --outage-deadline-ms MS stream_first_content_ms of the outage model (default 300)
  --cpu-pid PID           a process whose CPU time is charged to the requests through it
                          (repeatable; /proc/PID/task/*/schedstat)
  --skip NAME             leave measurement NAME out (repeatable; e.g. stream_2000_total)
  --gap-ms MS             pause MS after every pair of every measurement (default 0): each
                          request then meets a runtime that finished the previous one's
                          background work (settlement, reports), as a lightly loaded one does
  --json FILE             write the results there";

#[derive(Debug, Clone)]
struct Opts {
    mode: String,
    label: Option<String>,
    gateway: Option<String>,
    admin_token: Option<String>,
    mock: Option<String>,
    echo: Option<String>,
    target: Option<String>,
    key: Option<String>,
    model: Option<String>,
    direct: Option<String>,
    pairs: usize,
    warmup: usize,
    outage_requests: usize,
    outage_deadline_ms: u64,
    cpu_pids: Vec<u32>,
    /// A pause after every pair (`--gap-ms`), beside a measurement's own.
    gap_ms: u64,
    /// Measurements not taken (their rows say so).
    skip: Vec<String>,
    json: Option<String>,
    primary: usize,
    files: Vec<String>,
    /// soak: requests, connections, seconds between cron runs.
    requests: usize,
    concurrency: usize,
    cron_every_s: u64,
    resume_file: Option<String>,
}

fn parse_args(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        mode: String::new(),
        label: None,
        gateway: None,
        admin_token: None,
        mock: None,
        echo: None,
        target: None,
        key: None,
        model: None,
        direct: None,
        pairs: 1000,
        warmup: 200,
        outage_requests: 200,
        outage_deadline_ms: 300,
        cpu_pids: Vec::new(),
        gap_ms: 0,
        skip: Vec::new(),
        json: None,
        primary: 0,
        files: Vec::new(),
        requests: 200_000,
        concurrency: 16,
        cron_every_s: 60,
        resume_file: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or_else(|| format!("{name} needs a value"));
        let num = |v: String, name: &str| v.parse::<usize>().map_err(|_| format!("{name}: not a number: {v}"));
        match a.as_str() {
            "--label" => o.label = Some(value(a)?),
            "--gateway" => o.gateway = Some(value(a)?),
            "--admin-token" => o.admin_token = Some(value(a)?),
            "--mock" => o.mock = Some(value(a)?),
            "--echo" => o.echo = Some(value(a)?),
            "--target" => o.target = Some(value(a)?),
            "--key" => o.key = Some(value(a)?),
            "--model" => o.model = Some(value(a)?),
            "--direct" => o.direct = Some(value(a)?),
            "--json" => o.json = Some(value(a)?),
            "--pairs" => o.pairs = num(value(a)?, a)?,
            "--skip" => o.skip.push(value(a)?),
            "--warmup" => o.warmup = num(value(a)?, a)?,
            "--outage-requests" => o.outage_requests = num(value(a)?, a)?,
            "--outage-deadline-ms" => o.outage_deadline_ms = num(value(a)?, a)? as u64,
            "--primary" => o.primary = num(value(a)?, a)?,
            "--cpu-pid" => o.cpu_pids.push(num(value(a)?, a)? as u32),
            "--gap-ms" => o.gap_ms = num(value(a)?, a)? as u64,
            "--requests" => o.requests = num(value(a)?, a)?,
            "--concurrency" => o.concurrency = num(value(a)?, a)?,
            "--cron-every-s" => o.cron_every_s = num(value(a)?, a)? as u64,
            "--resume-file" => o.resume_file = Some(value(a)?),
            "gateway" | "echo" | "js-echo" | "target" | "report" | "soak" | "keys" if o.mode.is_empty() => {
                o.mode = a.clone()
            }
            s if o.mode == "report" && !s.starts_with("--") => o.files.push(s.to_string()),
            s => return Err(format!("unknown argument {s:?}")),
        }
    }
    if o.mode.is_empty() {
        // `--target …` alone is the spelling of target mode.
        o.mode = if o.target.is_some() {
            "target"
        } else if o.echo.is_some() {
            "echo"
        } else {
            "gateway"
        }
        .to_string();
    }
    Ok(o)
}

fn need<'a>(v: &'a Option<String>, name: &str) -> Result<&'a str, String> {
    v.as_deref().ok_or_else(|| format!("{name} is required"))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() || args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let result = parse_args(&args).and_then(|o| run(&o));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("switchyard-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Opts) -> Result<(), String> {
    if o.mode == "report" {
        let mut runs = Vec::new();
        for f in &o.files {
            let text = std::fs::read_to_string(f).map_err(|e| format!("{f}: {e}"))?;
            runs.push(serde_json::from_str::<Value>(&text).map_err(|e| format!("{f}: {e}"))?);
        }
        if runs.is_empty() {
            return Err("report: no result files".into());
        }
        print!("{}", report::render(&runs, o.primary));
        return Ok(());
    }
    if o.mode == "soak" {
        return soak::run(o);
    }
    if o.mode == "keys" {
        return keys::run(o);
    }
    if o.pairs == 0 {
        return Err("--pairs must be at least 1".into());
    }
    let started = Instant::now();
    let mut result = match o.mode.as_str() {
        "gateway" => gateway_mode(o)?,
        "echo" => echo_mode(o, true)?,
        "js-echo" => echo_mode(o, false)?,
        "target" => target_mode(o)?,
        m => return Err(format!("unknown mode {m}")),
    };
    result["seconds"] = json!((started.elapsed().as_secs_f64() * 10.0).round() / 10.0);
    if let Some(path) = &o.json {
        let text = serde_json::to_string_pretty(&result).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{path}: {e}"))?;
    }
    print!("{}", report::render(std::slice::from_ref(&result), 0));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Measurements

/// Which time of a request a measurement compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Metric {
    Total,
    FirstContent,
}

fn value_of(t: &Timing, metric: Metric) -> Option<f64> {
    match metric {
        Metric::Total => Some(t.total_ms),
        Metric::FirstContent => t.first_content_ms,
    }
}

/// One request, checked: a non-200, a transport error or a stream without content is an error.
fn checked(client: &mut Client, call: &Call, metric: Metric) -> Result<f64, String> {
    checked_timing(client, call, metric).map(|(v, _)| v)
}

fn checked_timing(client: &mut Client, call: &Call, metric: Metric) -> Result<(f64, Timing), String> {
    let t = client
        .send(call)
        .map_err(|e| format!("{} {}: {e}", call.method, call.url))?;
    if t.status != 200 {
        return Err(format!(
            "{} {}: status {}: {}",
            call.method,
            call.url,
            t.status,
            String::from_utf8_lossy(&t.body).chars().take(300).collect::<String>()
        ));
    }
    let v = value_of(&t, metric).ok_or_else(|| {
        format!(
            "{} {}: no content event in the stream: {}",
            call.method,
            call.url,
            String::from_utf8_lossy(&t.body).chars().take(300).collect::<String>()
        )
    })?;
    Ok((v, t))
}

/// CPU time (ns) the given processes have used so far: the sum over their threads.
fn cpu_ns(pids: &[u32]) -> Option<u64> {
    if pids.is_empty() {
        return None;
    }
    let mut total = 0u64;
    for pid in pids {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
            total += text
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Some(total)
}

struct PairSpec<'a> {
    name: &'a str,
    /// Through the gateway (A).
    through: &'a Call,
    /// Straight to the upstream (B), when there is a baseline.
    direct: Option<&'a Call>,
    metric: Metric,
    concurrency: usize,
    /// Idle time after each measured pair (lets work the Worker left in `wait_until` finish).
    gap_ms: u64,
}

/// Interleaved pairs A, B, A, B … on `concurrency` threads (each with its own keep-alive
/// connections), after a warm-up; the CPU of `cpu_pids` is read across the measured part only.
fn measure(o: &Opts, spec: &PairSpec) -> Result<Value, String> {
    if o.skip.iter().any(|s| s == spec.name) {
        eprintln!("  {}: skipped (--skip)", spec.name);
        return Ok(serde_json::json!({"name": spec.name, "skipped": true}));
    }
    let conc = spec.concurrency.max(1);
    let gap_ms = spec.gap_ms.max(o.gap_ms);
    let per_thread = o.pairs.div_ceil(conc);
    let warm_per_thread = o.warmup.div_ceil(conc).max(20);
    let start_line = Barrier::new(conc + 1);
    let finish_line = Barrier::new(conc + 1);
    eprintln!(
        "  {}: {} pairs on {conc} connection(s) after {} warm-up …",
        spec.name,
        per_thread * conc,
        warm_per_thread * conc
    );
    let (results, cpu) = std::thread::scope(|s| {
        let handles: Vec<_> = (0..conc)
            .map(|_| {
                s.spawn(|| {
                    let mut client = Client::new(Duration::from_secs(120));
                    let mut errors: Vec<String> = Vec::new();
                    let one = |client: &mut Client, call: &Call, errors: &mut Vec<String>| match checked(
                        client,
                        call,
                        spec.metric,
                    ) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            errors.push(e);
                            None
                        }
                    };
                    for _ in 0..warm_per_thread {
                        one(&mut client, spec.through, &mut errors);
                        if let Some(d) = spec.direct {
                            one(&mut client, d, &mut errors);
                        }
                    }
                    let warm_errors = errors.len();
                    start_line.wait();
                    let mut pairs: Vec<(f64, Option<f64>)> = Vec::with_capacity(per_thread);
                    for _ in 0..per_thread {
                        let a = one(&mut client, spec.through, &mut errors);
                        let b = spec.direct.map(|d| one(&mut client, d, &mut errors));
                        match (a, b) {
                            (Some(a), None) => pairs.push((a, None)),
                            (Some(a), Some(Some(b))) => pairs.push((a, Some(b))),
                            _ => {}
                        }
                        if gap_ms > 0 {
                            std::thread::sleep(Duration::from_millis(gap_ms));
                        }
                    }
                    finish_line.wait();
                    (pairs, errors, warm_errors)
                })
            })
            .collect();
        start_line.wait();
        let cpu0 = cpu_ns(&o.cpu_pids);
        finish_line.wait();
        let cpu1 = cpu_ns(&o.cpu_pids);
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        (results, cpu0.zip(cpu1))
    });
    let mut through = Vec::new();
    let mut direct = Vec::new();
    let mut deltas = Vec::new();
    let mut errors = Vec::new();
    let mut warm_errors = 0;
    for r in results {
        let (pairs, errs, warm) = r.map_err(|_| "a measuring thread panicked".to_string())?;
        for (a, b) in pairs {
            through.push(a);
            if let Some(b) = b {
                direct.push(b);
                deltas.push(a - b);
            }
        }
        errors.extend(errs);
        warm_errors += warm;
    }
    let attempted = per_thread * conc;
    if through.len() < attempted / 2 {
        return Err(format!(
            "{}: {} of {attempted} pairs failed; first error: {}",
            spec.name,
            attempted - through.len(),
            errors.first().map(String::as_str).unwrap_or("?")
        ));
    }
    let through_p = Pct::of(&through);
    let mut row = json!({
        "name": spec.name,
        "concurrency": conc,
        "gap_ms": gap_ms,
        "pairs": through.len(),
        "errors": errors.len() - warm_errors,
        "warmup_errors": warm_errors,
        "through": through_p.to_json(),
    });
    if let Some(e) = errors.first() {
        row["first_error"] = json!(e);
    }
    if !direct.is_empty() {
        let direct_p = Pct::of(&direct);
        row["direct"] = direct_p.to_json();
        row["added"] = through_p.minus(&direct_p).to_json();
        row["paired"] = Pct::of(&deltas).to_json();
    }
    if let Some((c0, c1)) = cpu {
        row["cpu_ms_per_request"] = json!(c1.saturating_sub(c0) as f64 / 1e6 / through.len().max(1) as f64);
    }
    Ok(row)
}

// ---------------------------------------------------------------------------------------------
// Modes

/// The pause after each pair of the "idle" measurement: long enough for the writes a request
/// leaves in `wait_until` to finish before the next one starts.
const IDLE_GAP_MS: u64 = 25;

fn chat_body(model: &str, stream: bool) -> Value {
    json!({"model": model, "stream": stream, "messages": [{"role": "user", "content": "Say hello"}]})
}

fn json_headers(key: Option<&str>) -> Vec<(String, String)> {
    let mut h = vec![("content-type".to_string(), "application/json".to_string())];
    if let Some(k) = key {
        h.push(("authorization".to_string(), format!("Bearer {k}")));
    }
    h
}

/// A label for mock paths and catalog ids that no earlier run used.
fn unique(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() % 1_000_000_000_000)
        .unwrap_or(0);
    format!("{prefix}{}x{nanos:x}", std::process::id())
}

/// An API base URL (OpenAI convention): `…/chat/completions` is appended unless already there.
fn chat_url(base: &str) -> Result<Url, String> {
    let u = Url::parse(base)?;
    Ok(if u.path.ends_with("/chat/completions") {
        u
    } else {
        u.join("/chat/completions")
    })
}

struct Admin {
    base: Url,
    token: String,
    client: Client,
}

impl Admin {
    /// An admin call (`body` null: none) that must answer `want`: its JSON.
    fn call(&mut self, method: &'static str, path: &str, body: Value, want: u16) -> Result<Value, String> {
        self.timed(method, path, body, want).map(|(_, v)| v)
    }

    /// [`Admin::call`], with how long it took (ms, the whole answer read).
    fn timed(&mut self, method: &'static str, path: &str, body: Value, want: u16) -> Result<(f64, Value), String> {
        let call = Call {
            method,
            url: self.base.join(path),
            headers: json_headers(Some(&self.token)),
            body: match body.is_null() {
                true => Vec::new(),
                false => body.to_string().into_bytes(),
            },
            sse: false,
        };
        let t = self.client.send(&call).map_err(|e| format!("{method} {path}: {e}"))?;
        if t.status != want {
            return Err(format!(
                "{method} {path}: status {} (wanted {want}): {}",
                t.status,
                String::from_utf8_lossy(&t.body)
            ));
        }
        Ok((t.total_ms, serde_json::from_slice(&t.body).unwrap_or(Value::Null)))
    }

    /// A new account credited `usd`, and a key of it: (the account as created, the key).
    fn funded_key(&mut self, usd: f64) -> Result<(Value, String), String> {
        let account = self.call("POST", "/admin/accounts", json!({}), 201)?;
        let id = account["id"].as_str().ok_or("POST /admin/accounts: no id")?.to_string();
        self.call(
            "POST",
            &format!("/admin/accounts/{id}/credit"),
            json!({ "amount_usd": usd }),
            200,
        )?;
        let key = self.call("POST", "/admin/keys", json!({"account_id": id}), 201)?;
        let key = key["key"].as_str().ok_or("POST /admin/keys: no key")?.to_string();
        Ok((account, key))
    }

    /// A model `<label>-<name>` of one route on its own mock provider (`<mock>/<label>-p<name>/
    /// <scenario>`), serving `api`, priced 1/2 µ$ a token: its id.
    fn mock_model(&mut self, mock: &str, label: &str, name: &str, scenario: &str, api: &str) -> Result<String, String> {
        let provider = format!("{label}-p{name}");
        self.call(
            "PUT",
            &format!("/admin/providers/{provider}"),
            json!({"base_url": format!("{mock}/{provider}/{scenario}"), "auth": "bearer"}),
            200,
        )?;
        let id = format!("{label}-{name}");
        let route = json!({"id": "r0", "provider": provider, "upstream_model": "u", "apis": [api],
                           "price": {"input_per_mtok": 1, "output_per_mtok": 2}});
        self.call(
            "PUT",
            &format!("/admin/models/{id}"),
            json!({"context_window": 8192, "max_output_tokens": 1024, "routes": [route]}),
            200,
        )?;
        Ok(id)
    }
}

fn machine_info() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    json!({"cpu": cpu, "cores": cores, "loadavg_at_start": load})
}

/// A pair measured back to back, without a pause.
fn spec<'a>(
    name: &'static str,
    through: &'a Call,
    direct: &'a Call,
    metric: Metric,
    concurrency: usize,
) -> PairSpec<'a> {
    PairSpec {
        name,
        through,
        direct: Some(direct),
        metric,
        concurrency,
        gap_ms: 0,
    }
}

fn gateway_mode(o: &Opts) -> Result<Value, String> {
    let gw = Url::parse(need(&o.gateway, "--gateway")?)?;
    let mock = need(&o.mock, "--mock")?.trim_end_matches('/').to_string();
    let mut admin = Admin {
        base: gw.clone(),
        token: need(&o.admin_token, "--admin-token")?.to_string(),
        client: Client::new(Duration::from_secs(60)),
    };
    let machine = machine_info();
    let label = unique("sybench");
    eprintln!("switchyard-bench: setting up the catalog on {gw} (mock label {label})");
    let provider = |admin: &mut Admin, id: &str, scenario: &str| {
        admin.call(
            "PUT",
            &format!("/admin/providers/{id}"),
            json!({"base_url": format!("{mock}/{label}-{id}/{scenario}"), "auth": "bearer"}),
            200,
        )
    };
    let route = |id: &str, provider: &str| {
        json!({"id": id, "provider": provider, "upstream_model": "u", "apis": ["chat"],
               "price": {"input_per_mtok": 1, "output_per_mtok": 2}})
    };
    let p_ok = format!("{label}-pok");
    let p_200 = format!("{label}-p200");
    let p_hang = format!("{label}-phang");
    provider(&mut admin, &p_ok, "ok")?;
    provider(&mut admin, &p_200, "chunks/200/0")?;
    let p_2000 = format!("{label}-p2000");
    provider(&mut admin, &p_2000, "chunks/2000/0")?;
    provider(&mut admin, &p_hang, "hang")?;
    let m_ok = format!("{label}-ok");
    let m_200 = format!("{label}-200");
    let m_2000 = format!("{label}-2000");
    let m_out = format!("{label}-outage");
    let m_capped = format!("{label}-capped");
    let m_spread = format!("{label}-spread");
    let m_translated = format!("{label}-translated");
    let model = |routes: Vec<Value>, policy: Option<Value>| {
        let mut m = json!({"context_window": 8192, "max_output_tokens": 1024, "routes": routes});
        if let Some(p) = policy {
            m["policy"] = p;
        }
        m
    };
    admin.call(
        "PUT",
        &format!("/admin/models/{m_ok}"),
        model(vec![route("r0", &p_ok)], None),
        200,
    )?;
    admin.call(
        "PUT",
        &format!("/admin/models/{m_200}"),
        model(vec![route("r0", &p_200)], None),
        200,
    )?;
    admin.call(
        "PUT",
        &format!("/admin/models/{m_2000}"),
        model(vec![route("r0", &p_2000)], None),
        200,
    )?;
    admin.call(
        "PUT",
        &format!("/admin/models/{m_out}"),
        model(
            vec![route("r0", &p_hang), route("r1", &p_ok)],
            Some(json!({"stream_first_content_ms": o.outage_deadline_ms})),
        ),
        200,
    )?;
    // SPEC §10: a capped route whose cap never binds, for the capacity cost.
    let mut capped_route = route("r0", &p_ok);
    capped_route["max_concurrency"] = json!(100_000);
    admin.call(
        "PUT",
        &format!("/admin/models/{m_capped}"),
        model(vec![capped_route], None),
        200,
    )?;
    // SPEC §19: a chat client on a route that speaks only Anthropic Messages (the same mock
    // provider): the request and every event translated.
    let mut messages_route = route("r0", &p_ok);
    messages_route["apis"] = json!(["messages"]);
    admin.call(
        "PUT",
        &format!("/admin/models/{m_translated}"),
        model(vec![messages_route], None),
        200,
    )?;
    // A 200-chunk stream from a Messages route to a chat client: every event translated.
    let m_200_translated = format!("{label}-200-translated");
    let mut messages_200 = route("r0", &p_200);
    messages_200["apis"] = json!(["messages"]);
    admin.call(
        "PUT",
        &format!("/admin/models/{m_200_translated}"),
        model(vec![messages_200], None),
        200,
    )?;
    // SPEC §8a: three routes spread by conversation (all over the same mock provider).
    let mut spread = model(vec![route("r0", &p_ok), route("r1", &p_ok), route("r2", &p_ok)], None);
    spread["balance"] = json!("spread");
    admin.call("PUT", &format!("/admin/models/{m_spread}"), spread, 200)?;
    let (account, key) = admin.funded_key(1000.0)?;
    let account_id = account["id"].as_str().ok_or("POST /admin/accounts: no id")?.to_string();
    // SPEC §10: a key whose limits never bind, for the per-key limit cost.
    let limited = admin.call(
        "POST",
        "/admin/keys",
        json!({"account_id": account_id, "rpm": 10_000_000, "max_concurrent": 100_000}),
        201,
    )?;
    let limited = limited["key"].as_str().ok_or("POST /admin/keys: no key")?.to_string();

    let through_url = gw.join("/v1/chat/completions");
    let through = |model: &str, stream: bool| {
        Call::post_json(
            through_url.clone(),
            json_headers(Some(&key)),
            &chat_body(model, stream),
            stream,
        )
    };
    let direct = |provider: &str, scenario: &str, stream: bool| -> Result<Call, String> {
        Ok(Call::post_json(
            Url::parse(&format!("{mock}/{label}-{provider}/{scenario}/chat/completions"))?,
            json_headers(None),
            &chat_body("u", stream),
            stream,
        ))
    };
    let a_ok = through(&m_ok, false);
    let a_limited = Call::post_json(
        through_url.clone(),
        json_headers(Some(&limited)),
        &chat_body(&m_ok, false),
        false,
    );
    let a_capped = through(&m_capped, false);
    let mut spread_headers = json_headers(Some(&key));
    spread_headers.push(("x-switchyard-session".to_string(), "bench-conversation".to_string()));
    let a_spread = Call::post_json(through_url.clone(), spread_headers, &chat_body(&m_spread, false), false);
    let b_ok = direct(&p_ok, "ok", false)?;
    let a_ok_s = through(&m_ok, true);
    let a_translated = through(&m_translated, false);
    let a_translated_s = through(&m_translated, true);
    let b_ok_s = direct(&p_ok, "ok", true)?;
    let a_200 = through(&m_200, true);
    let a_200_translated = through(&m_200_translated, true);
    let b_200 = direct(&p_200, "chunks/200/0", true)?;
    let a_2000 = through(&m_2000, true);
    let b_2000 = direct(&p_2000, "chunks/2000/0", true)?;

    // One of each first: a broken setup fails here, loudly, not as 1000 errors. A measurement
    // left out (`--skip`, e.g. translation against a build from before it) is not tried.
    let mut probe = Client::new(Duration::from_secs(60));
    for (row, call, metric) in [
        ("nonstream_c1", &a_ok, Metric::Total),
        ("nonstream_c1_limited_key", &a_limited, Metric::Total),
        ("nonstream_c1_capped_route", &a_capped, Metric::Total),
        ("nonstream_c1_spread", &a_spread, Metric::Total),
        ("stream_ttfc", &a_ok_s, Metric::FirstContent),
        ("stream_200_total", &a_200, Metric::FirstContent),
        ("nonstream_c1_translated", &a_translated, Metric::Total),
        ("stream_ttfc_translated", &a_translated_s, Metric::FirstContent),
        ("stream_200_total_translated", &a_200_translated, Metric::FirstContent),
    ] {
        if !o.skip.iter().any(|s| s == row) {
            checked(&mut probe, call, metric)?;
        }
    }

    eprintln!("switchyard-bench: measuring");
    let rows = vec![
        measure(o, &spec("nonstream_c1", &a_ok, &b_ok, Metric::Total, 1))?,
        measure(
            o,
            &spec("nonstream_c1_limited_key", &a_limited, &b_ok, Metric::Total, 1),
        )?,
        measure(
            o,
            &spec("nonstream_c1_capped_route", &a_capped, &b_ok, Metric::Total, 1),
        )?,
        measure(o, &spec("nonstream_c1_spread", &a_spread, &b_ok, Metric::Total, 1))?,
        measure(
            o,
            &PairSpec {
                name: "nonstream_c1_idle",
                through: &a_ok,
                direct: Some(&b_ok),
                metric: Metric::Total,
                concurrency: 1,
                gap_ms: IDLE_GAP_MS,
            },
        )?,
        measure(o, &spec("nonstream_c8", &a_ok, &b_ok, Metric::Total, 8))?,
        measure(o, &spec("stream_ttfc", &a_ok_s, &b_ok_s, Metric::FirstContent, 1))?,
        measure(
            o,
            &spec("nonstream_c1_translated", &a_translated, &b_ok, Metric::Total, 1),
        )?,
        measure(
            o,
            &spec(
                "stream_ttfc_translated",
                &a_translated_s,
                &b_ok_s,
                Metric::FirstContent,
                1,
            ),
        )?,
        measure(o, &spec("stream_200_total", &a_200, &b_200, Metric::Total, 1))?,
        measure(
            o,
            &spec(
                "stream_200_total_translated",
                &a_200_translated,
                &b_200,
                Metric::Total,
                1,
            ),
        )?,
        measure(o, &spec("stream_2000_total", &a_2000, &b_2000, Metric::Total, 1))?,
    ];
    let outage = outage(o, &through(&m_out, true), &a_ok_s, &gw, &key)?;
    Ok(json!({
        "mode": "gateway",
        "label": o.label.clone().unwrap_or_else(|| "gateway".into()),
        "gateway": gw.to_string(),
        "machine": machine,
        "rows": rows,
        "outage": outage,
        "cpu_measured": !o.cpu_pids.is_empty(),
    }))
}

/// The outage case: `n` sequential stream requests to a model whose first route (`r0`) hangs, each
/// followed by one to a healthy model (same run, same conditions). Which requests waited for the
/// dead route is read afterwards from the gateway's own record (`GET /v1/generation`: an attempt at
/// `r0`), off the timed path; if that is unavailable, a request that took at least half the
/// first-content deadline counts as having waited.
fn outage(o: &Opts, dead: &Call, healthy: &Call, gw: &Url, key: &str) -> Result<Value, String> {
    eprintln!(
        "  outage: {} sequential requests, first route hangs, deadline {} ms …",
        o.outage_requests, o.outage_deadline_ms
    );
    let mut client = Client::new(Duration::from_secs(120));
    let mut dead_ms = Vec::new();
    let mut generations = Vec::new();
    let mut healthy_ms = Vec::new();
    let mut errors = Vec::new();
    for _ in 0..o.outage_requests {
        match checked_timing(&mut client, dead, Metric::Total) {
            Ok((v, t)) => {
                dead_ms.push(v);
                generations.push(t.generation_id);
            }
            Err(e) => {
                errors.push(e);
                dead_ms.push(f64::NAN);
                generations.push(None);
            }
        }
        match checked(&mut client, healthy, Metric::Total) {
            Ok(v) => healthy_ms.push(v),
            Err(e) => errors.push(e),
        }
    }
    // Ask the gateway which requests made an attempt at the dead route.
    let threshold = o.outage_deadline_ms as f64 / 2.0;
    let mut classified_by = "the gateway's generation records (an attempt at the dead route)";
    let mut tried_dead: Vec<Option<bool>> = generations
        .iter()
        .map(|g| g.as_ref().and_then(|id| tried_route(&mut client, gw, key, id, "r0")))
        .collect();
    if tried_dead.iter().any(Option::is_none) {
        classified_by = "latency (at least half the deadline)";
        tried_dead = dead_ms.iter().map(|&v| Some(v >= threshold)).collect();
    }
    let paid: Vec<usize> = (0..dead_ms.len())
        .filter(|&i| dead_ms[i].is_finite() && tried_dead[i] == Some(true))
        .collect();
    let unpaid: Vec<usize> = (0..dead_ms.len())
        .filter(|&i| dead_ms[i].is_finite() && tried_dead[i] == Some(false))
        .collect();
    let pick = |idx: &[usize]| idx.iter().map(|&i| dead_ms[i]).collect::<Vec<_>>();
    let paid_ms = pick(&paid);
    let unpaid_ms = pick(&unpaid);
    let healthy_p = Pct::of(&healthy_ms);
    let mut v = json!({
        "requests": o.outage_requests,
        "deadline_ms": o.outage_deadline_ms,
        "errors": errors.len(),
        "classified_by": classified_by,
        "paid_deadline": {
            "n": paid.len(),
            // 1-based request numbers, so "1–3" reads as the first three requests.
            "requests": paid.iter().map(|i| i + 1).collect::<Vec<_>>(),
            "total": Pct::of(&paid_ms).to_json(),
        },
        "after_demotion": {
            "n": unpaid.len(),
            "total": Pct::of(&unpaid_ms).to_json(),
            // Requests that did not try the dead route but still took half the deadline or more
            // (the runtime's own stalls).
            "slow": unpaid.iter().filter(|&&i| dead_ms[i] >= threshold).map(|i| i + 1).collect::<Vec<_>>(),
        },
        "healthy": {"n": healthy_ms.len(), "total": healthy_p.to_json()},
    });
    if !unpaid_ms.is_empty() {
        v["after_demotion"]["added_vs_healthy"] = Pct::of(&unpaid_ms).minus(&healthy_p).to_json();
    }
    if let Some(e) = errors.first() {
        v["first_error"] = json!(e);
    }
    Ok(v)
}

/// Whether generation `id` made an attempt at `route`, from `GET /v1/generation` (written after
/// the answer: retried for up to 5 s). `None` when the gateway cannot say.
fn tried_route(client: &mut Client, gw: &Url, key: &str, id: &str, route: &str) -> Option<bool> {
    let call = Call {
        method: "GET",
        url: gw.join(&format!("/v1/generation?id={id}")),
        headers: vec![("authorization".to_string(), format!("Bearer {key}"))],
        body: Vec::new(),
        sse: false,
    };
    for _ in 0..50 {
        let t = client.send(&call).ok()?;
        match t.status {
            200 => {
                let v: Value = serde_json::from_slice(&t.body).ok()?;
                let attempts = v["attempts"].as_array()?;
                return Some(attempts.iter().any(|a| a["route"] == route));
            }
            404 => std::thread::sleep(Duration::from_millis(100)),
            _ => return None,
        }
    }
    None
}

/// A floor: the worker-rs echo proxy (`full`: with its relay and D1 variants) or the plain JS
/// floors (`bench/js-echo`: `/_echo`, the pass-through, and its `/relay` and `/tee` streams).
fn echo_mode(o: &Opts, full: bool) -> Result<Value, String> {
    let echo = need(&o.echo, "--echo")?.trim_end_matches('/').to_string();
    let mock = need(&o.mock, "--mock")?.trim_end_matches('/').to_string();
    let label = unique("sybench-echo");
    let machine = machine_info();
    // `prefix`: the floor's mode ("" pass-through, "/relay" chunk by chunk, "/tee" batched).
    let pair = |path: &str, stream: bool, prefix: &str| -> Result<(Call, Call), String> {
        let body = chat_body("u", stream);
        Ok((
            Call::post_json(
                Url::parse(&format!("{echo}{prefix}{path}"))?,
                json_headers(None),
                &body,
                stream,
            ),
            Call::post_json(Url::parse(&format!("{mock}{path}"))?, json_headers(None), &body, stream),
        ))
    };
    let (a_ok, b_ok) = pair(&format!("/{label}/ok/chat/completions"), false, "")?;
    let (a_ok_s, b_ok_s) = pair(&format!("/{label}/ok/chat/completions"), true, "")?;
    let (a_bg, a_fg) = (
        pair(&format!("/bg/{label}/ok/chat/completions"), false, "")?.0,
        pair(&format!("/fg/{label}/ok/chat/completions"), false, "")?.0,
    );
    let path_200 = format!("/{label}-200/chunks/200/0/chat/completions");
    let path_2000 = format!("/{label}-2000/chunks/2000/0/chat/completions");
    let (a_200, b_200) = pair(&path_200, true, "")?;
    let (a_200r, _) = pair(&path_200, true, "/relay")?;
    let (a_2000, b_2000) = pair(&path_2000, true, "")?;
    let (a_2000r, _) = pair(&path_2000, true, "/relay")?;
    let (a_200t, _) = pair(&path_200, true, "/tee")?;
    let (a_2000t, _) = pair(&path_2000, true, "/tee")?;
    let get = |url: String| -> Result<Call, String> {
        Ok(Call {
            method: "GET",
            url: Url::parse(&url)?,
            headers: Vec::new(),
            body: Vec::new(),
            sse: false,
        })
    };
    let a_bare = get(format!("{echo}/_echo"))?;
    let b_bare = get(format!("{mock}/_health"))?;
    let mut probe = Client::new(Duration::from_secs(60));
    let mut probes = vec![
        (&a_ok, Metric::Total),
        (&a_ok_s, Metric::FirstContent),
        (&a_bare, Metric::Total),
    ];
    probes.push((&a_200r, Metric::FirstContent));
    if full {
        probes.push((&a_fg, Metric::Total));
    } else {
        probes.push((&a_200t, Metric::FirstContent));
    }
    for (call, metric) in probes {
        checked(&mut probe, call, metric)?;
    }
    eprintln!("switchyard-bench: measuring the echo worker");
    let mut rows = vec![
        measure(o, &spec("no_subrequest", &a_bare, &b_bare, Metric::Total, 1))?,
        measure(o, &spec("nonstream_c1", &a_ok, &b_ok, Metric::Total, 1))?,
        measure(o, &spec("nonstream_c8", &a_ok, &b_ok, Metric::Total, 8))?,
    ];
    if full {
        rows.extend([
            measure(o, &spec("nonstream_c1_bgwrites", &a_bg, &b_ok, Metric::Total, 1))?,
            measure(o, &spec("nonstream_c8_bgwrites", &a_bg, &b_ok, Metric::Total, 8))?,
            measure(o, &spec("nonstream_c1_fgwrites", &a_fg, &b_ok, Metric::Total, 1))?,
        ]);
    }
    rows.extend([
        measure(o, &spec("stream_ttfc", &a_ok_s, &b_ok_s, Metric::FirstContent, 1))?,
        measure(o, &spec("stream_200_total", &a_200, &b_200, Metric::Total, 1))?,
        measure(o, &spec("stream_2000_total", &a_2000, &b_2000, Metric::Total, 1))?,
    ]);
    rows.push(measure(
        o,
        &spec("stream_200_total_relay", &a_200r, &b_200, Metric::Total, 1),
    )?);
    if !full {
        // The JS floor's other two ways through a stream (bench/js-echo): every chunk read in JS,
        // and the native pipe with batched inspection beside it.
        rows.extend([
            measure(o, &spec("stream_2000_total_relay", &a_2000r, &b_2000, Metric::Total, 1))?,
            measure(o, &spec("stream_200_total_tee", &a_200t, &b_200, Metric::Total, 1))?,
            measure(o, &spec("stream_2000_total_tee", &a_2000t, &b_2000, Metric::Total, 1))?,
        ]);
    }
    Ok(json!({
        "mode": if full { "echo" } else { "js-echo" },
        "label": o.label.clone().unwrap_or_else(|| "echo".into()),
        "gateway": echo,
        "machine": machine,
        "rows": rows,
        "cpu_measured": !o.cpu_pids.is_empty(),
    }))
}

fn target_mode(o: &Opts) -> Result<Value, String> {
    let target = chat_url(need(&o.target, "--target")?)?;
    let key = need(&o.key, "--key")?;
    let model = need(&o.model, "--model")?;
    let machine = machine_info();
    let a = Call::post_json(target.clone(), json_headers(Some(key)), &chat_body(model, false), false);
    let b = match &o.direct {
        Some(d) => Some(Call::post_json(
            chat_url(d)?,
            json_headers(None),
            &chat_body(model, false),
            false,
        )),
        None => None,
    };
    let mut probe = Client::new(Duration::from_secs(60));
    checked(&mut probe, &a, Metric::Total)?;
    if let Some(b) = &b {
        checked(&mut probe, b, Metric::Total)?;
    }
    eprintln!("switchyard-bench: measuring {target}");
    let mut rows = Vec::new();
    for (name, concurrency) in [("nonstream_c1", 1), ("nonstream_c8", 8)] {
        rows.push(measure(
            o,
            &PairSpec {
                name,
                through: &a,
                direct: b.as_ref(),
                metric: Metric::Total,
                concurrency,
                gap_ms: 0,
            },
        )?);
    }
    Ok(json!({
        "mode": "target",
        "label": o.label.clone().unwrap_or_else(|| target.to_string()),
        "gateway": target.to_string(),
        "machine": machine,
        "rows": rows,
        "cpu_measured": !o.cpu_pids.is_empty(),
    }))
}
