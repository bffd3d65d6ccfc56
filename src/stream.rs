//! After commit (SPEC §7): relays the committed stream to the client, so the upstream can still
//! be read for the grace window after a client leaves, then finalises the generation.
//!
//! The loop itself is JS (`stream.js`): it reads the upstream, forwards each chunk to the client
//! untouched unless the [`Inspector`] hands back other bytes, and watches the idle timeout,
//! `stream_cap_ms`, the client leaving and the grace window. Every decision about the bytes is
//! the core [`Relay`]'s, made in one synchronous call per chunk — no Rust future is polled per
//! chunk (each poll costs a round of promise and executor work), and the loop runs on the
//! request's own promises, so it is never driven from outside its request. When the loop is done
//! the generation is finalised with the delivered usage (the upstream's count, else an estimate)
//! and settled from `ctx.wait_until`.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Promise, Uint8Array};
use switchyard_core::catalog::{Policy, Price};
use switchyard_core::classify::FailureClass;
use switchyard_core::generation::{cost_micros, settle_usage, Outcome};
use switchyard_core::relay::{Relay, Step};
use switchyard_core::sse::{SseEvent, SseParser};
use switchyard_core::ApiError;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use worker::{Context, Env, Headers, Response, ResponseBuilder};

use crate::clock::in_request;
use crate::js;
use crate::proxy::{Journal, Live};

#[wasm_bindgen(module = "/src/stream.js")]
extern "C" {
    /// See `stream.js`: returns `[client ReadableStream, Promise<{upstreamEnded, clientGone}>]`.
    #[wasm_bindgen(catch, js_name = relay)]
    #[allow(clippy::too_many_arguments)]
    fn relay_js(
        reader: &JsValue,
        head: Uint8Array,
        over: bool,
        inspector: Inspector,
        idle_ms: f64,
        cap_ms: f64,
        grace_ms: f64,
        abort_controller: &JsValue,
    ) -> Result<Array, JsValue>;
}

/// `Inspector::push`: forward `take()` instead of the chunk.
const FORWARD_OTHER: u32 = 1;
/// `Inspector::push`: the stream is over after this chunk.
const OVER: u32 = 2;

/// What one committed stream has relayed so far.
struct State {
    parser: SseParser,
    relay: Relay,
    events: Vec<SseEvent>,
    out: Vec<u8>,
    /// Why the stream ended badly, if it did.
    broken: Option<String>,
}

impl State {
    /// Runs the parsed events through the relay into `out`; true when the stream is over.
    fn drain(&mut self) -> bool {
        for ev in std::mem::take(&mut self.events) {
            match self.relay.on_event(ev) {
                Step::Send(bytes) => self.out.extend_from_slice(&bytes),
                Step::End { bytes, broken } => {
                    self.out.extend_from_slice(&bytes);
                    self.broken = broken;
                    return true;
                }
                Step::Hold | Step::Skip | Step::Commit(_) | Step::Fail(_) => {}
            }
        }
        false
    }

    fn end_with(&mut self, step: Step) -> Vec<u8> {
        match step {
            Step::End { bytes, broken } => {
                self.broken = broken;
                bytes
            }
            _ => Vec::new(),
        }
    }
}

/// The relay's decisions, called by `stream.js` once per upstream chunk.
#[wasm_bindgen]
pub struct Inspector(Rc<RefCell<State>>);

#[wasm_bindgen]
impl Inspector {
    /// Takes one upstream chunk: 0 to forward it as it is, [`FORWARD_OTHER`] to forward
    /// [`Inspector::take`] instead, plus [`OVER`] when the stream is over.
    pub fn push(&self, chunk: &[u8]) -> u32 {
        let Ok(mut s) = self.0.try_borrow_mut() else {
            return OVER;
        };
        let s = &mut *s;
        s.parser.push(chunk, &mut s.events);
        let over = s.drain();
        let forward = if s.out.as_slice() == chunk {
            s.out.clear();
            0
        } else {
            FORWARD_OTHER
        };
        forward | if over { OVER } else { 0 }
    }

    /// The bytes to forward instead of the last chunk.
    pub fn take(&self) -> Vec<u8> {
        self.0
            .try_borrow_mut()
            .map(|mut s| std::mem::take(&mut s.out))
            .unwrap_or_default()
    }

    /// The upstream closed: a last event without its blank line, then the ending.
    pub fn close(&self) -> Vec<u8> {
        let Ok(mut s) = self.0.try_borrow_mut() else {
            return Vec::new();
        };
        let last = s.parser.finish();
        s.events.extend(last);
        if !s.drain() {
            let step = s.relay.on_close();
            let bytes = s.end_with(step);
            s.out.extend_from_slice(&bytes);
        }
        std::mem::take(&mut s.out)
    }

    /// The stream ends badly: 0 the connection broke, 1 the upstream went idle, 2 the stream ran
    /// past its cap. Returns the error frame to send.
    pub fn broken(&self, why: u32) -> Vec<u8> {
        let Ok(mut s) = self.0.try_borrow_mut() else {
            return Vec::new();
        };
        let step = match why {
            0 => s
                .relay
                .on_broken_with(FailureClass::Connect, "The provider's connection broke mid-stream."),
            1 => s
                .relay
                .on_broken_with(FailureClass::Timeout, "The provider stopped sending data."),
            _ => s
                .relay
                .on_broken_with(FailureClass::Timeout, "The stream exceeded the maximum duration."),
        };
        s.end_with(step)
    }
}

/// What the relay needs to finish the generation record.
pub struct Finish {
    pub journal: Journal,
    pub env: Env,
    pub price: Price,
    pub max_tokens: u64,
    pub body_len: usize,
    pub policy: Policy,
}

/// Starts relaying `live` and returns the client's response.
pub fn relay(ctx: &Context, live: Live, finish: Finish, headers: Headers) -> Result<Response, ApiError> {
    let Live {
        body,
        parser,
        relay,
        pending,
        head,
        controller,
        ..
    } = live;
    let state = Rc::new(RefCell::new(State {
        parser,
        relay,
        events: pending,
        out: head,
        broken: None,
    }));
    // Events that came in the committing chunk after the committing one.
    let (head, over) = match state.try_borrow_mut() {
        Ok(mut s) => {
            let over = s.drain();
            (std::mem::take(&mut s.out), over)
        }
        Err(_) => (Vec::new(), true),
    };
    let policy = &finish.policy;
    let started = relay_js(
        body.reader(),
        Uint8Array::from(head.as_slice()),
        over,
        Inspector(state.clone()),
        policy.idle_timeout_ms.max(1) as f64,
        policy.stream_cap_ms as f64,
        policy.disconnect_grace_ms as f64,
        &controller.js(),
    );
    let (client_body, done) = match started {
        Ok(pair) => (pair.get(0), pair.get(1).dyn_into::<Promise>()),
        Err(_) => (JsValue::UNDEFINED, Err(JsValue::UNDEFINED)),
    };
    let response = done.ok().map(|done| {
        let response = ResponseBuilder::new()
            .with_status(200)
            .with_headers(headers)
            .stream(client_body.unchecked_into());
        (response, done)
    });
    match response {
        Some((response, done)) => {
            ctx.wait_until(settle_after(done, state, finish));
            Ok(response)
        }
        None => {
            // Nothing reached the client: abort the upstream and release the hold uncharged.
            controller.abort();
            let Finish { mut journal, env, .. } = finish;
            journal.record.outcome = Outcome::Failed;
            journal.record.error_code = Some("internal_error".into());
            ctx.wait_until(journal.finish(env));
            Err(ApiError::Internal {
                label: "response_stream",
            })
        }
    }
}

/// Waits for the relay loop to finish, then finalises and settles the generation.
async fn settle_after(done: Promise, state: Rc<RefCell<State>>, finish: Finish) {
    let ended = JsFuture::from(done).await.ok();
    let upstream_ended = ended
        .and_then(|v| js::get(&v, "upstreamEnded").ok())
        .is_some_and(|v| v.is_truthy());
    let Finish {
        mut journal,
        env,
        price,
        max_tokens,
        body_len,
        ..
    } = finish;
    let summary = state.try_borrow().ok().map(|s| {
        (
            s.broken.clone(),
            settle_usage(s.relay.usage(), s.relay.output_chars(), max_tokens, body_len),
            s.relay.malformed_dropped(),
        )
    });
    let Some((broken, (usage, estimated), malformed)) = summary else {
        return;
    };
    let broken = broken.or_else(|| (!upstream_ended).then(|| "the client disconnected".to_string()));
    let cost = cost_micros(usage, &price);
    let record = &mut journal.record;
    record.outcome = if broken.is_some() {
        Outcome::Broken
    } else {
        Outcome::Answered
    };
    record.usage = Some(usage);
    record.estimated = estimated;
    record.delivered_output = usage.output_tokens;
    record.total_cost_micros = cost;
    record.error_code = broken.as_ref().map(|_| "stream_broken".to_string());
    if let Some(a) = record.attempts.last_mut() {
        a.delivered_output = usage.output_tokens;
        a.cost_micros = cost;
        a.malformed_events = malformed;
        a.message = broken.clone();
    }
    if !in_request() {
        // Polled where the runtime allows no I/O (see `clock::in_request`): settlement cannot be
        // written from here. The hold stays open and the cron sweep releases it at expiry —
        // nothing is charged twice, this answer is not charged at all.
        worker::console_error!(
            "{{\"event\":\"relay_lost_context\",\"generation_id\":{:?},\"charge_micros\":{cost}}}",
            journal.record.id
        );
        return;
    }
    journal.finish(env).await;
}
