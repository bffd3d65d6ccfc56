//! Reading a request body with a hard cap: a declared length over it is refused before reading,
//! and a body without one (chunked) is refused as soon as it passes the cap — never read whole
//! first (SPEC §15).

use switchyard_core::ApiError;
use worker::Request;

use crate::runtime::abort::Body;

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
