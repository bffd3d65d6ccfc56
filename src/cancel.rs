//! Cancelling upstream fetches and letting go of their bodies without ever aborting the Wasm
//! instance: a task may be polled where the runtime refuses JS calls (see
//! [`crate::clock::in_request`]), and an uncaught refusal in a non-`catch` import would take
//! down every request in the isolate.

use futures_util::Stream;
use wasm_bindgen::{JsCast, JsValue};
use worker::{web_sys, ByteStream};

use crate::clock::in_request;
use crate::js;

/// Aborts the upstream fetch it was given to.
pub struct Canceller(Option<JsValue>);

impl Default for Canceller {
    fn default() -> Self {
        Canceller::new()
    }
}

impl Canceller {
    pub fn new() -> Canceller {
        Canceller(js::construct_global("AbortController").ok())
    }

    /// The signal to pass to `fetch` (none if the runtime would not make one).
    pub fn signal(&self) -> Option<worker::AbortSignal> {
        let signal = js::get(self.0.as_ref()?, "signal").ok()?;
        Some(worker::AbortSignal::from(
            signal.unchecked_into::<web_sys::AbortSignal>(),
        ))
    }

    /// Aborts the fetch and its body; a refusal by the runtime is ignored.
    pub fn abort(&self) {
        if let Some(c) = &self.0 {
            let _ = js::call_method(c, "abort", &[]);
        }
    }
}

/// An upstream response body whose reader is released only where the runtime allows it;
/// elsewhere it is leaked (the runtime reclaims it with the request) rather than crash.
pub struct Body(Option<ByteStream>);

impl Body {
    pub fn new(stream: ByteStream) -> Body {
        Body(Some(stream))
    }
}

impl Stream for Body {
    type Item = worker::Result<Vec<u8>>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        match self.0.as_mut() {
            Some(stream) => std::pin::Pin::new(stream).poll_next(cx),
            None => std::task::Poll::Ready(None),
        }
    }
}

impl Drop for Body {
    fn drop(&mut self) {
        if let Some(stream) = self.0.take() {
            if in_request() {
                drop(stream);
            } else {
                std::mem::forget(stream);
            }
        }
    }
}
