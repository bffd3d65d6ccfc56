//! HTTP: request in → handler → response out. Every response gets `x-request-id`,
//! `x-generation-id` and its JSON log line here; errors become responses in
//! [`response::error_response`], the one place that does it.

mod admin;
mod body;
mod context;
mod response;
mod status;
mod v1;

use std::cell::RefCell;
use std::rc::Rc;

use serde_json::json;
use switchyard_core::dialects::{self, Action, Endpoint};
use switchyard_core::error::ErrorShape;
use switchyard_core::ApiError;
use worker::{Context, Env, Method, Request, Response};

use context::RequestCtx;
use response::{error_response, HandlerResult};

use crate::calls::{self, Counts};
use crate::faults::Faults;
use crate::health;
use crate::runtime::apart::apart;
use crate::runtime::clock::now_ms;
use crate::runtime::ids::{new_generation_id, new_id};

/// Entry point for every request.
pub async fn handle(mut req: Request, env: Env, ctx: Context) -> Response {
    let request_id = req
        .headers()
        .get("x-request-id")
        .ok()
        .flatten()
        .filter(|v| !v.is_empty() && v.len() <= 200 && v.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| new_id("req"));
    let path = req.path();
    let shape = ErrorShape::for_path(&path);
    let mut rc = RequestCtx {
        request_id,
        generation_id: new_generation_id(),
        started_ms: now_ms(),
        shape,
        model: None,
        route: None,
        attempts: None,
        key_id: None,
        account_id: None,
        client: worker::AbortSignal::from(req.inner().signal()),
        faults: Faults::read(&req, &env),
    };
    let method = req.method();
    let ctx = Rc::new(ctx);
    let open = Rc::new(RefCell::new(Some(Counts::new())));
    let result = calls::scoped(open.clone(), route(&mut req, &env, &ctx, &mut rc, &method, &path)).await;
    let counts = calls::answered(&open);
    let (mut response, error_code) = match result {
        Ok(r) => (r, None),
        Err(e) => (error_response(&e, rc.shape, &rc.generation_id), Some(e.code())),
    };
    let headers = response.headers_mut();
    // Headers of responses built here are mutable; a failure to set one is not worth a 500.
    let _ = headers.set("x-request-id", &rc.request_id);
    let _ = headers.set("x-generation-id", &rc.generation_id);
    if rc.faults.instruments() {
        // Which isolate answered (tests only): what must hold across isolates is tested on two.
        let _ = headers.set("x-switchyard-isolate", &isolate_id());
        // This request's blocking storage calls (`crate::calls`).
        let _ = headers.set("x-switchyard-calls", &json!(counts).to_string());
    }
    if let Some(n) = rc.attempts {
        // What happened, without a second call: how many routes were tried, and which answered.
        let _ = headers.set("x-switchyard-attempts", &n.to_string());
        let _ = headers.set("x-switchyard-route", rc.route.as_deref().unwrap_or("none"));
    }
    // An answered generation is logged when it ends (`finish.rs`), a stream after its last byte.
    if rc.route.is_none() {
        log_line(&rc, method.as_ref(), &path, response.status_code(), error_code, &counts);
    }
    response
}

async fn route(
    req: &mut Request,
    env: &Env,
    ctx: &Rc<Context>,
    rc: &mut RequestCtx,
    method: &Method,
    path: &str,
) -> HandlerResult {
    if path == "/__test/calls" && rc.faults.instruments() {
        return Ok(test_calls(req));
    }
    if let Some(rest) = path.strip_prefix("/admin/") {
        return apart(admin::route(req, env, method, rest)).await;
    }
    if path == "/v1/responses" && upgrade_to_websocket(req) {
        return Err(ApiError::WebSocketUnsupported);
    }
    if let Some(endpoint) = dialects::endpoint(path) {
        return apart(dialect_endpoint(req, env, ctx, rc, method, endpoint)).await;
    }
    match (method, path) {
        // A client's connectivity check (Claude Code sends `HEAD /`): the gateway is here.
        (Method::Get | Method::Head, "/") => Ok(response::json_response(
            200,
            &json!({"service": "switchyard", "status_page": "/status"}),
        )),
        (Method::Get, "/v1/models") => apart(v1::models(req, env)).await,
        (Method::Get, "/v1/generation") => apart(v1::generation(req, env)).await,
        (Method::Get, "/v1/credits") => apart(v1::credits(req, env)).await,
        (Method::Get, "/api/health/models") => apart(status::api(env, rc.faults)).await,
        (Method::Get, "/status") => apart(status::page(env, rc.faults)).await,
        (_, "/v1/models" | "/v1/generation" | "/v1/credits") => Err(ApiError::MethodNotAllowed),
        _ => Err(ApiError::NotFound {
            what: format!("Path {path}"),
        }),
    }
}

/// One of a client dialect's endpoints (`dialects::endpoint`): a generation or a count, `POST`
/// only. Gemini's path names the model (and a generation's method and mode): a malformed one is
/// refused before the method is.
async fn dialect_endpoint(
    req: &mut Request,
    env: &Env,
    ctx: &Rc<Context>,
    rc: &mut RequestCtx,
    method: &Method,
    endpoint: Endpoint<'_>,
) -> HandlerResult {
    let post = || match method {
        Method::Post => Ok(()),
        _ => Err(ApiError::MethodNotAllowed),
    };
    let api = endpoint.api;
    match (endpoint.action, endpoint.in_path) {
        (Action::Generate, None) => {
            post()?;
            apart(v1::generate(req, env, ctx, rc, api, None)).await
        }
        (Action::Generate, Some(rest)) => {
            let call = v1::gemini_call(req, rest)?;
            post()?;
            apart(v1::generate(req, env, ctx, rc, api, Some(call))).await
        }
        (Action::Count, in_path) => {
            post()?;
            let model = in_path
                .map(|m| {
                    switchyard_core::admin::percent_decode(m)
                        .ok_or_else(|| ApiError::invalid("Malformed model in the path.", Some("model")))
                })
                .transpose()?;
            apart(v1::count_tokens(req, env, ctx, rc, api, model)).await
        }
    }
}

/// `GET /__test/calls?object=<name>` (test drills only): this isolate's storage calls since it
/// started, by kind (`crate::calls`), all and those of one object; with `shard_of=<model>`, also
/// the name of this isolate's health shard of that model; with `keyring=1`, the name the presented
/// key's keyring counts its D1 reads of it under (`keyring::counted_as`).
fn test_calls(req: &Request) -> Response {
    let query = |name: &str| query_value(req, name);
    let (all, one) = calls::totals(query("object").as_deref());
    let shard = query("shard_of").map(|model| health::shard_of(&model));
    let key_reads = query("keyring")
        .and_then(|_| v1::presented(req).ok())
        .map(|(key, _)| crate::keyring::counted_as(&switchyard_core::keys::hash_key(&key)));
    response::json_response(
        200,
        &json!({"isolate": isolate_id(), "all": all, "object": one, "shard": shard, "key_reads": key_reads}),
    )
}

/// The first value of the query parameter `name`, decoded — read from the URL's text, not from a
/// parsed URL: the runtime's URL is well formed, and the `url` crate's parser is code a cold
/// isolate would otherwise compile for every request (issue 36).
pub(crate) fn query_value(req: &Request, name: &str) -> Option<String> {
    let url = req.inner().url();
    let query = url.split_once('?')?.1;
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The request asks to become a WebSocket (`Upgrade: websocket`).
fn upgrade_to_websocket(req: &Request) -> bool {
    req.headers()
        .get("upgrade")
        .ok()
        .flatten()
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

thread_local! {
    static ISOLATE_ID: String = new_id("iso");
}

fn isolate_id() -> String {
    ISOLATE_ID.with(String::clone)
}

/// One JSON line per request: ids, model, route, status, error code, milliseconds, the storage
/// calls it waited on (`crate::calls`). Never keys or prompts.
fn log_line(rc: &RequestCtx, method: &str, path: &str, status: u16, error: Option<&str>, calls: &Counts) {
    let line = json!({
        "request_id": rc.request_id,
        "generation_id": rc.generation_id,
        "method": method,
        "path": path,
        "status": status,
        "key_id": rc.key_id,
        "account_id": rc.account_id,
        "model": rc.model,
        "route": rc.route,
        "attempts": rc.attempts,
        "error": error,
        "ms": now_ms().saturating_sub(rc.started_ms),
        "calls": calls,
    });
    worker::console_log!("{line}");
}
