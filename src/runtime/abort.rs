//! Upstream fetches' cancellation and bodies: the `AbortController` of an attempt, and the body
//! read through a reader of our own (handed on to the JS relay after commit). Every JS call goes
//! through [`super::js`], so a refusal by the runtime (a task polled outside its request, see
//! [`super::clock::in_request`]) comes back as an error instead of unwinding through Wasm.

use js_sys::{Promise, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use worker::web_sys;

use super::js;

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

    /// The `AbortController` itself (`undefined` if there is none), for the JS relay.
    pub fn js(&self) -> JsValue {
        self.0.clone().unwrap_or(JsValue::UNDEFINED)
    }

    /// Aborts the fetch and its body; a refusal by the runtime is ignored.
    pub fn abort(&self) {
        if let Some(c) = &self.0 {
            let _ = js::call_method(c, "abort", &[]);
        }
    }
}

/// An upstream response body, read through a reader of our own so that after commit the same
/// reader can be handed to the JS relay (`stream.js`) with the rest of the stream.
pub struct Body {
    reader: JsValue,
}

impl Body {
    /// Locks `stream` (a `ReadableStream`) to a new reader.
    pub fn new(stream: &JsValue) -> Option<Body> {
        js::call_method(stream, "getReader", &[])
            .ok()
            .map(|reader| Body { reader })
    }

    /// The next chunk; `None` at the end, `Err` when the body broke.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, ()> {
        let read = js::call_method(&self.reader, "read", &[])
            .and_then(|p| p.dyn_into::<Promise>())
            .map_err(drop)?;
        let result = JsFuture::from(read).await.map_err(drop)?;
        if js::get(&result, "done").is_ok_and(|d| d.is_truthy()) {
            return Ok(None);
        }
        match js::get(&result, "value").map(|v| v.dyn_into::<Uint8Array>()) {
            Ok(Ok(bytes)) => Ok(Some(bytes.to_vec())),
            _ => Err(()),
        }
    }

    /// The body up to `cap` bytes; `true` with it when that was all of it (`false`: there was
    /// more, not read).
    pub async fn read_up_to(&mut self, cap: usize) -> Result<(Vec<u8>, bool), ()> {
        let mut out = Vec::new();
        while let Some(chunk) = self.next().await? {
            if out.len() + chunk.len() > cap {
                let room = cap - out.len();
                out.extend_from_slice(&chunk[..room]);
                return Ok((out, false));
            }
            out.extend_from_slice(&chunk);
        }
        Ok((out, true))
    }

    /// The reader, for the relay to go on with.
    pub fn reader(&self) -> &JsValue {
        &self.reader
    }
}
