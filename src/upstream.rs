//! One attempt's I/O (SPEC §4–§6): build the upstream request with the route's model and the
//! provider's key, fetch it, and read until the first content (a stream) or the whole body — all
//! within the attempt's one first-content deadline. The upstream is aborted on any failure. What
//! the bytes mean is the core's (`classify`, the dialect's `inspect_body`, the stream [`Gate`]);
//! every failure message passes through the attempt's one [`Redactor`] on its way out, so the
//! upstream key (or a Vertex access token, `crate::vertex`), and any key-like token an upstream
//! wrote, never leaves this module except to the upstream.

use std::future::Future;
use std::pin::{pin, Pin};

use futures_util::future::{select, Either};
use js_sys::Uint8Array;
use switchyard_core::api::Api;
use switchyard_core::classify::{classify_error_payload, is_error_payload, FailureClass, Verdict};
use switchyard_core::count;
use switchyard_core::providers;
use switchyard_core::providers::{CountCall, Provider};

use switchyard_core::dialects::neutral::answer::{self, AnswerContext, StreamTranslator};
use switchyard_core::dialects::ClientEvent;
use switchyard_core::dialects::StreamDialect;
use switchyard_core::dialects::{self, ClientRequest, Reported};
use switchyard_core::echo::Asked;
use switchyard_core::providers::bedrock::sigv4;
use switchyard_core::redact::Redactor;
use switchyard_core::relay::{Before, Framing, Gate, Incoming, Relay};
use switchyard_core::wire::{self, Outgoing};
use switchyard_core::ApiError;
use worker::{Env, Fetch, Headers, Method, Request, RequestInit, Response};

use crate::runtime::abort::{Body, Canceller};
use crate::runtime::apart::apart;
use crate::runtime::clock::{now_ms, sleep};
use crate::vertex;

/// Whom an attempt goes to: the route's provider, and the values of the secrets it names — a
/// key, (Bedrock) an AWS access key the request is signed with, or (Vertex) the service account
/// key its access token is minted from.
pub struct Target<'a> {
    pub provider: &'a Provider,
    /// The value of `key_secret`.
    key: Option<String>,
    /// Every secret it names: (name, value).
    secrets: Vec<(String, String)>,
}

impl<'a> Target<'a> {
    /// The target `provider`, with the secrets its `*_secret` fields name, read from the Worker's
    /// secrets (a missing secret is our configuration error, logged by name only).
    pub fn new(env: &Env, provider: &'a Provider) -> Result<Target<'a>, ApiError> {
        let mut key = None;
        let mut secrets = Vec::new();
        for (field, name) in provider.secrets() {
            let value = env
                .secret(name)
                .map(|s| s.to_string())
                .or_else(|_| env.var(name).map(|v| v.to_string()))
                .map_err(|_| {
                    worker::console_error!(
                        "{{\"event\":\"missing_upstream_secret\",\"provider\":{:?},\"secret\":{:?}}}",
                        provider.id,
                        name
                    );
                    ApiError::Internal {
                        label: "missing_upstream_secret",
                    }
                })?;
            if field == "key_secret" {
                key = Some(value.clone());
            }
            secrets.push((name.to_string(), value));
        }
        Ok(Target { provider, key, secrets })
    }

    /// The value of the secret named `name`.
    fn secret(&self, name: &str) -> Option<String> {
        self.secrets.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone())
    }

    /// What keeps its secrets (and `token`, an access token minted for it) out of any upstream
    /// text that leaves this module.
    fn redactor(&self, token: Option<&str>) -> Redactor {
        Redactor::new(self.secrets.iter().map(|(_, v)| v.as_str()).chain(token))
    }
}

/// A committed stream, ready to relay: the body being read, what the gate saw, and what it held.
pub struct Live {
    pub body: Body,
    /// The upstream's events as the client's (translated when the route speaks another dialect).
    pub incoming: Incoming,
    pub relay: Relay,
    /// Events read in the chunk that committed, after the committing one.
    pub pending: Vec<ClientEvent>,
    /// Everything held back before commit, the committing event last.
    pub head: Vec<u8>,
    pub controller: Canceller,
    pub content_type: String,
}

/// What a committed attempt produced.
pub enum Committed {
    Body {
        bytes: Vec<u8>,
        status: u16,
        usage: Reported,
        output_chars: usize,
        /// The upstream's id of the answer (Responses, sent as it is), to remember which route
        /// holds it.
        response_id: Option<String>,
    },
    /// Boxed: a live stream's relay is large beside a whole body.
    Stream(Box<Live>),
}

impl Committed {
    pub fn http_status(&self) -> u16 {
        match self {
            Committed::Body { status, .. } => *status,
            Committed::Stream(_) => 200,
        }
    }
}

/// An attempt that did not commit.
pub struct Failed {
    pub verdict: Verdict,
    pub http_status: Option<u16>,
}

/// The largest whole answer read from an upstream (SPEC §15): past it, `bad_response`.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// How much of an error body is read to classify it.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// A response's body up to `cap` bytes, and whether that was all of it (no body: empty, whole).
async fn read_up_to(response: &mut Response, cap: usize) -> Result<(Vec<u8>, bool), ()> {
    match response.body() {
        worker::ResponseBody::Stream(stream) => match Body::new(stream) {
            Some(mut body) => body.read_up_to(cap).await,
            None => Err(()),
        },
        _ => Ok((Vec::new(), true)),
    }
}

/// Why an attempt stopped waiting.
enum Stop {
    /// Its first-content deadline passed.
    Late,
    /// Its client left, and the grace after that ended (SPEC §18).
    Departed,
}

/// One attempt in flight: its deadline (or its client's departure), its abort handle, the key
/// to redact, and the request its failure is judged against.
struct Attempt<'t, 'd, 'r> {
    target: &'t Target<'t>,
    /// The request sent: an upstream's words that repeat it are the client's (SPEC §18a).
    asked: Asked<'r>,
    deadline: Pin<&'d mut (dyn Future<Output = Stop> + 'd)>,
    controller: Canceller,
    status: Option<u16>,
    /// The access token sent (Vertex), as secret as the key.
    token: Option<String>,
}

impl<'t, 'd, 'r> Attempt<'t, 'd, 'r> {
    /// An attempt for `request` on `target`, ending at `deadline`.
    fn new(
        target: &'t Target<'t>,
        request: &'r ClientRequest,
        deadline: Pin<&'d mut (dyn Future<Output = Stop> + 'd)>,
    ) -> Self {
        Attempt {
            target,
            asked: Asked::of(request),
            deadline,
            controller: Canceller::new(),
            status: None,
            token: None,
        }
    }

    /// The whole body of `response` within the deadline, if it is at most `cap` bytes (else
    /// `bad_response`, `too_large`); `late` and `broken` say why it was not read.
    async fn whole_body(
        &mut self,
        response: &mut Response,
        cap: usize,
        late: &str,
        broken: &str,
        too_large: &str,
    ) -> Result<Vec<u8>, Failed> {
        let (body, whole) = self
            .within(read_up_to(response, cap), late, (FailureClass::Connect, broken))
            .await?;
        if !whole {
            self.controller.abort();
            return Err(self.failure(FailureClass::BadResponse, too_large));
        }
        Ok(body)
    }

    /// A failure of this attempt — every one passes here: judged against the request sent (an
    /// echo of it blames no route or account), its message free of the upstream's secrets and of
    /// any key-like token.
    fn fail(&self, verdict: Verdict) -> Failed {
        let verdict = verdict.against(&self.asked, self.status);
        Failed {
            verdict: Verdict {
                message: verdict
                    .message
                    .map(|m| self.target.redactor(self.token.as_deref()).text(&m)),
                ..verdict
            },
            http_status: self.status,
        }
    }

    fn failure(&self, class: FailureClass, message: &str) -> Failed {
        self.fail(Verdict::new(class, message))
    }

    /// `fut` within the attempt's deadline: past it, the upstream is aborted and the attempt
    /// failed as `timeout` with `late`; an error fails it as `broken`.
    async fn within<T, E>(
        &mut self,
        fut: impl Future<Output = Result<T, E>>,
        late: &str,
        broken: (FailureClass, &str),
    ) -> Result<T, Failed> {
        match select(pin!(fut), self.deadline.as_mut()).await {
            Either::Left((Ok(v), _)) => Ok(v),
            Either::Left((Err(_), _)) => {
                self.controller.abort();
                Err(self.failure(broken.0, broken.1))
            }
            Either::Right((Stop::Late, _)) => {
                self.controller.abort();
                Err(self.failure(FailureClass::Timeout, late))
            }
            Either::Right((Stop::Departed, _)) => {
                self.controller.abort();
                Err(self.failure(FailureClass::Cancelled, "the client left"))
            }
        }
    }
}

/// The upstream request; `token`: the access token a Vertex request carries instead of its key.
fn build_request(
    target: &Target,
    request: &ClientRequest,
    outgoing: &Outgoing,
    token: Option<&str>,
) -> Result<Request, ApiError> {
    let kind = providers::of(target.provider.kind());
    // Bedrock's `accept` is the answer body's type; the stream's framing is its own.
    let accept = if request.stream && kind.streams_sse() {
        "text/event-stream"
    } else {
        "application/json"
    };
    let mut list: Vec<(&str, String)> = vec![("content-type", "application/json".into()), ("accept", accept.into())];
    if let Some(key) = token.or(target.key.as_deref()) {
        list.extend(wire::key_headers(target.provider, key));
    }
    if kind.takes_anthropic_headers() {
        list.extend(request.anthropic_headers());
    }
    list.extend(outgoing.headers.iter().cloned());
    // A signing kind (Bedrock) signs last, over exactly the headers and the body sent (SPEC §20).
    let unsigned: Vec<(&str, &str)> = list.iter().map(|(n, v)| (*n, v.as_str())).collect();
    let to_sign = sigv4::Request {
        method: "POST",
        url: &outgoing.url,
        headers: &unsigned,
        body: &outgoing.body,
    };
    let signed = kind
        .sign(target.provider, &|name| target.secret(name), &to_sign, now_ms())
        .map_err(|_| ApiError::Internal { label: "sigv4" })?;
    let headers = Headers::new();
    for (name, value) in list
        .iter()
        .map(|(n, v)| (*n, v.as_str()))
        .chain(signed.iter().map(|(n, v)| (n.as_str(), v.as_str())))
    {
        headers
            .set(name, value)
            .map_err(|_| ApiError::Internal { label: "header" })?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(Uint8Array::from(outgoing.body.as_slice()).into()));
    Request::new_with_init(&outgoing.url, &init).map_err(|_| ApiError::Internal {
        label: "upstream_request",
    })
}

/// What an attempt sends, and — when translated — what the answer is turned back into.
pub struct Wire<'a> {
    pub outgoing: &'a Outgoing,
    /// The dialect the route speaks here.
    pub api: Api,
    /// The client's answer's ids, model and time, for a translated answer.
    pub answer: AnswerContext,
}

/// One attempt: fetch, then read until the first content (stream) or the whole body
/// (non-stream), all within `deadline_ms` — and no longer than `departed` (the client's leaving
/// and its grace): then the upstream is aborted and the attempt is `cancelled`.
pub async fn attempt(
    target: &Target<'_>,
    request: &ClientRequest,
    wire: &Wire<'_>,
    deadline_ms: u64,
    departed: impl Future<Output = ()>,
) -> Result<Committed, Failed> {
    let stop = async {
        match select(pin!(sleep(deadline_ms)), pin!(departed)).await {
            Either::Left(_) => Stop::Late,
            Either::Right(_) => Stop::Departed,
        }
    };
    let deadline: Pin<&mut dyn Future<Output = Stop>> = pin!(stop);
    let mut a = Attempt::new(target, request, deadline);
    let mut response = open(&mut a, request, wire.outgoing).await?;
    let status = response.status_code();
    let content_type = response
        .headers()
        .get("content-type")
        .ok()
        .flatten()
        .unwrap_or_default();
    let framing = Framing::of(&content_type, wire.api);
    if let (true, Some(framing)) = (request.stream, framing) {
        // The client gets server-sent events, whatever framing the route used.
        let content_type = match framing {
            Framing::Sse => content_type,
            Framing::BedrockEventStream | Framing::ConverseEventStream => "text/event-stream".to_string(),
        };
        return until_content(a, response, request, wire, framing, content_type).await;
    }

    // Non-stream, or a stream request answered with a plain body (often an error object).
    let body = a
        .whole_body(
            &mut response,
            MAX_ANSWER_BYTES,
            "the response body did not complete within the deadline",
            "the connection broke while reading the response",
            "the answer is larger than 16 MiB",
        )
        .await?;
    if request.stream {
        let verdict = match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) if is_error_payload(&v) => classify_error_payload(&v),
            _ => Verdict::bad("a stream was requested but the answer is not an event stream"),
        };
        return Err(a.fail(verdict));
    }
    // What the answer means is read in the route's own dialect (SPEC §19); a translated answer
    // then reaches the client in its own.
    let info = dialects::inspect_body(wire.api, &body, request.stop_sequences).map_err(|v| a.fail(v))?;
    let bytes = match wire.outgoing.translated {
        false => body,
        true => answer::body(wire.api, request.api, &body, &wire.answer).map_err(|v| a.fail(v))?,
    };
    Ok(Committed::Body {
        bytes,
        status,
        usage: info.usage,
        output_chars: info.output_chars,
        response_id: info.id,
    })
}

/// An attempt's request sent: its access token first (Vertex), then the request built and
/// fetched within the deadline. A 2xx answer is returned to be read; any other status is read
/// (the start of its body) and judged by the provider's kind.
async fn open(a: &mut Attempt<'_, '_, '_>, request: &ClientRequest, outgoing: &Outgoing) -> Result<Response, Failed> {
    let target = a.target;
    if let (true, Some(secret)) = (providers::of(target.provider.kind()).mints_token(), &target.key) {
        // Its access token first (cached, or minted within the attempt's deadline).
        let minted = a
            .within(
                async { Ok::<_, ()>(apart(vertex::token(secret)).await) },
                "no Vertex access token within the first-content deadline",
                (FailureClass::Connect, ""),
            )
            .await?;
        a.token = Some(minted.map_err(|verdict| a.fail(verdict))?);
    }
    let upstream = build_request(target, request, outgoing, a.token.as_deref())
        .map_err(|_| a.failure(FailureClass::Connect, "could not build the upstream request"))?;
    let fetch = Fetch::Request(upstream);
    let signal = a.controller.signal();
    let send = async {
        match &signal {
            Some(signal) => fetch.send_with_signal(signal).await,
            None => fetch.send().await,
        }
    };
    let response = a
        .within(
            send,
            "no response within the first-content deadline",
            (FailureClass::Connect, "connection failed or closed before the response"),
        )
        .await?;
    let status = response.status_code();
    a.status = Some(status);
    if !(200..300).contains(&status) {
        return Err(apart(refused(a, response, status)).await);
    }
    Ok(response)
}

/// An upstream's answer with an error status, classified from its headers and the start of its
/// body (read, never relayed). Compiled when an isolate first meets one (`runtime::apart`).
async fn refused(a: &mut Attempt<'_, '_, '_>, mut response: Response, status: u16) -> Failed {
    let retry_after = response.headers().get("retry-after").ok().flatten();
    let body = a
        .within(
            read_up_to(&mut response, MAX_ERROR_BODY_BYTES),
            "",
            (FailureClass::Connect, ""),
        )
        .await
        .map(|(bytes, _)| bytes)
        .unwrap_or_default();
    a.controller.abort();
    let header = |name: &str| response.headers().get(name).ok().flatten();
    let verdict = providers::of(a.target.provider.kind()).error_verdict(status, retry_after.as_deref(), &header, &body);
    a.fail(verdict)
}

/// One count request (SPEC §21): sent as an attempt is, its whole answer read within
/// `deadline_ms`, its count found where `call` says.
pub async fn count(
    target: &Target<'_>,
    request: &ClientRequest,
    call: CountCall,
    deadline_ms: u64,
) -> Result<u64, Failed> {
    let late = async {
        sleep(deadline_ms).await;
        Stop::Late
    };
    let deadline: Pin<&mut dyn Future<Output = Stop>> = pin!(late);
    let mut a = Attempt::new(target, request, deadline);
    let tokens_at = call.tokens_at;
    let outgoing = Outgoing {
        url: call.url,
        body: call.body,
        translated: false,
        dropped: Vec::new(),
        headers: Vec::new(),
    };
    let mut response = open(&mut a, request, &outgoing).await?;
    let body = a
        .whole_body(
            &mut response,
            MAX_ERROR_BODY_BYTES,
            "the count did not complete within the deadline",
            "the connection broke while reading the count",
            "the count answer is too large",
        )
        .await?;
    count::tokens(tokens_at, &body).map_err(|verdict| a.fail(verdict))
}

/// Reads a stream until the gate commits (SPEC §6) or fails it.
async fn until_content(
    mut a: Attempt<'_, '_, '_>,
    response: Response,
    request: &ClientRequest,
    wire: &Wire<'_>,
    framing: Framing,
    content_type: String,
) -> Result<Committed, Failed> {
    let body = match response.body() {
        worker::ResponseBody::Stream(stream) => Body::new(stream),
        _ => None,
    };
    let mut body = body.ok_or_else(|| a.failure(FailureClass::BadResponse, "the response has no body"))?;
    let dialect = StreamDialect::of(request.api);
    let translator = wire
        .outgoing
        .translated
        .then(|| StreamTranslator::new(wire.api, request.api, wire.answer.clone()));
    let mut incoming = Incoming::new(framing, translator);
    let mut gate = Gate::new(
        dialect,
        request.include_usage,
        request.stop_sequences,
        request.completions,
        a.target.redactor(a.token.as_deref()),
    );
    let mut events = Vec::new();
    loop {
        let chunk = a
            .within(
                body.next(),
                "no content within the first-content deadline",
                (
                    FailureClass::BadResponse,
                    "the connection broke before the first content",
                ),
            )
            .await?;
        let ended = match chunk {
            Some(bytes) => {
                incoming.push(&bytes, &mut events);
                false
            }
            None => {
                incoming.close(&mut events);
                true
            }
        };
        if let Some(usage) = incoming.upstream_usage() {
            gate.note_upstream_usage(usage);
        }
        let mut drained = events.drain(..);
        for ev in drained.by_ref() {
            match gate.on_event(ev) {
                Before::Hold => {}
                Before::Commit(head) => {
                    return Ok(Committed::Stream(Box::new(Live {
                        pending: drained.collect(),
                        body,
                        incoming,
                        relay: gate.into_relay(),
                        head,
                        controller: a.controller,
                        content_type,
                    })));
                }
                Before::Fail(verdict) => {
                    a.controller.abort();
                    return Err(a.fail(verdict));
                }
            }
        }
        drop(drained);
        if ended {
            return Err(a.fail(gate.on_close()));
        }
    }
}
