//! The public health surfaces (SPEC §14): `GET /api/health/models` (JSON) and `GET /status`
//! (HTML, no JavaScript), plus `GET /admin/health/{model}`. I/O only: read the catalog, get the
//! public report (built once per interval for the deployment by the status object,
//! `crate::report`, fetched by one request at a time per isolate and served for a few seconds),
//! respond. The report, the page and the admin JSON are built in
//! `switchyard_core::status` (both public surfaces render one `Report`, so they always say the
//! same thing).

use std::cell::RefCell;
use std::rc::Rc;

use futures_util::future::join;
use switchyard_core::catalog::Catalog;
use switchyard_core::flight::{Flight, Step};
use switchyard_core::status::{self, Report};
use worker::{Env, Headers, ResponseBuilder};

use super::response::{json_response, HandlerResult};
use crate::faults::Faults;
use crate::health;
use crate::limits;
use crate::report::{self, REPORT};
use crate::runtime::clock::{now_ms, sleep};
use crate::store::{self, Store};

/// A report, the catalog it was built for, and when.
type Cached = (Rc<Report>, Rc<Catalog>, u64);

thread_local! {
    /// This isolate's last report.
    static LAST_REPORT: RefCell<Option<Cached>> = const { RefCell::new(None) };
    /// Its build under way, if any.
    static BUILDING: RefCell<Flight> = RefCell::new(Flight::default());
}

/// The report for `catalog`: this isolate's last one of that catalog while fresh (a catalog
/// reloaded at the same version is the same `Rc`, see `store::remember_catalog`), else fetched
/// from the status object (`crate::report`) by one request at a time, with the same rules
/// ([`REPORT`]): a busy status page costs the status object one call per isolate per 3 s, and each
/// model's health object one `Full` call per 3 s for the whole deployment (SPEC §15, §22). When
/// the status object does not answer, the isolate builds the report itself. A waiting request
/// waits on its own timer, never on the fetching task's (SPEC §18).
pub(super) async fn report(env: &Env, catalog: &Rc<Catalog>, faults: Faults) -> Rc<Report> {
    loop {
        let now = now_ms();
        let last = LAST_REPORT.with(|c| {
            c.borrow()
                .as_ref()
                .filter(|(_, of, _)| Rc::ptr_eq(of, catalog))
                .map(|(r, _, at)| (r.clone(), *at))
        });
        let step = BUILDING.with(|b| b.borrow_mut().step(last.as_ref().map(|(_, at)| *at), now, &REPORT));
        match (step, last) {
            (Step::Fresh | Step::Stale, Some((r, _))) => return r,
            (Step::Wait(ms), _) => sleep(ms).await,
            // Fetch (or, never with these rules, nothing to serve): ask the status object.
            (_, last) => {
                faults.before_report().await; // a drill may slow it (tests only)
                let built = match (report::published(env, store::catalog_version(catalog)).await, last) {
                    (Some(r), _) => r,
                    // The object does not answer: the last report of this catalog stays (a slow
                    // object is not given this isolate's build on top); with none, build one.
                    (None, Some((r, _))) => {
                        BUILDING.with(|b| b.borrow_mut().done(false, now_ms(), &REPORT));
                        return r;
                    }
                    (None, None) => report::build(env, catalog, now).await,
                };
                let r = Rc::new(built);
                LAST_REPORT.with(|c| *c.borrow_mut() = Some((r.clone(), catalog.clone(), now)));
                BUILDING.with(|b| b.borrow_mut().done(true, now_ms(), &REPORT));
                return r;
            }
        }
    }
}

/// `GET /api/health/models`.
pub async fn api(env: &Env, faults: Faults) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let r = report(env, &catalog, faults).await;
    let mut resp = json_response(
        200,
        &serde_json::to_value(&*r).map_err(|_| switchyard_core::ApiError::Internal { label: "report" })?,
    );
    let _ = resp.headers_mut().set("cache-control", "no-store");
    Ok(resp)
}

/// `GET /status`.
pub async fn page(env: &Env, faults: Faults) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let html = status::render_html(&*report(env, &catalog, faults).await);
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
    let (full, loads) = join(health::full(env, model_id), limits::route_loads(env, model)).await;
    let full = full.unwrap_or_default();
    // The accounts' breakers as the model's object holds them (its copies, SPEC §22).
    let body = status::admin_report(&catalog, model, &full, &full, &loads.unwrap_or_default(), now);
    Ok(json_response(200, &body))
}
