//! Verification checks (SPEC §8a, and the rechecks of §8b), run by a model's health object from
//! its alarm: one check sends the core's known request (`verify::check_body`) to a route in the
//! route's first dialect, with the route's key, within the non-stream limit, and books it — one log
//! line and one row of the platform ledger, never a customer's. Whether the answer is a real one is
//! the same judgement a request's answer gets (`upstream::attempt`: status, error objects, empty
//! output); what a check's result does to the route is the core's (`ModelHealth::record_check`).

use switchyard_core::catalog::{Catalog, Model, Policy, Route};
use switchyard_core::classify::FailureClass;
use switchyard_core::dialects::neutral::answer::AnswerContext;
use switchyard_core::generation::{Charge, Tariff, UsageLimits};
use switchyard_core::verify::{self, CheckKind, CheckResult};
use switchyard_core::wire;
use worker::Env;

use crate::runtime::clock::now_ms;
use crate::store::{CheckEntry, Store};
use crate::upstream::{self, Committed, Target, Wire};

/// Checks `route` of `model` once and books the check; returns its result.
pub async fn check(
    env: &Env,
    catalog: &Catalog,
    model: &Model,
    route: &Route,
    policy: &Policy,
    kind: CheckKind,
) -> CheckResult {
    let started = now_ms();
    let (result, charge) = send(env, catalog, model, route, policy).await;
    let duration_ms = now_ms().saturating_sub(started);
    let reason = verify::reason(&result);
    let (input_tokens, output_tokens, cost_micros) = charge.map_or((0, 0, 0), |c| {
        (c.usage.input_tokens, c.usage.output_tokens, c.cost_micros)
    });
    worker::console_log!(
        "{}",
        serde_json::json!({"event": "route_check", "model": model.id, "route": route.id, "kind": kind.as_str(),
                           "passed": result.is_ok(), "reason": reason, "cost_micros": cost_micros,
                           "duration_ms": duration_ms})
    );
    let entry = CheckEntry {
        model: &model.id,
        route: &route.id,
        provider: &route.provider,
        kind: kind.as_str(),
        passed: result.is_ok(),
        reason: &reason,
        input_tokens,
        output_tokens,
        cost_micros,
        duration_ms,
    };
    let booked = match Store::new(env) {
        Ok(store) => store.record_check(&entry).await,
        Err(e) => Err(e),
    };
    if booked.is_err() {
        worker::console_error!(
            "{}",
            serde_json::json!({"event": "platform_ledger_unavailable", "model": model.id, "route": route.id,
                               "cost_micros": cost_micros})
        );
    }
    result
}

/// Sends the check; the charge of a real answer (the upstream's usage at the route's price).
async fn send(
    env: &Env,
    catalog: &Catalog,
    model: &Model,
    route: &Route,
    policy: &Policy,
) -> (CheckResult, Option<Charge>) {
    let refuse = |why: &str| (Err((FailureClass::Connect, why.to_string())), None);
    let (Some(provider), Some(api)) = (catalog.provider(&route.provider), route.apis.first().copied()) else {
        return refuse("the route has no provider or no dialect");
    };
    let Ok(target) = Target::new(env, provider) else {
        return refuse("the provider's upstream key is not configured");
    };
    let Ok(request) = verify::check_request(api, model) else {
        return refuse("the check request could not be built");
    };
    // The check speaks the route's own dialect: nothing to translate (a Converse route, which no
    // client speaks, gets a chat check translated).
    let Ok(outgoing) = wire::outgoing(&request, api, provider, &route.upstream_model, 0) else {
        return refuse("the check request could not be built");
    };
    let wire = Wire {
        outgoing: &outgoing,
        api,
        answer: AnswerContext::default(),
    };
    let deadline_ms = verify::deadline_ms(policy, model);
    match upstream::attempt(&target, &request, &wire, deadline_ms, std::future::pending()).await {
        Ok(Committed::Body {
            usage, output_chars, ..
        }) => {
            let tariff = Tariff {
                price: route.price.clone(),
                held_micros: None,
                limits: UsageLimits {
                    max_tokens: verify::max_tokens(model),
                    max_input_tokens: route.context_window.unwrap_or(model.context_window),
                    body_len: request.body_len,
                },
                tools: Default::default(),
            };
            (Ok(()), Some(tariff.settle(usage, output_chars)))
        }
        Ok(Committed::Stream(live)) => {
            live.controller.abort();
            (
                Err((
                    FailureClass::BadResponse,
                    "a non-stream check was answered with a stream".into(),
                )),
                None,
            )
        }
        Err(failed) => {
            let class = failed.verdict.class;
            let why = failed.verdict.message.unwrap_or_else(|| class.as_str().to_string());
            (Err((class, why)), None)
        }
    }
}
