//! Reading a request body with a hard cap: a declared length over it is refused before reading,
//! and a body without one (chunked) is refused as soon as it passes the cap — never read whole
//! first (SPEC §15). And a budget per isolate for the bodies its requests hold (SPEC §18): one
//! client's large bodies must not push the isolate, and every other request in it, past its
//! memory.

use std::cell::Cell;

use switchyard_core::ApiError;
use worker::Request;

use crate::runtime::abort::Body;

/// Bytes of request bodies one isolate holds at once. A body lives about twice while its request
/// runs (its fields, and the copy an attempt sends), under an isolate's 128 MB
/// (https://developers.cloudflare.com/workers/platform/limits/#memory): two 10 MiB bodies fit.
pub const BODY_BUDGET_BYTES: usize = 24 * 1024 * 1024;

thread_local! {
    static IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// A body's share of the isolate's budget, given back when the request is done with it.
pub struct BodyShare(usize);

impl BodyShare {
    /// Takes `bytes` of the budget, or `None` (503 `gateway_busy`) when it would go past it. A
    /// body alone larger than the budget cannot happen: the cap is below it.
    pub fn take(bytes: usize) -> Option<BodyShare> {
        IN_FLIGHT.with(|used| {
            let now = used.get();
            if now > 0 && now.saturating_add(bytes) > BODY_BUDGET_BYTES {
                return None;
            }
            used.set(now.saturating_add(bytes));
            Some(BodyShare(bytes))
        })
    }

    /// Takes more of the budget as a body without a declared length grows.
    fn grow(&mut self, bytes: usize) -> bool {
        match BodyShare::take(bytes) {
            Some(more) => {
                self.0 += more.0;
                std::mem::forget(more);
                true
            }
            None => false,
        }
    }
}

impl Drop for BodyShare {
    fn drop(&mut self) {
        IN_FLIGHT.with(|used| used.set(used.get().saturating_sub(self.0)));
    }
}

/// The body and its share of the isolate's budget, or a 400 naming the limit once it has more than
/// `limit` bytes, or a 503 `gateway_busy` when the isolate holds too many bodies already. Keep the
/// share for as long as the request holds its body.
pub async fn read_budgeted(req: &mut Request, limit: usize) -> Result<(Vec<u8>, BodyShare), ApiError> {
    let declared = req
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    let mut share = BodyShare::take(declared.unwrap_or(0).min(limit)).ok_or(ApiError::GatewayBusy)?;
    let bytes = read_capped(req, limit).await?;
    let unaccounted = bytes.len().saturating_sub(share.0);
    if unaccounted > 0 && !share.grow(unaccounted) {
        return Err(ApiError::GatewayBusy);
    }
    Ok((bytes, share))
}

/// The body, or a 400 naming the limit once it has more than `limit` bytes.
pub async fn read_capped(req: &mut Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    let too_large = || ApiError::invalid(format!("Request body is larger than {} MiB.", limit >> 20), None);
    let declared = req
        .headers()
        .get("content-length")
        .ok()
        .flatten()
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
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

fn unreadable() -> ApiError {
    ApiError::invalid("Could not read the request body.", None)
}
