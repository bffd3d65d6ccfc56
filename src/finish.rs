//! After the answer: the one path every ending of a request takes once its hold is placed. A
//! [`Record`] carries the request's core [`Journal`], its hold and its health knobs; each attempt
//! goes into it once (and into this isolate's health snapshot at once), and [`Record::close`]
//! finishes the journal and returns the I/O that settles the hold (D1) and reports route health
//! (Durable Objects), side by side, for `ctx.wait_until`. A request refused before its hold is
//! recorded by [`reject`].

use std::future::Future;

use switchyard_core::classify::Blame;
use switchyard_core::generation::{log_line, short_message, AttemptResult, AttemptTarget, Ending, Journal, Opening};
use switchyard_core::health::HealthConfig;
use switchyard_core::ApiError;
use worker::Env;

use crate::billing::{self, Hold};
use crate::faults::Faults;
use crate::health;
use crate::limits::Slot;
use crate::runtime::clock::{in_request, now_ms};

/// An open request: what its settlement and health report need.
pub struct Record {
    pub journal: Journal,
    /// For the log line written when an answered request ends.
    pub request_id: String,
    pub env: Env,
    pub hold: Option<Hold>,
    pub health: HealthConfig,
    pub model: String,
    /// The key's and the serving route's slots (SPEC §10), given back when the record is closed
    /// (or dropped).
    pub slots: Vec<Slot>,
    /// The request's drills (`crate::faults`; inert in production).
    pub faults: Faults,
}

impl Record {
    /// Records one attempt that ended now, and applies its outcome to this isolate's health
    /// snapshot at once (the very next request sees a demotion).
    pub fn attempt(&mut self, target: AttemptTarget, result: AttemptResult) {
        if let AttemptResult::Failed { verdict, .. } = &result {
            if verdict.class.blame() == Blame::Account {
                // SPEC §9: the upstream account is broken, not the model.
                worker::console_log!(
                    "[auto-isolate] SKIP {}: account-level failure ({}) -- do NOT deactivate the model",
                    self.model,
                    verdict
                        .message
                        .as_deref()
                        .map(short_message)
                        .unwrap_or_else(|| verdict.class.as_str().to_string())
                );
            }
        }
        let obs = self.journal.attempt(target, result, now_ms());
        if self.faults.dated(obs.at_ms) == obs.at_ms {
            health::apply_local(&self.model, obs, &self.health);
        } else {
            let mut dated = obs.clone();
            dated.at_ms = self.faults.dated(dated.at_ms); // the history drill (tests only)
            health::apply_local(&self.model, &dated, &self.health);
        }
    }

    /// Finishes the record now with `ending`; the returned future settles it (hold released,
    /// delivered usage charged, generation written) and reports to route health.
    pub fn close(self, ending: Ending) -> impl Future<Output = ()> + 'static {
        let Record {
            journal,
            request_id,
            env,
            hold,
            health: config,
            model,
            slots,
            faults,
        } = self;
        if faults.leaks_slots(&model) {
            // A Worker that dies holding its slots (a drill, tests only).
            slots.into_iter().for_each(Slot::abandon);
        } else {
            drop(slots); // the request is over: its slots go back now, beside settlement
        }
        let answered = matches!(ending, Ending::Delivered(_));
        let mut finished = journal.finish(ending, now_ms());
        for o in &mut finished.observations {
            o.at_ms = faults.dated(o.at_ms);
        }
        finished.request.at_ms = faults.dated(finished.request.at_ms);
        if answered {
            // The request's one log line, now that its outcome and cost are known (`http` logs
            // the requests no route answered when it answers them).
            worker::console_log!("{}", log_line(&finished.record, &request_id));
        }
        if finished.record.overrun_micros > 0 {
            // The upstream delivered more than was held: charged the hold, the rest logged.
            worker::console_log!(
                "{{\"event\":\"charge_capped_at_hold\",\"generation_id\":{:?},\"route\":{:?},\"overrun_micros\":{}}}",
                finished.record.id,
                finished.record.route,
                finished.record.overrun_micros
            );
        }
        async move {
            if !in_request() {
                // Polled where the runtime allows no I/O (see `clock::in_request`): settlement
                // cannot be written from here. It is queued for this isolate's next settlement to
                // write with its own; should none come, the hold expires and the sweep releases it
                // (nothing is charged twice). The health report is lost.
                worker::console_error!(
                    "{{\"event\":\"relay_lost_context\",\"generation_id\":{:?},\"charge_micros\":{}}}",
                    finished.record.id,
                    finished.record.total_cost_micros
                );
                billing::leave(hold, finished.record);
                return;
            }
            let report = health::report(&env, &model, config, finished.observations, finished.request);
            let settle = billing::settle(env.clone(), faults, hold, finished.record);
            futures_util::future::join(settle, report).await;
        }
    }
}

/// The record of a request refused before any route was tried: written (no hold to release, no
/// health to report) by the returned future, for `ctx.wait_until`.
pub fn reject(env: Env, faults: Faults, opening: Opening, error: &ApiError) -> impl Future<Output = ()> + 'static {
    let finished = Journal::open(opening).finish(Ending::Rejected(error), now_ms());
    billing::settle(env, faults, None, finished.record)
}
