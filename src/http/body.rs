//! Reading a request body with a hard cap: a declared length over it is refused before reading,
//! and a body without one (chunked) is refused as soon as it passes the cap — never read whole
//! first (SPEC §15). And a budget per isolate for the bodies its requests hold (SPEC §18): one
//! client's large bodies must not push the isolate, and every other request in it, past its
//! memory.

use switchyard_core::ApiError;
use worker::Request;

use crate::budget::BodyShare;
use crate::runtime::abort::Body;

/// The body and its share of the isolate's budget, or a 400 naming the limit once it has more than
/// `limit` bytes, or a 503 `gateway_busy` when the isolate holds too many bodies already. Keep the
/// share for as long as the request holds its body.
pub async fn read_budgeted(req: &mut Request, limit: usize) -> Result<(Vec<u8>, BodyShare), ApiError> {
    let mut share = BodyShare::take(declared_length(req).unwrap_or(0).min(limit)).ok_or(ApiError::GatewayBusy)?;
    let bytes = read_capped(req, limit).await?;
    let unaccounted = bytes.len().saturating_sub(share.bytes());
    if unaccounted > 0 && !share.grow(unaccounted) {
        return Err(ApiError::GatewayBusy);
    }
    Ok((bytes, share))
}

/// The body, or a 400 naming the limit once it has more than `limit` bytes.
pub async fn read_capped(req: &mut Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || ApiError::invalid(format!("Request body is larger than {} MiB.", limit >> 20), None);
    if declared_length(req).is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let Some(stream) = req.inner().body() else {
        return Ok(Vec::new()); // no body at all
    };
    let mut body = Body::new(&stream).ok_or_else(unreadable)?;
    match body.read_up_to(limit).await {
        Ok((bytes, true)) => Ok(bytes),
        Ok((_, false)) => Err(too_large()),
        Err(()) => Err(unreadable()),
    }
}

/// The body's `content-length`, if the client declared one.
fn declared_length(req: &Request) -> Option<usize> {
    req.headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok())
}

fn unreadable() -> ApiError {
    ApiError::invalid("Could not read the request body.", None)
}
