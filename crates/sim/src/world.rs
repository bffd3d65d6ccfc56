//! The simulated deployment: isolates running the Worker's request path against Durable Objects
//! and D1, in simulated time (µs; the core's types get ms). What each request does, in order, is
//! `src/`'s (docs/SCALE.md's call table), with the core's own types deciding every call:
//!
//! 1. the key (`D1.key`, cached 5 s per isolate) and the catalog (`D1.catalog`, 5 s) — blocking,
//!    one read per request that finds its copy stale (no single flight);
//! 2. a limited key's `LimitObject` `acquire` (blocking), released after the answer;
//! 3. `health::view`: a snapshot of the model's object and of `accounts`, each refreshed through a
//!    [`Flight`] per isolate (`SNAPSHOT`): the request that fetches waits on it (blocking), the others
//!    use the stale copy, a request without one waits for the fetch under way;
//! 4. capacity on a capped model: `acquire` on the model object (blocking), `release` after;
//! 5. the hold: fast path on a fresh balance snapshot (5 s per account per isolate: the hold written
//!    50 ms later, in the background), else the awaited path (balance read and atomic hold: 2
//!    blocking D1 calls); the fast path's allowance is assumed ample;
//! 6. the plan (`ModelHealth::plan_order` on the isolate's snapshot) and the attempts: a route that
//!    is down fails in [`FAILED_ATTEMPT_MS`] and the outcome is applied to the isolate's snapshot at
//!    once; the answer streams for ≈ 2 s;
//! 7. then, in the background: the settlement in the isolate's D1 batch (`Batches`, `SETTLE_BATCH`),
//!    given up batches to an outbox object; the health report in the isolate's batch per object
//!    (`REPORT_BATCH`, urgent when an attempt failed), to the model's object and — for accounts the
//!    `accounts` object keeps a breaker for (`for_accounts`) — to `accounts`; each object's answer
//!    refreshes the isolate's snapshot.
//!
//! Public hits refresh each isolate's copy of the status report through its own [`Flight`]
//! (`STATUS_REPORT`) from the status object, which rebuilds at most once per 3 s with a `full` call
//! to each model object and `accounts` (the build is taken as instant; its D1 catalog read is left
//! out). Left out too: probe claims (a cooldown is 5 minutes, longer than a run), lease renewals (a
//! lease outlives a 2 s stream), verification checks, the sweep and the outbox's replays.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use switchyard_core::batch::{Batches, Check, Role, Rules as BatchRules, Taken, Ticket};
use switchyard_core::classify::FailureClass;
use switchyard_core::flight::{Flight, Step};
use switchyard_core::health::{for_accounts, AttemptOutcome, Breaker, HealthConfig, ModelHealth, Observation, Scope};

use crate::params::*;
use crate::report::{Outcomes, Report, Totals};
use crate::rng::{Rng, Zipf};
use crate::server::{Offer, Server, Window};
use crate::stores::{Kind, Obj};

/// Which of an isolate's batches an item is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Settle,
    Report(Obj),
}

impl Which {
    fn key(self) -> String {
        match self {
            Which::Settle => String::new(),
            Which::Report(obj) => obj.name(),
        }
    }

    fn rules(self) -> &'static BatchRules {
        match self {
            Which::Settle => &SETTLE_BATCH,
            Which::Report(_) => &REPORT_BATCH,
        }
    }
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Key,
    Catalog,
    Limit,
    View,
    Capacity,
    Balance,
    Hold,
    Upstream,
    Streaming,
    Closed,
}

/// What became of a request's settlement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Settled {
    Open,
    Written,
    Kept,
    Lost,
}

struct Req {
    iso: u32,
    model: u32,
    key: u32,
    arrived_us: u64,
    stage: Stage,
    /// Parts of the current stage still under way (the two snapshot refreshes).
    pending: u8,
    /// Calls the request waited on.
    blocking: u8,
    key_slot: bool,
    cap_slot: bool,
    /// Routes that failed, and when (ms).
    fails: Vec<(u8, u64)>,
    route: u8,
    end_ms: u64,
    refused: bool,
    settled: Settled,
}

impl Req {
    fn account(&self, keys_per_account: usize) -> u32 {
        self.key / keys_per_account.max(1) as u32
    }
}

/// An isolate's copy of a health object.
struct Snap {
    health: ModelHealth,
    /// When it was read from the object (`None`: born here from the isolate's own outcomes).
    fetched_ms: Option<u64>,
}

#[derive(Default)]
struct Isolate {
    /// Its round trip to the stores, µs.
    rtt_us: f64,
    snapshots: HashMap<Obj, Snap>,
    flights: HashMap<Obj, Flight>,
    reports: Batches<u32>,
    settle: Batches<u32>,
    catalog_at: Option<u64>,
    keys: HashMap<u32, u64>,
    balances: HashMap<u32, u64>,
    status_at: Option<u64>,
    status_flight: Flight,
    /// When its snapshot of model 0 first showed the downed route demoted.
    knows_down_ms: Option<u64>,
}

/// What the caller does with a call's answer.
enum Then {
    /// A request waits on it.
    Req(u32),
    /// A snapshot fetch by the isolate's flight, made (and waited on) by a request.
    Snapshot {
        iso: u32,
        obj: Obj,
        req: u32,
    },
    /// A batch of reports or settlements; `own` is the sender's item.
    Batch {
        iso: u32,
        which: Which,
        taken: Taken<u32>,
        own: u32,
    },
    /// One item sent alone (its batch was lost under way).
    Alone {
        which: Which,
        req: u32,
    },
    Keep(u32),
    StatusFetch(u32),
    Nothing,
}

struct Call {
    obj: Obj,
    kind: Kind,
    statements: u64,
    half_rtt_us: u64,
    deadline_us: u64,
    then: Then,
    /// The object's snapshot in its answer (`snapshot`, `observe`).
    reply: Option<ModelHealth>,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Arrival,
    PublicHit,
    ViewPoll {
        req: u32,
        obj: Obj,
    },
    AttemptFailed(u32),
    StreamEnd(u32),
    FastHold(u32),
    Batch {
        iso: u32,
        which: Which,
        ticket: Ticket,
        req: u32,
        flush: bool,
    },
    Arrive(u32),
    Reply {
        call: u32,
        ok: bool,
    },
}

struct Scheduled {
    at: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Earliest first (the heap is a max-heap).
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// The longest a run drains after its last arrival, µs.
const DRAIN_US: u64 = 120_000_000;

/// One simulation run.
pub struct World {
    p: Params,
    rng: Rng,
    now: u64,
    seq: u64,
    events: BinaryHeap<Scheduled>,
    window: Window,
    arrivals_end: u64,
    accounts_zipf: Zipf,
    keys_zipf: Zipf,
    /// Each model's routes as (route id, upstream account).
    routes: Vec<Vec<(String, String)>>,
    config: HealthConfig,
    isolates: Vec<Isolate>,
    reqs: Vec<Req>,
    calls: Vec<Option<Call>>,
    free_calls: Vec<u32>,
    servers: HashMap<Obj, Server>,
    model_objects: HashMap<u32, ModelHealth>,
    accounts_object: ModelHealth,
    status_flight: Flight,
    status_at: Option<u64>,
    totals: Totals,
}

impl World {
    pub fn new(p: Params) -> World {
        let mut rng = Rng::new(p.seed);
        let isolates = (0..p.isolates.max(1))
            .map(|_| Isolate {
                rtt_us: rng.log_range(p.rtt_ms.0, p.rtt_ms.1) * 1e3,
                ..Isolate::default()
            })
            .collect();
        let routes = (0..p.models.max(1))
            .map(|m| {
                (0..p.routes.max(1))
                    .map(|r| {
                        (
                            format!("r{r}"),
                            format!("acct-{}", (m + r) % p.upstream_accounts.max(1)),
                        )
                    })
                    .collect()
            })
            .collect();
        let mut accounts_object = ModelHealth::default();
        if p.accounts_failed_before {
            for u in 0..p.upstream_accounts {
                accounts_object.accounts.insert(format!("acct-{u}"), Breaker::default());
            }
        }
        let warm = p.warmup_ms * 1_000;
        let arrivals_end = warm + p.measure_ms * 1_000;
        World {
            accounts_zipf: Zipf::new(p.accounts, p.zipf_s),
            keys_zipf: Zipf::new(p.keys_per_account, p.zipf_s),
            window: Window {
                from: warm,
                to: arrivals_end,
            },
            arrivals_end,
            rng,
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            routes,
            config: HealthConfig::default(),
            isolates,
            reqs: Vec::new(),
            calls: Vec::new(),
            free_calls: Vec::new(),
            servers: HashMap::new(),
            model_objects: HashMap::new(),
            accounts_object,
            status_flight: Flight::default(),
            status_at: None,
            totals: Totals::default(),
            p,
        }
    }

    /// Runs to the end (arrivals stop after the window; what is under way then drains) and reports.
    pub fn run(mut self) -> Report {
        self.at(0, Ev::Arrival);
        if self.p.public_hits > 0.0 {
            self.at(0, Ev::PublicHit);
        }
        while let Some(s) = self.events.pop() {
            if s.at > self.arrivals_end + DRAIN_US {
                break;
            }
            self.now = s.at;
            self.handle(s.ev);
        }
        self.totals.unfinished_events = self.events.len() as u64;
        let outcomes = self.outcomes();
        Report::new(&self.p, self.window, &self.servers, self.totals, outcomes)
    }

    fn ms(&self) -> u64 {
        self.now / 1_000
    }

    fn at(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        self.events.push(Scheduled { at, seq: self.seq, ev });
    }

    fn after_ms(&mut self, ms: u64, ev: Ev) {
        self.at(self.now + ms * 1_000, ev);
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Arrival => self.arrival(),
            Ev::PublicHit => self.public_hit(),
            Ev::ViewPoll { req, obj } => {
                if self.view_part(req, obj) {
                    self.part_done(req);
                }
            }
            Ev::AttemptFailed(req) => self.attempt_failed(req),
            Ev::StreamEnd(req) => self.stream_end(req),
            Ev::FastHold(req) => {
                let iso = self.reqs[req as usize].iso;
                self.call(
                    iso,
                    Obj::D1,
                    Kind::D1HoldFast,
                    HOLD_STATEMENTS,
                    D1_DEADLINE_MS,
                    Then::Nothing,
                );
            }
            Ev::Batch {
                iso,
                which,
                ticket,
                req,
                flush,
            } => self.batch_turn(iso, which, ticket, req, flush),
            Ev::Arrive(call) => self.arrive(call),
            Ev::Reply { call, ok } => self.reply(call, ok),
        }
    }

    // ---- requests ------------------------------------------------------------------------------

    fn arrival(&mut self) {
        if self.now >= self.arrivals_end {
            return;
        }
        let gap = self.rng.exp(1e6 / self.p.rate.max(1e-9)) as u64;
        self.at(self.now + gap.max(1), Ev::Arrival);
        let iso = self.rng.below(self.isolates.len()) as u32;
        let model = if self.p.models <= 1 || self.rng.unit() < self.p.hot_share {
            0
        } else {
            1 + self.rng.below(self.p.models - 1) as u32
        };
        let account = self.accounts_zipf.draw(&mut self.rng);
        let key = (account * self.p.keys_per_account.max(1) + self.keys_zipf.draw(&mut self.rng)) as u32;
        let id = self.reqs.len() as u32;
        self.reqs.push(Req {
            iso,
            model,
            key,
            arrived_us: self.now,
            stage: Stage::Key,
            pending: 0,
            blocking: 0,
            key_slot: false,
            cap_slot: false,
            fails: Vec::new(),
            route: 0,
            end_ms: 0,
            refused: false,
            settled: Settled::Open,
        });
        self.totals.requests += 1;
        if self.window.contains(self.now) {
            self.totals.window_requests += 1;
        }
        self.advance(id);
    }

    /// Runs the request's stages until one waits on something.
    fn advance(&mut self, id: u32) {
        loop {
            let r = &self.reqs[id as usize];
            let (iso, key, model) = (r.iso, r.key, r.model);
            let account = r.account(self.p.keys_per_account);
            let now_ms = self.ms();
            let isolate = &self.isolates[iso as usize];
            match r.stage {
                Stage::Key => {
                    if isolate
                        .keys
                        .get(&key)
                        .is_some_and(|at| now_ms.saturating_sub(*at) < CACHE_TTL_MS)
                    {
                        self.reqs[id as usize].stage = Stage::Catalog;
                        continue;
                    }
                    return self.blocking(id, Obj::D1, Kind::D1Key, READ_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Catalog => {
                    if isolate
                        .catalog_at
                        .is_some_and(|at| now_ms.saturating_sub(at) < CACHE_TTL_MS)
                    {
                        self.reqs[id as usize].stage = Stage::Limit;
                        continue;
                    }
                    return self.blocking(id, Obj::D1, Kind::D1Catalog, READ_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Limit => {
                    if !self.limited(key) {
                        self.reqs[id as usize].stage = Stage::View;
                        continue;
                    }
                    return self.blocking(id, Obj::Key(key), Kind::Acquire, 0, KEY_TIMEOUT_MS);
                }
                Stage::View => {
                    self.reqs[id as usize].pending = 2;
                    let mut done = 0;
                    for obj in [Obj::Model(model), Obj::Accounts] {
                        if self.view_part(id, obj) {
                            done += 1;
                        }
                    }
                    let r = &mut self.reqs[id as usize];
                    r.pending -= done;
                    if r.pending > 0 {
                        return;
                    }
                    r.stage = Stage::Capacity;
                }
                Stage::Capacity => {
                    if !(model == 0 && self.p.hot_model_capped) {
                        self.reqs[id as usize].stage = Stage::Balance;
                        continue;
                    }
                    return self.blocking(id, Obj::Model(model), Kind::Acquire, 0, CAPACITY_TIMEOUT_MS);
                }
                Stage::Balance => {
                    let fresh = isolate
                        .balances
                        .get(&account)
                        .is_some_and(|at| now_ms.saturating_sub(*at) < BALANCE_SNAPSHOT_MS);
                    if fresh {
                        self.after_ms(FAST_HOLD_DEFER_MS, Ev::FastHold(id));
                        self.reqs[id as usize].stage = Stage::Upstream;
                        continue;
                    }
                    return self.blocking(id, Obj::D1, Kind::D1Balance, READ_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Hold => {
                    return self.blocking(id, Obj::D1, Kind::D1HoldAtomic, HOLD_STATEMENTS, D1_DEADLINE_MS);
                }
                Stage::Upstream => return self.attempt(id),
                Stage::Streaming | Stage::Closed => return,
            }
        }
    }

    fn limited(&self, key: u32) -> bool {
        self.p.limited_key_every > 0 && (key as usize).is_multiple_of(self.p.limited_key_every)
    }

    /// A call request `id` waits on.
    fn blocking(&mut self, id: u32, obj: Obj, kind: Kind, statements: u64, timeout_ms: u64) {
        let r = &mut self.reqs[id as usize];
        r.blocking = r.blocking.saturating_add(1);
        let iso = r.iso;
        self.count_blocking(obj, kind);
        self.call(iso, obj, kind, statements, timeout_ms, Then::Req(id));
    }

    fn count_blocking(&mut self, obj: Obj, kind: Kind) {
        if self.window.contains(self.now) {
            *self.totals.window_blocking.entry((obj.class(), kind)).or_default() += 1;
        }
    }

    /// The answer to a call request `id` waited on: the stage it was in goes on, or the request
    /// ends as the Worker ends it.
    fn resume(&mut self, id: u32, ok: bool, reply_kind: Kind) {
        let now_ms = self.ms();
        let r = &mut self.reqs[id as usize];
        let (iso, key) = (r.iso, r.key);
        let account = r.account(self.p.keys_per_account);
        let isolate = &mut self.isolates[iso as usize];
        match (r.stage, reply_kind) {
            (Stage::Key, _) => {
                // D1 out of reach: the key as last read, for 10 minutes (any copy here is younger).
                if ok {
                    isolate.keys.insert(key, now_ms);
                } else if !isolate.keys.contains_key(&key) {
                    return self.refuse(id);
                }
                r.stage = Stage::Catalog;
            }
            (Stage::Catalog, _) => {
                if ok {
                    isolate.catalog_at = Some(now_ms);
                } else if isolate.catalog_at.is_none() {
                    return self.refuse(id);
                }
                r.stage = Stage::Limit;
            }
            (Stage::Limit, _) => {
                // An object that errs or is late admits (and is sent the release at once).
                r.key_slot = true;
                r.stage = Stage::View;
            }
            (Stage::Capacity, _) => {
                r.cap_slot = ok;
                r.stage = Stage::Balance;
            }
            (Stage::Balance, _) if ok => r.stage = Stage::Hold,
            (Stage::Hold, _) if ok => {
                isolate.balances.insert(account, now_ms);
                r.stage = Stage::Upstream;
            }
            // D1 out of reach on the awaited path: 503 `storage_unavailable`.
            (Stage::Balance | Stage::Hold, _) => return self.refuse(id),
            _ => return,
        }
        self.advance(id);
    }

    /// A request refused before any attempt (503): its slots go back, its record is settled.
    fn refuse(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.refused = true;
        r.end_ms = self.now / 1_000;
        self.totals.refused += 1;
        self.close(id);
    }

    /// One of the two snapshots of `health::view` (`src/health.rs` `refresh`); true when the
    /// request may go on with it.
    fn view_part(&mut self, id: u32, obj: Obj) -> bool {
        let now_ms = self.ms();
        let iso = self.reqs[id as usize].iso;
        let isolate = &mut self.isolates[iso as usize];
        let copy_at = isolate.snapshots.get(&obj).and_then(|s| s.fetched_ms);
        let step = isolate.flights.entry(obj).or_default().step(copy_at, now_ms, &SNAPSHOT);
        match step {
            Step::Fresh | Step::Stale | Step::Without => true,
            Step::Wait(ms) => {
                self.after_ms(ms, Ev::ViewPoll { req: id, obj });
                false
            }
            Step::Fetch => {
                let r = &mut self.reqs[id as usize];
                r.blocking = r.blocking.saturating_add(1);
                self.count_blocking(obj, Kind::Snapshot);
                self.call(
                    iso,
                    obj,
                    Kind::Snapshot,
                    0,
                    HEALTH_TIMEOUT_MS,
                    Then::Snapshot { iso, obj, req: id },
                );
                false
            }
        }
    }

    fn part_done(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.pending = r.pending.saturating_sub(1);
        if r.pending == 0 && r.stage == Stage::View {
            r.stage = Stage::Capacity;
            self.advance(id);
        }
    }

    /// The next attempt, on the first route of the isolate's plan not yet failed.
    fn attempt(&mut self, id: u32) {
        let now_ms = self.ms();
        let r = &self.reqs[id as usize];
        let (iso, model) = (r.iso, r.model);
        let routes = &self.routes[model as usize];
        let order = match self.isolates[iso as usize].snapshots.get(&Obj::Model(model)) {
            Some(snap) => snap.health.plan_order(routes, now_ms),
            None => ModelHealth::default().plan_order(routes, now_ms),
        };
        let next = order
            .iter()
            .map(|(i, _, _)| *i as u8)
            .find(|i| !r.fails.iter().any(|(f, _)| f == i));
        let Some(route) = next else {
            // Every route failed: unanswered.
            self.reqs[id as usize].end_ms = now_ms;
            return self.close(id);
        };
        let down = self.is_down(model, route, now_ms);
        let r = &mut self.reqs[id as usize];
        r.route = route;
        if down {
            self.after_ms(FAILED_ATTEMPT_MS, Ev::AttemptFailed(id));
        } else {
            r.stage = Stage::Streaming;
            let ms = self.rng.range(self.p.stream_ms.0, self.p.stream_ms.1) as u64;
            self.after_ms(ms, Ev::StreamEnd(id));
        }
    }

    fn observation(&self, model: u32, route: u8, outcome: AttemptOutcome, at_ms: u64) -> Observation {
        let (route_id, account) = self.routes[model as usize]
            .get(route as usize)
            .cloned()
            .unwrap_or_default();
        Observation {
            route: route_id,
            account,
            outcome,
            at_ms,
            stream: true,
            ttfb_ms: None,
            output_tokens: 0,
            duration_ms: 0,
            extra_try: false,
            probe: false,
            retry_after_ms: None,
            verify: false,
            key: String::new(),
            provoked: false,
        }
    }

    /// `health::apply_local`: the outcome on the isolate's own snapshots at once.
    fn apply_local(&mut self, iso: u32, model: u32, obs: &Observation) {
        let config = self.config;
        let isolate = &mut self.isolates[iso as usize];
        for (obj, scope) in [(Obj::Model(model), Scope::Model), (Obj::Accounts, Scope::Accounts)] {
            let snap = isolate.snapshots.entry(obj).or_insert_with(|| Snap {
                health: ModelHealth::default(),
                fetched_ms: None,
            });
            snap.health.observe_scoped(obs, &config, scope);
        }
        self.note_demotion(iso);
    }

    fn attempt_failed(&mut self, id: u32) {
        let now_ms = self.ms();
        let r = &mut self.reqs[id as usize];
        r.fails.push((r.route, now_ms));
        let (iso, model, route) = (r.iso, r.model, r.route);
        let obs = self.observation(model, route, AttemptOutcome::Failure(FailureClass::Connect), now_ms);
        self.apply_local(iso, model, &obs);
        self.attempt(id);
    }

    /// The answer ends; a stream on the route that went down meanwhile ends broken (a failure,
    /// after commit: not retried).
    fn stream_end(&mut self, id: u32) {
        let now_ms = self.ms();
        let (model, route) = (self.reqs[id as usize].model, self.reqs[id as usize].route);
        let broken = self.is_down(model, route, now_ms);
        let r = &mut self.reqs[id as usize];
        r.end_ms = now_ms;
        let iso = r.iso;
        if broken {
            r.fails.push((route, now_ms));
        }
        let outcome = match broken {
            true => AttemptOutcome::Failure(FailureClass::Connect),
            false => AttemptOutcome::Success,
        };
        let obs = self.observation(model, route, outcome, now_ms);
        self.apply_local(iso, model, &obs);
        self.close(id);
    }

    /// Whether `route` of `model` is down at `now_ms` (the route-down drill).
    fn is_down(&self, model: u32, route: u8, now_ms: u64) -> bool {
        model == 0 && route == 0 && self.p.route_down_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// The answer is over: slots back, settlement and health report queued (`finish.rs` `close`).
    fn close(&mut self, id: u32) {
        let r = &mut self.reqs[id as usize];
        r.stage = Stage::Closed;
        let (iso, key, model, key_slot, cap_slot, refused) = (r.iso, r.key, r.model, r.key_slot, r.cap_slot, r.refused);
        let urgent = !r.fails.is_empty();
        self.totals.finished += 1;
        if key_slot {
            self.call(iso, Obj::Key(key), Kind::Release, 0, RELEASE_TIMEOUT_MS, Then::Nothing);
        }
        if cap_slot {
            self.call(
                iso,
                Obj::Model(model),
                Kind::Release,
                0,
                RELEASE_TIMEOUT_MS,
                Then::Nothing,
            );
        }
        self.push(iso, Which::Settle, id, false);
        if refused {
            return;
        }
        self.push(iso, Which::Report(Obj::Model(model)), id, urgent);
        let observations = self.observations(id);
        let accounts = self.isolates[iso as usize]
            .snapshots
            .get(&Obj::Accounts)
            .map(|s| &s.health);
        if !for_accounts(&observations, accounts).is_empty() {
            self.push(iso, Which::Report(Obj::Accounts), id, urgent);
        }
    }

    /// A request's attempts as the core's observations.
    fn observations(&self, id: u32) -> Vec<Observation> {
        let r = &self.reqs[id as usize];
        let mut all: Vec<Observation> = r
            .fails
            .iter()
            .map(|(route, at)| self.observation(r.model, *route, AttemptOutcome::Failure(FailureClass::Connect), *at))
            .collect();
        let answered = !r.refused && !r.fails.iter().any(|(route, _)| *route == r.route);
        if answered {
            all.push(self.observation(r.model, r.route, AttemptOutcome::Success, r.end_ms));
        }
        all
    }

    /// Whether isolate `iso` now sees the downed route demoted (first time only).
    fn note_demotion(&mut self, iso: u32) {
        let Some(down_at) = self.p.route_down_at_ms else { return };
        let isolate = &mut self.isolates[iso as usize];
        if isolate.knows_down_ms.is_some() {
            return;
        }
        let demoted = isolate
            .snapshots
            .get(&Obj::Model(0))
            .and_then(|s| s.health.routes.get("r0"))
            .is_some_and(|s| s.breaker.is_demoted());
        if demoted {
            isolate.knows_down_ms = Some((self.now / 1_000).max(down_at));
        }
    }

    // ---- batches (`src/batch.rs`: `gather`, `turn`, `run`) --------------------------------------

    fn batches(&mut self, iso: u32, which: Which) -> &mut Batches<u32> {
        let isolate = &mut self.isolates[iso as usize];
        match which {
            Which::Settle => &mut isolate.settle,
            Which::Report(_) => &mut isolate.reports,
        }
    }

    fn push(&mut self, iso: u32, which: Which, req: u32, urgent: bool) {
        let now_ms = self.ms();
        let (ticket, role) = self
            .batches(iso, which)
            .push(&which.key(), req, urgent, now_ms, which.rules());
        match role {
            Role::FlushNow => self.batch_turn(iso, which, ticket, req, true),
            Role::FlushAfter(ms) => self.after_ms(
                ms,
                Ev::Batch {
                    iso,
                    which,
                    ticket,
                    req,
                    flush: true,
                },
            ),
            Role::Ride(ms) => self.after_ms(
                ms,
                Ev::Batch {
                    iso,
                    which,
                    ticket,
                    req,
                    flush: false,
                },
            ),
        }
    }

    fn batch_turn(&mut self, iso: u32, which: Which, ticket: Ticket, req: u32, flush: bool) {
        let now_ms = self.ms();
        let (key, rules) = (which.key(), which.rules());
        if !flush {
            match self.batches(iso, which).check(&key, ticket, now_ms, rules) {
                Check::Sent => return,
                Check::Wait(ms) => {
                    return self.after_ms(
                        ms,
                        Ev::Batch {
                            iso,
                            which,
                            ticket,
                            req,
                            flush: false,
                        },
                    )
                }
                Check::Flush => {}
                Check::Alone => return self.send_alone(iso, which, req),
            }
        }
        let taken = self.batches(iso, which).take(&key, ticket, now_ms);
        if taken.items.is_empty() {
            // A rider took the queue, this item with it: ride on that batch.
            return self.after_ms(
                rules.wait_ms,
                Ev::Batch {
                    iso,
                    which,
                    ticket,
                    req,
                    flush: false,
                },
            );
        }
        let n = taken.items.len() as u64;
        let (obj, kind, statements) = match which {
            Which::Settle => (Obj::D1, Kind::D1Settle, SETTLE_STATEMENTS * n),
            Which::Report(obj) => (obj, Kind::Observe, 0),
        };
        let timeout = match which {
            Which::Settle => D1_DEADLINE_MS,
            Which::Report(_) => HEALTH_TIMEOUT_MS,
        };
        self.call(
            iso,
            obj,
            kind,
            statements,
            timeout,
            Then::Batch {
                iso,
                which,
                taken,
                own: req,
            },
        );
    }

    fn send_alone(&mut self, iso: u32, which: Which, req: u32) {
        let (obj, kind, statements, timeout) = match which {
            Which::Settle => (Obj::D1, Kind::D1Settle, SETTLE_STATEMENTS, D1_DEADLINE_MS),
            Which::Report(obj) => (obj, Kind::Observe, 0, HEALTH_TIMEOUT_MS),
        };
        self.call(iso, obj, kind, statements, timeout, Then::Alone { which, req });
    }

    fn batch_done(
        &mut self,
        iso: u32,
        which: Which,
        taken: Taken<u32>,
        own: u32,
        ok: bool,
        reply: Option<ModelHealth>,
    ) {
        let now_ms = self.ms();
        if ok {
            self.batches(iso, which).sent(&taken.tickets);
            if let (Which::Report(obj), Some(health)) = (which, reply) {
                self.remember(iso, obj, health);
            }
            return;
        }
        let own_rejoins = taken.own.is_some();
        let failed = self
            .batches(iso, which)
            .failed(&which.key(), taken, now_ms, which.rules());
        for item in failed.given_up {
            self.give_up(iso, which, item);
        }
        if let (Some(ticket), true) = (failed.rejoined, own_rejoins) {
            let wait = which.rules().wait_ms;
            self.after_ms(
                wait,
                Ev::Batch {
                    iso,
                    which,
                    ticket,
                    req: own,
                    flush: false,
                },
            );
        }
    }

    /// An item whose batch failed its last send: a settlement to the outbox, a report dropped.
    fn give_up(&mut self, iso: u32, which: Which, req: u32) {
        match which {
            Which::Settle => {
                let shard = Obj::Outbox((req as u64 % OUTBOX_SHARDS) as u32);
                self.call(iso, shard, Kind::Keep, 0, OUTBOX_DEADLINE_MS, Then::Keep(req));
            }
            Which::Report(_) => self.totals.reports_dropped += 1,
        }
    }

    // ---- calls and stores ------------------------------------------------------------------------

    fn call(&mut self, iso: u32, obj: Obj, kind: Kind, statements: u64, timeout_ms: u64, then: Then) {
        let rtt = self.isolates.get(iso as usize).map_or(10_000.0, |i| i.rtt_us);
        let half = (rtt * self.rng.range(0.9, 1.1) / 2.0) as u64;
        self.issue(obj, kind, statements, half, timeout_ms, then);
    }

    fn issue(&mut self, obj: Obj, kind: Kind, statements: u64, half_rtt_us: u64, timeout_ms: u64, then: Then) {
        let call = Call {
            obj,
            kind,
            statements,
            half_rtt_us,
            deadline_us: self.now + timeout_ms * 1_000,
            then,
            reply: None,
        };
        let id = match self.free_calls.pop() {
            Some(id) => {
                self.calls[id as usize] = Some(call);
                id
            }
            None => {
                self.calls.push(Some(call));
                (self.calls.len() - 1) as u32
            }
        };
        *self.totals.issued.entry((obj.class(), kind)).or_default() += 1;
        if self.window.contains(self.now) {
            *self.totals.window_issued.entry((obj.class(), kind)).or_default() += 1;
        }
        self.at(self.now + half_rtt_us, Ev::Arrive(id));
    }

    fn service_us(&self, obj: Obj, kind: Kind, statements: u64) -> u64 {
        let s = &self.p.service;
        match (obj, kind) {
            (Obj::D1, _) => s.d1_call_us + s.d1_statement_us * statements,
            (Obj::Model(_), Kind::Snapshot) => s.model_snapshot_us,
            (Obj::Model(_), Kind::Observe) => s.model_observe_us,
            (Obj::Model(_), Kind::Full) => s.model_full_us,
            (Obj::Model(_), _) => s.capacity_us,
            (Obj::Accounts, Kind::Observe) => s.accounts_observe_us,
            (Obj::Accounts, _) => s.accounts_snapshot_us,
            (Obj::Key(_), _) => s.key_limit_us,
            (Obj::Status, _) => s.status_us,
            (Obj::Outbox(_), _) => s.outbox_us,
        }
    }

    /// A call reaches its store: served in turn (its effect applied now, in arrival order) or
    /// refused; its answer goes back, or the caller's deadline passes first.
    fn arrive(&mut self, id: u32) {
        let Some(call) = self.calls.get(id as usize).and_then(|c| c.as_ref()) else {
            return;
        };
        let (obj, kind, half, deadline) = (call.obj, call.kind, call.half_rtt_us, call.deadline_us);
        let service = self.service_us(obj, kind, call.statements);
        let backlog = self.p.overload_backlog_ms * 1_000;
        let window = self.window;
        let offer = self
            .servers
            .entry(obj)
            .or_default()
            .offer(self.now, service, backlog, &window);
        match offer {
            Offer::Refused => self.at(self.now + half, Ev::Reply { call: id, ok: false }),
            Offer::Served { finish, .. } => {
                self.apply(id);
                let back = finish + half;
                if back <= deadline {
                    self.at(back, Ev::Reply { call: id, ok: true });
                } else {
                    self.at(deadline.max(self.now), Ev::Reply { call: id, ok: false });
                }
            }
        }
    }

    /// What a served call does to its store's state.
    fn apply(&mut self, id: u32) {
        let now_ms = self.ms();
        let Some(call) = self.calls.get(id as usize).and_then(|c| c.as_ref()) else {
            return;
        };
        let (obj, kind) = (call.obj, call.kind);
        let items: Vec<u32> = match &call.then {
            Then::Batch { taken, .. } => taken.items.clone(),
            Then::Alone { req, .. } | Then::Keep(req) => vec![*req],
            _ => Vec::new(),
        };
        let reply = match (obj, kind) {
            (Obj::Model(m), Kind::Observe) => {
                let observations: Vec<Observation> = items.iter().flat_map(|r| self.observations(*r)).collect();
                let config = self.config;
                let health = self.model_objects.entry(m).or_default();
                for o in &observations {
                    health.observe_scoped(o, &config, Scope::Model);
                }
                let demoted = health.routes.get("r0").is_some_and(|s| s.breaker.is_demoted());
                let reply = Some(health.snapshot());
                if m == 0 && demoted && self.totals.object_demoted_ms.is_none() && self.p.route_down_at_ms.is_some() {
                    self.totals.object_demoted_ms = Some(now_ms);
                }
                reply
            }
            (Obj::Model(m), Kind::Snapshot) => Some(self.model_objects.entry(m).or_default().snapshot()),
            (Obj::Accounts, Kind::Observe) => {
                let observations: Vec<Observation> = items.iter().flat_map(|r| self.observations(*r)).collect();
                let config = self.config;
                let kept = for_accounts(&observations, Some(&self.accounts_object));
                for o in &kept {
                    self.accounts_object.observe_scoped(o, &config, Scope::Accounts);
                }
                Some(self.accounts_object.snapshot())
            }
            (Obj::Accounts, Kind::Snapshot) => Some(self.accounts_object.snapshot()),
            (Obj::D1, Kind::D1Settle) => {
                for r in &items {
                    let req = &mut self.reqs[*r as usize];
                    if req.settled == Settled::Open {
                        req.settled = Settled::Written;
                    }
                }
                None
            }
            (Obj::Outbox(_), Kind::Keep) => {
                for r in &items {
                    let req = &mut self.reqs[*r as usize];
                    if req.settled == Settled::Open {
                        let in_time = now_ms.saturating_sub(req.end_ms) <= WAIT_UNTIL_MS;
                        req.settled = if in_time { Settled::Kept } else { Settled::Lost };
                    }
                }
                None
            }
            (Obj::Status, Kind::StatusGet) => {
                self.status_build();
                None
            }
            _ => None,
        };
        if let Some(Some(call)) = self.calls.get_mut(id as usize) {
            call.reply = reply;
        }
    }

    fn reply(&mut self, id: u32, ok: bool) {
        let Some(call) = self.calls.get_mut(id as usize).and_then(Option::take) else {
            return;
        };
        self.free_calls.push(id);
        let now_ms = self.ms();
        match call.then {
            Then::Req(req) => self.resume(req, ok, call.kind),
            Then::Snapshot { iso, obj, req } => {
                if let (true, Some(health)) = (ok, call.reply) {
                    self.remember(iso, obj, health);
                }
                let isolate = &mut self.isolates[iso as usize];
                isolate.flights.entry(obj).or_default().done(ok, now_ms, &SNAPSHOT);
                self.part_done(req);
            }
            Then::Batch { iso, which, taken, own } => self.batch_done(iso, which, taken, own, ok, call.reply),
            Then::Alone { which, req } => {
                if !ok {
                    let iso = self.reqs[req as usize].iso;
                    self.give_up(iso, which, req);
                }
            }
            Then::Keep(req) => {
                if !ok && self.reqs[req as usize].settled == Settled::Open {
                    self.reqs[req as usize].settled = Settled::Lost;
                }
            }
            Then::StatusFetch(iso) => self.status_fetched(iso, ok),
            Then::Nothing => {}
        }
    }

    /// An object's answer replaces the isolate's snapshot (`health::remember`).
    fn remember(&mut self, iso: u32, obj: Obj, health: ModelHealth) {
        let now_ms = self.ms();
        self.isolates[iso as usize].snapshots.insert(
            obj,
            Snap {
                health,
                fetched_ms: Some(now_ms),
            },
        );
        if obj == Obj::Model(0) {
            self.note_demotion(iso);
        }
    }

    // ---- the public report (`src/http/status.rs`, `src/report.rs`) ------------------------------

    fn public_hit(&mut self) {
        if self.now >= self.arrivals_end {
            return;
        }
        let gap = self.rng.exp(1e6 / self.p.public_hits) as u64;
        self.at(self.now + gap.max(1), Ev::PublicHit);
        let now_ms = self.ms();
        let iso = self.rng.below(self.isolates.len()) as u32;
        let isolate = &mut self.isolates[iso as usize];
        if isolate.status_flight.step(isolate.status_at, now_ms, &STATUS_REPORT) == Step::Fetch {
            self.call(
                iso,
                Obj::Status,
                Kind::StatusGet,
                0,
                STATUS_TIMEOUT_MS,
                Then::StatusFetch(iso),
            );
        }
    }

    fn status_fetched(&mut self, iso: u32, ok: bool) {
        let now_ms = self.ms();
        let isolate = &mut self.isolates[iso as usize];
        let had = isolate.status_at.is_some();
        if ok || !had {
            isolate.status_at = Some(now_ms);
        }
        isolate.status_flight.done(ok || !had, now_ms, &STATUS_REPORT);
        if !ok && !had {
            // No report at all: the isolate builds its own, a `full` call to every object.
            self.full_calls(iso);
        }
    }

    /// The status object's copy, rebuilt when older than 3 s (the build taken as instant).
    fn status_build(&mut self) {
        let now_ms = self.ms();
        if self.status_flight.step(self.status_at, now_ms, &STATUS_REPORT) == Step::Fetch {
            self.status_at = Some(now_ms);
            self.status_flight.done(true, now_ms, &STATUS_REPORT);
            self.full_calls(u32::MAX);
        }
    }

    /// A `full` call to every model's object and to `accounts`, from isolate `iso` (`u32::MAX`:
    /// the status object, next to them).
    fn full_calls(&mut self, iso: u32) {
        for m in 0..self.p.models.max(1) as u32 {
            self.call(iso, Obj::Model(m), Kind::Full, 0, HEALTH_TIMEOUT_MS, Then::Nothing);
        }
        self.call(iso, Obj::Accounts, Kind::Full, 0, HEALTH_TIMEOUT_MS, Then::Nothing);
    }

    // ---- outcomes ----------------------------------------------------------------------------------

    fn outcomes(&self) -> Outcomes {
        let mut o = Outcomes::default();
        for r in &self.reqs {
            match r.settled {
                Settled::Open => o.unsettled += 1,
                Settled::Written => o.settled += 1,
                Settled::Kept => o.outboxed += 1,
                Settled::Lost => o.lost += 1,
            }
            if r.stage != Stage::Closed {
                o.unfinished += 1;
            }
            if self.window.contains(r.arrived_us) && !r.refused {
                o.blocking.push(u32::from(r.blocking));
            }
        }
        if let Some(down_at) = self.p.route_down_at_ms {
            let mut reach: Vec<u32> = self
                .isolates
                .iter()
                .map(|i| i.knows_down_ms.map_or(u32::MAX, |at| (at - down_at) as u32))
                .collect();
            reach.sort_unstable();
            o.demotion_reach_ms = Some(reach);
        }
        o
    }
}
