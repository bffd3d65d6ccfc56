//! `Design::Sharded` — **a proposal, not built** (issue 34's health tier): the model's health
//! reached through `health_shards` shard objects. A shard applies its isolates' reports to its own
//! copy at once (its isolates' next snapshot has them), queues them, and forwards the queue to the
//! model's object once per [`SHARD_FLUSH_MS`] — within [`SHARD_URGENT_MS`] when a failure on a
//! route it does not hold demoted is among them, the failures of that time together — while
//! isolates call it; the object's answer refreshes the copy. When a
//! forwarded batch changes which routes the object holds demoted, the object pushes its snapshot
//! to every shard. So the model's object takes about one call per shard per second, whatever `I`.

use super::*;

/// A shard's state.
#[derive(Default)]
pub(super) struct Shard {
    /// Its copy of the model's health (the accounts' breakers folded in).
    copy: ModelHealth,
    /// Reports not yet forwarded (applied to `copy` already).
    queued: Vec<Observation>,
    /// When its next forwarding is due (`None`: none planned).
    next_at: Option<u64>,
    /// An isolate called it since its last forwarding.
    active: bool,
}

/// The most reports a shard keeps queued while the model's object does not answer (the oldest go).
const MAX_QUEUED: usize = 4_096;

impl World {
    /// The object an isolate keeps its view of `model` from.
    pub(super) fn view_obj(&self, iso: u32, model: u32) -> Obj {
        match self.p.design {
            Design::Today => Obj::Model(model),
            Design::Sharded => Obj::Shard(model, iso % self.p.health_shards.max(1) as u32),
        }
    }

    /// Reports from an isolate: applied to the shard's copy, queued; the copy is the answer.
    pub(super) fn shard_observe(&mut self, model: u32, k: u32, observations: Vec<Observation>) -> ModelHealth {
        let config = self.config;
        let shard = self.shards.entry((model, k)).or_default();
        // Urgent: a failure on a route the shard does not hold demoted yet (the rest can wait).
        let urgent = observations.iter().any(|o| {
            !matches!(o.outcome, AttemptOutcome::Success)
                && !shard.copy.routes.get(&o.route).is_some_and(|s| s.breaker.is_demoted())
        });
        for o in &observations {
            shard.copy.observe(o, &config);
        }
        shard.queued.extend(observations);
        let reply = shard.copy.snapshot();
        self.shard_due(model, k, urgent);
        reply
    }

    pub(super) fn shard_snapshot(&mut self, model: u32, k: u32) -> ModelHealth {
        let reply = self.shards.entry((model, k)).or_default().copy.snapshot();
        self.shard_due(model, k, false);
        reply
    }

    /// Marks the shard busy and plans its next forwarding (sooner for a failure).
    fn shard_due(&mut self, model: u32, k: u32, urgent: bool) {
        let wait = if urgent { SHARD_URGENT_MS } else { SHARD_FLUSH_MS };
        let at = self.now + wait * 1_000;
        let shard = self.shards.entry((model, k)).or_default();
        shard.active = true;
        if shard.next_at.is_none_or(|next| next > at) {
            shard.next_at = Some(at);
            self.at(at, Ev::ShardFlush { model, shard: k, at });
        }
    }

    /// The shard forwards its queue to the model's object (or, with nothing queued, refreshes its
    /// copy), and plans the next while its isolates keep calling.
    pub(super) fn shard_flush(&mut self, model: u32, k: u32, at: u64) {
        let Some(shard) = self.shards.get_mut(&(model, k)) else {
            return;
        };
        if shard.next_at != Some(at) {
            return; // superseded by an earlier one
        }
        shard.next_at = None;
        let active = std::mem::take(&mut shard.active);
        let observations = std::mem::take(&mut shard.queued);
        if !active && observations.is_empty() {
            return; // idle: the next isolate call plans again
        }
        let kind = if observations.is_empty() {
            Kind::Snapshot
        } else {
            Kind::Observe
        };
        let then = Then::ShardFlush {
            model,
            shard: k,
            observations,
        };
        self.call(u32::MAX, Obj::Model(model), kind, 0, HEALTH_TIMEOUT_MS, then);
        // ± 10 %: the shards' forwardings drift apart instead of arriving together.
        let next = self.now + (SHARD_FLUSH_MS as f64 * 1_000.0 * self.rng.range(0.9, 1.1)) as u64;
        if let Some(shard) = self.shards.get_mut(&(model, k)) {
            shard.next_at = Some(next);
        }
        self.at(
            next,
            Ev::ShardFlush {
                model,
                shard: k,
                at: next,
            },
        );
    }

    /// The model's object answered (its snapshot), or not: a failed forwarding rejoins the queue.
    pub(super) fn shard_flushed(&mut self, model: u32, k: u32, sent: Vec<Observation>, reply: Option<ModelHealth>) {
        match reply {
            Some(health) => self.shard_refreshed(model, k, health),
            None => {
                let shard = self.shards.entry((model, k)).or_default();
                let mut queued = sent;
                queued.append(&mut shard.queued);
                let over = queued.len().saturating_sub(MAX_QUEUED);
                shard.queued = queued.split_off(over);
            }
        }
    }

    /// A fresh copy from the model's object, with the reports queued since applied again.
    pub(super) fn shard_refreshed(&mut self, model: u32, k: u32, health: ModelHealth) {
        let config = self.config;
        let shard = self.shards.entry((model, k)).or_default();
        shard.copy = health;
        for o in &shard.queued {
            shard.copy.observe(o, &config);
        }
    }

    /// The model's object pushes its snapshot to every shard (a demotion, or its end).
    pub(super) fn push_to_shards(&mut self, model: u32, snapshot: &ModelHealth) {
        for k in 0..self.p.health_shards.max(1) as u32 {
            let then = Then::Push(snapshot.clone());
            self.call(u32::MAX, Obj::Shard(model, k), Kind::Push, 0, HEALTH_TIMEOUT_MS, then);
        }
    }
}
