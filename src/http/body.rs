//! Reading a request body with a hard cap: a declared length over it is refused before reading,
//! and a body without one (chunked) is refused as soon as it passes the cap — never read whole
//! first (SPEC §15). And the isolate's budget for the bodies its requests hold (SPEC §18, §18a):
//! a generation body takes its share chunk by chunk as it arrives, within the key's part of the
//! budget, and must keep to the floor rate (core `bodies`) or be cut off with a 408.

use std::pin::pin;

use futures_util::future::{select, Either};
use switchyard_core::bodies::{next_bytes_due_ms, FLOOR_BYTES_PER_S};
use switchyard_core::ApiError;
use worker::Request;

use crate::budget::BodyShare;
use crate::runtime::abort::Body;
use crate::runtime::clock::{now_ms, sleep};

/// The body of key `key_id`'s request and its share of the isolate's budget; a 400 naming the
/// limit once it has more than `limit` bytes, a 503 `gateway_busy` when the isolate or the key
/// holds too much already, a 408 when it arrives slower than the floor rate. Keep the share for
/// as long as the request holds its body.
pub async fn read_budgeted(req: &mut Request, limit: usize, key_id: &str) -> Result<(Vec<u8>, BodyShare), ApiError> {
    if declared_length(req).is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let mut share = BodyShare::new(key_id);
    // A declared length that cannot fit now is refused at once, unread (as an honest client's
    // large upload would be refused halfway anyway); the share itself counts what arrives.
    if declared_length(req).is_some_and(|n| !share.fits(n)) {
        return Err(ApiError::GatewayBusy);
    }
    let Some(stream) = req.inner().body() else {
        return Ok((Vec::new(), share)); // no body at all
    };
    let mut body = Body::new(&stream).ok_or_else(unreadable)?;
    let started_ms = now_ms();
    let mut bytes = Vec::new();
    // Past the budget mid-read: the rest is read and dropped (held nowhere), then 503 — answering
    // while the client still sends would close the connection under it, before it reads the 503.
    let mut refused = false;
    let mut received = 0usize;
    loop {
        let wait_ms = next_bytes_due_ms(started_ms, received).saturating_sub(now_ms());
        let chunk = match select(pin!(body.next()), pin!(sleep(wait_ms))).await {
            Either::Left((chunk, _)) => chunk.map_err(|()| unreadable())?,
            Either::Right(_) => {
                return Err(ApiError::BodyTooSlow {
                    floor_kib_s: FLOOR_BYTES_PER_S / 1024,
                })
            }
        };
        let Some(chunk) = chunk else {
            return match refused {
                true => Err(ApiError::GatewayBusy),
                false => Ok((bytes, share)),
            };
        };
        received += chunk.len();
        if received > limit {
            return Err(too_large(limit));
        }
        if refused || !share.grow(chunk.len()) {
            if !refused {
                refused = true;
                bytes = Vec::new(); // given back now: nothing of this body is kept
                share = BodyShare::new(key_id);
            }
            continue;
        }
        bytes.extend_from_slice(&chunk);
    }
}

/// The body, or a 400 naming the limit once it has more than `limit` bytes.
pub async fn read_capped(req: &mut Request, limit: usize) -> Result<Vec<u8>, ApiError> {
    if declared_length(req).is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    let Some(stream) = req.inner().body() else {
        return Ok(Vec::new()); // no body at all
    };
    let mut body = Body::new(&stream).ok_or_else(unreadable)?;
    match body.read_up_to(limit).await {
        Ok((bytes, true)) => Ok(bytes),
        Ok((_, false)) => Err(too_large(limit)),
        Err(()) => Err(unreadable()),
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError::invalid(format!("Request body is larger than {} MiB.", limit >> 20), None)
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
