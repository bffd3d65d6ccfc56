//! A store as a single FIFO server: every Durable Object instance and every D1 database serves one
//! call at a time, in arrival order, each for its service time. A call that arrives to a backlog
//! longer than the store's overload limit is refused at once (a Durable Object's "overloaded", D1's
//! "too many queued") and costs nothing. A call the caller stopped waiting for is still served.
//!
//! Each server counts what it was offered and what it did inside the measured window: calls, the
//! work they asked for (`demand`: it may exceed the window — a saturated store), the time it was
//! busy, and how long each call queued.

/// Whether a call was taken, and when it is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// Served from `start` to `finish` (µs).
    Served {
        start: u64,
        finish: u64,
    },
    Refused,
}

/// The measured window, µs: [from, to).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub from: u64,
    pub to: u64,
}

impl Window {
    pub fn contains(&self, t: u64) -> bool {
        t >= self.from && t < self.to
    }

    pub fn seconds(&self) -> f64 {
        self.to.saturating_sub(self.from) as f64 / 1e6
    }

    /// How much of [a, b) falls inside the window, µs.
    fn overlap(&self, a: u64, b: u64) -> u64 {
        b.min(self.to).saturating_sub(a.max(self.from))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Server {
    busy_until: u64,
    /// Every call offered, ever.
    pub offered: u64,
    /// Taken and served (whenever).
    pub served: u64,
    pub refused: u64,
    /// Calls arriving inside the window.
    pub window_calls: u64,
    pub window_refused: u64,
    /// Work asked for by the calls arriving inside the window, µs.
    pub window_demand_us: u64,
    /// Time spent serving inside the window, µs.
    pub window_busy_us: u64,
    /// How long each call arriving inside the window queued before its service, µs.
    pub waits_us: Vec<u32>,
}

impl Server {
    /// A call arriving at `now` that takes `service_us`; refused when the backlog it finds is longer
    /// than `backlog_limit_us`.
    pub fn offer(&mut self, now: u64, service_us: u64, backlog_limit_us: u64, window: &Window) -> Offer {
        self.offered += 1;
        let inside = window.contains(now);
        if inside {
            self.window_calls += 1;
            self.window_demand_us += service_us;
        }
        let start = self.busy_until.max(now);
        if start - now > backlog_limit_us {
            self.refused += 1;
            if inside {
                self.window_refused += 1;
            }
            return Offer::Refused;
        }
        let finish = start + service_us;
        self.busy_until = finish;
        self.served += 1;
        self.window_busy_us += window.overlap(start, finish);
        if inside {
            self.waits_us.push(u32::try_from(start - now).unwrap_or(u32::MAX));
        }
        Offer::Served { start, finish }
    }

    /// The `q` quantile (0–1) of the queueing times in the window, ms (0 with none).
    pub fn wait_quantile_ms(&self, q: f64) -> f64 {
        quantile(&self.waits_us, q) as f64 / 1e3
    }
}

/// The `q` quantile of `values` (nearest rank; 0 for none).
pub fn quantile(values: &[u32], q: f64) -> u32 {
    if values.is_empty() {
        return 0;
    }
    let mut v = values.to_vec();
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    let (_, nth, _) = v.select_nth_unstable(rank);
    *nth
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_queue_in_arrival_order_and_a_deep_backlog_refuses() {
        let w = Window { from: 0, to: 10_000 };
        let mut s = Server::default();
        assert_eq!(
            s.offer(0, 1_000, 5_000, &w),
            Offer::Served {
                start: 0,
                finish: 1_000
            }
        );
        assert_eq!(
            s.offer(500, 1_000, 5_000, &w),
            Offer::Served {
                start: 1_000,
                finish: 2_000
            }
        );
        assert_eq!(
            s.offer(3_000, 1_000, 5_000, &w),
            Offer::Served {
                start: 3_000,
                finish: 4_000
            }
        );
        for _ in 0..5 {
            s.offer(3_000, 1_000, 5_000, &w);
        }
        assert_eq!(
            s.offer(3_000, 1_000, 5_000, &w),
            Offer::Refused,
            "6 ms of backlog > 5 ms"
        );
        assert_eq!((s.offered, s.served, s.refused), (9, 8, 1));
        assert_eq!(s.window_busy_us, 8_000);
        assert_eq!(s.window_demand_us, 9_000);
        assert_eq!(quantile(&s.waits_us, 1.0), 5_000);
        assert_eq!(quantile(&s.waits_us, 0.5), 1_000);
    }
}
