//! What a run reports — issue 34's pass lines: per store, the busiest instance's calls, load
//! (work asked for per second of the window: past 100 % the store is saturated), time busy, p99
//! queueing and refusals; blocking round trips per request; how long a demotion took to reach 99 %
//! of isolates; calls issued by kind; settlements written, kept by the outbox or lost — and the
//! counts that must balance (every call issued was served or refused, every request ended).

use std::collections::{BTreeMap, HashMap};

use crate::params::Params;
use crate::server::{quantile, Server, Window};
use crate::stores::{Class, Kind, Obj};

/// Counters the run keeps as it goes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Totals {
    pub requests: u64,
    /// Requests that arrived inside the window.
    pub window_requests: u64,
    pub finished: u64,
    /// Refused 503 before any attempt (D1 out of reach for the key or the hold).
    pub refused: u64,
    pub reports_dropped: u64,
    /// Events left when the drain gave up (0: everything ended).
    pub unfinished_events: u64,
    /// When model 0's object demoted the downed route (the route-down drill), ms.
    pub object_demoted_ms: Option<u64>,
    /// Calls issued by (store, kind): the whole run, and inside the window.
    pub issued: BTreeMap<(Class, Kind), u64>,
    pub window_issued: BTreeMap<(Class, Kind), u64>,
    /// Calls a request waited on, by (store, kind), issued inside the window.
    pub window_blocking: BTreeMap<(Class, Kind), u64>,
    /// Calls served inside the window and the work they asked for (µs), by (store instance,
    /// kind): what the busiest instance of each kind of store spends its time on.
    pub window_served: BTreeMap<(Obj, Kind), (u64, u64)>,
}

/// What became of the requests, read at the end.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes {
    pub settled: u64,
    pub outboxed: u64,
    pub lost: u64,
    pub unsettled: u64,
    /// Refused before their key was read: no record to settle.
    pub unrecorded: u64,
    pub unfinished: u64,
    /// Blocking calls of each request that arrived in the window (and was not refused).
    pub blocking: Vec<u32>,
    /// The same, of the warm ones among them: every cache of its isolate it needed was there.
    pub blocking_warm: Vec<u32>,
    /// Per isolate, ms from the route going down until its snapshot showed the demotion (sorted;
    /// `u32::MAX`: never).
    pub demotion_reach_ms: Option<Vec<u32>>,
}

/// One kind of store: its busiest instance (by work asked for in the window).
#[derive(Debug, Clone, PartialEq)]
pub struct StoreRow {
    pub class: Class,
    pub instances: usize,
    pub busiest: String,
    pub calls_per_s: f64,
    /// Work asked for per second of window (1.0 = a store's whole time).
    pub load: f64,
    /// Share of the window it was serving.
    pub busy: f64,
    pub wait_p99_ms: f64,
    /// Share of its calls in the window refused.
    pub refused: f64,
    /// The busiest instance's calls by kind: (kind, calls/s, load).
    pub kinds: Vec<(Kind, f64, f64)>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub rate: f64,
    pub isolates: usize,
    pub window_s: f64,
    pub stores: Vec<StoreRow>,
    pub totals: Totals,
    pub outcomes: Outcomes,
    /// Every call offered to a store, served and refused (after the drain: offered = issued).
    pub calls_offered: u64,
    pub calls_served: u64,
    pub calls_refused: u64,
}

impl Report {
    pub fn new(
        p: &Params,
        window: Window,
        servers: &HashMap<Obj, Server>,
        totals: Totals,
        outcomes: Outcomes,
    ) -> Report {
        let seconds = window.seconds().max(1e-9);
        let sorted: BTreeMap<&Obj, &Server> = servers.iter().collect();
        let mut stores: BTreeMap<Class, StoreRow> = BTreeMap::new();
        for (obj, s) in &sorted {
            let row = StoreRow {
                class: obj.class(),
                instances: 1,
                busiest: format!("{obj:?}"),
                calls_per_s: s.window_calls as f64 / seconds,
                load: s.window_demand_us as f64 / 1e6 / seconds,
                busy: s.window_busy_us as f64 / 1e6 / seconds,
                wait_p99_ms: s.wait_quantile_ms(0.99),
                refused: s.window_refused as f64 / (s.window_calls.max(1)) as f64,
                kinds: totals
                    .window_served
                    .range((**obj, Kind::Snapshot)..)
                    .take_while(|((o, _), _)| o == *obj)
                    .map(|((_, kind), (n, us))| (*kind, *n as f64 / seconds, *us as f64 / 1e6 / seconds))
                    .collect(),
            };
            match stores.get_mut(&obj.class()) {
                Some(best) => {
                    let instances = best.instances + 1;
                    if row.load > best.load {
                        *best = row;
                    }
                    best.instances = instances;
                }
                None => {
                    stores.insert(obj.class(), row);
                }
            }
        }
        Report {
            rate: p.rate,
            isolates: p.isolates,
            window_s: seconds,
            stores: stores.into_values().collect(),
            calls_offered: sorted.values().map(|s| s.offered).sum(),
            calls_served: sorted.values().map(|s| s.served).sum(),
            calls_refused: sorted.values().map(|s| s.refused).sum(),
            totals,
            outcomes,
        }
    }

    pub fn store(&self, class: Class) -> Option<&StoreRow> {
        self.stores.iter().find(|s| s.class == class)
    }

    /// Calls issued in the whole run.
    pub fn calls_issued(&self) -> u64 {
        self.totals.issued.values().sum()
    }

    /// Calls of `class` issued in the window, per second.
    pub fn window_rate(&self, class: Class, kind: Option<Kind>) -> f64 {
        let n: u64 = self
            .totals
            .window_issued
            .iter()
            .filter(|((c, k), _)| *c == class && kind.is_none_or(|want| want == *k))
            .map(|(_, n)| n)
            .sum();
        n as f64 / self.window_s
    }

    pub fn blocking_mean(&self) -> f64 {
        mean(&self.outcomes.blocking)
    }

    pub fn blocking_p99(&self) -> u32 {
        quantile(&self.outcomes.blocking, 0.99)
    }

    /// Warm requests' share of the window's, and their blocking calls' mean and p99.
    pub fn blocking_warm(&self) -> (f64, f64, u32) {
        let w = &self.outcomes.blocking_warm;
        let share = w.len() as f64 / self.outcomes.blocking.len().max(1) as f64;
        (share, mean(w), quantile(w, 0.99))
    }

    /// Share of requests that waited on more than one call.
    pub fn blocking_over_one(&self) -> f64 {
        let b = &self.outcomes.blocking;
        b.iter().filter(|n| **n > 1).count() as f64 / b.len().max(1) as f64
    }

    /// The `q` quantile of the demotion's reach over isolates, ms (`None`: not a route-down run,
    /// or fewer isolates than that ever saw it).
    pub fn demotion_reach_ms(&self, q: f64) -> Option<u32> {
        let reach = self.outcomes.demotion_reach_ms.as_ref()?;
        let v = quantile(reach, q);
        (v != u32::MAX).then_some(v)
    }

    /// The stores as a Markdown table.
    pub fn stores_table(&self) -> String {
        let mut t = String::from(
            "| store | instances | busiest | calls/s | load | busy | p99 queueing | refused |\n|---|---|---|---|---|---|---|---|\n",
        );
        for s in &self.stores {
            t += &format!(
                "| {:?} | {} | {} | {:.0} | {:.0} % | {:.0} % | {} | {:.1} % |\n",
                s.class,
                s.instances,
                s.busiest,
                s.calls_per_s,
                s.load * 100.0,
                s.busy * 100.0,
                ms(s.wait_p99_ms),
                s.refused * 100.0
            );
        }
        t
    }

    /// The busiest instance of each kind of store: its calls and load by kind of call.
    pub fn busiest_table(&self) -> String {
        let mut t = String::from("| busiest store | call | calls/s | load |\n|---|---|---|---|\n");
        for s in &self.stores {
            for (kind, per_s, load) in &s.kinds {
                t += &format!("| {} | {kind:?} | {per_s:.0} | {:.1} % |\n", s.busiest, load * 100.0);
            }
        }
        t
    }

    /// Calls issued per second in the window, by store and kind.
    pub fn calls_table(&self) -> String {
        let mut t = String::from("| store | call | issued/s |\n|---|---|---|\n");
        for ((class, kind), n) in &self.totals.window_issued {
            t += &format!("| {class:?} | {kind:?} | {:.1} |\n", *n as f64 / self.window_s);
        }
        t
    }

    /// Blocking calls per request by store and kind (requests arriving in the window).
    pub fn blocking_table(&self) -> String {
        let mut t = String::from("| store | call | blocking calls per request |\n|---|---|---|\n");
        let n = self.totals.window_requests.max(1) as f64;
        for ((class, kind), c) in &self.totals.window_blocking {
            t += &format!("| {class:?} | {kind:?} | {:.2} |\n", *c as f64 / n);
        }
        t
    }

    /// One line of the summary table (see [`Report::summary_header`]).
    pub fn summary_row(&self, label: &str) -> String {
        let load = |c: Class| {
            self.store(c)
                .map_or("—".to_string(), |s| format!("{:.0} %", s.load * 100.0))
        };
        let wait = |c: Class| self.store(c).map_or("—".to_string(), |s| ms(s.wait_p99_ms));
        let warm = self.blocking_warm();
        let reach = match (&self.outcomes.demotion_reach_ms, self.demotion_reach_ms(0.99)) {
            (None, _) => "—".to_string(),
            (Some(_), Some(v)) => format!("{:.2} s", f64::from(v) / 1e3),
            (Some(_), None) => "never (< 99 %)".to_string(),
        };
        format!(
            "| {label} | {:.0} | {} | {} / {} | {} / {} | {} / {} | {} | {} | {} | {:.2} / {} | {:.0} %: {:.2} / {} | {reach} | {} / {} |",
            self.rate,
            self.isolates,
            load(Class::Model),
            wait(Class::Model),
            load(Class::Shard),
            wait(Class::Shard),
            load(Class::Accounts),
            wait(Class::Accounts),
            load(Class::KeyLimit),
            load(Class::D1),
            load(Class::Status),
            self.blocking_mean(),
            self.blocking_p99(),
            warm.0 * 100.0,
            warm.1,
            warm.2,
            self.outcomes.lost,
            self.outcomes.outboxed,
        )
    }

    pub fn summary_header() -> &'static str {
        "| run | req/s | I | model object load / p99 queueing | busiest health shard load / p99 queueing | `accounts` load / p99 queueing | busiest key object load | D1 load | status load | blocking calls per request mean / p99 | warm requests (every cache there): share, blocking mean / p99 | demotion reach (99 %) | settlements lost / outboxed |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    }
}

/// The mean of `counts` (0 for none).
fn mean(counts: &[u32]) -> f64 {
    counts.iter().map(|n| f64::from(*n)).sum::<f64>() / counts.len().max(1) as f64
}

fn ms(v: f64) -> String {
    if v >= 1_000.0 {
        format!("{:.1} s", v / 1e3)
    } else {
        format!("{v:.1} ms")
    }
}
