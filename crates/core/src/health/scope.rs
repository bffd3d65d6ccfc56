//! The two halves of route health and how they meet (SPEC §8, §9): a model's own object keeps its
//! route breakers and traffic buckets, each upstream account's object (`account:<name>`) keeps that
//! account's breaker ([`Scope`]). A model's object also holds copies of its accounts' breakers,
//! each with the version its account's object answered, and tells those objects what concerns them
//! ([`for_accounts`]); the copies travel with the model's snapshot, so an isolate plans with one
//! snapshot per model and makes no account calls but a probe's claim. An isolate keeps the
//! accounts' breakers of every model it serves in one overlay ([`ModelHealth::fold_accounts_from`]:
//! an account's breaker replaced only by a newer copy, whichever model brought it), so an account
//! failure seen on one model sends its other models elsewhere at once. Which probes a request must
//! claim, and from which object, is decided here ([`ModelHealth::probe_claims`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{AttemptOutcome, Breaker, BreakerState, HealthConfig, ModelHealth, Observation};
use crate::classify::Blame;

/// Which part of the health state an object (or an isolate's snapshot) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One model: route breakers and buckets, and copies of its accounts' breakers.
    Model,
    /// Upstream accounts' breakers only (an account's object; an isolate's overlay).
    Accounts,
}

/// A probe a request must win before it tries a route whose cooldown ended (SPEC §8): from the
/// model's object when the route's own breaker is due, from the account's object when its
/// account's is (both when both are).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeClaim {
    /// Index into the model's routes.
    pub route: usize,
    pub route_id: String,
    pub account: String,
    pub from_model: bool,
    pub from_accounts: bool,
}

impl ModelHealth {
    /// Applies an observation and keeps only this scope's half: an account's object keeps no
    /// routes or buckets; a model's object keeps its copies of the accounts' breakers (what its
    /// shards told it applied at once, until the account's object answers a newer one).
    pub fn observe_scoped(&mut self, obs: &Observation, cfg: &HealthConfig, scope: Scope) {
        self.observe(obs, cfg);
        self.keep_scope(scope);
    }

    /// Drops what does not belong to `scope`.
    pub fn keep_scope(&mut self, scope: Scope) {
        if scope == Scope::Accounts {
            self.routes.clear();
            self.model_buckets.clear();
            self.model_hours.clear();
        }
        // A healthy account's breaker is forgotten (SPEC §22): it decides nothing a missing one
        // does not, and its account's successes need not be reported any more.
        self.accounts.retain(|_, b| !b.at_rest());
    }

    /// Takes account `account`'s breaker (`None`: at rest) as its object answered it at
    /// `version`, if newer than the copy held (a copy held without a version, 0, is an isolate's
    /// or the model object's own outcomes, kept until the object answers anything newer). True
    /// when it was taken.
    pub fn fold_account(&mut self, account: &str, breaker: Option<&Breaker>, version: u64) -> bool {
        if version <= self.account_versions.get(account).copied().unwrap_or(0) {
            return false;
        }
        self.account_versions.insert(account.to_string(), version);
        match breaker.filter(|b| !b.at_rest()) {
            Some(b) => self.accounts.insert(account.to_string(), b.clone()),
            None => self.accounts.remove(account),
        };
        true
    }

    /// [`ModelHealth::fold_account`] for every account `other` holds a version of (a model's
    /// snapshot into an isolate's overlay; every model's copies into the status page's view); the
    /// accounts whose breaker it took.
    pub fn fold_accounts_from(&mut self, other: &ModelHealth) -> Vec<String> {
        let mut taken = Vec::new();
        for (account, version) in &other.account_versions {
            if self.fold_account(account, other.accounts.get(account), *version) {
                taken.push(account.clone());
            }
        }
        taken
    }

    /// A model's object learns which accounts its routes use (from the catalog): it keeps a
    /// version (0 until their objects answer) for each, and forgets the copies of any other.
    pub fn know_accounts<'a>(&mut self, accounts: impl IntoIterator<Item = &'a str>) {
        let used: std::collections::BTreeSet<&str> = accounts.into_iter().collect();
        self.account_versions.retain(|a, _| used.contains(a.as_str()));
        self.accounts.retain(|a, _| used.contains(a.as_str()));
        for a in used {
            self.account_versions.entry(a.to_string()).or_insert(0);
        }
    }

    /// Admin reset of a model: its route breakers, and the breakers of the accounts it uses.
    /// Traffic buckets are kept (they are measurements).
    pub fn reset_with_accounts(&mut self, accounts: &[String]) {
        let kept: BTreeMap<String, Breaker> = self
            .accounts
            .iter()
            .filter(|(a, _)| !accounts.contains(a))
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect();
        self.reset();
        self.accounts = kept;
    }

    /// The state a route shows right now, its account's included: the route's own if it is not
    /// healthy, else the account's. A route is healthy only when both are (a probe due or in
    /// flight is not healthy yet). The status page and `available_models` both use this.
    pub fn route_state(&self, route: &str, account: &str, now_ms: u64) -> BreakerState {
        let own = self
            .routes
            .get(route)
            .map_or(BreakerState::Healthy, |r| r.breaker.state(now_ms));
        match own {
            BreakerState::Healthy => self
                .accounts
                .get(account)
                .map_or(BreakerState::Healthy, |a| a.state(now_ms)),
            other => other,
        }
    }

    /// Whether at least one of these (route, account) pairs is healthy right now.
    pub fn any_healthy(&self, routes: &[(String, String)], now_ms: u64) -> bool {
        routes
            .iter()
            .any(|(r, a)| matches!(self.route_state(r, a, now_ms), BreakerState::Healthy))
    }

    /// The view a request plans with: this model's route breakers and the accounts' breakers.
    pub fn with_accounts(&self, accounts: &ModelHealth) -> ModelHealth {
        ModelHealth {
            routes: self.routes.clone(),
            accounts: accounts.accounts.clone(),
            ..ModelHealth::default()
        }
    }

    /// The probes a request must claim before planning: one per route that [`ModelHealth::plan_order`]
    /// marks probe-due. `routes` as for `plan_order`.
    pub fn probe_claims(&self, routes: &[(String, String)], now_ms: u64) -> Vec<ProbeClaim> {
        self.plan_order(routes, now_ms)
            .into_iter()
            .filter(|(_, _, due)| *due)
            .filter_map(|(i, _, _)| {
                let (route, account) = routes.get(i)?;
                Some(ProbeClaim {
                    route: i,
                    route_id: route.clone(),
                    account: account.clone(),
                    from_model: self.routes.get(route).is_some_and(|r| r.breaker.probe_due(now_ms)),
                    from_accounts: self.accounts.get(account).is_some_and(|a| a.probe_due(now_ms)),
                })
            })
            .collect()
    }
}

/// The observations an account's object must hear of: account-level failures, every probe's
/// success (it may be the account's, claimed from its object before `accounts` held the breaker),
/// and any other success that may end a breaker `accounts` (a model object's copies) holds for
/// its account — once its cooldown ended (one during the cooldown heals nothing: `observe`).
pub fn for_accounts(observations: &[Observation], accounts: Option<&ModelHealth>) -> Vec<Observation> {
    observations
        .iter()
        .filter(|o| match o.outcome {
            AttemptOutcome::Failure(class) => class.blame() == Blame::Account,
            AttemptOutcome::Success => {
                o.probe
                    || accounts
                        .and_then(|a| a.accounts.get(&o.account))
                        .is_some_and(|b| !b.is_cooling(o.at_ms))
            }
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;

    fn obs(route: &str, account: &str, outcome: AttemptOutcome) -> Observation {
        Observation {
            stream: false,
            duration_ms: 10,
            ..Observation::at(route, account, outcome, 1_000)
        }
    }

    #[test]
    fn each_scope_keeps_its_half_and_together_they_plan_like_one() {
        let cfg = HealthConfig::default();
        let (mut model, mut accounts) = (ModelHealth::default(), ModelHealth::default());
        let account_failure = obs("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Account));
        for (h, scope) in [(&mut model, Scope::Model), (&mut accounts, Scope::Accounts)] {
            h.observe_scoped(&account_failure, &cfg, scope);
        }
        assert!(
            model.accounts["acct-a"].is_demoted(),
            "the model object's copy takes it at once"
        );
        assert!(accounts.routes.is_empty(), "the accounts object keeps no routes");
        assert!(
            accounts.accounts["acct-a"].is_demoted(),
            "one account failure is enough (SPEC §9)"
        );
        assert_eq!(
            model.routes["r0"].breaker.consecutive_failures, 0,
            "not counted against the route"
        );
        let routes = vec![
            ("r0".to_string(), "acct-a".to_string()),
            ("r1".to_string(), "acct-b".to_string()),
        ];
        let order = model.with_accounts(&accounts).plan_order(&routes, 2_000);
        assert_eq!(
            order.iter().map(|(i, _, _)| *i).collect::<Vec<_>>(),
            vec![1, 0],
            "the account's route goes last"
        );
        assert!(order[1].1.demoted);
    }

    #[test]
    fn a_reset_clears_the_models_accounts_only() {
        let cfg = HealthConfig::default();
        let mut accounts = ModelHealth::default();
        for acct in ["a", "b"] {
            accounts.observe_scoped(
                &obs("r", acct, AttemptOutcome::Failure(FailureClass::Account)),
                &cfg,
                Scope::Accounts,
            );
        }
        accounts.reset_with_accounts(&["a".to_string()]);
        assert!(!accounts.accounts.contains_key("a"));
        assert!(
            accounts.accounts["b"].is_demoted(),
            "another model's account keeps its cooldown"
        );
    }

    #[test]
    fn a_due_probe_is_claimed_from_the_object_whose_breaker_is_due() {
        let cfg = HealthConfig::default();
        let mut h = ModelHealth::default();
        for _ in 0..cfg.demote_after {
            h.observe(
                &obs("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Upstream5xx)),
                &cfg,
            );
        }
        h.observe(
            &obs("r1", "acct-b", AttemptOutcome::Failure(FailureClass::Account)),
            &cfg,
        );
        let routes = vec![
            ("r0".to_string(), "acct-a".to_string()),
            ("r1".to_string(), "acct-b".to_string()),
            ("r2".to_string(), "acct-c".to_string()),
        ];
        assert!(
            h.probe_claims(&routes, 2_000).is_empty(),
            "cooling: nothing to claim yet"
        );
        let later = 1_000 + cfg.cooldown_max_ms + 1;
        let claims = h.probe_claims(&routes, later);
        assert_eq!(
            claims,
            vec![
                ProbeClaim {
                    route: 0,
                    route_id: "r0".into(),
                    account: "acct-a".into(),
                    from_model: true,
                    from_accounts: false,
                },
                ProbeClaim {
                    route: 1,
                    route_id: "r1".into(),
                    account: "acct-b".into(),
                    from_model: false,
                    from_accounts: true,
                },
            ]
        );
    }

    #[test]
    fn the_accounts_object_hears_account_failures_and_successes_on_accounts_it_tracks() {
        let cfg = HealthConfig::default();
        let mut accounts = ModelHealth::default();
        accounts.observe_scoped(
            &obs("r", "tracked", AttemptOutcome::Failure(FailureClass::Account)),
            &cfg,
            Scope::Accounts,
        );
        let probe = Observation {
            probe: true,
            ..obs("r", "tracked", AttemptOutcome::Success)
        };
        let sent = [
            probe,
            obs("r", "tracked", AttemptOutcome::Success),
            obs("r", "other", AttemptOutcome::Success),
            obs("r", "other", AttemptOutcome::Failure(FailureClass::Account)),
            obs("r", "other", AttemptOutcome::Failure(FailureClass::Timeout)),
        ];
        let picked: Vec<(String, AttemptOutcome)> = for_accounts(&sent, Some(&accounts))
            .into_iter()
            .map(|o| (o.account, o.outcome))
            .collect();
        assert_eq!(
            picked,
            vec![
                ("tracked".to_string(), AttemptOutcome::Success),
                ("other".to_string(), AttemptOutcome::Failure(FailureClass::Account)),
            ]
        );
        assert_eq!(
            for_accounts(&sent, None).len(),
            2,
            "without a copy of the account's breaker only failures and probes go"
        );
    }

    /// An account breaker back at rest (a success after its failures) is forgotten: the accounts
    /// object and the isolates' copies drop it, so its later successes are not reported; a new
    /// failure starts it again. A breaker still counting or cooling is kept.
    #[test]
    fn a_healthy_account_is_forgotten_and_its_successes_are_not_reported() {
        let cfg = HealthConfig::default();
        let mut accounts = ModelHealth::default();
        let fail = obs("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Account));
        let ok = Observation {
            probe: true,
            ..obs("r0", "acct-a", AttemptOutcome::Success)
        };
        accounts.observe_scoped(&fail, &cfg, Scope::Accounts);
        assert!(accounts.accounts.contains_key("acct-a"), "a failure is remembered");
        // A request planned before the demotion was known, told after it, heals nothing.
        let stale = obs("r0", "acct-a", AttemptOutcome::Success);
        accounts.observe_scoped(&stale, &cfg, Scope::Accounts);
        assert!(accounts.accounts["acct-a"].is_demoted(), "still cooling");
        assert_eq!(
            for_accounts(std::slice::from_ref(&ok), Some(&accounts)).len(),
            1,
            "its success is reported"
        );
        accounts.observe_scoped(&ok, &cfg, Scope::Accounts);
        assert!(!accounts.accounts.contains_key("acct-a"), "at rest again: forgotten");
        assert!(
            for_accounts(std::slice::from_ref(&stale), Some(&accounts)).is_empty(),
            "successes no longer reported"
        );
        // Demoted: kept until a success brings it back.
        for _ in 0..cfg.demote_after + 1 {
            accounts.observe_scoped(&fail, &cfg, Scope::Accounts);
        }
        let b = accounts.accounts.get("acct-a").cloned().unwrap_or_default();
        assert!(b.consecutive_failures > 0 && !b.at_rest(), "{b:?}");
    }

    /// An isolate's overlay takes an account's breaker from a model's snapshot only when the
    /// account's object answered it later than the copy held: a slower model's older copy never
    /// undoes a newer one, nor what the isolate applied itself (version 0).
    #[test]
    fn an_accounts_breaker_is_taken_only_from_a_newer_copy_whichever_model_brings_it() {
        let cfg = HealthConfig::default();
        let fail = obs("r", "acct-a", AttemptOutcome::Failure(FailureClass::Account));
        let mut authority = ModelHealth::default();
        authority.observe_scoped(&fail, &cfg, Scope::Accounts);
        authority.changed();
        // Model m1's object folds the account's answer (version 1); m2's still holds version 0.
        let (mut m1, mut m2) = (ModelHealth::default(), ModelHealth::default());
        for m in [&mut m1, &mut m2] {
            m.know_accounts(["acct-a"]);
        }
        assert!(m1.fold_account("acct-a", authority.accounts.get("acct-a"), authority.version));
        assert!(!m1.fold_account("acct-a", None, authority.version), "not newer: kept");
        // The isolate applied the failure itself before any snapshot came.
        let mut overlay = ModelHealth::default();
        overlay.observe_scoped(&fail, &cfg, Scope::Accounts);
        assert!(
            overlay.fold_accounts_from(&m2.snapshot()).is_empty(),
            "a version-0 copy undoes nothing"
        );
        assert!(overlay.accounts["acct-a"].is_demoted());
        assert_eq!(overlay.fold_accounts_from(&m1.snapshot()), ["acct-a"]);
        // The account heals at its object (version 2), m2 brings it first; then m1's older copy.
        let ok = Observation {
            probe: true,
            ..obs("r", "acct-a", AttemptOutcome::Success)
        };
        authority.observe_scoped(&ok, &cfg, Scope::Accounts);
        authority.changed();
        assert!(m2.fold_account("acct-a", authority.accounts.get("acct-a"), authority.version));
        assert_eq!(overlay.fold_accounts_from(&m2.snapshot()), ["acct-a"]);
        assert!(!overlay.accounts.contains_key("acct-a"), "healed");
        assert!(
            overlay.fold_accounts_from(&m1.snapshot()).is_empty(),
            "m1's older copy is not taken"
        );
        assert!(!overlay.accounts.contains_key("acct-a"));
        // The catalog drops the account from m1: its copy goes with it.
        m1.know_accounts(["acct-b"]);
        assert!(!m1.accounts.contains_key("acct-a") && !m1.account_versions.contains_key("acct-a"));
        assert_eq!(m1.account_versions.get("acct-b"), Some(&0));
    }
}
