//! The HTTP server: accept loop (one thread per connection), the keep-alive
//! request loop, control endpoints (`/_health`, `/_reset`, `/_stats/<key>`, `/_vertex/mints`),
//! Vertex's token endpoint (`/token`) and carrying out a scenario on the socket (delays,
//! streams, cuts, hangs, resets).
//!
//! A provider request goes: counted, scenario parsed, the host's admission (Azure's URL and key,
//! Bedrock's signature, Vertex's token), `reject-field`, validation in its dialect as its host takes it (unless
//! `lenient`), the gate (`flaky`, `down-for`), then the behaviour. Errors take the host's shape.
//!
//! A broken client socket only ends that connection's thread: every write
//! error is turned into closing the connection.

use std::io::{self, BufReader, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::answer;
use crate::azure;
use crate::bedrock;
use crate::converse;
use crate::dialect::{self, ErrSpec, ReqInfo, Step, KEEPALIVE};
use crate::http::{self, JsonReply, ReadError, Request};
use crate::json::Obj;
use crate::scenario::{self, Api, Behavior, Gate, Host, Route, Scenario};
use crate::sock;
use crate::state::Shared;
use crate::validate;
use crate::vertex;

/// Longest a `hang` connection is kept open.
pub const HANG_MAX: Duration = Duration::from_secs(600);
/// Interval of keep-alive comments while waiting for first content.
pub const KEEPALIVE_EVERY: Duration = Duration::from_millis(200);

/// What to do with the connection after a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    KeepAlive,
    Close,
}

fn after_write(r: io::Result<()>) -> Action {
    match r {
        Ok(()) => Action::KeepAlive,
        Err(_) => Action::Close,
    }
}

/// Binds 127.0.0.1:`port` (0 = any free port).
pub fn bind(port: u16) -> io::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port))
}

/// Serves connections forever, one thread each.
pub fn serve(listener: TcpListener, state: Shared) {
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                let st = state.clone();
                let spawned = thread::Builder::new()
                    .name("mock-conn".into())
                    .spawn(move || handle_connection(stream, st));
                if let Err(e) = spawned {
                    eprintln!("mock-upstream: cannot spawn connection thread: {e}");
                }
            }
            Err(e) => {
                eprintln!("mock-upstream: accept failed: {e}");
                thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// Binds `port` and serves in a background thread (for in-process tests), the secrets from the
/// environment. Returns the bound address and the state.
pub fn spawn(port: u16) -> io::Result<(SocketAddr, Shared)> {
    spawn_with(port, Shared::new())
}

/// [`spawn`] with a state of the caller's (other secrets).
pub fn spawn_with(port: u16, state: Shared) -> io::Result<(SocketAddr, Shared)> {
    let listener = bind(port)?;
    let addr = listener.local_addr()?;
    let st = state.clone();
    thread::Builder::new()
        .name("mock-accept".into())
        .spawn(move || serve(listener, st))?;
    Ok((addr, state))
}

/// One connection: read requests until the peer closes, asks to close, or a
/// scenario ends the connection.
fn handle_connection(stream: TcpStream, state: Shared) {
    let _ = stream.set_nodelay(true);
    let read_half = match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    };
    let mut reader = BufReader::new(read_half);
    let mut w = stream;
    loop {
        let req = match http::read_request(&mut reader) {
            Ok(Some(r)) => r,
            Ok(None) | Err(ReadError::Io(_)) => return,
            Err(ReadError::Bad(msg)) => {
                let body = Obj::new()
                    .obj(
                        "error",
                        Obj::new()
                            .str("message", &format!("mock-upstream: bad request: {msg}"))
                            .str("type", "invalid_request_error"),
                    )
                    .build();
                let _ = http::write_full(&mut w, 400, "application/json", &[], body.as_bytes(), true);
                return;
            }
        };
        let close = req.wants_close();
        let action = dispatch(&req, &mut w, &mut reader, &state, close);
        if close || action == Action::Close {
            return;
        }
    }
}

/// Writes a decided JSON answer.
fn reply(w: &mut TcpStream, r: &JsonReply, close: bool) -> Action {
    json(w, r.status, &r.body, &r.headers, close)
}

fn json(w: &mut TcpStream, status: u16, body: &str, extra: &[(&str, String)], close: bool) -> Action {
    after_write(http::write_full(
        w,
        status,
        "application/json",
        extra,
        body.as_bytes(),
        close,
    ))
}

fn simple_error(ty: &str, msg: &str) -> String {
    Obj::new()
        .obj(
            "error",
            Obj::new()
                .str("message", msg)
                .str("type", ty)
                .null("param")
                .str("code", ty),
        )
        .build()
}

fn dispatch(
    req: &Request,
    w: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    state: &Shared,
    close: bool,
) -> Action {
    let path = req.path().to_string();
    let method = req.method.as_str();
    if path == "/_health" {
        return after_write(http::write_full(w, 200, "text/plain", &[], b"ok", close));
    }
    if path == "/_reset" {
        if method != "POST" {
            return json(
                w,
                405,
                &simple_error("method_not_allowed", "use POST /_reset"),
                &[],
                close,
            );
        }
        state.reset();
        return json(w, 200, r#"{"ok":true}"#, &[], close);
    }
    if path == vertex::TOKEN_PATH {
        let r = vertex::token_endpoint(req, state.secrets.vertex_key.as_ref(), &state.vertex_tokens);
        return reply(w, &r, close);
    }
    if path == "/_vertex/mints" {
        return json(w, 200, &state.vertex_tokens.mints_json(), &[], close);
    }
    if path == "/_stats" || path.starts_with("/_stats/") {
        if method != "GET" {
            return json(
                w,
                405,
                &simple_error("method_not_allowed", "use GET /_stats/<key>"),
                &[],
                close,
            );
        }
        let key = scenario::normalize_key(path.strip_prefix("/_stats").unwrap_or(""));
        return json(w, 200, &state.stats_json(&key), &[], close);
    }
    match scenario::route(&path) {
        Some(route) => {
            let action = run_scenario(req, &route, w, reader, state, close);
            state.done(&route.key);
            action
        }
        None => {
            let msg = format!("mock-upstream: no route for {method} {path}");
            json(w, 404, &simple_error("not_found", &msg), &[], close)
        }
    }
}

fn sleep_ms(ms: u64) {
    if ms > 0 {
        thread::sleep(Duration::from_millis(ms));
    }
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        thread::sleep(t - now);
    }
}

/// An error answer with `status` in the shape of the route's host (and dialect).
fn error_reply(route: &Route, status: u16, e: &ErrSpec, kind: Option<scenario::ErrorKind>) -> JsonReply {
    match route.host {
        Host::Bedrock { .. } => bedrock::error_reply(status, &e.an_message),
        Host::Vertex { ref model, .. } => vertex::error_reply(route.api, status, e, model),
        // Azure's content filter answers in its own shape, every other error in OpenAI's.
        Host::Azure { .. } if kind == Some(scenario::ErrorKind::ContentFilter) => {
            JsonReply::new(status, azure::content_filter_error())
        }
        Host::Azure { .. } | Host::Direct => JsonReply::new(status, dialect::error_body(route.api, e)),
    }
}

/// Answers with an HTTP error status in the route's shape.
fn error_status(w: &mut TcpStream, route: &Route, status: u16, sc: &Scenario, info: &ReqInfo, close: bool) -> Action {
    let mut e = dialect::status_error(sc.error_kind, status, &info.model_name);
    if let Some(message) = &sc.message {
        e.message.clone_from(message);
        e.an_message.clone_from(message);
    }
    let mut r = error_reply(route, status, &e, sc.error_kind);
    r.body = padded(r.body, sc);
    if let Some(s) = sc.retry_after {
        r = r.header("retry-after", s.to_string());
    }
    reply(w, &r, close)
}

/// The host's admission: Azure's URL rules and key, Bedrock's signature, Vertex's token.
fn admit(req: &Request, host: &Host, state: &Shared) -> Result<(), JsonReply> {
    match host {
        Host::Direct => Ok(()),
        Host::Azure { deployment } => azure::admit(req, deployment.as_deref(), &state.secrets.azure_key),
        Host::Bedrock { .. } => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
            bedrock::authenticate(req, state.secrets.aws_for(req), now)
        }
        Host::Vertex { .. } => vertex::admit(req, host, &state.vertex_tokens),
    }
}

/// The conversation a Responses body continues (`conversation`: an id, or `{"id": …}`), if any.
fn unknown_conversation(api: Api, body: &Value) -> Option<String> {
    let c = body.get("conversation").filter(|_| api == Api::Responses)?;
    c.as_str()
        .or_else(|| c.get("id").and_then(Value::as_str))
        .map(str::to_string)
}

/// `body` (a JSON object) with `pad/N`'s N bytes of padding in an extra field.
fn padded(body: String, sc: &Scenario) -> String {
    match (sc.pad, body.strip_suffix('}')) {
        (Some(n), Some(open)) => format!("{open},\"padding\":\"{}\"}}", "x".repeat(n)),
        _ => body,
    }
}

/// Whether the scenario's gate answers this request (the key's `count`-th, its first seen at
/// `first_seen`) with a 503.
fn gated(sc: &Scenario, count: u64, first_seen: Instant) -> bool {
    match sc.gate {
        Some(Gate::Flaky(k)) => count.is_multiple_of(k),
        Some(Gate::DownFor(ms)) => first_seen.elapsed() < Duration::from_millis(ms),
        Some(Gate::FlakyUntil(k, ms)) => count.is_multiple_of(k) && first_seen.elapsed() < Duration::from_millis(ms),
        Some(Gate::DownFirst(n)) => count <= n,
        None => false,
    }
}

/// The behaviours that answer nothing: a hang until the client gives up, or a reset.
fn cut_off(behavior: Behavior, w: &mut TcpStream, reader: &mut BufReader<TcpStream>) -> Option<Action> {
    match behavior {
        Behavior::Hang => hang(reader),
        Behavior::Reset => {
            sock::reset_on_close(w);
        }
        _ => return None,
    }
    Some(Action::Close)
}

/// A count request ([`crate::count`]): the scenario's failures (gates, an error status, a hang,
/// a reset) as for any request, else the count — or the provider's 400 for a body it refuses.
/// `seen`: how many requests the scenario's key has had, and when its first came.
fn count_scenario(
    req: &Request,
    route: &Route,
    w: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    sc: &Scenario,
    (count, first_seen): (u64, Instant),
    close: bool,
) -> Action {
    let info = ReqInfo::from_body(&req.body);
    if gated(sc, count, first_seen) {
        return error_status(w, route, 503, sc, &info, close);
    }
    sleep_ms(sc.first_content_after_ms.unwrap_or(0));
    if let Some(action) = cut_off(sc.behavior, w, reader) {
        return action;
    }
    match sc.behavior {
        Behavior::Status(code) => error_status(w, route, code, sc, &info, close),
        _ => reply(w, &crate::count::reply(route, &req.body), close),
    }
}

fn run_scenario(
    req: &Request,
    route: &Route,
    w: &mut TcpStream,
    reader: &mut BufReader<TcpStream>,
    state: &Shared,
    close: bool,
) -> Action {
    let (api, key) = (route.api, route.key.as_str());
    let seen = state.record(key, req);
    let (count, first_seen) = seen;
    let sc = match scenario::parse_scenario(key) {
        Ok(sc) => sc,
        Err(e) => {
            let body = simple_error("mock_bad_scenario", &e.to_string());
            return json(w, 400, &body, &[], close);
        }
    };
    if let Err(refusal) = admit(req, &route.host, state) {
        return reply(w, &refusal, close);
    }
    if route.count {
        return count_scenario(req, route, w, reader, &sc, seen, close);
    }
    // One parse of the body serves every step below.
    let body = serde_json::from_slice::<Value>(&req.body);
    let converse = matches!(route.host, Host::Bedrock { converse: true, .. });
    // A Converse body is answered as the Messages body it stands for.
    let view = converse.then(|| converse::messages_view(body.as_ref().unwrap_or(&Value::Null)));
    let value = view.as_ref().or(body.as_ref().ok()).unwrap_or(&Value::Null);
    let mut info = ReqInfo::from_json(value, req.body.len());
    match &route.host {
        Host::Direct => {
            if let Some((model, stream)) = scenario::gemini_call(req.path()).filter(|_| api == Api::Gemini) {
                info = info.model_from_path(&model, stream);
            }
        }
        Host::Azure { deployment } => {
            info.content_filters = api == Api::Chat;
            if let (Some(d), None) = (deployment, value.get("model")) {
                let stream = info.stream;
                info = info.model_from_path(d, stream);
            }
        }
        Host::Bedrock { model, stream, .. } => info = info.model_from_path(model, *stream),
        Host::Vertex { model, method, .. } => info = info.model_from_path(model, vertex::streams(method)),
    }
    info.cache = sc.cache.unwrap_or_default();

    if let Some((field, code)) = &sc.reject_field {
        if value.get(field).is_some() {
            // OpenAI's words for an argument it does not know (400), or an error only this
            // content triggers (5xx): both echo the client's own field name.
            let (ty, msg) = if *code < 500 {
                (
                    "invalid_request_error",
                    format!("Unrecognized request argument supplied: {field}"),
                )
            } else {
                (
                    "server_error",
                    format!("The server had an error processing field {field}"),
                )
            };
            let r = match route.host {
                Host::Bedrock { .. } => bedrock::error_reply(*code, &msg),
                _ => JsonReply::new(*code, simple_error(ty, &msg)),
            };
            return reply(w, &r, close);
        }
    }
    if !sc.lenient && converse {
        if let Err(message) = converse::check(&body) {
            let mut r = bedrock::error_reply(400, &message);
            r.body = padded(r.body, &sc);
            return reply(w, &r, close);
        }
    } else if !sc.lenient {
        if let Err(problem) = validate::check_on(api, &route.host, &body) {
            let mut r = match route.host {
                Host::Bedrock { .. } => bedrock::validation_reply(&problem),
                _ => error_reply(route, 400, &validate::error(api, &problem), None),
            };
            r.body = padded(r.body, &sc);
            return reply(w, &r, close);
        }
    }
    if let Some(id) = unknown_conversation(api, value).filter(|_| !sc.lenient) {
        // The mock keeps no conversations: every id names one this project does not have, and
        // OpenAI answers that with a 404 naming it.
        let message = format!("Conversation with id '{id}' not found.");
        let e = ErrSpec {
            oa_type: Some("invalid_request_error".into()),
            an_message: message.clone(),
            message,
            ..dialect::status_error(None, 404, &info.model_name)
        };
        return reply(w, &error_reply(route, 404, &e, None), close);
    }
    info.answer = answer::decide(api, value, &sc);
    info.searches = answer::web_searches(api, value, &sc, &info.answer);

    if gated(&sc, count, first_seen) {
        return error_status(w, route, 503, &sc, &info, close);
    }
    if let Some(action) = cut_off(sc.behavior, w, reader) {
        return action;
    }

    match sc.behavior {
        Behavior::Status(code) => {
            sleep_ms(sc.first_content_after_ms.unwrap_or(0));
            error_status(w, route, code, &sc, &info, close)
        }
        Behavior::ErrorBody200 | Behavior::ErrorEventFirst | Behavior::ErrorEventAfter(_)
            if sc.behavior == Behavior::ErrorBody200 || !info.stream =>
        {
            let e = dialect::event_error(sc.error_kind, &info.model_name);
            json(w, 200, &dialect::error_body(api, &e), &[], close)
        }
        _ if info.stream => {
            let (head, steps) = match route.host {
                Host::Bedrock { converse: true, .. } => (bedrock::stream_headers(), converse::stream_plan(&info, &sc)),
                Host::Bedrock { .. } => (bedrock::stream_headers(), bedrock::stream_plan(&info, &sc)),
                _ => (sse_headers(), dialect::stream_plan(api, &info, &sc)),
            };
            run_stream(w, head, &steps, close, &|| state.wrote_event(key))
        }
        Behavior::CutAfter(_) => {
            sleep_ms(dialect::nonstream_delay_ms(&sc));
            let body = dialect::nonstream_body(api, &info, &sc);
            let _ = write_truncated(w, body.as_bytes());
            let _ = w.shutdown(Shutdown::Both);
            Action::Close
        }
        _ => {
            sleep_ms(dialect::nonstream_delay_ms(&sc));
            let body = if sc.malformed_event.is_some() {
                dialect::malformed_nonstream_body(api, &info, &sc)
            } else {
                dialect::nonstream_body(api, &info, &sc)
            };
            let body = if converse {
                converse::body(&body, &info, &sc)
            } else {
                body
            };
            let body = padded(body, &sc);
            match sc.answer_status {
                // An odd success: another 2xx status, and a content type that is not JSON's.
                Some(status) => {
                    // 204 and 205 carry no body by HTTP's rules (the connection stays usable).
                    let body = if matches!(status, 204 | 205) { "" } else { body.as_str() };
                    after_write(http::write_full(w, status, "text/plain", &[], body.as_bytes(), close))
                }
                None => {
                    let extra = match route.host {
                        // Converse says its usage in the body.
                        Host::Bedrock { converse: true, .. } => Vec::new(),
                        Host::Bedrock { .. } => bedrock::invoke_headers(&info, &sc),
                        _ => Vec::new(),
                    };
                    json(w, 200, &body, &extra, close)
                }
            }
        }
    }
}

/// Sends headers announcing the whole body but only its first half.
fn write_truncated(w: &mut TcpStream, body: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let headers = [
        ("Content-Type", "application/json".to_string()),
        ("Content-Length", body.len().max(1).to_string()),
    ];
    let mut out = Vec::new();
    http::write_head(&mut out, 200, &headers, true)?;
    out.extend_from_slice(&body[..body.len() / 2]);
    w.write_all(&out)?;
    w.flush()
}

/// The head of an SSE stream.
fn sse_headers() -> Vec<(&'static str, String)> {
    vec![
        ("Content-Type", "text/event-stream".to_string()),
        ("Cache-Control", "no-cache".to_string()),
    ]
}

/// Writes a stream plan as a chunked body under `headers` (its content type among them); `wrote`
/// is called after each event or frame is written (the key's `stream_events` count, which shows
/// how far a reader has let it get).
fn run_stream(
    w: &mut TcpStream,
    mut headers: Vec<(&'static str, String)>,
    steps: &[Step],
    close: bool,
    wrote: &dyn Fn(),
) -> Action {
    headers.push(("Transfer-Encoding", "chunked".to_string()));
    let head = http::write_head(w, 200, &headers, close).and_then(|_| {
        use std::io::Write;
        w.flush()
    });
    if head.is_err() {
        return Action::Close;
    }
    for step in steps {
        let r = match step {
            Step::Event(text) => http::write_chunk(w, text.as_bytes()).map(|()| wrote()),
            Step::Frame(bytes) => http::write_chunk(w, bytes).map(|()| wrote()),
            Step::Wait { ms, keepalive: false } => {
                sleep_ms(*ms);
                Ok(())
            }
            Step::Wait { ms, keepalive: true } => wait_with_keepalive(w, *ms),
            Step::Cut => {
                let _ = w.shutdown(Shutdown::Both);
                return Action::Close;
            }
        };
        if r.is_err() {
            return Action::Close;
        }
    }
    after_write(http::write_last_chunk(w))
}

/// Waits `ms`, sending a keep-alive comment every 200 ms meanwhile.
fn wait_with_keepalive(w: &mut TcpStream, ms: u64) -> io::Result<()> {
    let start = Instant::now();
    let total = Duration::from_millis(ms);
    let mut next = KEEPALIVE_EVERY;
    while next < total {
        sleep_until(start + next);
        http::write_chunk(w, KEEPALIVE.as_bytes())?;
        next += KEEPALIVE_EVERY;
    }
    sleep_until(start + total);
    Ok(())
}

/// Writes nothing; returns when the peer closes (or after [`HANG_MAX`]).
fn hang(reader: &mut BufReader<TcpStream>) {
    let _ = reader.get_ref().set_read_timeout(Some(Duration::from_millis(200)));
    let deadline = Instant::now() + HANG_MAX;
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(_) => return,
        }
    }
}
