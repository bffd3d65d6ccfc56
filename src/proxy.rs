//! The attempt driver (SPEC §3–§7), in one pass: plan the routes, hold the maximum cost, try the
//! routes one after another until one commits, then deliver its answer. The plan, the
//! classification and the record are the core's (`Plan`, `classify`, `Journal`); one attempt's I/O
//! is `upstream`, the stream after commit is `relay`, and every ending goes through
//! `finish::Record::close` from `ctx.wait_until`. The whole pass runs under `ctx.wait_until`
//! ([`spawn`]), so nothing it owes — attempts in flight, settlement or release, the record, the
//! health report — depends on the client still being there.

use std::cell::Cell;
use std::future::Future;
use std::rc::Rc;

use futures_channel::oneshot;

use switchyard_core::api::Api;
use switchyard_core::billing::HoldCandidate;
use switchyard_core::catalog::{Balance, Catalog, Model, Policy};
use switchyard_core::dialects::neutral::answer::AnswerContext;
use switchyard_core::dialects::{with_cost, ClientRequest};
use switchyard_core::generation::{AttemptResult, AttemptTarget, Delivery, Ending, Journal, Opening};
use switchyard_core::health::HealthConfig;
use switchyard_core::limits::{rate_headers, RateWindow};
use switchyard_core::money::micros_to_usd;
use switchyard_core::plan::{Attempt, Plan, PlanInput};
use switchyard_core::tools::ToolTariff;
use switchyard_core::wire;
use switchyard_core::ApiError;
use wasm_bindgen::JsCast;
use worker::{Context, Env, Headers, Response, ResponseBuilder};

use crate::billing::{self, HoldRequest};
use crate::faults::Faults;
use crate::finish::{self, Record};
use crate::health;
use crate::limits::{self, Slot};
use crate::records;
use crate::relay;
use crate::runtime::apart::apart;
use crate::runtime::clock::{in_request, now_ms, sleep};
use crate::store::{KeyRecord, Store};
use crate::upstream::{self, Committed, Target, Wire};

/// Who is asking, and where the request runs. Owned, so the pass can outlive the handler.
pub struct Call {
    pub env: Env,
    pub ctx: Rc<Context>,
    pub key: Rc<KeyRecord>,
    pub generation_id: String,
    /// Aborted when the client disconnects (`enable_request_signal`).
    pub client: worker::AbortSignal,
    /// Counts the attempts made, for the `x-switchyard-attempts` header.
    pub attempts: Cell<u32>,
    pub request_id: String,
    /// When the request arrived, before its key was looked up (`billing::HoldRequest::arrived_ms`).
    pub arrived_ms: u64,
    /// The request's drills (`crate::faults`; inert in production).
    pub faults: Faults,
    /// The request body's share of the isolate's budget (SPEC §18): held, never read — dropping
    /// the call gives it back.
    #[allow(dead_code)]
    pub body_share: Option<crate::budget::BodyShare>,
}

/// What the handler learns of a pass: its outcome and how many routes it tried.
pub struct Served {
    pub result: Result<Answer, ApiError>,
    pub attempts: u32,
}

/// Starts [`serve`] as a `ctx.wait_until` task and returns the handler's wait for its answer.
///
/// The runtime cancels a departed client's handler, never its `wait_until` tasks (within their
/// window): running the pass there means a client that leaves before the response starts cannot
/// strand a hold, an attempt's outcome or the record (issue 12, SPEC §7 "client disconnect").
/// A departure is still seen — through `call.client` — and ends the attempts.
pub fn spawn(call: Call, catalog: Rc<Catalog>, request: ClientRequest) -> impl Future<Output = Served> {
    let (answer, answered) = oneshot::channel();
    let ctx = call.ctx.clone();
    // Its storage calls until the answer count as the request's (`calls::inherit`).
    ctx.wait_until(crate::calls::inherit(async move {
        let result = serve(&call, &catalog, request).await;
        // The handler may be gone (client departed): the answer is then dropped, and a stream's
        // relay sees the departure through the request's signal.
        let _ = answer.send(Served {
            result,
            attempts: call.attempts.get(),
        });
    }));
    async move {
        answered.await.unwrap_or(Served {
            result: Err(ApiError::Internal { label: "pass_lost" }),
            attempts: 0,
        })
    }
}

/// A committed answer and the route that gave it.
pub struct Answer {
    pub response: Response,
    pub route: String,
}

/// Headers a committed answer carries beside the body's: the key's rate-limit window and the
/// time queued for route capacity (SPEC §10).
#[derive(Default)]
struct Extra {
    window: Option<RateWindow>,
    queued_ms: u64,
}

impl Extra {
    fn apply(&self, headers: &Headers) {
        if let Some(w) = &self.window {
            for (name, value) in rate_headers(w) {
                let _ = headers.set(name, &value);
            }
        }
        if self.queued_ms > 0 {
            let _ = headers.set("x-queued-ms", &self.queued_ms.to_string());
        }
    }
}

/// Serves one validated request end to end: plan, hold, attempts, delivery — and, whatever
/// happens after the hold, settlement. A request refused before the hold is recorded too.
pub async fn serve(call: &Call, catalog: &Catalog, mut request: ClientRequest) -> Result<Answer, ApiError> {
    let request = &mut request;
    let mut admitted = match admit(call, catalog, request).await {
        Ok(admitted) => admitted,
        Err(error) => {
            reject(call, request.api, &request.model, request.stream, &error);
            return Err(error);
        }
    };
    match attempts(call, catalog, request, &mut admitted).await {
        Ok((route, committed)) => {
            let Admitted {
                policy,
                started_ms,
                record,
                window,
                queue,
                ..
            } = admitted;
            let extra = Extra {
                window,
                queued_ms: queue.queued_ms,
            };
            let response = deliver(call, committed, record, &policy, started_ms, &extra)?;
            Ok(Answer { response, route })
        }
        Err(error) => {
            // A stored conversation's one route did not answer: no other can continue it.
            let error = match error.status() {
                500.. if admitted.pinned => ApiError::StateUnavailable {
                    model: admitted.model.id.clone(),
                },
                _ => error,
            };
            // No route answered: the hold is released in full, nothing is charged.
            let cancelled = admitted.plan.cancelled();
            call.ctx.wait_until(admitted.record.close(Ending::Failed {
                error: &error,
                cancelled,
            }));
            Err(error)
        }
    }
}

/// A request that may be tried: its model, plan and open record (the key's slot taken, the hold
/// placed).
struct Admitted<'c> {
    model: &'c Model,
    policy: Policy,
    /// The request continues a stored response: only its route may answer (SPEC §17).
    pinned: bool,
    plan: Plan,
    started_ms: u64,
    record: Record,
    /// The key's `rpm` window, for the rate-limit headers.
    window: Option<RateWindow>,
    /// The slot taken for the first attempt, and the time queued for it.
    queue: Queue,
}

/// A request's dealings with route capacity (SPEC §10): the time queued so far, and a slot taken
/// before the hold for the route the plan tries next.
#[derive(Default)]
struct Queue {
    queued_ms: u64,
    reserved: Option<(usize, Slot)>,
}

/// Everything before the first attempt that may refuse the request (SPEC §3, §10, §11): the
/// model, the key's limits, its plan, a slot on a capped route, the hold. Waiting for the key or
/// for capacity comes before the hold: nothing is held while a request waits.
async fn admit<'c>(call: &Call, catalog: &'c Catalog, request: &mut ClientRequest) -> Result<Admitted<'c>, ApiError> {
    let model = catalog.model(&request.model).ok_or_else(|| ApiError::ModelNotFound {
        model: request.model.clone(),
        available: catalog.model_ids(),
    })?;
    let policy = catalog.policy_for(model);
    let key = limits::admit_key(&call.env, &call.ctx, &call.key, &call.generation_id, &policy).await?;
    let (mut plan, started_ms) = plan(call, catalog, model, request, &policy).await?;
    let pinned = match &request.previous_response_id {
        Some(id) => {
            apart(pin(call, model, &mut plan, id)).await?;
            true
        }
        None => false,
    };
    let mut queue = Queue::default();
    let slot = take_slot(call, model, &policy, &mut plan, &mut queue).await?;
    queue.reserved = plan.upcoming().first().map(|&route| (route, slot));
    // The upstream is told the output limit that is held, so it cannot produce more (SPEC §11).
    request.limit_output(model.max_output_tokens);
    // And the uses of the provider's priced tools it holds for, where its API bounds them (SPEC §21).
    request.limit_tool_uses(policy.held_tool_uses);
    let max_tokens = request.held_output_tokens(model.max_output_tokens);
    // The uses of the provider's priced tools the request allows, each route's at its price (SPEC §21).
    let held_tools = request.server_tools.held(policy.held_tool_uses);
    let prices: Vec<HoldCandidate> = plan
        .candidates()
        .into_iter()
        .filter_map(|i| {
            let r = model.routes.get(i)?;
            Some((i, &r.price, ToolTariff::held_micros(&held_tools, &r.tool_prices)))
        })
        .collect();
    let hold = billing::place_hold(
        &call.env,
        &call.ctx,
        &HoldRequest {
            key: &call.key,
            generation_id: &call.generation_id,
            candidates: &prices,
            input_tokens: request.held_input_tokens(model.context_window),
            max_tokens,
            policy: &policy,
            arrived_ms: call.arrived_ms,
        },
    )
    .await?;
    plan.keep_only(&hold.keep);
    let record = Record {
        journal: Journal::open(Opening {
            hold_path: Some(hold.path.as_str()),
            max_tokens,
            body_len: request.body_len,
            held_micros: Some(hold.amount),
            held_tools,
            tools_per_answer: request.server_tools.per_answer.is_some(),
            ..opening(call, request.api, &model.id, request.stream, started_ms)
        }),
        request_id: call.request_id.clone(),
        env: call.env.clone(),
        hold: Some(hold),
        health: HealthConfig::from_policy(&policy),
        model: model.id.clone(),
        slots: vec![key.slot],
        faults: call.faults,
    };
    Ok(Admitted {
        model,
        policy,
        pinned,
        plan,
        started_ms,
        record,
        window: key.window,
        queue,
    })
}

/// A request continuing a stored response (`previous_response_id`) goes only to the route that
/// produced it — the one upstream that holds the conversation (SPEC §17); an id this account did
/// not receive through Switchyard is a 400 naming the field.
async fn pin(call: &Call, model: &Model, plan: &mut Plan, response_id: &str) -> Result<(), ApiError> {
    let store = Store::new(&call.env)?.ledger(call.key.ledger)?;
    let route = records::pinned_route(&call.env, &store, &call.key.account_id, response_id).await?;
    let index = route.and_then(|route| model.routes.iter().position(|r| r.id == route));
    let index = index.ok_or_else(|| {
        ApiError::invalid(
            "`previous_response_id` names no response of this model that this account received through this gateway.",
            Some("previous_response_id"),
        )
    })?;
    plan.keep_only(&[index]);
    Ok(())
}

/// What every record of this call starts with.
fn opening(call: &Call, api: Api, model: &str, stream: bool, started_ms: u64) -> Opening {
    Opening {
        id: call.generation_id.clone(),
        account_id: call.key.account_id.clone(),
        ledger: call.key.ledger,
        key_id: call.key.id.clone(),
        model: model.to_string(),
        api,
        stream,
        started_ms,
        hold_path: None,
        max_tokens: 0,
        body_len: 0,
        held_micros: None,
        held_tools: Vec::new(),
        tools_per_answer: false,
    }
}

/// Records a request refused before any route was tried (SPEC §14: every request is on the
/// record), off the critical path: outcome `rejected`, its error code, no hold, no attempt.
pub fn reject(call: &Call, api: Api, model: &str, stream: bool, error: &ApiError) {
    let opening = opening(call, api, model, stream, now_ms());
    let recorded = finish::reject(call.env.clone(), call.faults, opening, error);
    call.ctx.wait_until(recorded);
}

/// The request's plan (SPEC §3, §5, §8) and when it was made: the health snapshot, the probes it
/// must win, then one core call.
async fn plan(
    call: &Call,
    catalog: &Catalog,
    model: &Model,
    request: &ClientRequest,
    policy: &Policy,
) -> Result<(Plan, u64), ApiError> {
    let view = health::view(&call.env, &call.ctx, model, policy).await;
    let now = now_ms();
    let route_accounts = catalog.route_accounts(model);
    let claims = view.health.probe_claims(&route_accounts, now);
    let probes_won = if claims.is_empty() {
        Vec::new()
    } else {
        apart(health::claim_probes(
            &call.env,
            model,
            claims,
            policy.pre_content_budget_ms,
        ))
        .await
    };
    // A spread model's conversation name (SPEC §8a); nothing to compute for the others.
    let conversation = (model.balance == Balance::Spread).then(|| request.conversation(request.session.as_deref()));
    Plan::for_request(PlanInput {
        catalog,
        model,
        request,
        policy,
        route_accounts: &route_accounts,
        health: &view.health,
        stats: &view.stats,
        probes_won: &probes_won,
        key_allow_fallbacks: call.key.allow_fallbacks(),
        account_allow_fallbacks: call.key.account_allow_fallbacks(),
        conversation: conversation.as_deref(),
        now_ms: now,
    })
    .map(|plan| (plan, now))
}

/// Tries routes until one commits; every attempt goes into the record. The error is the
/// request's final one (SPEC §13). On a model with capped routes, each attempt first takes a slot
/// on the first upcoming route with room (SPEC §10), queueing when all are full.
async fn attempts(
    call: &Call,
    catalog: &Catalog,
    request: &ClientRequest,
    admitted: &mut Admitted<'_>,
) -> Result<(String, Committed), ApiError> {
    let Admitted {
        model,
        policy,
        plan,
        record,
        queue,
        ..
    } = admitted;
    let (model, policy): (&Model, &Policy) = (model, policy);
    // Each attempt's request: a translation reads the client's body once, for every route.
    let mut requests = wire::Requests::new(request);
    loop {
        let slot = take_slot(call, model, policy, plan, queue).await?;
        // A client that left (request.signal, `enable_request_signal`) gets no further attempt.
        let Some(Attempt {
            route: route_idx,
            api,
            deadline_ms,
            extra_try,
            probe,
            last_resort,
        }) = plan.next(now_ms(), call.client.aborted())
        else {
            break;
        };
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
        let target = Target::new(&call.env, provider)?;
        call.attempts.set(call.attempts.get() + 1);
        // The request in the route's dialect: as the client wrote it, or translated (SPEC §19).
        let outgoing = requests.outgoing(api, provider, &route.upstream_model, model.max_output_tokens);
        let (translated, dropped) = match &outgoing {
            Ok(o) => (o.translated, o.dropped.clone()),
            Err(_) => (true, Vec::new()),
        };
        let attempt = AttemptTarget {
            route: route.id.clone(),
            provider: provider.id.clone(),
            account: provider.account().to_string(),
            price: route.price.clone(),
            context_window: route.context_window.unwrap_or(model.context_window),
            extra_try,
            probe,
            last_resort,
            verify: route.verify(),
            started_ms: now_ms(),
            api,
            translated,
            dropped,
            tool_prices: route.tool_prices.clone(),
        };
        let outgoing = match outgoing {
            Ok(o) => o,
            Err(unable) => {
                // Not representable in this route's dialect: not sent, held against nothing.
                let verdict = unable.verdict();
                record.attempt(
                    attempt,
                    AttemptResult::Failed {
                        verdict: verdict.clone(),
                        http_status: None,
                    },
                );
                plan.record_failure(route_idx, verdict);
                continue;
            }
        };
        let wire = Wire {
            outgoing: &outgoing,
            api,
            answer: AnswerContext {
                id: call.generation_id.clone(),
                model: request.model.clone(),
                created: now_ms() / 1000,
                choices: u32::try_from(request.completions).unwrap_or(u32::MAX),
                namespaces: match outgoing.translated {
                    true => request.tool_namespaces(),
                    false => Vec::new(),
                },
            },
        };
        let departure = departed(call, policy.disconnect_grace_ms);
        match upstream::attempt(&target, request, &wire, deadline_ms, departure).await {
            Ok(committed) => {
                let http_status = committed.http_status();
                record.attempt(attempt, AttemptResult::Committed { http_status });
                record.slots.push(slot); // held until the answer ends
                return Ok((route.id.clone(), committed));
            }
            Err(failed) => {
                record.attempt(
                    attempt,
                    AttemptResult::Failed {
                        verdict: failed.verdict.clone(),
                        http_status: failed.http_status,
                    },
                );
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

/// Resolves `grace_ms` after the client left (SPEC §18: an attempt before commit runs no longer,
/// so the request ends — cancelled, its hold released, its record written — well within the
/// runtime's window after a departure). In tests the departure drill may stand for the signal.
async fn departed(call: &Call, grace_ms: u64) {
    call.faults.departed(crate::runtime::abort::aborted(&call.client)).await;
    sleep(grace_ms).await;
}

/// Before an attempt on a model with capped routes: a slot on the first upcoming route with room,
/// brought to the front of the plan (a full route is passed over, and stays a fallback) — the one
/// reserved before the hold if the plan still goes there first. Time queued is free: it extends
/// the plan's budget. Nothing to take when the next route is uncapped.
async fn take_slot(
    call: &Call,
    model: &Model,
    policy: &Policy,
    plan: &mut Plan,
    queue: &mut Queue,
) -> Result<Slot, ApiError> {
    let upcoming = plan.upcoming();
    if let Some((route, slot)) = queue.reserved.take() {
        if upcoming.first() == Some(&route) {
            return Ok(slot);
        }
        // The hold left this route out: its slot goes back (dropped) and the next is taken.
    }
    let next_capped = upcoming
        .first()
        .and_then(|&i| model.routes.get(i))
        .is_some_and(|r| r.max_concurrency.is_some());
    if !next_capped {
        return Ok(Slot::default());
    }
    let id = format!("{}#{}", call.generation_id, call.attempts.get() + 1);
    let wait_ms = policy.capacity_wait_ms.saturating_sub(queue.queued_ms);
    // Compiled when a capped route is first met (`runtime::apart`), as are admission's other rare
    // steps: a continued conversation's pin, a due probe's claim.
    let granted = apart(limits::admit_route(
        &call.env, &call.ctx, model, &upcoming, &id, policy, wait_ms,
    ))
    .await?;
    queue.queued_ms += granted.waited_ms;
    plan.extend_budget(granted.waited_ms);
    plan.bring_forward(granted.route);
    Ok(granted.slot)
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

/// Sends a committed answer: a whole body at once (settled right after), or a stream relayed
/// until it ends (settled then; its cap counts from `started_ms`, the request's start).
fn deliver(
    call: &Call,
    committed: Committed,
    record: Record,
    policy: &Policy,
    started_ms: u64,
    extra: &Extra,
) -> Result<Response, ApiError> {
    match committed {
        Committed::Body {
            bytes,
            usage,
            output_chars,
            response_id,
            ..
        } => {
            // The answer's `usage` carries its charge, the same the ledger takes (SPEC §11).
            let bytes = match record.journal.tariff() {
                Some(t) => {
                    let cost = micros_to_usd(t.settle(usage, output_chars).cost_micros);
                    with_cost(&bytes, cost).unwrap_or(bytes)
                }
                None => bytes,
            };
            call.ctx.wait_until(record.close(Ending::Delivered(Delivery {
                usage,
                output_chars,
                response_id,
                ..Delivery::default()
            })));
            // A whole answer is JSON with 200, whatever 2xx status and type the upstream used (SPEC §15).
            let headers = response_headers("application/json");
            extra.apply(&headers);
            Ok(ResponseBuilder::new()
                .with_status(200)
                .with_headers(headers)
                .fixed(bytes))
        }
        Committed::Stream(live) => {
            let headers = response_headers(&live.content_type);
            extra.apply(&headers);
            let cap_ms = policy
                .stream_cap_ms
                .saturating_sub(now_ms().saturating_sub(started_ms))
                .max(1);
            match relay::start(*live, record.journal.tariff(), policy, cap_ms, &call.client) {
                Ok((body, delivered)) => {
                    call.ctx.wait_until(async move {
                        let delivery = delivered.await;
                        record.close(Ending::Delivered(delivery)).await;
                    });
                    Ok(ResponseBuilder::new()
                        .with_status(200)
                        .with_headers(headers)
                        .stream(body.unchecked_into()))
                }
                Err(()) => {
                    // Nothing reached the client: the hold is released uncharged.
                    let error = ApiError::Internal {
                        label: "response_stream",
                    };
                    call.ctx.wait_until(record.close(Ending::Failed {
                        error: &error,
                        cancelled: false,
                    }));
                    Err(error)
                }
            }
        }
    }
}
