//! The typed calls between an isolate and a health Durable Object (SPEC §8, §9), shared by the
//! caller and the object so neither speaks ad-hoc JSON.
//!
//! Two kinds of object hold a [`ModelHealth`]: one per model (its routes' breakers and the
//! traffic buckets) and one for all upstream accounts (their breakers, SPEC §9: an account in
//! cooldown is skipped by every model). [`Scope`] says which half of an observation an object
//! keeps, so both apply the same core state machine to the same observations.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::health::{HealthConfig, ModelHealth, Observation, RequestObservation, RouteStats};

/// Which part of the health state an object (or an isolate's snapshot) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// One model: route breakers and buckets.
    Model,
    /// Every upstream account's breaker.
    Accounts,
}

/// A call to a health object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
pub enum HealthCall {
    /// The breakers (no buckets) and per-route stats.
    Snapshot,
    /// Apply attempt outcomes (and, for a model, request outcomes) — one request's or a batch an
    /// isolate gathered; replies with the snapshot after them.
    Observe {
        scope: Scope,
        config: HealthConfig,
        observations: Vec<Observation>,
        requests: Vec<RequestObservation>,
    },
    /// Claim the one probe of a route (model object) or an account (accounts object) whose
    /// cooldown ended. Replies `{"granted": bool}`.
    Claim {
        route: String,
        account: String,
        lease_ms: u64,
    },
    /// Everything, buckets included (status page, admin).
    Full,
    /// Admin reset: every route breaker back to healthy, and the breakers of these accounts.
    Reset { accounts: Vec<String> },
}

/// The answer to `Snapshot` and `Observe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct SnapshotReply {
    pub health: ModelHealth,
    pub stats: BTreeMap<String, RouteStats>,
}

/// The answer to `Claim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimReply {
    pub granted: bool,
}

impl ModelHealth {
    /// Applies an observation and keeps only this scope's half: a model object keeps no account
    /// breakers, the accounts object keeps no routes or buckets.
    pub fn observe_scoped(&mut self, obs: &Observation, cfg: &HealthConfig, scope: Scope) {
        self.observe(obs, cfg);
        self.keep_scope(scope);
    }

    /// Drops what does not belong to `scope`.
    pub fn keep_scope(&mut self, scope: Scope) {
        match scope {
            Scope::Model => self.accounts.clear(),
            Scope::Accounts => {
                self.routes.clear();
                self.model_buckets.clear();
            }
        }
    }

    /// The snapshot reply: breakers only, plus each route's stats over the last hour.
    pub fn snapshot_reply(&self, now_ms: u64) -> SnapshotReply {
        let stats = self
            .routes
            .keys()
            .map(|r| (r.clone(), self.route_stats(r, now_ms)))
            .collect();
        SnapshotReply {
            health: self.snapshot(),
            stats,
        }
    }

    /// Admin reset of a model: its route breakers, and the breakers of the accounts it uses.
    /// Traffic buckets are kept (they are measurements).
    pub fn reset_with_accounts(&mut self, accounts: &[String]) {
        let kept: std::collections::BTreeMap<String, crate::health::Breaker> = self
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
    pub fn route_state(&self, route: &str, account: &str, now_ms: u64) -> crate::health::BreakerState {
        use crate::health::BreakerState;
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
            .any(|(r, a)| matches!(self.route_state(r, a, now_ms), crate::health::BreakerState::Healthy))
    }

    /// The view a request plans with: this model's route breakers and the accounts' breakers.
    pub fn with_accounts(&self, accounts: &ModelHealth) -> ModelHealth {
        ModelHealth {
            routes: self.routes.clone(),
            accounts: accounts.accounts.clone(),
            model_buckets: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use crate::health::AttemptOutcome;

    fn obs(route: &str, account: &str, outcome: AttemptOutcome) -> Observation {
        Observation {
            route: route.into(),
            account: account.into(),
            outcome,
            at_ms: 1_000,
            stream: false,
            ttfb_ms: None,
            output_tokens: 0,
            duration_ms: 10,
            extra_try: false,
            probe: false,
            retry_after_ms: None,
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
        assert!(model.accounts.is_empty(), "the model object keeps no account breakers");
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
    fn calls_round_trip_as_json() {
        let call = HealthCall::Claim {
            route: "r".into(),
            account: "a".into(),
            lease_ms: 5,
        };
        let text = serde_json::to_string(&call).unwrap();
        assert!(text.contains("\"call\":\"claim\""));
        assert_eq!(serde_json::from_str::<HealthCall>(&text).unwrap(), call);
    }
}
