//! The attempt driver (SPEC §3–§6): plan the routes, try them one after another with their
//! first-content deadlines, classify each failure, and commit the first route that produces
//! content. Decisions come from `switchyard_core` (`Plan`, `classify`, `Relay`); this module does
//! the I/O: the upstream fetch with an `AbortController`, the deadline race, reading the body.
//!
//! After a stream commits, `stream.rs` relays the rest in `ctx.wait_until`. Every request ends as
//! a generation record written off the critical path. The upstream key is read from the Worker's
//! secrets by name and never leaves this module except to the upstream.

use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;

use futures_util::future::{select, Either};
use js_sys::Uint8Array;
use switchyard_core::catalog::{AuthScheme, Catalog, Model, Policy, Price, Provider, Route};
use switchyard_core::classify::{
    classify_error_payload, classify_status, is_error_payload, Blame, FailureClass, Verdict,
};
use switchyard_core::dialect::{chat, redact, ClientRequest, Sort};
use switchyard_core::generation::{cost_micros, settle_usage, short_message, AttemptRecord, GenerationRecord, Outcome};
use switchyard_core::health::{AttemptOutcome, HealthConfig, Observation, RequestObservation};
use switchyard_core::plan::{sort_by_measure, Attempt, Plan};
use switchyard_core::relay::{Relay, Step, StreamDialect};
use switchyard_core::sse::{SseEvent, SseParser};
use switchyard_core::ApiError;
use worker::{Context, Env, Fetch, Headers, Method, Request, RequestInit, ResponseBuilder};

use crate::billing::{self, Hold};
use crate::cancel::{Body, Canceller};
use crate::clock::{in_request, now_ms, sleep, Sleep};
use crate::health;
use crate::http::{HandlerResult, RequestCtx};
use crate::store::KeyRecord;
use crate::stream;

/// Resolves `fut` unless `deadline` comes first. One deadline serves many waits (one timer for
/// an attempt, not one per read).
async fn before<F: Future>(deadline: Pin<&mut Sleep>, fut: F) -> Option<F::Output> {
    match select(pin!(fut), deadline).await {
        Either::Left((v, _)) => Some(v),
        Either::Right(_) => None,
    }
}

/// The upstream key named by the provider's `key_secret` (`None` when it names none).
fn upstream_key(env: &Env, provider: &Provider) -> Result<Option<String>, ApiError> {
    let Some(name) = &provider.key_secret else {
        return Ok(None);
    };
    match env
        .secret(name)
        .map(|s| s.to_string())
        .or_else(|_| env.var(name).map(|v| v.to_string()))
    {
        Ok(key) => Ok(Some(key)),
        Err(_) => {
            // The secret's name is configuration, not a secret; its value is never logged.
            worker::console_error!(
                "{{\"event\":\"missing_upstream_secret\",\"provider\":{:?},\"secret\":{:?}}}",
                provider.id,
                name
            );
            Err(ApiError::Internal {
                label: "missing_upstream_secret",
            })
        }
    }
}

/// The generation being recorded for this request, the hold it settles, and the outcomes it
/// reports to route health.
pub struct Journal {
    pub record: GenerationRecord,
    started_ms: u64,
    hold: Option<Hold>,
    health: HealthConfig,
    observations: Vec<Observation>,
    /// The request was a client error (`upstream_invalid_request`): not counted on the status page.
    client_error: bool,
}

impl Journal {
    /// Records an attempt and applies its outcome to this isolate's health snapshot at once.
    fn attempt(&mut self, record: AttemptRecord, obs: Observation) {
        health::apply_local(&self.record.model, &obs, &self.health);
        self.observations.push(obs);
        self.record.attempts.push(record);
    }

    /// Finishes the record: settles it (hold released, delivered usage charged, generation
    /// written) and reports the outcomes to route health — awaited: callers run this inside
    /// `wait_until`.
    pub async fn finish(mut self, env: Env) {
        let now = now_ms();
        self.record.duration_ms = now.saturating_sub(self.started_ms);
        let answered = self.record.outcome != Outcome::Failed;
        if let (Some(obs), Some(last)) = (self.observations.last_mut(), self.record.attempts.last()) {
            if answered {
                obs.output_tokens = last.delivered_output;
                obs.duration_ms = now.saturating_sub(obs.at_ms.saturating_sub(obs.duration_ms));
            }
        }
        let stream_ttfb_ms = if self.record.stream && answered {
            self.record.attempts.last().and_then(|a| a.ttfb_ms)
        } else {
            None
        };
        let request = RequestObservation {
            at_ms: now,
            answered,
            counted: !self.client_error,
            stream_ttfb_ms,
        };
        let model = self.record.model.clone();
        let report = health::report(
            &env,
            &model,
            self.health,
            std::mem::take(&mut self.observations),
            request,
        );
        let settle = billing::settle(env.clone(), self.hold.take(), self.record);
        futures_util::future::join(settle, report).await;
    }
}

/// An attempt that did not commit.
struct Failed {
    verdict: Verdict,
    http_status: Option<u16>,
}

impl Failed {
    fn new(class: FailureClass, message: &str, http_status: Option<u16>) -> Failed {
        Failed {
            verdict: Verdict {
                class,
                message: Some(message.to_string()),
                param: None,
                retry_after_ms: None,
            },
            http_status,
        }
    }
}

/// A committed stream, ready to relay.
pub struct Live {
    pub body: Body,
    pub parser: SseParser,
    pub relay: Relay,
    /// Events read in the chunk that committed, after the committing one.
    pub pending: Vec<SseEvent>,
    pub head: Vec<u8>,
    pub controller: Canceller,
    pub content_type: String,
}

/// What a committed attempt produced.
enum Committed {
    Body {
        bytes: Vec<u8>,
        status: u16,
        content_type: String,
        usage: Option<switchyard_core::dialect::Usage>,
        output_chars: usize,
    },
    Stream(Live),
}

/// Everything one attempt needs to reach its route.
struct Target<'a> {
    provider: &'a Provider,
    route: &'a Route,
    key: Option<String>,
}

fn build_request(target: &Target, request: &ClientRequest) -> Result<Request, ApiError> {
    let url = format!(
        "{}{}",
        target.provider.base_url.trim_end_matches('/'),
        request.api.upstream_path()
    );
    let headers = Headers::new();
    let set = |name: &str, value: &str| {
        headers
            .set(name, value)
            .map_err(|_| ApiError::Internal { label: "header" })
    };
    set("content-type", "application/json")?;
    set(
        "accept",
        if request.stream {
            "text/event-stream"
        } else {
            "application/json"
        },
    )?;
    if let Some(key) = &target.key {
        match target.provider.auth {
            AuthScheme::Bearer => set("authorization", &format!("Bearer {key}"))?,
            AuthScheme::XApiKey => set("x-api-key", key)?,
        }
    }
    let body = request.upstream_body(&target.route.upstream_model);
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(Uint8Array::from(body.as_slice()).into()));
    Request::new_with_init(&url, &init).map_err(|_| ApiError::Internal {
        label: "upstream_request",
    })
}

/// One attempt: fetch, then read until the first content (stream) or the whole body
/// (non-stream), all within `deadline_ms`. Aborts the upstream on any failure.
async fn try_route(target: &Target<'_>, request: &ClientRequest, deadline_ms: u64) -> Result<Committed, Failed> {
    let mut deadline = pin!(sleep(deadline_ms));
    let upstream = build_request(target, request)
        .map_err(|_| Failed::new(FailureClass::Connect, "could not build the upstream request", None))?;
    let controller = Canceller::new();
    let fetch = Fetch::Request(upstream);
    let send = async {
        match controller.signal() {
            Some(signal) => fetch.send_with_signal(&signal).await,
            None => fetch.send().await,
        }
    };
    let mut response = match before(deadline.as_mut(), send).await {
        None => {
            controller.abort();
            return Err(Failed::new(
                FailureClass::Timeout,
                "no response within the first-content deadline",
                None,
            ));
        }
        Some(Err(_)) => {
            return Err(Failed::new(
                FailureClass::Connect,
                "connection failed or closed before the response",
                None,
            ))
        }
        Some(Ok(r)) => r,
    };
    let status = response.status_code();
    let content_type = response
        .headers()
        .get("content-type")
        .ok()
        .flatten()
        .unwrap_or_default();
    let redact_key = |m: String| redact(&m, target.key.as_deref());

    if !(200..300).contains(&status) {
        let retry_after = response.headers().get("retry-after").ok().flatten();
        let body = before(deadline.as_mut(), response.bytes())
            .await
            .and_then(Result::ok)
            .unwrap_or_default();
        controller.abort();
        let mut verdict = classify_status(status, retry_after.as_deref(), &body);
        verdict.message = verdict.message.map(redact_key);
        return Err(Failed {
            verdict,
            http_status: Some(status),
        });
    }

    let is_sse = content_type.starts_with("text/event-stream");
    if !request.stream || !is_sse {
        // Non-stream, or a stream request answered with a plain body (often an error object).
        let body = match before(deadline.as_mut(), response.bytes()).await {
            None => {
                controller.abort();
                return Err(Failed::new(
                    FailureClass::Timeout,
                    "the response body did not complete within the deadline",
                    Some(status),
                ));
            }
            Some(Err(_)) => {
                return Err(Failed::new(
                    FailureClass::Connect,
                    "the connection broke while reading the response",
                    Some(status),
                ))
            }
            Some(Ok(b)) => b,
        };
        if request.stream {
            let verdict = match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(v) if is_error_payload(&v) => classify_error_payload(&v),
                _ => Verdict {
                    class: FailureClass::BadResponse,
                    message: Some("a stream was requested but the answer is not an event stream".into()),
                    param: None,
                    retry_after_ms: None,
                },
            };
            return Err(Failed {
                verdict: Verdict {
                    message: verdict.message.map(redact_key),
                    ..verdict
                },
                http_status: Some(status),
            });
        }
        return match chat::inspect_body(&body) {
            Ok(info) => Ok(Committed::Body {
                bytes: body,
                status,
                content_type,
                usage: info.usage,
                output_chars: info.output_chars,
            }),
            Err(verdict) => Err(Failed {
                verdict: Verdict {
                    message: verdict.message.map(redact_key),
                    ..verdict
                },
                http_status: Some(status),
            }),
        };
    }

    let body = match response.body() {
        worker::ResponseBody::Stream(stream) => Body::new(stream),
        _ => None,
    };
    let mut body =
        body.ok_or_else(|| Failed::new(FailureClass::BadResponse, "the response has no body", Some(status)))?;
    let mut parser = SseParser::new();
    let dialect = StreamDialect::of(request.api).ok_or_else(|| {
        Failed::new(
            FailureClass::BadResponse,
            "this API's streams are not served yet",
            Some(status),
        )
    })?;
    let mut relay = Relay::new(dialect, request.include_usage);
    let mut events = Vec::new();
    loop {
        let chunk = match before(deadline.as_mut(), body.next()).await {
            None => {
                controller.abort();
                return Err(Failed::new(
                    FailureClass::Timeout,
                    "no content within the first-content deadline",
                    Some(status),
                ));
            }
            Some(chunk) => chunk,
        };
        let ended = match chunk {
            Some(Ok(bytes)) => {
                parser.push(&bytes, &mut events);
                false
            }
            Some(Err(_)) => {
                controller.abort();
                return Err(Failed::new(
                    FailureClass::BadResponse,
                    "the connection broke before the first content",
                    Some(status),
                ));
            }
            None => {
                events.extend(parser.finish());
                true
            }
        };
        let mut drained = events.drain(..);
        for ev in drained.by_ref() {
            match relay.on_event(ev) {
                Step::Commit(head) => {
                    let pending: Vec<SseEvent> = drained.collect();
                    return Ok(Committed::Stream(Live {
                        body,
                        parser,
                        relay,
                        pending,
                        head,
                        controller,
                        content_type,
                    }));
                }
                Step::Fail(verdict) => {
                    controller.abort();
                    return Err(Failed {
                        verdict: Verdict {
                            message: verdict.message.map(redact_key),
                            ..verdict
                        },
                        http_status: Some(status),
                    });
                }
                // Before commit the relay only holds, commits or fails.
                Step::Hold | Step::Skip | Step::Send(_) | Step::End { .. } => {}
            }
        }
        drop(drained);
        if ended {
            let verdict = match relay.on_close() {
                Step::Fail(v) => v,
                _ => Verdict {
                    class: FailureClass::BadResponse,
                    message: Some("stream closed before the first content".into()),
                    param: None,
                    retry_after_ms: None,
                },
            };
            return Err(Failed {
                verdict,
                http_status: Some(status),
            });
        }
    }
}

fn response_headers(content_type: &str) -> Headers {
    let out = Headers::new();
    let _ = out.set(
        "content-type",
        if content_type.is_empty() {
            "application/json"
        } else {
            content_type
        },
    );
    let _ = out.set("cache-control", "no-cache");
    out
}

/// Serves one validated request end to end: plan, hold, attempts, and — whatever happens after
/// the hold — settlement.
pub async fn serve(
    env: &Env,
    ctx: &Context,
    catalog: Rc<Catalog>,
    request: ClientRequest,
    key: &KeyRecord,
    rc: &mut RequestCtx,
) -> HandlerResult {
    let model: Model = catalog
        .model(&request.model)
        .cloned()
        .ok_or_else(|| ApiError::ModelNotFound {
            model: request.model.clone(),
            available: catalog.model_ids(),
        })?;
    let policy = catalog.policy_for(&model);
    let allow_fallbacks = request
        .provider
        .allow_fallbacks
        .or(key.allow_fallbacks())
        .or(key.account_allow_fallbacks())
        .unwrap_or(policy.allow_fallbacks);
    // Usual order from route health (SPEC §8), probes claimed; `sort` by measured stats.
    let view = health::view(env, &model, &policy).await;
    let (mut order, probes) = health::order(env, &catalog, &model, &view, &policy).await;
    let stat = |i: usize| model.routes.get(i).and_then(|r| view.stats.get(&r.id));
    match request.provider.sort {
        Some(Sort::Latency) => sort_by_measure(
            &mut order,
            |i| stat(i).and_then(|s| s.median_ttfb_ms).map(|t| t as f64),
            false,
        ),
        Some(Sort::Throughput) => sort_by_measure(&mut order, |i| stat(i).and_then(|s| s.tokens_per_s), true),
        Some(Sort::Price) | None => {}
    }
    let started = now_ms();
    let mut plan = Plan::new(&catalog, &model, &request, &policy, &order, allow_fallbacks, started)?;

    let max_tokens = request.max_tokens.unwrap_or(model.max_output_tokens);
    let prices: Vec<(usize, &Price)> = plan
        .candidates()
        .into_iter()
        .filter_map(|i| model.routes.get(i).map(|r| (i, &r.price)))
        .collect();
    let hold = billing::place_hold(
        env,
        ctx,
        key,
        &rc.generation_id,
        &prices,
        request.body_len,
        max_tokens,
        &policy,
    )
    .await?;
    plan.keep_only(&hold.keep);
    let mut journal = Journal {
        record: GenerationRecord {
            id: rc.generation_id.clone(),
            account_id: key.account_id.clone(),
            key_id: key.id.clone(),
            model: model.id.clone(),
            api: "chat",
            stream: request.stream,
            outcome: Outcome::Failed,
            route: None,
            provider: None,
            usage: None,
            estimated: false,
            delivered_output: 0,
            error_code: None,
            total_cost_micros: 0,
            created_at_ms: started,
            duration_ms: 0,
            hold_path: Some(hold.path.as_str()),
            attempts: Vec::new(),
        },
        started_ms: started,
        hold: Some(hold),
        health: HealthConfig::from_policy(&policy),
        observations: Vec::new(),
        client_error: false,
    };
    let outcome = attempts(env, &catalog, &model, &request, &mut plan, &mut journal, &probes, rc).await;
    match outcome {
        Ok((route, committed)) => deliver(env, ctx, committed, route, &request, max_tokens, policy, journal),
        Err(err) => {
            // No route answered: the hold is released in full, nothing is charged.
            journal.client_error = matches!(err, ApiError::UpstreamInvalidRequest { .. });
            journal.record.error_code = Some(if plan.cancelled() { "cancelled" } else { err.code() }.to_string());
            ctx.wait_until(journal.finish(env.clone()));
            Err(err)
        }
    }
}

/// Tries routes until one commits; every attempt lands in the journal. The error is the
/// request's final one (SPEC §13).
#[allow(clippy::too_many_arguments)]
async fn attempts(
    env: &Env,
    catalog: &Catalog,
    model: &Model,
    request: &ClientRequest,
    plan: &mut Plan,
    journal: &mut Journal,
    probes: &[usize],
    rc: &mut RequestCtx,
) -> Result<(Route, Committed), ApiError> {
    let mut ordinal = 0;
    // A client that left (request.signal, `enable_request_signal`) gets no further attempt.
    while let Some(Attempt {
        route: route_idx,
        deadline_ms,
        extra_try,
    }) = plan.next(now_ms(), rc.client.aborted())
    {
        if !in_request() {
            // Polled outside this request (see `clock::in_request`): starting a fetch here would
            // throw into Wasm. End without blaming any route.
            return Err(ApiError::Internal { label: "lost_context" });
        }
        // The plan only names routes of this model, and validation guarantees their providers.
        let route = model
            .routes
            .get(route_idx)
            .ok_or(ApiError::Internal { label: "plan_route" })?;
        let provider = catalog.provider(&route.provider).ok_or(ApiError::Internal {
            label: "route_provider",
        })?;
        let target = Target {
            provider,
            route,
            key: upstream_key(env, provider)?,
        };
        let mut obs = Observation {
            route: route.id.clone(),
            account: provider.account().to_string(),
            outcome: AttemptOutcome::Success,
            at_ms: 0,
            stream: request.stream,
            ttfb_ms: None,
            output_tokens: 0,
            duration_ms: 0,
            extra_try,
            probe: probes.contains(&route_idx),
            retry_after_ms: None,
        };
        ordinal += 1;
        let attempt_started = now_ms();
        let mut record = AttemptRecord {
            ordinal,
            route: route.id.clone(),
            provider: provider.id.clone(),
            outcome: "answered",
            failure_class: None,
            http_status: None,
            ttfb_ms: None,
            duration_ms: 0,
            delivered_output: 0,
            cost_micros: 0,
            extra_try,
            malformed_events: 0,
            message: None,
        };
        match try_route(&target, request, deadline_ms).await {
            Ok(committed) => {
                let ttfb = now_ms().saturating_sub(attempt_started);
                record.ttfb_ms = Some(ttfb);
                record.duration_ms = ttfb;
                record.http_status = Some(match &committed {
                    Committed::Body { status, .. } => *status,
                    Committed::Stream(_) => 200,
                });
                obs.at_ms = now_ms();
                obs.ttfb_ms = Some(ttfb);
                obs.duration_ms = ttfb;
                journal.attempt(record, obs);
                rc.route = Some(route.id.clone());
                journal.record.route = Some(route.id.clone());
                journal.record.provider = Some(provider.id.clone());
                return Ok((route.clone(), committed));
            }
            Err(failed) => {
                record.outcome = "failed";
                record.failure_class = Some(failed.verdict.class);
                record.http_status = failed.http_status;
                record.duration_ms = now_ms().saturating_sub(attempt_started);
                record.message = failed.verdict.message.as_deref().map(short_message);
                obs.at_ms = now_ms();
                obs.duration_ms = record.duration_ms;
                obs.outcome = AttemptOutcome::Failure(failed.verdict.class);
                if failed.verdict.class.blame() == Blame::Account {
                    // SPEC §9: the upstream account is broken, not the model.
                    worker::console_log!(
                        "[auto-isolate] SKIP {}: account-level failure ({}) -- do NOT deactivate the model",
                        model.id,
                        failed
                            .verdict
                            .message
                            .as_deref()
                            .map(short_message)
                            .unwrap_or_else(|| failed.verdict.class.as_str().to_string())
                    );
                }
                obs.retry_after_ms = failed.verdict.retry_after_ms;
                journal.attempt(record, obs);
                plan.record_failure(route_idx, failed.verdict);
            }
        }
    }
    // Models with a healthy route right now, by this isolate's health snapshots.
    let available: Vec<String> = health::healthy_models(catalog)
        .into_iter()
        .filter(|m| m != &model.id)
        .collect();
    Err(plan.final_error(available))
}

/// Sends a committed answer: a whole body at once (settled right after), or a stream relayed
/// from `wait_until` (settled when it ends).
#[allow(clippy::too_many_arguments)]
fn deliver(
    env: &Env,
    ctx: &Context,
    committed: Committed,
    route: Route,
    request: &ClientRequest,
    max_tokens: u64,
    policy: Policy,
    mut journal: Journal,
) -> HandlerResult {
    match committed {
        Committed::Body {
            bytes,
            status,
            content_type,
            usage,
            output_chars,
        } => {
            let (usage, estimated) = settle_usage(usage, output_chars, max_tokens, request.body_len);
            let cost = cost_micros(usage, &route.price);
            if let Some(a) = journal.record.attempts.last_mut() {
                a.delivered_output = usage.output_tokens;
                a.cost_micros = cost;
            }
            let record = &mut journal.record;
            record.outcome = Outcome::Answered;
            record.usage = Some(usage);
            record.estimated = estimated;
            record.delivered_output = usage.output_tokens;
            record.total_cost_micros = cost;
            ctx.wait_until(journal.finish(env.clone()));
            Ok(ResponseBuilder::new()
                .with_status(status)
                .with_headers(response_headers(&content_type))
                .fixed(bytes))
        }
        Committed::Stream(live) => {
            let headers = response_headers(&live.content_type);
            let finish = stream::Finish {
                journal,
                env: env.clone(),
                price: route.price.clone(),
                max_tokens,
                body_len: request.body_len,
                policy,
            };
            stream::relay(ctx, live, finish, headers)
        }
    }
}
