//! The public report (SPEC §14, §22), built once per interval for the whole deployment: one
//! Durable Object, [`StatusObject`] (binding `STATUS`, name `status`), builds it — every model's
//! full health and the accounts', for the stored catalog — at most once per [`REPORT`]'s
//! `fresh_ms` and once per catalog version, and answers every isolate from its copy. Whatever the
//! number of isolates serving status hits, a model's health object gets one `Full` call per
//! interval (before: one per isolate per interval).
//!
//! An isolate asks it through [`published`] (its own copy and single flight are `http/status.rs`'s);
//! when the object does not answer, the isolate keeps serving its last report, or with none builds
//! its own ([`build`]), as it did before: the public surfaces never fail for want of it.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use switchyard_core::catalog::Catalog;
use switchyard_core::flight::{Flight, Rules, Step};
use switchyard_core::health::ModelHealth;
use switchyard_core::status::{self, Report};
use switchyard_core::ApiError;
use worker::{durable_object, DurableObject, Env, Request, Response, State};

use crate::health;
use crate::object;
use crate::runtime::clock::{now_ms, sleep};
use crate::store::{self, Store};

/// How a report is refreshed (`switchyard_core::flight`), by the status object and by each
/// isolate's copy of it: the same report for 3 s, one build (or fetch) at a time — the calls
/// meanwhile get the last report of the catalog, or, with none yet, wait for the one under way.
/// A build does not fail for a health object that does not answer (it counts as healthy); a
/// fetch from the status object that failed, or a build whose catalog could not be read, backs
/// off 1 → 2 → 4 → 8 s, the last report served meanwhile.
pub const REPORT: Rules = Rules {
    fresh_ms: 3_000,
    // A build takes longer than this only if it died with its request: the next one starts.
    give_up_ms: 5_000,
    poll_ms: 25,
    backoff_ms: 1_000,
    backoff_max_ms: 8_000,
};

/// How long an isolate waits for the status object's answer: a build is one catalog read (within
/// D1's deadline) and one `Full` call to each health object, concurrently, each within 300 ms —
/// but hundreds of them on a busy object take longer than that.
const CALL_TIMEOUT_MS: u64 = 4_000;

/// What an isolate asks: the report of catalog `version` or a later one.
#[derive(Serialize, Deserialize)]
struct Ask {
    version: i64,
}

/// What the status object answers: the report and the catalog version it was built for.
#[derive(Serialize, Deserialize)]
struct Published {
    version: i64,
    report: Report,
}

/// The report of catalog `version` (or a later one) from the status object; `None` (logged) when
/// it does not answer in time.
pub async fn published(env: &Env, version: i64) -> Option<Report> {
    let ask = Ask { version };
    match object::call::<_, Published>(env, "STATUS", "status", "/", &ask, CALL_TIMEOUT_MS, None).await {
        Ok(p) => Some(p.report),
        Err(why) => {
            worker::console_log!("{{\"event\":\"status_object_unavailable\",\"reason\":{why:?}}}");
            None
        }
    }
}

/// Every model's full health (fetched concurrently), then the report. The accounts' breakers are
/// the models' objects' copies of them, the newest of each (a model's object keeps them within 2 s
/// of its account's object while it has traffic; SPEC §22): no account's object is called.
pub async fn build(env: &Env, catalog: &Catalog, now: u64) -> Report {
    let ids = catalog.model_ids();
    let fulls = join_all(ids.iter().map(|id| health::full(env, id))).await;
    let models: BTreeMap<String, ModelHealth> = ids
        .into_iter()
        .zip(fulls)
        .map(|(id, full)| (id, full.unwrap_or_default()))
        .collect();
    let mut accounts = ModelHealth::default();
    for full in models.values() {
        accounts.fold_accounts_from(full);
    }
    status::report(catalog, &models, &accounts, now)
}

// ---- the Durable Object --------------------------------------------------------------------

/// The one object that builds the public report. It keeps nothing in storage: its copy lives in
/// memory, and a fresh object builds one on its first call.
#[durable_object]
pub struct StatusObject {
    env: Env,
    /// The last report (as sent), its catalog version, and when it was built.
    last: RefCell<Option<(Rc<String>, i64, u64)>>,
    /// Its build under way, if any.
    building: RefCell<Flight>,
}

impl DurableObject for StatusObject {
    fn new(_state: State, env: Env) -> Self {
        StatusObject {
            env,
            last: RefCell::new(None),
            building: RefCell::new(Flight::default()),
        }
    }

    /// The report of the asked catalog version or a later one: the copy while fresh, else built
    /// by one call at a time (the others wait on their own timers, SPEC §18).
    async fn fetch(&self, mut req: Request) -> worker::Result<Response> {
        let ask: Ask = req.json().await?;
        loop {
            let now = now_ms();
            let last = self
                .last
                .borrow()
                .as_ref()
                .filter(|(_, version, _)| *version >= ask.version)
                .map(|(text, _, at)| (text.clone(), *at));
            let step = self
                .building
                .borrow_mut()
                .step(last.as_ref().map(|(_, at)| *at), now, &REPORT);
            match (step, last) {
                (Step::Fresh | Step::Stale, Some((text, _))) => return Response::ok(text.as_str()),
                (Step::Wait(ms), _) => sleep(ms).await,
                _ => {
                    let built = self.build(ask.version, now).await;
                    self.building.borrow_mut().done(built.is_ok(), now_ms(), &REPORT);
                    let (text, version) = built?;
                    *self.last.borrow_mut() = Some((text.clone(), version, now));
                    return Response::ok(text.as_str());
                }
            }
        }
    }
}

impl StatusObject {
    /// The report of the catalog — this isolate's copy (no D1 read while it is young), or the
    /// stored one when the copy is older than the `asked` version — as sent, and its version.
    async fn build(&self, asked: i64, now: u64) -> worker::Result<(Rc<String>, i64)> {
        let failed = |e: ApiError| worker::Error::RustError(format!("{e:?}"));
        let store = Store::new(&self.env).map_err(failed)?;
        let mut catalog = store.catalog().await.map_err(failed)?;
        let mut version = store::catalog_version(&catalog);
        if version < asked {
            let (stored, stored_version) = store.load_catalog().await.map_err(failed)?;
            (catalog, version) = (Rc::new(stored), stored_version);
        }
        let report = build(&self.env, &catalog, now).await;
        let text = serde_json::to_string(&Published { version, report })?;
        Ok((Rc::new(text), version))
    }
}
