//! The proxy: sends a validated request to the model's route and relays the answer.
//!
//! Foundation scope: the model's first route serving the request's dialect, one attempt. A 2xx is
//! relayed as it came (status, content type, body stream byte for byte); an upstream
//! `invalid_request` (400/413/422) becomes 400 `upstream_invalid_request` with the upstream's
//! message, secrets redacted; anything else is 502 `provider_error`. The upstream key is read
//! from the Worker's secrets by name and never leaves this module.

use js_sys::Uint8Array;
use switchyard_core::catalog::{AuthScheme, Catalog, Provider};
use switchyard_core::dialect::{redact, upstream_error_message, ClientRequest};
use switchyard_core::ApiError;
use worker::{Env, Fetch, Headers, Method, Request, RequestInit, ResponseBuilder};

use crate::http::{HandlerResult, RequestCtx};

/// The upstream key named by the provider's `key_secret` (`None` when it names none).
fn upstream_key(env: &Env, provider: &Provider) -> Result<Option<String>, ApiError> {
    let Some(name) = &provider.key_secret else { return Ok(None) };
    match env.secret(name).map(|s| s.to_string()).or_else(|_| env.var(name).map(|v| v.to_string())) {
        Ok(key) => Ok(Some(key)),
        Err(_) => {
            // The secret's name is configuration, not a secret; its value is never logged.
            worker::console_error!("{{\"event\":\"missing_upstream_secret\",\"provider\":{:?},\"secret\":{:?}}}", provider.id, name);
            Err(ApiError::Internal { label: "missing_upstream_secret" })
        }
    }
}

pub async fn forward(env: &Env, catalog: &Catalog, request: &ClientRequest, rc: &mut RequestCtx) -> HandlerResult {
    let model = catalog.model(&request.model).ok_or_else(|| ApiError::ModelNotFound {
        model: request.model.clone(),
        available: catalog.model_ids(),
    })?;
    let route = model
        .routes
        .iter()
        .find(|r| r.apis.contains(&request.api))
        .ok_or_else(|| ApiError::SupplyNotConfigured { model: model.id.clone() })?;
    let provider = catalog.provider(&route.provider).ok_or(ApiError::Internal { label: "route_provider" })?;
    let key = upstream_key(env, provider)?;
    rc.route = Some(route.id.clone());

    let url = format!("{}{}", provider.base_url.trim_end_matches('/'), request.api.upstream_path());
    let headers = Headers::new();
    let set = |name: &str, value: &str| headers.set(name, value).map_err(|_| ApiError::Internal { label: "header" });
    set("content-type", "application/json")?;
    set("accept", if request.stream { "text/event-stream" } else { "application/json" })?;
    if let Some(key) = &key {
        match provider.auth {
            AuthScheme::Bearer => set("authorization", &format!("Bearer {key}"))?,
            AuthScheme::XApiKey => set("x-api-key", key)?,
        }
    }
    let body = request.upstream_body(&route.upstream_model);
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(Uint8Array::from(body.as_slice()).into()));
    let upstream_request = Request::new_with_init(&url, &init).map_err(|_| ApiError::Internal { label: "upstream_request" })?;
    let fetch = Fetch::Request(upstream_request);
    let mut response = fetch.send().await.map_err(|_| ApiError::ProviderError { model: model.id.clone() })?;

    let status = response.status_code();
    if (200..300).contains(&status) {
        let out = Headers::new();
        if let Ok(Some(ct)) = response.headers().get("content-type") {
            let _ = out.set("content-type", &ct);
        }
        let _ = out.set("cache-control", "no-cache");
        let (_, body) = response.into_parts();
        return Ok(ResponseBuilder::new().with_status(status).with_headers(out).body(body));
    }
    if matches!(status, 400 | 413 | 422) {
        let text = response.bytes().await.unwrap_or_default();
        let message = upstream_error_message(&text)
            .map(|m| redact(&m, key.as_deref()))
            .unwrap_or_else(|| format!("The upstream refused the request (HTTP {status})."));
        return Err(ApiError::UpstreamInvalidRequest { message });
    }
    Err(ApiError::ProviderError { model: model.id.clone() })
}
