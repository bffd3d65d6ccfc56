//! The status word of a model (SPEC §14), from its per-request buckets ([`crate::health::Bucket`],
//! filled by [`crate::health::ModelHealth::observe_request`]).
//!
//! This module owns the thresholds. Invariants: only the last hour counts (the same window as
//! [`crate::health::recent`]); only counted requests are in the buckets (client errors, 402 and our
//! own 429 never reach them), and a request a later route answered is answered. Down needs both a
//! rate under 50 % and at least 3 unanswered requests, so a handful of failures on a quiet model
//! reads Degraded, not Down.

use serde::{Deserialize, Serialize};

use crate::health::{median_ms, recent, Bucket, ModelHealth};

/// Below this share answered: Degraded.
const OPERATIONAL_MIN_ANSWERED: f64 = 0.95;
/// Below this share answered (with [`DOWN_MIN_UNANSWERED`]): Down.
const DOWN_BELOW_ANSWERED: f64 = 0.5;
const DOWN_MIN_UNANSWERED: u64 = 3;
/// Median stream TTFB above this: Degraded.
const DEGRADED_TTFB_MS: u64 = 10_000;

/// A model's status over the last hour of real requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusWord {
    Operational,
    Degraded,
    Down,
    NoRecentRequests,
}

impl StatusWord {
    /// The word as shown on `/status`.
    pub fn label(self) -> &'static str {
        match self {
            StatusWord::Operational => "Operational",
            StatusWord::Degraded => "Degraded",
            StatusWord::Down => "Down",
            StatusWord::NoRecentRequests => "No recent requests",
        }
    }
}

/// The status word over the last hour of `buckets` at `now_ms`: no requests → No recent requests;
/// under 50 % answered and ≥ 3 unanswered → Down; under 95 % answered or median stream TTFB over
/// 10 s → Degraded; else Operational.
pub fn model_status(buckets: &[Bucket], now_ms: u64) -> StatusWord {
    let (mut requests, mut answered) = (0u64, 0u64);
    for b in recent(buckets, now_ms) {
        requests += u64::from(b.requests);
        answered += u64::from(b.answered.min(b.requests));
    }
    if requests == 0 {
        return StatusWord::NoRecentRequests;
    }
    let share = answered as f64 / requests as f64;
    let unanswered = requests - answered;
    if share < DOWN_BELOW_ANSWERED && unanswered >= DOWN_MIN_UNANSWERED {
        return StatusWord::Down;
    }
    let ttfb = median_ms(recent(buckets, now_ms).flat_map(|b| b.ttfb_samples_ms.iter().copied()));
    if share < OPERATIONAL_MIN_ANSWERED || ttfb.is_some_and(|t| t > DEGRADED_TTFB_MS) {
        return StatusWord::Degraded;
    }
    StatusWord::Operational
}

impl ModelHealth {
    /// The model's status word (SPEC §14) from its request buckets.
    pub fn status(&self, now_ms: u64) -> StatusWord {
        model_status(&self.model_buckets, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::RequestObservation;

    const MIN: u64 = 60_000;
    const T0: u64 = 1_000 * MIN;

    /// `answered` answered and `unanswered` unanswered requests spread over the last half hour, the
    /// answered ones streams with `ttfb_ms`.
    fn traffic(answered: u32, unanswered: u32, ttfb_ms: Option<u64>) -> ModelHealth {
        let mut h = ModelHealth::default();
        let total = u64::from(answered + unanswered);
        for i in 0..total {
            h.observe_request(&RequestObservation {
                at_ms: T0 + (i * 30 * MIN) / total.max(1),
                answered: i < u64::from(answered),
                counted: true,
                stream_ttfb_ms: ttfb_ms,
            });
        }
        h
    }

    #[test]
    fn status_words_for_crafted_traffic() {
        let now = T0 + 30 * MIN;
        let cases: &[(&str, u32, u32, Option<u64>, StatusWord)] = &[
            ("none", 0, 0, None, StatusWord::NoRecentRequests),
            ("all answered", 20, 0, Some(800), StatusWord::Operational),
            ("95 % exactly", 19, 1, Some(800), StatusWord::Operational),
            ("96 %", 96, 4, None, StatusWord::Operational),
            ("94 %", 94, 6, Some(800), StatusWord::Degraded),
            ("50 % exactly: not down", 3, 3, None, StatusWord::Degraded),
            ("40 %, 3 unanswered", 2, 3, None, StatusWord::Down),
            ("40 %, 30 unanswered", 20, 30, None, StatusWord::Down),
            ("33 %, 2 unanswered", 1, 2, None, StatusWord::Degraded),
            ("0 %, 2 unanswered", 0, 2, None, StatusWord::Degraded),
            ("0 %, 3 unanswered", 0, 3, None, StatusWord::Down),
            ("median TTFB 11 s", 20, 0, Some(11_000), StatusWord::Degraded),
            ("median TTFB 10 s exactly", 20, 0, Some(10_000), StatusWord::Operational),
            ("non-stream traffic has no TTFB", 20, 0, None, StatusWord::Operational),
        ];
        for (name, answered, unanswered, ttfb, want) in cases {
            let h = traffic(*answered, *unanswered, *ttfb);
            assert_eq!(h.status(now), *want, "{name}");
            assert_eq!(model_status(&h.model_buckets, now), *want, "{name}");
        }
    }

    #[test]
    fn only_the_last_hour_and_counted_requests_matter() {
        let h = traffic(0, 10, None);
        assert_eq!(h.status(T0 + 30 * MIN), StatusWord::Down);
        // An hour after the last request it is all gone.
        assert_eq!(h.status(T0 + 30 * MIN + 60 * MIN), StatusWord::NoRecentRequests);
        // Part aged out: the newer half (answered) decides.
        let mut h = traffic(0, 10, None);
        for i in 0..10 {
            h.observe_request(&RequestObservation {
                at_ms: T0 + 70 * MIN + i,
                answered: true,
                counted: true,
                stream_ttfb_ms: None,
            });
        }
        assert_eq!(h.status(T0 + 70 * MIN), StatusWord::Degraded);
        assert_eq!(h.status(T0 + 90 * MIN), StatusWord::Operational);
        // Client errors, 402 and our 429 are not counted.
        let mut h = ModelHealth::default();
        for _ in 0..10 {
            h.observe_request(&RequestObservation {
                at_ms: T0,
                answered: false,
                counted: false,
                stream_ttfb_ms: None,
            });
        }
        assert_eq!(h.status(T0), StatusWord::NoRecentRequests);
        // TTFB median mixes samples across the hour.
        let mut h = traffic(2, 0, Some(12_000));
        for i in 0..3 {
            h.observe_request(&RequestObservation {
                at_ms: T0 + 40 * MIN + i,
                answered: true,
                counted: true,
                stream_ttfb_ms: Some(2_000),
            });
        }
        assert_eq!(h.status(T0 + 40 * MIN), StatusWord::Operational);
    }

    #[test]
    fn labels_and_wire_names() {
        let table = [
            (StatusWord::Operational, "Operational", "operational"),
            (StatusWord::Degraded, "Degraded", "degraded"),
            (StatusWord::Down, "Down", "down"),
            (StatusWord::NoRecentRequests, "No recent requests", "no_recent_requests"),
        ];
        for (word, label, wire) in table {
            assert_eq!(word.label(), label);
            assert_eq!(serde_json::to_value(word).unwrap(), serde_json::json!(wire));
            assert_eq!(
                serde_json::from_value::<StatusWord>(serde_json::json!(wire)).unwrap(),
                word
            );
        }
    }
}
