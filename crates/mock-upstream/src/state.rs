//! Shared per-key state: request counters (in all, by prompt, and the most
//! in flight at once), the last request seen, and the first-request time used
//! by `down-for`. One map for the whole server,
//! behind a mutex (`POST /_reset` clears it). Beside it, the [`Secrets`] the cloud fakes accept,
//! read once at start.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::azure;
use crate::http::Request;
use crate::rsa::PublicKey;
use crate::sigv4;
use crate::vertex;

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
    /// Requests by the text of their last user message (first 80 characters; "" for none).
    pub by_prompt: BTreeMap<String, u64>,
    pub in_flight: u64,
    pub max_in_flight: u64,
}

/// The `/_stats/<key>` answer.
#[derive(Debug, Serialize)]
pub struct Stats<'a> {
    pub requests: u64,
    pub last_request: Option<&'a RecordedRequest>,
    pub stream_events: u64,
    pub by_prompt: Option<&'a BTreeMap<String, u64>>,
    pub max_in_flight: u64,
}

/// The text of a request body's last user message (chat, messages) or its `input` string
/// (responses), at most 80 characters.
fn prompt_of(body: &Value) -> String {
    let from_messages = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| {
            m.iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content"))
        .and_then(Value::as_str);
    let text = from_messages.or_else(|| body.get("input").and_then(Value::as_str));
    text.unwrap_or("").chars().take(80).collect()
}

/// The credentials the cloud fakes accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Secrets {
    /// AWS credentials for Bedrock's SigV4 ([`sigv4::Credentials::from_env`]).
    pub aws: sigv4::Credentials,
    /// A temporary AWS credential beside it, with its session token
    /// ([`sigv4::Credentials::temporary_from_env`]).
    pub aws_temporary: Option<sigv4::Credentials>,
    /// Azure's `api-key` ([`azure::key_from_env`]).
    pub azure_key: String,
    /// The Vertex service account's public key ([`vertex::key_from_env`]); none: every JWT is
    /// refused.
    pub vertex_key: Option<PublicKey>,
}

impl Default for Secrets {
    fn default() -> Self {
        Secrets {
            aws: sigv4::Credentials::default(),
            aws_temporary: None,
            azure_key: azure::DEFAULT_API_KEY.to_string(),
            vertex_key: None,
        }
    }
}

impl Secrets {
    /// The AWS credential a request names: the temporary one when its key id is the request's,
    /// else the usual one (which then refuses an unknown key id).
    pub fn aws_for(&self, req: &crate::http::Request) -> &sigv4::Credentials {
        match &self.aws_temporary {
            Some(t) if t.named_by(req) => t,
            _ => &self.aws,
        }
    }

    /// `MOCK_AWS_ACCESS_KEY_ID`, `MOCK_AWS_SECRET_ACCESS_KEY`, `MOCK_AWS_SESSION_TOKEN`, the
    /// temporary credential's `MOCK_AWS_TEMP_*` and `MOCK_AZURE_API_KEY`, each defaulted when
    /// unset, and `MOCK_VERTEX_PUBLIC_KEY_PEM`.
    pub fn from_env() -> Secrets {
        Secrets {
            aws: sigv4::Credentials::from_env(),
            aws_temporary: sigv4::Credentials::temporary_from_env(),
            azure_key: azure::key_from_env(),
            vertex_key: vertex::key_from_env(),
        }
    }
}

/// The server's shared state.
#[derive(Debug, Clone)]
pub struct Shared {
    keys: Arc<Mutex<HashMap<String, KeyState>>>,
    pub secrets: Arc<Secrets>,
    /// The Vertex fake's minted tokens.
    pub vertex_tokens: Arc<vertex::Tokens>,
}

impl Default for Shared {
    /// [`Shared::new`].
    fn default() -> Self {
        Shared::new()
    }
}

impl Shared {
    /// Empty state; the secrets from the environment.
    pub fn new() -> Shared {
        Shared::with_secrets(Secrets::from_env())
    }

    /// Empty state with these secrets.
    pub fn with_secrets(secrets: Secrets) -> Shared {
        Shared {
            keys: Arc::default(),
            secrets: Arc::new(secrets),
            vertex_tokens: Arc::default(),
        }
    }

    /// Locks the map; a panic in another connection thread must not make
    /// the state unusable, so poisoning is ignored.
    fn lock(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a request to `key`; returns (this request's 1-based number,
    /// when the key was first seen).
    /// The request is in flight until [`Shared::done`].
    pub fn record(&self, key: &str, req: &Request) -> (u64, Instant) {
        let recorded = RecordedRequest::from_request(req);
        let mut map = self.lock();
        let st = map.entry(key.to_string()).or_insert_with(|| KeyState {
            requests: 0,
            first_seen: Instant::now(),
            last_request: None,
            stream_events: 0,
            by_prompt: BTreeMap::new(),
            in_flight: 0,
            max_in_flight: 0,
        });
        st.requests += 1;
        *st.by_prompt.entry(prompt_of(&recorded.body)).or_default() += 1;
        st.in_flight += 1;
        st.max_in_flight = st.max_in_flight.max(st.in_flight);
        st.last_request = Some(recorded);
        (st.requests, st.first_seen)
    }

    /// A request [`Shared::record`] counted has been answered (or its connection ended).
    pub fn done(&self, key: &str) {
        if let Some(st) = self.lock().get_mut(key) {
            st.in_flight = st.in_flight.saturating_sub(1);
        }
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
            by_prompt: st.map(|s| &s.by_prompt),
            max_in_flight: st.map(|s| s.max_in_flight).unwrap_or(0),
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
            r#"{"requests":0,"last_request":null,"stream_events":0,"by_prompt":null,"max_in_flight":0}"#
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
            r#"{"requests":0,"last_request":null,"stream_events":0,"by_prompt":null,"max_in_flight":0}"#
        );
    }

    #[test]
    fn requests_are_counted_by_prompt_and_in_flight() {
        let s = Shared::new();
        let with = |body: &str| Request {
            body: body.as_bytes().to_vec(),
            ..req()
        };
        s.record("k", &with(r#"{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"x"},{"role":"user","content":"b"}]}"#));
        s.record("k", &with(r#"{"input":"b"}"#));
        s.done("k");
        s.record("k", &with(r#"{"messages":[]}"#));
        s.done("k");
        s.done("k");
        let v: Value = serde_json::from_str(&s.stats_json("k")).unwrap();
        assert_eq!(v["by_prompt"], serde_json::json!({"b": 2, "": 1}));
        assert_eq!(v["max_in_flight"], 2);
    }
}
