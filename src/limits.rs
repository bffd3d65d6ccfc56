//! Limits (SPEC §10) at the edge: the objects that keep them and the slots a request holds.
//!
//! - Per key: one `LimitObject` per limited key (`key:<id>`) runs the core `KeyState`; a key
//!   limiting concurrency alone past core `SLOTS_PER_SHARD` slots, or with `rpm` alone past
//!   `RPM_PER_SHARD`, has one per share of it (`key:<id>:<n>`, core `key_shards`), exact in
//!   total. A key without `rpm` or `max_concurrent` never calls one.
//! - Per route: `LimitObject`s of their own keep a capped model's core `Capacity` (path
//!   `/capacity`: `capacity:0:<model>`, or one per share of its caps past core `SLOTS_PER_SHARD`,
//!   `capacity:<n>:<model>`) — apart from the model's health object, so capacity calls never queue
//!   health's; each lease is one row of its SQLite storage ([`CapacityDesk`]).
//!
//! A request that finds no room waits inside the object (first come, first served) until room
//! frees, up to its wait; the object's state (window, leases — not waiters) is persisted, so a
//! restarted object forgets nobody's slot. A [`Slot`] gives its lease back when dropped, from
//! `ctx.wait_until`; a slot never given back expires (`limits::lease_ms`). An object that errs or
//! is late admits the request (logged): a limit must not take the service down.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::{pin, Pin};
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll, Waker};

use futures_channel::oneshot;
use futures_util::future::{select, Either};
use serde::de::DeserializeOwned;
use serde::Serialize;
use switchyard_core::catalog::{Model, Policy};
use switchyard_core::limits::{
    capacity_shards, key_shards, key_window, lease_ms, permit_shard, renew_every_ms, shard_limit, shard_order,
    shard_wants, uses_permits, Capacity, CapacityAdmit, CapacityCall, CapacityReply, Held, KeyAdmit, KeyCall, KeyLimit,
    KeyReply, KeyState, KeyUsage, Lease, PermitReply, Permits, RateWindow, Renewals, Want,
};
use switchyard_core::ApiError;
use worker::{durable_object, Context, DurableObject, Env, Request, Response, SqlStorageValue, State, Storage};

use crate::object;
use crate::runtime::apart::apart;
use crate::runtime::clock::{in_request, now_ms, sleep};
use crate::runtime::ids::isolate_seed;
use crate::store::KeyRecord;

/// Beyond its own wait, how long a request gives a limit object to answer.
const CALL_MARGIN_MS: u64 = 500;
/// How long giving a slot back may take (from `ctx.wait_until`).
const RELEASE_TIMEOUT_MS: u64 = 2_000;

// ---- waiting inside an object --------------------------------------------------------------------

/// Wakes an object's waiters when its state changed (a slot given back, a waiter gone).
#[derive(Default)]
struct Room {
    version: Cell<u64>,
    wakers: RefCell<Vec<Waker>>,
}

impl Room {
    fn wake(&self) {
        self.version.set(self.version.get() + 1);
        for w in self.wakers.borrow_mut().drain(..) {
            w.wake();
        }
    }

    /// Ready once [`Room::wake`] is called after this.
    fn changed(&self) -> Changed<'_> {
        Changed {
            room: self,
            seen: self.version.get(),
        }
    }
}

struct Changed<'a> {
    room: &'a Room,
    seen: u64,
}

impl Future for Changed<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if self.room.version.get() != self.seen {
            return Poll::Ready(());
        }
        self.room.wakers.borrow_mut().push(cx.waker().clone());
        Poll::Pending
    }
}

/// One try of a waiting request.
enum Step<T> {
    Done(T),
    /// No room: try again at this time, or when the room changes.
    Wait(u64),
}

/// Runs `step(now, give_up)` until it is done: between tries, waits for the room to change or the
/// time it names, and at `deadline_ms` calls it with `give_up` (it must then be done). Returns the
/// answer and the milliseconds waited.
async fn wait_for_room<T>(room: &Room, wait_ms: u64, mut step: impl FnMut(u64, bool) -> Step<T>) -> (T, u64) {
    let start = now_ms();
    let deadline = start.saturating_add(wait_ms);
    loop {
        let now = now_ms();
        match step(now, now >= deadline) {
            Step::Done(v) => {
                room.wake(); // a waiter left the queue: the next may now go
                return (v, now.saturating_sub(start));
            }
            Step::Wait(at) => {
                let until = at.clamp(now + 1, deadline);
                let changed = room.changed();
                select(pin!(changed), pin!(sleep(until - now))).await;
            }
        }
    }
}

/// An object's limit state: in memory, loaded from storage on first use, persisted after each
/// change that must survive a restart.
struct Desk<S> {
    key: &'static str,
    state: RefCell<Option<S>>,
    room: Room,
}

impl<S: Default + Serialize + DeserializeOwned> Desk<S> {
    fn new(key: &'static str) -> Self {
        Desk {
            key,
            state: RefCell::new(None),
            room: Room::default(),
        }
    }

    async fn load(&self, storage: &Storage) -> worker::Result<()> {
        if self.state.borrow().is_some() {
            return Ok(());
        }
        let stored: Option<String> = storage.get(self.key).await?;
        let loaded = stored.and_then(|t| serde_json::from_str(&t).ok()).unwrap_or_default();
        self.state.borrow_mut().get_or_insert(loaded);
        Ok(())
    }

    /// Runs `f` on the state (never across an await).
    fn with<R>(&self, f: impl FnOnce(&mut S) -> R) -> R {
        f(self.state.borrow_mut().get_or_insert_with(S::default))
    }

    async fn persist(&self, storage: &Storage) -> worker::Result<()> {
        let text = self
            .with(|s| serde_json::to_string(s))
            .map_err(|e| worker::Error::RustError(e.to_string()))?;
        storage.put(self.key, text).await
    }
}

// ---- per key: the object -------------------------------------------------------------------------

#[durable_object]
pub struct LimitObject {
    state: State,
    desk: Desk<KeyState>,
    /// A model's route capacity (`capacity:<n>:<model>`, on the `/capacity` path).
    capacity: CapacityDesk,
}

impl DurableObject for LimitObject {
    fn new(state: State, _env: Env) -> Self {
        LimitObject {
            state,
            desk: Desk::new("key"),
            capacity: CapacityDesk::new(),
        }
    }

    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let storage = self.state.storage();
        if req.path() == "/capacity" {
            return self.capacity.serve(&storage, req.json().await?).await;
        }
        let call: KeyCall = req.json().await?;
        self.desk.load(&storage).await?;
        match call {
            KeyCall::Acquire {
                id,
                limit,
                lease_ms,
                wait_ms,
            } => {
                let (admit, waited_ms) = wait_for_room(&self.desk.room, wait_ms, |now, give_up| {
                    self.desk.with(|k| match k.admit(&id, limit, lease_ms, now) {
                        // Tried once more at the deadline (and once at all with no wait): room
                        // that is there is taken.
                        KeyAdmit::Wait { .. } if give_up => {
                            let retry_after_s = k.give_up(&id, limit, now);
                            Step::Done(KeyAdmit::Refused {
                                retry_after_s,
                                window: k.rate_window(limit, now),
                            })
                        }
                        KeyAdmit::Wait { retry_at_ms } => Step::Wait(retry_at_ms),
                        done => Step::Done(done),
                    })
                })
                .await;
                if matches!(admit, KeyAdmit::Granted { .. }) {
                    self.desk.persist(&storage).await?;
                }
                Response::from_json(&KeyReply { admit, waited_ms })
            }
            KeyCall::Release { id } => {
                if self.desk.with(|k| k.release(&id)) {
                    self.desk.persist(&storage).await?;
                    self.desk.room.wake();
                }
                Response::from_json(&serde_json::Value::Null)
            }
            KeyCall::Renew { ids, lease_ms } => {
                let now = now_ms();
                let renewed = self
                    .desk
                    .with(|k| ids.iter().fold(false, |any, id| k.renew(id, now, lease_ms) | any));
                if renewed {
                    self.desk.persist(&storage).await?;
                }
                Response::from_json(&serde_json::Value::Null)
            }
            KeyCall::Usage => Response::from_json(&self.desk.with(|k| k.usage(now_ms()))),
            KeyCall::Permits { want, limit } => {
                let reply = self.desk.with(|k| k.permits(want, limit, now_ms()));
                if reply.granted > 0 {
                    self.desk.persist(&storage).await?;
                }
                Response::from_json(&reply)
            }
        }
    }
}

// ---- per route: a model's capacity object ------------------------------------------------------------

/// A model's capacity object (`capacity:<n>:<model>`, a `LimitObject`): the core `Capacity` in memory, each lease one
/// row of the object's SQLite table — a grant, a renewal or a release writes that row alone, so a
/// call costs the same at ten leases as at a hundred thousand, and no value grows with the load
/// (the old one JSON value, rewritten whole on every call, met the storage's 2 MB value limit at
/// about 25,000 leases). Expired rows are deleted at load and at most every [`PURGE_EVERY_MS`].
pub struct CapacityDesk {
    /// The state and its waiters; its key names the old single value, moved into the table.
    desk: Desk<Capacity>,
    purged_ms: Cell<u64>,
}

/// How often expired lease rows are deleted (they are ignored from the moment they expire).
const PURGE_EVERY_MS: u64 = 10_000;

/// One lease row.
#[derive(serde::Deserialize)]
struct LeaseRow {
    route: String,
    id: String,
    expires_ms: f64,
}

impl CapacityDesk {
    pub fn new() -> Self {
        CapacityDesk {
            desk: Desk::new("capacity"),
            purged_ms: Cell::new(0),
        }
    }

    /// The leases from the table, once per object instance; the state of an object from before
    /// rows (one JSON value under `capacity`) moves into the table first.
    async fn load(&self, storage: &Storage) -> worker::Result<()> {
        if self.desk.state.borrow().is_some() {
            return Ok(());
        }
        let sql = storage.sql();
        sql.exec(
            "CREATE TABLE IF NOT EXISTS capacity_leases (route TEXT NOT NULL, id TEXT NOT NULL, \
             expires_ms INTEGER NOT NULL, PRIMARY KEY (route, id))",
            None,
        )?;
        sql.exec(
            "CREATE INDEX IF NOT EXISTS capacity_leases_expiry ON capacity_leases (expires_ms)",
            None,
        )?;
        if let Some(old) = storage.get::<String>(self.desk.key).await? {
            if let Ok(old) = serde_json::from_str::<Capacity>(&old) {
                for (route, lease) in old.leases() {
                    put(storage, route, &lease.id, lease.expires_ms)?;
                }
            }
            storage.delete(self.desk.key).await?;
        }
        let now = now_ms();
        self.purge(storage, now)?;
        let rows: Vec<LeaseRow> = sql
            .exec("SELECT route, id, expires_ms FROM capacity_leases", None)?
            .to_array()?;
        let mut capacity = Capacity::default();
        for row in rows {
            let lease = Lease {
                id: row.id,
                expires_ms: row.expires_ms as u64,
            };
            capacity.restore(&row.route, lease);
        }
        self.desk.state.borrow_mut().get_or_insert(capacity);
        Ok(())
    }

    /// Deletes the rows of expired leases.
    fn purge(&self, storage: &Storage, now: u64) -> worker::Result<()> {
        self.purged_ms.set(now);
        storage
            .sql()
            .exec("DELETE FROM capacity_leases WHERE expires_ms <= ?", vec![integer(now)])?;
        Ok(())
    }

    /// Writes request `id`'s lease on `route` as the state has it now (deletes it if it has none).
    fn save(&self, storage: &Storage, route: &str, id: &str) -> worker::Result<()> {
        match self.desk.with(|c| c.lease(route, id).map(|l| l.expires_ms)) {
            Some(expires_ms) => put(storage, route, id, expires_ms),
            None => {
                storage.sql().exec(
                    "DELETE FROM capacity_leases WHERE route = ? AND id = ?",
                    vec![route.into(), id.into()],
                )?;
                Ok(())
            }
        }
    }

    /// Answers one [`CapacityCall`].
    pub async fn serve(&self, storage: &Storage, call: CapacityCall) -> worker::Result<Response> {
        self.load(storage).await?;
        let now = now_ms();
        if now.saturating_sub(self.purged_ms.get()) >= PURGE_EVERY_MS {
            self.purge(storage, now)?;
        }
        match call {
            CapacityCall::Acquire {
                id,
                wants,
                lease_ms,
                wait_ms,
            } => {
                let (admit, waited_ms) = wait_for_room(&self.desk.room, wait_ms, |now, give_up| {
                    self.desk.with(|c| match c.admit(&id, &wants, lease_ms, now) {
                        CapacityAdmit::Wait { .. } if give_up => {
                            c.give_up(&id);
                            Step::Done(CapacityAdmit::Refused { retry_after_s: 1 })
                        }
                        CapacityAdmit::Wait { retry_at_ms } => Step::Wait(retry_at_ms),
                        done => Step::Done(done),
                    })
                })
                .await;
                if let CapacityAdmit::Granted { route, capped: true } = &admit {
                    self.save(storage, route, &id)?;
                }
                Response::from_json(&CapacityReply { admit, waited_ms })
            }
            CapacityCall::Release { route, id } => {
                if self.desk.with(|c| c.release(&route, &id)) {
                    self.save(storage, &route, &id)?;
                    self.desk.room.wake();
                }
                Response::from_json(&serde_json::Value::Null)
            }
            CapacityCall::Renew { leases, lease_ms } => {
                let now = now_ms();
                for held in leases {
                    let route = held.route.unwrap_or_default();
                    if self.desk.with(|c| c.renew(&route, &held.id, now, lease_ms)) {
                        self.save(storage, &route, &held.id)?;
                    }
                }
                Response::from_json(&serde_json::Value::Null)
            }
            CapacityCall::Report => Response::from_json(&self.desk.with(|c| c.report(now_ms()))),
        }
    }
}

/// A time in ms as SQLite's integer.
pub(crate) fn integer(ms: u64) -> SqlStorageValue {
    SqlStorageValue::Integer(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// Writes one lease row.
fn put(storage: &Storage, route: &str, id: &str, expires_ms: u64) -> worker::Result<()> {
    storage.sql().exec(
        "INSERT OR REPLACE INTO capacity_leases (route, id, expires_ms) VALUES (?, ?, ?)",
        vec![route.into(), id.into(), integer(expires_ms)],
    )?;
    Ok(())
}

// ---- a request's slots -----------------------------------------------------------------------------

thread_local! {
    /// The isolate's live slots by object (`binding|object|lease_ms`), renewed together.
    static RENEWALS: RefCell<std::collections::HashMap<String, Renewals>> = RefCell::new(Default::default());
}

/// A slot a request holds: renewed while the request lives and given back when dropped, from
/// `ctx.wait_until` (a slot of no object — unlimited, or admitted while the object was
/// unreachable — gives nothing back). A holder that vanishes stops renewing: its lease, short
/// (SPEC §18), then frees the slot.
#[derive(Default)]
pub struct Slot {
    release: Option<Release>,
    /// Dropped when the slot is given back (or abandoned): its renewals stop at once, their
    /// timer with them.
    renewing: Option<oneshot::Sender<()>>,
}

#[derive(Clone)]
struct Release {
    env: Env,
    ctx: Rc<Context>,
    binding: &'static str,
    object: String,
    path: &'static str,
    body: serde_json::Value,
}

impl Release {
    /// A call of `body` to object `object` of `binding` at `path`.
    fn new(
        env: &Env,
        ctx: &Rc<Context>,
        binding: &'static str,
        object: String,
        path: &'static str,
        body: &impl Serialize,
    ) -> Release {
        Release {
            env: env.clone(),
            ctx: ctx.clone(),
            binding,
            object,
            path,
            body: serde_json::to_value(body).unwrap_or_default(),
        }
    }
}

impl Slot {
    /// The slot given back by the call `release`, and kept alive until then by the isolate's
    /// renewals of its slots on the same object (core `Renewals`): its holder checks every half
    /// renewal interval and, when the renewal is due, sends one call renewing every slot the
    /// isolate holds there — the call `renew` makes of them.
    fn held(release: Release, held: Held, lease_ms: u64, renew: Renew) -> Slot {
        let (renewing, mut stopped) = oneshot::channel::<()>();
        let group = format!("{}|{}|{lease_ms}", release.binding, release.object);
        let ticket = RENEWALS.with(|r| r.borrow_mut().entry(group.clone()).or_default().join(held, now_ms()));
        let r = release.clone();
        release.ctx.wait_until(async move {
            let every = renew_every_ms(lease_ms);
            loop {
                let stop = match select(pin!(sleep(every / 2)), &mut stopped).await {
                    Either::Right(_) => true,         // given back (or abandoned)
                    Either::Left(_) => !in_request(), // the holder's request is gone: let the lease run out
                };
                if stop {
                    RENEWALS.with(|all| {
                        let mut all = all.borrow_mut();
                        if let Some(g) = all.get_mut(&group) {
                            g.leave(ticket);
                            if g.is_empty() {
                                all.remove(&group);
                            }
                        }
                    });
                    return;
                }
                let due = RENEWALS.with(|all| all.borrow_mut().get_mut(&group).and_then(|g| g.turn(now_ms(), every)));
                let Some(slots) = due else { continue };
                let Ok(body) = renew(slots, lease_ms) else { continue };
                let _: Result<serde_json::Value, _> =
                    object::call(&r.env, r.binding, &r.object, r.path, &body, RELEASE_TIMEOUT_MS, None).await;
            }
        });
        Slot {
            release: Some(release),
            renewing: Some(renewing),
        }
    }

    /// A holder that dies (the `fault-leak-slots` drill, `Faults::leaks_slots`, tests only):
    /// neither renewed nor given back, so only its lease's expiry frees it.
    pub fn abandon(mut self) {
        self.renewing = None;
        self.release = None;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.renewing = None;
        let Some(r) = self.release.take() else { return };
        if !in_request() {
            return; // no I/O possible here: the lease expires instead
        }
        send_release(r);
    }
}

/// The call that renews an object's slots for `lease_ms` more.
type Renew = fn(Vec<Held>, u64) -> serde_json::Result<serde_json::Value>;

/// A key object's renewal of the isolate's slots there.
fn key_renewal(slots: Vec<Held>, lease_ms: u64) -> serde_json::Result<serde_json::Value> {
    serde_json::to_value(KeyCall::Renew {
        ids: slots.into_iter().map(|h| h.id).collect(),
        lease_ms,
    })
}

/// A model object's renewal of the isolate's capacity leases there.
fn capacity_renewal(slots: Vec<Held>, lease_ms: u64) -> serde_json::Result<serde_json::Value> {
    serde_json::to_value(CapacityCall::Renew {
        leases: slots,
        lease_ms,
    })
}

/// Gives a slot back from `ctx.wait_until`; a failure leaves it to its lease.
fn send_release(r: Release) {
    let ctx = r.ctx.clone();
    ctx.wait_until(async move {
        let done: Result<serde_json::Value, _> =
            object::call(&r.env, r.binding, &r.object, r.path, &r.body, RELEASE_TIMEOUT_MS, None).await;
        if let Err(why) = done {
            worker::console_error!(
                "{{\"event\":\"slot_release_failed\",\"object\":{:?},\"why\":\"{why}\",\"fallback\":\"lease_expiry\"}}",
                r.object
            );
        }
    });
}

/// The name of shard `shard` of the `shards` objects keeping `key`'s limits (`key:<id>` when one).
fn key_object(key: &KeyRecord, shard: u32, shards: u32) -> String {
    match shards {
        1 => format!("key:{}", key.id),
        _ => format!("key:{}:{shard}", key.id),
    }
}

/// The key's limits from its record.
pub fn key_limit(key: &KeyRecord) -> KeyLimit {
    KeyLimit {
        rpm: key.rpm,
        max_concurrent: key.max_concurrent,
    }
}

/// A key's admission: its slot and, for an `rpm` key, the window for the rate-limit headers.
#[derive(Default)]
pub struct KeyAdmission {
    pub slot: Slot,
    pub window: Option<RateWindow>,
}

thread_local! {
    /// This isolate's permits per `rpm`-only key (SPEC §22), by key object name.
    static PERMITS: RefCell<std::collections::HashMap<String, Permits>> = RefCell::new(Default::default());
}

/// How long a request waits for a batch of permits before it asks for its own admission.
const PERMITS_TIMEOUT_MS: u64 = 300;
/// Past this many keys with permits, an isolate forgets those holding none.
const MAX_PERMIT_KEYS: usize = 4_096;

/// Admits request `id` under its key's limits (SPEC §10), waiting up to `key_wait_ms`; a key
/// without limits returns at once, without a call. A key with `rpm` alone spends one of the
/// isolate's permits when it holds one, without a call ([`spend_permit`]). A key whose limit is
/// spread over several objects (core `key_shards`) takes its permits from the object the isolate
/// picks, and asks for a request's admission the object the request's id picks at once, then the
/// next one, waiting there; the rate-limit headers speak of the key's whole window.
pub async fn admit_key(
    env: &Env,
    ctx: &Rc<Context>,
    key: &KeyRecord,
    id: &str,
    policy: &Policy,
) -> Result<KeyAdmission, ApiError> {
    let limit = key_limit(key);
    if !limit.any() {
        return Ok(KeyAdmission::default());
    }
    // Compiled when a key with limits first comes (`runtime::apart`).
    apart(admit_limited(env, ctx, key, id, policy, limit)).await
}

/// [`admit_key`] for a key with `rpm` or `max_concurrent`.
async fn admit_limited(
    env: &Env,
    ctx: &Rc<Context>,
    key: &KeyRecord,
    id: &str,
    policy: &Policy,
    limit: KeyLimit,
) -> Result<KeyAdmission, ApiError> {
    let shards = key_shards(limit);
    let whole = |w: Option<RateWindow>| w.map(|w| key_window(w, limit, shards));
    if uses_permits(limit) {
        let shard = permit_shard(isolate_seed(), &key.id, shards);
        let share = shard_limit(limit, shard, shards);
        if let Some(window) = spend_permit(env, ctx, &key_object(key, shard, shards), share).await {
            return Ok(KeyAdmission {
                slot: Slot::default(),
                window: whole(window),
            });
        }
    }
    let lease = lease_ms(policy);
    let admitted = by_shard(
        id,
        shards,
        policy.key_wait_ms,
        |e| matches!(e, ApiError::KeyRateLimited { .. }),
        |shard, wait_ms| {
            let share = shard_limit(limit, shard, shards);
            acquire(env, ctx, key_object(key, shard, shards), id, share, lease, wait_ms)
        },
    )
    .await;
    match admitted {
        Ok(admission) => Ok(KeyAdmission {
            window: whole(admission.window),
            ..admission
        }),
        Err(ApiError::KeyRateLimited { retry_after_s, window }) => Err(ApiError::KeyRateLimited {
            retry_after_s,
            window: whole(window),
        }),
        Err(other) => Err(other),
    }
}

/// Asks request `id`'s objects of a limit kept by `shards` of them, in its order (core
/// `shard_order`): the first at once, without waiting, and — when `refused` says it had no room —
/// the next, waiting up to `wait_ms` there. `ask(shard, wait_ms)` makes one ask.
async fn by_shard<T, F: Future<Output = Result<T, ApiError>>>(
    id: &str,
    shards: u32,
    wait_ms: u64,
    refused: fn(&ApiError) -> bool,
    mut ask: impl FnMut(u32, u64) -> F,
) -> Result<T, ApiError> {
    let order = shard_order(id, shards);
    let last = order.len() - 1;
    for (n, shard) in order.into_iter().enumerate() {
        let wait = if n == last { wait_ms } else { 0 };
        match ask(shard, wait).await {
            Err(e) if n < last && refused(&e) => continue,
            done => return done,
        }
    }
    Err(ApiError::Internal { label: "shard_order" })
}

/// Asks key object `name` for request `id`'s admission under `limit`, waiting up to `wait_ms`.
async fn acquire(
    env: &Env,
    ctx: &Rc<Context>,
    name: String,
    id: &str,
    limit: KeyLimit,
    lease: u64,
    wait_ms: u64,
) -> Result<KeyAdmission, ApiError> {
    let call = KeyCall::Acquire {
        id: id.to_string(),
        limit,
        lease_ms: lease,
        wait_ms,
    };
    let timeout = wait_ms.saturating_add(CALL_MARGIN_MS);
    let release = |name: String| Release::new(env, ctx, "LIMITS", name, "/", &KeyCall::Release { id: id.to_string() });
    match object::call::<_, KeyReply>(env, "LIMITS", &name, "/", &call, timeout, None).await {
        Ok(KeyReply {
            admit: KeyAdmit::Granted { window },
            ..
        }) => Ok(KeyAdmission {
            slot: match limit.max_concurrent {
                Some(_) => Slot::held(
                    release(name),
                    Held {
                        route: None,
                        id: id.to_string(),
                    },
                    lease,
                    key_renewal,
                ),
                None => Slot::default(),
            },
            window,
        }),
        Ok(KeyReply {
            admit: KeyAdmit::Refused { retry_after_s, window },
            ..
        }) => Err(ApiError::KeyRateLimited { retry_after_s, window }),
        Ok(KeyReply {
            admit: KeyAdmit::Wait { .. },
            ..
        }) => Err(ApiError::Internal { label: "limit_wait" }),
        Err(why) => {
            worker::console_error!(
                "{{\"event\":\"limit_object_unavailable\",\"object\":{name:?},\"why\":\"{why}\",\"fallback\":\"admit\"}}"
            );
            // The object may have granted a lease after we stopped waiting: give it back anyway.
            if limit.max_concurrent.is_some() {
                send_release(release(name));
            }
            Ok(KeyAdmission::default())
        }
    }
}

/// One of this isolate's permits for the `rpm`-only key `name` (SPEC §22): the window for the
/// headers (`Some(None)`: admitted without one, the object not answering), or `None` — none held
/// and none granted (the window is nearly full, or requests wait for room): the request then asks
/// for its admission one by one, which waits.
/// Spending one asks for the next batch in the background when what is left runs low; a request
/// finding none asks for a batch and waits for it (one batch asked at a time per key: a request
/// finding one asked for already waits for it), and asks again while batches come whole — all
/// within [`PERMITS_TIMEOUT_MS`]; after a batch that came short (the window is nearly full, or
/// requests wait for room) it asks one by one. An object that does not answer admits the request
/// (logged), as an `acquire` it does not answer does: a limit must not take the service down, and
/// a busy object is not sent one call more per request.
async fn spend_permit(env: &Env, ctx: &Rc<Context>, name: &str, limit: KeyLimit) -> Option<Option<RateWindow>> {
    let rpm = limit.rpm?;
    let now = now_ms();
    let (spent, want) = PERMITS.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() >= MAX_PERMIT_KEYS && !p.contains_key(name) {
            p.retain(|_, permits| !permits.idle(now));
        }
        let permits = p.entry(name.to_string()).or_default();
        let spent = permits.spend(now);
        (spent, permits.want(rpm, now))
    });
    if let Some(window) = spent {
        if let Some(want) = want {
            let (env, name) = (env.clone(), name.to_string());
            ctx.wait_until(async move {
                ask_permits(&env, &name, limit, want).await;
            });
        }
        return Some(window);
    }
    // Spends one if the isolate holds one (a request that found none is counted once, above).
    let spend = || {
        PERMITS.with(|p| {
            let mut p = p.borrow_mut();
            let permits = p.get_mut(name)?;
            let now = now_ms();
            (permits.left(now) > 0).then(|| permits.spend(now)).flatten()
        })
    };
    let mut want = want;
    while now_ms() < now.saturating_add(PERMITS_TIMEOUT_MS) {
        match want {
            Some(asked) => match ask_permits(env, name, limit, asked).await {
                None => return Some(None),
                Some(granted) if granted < asked => return spend(),
                Some(_) => {}
            },
            None => sleep(5).await,
        }
        if let Some(window) = spend() {
            return Some(window);
        }
        want = PERMITS.with(|p| {
            p.borrow_mut()
                .get_mut(name)
                .and_then(|permits| permits.want(rpm, now_ms()))
        });
    }
    None
}

/// One batch of permits asked for (marked asked by `Permits::want`): how many came (`None`: the
/// object did not answer).
async fn ask_permits(env: &Env, name: &str, limit: KeyLimit, want: u32) -> Option<u32> {
    let call = KeyCall::Permits { want, limit };
    let reply = object::call::<_, PermitReply>(env, "LIMITS", name, "/", &call, PERMITS_TIMEOUT_MS, None).await;
    if let Err(why) = &reply {
        worker::console_error!(
            "{{\"event\":\"limit_object_unavailable\",\"object\":{name:?},\"why\":\"{why}\",\"fallback\":\"admit\"}}"
        );
    }
    PERMITS.with(|p| {
        if let Some(permits) = p.borrow_mut().get_mut(name) {
            permits.got(want, reply.as_ref().ok(), now_ms());
        }
    });
    reply.ok().map(|r| r.granted)
}

/// What a key uses now (`/v1/credits`), summed over its objects; `None` for a key without
/// limits or when an object is unreachable.
pub async fn key_usage(env: &Env, key: &KeyRecord) -> Option<KeyUsage> {
    let limit = key_limit(key);
    if !limit.any() {
        return None;
    }
    let shards = key_shards(limit);
    let names = (0..shards).map(|shard| key_object(key, shard, shards));
    let mut all = KeyUsage::default();
    for part in ask_all::<KeyUsage>(env, names, "/", &KeyCall::Usage).await? {
        all.requests_in_window += part.requests_in_window;
        all.in_flight += part.in_flight;
        all.queued += part.queued;
    }
    Some(all)
}

/// Every limit object `names` answering `call` at `path` (a report, 1 s each, concurrently);
/// `None` when one did not.
async fn ask_all<T: DeserializeOwned>(
    env: &Env,
    names: impl Iterator<Item = String>,
    path: &str,
    call: &impl Serialize,
) -> Option<Vec<T>> {
    let names: Vec<String> = names.collect();
    let asks = names
        .iter()
        .map(|name| object::call::<_, T>(env, "LIMITS", name, path, call, 1_000, None));
    futures_util::future::join_all(asks)
        .await
        .into_iter()
        .collect::<Result<_, _>>()
        .ok()
}

/// Object `shard` of those keeping `model_id`'s route capacity: `capacity:<shard>:<model>` — the
/// number first, so no model id (which may hold a colon) names another's.
fn capacity_object(model_id: &str, shard: u32) -> String {
    format!("capacity:{shard}:{model_id}")
}

/// How many objects keep `model`'s route capacity (core `capacity_shards`).
fn model_capacity_shards(model: &Model) -> u32 {
    capacity_shards(model.routes.iter().filter_map(|r| r.max_concurrency))
}

/// Whether any route of `model` is capped (only then is capacity asked for).
pub fn capped(model: &Model) -> bool {
    model.routes.iter().any(|r| r.max_concurrency.is_some())
}

/// A granted route: its index, its slot, and how long the request queued for it.
pub struct RouteAdmission {
    pub route: usize,
    pub slot: Slot,
    pub waited_ms: u64,
}

/// Takes a slot on the first of `routes` (indexes, in plan order) with room, queueing up to
/// `wait_ms` when all are full (SPEC §10). Lease `id` names the attempt. A model whose capacity is
/// spread over several objects (core `capacity_shards`) asks the one the id picks at once, then
/// the next one, waiting there.
pub async fn admit_route(
    env: &Env,
    ctx: &Rc<Context>,
    model: &Model,
    routes: &[usize],
    id: &str,
    policy: &Policy,
    wait_ms: u64,
) -> Result<RouteAdmission, ApiError> {
    let wants: Vec<Want> = routes
        .iter()
        .filter_map(|&i| model.routes.get(i))
        .map(|r| Want {
            route: r.id.clone(),
            max: r.max_concurrency,
        })
        .collect();
    let shards = model_capacity_shards(model);
    by_shard(
        id,
        shards,
        wait_ms,
        |e| matches!(e, ApiError::CapacityBusy { .. }),
        |shard, wait| {
            let (name, wants) = (capacity_object(&model.id, shard), shard_wants(&wants, shard, shards));
            take_route(env, ctx, model, routes, id, policy, name, wants, wait)
        },
    )
    .await
}

/// Asks capacity object `name` for a slot on the first of `wants` with room, waiting up to
/// `wait_ms` ([`admit_route`]).
#[allow(clippy::too_many_arguments)]
async fn take_route(
    env: &Env,
    ctx: &Rc<Context>,
    model: &Model,
    routes: &[usize],
    id: &str,
    policy: &Policy,
    name: String,
    wants: Vec<Want>,
    wait_ms: u64,
) -> Result<RouteAdmission, ApiError> {
    let lease = lease_ms(policy);
    let call = CapacityCall::Acquire {
        id: id.to_string(),
        wants,
        lease_ms: lease,
        wait_ms,
    };
    let timeout = wait_ms.saturating_add(CALL_MARGIN_MS);
    let first = RouteAdmission {
        route: routes.first().copied().unwrap_or(0),
        slot: Slot::default(),
        waited_ms: 0,
    };
    match object::call::<_, CapacityReply>(env, "LIMITS", &name, "/capacity", &call, timeout, None).await {
        Ok(CapacityReply {
            admit: CapacityAdmit::Granted { route, capped },
            waited_ms,
        }) => {
            let Some(index) = model.routes.iter().position(|r| r.id == route) else {
                return Ok(first);
            };
            let release = CapacityCall::Release {
                route: route.clone(),
                id: id.to_string(),
            };
            let held = Held {
                route: Some(route),
                id: id.to_string(),
            };
            Ok(RouteAdmission {
                route: index,
                slot: match capped {
                    true => Slot::held(
                        Release::new(env, ctx, "LIMITS", name, "/capacity", &release),
                        held,
                        lease,
                        capacity_renewal,
                    ),
                    false => Slot::default(),
                },
                waited_ms,
            })
        }
        Ok(CapacityReply {
            admit: CapacityAdmit::Refused { retry_after_s },
            ..
        }) => Err(ApiError::CapacityBusy { retry_after_s }),
        Ok(CapacityReply {
            admit: CapacityAdmit::Wait { .. },
            ..
        }) => Err(ApiError::Internal { label: "capacity_wait" }),
        Err(why) => {
            worker::console_error!(
                "{{\"event\":\"capacity_object_unavailable\",\"object\":{name:?},\"why\":\"{why}\",\"fallback\":\"plan_order\"}}"
            );
            Ok(first)
        }
    }
}

/// Each capped route's load for admin health, summed over the model's capacity objects (`None`
/// when the model has no capped route or an object is unreachable).
pub async fn route_loads(
    env: &Env,
    model: &Model,
) -> Option<std::collections::BTreeMap<String, switchyard_core::limits::RouteLoad>> {
    if !capped(model) {
        return None;
    }
    type Loads = std::collections::BTreeMap<String, switchyard_core::limits::RouteLoad>;
    let names = (0..model_capacity_shards(model)).map(|shard| capacity_object(&model.id, shard));
    let mut all = Loads::new();
    for part in ask_all::<Loads>(env, names, "/capacity", &CapacityCall::Report).await? {
        for (route, load) in part {
            let sum = all.entry(route).or_default();
            sum.in_flight += load.in_flight;
            sum.queued += load.queued;
        }
    }
    Some(all)
}
