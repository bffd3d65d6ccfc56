//! Holds and settlement math (SPEC §11), in integer micro-dollars.
//!
//! Before the first attempt a request holds the most it could cost; afterwards it is charged what
//! was delivered at the serving route's price ([`crate::generation::cost_micros`]). This module
//! decides how much to hold, which routes a tight balance can still afford, and whether an isolate
//! may admit a request on its balance snapshot without waiting for the hold (the fast path).

use crate::catalog::{Policy, Price};

/// Tokens per byte of request body for the input estimate (SPEC §11: body bytes / 3).
pub const BODY_BYTES_PER_TOKEN: usize = 3;

/// The input tokens a request's body can hold (SPEC §11: body bytes / 3).
pub fn body_input_tokens(body_len: usize) -> u64 {
    (body_len / BODY_BYTES_PER_TOKEN) as u64
}

/// The most one route could cost for this request: `input_tokens` at its dearest input price
/// (cache writes included, SPEC §17) plus `max_tokens` at its output price, rounded up to the
/// micro-dollar.
pub fn route_max_cost(input_tokens: u64, max_tokens: u64, price: &Price) -> i64 {
    max_cost(input_tokens, max_tokens, price.max_input(), price.output_per_mtok)
}

fn max_cost(input_tokens: u64, max_tokens: u64, input_per_mtok: f64, output_per_mtok: f64) -> i64 {
    // USD per million tokens is exactly micro-dollars per token.
    (input_tokens as f64 * input_per_mtok + max_tokens as f64 * output_per_mtok).ceil() as i64
}

/// What to hold before the first attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldPlan {
    /// Hold `amount`; `keep` lists the candidate routes (indexes) the balance covers — all of them
    /// unless the balance only covers cheaper ones.
    Hold { amount: i64, keep: Vec<usize> },
    /// Not even the cheapest candidate fits: 402.
    Insufficient,
}

/// A candidate route as the hold sees it: its index, its token prices and what its priced server
/// tools add for the uses the request allows (SPEC §21; 0 without such tools).
pub type HoldCandidate<'a> = (usize, &'a Price, i64);

/// Plans the hold over the candidate routes: `input_tokens` (the body's, or the model's context
/// window when the input is not all in the body) at the highest input price among them,
/// `max_tokens` at the highest output price, and the dearest of their tool costs; if `available`
/// cannot cover that, only the routes whose own maximum fits are kept and the hold is the maximum
/// over those.
pub fn plan_hold(available: i64, candidates: &[HoldCandidate], input_tokens: u64, max_tokens: u64) -> HoldPlan {
    let amount_for = |routes: &[HoldCandidate]| {
        let input = routes.iter().map(|(_, p, _)| p.max_input()).fold(0.0, f64::max);
        let output = routes.iter().map(|(_, p, _)| p.output_per_mtok).fold(0.0, f64::max);
        let tools = routes.iter().map(|(_, _, t)| *t).max().unwrap_or(0);
        max_cost(input_tokens, max_tokens, input, output).saturating_add(tools)
    };
    let all = amount_for(candidates);
    if all <= available {
        return HoldPlan::Hold {
            amount: all,
            keep: candidates.iter().map(|(i, _, _)| *i).collect(),
        };
    }
    let fitting: Vec<HoldCandidate> = candidates
        .iter()
        .filter(|(_, p, tools)| route_max_cost(input_tokens, max_tokens, p).saturating_add(*tools) <= available)
        .copied()
        .collect();
    if fitting.is_empty() {
        return HoldPlan::Insufficient;
    }
    HoldPlan::Hold {
        amount: amount_for(&fitting),
        keep: fitting.iter().map(|(i, _, _)| *i).collect(),
    }
}

/// An isolate's last read of one account's available balance, and what it admitted on it since.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceSnapshot {
    pub available: i64,
    pub read_at_ms: u64,
    /// Holds admitted on the fast path since the read (those carried over included).
    pub admitted: i64,
    /// Fast holds of this account whose rows D1 may not have yet, whatever snapshot admitted
    /// them: a newer read does not see them, so they are carried into it (SPEC §18).
    pub unwritten: i64,
}

impl BalanceSnapshot {
    pub fn new(available: i64, read_at_ms: u64) -> BalanceSnapshot {
        BalanceSnapshot {
            available,
            read_at_ms,
            admitted: 0,
            unwritten: 0,
        }
    }

    /// A fresh read of the balance: the fast holds still unwritten count as admitted on it, as
    /// D1's `available` does not hold them yet.
    pub fn renewed(&self, available: i64, read_at_ms: u64) -> BalanceSnapshot {
        BalanceSnapshot {
            available,
            read_at_ms,
            admitted: self.unwritten,
            unwritten: self.unwritten,
        }
    }

    /// A fast hold of `amount` reached D1 (or settlement took it over).
    pub fn written(&mut self, amount: i64) {
        self.unwritten = self.unwritten.saturating_sub(amount).max(0);
    }

    /// Whether the snapshot is young enough to plan with.
    pub fn fresh(&self, now_ms: u64, policy: &Policy) -> bool {
        now_ms.saturating_sub(self.read_at_ms) < policy.balance_snapshot_ms
    }

    /// The fast path (SPEC §11): admits `amount` without waiting for the hold if the snapshot is
    /// fresh and everything admitted on it stays within `optimistic_hold_fraction` of its
    /// available balance. Records the admission.
    pub fn admit_fast(&mut self, amount: i64, now_ms: u64, policy: &Policy) -> bool {
        if !self.fresh(now_ms, policy) || policy.optimistic_hold_fraction <= 0.0 {
            return false;
        }
        let allowance = (self.available.max(0) as f64 * policy.optimistic_hold_fraction).floor() as i64;
        if self.admitted.saturating_add(amount) > allowance {
            return false;
        }
        self.admitted += amount;
        self.unwritten = self.unwritten.saturating_add(amount);
        true
    }
}

/// How long a hold may stay open before the sweeper releases it: longer than any request can
/// live (the pre-content budget, the stream cap and the disconnect grace), plus a margin.
pub fn hold_ttl_ms(policy: &Policy) -> u64 {
    const MARGIN_MS: u64 = 60_000;
    policy
        .pre_content_budget_ms
        .saturating_add(policy.stream_cap_ms)
        .saturating_add(policy.disconnect_grace_ms)
        .saturating_add(MARGIN_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn price(i: f64, o: f64) -> Price {
        Price::per_mtok(i, o)
    }

    #[test]
    fn max_cost_is_body_thirds_and_max_tokens_at_price_rounded_up() {
        // 300 bytes → 100 input tokens × 3 µ$ + 50 × 15 µ$ = 1050 µ$.
        assert_eq!(body_input_tokens(300), 100);
        assert_eq!(route_max_cost(100, 50, &price(3.0, 15.0)), 1050);
        // Fractions round up: 1 token × 0.15 + 1 × 0.6 = 0.75 → 1 µ$.
        assert_eq!(route_max_cost(1, 1, &price(0.15, 0.6)), 1);
        assert_eq!(route_max_cost(0, 0, &price(1.0, 1.0)), 0);
    }

    #[test]
    fn input_is_held_at_the_dearest_input_price_cache_writes_included() {
        // SPEC §17: every body token may be a 1-hour cache write.
        let cached = Price {
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
            cache_write_1h_per_mtok: Some(6.0),
            ..price(3.0, 15.0)
        };
        assert_eq!(route_max_cost(100, 50, &cached), 600 + 750);
        assert_eq!(
            plan_hold(1_000_000, &[(0, &price(3.0, 15.0), 0), (1, &cached, 0)], 100, 50),
            HoldPlan::Hold {
                amount: 1350,
                keep: vec![0, 1]
            }
        );
    }

    #[test]
    fn holds_the_highest_prices_among_candidates() {
        let (a, b) = (price(1.0, 10.0), price(5.0, 2.0));
        // Highest input (5) and highest output (10): 100 × 5 + 100 × 10.
        assert_eq!(
            plan_hold(1_000_000, &[(0, &a, 0), (1, &b, 0)], 100, 100),
            HoldPlan::Hold {
                amount: 1500,
                keep: vec![0, 1]
            }
        );
    }

    #[test]
    fn a_tight_balance_keeps_only_routes_that_fit() {
        let (dear, cheap) = (price(10.0, 30.0), price(1.0, 2.0));
        // dear: 100×10 + 100×30 = 4000; cheap: 100 + 200 = 300.
        assert_eq!(
            plan_hold(1000, &[(0, &dear, 0), (1, &cheap, 0)], 100, 100),
            HoldPlan::Hold {
                amount: 300,
                keep: vec![1]
            }
        );
        assert_eq!(
            plan_hold(299, &[(0, &dear, 0), (1, &cheap, 0)], 100, 100),
            HoldPlan::Insufficient
        );
        assert_eq!(plan_hold(-5, &[(0, &cheap, 0)], 100, 100), HoldPlan::Insufficient);
    }

    #[test]
    fn priced_tools_add_the_dearest_routes_uses_to_the_hold() {
        // SPEC §21: 100 + 200 µ$ of tokens; route 0's three searches cost 30 000 µ$, route 1's 15 000.
        let p = price(1.0, 2.0);
        assert_eq!(
            plan_hold(1_000_000, &[(0, &p, 30_000), (1, &p, 15_000)], 100, 100),
            HoldPlan::Hold {
                amount: 30_300,
                keep: vec![0, 1]
            }
        );
        // A balance that covers only the cheaper searches keeps only that route.
        assert_eq!(
            plan_hold(20_000, &[(0, &p, 30_000), (1, &p, 15_000)], 100, 100),
            HoldPlan::Hold {
                amount: 15_300,
                keep: vec![1]
            }
        );
        assert_eq!(plan_hold(15_299, &[(0, &p, 15_000)], 100, 100), HoldPlan::Insufficient);
    }

    #[test]
    fn fast_holds_not_yet_written_carry_into_the_next_read() {
        // SPEC §18: a new read of the balance does not see fast holds D1 has not written yet.
        let policy = Policy::default(); // 1 %
        let mut snap = BalanceSnapshot::new(1_000_000, 0);
        assert!(snap.admit_fast(8_000, 1_000, &policy));
        let mut next = snap.renewed(1_000_000, 2_000);
        assert_eq!(next.admitted, 8_000, "still counted against the fraction");
        assert!(!next.admit_fast(3_000, 2_000, &policy), "8 000 + 3 000 is past 1 %");
        next.written(8_000);
        let mut after = next.renewed(992_000, 3_000);
        assert_eq!(after.admitted, 0, "written: D1's read holds it now");
        assert!(after.admit_fast(3_000, 3_000, &policy));
    }

    #[test]
    fn the_fast_path_stays_within_the_fraction_of_a_fresh_snapshot() {
        let policy = Policy::default(); // 1 %, 5 s
        let mut snap = BalanceSnapshot::new(1_000_000, 0);
        assert!(snap.admit_fast(6_000, 1_000, &policy));
        assert!(snap.admit_fast(4_000, 1_000, &policy), "exactly 1 % is allowed");
        assert!(
            !snap.admit_fast(1, 1_000, &policy),
            "past 1 % the request waits for its hold"
        );
        let mut snap = BalanceSnapshot::new(1_000_000, 0);
        assert!(!snap.admit_fast(10, 5_000, &policy), "a stale snapshot never admits");
        let mut small = BalanceSnapshot::new(50_000, 0);
        assert!(!small.admit_fast(2_000, 10, &policy), "a low balance waits");
        let mut off = BalanceSnapshot::new(1_000_000, 0);
        let none = Policy {
            optimistic_hold_fraction: 0.0,
            ..Policy::default()
        };
        assert!(!off.admit_fast(1, 10, &none), "fraction 0 always waits");
    }

    #[test]
    fn holds_outlive_any_request() {
        let p = Policy::default();
        assert_eq!(hold_ttl_ms(&p), 600_000 + 3_600_000 + 15_000 + 60_000);
    }
}
