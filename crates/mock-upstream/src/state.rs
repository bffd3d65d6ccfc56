//! Shared per-key state: request counters, the last request seen, and the
//! first-request time used by `down-for`. One map for the whole server,
//! behind a mutex (`POST /_reset` clears it).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::http::Request;

/// A recorded request as reported by `/_stats/<key>`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RecordedRequest {
    pub path: String,
    pub method: String,
    /// Lower-case header names; repeated headers joined with ", ".
    pub headers: Map<String, Value>,
    /// The body parsed as JSON, or null.
    pub body: Value,
}

impl RecordedRequest {
    pub fn from_request(req: &Request) -> RecordedRequest {
        let mut headers = Map::new();
        for (k, v) in &req.headers {
            let joined = match headers.get(k).and_then(|old| old.as_str()) {
                Some(old) => format!("{old}, {v}"),
                None => v.clone(),
            };
            headers.insert(k.clone(), Value::String(joined));
        }
        RecordedRequest {
            path: req.target.clone(),
            method: req.method.clone(),
            headers,
            body: serde_json::from_slice(&req.body).unwrap_or(Value::Null),
        }
    }
}

/// State of one key.
#[derive(Debug, Clone)]
pub struct KeyState {
    pub requests: u64,
    pub first_seen: Instant,
    pub last_request: Option<RecordedRequest>,
    /// Stream events written to the key's readers so far (all its streams).
    pub stream_events: u64,
}

/// The `/_stats/<key>` answer.
#[derive(Debug, Serialize)]
pub struct Stats<'a> {
    pub requests: u64,
    pub last_request: Option<&'a RecordedRequest>,
    pub stream_events: u64,
}

/// The server's shared state.
#[derive(Debug, Clone, Default)]
pub struct Shared(pub Arc<Mutex<HashMap<String, KeyState>>>);

impl Shared {
    pub fn new() -> Shared {
        Shared::default()
    }

    /// Locks the map; a panic in another connection thread must not make
    /// the state unusable, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a request to `key`; returns (this request's 1-based number,
    /// when the key was first seen).
    pub fn record(&self, key: &str, req: &Request) -> (u64, Instant) {
        let recorded = RecordedRequest::from_request(req);
        let mut map = self.lock();
        let st = map.entry(key.to_string()).or_insert_with(|| KeyState {
            requests: 0,
            first_seen: Instant::now(),
            last_request: None,
            stream_events: 0,
        });
        st.requests += 1;
        st.last_request = Some(recorded);
        (st.requests, st.first_seen)
    }

    /// Counts one stream event written for `key`.
    pub fn wrote_event(&self, key: &str) {
        if let Some(st) = self.lock().get_mut(key) {
            st.stream_events += 1;
        }
    }

    /// The stats JSON for a key.
    pub fn stats_json(&self, key: &str) -> String {
        let map = self.lock();
        let st = map.get(key);
        let stats = Stats {
            requests: st.map(|s| s.requests).unwrap_or(0),
            last_request: st.and_then(|s| s.last_request.as_ref()),
            stream_events: st.map(|s| s.stream_events).unwrap_or(0),
        };
        serde_json::to_string(&stats).unwrap_or_else(|_| String::from("{}"))
    }

    /// Forgets every key.
    pub fn reset(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req() -> Request {
        Request {
            method: "POST".into(),
            target: "/k/chat/completions".into(),
            version: "HTTP/1.1".into(),
            headers: vec![("x-a".into(), "1".into()), ("x-a".into(), "2".into())],
            body: br#"{"model":"m"}"#.to_vec(),
        }
    }

    #[test]
    fn record_and_reset() {
        let s = Shared::new();
        assert_eq!(
            s.stats_json("k"),
            r#"{"requests":0,"last_request":null,"stream_events":0}"#
        );
        assert_eq!(s.record("k", &req()).0, 1);
        assert_eq!(s.record("k", &req()).0, 2);
        let v: Value = serde_json::from_str(&s.stats_json("k")).unwrap();
        assert_eq!(v["requests"], 2);
        s.wrote_event("k");
        s.wrote_event("k");
        let v: Value = serde_json::from_str(&s.stats_json("k")).unwrap();
        assert_eq!(v["stream_events"], 2);
        assert_eq!(v["last_request"]["headers"]["x-a"], "1, 2");
        assert_eq!(v["last_request"]["body"]["model"], "m");
        s.reset();
        assert_eq!(
            s.stats_json("k"),
            r#"{"requests":0,"last_request":null,"stream_events":0}"#
        );
    }
}
