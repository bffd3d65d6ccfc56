//! Keyrings (SPEC §22, core `keyrings`): Durable Objects that read API keys — and the catalog —
//! for the isolates. An isolate that has no fresh copy of a key asks one of the key's four
//! keyrings, by its seed (`keys:<n>`, binding `KEYS`; the calls are `Store::key_by_hash`'s and
//! `Store::catalog`'s, the catalog's through one of the first 16), which
//! answers from its own copy while that is younger than `keyrings::FRESH_MS`, and else reads from
//! D1 first (`Store::read_key_row`, `Store::catalog_text`) — one read at a time per key: calls
//! that come while it is under way wait for it. So a ledger's key reads are bounded by its keys,
//! and the home database's catalog reads by the catalog's keyrings, not by the isolates. The
//! answer says when D1 was read; the isolate counts its copy's age from then, so a revoked key or
//! a changed catalog reaches every isolate as soon as it did before keyrings; a key the admin
//! revokes is forgotten by its keyrings at once (`Store::revoke_key`), so the isolate that
//! revoked it — which forgets its own copy — refuses it from its next request; a read of it begun
//! before the revocation and answered after it is not kept as the keyring's copy (`Copies`
//! remembers when it forgot). Nothing is stored: a keyring that restarts reads again.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;

use futures_channel::oneshot;
use switchyard_core::keyrings::{Answer, Call, CatalogText, Copies};
use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::faults::Faults;
use crate::runtime::clock::now_ms;
use crate::store::{KeyRecord, Store};

/// The name the catalog's copy and read go by among the keys' hashes (no hash is this short).
const CATALOG: &str = "catalog";

#[durable_object]
pub struct KeyRing {
    env: Env,
    keys: RefCell<Copies<String, Option<KeyRecord>>>,
    catalog: RefCell<Copies<&'static str, CatalogText>>,
    key_reads: Flights<Answer<KeyRecord>>,
    catalog_reads: Flights<Answer<CatalogText>>,
}

impl DurableObject for KeyRing {
    fn new(_state: State, env: Env) -> Self {
        KeyRing {
            env,
            keys: RefCell::new(Copies::default()),
            catalog: RefCell::new(Copies::default()),
            key_reads: Flights::default(),
            catalog_reads: Flights::default(),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        match req.json().await? {
            Call::Read { hash, ledger } => {
                let copy = self.keys.borrow().fresh(&hash, now_ms());
                let answer = match copy {
                    Some((found, read_at_ms)) => Answer::read(found, read_at_ms),
                    None => self.key_reads.once(&hash, || self.read_key(&hash, ledger)).await,
                };
                Response::from_json(&answer)
            }
            Call::Forget { hash } => {
                self.keys.borrow_mut().forget(hash, now_ms());
                Response::from_json(&true)
            }
            Call::Catalog { held } => {
                let copy = self.catalog.borrow().fresh(&CATALOG, now_ms());
                let answer = match copy {
                    Some((text, read_at_ms)) => Answer::read(Some(text), read_at_ms),
                    None => self.catalog_reads.once(CATALOG, || self.read_catalog()).await,
                };
                // The caller's version: its document is not sent again.
                let answer = match answer.found {
                    Some(text) if Some(text.version) == held => Answer {
                        found: Some(CatalogText { doc: None, ..text }),
                        ..answer
                    },
                    _ => answer,
                };
                Response::from_json(&answer)
            }
        }
    }
}

impl KeyRing {
    fn store(&self) -> Result<Store, switchyard_core::ApiError> {
        Store::new(&self.env).map(|s| s.with_faults(Faults::of(&self.env)))
    }

    /// Reads the key from its ledger and keeps what it found.
    async fn read_key(&self, hash: &str, ledger: u8) -> Answer<KeyRecord> {
        let read_at_ms = now_ms();
        let found = match self.store() {
            Ok(store) => store.read_key_row(hash, ledger).await,
            Err(e) => Err(e),
        };
        crate::calls::in_object("KEYS.d1_read", &counted_as(hash), Faults::of(&self.env).instruments());
        match found {
            Ok(found) => {
                self.keys.borrow_mut().keep(hash.to_string(), found.clone(), read_at_ms);
                Answer::read(found, read_at_ms)
            }
            Err(_) => Answer::unavailable(),
        }
    }

    /// Reads the catalog (its document always) and keeps it.
    async fn read_catalog(&self) -> Answer<CatalogText> {
        let read_at_ms = now_ms();
        let text = match self.store() {
            Ok(store) => store.catalog_text(None).await,
            Err(e) => Err(e),
        };
        match text {
            Ok(text) => {
                self.catalog.borrow_mut().keep(CATALOG, text.clone(), read_at_ms);
                Answer::read(Some(text), read_at_ms)
            }
            Err(_) => Answer::unavailable(),
        }
    }
}

/// The name a keyring's D1 reads of the key with this hash count under (test drills only: per key,
/// so a test tells its key's reads from other tests').
pub fn counted_as(hash: &str) -> String {
    format!("key:{}", &hash[..hash.len().min(16)])
}

/// Reads under way, by what they read: the calls waiting for each.
struct Flights<T> {
    reading: RefCell<HashMap<String, Vec<oneshot::Sender<T>>>>,
}

impl<T> Default for Flights<T> {
    fn default() -> Self {
        Flights {
            reading: RefCell::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Flights<T> {
    /// `read()`'s answer for `what`: from the read under way if there is one, else from this
    /// call's own, which the calls coming meanwhile wait for. A read given up (its call went away)
    /// leaves each of its waiters to read for itself.
    async fn once<F: Future<Output = T>>(&self, what: &str, read: impl FnOnce() -> F) -> T {
        let waiting = {
            let mut reading = self.reading.borrow_mut();
            match reading.get_mut(what) {
                Some(waiters) => {
                    let (tell, told) = oneshot::channel();
                    waiters.push(tell);
                    Some(told)
                }
                None => {
                    reading.insert(what.to_string(), Vec::new());
                    None
                }
            }
        };
        if let Some(told) = waiting {
            return match told.await {
                Ok(answer) => answer,
                Err(_) => read().await,
            };
        }
        let flight = Flight {
            reading: &self.reading,
            what,
        };
        let answer = read().await;
        for waiter in flight.land() {
            let _ = waiter.send(answer.clone());
        }
        answer
    }
}

/// A read under way: its waiters are told when it lands, or — if the call reading goes away
/// first — dropped.
struct Flight<'a, T> {
    reading: &'a RefCell<HashMap<String, Vec<oneshot::Sender<T>>>>,
    what: &'a str,
}

impl<T> Flight<'_, T> {
    fn land(self) -> Vec<oneshot::Sender<T>> {
        self.reading.borrow_mut().remove(self.what).unwrap_or_default()
    }
}

impl<T> Drop for Flight<'_, T> {
    fn drop(&mut self) {
        self.reading.borrow_mut().remove(self.what);
    }
}
