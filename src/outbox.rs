//! The settlement outbox (SPEC §11: no charge lost): Durable Objects that keep, in their own
//! storage, every settlement D1 refused, and replay them from an alarm until D1 takes them. There
//! are [`SHARDS`] of them, a settlement going to the one its generation id picks (SPEC §18: no
//! single hot object); each call has a deadline, a replay settles its items in batches of
//! [`REPLAY_TOGETHER`] (each alone if D1 refuses the batch), and a record no code can read any more
//! is kept aside and logged, never deleted. A
//! replay is applied exactly once because every money statement of a settlement is guarded by its
//! hold row still being there and the settlement deletes it, the generation row is `INSERT OR
//! IGNORE`, and a fast-path hold row is never written again for a settled generation — so a
//! settlement that D1 did apply although it reported an error (or answered after its deadline)
//! changes nothing the second time (`switchyard_core::settlement`).

use serde::{Deserialize, Serialize};
use wasm_bindgen::JsCast;
use worker::{durable_object, DurableObject, Env, ListOptions, Request, Response, State};

use crate::faults::Faults;
use crate::object;
use crate::store::{Settlement, Store};

/// Outbox objects, `outbox-0` … `outbox-15` ([`shard`]).
const SHARDS: u64 = 16;
/// Storage keys of kept settlements: `s:<generation id>`.
const PREFIX: &str = "s:";
/// Where a record that no longer reads is kept (logged, for an operator): `unreadable:<id>`.
const UNREADABLE: &str = "unreadable:";
/// The most a caller waits for an outbox object to keep a settlement.
const KEEP_DEADLINE_MS: u64 = 5_000;
/// Settlements a replay sends to D1 in one batch.
const REPLAY_TOGETHER: usize = 8;
/// The first retry after a refusal, then doubling up to [`MAX_RETRY_MS`].
const FIRST_RETRY_MS: i64 = 1_000;
const MAX_RETRY_MS: i64 = 30_000;
/// Settlements replayed per alarm (each is its own D1 batch).
const PER_ALARM: u32 = 64;

#[durable_object]
pub struct SettlementOutbox {
    state: State,
    env: Env,
}

impl DurableObject for SettlementOutbox {
    fn new(state: State, env: Env) -> Self {
        SettlementOutbox { state, env }
    }

    /// `/`: keeps the posted settlements and makes sure an alarm will replay them. `/list`: what
    /// this object holds ([`Held`]).
    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let storage = self.state.storage();
        if req.path() == "/list" {
            return Response::from_json(&self.held().await?);
        }
        let faults = Faults::read(&req, &self.env);
        let items: Vec<Settlement> = req.json().await?;
        for item in &items {
            let text = serde_json::to_string(item).map_err(|e| worker::Error::RustError(e.to_string()))?;
            let text = faults.kept(text); // a drill may keep it unreadable (tests only)
            storage.put(&format!("{PREFIX}{}", item.record.id), text).await?;
        }
        if storage.get_alarm().await?.is_none() {
            storage.set_alarm(FIRST_RETRY_MS).await?;
        }
        Response::from_json(&true)
    }

    /// Replays what is kept; what D1 still refuses waits for the next alarm, later each time.
    async fn alarm(&self) -> worker::Result<Response> {
        let storage = self.state.storage();
        let kept = storage
            .list_with_options(ListOptions::new().prefix(PREFIX).limit(PER_ALARM as usize))
            .await?;
        let store = Store::new(&self.env).map_err(|_| worker::Error::RustError("d1 binding".into()))?;
        let mut left = 0;
        let mut replayed = 0;
        let mut readable: Vec<(String, Settlement)> = Vec::new();
        for entry in kept.entries() {
            let Ok(pair) = entry.and_then(|e| e.dyn_into::<js_sys::Array>()) else {
                continue;
            };
            let (Some(key), Some(text)) = (pair.get(0).as_string(), pair.get(1).as_string()) else {
                continue;
            };
            match serde_json::from_str::<Settlement>(&text) {
                Ok(item) => readable.push((key, item)),
                Err(e) => {
                    // A charge nobody can apply now is still a charge: kept aside for an operator.
                    worker::console_error!(
                        "{{\"event\":\"outbox_unreadable\",\"key\":{key:?},\"why\":{:?}}}",
                        e.to_string()
                    );
                    let id = key.strip_prefix(PREFIX).unwrap_or(&key);
                    storage.put(&format!("{UNREADABLE}{id}"), text).await?;
                    storage.delete(&key).await?;
                }
            }
        }
        let mut out_of_reach = false;
        for group in readable.chunks(REPLAY_TOGETHER) {
            if out_of_reach {
                left += group.len();
                continue;
            }
            // One D1 batch for the group; if D1 refuses it, each alone (one bad item must not
            // hold up the others). A group of which nothing went in: D1 is out, the rest waits.
            let parts: Vec<_> = group.iter().map(|(_, item)| item.parts()).collect();
            let results = if store.replay(&parts).await.is_ok() {
                vec![true; group.len()]
            } else {
                futures_util::future::join_all(group.iter().map(|(_, item)| store.settle_one(item))).await
            };
            out_of_reach = !results.iter().any(|ok| *ok);
            for ((key, _), ok) in group.iter().zip(results) {
                if ok {
                    storage.delete(key).await?;
                    replayed += 1;
                } else {
                    left += 1;
                }
            }
        }
        let more = left > 0 || kept.size() >= PER_ALARM;
        if replayed > 0 || left > 0 {
            worker::console_log!("{{\"event\":\"outbox_replay\",\"settled\":{replayed},\"left\":{left}}}");
        }
        if more {
            let streak: i64 = storage.get("streak").await.ok().flatten().unwrap_or(0);
            let next = if left > 0 {
                (FIRST_RETRY_MS << streak.min(5)).min(MAX_RETRY_MS)
            } else {
                0
            };
            storage.put("streak", if left > 0 { streak + 1 } else { 0 }).await?;
            storage.set_alarm(next.max(1)).await?;
        } else {
            storage.put("streak", 0i64).await?;
        }
        Response::ok("replayed")
    }
}

impl SettlementOutbox {
    /// How many settlements wait for D1 here, and the generation ids of those kept aside.
    async fn held(&self) -> worker::Result<Held> {
        let storage = self.state.storage();
        let waiting = storage
            .list_with_options(ListOptions::new().prefix(PREFIX))
            .await?
            .size();
        let aside = storage.list_with_options(ListOptions::new().prefix(UNREADABLE)).await?;
        let mut unreadable = Vec::new();
        for key in aside.keys() {
            if let Some(key) = key.ok().and_then(|k| k.as_string()) {
                unreadable.push(key.strip_prefix(UNREADABLE).unwrap_or(&key).to_string());
            }
        }
        Ok(Held { waiting, unreadable })
    }
}

/// What the outbox holds (`GET /admin/outbox`): settlements waiting for D1, and the generation ids
/// of records kept aside because this code cannot read them (an operator's to apply).
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Held {
    pub waiting: u32,
    pub unreadable: Vec<String>,
}

/// Hands a settlement D1 refused to the outbox; true when it is kept.
pub async fn keep(env: &Env, faults: Faults, item: &Settlement) -> bool {
    let name = shard(switchyard_core::spread::hash64(&[&item.record.id]) % SHARDS);
    let drill = faults.outbox(&item.record.account_id);
    object::call::<_, bool>(env, "OUTBOX", &name, "/", &[item], KEEP_DEADLINE_MS, drill)
        .await
        .unwrap_or(false)
}

/// What every shard holds, summed; `None` when a shard did not answer.
pub async fn held(env: &Env) -> Option<Held> {
    let names: Vec<String> = (0..SHARDS).map(shard).collect();
    let calls = names
        .iter()
        .map(|name| object::call::<_, Held>(env, "OUTBOX", name, "/list", &(), KEEP_DEADLINE_MS, None));
    let mut all = Held::default();
    for part in futures_util::future::join_all(calls).await {
        let part = part.ok()?;
        all.waiting += part.waiting;
        all.unreadable.extend(part.unreadable);
    }
    Some(all)
}

fn shard(n: u64) -> String {
    format!("outbox-{n}")
}
