//! D1: the catalog, accounts, API keys and credits — and the per-isolate caches of what the
//! request path reads (the catalog and key lookups, each at most 5 s stale, SPEC §1–§2).
//!
//! A [`Store`] is one database: the home one (`Store::new`: the catalog, the platform's checks,
//! the directory of accounts) or an account's ledger (`Store::ledger`, core `ledgers`: its
//! balance, holds, ledger, keys and records left in D1). Ledger 0 is the home database. What
//! concerns one account is asked of its ledger; settlements and records name theirs, and are
//! written to it whichever store is asked.
//!
//! Every statement binds its values; no SQL is built from input. Money is integer micro-dollars
//! bound as JS numbers (exact within ±2^53). Writes made through this isolate refresh its caches at
//! once; other isolates see them within the TTL.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use switchyard_core::admin::{NewAccount, NewKey};
use switchyard_core::catalog::Catalog;
use switchyard_core::generation::{AttemptRecord, GenerationRecord};
use switchyard_core::keyrings::CatalogText;
use switchyard_core::keys::UnknownKeys;
use switchyard_core::ApiError;
use switchyard_core::{keyrings, ledgers, records, rollup, settlement};
use wasm_bindgen::JsValue;
use worker::{Context, D1Database, D1PreparedStatement, Env};

use crate::faults::Faults;
use crate::runtime::apart::apart;
use crate::runtime::clock::now_ms;

/// How long an isolate may serve a cached catalog or key lookup.
const CACHE_TTL_MS: u64 = 5_000;
/// A key or the catalog cached this long is read again beside the request that finds it
/// ([`Store::refresh_early`]): one in steady use is not read on a request's path, and no copy is
/// used past [`CACHE_TTL_MS`] (a revoked key still stops within 5 s).
const REFRESH_AFTER_MS: u64 = 4_000;
/// How long a catalog or key this isolate read may still serve while D1 cannot answer (SPEC §18):
/// requests go on for ten minutes of an outage on what was last known, then get 503.
const STALE_MAX_MS: u64 = 10 * 60_000;
/// The longest a D1 read on the request path may take before it counts as D1 being down.
pub const D1_DEADLINE_MS: u64 = 5_000;
/// Beyond a keyring's own D1 deadline, how long an isolate gives it to answer.
const KEYRING_MARGIN_MS: u64 = 500;
/// How long an isolate remembers that a key hash is unknown, and how many it remembers.
const MISS_TTL_MS: u64 = 60_000;
const MISS_CAPACITY: usize = 8_192;

thread_local! {
    /// Whether this isolate has finished a read of a key or the catalog: until then it reads D1
    /// itself ([`Store::through_keyring`]).
    static STARTED: Cell<bool> = const { Cell::new(false) };
    /// The catalog, its stored version and when this isolate fetched it.
    static CATALOG: RefCell<Option<(Rc<Catalog>, i64, u64)>> = const { RefCell::new(None) };
    static KEYS: RefCell<HashMap<String, (Rc<KeyRecord>, u64)>> = RefCell::new(HashMap::new());
    /// The early reads under way ([`Store::refresh_early`]): keys' hashes, and the catalog's.
    static REFRESHING: RefCell<std::collections::HashSet<String>> = RefCell::new(std::collections::HashSet::new());
    /// How many ledgers the deployment has (`LEDGER_SHARDS`), read once per isolate: a var does
    /// not change under a running isolate.
    static LEDGERS: Cell<Option<u8>> = const { Cell::new(None) };
    /// Hashes no active key has, with when that was read: an unknown key (of a shape worth a
    /// lookup) costs one query a minute per isolate, not one per request; a bounded LRU, so a flood
    /// of them keeps it at its size (SPEC §22).
    static MISSES: RefCell<UnknownKeys> = RefCell::new(UnknownKeys::new(MISS_CAPACITY, MISS_TTL_MS));
}

/// An active API key: who it belongs to, the `allow_fallbacks` of the key and its account, and
/// its spend against its limit (as of the cached read, at most 5 s old).
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct KeyRecord {
    pub id: String,
    pub account_id: String,
    #[serde(default)]
    key_fallbacks: Option<f64>,
    #[serde(default)]
    account_fallbacks: Option<f64>,
    #[serde(default)]
    spend_limit_micros: Option<f64>,
    #[serde(default)]
    spent_micros: f64,
    /// SPEC §10 limits (D1 integers arrive as numbers).
    #[serde(default, deserialize_with = "positive_u32")]
    pub rpm: Option<u32>,
    #[serde(default, deserialize_with = "positive_u32")]
    pub max_concurrent: Option<u32>,
    /// The account's ledger (core `ledgers`), as the key names it.
    #[serde(default)]
    pub ledger: u8,
    /// The account's available balance (balance − held) as the key's read found it: the isolate's
    /// balance snapshot for the account, so a key's first request needs no balance read of its own
    /// (`billing::place_hold`).
    #[serde(default)]
    pub available_micros: Option<f64>,
    /// The ledger's settlement counter as the key's read found it (core `desks::Pace`).
    #[serde(default)]
    pub ledger_settled: Option<f64>,
    /// When the key — and that balance — was read (set by [`Store::key_by_hash`]).
    #[serde(skip)]
    pub read_at_ms: u64,
}

/// Each written ledger's settlement counter after a write: (ledger, `settlements_total`).
pub type Paces = Vec<(u8, u64)>;

/// A D1 number as a positive `u32`; null, zero, negative or huge values are no limit.
fn positive_u32<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v: Option<f64> = serde::Deserialize::deserialize(d)?;
    Ok(v.filter(|v| *v >= 1.0 && *v <= f64::from(u32::MAX)).map(|v| v as u32))
}

impl KeyRecord {
    /// The key has spent its limit (SPEC §11: 402 `spend_limit_reached`).
    pub fn spend_limit_reached(&self) -> bool {
        self.spend_limit_micros.is_some_and(|limit| self.spent_micros >= limit)
    }

    /// The key has a spend limit at all (its holds then go through the atomic statement).
    pub fn has_spend_limit(&self) -> bool {
        self.spend_limit_micros.is_some()
    }

    pub fn allow_fallbacks(&self) -> Option<bool> {
        self.key_fallbacks.map(|v| v != 0.0)
    }

    pub fn account_allow_fallbacks(&self) -> Option<bool> {
        self.account_fallbacks.map(|v| v != 0.0)
    }
}

/// An account as the admin API reports it.
#[derive(Debug, Clone, Deserialize)]
pub struct AccountRow {
    pub id: String,
    pub name: Option<String>,
    pub balance_micros: f64,
    pub held_micros: f64,
    pub allow_fallbacks: Option<f64>,
    /// Where its money is kept (core `ledgers`).
    #[serde(default)]
    pub ledger: u8,
}

/// Maps a D1 / runtime failure to the one internal error; the detail goes to the log only
/// (it may contain SQL, never user secrets).
fn internal(label: &'static str) -> impl Fn(worker::Error) -> ApiError {
    move |e| {
        worker::console_error!(
            "{{\"event\":\"store_error\",\"op\":\"{label}\",\"detail\":{:?}}}",
            e.to_string()
        );
        ApiError::Internal { label }
    }
}

/// The statement that adds the totals `select` reads (account, key, model, period, its start,
/// amount, charges, estimated charges) to `ledger_rollup`, into a total already there.
fn add_to_totals(select: &str) -> String {
    format!(
        "INSERT INTO ledger_rollup (account_id, key_id, model, period, period_start, amount_micros, charges, \
         estimated_charges) {select} \
         ON CONFLICT (account_id, key_id, model, period, period_start) DO UPDATE SET \
         amount_micros = amount_micros + excluded.amount_micros, charges = charges + excluded.charges, \
         estimated_charges = estimated_charges + excluded.estimated_charges"
    )
}

/// `items` by the ledger `ledger` says each belongs to, in ledger order.
fn by_ledger<T: Copy>(items: &[T], ledger: impl Fn(&T) -> u8) -> BTreeMap<u8, Vec<T>> {
    let mut groups: BTreeMap<u8, Vec<T>> = BTreeMap::new();
    for item in items {
        groups.entry(ledger(item)).or_default().push(*item);
    }
    groups
}

/// The rows the `i`th statement of a batch changed.
fn changes(results: &[worker::D1Result], i: usize) -> usize {
    results
        .get(i)
        .and_then(|r| r.meta().ok().flatten())
        .and_then(|m| m.changes)
        .unwrap_or(0)
}

fn num(v: i64) -> JsValue {
    JsValue::from_f64(v as f64)
}

fn opt_num<T: Into<f64>>(v: Option<T>) -> JsValue {
    v.map_or(JsValue::NULL, |v| JsValue::from_f64(v.into()))
}

fn opt_bool(v: Option<bool>) -> JsValue {
    v.map_or(JsValue::NULL, |b| JsValue::from_f64(if b { 1.0 } else { 0.0 }))
}

fn opt_str(v: Option<&str>) -> JsValue {
    v.map_or(JsValue::NULL, JsValue::from_str)
}

/// Caches `catalog` unless this isolate already holds a newer version (two admin writes in one
/// isolate may finish out of order); returns what the cache now holds.
fn remember_catalog(catalog: Rc<Catalog>, version: i64, now: u64) -> Rc<Catalog> {
    CATALOG.with(|c| {
        let mut c = c.borrow_mut();
        match c.as_mut() {
            // The same version is the same document: keeping its `Rc` keeps what is cached
            // against it (the status report) across reloads.
            Some((held, held_version, at)) if *held_version >= version => {
                *at = now;
                held.clone()
            }
            _ => {
                *c = Some((catalog.clone(), version, now));
                catalog
            }
        }
    })
}

/// "Unchanged" from a read that named no version this isolate holds: cannot happen.
const UNCHANGED_WITHOUT_COPY: ApiError = ApiError::Internal {
    label: "catalog_unchanged",
};

/// This isolate's copy of the catalog, now as fresh as a read at `now`: the read found the version
/// the copy had (a copy is only ever replaced by a newer one, so it is that version or newer).
fn refreshed_catalog(now: u64) -> Option<Rc<Catalog>> {
    CATALOG.with(|c| {
        let mut c = c.borrow_mut();
        let (held, _, at) = c.as_mut()?;
        *at = now;
        Some(held.clone())
    })
}

/// The catalog a read found and its version; `None` when it is the version `held` (unchanged).
/// No document at another version: none is stored yet (the empty catalog, version 0).
fn parse_catalog(text: CatalogText, held: Option<i64>) -> Result<Option<(Catalog, i64)>, ApiError> {
    let doc = match text.doc {
        Some(doc) => doc,
        None if Some(text.version) == held => return Ok(None),
        None => return Ok(Some((Catalog::empty(), text.version))),
    };
    // The stored document passed validation when written; a failure here means the code's
    // rules changed under it, which is an operator problem, not a client's.
    let catalog = Catalog::load(doc.as_bytes()).map_err(|e| {
        worker::console_error!(
            "{{\"event\":\"stored_catalog_invalid\",\"detail\":{:?}}}",
            e.to_string()
        );
        ApiError::Internal {
            label: "catalog_invalid",
        }
    })?;
    Ok(Some((catalog, text.version)))
}

/// This isolate's copy of the key `hash` if read less than `max_age` ago.
fn cached_key(hash: &str, max_age: u64, now: u64) -> Option<Rc<KeyRecord>> {
    KEYS.with(|k| {
        k.borrow()
            .get(hash)
            .filter(|(_, at)| now.saturating_sub(*at) < max_age)
            .map(|(r, _)| r.clone())
    })
}

/// Whether a copy read at `at` is due for its early read at `now`: older than
/// [`REFRESH_AFTER_MS`], still served (younger than [`CACHE_TTL_MS`]), and `flight` — the key's
/// hash, or the catalog's name — not being read already (marked under way when due).
fn refresh_due(at: Option<u64>, now: u64, flight: &str) -> bool {
    let due = at.is_some_and(|at| (REFRESH_AFTER_MS..CACHE_TTL_MS).contains(&now.saturating_sub(at)));
    due && REFRESHING.with(|r| {
        let mut r = r.borrow_mut();
        // Bounded: a read whose task the runtime dropped never takes its name out.
        if r.len() >= 4096 {
            r.clear();
        }
        r.insert(flight.to_string())
    })
}

/// The name of the catalog's early read among the keys' (no hash is this short).
const CATALOG_FLIGHT: &str = "catalog";

/// The version of `catalog`, when it is this isolate's copy (0 otherwise: any report will do).
pub fn catalog_version(catalog: &Rc<Catalog>) -> i64 {
    CATALOG.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(held, _, _)| Rc::ptr_eq(held, catalog))
            .map_or(0, |(_, version, _)| *version)
    })
}

pub struct Store {
    db: D1Database,
    /// Which database `db` is: 0 is the home one (core `ledgers`).
    ledger: u8,
    /// How many ledgers the deployment has (`LEDGER_SHARDS`).
    ledgers: u8,
    env: Env,
    /// The drills that make D1 fail (`crate::faults`; inert in production).
    faults: Faults,
}

/// A D1 call within [`D1_DEADLINE_MS`] — every read on the request path and every write on the
/// money path: an error or no answer in time is D1 being out of reach (`storage_unavailable`,
/// logged with `label`), never a 500 and never a wait past the deadline (SPEC §22). A write that
/// missed it may still be applied later; every money write is idempotent for that reason.
async fn timely<T>(
    fut: impl std::future::Future<Output = worker::Result<T>>,
    label: &'static str,
) -> Result<T, ApiError> {
    use futures_util::future::{select, Either};
    let fut = std::pin::pin!(fut);
    let late = std::pin::pin!(crate::runtime::clock::sleep(D1_DEADLINE_MS));
    match select(fut, late).await {
        Either::Left((Ok(v), _)) => Ok(v),
        Either::Left((Err(e), _)) => {
            worker::console_error!(
                "{{\"event\":\"store_error\",\"op\":\"{label}\",\"detail\":{:?}}}",
                e.to_string()
            );
            Err(ApiError::StorageUnavailable)
        }
        Either::Right(_) => {
            worker::console_error!("{{\"event\":\"store_timeout\",\"op\":\"{label}\"}}");
            Err(ApiError::StorageUnavailable)
        }
    }
}

/// `fut`, begun `delay_ms` later: how the `d1-slow-` drill slows a statement
/// (`Faults::d1_statement`; 0 outside it).
async fn after<T>(delay_ms: u64, fut: impl std::future::Future<Output = T>) -> T {
    if delay_ms > 0 {
        crate::runtime::clock::sleep(delay_ms).await;
    }
    fut.await
}

/// One verification check, as the platform ledger records it.
pub struct CheckEntry<'a> {
    pub model: &'a str,
    pub route: &'a str,
    pub provider: &'a str,
    pub kind: &'a str,
    pub passed: bool,
    pub reason: &'a str,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_micros: i64,
    pub duration_ms: u64,
}

#[derive(Deserialize)]
struct CatalogRow {
    /// NULL when the reader already holds this version.
    doc: Option<String>,
    version: f64,
}

impl Store {
    /// The home database (ledger 0).
    pub fn new(env: &Env) -> Result<Store, ApiError> {
        let ledgers = LEDGERS.with(|n| match n.get() {
            Some(n) => n,
            None => {
                let count = ledgers::count(env.var("LEDGER_SHARDS").ok().map(|v| v.to_string()).as_deref());
                n.set(Some(count));
                count
            }
        });
        env.d1(&ledgers::binding(0))
            .map(|db| Store {
                db,
                ledger: 0,
                ledgers,
                env: env.clone(),
                faults: Faults::of(env),
            })
            .map_err(internal("d1_binding"))
    }

    /// The database of ledger `ledger`, with this store's drills. A ledger the deployment does
    /// not have (or whose binding is missing) is an internal error: nothing should name one.
    pub fn ledger(&self, ledger: u8) -> Result<Store, ApiError> {
        if !self.has_ledger(ledger) {
            return Err(ApiError::Internal {
                label: "ledger_unknown",
            });
        }
        let db = self
            .env
            .d1(&ledgers::binding(ledger))
            .map_err(internal("ledger_binding"))?;
        Ok(Store {
            db,
            ledger,
            ledgers: self.ledgers,
            env: self.env.clone(),
            faults: self.faults,
        })
    }

    /// Every ledger's database, for the jobs that go through them all (sweep, retention).
    pub fn ledgers(&self) -> Result<Vec<Store>, ApiError> {
        (0..self.ledgers).map(|n| self.ledger(n)).collect()
    }

    /// Whether the deployment has ledger `ledger` (a key may name one it does not: refused).
    pub fn has_ledger(&self, ledger: u8) -> bool {
        ledger < self.ledgers
    }

    /// The same store, failing as `faults` asks (the request's `d1-down` drill: its catalog and
    /// key reads find D1 down).
    pub fn with_faults(mut self, faults: Faults) -> Store {
        self.faults = faults;
        self
    }

    /// A batch of money statements for `accounts`, within the deadline (see [`timely`]), slowed
    /// or failed by the D1 drills (`Faults::d1_statement`).
    async fn money_batch<'a>(
        &self,
        accounts: impl IntoIterator<Item = &'a str>,
        statements: Vec<D1PreparedStatement>,
        label: &'static str,
    ) -> Result<Vec<worker::D1Result>, ApiError> {
        let mut slow = 0;
        for account in accounts {
            slow = slow.max(self.faults.d1_statement(account)?);
        }
        let delay = slow.saturating_mul(statements.len() as u64);
        timely(after(delay, self.db.batch(statements)), label).await
    }

    /// Every statement is prepared here, and counted (`crate::calls`).
    fn stmt(&self, sql: &str, args: &[JsValue]) -> Result<D1PreparedStatement, ApiError> {
        crate::calls::d1();
        self.db.prepare(sql).bind(args).map_err(internal("bind"))
    }

    // ---- catalog ------------------------------------------------------------------------------

    /// The catalog for the request path: this isolate's copy if younger than 5 s, else D1's — and
    /// while D1 cannot answer, the copy it last read for up to [`STALE_MAX_MS`] (SPEC §18).
    pub async fn catalog(&self) -> Result<Rc<Catalog>, ApiError> {
        let now = now_ms();
        let cached = |max_age: u64| {
            CATALOG.with(|c| {
                c.borrow()
                    .as_ref()
                    .filter(|(_, _, at)| now.saturating_sub(*at) < max_age)
                    .map(|(c, _, _)| c.clone())
            })
        };
        if let Some(c) = cached(CACHE_TTL_MS) {
            return Ok(c);
        }
        match self.reload_catalog(now).await {
            Err(ApiError::StorageUnavailable) => cached(STALE_MAX_MS)
                .inspect(|_| worker::console_log!("{{\"event\":\"stale_catalog_served\"}}"))
                .ok_or(ApiError::StorageUnavailable),
            read => read,
        }
    }

    /// Reads the catalog into this isolate's copy (through its keyring, `crate::keyring`), dated
    /// when D1 was read. The copy's version goes with the read: an unchanged catalog is neither
    /// sent nor parsed again (every 5 s per isolate, a whole catalog's validation was on some
    /// request's path).
    async fn reload_catalog(&self, now: u64) -> Result<Rc<Catalog>, ApiError> {
        let held = CATALOG.with(|c| c.borrow().as_ref().map(|(_, version, _)| *version));
        let (text, read_at) = self.catalog_through_keyring(held, now).await?;
        match parse_catalog(text, held)? {
            Some((catalog, version)) => Ok(remember_catalog(Rc::new(catalog), version, read_at)),
            None => refreshed_catalog(read_at).ok_or(UNCHANGED_WITHOUT_COPY),
        }
    }

    /// The stored catalog and its version (0 before the first `PUT /admin/catalog`), read from D1.
    pub async fn load_catalog(&self) -> Result<(Catalog, i64), ApiError> {
        parse_catalog(self.catalog_text(None).await?, None)?.ok_or(UNCHANGED_WITHOUT_COPY)
    }

    /// The catalog as this isolate's catalog keyring has it, and when D1 was read — or, when the
    /// keyring is out of reach, as D1 has it now (`now`).
    async fn catalog_through_keyring(&self, held: Option<i64>, now: u64) -> Result<(CatalogText, u64), ApiError> {
        let ring = keyrings::catalog_ring(crate::runtime::ids::isolate_seed());
        let call = keyrings::Call::Catalog { held };
        match self
            .through_keyring(ring, &call, now, || async { self.catalog_text(held).await.map(Some) })
            .await?
        {
            (Some(text), read_at) => Ok((text, read_at)),
            (None, _) => Err(ApiError::StorageUnavailable), // a keyring's answer always has one
        }
    }

    /// `call` to keyring `n` (`crate::keyring`): what its D1 read found, and when D1 was read. When
    /// the keyring is out of reach, and for a new isolate's first reads, `direct()` — this
    /// isolate's own D1 read — dated `now`; when the keyring's read failed or ran as late as D1's
    /// deadline, `StorageUnavailable` (the caller's fallbacks apply, as for D1).
    async fn through_keyring<R, F>(
        &self,
        n: u32,
        call: &keyrings::Call,
        now: u64,
        direct: impl FnOnce() -> F,
    ) -> Result<(Option<R>, u64), ApiError>
    where
        R: serde::de::DeserializeOwned,
        F: std::future::Future<Output = Result<Option<R>, ApiError>>,
    {
        if self.faults.d1_down() {
            // The drill: D1 is out of reach, for this request's keyring too.
            return Err(ApiError::StorageUnavailable);
        }
        if !STARTED.with(Cell::get) {
            // A new isolate's first reads (its first request's key and catalog, side by side) go
            // straight to D1: its start waits for one round trip, not for a keyring's start too.
            // At most two reads per isolate started.
            let read = direct().await.map(|found| (found, now));
            STARTED.with(|s| s.set(true));
            return read;
        }
        // A new isolate's first request does not compile the keyring call (`runtime::apart`).
        match apart(self.ask_keyring::<keyrings::Answer<R>>(n, call, D1_DEADLINE_MS + KEYRING_MARGIN_MS)).await {
            Ok(answer) if answer.unavailable => Err(ApiError::StorageUnavailable),
            Ok(answer) => Ok((answer.found, answer.read_at_ms)),
            Err("timeout") => Err(ApiError::StorageUnavailable),
            Err(_) => direct().await.map(|found| (found, now)),
        }
    }

    /// One call to keyring `n`, at most `timeout_ms`.
    async fn ask_keyring<T: serde::de::DeserializeOwned>(
        &self,
        n: u32,
        call: &keyrings::Call,
        timeout_ms: u64,
    ) -> Result<T, &'static str> {
        crate::object::call(&self.env, "KEYS", &keyrings::name(n), "/", call, timeout_ms, None).await
    }

    /// The stored catalog's version and document (the document left out when its version is
    /// `held`), read from D1 (by a keyring, the admin, or an isolate its keyring did not answer).
    pub async fn catalog_text(&self, held: Option<i64>) -> Result<CatalogText, ApiError> {
        if self.faults.d1_down() {
            return Err(ApiError::StorageUnavailable);
        }
        let held = held.map_or(JsValue::NULL, num);
        let row: Option<CatalogRow> = timely(
            self.stmt(
                "SELECT version, CASE WHEN version = ?1 THEN NULL ELSE doc END AS doc FROM catalog WHERE id = 1",
                &[held],
            )?
            .first(None),
            "catalog_read",
        )
        .await?;
        Ok(match row {
            None => CatalogText { version: 0, doc: None },
            Some(CatalogRow { doc, version }) => CatalogText {
                version: version as i64,
                doc,
            },
        })
    }

    /// Writes a validated catalog if the stored version is still `expected` (compare-and-swap);
    /// `false` when another writer got there first.
    pub async fn save_catalog(&self, catalog: Catalog, expected: Option<i64>) -> Result<bool, ApiError> {
        let doc = serde_json::to_string(catalog.doc()).map_err(|_| ApiError::Internal {
            label: "catalog_encode",
        })?;
        let now = num(now_ms() as i64);
        let stmt = match expected {
            None => self.stmt(
                "INSERT INTO catalog (id, doc, version, updated_at) VALUES (1, ?1, 1, ?2) \
                 ON CONFLICT(id) DO UPDATE SET doc = excluded.doc, version = catalog.version + 1, updated_at = excluded.updated_at \
                 RETURNING version",
                &[JsValue::from_str(&doc), now],
            )?,
            Some(0) => self.stmt(
                "INSERT INTO catalog (id, doc, version, updated_at) VALUES (1, ?1, 1, ?2) ON CONFLICT(id) DO NOTHING RETURNING version",
                &[JsValue::from_str(&doc), now],
            )?,
            Some(v) => self.stmt(
                "UPDATE catalog SET doc = ?1, version = version + 1, updated_at = ?2 WHERE id = 1 AND version = ?3 RETURNING version",
                &[JsValue::from_str(&doc), now, num(v)],
            )?,
        };
        let version: Option<f64> = stmt.first(Some("version")).await.map_err(internal("catalog_write"))?;
        match version {
            Some(v) => {
                remember_catalog(Rc::new(catalog), v as i64, now_ms());
                Ok(true)
            }
            None => Ok(false),
        }
    }

    // ---- accounts -----------------------------------------------------------------------------

    /// The ledger the home directory places account `id` on; `None` for no such account.
    pub async fn account_ledger(&self, id: &str) -> Result<Option<u8>, ApiError> {
        let ledger: Option<f64> = self
            .stmt(
                "SELECT ledger FROM account_ledgers WHERE account_id = ?1",
                &[JsValue::from_str(id)],
            )?
            .first(Some("ledger"))
            .await
            .map_err(internal("account_ledger_read"))?;
        Ok(ledger.map(|l| l as u8))
    }

    /// The store of account `id`'s ledger; `None` for no such account.
    async fn account_store(&self, id: &str) -> Result<Option<Store>, ApiError> {
        match self.account_ledger(id).await? {
            Some(ledger) => self.ledger(ledger).map(Some),
            None => Ok(None),
        }
    }

    /// Creates an account; `false` if the id is taken. Placed first (core `ledgers::place`, written
    /// to the home directory once: a retry or a race finds the place already written), then created
    /// in its ledger.
    pub async fn create_account(&self, id: &str, new: &NewAccount) -> Result<bool, ApiError> {
        let place = ledgers::place(id, self.ledgers);
        self.stmt(
            "INSERT INTO account_ledgers (account_id, ledger) VALUES (?1, ?2) ON CONFLICT(account_id) DO NOTHING",
            &[JsValue::from_str(id), num(i64::from(place))],
        )?
        .run()
        .await
        .map_err(internal("account_place"))?;
        let Some(ledger) = self.account_store(id).await? else {
            return Err(ApiError::Internal {
                label: "account_unplaced",
            });
        };
        let result = ledger
            .stmt(
                "INSERT INTO accounts (id, name, allow_fallbacks, created_at) VALUES (?1, ?2, ?3, ?4) ON CONFLICT(id) DO NOTHING",
                &[JsValue::from_str(id), opt_str(new.name.as_deref()), opt_bool(new.allow_fallbacks), num(now_ms() as i64)],
            )?
            .run()
            .await
            .map_err(internal("account_create"))?;
        Ok(result.meta().ok().flatten().and_then(|m| m.changes).unwrap_or(0) > 0)
    }

    /// Account `id` as its ledger has it (asked of the home store: the directory says where).
    pub async fn account(&self, id: &str) -> Result<Option<AccountRow>, ApiError> {
        let Some(ledger) = self.account_store(id).await? else {
            return Ok(None);
        };
        let row: Option<AccountRow> = ledger
            .stmt(
                "SELECT id, name, balance_micros, held_micros, allow_fallbacks FROM accounts WHERE id = ?1",
                &[JsValue::from_str(id)],
            )?
            .first(None)
            .await
            .map_err(internal("account_read"))?;
        Ok(row.map(|a| AccountRow {
            ledger: ledger.ledger,
            ..a
        }))
    }

    /// Adds credit and its ledger row in one batch, in the account's ledger; `false` if the
    /// account does not exist.
    pub async fn credit(&self, account_id: &str, micros: i64) -> Result<bool, ApiError> {
        let Some(account) = self.account(account_id).await? else {
            return Ok(false);
        };
        let ledger = self.ledger(account.ledger)?;
        let id = JsValue::from_str(account_id);
        let now = num(now_ms() as i64);
        let statements = vec![
            ledger.stmt(
                "UPDATE accounts SET balance_micros = balance_micros + ?2, credits_total_micros = credits_total_micros + ?2 \
                 WHERE id = ?1",
                &[id.clone(), num(micros)],
            )?,
            ledger.stmt(
                "INSERT INTO ledger (account_id, kind, amount_micros, created_at) VALUES (?1, 'credit', ?2, ?3)",
                &[id, num(micros), now],
            )?,
        ];
        timely(ledger.db.batch(statements), "credit").await?;
        Ok(true)
    }

    // ---- keys ---------------------------------------------------------------------------------

    /// Creates a key in this store — the account's ledger (`Store::ledger`).
    pub async fn create_key(&self, id: &str, hash: &str, new: &NewKey) -> Result<(), ApiError> {
        self.stmt(
            "INSERT INTO api_keys (id, account_id, key_hash, name, rpm, max_concurrent, spend_limit_micros, allow_fallbacks, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            &[
                JsValue::from_str(id),
                JsValue::from_str(&new.account_id),
                JsValue::from_str(hash),
                opt_str(new.name.as_deref()),
                opt_num(new.rpm),
                opt_num(new.max_concurrent),
                new.spend_limit_micros.map_or(JsValue::NULL, num),
                opt_bool(new.allow_fallbacks),
                num(now_ms() as i64),
            ],
        )?
        .run()
        .await
        .map_err(internal("key_create"))?;
        MISSES.with(|m| m.borrow_mut().forget(hash));
        Ok(())
    }

    /// Revokes a key, in whichever ledger has it; `false` if there was no active key with that id.
    /// This isolate forgets it at once; other isolates within the 5 s cache TTL.
    pub async fn revoke_key(&self, id: &str) -> Result<bool, ApiError> {
        #[derive(Deserialize)]
        struct Revoked {
            key_hash: String,
        }
        let mut hashes = Vec::new();
        for ledger in self.ledgers()? {
            let rows = ledger
                .stmt(
                    "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL RETURNING key_hash",
                    &[JsValue::from_str(id), num(now_ms() as i64)],
                )?
                .all()
                .await
                .map_err(internal("key_revoke"))?;
            hashes.extend(rows.results::<Revoked>().map_err(internal("key_revoke"))?);
        }
        KEYS.with(|k| k.borrow_mut().retain(|_, (rec, _)| rec.id != id));
        // Its keyrings forget it too (a copy up to 2 s old there would still show it active); one
        // that cannot be told drops its copy within 2 s anyway.
        for Revoked { key_hash } in &hashes {
            let call = keyrings::Call::Forget { hash: key_hash.clone() };
            let forgotten = keyrings::rings(key_hash)
                .into_iter()
                .map(|n| self.ask_keyring::<bool>(n, &call, KEYRING_MARGIN_MS * 4));
            futures_util::future::join_all(forgotten).await;
        }
        Ok(!hashes.is_empty())
    }

    /// Adds a settled charge to this isolate's cached copy of the key, so its spend limit bites
    /// at once here (other isolates see it within the 5 s cache TTL).
    pub fn note_spend(key_id: &str, micros: i64) {
        KEYS.with(|k| {
            for (rec, _) in k.borrow_mut().values_mut() {
                if rec.id == key_id {
                    Rc::make_mut(rec).spent_micros += micros as f64;
                }
            }
        });
    }

    /// The active key with this hash, looked up in `ledger` (the one the key names). Found keys are
    /// cached for 5 s; unknown ones for a minute (a new key's hash was never looked up before, so
    /// it still works at once). A ledger the deployment does not have holds no key: no lookup.
    pub async fn key_by_hash(&self, hash: &str, ledger: u8) -> Result<Option<Rc<KeyRecord>>, ApiError> {
        let now = now_ms();
        if !self.has_ledger(ledger) || MISSES.with(|m| m.borrow_mut().known_unknown(hash, now)) {
            return Ok(None);
        }
        if let Some(rec) = cached_key(hash, CACHE_TTL_MS, now) {
            return Ok(Some(rec));
        }
        match self.read_key(hash, ledger).await {
            // D1 out of reach: the key as this isolate last read it, for a bounded time (SPEC §18).
            Err(ApiError::StorageUnavailable) => cached_key(hash, STALE_MAX_MS, now)
                .map(Some)
                .ok_or(ApiError::StorageUnavailable),
            read => read,
        }
    }

    /// Reads the key `hash` (in `ledger`) and the catalog again beside this request
    /// (`ctx.wait_until`) when this isolate's copy of either is due ([`REFRESH_AFTER_MS`]): a key
    /// and a catalog in steady use are then never read on a request's path. One early read of
    /// each at a time; a failed one leaves the copy to expire as before.
    pub fn refresh_early(&self, ctx: &Context, hash: &str, ledger: u8) {
        let now = now_ms();
        let key_at = KEYS.with(|k| k.borrow().get(hash).map(|(_, at)| *at));
        let catalog_at = CATALOG.with(|c| c.borrow().as_ref().map(|(_, _, at)| *at));
        let key = refresh_due(key_at, now, hash);
        let catalog = refresh_due(catalog_at, now, CATALOG_FLIGHT);
        if !key && !catalog {
            return;
        }
        let (env, faults, hash) = (self.env.clone(), self.faults, hash.to_string());
        ctx.wait_until(async move {
            if let Ok(store) = Store::new(&env).map(|s| s.with_faults(faults)) {
                if key {
                    let _ = store.read_key(&hash, ledger).await;
                }
                if catalog {
                    let _ = store.reload_catalog(now_ms()).await;
                }
            }
            REFRESHING.with(|r| {
                let mut r = r.borrow_mut();
                if key {
                    r.remove(&hash);
                }
                if catalog {
                    r.remove(CATALOG_FLIGHT);
                }
            });
        });
    }

    /// Reads the key `hash` (in `ledger`) into this isolate's cache (an unknown one into its
    /// negative cache): from the key's keyring (`crate::keyring`), or from the ledger itself when
    /// the keyring is out of reach. The copy's age counts from when D1 was read.
    async fn read_key(&self, hash: &str, ledger: u8) -> Result<Option<Rc<KeyRecord>>, ApiError> {
        let ring = keyrings::ring(hash, crate::runtime::ids::isolate_seed());
        let call = keyrings::Call::Read {
            hash: hash.to_string(),
            ledger,
        };
        let fresh = self
            .through_keyring(ring, &call, now_ms(), || self.read_key_row(hash, ledger))
            .await;
        let (rec, now) = fresh?;
        let rec = rec.map(|r| KeyRecord { read_at_ms: now, ..r });
        KEYS.with(|k| {
            let mut k = k.borrow_mut();
            // Bound the cache: expired entries go first, and it never grows past a few thousand.
            if k.len() > 4096 {
                k.retain(|_, (_, at)| now.saturating_sub(*at) < STALE_MAX_MS);
            }
            match &rec {
                Some(r) => {
                    k.insert(hash.to_string(), (Rc::new(r.clone()), now));
                }
                None => {
                    k.remove(hash);
                }
            }
        });
        if rec.is_none() {
            crate::calls::count_only("D1.key_unknown");
            MISSES.with(|m| m.borrow_mut().remember(hash, now));
        }
        Ok(rec.map(Rc::new))
    }

    /// The active key with this hash in `ledger`, read from D1 (by the key's keyring, or by an
    /// isolate its keyring did not answer): its record, the account's available balance and the
    /// ledger's settlement counter in one statement. Nothing cached here.
    pub async fn read_key_row(&self, hash: &str, ledger: u8) -> Result<Option<KeyRecord>, ApiError> {
        let query = self.ledger(ledger)?.stmt(
            "SELECT k.id AS id, k.account_id AS account_id, k.allow_fallbacks AS key_fallbacks, \
             a.allow_fallbacks AS account_fallbacks, k.spend_limit_micros AS spend_limit_micros, \
             k.spent_micros AS spent_micros, k.rpm AS rpm, k.max_concurrent AS max_concurrent, \
             a.balance_micros - a.held_micros AS available_micros, \
             (SELECT settlements_total FROM ledger_pace WHERE id = 0) AS ledger_settled \
             FROM api_keys k JOIN accounts a ON a.id = k.account_id \
             WHERE k.key_hash = ?1 AND k.revoked_at IS NULL",
            &[JsValue::from_str(hash)],
        )?;
        crate::calls::count_only("D1.key");
        let faults = self.faults;
        let read = async move {
            let rec = query.first::<KeyRecord>(None).await?;
            // The read takes the account's balance too: the account's D1 drills slow or fail
            // it as they do the balance read (`Faults::d1_statement`; tests only).
            if let Some(r) = &rec {
                match faults.d1_statement(&r.account_id) {
                    Ok(slow) => after(slow, async {}).await,
                    Err(_) => return Err(worker::Error::RustError("d1_outage_drill".into())),
                }
            }
            Ok(rec)
        };
        timely(read, "key_read")
            .await
            .map(|rec| rec.map(|r| KeyRecord { ledger, ..r }))
    }

    // ---- the platform's own spend --------------------------------------------------------------

    /// Books one verification check to the platform ledger (SPEC §8a), never to a customer.
    pub async fn record_check(&self, c: &CheckEntry<'_>) -> Result<(), ApiError> {
        self.stmt(
            "INSERT INTO platform_ledger (kind, model, route, provider, check_kind, passed, reason, \
             input_tokens, output_tokens, amount_micros, duration_ms, created_at) \
             VALUES ('route_check', ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            &[
                c.model.into(),
                c.route.into(),
                c.provider.into(),
                c.kind.into(),
                num(i64::from(c.passed)),
                c.reason.into(),
                num(c.input_tokens as i64),
                num(c.output_tokens as i64),
                num(c.cost_micros),
                num(c.duration_ms as i64),
                num(now_ms() as i64),
            ],
        )?
        .run()
        .await
        .map_err(internal("platform_ledger"))?;
        Ok(())
    }

    /// A model's latest verification checks on the platform ledger, newest first (admin).
    pub async fn checks(&self, model: &str, limit: u32) -> Result<Vec<serde_json::Value>, ApiError> {
        let rows = self
            .stmt(
                "SELECT route, provider, check_kind AS kind, passed, reason, input_tokens, output_tokens, \
                 amount_micros, duration_ms, created_at FROM platform_ledger WHERE model = ?1 \
                 ORDER BY id DESC LIMIT ?2",
                &[model.into(), num(i64::from(limit))],
            )?
            .all()
            .await
            .map_err(internal("platform_ledger_read"))?;
        rows.results::<serde_json::Value>()
            .map_err(internal("platform_ledger_decode"))
    }

    // ---- generations --------------------------------------------------------------------------

    /// Settles requests in one batch — one transaction: all or none (SPEC §11). Each releases its
    /// hold, charges `g.total_cost_micros` to the account and the key, writes the ledger row and
    /// the generation with its attempts, and deletes the hold (SPEC §22: no row outlives what it
    /// holds). Every money statement is guarded by the hold still being there, and a hold row is
    /// never written again for a generation with a ledger charge or a generation row, so settling
    /// twice — a replay, a duplicate, a reply lost after D1 applied it — charges once; a hold the
    /// sweeper already expired is charged but not released again. `unwritten`: a fast-path hold
    /// not written yet, settled in the same transaction as if written first. These rules are
    /// modelled, and their exactly-once property tested, in `switchyard_core::settlement::Books`.
    pub async fn settle(&self, items: &[(&GenerationRecord, bool, Option<&HoldRow>)]) -> Result<Paces, ApiError> {
        self.settle_as("D1.settle", items).await
    }

    /// [`Store::settle`], counted as `kind` (`crate::calls::d1_settle`): one batch per ledger the
    /// items name, concurrently; an error when any of them failed (each is idempotent: retrying
    /// them all is safe). Returns each written ledger's settlement counter.
    async fn settle_as(
        &self,
        kind: &str,
        items: &[(&GenerationRecord, bool, Option<&HoldRow>)],
    ) -> Result<Paces, ApiError> {
        let writes = by_ledger(items, |(g, _, _)| g.ledger)
            .into_iter()
            .map(|(ledger, items)| async move {
                let items: Vec<_> = items.iter().collect();
                let counter = self.ledger(ledger)?.money_here(kind, &[], &items).await?;
                Ok::<_, ApiError>(counter.map(|c| (ledger, c)))
            });
        let written: Result<Vec<_>, ApiError> = join_all(writes).await.into_iter().collect();
        Ok(written?.into_iter().flatten().collect())
    }

    /// A desk's flush (`crate::desk`): fast holds and settlements, all of this store's ledger, in
    /// one batch; returns the ledger's settlement counter after it.
    pub async fn desk_flush(
        &self,
        holds: &[HoldRow],
        items: &[(&GenerationRecord, bool, Option<&HoldRow>)],
    ) -> Result<Option<u64>, ApiError> {
        let items: Vec<_> = items.iter().collect();
        self.money_here("D1.desk", holds, &items).await
    }

    /// Writes `holds` ([`Store::hold_statements`]) and settles `items`, all of this store's
    /// ledger, in one batch: per round of settlements (core `settlement::rounds`: a generation
    /// settled twice in one batch goes in a second round) the five set statements of
    /// [`Store::settle_round`] and the ledger's counter ([`Store::pace_statement`]), whatever the
    /// round's size — D1's cost is in its statements far more than in their rows (BENCHMARKS.md,
    /// `bench/d1.mjs`). Returns the counter (`None`: no settlement written).
    async fn money_here(
        &self,
        kind: &str,
        holds: &[HoldRow],
        items: &[&(&GenerationRecord, bool, Option<&HoldRow>)],
    ) -> Result<Option<u64>, ApiError> {
        // Settlements without a hold write nothing (an outbox may still keep some).
        let with_hold: Vec<_> = items.iter().copied().filter(|(_, has_hold, _)| *has_hold).collect();
        let mut statements = self.hold_statements(holds)?;
        let rounds = settlement::rounds(&with_hold, |(g, _, _)| g.id.as_str());
        for round in &rounds {
            statements.extend(self.settle_round(round)?);
            statements.push(self.pace_statement(round.len())?);
        }
        if statements.is_empty() {
            // D1 refuses an empty batch.
            return Ok(None);
        }
        if !items.is_empty() {
            let accounts = items.iter().map(|(g, _, _)| g.account_id.as_str());
            crate::calls::d1_settle(kind, accounts, self.faults.instruments());
        }
        let accounts = items
            .iter()
            .map(|(g, _, _)| g.account_id.as_str())
            .chain(holds.iter().map(|h| h.account.as_str()));
        let label = if items.is_empty() { "hold_fast" } else { "settle" };
        let results = self.money_batch(accounts, statements, label).await?;
        if rounds.is_empty() {
            return Ok(None);
        }
        #[derive(Deserialize)]
        struct Counter {
            settlements_total: f64,
        }
        let counter = results
            .last()
            .and_then(|r| r.results::<Counter>().ok())
            .and_then(|rows| rows.first().map(|c| c.settlements_total as u64));
        Ok(counter)
    }

    /// Adds a round of `n` settlements to the ledger's counter (`ledger_pace`, core `desks`) and
    /// reads it back.
    fn pace_statement(&self, n: usize) -> Result<D1PreparedStatement, ApiError> {
        self.stmt(
            "UPDATE ledger_pace SET settlements_total = settlements_total + ?1 WHERE id = 0 \
             RETURNING settlements_total",
            &[num(n as i64)],
        )
    }

    /// The statements of one round of settlements (see [`Store::settle`]; each generation once),
    /// the round's rows as one JSON parameter (`?1`, read by `json_each`). A settlement applies
    /// while its hold row is there, open or expired — or, a fast-path hold not written yet, while
    /// that row could still be written (no charge, `settled` mark nor `generations` row for it,
    /// expired less than [`EXPIRED_KEPT_MS`] ago): it is then settled in the same transaction
    /// without being stored. What applies releases its open hold and charges account and key, and
    /// its charge is booked; every settlement that left no charge is marked `settled`; the round's
    /// hold rows go. The rules are core `settlement::Books::settle`'s.
    fn settle_round(
        &self,
        round: &[&&(&GenerationRecord, bool, Option<&HoldRow>)],
    ) -> Result<Vec<D1PreparedStatement>, ApiError> {
        let rows: Vec<SettleRow> = round
            .iter()
            .map(|(g, _, unwritten)| SettleRow {
                g: &g.id,
                c: g.total_cost_micros,
                a: &g.account_id,
                k: &g.key_id,
                e: u8::from(g.estimated),
                m: &g.model,
                w: u8::from(unwritten.is_some()),
                x: unwritten.map_or(0, |h| h.expires_at),
            })
            .collect();
        let rows = serde_json::to_string(&rows).map_err(|_| ApiError::Internal { label: "settle_encode" })?;
        let args = [JsValue::from_str(&rows), num(now_ms() as i64)];
        let each = "WITH s AS (SELECT json_extract(value, '$.g') AS g, json_extract(value, '$.c') AS c, \
                    json_extract(value, '$.a') AS a, json_extract(value, '$.k') AS k, json_extract(value, '$.e') AS e, \
                    json_extract(value, '$.m') AS m, json_extract(value, '$.w') AS w, json_extract(value, '$.x') AS x \
                    FROM json_each(?1))";
        // What applies, with the open amount it releases.
        let applying = format!(
            "{each}, t AS (SELECT s.*, (SELECT amount_micros FROM holds WHERE generation_id = s.g AND state = 'open') \
             AS released FROM s WHERE EXISTS (SELECT 1 FROM holds WHERE generation_id = s.g AND state IN ('open', 'expired')) \
             OR (s.w = 1 AND NOT EXISTS (SELECT 1 FROM holds WHERE generation_id = s.g) AND {}))",
            may_write_hold("s")
        );
        Ok(vec![
            self.stmt(
                &format!(
                    "{applying} UPDATE accounts SET \
                     held_micros = held_micros - (SELECT COALESCE(SUM(released), 0) FROM t WHERE t.a = accounts.id), \
                     balance_micros = balance_micros - (SELECT SUM(c) FROM t WHERE t.a = accounts.id), \
                     charges_total_micros = charges_total_micros + (SELECT SUM(c) FROM t WHERE t.a = accounts.id) \
                     WHERE id IN (SELECT a FROM t)"
                ),
                &args,
            )?,
            self.stmt(
                &format!(
                    "{applying} UPDATE api_keys SET spent_micros = spent_micros + (SELECT SUM(c) FROM t WHERE t.k = api_keys.id) \
                     WHERE id IN (SELECT k FROM t)"
                ),
                &args,
            )?,
            self.stmt(
                &format!(
                    "{applying} INSERT INTO ledger (account_id, kind, amount_micros, generation_id, key_id, estimated, \
                     created_at, model) SELECT a, 'charge', c, g, k, e, ?2, m FROM t WHERE c > 0"
                ),
                &args,
            )?,
            // What proves it settled once its hold is gone, when no charge does (SPEC §22).
            self.stmt(
                &format!(
                    "{each} INSERT OR IGNORE INTO settled (generation_id, created_at) SELECT g, ?2 FROM s \
                     WHERE NOT EXISTS (SELECT 1 FROM ledger WHERE generation_id = s.g)"
                ),
                &args,
            )?,
            // Last: the holds go with the settlements that charged them.
            self.stmt(
                &format!("{each} DELETE FROM holds WHERE generation_id IN (SELECT g FROM s)"),
                &args[..1],
            )?,
        ])
    }

    /// Writes records to the `generations` table of their ledgers: where a record goes that its
    /// records object would not take (`crate::records`), found there by the same lookup.
    /// `INSERT OR IGNORE`: a record written twice is written once.
    pub async fn keep_generations(&self, records: &[&GenerationRecord]) -> Result<(), ApiError> {
        let writes = by_ledger(records, |g| g.ledger)
            .into_iter()
            .map(|(ledger, records)| async move {
                let store = self.ledger(ledger)?;
                let mut statements = Vec::with_capacity(records.len());
                for g in records {
                    statements.push(store.generation_statement(g)?);
                }
                timely(store.db.batch(statements), "generations_keep").await.map(drop)
            });
        join_all(writes).await.into_iter().collect()
    }

    /// The `generations` row of one record.
    fn generation_statement(&self, g: &GenerationRecord) -> Result<D1PreparedStatement, ApiError> {
        let opt_u = |v: Option<u64>| v.map_or(JsValue::NULL, |n| JsValue::from_f64(n as f64));
        let attempts_json = serde_json::to_string(&g.attempts).map_err(|_| ApiError::Internal {
            label: "attempts_encode",
        })?;
        let server_tools_json = match g.server_tools.is_empty() {
            true => None,
            false => Some(serde_json::to_string(&g.server_tools).map_err(|_| ApiError::Internal {
                label: "server_tools_encode",
            })?),
        };
        self.stmt(
            "INSERT OR IGNORE INTO generations (id, account_id, key_id, model, api, stream, outcome, route, provider, \
             input_tokens, output_tokens, estimated, delivered_output, error_code, total_cost_micros, created_at, duration_ms, \
             hold_path, attempts_json, overrun_micros, cache_read_tokens, cache_write_tokens, cache_write_1h_tokens, \
             usage_clamped, upstream_response_id, server_tools_json) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, \
             ?23, ?24, ?25, ?26)",
            &[
                JsValue::from_str(&g.id),
                JsValue::from_str(&g.account_id),
                JsValue::from_str(&g.key_id),
                JsValue::from_str(&g.model),
                JsValue::from_str(g.api.as_str()),
                opt_bool(Some(g.stream)),
                JsValue::from_str(g.outcome.as_str()),
                opt_str(g.route.as_deref()),
                opt_str(g.provider.as_deref()),
                opt_u(g.usage.map(|u| u.input_tokens)),
                opt_u(g.usage.map(|u| u.output_tokens)),
                opt_bool(Some(g.estimated)),
                num(g.delivered_output as i64),
                opt_str(g.error_code.as_deref()),
                num(g.total_cost_micros),
                num(g.created_at_ms as i64),
                num(g.duration_ms as i64),
                opt_str(g.hold_path.as_deref()),
                JsValue::from_str(&attempts_json),
                num(g.overrun_micros),
                opt_u(g.usage.map(|u| u.cache_read_tokens)),
                opt_u(g.usage.map(|u| u.cache_write_tokens)),
                opt_u(g.usage.map(|u| u.cache_write_1h_tokens)),
                opt_bool(Some(g.usage_clamped)),
                opt_str(g.upstream_response_id.as_deref()),
                opt_str(server_tools_json.as_deref()),
            ],
        )
    }

    // ---- holds --------------------------------------------------------------------------------

    /// The account's available balance (balance − held), fresh from D1, and the ledger's
    /// settlement counter (core `desks::Pace`) read with it.
    pub async fn available(&self, account_id: &str) -> Result<Option<(i64, Option<u64>)>, ApiError> {
        let slow = self.faults.d1_statement(account_id)?;
        let query = self.stmt(
            "SELECT balance_micros - held_micros AS available, \
             (SELECT settlements_total FROM ledger_pace WHERE id = 0) AS settled FROM accounts WHERE id = ?1",
            &[JsValue::from_str(account_id)],
        )?;
        #[derive(Deserialize)]
        struct Balance {
            available: f64,
            settled: Option<f64>,
        }
        let v: Option<Balance> = timely(after(slow, query.first(None)), "balance_read").await?;
        Ok(v.map(|b| (b.available as i64, b.settled.map(|s| s as u64))))
    }

    /// The atomic hold (SPEC §11): adds `amount` to held only if the available balance covers it
    /// and the key's spend limit covers its spend, its open holds and `amount`, and records the
    /// hold, in one transaction. Returns the available balance after the hold, or `None` when it
    /// did not fit.
    pub async fn hold_atomic(&self, h: &HoldRow) -> Result<Option<i64>, ApiError> {
        let statements = vec![
            self.stmt(
                &format!(
                    "UPDATE accounts SET held_micros = held_micros + ?2 WHERE id = ?1 AND balance_micros - held_micros >= ?2 \
                     AND {KEY_HAS_ROOM} RETURNING balance_micros - held_micros AS available"
                ),
                &[JsValue::from_str(&h.account), num(h.amount), JsValue::from_str(&h.key_id)],
            )?,
            // The row, only if the hold fitted.
            self.stmt(
                "INSERT INTO holds (generation_id, account_id, key_id, amount_micros, path, state, created_at, expires_at) \
                 SELECT ?1, ?2, ?3, ?4, 'awaited', 'open', ?5, ?6 WHERE changes() = 1",
                &[
                    JsValue::from_str(&h.generation_id),
                    JsValue::from_str(&h.account),
                    JsValue::from_str(&h.key_id),
                    num(h.amount),
                    num(h.now as i64),
                    num(h.expires_at as i64),
                ],
            )?,
        ];
        let results = self.money_batch([h.account.as_str()], statements, "hold").await?;
        self.faults.hold_reply(&h.account)?; // a drill may lose the answer (tests only)
        #[derive(Deserialize)]
        struct After {
            available: f64,
        }
        let after = results
            .first()
            .map(|r| r.results::<After>())
            .transpose()
            .map_err(internal("hold_decode"))?
            .and_then(|rows| rows.first().map(|a| a.available as i64));
        Ok(after)
    }

    /// Whether the key's spend limit (if any) refused a hold of `amount` — its spend and open holds
    /// leave less room than that.
    pub async fn spend_limit_refuses(&self, key_id: &str, amount: i64) -> Result<bool, ApiError> {
        let query = self.stmt(
            &format!("SELECT CASE WHEN {KEY_HAS_ROOM} THEN 1 ELSE 0 END AS room"),
            &[JsValue::NULL, num(amount), JsValue::from_str(key_id)],
        )?;
        let room: Option<f64> = timely(query.first(Some("room")), "spend_limit_read").await?;
        Ok(room == Some(0.0))
    }

    /// Fast-path holds, admitted already on their isolate's snapshot, so written without the
    /// balance condition (the snapshot rule bounds what this can overspend): per round of them
    /// (core `settlement::rounds`), two set statements over the rows as one JSON parameter — the
    /// account's held amount, then the rows. A row already there, or one [`may_write_hold`]
    /// refuses, is left out of both: written again (a replay) or after its settlement, a hold
    /// changes nothing.
    pub async fn hold_fast(&self, rows: &[HoldRow]) -> Result<(), ApiError> {
        self.money_here("D1.hold_fast", rows, &[]).await.map(drop)
    }

    /// The statements of [`Store::hold_fast`].
    fn hold_statements(&self, rows: &[HoldRow]) -> Result<Vec<D1PreparedStatement>, ApiError> {
        let mut statements = Vec::new();
        for round in settlement::rounds(rows, |h| h.generation_id.as_str()) {
            let json: Vec<HoldJson> = round
                .iter()
                .map(|h| HoldJson {
                    g: &h.generation_id,
                    a: &h.account,
                    k: &h.key_id,
                    n: h.amount,
                    t: h.now,
                    x: h.expires_at,
                })
                .collect();
            let json = serde_json::to_string(&json).map_err(|_| ApiError::Internal { label: "hold_encode" })?;
            let args = [JsValue::from_str(&json), num(now_ms() as i64)];
            let new_rows = format!(
                "WITH h AS (SELECT json_extract(value, '$.g') AS g, json_extract(value, '$.a') AS a, \
                 json_extract(value, '$.k') AS k, json_extract(value, '$.n') AS n, json_extract(value, '$.t') AS t, \
                 json_extract(value, '$.x') AS x FROM json_each(?1)), \
                 w AS (SELECT * FROM h WHERE NOT EXISTS (SELECT 1 FROM holds WHERE generation_id = h.g) AND {})",
                may_write_hold("h")
            );
            statements.push(self.stmt(
                &format!(
                    "{new_rows} UPDATE accounts SET held_micros = held_micros + (SELECT SUM(n) FROM w WHERE w.a = accounts.id) \
                     WHERE id IN (SELECT a FROM w)"
                ),
                &args,
            )?);
            statements.push(self.stmt(
                &format!(
                    "{new_rows} INSERT INTO holds (generation_id, account_id, key_id, amount_micros, path, state, \
                     created_at, expires_at) SELECT g, a, k, n, 'fast', 'open', t, x FROM w"
                ),
                &args,
            )?);
        }
        Ok(statements)
    }

    /// Releases every open hold past its expiry (the cron sweep); returns how many. An expired
    /// hold stays (released, not charged) for its settlement, which may still come from the outbox,
    /// for [`EXPIRED_KEPT_MS`]; then it goes too.
    pub async fn sweep_expired_holds(&self, now_ms: u64) -> Result<usize, ApiError> {
        let now = num(now_ms as i64);
        let forget_before = num(now_ms.saturating_sub(EXPIRED_KEPT_MS) as i64);
        let statements =
            vec![
            self.stmt(
                "UPDATE accounts SET held_micros = held_micros - (SELECT COALESCE(SUM(amount_micros), 0) FROM holds h \
                 WHERE h.account_id = accounts.id AND h.state = 'open' AND h.expires_at < ?1) \
                 WHERE id IN (SELECT account_id FROM holds WHERE state = 'open' AND expires_at < ?1)",
                std::slice::from_ref(&now),
            )?,
            self.stmt("UPDATE holds SET state = 'expired' WHERE state = 'open' AND expires_at < ?1", &[now])?,
            self.stmt(
                "DELETE FROM holds WHERE state = 'expired' AND expires_at < ?1",
                &[forget_before],
            )?,
        ];
        let results = timely(self.db.batch(statements), "sweep").await?;
        Ok(changes(&results, 1))
    }

    /// One retention run of the ledger (SPEC §22, core `rollup`): charges a week old added to
    /// their hour's total per (account, key, model) and deleted — at most about
    /// [`rollup::MAX_CHARGES_PER_RUN`] — then one day of hourly totals five weeks old added to
    /// their day's and deleted. Each step is one transaction: a run cut short or repeated adds
    /// nothing twice. Returns (charges rolled up, hours turned into days).
    pub async fn roll_up_ledger(&self, now_ms: u64) -> Result<(usize, usize), ApiError> {
        let oldest_hour: Option<f64> = timely(
            self.stmt(
                "SELECT MIN(period_start) AS oldest FROM ledger_rollup WHERE period = 'hour'",
                &[],
            )?
            .first(Some("oldest")),
            "rollup_oldest",
        )
        .await?;
        let run = rollup::run(now_ms, oldest_hour.map(|v| v as u64));
        // The run's charges: those before the week's edge, and at most the oldest N of them.
        let nth: Option<f64> = timely(
            self.stmt(
                "SELECT created_at FROM ledger WHERE kind = 'charge' AND created_at < ?1 \
                 ORDER BY created_at LIMIT 1 OFFSET ?2",
                &[
                    num(run.charges_before as i64),
                    num(rollup::MAX_CHARGES_PER_RUN.saturating_sub(1) as i64),
                ],
            )?
            .first(Some("created_at")),
            "rollup_edge",
        )
        .await?;
        let before = nth.map_or(run.charges_before, |t| (t as u64).saturating_add(1));
        let before = num(before as i64);
        let charges = vec![
            self.stmt(
                &add_to_totals(
                    "SELECT l.account_id, COALESCE(l.key_id, ''), \
                     COALESCE(l.model, (SELECT g.model FROM generations g WHERE g.id = l.generation_id), ''), 'hour', \
                     (l.created_at / 3600000) * 3600000, SUM(l.amount_micros), COUNT(*), SUM(l.estimated) \
                     FROM ledger l WHERE l.kind = 'charge' AND l.created_at < ?1 GROUP BY 1, 2, 3, 5",
                ),
                std::slice::from_ref(&before),
            )?,
            self.stmt(
                "DELETE FROM ledger WHERE kind = 'charge' AND created_at < ?1",
                &[before],
            )?,
        ];
        let rolled = changes(&timely(self.db.batch(charges), "rollup_charges").await?, 1);
        let hours_before = num(run.hours_before as i64);
        let hours = vec![
            self.stmt(
                &add_to_totals(
                    "SELECT account_id, key_id, model, 'day', (period_start / 86400000) * 86400000, \
                     SUM(amount_micros), SUM(charges), SUM(estimated_charges) \
                     FROM ledger_rollup WHERE period = 'hour' AND period_start < ?1 GROUP BY 1, 2, 3, 5",
                ),
                std::slice::from_ref(&hours_before),
            )?,
            self.stmt(
                "DELETE FROM ledger_rollup WHERE period = 'hour' AND period_start < ?1",
                &[hours_before],
            )?,
        ];
        let days = changes(&timely(self.db.batch(hours), "rollup_hours").await?, 1);
        Ok((rolled, days))
    }

    /// The rest of the retention run (SPEC §22): `settled` marks as old as the charges the roll-up
    /// takes (their holds expired over a week ago, too old to be written again), and the oldest
    /// `generations` rows — from before records left D1, or records their object would not take —
    /// once [`records::KEPT_DAYS`] old, and the platform's route checks (`platform_ledger`, the home
    /// database's) as old. Each at most [`RETAIN_STEP`] rows a run; the rows looked at are the
    /// oldest by insertion, so a run's work is bounded however large the table. Returns (marks,
    /// generation rows, route checks) deleted.
    pub async fn forget_old(&self, now_ms: u64) -> Result<(usize, usize, usize), ApiError> {
        let marks_before = now_ms.saturating_sub(rollup::RAW_KEPT_MS);
        let records_before = now_ms.saturating_sub(records::KEPT_DAYS * records::DAY_MS);
        let statements = vec![
            self.stmt(
                &format!(
                    "DELETE FROM settled WHERE generation_id IN (SELECT generation_id FROM settled \
                     WHERE created_at < ?1 ORDER BY created_at LIMIT {RETAIN_STEP})"
                ),
                &[num(marks_before as i64)],
            )?,
            self.delete_oldest("generations", "rowid", records_before)?,
            self.delete_oldest("platform_ledger", "id", records_before)?,
        ];
        let results = timely(self.db.batch(statements), "retain").await?;
        Ok((changes(&results, 0), changes(&results, 1), changes(&results, 2)))
    }

    /// Deletes the rows of `table` from before `before_ms` (`created_at`) among its oldest
    /// [`RETAIN_STEP`] by insertion (`order`: its rowid or integer key): a bounded step however
    /// large the table, with no index on the age.
    fn delete_oldest(&self, table: &str, order: &str, before_ms: u64) -> Result<D1PreparedStatement, ApiError> {
        self.stmt(
            &format!(
                "DELETE FROM {table} WHERE {order} IN (SELECT {order} FROM {table} ORDER BY {order} \
                 LIMIT {RETAIN_STEP}) AND created_at < ?1"
            ),
            &[num(before_ms as i64)],
        )
    }

    /// Releases, uncharged, the hold of `generation_id` if D1 has it open: a hold statement whose
    /// reply was lost may still have been applied, and its request ended without it (SPEC §18).
    pub async fn release_lost_hold(&self, generation_id: &str) -> Result<(), ApiError> {
        let id = JsValue::from_str(generation_id);
        let statements = vec![
            self.stmt(
                "UPDATE accounts SET held_micros = held_micros - (SELECT COALESCE(SUM(amount_micros), 0) FROM holds \
                 WHERE generation_id = ?1 AND state = 'open') \
                 WHERE id IN (SELECT account_id FROM holds WHERE generation_id = ?1 AND state = 'open')",
                std::slice::from_ref(&id),
            )?,
            self.stmt("DELETE FROM holds WHERE generation_id = ?1 AND state = 'open'", &[id])?,
        ];
        timely(self.db.batch(statements), "release_lost_hold").await.map(drop)
    }

    /// `GET /v1/credits`: the account's balance and held amount, its ledger totals, the key's
    /// spend and limits.
    pub async fn credits(&self, account_id: &str, key_id: &str) -> Result<Option<CreditsRow>, ApiError> {
        self.stmt(
            "SELECT a.balance_micros AS balance_micros, a.held_micros AS held_micros, k.spent_micros AS spent_micros, \
             k.spend_limit_micros AS spend_limit_micros, k.rpm AS rpm, k.max_concurrent AS max_concurrent, \
             a.credits_total_micros AS credits_micros, a.charges_total_micros AS charges_micros, \
             (SELECT COALESCE(SUM(amount_micros), 0) FROM holds WHERE account_id = a.id AND state = 'open') AS open_holds_micros \
             FROM accounts a JOIN api_keys k ON k.account_id = a.id WHERE a.id = ?1 AND k.id = ?2",
            &[JsValue::from_str(account_id), JsValue::from_str(key_id)],
        )?
        .first(None)
        .await
        .map_err(internal("credits_read"))
    }

    /// The route that produced the Responses answer `response_id` for `account_id` (SPEC §17), if
    /// the `generations` table has its record (`crate::records::pinned_route` asks its pin first).
    pub async fn response_route(&self, account_id: &str, response_id: &str) -> Result<Option<String>, ApiError> {
        let query = self.stmt(
            "SELECT route FROM generations WHERE account_id = ?1 AND upstream_response_id = ?2 \
             AND route IS NOT NULL ORDER BY created_at DESC LIMIT 1",
            &[JsValue::from_str(account_id), JsValue::from_str(response_id)],
        )?;
        timely(query.first::<String>(Some("route")), "response_route").await
    }

    /// A generation with its attempts from the `generations` table, if it belongs to `account_id`
    /// (`crate::records::find` asks its records object first).
    pub async fn generation(
        &self,
        id: &str,
        account_id: &str,
    ) -> Result<Option<(GenerationRow, Vec<AttemptRecord>)>, ApiError> {
        let row: Option<GenerationRow> = self
            .stmt(
                "SELECT id, model, api, outcome, route, provider, input_tokens, output_tokens, cache_read_tokens, \
                 cache_write_tokens, cache_write_1h_tokens, usage_clamped, estimated, delivered_output, \
                 error_code, total_cost_micros, overrun_micros, stream, created_at, duration_ms, hold_path, attempts_json, \
                 server_tools_json \
                 FROM generations \
                 WHERE id = ?1 AND account_id = ?2",
                &[JsValue::from_str(id), JsValue::from_str(account_id)],
            )?
            .first(None)
            .await
            .map_err(internal("generation_read"))?;
        let Some(row) = row else { return Ok(None) };
        let attempts: Vec<AttemptRecord> =
            serde_json::from_str(&row.attempts_json).map_err(|_| ApiError::Internal {
                label: "attempts_decode",
            })?;
        Ok(Some((row, attempts)))
    }
}

impl GenerationRow {
    /// The row a record kept by its records object reads as (`crate::records`): the same fields
    /// `GET /v1/generation` reads from the `generations` table.
    pub fn of(g: &GenerationRecord) -> Result<GenerationRow, ApiError> {
        let encode = |label| move |_| ApiError::Internal { label };
        let opt = |v: Option<u64>| v.map(|n| n as f64);
        let flag = |b: bool| f64::from(u8::from(b));
        Ok(GenerationRow {
            id: g.id.clone(),
            model: g.model.clone(),
            api: g.api.as_str().to_string(),
            outcome: g.outcome.as_str().to_string(),
            route: g.route.clone(),
            provider: g.provider.clone(),
            input_tokens: opt(g.usage.map(|u| u.input_tokens)),
            output_tokens: opt(g.usage.map(|u| u.output_tokens)),
            cache_read_tokens: opt(g.usage.map(|u| u.cache_read_tokens)),
            cache_write_tokens: opt(g.usage.map(|u| u.cache_write_tokens)),
            cache_write_1h_tokens: opt(g.usage.map(|u| u.cache_write_1h_tokens)),
            usage_clamped: flag(g.usage_clamped),
            estimated: flag(g.estimated),
            delivered_output: g.delivered_output as f64,
            error_code: g.error_code.clone(),
            total_cost_micros: g.total_cost_micros as f64,
            overrun_micros: g.overrun_micros as f64,
            stream: flag(g.stream),
            created_at: g.created_at_ms as f64,
            duration_ms: g.duration_ms as f64,
            hold_path: g.hold_path.clone(),
            attempts_json: String::new(), // the attempts are handed over parsed
            server_tools_json: match g.server_tools.is_empty() {
                true => None,
                false => Some(serde_json::to_string(&g.server_tools).map_err(encode("server_tools_encode"))?),
            },
        })
    }
}

/// SQL: key `?3` has room under its spend limit for `?2` more — no limit, or spend plus open holds
/// plus `?2` within it (SPEC §11), decided in the same statement as the balance.
const KEY_HAS_ROOM: &str = "(SELECT k.spend_limit_micros IS NULL OR k.spent_micros + ?2 + COALESCE((SELECT SUM(h.amount_micros) \
     FROM holds h WHERE h.key_id = k.id AND h.state = 'open'), 0) <= k.spend_limit_micros FROM api_keys k WHERE k.id = ?3)";

/// Rows of `settled` and of `generations` one retention run deletes, at most.
const RETAIN_STEP: u32 = 20_000;

/// How long an expired hold waits for its settlement (kept in the outbox while D1 was out of
/// reach) before the sweep deletes it: past this, a settlement still to come charges nothing.
const EXPIRED_KEPT_MS: u64 = 7 * 24 * 3_600_000;

/// A hold to write: who, how much, and until when.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HoldRow {
    pub account: String,
    pub key_id: String,
    pub generation_id: String,
    pub amount: i64,
    pub now: u64,
    pub expires_at: u64,
}

/// Whether the fast hold of row `r` (a set statement's JSON row: generation `g`, expiry `x`;
/// `?2` is now) may be written: never for a generation already settled — its charge in the ledger
/// or its `settled` mark proves it (a `generations` row, for settlements from before records left
/// D1) — nor once it expired more than [`EXPIRED_KEPT_MS`] ago, when those proofs may be rolled
/// up (SPEC §22, core `settlement::Books::write_fast_hold`).
fn may_write_hold(r: &str) -> String {
    format!(
        "NOT EXISTS (SELECT 1 FROM ledger WHERE generation_id = {r}.g) \
         AND NOT EXISTS (SELECT 1 FROM settled WHERE generation_id = {r}.g) \
         AND NOT EXISTS (SELECT 1 FROM generations WHERE id = {r}.g) AND {r}.x + {EXPIRED_KEPT_MS} > ?2"
    )
}

/// One fast hold as a row of its round's JSON parameter ([`Store::hold_fast`]): generation,
/// account, key, amount, placed at, expiry.
#[derive(Serialize)]
struct HoldJson<'a> {
    g: &'a str,
    a: &'a str,
    k: &'a str,
    n: i64,
    t: u64,
    x: u64,
}

/// One settlement as a row of its round's JSON parameter ([`Store::settle_round`]): generation,
/// charge, account, key, estimated, model, whether its fast hold is unwritten, and that hold's
/// expiry.
#[derive(Serialize)]
struct SettleRow<'a> {
    g: &'a str,
    c: i64,
    a: &'a str,
    k: &'a str,
    e: u8,
    m: &'a str,
    w: u8,
    x: u64,
}

/// A settlement: the generation, whether it releases a hold, and a fast-path hold row to write
/// first (not written yet, or its write failed). Kept by the outbox when D1 refuses it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settlement {
    /// The shape it was written in ([`SETTLEMENT_VERSION`]); 0 for records from before it had
    /// one. Fields added later default, so a record kept across a deploy still reads (SPEC §18).
    #[serde(default)]
    pub version: u32,
    pub record: GenerationRecord,
    #[serde(default)]
    pub has_hold: bool,
    #[serde(default)]
    pub unwritten: Option<HoldRow>,
}

/// The shape of a [`Settlement`] this code writes.
pub const SETTLEMENT_VERSION: u32 = 1;

impl Settlement {
    pub fn parts(&self) -> (&GenerationRecord, bool, Option<&HoldRow>) {
        (&self.record, self.has_hold, self.unwritten.as_ref())
    }
}

impl Store {
    /// Settlements the outbox replays, in one D1 batch (counted as `D1.replay`, apart from the
    /// requests' own settlements).
    pub async fn replay(&self, items: &[(&GenerationRecord, bool, Option<&HoldRow>)]) -> Result<(), ApiError> {
        self.settle_as("D1.replay", items).await.map(drop)
    }

    /// One replayed settlement in its own D1 batch; true when D1 took it.
    pub async fn settle_one(&self, item: &Settlement) -> bool {
        self.replay(&[item.parts()]).await.is_ok()
    }
}

#[derive(Debug, Deserialize)]
pub struct CreditsRow {
    pub balance_micros: f64,
    pub held_micros: f64,
    pub spent_micros: f64,
    pub spend_limit_micros: Option<f64>,
    pub rpm: Option<f64>,
    pub max_concurrent: Option<f64>,
    pub credits_micros: f64,
    pub charges_micros: f64,
    pub open_holds_micros: f64,
}

#[derive(Debug, Deserialize)]
pub struct GenerationRow {
    pub id: String,
    pub model: String,
    pub api: String,
    pub outcome: String,
    pub route: Option<String>,
    pub provider: Option<String>,
    pub input_tokens: Option<f64>,
    pub output_tokens: Option<f64>,
    /// Absent (null) in rows written before prompt caching was billed.
    pub cache_read_tokens: Option<f64>,
    pub cache_write_tokens: Option<f64>,
    pub cache_write_1h_tokens: Option<f64>,
    pub usage_clamped: f64,
    pub estimated: f64,
    pub delivered_output: f64,
    pub error_code: Option<String>,
    pub total_cost_micros: f64,
    pub overrun_micros: f64,
    pub stream: f64,
    pub created_at: f64,
    pub duration_ms: f64,
    pub hold_path: Option<String>,
    pub attempts_json: String,
    /// The priced server tools' uses and cost (SPEC §21); null when the answer used none.
    pub server_tools_json: Option<String>,
}
