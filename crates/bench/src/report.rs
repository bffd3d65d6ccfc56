//! Markdown tables from result files: the added latencies side by side (one column per run), the
//! absolute figures behind them, and the targets checked against the primary run.

use serde_json::Value;

/// A millisecond figure with the precision it deserves.
fn ms(v: &Value) -> String {
    match v.as_f64() {
        None => "—".into(),
        Some(x) if x.abs() < 10.0 => format!("{x:.2}"),
        Some(x) if x.abs() < 100.0 => format!("{x:.1}"),
        Some(x) => format!("{x:.0}"),
    }
}

fn signed(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x >= 0.0 => format!("+{}", ms(v)),
        _ => ms(v),
    }
}

fn triple(p: &Value) -> String {
    if p.is_null() {
        return "—".into();
    }
    format!("{} / {} / {}", ms(&p["p50"]), ms(&p["p90"]), ms(&p["p99"]))
}

fn row<'a>(run: &'a Value, name: &str) -> Option<&'a Value> {
    run["rows"].as_array()?.iter().find(|r| r["name"] == name)
}

fn pct_over(through: f64, direct: f64) -> f64 {
    (through / direct - 1.0) * 100.0
}

/// "+7.9 % (6.10 vs 5.65 ms)" for a total-time row.
fn relative(r: &Value) -> String {
    let (Some(a), Some(b)) = (r["through"]["p50"].as_f64(), r["direct"]["p50"].as_f64()) else {
        return "—".into();
    };
    format!(
        "{:+.1} % ({} vs {} ms)",
        pct_over(a, b),
        ms(&r["through"]["p50"]),
        ms(&r["direct"]["p50"])
    )
}

/// [1,2,3,57] → "#1–#3, #57".
fn ranges(nums: &[u64]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < nums.len() {
        let mut j = i;
        while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            format!("#{}", nums[i])
        } else {
            format!("#{}–#{}", nums[i], nums[j])
        });
        i = j + 1;
    }
    if parts.len() > 8 {
        let more = parts.len() - 8;
        parts.truncate(8);
        parts.push(format!("… {more} more"));
    }
    parts.join(", ")
}

fn outage_cell(run: &Value, part: &str) -> String {
    let o = &run["outage"];
    if o.is_null() {
        return "—".into();
    }
    let total = o["requests"].as_u64().unwrap_or(0);
    match part {
        "paid" => {
            let p = &o["paid_deadline"];
            let n = p["n"].as_u64().unwrap_or(0);
            if n == 0 {
                return format!("0 of {total}");
            }
            let nums: Vec<u64> = p["requests"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            format!(
                "{n} of {total} ({}): p50 {} / p99 {} ms",
                ranges(&nums),
                ms(&p["total"]["p50"]),
                ms(&p["total"]["p99"])
            )
        }
        "after" => {
            let p = &o["after_demotion"];
            let n = p["n"].as_u64().unwrap_or(0);
            if n == 0 {
                return format!("none: all {total} waited for the dead route");
            }
            let slow: Vec<u64> = p["slow"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_u64).collect())
                .unwrap_or_default();
            let mut cell = format!(
                "{n}: p50 {} / p99 {} ms",
                ms(&p["total"]["p50"]),
                ms(&p["total"]["p99"])
            );
            if !slow.is_empty() {
                cell.push_str(&format!(
                    " ({} slow without touching the dead route: {})",
                    slow.len(),
                    ranges(&slow)
                ));
            }
            cell
        }
        "healthy" => format!(
            "p50 {} / p99 {} ms",
            ms(&o["healthy"]["total"]["p50"]),
            ms(&o["healthy"]["total"]["p99"])
        ),
        "added" => {
            let a = &o["after_demotion"]["added_vs_healthy"];
            if a.is_null() {
                return "—".into();
            }
            format!("p50 {} / p99 {} ms", signed(&a["p50"]), signed(&a["p99"]))
        }
        _ => "—".into(),
    }
}

fn cpu_cell(run: &Value) -> String {
    if run["cpu_measured"] != true {
        return "not measured".into();
    }
    cpu_of(run, &["nonstream_c1", "stream_ttfc", "stream_200_total"])
}

/// The runtime's CPU per request of each named row, "a · b ms" ("—" when none was measured).
fn cpu_of(run: &Value, names: &[&str]) -> String {
    let parts: Vec<String> = names
        .iter()
        .map(|n| row(run, n).map_or("—".into(), |r| ms(&r["cpu_ms_per_request"])))
        .collect();
    if parts.iter().all(|p| p == "—") {
        return "—".into();
    }
    format!("{} ms", parts.join(" · "))
}

fn table_line(cells: &[String]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

pub fn render(runs: &[Value], primary: usize) -> String {
    let mut out = String::new();
    let labels: Vec<String> = runs
        .iter()
        .map(|r| r["label"].as_str().unwrap_or("?").to_string())
        .collect();
    let mut head = vec!["measurement".to_string()];
    head.extend(labels.iter().cloned());
    out.push_str("Added latency = through − direct, in ms, p50 / p90 / p99 (percentile of the through side minus the same percentile of the direct side, interleaved pairs).\n\n");
    out.push_str(&table_line(&head));
    out.push_str(&table_line(&vec!["---".to_string(); head.len()]));
    let added = |name: &str| -> Vec<String> {
        runs.iter()
            .map(|r| row(r, name).map_or("—".into(), |r| triple(&r["added"])))
            .collect()
    };
    let rel =
        |name: &str| -> Vec<String> { runs.iter().map(|r| row(r, name).map_or("—".into(), relative)).collect() };
    let lines: Vec<(&str, Vec<String>)> = vec![
        ("non-stream, concurrency 1: added", added("nonstream_c1")),
        (
            "the same, a key with `rpm` and `max_concurrent` that never bind (SPEC §10): added",
            added("nonstream_c1_limited_key"),
        ),
        (
            "the same, a model whose route has `max_concurrency` that never binds: added",
            added("nonstream_c1_capped_route"),
        ),
        (
            "the same, a `balance: \"spread\"` model of three routes, one conversation (SPEC §8a): added",
            added("nonstream_c1_spread"),
        ),
        (
            "non-stream, concurrency 1, 25 ms idle after each pair (background work drained): added",
            added("nonstream_c1_idle"),
        ),
        ("non-stream, concurrency 8: added", added("nonstream_c8")),
        ("stream: added time to first content", added("stream_ttfc")),
        (
            "non-stream, concurrency 1, a chat client on a Messages route (translated, SPEC §19): added",
            added("nonstream_c1_translated"),
        ),
        (
            "stream, the same translated: added time to first content",
            added("stream_ttfc_translated"),
        ),
        (
            "stream of 200 chunks: total time through vs direct (p50)",
            rel("stream_200_total"),
        ),
        (
            "the same 200 chunks from a Messages route to a chat client (every event translated): total vs direct (p50)",
            rel("stream_200_total_translated"),
        ),
        (
            "stream of 2,000 chunks: total time through vs direct (p50)",
            rel("stream_2000_total"),
        ),
        (
            "stream of 200 chunks, every chunk read by the Worker (echo proxy: in Rust; JS floor: in JS, `/relay`): total vs direct (p50)",
            rel("stream_200_total_relay"),
        ),
        (
            "the same, 2,000 chunks",
            rel("stream_2000_total_relay"),
        ),
        (
            "stream of 200 chunks piped natively, a `tee()` branch read in 64 KiB batches (JS floor `/tee`): total vs direct (p50)",
            rel("stream_200_total_tee"),
        ),
        (
            "the same, 2,000 chunks",
            rel("stream_2000_total_tee"),
        ),
        (
            "no subrequest (Worker answers itself vs mock `/_health`): added",
            added("no_subrequest"),
        ),
        (
            "non-stream + Switchyard's D1 write pattern (2 batches, 8 statements) in wait_until, concurrency 1: added",
            added("nonstream_c1_bgwrites"),
        ),
        ("the same, concurrency 8: added", added("nonstream_c8_bgwrites")),
        (
            "non-stream + the same 2 D1 batches awaited before the subrequest: added",
            added("nonstream_c1_fgwrites"),
        ),
        (
            "outage: requests that waited for the dead route (total time)",
            runs.iter().map(|r| outage_cell(r, "paid")).collect(),
        ),
        (
            "outage: requests that did not (route demoted), total time",
            runs.iter().map(|r| outage_cell(r, "after")).collect(),
        ),
        (
            "outage: healthy model in the same run, total time",
            runs.iter().map(|r| outage_cell(r, "healthy")).collect(),
        ),
        (
            "outage: after demotion, added vs the healthy model",
            runs.iter().map(|r| outage_cell(r, "added")).collect(),
        ),
        (
            "CPU time of the runtime process per request (non-stream · stream TTFC · 200-chunk stream)",
            runs.iter().map(cpu_cell).collect(),
        ),
        (
            "CPU time per 200-chunk stream, every chunk read · batched beside a native pipe",
            runs.iter().map(|r| cpu_of(r, &["stream_200_total_relay", "stream_200_total_tee"])).collect(),
        ),
    ];
    for (name, cells) in lines {
        if cells.iter().all(|c| c == "—") {
            continue;
        }
        let mut line = vec![name.to_string()];
        line.extend(cells);
        out.push_str(&table_line(&line));
    }

    out.push_str(
        "\nAbsolute latencies in ms, p50 / p90 / p99 (\"paired\" = percentiles of the per-pair difference A − B).\n\n",
    );
    out.push_str("| run | measurement | direct (B) | through (A) | paired A − B | pairs | errors |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for (run, label) in runs.iter().zip(&labels) {
        for r in run["rows"].as_array().into_iter().flatten() {
            if r["skipped"] == true {
                let name = r["name"].as_str().unwrap_or("?").to_string();
                out.push_str(&table_line(&[
                    label.clone(),
                    name,
                    "skipped".into(),
                    "—".into(),
                    "—".into(),
                    "0".into(),
                    "—".into(),
                ]));
                continue;
            }
            out.push_str(&table_line(&[
                label.clone(),
                r["name"].as_str().unwrap_or("?").to_string(),
                triple(&r["direct"]),
                triple(&r["through"]),
                triple(&r["paired"]),
                r["pairs"].to_string(),
                r["errors"].to_string(),
            ]));
        }
    }
    for (run, label) in runs.iter().zip(&labels) {
        if let Some(by) = run["outage"]["classified_by"].as_str() {
            out.push_str(&format!(
                "\n{label}, outage: which requests waited for the dead route is read from {by}.\n"
            ));
        }
    }
    for (run, label) in runs.iter().zip(&labels) {
        for r in run["rows"].as_array().into_iter().flatten() {
            if let Some(e) = r["first_error"].as_str() {
                out.push_str(&format!(
                    "\n{label}, {}: first error: `{e}`\n",
                    r["name"].as_str().unwrap_or("?")
                ));
            }
        }
        if let Some(e) = run["outage"]["first_error"].as_str() {
            out.push_str(&format!("\n{label}, outage: first error: `{e}`\n"));
        }
    }

    out.push_str("\nRuns: ");
    let about: Vec<String> = runs
        .iter()
        .zip(&labels)
        .map(|(r, l)| {
            format!(
                "{l} — {} s, load average at its start {}",
                r["seconds"],
                r["machine"]["loadavg_at_start"].as_str().unwrap_or("?")
            )
        })
        .collect();
    out.push_str(&about.join("; "));
    out.push_str(".\n");

    if let Some(run) = runs.get(primary).filter(|r| r["mode"] == "gateway") {
        out.push_str(&targets(run, &labels[primary]));
        if let Some(floor) = runs.iter().find(|r| r["mode"] == "js-echo") {
            out.push_str(&floor_targets(run, floor));
        }
    }
    out
}

/// A p50 / p99 of a row's `added` or `through` figures, or its CPU per request.
fn figure(run: &Value, name: &str, what: &str, pct: &str) -> Option<f64> {
    let r = row(run, name)?;
    if what == "cpu" {
        return r["cpu_ms_per_request"].as_f64();
    }
    r[what][pct].as_f64()
}

/// Issue 15's targets: Switchyard against the JS floor of the same run, with the JS floor that
/// reads every chunk (`/relay`) beside the stream targets.
fn floor_targets(run: &Value, floor: &Value) -> String {
    let mut out = String::from(
        "\nTargets of issue 15, each against the JS floor of this run (p50 unless noted; \"JS reading every chunk\" is the floor's `/relay`):\n\n",
    );
    out.push_str("| target | Switchyard | JS floor | JS reading every chunk | verdict |\n|---|---|---|---|---|\n");
    // (target, row, figure, percentile, relay row, how the limit follows from the floor)
    enum Limit {
        Times(f64),
        Plus(f64),
    }
    let cases = [
        (
            "non-stream added, concurrency 1: ≤ 1.1× the floor",
            "nonstream_c1",
            "added",
            "p50",
            None,
            Limit::Times(1.1),
        ),
        (
            "non-stream added, concurrency 8: ≤ 1.25×",
            "nonstream_c8",
            "added",
            "p50",
            None,
            Limit::Times(1.25),
        ),
        (
            "non-stream added p99, concurrency 1: ≤ the floor's + 1 ms",
            "nonstream_c1",
            "added",
            "p99",
            None,
            Limit::Plus(1.0),
        ),
        (
            "time to first content added: ≤ the floor + 0.3 ms",
            "stream_ttfc",
            "added",
            "p50",
            None,
            Limit::Plus(0.3),
        ),
        (
            "200-event stream, whole: ≤ 1.5×",
            "stream_200_total",
            "through",
            "p50",
            Some("stream_200_total_relay"),
            Limit::Times(1.5),
        ),
        (
            "2,000-event stream, whole: ≤ 1.5×",
            "stream_2000_total",
            "through",
            "p50",
            Some("stream_2000_total_relay"),
            Limit::Times(1.5),
        ),
        (
            "CPU per 200-event stream: ≤ 2×",
            "stream_200_total",
            "cpu",
            "",
            Some("stream_200_total_relay"),
            Limit::Times(2.0),
        ),
    ];
    for (target, name, what, pct, relay, limit) in cases {
        let ours = figure(run, name, what, pct);
        let base = figure(floor, name, what, pct);
        let relay_cell = relay
            .and_then(|r| figure(floor, r, what, pct))
            .map_or("—".to_string(), |v| format!("{} ms", ms(&v.into())));
        let verdict = match (ours, base) {
            (Some(o), Some(b)) => {
                let (ok, gap) = match limit {
                    Limit::Times(k) => (o <= b * k, format!("{:.1}×", o / b)),
                    Limit::Plus(k) => (o <= b + k, format!("floor {}", signed(&(o - b).into()))),
                };
                if ok {
                    format!("met ({gap})")
                } else {
                    format!("**missed** ({gap})")
                }
            }
            _ => "not measured".into(),
        };
        let cell = |v: Option<f64>| v.map_or("—".to_string(), |v| format!("{} ms", ms(&v.into())));
        out.push_str(&table_line(&[
            target.to_string(),
            cell(ours),
            cell(base),
            relay_cell,
            verdict,
        ]));
    }
    out
}

/// The targets against one gateway run.
fn targets(run: &Value, label: &str) -> String {
    let mut out = format!("\nTargets of issue 6, checked against the {label} run:\n\n");
    out.push_str("| target | measured | verdict |\n|---|---|---|\n");
    let verdict = |measured: Option<f64>, limit: f64, unit: &str| match measured {
        None => "not measured".to_string(),
        Some(m) if m <= limit => "met".to_string(),
        Some(m) => format!("**missed by {:.2} {unit}**", m - limit),
    };
    let mut line = |target: &str, measured: Option<f64>, limit: f64, unit: &str, text: String| {
        out.push_str(&table_line(&[target.to_string(), text, verdict(measured, limit, unit)]));
    };
    for (name, conc) in [("nonstream_c1", 1), ("nonstream_c8", 8)] {
        let r = row(run, name);
        let p50 = r.and_then(|r| r["added"]["p50"].as_f64());
        let p99 = r.and_then(|r| r["added"]["p99"].as_f64());
        line(
            &format!("non-stream added ≤ 1 ms p50 (concurrency {conc})"),
            p50,
            1.0,
            "ms",
            format!("{} ms", ms(&p50.into())),
        );
        line(
            &format!("non-stream added ≤ 3 ms p99 (concurrency {conc})"),
            p99,
            3.0,
            "ms",
            format!("{} ms", ms(&p99.into())),
        );
    }
    let ttfc = row(run, "stream_ttfc").and_then(|r| r["added"]["p50"].as_f64());
    line(
        "stream time to first content added ≤ 1 ms p50",
        ttfc,
        1.0,
        "ms",
        format!("{} ms", ms(&ttfc.into())),
    );
    let total = row(run, "stream_200_total")
        .and_then(|r| Some(pct_over(r["through"]["p50"].as_f64()?, r["direct"]["p50"].as_f64()?)));
    line(
        "200-chunk stream total within 5 % of direct (p50)",
        total,
        5.0,
        "points",
        total.map_or("—".into(), |t| format!("{t:+.1} %")),
    );
    let o = &run["outage"];
    let after = o["after_demotion"]["added_vs_healthy"]["p50"].as_f64();
    let (text, v) = match after {
        Some(a) => (format!("{} ms", ms(&a.into())), verdict(Some(a), 1.0, "ms")),
        None if o.is_null() => ("—".into(), "not measured".into()),
        None => {
            // Never demoted: what a request pays is the dead route's wait, every time.
            let paid = o["paid_deadline"]["total"]["p50"].as_f64();
            let healthy = o["healthy"]["total"]["p50"].as_f64();
            let cost = paid.zip(healthy).map(|(p, h)| p - h);
            (
                format!(
                    "never demoted: every request waited the {} ms deadline first ({} ms over the healthy model)",
                    o["deadline_ms"],
                    signed(&cost.into())
                ),
                "**missed: no demotion**".into(),
            )
        }
    };
    out.push_str(&table_line(&[
        "after demotion, a dead first route adds ≤ 1 ms p50".to_string(),
        text,
        v,
    ]));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_compact() {
        assert_eq!(ranges(&[1, 2, 3, 57]), "#1–#3, #57");
        assert_eq!(ranges(&[]), "");
    }

    #[test]
    fn floor_targets_judge_against_the_floor() {
        let run = serde_json::json!({"rows": [
            {"name": "nonstream_c1", "added": {"p50": 0.5, "p99": 2.0}},
            {"name": "stream_ttfc", "added": {"p50": 0.5}},
        ]});
        let floor = serde_json::json!({"rows": [
            {"name": "nonstream_c1", "added": {"p50": 0.4, "p99": 0.5}},
            {"name": "stream_ttfc", "added": {"p50": 0.25}},
        ]});
        let table = floor_targets(&run, &floor);
        let line = |start: &str| table.lines().find(|l| l.starts_with(start)).unwrap().to_string();
        assert!(line("| non-stream added, concurrency 1").ends_with("**missed** (1.2×) |"));
        assert!(line("| non-stream added p99").ends_with("**missed** (floor +1.50) |"));
        assert!(line("| time to first content").ends_with("met (floor +0.25) |"));
        assert!(line("| 200-event stream").ends_with("not measured |"));
    }

    #[test]
    fn ms_precision() {
        assert_eq!(ms(&Value::from(0.1234)), "0.12");
        assert_eq!(ms(&Value::from(12.34)), "12.3");
        assert_eq!(ms(&Value::from(305.4)), "305");
        assert_eq!(ms(&Value::Null), "—");
    }
}
