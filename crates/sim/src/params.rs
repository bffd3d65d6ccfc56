//! What a run simulates: the design, the traffic, the stores' service times, and the Worker's own
//! rules (copied from `src/`, where they are private; `tests/rules.rs` checks the copies against the
//! source text).
//!
//! Service times are **assumptions** until issue 34's benchmark measures them (no per-call figure
//! exists yet in BENCHMARKS.md or docs/SCALE.md). Each is chosen to match a ceiling docs/SCALE.md
//! and issue 34 state: a Durable Object serves about 1,000 small calls/s (≈ 1 ms each); the model
//! object's `observe` writes the whole `ModelHealth` (≈ 40 + 23 × routes KB) and answers with the
//! snapshot and its stats (sorting TTFB samples), ≈ 250–500 calls/s; capacity ≈ 530 requests/s at 2
//! calls each; one D1 database ≈ 500–1,400 requests/s at ≈ 8 statements each.

use switchyard_core::flight::Rules as FlightRules;

/// Which design the isolates and objects follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Design {
    /// The request path of `src/` before the health shards (main until session 17): every isolate
    /// snapshots from and reports to the model's object and the accounts object itself.
    Direct,
    /// What main does: the health shards (issue 34's health tier, `world/tier.rs`): each model's health
    /// goes through `health_shards` shard objects; an isolate reports to and snapshots from its
    /// shard only (its answer carries the accounts' breakers: no account calls from isolates),
    /// refreshing a stale snapshot in the background (a request waits only with no copy at all);
    /// a shard forwards its queue to the model's object (failures and probes at once, one
    /// forwarding per 100 ms; successes within 1 s) and renews its copy after 250 ms. Each
    /// upstream account has an object, told by the models' objects what concerns it and asked by
    /// each every 2 s (session 18; before, one `accounts` object that every shard asked every
    /// 2 s). Capacity, key limits, D1 and the caches stay as today.
    Sharded,
}

impl Design {
    pub fn parse(s: &str) -> Option<Design> {
        match s {
            "direct" => Some(Design::Direct),
            "sharded" => Some(Design::Sharded),
            _ => None,
        }
    }
}

/// Service time of each call, µs (assumptions: see the module doc).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceTimes {
    /// Model object `snapshot`: breakers and each route's stats (median TTFB: sorts samples).
    pub model_snapshot_us: u64,
    /// Model object `observe`: apply, serialise and `put` the whole `ModelHealth`, answer the snapshot.
    pub model_observe_us: u64,
    /// Model object `full` (the status object's build): the whole state as JSON.
    pub model_full_us: u64,
    /// Capacity `acquire` / `release` on the model object (one SQLite row each).
    pub capacity_us: u64,
    /// An accounts object's `snapshot` / `observe` (breakers only: small): the one `accounts`
    /// object (`Design::Direct`), each account's (`Design::Sharded`).
    pub accounts_snapshot_us: u64,
    pub accounts_observe_us: u64,
    /// A key's `LimitObject` `acquire` / `release` (the whole `KeyState` written per grant).
    pub key_limit_us: u64,
    /// The status object answering from its copy in memory.
    pub status_us: u64,
    /// An outbox object keeping one settlement.
    pub outbox_us: u64,
    /// A ledger's desk (core `desks`) keeping an isolate's batch of items: measured 0.35–0.65 ms
    /// of workerd CPU over the floor (`bench/objects.mjs`, session 23; one item, eight).
    pub desk_us: u64,
    /// A health shard (`Design::Sharded`) taking reports, answering a snapshot or a push: in
    /// memory, nothing written.
    pub shard_us: u64,
    /// A keyring answering a key read from its copy in memory (its D1 read, when the copy is
    /// stale, is a D1 call of its own).
    pub keyring_us: u64,
    /// One D1 call (a statement or a batch): its fixed part, per statement, and per row a set
    /// statement reads from its JSON parameter. A row: `bench/d1.mjs` (session 24, 5 to 500 rows
    /// in one statement) measured ≈ 1/100 of a one-row statement (6.7 µs against 0.66 ms of
    /// workerd CPU), so 1 µs against the 100 µs a statement is charged here (5 µs before, when 80
    /// rows could not resolve it).
    pub d1_call_us: u64,
    pub d1_statement_us: u64,
    pub d1_row_us: u64,
}

impl Default for ServiceTimes {
    fn default() -> Self {
        ServiceTimes {
            model_snapshot_us: 1_000,
            model_observe_us: 2_500,
            model_full_us: 3_000,
            capacity_us: 900,
            accounts_snapshot_us: 500,
            accounts_observe_us: 1_000,
            key_limit_us: 1_000,
            status_us: 200,
            outbox_us: 1_000,
            desk_us: 500,
            shard_us: 300,
            keyring_us: 300,
            d1_call_us: 200,
            d1_statement_us: 100,
            d1_row_us: 1,
        }
    }
}

impl ServiceTimes {
    /// D1 answering at once (a sharded database, or none): what the objects alone would see.
    pub fn without_d1(self) -> ServiceTimes {
        ServiceTimes {
            d1_call_us: 0,
            d1_statement_us: 0,
            d1_row_us: 0,
            ..self
        }
    }

    /// Every service time zero: stores that never queue, for the calls a working store is
    /// offered (the overload drill's control run).
    pub fn instant() -> ServiceTimes {
        ServiceTimes {
            model_snapshot_us: 0,
            model_observe_us: 0,
            model_full_us: 0,
            capacity_us: 0,
            accounts_snapshot_us: 0,
            accounts_observe_us: 0,
            key_limit_us: 0,
            status_us: 0,
            outbox_us: 0,
            desk_us: 0,
            shard_us: 0,
            keyring_us: 0,
            d1_call_us: 0,
            d1_statement_us: 0,
            d1_row_us: 0,
        }
    }
}

/// One run.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub design: Design,
    pub seed: u64,
    /// Isolates serving the traffic (each with its own batches, snapshots, caches).
    pub isolates: usize,
    /// Requests per second, all models.
    pub rate: f64,
    /// Models; model 0 takes `hot_share` of the traffic, the others share the rest evenly.
    pub models: usize,
    pub hot_share: f64,
    /// Routes per model (route `r` of model `m` on upstream account `(m + r) % upstream_accounts`).
    pub routes: usize,
    pub upstream_accounts: usize,
    /// Whether model 0 has a capped route (then every request on it acquires and releases capacity).
    pub hot_model_capped: bool,
    /// Customer accounts (Zipf-drawn with `zipf_s`) and keys per account (Zipf within the account).
    pub accounts: usize,
    pub keys_per_account: usize,
    pub zipf_s: f64,
    /// One key in this many has limits (`rpm`, `max_concurrent`): a `LimitObject` per key.
    pub limited_key_every: usize,
    /// Of the limited keys, one in this many has `rpm` alone: in `Design::Sharded` its isolates
    /// spend permits taken in batches (session 18); the others limit concurrency (one `acquire`
    /// and one `release` per request). 0: none.
    pub rpm_only_every: usize,
    /// `Design::Direct`: whether every upstream account once failed — the `accounts` object kept
    /// a breaker for each (never removed then), so every success was reported to it.
    pub accounts_failed_before: bool,
    /// Stream duration, uniform in this range, ms (mean ≈ 2 s).
    pub stream_ms: (f64, f64),
    /// Round trips from an isolate to an object or D1: each isolate's own, log-uniform in this
    /// range, ms; each call ±10 % around it.
    pub rtt_ms: (f64, f64),
    /// Hits on `/status`, `/api/health/models`, `/v1/models` per second, all isolates.
    pub public_hits: f64,
    /// Route 0 of model 0 fails every attempt from this time on (the route-down drill), ms.
    pub route_down_at_ms: Option<u64>,
    /// Simulated time before the measured window (isolates warm up), and the window, ms.
    pub warmup_ms: u64,
    pub measure_ms: u64,
    pub service: ServiceTimes,
    /// Backlog past which a store refuses a call at once, ms (assumption).
    pub overload_backlog_ms: u64,
    /// Health shards per model (`Design::Sharded`).
    pub health_shards: usize,
    /// D1 ledgers (`LEDGER_SHARDS`, core `ledgers`: at most 64); accounts are placed by core
    /// `ledgers::place`.
    pub ledgers: u8,
    /// Policy `desk_from_per_s` (core `desks`): an account settling this many a second has desks,
    /// read by each isolate from two reads of its counter; 0: never (before session 23).
    pub desk_from_per_s: u64,
    /// Whether isolates read keys through keyrings (core `keyrings`, session 24) rather than
    /// from the key's ledger.
    pub keyrings: bool,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            design: Design::Direct,
            seed: 1,
            isolates: 300,
            rate: 1_000.0,
            models: 20,
            hot_share: 1.0,
            routes: 3,
            upstream_accounts: 8,
            hot_model_capped: false,
            accounts: 10_000,
            keys_per_account: 4,
            zipf_s: 1.0,
            limited_key_every: 4,
            rpm_only_every: 2,
            accounts_failed_before: true,
            stream_ms: (1_000.0, 3_000.0),
            rtt_ms: (5.0, 250.0),
            public_hits: 100.0,
            route_down_at_ms: None,
            warmup_ms: 3_000,
            measure_ms: 5_000,
            service: ServiceTimes::default(),
            overload_backlog_ms: 1_000,
            health_shards: 32,
            ledgers: 1,
            desk_from_per_s: switchyard_core::catalog::Policy::default().desk_from_per_s,
            keyrings: true,
        }
    }
}

// ---- the Worker's rules, as src/ has them --------------------------------------------------------

/// The Worker's batches: the core's own rules.
pub use switchyard_core::batch::{
    DESK_ITEMS as DESK_BATCH, FAST_HOLDS as HOLD_BATCH, HEALTH_REPORTS as REPORT_BATCH, SETTLEMENTS as SETTLE_BATCH,
};

/// `src/health.rs` `CALL_TIMEOUT_MS`: a request waits this long for a health object.
pub const HEALTH_TIMEOUT_MS: u64 = 300;

/// `src/health.rs` `snapshot_rules(health_snapshot_ms)` at the default 1 s.
pub const SNAPSHOT: FlightRules = FlightRules {
    fresh_ms: 1_000,
    give_up_ms: HEALTH_TIMEOUT_MS + 200,
    poll_ms: 20,
    backoff_ms: 1_000,
    backoff_max_ms: 8_000,
};

/// `src/report.rs` `REPORT`: the public report, per isolate and in the status object.
pub const STATUS_REPORT: FlightRules = FlightRules {
    fresh_ms: 3_000,
    give_up_ms: 5_000,
    poll_ms: 25,
    backoff_ms: 1_000,
    backoff_max_ms: 8_000,
};

/// `src/report.rs` `CALL_TIMEOUT_MS`: an isolate's wait for the status object.
pub const STATUS_TIMEOUT_MS: u64 = 4_000;
/// `src/store.rs` `D1_DEADLINE_MS` and `CACHE_TTL_MS` (the catalog and found keys).
pub const D1_DEADLINE_MS: u64 = 5_000;
pub const CACHE_TTL_MS: u64 = 5_000;
/// `src/store.rs` `KEYRING_MARGIN_MS`: beyond a keyring's own D1 deadline, how long an isolate
/// waits for it.
pub const KEYRING_MARGIN_MS: u64 = 500;
/// `src/store.rs` `REFRESH_AFTER_MS`: a copy this old is read again beside the request.
pub const REFRESH_AFTER_MS: u64 = 4_000;
/// Policy default `balance_snapshot_ms` (the fast path's balance snapshot per account).
pub const BALANCE_SNAPSHOT_MS: u64 = 5_000;
/// `src/billing.rs` `FAST_HOLD_DEFER_MS`.
pub const FAST_HOLD_DEFER_MS: u64 = 50;
/// `src/limits.rs` `CALL_MARGIN_MS` on top of policy `key_wait_ms` (2 s) / `capacity_wait_ms`
/// (10 s), and `RELEASE_TIMEOUT_MS`.
pub const KEY_TIMEOUT_MS: u64 = 2_000 + 500;
pub const CAPACITY_TIMEOUT_MS: u64 = 10_000 + 500;
pub const RELEASE_TIMEOUT_MS: u64 = 2_000;
/// How long a request waits for a batch of permits (`src/limits.rs`), ms.
pub const PERMITS_TIMEOUT_MS: u64 = 300;
/// The `rpm` of the keys that have `rpm` alone: ample (never reached in these runs), so their
/// batches grow to `MAX_PERMITS` and their windows spread over core `MAX_KEY_SHARDS` objects
/// (`Design::Sharded`).
pub const KEY_RPM: u32 = 1_000_000;
/// The `max_concurrent` of the keys that limit concurrency: ample (never reached in these runs),
/// so their slots spread over core `MAX_KEY_SHARDS` objects (`Design::Sharded`).
pub const KEY_MAX_CONCURRENT: u32 = 1_000_000;
/// The capped model's route's `max_concurrency`: ample (never reached in these runs), so its
/// capacity spreads over core `MAX_KEY_SHARDS` objects (`Design::Sharded`).
pub const ROUTE_MAX_CONCURRENCY: u32 = 1_000_000;
/// `src/outbox.rs` `SHARDS` and `KEEP_DEADLINE_MS`.
pub const OUTBOX_SHARDS: u64 = 16;
pub const OUTBOX_DEADLINE_MS: u64 = 5_000;
/// `src/billing.rs` `DESK_DEADLINE_MS`: how long an isolate waits for a desk to keep its batch.
pub const DESK_DEADLINE_MS: u64 = 2_000;
/// `src/desk.rs`: a flush D1 refused is tried again this much later, twice; then the outbox.
pub const DESK_RETRY_MS: u64 = 200;
pub const DESK_TRIES: u32 = 3;
/// `ctx.waitUntil`'s 30 s after the response: a settlement not written or kept by then is lost.
pub const WAIT_UNTIL_MS: u64 = 30_000;
/// Statements per D1 call: a key or catalog or balance read 1, a hold 2, a settlement batch 6
/// (one round of five set statements, whatever its size, and the ledger's counter — core
/// `desks`), with 3 rows per settlement (its charge, its hold, its key's or account's share of
/// the updates).
pub const READ_STATEMENTS: u64 = 1;
pub const HOLD_STATEMENTS: u64 = 2;
pub const SETTLE_STATEMENTS: u64 = 6;
pub const SETTLE_ROWS: u64 = 3;
/// `Design::Sharded`: how long a shard waits for a health object (`src/shard.rs`), ms.
pub const FORWARD_TIMEOUT_MS: u64 = 250;
/// How long a model's object waits for an account's object (`src/health.rs`).
pub const ACCOUNT_TIMEOUT_MS: u64 = 100;
/// The round trip between two objects (the status object's `full` calls, a shard's forwarding),
/// ms: they run near each other (assumption).
pub const OBJECT_RTT_MS: u64 = 10;
/// An attempt on a route that is down fails after this long (a refused connection), ms.
pub const FAILED_ATTEMPT_MS: u64 = 50;
