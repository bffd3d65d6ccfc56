//! Calling a Durable Object from a request: one typed JSON call, raced against a deadline. Every
//! caller treats the objects as advisory on the request path — health, limits — so a failure is a
//! short reason the caller logs with its fallback, never an error the client sees. Each call is
//! counted (`crate::calls`). And inside an object, its alarm as last set ([`Alarm`]).

use std::cell::Cell;
use std::pin::pin;

use futures_util::future::{select, Either};
use serde::de::DeserializeOwned;
use serde::Serialize;
use worker::{Env, Headers, Method, Request, RequestInit, ScheduledTime, Storage};

use crate::faults::{Faults, ObjectDrill};
use crate::runtime::clock::{in_request, sleep};

/// The header every call carries with the object's own name, so an object knows whom it serves
/// (a model's health object learns its model from it).
pub const OBJECT_NAME: &str = "x-switchyard-object";

/// One call to object `name` of `binding` at `path`, with `body`, at most `timeout_ms`.
/// `drill`: one the object is to play on itself (`crate::faults`, tests only). The error is a
/// word for the log: `no_context`, `error` or `timeout`.
pub async fn call<B: Serialize, T: DeserializeOwned>(
    env: &Env,
    binding: &str,
    name: &str,
    path: &str,
    body: &B,
    timeout_ms: u64,
    drill: Option<ObjectDrill>,
) -> Result<T, &'static str> {
    if !in_request() {
        return Err("no_context"); // no I/O possible here (see `clock::in_request`)
    }
    let Ok(text) = serde_json::to_string(body) else {
        return Err("error");
    };
    crate::calls::object(binding, name, path, &text, Faults::of(env).instruments());
    let call = async {
        let stub = env.durable_object(binding).ok()?.get_by_name(name).ok()?;
        let headers = Headers::new();
        headers.set(OBJECT_NAME, name).ok()?;
        if let Some((header, value)) = ObjectDrill::header(drill) {
            headers.set(header, value).ok()?;
        }
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(headers)
            .with_body(Some(text.into()));
        let req = Request::new_with_init(&format!("https://object{path}"), &init).ok()?;
        let mut resp = stub.fetch_with_request(req).await.ok()?;
        if resp.status_code() != 200 {
            return None;
        }
        resp.json::<T>().await.ok()
    };
    match select(pin!(call), pin!(sleep(timeout_ms))).await {
        Either::Left((Some(v), _)) => Ok(v),
        Either::Left((None, _)) => Err("error"),
        Either::Right(_) => Err("timeout"),
    }
}

/// The (key, text) pairs of a storage listing.
pub fn entries(listed: &js_sys::Map) -> Vec<(String, String)> {
    use wasm_bindgen::JsCast;
    listed
        .entries()
        .into_iter()
        .filter_map(|entry| entry.ok()?.dyn_into::<js_sys::Array>().ok())
        .filter_map(|pair| Some((pair.get(0).as_string()?, pair.get(1).as_string()?)))
        .collect()
}

/// Moves a kept record this code cannot read from `key` to `aside` (never deleted: an operator's
/// to apply), and logs it as `event` with why.
pub async fn keep_aside(
    storage: &Storage,
    event: &str,
    key: &str,
    aside: &str,
    text: String,
    why: &serde_json::Error,
) -> worker::Result<()> {
    worker::console_error!("{{\"event\":{event:?},\"key\":{key:?},\"why\":{:?}}}", why.to_string());
    storage.put(aside, text).await?;
    storage.delete(key).await?;
    Ok(())
}

/// An object's alarm as the object last set it (or loaded it), so that a wish for an alarm moves
/// it only when earlier — one storage write, not one per call.
#[derive(Default)]
pub struct Alarm(Cell<Option<u64>>);

impl Alarm {
    /// What storage says (at load), or `None` once it fired.
    pub fn known(&self, at: Option<u64>) {
        self.0.set(at);
    }

    /// Sets it for `at_ms` (Unix ms).
    pub async fn set(&self, storage: &Storage, at_ms: u64) -> worker::Result<()> {
        let at = ScheduledTime::new(js_sys::Date::new(&wasm_bindgen::JsValue::from_f64(at_ms as f64)));
        storage.set_alarm(at).await?;
        self.0.set(Some(at_ms));
        Ok(())
    }

    /// Sets it for `at_ms` unless it is set no later already.
    pub async fn by(&self, storage: &Storage, at_ms: u64) -> worker::Result<()> {
        match self.0.get() {
            Some(set) if set <= at_ms => Ok(()),
            _ => self.set(storage, at_ms).await,
        }
    }
}
