//! `Design::Sharded` — the health shards as built (`src/shard.rs`, core `health::shard`): the
//! model's health reached through `health_shards` shard objects. An isolate snapshots from and
//! reports to its shard only; the shard applies the reports to its copies at once (and again onto
//! each renewed copy) and keeps them in the core's own [`Side`] per object (the Worker's shard
//! keeps the same: queue, copy and back-off, one for the model's object and one for the accounts
//! object) and forwards each queue as one
//! `observe` call when it falls due — a failure or probe at once, at most one forwarding per
//! `URGENT_GAP_MS`; successes within `FLUSH_MS` — and renews its copies of the two objects'
//! snapshots when a caller finds them older than `FRESH_MS` (the accounts' `ACCOUNTS_FRESH_MS`).
//! One call per object in flight per shard; a failed one rejoins its queue and backs off
//! 1 s doubling to 8 s. Where the built shard makes the snapshot call that triggers a renewal
//! wait for it, this one answers from its copy at once and renews beside; and an isolate's first
//! snapshot of a model, which the Worker reads from the model's object and the accounts object
//! themselves, goes to the shard here too (once per isolate, in the warm-up).

use switchyard_core::health::rpc::{HealthCall, SnapshotReply};
use switchyard_core::health::shard::{Pending, Side, ACCOUNTS_FRESH_MS, FRESH_MS};

use super::*;

/// One object's side of a shard: the core's [`Side`] (copy, queue, back-off) and whether its call
/// is in flight (the Worker's shard has one forwarding at a time for both objects; here each side
/// has its own).
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

/// Which object a shard's call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    Model,
    Accounts,
}

/// A shard's state.
#[derive(Default)]
pub(super) struct Shard {
    model: Link,
    accounts: Link,
    /// When its wake-up event is set for (`None`: none).
    next_at: Option<u64>,
}

impl World {
    /// The object an isolate keeps its view of `model` from.
    pub(super) fn view_obj(&self, iso: u32, model: u32) -> Obj {
        match self.p.design {
            Design::Direct => Obj::Model(model),
            Design::Sharded => Obj::Shard(model, iso % self.p.health_shards.max(1) as u32),
        }
    }

    /// Reports from an isolate: queued for the two objects; the copies are the answer.
    pub(super) fn shard_observe(&mut self, model: u32, k: u32, observations: Vec<Observation>) -> ModelHealth {
        let (config, now) = (self.config, self.ms());
        let shard = self.shards.entry((model, k)).or_default();
        let accounts = for_accounts(&observations, shard.accounts.side.copy.as_ref().map(|c| &c.health));
        shard.model.side.take_in(config, &observations, None, Scope::Model, now);
        shard
            .accounts
            .side
            .take_in(config, &accounts, None, Scope::Accounts, now);
        self.shard_wake(model, k);
        self.shard_view(model, k)
    }

    pub(super) fn shard_snapshot(&mut self, model: u32, k: u32) -> ModelHealth {
        self.shard_wake(model, k);
        self.shard_view(model, k)
    }

    /// The shard's copies as one view (the isolate keeps the two apart; planning folds them),
    /// newer whenever either copy is.
    fn shard_view(&self, model: u32, k: u32) -> ModelHealth {
        self.shards
            .get(&(model, k))
            .map(|s| {
                let (model, accounts) = (s.model.health(), s.accounts.health());
                let mut view = model.with_accounts(&accounts);
                view.version = model.version + accounts.version;
                view
            })
            .unwrap_or_default()
    }

    /// Sends what either side wants now, and sets the wake-up for what will fall due.
    fn shard_wake(&mut self, model: u32, k: u32) {
        let now = self.ms();
        for (target, fresh) in [(Target::Model, FRESH_MS), (Target::Accounts, ACCOUNTS_FRESH_MS)] {
            let Some(shard) = self.shards.get_mut(&(model, k)) else {
                return;
            };
            let link = match target {
                Target::Model => &mut shard.model,
                Target::Accounts => &mut shard.accounts,
            };
            if link.in_flight {
                continue;
            }
            let scope = match target {
                Target::Model => Scope::Model,
                Target::Accounts => Scope::Accounts,
            };
            let Some((call, taken)) = link.side.call(fresh, scope, now) else {
                continue;
            };
            link.in_flight = true;
            let (kind, observations) = match call {
                HealthCall::Observe { observations, .. } => (Kind::Observe, observations),
                _ => (Kind::Snapshot, Vec::new()),
            };
            let obj = match target {
                Target::Model => Obj::Model(model),
                Target::Accounts => Obj::Accounts,
            };
            let then = Then::ShardFlush {
                model,
                shard: k,
                target,
                observations,
                taken,
            };
            self.call(u32::MAX, obj, kind, 0, FORWARD_TIMEOUT_MS, then);
        }
        self.shard_schedule(model, k);
    }

    fn shard_schedule(&mut self, model: u32, k: u32) {
        let Some(shard) = self.shards.get_mut(&(model, k)) else {
            return;
        };
        let Some(at) = [&shard.model, &shard.accounts]
            .iter()
            .filter(|link| !link.in_flight)
            .filter_map(|link| link.side.wake_at())
            .min()
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
    pub(super) fn shard_flushed(
        &mut self,
        model: u32,
        k: u32,
        target: Target,
        taken: Option<Pending>,
        reply: Option<ModelHealth>,
    ) {
        let now = self.ms();
        let shard = self.shards.entry((model, k)).or_default();
        let link = match target {
            Target::Model => &mut shard.model,
            Target::Accounts => &mut shard.accounts,
        };
        link.in_flight = false;
        let scope = match target {
            Target::Model => Scope::Model,
            Target::Accounts => Scope::Accounts,
        };
        let reply = reply.map(|health| SnapshotReply {
            health,
            stats: Default::default(),
        });
        link.side.done(reply, taken, scope, now);
        self.shard_schedule(model, k);
    }
}
