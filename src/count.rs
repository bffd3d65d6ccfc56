//! Token counting (SPEC §21): the routes a generation request would be tried on, in the same order
//! (the plan, by the same health snapshot), each asked to count the input through its own count
//! endpoint (`upstream::count`, with the core's `count::call`); the first count answers. A route
//! that cannot count in its dialect is passed over without a request; a failed count fails over.
//!
//! Nothing is held or charged, no record is written and no route health is reported — a count
//! says nothing about how a route generates, and a client's counts must not move it. The key's
//! limits apply as to any request. Only when no route counted is the answer the core's local
//! estimate, marked `estimated`; when a route said the request itself is wrong, that is the
//! answer (a 4xx in the client's dialect).

use std::rc::Rc;

use switchyard_core::catalog::Catalog;
use switchyard_core::classify::FailureClass;
use switchyard_core::count;
use switchyard_core::dialects::ClientRequest;
use switchyard_core::plan::{Attempt, Plan, PlanInput};
use switchyard_core::wire::Requests;
use switchyard_core::ApiError;
use worker::{Context, Env};

use crate::health;
use crate::limits;
use crate::runtime::clock::now_ms;
use crate::store::KeyRecord;
use crate::upstream::{self, Target};

/// A count, and who made it.
pub struct Counted {
    pub tokens: u64,
    /// The local estimate: no route counted.
    pub estimated: bool,
    /// The route that counted.
    pub route: Option<String>,
    /// Count requests sent upstream.
    pub attempts: u32,
}

/// Counts `request`'s input for `key` (request id `id`).
pub async fn serve(
    env: &Env,
    ctx: &Rc<Context>,
    key: &KeyRecord,
    id: &str,
    catalog: &Catalog,
    request: &ClientRequest,
) -> Result<Counted, ApiError> {
    let model = catalog.model(&request.model).ok_or_else(|| ApiError::ModelNotFound {
        model: request.model.clone(),
        available: catalog.model_ids(),
    })?;
    let policy = catalog.policy_for(model);
    // Held until the count is answered (dropped at the end: the key's slot given back).
    let _admitted = limits::admit_key(env, ctx, key, id, &policy).await?;
    let view = health::view(env, ctx, model, &policy).await;
    let route_accounts = catalog.route_accounts(model);
    let estimate = || Counted {
        tokens: count::estimate(request),
        estimated: true,
        route: None,
        attempts: 0,
    };
    let plan = Plan::for_request(PlanInput {
        catalog,
        model,
        request,
        policy: &policy,
        route_accounts: &route_accounts,
        health: &view.health,
        stats: &view.stats,
        probes_won: &[],
        key_allow_fallbacks: key.allow_fallbacks(),
        account_allow_fallbacks: key.account_allow_fallbacks(),
        conversation: None,
        now_ms: now_ms(),
    });
    let mut plan = match plan {
        Ok(plan) => plan,
        // No route is available right now: nothing can count.
        Err(e) if e.status() >= 500 => return Ok(estimate()),
        Err(e) => return Err(e),
    };
    let mut requests = Requests::new(request);
    let (mut attempts, mut refused) = (0, false);
    while let Some(Attempt {
        route: index,
        api,
        deadline_ms,
        ..
    }) = plan.next(now_ms(), false)
    {
        let route = model
            .routes
            .get(index)
            .ok_or(ApiError::Internal { label: "plan_route" })?;
        let provider = catalog.provider(&route.provider).ok_or(ApiError::Internal {
            label: "route_provider",
        })?;
        let call = match count::call(
            &mut requests,
            api,
            provider,
            &route.upstream_model,
            model.max_output_tokens,
        ) {
            Ok(call) => call,
            Err(unable) => {
                plan.record_failure(index, unable);
                continue;
            }
        };
        let target = Target::new(env, provider)?;
        attempts += 1;
        match upstream::count(&target, request, call, deadline_ms).await {
            Ok(tokens) => {
                return Ok(Counted {
                    tokens,
                    estimated: false,
                    route: Some(route.id.clone()),
                    attempts,
                })
            }
            Err(failed) => {
                // The request itself is wrong (not merely unsupported by this route).
                refused |= matches!(
                    failed.verdict.class,
                    FailureClass::InvalidRequest | FailureClass::ContextLength
                );
                plan.record_failure(index, failed.verdict);
            }
        }
    }
    match refused {
        true => Err(plan.final_error(Vec::new())),
        false => Ok(Counted { attempts, ..estimate() }),
    }
}
