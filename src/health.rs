//! Route health (SPEC §8, §9): the Durable Object that is its authority, and each isolate's
//! snapshot of it.
//!
//! One `HealthObject` per model (`model:<id>`: route breakers and traffic buckets) and one per
//! upstream account (`account:<name>`: its breaker). The object is a thin wrapper around the core
//! state machine (`ModelHealth`), persisted as JSON in its storage; calls are the typed
//! `HealthCall`s. A model's object folds its accounts' breakers into its own state (core
//! `health::scope`): when its shards bring it account failures (or successes on an account it
//! holds a breaker for) it tells those accounts' objects in the same call, and it asks the others
//! again when its copies are older than `ACCOUNTS_POLL_MS`; so no isolate calls an account's
//! object but to claim its probe, and each account's object sees calls from the models that use
//! it, not from every isolate or shard.
//!
//! The warm path makes no round trip: an isolate plans with its snapshots, applies its own
//! outcomes to them at once with the same state machine (the very next request sees a
//! demotion), and reports them from `ctx.wait_until` to its shard of the model (`crate::shard`),
//! whose answer refreshes the snapshots. A request waits on an object only to claim the one probe
//! of a route or account whose cooldown ended, or when its isolate has no snapshot of the model
//! yet — that first one is read from the model's object itself, to start no more objects on the
//! cold path than that; a snapshot older than `health_snapshot_ms`
//! is refreshed from the shard beside the request that finds it stale (one fetch at a time, from
//! `ctx.wait_until`) while every request plans with the stale one, and a fetch that failed is not
//! tried again for a back-off (`refresh`).
//!
//! A model's object also runs its routes' verification checks (SPEC §8a) from its alarm: it learns
//! its model from its name (`object::OBJECT_NAME` on every call), sets the alarm for the next due
//! check whenever a call leaves one earlier than the alarm, and at the alarm reads the catalog,
//! checks every due route at once (`crate::verify`), records the results and sets the next alarm.
//! Due checks include the rechecks of a demoted route while its cooldown runs (SPEC §8b): a call
//! that demotes a route moves the alarm up to its first recheck, and a pass ends the cooldown so
//! the next request probes the route.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use switchyard_core::batch::{Batches, Rules};
use switchyard_core::catalog::{Catalog, Model, Policy};
use switchyard_core::flight::{Flight, Rules as FetchRules, Step};
use switchyard_core::health::rpc::{
    account_calls, account_object, answer, model_object, object_account, ClaimReply, HealthCall, SnapshotReply,
    ACCOUNTS_POLL_MS,
};
use switchyard_core::health::shard::{report_id, shard_object, ShardCall, ShardReply, ShardReport};
use switchyard_core::health::{
    HealthConfig, ModelHealth, Observation, ProbeClaim, RequestObservation, RouteStats, Scope, Unreported,
};
use switchyard_core::verify::{self as checks, CheckRoute};

use worker::{durable_object, Context, DurableObject, Env, Request, Response, State};

use crate::batch;
use crate::faults::Faults;
use crate::object;
use crate::runtime::clock::{in_request, now_ms, sleep};
use crate::runtime::ids::isolate_seed;
use crate::store::Store;
use crate::verify;

const STORAGE_KEY: &str = "health";
/// The model a model object serves (from its name), and whether its alarm has planned once.
const MODEL_KEY: &str = "model";
const PLANNED_KEY: &str = "planned";
/// The isolate's overlay of every upstream account's breaker (not an object: see [`view`]).
const ACCOUNTS: &str = "accounts";
/// How long a model's object waits for an account's object (under its shards' 250 ms for it).
const ACCOUNT_TIMEOUT_MS: u64 = 100;
/// The most account observations a model's object keeps for an account's object that did not
/// answer (failures and probes only), to tell it with the next call.
const MAX_UNSENT: usize = 256;
/// How long past its deadline a check's lease lasts (a checker that died frees the route then).
const CHECK_LEASE_MARGIN_MS: u64 = 5_000;
/// When no check is due, the alarm still reads the catalog this often.
const REPLAN_MS: u64 = 15 * 60_000;

// ---- the Durable Object --------------------------------------------------------------------

#[durable_object]
pub struct HealthObject {
    state: State,
    env: Env,
    /// The state in memory; loaded from storage on first use. Never borrowed across an await.
    health: Rc<RefCell<Option<ModelHealth>>>,
    /// The model this object serves, once known (`None` for an account's object).
    model: RefCell<Option<String>>,
    /// A model's object: when it last asked its accounts' objects (set as it starts asking, so
    /// calls meanwhile do not ask again).
    polled_ms: Rc<Cell<u64>>,
    /// Account observations an account's object did not take, to tell it next time.
    unsent: Rc<RefCell<Vec<Observation>>>,
    /// Its alarm, as loaded or last set.
    alarm: object::Alarm,
    /// The alarm has run once since the object first served its model.
    planned: Cell<bool>,
}

impl DurableObject for HealthObject {
    fn new(state: State, env: Env) -> Self {
        HealthObject {
            state,
            env,
            health: Rc::new(RefCell::new(None)),
            model: RefCell::new(None),
            polled_ms: Rc::new(Cell::new(0)),
            unsent: Rc::new(RefCell::new(Vec::new())),
            alarm: object::Alarm::default(),
            planned: Cell::new(false),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        Faults::read(&req, &self.env).in_object().await?; // a drill may hang or throw here (tests only)
        let name = req.headers().get(object::OBJECT_NAME).ok().flatten();
        let call: HealthCall = req.json().await?;
        let model = name.as_deref().and_then(|n| n.strip_prefix("model:"));
        self.load(model.is_some()).await?;
        if let Some(model) = model {
            self.serve_model(model).await?;
        }
        // What a model's object tells or asks its accounts' objects after this call.
        let accounts_step = match (&call, model) {
            (HealthCall::Observe { config, .. }, Some(_)) => Some((*config, false)),
            (HealthCall::Reset { .. }, Some(_)) => Some((HealthConfig::default(), true)),
            _ => None,
        };
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
            self.schedule_pending().await?;
        }
        match accounts_step {
            // An admin reset waits for the accounts' answers: its reply shows them.
            Some((config, true)) => {
                let changed = self.teller().tell(config, answer.forward, true).await?;
                if changed {
                    return Response::from_json(&self.change(|h| h.snapshot_reply(now_ms())));
                }
            }
            // The shard's forwarding does not wait for them: they fold in as they come, and its
            // next renewal (250 ms) carries them.
            Some((config, false)) => self.tell_later(config, answer.forward, false),
            None => {}
        }
        Response::from_json(&answer.reply)
    }

    /// Runs the checks that are due (SPEC §8a) and sets the alarm for the next one.
    async fn alarm(&self) -> worker::Result<Response> {
        self.load(true).await?; // only a model's object sets an alarm
        self.alarm.known(None);
        let Some(model_id) = self.model.borrow().clone() else {
            return Response::ok("");
        };
        let store = Store::new(&self.env).map_err(store_error)?;
        let (catalog, _) = store.load_catalog().await.map_err(store_error)?;
        let Some(model) = catalog.model(&model_id) else {
            return Response::ok(""); // no longer in the catalog: nothing to check
        };
        let policy = catalog.policy_for(model);
        let config = HealthConfig::from_policy(&policy);
        let routes = CheckRoute::of(model);
        let lease_ms = checks::deadline_ms(&policy, model).saturating_add(CHECK_LEASE_MARGIN_MS);
        let now = now_ms();
        let used = catalog.route_accounts(model);
        self.change(|h| h.know_accounts(used.iter().map(|(_, a)| a.as_str())));
        self.tell_later(config, Vec::new(), true);
        let due = self.change(|h| {
            h.know_routes(&routes, now);
            let due = h.due_checks(&routes, policy.verify_idle_ms, now);
            due.into_iter()
                .filter(|(r, _)| h.claim_check(r, now, lease_ms))
                .collect::<Vec<_>>()
        });
        self.persist().await?;
        if !self.planned.get() {
            self.planned.set(true);
            self.state.storage().put(PLANNED_KEY, true).await?;
        }
        let runs = due.iter().filter_map(|(id, kind)| {
            let route = model.routes.iter().find(|r| &r.id == id)?;
            let (env, catalog, policy) = (&self.env, &catalog, &policy);
            Some(async move {
                (
                    id,
                    *kind,
                    verify::check(env, catalog, model, route, policy, *kind).await,
                )
            })
        });
        let results = futures_util::future::join_all(runs).await;
        let next = self.change(|h| {
            let at = now_ms();
            for (route, kind, result) in &results {
                let verify = routes.iter().any(|r| &&r.id == route && r.verify);
                h.record_check(route, *kind, result, at, verify, &config);
            }
            h.next_check_ms(&routes, policy.verify_idle_ms, at)
        });
        self.persist().await?;
        // With nothing due, the alarm still comes back to read the catalog again: a model whose
        // idle checks were off may have had them turned on.
        self.set_alarm(next.unwrap_or(now_ms().saturating_add(REPLAN_MS)))
            .await?;
        Response::ok("")
    }
}

fn json_error(e: serde_json::Error) -> worker::Error {
    worker::Error::RustError(e.to_string())
}

fn store_error(e: switchyard_core::ApiError) -> worker::Error {
    worker::Error::RustError(format!("{e:?}"))
}

impl HealthObject {
    /// Loads the state from storage on its first use: a model's object reads its breakers, model
    /// and `planned` flag in one read, then its alarm; an account's object its breaker only.
    async fn load(&self, model_object: bool) -> worker::Result<()> {
        if self.health.borrow().is_some() {
            return Ok(());
        }
        let storage = self.state.storage();
        let (stored, model, planned, alarm) = if model_object {
            let found = storage.get_multiple(vec![STORAGE_KEY, MODEL_KEY, PLANNED_KEY]).await?;
            let read = |key: &str| found.get(&wasm_bindgen::JsValue::from_str(key));
            let alarm = storage.get_alarm().await?;
            (
                read(STORAGE_KEY).as_string(),
                read(MODEL_KEY).as_string(),
                read(PLANNED_KEY).as_bool(),
                alarm,
            )
        } else {
            // An account's object: its breaker only (no model, no checks, no alarm).
            (storage.get::<String>(STORAGE_KEY).await?, None, None, None)
        };
        let health = stored.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        let mut guard = self.health.borrow_mut();
        if guard.is_none() {
            *guard = Some(health);
            *self.model.borrow_mut() = model;
            self.planned.set(planned.unwrap_or(false));
            self.alarm.known(alarm.and_then(|a| u64::try_from(a).ok()));
        }
        Ok(())
    }

    /// Remembers the model this object serves; the first time, its alarm plans at once.
    async fn serve_model(&self, model: &str) -> worker::Result<()> {
        if self.model.borrow().as_deref() == Some(model) {
            return Ok(());
        }
        *self.model.borrow_mut() = Some(model.to_string());
        self.state.storage().put(MODEL_KEY, model).await?;
        if !self.planned.get() {
            self.set_alarm(now_ms()).await?;
        }
        Ok(())
    }

    /// `f` on the state in memory (never across an await).
    fn change<T>(&self, f: impl FnOnce(&mut ModelHealth) -> T) -> T {
        change(&self.health, f)
    }

    async fn persist(&self) -> worker::Result<()> {
        persist(&self.state.storage(), &self.health).await
    }

    /// After a call changed the state: a route now waiting for its cooldown's check or its next
    /// recheck gets the alarm moved up to that check if it would come later (idle checks are the
    /// alarm's own business).
    async fn schedule_pending(&self) -> worker::Result<()> {
        if self.model.borrow().is_none() {
            return Ok(());
        }
        match self.change(|h| h.next_cooldown_check_ms(now_ms())) {
            Some(want) => self.alarm.by(&self.state.storage(), want).await,
            None => Ok(()),
        }
    }

    async fn set_alarm(&self, at_ms: u64) -> worker::Result<()> {
        self.alarm.set(&self.state.storage(), at_ms).await
    }

    /// [`Teller::tell`] from `State::wait_until`: the call that wants it does not wait for it.
    fn tell_later(&self, config: HealthConfig, forward: Vec<Observation>, force: bool) {
        let teller = self.teller();
        self.state.wait_until(async move {
            let _ = teller.tell(config, forward, force).await;
        });
    }

    /// What tells and asks the accounts' objects for this model's object, apart from the call
    /// that wants it (so a shard's forwarding need not wait for it).
    fn teller(&self) -> Teller {
        Teller {
            env: self.env.clone(),
            storage: self.state.storage(),
            health: self.health.clone(),
            polled_ms: self.polled_ms.clone(),
            unsent: self.unsent.clone(),
        }
    }
}

/// A model's object's side towards its accounts' objects (its state shared, not copied).
struct Teller {
    env: Env,
    storage: worker::Storage,
    health: Rc<RefCell<Option<ModelHealth>>>,
    polled_ms: Rc<Cell<u64>>,
    unsent: Rc<RefCell<Vec<Observation>>>,
}

impl Teller {
    /// Tells the accounts' objects what concerns them (`forward`, with what an object did not
    /// take before), and — when the copies are older than [`ACCOUNTS_POLL_MS`], or `force` — asks
    /// every other account the model's routes use (core `account_calls`), all at once; the
    /// answers newer than the copies become the copies. True when they changed (then persisted).
    async fn tell(self, config: HealthConfig, forward: Vec<Observation>, force: bool) -> worker::Result<bool> {
        let now = now_ms();
        let poll = force || now >= self.polled_ms.get().saturating_add(ACCOUNTS_POLL_MS);
        let mut told = self.unsent.take();
        told.extend(forward);
        if told.is_empty() && !poll {
            return Ok(false);
        }
        if poll {
            self.polled_ms.set(now);
        }
        let calls = self.change(|h| account_calls(h, config, &told, poll));
        let env = &self.env;
        let replies = futures_util::future::join_all(calls.iter().map(|(name, call)| {
            object::call::<_, SnapshotReply>(env, "HEALTH", name, "/", call, ACCOUNT_TIMEOUT_MS, None)
        }))
        .await;
        let mut changed = false;
        for ((name, call), reply) in calls.iter().zip(replies) {
            match (reply, call) {
                (Ok(reply), _) => {
                    let account = object_account(name).unwrap_or_default();
                    changed |= self.change(|h| h.fold_answer(account, &reply));
                }
                (Err(_), HealthCall::Observe { observations, .. }) => {
                    let mut unsent = self.unsent.borrow_mut();
                    let kept = observations.iter().filter(|o| o.urgent());
                    let room = MAX_UNSENT.saturating_sub(unsent.len());
                    unsent.extend(kept.take(room).cloned());
                }
                (Err(_), _) => {}
            }
        }
        if changed {
            self.change(ModelHealth::changed);
            persist(&self.storage, &self.health).await?;
        }
        Ok(changed)
    }

    fn change<T>(&self, f: impl FnOnce(&mut ModelHealth) -> T) -> T {
        change(&self.health, f)
    }
}

/// `f` on a health object's state in memory (never across an await).
fn change<T>(health: &RefCell<Option<ModelHealth>>, f: impl FnOnce(&mut ModelHealth) -> T) -> T {
    f(health.borrow_mut().get_or_insert_with(ModelHealth::default))
}

/// Writes a health object's state as it is in memory.
async fn persist(storage: &worker::Storage, health: &RefCell<Option<ModelHealth>>) -> worker::Result<()> {
    let text = change(health, |h| serde_json::to_string(h)).map_err(json_error)?;
    storage.put(STORAGE_KEY, text).await
}

// ---- calling it ------------------------------------------------------------------------------

fn object_name(model_id: &str) -> String {
    model_object(model_id)
}

/// How long a request waits for a health object before it goes on with the isolate's snapshot
/// (SPEC §15): health is advisory, an answer is not.
const CALL_TIMEOUT_MS: u64 = 300;

/// One call to the object `name`, at most [`CALL_TIMEOUT_MS`]; `None` (logged) when it errs or is
/// late — the caller then keeps its snapshot.
async fn call_object<T: DeserializeOwned>(env: &Env, name: &str, body: &HealthCall) -> Option<T> {
    call_binding(env, "HEALTH", name, body).await
}

/// [`call_object`] to the model's shard for this isolate (`crate::shard`).
async fn call_shard(env: &Env, name: &str, body: &ShardCall) -> Option<ShardReply> {
    call_binding(env, "HEALTH_SHARDS", name, body).await
}

async fn call_binding<B: Serialize, T: DeserializeOwned>(env: &Env, binding: &str, name: &str, body: &B) -> Option<T> {
    let drill = Faults::of(env).health_object(name);
    match object::call(env, binding, name, "/", body, CALL_TIMEOUT_MS, drill).await {
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
    /// When it was read from the object (`None`: born here from this isolate's own outcomes).
    fetched_ms: Option<u64>,
}

thread_local! {
    /// This isolate's copies of the health objects, by object name (`model:<id>` or `accounts`).
    static HEALTH_SNAPSHOTS: RefCell<HashMap<String, Snapshot>> = RefCell::new(HashMap::new());
    /// The snapshot fetch under way (or backing off) per object name.
    static FETCHES: RefCell<HashMap<String, Flight>> = RefCell::new(HashMap::new());
    /// The outcomes applied to the snapshots that no shard has answered yet (core
    /// `health::Unreported`): applied again to every copy taken meanwhile.
    static UNREPORTED: RefCell<Unreported> = RefCell::new(Unreported::default());
}

/// How a snapshot is refreshed (`switchyard_core::flight`): fresh for `health_snapshot_ms`; one
/// fetch per object at a time in an isolate, the stale snapshot served meanwhile (a request
/// without one waits for the fetch under way, at most its [`CALL_TIMEOUT_MS`]); after a failed or
/// late fetch the object is left alone 1 s, doubling to 8 s, the stale snapshot served.
fn snapshot_rules(fresh_ms: u64) -> FetchRules {
    FetchRules {
        fresh_ms,
        give_up_ms: CALL_TIMEOUT_MS + 200,
        poll_ms: 20,
        backoff_ms: 1_000,
        backoff_max_ms: 8_000,
    }
}

/// A shard's answer becomes the isolate's copy of the model's object (if the shard has one).
fn remember_shard(model_id: &str, reply: ShardReply) {
    if let Some(model) = reply.model {
        remember(&object_name(model_id), model, &reply.applied);
    }
}

/// A model object's snapshot (through a shard, or its own answer) becomes the isolate's copy —
/// its breakers only if the object changed them since the copy was read
/// (`ModelHealth::newer_than`): an older or equal one would undo the isolate's own outcomes
/// applied since. The accounts' breakers it carries go into the isolate's overlay, each only if
/// newer than the one held (`ModelHealth::fold_accounts_from`). A copy taken gets the isolate's
/// outcomes no shard has answered yet applied to it (core `health::Unreported`): it may have been
/// made before they were heard of — but those in reports its shard says it took in (`taken_in`),
/// which it holds.
fn remember(name: &str, reply: SnapshotReply, taken_in: &[u64]) {
    let now = now_ms();
    UNREPORTED.with(|u| {
        let mut unreported = u.borrow_mut();
        HEALTH_SNAPSHOTS.with(|s| {
            let mut s = s.borrow_mut();
            let overlay = overlay(&mut s);
            let taken = overlay.fold_accounts_from(&reply.health);
            unreported.apply_to_accounts(&taken, overlay, taken_in, now);
            match s.get_mut(name) {
                Some(held) => {
                    if reply.health.newer_than(&held.health) {
                        held.health = reply.health;
                        unreported.apply_to_model(name, &mut held.health, taken_in, now);
                    }
                    held.stats = reply.stats;
                    held.fetched_ms = Some(now);
                }
                None => {
                    let snapshot = Snapshot {
                        health: reply.health,
                        stats: reply.stats,
                        fetched_ms: Some(now),
                    };
                    s.insert(name.to_string(), snapshot);
                }
            }
        });
    });
}

/// The isolate's overlay of the accounts' breakers (every model's, see [`view`]).
fn overlay(s: &mut HashMap<String, Snapshot>) -> &mut ModelHealth {
    &mut s.entry(ACCOUNTS.to_string()).or_insert_with(born_here).health
}

/// A snapshot born on this isolate from its own outcomes, not read from an object.
fn born_here() -> Snapshot {
    Snapshot {
        health: ModelHealth::default(),
        stats: BTreeMap::new(),
        fetched_ms: None,
    }
}

fn fetched_at(name: &str) -> Option<u64> {
    HEALTH_SNAPSHOTS.with(|s| s.borrow().get(name).and_then(|snap| snap.fetched_ms))
}

/// Refreshes the isolate's copy of `model_id`'s health (and with it its accounts') if it is stale,
/// one fetch at a time (see [`snapshot_rules`]) from the isolate's shard of the model: a request
/// that has a copy to plan with goes on with it while the fetch runs beside it (`ctx.wait_until`);
/// only one without a copy waits. An unreachable shard leaves the old snapshot (or none:
/// everything healthy) — health never blocks an answer.
async fn refresh(env: &Env, ctx: &Context, model_id: &str, max_age_ms: u64) {
    let rules = snapshot_rules(max_age_ms);
    let name = object_name(model_id);
    loop {
        let now = now_ms();
        let step = FETCHES.with(|f| {
            f.borrow_mut()
                .entry(name.clone())
                .or_default()
                .step(fetched_at(&name), now, &rules)
        });
        match step {
            Step::Fresh | Step::Stale | Step::Without => return,
            Step::Wait(ms) => {
                sleep(ms).await;
                if !in_request() {
                    return;
                }
            }
            Step::Fetch => {
                match fetched_at(&name) {
                    Some(_) => ctx.wait_until(fetch_snapshot(env.clone(), model_id.to_string(), rules)),
                    None => first_snapshot(env, model_id, rules).await,
                }
                return;
            }
        }
    }
}

/// One snapshot fetch (marked under way by its [`Step::Fetch`]): the shard's answer becomes the
/// isolate's copies; either way the flight is told how it went.
async fn fetch_snapshot(env: Env, model_id: String, rules: FetchRules) {
    let pending = UNREPORTED.with(|u| u.borrow().awaiting(&object_name(&model_id)));
    let reply = call_shard(&env, &shard_of(&model_id), &ShardCall::Snapshot { pending }).await;
    let ok = reply.as_ref().is_some_and(|r| r.model.is_some());
    if let Some(reply) = reply {
        remember_shard(&model_id, reply);
    }
    flown(&model_id, ok, &rules);
}

/// The first snapshot of a model on an isolate, which a request waits for: read from the model's
/// object itself (its accounts' breakers with it), at once — not through the shard, which would
/// start one more object on the cold path. Once per model and isolate (the flight's back-off
/// after a failure); every later refresh goes to the shard.
async fn first_snapshot(env: &Env, model_id: &str, rules: FetchRules) {
    let name = object_name(model_id);
    let model = call_object::<SnapshotReply>(env, &name, &HealthCall::Snapshot).await;
    let ok = model.is_some();
    if let Some(reply) = model {
        remember(&name, reply, &[]);
    }
    flown(model_id, ok, &rules);
}

/// Tells the model's snapshot flight how its fetch went.
fn flown(model_id: &str, ok: bool, rules: &FetchRules) {
    FETCHES.with(|f| {
        f.borrow_mut()
            .entry(object_name(model_id))
            .or_default()
            .done(ok, now_ms(), rules)
    });
}

/// This isolate's shard of `model_id`'s health (core `health::shard::shard_object`).
pub fn shard_of(model_id: &str) -> String {
    shard_object(model_id, isolate_seed())
}

/// The planning view of one model: its route breakers with the isolate's overlay of the accounts'
/// breakers (what its models' objects answered, and its own outcomes since: an account failure
/// seen on one model sends the isolate's other models elsewhere at once), and the per-route
/// stats.
pub struct View {
    pub health: ModelHealth,
    pub stats: BTreeMap<String, RouteStats>,
}

/// The view a request plans with, refreshed from the objects only if older than
/// `health_snapshot_ms`.
pub async fn view(env: &Env, ctx: &Context, model: &Model, policy: &Policy) -> View {
    let name = object_name(&model.id);
    refresh(env, ctx, &model.id, policy.health_snapshot_ms).await;
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
        let account = account_object(&c.account);
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
            granted &= claim(env, &account, &call).await;
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
    let name = object_name(model_id);
    HEALTH_SNAPSHOTS.with(|s| {
        let mut s = s.borrow_mut();
        for (object, scope) in [(name.clone(), Scope::Model), (ACCOUNTS.to_string(), Scope::Accounts)] {
            // Born here, not read from the object: the next request fetches it.
            let snap = s.entry(object).or_insert_with(born_here);
            snap.health.observe_scoped(obs, config, scope);
        }
    });
    UNREPORTED.with(|u| u.borrow_mut().keep(name, obs, config, now_ms()));
}

/// How reports are batched: core `batch::HEALTH_REPORTS`.
const REPORT_BATCH: Rules = switchyard_core::batch::HEALTH_REPORTS;

thread_local! {
    /// Reports waiting to be sent, per shard name.
    static OUTBOX: RefCell<Batches<ShardReport>> = RefCell::new(Batches::default());
}

/// Reports a request's outcomes (from `ctx.wait_until`) to the isolate's shard of the model,
/// gathered with other requests' (see [`REPORT_BATCH`]); the shard forwards them to the model's
/// object, which tells the accounts' objects what concerns them. The shard's answer refreshes the
/// snapshots.
pub async fn report(
    env: &Env,
    model_id: &str,
    config: HealthConfig,
    observations: Vec<Observation>,
    request: RequestObservation,
) {
    let item = ShardReport {
        config,
        observations,
        request: Some(request),
    };
    let urgent = item.urgent();
    let shard = shard_of(model_id);
    let shard = &shard;
    let outcome = batch::run(&OUTBOX, shard, item, urgent, &REPORT_BATCH, |items| {
        send_reports(env, model_id, shard, items)
    })
    .await;
    if let Some(item) = outcome.alone {
        send_reports(env, model_id, shard, vec![item]).await;
    }
}

/// One `Report` call with `reports`; true when the shard answered (its answer refreshes the
/// snapshots).
async fn send_reports(env: &Env, model_id: &str, shard: &str, reports: Vec<ShardReport>) -> bool {
    let name = object_name(model_id);
    let id = next_report_id();
    let pending = UNREPORTED.with(|u| {
        let mut u = u.borrow_mut();
        let pending = u.awaiting(&name);
        for r in &reports {
            u.sending(&name, &r.observations, id);
        }
        pending
    });
    let call = ShardCall::Report {
        reports,
        id: Some(id),
        pending,
    };
    let Some(reply) = call_shard(env, shard, &call).await else {
        UNREPORTED.with(|u| u.borrow_mut().unanswered(id));
        return false;
    };
    // The shard applied them before it answered: its answer, and every copy after it, holds them.
    UNREPORTED.with(|u| u.borrow_mut().answered(id));
    remember_shard(model_id, reply);
    true
}

/// The next report's id (core `report_id`).
fn next_report_id() -> u64 {
    thread_local! {
        static SENT: Cell<u64> = const { Cell::new(0) };
    }
    let n = SENT.with(|c| {
        c.set(c.get() + 1);
        c.get()
    });
    report_id(crate::runtime::ids::isolate_seed(), n)
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

/// Admin reset of a model: its routes, and the accounts its routes use — their objects first,
/// then the model's, which drops its copies of them and asks their objects again.
pub async fn reset(env: &Env, catalog: &Catalog, model: &Model) -> bool {
    let name = object_name(&model.id);
    let mut used: Vec<String> = catalog.route_accounts(model).into_iter().map(|(_, a)| a).collect();
    used.sort();
    used.dedup();
    let accounts = futures_util::future::join_all(used.iter().map(|a| {
        let call = HealthCall::Reset {
            accounts: vec![a.clone()],
        };
        async move { call_object::<SnapshotReply>(env, &account_object(a), &call).await }
    }))
    .await;
    let model = call_object::<SnapshotReply>(env, &name, &HealthCall::Reset { accounts: used.clone() }).await;
    HEALTH_SNAPSHOTS.with(|s| {
        let mut s = s.borrow_mut();
        let overlay = overlay(&mut s);
        for (account, reply) in used.iter().zip(&accounts) {
            if let Some(reply) = reply {
                overlay.fold_answer(account, reply);
            }
        }
    });
    if let Some(r) = &model {
        remember(&name, r.clone(), &[]);
    }
    model.is_some() && accounts.iter().all(Option::is_some)
}
