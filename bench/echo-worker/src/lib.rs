//! The floor for scripts/bench: a worker-rs Worker that does what any proxy must and nothing else.
//!
//! - `GET /_echo`: answers "ok" without a subrequest (the runtime + worker-rs floor).
//! - `POST /<path>`: reads the body, sends it to `UPSTREAM` + `<path>` (one subrequest), and
//!   returns the upstream response as is (workerd pipes the body natively).
//! - `POST /relay/<path>`: the same, but the body is relayed chunk by chunk through Rust
//!   (`ByteStream` → `Response::from_stream`): the cost of touching every chunk in wasm.
//! - `POST /bg/<path>`: the pass-through, plus Switchyard's per-request D1 write pattern (a
//!   2-statement hold batch, then a 6-statement settlement batch) in `ctx.wait_until`.
//! - `POST /fg/<path>`: the same two batches awaited before the subrequest (their latency on the
//!   critical path).
//!
//! The D1 paths need a `DB` binding with `migrations/` applied.

use std::cell::Cell;

use js_sys::Uint8Array;
use wasm_bindgen::JsValue;
use worker::{event, Context, Env, Fetch, Headers, Method, Request, RequestInit, Response, Result};

thread_local! {
    static SEQ: Cell<u64> = const { Cell::new(0) };
}

/// Switchyard's write pattern for one request: hold, then settle.
async fn writes(env: Env) -> Result<()> {
    let db = env.d1("DB")?;
    let now = js_sys::Date::now();
    let seq = SEQ.with(|s| {
        s.set(s.get() + 1);
        s.get()
    });
    let id = JsValue::from_str(&format!("g-{now}-{seq}"));
    let now = JsValue::from_f64(now);
    db.batch(vec![
        db.prepare("UPDATE accounts SET held = held + 100 WHERE id = 'a'"),
        db.prepare("INSERT INTO holds VALUES (?1, 'a', 100, 'open', ?2)")
            .bind(&[id.clone(), now.clone()])?,
    ])
    .await?;
    db.batch(vec![
        db.prepare("UPDATE accounts SET held = held - 100, balance = balance - 10 WHERE id = 'a'"),
        db.prepare("UPDATE keys SET spent = spent + 10 WHERE id = 'k'"),
        db.prepare("INSERT INTO ledger (account_id, amount, generation_id, created_at) VALUES ('a', 10, ?1, ?2)")
            .bind(&[id.clone(), now.clone()])?,
        db.prepare("UPDATE holds SET state = 'settled' WHERE generation_id = ?1")
            .bind(&[id.clone()])?,
        db.prepare("INSERT INTO generations VALUES (?1, 'a', 'm', 'answered', 10, ?2)")
            .bind(&[id.clone(), now])?,
        db.prepare("INSERT INTO attempts VALUES (?1, 1, 'r0', 'answered')")
            .bind(&[id])?,
    ])
    .await?;
    Ok(())
}

#[event(fetch)]
async fn fetch(mut req: Request, env: Env, ctx: Context) -> Result<Response> {
    let path = req.path();
    if path == "/_echo" {
        return Response::ok("ok");
    }
    let upstream = env.var("UPSTREAM")?.to_string();
    let (mode, rest) = ["relay", "bg", "fg"]
        .iter()
        .find_map(|m| path.strip_prefix(&format!("/{m}")).map(|rest| (*m, rest.to_string())))
        .unwrap_or(("pass", path.clone()));
    let body = req.bytes().await?;
    if mode == "fg" {
        writes(env.clone()).await?;
    }
    let headers = Headers::new();
    headers.set("content-type", "application/json")?;
    if let Some(accept) = req.headers().get("accept")? {
        headers.set("accept", &accept)?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(Uint8Array::from(body.as_slice()).into()));
    let upstream_req = Request::new_with_init(&format!("{upstream}{rest}"), &init)?;
    let fetch = Fetch::Request(upstream_req);
    let mut response = fetch.send().await?;
    if mode == "bg" {
        ctx.wait_until(async move {
            if let Err(e) = writes(env).await {
                worker::console_error!("echo: background writes failed: {e}");
            }
        });
    }
    if mode != "relay" {
        return Ok(response);
    }
    let status = response.status_code();
    let out = Headers::new();
    if let Some(ct) = response.headers().get("content-type")? {
        out.set("content-type", &ct)?;
    }
    let stream = response.stream()?;
    Ok(Response::from_stream(stream)?.with_status(status).with_headers(out))
}
