//! The health shards (SPEC §22): a tier of [`SHARDS`] Durable Objects per model between the
//! isolates and the model's health object, so the model's object sees a call rate bounded by the
//! number of shards whatever the number of isolates.
//!
//! An isolate talks to one shard of each model ([`shard_object`], picked by the isolate's seed):
//! it fetches its snapshot there — the model's breakers and stats with its accounts' breakers
//! folded in by the model's object, so it makes no account call on the request path — and reports
//! its outcomes there. A shard applies the reports it gets to its copy at once (so its answers
//! never lack what its isolates reported: [`Pending::replay_onto`] after each renewal), keeps
//! them in [`Pending`] and forwards them to the model's object (which tells the accounts'
//! objects what concerns them) as one `Observe` call:
//! at once when a probe, or a failure on a breaker its copy does not hold demoted yet, is among
//! them (at most one forwarding per
//! [`URGENT_GAP_MS`]), else within [`FLUSH_MS`]. Its copy of the
//! object's snapshot is renewed by every forwarding and, when a caller finds it older than
//! [`FRESH_MS`], by a snapshot call. So the model's object
//! receives at most `SHARDS` × 1000 / min(`FRESH_MS`, `URGENT_GAP_MS`) calls a second,
//! ≈ `SHARDS` × 1000 / `FRESH_MS` without failures — whatever the number of isolates.
//!
//! Each report an isolate sends carries an id; a shard remembers the ids it took in ([`TakenIn`])
//! and tells a caller which of its reports still awaiting an answer it holds, so the caller does
//! not apply those outcomes a second time to the copy it gets (core `health::Unreported`).
//!
//! Probe claims, route capacity, the status report and admin resets still go to the model's
//! object itself: they are rare or must be exact.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::rpc::{HealthCall, SnapshotReply};
use crate::classify::Blame;

use super::{AttemptOutcome, HealthConfig, ModelHealth, Observation, RequestObservation, Scope};

/// Shards per model.
pub const SHARDS: u64 = 32;
/// A shard renews its copy of the model object's snapshot when a caller finds it older than this.
pub const FRESH_MS: u64 = 250;
/// Reports without a failure or probe wait at most this long in a shard.
pub const FLUSH_MS: u64 = 1_000;
/// A failure or probe is forwarded at once — or, from shard `n`, `n` × [`URGENT_GAP_MS`] /
/// [`SHARDS`] after it came ([`Side::for_shard`]): a route that goes down fails in every shard at
/// the same moment, and their forwardings reach the model's object spread over this window, not
/// all together — but a shard forwards at most once per this: what comes meanwhile waits for it
/// and goes together.
pub const URGENT_GAP_MS: u64 = 100;
/// After a failed call to an object, a shard leaves it alone this long, doubling up to
/// [`BACKOFF_MAX_MS`].
pub const BACKOFF_MS: u64 = 1_000;
pub const BACKOFF_MAX_MS: u64 = 8_000;
/// The most observations a shard keeps waiting; past it, successes are dropped (counted), never a
/// failure or a probe.
pub const MAX_PENDING: usize = 4_096;

/// The name of shard `n` of model `model_id`'s health.
pub fn shard_object(model_id: &str, seed: u64) -> String {
    format!("shard:{}:{model_id}", seed % SHARDS)
}

/// The shard's number and the model it serves, from its name.
pub fn shard_model(name: &str) -> Option<(u64, &str)> {
    let (n, model) = name.strip_prefix("shard:")?.split_once(':')?;
    let n = n.parse::<u64>().ok().filter(|n| *n < SHARDS)?;
    (!model.is_empty()).then_some((n, model))
}

/// One request's outcomes, as an isolate reports them to its shard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardReport {
    pub config: HealthConfig,
    /// Every attempt.
    pub observations: Vec<Observation>,
    pub request: Option<RequestObservation>,
}

impl ShardReport {
    /// A failure or a probe: forwarded at once.
    pub fn urgent(&self) -> bool {
        urgent(&self.observations)
    }
}

/// Whether `o` is news for an object whose copy is `held`: a probe, or a failure on a breaker the
/// copy does not hold demoted — the account's for an account failure, else the route's (without a
/// copy, any failure).
fn news(o: &Observation, held: Option<(&ModelHealth, Scope)>) -> bool {
    if o.probe {
        return true;
    }
    if matches!(o.outcome, AttemptOutcome::Success) {
        return false;
    }
    let account = matches!(o.outcome, AttemptOutcome::Failure(c) if c.blame() == Blame::Account);
    let demoted = held.is_some_and(|(copy, scope)| match scope == Scope::Accounts || account {
        true => copy.accounts.get(&o.account).is_some_and(|b| b.is_demoted()),
        false => copy.routes.get(&o.route).is_some_and(|r| r.breaker.is_demoted()),
    });
    !demoted
}

fn urgent(observations: &[Observation]) -> bool {
    observations.iter().any(Observation::urgent)
}

/// A call to a shard. `pending`: the ids of the caller's reports to this shard still awaiting
/// their answer — the reply's `applied` says which of them the shard has taken in, so the caller
/// knows which of its own outcomes the copy already holds (core `health::Unreported`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum ShardCall {
    /// The shard's copy of the model's snapshot.
    Snapshot {
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending: Vec<u64>,
    },
    /// Reports an isolate gathered, sent as report `id`; replies with the snapshots (after them,
    /// when they were urgent).
    Report {
        reports: Vec<ShardReport>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pending: Vec<u64>,
    },
}

/// A shard's answer: its copy of the model object's snapshot (`None`: it has none yet — the
/// object did not answer), and which of the call's `pending` reports it has taken in (every copy
/// it answers with holds them).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ShardReply {
    pub model: Option<SnapshotReply>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub applied: Vec<u64>,
}

/// Report `n` of the isolate seeded `seed`: unique among the isolate's, and (the seeds being
/// random) among the isolates a shard hears from. Below 2^53, a number JavaScript holds exactly:
/// a Durable Object reads its calls through the runtime's JSON.
pub fn report_id(seed: u64, n: u64) -> u64 {
    seed.wrapping_add(n) & ((1 << 53) - 1)
}

/// How many report ids a shard remembers having taken in: at a report a second from each of a
/// few hundred isolates, several seconds' worth — longer than any report's answer takes.
pub const REMEMBERED_REPORTS: usize = 2_048;

/// The ids of the reports a shard took in, the latest [`REMEMBERED_REPORTS`].
#[derive(Debug, Clone, Default)]
pub struct TakenIn {
    ids: VecDeque<u64>,
}

impl TakenIn {
    /// Report `id` was taken in.
    pub fn took(&mut self, id: u64) {
        if self.ids.len() >= REMEMBERED_REPORTS {
            self.ids.pop_front();
        }
        self.ids.push_back(id);
    }

    /// Those of `pending` taken in (one forgotten counts as not: its outcomes are applied again,
    /// as before ids were sent).
    pub fn of(&self, pending: &[u64]) -> Vec<u64> {
        pending.iter().copied().filter(|id| self.ids.contains(id)).collect()
    }
}

/// Reports a shard holds for one object until it forwards them.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    config: Option<HealthConfig>,
    observations: Vec<Observation>,
    requests: Vec<RequestObservation>,
    /// When the oldest waiting report came.
    since_ms: Option<u64>,
    /// When the first failure or probe that is news among them came.
    urgent_ms: Option<u64>,
    /// Successes dropped because [`MAX_PENDING`] were waiting.
    pub dropped: u64,
}

impl Pending {
    /// Adds a report's `observations` (and its request's outcome, for the model's object).
    /// `held`: the shard's copy of the object they go to, and its scope — a failure on a breaker
    /// the copy already holds demoted is no news and waits for the flush like a success; any
    /// other failure, and every probe, is urgent ([`Pending::due_at`]).
    pub fn add(
        &mut self,
        config: HealthConfig,
        observations: &[Observation],
        request: Option<&RequestObservation>,
        now_ms: u64,
        held: Option<(&ModelHealth, Scope)>,
    ) {
        if observations.is_empty() && request.is_none() {
            return;
        }
        for o in observations {
            let urgent = news(o, held);
            self.push(o.clone(), urgent.then_some(now_ms));
        }
        if let Some(r) = request.filter(|_| self.requests.len() < MAX_PENDING) {
            self.requests.push(r.clone());
        }
        self.config = Some(config);
        self.since_ms.get_or_insert(now_ms);
    }

    /// `urgent_at`: when it came, if it is news.
    fn push(&mut self, o: Observation, urgent_at: Option<u64>) {
        if !o.urgent() && self.observations.len() >= MAX_PENDING {
            self.dropped += 1;
            return;
        }
        if let Some(at) = urgent_at {
            self.urgent_ms = Some(self.urgent_ms.map_or(at, |u| u.min(at)));
        }
        self.observations.push(o);
    }

    /// Applies what waits to `health`, a copy of the object's that has not seen it (a shard's
    /// copy just renewed), with the same state machine the object will.
    pub fn replay_onto(&self, health: &mut ModelHealth, scope: Scope) {
        if let Some(config) = self.config {
            for o in &self.observations {
                health.observe_scoped(o, &config, scope);
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.since_ms.is_none()
    }

    /// When it is to be forwarded, the last forwarding having been sent at `last_sent_ms`: with a
    /// failure or probe among it, `stagger_ms` after the first such came but no sooner than
    /// [`URGENT_GAP_MS`] after the last forwarding; else when the oldest report has waited
    /// [`FLUSH_MS`] (`None`: nothing waits).
    pub fn due_at(&self, last_sent_ms: u64, stagger_ms: u64) -> Option<u64> {
        let flush = self.since_ms?.saturating_add(FLUSH_MS);
        Some(match self.urgent_ms {
            Some(at) => flush.min(
                last_sent_ms
                    .saturating_add(URGENT_GAP_MS)
                    .max(at.saturating_add(stagger_ms)),
            ),
            None => flush,
        })
    }

    /// Whether it is due at `now_ms` ([`Pending::due_at`]).
    pub fn due(&self, now_ms: u64, last_sent_ms: u64, stagger_ms: u64) -> bool {
        self.due_at(last_sent_ms, stagger_ms).is_some_and(|at| now_ms >= at)
    }

    /// Takes everything waiting as one `Observe` call in `scope` (`None` when nothing waits).
    pub fn take(&mut self, scope: Scope) -> Option<(HealthCall, Pending)> {
        let config = self.config?;
        let taken = std::mem::take(self);
        self.dropped = taken.dropped;
        let call = HealthCall::Observe {
            scope,
            config,
            observations: taken.observations.clone(),
            requests: taken.requests.clone(),
        };
        Some((call, taken))
    }

    /// A forwarding that failed: what it carried waits again, before what came since (its order
    /// kept), within [`MAX_PENDING`].
    pub fn rejoin(&mut self, taken: Pending) {
        let since = std::mem::replace(self, taken);
        self.dropped = since.dropped;
        self.config = since.config.or(self.config);
        self.since_ms = self.since_ms.or(since.since_ms);
        self.urgent_ms = match (self.urgent_ms, since.urgent_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        since.observations.into_iter().for_each(|o| self.push(o, None));
        let room = MAX_PENDING.saturating_sub(self.requests.len());
        self.requests.extend(since.requests.into_iter().take(room));
    }
}

/// A shard's side of the model's object: its copy of the object's
/// snapshot, the reports waiting for it, and when to call it next. The shard in `src/` and the
/// simulation both keep theirs in this.
#[derive(Debug, Clone, Default)]
pub struct Side {
    pub pending: Pending,
    pub copy: Option<SnapshotReply>,
    /// When the copy was last renewed.
    renewed_ms: u64,
    /// When the last forwarding or snapshot call was sent.
    sent_ms: u64,
    failures: u32,
    next_try_ms: u64,
    /// How long after its first news this side forwards it ([`Side::for_shard`]).
    stagger_ms: u64,
}

impl Side {
    /// Shard `n`'s side: news waits `n` × [`URGENT_GAP_MS`] / [`SHARDS`] before it is forwarded
    /// (0 to 97 ms), so that a route failing in every shard at once does not bring the model's
    /// object every shard's forwarding at once.
    pub fn for_shard(n: u64) -> Side {
        Side {
            stagger_ms: (n % SHARDS) * URGENT_GAP_MS / SHARDS,
            ..Side::default()
        }
    }

    /// Whether a call is wanted at `now`: what waits is due, or the copy is missing or older than
    /// `fresh_ms` — unless the object is being left alone after a failure.
    pub fn wanted(&self, fresh_ms: u64, now: u64) -> bool {
        now >= self.next_try_ms
            && (self.pending.due(now, self.sent_ms, self.stagger_ms)
                || self.copy.is_none()
                || now >= self.renewed_ms.saturating_add(fresh_ms))
    }

    /// A report's observations for this object: applied to the copy at once, kept to forward.
    pub fn take_in(
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

    /// The call wanted now, if any, marked sent: what waits as one `Observe` (with what it took,
    /// to rejoin if the call fails), or a `Snapshot` when only the copy is stale.
    pub fn call(&mut self, fresh_ms: u64, scope: Scope, now: u64) -> Option<(HealthCall, Option<Pending>)> {
        if !self.wanted(fresh_ms, now) {
            return None;
        }
        self.sent_ms = now;
        Some(match self.pending.take(scope) {
            Some((call, taken)) => (call, Some(taken)),
            None => (HealthCall::Snapshot, None),
        })
    }

    /// A call ended: its answer is the copy, with what came since applied again; a failed
    /// forwarding rejoins what waits, and the object is left alone 1 s, doubling to 8 s.
    pub fn done(&mut self, reply: Option<SnapshotReply>, taken: Option<Pending>, scope: Scope, now: u64) {
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

    /// When it will want a call without a caller's asking: what waits falling due (not before
    /// the object's back-off ends); `None` when nothing waits.
    pub fn wake_at(&self) -> Option<u64> {
        self.pending
            .due_at(self.sent_ms, self.stagger_ms)
            .map(|at| at.max(self.next_try_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;

    fn obs(outcome: AttemptOutcome) -> Observation {
        Observation {
            route: "r0".into(),
            account: "acct".into(),
            outcome,
            at_ms: 0,
            stream: false,
            ttfb_ms: Some(10),
            output_tokens: 1,
            duration_ms: 20,
            extra_try: false,
            probe: false,
            retry_after_ms: None,
            verify: false,
            key: "k".into(),
            provoked: false,
        }
    }

    fn config() -> HealthConfig {
        HealthConfig::default()
    }

    #[test]
    fn names_pick_one_of_the_models_shards_and_read_back() {
        let name = shard_object("gpt:4o", 37);
        assert_eq!(name, "shard:5:gpt:4o");
        assert_eq!(shard_model(&name), Some((5, "gpt:4o")));
        for bad in ["model:x", "shard:x:m", "shard:32:m", "shard:1:"] {
            assert_eq!(shard_model(bad), None, "{bad}");
        }
    }

    #[test]
    fn successes_wait_for_the_flush_and_a_failure_goes_at_once() {
        let mut p = Pending::default();
        assert!(p.is_empty() && !p.due(0, 0, 0) && p.due_at(0, 0).is_none());
        p.add(config(), &[obs(AttemptOutcome::Success)], None, 1_000, None);
        assert!(!p.due(1_999, 0, 0));
        assert!(
            p.due(2_000, 1_990, 0),
            "successes wait their second, whenever the last forwarding was"
        );
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        p.add(config(), &[failure], None, 1_100, None);
        assert!(p.due(1_100, 0, 0), "a failure is forwarded at once");
        assert_eq!(p.due_at(1_050, 0), Some(1_150), "… but one forwarding per 100 ms");
        let (call, _) = p.take(Scope::Model).unwrap();
        let HealthCall::Observe { observations, .. } = call else {
            panic!("{call:?}")
        };
        assert_eq!(observations.len(), 2, "in the order they came");
        assert!(p.is_empty() && !p.due(10_000, 0, 0) && p.take(Scope::Model).is_none());
    }

    #[test]
    fn shards_forward_the_same_news_spread_over_the_urgent_gap() {
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        // Successes have waited half a second in every shard when the route fails at 10 s.
        let due: Vec<u64> = (0..SHARDS)
            .map(|n| {
                let mut side = Side::for_shard(n);
                side.take_in(config(), &[obs(AttemptOutcome::Success)], None, Scope::Model, 9_500);
                side.take_in(config(), std::slice::from_ref(&failure), None, Scope::Model, 10_000);
                side.wake_at().unwrap()
            })
            .collect();
        assert_eq!(due[0], 10_000, "shard 0 forwards at once");
        assert!(
            due.iter().all(|at| (10_000..10_000 + URGENT_GAP_MS).contains(at)),
            "{due:?}"
        );
        assert!(
            due.windows(2).all(|w| w[1] >= w[0] + 3),
            "one shard's forwarding every 3 ms at most: {due:?}"
        );
        // A failure that comes while the first waits goes with it, on the first one's time.
        let mut side = Side::for_shard(16);
        side.take_in(config(), std::slice::from_ref(&failure), None, Scope::Model, 10_000);
        side.take_in(config(), std::slice::from_ref(&failure), None, Scope::Model, 10_040);
        assert_eq!(side.wake_at(), Some(10_050));
    }

    #[test]
    fn a_failed_forwarding_rejoins_before_what_came_since() {
        let mut p = Pending::default();
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        p.add(config(), &[failure], None, 5, None);
        let (_, taken) = p.take(Scope::Model).unwrap();
        p.add(config(), &[obs(AttemptOutcome::Success)], None, 9, None);
        p.rejoin(taken);
        let (call, _) = p.take(Scope::Model).unwrap();
        let HealthCall::Observe { observations, .. } = call else {
            panic!("{call:?}")
        };
        assert!(matches!(observations[0].outcome, AttemptOutcome::Failure(_)));
        assert!(matches!(observations[1].outcome, AttemptOutcome::Success));
    }

    #[test]
    fn a_failure_on_a_breaker_the_copy_holds_demoted_waits_for_the_flush() {
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        let mut copy = ModelHealth::default();
        copy.observe_scoped(&failure, &config(), Scope::Model);
        assert!(copy.routes["r0"].breaker.is_demoted());
        let mut p = Pending::default();
        p.add(
            config(),
            std::slice::from_ref(&failure),
            None,
            0,
            Some((&copy, Scope::Model)),
        );
        assert_eq!(p.due_at(0, 0), Some(FLUSH_MS), "no news: the flush");
        p.add(
            config(),
            std::slice::from_ref(&failure),
            None,
            0,
            Some((&copy, Scope::Accounts)),
        );
        assert_eq!(
            p.due_at(0, 0),
            Some(URGENT_GAP_MS),
            "the account's breaker is not demoted: news"
        );
        let mut probe = obs(AttemptOutcome::Success);
        probe.probe = true;
        let mut q = Pending::default();
        q.add(config(), &[probe], None, 0, Some((&copy, Scope::Model)));
        assert_eq!(q.due_at(0, 0), Some(URGENT_GAP_MS), "a probe is always news");
        // An account failure is news unless the model's copy holds the account demoted.
        let account = obs(AttemptOutcome::Failure(FailureClass::Account));
        let mut a = Pending::default();
        a.add(
            config(),
            std::slice::from_ref(&account),
            None,
            0,
            Some((&copy, Scope::Model)),
        );
        assert_eq!(
            a.due_at(0, 0),
            Some(URGENT_GAP_MS),
            "the route is demoted, the account is not"
        );
        copy.observe_scoped(&account, &config(), Scope::Model);
        let mut b = Pending::default();
        b.add(config(), &[account], None, 0, Some((&copy, Scope::Model)));
        assert_eq!(b.due_at(0, 0), Some(FLUSH_MS), "the copy holds the account demoted");
    }

    #[test]
    fn what_waits_is_applied_again_onto_a_renewed_copy() {
        let mut p = Pending::default();
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        p.add(config(), &[failure], None, 0, None);
        let mut copy = ModelHealth::default();
        p.replay_onto(&mut copy, Scope::Model);
        assert!(
            copy.routes["r0"].breaker.is_demoted(),
            "overloaded demotes at once: {copy:?}"
        );
        let mut accounts = ModelHealth::default();
        p.replay_onto(&mut accounts, Scope::Accounts);
        assert!(accounts.accounts.is_empty(), "a route failure is not the account's");
    }

    #[test]
    fn a_side_renews_a_stale_copy_and_backs_off_after_a_failed_call() {
        let mut side = Side::default();
        assert!(side.wanted(FRESH_MS, 0), "no copy yet");
        let (call, taken) = side.call(FRESH_MS, Scope::Model, 0).unwrap();
        assert_eq!((call, taken.is_none()), (HealthCall::Snapshot, true));
        side.done(Some(SnapshotReply::default()), None, Scope::Model, 10);
        assert!(!side.wanted(FRESH_MS, 10 + FRESH_MS - 1) && side.wanted(FRESH_MS, 10 + FRESH_MS));
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        side.take_in(config(), &[failure], None, Scope::Model, 20);
        assert!(
            side.copy.as_ref().unwrap().health.routes["r0"].breaker.is_demoted(),
            "applied at once"
        );
        assert_eq!(
            side.wake_at(),
            Some(100),
            "news: one forwarding per 100 ms after the last call"
        );
        let (call, taken) = side.call(FRESH_MS, Scope::Model, 100).unwrap();
        assert!(matches!(call, HealthCall::Observe { .. }));
        side.done(None, taken, Scope::Model, 150);
        assert!(!side.wanted(FRESH_MS, 1_149), "left alone for a second");
        assert_eq!(
            side.wake_at(),
            Some(1_150),
            "what failed waits again, after the back-off"
        );
        let (call, taken) = side.call(FRESH_MS, Scope::Model, 1_150).unwrap();
        side.done(None, taken, Scope::Model, 1_200);
        assert!(matches!(call, HealthCall::Observe { .. }));
        assert_eq!(side.wake_at(), Some(3_200), "doubled");
    }

    #[test]
    fn a_full_shard_drops_successes_never_failures() {
        let mut p = Pending::default();
        let many = vec![obs(AttemptOutcome::Success); MAX_PENDING + 10];
        p.add(config(), &many, None, 0, None);
        assert_eq!(p.dropped, 10);
        let failure = obs(AttemptOutcome::Failure(FailureClass::Overloaded));
        p.add(config(), &[failure], None, 0, None);
        let (call, _) = p.take(Scope::Model).unwrap();
        let HealthCall::Observe { observations, .. } = call else {
            panic!("{call:?}")
        };
        assert_eq!(observations.len(), MAX_PENDING + 1);
        assert_eq!(p.dropped, 10, "the count survives the take");
    }

    #[test]
    fn reports_read_their_urgency() {
        let report = |o: Observation| ShardReport {
            config: config(),
            observations: vec![o],
            request: None,
        };
        assert!(!report(obs(AttemptOutcome::Success)).urgent());
        assert!(report(obs(AttemptOutcome::Failure(FailureClass::Overloaded))).urgent());
        let mut probe = obs(AttemptOutcome::Success);
        probe.probe = true;
        assert!(report(probe).urgent());
        // Without pending reports the calls and the reply read as before ids were sent.
        let text = serde_json::to_string(&ShardCall::Snapshot { pending: vec![] }).unwrap();
        assert_eq!(text, r#"{"call":"snapshot"}"#);
        let old: ShardCall = serde_json::from_str(r#"{"call":"report","reports":[]}"#).unwrap();
        assert_eq!(
            old,
            ShardCall::Report {
                reports: vec![],
                id: None,
                pending: vec![]
            }
        );
        let reply: ShardReply = serde_json::from_str(r#"{"model":null}"#).unwrap();
        assert!(reply.applied.is_empty());
        // A shard names the caller's reports it took in, the latest REMEMBERED_REPORTS.
        let mut taken = TakenIn::default();
        for id in 0..REMEMBERED_REPORTS as u64 + 10 {
            taken.took(id);
        }
        assert_eq!(
            taken.of(&[3, 11, 500, u64::MAX]),
            vec![11, 500],
            "3 forgotten, u64::MAX never sent"
        );
        assert!(report_id(u64::MAX, 2) < 1 << 53 && report_id(7, 1) == 8);
    }
}
