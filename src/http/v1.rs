//! `/v1/*` for API-key holders: the model list and the client dialects' entry points.
//!
//! Order per SPEC §3: authenticate, then read and validate the body, then hand the request to
//! the proxy.

use std::rc::Rc;

use serde_json::json;
use switchyard_core::dialect::{chat, MAX_BODY_BYTES};
use switchyard_core::keys::{hash_key, presented_key};
use switchyard_core::ApiError;
use worker::{Context, Env, Request};

use super::{json_response, HandlerResult, RequestCtx};
use crate::proxy;
use crate::store::{KeyRecord, Store};

/// The caller's active key, or 401.
async fn authenticate(req: &Request, store: &Store) -> Result<Rc<KeyRecord>, ApiError> {
    let headers = req.headers();
    let authorization = headers.get("authorization").ok().flatten();
    let x_api_key = headers.get("x-api-key").ok().flatten();
    let key = presented_key(authorization.as_deref(), x_api_key.as_deref()).ok_or(ApiError::InvalidApiKey)?;
    store.key_by_hash(&hash_key(key)).await?.ok_or(ApiError::InvalidApiKey)
}

/// Reads the body, refusing more than 10 MiB before reading when the length is declared.
async fn read_body(req: &mut Request) -> Result<Vec<u8>, ApiError> {
    let declared = req.headers().get("content-length").ok().flatten().and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES) {
        return Err(ApiError::invalid("Request body is larger than 10 MiB.", None));
    }
    req.bytes().await.map_err(|_| ApiError::invalid("Could not read the request body.", None))
}

/// `GET /v1/models`: the catalog's models in the OpenAI list shape.
pub async fn models(req: &Request, env: &Env) -> HandlerResult {
    let store = Store::new(env)?;
    authenticate(req, &store).await?;
    let catalog = store.catalog().await?;
    let data: Vec<_> = catalog
        .doc()
        .models
        .iter()
        .map(|m| {
            json!({
                "id": m.id,
                "object": "model",
                "created": 0,
                "owned_by": "switchyard",
                "context_window": m.context_window,
                "max_output_tokens": m.max_output_tokens,
            })
        })
        .collect();
    Ok(json_response(200, &json!({"object": "list", "data": data})))
}

/// `POST /v1/chat/completions`.
pub async fn chat_completions(req: &mut Request, env: &Env, _ctx: &Context, rc: &mut RequestCtx) -> HandlerResult {
    let store = Store::new(env)?;
    let key = authenticate(req, &store).await?;
    rc.key_id = Some(key.id.clone());
    rc.account_id = Some(key.account_id.clone());
    let body = read_body(req).await?;
    let request = chat::parse_request(&body)?;
    rc.model = Some(request.model.clone());
    let catalog = store.catalog().await?;
    proxy::forward(env, &catalog, &request, rc).await
}
