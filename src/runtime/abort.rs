//! Upstream fetches' cancellation and bodies: the `AbortController` of an attempt, and the body
//! read through a reader of our own (handed on to the JS relay after commit). Every JS call goes
//! through `host.js`, which catches a refusal by the runtime (a task polled outside its request,
//! see [`super::clock::in_request`]) and answers with a value instead of unwinding through Wasm.

use js_sys::{Array, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use worker::web_sys;

#[wasm_bindgen(module = "/src/runtime/host.js")]
extern "C" {
    #[wasm_bindgen(js_name = newAbortController)]
    fn new_abort_controller() -> JsValue;
    #[wasm_bindgen(js_name = signalOf)]
    fn signal_of(controller: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = abortFetch)]
    fn abort_fetch(controller: &JsValue);
    #[wasm_bindgen(js_name = readerOf)]
    fn reader_of(stream: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = readChunk)]
    fn read_chunk(reader: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = readUpTo)]
    fn read_up_to(reader: &JsValue, cap: f64) -> Promise;
    #[wasm_bindgen(js_name = whenAborted)]
    fn when_aborted(signal: &JsValue) -> Promise;
}

/// Resolves when `signal` aborts — the client of the request left (`enable_request_signal`).
pub async fn aborted(signal: &worker::AbortSignal) {
    let signal: &web_sys::AbortSignal = signal.as_ref();
    let _ = JsFuture::from(when_aborted(signal)).await;
}

/// Aborts the upstream fetch it was given to.
pub struct Canceller(Option<JsValue>);

impl Default for Canceller {
    fn default() -> Self {
        Canceller::new()
    }
}

impl Canceller {
    pub fn new() -> Canceller {
        Canceller(Some(new_abort_controller()).filter(|c| !c.is_undefined()))
    }

    /// The signal to pass to `fetch` (none if the runtime would not make one).
    pub fn signal(&self) -> Option<worker::AbortSignal> {
        let signal = signal_of(self.0.as_ref()?);
        if signal.is_undefined() {
            return None;
        }
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
            abort_fetch(c);
        }
    }
}

/// An upstream response body, read through a reader of our own so that after commit the same
/// reader can be handed to the JS relay (`relay.js`) with the rest of the stream.
pub struct Body {
    reader: JsValue,
}

impl Body {
    /// Locks `stream` (a `ReadableStream`) to a new reader.
    pub fn new(stream: &JsValue) -> Option<Body> {
        Some(reader_of(stream))
            .filter(|r| !r.is_undefined())
            .map(|reader| Body { reader })
    }

    /// The next chunk; `None` at the end, `Err` when the body broke.
    pub async fn next(&mut self) -> Result<Option<Vec<u8>>, ()> {
        let chunk = JsFuture::from(read_chunk(&self.reader)).await.map_err(drop)?;
        if chunk.is_undefined() {
            return Ok(None);
        }
        chunk
            .dyn_into::<Uint8Array>()
            .map(|bytes| Some(bytes.to_vec()))
            .map_err(drop)
    }

    /// The body up to `cap` bytes; `true` with it when that was all of it (`false`: there was
    /// more, not read). Read in JS, one promise for the whole body.
    pub async fn read_up_to(&mut self, cap: usize) -> Result<(Vec<u8>, bool), ()> {
        let pair = JsFuture::from(read_up_to(&self.reader, cap as f64))
            .await
            .map_err(drop)?
            .dyn_into::<Array>()
            .map_err(drop)?;
        let bytes = pair.get(0).dyn_into::<Uint8Array>().map_err(drop)?;
        Ok((bytes.to_vec(), pair.get(1).is_truthy()))
    }

    /// The reader, for the relay to go on with.
    pub fn reader(&self) -> &JsValue {
        &self.reader
    }
}
