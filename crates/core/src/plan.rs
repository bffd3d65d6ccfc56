//! Which routes a request tries, in what order, with which first-content deadline (SPEC §3, §5),
//! and how each failure narrows what is left (SPEC §4).
//!
//! A [`Plan`] starts from the model's routes in their usual order (catalog order, or the health
//! order the caller passes in), keeps those that serve the request's dialect and pass its
//! `provider` filters, and then hands out attempts one at a time. After each failure the driver
//! reports the verdict; the plan narrows the rest (a larger context window after
//! `context_length`, routes not listing the parameter after `unsupported_param`, no route on an
//! account that failed as `account`) or stops (`invalid_request`). Time is an argument.

use std::collections::BTreeMap;

use crate::api::Api;
use crate::catalog::{Balance, Catalog, Model, Policy, Route};
use crate::classify::{FailureClass, Verdict};
use crate::dialects::{ClientRequest, Sort};
use crate::error::ApiError;
use crate::health::{ModelHealth, RouteHealth, RouteStats};
use crate::spread::{health_factor, pick};

/// Reorders the healthy routes of a usual order by a measurement (`sort: latency` — median TTFB,
/// lower first; `sort: throughput` — tokens/s, higher first). Routes without a measurement
/// follow those with one; demoted routes stay at the end in their order. Stable.
fn sort_by_measure(order: &mut [(usize, RouteHealth)], measure: impl Fn(usize) -> Option<f64>, higher_first: bool) {
    let healthy = order.iter().take_while(|(_, h)| !h.demoted).count();
    order[..healthy].sort_by(|(a, _), (b, _)| match (measure(*a), measure(*b)) {
        (Some(x), Some(y)) if higher_first => y.total_cmp(&x),
        (Some(x), Some(y)) => x.total_cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    });
}

/// One attempt to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Index into the model's `routes`.
    pub route: usize,
    /// The dialect the route is sent the request in: the client's own, or another it speaks,
    /// translated (SPEC §19).
    pub api: Api,
    /// First-content limit for this attempt, in ms (already cut to the remaining budget).
    pub deadline_ms: u64,
    /// This is the one more try for a slow route (SPEC §5).
    pub extra_try: bool,
    /// The route (or its account) is on probation and this request won its probe (SPEC §8).
    pub probe: bool,
    /// The route's account is in cooldown and no other route was left (SPEC §8, §9).
    pub last_resort: bool,
}

#[derive(Debug, Clone)]
struct Candidate {
    route: usize,
    wire: Api,
    health: RouteHealth,
    account: String,
    context_window: u64,
}

/// How a request ended when no route answered.
#[derive(Debug, Clone, PartialEq)]
struct Failure {
    route: usize,
    verdict: Verdict,
}

#[derive(Debug, Clone)]
pub struct Plan {
    stream: bool,
    api: Api,
    reasoning: bool,
    max_tokens: u64,
    policy: Policy,
    candidates: Vec<Candidate>,
    slow: Vec<bool>,
    unsupported: Vec<Vec<String>>,
    /// Position of the next candidate to consider.
    next: usize,
    attempts: u32,
    max_attempts: u32,
    budget_ends_ms: u64,
    min_context: Option<u64>,
    excluded_param: Vec<String>,
    excluded_accounts: Vec<String>,
    failures: Vec<Failure>,
    stopped: Option<ApiError>,
    extra_try_used: bool,
    long_deadline_given: bool,
    cancelled: bool,
    model_id: String,
    /// Routes whose probe this request won.
    probes: Vec<usize>,
}

/// Everything a request's plan is made from (SPEC §3, §5, §8).
pub struct PlanInput<'a> {
    pub catalog: &'a Catalog,
    pub model: &'a Model,
    pub request: &'a ClientRequest,
    pub policy: &'a Policy,
    /// The model's routes with their upstream accounts ([`Catalog::route_accounts`]).
    pub route_accounts: &'a [(String, String)],
    /// The model's route breakers merged with the accounts' ([`ModelHealth::with_accounts`]).
    pub health: &'a ModelHealth,
    /// Per-route measurements, for `provider.sort` = `latency` / `throughput`.
    pub stats: &'a BTreeMap<String, RouteStats>,
    /// Routes whose due probe ([`ModelHealth::probe_claims`]) this request won; a due route not
    /// listed waits at the end like the demoted ones.
    pub probes_won: &'a [usize],
    /// `allow_fallbacks` set on the API key and on its account, if any (the request's own comes
    /// first, the platform's `policy.allow_fallbacks` last).
    pub key_allow_fallbacks: Option<bool>,
    pub account_allow_fallbacks: Option<bool>,
    /// The request's conversation ([`ClientRequest::conversation`]), for `balance: "spread"`.
    pub conversation: Option<&'a str>,
    pub now_ms: u64,
}

fn matches_pref(list: &[String], route: &Route) -> bool {
    list.iter().any(|p| p == &route.provider || p == &route.id)
}

impl Plan {
    /// Plans a request: the usual order from health (SPEC §8; a probe lost to another request
    /// moves its route to the end), reordered by `provider.sort`, filtered by the `provider`
    /// preferences, with `allow_fallbacks` decided request → key → account → platform.
    pub fn for_request(input: PlanInput) -> Result<Plan, ApiError> {
        let PlanInput {
            catalog,
            model,
            request,
            policy,
            route_accounts,
            health,
            stats,
            probes_won,
            key_allow_fallbacks,
            account_allow_fallbacks,
            conversation,
            now_ms,
        } = input;
        let mut order = Vec::with_capacity(model.routes.len());
        let mut lost = Vec::new();
        let mut probes = Vec::new();
        for (i, route_health, probe_due) in health.plan_order(route_accounts, now_ms) {
            if !probe_due {
                order.push((i, route_health));
            } else if probes_won.contains(&i) {
                probes.push(i);
                order.push((i, route_health));
            } else {
                lost.push((
                    i,
                    RouteHealth {
                        demoted: true,
                        ..route_health
                    },
                ));
            }
        }
        // Lost probes wait at the end like the other demoted routes, before those demoted later.
        let first_demoted = order.iter().position(|(_, h)| h.demoted).unwrap_or(order.len());
        order.splice(first_demoted..first_demoted, lost);
        let stat = |i: usize| model.routes.get(i).and_then(|r| stats.get(&r.id));
        match request.provider.sort {
            Some(Sort::Latency) => sort_by_measure(
                &mut order,
                |i| stat(i).and_then(|s| s.median_ttfb_ms).map(|t| t as f64),
                false,
            ),
            Some(Sort::Throughput) => sort_by_measure(&mut order, |i| stat(i).and_then(|s| s.tokens_per_s), true),
            Some(Sort::Price) | None => {}
        }
        let allow_fallbacks = request
            .provider
            .allow_fallbacks
            .or(key_allow_fallbacks)
            .or(account_allow_fallbacks)
            .unwrap_or(policy.allow_fallbacks);
        let mut plan = Plan::with_order(catalog, model, request, policy, &order, allow_fallbacks, now_ms)?;
        plan.probes = probes;
        // SPEC §8a: never over the client's own order or sort.
        let client_ordered = request.provider.order.is_some() || request.provider.sort.is_some();
        if let (Balance::Spread, false, Some(conversation)) = (model.balance, client_ordered, conversation) {
            plan.spread(model, stats, conversation);
        }
        Ok(plan)
    }

    /// `balance: "spread"` (SPEC §8a): the conversation's route among the healthy candidates —
    /// weighted rendezvous hashing over weight × health factor ([`crate::spread`]) — goes first;
    /// the others follow in their usual order.
    fn spread(&mut self, model: &Model, stats: &BTreeMap<String, RouteStats>, conversation: &str) {
        let healthy: Vec<(usize, &str, f64)> = self
            .candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.health.demoted && !c.health.account_cooling)
            .filter_map(|(pos, c)| {
                let r = model.routes.get(c.route)?;
                let factor = stats.get(&r.id).map_or(1.0, health_factor);
                Some((pos, r.id.as_str(), r.weight() * factor))
            })
            .collect();
        let weights: Vec<(&str, f64)> = healthy.iter().map(|(_, id, w)| (*id, *w)).collect();
        if let Some(chosen) = pick(conversation, &weights) {
            let pos = healthy[chosen].0;
            self.candidates[..=pos].rotate_right(1);
        }
    }

    /// Plans a request from a usual order already decided: route indexes with their health
    /// (catalog order when health knows nothing), and `allow_fallbacks`.
    fn with_order(
        catalog: &Catalog,
        model: &Model,
        request: &ClientRequest,
        policy: &Policy,
        order: &[(usize, RouteHealth)],
        allow_fallbacks: bool,
        now_ms: u64,
    ) -> Result<Plan, ApiError> {
        let prefs = &request.provider;
        // The routes that can take the request, each with the dialect it is sent in (SPEC §19).
        let wire = |i: usize| {
            let speaks = &model.routes.get(i)?.apis;
            if policy.translate {
                request.api.wire_for(speaks)
            } else {
                speaks.contains(&request.api).then_some(request.api)
            }
        };
        let serving: Vec<(usize, RouteHealth)> = order.iter().copied().filter(|(i, _)| wire(*i).is_some()).collect();
        if serving.is_empty() {
            return Err(ApiError::SupplyNotConfigured {
                model: model.id.clone(),
            });
        }
        // SPEC §21: a provider's priced tool only on a route of the client's own API that prices
        // it; the others are unable for this request, and with none left it is a 400 naming it.
        let unserved = |i: usize| {
            let r = model.routes.get(i)?;
            request.server_tools.unserved_by(request.api, wire(i)?, &r.tool_prices)
        };
        let first_unserved = serving.iter().find_map(|(i, _)| unserved(*i));
        let serving: Vec<(usize, RouteHealth)> = serving.into_iter().filter(|(i, _)| unserved(*i).is_none()).collect();
        if let (true, Some((param, message))) = (serving.is_empty(), first_unserved) {
            return Err(ApiError::invalid(message, Some(&param)));
        }
        let mut kept: Vec<(usize, RouteHealth)> = serving
            .into_iter()
            .filter(|(i, _)| {
                let Some(r) = model.routes.get(*i) else {
                    return false;
                };
                if prefs.only.as_ref().is_some_and(|only| !matches_pref(only, r)) {
                    return false;
                }
                if prefs.ignore.as_ref().is_some_and(|ignore| matches_pref(ignore, r)) {
                    return false;
                }
                if let Some(max) = &prefs.max_price {
                    if max.prompt.is_some_and(|p| r.price.input_per_mtok > p)
                        || max.completion.is_some_and(|c| r.price.output_per_mtok > c)
                    {
                        return false;
                    }
                }
                true
            })
            .collect();
        if kept.is_empty() {
            return Err(ApiError::invalid(
                format!(
                    "No route of model {} matches the request's `provider` preferences.",
                    model.id
                ),
                Some("provider"),
            ));
        }
        // SPEC §9: a route on an account in cooldown is skipped — unless nothing else is left (a
        // route is never removed, SPEC §8): then such routes are tried, last ([`Attempt::last_resort`]).
        if kept.iter().any(|(_, h)| !h.account_cooling) {
            kept.retain(|(_, h)| !h.account_cooling);
        }
        if prefs.sort == Some(Sort::Price) {
            // Stable: equal prices keep their usual order; demoted routes stay behind healthy ones.
            kept.sort_by(|(a, ha), (b, hb)| {
                let price = |i: &usize| {
                    model
                        .routes
                        .get(*i)
                        .map_or(f64::MAX, |r| r.price.input_per_mtok + r.price.output_per_mtok)
                };
                ha.demoted.cmp(&hb.demoted).then(price(a).total_cmp(&price(b)))
            });
        }
        if let Some(order) = &prefs.order {
            // Listed routes first, in the listed order; the rest keep theirs.
            let rank = |i: &usize| {
                model
                    .routes
                    .get(*i)
                    .and_then(|r| order.iter().position(|p| p == &r.provider || p == &r.id))
                    .unwrap_or(usize::MAX)
            };
            // Health first (a demoted route stays behind healthy ones), then the listed order.
            kept.sort_by_key(|(i, h)| (h.demoted, rank(i)));
        }
        let max_attempts = if allow_fallbacks {
            match policy.max_attempts {
                0 => u32::MAX,
                n => n,
            }
        } else {
            1
        };
        let candidates = kept
            .into_iter()
            .filter_map(|(i, health)| {
                let r = model.routes.get(i)?;
                Some(Candidate {
                    route: i,
                    wire: wire(i)?,
                    health,
                    account: catalog
                        .provider(&r.provider)
                        .map(|p| p.account().to_string())
                        .unwrap_or_default(),
                    context_window: r.context_window.unwrap_or(model.context_window),
                })
            })
            .collect();
        Ok(Plan {
            stream: request.stream,
            api: request.api,
            reasoning: model.reasoning,
            max_tokens: request.max_tokens.unwrap_or(model.max_output_tokens),
            policy: policy.clone(),
            candidates,
            slow: model.routes.iter().map(|r| r.slow).collect(),
            unsupported: model.routes.iter().map(|r| r.unsupported_params.clone()).collect(),
            next: 0,
            attempts: 0,
            max_attempts,
            budget_ends_ms: now_ms.saturating_add(policy.pre_content_budget_ms),
            min_context: None,
            excluded_param: Vec::new(),
            excluded_accounts: Vec::new(),
            failures: Vec::new(),
            stopped: None,
            extra_try_used: false,
            long_deadline_given: false,
            cancelled: false,
            model_id: model.id.clone(),
            probes: Vec::new(),
        })
    }

    fn eligible(&self, c: &Candidate) -> bool {
        if self.min_context.is_some_and(|min| c.context_window <= min) {
            return false;
        }
        if self.excluded_accounts.contains(&c.account) {
            return false;
        }
        let unsupported = self.unsupported.get(c.route).map(Vec::as_slice).unwrap_or(&[]);
        !self.excluded_param.iter().any(|p| unsupported.contains(p))
    }

    fn nonstream_limit(&self, base_ms: u64) -> u64 {
        self.policy.nonstream_limit(base_ms, self.max_tokens)
    }

    fn first_content_limit(&self, route: usize, is_last: bool) -> u64 {
        let p = &self.policy;
        let slow = self.slow.get(route).copied().unwrap_or(false);
        let reasoning = self.reasoning && self.api == Api::Chat;
        let base = if !self.stream {
            self.nonstream_limit(p.nonstream_base_ms)
        } else if slow || reasoning {
            // When both apply, the longer limit wins.
            let slow_ms = if slow { p.slow_route_stream_first_content_ms } else { 0 };
            let reasoning_ms = if reasoning {
                p.reasoning_stream_first_content_ms
            } else {
                0
            };
            slow_ms.max(reasoning_ms)
        } else {
            p.stream_first_content_ms
        };
        if is_last {
            base.max(p.last_route_min_ms)
        } else {
            base
        }
    }

    /// The next attempt — the usual ones first, then the one more try for a slow route — or
    /// `None` when the plan is exhausted (then see [`Plan::final_error`]). Nothing more is tried
    /// once the client has gone (`client_gone`): the request ends as `cancelled`.
    pub fn next(&mut self, now_ms: u64, client_gone: bool) -> Option<Attempt> {
        if client_gone {
            self.cancelled = true;
            return None;
        }
        self.next_attempt(now_ms).or_else(|| self.extra_try(now_ms))
    }

    /// The candidate routes (indexes into the model's routes), in plan order.
    pub fn candidates(&self) -> Vec<usize> {
        self.candidates.iter().map(|c| c.route).collect()
    }

    /// Keeps only these candidates (the ones the account's balance can pay for, SPEC §11).
    pub fn keep_only(&mut self, routes: &[usize]) {
        self.candidates.retain(|c| routes.contains(&c.route));
    }

    /// The routes the next usual attempts would go to, in order (an empty list once only the
    /// one more try is left): what route capacity is asked for (SPEC §10).
    pub fn upcoming(&self) -> Vec<usize> {
        if self.stopped.is_some() || self.attempts >= self.max_attempts {
            return Vec::new();
        }
        self.candidates[self.next.min(self.candidates.len())..]
            .iter()
            .filter(|c| self.eligible(c))
            .map(|c| c.route)
            .collect()
    }

    /// Makes `route` (one of [`Plan::upcoming`]) the next attempt; the routes it passes stay
    /// after it, in their order — a route that was full is still a fallback (SPEC §10).
    pub fn bring_forward(&mut self, route: usize) {
        let start = self.next.min(self.candidates.len());
        if let Some(offset) = self.candidates[start..].iter().position(|c| c.route == route) {
            self.candidates[start..=start + offset].rotate_right(1);
        }
    }

    /// Time spent queued for capacity does not count against the pre-content budget (SPEC §10:
    /// waiting is free).
    pub fn extend_budget(&mut self, waited_ms: u64) {
        self.budget_ends_ms = self.budget_ends_ms.saturating_add(waited_ms);
    }

    /// Whether the plan stopped because the client went away.
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    fn next_attempt(&mut self, now_ms: u64) -> Option<Attempt> {
        if self.stopped.is_some() || self.attempts >= self.max_attempts || now_ms >= self.budget_ends_ms {
            return None;
        }
        while self.next < self.candidates.len() {
            let idx = self.next;
            self.next += 1;
            let c = &self.candidates[idx];
            if !self.eligible(c) {
                continue;
            }
            // The routes that will be tried if every one fails: this one and the next eligible
            // ones up to the attempt limit. The last of them gets the long deadline — unless it is
            // demoted, then the last healthy one among them does (SPEC §5).
            let remaining = (self.max_attempts - self.attempts) as usize;
            let window: Vec<&Candidate> = std::iter::once(c)
                .chain(
                    self.candidates[idx + 1..]
                        .iter()
                        .filter(|c| self.eligible(c))
                        .take(remaining.saturating_sub(1)),
                )
                .collect();
            let longest = window
                .iter()
                .rposition(|r| !r.health.demoted)
                .unwrap_or(window.len() - 1);
            // Once a healthy route got it, a demoted one after it does not.
            let is_last = longest == 0 && !self.long_deadline_given;
            self.long_deadline_given |= is_last;
            let route = c.route;
            self.attempts += 1;
            let limit = self.first_content_limit(route, is_last);
            return Some(Attempt {
                route,
                api: c.wire,
                deadline_ms: limit.min(self.budget_ends_ms - now_ms),
                extra_try: false,
                probe: self.probes.contains(&route),
                last_resort: c.health.account_cooling,
            });
        }
        None
    }

    /// Reports how an attempt failed; narrows or stops the rest of the plan.
    pub fn record_failure(&mut self, route: usize, verdict: Verdict) {
        match verdict.class {
            FailureClass::InvalidRequest => {
                self.stopped = Some(ApiError::UpstreamInvalidRequest {
                    message: verdict
                        .message
                        .clone()
                        .unwrap_or_else(|| "The provider refused the request.".into()),
                });
            }
            FailureClass::Cancelled => {
                self.cancelled = true;
                self.stopped = Some(ApiError::ProviderError {
                    model: self.model_id.clone(),
                });
            }
            FailureClass::ContextLength => {
                let window = self
                    .candidates
                    .iter()
                    .find(|c| c.route == route)
                    .map(|c| c.context_window);
                self.min_context = self.min_context.max(window);
            }
            FailureClass::UnsupportedParam => {
                if let Some(p) = &verdict.param {
                    self.excluded_param.push(p.clone());
                } else if let Some(listed) = self.unsupported.get(route) {
                    // The route rejected a parameter it does not list: skip routes with the same list.
                    self.excluded_param.extend(listed.iter().cloned());
                }
            }
            FailureClass::Account => {
                if let Some(c) = self.candidates.iter().find(|c| c.route == route) {
                    self.excluded_accounts.push(c.account.clone());
                }
            }
            // The request could not be said in the route's dialect (SPEC §19): nothing was sent,
            // so the route's place in the attempt limit goes to the next one.
            FailureClass::Unable => self.attempts = self.attempts.saturating_sub(1),
            _ => {}
        }
        self.failures.push(Failure { route, verdict });
    }

    /// The one more try for a slow route (SPEC §5): when every route failed and at least one
    /// failed by timeout, the timed-out route with the fewest consecutive failures (tie: usual
    /// order), once, with the last-route limit.
    fn extra_try(&mut self, now_ms: u64) -> Option<Attempt> {
        if self.extra_try_used || self.stopped.is_some() || now_ms >= self.budget_ends_ms {
            return None;
        }
        let route = self
            .candidates
            .iter()
            .filter(|c| {
                self.failures
                    .iter()
                    .any(|f| f.route == c.route && f.verdict.class == FailureClass::Timeout)
            })
            .min_by_key(|c| c.health.consecutive_failures)?
            .route;
        let last_resort = self
            .candidates
            .iter()
            .any(|c| c.route == route && c.health.account_cooling);
        self.extra_try_used = true;
        let base = self.policy.last_route_min_ms;
        let limit = if self.stream { base } else { self.nonstream_limit(base) };
        let api = self.candidates.iter().find(|c| c.route == route)?.wire;
        Some(Attempt {
            route,
            api,
            deadline_ms: limit.min(self.budget_ends_ms - now_ms),
            extra_try: true,
            probe: self.probes.contains(&route),
            last_resort,
        })
    }

    /// The error for a request no route answered (SPEC §13). `available` lists models with a
    /// healthy route right now, for the 503.
    pub fn final_error(&self, available: Vec<String>) -> ApiError {
        if let Some(e) = &self.stopped {
            return e.clone();
        }
        // Routes the request could not be translated for were never tried: they decide the
        // answer only when no route could take it (SPEC §19: 400 naming the field).
        let (unable, failures): (Vec<&Failure>, Vec<&Failure>) = self
            .failures
            .iter()
            .partition(|f| f.verdict.class == FailureClass::Unable);
        let Some(last) = failures.last() else {
            return match unable.first() {
                Some(f) => ApiError::invalid(
                    f.verdict
                        .message
                        .clone()
                        .unwrap_or_else(|| "No route of this model can take the request.".into()),
                    f.verdict.param.as_deref(),
                ),
                None => ApiError::ProviderError {
                    model: self.model_id.clone(),
                },
            };
        };
        let all_client = failures.iter().all(|f| {
            matches!(
                f.verdict.class,
                FailureClass::ContextLength | FailureClass::UnsupportedParam | FailureClass::ContentPolicy
            )
        });
        if failures.iter().all(|f| f.verdict.class == FailureClass::ContentPolicy) {
            return ApiError::ContentPolicy {
                message: last
                    .verdict
                    .message
                    .clone()
                    .unwrap_or_else(|| "Every provider refused the request under its content policy.".into()),
            };
        }
        if all_client {
            return ApiError::UpstreamInvalidRequest {
                message: last
                    .verdict
                    .message
                    .clone()
                    .unwrap_or_else(|| "The provider refused the request.".into()),
            };
        }
        if failures.iter().all(|f| f.verdict.class.is_capacity()) {
            let retry_after_ms = failures
                .iter()
                .filter_map(|f| f.verdict.retry_after_ms)
                .max()
                .unwrap_or(0);
            return ApiError::CapacityExhausted {
                model: self.model_id.clone(),
                available,
                retry_after_s: retry_after_ms.div_ceil(1000).max(1),
            };
        }
        ApiError::ProviderError {
            model: self.model_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dialects::chat;
    use serde_json::json;

    fn catalog(routes: serde_json::Value, reasoning: bool) -> Catalog {
        Catalog::parse(
            json!({
                "providers": [
                    {"id": "a", "base_url": "https://a/v1", "auth": "bearer", "account": "acct-a"},
                    {"id": "b", "base_url": "https://b/v1", "auth": "bearer", "account": "acct-b"},
                    {"id": "a2", "base_url": "https://a2/v1", "auth": "bearer", "account": "acct-a"}
                ],
                "models": [{"id": "m", "reasoning": reasoning, "context_window": 8000, "max_output_tokens": 1000, "routes": routes}]
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap()
    }

    fn route(id: &str, provider: &str, extra: serde_json::Value) -> serde_json::Value {
        let mut r = json!({"id": id, "provider": provider, "upstream_model": "u", "apis": ["chat"],
                           "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}});
        for (k, v) in extra.as_object().unwrap() {
            r[k] = v.clone();
        }
        r
    }

    fn three() -> Catalog {
        catalog(
            json!([
                route("r0", "a", json!({})),
                route("r1", "b", json!({})),
                route("r2", "a2", json!({}))
            ]),
            false,
        )
    }

    fn request(body: serde_json::Value) -> ClientRequest {
        let mut b = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        for (k, v) in body.as_object().unwrap() {
            b[k] = v.clone();
        }
        chat::parse_request(b.to_string().as_bytes()).unwrap()
    }

    fn plan_with(c: &Catalog, body: serde_json::Value, health: &[RouteHealth], fallbacks: bool) -> Plan {
        let model = c.model("m").unwrap();
        let order: Vec<(usize, RouteHealth)> = (0..model.routes.len())
            .map(|i| (i, health.get(i).copied().unwrap_or_default()))
            .collect();
        Plan::with_order(c, model, &request(body), &c.policy_for(model), &order, fallbacks, 0).unwrap()
    }

    impl Plan {
        /// Test view: only the usual attempts, no one more try.
        fn next_usual(&mut self, now_ms: u64) -> Option<Attempt> {
            self.next_attempt(now_ms)
        }
    }

    /// SPEC §21: a provider's priced tool goes only to routes of the client's own API that price
    /// it, whatever the order; with none, a 400 names the tool's field.
    #[test]
    fn a_priced_tool_is_planned_only_on_native_routes_that_price_it() {
        let priced = json!({"apis": ["responses"], "tool_prices": {"web_search": 0.01}});
        let table = [
            // (routes, the routes planned for a Responses request with web search)
            (
                json!([
                    route("r0", "a", json!({"apis": ["responses"]})),
                    route(
                        "r1",
                        "b",
                        json!({"apis": ["chat"], "tool_prices": {"web_search": 0.01}})
                    ),
                    route("r2", "a2", priced.clone())
                ]),
                Ok(vec![2]),
            ),
            (
                json!([route("r0", "a", priced.clone()), route("r1", "b", priced.clone())]),
                Ok(vec![0, 1]),
            ),
            (
                json!([route("r0", "a", json!({"apis": ["responses"]}))]),
                Err("tools[1]"),
            ),
            (
                json!([route(
                    "r0",
                    "a",
                    json!({"apis": ["chat"], "tool_prices": {"web_search": 0.01}})
                )]),
                Err("tools[1]"),
            ),
        ];
        let body =
            json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]});
        let searching = crate::dialects::parse_request(Api::Responses, body.to_string().as_bytes(), None).unwrap();
        let plain = crate::dialects::parse_request(Api::Responses, br#"{"model": "m", "input": "x"}"#, None).unwrap();
        for (routes, want) in table {
            let c = catalog(routes.clone(), false);
            let model = c.model("m").unwrap();
            let order: Vec<(usize, RouteHealth)> =
                (0..model.routes.len()).map(|i| (i, RouteHealth::default())).collect();
            let plan = |r: &ClientRequest| Plan::with_order(&c, model, r, &c.policy_for(model), &order, true, 0);
            let got = plan(&searching).map(|mut p| {
                std::iter::from_fn(|| p.next_usual(0))
                    .map(|a| {
                        assert_eq!(a.api, Api::Responses, "never translated");
                        a.route
                    })
                    .collect::<Vec<_>>()
            });
            match (got, want) {
                (Ok(routes), Ok(want)) => assert_eq!(routes, want, "{routes:?}"),
                (Err(ApiError::InvalidRequest { param, message }), Err(field)) => {
                    assert_eq!(param.as_deref(), Some(field));
                    assert!(message.contains("web_search"), "{message}");
                }
                (got, want) => panic!("{routes}: {got:?} against {want:?}"),
            }
            // The same model serves a request without the tool on every route.
            assert!(plan(&plain).is_ok(), "{routes}");
        }
    }

    #[test]
    fn a_route_of_another_dialect_is_sent_the_request_translated_unless_the_model_forbids_it() {
        let routes = json!([
            route("r0", "a", json!({"apis": ["messages"]})),
            route("r1", "b", json!({"apis": ["gemini", "responses"]})),
            route("r2", "a2", json!({"apis": ["chat", "messages"]}))
        ]);
        let c = catalog(routes.clone(), false);
        let mut p = plan_with(&c, json!({}), &[], true);
        let wires: Vec<(usize, Api)> = std::iter::from_fn(|| p.next_usual(0))
            .map(|a| (a.route, a.api))
            .collect();
        assert_eq!(
            wires,
            vec![(0, Api::Messages), (1, Api::Responses), (2, Api::Chat)],
            "order stays the catalog's; each route gets the closest dialect it speaks"
        );

        let mut doc: serde_json::Value = serde_json::to_value(c.doc()).unwrap();
        doc["models"][0]["policy"] = json!({"translate": false});
        let strict = Catalog::parse(doc.to_string().as_bytes()).unwrap();
        let mut p = plan_with(&strict, json!({}), &[], true);
        assert_eq!(p.candidates(), vec![2], "only the route that speaks chat");
        assert_eq!(p.next_usual(0).map(|a| a.api), Some(Api::Chat));
        doc["models"][0]["routes"] = json!([routes[0].clone()]);
        let none = Catalog::parse(doc.to_string().as_bytes()).unwrap();
        let model = none.model("m").unwrap();
        let err = Plan::with_order(
            &none,
            model,
            &request(json!({})),
            &none.policy_for(model),
            &[(0, RouteHealth::default())],
            true,
            0,
        )
        .unwrap_err();
        assert!(matches!(err, ApiError::SupplyNotConfigured { .. }), "{err:?}");
    }

    #[test]
    fn a_route_the_request_cannot_be_translated_for_costs_no_attempt_and_names_the_field_when_none_can() {
        let c = catalog(
            json!([
                route("r0", "a", json!({"apis": ["messages"]})),
                route("r1", "b", json!({"apis": ["gemini"]}))
            ]),
            false,
        );
        let unable = Verdict {
            class: FailureClass::Unable,
            message: Some("`logprobs` cannot be sent to a route that speaks messages.".into()),
            param: Some("logprobs".into()),
            retry_after_ms: None,
            read_from: None,
            provoked: false,
        };
        let mut doc: serde_json::Value = serde_json::to_value(c.doc()).unwrap();
        doc["models"][0]["policy"] = json!({"max_attempts": 1});
        let one = Catalog::parse(doc.to_string().as_bytes()).unwrap();
        let mut p = plan_with(&one, json!({}), &[], true);
        let a = p.next_usual(0).unwrap();
        p.record_failure(a.route, unable.clone());
        assert_eq!(
            p.next_usual(0).map(|a| a.route),
            Some(1),
            "the untried route's attempt goes to the next"
        );
        p.record_failure(1, unable);
        assert_eq!(p.next(0, false), None);
        let err = p.final_error(vec![]);
        assert_eq!((err.status(), err.code()), (400, "invalid_request"));
        assert!(err.message().contains("logprobs"), "{}", err.message());

        let mut p = plan_with(&c, json!({}), &[], true);
        let a = p.next_usual(0).unwrap();
        p.record_failure(
            a.route,
            Verdict {
                class: FailureClass::Unable,
                message: None,
                param: Some("x".into()),
                retry_after_ms: None,
                read_from: None,
                provoked: false,
            },
        );
        let b = p.next_usual(0).unwrap();
        p.record_failure(b.route, verdict(FailureClass::Upstream5xx));
        assert_eq!(
            p.final_error(vec![]).status(),
            502,
            "a route that was tried decides the answer"
        );
    }

    fn verdict(class: FailureClass) -> Verdict {
        Verdict {
            class,
            message: Some(format!("{class:?}")),
            param: None,
            retry_after_ms: None,
            read_from: None,
            provoked: false,
        }
    }

    fn drain(p: &mut Plan, class: FailureClass) -> Vec<(usize, u64)> {
        let mut out = vec![];
        while let Some(a) = p.next_usual(0) {
            out.push((a.route, a.deadline_ms));
            p.record_failure(a.route, verdict(class));
        }
        out
    }

    #[test]
    fn tries_every_route_in_order_and_the_last_gets_sixty_seconds() {
        let c = three();
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx),
            vec![(0, 15_000), (1, 15_000), (2, 60_000)]
        );
        assert_eq!(p.final_error(vec![]), ApiError::ProviderError { model: "m".into() });
    }

    #[test]
    fn deadlines_for_reasoning_slow_and_non_stream() {
        let c = catalog(
            json!([
                route("r0", "a", json!({"slow": true})),
                route("r1", "b", json!({})),
                route("r2", "b", json!({}))
            ]),
            true,
        );
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Timeout),
            vec![(0, 45_000), (1, 45_000), (2, 60_000)],
            "a slow route of a reasoning model gets the longer of 30 s and 45 s"
        );
        let c = catalog(
            json!([route("r0", "a", json!({"slow": true})), route("r1", "b", json!({}))]),
            false,
        );
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        assert_eq!(p.next_usual(0).unwrap().deadline_ms, 30_000, "slow alone: 30 s");
        // Non-stream: 15 s + 1 s per 20 tokens of max_tokens (model's 1000 when absent), capped at 300 s.
        let mut p = plan_with(&c, json!({"max_tokens": 100}), &[], true);
        assert_eq!(p.next_usual(0).unwrap().deadline_ms, 20_000);
        let mut p = plan_with(&c, json!({}), &[], true);
        assert_eq!(p.next_usual(0).unwrap().deadline_ms, 65_000);
        let mut p = plan_with(&c, json!({"max_tokens": 1_000_000}), &[], true);
        assert_eq!(p.next_usual(0).unwrap().deadline_ms, 300_000);
    }

    #[test]
    fn a_demoted_last_route_passes_the_long_deadline_to_the_last_healthy_one() {
        let c = three();
        let demoted = RouteHealth {
            demoted: true,
            consecutive_failures: 3,
            account_cooling: false,
        };
        // Usual order already has the demoted route last (the caller orders by health).
        let mut p = plan_with(
            &c,
            json!({"stream": true}),
            &[RouteHealth::default(), RouteHealth::default(), demoted],
            true,
        );
        assert_eq!(
            drain(&mut p, FailureClass::Timeout),
            vec![(0, 15_000), (1, 60_000), (2, 15_000)]
        );
    }

    #[test]
    fn allow_fallbacks_false_and_max_attempts_limit_tries() {
        let c = three();
        let mut p = plan_with(&c, json!({"stream": true}), &[], false);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx),
            vec![(0, 60_000)],
            "one try, and it is the last"
        );
        let mut c = three();
        c = Catalog::parse(
            json!({"providers": serde_json::to_value(&c.doc().providers).unwrap(),
                   "models": serde_json::to_value(&c.doc().models).unwrap(),
                   "policy": {"max_attempts": 2}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        assert_eq!(drain(&mut p, FailureClass::Upstream5xx), vec![(0, 15_000), (1, 60_000)]);
    }

    #[test]
    fn a_full_route_is_passed_over_but_stays_a_fallback() {
        let c = three();
        let mut p = plan_with(&c, json!({}), &[], true);
        assert_eq!(p.upcoming(), vec![0, 1, 2]);
        p.bring_forward(1);
        assert_eq!(p.upcoming(), vec![1, 0, 2]);
        let first = p.next(0, false).unwrap();
        assert_eq!(first.route, 1);
        p.record_failure(1, verdict(FailureClass::Upstream5xx));
        assert_eq!(p.upcoming(), vec![0, 2]);
        p.bring_forward(7); // not upcoming: nothing moves
        assert_eq!(p.upcoming(), vec![0, 2]);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![0, 2]
        );
        assert!(p.upcoming().is_empty());
    }

    #[test]
    fn provider_filters() {
        let c = three();
        let mut p = plan_with(&c, json!({"provider": {"only": ["b", "r2"]}}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        let mut p = plan_with(&c, json!({"provider": {"ignore": ["a"]}}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![1, 2]
        );
        let mut p = plan_with(&c, json!({"provider": {"order": ["a2", "b"]}}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Upstream5xx)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![2, 1, 0]
        );
        let model = c.model("m").unwrap();
        let order: Vec<_> = (0..3).map(|i| (i, RouteHealth::default())).collect();
        let r = request(json!({"provider": {"max_price": {"prompt": 0.5}}}));
        assert!(matches!(
            Plan::with_order(&c, model, &r, &c.policy_for(model), &order, true, 0),
            Err(ApiError::InvalidRequest { .. })
        ));
    }

    #[test]
    fn class_rules_narrow_or_stop() {
        let c = three();
        // invalid_request: never falls back.
        let mut p = plan_with(&c, json!({}), &[], true);
        let a = p.next_usual(0).unwrap();
        p.record_failure(a.route, verdict(FailureClass::InvalidRequest));
        assert!(p.next_usual(0).is_none());
        assert!(matches!(p.final_error(vec![]), ApiError::UpstreamInvalidRequest { .. }));
        // account: skip every route on the same upstream account (r0 and r2 share acct-a).
        let mut p = plan_with(&c, json!({}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::Account)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![0, 1]
        );
    }

    #[test]
    fn context_length_goes_only_to_larger_windows() {
        let c = catalog(
            json!([
                route("small", "a", json!({"context_window": 4000})),
                route("same", "b", json!({"context_window": 4000})),
                route("big", "b", json!({"context_window": 32000}))
            ]),
            false,
        );
        let mut p = plan_with(&c, json!({}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::ContextLength)
                .iter()
                .map(|a| a.0)
                .collect::<Vec<_>>(),
            vec![0, 2]
        );
        assert!(
            matches!(p.final_error(vec![]), ApiError::UpstreamInvalidRequest { .. }),
            "nowhere to go: the model's message"
        );
    }

    #[test]
    fn unsupported_param_goes_only_to_routes_not_listing_it() {
        let c = catalog(
            json!([
                route("r0", "a", json!({"unsupported_params": ["logprobs"]})),
                route("r1", "b", json!({"unsupported_params": ["logprobs"]})),
                route("r2", "b", json!({}))
            ]),
            false,
        );
        let mut p = plan_with(&c, json!({"logprobs": true}), &[], true);
        let a = p.next_usual(0).unwrap();
        p.record_failure(
            a.route,
            Verdict {
                class: FailureClass::UnsupportedParam,
                message: None,
                param: Some("logprobs".into()),
                retry_after_ms: None,
                read_from: None,
                provoked: false,
            },
        );
        assert_eq!(p.next_usual(0).unwrap().route, 2);
    }

    #[test]
    fn all_capacity_failures_make_a_503_with_retry_after() {
        let c = three();
        let mut p = plan_with(&c, json!({}), &[], true);
        while let Some(a) = p.next_usual(0) {
            p.record_failure(
                a.route,
                Verdict {
                    class: FailureClass::Overloaded,
                    message: None,
                    param: None,
                    retry_after_ms: Some(7_000),
                    read_from: None,
                    provoked: false,
                },
            );
        }
        match p.final_error(vec!["other".into()]) {
            ApiError::CapacityExhausted {
                available,
                retry_after_s,
                ..
            } => {
                assert_eq!(available, vec!["other".to_string()]);
                assert_eq!(retry_after_s, 7);
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn one_more_try_for_a_slow_route() {
        let c = three();
        let health = [
            RouteHealth {
                consecutive_failures: 2,
                ..RouteHealth::default()
            },
            RouteHealth::default(),
            RouteHealth {
                consecutive_failures: 1,
                ..RouteHealth::default()
            },
        ];
        let mut p = plan_with(&c, json!({"stream": true}), &health, true);
        let classes = [FailureClass::Timeout, FailureClass::Upstream5xx, FailureClass::Timeout];
        while let Some(a) = p.next_usual(0) {
            p.record_failure(a.route, verdict(classes[a.route]));
        }
        // Route 1 failed by 5xx; of the timed-out ones, route 2 has fewer consecutive failures.
        assert_eq!(
            p.next(0, false),
            Some(Attempt {
                route: 2,
                api: Api::Chat,
                deadline_ms: 60_000,
                extra_try: true,
                probe: false,
                last_resort: false
            })
        );
        assert_eq!(p.next(0, false), None, "once per request");
        let mut p = plan_with(&c, json!({}), &[], true);
        drain(&mut p, FailureClass::Upstream5xx);
        assert_eq!(p.next(0, false), None, "no timeout, no extra try");
    }

    #[test]
    fn nothing_more_is_tried_after_the_client_left() {
        let c = three();
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        let a = p.next(0, false).unwrap();
        p.record_failure(a.route, verdict(FailureClass::Timeout));
        assert_eq!(p.next(0, true), None, "no next route for a client that left");
        assert!(p.cancelled());
        let mut p = plan_with(&c, json!({"stream": true}), &[], true);
        while let Some(a) = p.next_usual(0) {
            p.record_failure(a.route, verdict(FailureClass::Timeout));
        }
        assert_eq!(p.next(0, true), None, "and no one more try");
        assert!(p.next(0, false).is_some(), "which a client still there gets");
    }

    #[test]
    fn sort_by_latency_or_throughput_keeps_demoted_routes_last() {
        let h = RouteHealth::default();
        let d = RouteHealth {
            demoted: true,
            consecutive_failures: 3,
            account_cooling: false,
        };
        let ttfb = [Some(900.0), None, Some(100.0), Some(50.0)];
        let mut order = vec![(0, h), (1, h), (2, h), (3, d)];
        sort_by_measure(&mut order, |i| ttfb[i], false);
        assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), vec![2, 0, 1, 3]);
        let tps = [Some(10.0), Some(80.0), None, Some(500.0)];
        let mut order = vec![(0, h), (1, h), (2, h), (3, d)];
        sort_by_measure(&mut order, |i| tps[i], true);
        assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), vec![1, 0, 2, 3]);
    }

    #[test]
    fn the_budget_caps_every_deadline() {
        let c = three();
        let model = c.model("m").unwrap();
        let mut policy = c.policy_for(model);
        policy.pre_content_budget_ms = 20_000;
        let order: Vec<_> = (0..3).map(|i| (i, RouteHealth::default())).collect();
        let mut p = Plan::with_order(
            &c,
            model,
            &request(json!({"stream": true})),
            &policy,
            &order,
            true,
            1_000,
        )
        .unwrap();
        assert_eq!(p.next_usual(1_000).unwrap().deadline_ms, 15_000);
        assert_eq!(p.next_usual(16_000).unwrap().deadline_ms, 5_000);
        assert_eq!(p.next_usual(21_000), None);
    }

    fn input<'a>(
        c: &'a Catalog,
        request: &'a ClientRequest,
        policy: &'a Policy,
        health: &'a ModelHealth,
        stats: &'a BTreeMap<String, RouteStats>,
        probes_won: &'a [usize],
        now_ms: u64,
    ) -> PlanInput<'a> {
        let model = c.model("m").unwrap();
        PlanInput {
            catalog: c,
            model,
            request,
            policy,
            // Leaked: a test's plan borrows it for the test's length.
            route_accounts: Box::leak(c.route_accounts(model).into_boxed_slice()),
            health,
            stats,
            probes_won,
            key_allow_fallbacks: None,
            account_allow_fallbacks: None,
            conversation: None,
            now_ms,
        }
    }

    /// The three-route model with `balance: "spread"` and these weights.
    fn spread_catalog(weights: [f64; 3]) -> Catalog {
        let mut c = serde_json::to_value(three().doc()).unwrap();
        c["models"][0]["balance"] = json!("spread");
        for (i, w) in weights.iter().enumerate() {
            c["models"][0]["routes"][i]["weight"] = json!(w);
        }
        Catalog::parse(c.to_string().as_bytes()).unwrap()
    }

    fn first_route(c: &Catalog, health: &ModelHealth, body: serde_json::Value, conversation: &str) -> usize {
        let r = request(body);
        let policy = c.policy_for(c.model("m").unwrap());
        let stats = BTreeMap::new();
        let mut p = Plan::for_request(PlanInput {
            conversation: Some(conversation),
            ..input(c, &r, &policy, health, &stats, &[], 0)
        })
        .unwrap();
        p.next_usual(0).unwrap().route
    }

    #[test]
    fn spread_shares_conversations_by_weight_and_keeps_each_on_its_route() {
        let c = spread_catalog([1.0, 1.0, 2.0]);
        let h = ModelHealth::default();
        let mut count = [0usize; 3];
        for i in 0..4_000 {
            let conv = format!("c{i}");
            let first = first_route(&c, &h, json!({}), &conv);
            assert_eq!(
                first,
                first_route(&c, &h, json!({}), &conv),
                "the same conversation, the same route"
            );
            count[first] += 1;
        }
        assert!(count[2] > 1_800 && count[0] > 850 && count[1] > 850, "{count:?}");
        // The client's own order wins over spreading.
        assert!((0..200).all(|i| first_route(&c, &h, json!({"provider": {"order": ["r1"]}}), &format!("c{i}")) == 1));
    }

    #[test]
    fn a_demoted_route_loses_its_conversations_to_the_healthy_ones_only() {
        let c = spread_catalog([1.0, 1.0, 1.0]);
        let healthy = ModelHealth::default();
        let mut demoted = ModelHealth::default();
        for _ in 0..3 {
            demoted.observe(
                &crate::health::Observation::at(
                    "r1",
                    "acct-b",
                    crate::health::AttemptOutcome::Failure(FailureClass::Upstream5xx),
                    0,
                ),
                &crate::health::HealthConfig::default(),
            );
        }
        let mut moved = 0;
        for i in 0..600 {
            let conv = format!("c{i}");
            let (before, after) = (
                first_route(&c, &healthy, json!({}), &conv),
                first_route(&c, &demoted, json!({}), &conv),
            );
            if before == 1 {
                assert_ne!(after, 1);
                moved += 1;
            } else {
                assert_eq!(before, after, "{conv} was not on the demoted route and stays");
            }
        }
        assert!(moved > 100, "{moved}");
    }

    fn routes_of(p: &mut Plan) -> Vec<(usize, bool)> {
        let mut out = vec![];
        while let Some(a) = p.next_usual(0) {
            out.push((a.route, a.probe));
            p.record_failure(a.route, verdict(FailureClass::Upstream5xx));
        }
        out
    }

    #[test]
    fn a_won_probe_keeps_its_place_and_a_lost_one_waits_at_the_end() {
        use crate::health::{AttemptOutcome, HealthConfig, Observation};
        let c = three();
        let model = c.model("m").unwrap();
        let policy = c.policy_for(model);
        let cfg = HealthConfig::from_policy(&policy);
        let mut health = ModelHealth::default();
        for _ in 0..cfg.demote_after {
            let failure = AttemptOutcome::Failure(FailureClass::Upstream5xx);
            health.observe(&Observation::at("r0", "acct-a", failure, 1_000), &cfg);
        }
        let r = request(json!({}));
        let stats = BTreeMap::new();
        let cooling = 2_000;
        let mut p = Plan::for_request(input(&c, &r, &policy, &health, &stats, &[], cooling)).unwrap();
        assert_eq!(
            routes_of(&mut p),
            vec![(1, false), (2, false), (0, false)],
            "cooling: last"
        );
        let due = 1_000 + cfg.cooldown_ms;
        assert_eq!(health.probe_claims(&c.route_accounts(model), due).len(), 1);
        let mut won = Plan::for_request(input(&c, &r, &policy, &health, &stats, &[0], due)).unwrap();
        assert_eq!(
            routes_of(&mut won),
            vec![(0, true), (1, false), (2, false)],
            "won: first, a probe"
        );
        let mut lost = Plan::for_request(input(&c, &r, &policy, &health, &stats, &[], due)).unwrap();
        assert_eq!(
            routes_of(&mut lost),
            vec![(1, false), (2, false), (0, false)],
            "lost: last"
        );
    }

    #[test]
    fn allow_fallbacks_comes_from_the_request_then_the_key_then_the_account_then_the_platform() {
        let c = three();
        let model = c.model("m").unwrap();
        let policy = c.policy_for(model);
        let (health, stats) = (ModelHealth::default(), BTreeMap::new());
        let tried = |body: serde_json::Value, key: Option<bool>, account: Option<bool>| {
            let r = request(body);
            let mut i = input(&c, &r, &policy, &health, &stats, &[], 0);
            i.key_allow_fallbacks = key;
            i.account_allow_fallbacks = account;
            routes_of(&mut Plan::for_request(i).unwrap()).len()
        };
        assert_eq!(tried(json!({}), None, None), 3, "platform default: fall back");
        assert_eq!(tried(json!({}), None, Some(false)), 1, "the account's setting");
        assert_eq!(
            tried(json!({}), Some(true), Some(false)),
            3,
            "the key's beats the account's"
        );
        let no = json!({"provider": {"allow_fallbacks": false}});
        assert_eq!(tried(no, Some(true), Some(true)), 1, "the request's beats both");
    }

    #[test]
    fn sort_latency_orders_by_the_measured_median_ttfb() {
        let c = three();
        let model = c.model("m").unwrap();
        let policy = c.policy_for(model);
        let health = ModelHealth::default();
        let stats: BTreeMap<String, RouteStats> = [("r0", 300), ("r2", 100)]
            .into_iter()
            .map(|(r, t)| {
                (
                    r.to_string(),
                    RouteStats {
                        median_ttfb_ms: Some(t),
                        ..RouteStats::default()
                    },
                )
            })
            .collect();
        let r = request(json!({"provider": {"sort": "latency"}}));
        let mut p = Plan::for_request(input(&c, &r, &policy, &health, &stats, &[], 0)).unwrap();
        assert_eq!(
            routes_of(&mut p).into_iter().map(|(i, _)| i).collect::<Vec<_>>(),
            vec![2, 0, 1],
            "measured fastest first, unmeasured last"
        );
    }

    #[test]
    fn routes_on_a_cooling_account_are_skipped_unless_nothing_else_is_left() {
        let c = three();
        let cooling = RouteHealth {
            demoted: true,
            account_cooling: true,
            ..RouteHealth::default()
        };
        let healthy = RouteHealth::default();
        let mut p = plan_with(&c, json!({}), &[cooling, healthy, healthy], true);
        let mut tried = vec![];
        while let Some(a) = p.next(0, false) {
            tried.push((a.route, a.last_resort));
            p.record_failure(a.route, verdict(FailureClass::Upstream5xx));
        }
        assert_eq!(tried, vec![(1, false), (2, false)], "SPEC §9: skipped");
        let mut p = plan_with(&c, json!({}), &[cooling, cooling, cooling], true);
        let a = p.next(0, false).unwrap();
        assert_eq!(
            (a.route, a.last_resort),
            (0, true),
            "SPEC §8: never removed, tried last"
        );
    }

    #[test]
    fn provider_order_does_not_lift_a_demoted_route_ahead_of_healthy_ones() {
        let c = three();
        let demoted = RouteHealth {
            demoted: true,
            ..RouteHealth::default()
        };
        let model = c.model("m").unwrap();
        // Usual order by health: r1, r2, then demoted r0.
        let order = vec![(1, RouteHealth::default()), (2, RouteHealth::default()), (0, demoted)];
        let r = request(json!({"provider": {"order": ["r0", "r2"]}}));
        let mut p = Plan::with_order(&c, model, &r, &c.policy_for(model), &order, true, 0).unwrap();
        let tried: Vec<usize> = drain(&mut p, FailureClass::Upstream5xx)
            .into_iter()
            .map(|(i, _)| i)
            .collect();
        assert_eq!(
            tried,
            vec![2, 1, 0],
            "listed healthy first, then the rest; the demoted one last"
        );
    }

    #[test]
    fn every_route_refusing_on_policy_is_a_content_policy_error() {
        let c = three();
        let mut p = plan_with(&c, json!({}), &[], true);
        assert_eq!(
            drain(&mut p, FailureClass::ContentPolicy).len(),
            3,
            "content_policy falls back"
        );
        assert_eq!(
            p.final_error(vec![]),
            ApiError::ContentPolicy {
                message: "ContentPolicy".into()
            }
        );
        let mut p = plan_with(&c, json!({}), &[], true);
        let a = p.next_usual(0).unwrap();
        p.record_failure(a.route, verdict(FailureClass::ContentPolicy));
        let a = p.next_usual(0).unwrap();
        p.record_failure(a.route, verdict(FailureClass::ContextLength));
        assert!(
            matches!(p.final_error(vec![]), ApiError::UpstreamInvalidRequest { .. }),
            "mixed client refusals stay upstream_invalid_request"
        );
    }
}
