//! The status page's look back (SPEC §14): a model's counted requests folded into one [`Hour`] per
//! hour, kept for [`HOURS_KEPT`] hours, and a route's last hour as [`ChartPoint`]s.
//!
//! Hours ride on the writes the model's object already makes: [`ModelHealth::observe_request`]
//! adds each request to its minute bucket and to its hour at once, so keeping a week costs no
//! storage round trip. Invariants: hours are sorted, one per hour, and span at most
//! [`HOURS_KEPT`] hours counted back from the newest; older ones are dropped on every write. An
//! hour keeps counts only (a few numbers, never samples): whether its median stream TTFB is over
//! [`SLOW_TTFB_MS`] is told by whether more than half of its samples were.

use serde::{Deserialize, Serialize};

use super::{median_ms, recent, Bucket, ModelHealth, RequestObservation, MINUTE_MS, WINDOW_MINUTES};

/// One hour, ms.
pub const HOUR_MS: u64 = 3_600_000;
/// Hours a model keeps: eight days, so a whole week back from any moment of today.
pub const HOURS_KEPT: u64 = 8 * 24;
/// A stream's time to first content above this is slow (the Degraded rule, SPEC §14).
pub const SLOW_TTFB_MS: u64 = 10_000;
/// Minutes per point of a route's last-hour chart, and the points (one hour).
pub const CHART_POINT_MINUTES: u64 = 5;
pub const CHART_POINTS: u64 = WINDOW_MINUTES / CHART_POINT_MINUTES;

/// One hour of a model's counted requests.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(default)]
pub struct Hour {
    /// `at_ms / HOUR_MS`.
    pub hour: u64,
    pub requests: u32,
    pub answered: u32,
    /// Answered streams with a time to first content, and those of them over [`SLOW_TTFB_MS`].
    pub ttfb_samples: u32,
    pub ttfb_slow: u32,
}

impl Hour {
    pub fn start_ms(&self) -> u64 {
        self.hour.saturating_mul(HOUR_MS)
    }

    pub fn unanswered(&self) -> u32 {
        self.requests.saturating_sub(self.answered)
    }

    /// More than half of the hour's stream TTFBs were slow: its median is over [`SLOW_TTFB_MS`].
    pub fn mostly_slow(&self) -> bool {
        u64::from(self.ttfb_slow) * 2 > u64::from(self.ttfb_samples)
    }
}

/// Adds one counted request to its hour, after dropping hours older than [`HOURS_KEPT`] (counted
/// back from the newer of the request and the newest hour); a request that old is not recorded.
pub(super) fn record(hours: &mut Vec<Hour>, obs: &RequestObservation) {
    let hour = obs.at_ms / HOUR_MS;
    let newest = hours.iter().map(|h| h.hour).max().unwrap_or(hour).max(hour);
    let oldest_kept = newest.saturating_sub(HOURS_KEPT - 1);
    hours.retain(|h| h.hour >= oldest_kept);
    if hour < oldest_kept {
        return;
    }
    let i = match hours.binary_search_by_key(&hour, |h| h.hour) {
        Ok(i) => i,
        Err(i) => {
            hours.insert(
                i,
                Hour {
                    hour,
                    ..Hour::default()
                },
            );
            i
        }
    };
    let Some(h) = hours.get_mut(i) else {
        return;
    };
    h.requests = h.requests.saturating_add(1);
    if obs.answered {
        h.answered = h.answered.saturating_add(1);
        if let Some(t) = obs.stream_ttfb_ms {
            h.ttfb_samples = h.ttfb_samples.saturating_add(1);
            if t > SLOW_TTFB_MS {
                h.ttfb_slow = h.ttfb_slow.saturating_add(1);
            }
        }
    }
}

/// The `count` hours up to and including the one of `now_ms`, oldest first; an hour without
/// requests is an empty [`Hour`] of that hour.
pub fn last_hours(hours: &[Hour], count: u64, now_ms: u64) -> Vec<Hour> {
    let current = now_ms / HOUR_MS;
    (0..count)
        .rev()
        .filter_map(|back| current.checked_sub(back))
        .map(|hour| {
            hours.iter().find(|h| h.hour == hour).cloned().unwrap_or(Hour {
                hour,
                ..Hour::default()
            })
        })
        .collect()
}

/// Five minutes of a route's last hour (its chart on `/status`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct ChartPoint {
    /// The first minute's start, ms since the epoch.
    pub start_ms: u64,
    /// Attempts answered, and failed by a class that counts against the route (SPEC §4).
    pub answered: u32,
    pub failed: u32,
    /// `answered / (answered + failed)`; `None` without such attempts.
    pub success_rate: Option<f64>,
    pub median_ttfb_ms: Option<u64>,
}

impl ChartPoint {
    fn of(start_minute: u64, buckets: &[&Bucket]) -> ChartPoint {
        let answered: u32 = buckets.iter().map(|b| b.answered).fold(0, u32::saturating_add);
        let failed: u32 = buckets.iter().map(|b| b.failed).fold(0, u32::saturating_add);
        let judged = u64::from(answered) + u64::from(failed);
        ChartPoint {
            start_ms: start_minute.saturating_mul(MINUTE_MS),
            answered,
            failed,
            success_rate: (judged > 0).then(|| f64::from(answered) / judged as f64),
            median_ttfb_ms: median_ms(buckets.iter().flat_map(|b| b.ttfb_samples_ms.iter().copied())),
        }
    }
}

impl ModelHealth {
    /// Route `route`'s last hour at `now_ms` in [`CHART_POINTS`] points of
    /// [`CHART_POINT_MINUTES`], oldest first, the last one ending with the current minute.
    pub fn route_chart(&self, route: &str, now_ms: u64) -> Vec<ChartPoint> {
        let buckets = self.routes.get(route).map_or(&[][..], |s| &s.buckets[..]);
        let first = (now_ms / MINUTE_MS).saturating_sub(WINDOW_MINUTES - 1);
        (0..CHART_POINTS)
            .map(|i| {
                let start = first + i * CHART_POINT_MINUTES;
                let end = start + CHART_POINT_MINUTES;
                let within: Vec<&Bucket> = recent(buckets, now_ms)
                    .filter(|b| b.minute >= start && b.minute < end)
                    .collect();
                ChartPoint::of(start, &within)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{AttemptOutcome, HealthConfig, Observation};

    const MIN: u64 = 60_000;
    /// 10:00 UTC on some day.
    const H0: u64 = 480_000 * HOUR_MS + 10 * HOUR_MS;

    fn req(h: &mut ModelHealth, at_ms: u64, answered: bool, ttfb: Option<u64>) {
        h.observe_request(&RequestObservation {
            provoked_at: Vec::new(),
            at_ms,
            answered,
            counted: true,
            stream_ttfb_ms: ttfb,
        });
    }

    #[test]
    fn requests_fold_into_their_hours() {
        let mut h = ModelHealth::default();
        req(&mut h, H0 + 5 * MIN, true, Some(800));
        req(&mut h, H0 + 59 * MIN, false, None);
        req(&mut h, H0 + HOUR_MS, true, Some(12_000));
        req(&mut h, H0 + HOUR_MS + 1, true, Some(11_000));
        req(&mut h, H0 + HOUR_MS + 2, true, Some(9_000));
        h.observe_request(&RequestObservation {
            provoked_at: Vec::new(),
            at_ms: H0,
            answered: false,
            counted: false,
            stream_ttfb_ms: None,
        });
        let want = [
            Hour {
                hour: H0 / HOUR_MS,
                requests: 2,
                answered: 1,
                ttfb_samples: 1,
                ttfb_slow: 0,
            },
            Hour {
                hour: H0 / HOUR_MS + 1,
                requests: 3,
                answered: 3,
                ttfb_samples: 3,
                ttfb_slow: 2,
            },
        ];
        assert_eq!(h.model_hours, want);
        assert_eq!((want[0].unanswered(), want[0].start_ms()), (1, H0));
        assert!(!want[0].mostly_slow());
        assert!(want[1].mostly_slow());
        // A late request lands in its own hour, in order.
        req(&mut h, H0 - 1, true, None);
        let hours: Vec<u64> = h.model_hours.iter().map(|x| x.hour + 1 - H0 / HOUR_MS).collect();
        assert_eq!(hours, [0, 1, 2]);
        // Exactly half slow is not mostly slow.
        let half = Hour {
            ttfb_samples: 2,
            ttfb_slow: 1,
            ..Hour::default()
        };
        assert!(!half.mostly_slow());
    }

    #[test]
    fn a_week_is_kept_and_older_hours_are_dropped() {
        let mut h = ModelHealth::default();
        for i in 0..(HOURS_KEPT + 30) {
            req(&mut h, H0 + i * HOUR_MS, true, None);
        }
        assert_eq!(h.model_hours.len() as u64, HOURS_KEPT);
        const { assert!(HOURS_KEPT >= 7 * 24) };
        assert_eq!(h.model_hours.first().map(|x| x.hour), Some(H0 / HOUR_MS + 30));
        assert_eq!(
            h.model_hours.last().map(|x| x.hour),
            Some(H0 / HOUR_MS + HOURS_KEPT + 29)
        );
        // Too old to keep: not recorded.
        req(&mut h, H0, false, None);
        assert_eq!(h.model_hours.len() as u64, HOURS_KEPT);
        assert!(h.model_hours.iter().all(|x| x.answered == 1));
        // Stored objects from before hours existed still read; hours survive a round trip.
        let old: ModelHealth = serde_json::from_str(r#"{"routes":{},"model_buckets":[]}"#).unwrap();
        assert!(old.model_hours.is_empty());
        let back: ModelHealth = serde_json::from_str(&serde_json::to_string(&h).unwrap()).unwrap();
        assert_eq!(back.model_hours, h.model_hours);
        // Hours are measurements: a reset keeps them, a snapshot (what isolates cache) has none.
        let mut reset = h.clone();
        reset.reset();
        assert_eq!(reset.model_hours, h.model_hours);
        assert!(h.snapshot().model_hours.is_empty());
    }

    #[test]
    fn last_hours_fills_the_gaps_up_to_now() {
        let mut h = ModelHealth::default();
        req(&mut h, H0 - 30 * HOUR_MS, false, None); // before the window
        req(&mut h, H0 - 2 * HOUR_MS, false, None);
        req(&mut h, H0 + 5 * MIN, true, None);
        let now = H0 + 20 * MIN;
        let day = last_hours(&h.model_hours, 24, now);
        assert_eq!(day.len(), 24);
        assert_eq!(day.first().map(Hour::start_ms), Some(H0 - 23 * HOUR_MS));
        assert_eq!(day.last().map(Hour::start_ms), Some(H0), "the current hour is the last");
        let counts: Vec<(u32, u32)> = day.iter().map(|x| (x.requests, x.answered)).collect();
        let mut want = vec![(0, 0); 24];
        want[21] = (1, 0);
        want[23] = (1, 1);
        assert_eq!(counts, want);
        assert_eq!(last_hours(&[], 3, 0).len(), 1, "no hours before the epoch");
    }

    #[test]
    fn a_routes_last_hour_in_five_minute_points() {
        let cfg = HealthConfig::default();
        let mut h = ModelHealth::default();
        let now = H0 + 59 * MIN + 30_000; // the hour [10:00, 11:00) is the chart
        let at = |m: u64| H0 + m * MIN;
        let mut answer = |m: u64, ttfb: u64| {
            let mut o = Observation::at("r", "a", AttemptOutcome::Success, at(m));
            o.ttfb_ms = Some(ttfb);
            h.observe(&o, &cfg);
        };
        answer(0, 400);
        answer(4, 600);
        answer(57, 900);
        let fail = Observation::at(
            "r",
            "a",
            AttemptOutcome::Failure(crate::classify::FailureClass::Timeout),
            at(58),
        );
        h.observe(&fail, &cfg);
        let chart = h.route_chart("r", now);
        assert_eq!(chart.len() as u64, CHART_POINTS);
        assert_eq!(chart[0].start_ms, H0);
        assert_eq!(chart[11].start_ms, H0 + 55 * MIN);
        assert_eq!(
            (chart[0].answered, chart[0].success_rate, chart[0].median_ttfb_ms),
            (2, Some(1.0), Some(500))
        );
        assert_eq!(
            (
                chart[11].answered,
                chart[11].failed,
                chart[11].success_rate,
                chart[11].median_ttfb_ms
            ),
            (1, 1, Some(0.5), Some(900))
        );
        assert!(chart[1..11]
            .iter()
            .all(|p| p.success_rate.is_none() && p.median_ttfb_ms.is_none()));
        // Five minutes later the first point has left the hour.
        let later = h.route_chart("r", now + 5 * MIN);
        assert_eq!(later[0].start_ms, H0 + 5 * MIN);
        assert!(later.iter().all(|p| p.median_ttfb_ms != Some(500)));
        let none = h.route_chart("missing", now);
        assert_eq!(none.len() as u64, CHART_POINTS);
        assert!(none
            .iter()
            .all(|p| p.answered + p.failed == 0 && p.success_rate.is_none()));
    }
}
