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
use switchyard_core::catalog::{Catalog, Model, Policy};
use switchyard_core::classify::Blame;
use switchyard_core::health::{AttemptOutcome, HealthConfig, ModelHealth, Observation, RequestObservation, RouteStats};
use switchyard_core::health_rpc::{ClaimReply, HealthCall, Scope, SnapshotReply};
use switchyard_core::plan::RouteHealth;
use worker::{durable_object, DurableObject, Env, Method, Request, RequestInit, Response, State};

use crate::clock::now_ms;

const STORAGE_KEY: &str = "health";
const ACCOUNTS: &str = "accounts";

// ---- the Durable Object --------------------------------------------------------------------

#[durable_object]
pub struct HealthObject {
    state: State,
    /// The state in memory; loaded from storage on first use. Never borrowed across an await.
    health: RefCell<Option<ModelHealth>>,
}

impl DurableObject for HealthObject {
    fn new(state: State, _env: Env) -> Self {
        HealthObject {
            state,
            health: RefCell::new(None),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let call: HealthCall = req.json().await?;
        self.load().await?;
        let now = now_ms();
        // Mutate synchronously, serialise, then persist: the input gate keeps other calls out
        // while the write is in flight, so each call is atomic.
        let (reply, dirty) = {
            let mut guard = self.health.borrow_mut();
            let health = guard.get_or_insert_with(ModelHealth::default);
            match call {
                HealthCall::Snapshot => (serde_json::to_value(health.snapshot_reply(now)), None),
                HealthCall::Observe {
                    scope,
                    config,
                    observations,
                    requests,
                } => {
                    for o in &observations {
                        health.observe_scoped(o, &config, scope);
                    }
                    for r in &requests {
                        health.observe_request(r);
                    }
                    health.keep_scope(scope);
                    (
                        serde_json::to_value(health.snapshot_reply(now)),
                        Some(serde_json::to_string(health)),
                    )
                }
                HealthCall::Claim {
                    route,
                    account,
                    lease_ms,
                } => {
                    let granted = health.claim_probe(&route, &account, now, lease_ms);
                    let dirty = granted.then(|| serde_json::to_string(health));
                    (serde_json::to_value(ClaimReply { granted }), dirty)
                }
                HealthCall::Full => (serde_json::to_value(&*health), None),
                HealthCall::Reset { accounts } => {
                    health.reset_with_accounts(&accounts);
                    (
                        serde_json::to_value(health.snapshot_reply(now)),
                        Some(serde_json::to_string(health)),
                    )
                }
            }
        };
        if let Some(text) = dirty {
            let text = text.map_err(|e| worker::Error::RustError(e.to_string()))?;
            self.state.storage().put(STORAGE_KEY, text).await?;
        }
        Response::from_json(&reply.map_err(|e| worker::Error::RustError(e.to_string()))?)
    }
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
    format!("model:{model_id}")
}

/// One call to the object `name`.
pub async fn call<T: DeserializeOwned>(env: &Env, name: &str, body: &HealthCall) -> Option<T> {
    if !crate::clock::in_request() {
        return None; // no I/O possible here (see `clock::in_request`); health is advisory
    }
    let stub = env.durable_object("HEALTH").ok()?.get_by_name(name).ok()?;
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(serde_json::to_string(body).ok()?.into()));
    let req = Request::new_with_init("https://health/", &init).ok()?;
    let mut resp = stub.fetch_with_request(req).await.ok()?;
    if resp.status_code() != 200 {
        return None;
    }
    resp.json().await.ok()
}

// ---- the isolate's snapshots ---------------------------------------------------------------

struct Snapshot {
    health: ModelHealth,
    stats: BTreeMap<String, RouteStats>,
    fetched_ms: u64,
}

thread_local! {
    /// By object name (`model:<id>` or `accounts`).
    static SNAPSHOTS: RefCell<HashMap<String, Snapshot>> = RefCell::new(HashMap::new());
}

fn remember(name: &str, reply: SnapshotReply) {
    SNAPSHOTS.with(|s| {
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
    SNAPSHOTS.with(|s| {
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
        if let Some(reply) = call::<SnapshotReply>(env, name, &HealthCall::Snapshot).await {
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
    SNAPSHOTS.with(|s| {
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

/// The usual order for a request (SPEC §8), with probes claimed: a route whose cooldown ended
/// keeps its place only if this request wins its probe from the object(s) holding the
/// breaker(s); otherwise it goes to the end. Returns the order and the routes being probed.
pub async fn order(
    env: &Env,
    catalog: &Catalog,
    model: &Model,
    view: &View,
    policy: &Policy,
) -> (Vec<(usize, RouteHealth)>, Vec<usize>) {
    let now = now_ms();
    let routes = route_accounts(catalog, model);
    let planned = view.health.plan_order(&routes, now);
    let lease_ms = policy.pre_content_budget_ms;
    let mut order = Vec::with_capacity(planned.len());
    let mut lost = Vec::new();
    let mut probes = Vec::new();
    for (i, health, probe_due) in planned {
        if !probe_due {
            order.push((i, health));
            continue;
        }
        let (route, account) = &routes[i];
        let route_due = view.health.routes.get(route).is_some_and(|r| r.breaker.probe_due(now));
        let account_due = view.health.accounts.get(account).is_some_and(|a| a.probe_due(now));
        let claim = HealthCall::Claim {
            route: route.clone(),
            account: account.clone(),
            lease_ms,
        };
        let mut granted = true;
        if route_due {
            granted &= call::<ClaimReply>(env, &object_name(&model.id), &claim)
                .await
                .is_some_and(|r| r.granted);
        }
        if granted && account_due {
            granted &= call::<ClaimReply>(env, ACCOUNTS, &claim)
                .await
                .is_some_and(|r| r.granted);
        }
        if granted {
            probes.push(i);
            order.push((i, health));
        } else {
            lost.push((
                i,
                RouteHealth {
                    demoted: true,
                    ..health
                },
            ));
        }
    }
    // Lost probes wait at the end like the other demoted routes, before those demoted later.
    let first_demoted = order.iter().position(|(_, h)| h.demoted).unwrap_or(order.len());
    order.splice(first_demoted..first_demoted, lost);
    (order, probes)
}

/// Each route's (id, upstream account), in catalog order.
pub fn route_accounts(catalog: &Catalog, model: &Model) -> Vec<(String, String)> {
    model
        .routes
        .iter()
        .map(|r| {
            let account = catalog
                .provider(&r.provider)
                .map(|p| p.account().to_string())
                .unwrap_or_default();
            (r.id.clone(), account)
        })
        .collect()
}

/// Applies an attempt's outcome to this isolate's snapshots at once (SPEC §8).
pub fn apply_local(model_id: &str, obs: &Observation, config: &HealthConfig) {
    SNAPSHOTS.with(|s| {
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

/// How long an isolate gathers routine outcomes (successes) before sending them in one call.
/// Failures and probes go at once: other isolates should learn of them promptly.
const REPORT_BATCH_MS: u64 = 200;

/// Outcomes waiting to be sent, per model.
#[derive(Default)]
struct Outbox {
    config: Option<HealthConfig>,
    observations: Vec<Observation>,
    requests: Vec<RequestObservation>,
    /// A task is already waiting to send this model's outbox.
    flush_scheduled: bool,
}

thread_local! {
    static OUTBOX: RefCell<HashMap<String, Outbox>> = RefCell::new(HashMap::new());
}

/// Reports a request's outcomes (from `ctx.wait_until`): failures and probes at once, routine
/// successes gathered for up to `REPORT_BATCH_MS` so a busy isolate makes a few calls a second
/// instead of one per request. The objects' answers refresh the snapshots.
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
    let wait = OUTBOX.with(|o| {
        let mut o = o.borrow_mut();
        let outbox = o.entry(model_id.to_string()).or_default();
        outbox.config = Some(config);
        outbox.observations.extend(observations);
        outbox.requests.push(request);
        if urgent {
            Some(false)
        } else if outbox.flush_scheduled {
            None // rides with the flush already waiting
        } else {
            outbox.flush_scheduled = true;
            Some(true)
        }
    });
    match wait {
        None => {}
        Some(wait) => {
            if wait {
                crate::clock::sleep(REPORT_BATCH_MS).await;
            }
            flush(env, model_id).await;
        }
    }
}

/// Sends a model's outbox: everything to the model's object, what concerns an account to the
/// accounts object.
async fn flush(env: &Env, model_id: &str) {
    let Some((config, observations, requests)) = OUTBOX.with(|o| {
        let mut o = o.borrow_mut();
        let outbox = o.get_mut(model_id)?;
        outbox.flush_scheduled = false;
        let config = outbox.config?;
        Some((
            config,
            std::mem::take(&mut outbox.observations),
            std::mem::take(&mut outbox.requests),
        ))
    }) else {
        return;
    };
    if observations.is_empty() && requests.is_empty() {
        return;
    }
    let accounts_known = SNAPSHOTS.with(|s| {
        s.borrow()
            .get(ACCOUNTS)
            .map(|a| a.health.accounts.keys().cloned().collect::<Vec<_>>())
    });
    let concerns_account = |o: &Observation| match o.outcome {
        AttemptOutcome::Failure(class) => class.blame() == Blame::Account,
        AttemptOutcome::Success => accounts_known.as_ref().is_some_and(|known| known.contains(&o.account)),
    };
    let for_accounts: Vec<Observation> = observations.iter().filter(|o| concerns_account(o)).cloned().collect();
    let name = object_name(model_id);
    let model_call = HealthCall::Observe {
        scope: Scope::Model,
        config,
        observations,
        requests,
    };
    let model_report = async {
        if let Some(reply) = call::<SnapshotReply>(env, &name, &model_call).await {
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
        if let Some(reply) = call::<SnapshotReply>(env, ACCOUNTS, &accounts_call).await {
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
    SNAPSHOTS.with(|s| {
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
                view.any_healthy(&route_accounts(catalog, m), now)
            })
            .map(|m| m.id.clone())
            .collect()
    })
}

/// Everything the model's object holds (status page, admin), fresh.
pub async fn full(env: &Env, model_id: &str) -> Option<ModelHealth> {
    call(env, &object_name(model_id), &HealthCall::Full).await
}

/// Everything the accounts object holds, fresh.
pub async fn accounts(env: &Env) -> Option<ModelHealth> {
    call(env, ACCOUNTS, &HealthCall::Full).await
}

/// Admin reset of a model: its routes, and the accounts its routes use.
pub async fn reset(env: &Env, catalog: &Catalog, model: &Model) -> bool {
    let name = object_name(&model.id);
    let used: Vec<String> = route_accounts(catalog, model).into_iter().map(|(_, a)| a).collect();
    let model = call::<SnapshotReply>(env, &name, &HealthCall::Reset { accounts: Vec::new() }).await;
    let accounts = call::<SnapshotReply>(env, ACCOUNTS, &HealthCall::Reset { accounts: used }).await;
    if let Some(r) = &model {
        remember(&name, r.clone());
    }
    if let Some(r) = &accounts {
        remember(ACCOUNTS, r.clone());
    }
    model.is_some() && accounts.is_some()
}
