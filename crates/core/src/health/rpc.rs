//! The typed calls between an isolate and a health Durable Object (SPEC §8, §9), shared by the
//! caller and the object so neither speaks ad-hoc JSON.
//!
//! Two kinds of object hold a [`ModelHealth`]: one per model (its routes' breakers and the
//! traffic buckets, with copies of its accounts' breakers) and one per upstream account (its
//! breaker, SPEC §9: an account in cooldown is skipped by every model). [`Scope`] says which half
//! of an observation an object keeps, so both apply the same core state machine to the same
//! observations. [`answer`] is an object's whole behaviour, and [`account_calls`] what a model's
//! object tells and asks its accounts' objects: the Durable Object in `src/` only loads, calls
//! them, and persists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{for_accounts, HealthConfig, ModelHealth, Observation, RequestObservation, RouteStats, Scope};

/// The name of model `model_id`'s health object (its breakers and buckets).
pub fn model_object(model_id: &str) -> String {
    format!("model:{model_id}")
}

/// The name of upstream account `account`'s health object (its breaker).
pub fn account_object(account: &str) -> String {
    format!("account:{account}")
}

/// The account an object serves, from its name.
pub fn object_account(name: &str) -> Option<&str> {
    name.strip_prefix("account:").filter(|a| !a.is_empty())
}

/// A model's object asks its accounts' objects for their breakers when its copies are older
/// than this (and tells them what concerns them whenever its shards bring it).
pub const ACCOUNTS_POLL_MS: u64 = 2_000;

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
    /// Claim the one probe of a route (model object) or an account (its object) whose cooldown
    /// ended. Replies `{"granted": bool}`.
    Claim {
        route: String,
        account: String,
        lease_ms: u64,
    },
    /// Everything, buckets included (status page, admin).
    Full,
    /// Admin reset: every route breaker back to healthy, and the breakers of these accounts (a
    /// model's object drops its copies of them and asks their objects again).
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
}

/// What a health object answers to a call, and whether its state changed (then it persists it
/// before replying: each call is atomic).
pub struct Answer {
    pub reply: serde_json::Value,
    pub changed: bool,
    /// What a model's object must tell its accounts' objects ([`account_calls`]): the account
    /// failures among the observations, and the successes on accounts it holds a breaker for.
    pub forward: Vec<Observation>,
}

/// Applies `call` to an object's state at `now_ms`.
pub fn answer(health: &mut ModelHealth, call: HealthCall, now_ms: u64) -> Result<Answer, serde_json::Error> {
    let mut forward = Vec::new();
    let (reply, changed) = match call {
        HealthCall::Snapshot => (serde_json::to_value(health.snapshot_reply(now_ms))?, false),
        HealthCall::Observe {
            scope,
            config,
            observations,
            requests,
        } => {
            if scope == Scope::Model {
                forward = for_accounts(&observations, Some(health));
            }
            for o in &observations {
                health.observe_scoped(o, &config, scope);
            }
            for r in &requests {
                health.observe_request(r);
            }
            health.settle_pending();
            health.keep_scope(scope);
            health.changed();
            (serde_json::to_value(health.snapshot_reply(now_ms))?, true)
        }
        HealthCall::Claim {
            route,
            account,
            lease_ms,
        } => {
            let granted = health.claim_probe(&route, &account, now_ms, lease_ms);
            if granted {
                health.changed();
            }
            (serde_json::to_value(ClaimReply { granted })?, granted)
        }
        HealthCall::Full => (serde_json::to_value(&*health)?, false),
        HealthCall::Reset { accounts } => {
            health.reset_with_accounts(&accounts);
            health.changed();
            (serde_json::to_value(health.snapshot_reply(now_ms))?, true)
        }
    };
    Ok(Answer {
        reply,
        changed,
        forward,
    })
}

/// The calls a model's object makes to its accounts' objects: each account's share of `forward`
/// as one `Observe` (its answer is the account's breaker after it), and, when `poll`, a `Snapshot`
/// of every other account its routes use. By account object name.
pub fn account_calls(
    health: &ModelHealth,
    config: HealthConfig,
    forward: &[Observation],
    poll: bool,
) -> Vec<(String, HealthCall)> {
    let mut told: BTreeMap<&str, Vec<Observation>> = BTreeMap::new();
    for o in forward {
        told.entry(o.account.as_str()).or_default().push(o.clone());
    }
    let mut calls: Vec<(String, HealthCall)> = Vec::new();
    let asked = health
        .account_versions
        .keys()
        .filter(|a| poll && !told.contains_key(a.as_str()));
    for account in asked {
        calls.push((account_object(account), HealthCall::Snapshot));
    }
    for (account, observations) in told {
        let call = HealthCall::Observe {
            scope: Scope::Accounts,
            config,
            observations,
            requests: Vec::new(),
        };
        calls.push((account_object(account), call));
    }
    calls
}

impl ModelHealth {
    /// A model's object takes account `account`'s answer (`reply`, that object's snapshot) into
    /// its copies; true when it changed them.
    pub fn fold_answer(&mut self, account: &str, reply: &SnapshotReply) -> bool {
        self.fold_account(account, reply.health.accounts.get(account), reply.health.version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use crate::health::AttemptOutcome;

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

    #[test]
    fn a_probe_is_granted_once_and_only_a_grant_changes_the_state() {
        let cfg = HealthConfig::default();
        let mut h = ModelHealth::default();
        let observe = HealthCall::Observe {
            scope: Scope::Model,
            config: cfg,
            observations: (0..cfg.demote_after)
                .map(|_| Observation::at("r", "a", AttemptOutcome::Failure(FailureClass::Upstream5xx), 1_000))
                .collect(),
            requests: Vec::new(),
        };
        assert!(answer(&mut h, observe, 1_000).unwrap().changed);
        assert!(!answer(&mut h, HealthCall::Snapshot, 1_000).unwrap().changed);
        let after_cooldown = 1_000 + cfg.cooldown_ms;
        let claim = || HealthCall::Claim {
            route: "r".into(),
            account: "a".into(),
            lease_ms: 5_000,
        };
        let first = answer(&mut h, claim(), after_cooldown).unwrap();
        assert_eq!(first.reply, serde_json::json!({"granted": true}));
        assert!(first.changed);
        let second = answer(&mut h, claim(), after_cooldown).unwrap();
        assert_eq!(second.reply, serde_json::json!({"granted": false}));
        assert!(!second.changed, "a refused claim writes nothing");
    }

    /// A model's object tells each account's object what concerns it in one call, asks the others
    /// only when polling, and takes an answer only when newer than its copy.
    #[test]
    fn a_model_object_tells_each_account_once_and_polls_the_rest() {
        let cfg = HealthConfig::default();
        let mut h = ModelHealth::default();
        h.know_accounts(["a", "b", "c"]);
        let fail = |account: &str| Observation::at("r", account, AttemptOutcome::Failure(FailureClass::Account), 1_000);
        let route_fail = Observation::at("r", "b", AttemptOutcome::Failure(FailureClass::Upstream5xx), 1_000);
        let observe = HealthCall::Observe {
            scope: Scope::Model,
            config: cfg,
            observations: vec![fail("a"), route_fail, fail("a")],
            requests: Vec::new(),
        };
        let answered = answer(&mut h, observe, 1_000).unwrap();
        assert_eq!(answered.forward.len(), 2, "the account failures, not the route's");
        assert!(h.accounts["a"].is_demoted(), "the copy takes them at once");
        let names = |calls: &[(String, HealthCall)]| {
            calls
                .iter()
                .map(|(n, c)| format!("{n} {}", matches!(c, HealthCall::Observe { .. })))
                .collect::<Vec<_>>()
        };
        let calls = account_calls(&h, cfg, &answered.forward, false);
        assert_eq!(names(&calls), vec!["account:a true"]);
        let HealthCall::Observe { observations, .. } = &calls[0].1 else {
            unreachable!()
        };
        assert_eq!(observations.len(), 2, "one call carries both");
        let calls = account_calls(&h, cfg, &answered.forward, true);
        assert_eq!(
            names(&calls),
            vec!["account:b false", "account:c false", "account:a true"]
        );
        // The account's object answers: newer than the copy's version 0, so taken; again, not.
        let mut authority = ModelHealth::default();
        let HealthCall::Observe { observations, .. } = calls[2].1.clone() else {
            unreachable!()
        };
        for o in &observations {
            authority.observe_scoped(o, &cfg, Scope::Accounts);
        }
        authority.changed();
        let reply = authority.snapshot_reply(1_000);
        assert!(h.fold_answer("a", &reply));
        assert!(!h.fold_answer("a", &reply));
        assert_eq!(h.account_versions["a"], 1);
        assert_eq!(object_account("account:a"), Some("a"));
        assert_eq!(object_account("model:a"), None);
    }
}
