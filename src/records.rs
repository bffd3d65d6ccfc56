//! Generation records and response pins out of D1 (SPEC §22, core `records`): the `RecordShard`
//! Durable Objects (`RECORDS`, SQLite) that keep them, and the isolate's side — its shard, the
//! batches that write to them, the lookups that read them.
//!
//! An isolate mints its generation ids in one shard (`runtime::ids`), so its records of a day go to
//! one object, in batches (at most 64, 50 ms apart). A batch the object refuses rejoins the next
//! one, three sends at most; then its records go to D1's `generations` table, which the lookups
//! also read: nothing is lost when an object does not answer. A day's object deletes itself
//! whole when its records are [`records::KEPT_DAYS`] old (its alarm); a pin object sweeps its
//! old pins in bounded steps.

use std::cell::{Cell, RefCell};

use serde::Deserialize;
use switchyard_core::batch::{Batches, Rules};
use switchyard_core::generation::{AttemptRecord, GenerationRecord};
use switchyard_core::ids::{record_may_be_pending, RECORD_WAIT_MS};
use switchyard_core::records::{self, Find, FindPin, Keep, Pin, Shelf};
use switchyard_core::ApiError;
use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::batch;
use crate::faults::{Faults, ObjectDrill};
use crate::limits::integer;
use crate::object::{self, OBJECT_NAME};
use crate::runtime::clock::{now_ms, sleep};
use crate::store::{GenerationRow, Store};

/// An isolate's records within 50 ms share one call per object, at most 64 in it; a batch under
/// way for 5 s is taken for lost by its riders.
const KEEP_BATCH: Rules = Rules {
    wait_ms: 50,
    max_items: 64,
    overdue_ms: 200,
    lost_ms: 5_000,
    retry_ms: 200,
    max_sends: 3,
};
/// The most a caller waits for a records object.
const CALL_TIMEOUT_MS: u64 = 3_000;
/// Where an object keeps its own name (an alarm comes without one).
const NAME_KEY: &str = "name";

/// What an isolate keeps: a record for its day's object, or a pin for its pin object (with its
/// record, which goes to D1 if the object will not take the pin).
#[derive(Clone)]
enum Kept {
    Record(GenerationRecord),
    Pin(GenerationRecord),
}

impl Kept {
    fn record(&self) -> &GenerationRecord {
        match self {
            Kept::Record(r) | Kept::Pin(r) => r,
        }
    }
}

thread_local! {
    static KEPT: RefCell<Batches<Kept>> = RefCell::new(Batches::default());
}

/// Keeps `record` (and its pin, for a Responses answer): batched to its objects, D1 if they will
/// not take it. Runs inside `ctx.wait_until`, beside the settlement.
pub async fn keep(env: &Env, faults: Faults, record: GenerationRecord) {
    let now = now_ms();
    let drill = faults.records_object(&record.model);
    let pin = records::Pin::of(&record).map(|p| (records::pin_object(&p.account_id, &p.response_id), record.clone()));
    let Some(object) = records::object(&record.id, now) else {
        // An id that names no shard of ours (minted elsewhere): straight to D1.
        to_d1(env, vec![Kept::Record(record)]).await;
        return;
    };
    let record = send(env, object, Kept::Record(record), drill);
    match pin {
        Some((name, r)) => drop(futures_util::future::join(record, send(env, name, Kept::Pin(r), drill)).await),
        None => record.await,
    }
}

/// Queues a record for the isolate's next [`keep`] to send, from a task that can do no I/O.
pub fn leave(record: GenerationRecord) {
    if let Some(p) = records::Pin::of(&record) {
        batch::leave(
            &KEPT,
            &records::pin_object(&p.account_id, &p.response_id),
            Kept::Pin(record.clone()),
        );
    }
    if let Some(object) = records::object(&record.id, now_ms()) {
        batch::leave(&KEPT, &object, Kept::Record(record));
    }
}

/// Sends `item` to `object` in the isolate's batch for it; what the object refuses goes to D1.
/// `drill`: one the object is to play (tests only; such items are batched apart).
async fn send(env: &Env, object: String, item: Kept, drill: Option<ObjectDrill>) {
    let key = match drill {
        Some(_) => format!("{object}|drill"),
        None => object.clone(),
    };
    let outcome = batch::run(&KEPT, &key, item, false, &KEEP_BATCH, |items: Vec<Kept>| {
        let object = object.clone();
        async move { call_keep(env, &object, &items, drill).await }
    })
    .await;
    let mut refused = outcome.given_up;
    if let Some(alone) = outcome.alone {
        if !call_keep(env, &object, std::slice::from_ref(&alone), drill).await {
            refused.push(alone);
        }
    }
    if !refused.is_empty() {
        to_d1(env, refused).await;
    }
}

/// One call that keeps `items` in `object`; true when kept.
async fn call_keep(env: &Env, object: &str, items: &[Kept], drill: Option<ObjectDrill>) -> bool {
    let mut keep = Keep::default();
    for item in items {
        match item {
            Kept::Record(r) => keep.records.push(r.clone()),
            Kept::Pin(r) => keep.pins.extend(Pin::of(r)),
        }
    }
    object::call::<_, bool>(env, "RECORDS", object, "/keep", &keep, CALL_TIMEOUT_MS, drill)
        .await
        .unwrap_or(false)
}

/// Writes the records of `items` to D1's `generations` (logged when even that fails).
async fn to_d1(env: &Env, items: Vec<Kept>) {
    let records: Vec<&GenerationRecord> = items.iter().map(Kept::record).collect();
    let written = match Store::new(env) {
        Ok(store) => store.keep_generations(&records).await.is_ok(),
        Err(_) => false,
    };
    let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    match written {
        true => worker::console_error!("{{\"event\":\"records_to_d1\",\"ids\":{ids:?}}}"),
        false => worker::console_error!("{{\"event\":\"records_lost\",\"ids\":{ids:?}}}"),
    }
}

/// Asks `ask` until it finds: at once, then every `every_ms` while `pending(now)` says an answer
/// may still be on its way, for at most `wait_ms` — a record or a pin is written just after its
/// answer (batched), so one issued moments ago is waited for. D1 (`ask(true)`) is asked on the
/// first and the last try only: an answer on its way costs its object a call per poll, D1 none.
async fn awaited<T, Fut>(
    wait_ms: u64,
    every_ms: u64,
    pending: impl Fn(u64) -> bool,
    ask: impl Fn(bool) -> Fut,
) -> Result<Option<T>, ApiError>
where
    Fut: std::future::Future<Output = Result<Option<T>, ApiError>>,
{
    let mut found = ask(true).await?;
    let give_up = now_ms().saturating_add(wait_ms);
    let mut polled = false;
    while found.is_none() && pending(now_ms()) && now_ms() < give_up {
        sleep(every_ms).await;
        polled = true;
        found = ask(false).await?;
    }
    if found.is_none() && polled {
        found = ask(true).await?;
    }
    Ok(found)
}

/// How long a pin relayed a moment ago is waited for, and how often its object is asked.
const PIN_WAIT_MS: u64 = 1_000;
const PIN_POLL_MS: u64 = 200;
/// How often a record's object is asked while the record may be on its way (core
/// `ids::RECORD_WAIT_MS` at most).
const RECORD_POLL_MS: u64 = 100;

/// Generation `id` with its attempts, if it is `account_id`'s — waited for while it may still be
/// on its way (see [`awaited`]; `store`: the account's ledger).
pub async fn find(
    env: &Env,
    store: &Store,
    id: &str,
    account_id: &str,
) -> Result<Option<(GenerationRow, Vec<AttemptRecord>)>, ApiError> {
    awaited(
        RECORD_WAIT_MS,
        RECORD_POLL_MS,
        |now| record_may_be_pending(id, now),
        |d1| find_once(env, store, id, account_id, d1),
    )
    .await
}

/// One try of [`find`]: its object, else (`d1`) D1 (a record from before records left D1, or
/// one its object would not take).
async fn find_once(
    env: &Env,
    store: &Store,
    id: &str,
    account_id: &str,
    d1: bool,
) -> Result<Option<(GenerationRow, Vec<AttemptRecord>)>, ApiError> {
    if let Some(object) = records::object(id, now_ms()) {
        let find = Find {
            id: id.to_string(),
            account_id: account_id.to_string(),
        };
        let found =
            object::call::<_, Option<GenerationRecord>>(env, "RECORDS", &object, "/find", &find, CALL_TIMEOUT_MS, None);
        if let Ok(Some(record)) = found.await {
            return Ok(Some((GenerationRow::of(&record)?, record.attempts)));
        }
    }
    match d1 {
        true => store.generation(id, account_id).await,
        false => Ok(None),
    }
}

/// The route that produced the Responses answer `response_id` for `account_id` (SPEC §17) —
/// waited for a moment, a pin being written just after its answer (see [`awaited`]; `store`: the
/// account's ledger).
pub async fn pinned_route(
    env: &Env,
    store: &Store,
    account_id: &str,
    response_id: &str,
) -> Result<Option<String>, ApiError> {
    awaited(
        PIN_WAIT_MS,
        PIN_POLL_MS,
        |_| true,
        |d1| pin_once(env, store, account_id, response_id, d1),
    )
    .await
}

/// One try of [`pinned_route`]: its pin, else (`d1`) D1 (answers from before records left D1, or
/// refused by their object).
async fn pin_once(
    env: &Env,
    store: &Store,
    account_id: &str,
    response_id: &str,
    d1: bool,
) -> Result<Option<String>, ApiError> {
    let object = records::pin_object(account_id, response_id);
    let find = FindPin {
        account_id: account_id.to_string(),
        response_id: response_id.to_string(),
    };
    let found = object::call::<_, Option<String>>(env, "RECORDS", &object, "/pin", &find, CALL_TIMEOUT_MS, None);
    if let Ok(Some(route)) = found.await {
        return Ok(Some(route));
    }
    match d1 {
        true => store.response_route(account_id, response_id).await,
        false => Ok(None),
    }
}

// ---- the object --------------------------------------------------------------------------------

#[durable_object]
pub struct RecordShard {
    state: State,
    env: Env,
    ready: Cell<bool>,
}

#[derive(Deserialize)]
struct Body {
    body: String,
}

#[derive(Deserialize)]
struct Route {
    route: String,
}

impl DurableObject for RecordShard {
    fn new(state: State, env: Env) -> Self {
        RecordShard {
            state,
            env,
            ready: Cell::new(false),
        }
    }

    /// `/keep` ([`Keep`]) → true; `/find` ([`Find`]) → the record or null; `/pin` ([`FindPin`])
    /// → the route or null.
    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let name = req.headers().get(OBJECT_NAME)?.unwrap_or_default();
        let Some(shelf) = Shelf::of(&name) else {
            return Response::error("not a records object", 404);
        };
        Faults::read(&req, &self.env).in_object().await?; // a drill may throw (tests only)
        self.tables()?;
        let sql = self.state.storage().sql();
        match req.path().as_str() {
            "/keep" => {
                let keep: Keep = req.json().await?;
                for r in &keep.records {
                    let body = serde_json::to_string(r).map_err(|e| worker::Error::RustError(e.to_string()))?;
                    sql.exec(
                        "INSERT OR IGNORE INTO records (id, account_id, body) VALUES (?, ?, ?)",
                        vec![r.id.as_str().into(), r.account_id.as_str().into(), body.into()],
                    )?;
                }
                for p in &keep.pins {
                    sql.exec(
                        "INSERT OR REPLACE INTO pins (account_id, response_id, route, at_ms) VALUES (?, ?, ?, ?)",
                        vec![
                            p.account_id.as_str().into(),
                            p.response_id.as_str().into(),
                            p.route.as_str().into(),
                            integer(p.at_ms),
                        ],
                    )?;
                }
                self.arm(&name, shelf).await?;
                Response::from_json(&true)
            }
            "/find" => {
                let find: Find = req.json().await?;
                let rows: Vec<Body> = sql
                    .exec(
                        "SELECT body FROM records WHERE id = ? AND account_id = ?",
                        vec![find.id.as_str().into(), find.account_id.as_str().into()],
                    )?
                    .to_array()?;
                let record = rows
                    .first()
                    .and_then(|b| serde_json::from_str::<GenerationRecord>(&b.body).ok());
                Response::from_json(&record)
            }
            "/pin" => {
                let find: FindPin = req.json().await?;
                let rows: Vec<Route> = sql
                    .exec(
                        "SELECT route FROM pins WHERE account_id = ? AND response_id = ?",
                        vec![find.account_id.as_str().into(), find.response_id.as_str().into()],
                    )?
                    .to_array()?;
                Response::from_json(&rows.first().map(|r| r.route.as_str()))
            }
            _ => Response::error("no such call", 404),
        }
    }

    /// A day's object past its keeping deletes everything; a pin object sweeps old pins, a step
    /// at a time, and comes back while pins are left.
    async fn alarm(&self) -> worker::Result<Response> {
        let storage = self.state.storage();
        let name: Option<String> = storage.get(NAME_KEY).await.ok().flatten();
        let now = now_ms();
        match name.as_deref().and_then(Shelf::of) {
            Some(Shelf::Day { forget_at_ms }) if now >= forget_at_ms => {
                storage.delete_all().await?;
                self.ready.set(false);
                worker::console_log!("{{\"event\":\"records_forgotten\",\"object\":{name:?}}}");
            }
            Some(Shelf::Day { forget_at_ms }) => {
                storage
                    .set_alarm(forget_at_ms.saturating_sub(now).max(1) as i64)
                    .await?
            }
            Some(Shelf::Pins) => {
                self.tables()?;
                let sql = storage.sql();
                let before = integer(records::pins_forgotten_before(now));
                sql.exec(
                    &format!(
                        "DELETE FROM pins WHERE rowid IN (SELECT rowid FROM pins WHERE at_ms < ? LIMIT {})",
                        records::PIN_SWEEP_STEP
                    ),
                    vec![before.clone()],
                )?;
                #[derive(Deserialize)]
                struct Count {
                    due: f64,
                    left: f64,
                }
                let counts: Vec<Count> = sql
                    .exec(
                        "SELECT (SELECT COUNT(*) FROM (SELECT 1 FROM pins WHERE at_ms < ? LIMIT 1)) AS due, \
                         (SELECT COUNT(*) FROM (SELECT 1 FROM pins LIMIT 1)) AS left",
                        vec![before],
                    )?
                    .to_array()?;
                let (due, left) = counts.first().map_or((false, false), |c| (c.due > 0.0, c.left > 0.0));
                if due {
                    storage.set_alarm(1).await?;
                } else if left {
                    storage.set_alarm(records::PIN_SWEEP_EVERY_MS as i64).await?;
                }
            }
            None => {}
        }
        Response::ok("swept")
    }
}

impl RecordShard {
    /// The tables, once per object instance.
    fn tables(&self) -> worker::Result<()> {
        if self.ready.get() {
            return Ok(());
        }
        let sql = self.state.storage().sql();
        sql.exec(
            "CREATE TABLE IF NOT EXISTS records (id TEXT PRIMARY KEY, account_id TEXT NOT NULL, body TEXT NOT NULL)",
            None,
        )?;
        sql.exec(
            "CREATE TABLE IF NOT EXISTS pins (account_id TEXT NOT NULL, response_id TEXT NOT NULL, \
             route TEXT NOT NULL, at_ms INTEGER NOT NULL, PRIMARY KEY (account_id, response_id))",
            None,
        )?;
        sql.exec("CREATE INDEX IF NOT EXISTS pins_age ON pins (at_ms)", None)?;
        self.ready.set(true);
        Ok(())
    }

    /// Remembers the object's name and sets its alarm when none is set: a day's object at its
    /// forgetting time, a pin object at its next sweep.
    async fn arm(&self, name: &str, shelf: Shelf) -> worker::Result<()> {
        let storage = self.state.storage();
        if storage.get_alarm().await?.is_some() {
            return Ok(());
        }
        storage.put(NAME_KEY, name).await?;
        let after = match shelf {
            Shelf::Day { forget_at_ms } => forget_at_ms.saturating_sub(now_ms()).max(1),
            Shelf::Pins => records::PIN_SWEEP_EVERY_MS,
        };
        storage.set_alarm(after as i64).await
    }
}
