//! After commit (SPEC §7): relays the committed stream to the client from `ctx.wait_until`, so
//! the upstream can still be read for the grace window after a client leaves.
//!
//! The client's body is the receiving end of an unbounded channel; a failed send means the client
//! went away. Unbounded on purpose: a sender parked on a full channel is woken when the runtime
//! drops the body of a client that left, and that wake comes from outside any request, where the
//! relay could neither read, time nor settle. What is buffered is bounded by the stream itself
//! (one model answer, `stream_cap_ms`). The relay ends
//! the client's stream with the dialect's error frame on a cut, an upstream error event, an idle
//! longer than `idle_timeout_ms` or a stream longer than `stream_cap_ms`; then the generation is
//! finalised with the delivered usage (the upstream's count, else an estimate) and written.

use futures_channel::mpsc;
use futures_util::StreamExt;
use switchyard_core::catalog::{Policy, Price};
use switchyard_core::classify::FailureClass;
use switchyard_core::generation::{cost_micros, settle_usage, Outcome};
use switchyard_core::relay::{Relay, Step};
use switchyard_core::sse::SseEvent;
use switchyard_core::ApiError;
use worker::{Context, Env, Headers, Response, ResponseBuilder};

use crate::clock::{in_request, now_ms};
use crate::proxy::{within, Journal, Live};

/// What the relay needs to finish the generation record.
pub struct Finish {
    pub journal: Journal,
    pub env: Env,
    pub price: Price,
    pub max_tokens: u64,
    pub body_len: usize,
    pub policy: Policy,
}

type Chunk = Result<Vec<u8>, worker::Error>;

/// Starts relaying `live` and returns the client's response.
pub fn relay(ctx: &Context, live: Live, finish: Finish, headers: Headers) -> Result<Response, ApiError> {
    let (tx, rx) = mpsc::unbounded::<Chunk>();
    match ResponseBuilder::new()
        .with_status(200)
        .with_headers(headers)
        .from_stream(rx)
    {
        Ok(response) => {
            ctx.wait_until(pump(tx, live, finish));
            Ok(response)
        }
        Err(_) => {
            // Nothing reached the client: abort the upstream and release the hold uncharged.
            live.controller.abort();
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

/// The client side of the relay: remembers when the client went away.
struct Client {
    tx: mpsc::UnboundedSender<Chunk>,
    gone_at: Option<u64>,
}

impl Client {
    fn send(&mut self, bytes: Vec<u8>) {
        if self.gone_at.is_some() || bytes.is_empty() {
            return;
        }
        if self.tx.unbounded_send(Ok(bytes)).is_err() {
            self.gone_at = Some(now_ms());
        }
    }
}

async fn pump(tx: mpsc::UnboundedSender<Chunk>, live: Live, finish: Finish) {
    let Live {
        mut body,
        mut parser,
        mut relay,
        pending,
        head,
        controller,
        ..
    } = live;
    let Finish {
        mut journal,
        env,
        price,
        max_tokens,
        body_len,
        policy,
    } = finish;
    let cap_at = now_ms().saturating_add(policy.stream_cap_ms);
    let mut client = Client { tx, gone_at: None };
    let mut events = pending;
    let mut broken: Option<String> = None;
    let mut upstream_ended = false;
    // What one upstream read produced goes to the client as one chunk: each chunk crossing from
    // Wasm to the client costs far more than the bytes in it.
    let mut out = head;

    loop {
        let ended = relay_events(&mut relay, &mut events, &mut out, &mut broken);
        client.send(std::mem::take(&mut out));
        if ended {
            upstream_ended = true;
            break;
        }
        if client.gone_at.is_some() && policy.disconnect_grace_ms == 0 {
            break;
        }
        let now = now_ms();
        let mut wait = policy.idle_timeout_ms.min(cap_at.saturating_sub(now));
        if let Some(gone) = client.gone_at {
            wait = wait.min((gone + policy.disconnect_grace_ms).saturating_sub(now));
        }
        match within(wait.max(1), body.next()).await {
            Some(Some(Ok(bytes))) => parser.push(&bytes, &mut events),
            Some(Some(Err(_))) => {
                let step = relay.on_broken_with(FailureClass::Connect, "The provider's connection broke mid-stream.");
                end_with(&mut client, step, &mut broken);
                upstream_ended = true;
                break;
            }
            Some(None) => {
                // The body ended: a last event without its blank line, then the close.
                events.extend(parser.finish());
                if !relay_events(&mut relay, &mut events, &mut out, &mut broken) {
                    if let Step::End { bytes, broken: why } = relay.on_close() {
                        out.extend_from_slice(&bytes);
                        broken = why;
                    }
                }
                client.send(std::mem::take(&mut out));
                upstream_ended = true;
                break;
            }
            None => {
                let now = now_ms();
                if client
                    .gone_at
                    .is_some_and(|gone| now >= gone + policy.disconnect_grace_ms)
                {
                    break; // the client left and the upstream did not finish within the grace window
                }
                let reason = if now >= cap_at {
                    "The stream exceeded the maximum duration."
                } else {
                    "The provider stopped sending data."
                };
                let step = relay.on_broken_with(FailureClass::Timeout, reason);
                end_with(&mut client, step, &mut broken);
                break;
            }
        }
    }
    if !upstream_ended {
        controller.abort();
        if broken.is_none() {
            broken = Some("the client disconnected".into());
        }
    }
    drop(client);

    let (usage, estimated) = settle_usage(relay.usage(), relay.output_chars(), max_tokens, body_len);
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
        a.malformed_events = relay.malformed_dropped();
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

/// Runs parsed events through the relay, appending what goes to the client to `out`. True when
/// the stream is over (the rest of `events` is dropped).
fn relay_events(relay: &mut Relay, events: &mut Vec<SseEvent>, out: &mut Vec<u8>, broken: &mut Option<String>) -> bool {
    for ev in events.drain(..) {
        match relay.on_event(ev) {
            Step::Send(bytes) => out.extend_from_slice(&bytes),
            Step::End { bytes, broken: why } => {
                out.extend_from_slice(&bytes);
                *broken = why;
                return true;
            }
            Step::Hold | Step::Skip | Step::Commit(_) | Step::Fail(_) => {}
        }
    }
    false
}

fn end_with(client: &mut Client, step: Step, broken: &mut Option<String>) {
    if let Step::End { bytes, broken: why } = step {
        client.send(bytes);
        *broken = why;
    }
}
