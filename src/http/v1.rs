//! `/v1/*` for API-key holders: the model list and the client dialects' entry points.
//!
//! Order per SPEC §3: authenticate, then read and validate the body, then hand the request to
//! the proxy.

use std::cell::Cell;
use std::rc::Rc;

use futures_util::future::join;
use serde_json::{json, Value};
use switchyard_core::api::Api;
use switchyard_core::dialects::{self, ClientRequest, MAX_BODY_BYTES};
use switchyard_core::keys::{hash_key, key_shape, presented_key};
use switchyard_core::money::micros_to_usd;
use switchyard_core::status;
use switchyard_core::tools::ToolCharge;
use switchyard_core::ApiError;
use worker::{Context, Env, Request};

use super::body::read_budgeted;
use super::context::RequestCtx;
use super::query_value;
use super::response::{json_response, HandlerResult};
use crate::faults::Faults;
use crate::limits;
use crate::proxy;
use crate::records;
use crate::store::{KeyRecord, Store};

/// The caller's active key, or 401: `Authorization: Bearer`, else `x-api-key`, else Gemini's
/// `x-goog-api-key` or `?key=` (never logged: the log carries the path only).
async fn authenticate(req: &Request, store: &Store) -> Result<Rc<KeyRecord>, ApiError> {
    let (key, ledger) = presented(req)?;
    look_up(store, &hash_key(&key), ledger).await
}

/// The key the caller presents and the ledger its text names, or 401 without storage: none
/// presented, or a text that cannot be a key (core `keys`).
pub(super) fn presented(req: &Request) -> Result<(String, u8), ApiError> {
    let headers = req.headers();
    let authorization = headers.get("authorization").ok().flatten();
    // Gemini's `?key=` is read only where no bearer token comes first.
    let bearer = presented_key(authorization.as_deref(), None).is_some();
    let x_api_key = headers
        .get("x-api-key")
        .ok()
        .flatten()
        .or_else(|| headers.get("x-goog-api-key").ok().flatten())
        .or_else(|| (!bearer).then(|| query_value(req, "key")).flatten());
    let key = presented_key(authorization.as_deref(), x_api_key.as_deref()).ok_or(ApiError::InvalidApiKey)?;
    let ledger = key_shape(key).ledger().ok_or(ApiError::InvalidApiKey)?;
    Ok((key.to_string(), ledger))
}

/// The record of the key whose hash is `hash`, if it is active.
async fn look_up(store: &Store, hash: &str, ledger: u8) -> Result<Rc<KeyRecord>, ApiError> {
    store.key_by_hash(hash, ledger).await?.ok_or(ApiError::InvalidApiKey)
}

/// The authenticated key and its account, for the request's log line.
fn for_log(rc: &mut RequestCtx, key: &KeyRecord) {
    rc.key_id = Some(key.id.clone());
    rc.account_id = Some(key.account_id.clone());
}

fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// The client's `anthropic-version` and `anthropic-beta`, which a route may be given (SPEC §21).
fn anthropic_headers(req: &Request, request: &mut ClientRequest) {
    request.anthropic_version = header(req, "anthropic-version");
    request.anthropic_beta = header(req, "anthropic-beta");
}

/// `GET /v1/models`: the catalog's models in the OpenAI list shape, with their APIs, prices and
/// status word (core `status::model_list`; the status report is the status page's, cached).
pub async fn models(req: &Request, env: &Env) -> HandlerResult {
    let store = Store::new(env)?;
    authenticate(req, &store).await?;
    let catalog = store.catalog().await?;
    let report = super::status::report(env, &catalog, Faults::none()).await;
    Ok(json_response(200, &status::model_list(&catalog, &report)))
}

/// `GET /v1/generation?id=`: one request and every attempt, for the owning account only (another
/// account's id is indistinguishable from an unknown one: 404).
pub async fn generation(req: &Request, env: &Env) -> HandlerResult {
    let store = Store::new(env)?;
    let key = authenticate(req, &store).await?;
    let store = store.ledger(key.ledger)?;
    let id = query_value(req, "id")
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::invalid("`id` is required: /v1/generation?id=<generation id>.", Some("id")))?;
    // An id issued moments ago is waited for (its record is written just after its answer).
    let found = records::find(env, &store, &id, &key.account_id).await?;
    let (g, attempts) = found.ok_or_else(|| ApiError::NotFound {
        what: format!("Generation `{id}`"),
    })?;
    // SPEC §17: the input's cache reads and writes are parts of `input_tokens`, each charged at
    // its own price; `clamped` says a reported count was more than the request could cause.
    let part = |n: Option<f64>| n.unwrap_or(0.0) as u64;
    let usage = match (g.input_tokens, g.output_tokens) {
        (Some(i), Some(o)) => json!({
            "input_tokens": i as u64,
            "output_tokens": o as u64,
            "cache_read_tokens": part(g.cache_read_tokens),
            "cache_write_tokens": part(g.cache_write_tokens),
            "cache_write_1h_tokens": part(g.cache_write_1h_tokens),
            "clamped": g.usage_clamped != 0.0,
        }),
        _ => Value::Null,
    };
    // SPEC §21: each priced server tool's uses and their cost (part of `total_cost`).
    let server_tools: serde_json::Map<String, Value> = g
        .server_tools_json
        .as_deref()
        .and_then(|j| serde_json::from_str::<Vec<ToolCharge>>(j).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|t| (t.tool, json!({"uses": t.uses, "cost": micros_to_usd(t.cost_micros)})))
        .collect();
    let attempts: Vec<Value> = attempts
        .iter()
        .map(|a| {
            json!({
                "ordinal": a.ordinal,
                "route": a.route,
                "provider": a.provider,
                "outcome": a.outcome,
                "failure_class": a.failure_class,
                "http_status": a.http_status,
                "ttfb_ms": a.ttfb_ms,
                "duration_ms": a.duration_ms,
                "delivered_output": a.delivered_output,
                "cost": micros_to_usd(a.cost_micros),
                "extra_try": a.extra_try,
                "last_resort": a.last_resort,
                "malformed_events": a.malformed_events,
                "message": a.message,
                "api": a.api,
                "translated": a.translated,
                "dropped": a.dropped,
            })
        })
        .collect();
    Ok(json_response(
        200,
        &json!({
            "id": g.id,
            "model": g.model,
            "api": g.api,
            "stream": g.stream != 0.0,
            "outcome": g.outcome,
            "route": g.route,
            "provider": g.provider,
            "delivered_output": g.delivered_output as u64,
            "usage": usage,
            "estimated": g.estimated != 0.0,
            "total_cost": micros_to_usd(g.total_cost_micros as i64),
            "server_tools": server_tools,
            "overrun": micros_to_usd(g.overrun_micros as i64),
            "error_code": g.error_code,
            "created_at_ms": g.created_at as u64,
            "duration_ms": g.duration_ms as u64,
            "hold_path": g.hold_path,
            "attempts": attempts,
        }),
    ))
}

/// `GET /v1/credits`: the account's balance, what is held, what is available, and the key's
/// spend and limits — read fresh from D1.
pub async fn credits(req: &Request, env: &Env) -> HandlerResult {
    let store = Store::new(env)?;
    let key = authenticate(req, &store).await?;
    let c = store
        .ledger(key.ledger)?
        .credits(&key.account_id, &key.id)
        .await?
        .ok_or(ApiError::Internal {
            label: "credits_missing",
        })?;
    let (balance, held) = (c.balance_micros as i64, c.held_micros as i64);
    // The key's current use of its limits, from its limit object (keys without limits have none).
    let usage = limits::key_usage(env, &key).await;
    Ok(json_response(
        200,
        &json!({
            "account_id": key.account_id,
            "balance": micros_to_usd(balance),
            "held": micros_to_usd(held),
            "available": micros_to_usd(balance - held),
            "balance_micros": balance,
            "held_micros": held,
            "credits_total_micros": c.credits_micros as i64,
            "charges_total_micros": c.charges_micros as i64,
            "open_holds_micros": c.open_holds_micros as i64,
            "key": {
                "id": key.id,
                "spent": micros_to_usd(c.spent_micros as i64),
                "spent_micros": c.spent_micros as i64,
                "spend_limit": c.spend_limit_micros.map(|l| micros_to_usd(l as i64)),
                "rpm": c.rpm.map(|v| v as u64),
                "max_concurrent": c.max_concurrent.map(|v| v as u64),
                "requests_in_window": usage.map(|u| u.requests_in_window),
                "in_flight": usage.map(|u| u.in_flight),
            },
        }),
    ))
}

/// A Gemini call's (model, stream) from the path after `/v1beta/models/`:
/// `{model}:generateContent` or `{model}:streamGenerateContent?alt=sse`.
pub fn gemini_call(req: &Request, rest: &str) -> Result<(String, bool), ApiError> {
    let (model, method) = rest.rsplit_once(':').ok_or_else(|| ApiError::NotFound {
        what: format!("Path /v1beta/models/{rest}"),
    })?;
    let stream = match method {
        "generateContent" => false,
        "streamGenerateContent" => true,
        _ => {
            return Err(ApiError::NotFound {
                what: format!("Method `{method}`"),
            })
        }
    };
    let sse = query_value(req, "alt").is_some_and(|v| v == "sse");
    if stream && !sse {
        return Err(ApiError::invalid(
            "Switchyard streams Gemini answers as server-sent events: add `?alt=sse`.",
            Some("alt"),
        ));
    }
    let model = switchyard_core::admin::percent_decode(model)
        .ok_or_else(|| ApiError::invalid("Malformed model in the path.", Some("model")))?;
    Ok((model, stream))
}

/// `POST /v1/chat/completions`, `POST /v1/messages`, `POST /v1/responses` and Gemini's
/// `POST /v1beta/models/{model}:…` (`gemini`: the model and mode from its path): one request in
/// `api`'s dialect, answered in it.
pub async fn generate(
    req: &mut Request,
    env: &Env,
    ctx: &Rc<Context>,
    rc: &mut RequestCtx,
    api: Api,
    gemini: Option<(String, bool)>,
) -> HandlerResult {
    let store = Store::new(env)?.with_faults(rc.faults);
    let (key, ledger) = presented(req)?;
    // The key's record and the catalog, each cached for seconds, are read together: an isolate
    // that has neither waits for one round trip to D1, not two. The catalog's answer is used
    // once the body is read (a malformed body is a 400 whatever D1 says).
    let hash = hash_key(&key);
    let (key, catalog) = join(look_up(&store, &hash, ledger), store.catalog()).await;
    let key = key?;
    // Read again beside this request when due, so that the next ones find them fresh.
    store.refresh_early(ctx, &hash, ledger);
    for_log(rc, &key);
    rc.attempts = Some(0);
    // The body and its share of the isolate's budget (the key's part of it), held as long as the
    // request holds its body: until it commits or ends.
    let (parsed, body_share) = match read_budgeted(req, MAX_BODY_BYTES, &key.id).await {
        Ok((body, share)) => (
            dialects::parse_request(api, &body, gemini.as_ref().map(|(m, s)| (m.as_str(), *s))),
            Some(share),
        ),
        Err(e) => (Err(e), None),
    };
    let call = proxy::Call {
        env: env.clone(),
        ctx: ctx.clone(),
        key,
        generation_id: rc.generation_id.clone(),
        client: rc.client.clone(),
        attempts: Cell::new(0),
        request_id: rc.request_id.clone(),
        arrived_ms: rc.started_ms,
        faults: rc.faults,
        body_share,
    };
    let mut request = parsed.inspect_err(|error| proxy::reject(&call, api, "", false, error))?;
    anthropic_headers(req, &mut request);
    request.session = header(req, "x-switchyard-session").filter(|s| !s.is_empty() && s.len() <= 512);
    rc.model = Some(request.model.clone());
    let catalog = catalog.inspect_err(|error| proxy::reject(&call, api, &request.model, request.stream, error))?;
    let pass = proxy::spawn(call, catalog, request);
    let served = rc.faults.handler_waits(pass).await?; // a drill may stop waiting (tests only)
    rc.attempts = Some(served.attempts);
    let answer = served.result?;
    rc.route = Some(answer.route);
    Ok(answer.response)
}

/// `POST /v1/messages/count_tokens`, `POST /v1/responses/input_tokens` and Gemini's
/// `POST /v1beta/models/{model}:countTokens` (`gemini_model`: the model from its path): the input
/// tokens of a request in `api`'s dialect, counted by a route (`crate::count`), answered in the
/// dialect's count shape. Never held or charged.
pub async fn count_tokens(
    req: &mut Request,
    env: &Env,
    ctx: &Rc<Context>,
    rc: &mut RequestCtx,
    api: Api,
    gemini_model: Option<String>,
) -> HandlerResult {
    let store = Store::new(env)?;
    let key = authenticate(req, &store).await?;
    for_log(rc, &key);
    let (body, _share) = read_budgeted(req, MAX_BODY_BYTES, &key.id).await?;
    let mut request = switchyard_core::count::parse(api, &body, gemini_model.as_deref())?;
    anthropic_headers(req, &mut request);
    rc.model = Some(request.model.clone());
    let catalog = store.catalog().await?;
    let counted = crate::count::serve(env, ctx, &key, &rc.generation_id, &catalog, &request).await?;
    let mut response = json_response(
        200,
        &switchyard_core::count::answer(api, counted.tokens, counted.estimated),
    );
    let headers = response.headers_mut();
    let _ = headers.set("x-switchyard-attempts", &counted.attempts.to_string());
    let _ = headers.set("x-switchyard-route", counted.route.as_deref().unwrap_or("estimated"));
    Ok(response)
}
