//! The record of one request (SPEC §14): the generation and every attempt at a route, what was
//! delivered, and what it cost. Built by the driver, stored by `src/store.rs`, shown by
//! `GET /v1/generation`.

use serde::Serialize;

use crate::catalog::Price;
use crate::classify::FailureClass;
use crate::dialect::Usage;

/// Characters per token when the upstream gave no count (SPEC §7).
pub const CHARS_PER_TOKEN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A route answered and the answer reached its end.
    Answered,
    /// A route committed but the stream broke (error frame sent).
    Broken,
    /// No route answered.
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Broken => "broken",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptRecord {
    pub ordinal: u32,
    pub route: String,
    pub provider: String,
    /// `answered` for the committed route, else `failed`.
    pub outcome: &'static str,
    pub failure_class: Option<FailureClass>,
    pub http_status: Option<u16>,
    /// Time to the first content (streams) or the whole body (non-stream), from the attempt's start.
    pub ttfb_ms: Option<u64>,
    pub duration_ms: u64,
    pub delivered_output: u64,
    pub cost_micros: i64,
    pub extra_try: bool,
    /// Malformed events dropped after commit.
    pub malformed_events: u32,
    /// The upstream's message for a failure, secrets redacted, at most 500 characters.
    pub message: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GenerationRecord {
    pub id: String,
    pub account_id: String,
    pub key_id: String,
    pub model: String,
    pub api: &'static str,
    pub stream: bool,
    pub outcome: Outcome,
    pub route: Option<String>,
    pub provider: Option<String>,
    pub usage: Option<Usage>,
    pub estimated: bool,
    pub delivered_output: u64,
    pub error_code: Option<String>,
    pub total_cost_micros: i64,
    pub created_at_ms: u64,
    pub duration_ms: u64,
    /// How the hold was placed: `fast` (not awaited) or `awaited` (SPEC §11).
    pub hold_path: Option<&'static str>,
    pub attempts: Vec<AttemptRecord>,
}

/// The usage to record for a committed answer: the upstream's count when it gave one, else an
/// estimate from the output received (≈ 4 characters per token, never above `max_tokens`) and
/// from the request size for input — flagged `estimated`.
pub fn settle_usage(reported: Option<Usage>, output_chars: usize, max_tokens: u64, body_len: usize) -> (Usage, bool) {
    match reported {
        Some(u) => (u, false),
        None => {
            let output = (output_chars.div_ceil(CHARS_PER_TOKEN) as u64).min(max_tokens);
            let input = (body_len / 3) as u64;
            (
                Usage {
                    input_tokens: input,
                    output_tokens: output,
                },
                true,
            )
        }
    }
}

/// Cost of `usage` at `price`, in micro-dollars. A price in USD per million tokens is exactly
/// micro-dollars per token; the total is rounded to the nearest micro-dollar.
pub fn cost_micros(usage: Usage, price: &Price) -> i64 {
    let cost = usage.input_tokens as f64 * price.input_per_mtok + usage.output_tokens as f64 * price.output_per_mtok;
    cost.round() as i64
}

/// Truncates an upstream message for the log.
pub fn short_message(message: &str) -> String {
    message.chars().take(500).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_is_reported_or_estimated_within_max_tokens() {
        let u = Usage {
            input_tokens: 10,
            output_tokens: 20,
        };
        assert_eq!(settle_usage(Some(u), 999, 5, 30), (u, false));
        assert_eq!(
            settle_usage(None, 41, 1000, 30),
            (
                Usage {
                    input_tokens: 10,
                    output_tokens: 11
                },
                true
            )
        );
        assert_eq!(
            settle_usage(None, 4000, 50, 30).0.output_tokens,
            50,
            "never above max_tokens"
        );
    }

    #[test]
    fn cost_is_usage_times_price_in_micros() {
        let p = Price {
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
        };
        assert_eq!(
            cost_micros(
                Usage {
                    input_tokens: 1000,
                    output_tokens: 100
                },
                &p
            ),
            4_500
        );
        let cheap = Price {
            input_per_mtok: 0.15,
            output_per_mtok: 0.6,
        };
        assert_eq!(
            cost_micros(
                Usage {
                    input_tokens: 3,
                    output_tokens: 1
                },
                &cheap
            ),
            1,
            "0.45 + 0.6 rounds to 1"
        );
    }
}
