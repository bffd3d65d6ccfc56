//! The record of one request (SPEC §14): the generation and every attempt at a route, what was
//! delivered, and what it cost — and the route-health observations the same facts make.
//!
//! A [`Journal`] is opened when the hold is placed, takes each attempt's result once
//! ([`Journal::attempt`] builds the attempt record and the health observation from the same
//! value), and is closed by [`Journal::finish`] for every ending: a whole body, a stream that ended
//! or broke, or no route answering. The driver in `src/` calls these and never patches fields;
//! `src/store.rs` stores the record and `GET /v1/generation` shows it.

use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::catalog::Price;
use crate::classify::{Blame, FailureClass, Verdict};
use crate::dialects::{Reported, Usage};
use crate::error::ApiError;
use crate::health::{AttemptOutcome, Observation, RequestObservation};
use crate::tools::{ServerTool, ToolCharge, ToolPrices, ToolTariff};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// A route answered and the answer reached its end.
    Answered,
    /// A route committed but the stream broke (error frame sent).
    Broken,
    /// No route answered.
    Failed,
    /// Refused before any route was tried (bad input, unknown model, no balance, no route).
    Rejected,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Answered => "answered",
            Outcome::Broken => "broken",
            Outcome::Failed => "failed",
            Outcome::Rejected => "rejected",
        }
    }
}

/// How one attempt ended, as the record shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The route committed (its answer is the request's).
    Answered,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttemptRecord {
    pub ordinal: u32,
    pub route: String,
    pub provider: String,
    pub outcome: AttemptStatus,
    pub failure_class: Option<FailureClass>,
    pub http_status: Option<u16>,
    /// Time to the first content (streams) or the whole body (non-stream), from the attempt's start.
    pub ttfb_ms: Option<u64>,
    pub duration_ms: u64,
    pub delivered_output: u64,
    pub cost_micros: i64,
    pub extra_try: bool,
    /// The route's account was in cooldown and no other route was left (SPEC §8, §9); absent in
    /// records from before.
    #[serde(default)]
    pub last_resort: bool,
    /// Malformed events dropped after commit.
    pub malformed_events: u32,
    /// The upstream's message for a failure, secrets redacted, at most 500 characters.
    pub message: Option<String>,
    /// The dialect the route was sent the request in (SPEC §19); absent in records from before.
    #[serde(default)]
    pub api: Option<Api>,
    /// The request was translated from the client's dialect into `api`.
    #[serde(default)]
    pub translated: bool,
    /// Client fields left out in translation because they have no effect on the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
}

impl AttemptRecord {
    /// The attempt failed for a reason that is the route's or its upstream account's (SPEC §4
    /// "counts against": a route or an account) — not the client's request, not a request that
    /// could not be sent (`unable`), not a client that left.
    ///
    /// The public record (SPEC §14, §18a) counts a request only when a route answered it, or
    /// when it went unanswered after such a failure: the client's own errors, requests the
    /// gateway refused itself (untranslatable fields, limits, 402) and cancellations are not in
    /// `/status`, `/api/health/models` or the hourly history — whichever error they ended with.
    pub fn failed_by_route(&self) -> bool {
        self.failure_class.is_some_and(|c| c.blame() != Blame::Nothing)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerationRecord {
    pub id: String,
    pub account_id: String,
    /// The D1 database that keeps the account's money (`crate::ledgers`): where the record is
    /// settled. 0 in records from before ledgers were sharded, which is where those accounts are.
    #[serde(default)]
    pub ledger: u8,
    pub key_id: String,
    pub model: String,
    pub api: Api,
    pub stream: bool,
    pub outcome: Outcome,
    pub route: Option<String>,
    pub provider: Option<String>,
    pub usage: Option<Usage>,
    pub estimated: bool,
    /// The upstream reported more than the request could cause; the usage was cut (SPEC §17).
    #[serde(default)]
    pub usage_clamped: bool,
    /// The id a Responses upstream gave the answer: a later `previous_response_id` naming it goes
    /// only to `route` (SPEC §17).
    #[serde(default)]
    pub upstream_response_id: Option<String>,
    pub delivered_output: u64,
    pub error_code: Option<String>,
    pub total_cost_micros: i64,
    /// What the delivered usage cost beyond the hold (an upstream that ignored the limit, or
    /// surcharges): recorded and logged, never charged (SPEC §11).
    pub overrun_micros: i64,
    pub created_at_ms: u64,
    pub duration_ms: u64,
    /// How the hold was placed: `fast` (not awaited) or `awaited` (SPEC §11).
    pub hold_path: Option<String>,
    pub attempts: Vec<AttemptRecord>,
    /// Each priced server tool the answer used: its uses and their cost, part of
    /// `total_cost_micros` (SPEC §21).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub server_tools: Vec<ToolCharge>,
}

/// The usage to record for a committed answer: the upstream's counts where it gave them, else
/// estimates — output from what was relayed (≈ 4 characters per token), input from the request
/// size — flagged `estimated`. Counts the request cannot have caused are cut to what it could
/// (SPEC §17): output to `max_tokens` (the held output limit, every completion), input to
/// `max_input_tokens`, cache parts to the input they are part of; the third value says so.
pub fn settle_usage(reported: Reported, output_chars: usize, limits: UsageLimits) -> (Usage, bool, bool) {
    let estimated = reported.input_tokens.is_none() || reported.output_tokens.is_none();
    let input = reported
        .input_tokens
        .unwrap_or((limits.body_len / crate::billing::BODY_BYTES_PER_TOKEN) as u64);
    let output = reported
        .output_tokens
        .unwrap_or_else(|| output_chars.div_ceil(crate::dialects::CHARS_PER_TOKEN) as u64);
    let mut clamped = false;
    let mut cut = |value: u64, most: u64| {
        clamped |= value > most;
        value.min(most)
    };
    let input_tokens = cut(input, limits.max_input_tokens);
    let output_tokens = if reported.output_tokens.is_some() {
        cut(output, limits.max_tokens)
    } else {
        output.min(limits.max_tokens) // an estimate over the limit is the estimate's fault, not the upstream's
    };
    let mut left = input_tokens;
    let mut part = |value: Option<u64>| {
        let v = cut(value.unwrap_or(0), left);
        left -= v;
        v
    };
    let cache_read_tokens = part(reported.cache_read_tokens);
    let cache_write_tokens = part(reported.cache_write_tokens);
    let cache_write_1h_tokens = part(reported.cache_write_1h_tokens);
    let usage = Usage {
        input_tokens,
        output_tokens,
        cache_read_tokens,
        cache_write_tokens,
        cache_write_1h_tokens,
    };
    (usage, estimated, clamped)
}

/// The most a request can have caused: what [`settle_usage`] cuts reported counts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageLimits {
    /// The held output limit, every completion included.
    pub max_tokens: u64,
    /// The route's context window.
    pub max_input_tokens: u64,
    /// The request body's size, for an input estimate.
    pub body_len: usize,
}

/// Cost of `usage` at `price`, in micro-dollars (SPEC §17): uncached input, cache reads, cache
/// writes and output each at their own price. A price in USD per million tokens is exactly
/// micro-dollars per token; the total is rounded to the nearest micro-dollar. The one formula for
/// the ledger's charge and the `cost` a client sees.
pub fn cost_micros(usage: Usage, price: &Price) -> i64 {
    let cost = usage.uncached_input_tokens() as f64 * price.input_per_mtok
        + usage.cache_read_tokens as f64 * price.cache_read()
        + usage.cache_write_tokens as f64 * price.cache_write()
        + usage.cache_write_1h_tokens as f64 * price.cache_write_1h()
        + usage.output_tokens as f64 * price.output_per_mtok;
    cost.round() as i64
}

/// What a committed answer is charged from (SPEC §11): the serving route's price, the hold that
/// caps the charge, and what bounds the usage. The ledger's charge and the `cost` a client sees in
/// its usage both come from [`Tariff::settle`].
#[derive(Debug, Clone, PartialEq)]
pub struct Tariff {
    pub price: Price,
    pub held_micros: Option<i64>,
    pub limits: UsageLimits,
    /// The request's priced server tools on the route (SPEC §21); none for most requests.
    pub tools: ToolTariff,
}

/// A committed answer's charge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub usage: Usage,
    pub estimated: bool,
    /// A reported count was more than the request could cause and was cut (SPEC §17).
    pub clamped: bool,
    /// What is charged: the delivered cost, cut to the hold.
    pub cost_micros: i64,
    /// What the upstream delivered beyond the hold (recorded, not charged).
    pub overrun_micros: i64,
    /// Each priced server tool's uses and their cost, part of `cost_micros` (SPEC §21).
    pub tools: Vec<ToolCharge>,
}

impl Tariff {
    /// The charge for what was delivered: the upstream's usage (else an estimate) at the route's
    /// price, never above the hold.
    pub fn settle(&self, reported: Reported, output_chars: usize) -> Charge {
        let (usage, estimated, clamped) = settle_usage(reported, output_chars, self.limits);
        let (tools, tools_clamped) = self.tools.settle(&reported.tool_uses);
        let delivered = cost_micros(usage, &self.price)
            .saturating_add(tools.iter().map(|t| t.cost_micros).fold(0, i64::saturating_add));
        let cost = self.held_micros.map_or(delivered, |held| delivered.min(held));
        Charge {
            usage,
            estimated,
            clamped: clamped || tools_clamped,
            cost_micros: cost,
            overrun_micros: delivered - cost,
            tools,
        }
    }
}

/// Truncates an upstream message for the log.
pub fn short_message(message: &str) -> String {
    message.chars().take(500).collect()
}

/// What the record needs to know when it is opened.
pub struct Opening {
    pub id: String,
    pub account_id: String,
    /// The account's ledger (`crate::ledgers`).
    pub ledger: u8,
    pub key_id: String,
    pub model: String,
    pub api: Api,
    pub stream: bool,
    pub started_ms: u64,
    /// How the hold was placed (`None`: rejected before any hold).
    pub hold_path: Option<&'static str>,
    /// The output limit held for (the estimate never exceeds it).
    pub max_tokens: u64,
    /// Request body size, the input estimate's basis.
    pub body_len: usize,
    /// The hold's amount: the charge never exceeds it.
    pub held_micros: Option<i64>,
    /// The priced server tools' uses the hold covers, and whether they are one per answer
    /// (SPEC §21).
    pub held_tools: Vec<(ServerTool, u64)>,
    pub tools_per_answer: bool,
}

/// One attempt's route, as the driver picked it.
pub struct AttemptTarget {
    pub route: String,
    pub provider: String,
    /// The route's upstream account (SPEC §9).
    pub account: String,
    pub price: Price,
    /// The route's context window: no answer of it can have read more input (SPEC §17).
    pub context_window: u64,
    pub extra_try: bool,
    pub probe: bool,
    pub last_resort: bool,
    /// The route's `verify` (SPEC §8a), carried into its health observation.
    pub verify: bool,
    pub started_ms: u64,
    /// The dialect the route is sent the request in, and whether that is a translation.
    pub api: Api,
    pub translated: bool,
    /// Client fields left out in translation (no effect on the answer).
    pub dropped: Vec<String>,
    /// The route's prices for the provider's tools (SPEC §21).
    pub tool_prices: ToolPrices,
}

/// How one attempt ended.
pub enum AttemptResult {
    /// The route produced content (or a whole answer) and is the request's.
    Committed { http_status: u16 },
    /// The route failed before committing; the message is already free of secrets.
    Failed { verdict: Verdict, http_status: Option<u16> },
}

/// What a committed route delivered, for the charge.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// The upstream's counts, where it gave them.
    pub usage: Reported,
    /// Characters of output relayed (the estimate's basis when usage never came).
    pub output_chars: usize,
    /// Malformed events dropped after commit.
    pub malformed: u32,
    /// Why a committed stream ended badly (error frame sent), if it did.
    pub broken: Option<String>,
    /// The upstream's id of the answer (Responses: remembered, so a request continuing it goes
    /// to the same route, SPEC §17).
    pub response_id: Option<String>,
}

/// How a request ended.
pub enum Ending<'a> {
    /// A route committed and this is what it delivered.
    Delivered(Delivery),
    /// No answer reached the client. `cancelled`: the client left before one did.
    Failed { error: &'a ApiError, cancelled: bool },
    /// Refused before any route was tried: recorded, never counted against the model.
    Rejected(&'a ApiError),
}

/// The record of one request while it runs.
pub struct Journal {
    record: GenerationRecord,
    observations: Vec<Observation>,
    max_tokens: u64,
    body_len: usize,
    held_micros: Option<i64>,
    /// The committed attempt's price, context window and start, and whether it was translated.
    committed: Option<(Price, u64, u64, bool)>,
    /// The request's priced tools: the uses held, and the committed route's prices for them.
    tools: ToolTariff,
}

/// A finished request: the generation to settle and store, and what route health learns from it.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    pub record: GenerationRecord,
    pub observations: Vec<Observation>,
    pub request: RequestObservation,
}

impl Journal {
    pub fn open(o: Opening) -> Journal {
        Journal {
            record: GenerationRecord {
                id: o.id,
                account_id: o.account_id,
                ledger: o.ledger,
                key_id: o.key_id,
                model: o.model,
                api: o.api,
                stream: o.stream,
                outcome: Outcome::Failed,
                route: None,
                provider: None,
                usage: None,
                estimated: false,
                usage_clamped: false,
                upstream_response_id: None,
                delivered_output: 0,
                error_code: None,
                total_cost_micros: 0,
                overrun_micros: 0,
                created_at_ms: o.started_ms,
                duration_ms: 0,
                hold_path: o.hold_path.map(str::to_string),
                attempts: Vec::new(),
                server_tools: Vec::new(),
            },
            observations: Vec::new(),
            max_tokens: o.max_tokens,
            body_len: o.body_len,
            held_micros: o.held_micros,
            committed: None,
            tools: ToolTariff {
                held: o.held_tools,
                prices: ToolPrices::new(),
                per_answer: o.tools_per_answer,
            },
        }
    }

    /// Records one attempt, ended at `now_ms`: its line in the record and its route-health
    /// observation, from the same facts. Returns the observation (the isolate applies it to its
    /// health snapshot at once).
    pub fn attempt(&mut self, target: AttemptTarget, result: AttemptResult, now_ms: u64) -> &Observation {
        let elapsed = now_ms.saturating_sub(target.started_ms);
        let (status, ttfb_ms, http_status, outcome, failure, retry_after_ms, provoked) = match result {
            AttemptResult::Committed { http_status } => {
                self.record.route = Some(target.route.clone());
                self.record.provider = Some(target.provider.clone());
                self.tools.prices = target.tool_prices.clone();
                self.committed = Some((
                    target.price.clone(),
                    target.context_window,
                    target.started_ms,
                    target.translated,
                ));
                (
                    AttemptStatus::Answered,
                    Some(elapsed),
                    Some(http_status),
                    AttemptOutcome::Success,
                    None,
                    None,
                    false,
                )
            }
            AttemptResult::Failed { verdict, http_status } => (
                AttemptStatus::Failed,
                None,
                http_status,
                AttemptOutcome::Failure(verdict.class),
                // Only a client-caused class keeps the provider's words (SPEC §14).
                Some((
                    verdict.class,
                    verdict
                        .message
                        .as_deref()
                        .filter(|_| verdict.class.is_client_caused())
                        .map(short_message),
                )),
                verdict.retry_after_ms,
                verdict.class.provokable(http_status) || verdict.provoked,
            ),
        };
        let (failure_class, message) = failure.unzip();
        self.record.attempts.push(AttemptRecord {
            ordinal: self.record.attempts.len() as u32 + 1,
            route: target.route.clone(),
            provider: target.provider,
            outcome: status,
            failure_class,
            http_status,
            ttfb_ms,
            duration_ms: elapsed,
            delivered_output: 0,
            cost_micros: 0,
            extra_try: target.extra_try,
            last_resort: target.last_resort,
            malformed_events: 0,
            message: message.flatten(),
            api: Some(target.api),
            translated: target.translated,
            dropped: target.dropped,
        });
        self.observations.push(Observation {
            route: target.route,
            account: target.account,
            outcome,
            at_ms: now_ms,
            stream: self.record.stream,
            ttfb_ms,
            output_tokens: 0,
            duration_ms: elapsed,
            extra_try: target.extra_try,
            probe: target.probe,
            retry_after_ms,
            verify: target.verify,
            key: self.record.key_id.clone(),
            provoked,
        });
        let last = self.observations.len() - 1;
        &self.observations[last]
    }

    /// Closes the record at `now_ms`, whatever the ending: what was delivered and charged (the
    /// upstream's usage, else an estimate never above the held output limit), the outcome, and
    /// the health observations — the answering attempt's covering its whole delivery.
    /// The tariff of the committed answer (`None` before a route commits).
    pub fn tariff(&self) -> Option<Tariff> {
        self.committed.as_ref().map(|(price, context_window, _, _)| Tariff {
            price: price.clone(),
            held_micros: self.held_micros,
            limits: UsageLimits {
                max_tokens: self.max_tokens,
                max_input_tokens: *context_window,
                body_len: self.body_len,
            },
            tools: self.tools.clone(),
        })
    }

    pub fn finish(self, ending: Ending, now_ms: u64) -> Finished {
        let tariff = self.tariff();
        let Journal {
            mut record,
            mut observations,
            committed,
            ..
        } = self;
        record.duration_ms = now_ms.saturating_sub(record.created_at_ms);
        // Whether the request is in the public record: a route answered it, or no answer came
        // after a failure of a route's own (SPEC §18a). Refused before any route was tried, or the
        // client gone: never.
        let failed_by_route = record.attempts.iter().any(AttemptRecord::failed_by_route);
        let mut counted = failed_by_route;
        let attempt_started = committed.as_ref().map(|(_, _, started, _)| *started);
        // A translated answer's id is the gateway's own: no upstream keeps it to continue.
        let translated = committed.as_ref().is_some_and(|(_, _, _, translated)| *translated);
        match (ending, attempt_started, tariff) {
            (Ending::Delivered(d), Some(attempt_started), Some(tariff)) => {
                let Charge {
                    usage,
                    estimated,
                    clamped,
                    cost_micros: cost,
                    overrun_micros,
                    tools,
                } = tariff.settle(d.usage, d.output_chars);
                record.server_tools = tools;
                record.usage_clamped = clamped;
                if record.api == Api::Responses && !translated {
                    record.upstream_response_id = d.response_id.clone();
                }
                record.overrun_micros = overrun_micros;
                record.outcome = if d.broken.is_some() {
                    Outcome::Broken
                } else {
                    Outcome::Answered
                };
                record.usage = Some(usage);
                record.estimated = estimated;
                record.delivered_output = usage.output_tokens;
                record.total_cost_micros = cost;
                record.error_code = d.broken.as_ref().map(|_| "stream_broken".to_string());
                if let Some(a) = record.attempts.last_mut() {
                    a.delivered_output = usage.output_tokens;
                    a.cost_micros = cost;
                    a.malformed_events = d.malformed;
                    a.message = d.broken;
                }
                if let Some(o) = observations.last_mut() {
                    o.output_tokens = usage.output_tokens;
                    o.duration_ms = now_ms.saturating_sub(attempt_started);
                }
            }
            (Ending::Delivered(_), ..) => {
                // Nothing committed, so nothing was delivered: recorded as the internal error it is.
                record.error_code = Some(ApiError::Internal { label: "uncommitted" }.code().to_string());
            }
            (Ending::Failed { error, cancelled }, ..) => {
                counted = failed_by_route && !cancelled;
                record.error_code = Some(if cancelled { "cancelled" } else { error.code() }.to_string());
            }
            (Ending::Rejected(error), ..) => {
                counted = false;
                record.outcome = Outcome::Rejected;
                record.error_code = Some(error.code().to_string());
            }
        }
        let answered = matches!(record.outcome, Outcome::Answered | Outcome::Broken);
        let stream_ttfb_ms = if record.stream && answered {
            record.attempts.last().and_then(|a| a.ttfb_ms)
        } else {
            None
        };
        // Unanswered after provokable failures only: counted once the object holds them confirmed.
        let failures: Vec<&Observation> = observations
            .iter()
            .filter(|o| matches!(o.outcome, AttemptOutcome::Failure(c) if c.blame() != Blame::Nothing))
            .collect();
        let provoked_at = match !answered && failures.iter().all(|o| o.provoked) {
            true => failures.iter().map(|o| (o.route.clone(), o.account.clone())).collect(),
            false => Vec::new(),
        };
        let request = RequestObservation {
            at_ms: now_ms,
            answered,
            counted: answered || counted,
            stream_ttfb_ms,
            provoked_at,
        };
        Finished {
            record,
            observations,
            request,
        }
    }
}

/// The log line of an answered request, written when it ends (a stream's after its last byte):
/// ids, key, model, route, every attempt with its class, time to first content, total time,
/// outcome and cost — never a key or a prompt.
pub fn log_line(record: &GenerationRecord, request_id: &str) -> String {
    let line = LogLine {
        request_id,
        generation_id: &record.id,
        key_id: &record.key_id,
        account_id: &record.account_id,
        model: &record.model,
        api: record.api,
        stream: record.stream,
        route: record.route.as_deref(),
        status: 200,
        outcome: &record.outcome,
        error: record.error_code.as_deref(),
        attempts: record
            .attempts
            .iter()
            .map(|a| LogAttempt {
                route: &a.route,
                class: a.failure_class.map_or("answered", FailureClass::as_str),
                ms: a.duration_ms,
            })
            .collect(),
        ttfb_ms: record.attempts.last().and_then(|a| a.ttfb_ms),
        ms: record.duration_ms,
        cost_micros: record.total_cost_micros,
        estimated: record.estimated,
    };
    // Written straight from the record's fields (no `Value` built first: this runs on every
    // answer); it cannot fail — every field is a string, a number or a plain enum.
    serde_json::to_string(&line).unwrap_or_default()
}

/// An answered request's log line, in its fields' order ([`log_line`]).
#[derive(Serialize)]
struct LogLine<'a> {
    request_id: &'a str,
    generation_id: &'a str,
    key_id: &'a str,
    account_id: &'a str,
    model: &'a str,
    api: Api,
    stream: bool,
    route: Option<&'a str>,
    status: u16,
    outcome: &'a Outcome,
    error: Option<&'a str>,
    attempts: Vec<LogAttempt<'a>>,
    ttfb_ms: Option<u64>,
    ms: u64,
    cost_micros: i64,
    estimated: bool,
}

#[derive(Serialize)]
struct LogAttempt<'a> {
    route: &'a str,
    class: &'static str,
    ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_tokens: u64, body_len: usize) -> UsageLimits {
        UsageLimits {
            max_tokens,
            max_input_tokens: 100_000,
            body_len,
        }
    }

    #[test]
    fn usage_is_reported_or_estimated_within_max_tokens() {
        let u = Usage::plain(10, 20);
        assert_eq!(settle_usage(Reported::both(u), 999, limits(50, 30)), (u, false, false));
        assert_eq!(
            settle_usage(Reported::default(), 41, limits(1000, 30)),
            (Usage::plain(10, 11), true, false)
        );
        assert_eq!(
            settle_usage(Reported::default(), 4000, limits(50, 30)),
            (Usage::plain(10, 50), true, false),
            "an estimate never above max_tokens (and not flagged: it is ours)"
        );
        let input_only = Reported {
            input_tokens: Some(7),
            ..Reported::default()
        };
        assert_eq!(
            settle_usage(input_only, 41, limits(1000, 30)),
            (Usage::plain(7, 11), true, false),
            "a stream cut before its output count keeps the reported input"
        );
    }

    #[test]
    fn counts_the_request_cannot_have_caused_are_cut_and_flagged() {
        // SPEC §17: output over the forwarded limit, input over the context window, cache parts
        // over the input they belong to — and counts near u64::MAX never overflow.
        let absurd = Reported {
            tool_uses: Default::default(),
            input_tokens: Some(u64::MAX),
            output_tokens: Some(u64::MAX),
            cache_read_tokens: Some(u64::MAX),
            cache_write_tokens: Some(u64::MAX),
            cache_write_1h_tokens: Some(5),
        };
        let (u, estimated, clamped) = settle_usage(absurd, 0, limits(64, 30));
        assert!(clamped && !estimated);
        assert_eq!((u.input_tokens, u.output_tokens), (100_000, 64));
        assert_eq!(
            (u.cache_read_tokens, u.cache_write_tokens, u.cache_write_1h_tokens),
            (100_000, 0, 0),
            "the parts never add up to more than the input"
        );
        let fair = Reported::both(Usage {
            input_tokens: 100,
            output_tokens: 64,
            cache_read_tokens: 60,
            cache_write_tokens: 30,
            cache_write_1h_tokens: 10,
        });
        assert!(
            !settle_usage(fair, 0, limits(64, 30)).2,
            "counts within the bounds are kept as they are"
        );
        let price = Price::per_mtok(1.0, 1.0);
        assert_eq!(cost_micros(u, &price), 100_064, "the cost of a cut usage is finite");
    }

    #[test]
    fn only_an_untranslated_responses_answer_leaves_an_id_to_continue() {
        // SPEC §17: `previous_response_id` goes to the route that keeps the response. A
        // translated answer's `resp_…` is the gateway's own: no upstream keeps it.
        let delivered = || {
            Ending::Delivered(Delivery {
                usage: Reported::both(Usage::plain(10, 5)),
                response_id: Some("resp_1".into()),
                ..Delivery::default()
            })
        };
        for (api, translated, want) in [
            (Api::Responses, false, Some("resp_1")),
            (Api::Responses, true, None),
            (Api::Chat, false, None),
        ] {
            let mut j = Journal::open(Opening { api, ..opening(true) });
            j.attempt(
                AttemptTarget {
                    translated,
                    ..target("r0", 1_000)
                },
                AttemptResult::Committed { http_status: 200 },
                1_010,
            );
            let f = j.finish(delivered(), 1_020);
            assert_eq!(
                f.record.upstream_response_id.as_deref(),
                want,
                "{api:?} translated={translated}"
            );
        }
    }

    #[test]
    fn a_record_written_before_the_newest_fields_still_reads() {
        // SPEC §18: a settlement kept in the outbox across a deploy that added fields must read.
        let f = committed(opening(false)).finish(
            Ending::Delivered(Delivery {
                usage: Reported::both(Usage::plain(10, 5)),
                ..Delivery::default()
            }),
            1_020,
        );
        let mut v = serde_json::to_value(&f.record).unwrap();
        let obj = v.as_object_mut().unwrap();
        for newer in ["usage_clamped", "upstream_response_id"] {
            assert!(obj.remove(newer).is_some(), "{newer}");
        }
        for part in ["cache_read_tokens", "cache_write_tokens", "cache_write_1h_tokens"] {
            obj["usage"].as_object_mut().unwrap().remove(part);
        }
        let back: GenerationRecord = serde_json::from_value(v).unwrap();
        assert_eq!(back.usage, f.record.usage);
        assert!(!back.usage_clamped && back.upstream_response_id.is_none());
    }

    #[test]
    fn cost_is_usage_times_price_in_micros() {
        let p = Price::per_mtok(3.0, 15.0);
        assert_eq!(cost_micros(Usage::plain(1000, 100), &p), 4_500);
        let cheap = Price::per_mtok(0.15, 0.6);
        assert_eq!(cost_micros(Usage::plain(3, 1), &cheap), 1, "0.45 + 0.6 rounds to 1");
    }

    #[test]
    fn cache_reads_and_writes_cost_their_own_prices() {
        // 1 000 input tokens: 200 uncached, 500 read, 200 written (5 min), 100 written (1 h).
        let u = Usage {
            input_tokens: 1000,
            output_tokens: 10,
            cache_read_tokens: 500,
            cache_write_tokens: 200,
            cache_write_1h_tokens: 100,
        };
        let priced = Price {
            cache_read_per_mtok: Some(0.3),
            cache_write_per_mtok: Some(3.75),
            cache_write_1h_per_mtok: Some(6.0),
            ..Price::per_mtok(3.0, 15.0)
        };
        // 200×3 + 500×0.3 + 200×3.75 + 100×6 + 10×15 = 600 + 150 + 750 + 600 + 150
        assert_eq!(cost_micros(u, &priced), 2_250);
        // Absent cache prices: cache tokens cost input, a 1 h write the 5 min write's price.
        let plain = Price::per_mtok(3.0, 15.0);
        assert_eq!(cost_micros(u, &plain), 3_000 + 150);
        let write_only = Price {
            cache_write_per_mtok: Some(3.75),
            ..Price::per_mtok(3.0, 15.0)
        };
        assert_eq!(cost_micros(u, &write_only), 600 + 1500 + 750 + 375 + 150);
        assert_eq!(
            priced.max_input(),
            6.0,
            "the hold's input rate is the dearest input price"
        );
    }

    fn opening(stream: bool) -> Opening {
        Opening {
            id: "gen-1".into(),
            account_id: "acct".into(),
            ledger: 0,
            key_id: "key".into(),
            model: "m".into(),
            api: Api::Chat,
            stream,
            started_ms: 1_000,
            hold_path: Some("fast"),
            max_tokens: 100,
            body_len: 300,
            held_micros: Some(1_000),
            held_tools: Vec::new(),
            tools_per_answer: false,
        }
    }

    fn target(route: &str, started_ms: u64) -> AttemptTarget {
        AttemptTarget {
            route: route.into(),
            provider: "p".into(),
            account: "acct-p".into(),
            price: Price::per_mtok(1.0, 10.0),
            context_window: 100_000,
            extra_try: false,
            probe: false,
            last_resort: false,
            verify: false,
            started_ms,
            api: Api::Chat,
            translated: false,
            dropped: Vec::new(),
            tool_prices: Default::default(),
        }
    }

    /// A journal whose first attempt, at r0, committed at 1 010 ms.
    fn committed(o: Opening) -> Journal {
        let mut j = Journal::open(o);
        j.attempt(
            target("r0", 1_000),
            AttemptResult::Committed { http_status: 200 },
            1_010,
        );
        j
    }

    fn failed(class: FailureClass) -> AttemptResult {
        AttemptResult::Failed {
            verdict: Verdict {
                class,
                message: Some("boom".into()),
                param: None,
                retry_after_ms: Some(2_000),
                read_from: None,
                provoked: false,
            },
            http_status: Some(503),
        }
    }

    #[test]
    fn an_attempt_makes_its_record_line_and_its_observation_from_the_same_facts() {
        let mut j = Journal::open(opening(true));
        let obs = j
            .attempt(target("r0", 1_000), failed(FailureClass::Overloaded), 1_040)
            .clone();
        assert_eq!(obs.outcome, AttemptOutcome::Failure(FailureClass::Overloaded));
        assert_eq!(
            (obs.at_ms, obs.duration_ms, obs.retry_after_ms),
            (1_040, 40, Some(2_000))
        );
        let obs = j
            .attempt(
                target("r1", 1_040),
                AttemptResult::Committed { http_status: 200 },
                1_100,
            )
            .clone();
        assert_eq!(
            (obs.outcome, obs.ttfb_ms, obs.duration_ms),
            (AttemptOutcome::Success, Some(60), 60)
        );
        let f = j.finish(
            Ending::Delivered(Delivery {
                usage: Reported::both(Usage::plain(10, 20)),
                ..Delivery::default()
            }),
            1_500,
        );
        let r = &f.record;
        assert_eq!(
            (r.outcome, r.route.as_deref(), r.duration_ms),
            (Outcome::Answered, Some("r1"), 500)
        );
        assert_eq!(r.total_cost_micros, 210, "10 × 1 + 20 × 10");
        let a = &r.attempts;
        assert_eq!(
            (a[0].ordinal, a[0].outcome, a[0].http_status),
            (1, AttemptStatus::Failed, Some(503))
        );
        assert_eq!(a[0].message, None, "an overload's text is not the client's business");
        assert_eq!(
            (a[1].ordinal, a[1].outcome, a[1].ttfb_ms),
            (2, AttemptStatus::Answered, Some(60))
        );
        assert_eq!((a[1].delivered_output, a[1].cost_micros), (20, 210));
        let last = &f.observations[1];
        assert_eq!(
            (last.output_tokens, last.duration_ms),
            (20, 460),
            "the whole delivery, from the attempt's start"
        );
        assert_eq!(
            f.request,
            RequestObservation {
                provoked_at: Vec::new(),
                at_ms: 1_500,
                answered: true,
                counted: true,
                stream_ttfb_ms: Some(60)
            }
        );
    }

    #[test]
    fn a_broken_stream_is_charged_what_was_delivered_and_says_why() {
        let j = committed(opening(true));
        let f = j.finish(
            Ending::Delivered(Delivery {
                usage: Reported::default(),
                output_chars: 41,
                malformed: 2,
                broken: Some("cut".into()),
                response_id: None,
            }),
            1_200,
        );
        let r = &f.record;
        assert_eq!(
            (r.outcome, r.error_code.as_deref()),
            (Outcome::Broken, Some("stream_broken"))
        );
        assert!(r.estimated);
        assert_eq!(r.usage.map(|u| (u.input_tokens, u.output_tokens)), Some((100, 11)));
        assert_eq!(
            (r.attempts[0].malformed_events, r.attempts[0].message.as_deref()),
            (2, Some("cut"))
        );
        assert!(f.request.answered, "a broken answer was still answered");
    }

    #[test]
    fn no_answer_charges_nothing_and_is_counted_unanswered_after_a_route_failure() {
        let ended = |error: &ApiError, cancelled: bool| {
            let mut j = Journal::open(opening(false));
            j.attempt(target("r0", 1_000), failed(FailureClass::Upstream5xx), 1_020);
            j.finish(Ending::Failed { error, cancelled }, 1_030)
        };
        let f = ended(&ApiError::ProviderError { model: "m".into() }, false);
        assert_eq!((f.record.outcome, f.record.total_cost_micros), (Outcome::Failed, 0));
        assert_eq!(f.record.error_code.as_deref(), Some("provider_error"));
        assert!(f.request.counted && !f.request.answered);
        assert_eq!(
            f.observations[0].duration_ms, 20,
            "a failed attempt keeps its own duration"
        );
        let f = ended(&ApiError::ProviderError { model: "m".into() }, true);
        assert_eq!(f.record.error_code.as_deref(), Some("cancelled"));
        assert!(!f.request.counted, "a client that left is not the model's");
    }

    /// Every failure class, exhaustively: whether it is the route's (or its account's) doing. A
    /// new class does not compile here until it is classified.
    fn routes_doing(class: FailureClass) -> bool {
        use FailureClass::*;
        match class {
            Connect | Timeout | Upstream5xx | RateLimited | Overloaded | ModelUnavailable | BadResponse | Account => {
                true
            }
            ContextLength | UnsupportedParam | ContentPolicy | InvalidRequest | Cancelled | Unable => false,
        }
    }

    /// SPEC §14, §18a: the public record counts only what routes did. Every ending (answered,
    /// broken, no answer, no answer with the client gone, a committed answer the gateway failed
    /// to deliver, refused) after every failure class: counted only when a route answered, or
    /// when no answer came after a failure of the route's own — whatever error the request
    /// ended with.
    #[test]
    fn the_public_record_counts_only_what_routes_did() {
        let errors = [
            ApiError::ProviderError { model: "m".into() },
            ApiError::invalid(
                "`logprobs` cannot be sent to a route that speaks messages.",
                Some("logprobs"),
            ),
            ApiError::UpstreamInvalidRequest { message: "no".into() },
            ApiError::ContentPolicy { message: "no".into() },
            ApiError::CapacityBusy { retry_after_s: 1 },
            ApiError::InsufficientBalance,
            ApiError::Internal {
                label: "response_stream",
            },
        ];
        // (ending, whether a route committed first) → (counted, answered) for a first attempt of
        // `class` (none: no attempt at all).
        #[derive(Debug, Clone, Copy)]
        enum End {
            Delivered,
            Broken,
            NoAnswer,
            Cancelled,
            CommittedButUndelivered,
            Rejected,
        }
        let ends = [
            End::Delivered,
            End::Broken,
            End::NoAnswer,
            End::Cancelled,
            End::CommittedButUndelivered,
            End::Rejected,
        ];
        let classes = FailureClass::ALL.iter().copied().map(Some).chain([None]);
        for class in classes {
            for end in ends {
                for error in &errors {
                    let mut j = Journal::open(opening(true));
                    if let Some(c) = class {
                        // An untranslatable request never reached its route first.
                        j.attempt(target("r0", 1_000), failed(FailureClass::Unable), 1_000);
                        j.attempt(target("r1", 1_000), failed(c), 1_010);
                    }
                    let commits = matches!(end, End::Delivered | End::Broken | End::CommittedButUndelivered);
                    if commits {
                        j.attempt(
                            target("r2", 1_010),
                            AttemptResult::Committed { http_status: 200 },
                            1_020,
                        );
                    }
                    let f = match end {
                        End::Delivered | End::Broken => j.finish(
                            Ending::Delivered(Delivery {
                                broken: matches!(end, End::Broken).then(|| "cut".to_string()),
                                ..Delivery::default()
                            }),
                            1_030,
                        ),
                        End::NoAnswer | End::CommittedButUndelivered => j.finish(
                            Ending::Failed {
                                error,
                                cancelled: false,
                            },
                            1_030,
                        ),
                        End::Cancelled => j.finish(Ending::Failed { error, cancelled: true }, 1_030),
                        End::Rejected => j.finish(Ending::Rejected(error), 1_030),
                    };
                    let answered = matches!(end, End::Delivered | End::Broken);
                    let counted = match end {
                        End::Delivered | End::Broken => true,
                        End::NoAnswer | End::CommittedButUndelivered => class.is_some_and(routes_doing),
                        End::Cancelled | End::Rejected => false,
                    };
                    assert_eq!(
                        (f.request.counted, f.request.answered),
                        (counted, answered),
                        "{class:?} then {end:?} ({})",
                        error.code()
                    );
                }
            }
        }
        // The same rule the record's attempts state: each class's own verdict.
        for class in FailureClass::ALL {
            let mut j = Journal::open(opening(false));
            j.attempt(target("r0", 1_000), failed(class), 1_010);
            let f = j.finish(
                Ending::Failed {
                    error: &errors[0],
                    cancelled: false,
                },
                1_020,
            );
            assert_eq!(f.record.attempts[0].failed_by_route(), routes_doing(class), "{class:?}");
        }
    }

    #[test]
    fn a_rejected_request_is_recorded_with_its_code_and_counted_nowhere() {
        let error = ApiError::ModelNotFound {
            model: "x".into(),
            available: vec![],
        };
        let f = Journal::open(Opening {
            hold_path: None,
            ..opening(false)
        })
        .finish(Ending::Rejected(&error), 1_002);
        assert_eq!(f.record.outcome, Outcome::Rejected);
        assert_eq!(f.record.outcome.as_str(), "rejected");
        assert_eq!(f.record.error_code.as_deref(), Some("model_not_found"));
        assert_eq!(
            (
                f.record.attempts.len(),
                f.record.total_cost_micros,
                f.record.hold_path.as_deref()
            ),
            (0, 0, None)
        );
        assert!(f.observations.is_empty());
        assert!(!f.request.counted && !f.request.answered);
    }

    #[test]
    fn the_charge_never_exceeds_the_hold_and_the_overrun_is_recorded() {
        let j = committed(opening(false));
        let f = j.finish(
            Ending::Delivered(Delivery {
                usage: Reported::both(Usage::plain(100, 500)),
                ..Delivery::default()
            }),
            1_020,
        );
        // 500 output tokens over a limit of 100 are cut to 100 and flagged (SPEC §17):
        // 100 × 1 + 100 × 10 = 1 100 µ$ delivered; 1 000 held.
        assert!(f.record.usage_clamped);
        assert_eq!(f.record.usage.map(|u| u.output_tokens), Some(100));
        assert_eq!((f.record.total_cost_micros, f.record.overrun_micros), (1_000, 100));
        assert_eq!(f.record.attempts[0].cost_micros, 1_000);
    }

    #[test]
    fn only_a_client_caused_failure_keeps_the_providers_message() {
        let mut j = Journal::open(opening(false));
        for class in [
            FailureClass::ContextLength,
            FailureClass::Account,
            FailureClass::ContentPolicy,
        ] {
            j.attempt(target("r0", 1_000), failed(class), 1_010);
        }
        let f = j.finish(
            Ending::Failed {
                error: &ApiError::ProviderError { model: "m".into() },
                cancelled: false,
            },
            1_020,
        );
        let messages: Vec<Option<&str>> = f.record.attempts.iter().map(|a| a.message.as_deref()).collect();
        assert_eq!(messages, vec![Some("boom"), None, Some("boom")]);
        assert!(
            f.record.attempts.iter().all(|a| a.http_status == Some(503)),
            "class and status stay"
        );
    }

    #[test]
    fn the_log_line_of_an_answer_has_its_attempts_outcome_and_cost() {
        let mut j = Journal::open(opening(true));
        j.attempt(target("r0", 1_000), failed(FailureClass::Timeout), 1_400);
        j.attempt(
            target("r1", 1_400),
            AttemptResult::Committed { http_status: 200 },
            1_450,
        );
        let f = j.finish(
            Ending::Delivered(Delivery {
                usage: Reported::both(Usage::plain(10, 20)),
                broken: Some("cut".into()),
                ..Delivery::default()
            }),
            2_000,
        );
        let text = log_line(&f.record, "req-1");
        let line: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(text.starts_with(r#"{"request_id":"req-1","generation_id":"#), "{text}");
        assert_eq!(line["request_id"], "req-1");
        assert_eq!(line["outcome"], "broken");
        assert_eq!(line["route"], "r1");
        assert_eq!(line["attempts"][0]["class"], "timeout");
        assert_eq!(line["attempts"][1]["class"], "answered");
        assert_eq!((line["ttfb_ms"].as_u64(), line["ms"].as_u64()), (Some(50), Some(1_000)));
        assert_eq!(line["cost_micros"], 210);
        assert!(!text.contains("sk-"), "no key in it");
        assert_eq!(
            line.as_object().unwrap().keys().collect::<Vec<_>>(),
            [
                "request_id",
                "generation_id",
                "key_id",
                "account_id",
                "model",
                "api",
                "stream",
                "route",
                "status",
                "outcome",
                "error",
                "attempts",
                "ttfb_ms",
                "ms",
                "cost_micros",
                "estimated"
            ],
            "the fields of every answered request's line, in order"
        );
    }
}
