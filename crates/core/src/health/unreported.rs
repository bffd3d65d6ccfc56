//! An isolate's own outcomes that the copies it takes may not hold yet (SPEC §8, §22). An isolate
//! applies each attempt's outcome to its copy of the model's health at once, so its very next
//! request plans with it. A copy of the object taken later replaces the isolate's when the object
//! changed since (`ModelHealth::newer_than`) — but the object may have changed for other reasons
//! (the isolate's own earlier report, another isolate's) before the shard heard of this outcome,
//! and the copy would undo it: a route demoted by its third failure planned again as if it had two.
//! So the isolate keeps each outcome until a shard answers the report that carried it (the shard
//! applied it before answering: its answer and every later copy hold it), and applies the ones it
//! still keeps to every copy it takes. One whose report never got an answer is kept
//! [`KEPT_MS`] at most.
//!
//! A copy may also come while the report carrying an outcome is on its way back: the shard took
//! the outcome in, so the copy holds it, and applying it again would count it twice (a route
//! demoted one failure early). So each kept outcome remembers the report it was last sent in
//! ([`Unreported::sending`]), the calls name the reports still awaiting an answer
//! ([`Unreported::awaiting`]), the shard answers which of them it took in, and those are not
//! applied to its copy. A report that got no answer leaves its outcomes as they were
//! ([`Unreported::unanswered`]): applied to every copy, to be sent again.

use std::collections::VecDeque;

use super::{HealthConfig, ModelHealth, Observation, Scope};

/// How long an outcome is kept without its report's answer: by then its report was sent (a
/// success's batch waits at most a second) and failed, or the copies hold it anyway.
pub const KEPT_MS: u64 = 10_000;

/// At most this many outcomes are kept (the oldest go first).
pub const MAX_KEPT: usize = 1_024;

/// The outcomes an isolate applied to its copies and no shard has answered yet, oldest first.
#[derive(Debug, Default)]
pub struct Unreported {
    kept: VecDeque<Kept>,
}

#[derive(Debug)]
struct Kept {
    /// The model the outcome is of (its object's name, as the isolate names its copies).
    model: String,
    observation: Observation,
    config: HealthConfig,
    kept_ms: u64,
    /// The report it was sent in, while that report awaits its answer.
    sent_in: Option<u64>,
}

impl Kept {
    /// Sent in one of the reports `taken_in`.
    fn held_by(&self, taken_in: &[u64]) -> bool {
        self.sent_in.is_some_and(|id| taken_in.contains(&id))
    }
}

impl Unreported {
    /// Keeps an outcome just applied to the isolate's copies of `model`'s health.
    pub fn keep(&mut self, model: impl Into<String>, observation: &Observation, config: &HealthConfig, now_ms: u64) {
        self.forget_old(now_ms);
        if self.kept.len() >= MAX_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(Kept {
            model: model.into(),
            observation: observation.clone(),
            config: *config,
            kept_ms: now_ms,
            sent_in: None,
        });
    }

    /// The ids of `model`'s reports awaiting their answer, to name in a call to its shard.
    pub fn awaiting(&self, model: &str) -> Vec<u64> {
        let mut ids: Vec<u64> = self
            .kept
            .iter()
            .filter(|k| k.model == model)
            .filter_map(|k| k.sent_in)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// `reported` for `model` are being sent as report `id` (each matches one kept outcome not
    /// already on its way).
    pub fn sending(&mut self, model: &str, reported: &[Observation], id: u64) {
        for r in reported {
            let waiting = |k: &Kept| k.sent_in.is_none() && k.model == model && &k.observation == r;
            if let Some(k) = self.kept.iter_mut().find(|k| waiting(k)) {
                k.sent_in = Some(id);
            }
        }
    }

    /// A shard answered report `id`: its outcomes are in its answer and in every copy after it.
    pub fn answered(&mut self, id: u64) {
        self.kept.retain(|k| k.sent_in != Some(id));
    }

    /// Report `id` got no answer: its outcomes are kept as if never sent.
    pub fn unanswered(&mut self, id: u64) {
        for k in self.kept.iter_mut().filter(|k| k.sent_in == Some(id)) {
            k.sent_in = None;
        }
    }

    /// Applies the outcomes still kept for `model` to a copy of its object just taken — but those
    /// in reports the copy's shard has taken in (`taken_in`).
    pub fn apply_to_model(&mut self, model: &str, copy: &mut ModelHealth, taken_in: &[u64], now_ms: u64) {
        self.forget_old(now_ms);
        for k in self.kept.iter().filter(|k| k.model == model && !k.held_by(taken_in)) {
            copy.observe_scoped(&k.observation, &k.config, Scope::Model);
        }
    }

    /// Applies the outcomes still kept at `accounts` (of any model) to the isolate's overlay of
    /// the accounts' breakers, whose copies of those accounts were just replaced — but those in
    /// reports the copy's shard has taken in (`taken_in`).
    pub fn apply_to_accounts(&mut self, accounts: &[String], overlay: &mut ModelHealth, taken_in: &[u64], now_ms: u64) {
        if accounts.is_empty() {
            return;
        }
        self.forget_old(now_ms);
        for k in self
            .kept
            .iter()
            .filter(|k| accounts.contains(&k.observation.account) && !k.held_by(taken_in))
        {
            overlay.observe_scoped(&k.observation, &k.config, Scope::Accounts);
        }
    }

    /// How many outcomes are kept.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.kept.len()
    }

    /// Whether none is.
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    fn forget_old(&mut self, now_ms: u64) {
        while self
            .kept
            .front()
            .is_some_and(|k| now_ms.saturating_sub(k.kept_ms) > KEPT_MS)
        {
            self.kept.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use crate::health::AttemptOutcome;

    fn failure(route: &str, account: &str, at_ms: u64) -> Observation {
        Observation {
            key: "key-1".into(),
            ..Observation::at(route, account, AttemptOutcome::Failure(FailureClass::Connect), at_ms)
        }
    }

    /// The race the module exists for: three failures applied here, the object's copy taken after
    /// it heard of two (it changed since the isolate's copy was read) — the route stays demoted;
    /// once the shard answers the third's report, a copy without it would mean the object really
    /// does not hold it, and nothing is applied twice.
    #[test]
    fn a_newer_copy_that_missed_an_outcome_applied_here_does_not_undo_it() {
        let cfg = HealthConfig::default();
        let model = "model:m";
        let mut unreported = Unreported::default();
        let mut object = ModelHealth::default();
        let mut isolate = ModelHealth::default();
        let fails: Vec<Observation> = (1..=cfg.demote_after as u64)
            .map(|i| failure("r0", "a", 1_000 * i))
            .collect();
        for f in &fails {
            isolate.observe_scoped(f, &cfg, Scope::Model);
            unreported.keep(model, f, &cfg, f.at_ms);
        }
        assert!(isolate.routes["r0"].breaker.is_demoted());
        // The shard answered the reports of all but the last (report 1); the object applied those.
        let (told, missed) = fails.split_at(fails.len() - 1);
        unreported.sending(model, told, 1);
        unreported.answered(1);
        for f in told {
            object.observe_scoped(f, &cfg, Scope::Model);
            object.changed();
        }
        assert!(object.newer_than(&isolate));
        let now = fails.last().unwrap().at_ms;
        let mut taken = object.clone();
        unreported.apply_to_model(model, &mut taken, &[], now);
        assert!(taken.routes["r0"].breaker.is_demoted(), "the third failure kept");
        assert_eq!(taken.routes["r0"].breaker.consecutive_failures, cfg.demote_after);
        // The object's copy alone would undo it.
        assert!(!object.routes["r0"].breaker.is_demoted());
        // The last goes out as report 2; a copy from a shard that has not taken it in (it does
        // not name 2) still gets it applied.
        unreported.sending(model, missed, 2);
        assert_eq!(unreported.awaiting(model), vec![2]);
        let mut early = object.clone();
        unreported.apply_to_model(model, &mut early, &[], now);
        assert!(early.routes["r0"].breaker.is_demoted());
        // The shard answers it: nothing is kept to apply twice.
        unreported.answered(2);
        assert!(unreported.is_empty());
        let mut again = object.clone();
        again.observe_scoped(&missed[0], &cfg, Scope::Model);
        unreported.apply_to_model(model, &mut again, &[], now);
        assert_eq!(again.routes["r0"].breaker.consecutive_failures, cfg.demote_after);
    }

    /// Session 21's edge: a copy taken after the shard took in an outcome's report, arriving before
    /// that report's answer — it holds the outcome already, so it is not applied again (the route
    /// would count one failure twice and be demoted a failure early). A report that got no answer
    /// leaves its outcomes applied to every copy again.
    #[test]
    fn a_copy_that_holds_an_outcome_whose_answer_is_on_its_way_does_not_count_it_twice() {
        let cfg = HealthConfig::default();
        let model = "model:m";
        let mut unreported = Unreported::default();
        let mut object = ModelHealth::default();
        let fails: Vec<Observation> = (1..cfg.demote_after as u64).map(|i| failure("r0", "a", i)).collect();
        for f in &fails {
            unreported.keep(model, f, &cfg, f.at_ms);
        }
        unreported.sending(model, &fails, 7);
        // The shard took report 7 in: its copy holds those failures.
        for f in &fails {
            object.observe_scoped(f, &cfg, Scope::Model);
        }
        let mut copy = object.clone();
        unreported.apply_to_model(model, &mut copy, &[7], 10);
        assert_eq!(copy.routes["r0"].breaker.consecutive_failures, cfg.demote_after - 1);
        assert!(!copy.routes["r0"].breaker.is_demoted(), "not demoted a failure early");
        // The same through the accounts' overlay.
        let account_fail = Observation {
            outcome: AttemptOutcome::Failure(FailureClass::Account),
            ..failure("r0", "a", 20)
        };
        unreported.keep(model, &account_fail, &cfg, 20);
        unreported.sending(model, std::slice::from_ref(&account_fail), 8);
        let mut overlay = ModelHealth::default();
        overlay.observe_scoped(&account_fail, &cfg, Scope::Accounts);
        let before = overlay.clone();
        unreported.apply_to_accounts(&["a".to_string()], &mut overlay, &[7, 8], 21);
        assert_eq!(overlay, before, "the overlay's copy held it: not applied again");
        // Report 7 got no answer: its failures are applied to the next copy, and sent again.
        unreported.unanswered(7);
        assert_eq!(unreported.awaiting(model), vec![8]);
        let mut fresh = ModelHealth::default();
        unreported.apply_to_model(model, &mut fresh, &[7, 8], 30);
        assert_eq!(fresh.routes["r0"].breaker.consecutive_failures, cfg.demote_after - 1);
    }

    #[test]
    fn only_the_models_and_accounts_concerned_get_them_and_old_ones_are_forgotten() {
        let cfg = HealthConfig::default();
        let mut unreported = Unreported::default();
        unreported.keep("model:m", &failure("r0", "a", 1), &cfg, 1);
        unreported.keep("model:n", &failure("r9", "b", 2), &cfg, 2);
        let mut copy = ModelHealth::default();
        unreported.apply_to_model("model:m", &mut copy, &[], 3);
        assert!(copy.routes.contains_key("r0") && !copy.routes.contains_key("r9"));
        let mut overlay = ModelHealth::default();
        let fail_b = Observation {
            outcome: AttemptOutcome::Failure(FailureClass::Account),
            ..failure("r9", "b", 2)
        };
        unreported.keep("model:n", &fail_b, &cfg, 3);
        unreported.apply_to_accounts(&["b".to_string()], &mut overlay, &[], 4);
        assert!(overlay.accounts.contains_key("b") && !overlay.accounts.contains_key("a"));
        assert!(overlay.routes.is_empty(), "the overlay keeps accounts only");
        // Past KEPT_MS without an answer: dropped.
        assert_eq!(unreported.len(), 3);
        let mut late = ModelHealth::default();
        unreported.apply_to_model("model:m", &mut late, &[], 2 + KEPT_MS + 1);
        assert!(late.routes.is_empty());
        assert_eq!(unreported.len(), 1, "only the one kept at 3 is within {KEPT_MS} ms");
        for i in 0..MAX_KEPT as u64 + 10 {
            unreported.keep("model:m", &failure("r0", "a", i), &cfg, 5);
        }
        assert_eq!(unreported.len(), MAX_KEPT);
    }
}
