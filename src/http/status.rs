//! The public health surfaces (SPEC §14): `GET /api/health/models` (JSON) and `GET /status`
//! (HTML, no JavaScript), plus `GET /admin/health/{model}`. I/O only: read the catalog, fetch the
//! health objects' full state (the public report is cached per isolate for a few seconds),
//! respond. The report, the page and the admin JSON are built in
//! `switchyard_core::status` (both public surfaces render one `Report`, so they always say the
//! same thing).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use futures_util::future::{join, join_all};
use switchyard_core::catalog::Catalog;
use switchyard_core::health::ModelHealth;
use switchyard_core::status::{self, Report};
use worker::{Env, Headers, Request, ResponseBuilder};

use super::response::{json_response, HandlerResult};
use super::test_fault;
use crate::health;
use crate::limits;
use crate::runtime::clock::{now_ms, sleep};
use crate::store::Store;

/// How long an isolate serves the same report: a busy status page costs 1 + N Durable Object
/// calls every few seconds, not per hit (SPEC §15).
const REPORT_CACHE_MS: u64 = 3_000;

/// A build that takes longer than this is taken to have died with its request: the next one starts.
const BUILD_GIVE_UP_MS: u64 = 10_000;

/// A report, the catalog it was built for, and when.
type Cached = (Rc<Report>, Rc<Catalog>, u64);

thread_local! {
    /// This isolate's last report.
    static LAST_REPORT: RefCell<Option<Cached>> = const { RefCell::new(None) };
    /// When the one build in flight started (SPEC §18: a burst of status hits builds once per
    /// isolate; the others are served the last report meanwhile).
    static BUILDING: Cell<Option<u64>> = const { Cell::new(None) };
}

/// The report: this isolate's last one while it is younger than [`REPORT_CACHE_MS`] and of the same
/// catalog, else a new one — built once per isolate however many ask at once: while one request
/// builds it the others get the last report of that catalog (a catalog reloaded at the same
/// version is the same `Rc`, see `store::remember_catalog`).
pub(super) async fn report(env: &Env, catalog: &Rc<Catalog>, slow_drill_ms: Option<u64>) -> Rc<Report> {
    let now = now_ms();
    let last = LAST_REPORT.with(|c| {
        c.borrow()
            .as_ref()
            .filter(|(_, of, _)| Rc::ptr_eq(of, catalog))
            .map(|(r, _, at)| (r.clone(), *at))
    });
    if let Some((r, at)) = &last {
        if now.saturating_sub(*at) < REPORT_CACHE_MS {
            return r.clone();
        }
    }
    let in_flight = BUILDING
        .get()
        .is_some_and(|started| now.saturating_sub(started) < BUILD_GIVE_UP_MS);
    if in_flight {
        if let Some((stale, _)) = last {
            return stale;
        }
        // Nothing to serve meanwhile: this request builds its own (a request never waits on
        // another's work — the runtime would take it for hung).
        return Rc::new(build(env, catalog, now).await);
    }
    BUILDING.set(Some(now));
    if let Some(ms) = slow_drill_ms {
        sleep(ms).await;
    }
    let r = Rc::new(build(env, catalog, now).await);
    LAST_REPORT.with(|c| *c.borrow_mut() = Some((r.clone(), catalog.clone(), now)));
    BUILDING.set(None);
    r
}

/// Every model's full health (fetched concurrently) and the accounts', then the report.
async fn build(env: &Env, catalog: &Catalog, now: u64) -> Report {
    let ids = catalog.model_ids();
    let (accounts, fulls) = join(
        health::accounts(env),
        join_all(ids.iter().map(|id| health::full(env, id))),
    )
    .await;
    let models: BTreeMap<String, ModelHealth> = ids
        .into_iter()
        .zip(fulls)
        .map(|(id, full)| (id, full.unwrap_or_default()))
        .collect();
    status::report(catalog, &models, &accounts.unwrap_or_default(), now)
}

/// `GET /api/health/models`.
pub async fn api(req: &Request, env: &Env) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let r = report(env, &catalog, test_fault(req, env, "slow-report-")).await;
    let mut resp = json_response(
        200,
        &serde_json::to_value(&*r).map_err(|_| switchyard_core::ApiError::Internal { label: "report" })?,
    );
    let _ = resp.headers_mut().set("cache-control", "no-store");
    Ok(resp)
}

/// `GET /status`.
pub async fn page(req: &Request, env: &Env) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let html = status::render_html(&*report(env, &catalog, test_fault(req, env, "slow-report-")).await);
    let headers = Headers::new();
    let _ = headers.set("content-type", "text/html; charset=utf-8");
    let _ = headers.set("cache-control", "no-store");
    Ok(ResponseBuilder::new()
        .with_status(200)
        .with_headers(headers)
        .fixed(html.into_bytes()))
}

/// `GET /admin/health/{model}`: every route's breaker, the accounts' breakers, route stats.
pub async fn admin(env: &Env, model_id: &str) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let model = catalog
        .model(model_id)
        .ok_or_else(|| switchyard_core::ApiError::NotFound {
            what: format!("Model `{model_id}`"),
        })?;
    let now = now_ms();
    let ((full, accounts), loads) = join(
        join(health::full(env, model_id), health::accounts(env)),
        limits::route_loads(env, model),
    )
    .await;
    let body = status::admin_report(
        &catalog,
        model,
        &full.unwrap_or_default(),
        &accounts.unwrap_or_default(),
        &loads.unwrap_or_default(),
        now,
    );
    Ok(json_response(200, &body))
}
