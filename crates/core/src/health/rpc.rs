//! The typed calls between an isolate and a health Durable Object (SPEC §8, §9), shared by the
//! caller and the object so neither speaks ad-hoc JSON.
//!
//! Two kinds of object hold a [`ModelHealth`]: one per model (its routes' breakers and the
//! traffic buckets) and one for all upstream accounts (their breakers, SPEC §9: an account in
//! cooldown is skipped by every model). [`Scope`] says which half of an observation an object
//! keeps, so both apply the same core state machine to the same observations. [`answer`] is the
//! object's whole behaviour: the Durable Object in `src/` only loads, calls it, and persists.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{HealthConfig, ModelHealth, Observation, RequestObservation, RouteStats, Scope};

/// The name of model `model_id`'s health object (its breakers, buckets and route capacity).
pub fn model_object(model_id: &str) -> String {
    format!("model:{model_id}")
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
}

/// Applies `call` to an object's state at `now_ms`.
pub fn answer(health: &mut ModelHealth, call: HealthCall, now_ms: u64) -> Result<Answer, serde_json::Error> {
    let (reply, changed) = match call {
        HealthCall::Snapshot => (serde_json::to_value(health.snapshot_reply(now_ms))?, false),
        HealthCall::Observe {
            scope,
            config,
            observations,
            requests,
        } => {
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
    Ok(Answer { reply, changed })
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
}
