//! Route health (SPEC §8, §9): the Durable Object that is its authority, and each isolate's
//! snapshot of it.
//!
//! One `HealthObject` per model (`model:<id>`: route breakers and traffic buckets) and one for all
//! upstream accounts (`accounts`). The object is a thin wrapper around the core state machine
//! (`ModelHealth`), persisted as JSON in its storage; calls are the typed `HealthCall`s.
//!
//! The warm path makes no round trip: an isolate plans with its snapshots, applies its own
//! outcomes to them at once with the same state machine (the very next request sees a
//! demotion), and reports them from `ctx.wait_until`; the object's answer refreshes the snapshot.
//! A request waits on an object only when a snapshot is older than `health_snapshot_ms`, or to
//! claim the one probe of a route or account whose cooldown ended.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};

use serde::de::DeserializeOwned;
use switchyard_core::batch::{Batches, Rules};
use switchyard_core::catalog::{Catalog, Model, Policy};
use switchyard_core::health::{
    for_accounts, AttemptOutcome, HealthConfig, ModelHealth, Observation, ProbeClaim, RequestObservation, RouteStats,
    Scope,
};
use switchyard_core::health_rpc::{answer, model_object, ClaimReply, HealthCall, SnapshotReply};

use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::batch;
use crate::limits::CapacityDesk;
use crate::object;
use crate::runtime::clock::{now_ms, sleep};
use crate::runtime::{test_faults, TEST_FAULT};

const STORAGE_KEY: &str = "health";
const ACCOUNTS: &str = "accounts";

// ---- the Durable Object --------------------------------------------------------------------

#[durable_object]
pub struct HealthObject {
    state: State,
    env: Env,
    /// The state in memory; loaded from storage on first use. Never borrowed across an await.
    health: RefCell<Option<ModelHealth>>,
    /// Route capacity (SPEC §10), on the `/capacity` path.
    capacity: CapacityDesk,
}

impl DurableObject for HealthObject {
    fn new(state: State, env: Env) -> Self {
        HealthObject {
            state,
            env,
            health: RefCell::new(None),
            capacity: CapacityDesk::new(),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        // The failure drill (tests only, see `TEST_FAULT`): this object hangs or throws.
        if test_faults(&self.env) {
            match req.headers().get(TEST_FAULT).ok().flatten().as_deref() {
                Some("hang") => sleep(5_000).await,
                Some("throw") => return Err(worker::Error::RustError("test fault: the object throws".into())),
                _ => {}
            }
        }
        if req.path() == "/capacity" {
            return self.capacity.serve(&self.state.storage(), req.json().await?).await;
        }
        let call: HealthCall = req.json().await?;
        self.load().await?;
        // Mutate synchronously, serialise, then persist: the input gate keeps other calls out
        // while the write is in flight, so each call is atomic.
        let (answer, state) = {
            let mut guard = self.health.borrow_mut();
            let health = guard.get_or_insert_with(ModelHealth::default);
            let answer = answer(health, call, now_ms()).map_err(json_error)?;
            let state = answer.changed.then(|| serde_json::to_string(health));
            (answer, state)
        };
        if let Some(text) = state {
            self.state.storage().put(STORAGE_KEY, text.map_err(json_error)?).await?;
        }
        Response::from_json(&answer.reply)
    }
}

fn json_error(e: serde_json::Error) -> worker::Error {
    worker::Error::RustError(e.to_string())
}

impl HealthObject {
    async fn load(&self) -> worker::Result<()> {
        if self.health.borrow().is_some() {
            return Ok(());
        }
        let stored: Option<String> = self.state.storage().get(STORAGE_KEY).await?;
        let health = stored.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        let mut guard = self.health.borrow_mut();
        if guard.is_none() {
            *guard = Some(health);
        }
        Ok(())
    }
}

// ---- calling it ------------------------------------------------------------------------------

fn object_name(model_id: &str) -> String {
    model_object(model_id)
}

/// How long a request waits for a health object before it goes on with the isolate's snapshot
/// (SPEC §15): health is advisory, an answer is not.
const CALL_TIMEOUT_MS: u64 = 300;

// The health object's drill (`TEST_FAULT`, tests only): a model whose id contains
// `fault-health-hang` or `fault-health-throw` gets an object that hangs or throws.

/// One call to the object `name`, at most [`CALL_TIMEOUT_MS`]; `None` (logged) when it errs or is
/// late — the caller then keeps its snapshot.
async fn call_object<T: DeserializeOwned>(env: &Env, name: &str, body: &HealthCall) -> Option<T> {
    let fault = test_faults(env)
        .then(|| {
            ["hang", "throw"]
                .into_iter()
                .find(|f| name.contains(&format!("fault-health-{f}")))
        })
        .flatten();
    match object::call(env, "HEALTH", name, "/", body, CALL_TIMEOUT_MS, fault).await {
        Ok(v) => Some(v),
        Err("no_context") => None, // health is advisory; nothing to log
        Err(why) => {
            worker::console_error!(
                "{{\"event\":\"health_object_unavailable\",\"object\":{name:?},\"why\":\"{why}\",\"fallback\":\"snapshot\"}}"
            );
            None
        }
    }
}

// ---- the isolate's snapshots ---------------------------------------------------------------

struct Snapshot {
    health: ModelHealth,
    stats: BTreeMap<String, RouteStats>,
    fetched_ms: u64,
}

thread_local! {
    /// This isolate's copies of the health objects, by object name (`model:<id>` or `accounts`).
    static HEALTH_SNAPSHOTS: RefCell<HashMap<String, Snapshot>> = RefCell::new(HashMap::new());
}

fn remember(name: &str, reply: SnapshotReply) {
    HEALTH_SNAPSHOTS.with(|s| {
        s.borrow_mut().insert(
            name.to_string(),
            Snapshot {
                health: reply.health,
                stats: reply.stats,
                fetched_ms: now_ms(),
            },
        );
    });
}

fn fresh(name: &str, max_age_ms: u64, now: u64) -> bool {
    HEALTH_SNAPSHOTS.with(|s| {
        s.borrow()
            .get(name)
            .is_some_and(|snap| now.saturating_sub(snap.fetched_ms) < max_age_ms)
    })
}

/// Refreshes the snapshots of `names` that are stale, in parallel. An unreachable object leaves
/// the old snapshot (or none: everything healthy) — health never blocks an answer.
async fn refresh(env: &Env, names: &[String], max_age_ms: u64) {
    let now = now_ms();
    let stale: Vec<&String> = names.iter().filter(|n| !fresh(n, max_age_ms, now)).collect();
    let calls = stale.iter().map(|name| async move {
        if let Some(reply) = call_object::<SnapshotReply>(env, name, &HealthCall::Snapshot).await {
            remember(name, reply);
        }
    });
    futures_util::future::join_all(calls).await;
}

/// The planning view of one model: its route breakers with the accounts' breakers, and the
/// per-route stats.
pub struct View {
    pub health: ModelHealth,
    pub stats: BTreeMap<String, RouteStats>,
}

/// The view a request plans with, refreshed from the objects only if older than
/// `health_snapshot_ms`.
pub async fn view(env: &Env, model: &Model, policy: &Policy) -> View {
    let name = object_name(&model.id);
    refresh(env, &[name.clone(), ACCOUNTS.to_string()], policy.health_snapshot_ms).await;
    HEALTH_SNAPSHOTS.with(|s| {
        let s = s.borrow();
        let empty = ModelHealth::default();
        let accounts = s.get(ACCOUNTS).map_or(&empty, |a| &a.health);
        match s.get(&name) {
            Some(m) => View {
                health: m.health.with_accounts(accounts),
                stats: m.stats.clone(),
            },
            None => View {
                health: empty.with_accounts(accounts),
                stats: BTreeMap::new(),
            },
        }
    })
}

/// Claims the probes a request must win before planning (SPEC §8), each from the object(s) whose
/// breaker is due; returns the routes whose probe this request won. An unreachable object grants
/// nothing (the route then waits at the end).
pub async fn claim_probes(env: &Env, model: &Model, claims: Vec<ProbeClaim>, lease_ms: u64) -> Vec<usize> {
    let mut won = Vec::new();
    for c in claims {
        let call = HealthCall::Claim {
            route: c.route_id,
            account: c.account,
            lease_ms,
        };
        let mut granted = true;
        if c.from_model {
            granted &= claim(env, &object_name(&model.id), &call).await;
        }
        if granted && c.from_accounts {
            granted &= claim(env, ACCOUNTS, &call).await;
        }
        if granted {
            won.push(c.route);
        }
    }
    won
}

async fn claim(env: &Env, object: &str, call: &HealthCall) -> bool {
    call_object::<ClaimReply>(env, object, call)
        .await
        .is_some_and(|r| r.granted)
}

/// Applies an attempt's outcome to this isolate's snapshots at once (SPEC §8).
pub fn apply_local(model_id: &str, obs: &Observation, config: &HealthConfig) {
    HEALTH_SNAPSHOTS.with(|s| {
        let mut s = s.borrow_mut();
        let now = now_ms();
        for (name, scope) in [
            (object_name(model_id), Scope::Model),
            (ACCOUNTS.to_string(), Scope::Accounts),
        ] {
            let snap = s.entry(name).or_insert_with(|| Snapshot {
                health: ModelHealth::default(),
                stats: BTreeMap::new(),
                // A snapshot born here has not been read from the object: stale at once.
                fetched_ms: now.saturating_sub(u64::MAX / 2),
            });
            snap.health.observe_scoped(obs, config, scope);
        }
    });
}

/// Routine outcomes (successes) are gathered for up to 200 ms and sent in one call; failures and
/// probes go at once: other isolates should learn of them promptly.
const REPORT_BATCH: Rules = Rules {
    wait_ms: 200,
    max_items: 64,
    overdue_ms: 2_000,
};

/// One request's outcomes, waiting to be sent.
struct Report {
    config: HealthConfig,
    observations: Vec<Observation>,
    request: RequestObservation,
}

thread_local! {
    /// Reports waiting to be sent, per model.
    static OUTBOX: RefCell<Batches<Report>> = RefCell::new(Batches::default());
}

/// Reports a request's outcomes (from `ctx.wait_until`), gathered with other requests' (see
/// [`REPORT_BATCH`]): everything to the model's object, what concerns an account to the accounts
/// object. The objects' answers refresh the snapshots.
pub async fn report(
    env: &Env,
    model_id: &str,
    config: HealthConfig,
    observations: Vec<Observation>,
    request: RequestObservation,
) {
    let urgent = observations
        .iter()
        .any(|o| o.probe || !matches!(o.outcome, AttemptOutcome::Success));
    let item = Report {
        config,
        observations,
        request,
    };
    let batch = batch::gather(&OUTBOX, model_id, item, urgent, &REPORT_BATCH).await;
    let Some(config) = batch.last().map(|r| r.config) else {
        return;
    };
    let mut observations = Vec::new();
    let mut requests = Vec::with_capacity(batch.len());
    for r in batch {
        observations.extend(r.observations);
        requests.push(r.request);
    }
    let for_accounts =
        HEALTH_SNAPSHOTS.with(|s| for_accounts(&observations, s.borrow().get(ACCOUNTS).map(|a| &a.health)));
    let name = object_name(model_id);
    let model_call = HealthCall::Observe {
        scope: Scope::Model,
        config,
        observations,
        requests,
    };
    let model_report = async {
        if let Some(reply) = call_object::<SnapshotReply>(env, &name, &model_call).await {
            remember(&name, reply);
        }
    };
    let accounts_report = async {
        if for_accounts.is_empty() {
            return;
        }
        let accounts_call = HealthCall::Observe {
            scope: Scope::Accounts,
            config,
            observations: for_accounts,
            requests: Vec::new(),
        };
        if let Some(reply) = call_object::<SnapshotReply>(env, ACCOUNTS, &accounts_call).await {
            remember(ACCOUNTS, reply);
        }
    };
    futures_util::future::join(model_report, accounts_report).await;
}

/// Models with at least one healthy route right now (`ModelHealth::route_state`, the rule the
/// status page uses), by this isolate's snapshots; a model it knows nothing about counts as
/// healthy.
pub fn healthy_models(catalog: &Catalog) -> Vec<String> {
    let now = now_ms();
    HEALTH_SNAPSHOTS.with(|s| {
        let s = s.borrow();
        let empty = ModelHealth::default();
        let accounts = s.get(ACCOUNTS).map_or(&empty, |a| &a.health);
        catalog
            .doc()
            .models
            .iter()
            .filter(|m| {
                let view = s
                    .get(&object_name(&m.id))
                    .map_or(&empty, |snap| &snap.health)
                    .with_accounts(accounts);
                view.any_healthy(&catalog.route_accounts(m), now)
            })
            .map(|m| m.id.clone())
            .collect()
    })
}

/// Everything the model's object holds (status page, admin), fresh.
pub async fn full(env: &Env, model_id: &str) -> Option<ModelHealth> {
    call_object(env, &object_name(model_id), &HealthCall::Full).await
}

/// Everything the accounts object holds, fresh.
pub async fn accounts(env: &Env) -> Option<ModelHealth> {
    call_object(env, ACCOUNTS, &HealthCall::Full).await
}

/// Admin reset of a model: its routes, and the accounts its routes use.
pub async fn reset(env: &Env, catalog: &Catalog, model: &Model) -> bool {
    let name = object_name(&model.id);
    let used: Vec<String> = catalog.route_accounts(model).into_iter().map(|(_, a)| a).collect();
    let model = call_object::<SnapshotReply>(env, &name, &HealthCall::Reset { accounts: Vec::new() }).await;
    let accounts = call_object::<SnapshotReply>(env, ACCOUNTS, &HealthCall::Reset { accounts: used }).await;
    if let Some(r) = &model {
        remember(&name, r.clone());
    }
    if let Some(r) = &accounts {
        remember(ACCOUNTS, r.clone());
    }
    model.is_some() && accounts.is_some()
}
