//! Route and account health (SPEC §8, §9): the breaker state machine, the route order it implies,
//! probe grants, and the one-minute buckets and hourly history behind the status page (SPEC §14).
//!
//! This module owns [`ModelHealth`], one model's health as plain serde data, so the model's Durable
//! Object persists it as JSON and every isolate applies its own outcomes to its cached copy with the
//! very same code. Time is always an argument; nothing here reads a clock. [`rpc`] is the typed
//! calls between an isolate and a health object; [`Unreported`] keeps an isolate's own outcomes
//! until a shard answers their report, so a copy taken meanwhile does not undo them.
//!
//! Invariants:
//! - A [`Breaker`] is *demoted* exactly when `demoted_until_ms` is `Some`. It is *cooling* while
//!   `demoted_until_ms > now`; once the cooldown has ended it stays demoted until a probe (or any
//!   later attempt) ends: success resets it, a confirmed failure demotes it again with the next
//!   cooldown (one key's provokable failure leaves the probe due and asks for a check).
//! - Each demotion lasts `cooldown_ms * 2^level` capped at `cooldown_max_ms` and raises `level` by one
//!   (defaults: 5, 10, 20, 30, 30 … minutes); only a success puts `level` back to 0.
//! - A demoted route waiting for a check is rechecked every `recheck_ms * 2^level` (the same level
//!   as its cooldown's) capped at `cooldown_ms` while the cooldown runs (SPEC §8b):
//!   [`Breaker::recheck_at_ms`] is set at each demotion and after each failed recheck; a passed
//!   recheck ends the cooldown at once.
//! - A probe lease exists only on a demoted breaker whose cooldown has ended; at most one unexpired
//!   lease exists per breaker, so exactly one probe is granted per cooldown (until the lease expires).
//! - Route failures count only against the route breaker, `account` failures only against the
//!   account breaker (demoted at once), client-caused classes against nothing (SPEC §4).
//! - Provoked stays unconfirmed at every door (SPEC §18a): a failure the request's own content can
//!   provoke is confirmed only by a second key's in the same run or by the model's own check;
//!   unconfirmed, it demotes nothing — not at the threshold, a probe, an ended cooldown or after
//!   a passed recheck (`Breaker::fail`, the one place a failure becomes a decision) — and is
//!   not in the route's buckets (its stats and spread weight).
//! - Buckets are sorted by minute, one per minute, and cover at most the last [`WINDOW_MINUTES`]
//!   minutes: older ones are dropped on every write. A bucket keeps at most
//!   [`TTFB_SAMPLES_PER_BUCKET`] TTFB samples (the first ones of that minute). The model's
//!   requests are also folded into hours, kept for [`HOURS_KEPT`] hours (`hours.rs`).

mod hours;
pub mod rpc;
mod scope;
pub mod shard;
mod unreported;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::catalog::Policy;
use crate::classify::{Blame, FailureClass};

pub use hours::{last_hours, ChartPoint, Hour, CHART_POINTS, CHART_POINT_MINUTES, HOURS_KEPT, HOUR_MS, SLOW_TTFB_MS};
pub use scope::{for_accounts, ProbeClaim, Scope};
pub use unreported::Unreported;

/// Buckets kept, in minutes (the status page's "last hour").
pub const WINDOW_MINUTES: u64 = 60;
/// TTFB samples kept per one-minute bucket.
pub const TTFB_SAMPLES_PER_BUCKET: usize = 64;
const MINUTE_MS: u64 = 60_000;

/// The health knobs of the effective policy (SPEC §16).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct HealthConfig {
    /// Consecutive route failures that demote a route (default 3).
    pub demote_after: u32,
    /// Consecutive failures that demote when the last one is `overloaded` (default 1).
    pub demote_after_overloaded: u32,
    /// First cooldown, ms (default 5 min); doubles with each demotion since the last success.
    pub cooldown_ms: u64,
    /// Longest cooldown, ms (default 30 min).
    pub cooldown_max_ms: u64,
    /// First interval between rechecks of a demoted route, ms (default 15 s); doubles as the
    /// cooldown does, at most `cooldown_ms` (SPEC §8b).
    pub recheck_ms: u64,
}

impl HealthConfig {
    pub fn from_policy(p: &Policy) -> HealthConfig {
        HealthConfig {
            demote_after: p.demote_after,
            demote_after_overloaded: p.demote_after_overloaded,
            cooldown_ms: p.cooldown_ms,
            cooldown_max_ms: p.cooldown_max_ms,
            recheck_ms: p.recheck_ms,
        }
    }

    /// The cooldown of a demotion at `level` (0 for the first since the last success).
    pub fn cooldown_for(&self, level: u32) -> u64 {
        let factor = 1u64.checked_shl(level.min(63)).unwrap_or(u64::MAX);
        self.cooldown_ms.saturating_mul(factor).min(self.cooldown_max_ms)
    }

    /// The interval between rechecks during a demotion at `level` (as [`Self::cooldown_for`]'s):
    /// `recheck_ms * 2^level`, at most `cooldown_ms` (SPEC §8b).
    pub fn recheck_for(&self, level: u32) -> u64 {
        let factor = 1u64.checked_shl(level.min(63)).unwrap_or(u64::MAX);
        self.recheck_ms.saturating_mul(factor).min(self.cooldown_ms)
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig::from_policy(&Policy::default())
    }
}

/// What the caller knows about one route's health right now (the seam for SPEC §8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RouteHealth {
    /// Demoted routes go last and never get the last-route deadline if a healthy one can.
    pub demoted: bool,
    pub consecutive_failures: u32,
    /// The route's upstream account is in cooldown (SPEC §9): the route is skipped while the
    /// request has any other.
    pub account_cooling: bool,
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptOutcome {
    /// The attempt committed and delivered (SPEC §6).
    Success,
    Failure(FailureClass),
}

/// One outcome to apply: what happened on one attempt at (route, account).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Route id (`Route::id`).
    pub route: String,
    /// The route's upstream account (`Provider::account()`).
    pub account: String,
    pub outcome: AttemptOutcome,
    /// When the attempt ended; the clock for this observation.
    pub at_ms: u64,
    pub stream: bool,
    /// Time to first content, ms (streams; recorded as a TTFB sample on success).
    pub ttfb_ms: Option<u64>,
    pub output_tokens: u64,
    /// The attempt's whole duration, send to end, ms. Throughput uses the time after first content
    /// (`duration_ms - ttfb_ms`) for streams with a TTFB, else the whole duration.
    pub duration_ms: u64,
    /// The one more try for a slow route: adds no failure to the route (SPEC §5).
    pub extra_try: bool,
    /// The attempt was a probe granted by [`ModelHealth::claim_probe`] (of the route, its account, or
    /// both). When it ends without a verdict on a breaker (e.g. `cancelled`), that breaker's lease
    /// is released so the next request may probe.
    pub probe: bool,
    /// `retry-after` the upstream sent, ms (`rate_limited`: extends the cooldown if longer).
    pub retry_after_ms: Option<u64>,
    /// The route's `verify` (SPEC §8a): a demotion this observation causes waits for a passed
    /// check before live traffic may probe the route.
    #[serde(default)]
    pub verify: bool,
    /// The API key of the request (its id): whose traffic the failure came from (SPEC §18).
    #[serde(default)]
    pub key: String,
    /// The failure is of a kind the request's own content can provoke (a 500, an empty answer, a
    /// 403 on something the client named: [`FailureClass::provokable`]): alone, one key's such
    /// failures demote nothing before the model's object confirms them with a check.
    #[serde(default)]
    pub provoked: bool,
}

impl Observation {
    /// A failure or a probe: what a shard forwards at once and never drops, and what a model's
    /// object keeps for an account's object that did not take it.
    pub fn urgent(&self) -> bool {
        self.probe || !matches!(self.outcome, AttemptOutcome::Success)
    }

    /// A stream attempt at (route, account) that ended at `at_ms`, nothing else known (tests,
    /// the simulation).
    pub fn at(route: &str, account: &str, outcome: AttemptOutcome, at_ms: u64) -> Observation {
        Observation {
            route: route.into(),
            account: account.into(),
            outcome,
            at_ms,
            stream: true,
            ttfb_ms: None,
            output_tokens: 0,
            duration_ms: 0,
            extra_try: false,
            probe: false,
            retry_after_ms: None,
            verify: false,
            key: String::new(),
            provoked: false,
        }
    }
}

/// Per-request (not per-attempt) outcome for the status page buckets: a request that a later route
/// answered counts as answered for the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestObservation {
    pub at_ms: u64,
    pub answered: bool,
    /// Whether the request is in the public record at all: only when a route answered, or it went
    /// unanswered after a failure of a route's own ([`crate::generation::AttemptRecord::failed_by_route`]);
    /// client errors, the gateway's own refusals and cancellations are not (SPEC §18a).
    pub counted: bool,
    /// Time to first content of the answered stream, ms.
    pub stream_ttfb_ms: Option<u64>,
    /// Unanswered after failures that were all of a kind the request's own content can provoke:
    /// the (route, account) of each. Such a request is in the public record only once the object
    /// holds those failures confirmed — a breaker demoted, or failing for two keys (SPEC §18a):
    /// one key's poison paints nothing Down.
    #[serde(default)]
    pub provoked_at: Vec<(String, String)>,
}

/// One breaker: of a route (for one model) or of an upstream account.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Breaker {
    /// Failures in a row that counted against this breaker since the last success.
    pub consecutive_failures: u32,
    /// `Some` while demoted: the end of the current cooldown (may be in the past: probe due).
    pub demoted_until_ms: Option<u64>,
    /// When the current demotion (or the latest re-demotion after a failed probe) started.
    pub demoted_at_ms: Option<u64>,
    /// Demotions since the last success; the next cooldown is `cooldown_ms * 2^level`.
    pub cooldown_level: u32,
    /// The granted probe's lease ends here (probe in flight while in the future).
    pub probe_lease_until_ms: Option<u64>,
    pub last_failure_class: Option<FailureClass>,
    pub last_failure_ms: Option<u64>,
    /// Demoted and waiting for a passed verification check (SPEC §8a): until then its cooldown's
    /// end grants no live probe. Only route breakers of routes with `verify` set it.
    pub check_pending: bool,
    /// While cooling and waiting for a check: when the next recheck falls due (SPEC §8b). Set at
    /// each demotion and after each failed recheck; a pass ends the cooldown.
    pub recheck_at_ms: Option<u64>,
    /// The distinct keys (at most two) whose provokable failures are in the current run of
    /// failures (SPEC §18): from two keys, every failure of the run is confirmed.
    pub failing_keys: Vec<String>,
    /// Failures in the current run that no client content can provoke (a 503, a refused
    /// connection, a timeout…): confirmed by themselves.
    pub proven_failures: u32,
    /// A verdict fell on failures not confirmed (one key's provokable failures, SPEC §18a): not
    /// demoted, waiting for the model's object to confirm with a check of its own. A passed check
    /// clears the run; a failed one demotes.
    pub confirm_pending: bool,
    /// For an account breaker waiting for confirmation: the route whose check confirms it.
    pub confirm_route: Option<String>,
}

impl Breaker {
    /// Nothing counts against it and nothing is pending: what no breaker at all would decide
    /// (the last failure's class and time are history only).
    pub fn at_rest(&self) -> bool {
        let history = Breaker {
            last_failure_class: None,
            last_failure_ms: None,
            ..self.clone()
        };
        history == Breaker::default()
    }
}

/// Where a breaker stands at a given time (for admin health and `/status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum BreakerState {
    Healthy,
    /// Demoted, cooldown running until `until_ms`.
    Cooling {
        until_ms: u64,
    },
    /// Cooldown ended; the route waits for a passed verification check (SPEC §8a).
    AwaitingCheck,
    /// Cooldown ended; the next request may claim the probe.
    ProbeDue,
    /// Cooldown ended; a probe is in flight (its lease ends at `lease_until_ms`).
    ProbeInFlight {
        lease_until_ms: u64,
    },
}

impl Breaker {
    pub fn is_demoted(&self) -> bool {
        self.demoted_until_ms.is_some()
    }

    /// Demoted, or its current run of failures came from two keys: what it failed with is the
    /// route's (or account's), not one client's content.
    pub fn confirmed_failing(&self) -> bool {
        self.is_demoted() || self.failing_keys.len() >= 2
    }

    /// Demoted and the cooldown has not ended.
    pub fn is_cooling(&self, now_ms: u64) -> bool {
        self.demoted_until_ms.is_some_and(|until| until > now_ms)
    }

    /// Demoted and the cooldown has ended (a probe is due or in flight).
    pub fn cooldown_ended(&self, now_ms: u64) -> bool {
        self.demoted_until_ms.is_some_and(|until| until <= now_ms)
    }

    fn lease_held(&self, now_ms: u64) -> bool {
        self.probe_lease_until_ms.is_some_and(|lease| lease > now_ms)
    }

    pub fn state(&self, now_ms: u64) -> BreakerState {
        match (self.demoted_until_ms, self.probe_lease_until_ms) {
            (None, _) => BreakerState::Healthy,
            (Some(until), _) if until > now_ms => BreakerState::Cooling { until_ms: until },
            (Some(_), _) if self.check_pending => BreakerState::AwaitingCheck,
            (Some(_), Some(lease)) if lease > now_ms => BreakerState::ProbeInFlight { lease_until_ms: lease },
            (Some(_), _) => BreakerState::ProbeDue,
        }
    }

    /// Goes at the end of the order: cooling, or cooldown ended with a check pending or a probe
    /// in flight.
    fn parked(&self, now_ms: u64) -> bool {
        self.is_cooling(now_ms) || (self.cooldown_ended(now_ms) && (self.check_pending || self.lease_held(now_ms)))
    }

    /// The cooldown has ended, no check is pending and nobody holds the probe lease.
    pub fn probe_due(&self, now_ms: u64) -> bool {
        self.cooldown_ended(now_ms) && !self.check_pending && !self.lease_held(now_ms)
    }

    /// A success: back in place, counters reset. The last failure is kept for admin display.
    fn succeed(&mut self) {
        self.consecutive_failures = 0;
        self.demoted_until_ms = None;
        self.demoted_at_ms = None;
        self.cooldown_level = 0;
        self.probe_lease_until_ms = None;
        self.check_pending = false;
        self.recheck_at_ms = None;
        self.clear_run();
    }

    /// Forgets whose failures made the current run (a success, a demotion, a passed check).
    pub(crate) fn clear_run(&mut self) {
        self.failing_keys.clear();
        self.proven_failures = 0;
        self.confirm_pending = false;
        self.confirm_route = None;
    }

    pub(crate) fn demote(&mut self, now_ms: u64, cfg: &HealthConfig) {
        self.demoted_until_ms = Some(now_ms.saturating_add(cfg.cooldown_for(self.cooldown_level)));
        self.demoted_at_ms = Some(now_ms);
        self.cooldown_level = self.cooldown_level.saturating_add(1);
        self.probe_lease_until_ms = None;
        self.schedule_recheck(now_ms, cfg);
        self.clear_run();
    }

    /// The next recheck of this demotion, one interval after `now_ms` (SPEC §8b): the interval of
    /// the level the current cooldown was given at.
    pub(crate) fn schedule_recheck(&mut self, now_ms: u64, cfg: &HealthConfig) {
        let interval = cfg.recheck_for(self.cooldown_level.saturating_sub(1));
        self.recheck_at_ms = Some(now_ms.saturating_add(interval));
    }

    /// A passed recheck: the cooldown ends at `now_ms` (if it had not), so the route's one live
    /// probe is due (SPEC §8b).
    pub(crate) fn end_cooldown(&mut self, now_ms: u64) {
        self.demoted_until_ms = self.demoted_until_ms.map(|until| until.min(now_ms));
        self.recheck_at_ms = None;
    }

    /// The failures of the current run that are proof against the breaker for everyone (SPEC
    /// §18a): those no client content can provoke, and — once provokable ones came from two keys —
    /// all of them. (While healthy, `consecutive_failures` is the run: a success, a demotion and
    /// a passed confirmation end both.)
    fn confirmed_failures(&self) -> u32 {
        if self.failing_keys.len() >= 2 {
            self.consecutive_failures
        } else {
            self.proven_failures
        }
    }

    /// One failure counted against this breaker: the one place an observation becomes a breaker
    /// decision (SPEC §8, §18a). The failure brings a *verdict* when it reaches the threshold
    /// (healthy), or when the cooldown has ended or it was the breaker's probe (demoted — also the
    /// live probe after a passed §8b check); still cooling (tried as a fallback at the end) it is
    /// counted and the cooldown left as it is. A verdict demotes (again, a level up) only on
    /// confirmed failures: `threshold` of them (healthy), or this one (demoted). Otherwise — one
    /// key's provokable failures — it demotes nothing at any of these doors: the breaker waits for
    /// the model's object to confirm with a check of its own (`confirm_pending`), and a probe
    /// that failed so leaves the probe due.
    ///
    /// Returns whether this failure is confirmed: only such failures enter the route's traffic
    /// stats (the spread's weights, the status page), so one key's content moves no one's
    /// conversations.
    fn fail(&mut self, obs: &Observation, class: FailureClass, threshold: u32, cfg: &HealthConfig) -> bool {
        let now = obs.at_ms;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.last_failure_class = Some(class);
        self.last_failure_ms = Some(now);
        if !obs.provoked {
            self.proven_failures = self.proven_failures.saturating_add(1);
        } else if self.failing_keys.len() < 2 && !self.failing_keys.contains(&obs.key) {
            self.failing_keys.push(obs.key.clone());
        }
        let confirmed = !obs.provoked || self.failing_keys.len() >= 2;
        let (verdict, demote) = match self.demoted_until_ms {
            None => (
                self.consecutive_failures >= threshold.max(1),
                self.confirmed_failures() >= threshold.max(1),
            ),
            Some(until) => (until <= now || obs.probe, confirmed),
        };
        match (verdict, demote) {
            (true, true) => self.demote(now, cfg),
            (true, false) => self.confirm_pending = true,
            (false, _) => {}
        }
        if class == FailureClass::RateLimited {
            if let (Some(until), Some(retry_after)) = (self.demoted_until_ms, obs.retry_after_ms) {
                let asked = now.saturating_add(retry_after);
                self.demoted_until_ms = Some(until.max(asked));
                // Nor is it checked before the time it asked for (SPEC §8b).
                self.recheck_at_ms = self.recheck_at_ms.map(|at| at.max(asked));
            }
        }
        confirmed
    }
}

/// One minute of traffic.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Bucket {
    /// `at_ms / 60_000`.
    pub minute: u64,
    pub requests: u32,
    pub answered: u32,
    /// Route attempts: failures counting against the route and confirmed (SPEC §18a: one key's
    /// provokable failures are not, until a second key's join them). Model buckets: unanswered
    /// requests.
    pub failed: u32,
    /// Stream TTFB samples, ms; at most [`TTFB_SAMPLES_PER_BUCKET`] (the first of the minute).
    pub ttfb_samples_ms: Vec<u32>,
    pub output_tokens: u64,
    /// Generation time behind `output_tokens`, ms.
    pub output_ms: u64,
}

impl Bucket {
    fn add_ttfb(&mut self, ttfb_ms: u64) {
        if self.ttfb_samples_ms.len() < TTFB_SAMPLES_PER_BUCKET {
            self.ttfb_samples_ms.push(u32::try_from(ttfb_ms).unwrap_or(u32::MAX));
        }
    }
}

/// The bucket for `at_ms`, created if needed, after dropping buckets older than the window (counted
/// back from the newer of `at_ms` and the newest bucket). `None` when `at_ms` itself is that old.
fn bucket_mut(buckets: &mut Vec<Bucket>, at_ms: u64) -> Option<&mut Bucket> {
    let minute = at_ms / MINUTE_MS;
    let newest = buckets.iter().map(|b| b.minute).max().unwrap_or(minute).max(minute);
    let oldest_kept = newest.saturating_sub(WINDOW_MINUTES - 1);
    buckets.retain(|b| b.minute >= oldest_kept);
    if minute < oldest_kept {
        return None;
    }
    let i = match buckets.binary_search_by_key(&minute, |b| b.minute) {
        Ok(i) => i,
        Err(i) => {
            buckets.insert(
                i,
                Bucket {
                    minute,
                    ..Bucket::default()
                },
            );
            i
        }
    };
    buckets.get_mut(i)
}

/// The buckets of the last hour at `now_ms` (the current minute and the 59 before it; a bucket
/// slightly in the future, from another isolate's clock, counts too).
pub fn recent(buckets: &[Bucket], now_ms: u64) -> impl Iterator<Item = &Bucket> {
    let oldest = (now_ms / MINUTE_MS).saturating_sub(WINDOW_MINUTES - 1);
    buckets.iter().filter(move |b| b.minute >= oldest)
}

/// Median of the samples (mean of the two middle ones for an even count), `None` when empty.
pub fn median_ms(samples: impl IntoIterator<Item = u32>) -> Option<u64> {
    let mut v: Vec<u32> = samples.into_iter().collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let mid = v.len() / 2;
    let upper = u64::from(*v.get(mid)?);
    if v.len() % 2 == 1 {
        Some(upper)
    } else {
        let lower = u64::from(*v.get(mid - 1)?);
        Some((lower + upper) / 2)
    }
}

/// Why a verification check ran (SPEC §8a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckKind {
    /// The route's cooldown ended.
    Cooldown,
    /// The route was healthy but unproven for `verify_idle_ms`.
    Idle,
    /// One key's failures reached the route's (or its account's) threshold: is it the route, or
    /// that client's content (SPEC §18)?
    Confirm,
    /// The route is demoted and its cooldown still runs: has it recovered early (SPEC §8b)?
    Recheck,
}

impl CheckKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckKind::Cooldown => "cooldown",
            CheckKind::Idle => "idle",
            CheckKind::Confirm => "confirm",
            CheckKind::Recheck => "recheck",
        }
    }
}

/// The latest check of a route, as admin health and `/status` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    pub at_ms: u64,
    pub kind: CheckKind,
    pub passed: bool,
    /// `answered`, or why the answer was not one (the failure class's words; never a secret).
    pub reason: String,
}

/// One route's health within a model.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct RouteHealthState {
    pub breaker: Breaker,
    pub buckets: Vec<Bucket>,
    /// The latest evidence the route answers: a live success or a passed check (SPEC §8a).
    pub last_ok_ms: Option<u64>,
    /// When the model's object first listed the route: an idle route's clock starts here.
    pub known_since_ms: Option<u64>,
    /// A verification check of the route is in flight until then (one at a time, SPEC §8a).
    pub check_lease_until_ms: Option<u64>,
    /// The latest verification check (admin health, `/status`).
    pub last_check: Option<CheckRecord>,
}

/// One route's traffic over the last hour (status page; `sort` by latency / throughput).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct RouteStats {
    /// Attempts at the route.
    pub requests: u32,
    pub answered: u32,
    /// Attempts that failed by a class counting against the route (SPEC §4), confirmed ones only
    /// (SPEC §18a, [`ModelHealth::observe`]).
    pub failed: u32,
    /// `answered / (answered + failed)`; `None` without such attempts.
    pub success_rate: Option<f64>,
    pub median_ttfb_ms: Option<u64>,
    /// Output tokens per second of generation time.
    pub tokens_per_s: Option<f64>,
    /// The same judged attempts split into the last [`RECENT_MINUTES`] and the rest of the hour
    /// (the route's own norm), for the spread's health factor (SPEC §8a).
    #[serde(default)]
    pub recent: Window,
    #[serde(default)]
    pub earlier: Window,
}

/// Minutes of a route's stats that count as its current behaviour; the rest of the hour is its norm.
pub const RECENT_MINUTES: u64 = 5;

/// Judged attempts and TTFB within part of the hour.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Default)]
pub struct Window {
    pub answered: u32,
    pub failed: u32,
    pub median_ttfb_ms: Option<u64>,
}

impl Window {
    fn of(buckets: &[&Bucket]) -> Window {
        Window {
            answered: buckets.iter().map(|b| b.answered).sum(),
            failed: buckets.iter().map(|b| b.failed).sum(),
            median_ttfb_ms: median_ms(buckets.iter().flat_map(|b| b.ttfb_samples_ms.iter().copied())),
        }
    }
}

/// One model's health: its routes' breakers and buckets, the breakers of the upstream accounts its
/// routes use, and the model's per-request buckets (the status word, SPEC §14).
///
/// Account breakers are shared by every model on the account (SPEC §9): each account's object holds
/// its breaker, and a model's object holds copies of its accounts' breakers, each with the version
/// its account's object answered ([`ModelHealth::fold_account`]).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct ModelHealth {
    /// By route id.
    pub routes: BTreeMap<String, RouteHealthState>,
    /// By account name.
    pub accounts: BTreeMap<String, Breaker>,
    pub model_buckets: Vec<Bucket>,
    /// The model's counted requests by hour, for a week and more (the status page's history).
    pub model_hours: Vec<Hour>,
    /// Requests left unanswered by failures one key's content could provoke, waiting for the run
    /// they belong to: counted once it is confirmed, forgotten once it clears (SPEC §18a).
    pub pending: Vec<Pending>,
    /// How many times the object holding it changed it ([`ModelHealth::changed`]): a copy is
    /// replaced only by a newer one ([`ModelHealth::newer_than`]), so a copy that came by a slower
    /// path (a shard's, a snapshot that crossed a report) never undoes what an isolate applied
    /// to its own copy since.
    pub version: u64,
    /// The version of each upstream account's breaker held in `accounts`, as the account's
    /// object answered it (a model's object: its routes' accounts, 0 until one answered): a copy
    /// of an account's breaker replaces another only when newer, whichever model brought it.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub account_versions: BTreeMap<String, u64>,
}

/// A request waiting to be counted: when it ended, and the (route, account) it failed at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub at_ms: u64,
    pub failed: Vec<(String, String)>,
}

/// The most requests a model keeps waiting to be counted (the oldest go first).
const MAX_PENDING: usize = 256;

impl ModelHealth {
    /// Applies one attempt's outcome (SPEC §8, §9) and records it in the route's bucket.
    ///
    /// Success resets the route breaker and, if it has one and it is not cooling (or the success
    /// is its probe), the account's. A failure counts by
    /// [`FailureClass::blame`]: against the route (`overloaded` demotes after
    /// `demote_after_overloaded`, others after `demote_after`; the extra try adds none), against the
    /// account (demoted at once; the route breaker untouched), or against nothing — and by
    /// `Breaker::fail` only once confirmed (SPEC §18a): one key's provokable failures demote
    /// nothing at any door and stay out of the route's bucket (so out of its spread weight).
    pub fn observe(&mut self, obs: &Observation, cfg: &HealthConfig) {
        let state = self.routes.entry(obs.route.clone()).or_default();
        // Whether a failure counts against the route in its traffic stats: only as proof, as
        // its breaker decides (one key's provokable failures alone do not, SPEC §18a).
        let mut against_route = false;
        match obs.outcome {
            AttemptOutcome::Success => {
                state.last_ok_ms = state.last_ok_ms.max(Some(obs.at_ms));
                state.breaker.succeed();
                // An account in cooldown is healed by its probe (or a success once the cooldown
                // ended), not by a request planned before its demotion was known — its model's
                // object learns of it before that model's isolates do.
                if let Some(account) = self.accounts.get_mut(&obs.account) {
                    if obs.probe || !account.is_cooling(obs.at_ms) {
                        account.succeed();
                    }
                }
            }
            AttemptOutcome::Failure(class) => match class.blame() {
                Blame::Route if obs.extra_try => {
                    state.breaker.last_failure_class = Some(class);
                    state.breaker.last_failure_ms = Some(obs.at_ms);
                    against_route = !obs.provoked;
                }
                Blame::Route => {
                    let threshold = if class == FailureClass::Overloaded {
                        cfg.demote_after_overloaded
                    } else {
                        cfg.demote_after
                    };
                    let before = state.breaker.demoted_at_ms;
                    against_route = state.breaker.fail(obs, class, threshold, cfg);
                    if state.breaker.demoted_at_ms != before {
                        state.breaker.check_pending = obs.verify;
                    }
                }
                Blame::Account => {
                    let account = self.accounts.entry(obs.account.clone()).or_default();
                    account.fail(obs, class, 1, cfg);
                    if account.confirm_pending {
                        account.confirm_route = Some(obs.route.clone());
                    }
                }
                Blame::Nothing => {}
            },
        }
        if let Some(b) = bucket_mut(&mut state.buckets, obs.at_ms) {
            b.requests = b.requests.saturating_add(1);
            match obs.outcome {
                AttemptOutcome::Success => {
                    b.answered = b.answered.saturating_add(1);
                    if obs.stream {
                        if let Some(t) = obs.ttfb_ms {
                            b.add_ttfb(t);
                        }
                    }
                    let gen_ms = match obs.ttfb_ms {
                        Some(t) if obs.stream && obs.duration_ms > t => obs.duration_ms - t,
                        _ => obs.duration_ms,
                    };
                    if obs.output_tokens > 0 && gen_ms > 0 {
                        b.output_tokens = b.output_tokens.saturating_add(obs.output_tokens);
                        b.output_ms = b.output_ms.saturating_add(gen_ms);
                    }
                }
                AttemptOutcome::Failure(_) if against_route => b.failed = b.failed.saturating_add(1),
                AttemptOutcome::Failure(_) => {}
            }
        }
        if obs.probe {
            // The probe has ended: a breaker it reached no verdict on may be probed again at once.
            if let Some(state) = self.routes.get_mut(&obs.route) {
                state.breaker.probe_lease_until_ms = None;
            }
            if let Some(account) = self.accounts.get_mut(&obs.account) {
                account.probe_lease_until_ms = None;
            }
        }
    }

    /// Records one request in the model's minute bucket (status word, SPEC §14) and in its hour
    /// (the history); uncounted ones are skipped.
    ///
    /// A request left unanswered by provokable failures only waits ([`ModelHealth::pending`])
    /// until the object holds those failures confirmed — a breaker demoted, or failing for two
    /// keys — and is counted then; if the run clears first (a passed check, a success) it was
    /// that client's content, and is forgotten: one key's poison paints nothing Down.
    pub fn observe_request(&mut self, obs: &RequestObservation) {
        if !obs.counted {
            return;
        }
        if !obs.answered && !obs.provoked_at.is_empty() {
            if self.pending.len() >= MAX_PENDING {
                self.pending.remove(0);
            }
            self.pending.push(Pending {
                at_ms: obs.at_ms,
                failed: obs.provoked_at.clone(),
            });
            self.settle_pending();
            return;
        }
        self.count_request(obs);
        self.settle_pending();
    }

    /// Counts what waits on a confirmed run, forgets what waits on a cleared one.
    pub fn settle_pending(&mut self) {
        for p in std::mem::take(&mut self.pending) {
            if self.confirms(&p.failed) {
                self.count_request(&RequestObservation {
                    at_ms: p.at_ms,
                    answered: false,
                    counted: true,
                    stream_ttfb_ms: None,
                    provoked_at: Vec::new(),
                });
            } else if self.in_question(&p.failed) {
                self.pending.push(p);
            }
        }
    }

    /// Whether any of these (route, account) breakers is in a run of failures not yet decided.
    fn in_question(&self, failed: &[(String, String)]) -> bool {
        failed.iter().any(|(route, account)| {
            self.routes
                .get(route)
                .is_some_and(|s| !s.breaker.failing_keys.is_empty())
                || self.accounts.get(account).is_some_and(|b| !b.failing_keys.is_empty())
        })
    }

    fn count_request(&mut self, obs: &RequestObservation) {
        hours::record(&mut self.model_hours, obs);
        if let Some(b) = bucket_mut(&mut self.model_buckets, obs.at_ms) {
            b.requests = b.requests.saturating_add(1);
            if obs.answered {
                b.answered = b.answered.saturating_add(1);
                if let Some(t) = obs.stream_ttfb_ms {
                    b.add_ttfb(t);
                }
            } else {
                b.failed = b.failed.saturating_add(1);
            }
        }
    }

    /// Whether any of these (route, account) breakers holds its failures confirmed.
    fn confirms(&self, failed: &[(String, String)]) -> bool {
        failed.iter().any(|(route, account)| {
            self.routes.get(route).is_some_and(|s| s.breaker.confirmed_failing())
                || self.accounts.get(account).is_some_and(Breaker::confirmed_failing)
        })
    }

    /// The usual order with health applied (SPEC §8). `routes` is the model's routes in catalog
    /// order as (route id, account); the result holds indexes into it.
    ///
    /// Routes whose route breaker and account breaker are both healthy or probe-due keep their
    /// order; `probe due` (the third field) is set when either breaker's cooldown has ended and no
    /// probe is in flight — the caller must win [`ModelHealth::claim_probe`] before trying it there,
    /// else it moves the route to the end (as demoted). Routes that are cooling, or whose cooldown
    /// ended with a probe in flight (route or account), go to the end with `demoted: true`, the one
    /// demoted first (earliest `demoted_at_ms` of its demoted breakers) first, ties in catalog
    /// order; when all are demoted this is the whole order.
    pub fn plan_order(&self, routes: &[(String, String)], now_ms: u64) -> Vec<(usize, RouteHealth, bool)> {
        let healthy = Breaker::default();
        let mut front = Vec::with_capacity(routes.len());
        let mut back: Vec<(u64, usize, RouteHealth)> = Vec::new();
        for (i, (route, account)) in routes.iter().enumerate() {
            let rb = self.routes.get(route).map_or(&healthy, |s| &s.breaker);
            let ab = self.accounts.get(account).unwrap_or(&healthy);
            let consecutive_failures = rb.consecutive_failures;
            if rb.parked(now_ms) || ab.parked(now_ms) {
                let demoted_at = [rb, ab]
                    .iter()
                    .filter(|b| b.is_demoted())
                    .map(|b| b.demoted_at_ms.unwrap_or(0))
                    .min()
                    .unwrap_or(0);
                let health = RouteHealth {
                    demoted: true,
                    consecutive_failures,
                    account_cooling: ab.parked(now_ms),
                };
                back.push((demoted_at, i, health));
            } else {
                let health = RouteHealth {
                    demoted: false,
                    consecutive_failures,
                    account_cooling: false,
                };
                front.push((i, health, rb.probe_due(now_ms) || ab.probe_due(now_ms)));
            }
        }
        back.sort_by_key(|(at, i, _)| (*at, *i));
        front.extend(back.into_iter().map(|(_, i, h)| (i, h, false)));
        front
    }

    /// Claims the probe of (route, account): grants exactly one probe per cooldown.
    ///
    /// Looks at the demoted ones of the route breaker and the account breaker. True only if there is
    /// at least one, the cooldown of every one has ended, and none holds an unexpired lease; then
    /// each gets the lease `now_ms + lease_ms` (all or nothing). Healthy or cooling → false. A lease
    /// ends when the probe's outcome is observed (success, demoted again, or released by an
    /// inconclusive probe) or when it expires — then the next claim may win. `lease_ms` should
    /// cover the probe's longest attempt; 0 is taken as 1 ms.
    pub fn claim_probe(&mut self, route: &str, account: &str, now_ms: u64, lease_ms: u64) -> bool {
        let healthy = Breaker::default();
        let rb = self.routes.get(route).map_or(&healthy, |s| &s.breaker);
        let ab = self.accounts.get(account).unwrap_or(&healthy);
        let demoted: Vec<&Breaker> = [rb, ab].into_iter().filter(|b| b.is_demoted()).collect();
        if demoted.is_empty() || !demoted.iter().all(|b| b.probe_due(now_ms)) {
            return false;
        }
        let lease = Some(now_ms.saturating_add(lease_ms.max(1)));
        if let Some(s) = self.routes.get_mut(route) {
            if s.breaker.is_demoted() {
                s.breaker.probe_lease_until_ms = lease;
            }
        }
        if let Some(a) = self.accounts.get_mut(account) {
            if a.is_demoted() {
                a.probe_lease_until_ms = lease;
            }
        }
        true
    }

    /// A copy without buckets or hours: the breakers only, cheap to cache in an isolate and to send from
    /// the Durable Object. `observe` on it still works (it starts buckets afresh).
    pub fn snapshot(&self) -> ModelHealth {
        ModelHealth {
            routes: self
                .routes
                .iter()
                .map(|(id, s)| {
                    (
                        id.clone(),
                        RouteHealthState {
                            breaker: s.breaker.clone(),
                            ..RouteHealthState::default()
                        },
                    )
                })
                .collect(),
            accounts: self.accounts.clone(),
            model_buckets: Vec::new(),
            model_hours: Vec::new(),
            pending: Vec::new(),
            version: self.version,
            account_versions: self.account_versions.clone(),
        }
    }

    /// The object holding it changed it (a call applied outcomes, granted a probe, reset it).
    pub fn changed(&mut self) {
        self.version = self.version.wrapping_add(1);
    }

    /// Whether this copy (from the object) is to replace `held`, a copy an isolate holds and may
    /// have applied its own outcomes to: only if the object changed since `held` was read.
    pub fn newer_than(&self, held: &ModelHealth) -> bool {
        self.version > held.version
    }

    /// Admin reset: every route and account back to healthy (counters, cooldowns, levels, leases,
    /// last failures). The traffic buckets are kept: they are measurements, not state.
    pub fn reset(&mut self) {
        for s in self.routes.values_mut() {
            s.breaker = Breaker::default();
        }
        self.accounts.clear();
    }

    /// One route's traffic over the last hour at `now_ms`.
    pub fn route_stats(&self, route: &str, now_ms: u64) -> RouteStats {
        let Some(state) = self.routes.get(route) else {
            return RouteStats::default();
        };
        let mut stats = RouteStats::default();
        let (mut tokens, mut ms) = (0u64, 0u64);
        for b in recent(&state.buckets, now_ms) {
            stats.requests = stats.requests.saturating_add(b.requests);
            stats.answered = stats.answered.saturating_add(b.answered);
            stats.failed = stats.failed.saturating_add(b.failed);
            tokens = tokens.saturating_add(b.output_tokens);
            ms = ms.saturating_add(b.output_ms);
        }
        let judged = u64::from(stats.answered) + u64::from(stats.failed);
        if judged > 0 {
            stats.success_rate = Some(f64::from(stats.answered) / judged as f64);
        }
        stats.median_ttfb_ms =
            median_ms(recent(&state.buckets, now_ms).flat_map(|b| b.ttfb_samples_ms.iter().copied()));
        if ms > 0 {
            stats.tokens_per_s = Some(tokens as f64 * 1000.0 / ms as f64);
        }
        let first_recent = (now_ms / MINUTE_MS).saturating_sub(RECENT_MINUTES - 1);
        let (late, early): (Vec<&Bucket>, Vec<&Bucket>) =
            recent(&state.buckets, now_ms).partition(|b| b.minute >= first_recent);
        stats.recent = Window::of(&late);
        stats.earlier = Window::of(&early);
        stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use FailureClass::*;

    const MIN: u64 = 60_000;
    const T0: u64 = 1_000 * MIN;

    fn cfg() -> HealthConfig {
        HealthConfig::default()
    }

    fn obs(route: &str, account: &str, outcome: AttemptOutcome, at_ms: u64) -> Observation {
        Observation::at(route, account, outcome, at_ms)
    }

    fn fail(h: &mut ModelHealth, route: &str, class: FailureClass, at_ms: u64) {
        h.observe(&obs(route, "acct", AttemptOutcome::Failure(class), at_ms), &cfg());
    }

    fn ok(h: &mut ModelHealth, route: &str, at_ms: u64) {
        h.observe(&obs(route, "acct", AttemptOutcome::Success, at_ms), &cfg());
    }

    fn probe_fail(h: &mut ModelHealth, route: &str, class: FailureClass, at_ms: u64) {
        let mut o = obs(route, "acct", AttemptOutcome::Failure(class), at_ms);
        o.probe = true;
        h.observe(&o, &cfg());
    }

    fn breaker<'a>(h: &'a ModelHealth, route: &str) -> &'a Breaker {
        &h.routes[route].breaker
    }

    fn routes(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(r, a)| (r.to_string(), a.to_string())).collect()
    }

    fn order(h: &ModelHealth, list: &[(&str, &str)], now: u64) -> Vec<usize> {
        h.plan_order(&routes(list), now)
            .into_iter()
            .map(|(i, _, _)| i)
            .collect()
    }

    /// A failure from `key`, `provoked` or not, of `class` at `route` (account "acct").
    fn keyed(h: &mut ModelHealth, route: &str, class: FailureClass, key: &str, provoked: bool, at_ms: u64) {
        let mut o = obs(route, "acct", AttemptOutcome::Failure(class), at_ms);
        o.key = key.into();
        o.provoked = provoked;
        o.verify = true;
        h.observe(&o, &cfg());
    }

    #[test]
    fn one_keys_provokable_failures_demote_nothing_until_confirmed() {
        // SPEC §18: a 500 only this client's content triggers, four times, from one key.
        let mut h = ModelHealth::default();
        for n in 0..4 {
            keyed(&mut h, "a", Upstream5xx, "key-1", true, T0 + n);
        }
        let b = breaker(&h, "a");
        assert!(!b.is_demoted() && b.confirm_pending, "{b:?}");
        assert_eq!(
            order(&h, &[("a", "acct"), ("b", "acct")], T0 + 10),
            vec![0, 1],
            "still first for the next key"
        );
        // The same from a second key is proof: demoted at once.
        keyed(&mut h, "a", Upstream5xx, "key-2", true, T0 + 20);
        assert!(breaker(&h, "a").is_demoted());
        assert_eq!(order(&h, &[("a", "acct"), ("b", "acct")], T0 + 30), vec![1, 0]);
        // Failures no content can provoke (a 503) count alone, as before.
        let mut h = ModelHealth::default();
        for n in 0..3 {
            keyed(&mut h, "a", Upstream5xx, "key-1", false, T0 + n);
        }
        assert!(breaker(&h, "a").is_demoted());
        // One of them does not make one key's two provokable ones proof (SPEC §18a): the
        // model's object checks.
        let mut h = ModelHealth::default();
        keyed(&mut h, "a", Upstream5xx, "key-1", true, T0);
        keyed(&mut h, "a", Upstream5xx, "key-1", true, T0 + 1);
        keyed(&mut h, "a", Upstream5xx, "key-1", false, T0 + 2);
        let b = breaker(&h, "a");
        assert!(!b.is_demoted() && b.confirm_pending, "{b:?}");
    }

    #[test]
    fn the_confirmation_check_decides_and_a_success_clears_the_run() {
        use crate::verify::CheckRoute;
        let routes = [CheckRoute {
            id: "a".into(),
            verify: false,
        }];
        let fail_three = |h: &mut ModelHealth| {
            for n in 0..3 {
                keyed(h, "a", BadResponse, "key-1", true, T0 + n);
            }
        };
        let mut h = ModelHealth::default();
        fail_three(&mut h);
        assert_eq!(
            h.due_checks(&routes, 0, T0 + 5),
            vec![("a".to_string(), CheckKind::Confirm)],
            "due at once, verify or not"
        );
        assert_eq!(
            h.next_cooldown_check_ms(T0 + 5),
            Some(T0 + 6),
            "the object's alarm comes at once"
        );
        h.record_check(
            "a",
            CheckKind::Confirm,
            &Err((BadResponse, "no output".into())),
            T0 + 9,
            false,
            &cfg(),
        );
        let b = breaker(&h, "a");
        assert!(
            b.is_demoted() && !b.check_pending,
            "confirmed: demoted (live probe, it opted out of checks): {b:?}"
        );
        let mut h = ModelHealth::default();
        fail_three(&mut h);
        h.record_check("a", CheckKind::Confirm, &Ok(()), T0 + 9, false, &cfg());
        let b = breaker(&h, "a");
        assert!(
            !b.is_demoted() && !b.confirm_pending && b.consecutive_failures == 0,
            "{b:?}"
        );
        assert!(h.due_checks(&routes, 0, T0 + 10).is_empty());
        // An account blamed by one key's 403: pending, not cooling, until its route's check.
        let mut h = ModelHealth::default();
        keyed(&mut h, "a", Account, "key-1", true, T0);
        assert!(!h.accounts["acct"].is_demoted() && h.accounts["acct"].confirm_pending);
        assert_eq!(
            h.due_checks(&routes, 0, T0 + 1),
            vec![("a".to_string(), CheckKind::Confirm)]
        );
        h.record_check(
            "a",
            CheckKind::Confirm,
            &Err((Account, "403".into())),
            T0 + 2,
            false,
            &cfg(),
        );
        assert!(h.accounts["acct"].is_demoted());
        assert!(
            !breaker(&h, "a").is_demoted(),
            "the account's failure is not the route's"
        );
        // A success clears a pending run.
        let mut h = ModelHealth::default();
        fail_three(&mut h);
        ok(&mut h, "a", T0 + 9);
        assert!(!breaker(&h, "a").confirm_pending);
    }

    const ROUTE_CLASSES: [FailureClass; 6] = [
        Connect,
        Timeout,
        Upstream5xx,
        RateLimited,
        ModelUnavailable,
        BadResponse,
    ];

    #[test]
    fn config_from_policy_and_cooldown_ladder() {
        let c = HealthConfig::from_policy(&Policy::default());
        assert_eq!(
            c,
            HealthConfig {
                demote_after: 3,
                demote_after_overloaded: 1,
                cooldown_ms: 300_000,
                cooldown_max_ms: 1_800_000,
                recheck_ms: 15_000,
            }
        );
        let ladder: Vec<u64> = (0..6).map(|l| c.cooldown_for(l) / MIN).collect();
        assert_eq!(ladder, [5, 10, 20, 30, 30, 30]);
        assert_eq!(c.cooldown_for(u32::MAX), 1_800_000);
        // Rechecks double with the cooldown, at most the first cooldown (SPEC §8b).
        let rechecks: Vec<u64> = (0..7).map(|l| c.recheck_for(l) / 1_000).collect();
        assert_eq!(rechecks, [15, 30, 60, 120, 240, 300, 300]);
        assert_eq!(c.recheck_for(u32::MAX), 300_000);
        // A config from an isolate that predates a knob takes its default.
        let old: HealthConfig = serde_json::from_value(serde_json::json!({"demote_after": 2})).unwrap();
        assert_eq!((old.demote_after, old.recheck_ms), (2, 15_000));
    }

    #[test]
    fn demotes_after_three_consecutive_route_failures_not_two() {
        for class in ROUTE_CLASSES {
            let mut h = ModelHealth::default();
            fail(&mut h, "r", class, T0);
            fail(&mut h, "r", class, T0 + 1);
            assert!(!breaker(&h, "r").is_demoted(), "{class:?} demoted after 2");
            assert_eq!(breaker(&h, "r").consecutive_failures, 2);
            fail(&mut h, "r", class, T0 + 2);
            let b = breaker(&h, "r");
            assert_eq!(b.demoted_until_ms, Some(T0 + 2 + 5 * MIN), "{class:?}");
            assert_eq!(b.demoted_at_ms, Some(T0 + 2));
            assert_eq!(b.cooldown_level, 1);
            assert_eq!(b.last_failure_class, Some(class));
            assert_eq!(b.last_failure_ms, Some(T0 + 2));
        }
    }

    #[test]
    fn a_success_in_between_resets_the_count() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Upstream5xx, T0);
        fail(&mut h, "r", Connect, T0 + 1);
        ok(&mut h, "r", T0 + 2);
        assert_eq!(breaker(&h, "r").consecutive_failures, 0);
        fail(&mut h, "r", Upstream5xx, T0 + 3);
        fail(&mut h, "r", Timeout, T0 + 4);
        assert!(!breaker(&h, "r").is_demoted());
        fail(&mut h, "r", Timeout, T0 + 5);
        assert!(breaker(&h, "r").is_demoted());
    }

    #[test]
    fn overloaded_demotes_after_one() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        assert_eq!(breaker(&h, "r").demoted_until_ms, Some(T0 + 5 * MIN));
        // Also when it follows another failure.
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Upstream5xx, T0);
        assert!(!breaker(&h, "r").is_demoted());
        fail(&mut h, "r", Overloaded, T0 + 1);
        assert!(breaker(&h, "r").is_demoted());
        // The policy knob is honoured.
        let mut h = ModelHealth::default();
        let c = HealthConfig {
            demote_after_overloaded: 2,
            ..cfg()
        };
        h.observe(&obs("r", "a", AttemptOutcome::Failure(Overloaded), T0), &c);
        assert!(!breaker(&h, "r").is_demoted());
        h.observe(&obs("r", "a", AttemptOutcome::Failure(Overloaded), T0 + 1), &c);
        assert!(breaker(&h, "r").is_demoted());
    }

    #[test]
    fn account_failure_demotes_the_account_at_once_and_not_the_route() {
        let mut h = ModelHealth::default();
        h.observe(&obs("r", "acct", AttemptOutcome::Failure(Account), T0), &cfg());
        let a = &h.accounts["acct"];
        assert_eq!(a.demoted_until_ms, Some(T0 + 5 * MIN));
        assert_eq!(a.consecutive_failures, 1);
        assert_eq!(a.last_failure_class, Some(Account));
        assert_eq!(breaker(&h, "r"), &Breaker::default());
        assert_eq!(h.route_stats("r", T0).failed, 0, "not counted against the route");
        // A success on any route of the account restores it.
        ok(&mut h, "other", T0 + 6 * MIN);
        assert!(!h.accounts["acct"].is_demoted());
        assert_eq!(h.accounts["acct"].cooldown_level, 0);
    }

    #[test]
    fn client_caused_classes_never_count() {
        for class in [
            InvalidRequest,
            ContextLength,
            UnsupportedParam,
            ContentPolicy,
            Cancelled,
        ] {
            let mut h = ModelHealth::default();
            for t in 0..10 {
                fail(&mut h, "r", class, T0 + t);
            }
            assert_eq!(breaker(&h, "r"), &Breaker::default(), "{class:?}");
            assert!(h.accounts.is_empty(), "{class:?}");
            let s = h.route_stats("r", T0 + 10);
            assert_eq!((s.requests, s.failed, s.success_rate), (10, 0, None), "{class:?}");
        }
    }

    #[test]
    fn timeout_is_one_failure_and_the_extra_try_adds_none() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Timeout, T0);
        assert_eq!(breaker(&h, "r").consecutive_failures, 1);
        fail(&mut h, "r", Timeout, T0 + 1);
        let mut extra = obs("r", "acct", AttemptOutcome::Failure(Timeout), T0 + 2);
        extra.extra_try = true;
        h.observe(&extra, &cfg());
        h.observe(&extra, &cfg());
        let b = breaker(&h, "r");
        assert_eq!(b.consecutive_failures, 2);
        assert!(!b.is_demoted());
        assert_eq!(b.last_failure_ms, Some(T0 + 2));
        // An extra try that answers resets like any success.
        extra.outcome = AttemptOutcome::Success;
        h.observe(&extra, &cfg());
        assert_eq!(breaker(&h, "r").consecutive_failures, 0);
    }

    #[test]
    fn failed_probes_double_the_cooldown_up_to_thirty_minutes() {
        let mut h = ModelHealth::default();
        for t in 0..3 {
            fail(&mut h, "r", Upstream5xx, T0 + t);
        }
        let mut now = T0 + 2;
        let mut cooldowns = vec![(breaker(&h, "r").demoted_until_ms.unwrap_or(0) - now) / MIN];
        for _ in 0..4 {
            now = breaker(&h, "r").demoted_until_ms.unwrap_or(0);
            assert!(h.claim_probe("r", "acct", now, MIN));
            probe_fail(&mut h, "r", Upstream5xx, now + 1_000);
            now += 1_000;
            let b = breaker(&h, "r");
            assert_eq!(b.demoted_at_ms, Some(now));
            assert_eq!(b.probe_lease_until_ms, None);
            cooldowns.push((b.demoted_until_ms.unwrap_or(0) - now) / MIN);
        }
        assert_eq!(cooldowns, [5, 10, 20, 30, 30]);
        assert_eq!(breaker(&h, "r").cooldown_level, 5);
    }

    #[test]
    fn any_failure_after_the_cooldown_ended_demotes_again() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        // Not a probe (e.g. tried at the end while another isolate probes): still demotes again.
        fail(&mut h, "r", Connect, T0 + 5 * MIN);
        let b = breaker(&h, "r");
        assert_eq!(b.demoted_until_ms, Some(T0 + 15 * MIN));
        assert_eq!(b.cooldown_level, 2);
    }

    #[test]
    fn failures_while_cooling_neither_extend_nor_double() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        for t in 1..5 {
            fail(&mut h, "r", Upstream5xx, T0 + t * MIN);
        }
        let b = breaker(&h, "r");
        assert_eq!(b.demoted_until_ms, Some(T0 + 5 * MIN));
        assert_eq!((b.cooldown_level, b.consecutive_failures), (1, 5));
    }

    #[test]
    fn successful_probe_restores_the_route_and_resets_the_level() {
        let list = [("a", "acct"), ("b", "acct"), ("c", "acct")];
        let mut h = ModelHealth::default();
        fail(&mut h, "a", Overloaded, T0);
        assert_eq!(order(&h, &list, T0 + 1), [1, 2, 0]);
        let now = T0 + 5 * MIN;
        let plan = h.plan_order(&routes(&list), now);
        assert_eq!(
            plan[0],
            (
                0,
                RouteHealth {
                    demoted: false,
                    consecutive_failures: 1,
                    account_cooling: false
                },
                true
            )
        );
        assert!(h.claim_probe("a", "acct", now, MIN));
        // While the probe is in flight the others keep it at the end.
        let plan = h.plan_order(&routes(&list), now + 1);
        assert_eq!(plan.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2, 0]);
        assert!(plan[2].1.demoted && !plan[2].2);
        let mut o = obs("a", "acct", AttemptOutcome::Success, now + 2_000);
        o.probe = true;
        h.observe(&o, &cfg());
        assert_eq!(breaker(&h, "a").cooldown_level, 0);
        assert_eq!(breaker(&h, "a").probe_lease_until_ms, None);
        assert_eq!(
            h.plan_order(&routes(&list), now + 3_000),
            vec![
                (0, RouteHealth::default(), false),
                (1, RouteHealth::default(), false),
                (2, RouteHealth::default(), false)
            ]
        );
        // The next demotion starts again at 5 minutes.
        fail(&mut h, "a", Overloaded, now + 4_000);
        assert_eq!(breaker(&h, "a").demoted_until_ms, Some(now + 4_000 + 5 * MIN));
    }

    #[test]
    fn exactly_one_probe_per_cooldown() {
        let mut h = ModelHealth::default();
        // Healthy: nothing to probe.
        ok(&mut h, "r", T0);
        assert!(!h.claim_probe("r", "acct", T0, MIN));
        assert!(!h.claim_probe("unknown", "nobody", T0, MIN));
        fail(&mut h, "r", Overloaded, T0);
        // Cooling: no probe yet.
        assert!(!h.claim_probe("r", "acct", T0 + 5 * MIN - 1, MIN));
        let end = T0 + 5 * MIN;
        let granted = (0..10).filter(|i| h.claim_probe("r", "acct", end + i, MIN)).count();
        assert_eq!(granted, 1);
        assert_eq!(breaker(&h, "r").probe_lease_until_ms, Some(end + MIN));
        assert_eq!(
            breaker(&h, "r").state(end + 1),
            BreakerState::ProbeInFlight {
                lease_until_ms: end + MIN
            }
        );
        // Not before the lease expires; then exactly one more.
        assert!(!h.claim_probe("r", "acct", end + MIN - 1, MIN));
        let granted = (0..10)
            .filter(|i| h.claim_probe("r", "acct", end + MIN + i, MIN))
            .count();
        assert_eq!(granted, 1);
    }

    #[test]
    fn an_inconclusive_probe_releases_its_lease() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        let end = T0 + 5 * MIN;
        assert!(h.claim_probe("r", "acct", end, 10 * MIN));
        probe_fail(&mut h, "r", Cancelled, end + 1);
        let b = breaker(&h, "r");
        assert_eq!((b.probe_lease_until_ms, b.cooldown_level), (None, 1));
        assert_eq!(b.state(end + 2), BreakerState::ProbeDue);
        assert!(h.claim_probe("r", "acct", end + 2, 10 * MIN));
    }

    #[test]
    fn account_probe_is_claimed_on_the_account_breaker() {
        let mut h = ModelHealth::default();
        h.observe(&obs("r1", "acct", AttemptOutcome::Failure(Account), T0), &cfg());
        let end = T0 + 5 * MIN;
        assert!(!h.claim_probe("r2", "acct", end - 1, MIN));
        let list = [("r1", "acct"), ("r2", "acct"), ("x", "other")];
        let plan = h.plan_order(&routes(&list), end);
        assert_eq!(
            plan.iter().map(|p| (p.0, p.2)).collect::<Vec<_>>(),
            [(0, true), (1, true), (2, false)]
        );
        assert!(h.claim_probe("r2", "acct", end, MIN));
        assert!(!h.claim_probe("r1", "acct", end, MIN), "one probe per account cooldown");
        assert_eq!(h.accounts["acct"].probe_lease_until_ms, Some(end + MIN));
        assert_eq!(order(&h, &list, end + 1), [2, 0, 1]);
        // The probe fails with the account again: doubled cooldown.
        let mut o = obs("r2", "acct", AttemptOutcome::Failure(Account), end + 1_000);
        o.probe = true;
        h.observe(&o, &cfg());
        assert_eq!(h.accounts["acct"].demoted_until_ms, Some(end + 1_000 + 10 * MIN));
        // A route and its account both due: one claim leases both.
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        h.observe(&obs("r", "acct", AttemptOutcome::Failure(Account), T0), &cfg());
        assert!(h.claim_probe("r", "acct", end, MIN));
        assert_eq!(breaker(&h, "r").probe_lease_until_ms, Some(end + MIN));
        assert_eq!(h.accounts["acct"].probe_lease_until_ms, Some(end + MIN));
        // The account still cooling blocks the route's probe.
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        h.observe(&obs("r", "acct", AttemptOutcome::Failure(Account), T0 + MIN), &cfg());
        assert!(!h.claim_probe("r", "acct", end, MIN));
        assert!(!h.plan_order(&routes(&[("r", "acct")]), end)[0].2);
    }

    /// (case, demotions as (route, ms after T0), expected order)
    type OrderCase = (&'static str, &'static [(&'static str, u64)], &'static [usize]);

    #[test]
    fn plan_order_puts_demoted_last_earliest_demoted_first() {
        let list = [("a", "x"), ("b", "x"), ("c", "x"), ("d", "x"), ("e", "x")];
        let cases: &[OrderCase] = &[
            ("none demoted: catalog order", &[], &[0, 1, 2, 3, 4]),
            ("one demoted", &[("b", 0)], &[0, 2, 3, 4, 1]),
            ("two, later one listed first", &[("d", 0), ("a", MIN)], &[1, 2, 4, 3, 0]),
            (
                "two, earlier one listed first",
                &[("a", 0), ("d", MIN)],
                &[1, 2, 4, 0, 3],
            ),
            ("same time: catalog order", &[("c", 0), ("a", 0)], &[1, 3, 4, 0, 2]),
            (
                "all demoted: earliest first",
                &[("c", 0), ("e", 1), ("a", 2), ("d", 3), ("b", 4)],
                &[2, 4, 0, 3, 1],
            ),
        ];
        for (name, demotions, want) in cases {
            let mut h = ModelHealth::default();
            for (route, at) in *demotions {
                fail(&mut h, route, Overloaded, T0 + at);
            }
            let now = T0 + 2 * MIN;
            let plan = h.plan_order(&routes(&list), now);
            assert_eq!(plan.iter().map(|p| p.0).collect::<Vec<_>>(), *want, "{name}");
            for (i, health, probe) in plan {
                let demoted = demotions.iter().any(|(r, _)| *r == list[i].0);
                assert_eq!(health.demoted, demoted, "{name}");
                assert_eq!(health.consecutive_failures, u32::from(demoted), "{name}");
                assert!(!probe, "{name}");
            }
        }
    }

    #[test]
    fn plan_order_reports_consecutive_failures_of_healthy_routes() {
        let mut h = ModelHealth::default();
        fail(&mut h, "b", Timeout, T0);
        fail(&mut h, "b", Timeout, T0);
        let plan = h.plan_order(&routes(&[("a", "x"), ("b", "x")]), T0);
        assert_eq!(
            plan[1],
            (
                1,
                RouteHealth {
                    demoted: false,
                    consecutive_failures: 2,
                    account_cooling: false
                },
                false
            )
        );
    }

    #[test]
    fn a_probe_due_route_keeps_its_place_among_demoted_ones() {
        let list = [("a", "x"), ("b", "x"), ("c", "x")];
        let mut h = ModelHealth::default();
        fail(&mut h, "a", Overloaded, T0);
        fail(&mut h, "b", Overloaded, T0 + 3 * MIN);
        let now = T0 + 5 * MIN;
        let plan = h.plan_order(&routes(&list), now);
        assert_eq!(
            plan.iter().map(|p| (p.0, p.1.demoted, p.2)).collect::<Vec<_>>(),
            [(0, false, true), (2, false, false), (1, true, false)]
        );
    }

    #[test]
    fn account_cooldown_moves_every_route_on_the_account_to_the_end() {
        let list = [("a", "one"), ("b", "two"), ("c", "one"), ("d", "three")];
        let mut h = ModelHealth::default();
        fail(&mut h, "d", Overloaded, T0);
        h.observe(&obs("c", "one", AttemptOutcome::Failure(Account), T0 + MIN), &cfg());
        let plan = h.plan_order(&routes(&list), T0 + 2 * MIN);
        // d was demoted first, then account "one" (a and c, catalog order).
        assert_eq!(
            plan.iter().map(|p| (p.0, p.1.demoted)).collect::<Vec<_>>(),
            [(1, false), (3, true), (0, true), (2, true)]
        );
        assert_eq!(plan[2].1.consecutive_failures, 0, "the route breaker is untouched");
    }

    #[test]
    fn rate_limit_retry_after_extends_the_cooldown() {
        let rl = |h: &mut ModelHealth, at: u64, retry: Option<u64>, class: FailureClass| {
            let mut o = obs("r", "acct", AttemptOutcome::Failure(class), at);
            o.retry_after_ms = retry;
            h.observe(&o, &cfg());
        };
        // Longer than the cooldown: extends it.
        let mut h = ModelHealth::default();
        rl(&mut h, T0, Some(3_600_000), RateLimited);
        rl(&mut h, T0, Some(3_600_000), RateLimited);
        assert!(!breaker(&h, "r").is_demoted(), "retry-after alone does not demote");
        rl(&mut h, T0 + 1, Some(3_600_000), RateLimited);
        assert_eq!(breaker(&h, "r").demoted_until_ms, Some(T0 + 1 + 3_600_000));
        assert_eq!(
            breaker(&h, "r").recheck_at_ms,
            Some(T0 + 1 + 3_600_000),
            "no recheck before the retry-after"
        );
        // Shorter: the cooldown stands.
        let mut h = ModelHealth::default();
        for _ in 0..3 {
            rl(&mut h, T0, Some(60_000), RateLimited);
        }
        assert_eq!(breaker(&h, "r").demoted_until_ms, Some(T0 + 5 * MIN));
        // While cooling, a later longer retry-after extends too.
        assert_eq!(
            breaker(&h, "r").recheck_at_ms,
            Some(T0 + MIN),
            "the recheck waits for the retry-after too"
        );
        rl(&mut h, T0 + MIN, Some(20 * MIN), RateLimited);
        assert_eq!(breaker(&h, "r").demoted_until_ms, Some(T0 + 21 * MIN));
        assert_eq!(breaker(&h, "r").cooldown_level, 1);
        // Only for rate_limited.
        let mut h = ModelHealth::default();
        rl(&mut h, T0, Some(3_600_000), Overloaded);
        assert_eq!(breaker(&h, "r").demoted_until_ms, Some(T0 + 5 * MIN));
    }

    #[test]
    fn buckets_older_than_an_hour_are_dropped() {
        let mut h = ModelHealth::default();
        for m in 0..90 {
            ok(&mut h, "r", T0 + m * MIN);
            h.observe_request(&RequestObservation {
                provoked_at: Vec::new(),
                at_ms: T0 + m * MIN,
                answered: true,
                counted: true,
                stream_ttfb_ms: None,
            });
        }
        let buckets = &h.routes["r"].buckets;
        assert_eq!(buckets.len(), 60);
        assert_eq!(buckets.first().map(|b| b.minute), Some(T0 / MIN + 30));
        assert_eq!(buckets.last().map(|b| b.minute), Some(T0 / MIN + 89));
        assert_eq!(h.model_buckets.len(), 60);
        // Same minute: one bucket.
        ok(&mut h, "r", T0 + 89 * MIN + 59_999);
        assert_eq!(h.routes["r"].buckets.len(), 60);
        assert_eq!(h.routes["r"].buckets.last().map(|b| b.requests), Some(2));
        // A late observation older than the window is not recorded (the breaker still learns).
        fail(&mut h, "r", Connect, T0);
        assert_eq!(h.routes["r"].buckets.len(), 60);
        assert_eq!(breaker(&h, "r").consecutive_failures, 1);
        // Reading ignores buckets that aged out since the last write.
        assert_eq!(h.route_stats("r", T0 + 89 * MIN).requests, 61);
        assert_eq!(h.route_stats("r", T0 + 100 * MIN).requests, 50);
        assert_eq!(h.route_stats("r", T0 + 200 * MIN), RouteStats::default());
    }

    #[test]
    fn route_stats_over_the_last_hour() {
        let mut h = ModelHealth::default();
        let mut answer = |at: u64, ttfb: u64, tokens: u64, duration: u64| {
            let mut o = obs("r", "acct", AttemptOutcome::Success, at);
            o.ttfb_ms = Some(ttfb);
            o.output_tokens = tokens;
            o.duration_ms = duration;
            h.observe(&o, &cfg());
        };
        answer(T0, 500, 100, 2_500); // 100 tokens in 2 s
        answer(T0 + MIN, 900, 300, 4_900); // 300 tokens in 4 s
        answer(T0 + 2 * MIN, 700, 0, 700);
        let mut non_stream = obs("r", "acct", AttemptOutcome::Success, T0 + 3 * MIN);
        non_stream.stream = false;
        non_stream.ttfb_ms = Some(30_000);
        non_stream.output_tokens = 400;
        non_stream.duration_ms = 4_000;
        h.observe(&non_stream, &cfg());
        fail(&mut h, "r", Timeout, T0 + 3 * MIN);
        fail(&mut h, "r", InvalidRequest, T0 + 3 * MIN);
        let s = h.route_stats("r", T0 + 4 * MIN);
        assert_eq!((s.requests, s.answered, s.failed), (6, 4, 1));
        assert_eq!(s.success_rate, Some(0.8));
        assert_eq!(s.median_ttfb_ms, Some(700), "non-stream TTFB is not sampled");
        assert_eq!(s.tokens_per_s, Some(80.0)); // 800 tokens / 10 s
        assert_eq!(h.route_stats("missing", T0), RouteStats::default());
        // Even count: mean of the middle two; samples capped per bucket.
        assert_eq!(median_ms([100, 400, 200, 300]), Some(250));
        assert_eq!(median_ms([]), None);
        let mut h = ModelHealth::default();
        for i in 0..100u64 {
            let mut o = obs("r", "acct", AttemptOutcome::Success, T0);
            o.ttfb_ms = Some(i);
            h.observe(&o, &cfg());
        }
        assert_eq!(h.routes["r"].buckets[0].ttfb_samples_ms.len(), TTFB_SAMPLES_PER_BUCKET);
    }

    #[test]
    fn observe_request_skips_uncounted_requests() {
        let mut h = ModelHealth::default();
        let req = |answered, counted, ttfb| RequestObservation {
            provoked_at: Vec::new(),
            at_ms: T0,
            answered,
            counted,
            stream_ttfb_ms: ttfb,
        };
        h.observe_request(&req(true, true, Some(1_200)));
        h.observe_request(&req(false, true, None));
        h.observe_request(&req(false, false, None));
        assert_eq!(h.model_buckets.len(), 1);
        let b = &h.model_buckets[0];
        assert_eq!((b.requests, b.answered, b.failed), (2, 1, 1));
        assert_eq!(b.ttfb_samples_ms, [1_200]);
    }

    #[test]
    fn one_keys_provoked_failures_paint_nothing_until_confirmed() {
        // SPEC §18a: a request left unanswered by failures its own content can provoke is in the
        // public record only once the object holds them confirmed (two keys, or a demotion).
        let mut h = ModelHealth::default();
        let poisoned = |key: &str, at_ms| {
            let mut o = obs("r0", "acct", AttemptOutcome::Failure(Upstream5xx), at_ms);
            o.key = key.into();
            o.provoked = true;
            o
        };
        let unanswered = |provoked_at: Vec<(String, String)>| RequestObservation {
            at_ms: T0,
            answered: false,
            counted: true,
            stream_ttfb_ms: None,
            provoked_at,
        };
        let at = vec![("r0".to_string(), "acct".to_string())];
        for i in 0..5 {
            h.observe(&poisoned("k1", T0 + i), &cfg());
            h.observe_request(&unanswered(at.clone()));
        }
        let failed = |h: &ModelHealth| h.model_buckets.iter().map(|b| b.failed).sum::<u32>();
        assert_eq!(failed(&h), 0, "one key's poison is in no bucket");
        assert!(
            h.model_hours.iter().all(|hr| hr.requests == 0),
            "nor in the hourly history"
        );
        // A second key's failure of the same kind confirms the run: counted, and the five that
        // waited on it with it.
        h.observe(&poisoned("k2", T0 + 10), &cfg());
        h.observe_request(&unanswered(at.clone()));
        assert_eq!(failed(&h), 6);
        assert!(h.pending.is_empty());
        // A run a passed check clears was the client's: what waited on it is forgotten.
        let mut cleared = ModelHealth::default();
        cleared.observe(&poisoned("k1", T0), &cfg());
        cleared.observe_request(&unanswered(at.clone()));
        assert_eq!(cleared.pending.len(), 1);
        cleared.record_check("r0", crate::verify::CheckKind::Confirm, &Ok(()), T0 + 5, false, &cfg());
        assert!(cleared.pending.is_empty());
        assert_eq!(failed(&cleared), 0);
        // A check that fails demotes the route: what waited is counted.
        let mut confirmed = ModelHealth::default();
        confirmed.observe(&poisoned("k1", T0), &cfg());
        confirmed.observe_request(&unanswered(at.clone()));
        let failure = Err((Upstream5xx, "500".to_string()));
        confirmed.record_check("r0", crate::verify::CheckKind::Confirm, &failure, T0 + 5, false, &cfg());
        assert_eq!(failed(&confirmed), 1);
        // Failures no content provokes were never in question.
        let mut fresh = ModelHealth::default();
        fail(&mut fresh, "r0", Overloaded, T0);
        fresh.observe_request(&unanswered(Vec::new()));
        assert_eq!(failed(&fresh), 1);
    }

    #[test]
    fn serde_round_trip_snapshot_and_reset() {
        let mut h = ModelHealth::default();
        fail(&mut h, "a", Overloaded, T0);
        fail(&mut h, "b", Upstream5xx, T0);
        h.observe(&obs("b", "acct", AttemptOutcome::Failure(Account), T0), &cfg());
        assert!(h.claim_probe("a", "acct2", T0 + 5 * MIN, MIN));
        let mut o = obs("c", "acct2", AttemptOutcome::Success, T0);
        o.ttfb_ms = Some(800);
        o.output_tokens = 10;
        o.duration_ms = 1_800;
        h.observe(&o, &cfg());
        h.observe_request(&RequestObservation {
            provoked_at: Vec::new(),
            at_ms: T0,
            answered: true,
            counted: true,
            stream_ttfb_ms: Some(800),
        });
        let json = serde_json::to_string(&h).unwrap();
        let back: ModelHealth = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        let v = serde_json::to_value(&h).unwrap();
        assert_eq!(v["routes"]["a"]["breaker"]["last_failure_class"], "overloaded");
        assert_eq!(v["accounts"]["acct"]["demoted_until_ms"], T0 + 5 * MIN);
        // Missing fields default (older JSON).
        let old: ModelHealth =
            serde_json::from_str(r#"{"routes":{"a":{"breaker":{"consecutive_failures":2}}}}"#).unwrap();
        assert_eq!(old.routes["a"].breaker.consecutive_failures, 2);
        // Observations travel from isolate to DO.
        let wire = serde_json::to_value(obs("r", "a", AttemptOutcome::Failure(Upstream5xx), 1)).unwrap();
        assert_eq!(wire["outcome"], serde_json::json!({"failure": "upstream_5xx"}));
        let back: Observation = serde_json::from_value(wire).unwrap();
        assert_eq!(back.outcome, AttemptOutcome::Failure(Upstream5xx));

        let snap = h.snapshot();
        assert!(snap.model_buckets.is_empty());
        assert!(snap.routes.values().all(|s| s.buckets.is_empty()));
        assert_eq!(snap.routes["a"].breaker, h.routes["a"].breaker);
        assert_eq!(snap.accounts, h.accounts);
        assert_eq!(
            snap.plan_order(&routes(&[("a", "acct2"), ("b", "acct"), ("c", "acct2")]), T0 + MIN),
            h.plan_order(&routes(&[("a", "acct2"), ("b", "acct"), ("c", "acct2")]), T0 + MIN)
        );

        h.reset();
        assert!(h.routes.values().all(|s| s.breaker == Breaker::default()));
        assert!(h.accounts.is_empty());
        assert_eq!(h.route_stats("c", T0).answered, 1, "buckets survive a reset");
        assert_eq!(h.model_buckets.len(), 1);
    }

    #[test]
    fn breaker_states() {
        let mut h = ModelHealth::default();
        fail(&mut h, "r", Overloaded, T0);
        let b = breaker(&h, "r").clone();
        assert_eq!(Breaker::default().state(T0), BreakerState::Healthy);
        assert_eq!(b.state(T0), BreakerState::Cooling { until_ms: T0 + 5 * MIN });
        assert_eq!(b.state(T0 + 5 * MIN), BreakerState::ProbeDue);
        assert_eq!(
            serde_json::to_value(b.state(T0)).unwrap(),
            serde_json::json!({"state": "cooling", "until_ms": T0 + 5 * MIN})
        );
    }
}
