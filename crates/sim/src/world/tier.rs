//! `Design::Sharded` — the health shards as built (`src/shard.rs`, core `health::shard`): the
//! model's health reached through `health_shards` shard objects. An isolate snapshots from and
//! reports to its shard only; the shard applies the reports to its copy at once (and again onto
//! each renewed copy) and keeps them in the core's own [`Side`] (the Worker's shard keeps the
//! same: queue, copy and back-off) and forwards its queue to the model's object as one `observe`
//! call when it falls due — a failure or probe at once, at most one forwarding per
//! `URGENT_GAP_MS`; successes within `FLUSH_MS` — and renews its copy of the object's snapshot
//! when a caller finds it older than `FRESH_MS`. One call in flight per shard; a failed one
//! rejoins its queue and backs off 1 s doubling to 8 s. Where the built shard makes the snapshot
//! call that triggers a renewal wait for it, this one answers from its copy at once and renews
//! beside; and an isolate's first snapshot of a model, which the Worker reads from the model's
//! object itself, goes to the shard here too (once per isolate, in the warm-up).
//!
//! The upstream accounts' breakers: one object per account (`Obj::Account`), folded into each
//! model's object (core `account_calls`, `fold_answer`, as the Worker's `tell_accounts`): an
//! `observe` that brings account failures (or successes that may end a breaker it holds) tells
//! those accounts' objects, and the model's object asks every account its routes use when its
//! copies are older than `ACCOUNTS_POLL_MS`. Where the Worker's model object waits for those
//! answers before it answers its shard, this one answers at once and folds them in as they come.

use switchyard_core::health::rpc::{account_calls, object_account, HealthCall, SnapshotReply, ACCOUNTS_POLL_MS};
use switchyard_core::health::shard::{Pending, Side, FRESH_MS};

use super::*;

/// A shard's side of the model's object: the core's [`Side`] (copy, queue, back-off) and whether
/// its call is in flight.
#[derive(Default)]
pub(super) struct Link {
    side: Side,
    in_flight: bool,
}

impl Link {
    /// The copy's breakers (none yet: healthy).
    fn health(&self) -> ModelHealth {
        self.side.copy.as_ref().map(|c| c.health.clone()).unwrap_or_default()
    }
}

/// A shard's state.
pub(super) struct Shard {
    model: Link,
    /// When its wake-up event is set for (`None`: none).
    next_at: Option<u64>,
}

impl Shard {
    /// Shard `k`'s state (its side staggers its news as the Worker's shard `k` does).
    fn new(k: u32) -> Shard {
        Shard {
            model: Link {
                side: Side::for_shard(u64::from(k)),
                in_flight: false,
            },
            next_at: None,
        }
    }
}

impl World {
    /// The object an isolate keeps its view of `model` from.
    pub(super) fn view_obj(&self, iso: u32, model: u32) -> Obj {
        match self.p.design {
            Design::Direct => Obj::Model(model),
            Design::Sharded => Obj::Shard(model, iso % self.p.health_shards.max(1) as u32),
        }
    }

    /// Reports from an isolate: queued for the model's object; the copy is the answer.
    pub(super) fn shard_observe(&mut self, model: u32, k: u32, observations: Vec<Observation>) -> ModelHealth {
        let (config, now) = (self.config, self.ms());
        let shard = self.shards.entry((model, k)).or_insert_with(|| Shard::new(k));
        shard.model.side.take_in(config, &observations, None, Scope::Model, now);
        self.shard_wake(model, k);
        self.shard_view(model, k)
    }

    pub(super) fn shard_snapshot(&mut self, model: u32, k: u32) -> ModelHealth {
        self.shard_wake(model, k);
        self.shard_view(model, k)
    }

    /// The shard's copy of the model's object (its accounts' breakers folded in).
    fn shard_view(&self, model: u32, k: u32) -> ModelHealth {
        self.shards
            .get(&(model, k))
            .map(|s| s.model.health())
            .unwrap_or_default()
    }

    /// Sends what the shard wants now, and sets the wake-up for what will fall due.
    fn shard_wake(&mut self, model: u32, k: u32) {
        let now = self.ms();
        let Some(shard) = self.shards.get_mut(&(model, k)) else {
            return;
        };
        let link = &mut shard.model;
        if !link.in_flight {
            if let Some((call, taken)) = link.side.call(FRESH_MS, Scope::Model, now) {
                link.in_flight = true;
                let (kind, observations) = match call {
                    HealthCall::Observe { observations, .. } => (Kind::Observe, observations),
                    _ => (Kind::Snapshot, Vec::new()),
                };
                let then = Then::ShardFlush {
                    model,
                    shard: k,
                    observations,
                    taken,
                };
                self.call(u32::MAX, Obj::Model(model), kind, 0, FORWARD_TIMEOUT_MS, then);
            }
        }
        self.shard_schedule(model, k);
    }

    fn shard_schedule(&mut self, model: u32, k: u32) {
        let Some(shard) = self.shards.get_mut(&(model, k)) else {
            return;
        };
        let Some(at) = Some(&shard.model)
            .filter(|link| !link.in_flight)
            .and_then(|link| link.side.wake_at())
        else {
            return;
        };
        let at = at.max(self.now / 1_000 + 1) * 1_000;
        if shard.next_at.is_none_or(|next| next > at) {
            shard.next_at = Some(at);
            self.at(at, Ev::ShardFlush { model, shard: k, at });
        }
    }

    /// The shard's wake-up (stale unless `at` is still its next).
    pub(super) fn shard_flush(&mut self, model: u32, k: u32, at: u64) {
        match self.shards.get_mut(&(model, k)) {
            Some(shard) if shard.next_at == Some(at) => shard.next_at = None,
            _ => return,
        }
        self.shard_wake(model, k);
    }

    /// An object answered a shard (its snapshot), or not: a failed forwarding rejoins its queue
    /// and the object is left alone for a back-off.
    pub(super) fn shard_flushed(&mut self, model: u32, k: u32, taken: Option<Pending>, reply: Option<ModelHealth>) {
        let now = self.ms();
        let link = &mut self.shards.entry((model, k)).or_insert_with(|| Shard::new(k)).model;
        link.in_flight = false;
        let reply = reply.map(|health| SnapshotReply {
            health,
            stats: Default::default(),
        });
        link.side.done(reply, taken, Scope::Model, now);
        self.shard_schedule(model, k);
    }

    /// Model `model`'s object after an `observe`: tells its accounts' objects what concerns them
    /// (`forward`) and, when its copies are older than [`ACCOUNTS_POLL_MS`], asks the others.
    pub(super) fn tell_accounts(&mut self, model: u32, forward: Vec<Observation>) {
        let now = self.ms();
        let polled = self.polled_ms.entry(model).or_insert(0);
        let poll = now >= polled.saturating_add(ACCOUNTS_POLL_MS);
        if poll {
            *polled = now;
        }
        let used = self.routes[model as usize].clone();
        let health = self.model_objects.entry(model).or_default();
        health.know_accounts(used.iter().map(|(_, a)| a.as_str()));
        for (name, call) in account_calls(health, self.config, &forward, poll) {
            let account = object_account(&name)
                .and_then(|a| a.strip_prefix("acct-"))
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(0);
            let (kind, observations) = match call {
                HealthCall::Observe { observations, .. } => (Kind::Observe, observations),
                _ => (Kind::Snapshot, Vec::new()),
            };
            let then = Then::AccountFold {
                model,
                account,
                observations,
            };
            self.call(u32::MAX, Obj::Account(account), kind, 0, ACCOUNT_TIMEOUT_MS, then);
        }
    }

    /// An account's object answered a model's object (or not: its copy stays).
    pub(super) fn account_folded(&mut self, model: u32, account: u32, reply: Option<ModelHealth>) {
        let Some(health) = reply else {
            return;
        };
        let reply = SnapshotReply {
            health,
            stats: Default::default(),
        };
        let object = self.model_objects.entry(model).or_default();
        if object.fold_answer(&format!("acct-{account}"), &reply) {
            object.changed();
        }
    }
}
