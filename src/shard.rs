//! The health shards (SPEC §22; the rules are core `health::shard`): [`HealthShard`], binding
//! `HEALTH_SHARDS`, 32 per model (`shard:<n>:<model>`), between the isolates and the model's health
//! object. An isolate fetches its snapshot from its shard and reports to it; the shard applies the
//! reports to its copy at once (its answers never lack what was reported to it), keeps them in
//! memory and forwards them to the model's object (which tells its accounts' objects what
//! concerns them) — when a failure or a probe is among them within 100 ms (shard `n` waits
//! `n` × 3 ms, so that a route failing everywhere at once does not bring the object 32
//! forwardings at once; at most one forwarding per 100 ms), else within a second, always from its
//! alarm, so a report call never waits for a health object — and keeps a copy of the object's snapshot (its accounts' breakers folded in),
//! renewed by each forwarding and, when a snapshot call finds it older than a quarter second,
//! before that call is answered. One forwarding at a time per shard; a call that finds one under
//! way is answered from the copy. An object that does not answer is left alone for a back-off
//! (1 s doubling to 8 s), what was to be forwarded waiting for the next try. Nothing of a shard is
//! stored but its alarm: an evicted shard loses what waited for its alarm (at most a second of
//! successes; failures and probes wait 100 ms at most while the object answers). It remembers the
//! ids of the reports it took in (core `TakenIn`) and answers a call with those of the caller's
//! unanswered reports it took in: the copy it sends holds their outcomes.

use std::cell::{Cell, RefCell};

use switchyard_core::health::rpc::{model_object, SnapshotReply};
use switchyard_core::health::shard::{shard_model, ShardCall, ShardReply, Side, TakenIn, FRESH_MS};
use switchyard_core::health::Scope;
use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::faults::Faults;
use crate::object;
use crate::runtime::clock::{now_ms, sleep};

/// How long a shard waits for a health object (under the isolate's own 300 ms for the shard).
const FORWARD_TIMEOUT_MS: u64 = 250;

#[durable_object]
pub struct HealthShard {
    state: State,
    env: Env,
    model: RefCell<Side>,
    /// The model served (from the calls' object name).
    model_id: RefCell<Option<String>>,
    /// A forwarding is under way.
    forwarding: Cell<bool>,
    /// The reports it took in, latest first out: which of a caller's its copy holds.
    taken_in: RefCell<TakenIn>,
    /// Its alarm, as last set.
    alarm: object::Alarm,
}

impl DurableObject for HealthShard {
    fn new(state: State, env: Env) -> Self {
        HealthShard {
            state,
            env,
            model: RefCell::new(Side::default()),
            model_id: RefCell::new(None),
            forwarding: Cell::new(false),
            taken_in: RefCell::new(TakenIn::default()),
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
        let Some((n, model)) = shard_model(&name).map(|(n, m)| (n, m.to_string())) else {
            return Response::error("not a shard's name", 400);
        };
        let call: ShardCall = req.json().await?;
        if self.model_id.replace(Some(model.clone())).is_none() {
            // The first call since the shard started: its side, which staggers its news by `n`.
            self.model.replace(Side::for_shard(n));
        }
        let now = now_ms();
        let (snapshot, pending) = match call {
            ShardCall::Snapshot { pending } => (true, pending),
            ShardCall::Report { reports, id, pending } => {
                for r in &reports {
                    self.model
                        .borrow_mut()
                        .take_in(r.config, &r.observations, r.request.as_ref(), Scope::Model, now);
                }
                if let Some(id) = id {
                    self.taken_in.borrow_mut().took(id);
                }
                (false, pending)
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
            applied: self.taken_in.borrow().of(&pending),
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
    /// Forwards what is due and renews the copy if stale, until nothing more is wanted (reports
    /// that came meanwhile go in the next round), at most `rounds` rounds.
    async fn forward(&self, model_id: &str, rounds: usize) {
        self.forwarding.set(true);
        let target = model_object(model_id);
        for _ in 0..rounds {
            let Some((call, taken)) = self.model.borrow_mut().call(FRESH_MS, Scope::Model, now_ms()) else {
                break;
            };
            let reply =
                object::call::<_, SnapshotReply>(&self.env, "HEALTH", &target, "/", &call, FORWARD_TIMEOUT_MS, None)
                    .await
                    .map_err(|why| {
                        worker::console_error!(
                            "{{\"event\":\"shard_forward_failed\",\"object\":{target:?},\"why\":\"{why}\",\"fallback\":\"retry\"}}"
                        );
                    })
                    .ok();
            let failed = reply.is_none();
            self.model.borrow_mut().done(reply, taken, Scope::Model, now_ms());
            if failed {
                break;
            }
        }
        self.forwarding.set(false);
    }

    /// Sets the alarm for the earliest flush of what waits (or its next try), if not set earlier.
    async fn schedule(&self) -> worker::Result<()> {
        let at = self.model.borrow().wake_at();
        match at {
            Some(at) => self.alarm.by(&self.state.storage(), at).await,
            None => Ok(()),
        }
    }
}
