//! After commit (SPEC §7): relays the committed stream to the client — and reads the upstream on
//! for the grace window after a client leaves — then says what was delivered.
//!
//! Two halves with one typed protocol. The JS half (`relay.js`) runs the loop on the request's own
//! promises: it reads the upstream, forwards each chunk to the client, and watches the idle
//! timeout, `stream_cap_ms`, the client leaving and the grace window. The Rust half
//! ([`RelayCore`]) is everything the JS half knows: the reader, the abort handle, the times, and
//! one synchronous call per chunk in which the core [`Relay`] decides about the bytes (forward as
//! they are, or other bytes). No Rust future is polled per chunk, and nothing is driven from
//! outside its request. Moving the per-chunk work elsewhere (e.g. a `TransformStream`) changes
//! these two files only: the driver sees [`start`] and the [`Delivery`] it resolves to.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;

use js_sys::{Array, Promise};
use switchyard_core::catalog::Policy;
use switchyard_core::dialects::ClientEvent;
use switchyard_core::generation::{Delivery, Tariff};
use switchyard_core::relay::{After, Break, Incoming, Relay};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::upstream::Live;

#[wasm_bindgen(module = "/src/relay.js")]
extern "C" {
    /// Starts the JS half on `core`; returns `[client ReadableStream, Promise]`, the promise
    /// settling when nothing more will be read (after `core.finished(…)`).
    #[wasm_bindgen(catch, js_name = relay)]
    fn relay_js(core: RelayCore) -> Result<Array, JsValue>;
}

/// What one committed stream has relayed so far.
struct State {
    incoming: Incoming,
    relay: Relay,
    events: Vec<ClientEvent>,
    /// Bytes to forward instead of the last chunk (or, before the loop, the head).
    out: Vec<u8>,
    /// The stream's last event has been relayed.
    over: bool,
    /// Why the stream ended badly, if it did.
    broken: Option<String>,
    /// The upstream body was read to its end (nothing left to abort).
    upstream_ended: bool,
}

impl State {
    /// Runs the parsed events through the relay into `out`; sets `over` at the last one.
    fn drain(&mut self) {
        if let Some(usage) = self.incoming.upstream_usage() {
            self.relay.note_upstream_usage(usage);
        }
        for ev in std::mem::take(&mut self.events) {
            if self.over {
                return;
            }
            let step = self.relay.on_event(ev);
            self.apply(step);
        }
    }

    fn apply(&mut self, step: After) {
        match step {
            After::Send(bytes) => self.out.extend_from_slice(&bytes),
            After::Skip => {}
            After::End { bytes, broken } => {
                self.out.extend_from_slice(&bytes);
                self.broken = broken;
                self.over = true;
            }
        }
    }

    /// The relay's last words for a stream that stopped early.
    fn end(&mut self, why: Break) -> Vec<u8> {
        let step = self.relay.on_break(why);
        self.apply(step);
        std::mem::take(&mut self.out)
    }
}

/// The relay's Rust half, handed to `relay.js`: its inputs and its per-chunk decisions.
#[wasm_bindgen]
pub struct RelayCore {
    state: Rc<RefCell<State>>,
    reader: JsValue,
    abort_controller: JsValue,
    idle_ms: f64,
    cap_ms: f64,
    grace_ms: f64,
    client_signal: JsValue,
}

#[wasm_bindgen]
impl RelayCore {
    /// The upstream body's reader.
    #[wasm_bindgen(getter)]
    pub fn reader(&self) -> JsValue {
        self.reader.clone()
    }

    /// The upstream fetch's `AbortController` (`undefined` if the runtime made none).
    #[wasm_bindgen(getter, js_name = abortController)]
    pub fn abort_controller(&self) -> JsValue {
        self.abort_controller.clone()
    }

    /// The client's request signal: it aborts when the client disconnects.
    #[wasm_bindgen(getter, js_name = clientSignal)]
    pub fn client_signal(&self) -> JsValue {
        self.client_signal.clone()
    }

    /// No data for this long ends the stream ([`Break::Idle`]).
    #[wasm_bindgen(getter, js_name = idleMs)]
    pub fn idle_ms(&self) -> f64 {
        self.idle_ms
    }

    /// The stream may last this long from now ([`Break::Cap`]; the cap counts from the request's
    /// start).
    #[wasm_bindgen(getter, js_name = capMs)]
    pub fn cap_ms(&self) -> f64 {
        self.cap_ms
    }

    /// After the client leaves, the upstream is read on this long (0: stop at once).
    #[wasm_bindgen(getter, js_name = graceMs)]
    pub fn grace_ms(&self) -> f64 {
        self.grace_ms
    }

    /// The stream's last event has been relayed: close the client's stream.
    #[wasm_bindgen(getter)]
    pub fn over(&self) -> bool {
        self.state.try_borrow().map_or(true, |s| s.over)
    }

    /// What to send first: everything held back before commit and the rest of its chunk.
    pub fn head(&self) -> Vec<u8> {
        self.take_out()
    }

    /// Takes one upstream chunk: `undefined` to forward it as it is and read on, else the bytes
    /// to forward instead — then [`RelayCore::over`] says whether the stream is over (it is never
    /// over after `undefined`, so the common chunk costs one call).
    pub fn push(&self, chunk: &[u8]) -> Option<Vec<u8>> {
        let Ok(mut s) = self.state.try_borrow_mut() else {
            return Some(Vec::new());
        };
        let s = &mut *s;
        s.incoming.push(chunk, &mut s.events);
        s.drain();
        if !s.over && s.out.as_slice() == chunk {
            s.out.clear();
            None
        } else {
            Some(std::mem::take(&mut s.out))
        }
    }

    /// The upstream closed: a last event without its blank line, then the ending.
    pub fn close(&self) -> Vec<u8> {
        let Ok(mut s) = self.state.try_borrow_mut() else {
            return Vec::new();
        };
        let s = &mut *s;
        s.incoming.close(&mut s.events);
        s.drain();
        if !s.over {
            let step = s.relay.on_close();
            s.apply(step);
        }
        std::mem::take(&mut s.out)
    }

    /// The upstream connection broke: the error frame to send.
    pub fn cut(&self) -> Vec<u8> {
        self.end(Break::Cut)
    }

    /// The upstream went idle: the error frame to send.
    pub fn idle(&self) -> Vec<u8> {
        self.end(Break::Idle)
    }

    /// The stream ran past its cap: the error frame to send.
    #[wasm_bindgen(js_name = overCap)]
    pub fn over_cap(&self) -> Vec<u8> {
        self.end(Break::Cap)
    }

    /// The loop is done; `upstream_ended`: the upstream body was read to its end.
    pub fn finished(&self, upstream_ended: bool) {
        if let Ok(mut s) = self.state.try_borrow_mut() {
            s.upstream_ended = upstream_ended;
        }
    }
}

impl RelayCore {
    fn take_out(&self) -> Vec<u8> {
        self.state
            .try_borrow_mut()
            .map(|mut s| std::mem::take(&mut s.out))
            .unwrap_or_default()
    }

    fn end(&self, why: Break) -> Vec<u8> {
        self.state.try_borrow_mut().map(|mut s| s.end(why)).unwrap_or_default()
    }
}

/// Starts relaying `live` (priced with `tariff`: its final usage event carries the charge) for at
/// most `cap_ms` more: returns the client's body (a
/// `ReadableStream`) and what was delivered once nothing more will be read. `Err`: the relay could
/// not start; the upstream is aborted and nothing reached the client.
pub fn start(
    live: Live,
    tariff: Option<Tariff>,
    policy: &Policy,
    cap_ms: u64,
    client: &worker::AbortSignal,
) -> Result<(JsValue, impl Future<Output = Delivery>), ()> {
    let Live {
        body,
        incoming,
        relay,
        pending,
        head,
        controller,
        ..
    } = live;
    let mut relay = relay;
    if let Some(t) = tariff {
        relay.price_with(t); // the final usage event carries the charge
    }
    let mut state = State {
        incoming,
        relay,
        events: pending,
        out: head,
        over: false,
        broken: None,
        upstream_ended: false,
    };
    // Events that came in the committing chunk after the committing one.
    state.drain();
    let state = Rc::new(RefCell::new(state));
    let core = RelayCore {
        state: state.clone(),
        reader: body.reader().clone(),
        abort_controller: controller.js(),
        idle_ms: policy.idle_timeout_ms.max(1) as f64,
        cap_ms: cap_ms as f64,
        grace_ms: policy.disconnect_grace_ms as f64,
        client_signal: JsValue::from((**client).clone()),
    };
    let started = relay_js(core).ok().and_then(|pair| {
        let done = pair.get(1).dyn_into::<Promise>().ok()?;
        Some((pair.get(0), done))
    });
    let Some((client_body, done)) = started else {
        controller.abort();
        return Err(());
    };
    Ok((client_body, async move {
        let _ = JsFuture::from(done).await;
        let Ok(s) = state.try_borrow() else {
            return Delivery::default();
        };
        let mut delivery = s.relay.delivery();
        delivery.broken = s
            .broken
            .clone()
            .or_else(|| (!s.upstream_ended).then(|| "the client disconnected".to_string()));
        delivery
    }))
}
