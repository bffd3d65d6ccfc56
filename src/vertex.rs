//! Vertex AI's access tokens (SPEC §20): minted from a service account's JSON key — a JWT signed
//! with its private key (WebCrypto, `runtime::sign`) and exchanged at the key's `token_uri` —
//! and kept in this isolate's memory only (never in D1), by a digest of the key. One request at a
//! time mints for a key; the others wait for its token ([`TokenCache`] decides). A failed mint
//! is a [`Verdict`] (the token endpoint's refusal is the account's failure); neither the key nor
//! a token is ever in one, or in a log line.

use std::cell::RefCell;

use switchyard_core::classify::{FailureClass, Verdict};
use switchyard_core::providers::vertex::{self, AccessToken, Lookup, ServiceAccount, TokenCache};
use worker::{Fetch, Headers, Method, Request, RequestInit};

use crate::runtime::clock::{now_ms, sleep};
use crate::runtime::sign;

/// How often a request waiting for another's mint looks again (on its own timer: a promise
/// settled in another request's context would not wake it reliably).
const WAIT_STEP_MS: u64 = 10;
/// The most of a token endpoint's answer that is read.
const MAX_TOKEN_ANSWER_BYTES: usize = 64 * 1024;

thread_local! {
    static TOKENS: RefCell<TokenCache> = RefCell::default();
}

fn cache<T>(f: impl FnOnce(&mut TokenCache) -> T) -> T {
    TOKENS.with(|c| f(&mut c.borrow_mut()))
}

/// A mint this request started: reported to the cache as abandoned if it ends without an answer
/// (its future dropped at the attempt's deadline or the client's departure).
struct Flight<'a> {
    key: &'a str,
    flight: u64,
    reported: bool,
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        if !self.reported {
            cache(|c| c.abandoned(self.key, self.flight));
        }
    }
}

/// An access token for the service account whose JSON key is `secret`: the cached one, the one
/// another request is minting, or a new one.
pub async fn token(secret: &str) -> Result<String, Verdict> {
    let key = vertex::cache_key(secret);
    let mut look = cache(|c| c.lookup(&key, now_ms()));
    loop {
        match look {
            Lookup::Use(token) => return Ok(token),
            Lookup::Failed(verdict) => return Err(verdict),
            Lookup::Wait(flight) => {
                sleep(WAIT_STEP_MS).await;
                look = cache(|c| c.after(&key, flight, now_ms()));
            }
            Lookup::Mint(flight) => {
                let mut guard = Flight {
                    key: &key,
                    flight,
                    reported: false,
                };
                let minted = mint(secret).await;
                guard.reported = true;
                return match minted {
                    Ok(token) => {
                        let value = token.token.clone();
                        cache(|c| c.minted(&key, flight, token));
                        Ok(value)
                    }
                    Err(verdict) => {
                        cache(|c| c.failed(&key, flight, verdict.clone()));
                        Err(verdict)
                    }
                };
            }
        }
    }
}

/// Signs a JWT with the key and exchanges it at the key's token endpoint.
async fn mint(secret: &str) -> Result<AccessToken, Verdict> {
    let account = ServiceAccount::parse(secret).map_err(|e| e.verdict())?;
    let der = account.private_key_der().map_err(|e| e.verdict())?;
    let input = account.signing_input(now_ms());
    let signature = sign::rs256(&der, input.as_bytes()).await.ok_or_else(|| {
        Verdict::new(
            FailureClass::Account,
            "the Vertex service account's private_key is not an RSA key that can sign",
        )
    })?;
    let form = vertex::token_request(&vertex::assertion(&input, &signature));
    let unreachable = || Verdict::new(FailureClass::Connect, "could not reach the Vertex token endpoint");
    let headers = Headers::new();
    for (name, value) in [
        ("content-type", "application/x-www-form-urlencoded"),
        ("accept", "application/json"),
    ] {
        headers.set(name, value).map_err(|_| unreachable())?;
    }
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_headers(headers)
        .with_body(Some(form.into()));
    let request = Request::new_with_init(account.token_uri(), &init).map_err(|_| unreachable())?;
    let mut response = Fetch::Request(request).send().await.map_err(|_| unreachable())?;
    let status = response.status_code();
    let mut body = response.bytes().await.map_err(|_| unreachable())?;
    body.truncate(MAX_TOKEN_ANSWER_BYTES);
    let answer = vertex::read_token_answer(status, &body, now_ms());
    if let Err(verdict) = &answer {
        worker::console_warn!(
            "{}",
            serde_json::json!({"event": "vertex_token_refused", "account": account.client_email,
                               "status": status, "class": verdict.class.as_str()})
        );
    }
    answer
}
