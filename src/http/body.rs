//! Reading a request body with a hard cap: a declared length over it is refused before reading,
//! and a body without one (chunked) is refused as soon as it passes the cap — never read whole
//! first (SPEC §15).

use futures_util::StreamExt;
use switchyard_core::ApiError;
use worker::Request;

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
    let Ok(mut stream) = req.stream() else {
        return Ok(Vec::new()); // no body at all
    };
    let mut body = Vec::with_capacity(declared.unwrap_or(0));
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| ApiError::invalid("Could not read the request body.", None))?;
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
