//! The health shards (SPEC §22; the rules are core `health::shard`): [`HealthShard`], binding
//! `HEALTH_SHARDS`, 32 per model (`shard:<n>:<model>`), between the isolates and the model's health
//! object. An isolate fetches its snapshot from its shard and reports to it; the shard applies the
//! reports to its copies at once (its answers never lack what was reported to it), keeps them in
//! memory and forwards them to the model's object and the accounts object — at once
//! when a failure or a probe is among them (at most one forwarding per 100 ms), else within a
//! second, always from its alarm, so a report call never waits for a health object — and keeps a
//! copy of both objects' snapshots, renewed by each forwarding and, when a snapshot call finds it
//! older than a quarter second (the accounts' two seconds), before that call is answered. One
//! forwarding at a time per shard; a call that finds one under way is answered from the copy. An
//! object that does not answer is left alone for a back-off (1 s doubling to 8 s), what was to be
//! forwarded waiting for the next try. Nothing of a shard is stored but its alarm: an evicted
//! shard loses what waited for its alarm (at most a second of successes; failures and probes wait
//! 100 ms at most while the objects answer).

use std::cell::{Cell, RefCell};

use futures_util::future::join;
use switchyard_core::health::rpc::{model_object, HealthCall, SnapshotReply};
use switchyard_core::health::shard::{shard_model, Pending, ShardCall, ShardReply, ACCOUNTS_FRESH_MS, FRESH_MS};
use switchyard_core::health::{HealthConfig, Observation, RequestObservation, Scope};
use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::faults::Faults;
use crate::object;
use crate::runtime::clock::{now_ms, sleep};

/// How long a shard waits for a health object (under the isolate's own 300 ms for the shard).
const FORWARD_TIMEOUT_MS: u64 = 250;
/// After a failed forwarding: the first wait, doubling to the last.
const BACKOFF_MS: u64 = 1_000;
const BACKOFF_MAX_MS: u64 = 8_000;
const ACCOUNTS: &str = "accounts";

/// One object's copy and what waits for it.
#[derive(Default)]
struct Upstream {
    pending: Pending,
    copy: Option<SnapshotReply>,
    /// When the copy was last renewed.
    renewed_ms: u64,
    /// When the last forwarding or snapshot call was sent.
    sent_ms: u64,
    failures: u32,
    next_try_ms: u64,
}

impl Upstream {
    /// Whether a forwarding or a snapshot call is wanted now.
    fn wanted(&self, fresh_ms: u64, now: u64) -> bool {
        now >= self.next_try_ms
            && (self.pending.due(now, self.sent_ms)
                || self.copy.is_none()
                || now >= self.renewed_ms.saturating_add(fresh_ms))
    }

    /// A report's observations: applied to the copy at once, kept to forward.
    fn take_in(
        &mut self,
        config: HealthConfig,
        observations: &[Observation],
        request: Option<&RequestObservation>,
        scope: Scope,
        now: u64,
    ) {
        let held = self.copy.as_ref().map(|c| (&c.health, scope));
        self.pending.add(config, observations, request, now, held);
        if let Some(copy) = &mut self.copy {
            for o in observations {
                copy.health.observe_scoped(o, &config, scope);
            }
        }
    }

    /// A call to the object ended: its answer is the copy, with what came since applied again
    /// (`scope`); a failed forwarding rejoins what waits, and the object is left alone a while.
    fn done(&mut self, reply: Option<SnapshotReply>, taken: Option<Pending>, scope: Scope, now: u64) {
        match reply {
            Some(mut reply) => {
                self.pending.replay_onto(&mut reply.health, scope);
                self.copy = Some(reply);
                self.renewed_ms = now;
                self.failures = 0;
                self.next_try_ms = 0;
            }
            None => {
                if let Some(taken) = taken {
                    self.pending.rejoin(taken);
                }
                let wait = BACKOFF_MS.saturating_mul(1 << self.failures.min(3)).min(BACKOFF_MAX_MS);
                self.failures = self.failures.saturating_add(1);
                self.next_try_ms = now.saturating_add(wait);
            }
        }
    }
}

#[durable_object]
pub struct HealthShard {
    state: State,
    env: Env,
    model: RefCell<Upstream>,
    accounts: RefCell<Upstream>,
    /// The model served (from the calls' object name).
    model_id: RefCell<Option<String>>,
    /// A forwarding is under way.
    forwarding: Cell<bool>,
    /// Its alarm, as last set.
    alarm: object::Alarm,
}

impl DurableObject for HealthShard {
    fn new(state: State, env: Env) -> Self {
        HealthShard {
            state,
            env,
            model: RefCell::new(Upstream::default()),
            accounts: RefCell::new(Upstream::default()),
            model_id: RefCell::new(None),
            forwarding: Cell::new(false),
            alarm: object::Alarm::default(),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        Faults::read(&req, &self.env).in_object().await?; // a drill may hang or throw here (tests only)
        let name = req
            .headers()
            .get(object::OBJECT_NAME)
            .ok()
            .flatten()
            .unwrap_or_default();
        let Some(model) = shard_model(&name).map(str::to_string) else {
            return Response::error("not a shard's name", 400);
        };
        let call: ShardCall = req.json().await?;
        self.model_id.replace(Some(model.clone()));
        let now = now_ms();
        let snapshot = match call {
            ShardCall::Snapshot => true,
            ShardCall::Report { reports } => {
                for r in &reports {
                    self.model
                        .borrow_mut()
                        .take_in(r.config, &r.observations, r.request.as_ref(), Scope::Model, now);
                    self.accounts
                        .borrow_mut()
                        .take_in(r.config, &r.accounts, None, Scope::Accounts, now);
                }
                false
            }
        };
        // A report never waits for its forwarding (the alarm's; a caller that timed out would
        // send its reports again). A snapshot call renews a stale copy first, and one to a shard
        // with no copy waits for the renewal under way.
        if snapshot {
            if !self.forwarding.get() {
                self.forward(&model, 1).await;
            }
            let since = now_ms();
            while self.forwarding.get() && self.model.borrow().copy.is_none() && now_ms() < since + FORWARD_TIMEOUT_MS {
                sleep(10).await;
            }
        }
        self.schedule().await?;
        let reply = ShardReply {
            model: self.model.borrow().copy.clone(),
            accounts: self.accounts.borrow().copy.clone(),
        };
        Response::from_json(&reply)
    }

    /// Forwards the successes that waited their second.
    async fn alarm(&self) -> worker::Result<Response> {
        self.alarm.known(None);
        // The model is known from the calls that left reports waiting (an evicted shard wakes
        // with nothing waiting and nothing to do).
        let model = self.model_id.borrow().clone();
        match model {
            Some(model) if !self.forwarding.get() => self.forward(&model, 3).await,
            // A snapshot call's renewal under way: what waits goes after it.
            Some(_) => {
                self.alarm
                    .set(&self.state.storage(), now_ms() + FORWARD_TIMEOUT_MS)
                    .await?
            }
            None => {}
        }
        self.schedule().await?;
        Response::ok("")
    }
}

impl HealthShard {
    /// Forwards what is due and renews the copies that are stale, the two objects at once, until
    /// nothing more is wanted (reports that came meanwhile go in the next round), at most `rounds`
    /// rounds.
    async fn forward(&self, model_id: &str, rounds: usize) {
        self.forwarding.set(true);
        let target = model_object(model_id);
        for _ in 0..rounds {
            let now = now_ms();
            let model_call = self.take(&self.model, FRESH_MS, Scope::Model, now);
            let accounts_call = self.take(&self.accounts, ACCOUNTS_FRESH_MS, Scope::Accounts, now);
            if model_call.is_none() && accounts_call.is_none() {
                break;
            }
            let env = &self.env;
            let send = |object: &str, call: Option<(HealthCall, Option<Pending>)>| {
                let object = object.to_string();
                async move {
                    let (call, taken) = call?;
                    let reply =
                        object::call::<_, SnapshotReply>(env, "HEALTH", &object, "/", &call, FORWARD_TIMEOUT_MS, None)
                            .await
                            .ok();
                    Some((reply, taken))
                }
            };
            let (to_model, to_accounts) = join(send(&target, model_call), send(ACCOUNTS, accounts_call)).await;
            let now = now_ms();
            let mut failed = false;
            let sides = [
                (&self.model, to_model, Scope::Model),
                (&self.accounts, to_accounts, Scope::Accounts),
            ];
            for (upstream, result, scope) in sides {
                if let Some((reply, taken)) = result {
                    failed |= reply.is_none();
                    upstream.borrow_mut().done(reply, taken, scope, now);
                }
            }
            if failed {
                break;
            }
        }
        self.forwarding.set(false);
    }

    /// The call `upstream` wants now, if any: its waiting reports as one `Observe`, or a
    /// `Snapshot` when only its copy is stale.
    fn take(
        &self,
        upstream: &RefCell<Upstream>,
        fresh_ms: u64,
        scope: Scope,
        now: u64,
    ) -> Option<(HealthCall, Option<Pending>)> {
        let mut upstream = upstream.borrow_mut();
        if !upstream.wanted(fresh_ms, now) {
            return None;
        }
        upstream.sent_ms = now;
        Some(match upstream.pending.take(scope) {
            Some((call, taken)) => (call, Some(taken)),
            None => (HealthCall::Snapshot, None),
        })
    }

    /// Sets the alarm for the earliest flush of what waits (or its next try), if not set earlier.
    async fn schedule(&self) -> worker::Result<()> {
        let at = [&self.model, &self.accounts]
            .iter()
            .filter_map(|u| {
                let u = u.borrow();
                u.pending.due_at(u.sent_ms).map(|at| at.max(u.next_try_ms))
            })
            .min();
        match at {
            Some(at) => self.alarm.by(&self.state.storage(), at).await,
            None => Ok(()),
        }
    }
}
