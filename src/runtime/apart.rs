//! Code that a fresh isolate compiles only when it first runs (issue 36). V8 compiles a Wasm
//! function the first time it is called, whole; an `async fn` awaited inside another is inlined
//! into its caller's state machine, so the request handler's future was one function holding every
//! endpoint — a cold isolate compiled the admin API, the status page and the failover paths before
//! answering its first request. [`apart`] keeps a future in a function of its own: the caller's
//! state machine holds a pointer, and the callee is compiled when it is first polled. The request
//! path keeps its rare branches apart too (a key's limits, a capped route, the awaited hold, a
//! pinned conversation, a probe's claim, a keyring call, an upstream's error answer, a Vertex
//! token): a plain request's first run compiles none of them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// A future polled through a function that is never inlined into its caller.
pub struct Apart<F>(Pin<Box<F>>);

/// Keeps `future` out of the caller's compiled code (see the module's note).
pub fn apart<F: Future>(future: F) -> Apart<F> {
    Apart(Box::pin(future))
}

impl<F: Future> Future for Apart<F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.0.as_mut().poll(cx)
    }
}
