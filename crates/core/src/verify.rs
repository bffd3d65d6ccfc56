//! Route verification (SPEC §8a): the known request a check sends, which routes of a model are
//! due a check, when the next one falls due, and what a check's result does to the route.
//!
//! A check is due for a route with `verify` (the default) when
//! - it is demoted, waiting for a check ([`Breaker::check_pending`]), and its cooldown has ended
//!   ([`CheckKind::Cooldown`]): passed → the route may be probed by live traffic as in §8; failed
//!   → demoted again, so the next cooldown is twice as long;
//! - it is demoted, waiting for a check, its cooldown still runs and its next recheck
//!   ([`Breaker::recheck_at_ms`]) has come ([`CheckKind::Recheck`], SPEC §8b): passed → the
//!   cooldown ends at once and live traffic probes it as in §8 (a failed probe demotes it again a
//!   level up, so cooldown and recheck interval both double); failed → still demoted, the next
//!   recheck one interval later;
//! - it is healthy but nothing showed it answering — no live success, no passed check — for
//!   `verify_idle_ms` ([`CheckKind::Idle`]; 0 turns idle checks off): passed → fresh evidence;
//!   failed → demoted at once, waiting for a check, as if it had failed its cooldown's check.
//!
//! At most one check per route is in flight: a check holds a lease on the route
//! ([`ModelHealth::claim_check`]) until its result is recorded or the lease ends. Time is always an
//! argument; the model's Durable Object (its alarm) is the only caller that runs checks.

use crate::api::Api;
use crate::catalog::{Model, Policy};
use crate::classify::FailureClass;
use crate::health::{Breaker, HealthConfig, ModelHealth};

/// The prompt of every check: known, short, answerable by any chat model in a few tokens.
pub const VERIFY_PROMPT: &str = "Reply with the single word: ready";
/// Output tokens a check allows (a reasoning model thinks first: [`CHECK_MAX_TOKENS_REASONING`]).
pub const CHECK_MAX_TOKENS: u64 = 16;
pub const CHECK_MAX_TOKENS_REASONING: u64 = 256;

// A check's kind and record belong to the route's health state, which keeps the latest.
pub use crate::health::{CheckKind, CheckRecord};

/// How a check ended: `Ok` with a real answer, or the failure class and why.
pub type CheckResult = Result<(), (FailureClass, String)>;

/// A check's result in words, as its record, log line and ledger row give it: `answered`, or the
/// class and why.
pub fn reason(result: &CheckResult) -> String {
    match result {
        Ok(()) => "answered".to_string(),
        Err((class, why)) => format!("{}: {why}", class.as_str()),
    }
}

/// The model's check request: the model's reasoning flag sizes the output limit.
pub fn max_tokens(model: &Model) -> u64 {
    if model.reasoning {
        CHECK_MAX_TOKENS_REASONING
    } else {
        CHECK_MAX_TOKENS
    }
}

/// How long a check may take: the non-stream limit for its output (SPEC §5).
pub fn deadline_ms(policy: &Policy, model: &Model) -> u64 {
    policy.nonstream_limit(policy.nonstream_base_ms, max_tokens(model))
}

/// The body of a check in `api`'s dialect (non-stream; `model` is replaced by the route's
/// upstream model like any request's; Gemini names it in the path, see [`check_request`]). A
/// route dialect no client speaks (Converse) is checked with a chat request, translated like any
/// client's.
pub fn check_body(api: Api, model: &Model) -> Vec<u8> {
    let client = if api.is_client() { api } else { Api::Chat };
    let body = crate::dialects::of(client).one_turn(&model.id, VERIFY_PROMPT, max_tokens(model));
    body.unwrap_or_default().to_string().into_bytes()
}

/// The check as a parsed request in `api`'s dialect (for Converse, which no client speaks, a chat
/// request: it reaches the route translated).
pub fn check_request(api: Api, model: &Model) -> Result<crate::dialects::ClientRequest, crate::ApiError> {
    let client = if api.is_client() { api } else { Api::Chat };
    crate::dialects::parse_request(client, &check_body(api, model), Some((&model.id, false)))
}

/// One route of the model as the checker sees it: its id and its `verify` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRoute {
    pub id: String,
    pub verify: bool,
}

impl CheckRoute {
    pub fn of(model: &Model) -> Vec<CheckRoute> {
        model
            .routes
            .iter()
            .map(|r| CheckRoute {
                id: r.id.clone(),
                verify: r.verify(),
            })
            .collect()
    }
}

/// Whether a confirmation check of `route` is wanted (SPEC §18): its breaker, or the breaker of an
/// account it reported for, reached its threshold on one key's provokable failures alone. Every
/// route gets these, `verify: false` or not: without them one key's failures would never count.
fn confirm_wanted(health: &ModelHealth, route: &str) -> bool {
    health.routes.get(route).is_some_and(|s| s.breaker.confirm_pending)
        || health
            .accounts
            .values()
            .any(|a| a.confirm_pending && a.confirm_route.as_deref() == Some(route))
}

/// When a route's check is due (now or later), as seen at `now_ms`, or `None` when it needs none.
fn due_at(health: &ModelHealth, route: &CheckRoute, verify_idle_ms: u64, now_ms: u64) -> Option<(u64, CheckKind)> {
    let state = health.routes.get(&route.id);
    if confirm_wanted(health, &route.id) {
        let lease = state.and_then(|s| s.check_lease_until_ms).unwrap_or(0);
        return Some((lease, CheckKind::Confirm));
    }
    if !route.verify {
        return None;
    }
    let state = state?;
    let b: &Breaker = &state.breaker;
    let at = match b.demoted_until_ms {
        Some(until) if b.check_pending => match b.recheck_at_ms {
            // Before the cooldown ends, rechecks; once it has, the cooldown's own check.
            Some(recheck) if recheck < until && now_ms < until => (recheck, CheckKind::Recheck),
            _ => (until, CheckKind::Cooldown),
        },
        Some(_) => return None, // passed its check (or opted out when demoted): live probe
        None if verify_idle_ms == 0 => return None,
        None => {
            let last = [
                state.last_ok_ms,
                state.last_check.as_ref().map(|c| c.at_ms),
                state.known_since_ms,
            ]
            .into_iter()
            .flatten()
            .max()?;
            (last.saturating_add(verify_idle_ms), CheckKind::Idle)
        }
    };
    // A check in flight: the next one can only follow its lease.
    Some(match state.check_lease_until_ms {
        Some(lease) => (at.0.max(lease), at.1),
        None => at,
    })
}

impl ModelHealth {
    /// Lists the model's routes: a route seen for the first time starts its idle clock at
    /// `now_ms`; a route that opted out (`verify: false`) waits for no check.
    pub fn know_routes(&mut self, routes: &[CheckRoute], now_ms: u64) {
        for r in routes {
            let state = self.routes.entry(r.id.clone()).or_default();
            state.known_since_ms.get_or_insert(now_ms);
            if !r.verify {
                state.breaker.check_pending = false;
            }
        }
    }

    /// The routes whose check is due at `now_ms` and not in flight.
    pub fn due_checks(&self, routes: &[CheckRoute], verify_idle_ms: u64, now_ms: u64) -> Vec<(String, CheckKind)> {
        routes
            .iter()
            .filter_map(|r| {
                let (at, kind) = due_at(self, r, verify_idle_ms, now_ms)?;
                (at <= now_ms).then(|| (r.id.clone(), kind))
            })
            .collect()
    }

    /// When the next check falls due after `now_ms` (the alarm's time), if any.
    pub fn next_check_ms(&self, routes: &[CheckRoute], verify_idle_ms: u64, now_ms: u64) -> Option<u64> {
        routes
            .iter()
            .filter_map(|r| due_at(self, r, verify_idle_ms, now_ms).map(|(at, _)| at.max(now_ms.saturating_add(1))))
            .min()
    }

    /// When the earliest cooldown check or recheck falls due — of the routes whose breaker waits
    /// for one — if any: after a call demoted a route, the object's alarm must come no later than
    /// this (idle checks are the alarm's own business).
    pub fn next_cooldown_check_ms(&self, now_ms: u64) -> Option<u64> {
        let pending: Vec<CheckRoute> = self
            .routes
            .iter()
            .filter(|(id, r)| r.breaker.check_pending || confirm_wanted(self, id))
            .map(|(id, _)| CheckRoute {
                id: id.clone(),
                verify: true,
            })
            .collect();
        self.next_check_ms(&pending, 0, now_ms)
    }

    /// Takes the route's check lease until `now_ms + lease_ms`; false while another check of the
    /// route holds it.
    pub fn claim_check(&mut self, route: &str, now_ms: u64, lease_ms: u64) -> bool {
        let state = self.routes.entry(route.to_string()).or_default();
        if state.check_lease_until_ms.is_some_and(|l| l > now_ms) {
            return false;
        }
        state.check_lease_until_ms = Some(now_ms.saturating_add(lease_ms.max(1)));
        true
    }

    /// Records a check's result at `at_ms` and gives its lease back. `verify`: the route's own
    /// (a confirmation that fails demotes a route that opted out without waiting for a check).
    /// Requests waiting on the run it decides are then counted or forgotten (SPEC §18a).
    pub fn record_check(
        &mut self,
        route: &str,
        kind: CheckKind,
        result: &CheckResult,
        at_ms: u64,
        verify: bool,
        cfg: &HealthConfig,
    ) {
        if kind == CheckKind::Confirm {
            // The accounts this route's failures were waiting to confirm (SPEC §18).
            for account in self.accounts.values_mut() {
                if !(account.confirm_pending && account.confirm_route.as_deref() == Some(route)) {
                    continue;
                }
                match result {
                    Err((FailureClass::Account, _)) => account.demote(at_ms, cfg),
                    // It answers, or it failed for another reason: no proof against the account.
                    _ => {
                        account.consecutive_failures = 0;
                        account.clear_run();
                    }
                }
            }
        }
        let state = self.routes.entry(route.to_string()).or_default();
        state.check_lease_until_ms = None;
        state.last_check = Some(CheckRecord {
            at_ms,
            kind,
            passed: result.is_ok(),
            reason: reason(result),
        });
        let b = &mut state.breaker;
        let confirming = kind == CheckKind::Confirm;
        match result {
            Ok(()) => {
                state.last_ok_ms = state.last_ok_ms.max(Some(at_ms));
                b.check_pending = false;
                if kind == CheckKind::Recheck {
                    b.end_cooldown(at_ms);
                }
                if confirming {
                    // The route answers: the failures were that client's content. A demoted
                    // route (its probe failed so) stays due for its live probe.
                    if b.demoted_until_ms.is_none() {
                        b.consecutive_failures = 0;
                    }
                    b.clear_run();
                }
            }
            // A route that only reported for its account, failing for the account: not its fault.
            Err((FailureClass::Account, _)) if confirming && !b.confirm_pending => {}
            Err((class, _)) => {
                b.consecutive_failures = b.consecutive_failures.saturating_add(1);
                b.last_failure_class = Some(*class);
                b.last_failure_ms = Some(at_ms);
                // A failed cooldown check doubles the cooldown; a failed idle check demotes, and
                // so does a failed confirmation (the route fails known content too).
                if confirming && b.demoted_until_ms.is_some() && !b.confirm_pending {
                    // Demoted meanwhile by proof from live traffic.
                } else if kind == CheckKind::Recheck && b.is_cooling(at_ms) {
                    // A failed recheck while the cooldown runs: the cooldown stands, the next
                    // recheck one interval on. (Past its end it counts as the cooldown's check.)
                    b.schedule_recheck(at_ms, cfg);
                } else {
                    b.demote(at_ms, cfg);
                    b.check_pending = verify || !confirming;
                }
            }
        }
        // Requests waiting on the run this check decides: counted or forgotten (SPEC §18a).
        self.settle_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use crate::health::{AttemptOutcome, BreakerState, Observation};
    use FailureClass::*;

    const T0: u64 = 10_000_000;

    fn cfg() -> HealthConfig {
        HealthConfig {
            demote_after: 1,
            demote_after_overloaded: 1,
            cooldown_ms: 1_000,
            cooldown_max_ms: 8_000,
            recheck_ms: 1_000,
        }
    }

    /// As the end-to-end suite shrinks it for rechecks (SPEC §8b): a 20 s first cooldown, checked
    /// every 1 s, doubling.
    fn recheck_cfg() -> HealthConfig {
        HealthConfig {
            cooldown_ms: 20_000,
            cooldown_max_ms: 1_000_000,
            ..cfg()
        }
    }

    /// An attempt at `route` (verify on) at `at` under `cfg`: its outcome, and whether it was the
    /// route's probe.
    fn attempt(h: &mut ModelHealth, route: &str, outcome: AttemptOutcome, probe: bool, at: u64, cfg: &HealthConfig) {
        let mut o = Observation::at(route, "acct", outcome, at);
        o.verify = true;
        o.probe = probe;
        h.observe(&o, cfg);
    }

    fn due(h: &ModelHealth, rs: &[CheckRoute], now: u64) -> Vec<(String, CheckKind)> {
        h.due_checks(rs, 0, now)
    }

    fn recheck_of(route: &str) -> Vec<(String, CheckKind)> {
        vec![(route.to_string(), CheckKind::Recheck)]
    }

    fn routes(verify: &[bool]) -> Vec<CheckRoute> {
        verify
            .iter()
            .enumerate()
            .map(|(i, v)| CheckRoute {
                id: format!("r{i}"),
                verify: *v,
            })
            .collect()
    }

    /// A route failing live traffic at `at` (its `verify` as given).
    fn fail(h: &mut ModelHealth, route: &str, verify: bool, at: u64) {
        let mut o = Observation::at(route, "acct", AttemptOutcome::Failure(Upstream5xx), at);
        o.verify = verify;
        h.observe(&o, &cfg());
    }

    fn bad() -> CheckResult {
        Err((BadResponse, "the answer holds an error object".into()))
    }

    #[test]
    fn a_demoted_route_waits_for_its_check_and_gets_no_live_probe_until_it_passes() {
        let mut h = ModelHealth::default();
        let rs = routes(&[true]);
        h.know_routes(&rs, T0);
        fail(&mut h, "r0", true, T0);
        let b = &h.routes["r0"].breaker;
        assert!(b.check_pending);
        assert_eq!(h.next_check_ms(&rs, 0, T0), Some(T0 + 1_000));
        assert_eq!(h.next_cooldown_check_ms(T0), Some(T0 + 1_000));
        assert!(h.due_checks(&rs, 0, T0 + 999).is_empty());
        let end = T0 + 1_000;
        assert_eq!(h.due_checks(&rs, 0, end), vec![("r0".to_string(), CheckKind::Cooldown)]);
        // The cooldown is over but live traffic may not probe: parked at the end, no claim.
        assert_eq!(h.route_state("r0", "acct", end), BreakerState::AwaitingCheck);
        let list = vec![("r0".to_string(), "acct".to_string())];
        assert!(h.probe_claims(&list, end).is_empty());
        assert!(h.plan_order(&list, end)[0].1.demoted);
        assert!(!h.claim_probe("r0", "acct", end, 5_000));
        // Passed: now the live probe is due, and its success brings the route back.
        h.record_check("r0", CheckKind::Cooldown, &Ok(()), end, true, &cfg());
        assert_eq!(h.route_state("r0", "acct", end), BreakerState::ProbeDue);
        assert_eq!(h.probe_claims(&list, end).len(), 1);
        assert!(h.due_checks(&rs, 0, end + 10_000).is_empty(), "no second check");
        assert_eq!(h.next_cooldown_check_ms(end), None);
        let rec = h.routes["r0"].last_check.clone().unwrap();
        assert_eq!(
            (rec.passed, rec.kind, rec.reason.as_str()),
            (true, CheckKind::Cooldown, "answered")
        );
    }

    #[test]
    fn a_failed_check_doubles_the_cooldown_and_keeps_the_route_parked() {
        let mut h = ModelHealth::default();
        let rs = routes(&[true]);
        fail(&mut h, "r0", true, T0);
        let end = T0 + 1_000;
        h.record_check("r0", CheckKind::Cooldown, &bad(), end, true, &cfg());
        let b = &h.routes["r0"].breaker;
        assert_eq!(
            b.demoted_until_ms,
            Some(end + 2_000),
            "second cooldown is twice the first"
        );
        assert!(b.check_pending);
        assert_eq!(b.last_failure_class, Some(BadResponse));
        // Within the 2 s cooldown, one recheck (its interval is at most the first cooldown, 1 s).
        assert_eq!(h.next_check_ms(&rs, 0, end), Some(end + 1_000));
        assert_eq!(due(&h, &rs, end + 1_000), recheck_of("r0"));
        h.record_check("r0", CheckKind::Recheck, &bad(), end + 1_000, true, &cfg());
        assert_eq!(
            h.routes["r0"].breaker.demoted_until_ms,
            Some(end + 2_000),
            "a recheck keeps the cooldown"
        );
        assert_eq!(h.next_check_ms(&rs, 0, end + 1_000), Some(end + 2_000));
        assert_eq!(due(&h, &rs, end + 2_000), vec![("r0".to_string(), CheckKind::Cooldown)]);
        h.record_check("r0", CheckKind::Cooldown, &bad(), end + 2_000, true, &cfg());
        assert_eq!(h.routes["r0"].breaker.demoted_until_ms, Some(end + 2_000 + 4_000));
        let rec = h.routes["r0"].last_check.clone().unwrap();
        assert!(!rec.passed);
        assert!(rec.reason.starts_with("bad_response: "), "{}", rec.reason);
    }

    #[test]
    fn a_passed_recheck_ends_the_cooldown_and_one_live_probe_brings_the_route_back() {
        let c = recheck_cfg();
        let mut h = ModelHealth::default();
        let rs = routes(&[true, true]);
        h.know_routes(&rs, T0);
        attempt(&mut h, "r0", AttemptOutcome::Failure(Upstream5xx), false, T0, &c);
        let until = T0 + 20_000;
        assert_eq!(h.routes["r0"].breaker.demoted_until_ms, Some(until));
        // The object's alarm is set for the first recheck, 1 s in, not for the cooldown's end.
        assert_eq!(h.next_cooldown_check_ms(T0), Some(T0 + 1_000));
        assert!(due(&h, &rs, T0 + 999).is_empty());
        assert_eq!(due(&h, &rs, T0 + 1_000), recheck_of("r0"));
        // One check at a time: while one is in flight, none is due.
        assert!(h.claim_check("r0", T0 + 1_000, 5_000));
        assert!(due(&h, &rs, T0 + 1_500).is_empty());
        // Failed (it answers only later): still cooling, the next recheck one interval on.
        h.record_check("r0", CheckKind::Recheck, &bad(), T0 + 1_200, true, &c);
        let b = &h.routes["r0"].breaker;
        assert_eq!(
            (b.demoted_until_ms, b.cooldown_level, b.check_pending),
            (Some(until), 1, true)
        );
        assert_eq!(h.next_cooldown_check_ms(T0 + 1_200), Some(T0 + 2_200));
        assert_eq!(
            h.route_state("r0", "acct", T0 + 2_200),
            BreakerState::Cooling { until_ms: until }
        );
        // Passed, 18 s before the cooldown would have ended: its one live probe is due now.
        h.record_check("r0", CheckKind::Recheck, &Ok(()), T0 + 2_300, true, &c);
        assert_eq!(h.route_state("r0", "acct", T0 + 2_300), BreakerState::ProbeDue);
        assert!(
            due(&h, &rs, T0 + 2_300).is_empty(),
            "no more checks: live traffic decides"
        );
        assert_eq!(h.next_cooldown_check_ms(T0 + 2_300), None);
        let list = vec![
            ("r0".to_string(), "acct".to_string()),
            ("r1".to_string(), "acct".to_string()),
        ];
        let plan = h.plan_order(&list, T0 + 2_400);
        assert_eq!((plan[0].0, plan[0].2), (0, true), "back in its place, as a probe");
        assert!(h.claim_probe("r0", "acct", T0 + 2_400, 5_000));
        assert!(!h.claim_probe("r0", "acct", T0 + 2_500, 5_000), "one live probe");
        attempt(&mut h, "r0", AttemptOutcome::Success, true, T0 + 2_600, &c);
        let b = &h.routes["r0"].breaker;
        assert_eq!((b.demoted_until_ms, b.cooldown_level, b.recheck_at_ms), (None, 0, None));
        let rec = h.routes["r0"].last_check.clone().unwrap();
        assert_eq!((rec.kind, rec.passed), (CheckKind::Recheck, true));
        assert_eq!(CheckKind::Recheck.as_str(), "recheck");
    }

    #[test]
    fn a_flapping_route_backs_off_rechecks_double_with_the_cooldown_up_to_its_first_length() {
        let c = recheck_cfg();
        let mut h = ModelHealth::default();
        let rs = routes(&[true]);
        attempt(&mut h, "r0", AttemptOutcome::Failure(Upstream5xx), false, T0, &c);
        // It passes every check and fails every live request: each pass, one probe, one failure.
        let (mut now, mut intervals, mut cooldowns) = (T0, Vec::new(), Vec::new());
        for _ in 0..7 {
            let b = &h.routes["r0"].breaker;
            cooldowns.push(b.demoted_until_ms.unwrap() - now);
            let next = h.next_cooldown_check_ms(now).unwrap();
            intervals.push(next - now);
            assert!(due(&h, &rs, next - 1).is_empty());
            assert_eq!(due(&h, &rs, next), recheck_of("r0"));
            h.record_check("r0", CheckKind::Recheck, &Ok(()), next, true, &c);
            assert!(h.claim_probe("r0", "acct", next + 10, 5_000));
            now = next + 20;
            attempt(&mut h, "r0", AttemptOutcome::Failure(Upstream5xx), true, now, &c);
        }
        assert_eq!(intervals, [1_000, 2_000, 4_000, 8_000, 16_000, 20_000, 20_000]);
        let cooldowns: Vec<u64> = cooldowns.iter().map(|ms| ms / 1_000).collect();
        assert_eq!(cooldowns, [20, 40, 80, 160, 320, 640, 1_000]);
        assert_eq!(h.routes["r0"].breaker.cooldown_level, 8);
    }

    #[test]
    fn the_cooldowns_end_is_checked_by_the_cooldown_check_not_a_recheck() {
        let c = HealthConfig {
            recheck_ms: 3_000,
            cooldown_ms: 5_000,
            ..recheck_cfg()
        };
        let mut h = ModelHealth::default();
        let rs = routes(&[true]);
        attempt(&mut h, "r0", AttemptOutcome::Failure(Upstream5xx), false, T0, &c);
        assert_eq!(due(&h, &rs, T0 + 3_000), recheck_of("r0"));
        h.record_check("r0", CheckKind::Recheck, &bad(), T0 + 3_000, true, &c);
        // The next recheck (6 s) would come after the cooldown's end (5 s): that check instead.
        assert_eq!(h.next_cooldown_check_ms(T0 + 3_000), Some(T0 + 5_000));
        assert_eq!(due(&h, &rs, T0 + 5_000), vec![("r0".to_string(), CheckKind::Cooldown)]);
        // An alarm that comes late, past the end, runs the cooldown's check too.
        let mut late = ModelHealth::default();
        attempt(&mut late, "r0", AttemptOutcome::Failure(Upstream5xx), false, T0, &c);
        assert_eq!(
            due(&late, &rs, T0 + 7_000),
            vec![("r0".to_string(), CheckKind::Cooldown)]
        );
        // A recheck whose answer came after the cooldown ended and failed: demoted again.
        late.record_check("r0", CheckKind::Recheck, &bad(), T0 + 5_500, true, &c);
        let b = &late.routes["r0"].breaker;
        assert_eq!((b.demoted_until_ms, b.cooldown_level), (Some(T0 + 5_500 + 10_000), 2));
    }

    #[test]
    fn a_route_that_opted_out_is_never_rechecked() {
        let c = recheck_cfg();
        let mut h = ModelHealth::default();
        let rs = routes(&[false]);
        let mut o = Observation::at("r0", "acct", AttemptOutcome::Failure(Upstream5xx), T0);
        o.verify = false;
        h.observe(&o, &c);
        for at in (T0..T0 + 20_000).step_by(500) {
            assert!(h.due_checks(&rs, 0, at).is_empty(), "checked at {at}");
        }
        assert_eq!(h.next_check_ms(&rs, 0, T0), None);
        assert_eq!(h.next_cooldown_check_ms(T0), None);
        assert_eq!(
            h.route_state("r0", "acct", T0 + 19_999),
            BreakerState::Cooling { until_ms: T0 + 20_000 },
            "the fixed cooldown"
        );
    }

    #[test]
    fn a_route_that_opted_out_is_probed_live_as_before() {
        let mut h = ModelHealth::default();
        let rs = routes(&[false]);
        fail(&mut h, "r0", false, T0);
        assert!(!h.routes["r0"].breaker.check_pending);
        assert!(h.due_checks(&rs, 1_000, T0 + 50_000).is_empty());
        assert_eq!(h.next_check_ms(&rs, 1_000, T0), None);
        assert_eq!(h.route_state("r0", "acct", T0 + 1_000), BreakerState::ProbeDue);
        // Opting out while waiting for a check: the live probe is due at once.
        let mut h = ModelHealth::default();
        fail(&mut h, "r0", true, T0);
        h.know_routes(&rs, T0);
        assert_eq!(h.route_state("r0", "acct", T0 + 1_000), BreakerState::ProbeDue);
    }

    #[test]
    fn an_idle_route_is_checked_once_per_interval_from_its_latest_evidence() {
        let mut h = ModelHealth::default();
        let rs = routes(&[true, true]);
        h.know_routes(&rs, T0);
        // r0 answers live traffic at T0 + 500; r1 never does.
        h.observe(
            &Observation::at("r0", "acct", AttemptOutcome::Success, T0 + 500),
            &cfg(),
        );
        assert_eq!(h.next_check_ms(&rs, 3_000, T0), Some(T0 + 3_000));
        assert_eq!(
            h.due_checks(&rs, 3_000, T0 + 3_000),
            vec![("r1".to_string(), CheckKind::Idle)]
        );
        assert!(h.claim_check("r1", T0 + 3_000, 1_000));
        assert!(
            !h.claim_check("r1", T0 + 3_100, 1_000),
            "never two checks of a route at once"
        );
        assert!(
            h.due_checks(&rs, 3_000, T0 + 3_200).is_empty(),
            "in flight: not due again"
        );
        assert_eq!(h.next_check_ms(&rs, 3_000, T0 + 3_200), Some(T0 + 3_500), "r0 next");
        h.record_check("r1", CheckKind::Idle, &Ok(()), T0 + 3_300, true, &cfg());
        assert_eq!(
            h.next_check_ms(&rs, 3_000, T0 + 3_600),
            Some(T0 + 3_601),
            "r0 overdue: at once"
        );
        assert_eq!(
            h.due_checks(&rs, 3_000, T0 + 6_299),
            vec![("r0".to_string(), CheckKind::Idle)]
        );
        assert_eq!(h.due_checks(&rs, 3_000, T0 + 6_300).len(), 2);
        // Idle checks off: nothing due, no alarm for them.
        assert!(h.due_checks(&rs, 0, T0 + 60_000).is_empty());
        assert_eq!(h.next_check_ms(&rs, 0, T0), None);
        // A lease that ran out (the checker died) lets the next check claim.
        assert!(h.claim_check("r0", T0 + 7_000, 1_000));
        assert!(h.claim_check("r0", T0 + 8_001, 1_000));
    }

    #[test]
    fn a_failed_idle_check_demotes_the_route_until_a_check_passes() {
        let mut h = ModelHealth::default();
        let rs = routes(&[true]);
        h.know_routes(&rs, T0);
        h.record_check("r0", CheckKind::Idle, &bad(), T0 + 3_000, true, &cfg());
        let b = &h.routes["r0"].breaker;
        assert!(b.is_demoted() && b.check_pending);
        assert_eq!(
            h.route_state("r0", "acct", T0 + 3_500),
            BreakerState::Cooling { until_ms: T0 + 4_000 }
        );
        assert_eq!(
            h.due_checks(&rs, 3_000, T0 + 4_000),
            vec![("r0".to_string(), CheckKind::Cooldown)]
        );
    }

    #[test]
    fn check_bodies_are_small_known_requests_in_each_dialect() {
        let model: Model = serde_json::from_value(json!({"id": "m", "context_window": 100, "max_output_tokens": 10,
            "routes": [{"id": "r", "provider": "p", "upstream_model": "u", "apis": ["chat"],
                        "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0}}]}))
        .unwrap();
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini, Api::Converse] {
            let body = check_body(api, &model);
            let req = check_request(api, &model).expect("the check parses as a request");
            assert!(!req.stream);
            assert_eq!(req.max_tokens, Some(CHECK_MAX_TOKENS));
            assert!(String::from_utf8(body).unwrap().contains(VERIFY_PROMPT));
            // A Converse route, which no client speaks, is checked with a chat request.
            assert_eq!(req.api, if api == Api::Converse { Api::Chat } else { api });
        }
    }
}
