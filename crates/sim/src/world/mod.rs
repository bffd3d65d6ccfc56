//! The simulated deployment: isolates running the Worker's request path against Durable Objects
//! and D1, in simulated time (µs; the core's types get ms). What each request does, in order, is
//! `src/`'s (docs/SCALE.md's call table), with the core's own types deciding every call:
//!
//! 1. the key and the catalog (cached 5 s per isolate from when D1 read them) — blocking, one read
//!    per request that finds its copy gone or stale (no single flight); a copy 4 s old is read
//!    again beside the request that finds it, one read at a time (`Store::refresh_early`). Read
//!    through keyrings (`keyring`, session 24: a key's keyring by its hash and the isolate, the
//!    catalog's by the isolate; each answers from a copy younger than 2 s, else reads D1 once for
//!    all its waiting calls), or from D1 itself (`Params::keyrings` false);
//! 2. a limited key's `LimitObject` `acquire` (blocking), released after the answer;
//! 3. `health::view`: a snapshot of the model's object and of `accounts`, each refreshed through a
//!    [`Flight`] per isolate (`SNAPSHOT`): the request that fetches waits on it (blocking), the others
//!    use the stale copy, a request without one waits for the fetch under way;
//! 4. capacity on a capped model: `acquire` on the model object (blocking), `release` after;
//! 5. the hold: fast path on a fresh balance snapshot (5 s per account per isolate: the hold written
//!    50 ms later with the isolate's others of the next 200 ms for its ledger, in the background,
//!    unless settled first), else the awaited path (balance read and atomic hold: 2 blocking D1
//!    calls); the fast path's allowance is assumed ample;
//! 6. the plan (`ModelHealth::plan_order` on the isolate's snapshot) and the attempts: a route that
//!    is down fails in [`FAILED_ATTEMPT_MS`] and the outcome is applied to the isolate's snapshot at
//!    once; the answer streams for ≈ 2 s;
//! 7. then, in the background: the settlement in the isolate's D1 batch (`Batches`, `SETTLE_BATCH`;
//!    one round of set statements),
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
//!
//! `Design::Sharded` (the health shards as built, `tier`) changes steps 3 and 7 only: one
//! snapshot, of the isolate's health shard, refreshed in the background; reports to that shard only;
//! the upstream accounts' breakers kept by one object per account, told and asked by the models'
//! objects (`tier`), never by an isolate.

mod batch;
mod calls;
mod desk;
mod keyring;
mod request;
mod status;
mod tier;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, HashSet};

use switchyard_core::batch::{Batches, Check, Role, Rules as BatchRules, Taken, Ticket};
use switchyard_core::classify::FailureClass;
use switchyard_core::flight::{Flight, Step};
use switchyard_core::health::{for_accounts, AttemptOutcome, Breaker, HealthConfig, ModelHealth, Observation, Scope};
use switchyard_core::limits::{PermitReply, Permits};

use crate::params::*;
use crate::report::{Outcomes, Report, Totals};
use crate::rng::{Rng, Zipf};
use crate::server::{Offer, Server, Window};
use crate::stores::{Kind, Obj};

/// Which of an isolate's batches an item is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// Settlements for one ledger (the Worker batches an isolate's settlements together and
    /// writes one batch per ledger they name: the same calls to each ledger).
    Settle(u8),
    /// Fast holds' rows for one ledger (`src/billing.rs` `write_fast_hold`).
    Hold(u8),
    /// A busy ledger's items (settlements, and fast holds marked `desk::HOLD_BIT`) for its desk
    /// (ledger, n).
    Desk(u8, u32),
    Report(Obj),
}

impl Which {
    fn key(self) -> String {
        match self {
            Which::Settle(ledger) => format!("ledger:{ledger}"),
            Which::Hold(ledger) => format!("holds:{ledger}"),
            Which::Desk(ledger, n) => switchyard_core::desks::name(ledger, n),
            Which::Report(obj) => obj.name(),
        }
    }

    fn rules(self) -> &'static BatchRules {
        match self {
            Which::Settle(_) => &SETTLE_BATCH,
            Which::Hold(_) => &HOLD_BATCH,
            Which::Desk(..) => &DESK_BATCH,
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
    /// Nothing to settle: refused before its key was known (no record, `src/http/v1.rs`).
    Unrecorded,
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
    /// It found a cache of its isolate's missing or too old (its key, the catalog, its model's
    /// health, its account's balance) and waited for it: not a warm request.
    cold: bool,
    key_slot: bool,
    /// Which of its key's objects its `acquire` went to (and its `release` goes to).
    key_shard: u32,
    /// The batch of permits its blocking call asked for (0: none; `u32::MAX`: none came, ask
    /// with `acquire`).
    asked: u32,
    cap_slot: bool,
    /// Which of its model's capacity objects its `acquire` went to (and its `release` goes to).
    cap_shard: u32,
    /// Its last read of a key or the catalog, as the answer gave it: when D1 was read, and the
    /// ledger's counter then.
    answered: Option<(u64, u64)>,
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
    holds: Batches<u32>,
    desk: Batches<u32>,
    /// Per ledger: its pace as this isolate's reads of its settlement counter show it.
    paces: HashMap<u8, switchyard_core::desks::Pace>,
    catalog_at: Option<u64>,
    keys: HashMap<u32, u64>,
    /// Early reads under way: keys (`Some`) and the catalog (`None`).
    refreshing: HashSet<Option<u32>>,
    balances: HashMap<u32, u64>,
    /// Its permits per `rpm`-only key (core `Permits`).
    permits: HashMap<u32, Permits>,
    status_at: Option<u64>,
    status_flight: Flight,
    /// When its snapshot of model 0 first showed the downed route demoted.
    knows_down_ms: Option<u64>,
}

/// What the caller does with a call's answer.
enum Then {
    /// A request waits on it.
    Req(u32),
    /// A snapshot fetch by the isolate's flight, made by a request (which waits on it, unless it
    /// goes on with its stale copy: `None`).
    Snapshot {
        iso: u32,
        obj: Obj,
        req: Option<u32>,
    },
    /// `Design::Sharded`: a shard's call to the model's object — its queue forwarded (`taken`, to
    /// rejoin if it fails), or a snapshot.
    ShardFlush {
        model: u32,
        shard: u32,
        observations: Vec<Observation>,
        taken: Option<switchyard_core::health::shard::Pending>,
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
    /// A desk's settlements handed to the outbox after D1 refused its flushes.
    KeepAll(Vec<u32>),
    /// A desk's flush to D1: the items it wrote.
    DeskFlushed {
        ledger: u8,
        n: u32,
        items: Vec<u32>,
    },
    StatusFetch(u32),
    /// A keyring's read of a key from D1, for the calls waiting on it (`World::ring_waiting`).
    RingRead {
        ring: u32,
        key: u32,
    },
    /// An early read of a key (`Some`) or the catalog (`None`) beside a request
    /// (`Store::refresh_early`).
    Refreshed {
        iso: u32,
        key: Option<u32>,
    },
    /// A batch of permits asked for in the background.
    Permits {
        iso: u32,
        key: u32,
        asked: u32,
    },
    /// `Design::Sharded`: a model's object's call to an account's object (`observations` told, or
    /// none: a poll); the answer folds into the model's copies.
    AccountFold {
        model: u32,
        account: u32,
        observations: Vec<Observation>,
    },
    Nothing,
}

/// What a D1 call asks of its database: statements, and the rows set statements read from
/// their JSON parameter (a settlement round's). Objects' calls carry none.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Work {
    pub statements: u64,
    pub rows: u64,
}

impl From<u64> for Work {
    fn from(statements: u64) -> Work {
        Work { statements, rows: 0 }
    }
}

struct Call {
    obj: Obj,
    kind: Kind,
    work: Work,
    half_rtt_us: u64,
    deadline_us: u64,
    then: Then,
    /// The object's snapshot in its answer (`snapshot`, `observe`).
    reply: Option<ModelHealth>,
    /// A key read's answer: when D1 was read and the ledger's counter then.
    read: Option<(u64, u64)>,
    /// Its answer waits on a call its store made (a keyring reading D1): sent from there.
    deferred: bool,
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
    /// A desk's flush is due.
    DeskFlush {
        ledger: u8,
        n: u32,
    },
    /// `Design::Sharded`: a shard's wake-up (stale unless `at` is still its next).
    ShardFlush {
        model: u32,
        shard: u32,
        at: u64,
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
    /// `Design::Sharded`: each upstream account's object, and when each model's object last
    /// asked its accounts.
    account_objects: HashMap<u32, ModelHealth>,
    polled_ms: HashMap<u32, u64>,
    status_flight: Flight,
    status_at: Option<u64>,
    /// `Design::Sharded`: the health shards, by (model, shard).
    shards: HashMap<(u32, u32), tier::Shard>,
    /// Requests waiting for the batch of permits their isolate is asking for, by (isolate, key).
    permit_waiters: HashMap<(u32, u32), Vec<u32>>,
    /// Per ledger: settlements it has applied (`ledger_pace.settlements_total`).
    settled_total: HashMap<u8, u64>,
    /// The busy ledgers' desks, by (ledger, n).
    desks: HashMap<(u8, u32), desk::Desk>,
    /// The keyrings' copies of keys: per keyring, each key's read and the ledger's counter then.
    keyrings: HashMap<u32, switchyard_core::keyrings::Copies<u32, u64>>,
    /// Calls waiting on a keyring's read of a key from D1, by (keyring, key).
    ring_waiting: HashMap<(u32, u32), Vec<u32>>,
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
            account_objects: HashMap::new(),
            polled_ms: HashMap::new(),
            status_flight: Flight::default(),
            status_at: None,
            shards: HashMap::new(),
            permit_waiters: HashMap::new(),
            settled_total: HashMap::new(),
            desks: HashMap::new(),
            keyrings: HashMap::new(),
            ring_waiting: HashMap::new(),
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
                // Left to its settlement if that came first; else with the isolate's others.
                if self.reqs[req as usize].end_ms == 0 {
                    let iso = self.reqs[req as usize].iso;
                    let (which, item) = self.money_batch(iso, req, true);
                    self.push(iso, which, item, false);
                }
            }
            Ev::Batch {
                iso,
                which,
                ticket,
                req,
                flush,
            } => self.batch_turn(iso, which, ticket, req, flush),
            Ev::ShardFlush { model, shard, at } => self.shard_flush(model, shard, at),
            Ev::DeskFlush { ledger, n } => self.desk_flush(ledger, n),
            Ev::Arrive(call) => self.arrive(call),
            Ev::Reply { call, ok } => self.reply(call, ok),
        }
    }

    // ---- outcomes ----------------------------------------------------------------------------------

    fn outcomes(&self) -> Outcomes {
        let mut o = Outcomes::default();
        for r in &self.reqs {
            match r.settled {
                Settled::Open => o.unsettled += 1,
                Settled::Unrecorded => o.unrecorded += 1,
                Settled::Written => o.settled += 1,
                Settled::Kept => o.outboxed += 1,
                Settled::Lost => o.lost += 1,
            }
            if r.stage != Stage::Closed {
                o.unfinished += 1;
            }
            if self.window.contains(r.arrived_us) && !r.refused {
                o.blocking.push(u32::from(r.blocking));
                if !r.cold {
                    o.blocking_warm.push(u32::from(r.blocking));
                }
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
