//! The settlement outbox (SPEC §11: no charge lost): Durable Objects that keep, in their own
//! storage, every settlement D1 refused, and replay them from an alarm until D1 takes them. There
//! are [`SHARDS`] of them, a settlement going to the one its generation id picks (SPEC §18: no
//! single hot object); each call has a deadline. Each kept settlement has its own schedule (core
//! `outbox`: its tries and next try in its key, 1 s doubling to 30 s); an alarm replays what is
//! due, each account's in batches of [`REPLAY_TOGETHER`] (each alone if D1 refuses the batch), and
//! is set again for the earliest due — so one account's settlements that D1 keeps refusing never
//! hold back another's. A record no code can read any more is kept aside and logged, never
//! deleted. A replay is applied exactly once because every money statement of a settlement is
//! guarded by its hold row still being there and the settlement deletes it, the generation row is
//! `INSERT OR IGNORE`, and a fast-path hold row is never written again for a settled generation —
//! so a settlement that D1 did apply although it reported an error (or answered after its
//! deadline) changes nothing the second time (`switchyard_core::settlement`).

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use switchyard_core::outbox::{self as schedule, Kept, FIRST_RETRY_MS, LEGACY_PREFIX, PREFIX};
use worker::{durable_object, DurableObject, Env, ListOptions, Request, Response, State};

use crate::faults::Faults;
use crate::object;
use crate::runtime::clock::now_ms;
use crate::store::{Settlement, Store};

/// Outbox objects, `outbox-0` … `outbox-15` ([`shard`]).
const SHARDS: u64 = 16;
/// Where a record that no longer reads is kept (logged, for an operator): `unreadable:<id>`.
const UNREADABLE: &str = "unreadable:";
/// The most a caller waits for an outbox object to keep a settlement.
const KEEP_DEADLINE_MS: u64 = 5_000;
/// Settlements of one account a replay sends to D1 in one batch.
const REPLAY_TOGETHER: usize = 8;
/// Settlements looked at per alarm.
const PER_ALARM: usize = 64;

#[durable_object]
pub struct SettlementOutbox {
    state: State,
    env: Env,
}

impl DurableObject for SettlementOutbox {
    fn new(state: State, env: Env) -> Self {
        SettlementOutbox { state, env }
    }

    /// `/`: keeps the posted settlements (first replay [`FIRST_RETRY_MS`] later) and makes sure an
    /// alarm will replay them. `/list`: what this object holds ([`Held`]).
    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let storage = self.state.storage();
        if req.path() == "/list" {
            return Response::from_json(&self.held().await?);
        }
        let faults = Faults::read(&req, &self.env);
        let items: Vec<Settlement> = req.json().await?;
        let due = now_ms() + FIRST_RETRY_MS;
        for item in &items {
            let text = serde_json::to_string(item).map_err(|e| worker::Error::RustError(e.to_string()))?;
            let text = faults.kept(text); // a drill may keep it unreadable (tests only)
            storage.put(&schedule::key(due, 0, &item.record.id), text).await?;
        }
        if storage.get_alarm().await?.is_none_or(|at| at > due as i64) {
            storage.set_alarm(FIRST_RETRY_MS as i64).await?;
        }
        Response::from_json(&true)
    }

    /// Replays what is due; what D1 still refuses is kept for its own next try, later each time.
    async fn alarm(&self) -> worker::Result<Response> {
        let storage = self.state.storage();
        let now = now_ms();
        let store = Store::new(&self.env).map_err(|_| worker::Error::RustError("d1 binding".into()))?;
        let mut due: Vec<(String, u32, Settlement, String)> = Vec::new();
        for prefix in [LEGACY_PREFIX, PREFIX] {
            let listed = storage
                .list_with_options(ListOptions::new().prefix(prefix).limit(PER_ALARM - due.len()))
                .await?;
            for (key, text) in object::entries(&listed) {
                let Some(Kept { due_ms, tries, id }) = schedule::parse(&key) else {
                    continue;
                };
                if due_ms > now {
                    break; // listed earliest due first
                }
                match serde_json::from_str::<Settlement>(&text) {
                    Ok(item) => due.push((key.clone(), tries, item, text)),
                    // A charge nobody can apply now is still a charge: kept aside for an operator.
                    Err(e) => {
                        let aside = format!("{UNREADABLE}{id}");
                        object::keep_aside(&storage, "outbox_unreadable", &key, &aside, text, &e).await?
                    }
                }
            }
            if due.len() >= PER_ALARM {
                break;
            }
        }

        let accounts: Vec<&str> = due
            .iter()
            .map(|(_, _, item, _)| item.record.account_id.as_str())
            .collect();
        // An account of which nothing went in this pass: its other batches wait for their next try.
        let mut refused: HashSet<&str> = HashSet::new();
        let mut settled: Vec<&str> = Vec::new();
        let later = js_sys::Object::new();
        let mut left = 0;
        for group in schedule::groups(&accounts, REPLAY_TOGETHER) {
            let account = accounts[group[0]];
            let results = if refused.contains(account) {
                vec![false; group.len()]
            } else {
                // One D1 batch for the group; if D1 refuses it, each alone (one bad item must not
                // hold up the others).
                let parts: Vec<_> = group.iter().map(|&i| due[i].2.parts()).collect();
                if store.replay(&parts).await.is_ok() {
                    vec![true; group.len()]
                } else {
                    futures_util::future::join_all(group.iter().map(|&i| store.settle_one(&due[i].2))).await
                }
            };
            if !results.iter().any(|ok| *ok) {
                refused.insert(account);
            }
            for (&i, ok) in group.iter().zip(results) {
                let (key, tries, item, text) = &due[i];
                if !ok {
                    let tries = tries.saturating_add(1);
                    let next = now + schedule::retry_after_ms(tries);
                    let key = schedule::key(next, tries, &item.record.id);
                    js_sys::Reflect::set(&later, &key.into(), &text.into())?;
                    left += 1;
                }
                settled.push(key.as_str()); // moved or done: the old key goes either way
            }
        }
        // The new keys first, then the old ones removed: a crash between leaves a duplicate, which
        // replays as nothing (exactly once, above), never a loss.
        let replayed = settled.len() - left;
        if left > 0 {
            storage.put_multiple_raw(later).await?;
        }
        if !settled.is_empty() {
            storage.delete_multiple(settled).await?;
        }
        if replayed > 0 || left > 0 {
            worker::console_log!("{{\"event\":\"outbox_replay\",\"settled\":{replayed},\"left\":{left}}}");
        }
        if let Some(next) = self.next_due().await? {
            storage.set_alarm((next.saturating_sub(now_ms()) as i64).max(1)).await?;
        }
        Response::ok("replayed")
    }
}

impl SettlementOutbox {
    /// When the earliest kept settlement is due (Unix ms); `None` when none is kept.
    async fn next_due(&self) -> worker::Result<Option<u64>> {
        let storage = self.state.storage();
        for prefix in [LEGACY_PREFIX, PREFIX] {
            let first = storage
                .list_with_options(ListOptions::new().prefix(prefix).limit(1))
                .await?;
            if let Some(key) = first.keys().into_iter().next().and_then(|k| k.ok()?.as_string()) {
                return Ok(Some(schedule::parse(&key).map_or(0, |kept| kept.due_ms)));
            }
        }
        Ok(None)
    }

    /// How many settlements wait for D1 here, and the generation ids of those kept aside.
    async fn held(&self) -> worker::Result<Held> {
        let storage = self.state.storage();
        let mut waiting = 0;
        for prefix in [LEGACY_PREFIX, PREFIX] {
            waiting += storage
                .list_with_options(ListOptions::new().prefix(prefix))
                .await?
                .size();
        }
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
    keep_all(env, faults, std::slice::from_ref(item)).await
}

/// Hands settlements D1 refused to the outbox in one call (to the shard the first one picks: any
/// shard replays any settlement); true when they are kept.
pub async fn keep_all(env: &Env, faults: Faults, items: &[Settlement]) -> bool {
    let Some(first) = items.first() else { return true };
    let name = shard(switchyard_core::spread::hash64(&[&first.record.id]) % SHARDS);
    let drill = faults.outbox(&first.record.account_id);
    object::call::<_, bool>(env, "OUTBOX", &name, "/", &items, KEEP_DEADLINE_MS, drill)
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
