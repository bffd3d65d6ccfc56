//! Issue 34's runs: the rate sweep on one model, 10,000 req/s on one model and 100,000 overall at
//! I = 300, 1,000 and 3,000, the route-down drill and the 2× overload drill — each as a table.

use crate::params::{Design, Params, ServiceTimes};
use crate::report::Report;
use crate::run;
use crate::stores::{Class, Kind};

/// The scenarios `main` knows, in the order `all` runs them.
pub const NAMES: [&str; 8] = [
    "sweep",
    "one-model",
    "overall",
    "ledgers",
    "targets",
    "capacity",
    "route-down",
    "overload",
];

/// One model, `rate` req/s, `isolates` isolates.
pub fn one_model(rate: f64, isolates: usize) -> Params {
    Params {
        rate,
        isolates,
        models: 1,
        hot_share: 1.0,
        ..Params::default()
    }
}

/// `rate` req/s over 20 models, a tenth on the busiest (10,000 of 100,000).
pub fn overall(rate: f64, isolates: usize) -> Params {
    Params {
        rate,
        isolates,
        models: 20,
        hot_share: 0.1,
        warmup_ms: 2_000,
        measure_ms: 2_000,
        ..Params::default()
    }
}

/// Route 0 of the one model goes down 1 s into the window; D1 unbounded, so that requests reach
/// the health path (a saturated D1 refuses them before it).
pub fn route_down(rate: f64, isolates: usize) -> Params {
    let p = without_d1(one_model(rate, isolates));
    Params {
        route_down_at_ms: Some(p.warmup_ms + 1_000),
        measure_ms: 8_000,
        ..p
    }
}

/// The same run with D1 answering at once: each object's own ceiling, not hidden behind D1's.
pub fn without_d1(p: Params) -> Params {
    Params {
        service: p.service.without_d1(),
        ..p
    }
}

fn summary(rows: &[(String, Report)]) -> String {
    let mut t = format!("{}\n", Report::summary_header());
    for (label, r) in rows {
        t += &r.summary_row(label);
        t.push('\n');
    }
    t
}

/// The scenario's tables (Markdown), or `None` for an unknown name.
pub fn table(name: &str, seed: u64, design: Design) -> Option<String> {
    let seeded = |p: Params| Params { seed, design, ..p };
    let out = match name {
        "sweep" => {
            let rows: Vec<(String, Report)> = [100.0, 250.0, 500.0, 1_000.0, 2_000.0, 10_000.0]
                .into_iter()
                .flat_map(|rate| {
                    let p = seeded(one_model(rate, 300));
                    [
                        ("one model".to_string(), run(p.clone())),
                        ("one model, D1 unbounded".to_string(), run(without_d1(p))),
                    ]
                })
                .collect();
            let mut t = summary(&rows);
            t += "\nModel object calls/s by kind (same runs):\n\n| req/s | snapshot/s | observe/s | full/s | `accounts` calls/s | D1 calls/s |\n|---|---|---|---|---|---|\n";
            for (label, r) in &rows {
                t += &format!(
                    "| {:.0} ({label}) | {:.0} | {:.0} | {:.1} | {:.0} | {:.0} |\n",
                    r.rate,
                    r.window_rate(Class::Model, Some(Kind::Snapshot)),
                    r.window_rate(Class::Model, Some(Kind::Observe)),
                    r.window_rate(Class::Model, Some(Kind::Full)),
                    r.window_rate(Class::Accounts, None),
                    r.window_rate(Class::D1, None),
                );
            }
            t
        }
        "one-model" => {
            let rows: Vec<(String, Report)> = [300, 1_000, 3_000]
                .into_iter()
                .flat_map(|i| {
                    let p = seeded(one_model(10_000.0, i));
                    [
                        ("10k on one model".to_string(), run(p.clone())),
                        ("the same, D1 unbounded".to_string(), run(without_d1(p))),
                    ]
                })
                .collect();
            let mut t = summary(&rows);
            for (label, r) in rows.iter().skip(rows.len().saturating_sub(2)) {
                t += &format!(
                    "
{label}, I = {}: stores (busiest instance of each)

{}
calls issued

{}
blocking calls

{}",
                    r.isolates,
                    r.stores_table(),
                    r.calls_table(),
                    r.blocking_table()
                );
            }
            t
        }
        "overall" => {
            let rows: Vec<(String, Report)> = [300, 1_000, 3_000]
                .into_iter()
                .flat_map(|i| {
                    let p = seeded(overall(100_000.0, i));
                    [
                        ("100k overall".to_string(), run(p.clone())),
                        ("the same, D1 unbounded".to_string(), run(without_d1(p))),
                    ]
                })
                .collect();
            let mut t = summary(&rows);
            // The first and the last `I`, each with and without D1's limit.
            let last = rows.len().saturating_sub(2);
            for (label, r) in rows.iter().take(2).chain(rows.iter().skip(last)) {
                t += &format!(
                    "
{label}, I = {}: stores (busiest instance of each)

{}
calls issued

{}",
                    r.isolates,
                    r.stores_table(),
                    r.calls_table()
                );
            }
            t
        }
        "ledgers" => {
            // 100k overall, D1 as 16 and 64 ledgers (`LEDGER_SHARDS`): the busiest one with
            // neither desks nor keyrings (before session 23: `desk_from_per_s` 0), with desks
            // (session 23), with desks and keyrings (session 24, the default); 64 ledgers at each
            // `I`. 6 s of warm-up (10 s at I = 3,000): an isolate learns a ledger's pace from two
            // reads a second apart, and its first settlements come 1–3 s after its first requests.
            let from = Params::default().desk_from_per_s;
            let designs = [
                ("neither", 0, false),
                ("desks", from, false),
                ("desks, keyrings", from, true),
            ];
            let runs = [(16u8, 300usize)]
                .into_iter()
                .chain([300, 1_000, 3_000].into_iter().map(|i| (64, i)))
                .flat_map(|(ledgers, isolates)| designs.map(|d| (ledgers, isolates, d)));
            let rows: Vec<(String, Report)> = runs
                .map(|(ledgers, isolates, (design, desk_from_per_s, keyrings))| {
                    let p = Params {
                        ledgers,
                        desk_from_per_s,
                        keyrings,
                        warmup_ms: if isolates >= 3_000 { 10_000 } else { 6_000 },
                        ..overall(100_000.0, isolates)
                    };
                    (format!("| {ledgers} | {isolates} | {design}"), run(seeded(p)))
                })
                .collect();
            let mut t = "| ledgers | I | | busiest ledger | its load / p99 queueing | D1 calls/s there | busiest desk: load / p99 queueing | busiest keyring: load / p99 queueing | blocking calls per request mean | settlements lost / unsettled |\n|---|---|---|---|---|---|---|---|---|---|\n".to_string();
            let busiest = |r: &Report, c: Class| {
                r.store(c).map_or("–".to_string(), |d| {
                    format!("{:.0} % / {:.1} ms", d.load * 100.0, d.wait_p99_ms)
                })
            };
            for (label, r) in &rows {
                if let Some(d1) = r.store(Class::D1) {
                    t += &format!(
                        "{label} | {} | {:.0} % / {:.1} ms | {:.0} | {} | {} | {:.2} | {} / {} |\n",
                        d1.busiest,
                        d1.load * 100.0,
                        d1.wait_p99_ms,
                        d1.calls_per_s,
                        busiest(r, Class::Desk),
                        busiest(r, Class::KeyRing),
                        r.blocking_mean(),
                        r.outcomes.lost,
                        r.outcomes.unsettled,
                    );
                }
            }
            t
        }
        "targets" => {
            // Issue 34's targets with main's design as a deployment at that traffic would run
            // it: 10k on one model and 100k overall, 64 ledgers, at each `I`; 10 s of warm-up
            // (at I = 3,000 an isolate sees a ledger's traffic rarely, and reads its pace twice
            // later: until then it writes that ledger's money itself).
            let runs = [(10_000.0, true), (100_000.0, false)]
                .into_iter()
                .flat_map(|(rate, one)| [300usize, 1_000, 3_000].map(|i| (rate, one, i)));
            let mut t = "| run | I | busiest store: load / p99 queueing | worst p99 queueing (store) | busiest D1 | busiest desk | busiest keyring | warm requests: share, blocking mean / p99 | settlements lost / unsettled |\n|---|---|---|---|---|---|---|---|---|\n".to_string();
            for (rate, one, isolates) in runs {
                let base = match one {
                    true => one_model(rate, isolates),
                    false => overall(rate, isolates),
                };
                let r = run(seeded(Params {
                    ledgers: 64,
                    warmup_ms: 10_000,
                    ..base
                }));
                let cell = |c: Class| {
                    r.store(c).map_or("–".to_string(), |s| {
                        format!("{} {:.0} % / {:.1} ms", s.busiest, s.load * 100.0, s.wait_p99_ms)
                    })
                };
                let busiest = r.stores.iter().max_by(|a, b| a.load.total_cmp(&b.load));
                let worst = r.stores.iter().max_by(|a, b| a.wait_p99_ms.total_cmp(&b.wait_p99_ms));
                let warm = r.blocking_warm();
                let label = if one { "10k on one model" } else { "100k overall" };
                t += &format!(
                    "| {label} | {isolates} | {} | {} | {} | {} | {} | {:.0} %: {:.2} / {} | {} / {} |\n",
                    busiest.map_or("–".to_string(), |s| format!(
                        "{} {:.0} % / {:.1} ms",
                        s.busiest,
                        s.load * 100.0,
                        s.wait_p99_ms
                    )),
                    worst.map_or("–".to_string(), |s| format!(
                        "{:.1} ms ({})",
                        s.wait_p99_ms, s.busiest
                    )),
                    cell(Class::D1),
                    cell(Class::Desk),
                    cell(Class::KeyRing),
                    warm.0 * 100.0,
                    warm.1,
                    warm.2,
                    r.outcomes.lost,
                    r.outcomes.unsettled,
                );
            }
            t
        }
        "capacity" => {
            let rows: Vec<(String, Report)> = [100.0, 250.0, 500.0, 1_000.0]
                .into_iter()
                .map(|rate| {
                    let p = Params {
                        hot_model_capped: true,
                        ..one_model(rate, 300)
                    };
                    ("one capped model".to_string(), run(seeded(p)))
                })
                .collect();
            let mut t = summary(&rows);
            t += "\n| req/s | busiest capacity object load / p99 queueing (`Design::Sharded`: its own objects; direct: the model's) |\n|---|---|\n";
            for (_, r) in &rows {
                let (load, p99) = r
                    .store(Class::Capacity)
                    .or_else(|| r.store(Class::Model))
                    .map_or((0.0, 0.0), |s| (s.load, s.wait_p99_ms));
                t += &format!("| {:.0} | {:.0} % / {:.1} ms |\n", r.rate, load * 100.0, p99);
            }
            t
        }
        "route-down" => {
            let rows: Vec<(String, Report)> = [(1_000.0, 300), (10_000.0, 1_000), (10_000.0, 3_000)]
                .into_iter()
                .map(|(rate, i)| ("route down, D1 unbounded".to_string(), run(seeded(route_down(rate, i)))))
                .collect();
            let mut t = summary(&rows);
            t += "\n| req/s | I | demotion reaches 50 % / 90 % / 99 % of isolates |\n|---|---|---|\n";
            for (_, r) in &rows {
                let q = |q| {
                    r.demotion_reach_ms(q)
                        .map_or("never".to_string(), |v| format!("{:.2} s", f64::from(v) / 1e3))
                };
                t += &format!(
                    "| {:.0} | {} | {} / {} / {} |\n",
                    r.rate,
                    r.isolates,
                    q(0.5),
                    q(0.9),
                    q(0.99)
                );
            }
            t
        }
        "overload" => overload(seed, design),
        _ => return None,
    };
    Some(out)
}

/// The 2× overload drill: the same arrivals against stores that never queue (the calls a working
/// store is offered) and against today's service times at twice a store's capacity.
fn overload(seed: u64, design: Design) -> String {
    let mut t = String::from(
        "| drill | store | calls offered (instant stores) | calls issued (saturated) | issued / offered | load | refused | settlements lost / outboxed |\n|---|---|---|---|---|---|---|---|\n",
    );
    let drills = [
        // The model object: ≈ 2× the ≈ 500 req/s at which its load reaches 100 % (sweep), D1
        // unbounded so that the object sees the whole rate.
        ("model object 2×", without_d1(one_model(1_000.0, 300)), Class::Model),
        // D1: ≈ 2× the ≈ 550 req/s at which one database saturates at I = 300, spread over 20
        // models (their objects not saturated).
        (
            "D1 2×",
            Params {
                hot_share: 0.05,
                ..overall(1_100.0, 300)
            },
            Class::D1,
        ),
    ];
    for (label, p, class) in drills {
        let p = Params { seed, design, ..p };
        let control = run(Params {
            service: ServiceTimes::instant(),
            ..p.clone()
        });
        let loaded = run(p);
        let count = |r: &Report| {
            r.totals
                .issued
                .iter()
                .filter(|((c, _), _)| *c == class)
                .map(|(_, n)| *n)
                .sum::<u64>()
        };
        let (offered, issued) = (count(&control), count(&loaded));
        let row = loaded.store(class);
        t += &format!(
            "| {label} | {class:?} | {offered} | {issued} | {:.2} | {:.0} % | {:.1} % | {} / {} |\n",
            issued as f64 / offered.max(1) as f64,
            row.map_or(0.0, |s| s.load * 100.0),
            row.map_or(0.0, |s| s.refused * 100.0),
            loaded.outcomes.lost,
            loaded.outcomes.outboxed,
        );
    }
    t
}
