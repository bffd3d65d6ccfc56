//! HTTP: request in → handler → response out. The one place where an [`ApiError`] becomes a
//! `Response` ([`error_response`]), and where every response gets `x-request-id`,
//! `x-generation-id` and its JSON log line.

mod admin;
mod status;
mod v1;

use serde_json::{json, Value};
use switchyard_core::dialect::ErrorShape;
use switchyard_core::ApiError;
use worker::{Context, Env, Headers, Method, Request, Response, ResponseBuilder};

use crate::clock::now_ms;
use crate::ids::new_id;

/// Per-request facts shared by the handlers and the log line.
pub struct RequestCtx {
    pub request_id: String,
    pub generation_id: String,
    pub started_ms: u64,
    /// Which error body shape this path speaks.
    pub shape: ErrorShape,
    /// Filled in by handlers for the log line: the public model and the route that answered.
    pub model: Option<String>,
    pub route: Option<String>,
    /// Aborted when the client disconnects (`enable_request_signal`).
    pub client: worker::AbortSignal,
    /// The authenticated key and its account, once known.
    pub key_id: Option<String>,
    pub account_id: Option<String>,
}

pub type HandlerResult = Result<Response, ApiError>;

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
    let shape = if path == "/v1/messages" {
        ErrorShape::Anthropic
    } else {
        ErrorShape::OpenAi
    };
    let mut rc = RequestCtx {
        request_id,
        generation_id: new_id("gen"),
        started_ms: now_ms(),
        shape,
        model: None,
        route: None,
        key_id: None,
        account_id: None,
        client: worker::AbortSignal::from(req.inner().signal()),
    };
    let method = req.method();
    let result = route(&mut req, &env, &ctx, &mut rc, &method, &path).await;
    let (mut response, error_code) = match result {
        Ok(r) => (r, None),
        Err(e) => (error_response(&e, &rc), Some(e.code())),
    };
    let headers = response.headers_mut();
    // Headers of responses built here are mutable; a failure to set one is not worth a 500.
    let _ = headers.set("x-request-id", &rc.request_id);
    let _ = headers.set("x-generation-id", &rc.generation_id);
    log_line(&rc, method.as_ref(), &path, response.status_code(), error_code);
    response
}

async fn route(
    req: &mut Request,
    env: &Env,
    ctx: &Context,
    rc: &mut RequestCtx,
    method: &Method,
    path: &str,
) -> HandlerResult {
    if let Some(rest) = path.strip_prefix("/admin/") {
        return admin::route(req, env, method, rest).await;
    }
    match (method, path) {
        (Method::Get, "/v1/models") => v1::models(req, env).await,
        (Method::Post, "/v1/chat/completions") => v1::chat_completions(req, env, ctx, rc).await,
        (Method::Get, "/v1/generation") => v1::generation(req, env).await,
        (Method::Get, "/v1/credits") => v1::credits(req, env).await,
        (Method::Get, "/api/health/models") => status::api(env).await,
        (Method::Get, "/status") => status::page(env).await,
        (_, "/v1/models" | "/v1/chat/completions" | "/v1/generation" | "/v1/credits") => {
            Err(ApiError::MethodNotAllowed)
        }
        _ => Err(ApiError::NotFound {
            what: format!("Path {path}"),
        }),
    }
}

/// The one function that turns an error into a response.
pub fn error_response(err: &ApiError, rc: &RequestCtx) -> Response {
    let mut response = json_response(err.status(), &err.body(rc.shape, &rc.generation_id));
    if let Some(s) = err.retry_after_s() {
        let _ = response.headers_mut().set("retry-after", &s.to_string());
    }
    response
}

/// A JSON response with the given status.
pub fn json_response(status: u16, body: &Value) -> Response {
    let headers = Headers::new();
    let _ = headers.set("content-type", "application/json");
    ResponseBuilder::new()
        .with_status(status)
        .with_headers(headers)
        .fixed(serde_json::to_vec(body).unwrap_or_default())
}

/// One JSON line per request: ids, model, route, status, error code, milliseconds. Never keys or
/// prompts.
fn log_line(rc: &RequestCtx, method: &str, path: &str, status: u16, error: Option<&str>) {
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
        "error": error,
        "ms": now_ms().saturating_sub(rc.started_ms),
    });
    worker::console_log!("{line}");
}
