//! Desks (SPEC §22, core `desks`): Durable Objects that gather a busy ledger's settlements and fast
//! holds from all isolates and write them to the ledger together. A desk (`desk:<ledger>:<n>`)
//! keeps each item it is handed in its own storage before it answers — a settlement it took is
//! as safe as one D1 took — and writes everything it holds as one D1 batch `FLUSH_MS` after the
//! first (`Store::desk_flush`; at most `FLUSH_MOST` items, the rest at once after). Its answer
//! carries the ledger's settlement counter as its last flush read it, so the isolates that send to
//! desks keep learning the ledger's pace.
//!
//! Exactly once, as everywhere else (`switchyard_core::settlement`): a flush is idempotent, so a
//! crash between D1 taking it and the desk deleting its items only writes them again, to no
//! effect. A flush D1 refuses is tried again 200 ms later, then 400 ms; after the third refusal
//! the desk hands its settlements to the outbox in one call (which replays them until D1 takes
//! them) and drops its holds (each one's settlement settles it unwritten). A kept item this code
//! cannot read is kept aside under `unreadable:` and logged, never deleted.

use std::cell::Cell;
use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use switchyard_core::desks::{FLUSH_MOST, FLUSH_MS};
use worker::{durable_object, DurableObject, Env, ListOptions, Request, Response, State};

use crate::faults::Faults;
use crate::object::{self, Alarm};
use crate::outbox;
use crate::runtime::clock::now_ms;
use crate::store::{HoldRow, Settlement, Store};

/// Storage keys: a settlement `s:<generation id>`, a fast hold `h:<generation id>`, the desk's
/// ledger `ledger`, a record kept aside `unreadable:<key>`.
const SETTLEMENT: &str = "s:";
const HOLD: &str = "h:";
const LEDGER: &str = "ledger";
const UNREADABLE: &str = "unreadable:";
/// A refused flush is tried again this much later (× its tries), until the third refusal.
const RETRY_MS: u64 = 200;
const TRIES: u32 = 3;
/// The most a caller waits for a desk to keep its items.
pub const KEEP_DEADLINE_MS: u64 = 2_000;

/// What an isolate hands a desk.
#[derive(Serialize, Deserialize)]
pub struct Handed {
    pub ledger: u8,
    #[serde(default)]
    pub settlements: Vec<Settlement>,
    #[serde(default)]
    pub holds: Vec<HoldRow>,
}

/// A desk's answer: the ledger's settlement counter as its last flush read it, and when.
#[derive(Serialize, Deserialize, Default)]
pub struct Answer {
    pub counter: Option<(u64, u64)>,
}

#[durable_object]
pub struct LedgerDesk {
    state: State,
    env: Env,
    alarm: Alarm,
    /// Flushes D1 refused in a row.
    tries: Cell<u32>,
    counter: Cell<Option<(u64, u64)>>,
    /// Whether its ledger is in storage already.
    ledger_kept: Cell<bool>,
}

impl DurableObject for LedgerDesk {
    fn new(state: State, env: Env) -> Self {
        LedgerDesk {
            state,
            env,
            alarm: Alarm::default(),
            tries: Cell::new(0),
            counter: Cell::new(None),
            ledger_kept: Cell::new(false),
        }
    }

    /// Keeps the handed items, and makes sure a flush comes `FLUSH_MS` after the first.
    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let storage = self.state.storage();
        let handed: Handed = req.json().await?;
        let entries = js_sys::Object::new();
        let put = |key: String, value: String| js_sys::Reflect::set(&entries, &key.into(), &value.into());
        for item in &handed.settlements {
            put(format!("{SETTLEMENT}{}", item.record.id), to_text(item)?)?;
        }
        for row in &handed.holds {
            put(format!("{HOLD}{}", row.generation_id), to_text(row)?)?;
        }
        if !self.ledger_kept.get() {
            put(LEDGER.to_string(), handed.ledger.to_string())?;
            self.ledger_kept.set(true);
        }
        storage.put_multiple_raw(entries).await?;
        self.alarm.by(&storage, now_ms() + FLUSH_MS).await?;
        Response::from_json(&Answer {
            counter: self.counter.get(),
        })
    }

    /// Writes what it holds to the ledger in one batch.
    async fn alarm(&self) -> worker::Result<Response> {
        self.alarm.known(None);
        let storage = self.state.storage();
        let ledger: u8 = storage
            .get::<String>(LEDGER)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let (settlements, mut keys) = self.listed::<Settlement>(SETTLEMENT).await?;
        let (holds, hold_keys) = self.listed::<HoldRow>(HOLD).await?;
        // A hold whose settlement is here goes with it (the settlement settles it unwritten).
        let settled: HashSet<&str> = settlements.iter().map(|s| s.record.id.as_str()).collect();
        let holds: Vec<HoldRow> = holds
            .into_iter()
            .filter(|h| !settled.contains(h.generation_id.as_str()))
            .collect();
        keys.extend(hold_keys);
        let full = keys.len() >= FLUSH_MOST;
        if keys.is_empty() {
            return Response::ok("idle");
        }
        let parts: Vec<_> = settlements.iter().map(Settlement::parts).collect();
        let written = match Store::new(&self.env).and_then(|s| s.ledger(ledger)) {
            Ok(store) => store.desk_flush(&holds, &parts).await,
            Err(e) => Err(e),
        };
        match written {
            Ok(counter) => {
                if let Some(total) = counter {
                    self.counter.set(Some((total, now_ms())));
                }
                self.tries.set(0);
            }
            Err(_) if self.tries.get() + 1 < TRIES => {
                self.tries.set(self.tries.get() + 1);
                let at = now_ms() + RETRY_MS * u64::from(self.tries.get());
                self.alarm.set(&storage, at).await?;
                return Response::ok("refused");
            }
            Err(_) => {
                self.tries.set(0);
                // D1 keeps refusing: the outbox replays the settlements until it takes them.
                if !settlements.is_empty() && !outbox::keep_all(&self.env, Faults::of(&self.env), &settlements).await {
                    self.alarm.set(&storage, now_ms() + 1_000).await?;
                    return Response::ok("kept");
                }
                worker::console_error!(
                    "{{\"event\":\"desk_to_outbox\",\"settlements\":{},\"holds_left_to_settlements\":{}}}",
                    settlements.len(),
                    holds.len()
                );
            }
        }
        storage.delete_multiple(keys).await?;
        let next = if full { now_ms() + 1 } else { now_ms() + FLUSH_MS };
        if full || self.holds_any().await? {
            self.alarm.by(&storage, next).await?;
        }
        Response::ok("flushed")
    }
}

impl LedgerDesk {
    /// Up to `FLUSH_MOST` items under `prefix`, and their keys; one that does not read is kept
    /// aside and logged.
    async fn listed<T: serde::de::DeserializeOwned>(&self, prefix: &str) -> worker::Result<(Vec<T>, Vec<String>)> {
        let storage = self.state.storage();
        let listed = storage
            .list_with_options(ListOptions::new().prefix(prefix).limit(FLUSH_MOST))
            .await?;
        let (mut items, mut keys) = (Vec::new(), Vec::new());
        for (key, text) in object::entries(&listed) {
            match serde_json::from_str::<T>(&text) {
                Ok(item) => {
                    items.push(item);
                    keys.push(key);
                }
                Err(e) => {
                    object::keep_aside(
                        &storage,
                        "desk_unreadable",
                        &key,
                        &format!("{UNREADABLE}{key}"),
                        text,
                        &e,
                    )
                    .await?
                }
            }
        }
        Ok((items, keys))
    }

    /// Whether anything is held still (handed in during the flush).
    async fn holds_any(&self) -> worker::Result<bool> {
        let storage = self.state.storage();
        for prefix in [SETTLEMENT, HOLD] {
            let first = storage
                .list_with_options(ListOptions::new().prefix(prefix).limit(1))
                .await?;
            if first.size() > 0 {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

fn to_text<T: Serialize>(item: &T) -> worker::Result<String> {
    serde_json::to_string(item).map_err(|e| worker::Error::RustError(e.to_string()))
}

/// Hands `settlements` and `holds` to desk `name` of `ledger`; the ledger's counter as the desk
/// last read it when the desk kept them, `Err` when it did not (the caller's fallback takes them).
pub async fn keep(
    env: &Env,
    ledger: u8,
    name: &str,
    settlements: Vec<Settlement>,
    holds: Vec<HoldRow>,
) -> Result<Option<(u64, u64)>, &'static str> {
    let handed = Handed {
        ledger,
        settlements,
        holds,
    };
    object::call::<_, Answer>(env, "DESKS", name, "/", &handed, KEEP_DEADLINE_MS, None)
        .await
        .map(|a| a.counter)
}
