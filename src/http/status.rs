//! The public health surfaces (SPEC §14): `GET /api/health/models` (JSON) and `GET /status`
//! (HTML, no JavaScript). Both render one [`Report`], built from the health objects' full state,
//! so they always say the same thing.

use serde::Serialize;
use switchyard_core::catalog::Catalog;
use switchyard_core::health::{BreakerState, ModelHealth};
use switchyard_core::status::StatusWord;
use worker::{Env, Headers, ResponseBuilder};

use super::{json_response, HandlerResult};
use crate::clock::now_ms;
use crate::health;
use crate::store::Store;

#[derive(Serialize)]
struct RouteReport {
    id: String,
    provider: String,
    healthy: bool,
    /// `healthy`, `cooling`, `probe_due` or `probe_in_flight` (route or its account).
    state: &'static str,
    /// When the cooldown ends (ms since the epoch), for a demoted route.
    cooldown_until_ms: Option<u64>,
    success_rate: Option<f64>,
    median_ttfb_ms: Option<u64>,
    tokens_per_s: Option<f64>,
}

#[derive(Serialize)]
struct ModelReport {
    id: String,
    status: StatusWord,
    label: &'static str,
    healthy_routes: usize,
    routes: usize,
    /// Routes in the order a request would try them now.
    order: Vec<RouteReport>,
}

#[derive(Serialize)]
struct Report {
    total: usize,
    healthy: usize,
    models: Vec<ModelReport>,
    generated_at_ms: u64,
}

fn state_word(s: &BreakerState) -> (&'static str, Option<u64>) {
    match s {
        BreakerState::Healthy => ("healthy", None),
        BreakerState::Cooling { until_ms } => ("cooling", Some(*until_ms)),
        BreakerState::ProbeDue => ("probe_due", None),
        BreakerState::ProbeInFlight { .. } => ("probe_in_flight", None),
    }
}

async fn report(env: &Env, catalog: &Catalog) -> Report {
    let now = now_ms();
    let accounts = health::accounts(env).await.unwrap_or_default();
    let mut models = Vec::new();
    for model in &catalog.doc().models {
        let full: ModelHealth = health::full(env, &model.id).await.unwrap_or_default();
        let view = full.with_accounts(&accounts);
        let routes = health::route_accounts(catalog, model);
        let order = view.plan_order(&routes, now);
        let order: Vec<RouteReport> = order
            .into_iter()
            .filter_map(|(i, _, _)| {
                let route = model.routes.get(i)?;
                let (_, account) = routes.get(i)?;
                let shown = view.route_state(&route.id, account, now);
                let (state, cooldown_until_ms) = state_word(&shown);
                let stats = full.route_stats(&route.id, now);
                Some(RouteReport {
                    id: route.id.clone(),
                    provider: route.provider.clone(),
                    healthy: matches!(shown, BreakerState::Healthy),
                    state,
                    cooldown_until_ms,
                    success_rate: stats.success_rate,
                    median_ttfb_ms: stats.median_ttfb_ms,
                    tokens_per_s: stats.tokens_per_s,
                })
            })
            .collect();
        let status = full.status(now);
        models.push(ModelReport {
            id: model.id.clone(),
            status,
            label: status.label(),
            healthy_routes: order.iter().filter(|r| r.healthy).count(),
            routes: order.len(),
            order,
        });
    }
    Report {
        total: models.len(),
        healthy: models.iter().filter(|m| m.healthy_routes > 0).count(),
        models,
        generated_at_ms: now,
    }
}

/// `GET /api/health/models`.
pub async fn api(env: &Env) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let r = report(env, &catalog).await;
    let mut resp = json_response(
        200,
        &serde_json::to_value(&r).map_err(|_| switchyard_core::ApiError::Internal { label: "report" })?,
    );
    let _ = resp.headers_mut().set("cache-control", "no-store");
    Ok(resp)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{:02}:{:02}:{:02} UTC", (secs / 3600) % 24, (secs / 60) % 60, secs % 60)
}

/// `GET /status`.
pub async fn page(env: &Env) -> HandlerResult {
    let catalog = Store::new(env)?.catalog().await?;
    let r = report(env, &catalog).await;
    let mut html = String::from(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"15\"><title>Switchyard status</title><style>\
         body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:52rem;padding:1rem;color:#1b1b1b}\
         h1{font-size:1.4rem}section{border:1px solid #ddd;border-radius:8px;padding:.75rem 1rem;margin:1rem 0}\
         h2{font-size:1.1rem;margin:.2rem 0;display:flex;justify-content:space-between;gap:1rem;flex-wrap:wrap}\
         .w{font-weight:600}.operational{color:#137333}.degraded{color:#b06000}.down{color:#c5221f}.no_recent_requests{color:#5f6368}\
         table{border-collapse:collapse;width:100%;font-size:.9rem}td,th{text-align:left;padding:.25rem .4rem;border-top:1px solid #eee}\
         .demoted{color:#c5221f}.small{color:#5f6368;font-size:.85rem}@media(max-width:30rem){.hide{display:none}}\
         </style></head><body><h1>Switchyard status</h1>",
    );
    html.push_str(&format!(
        "<p class=\"small\">{} of {} models have a healthy route. Last hour of real requests; updated {}.</p>",
        r.healthy,
        r.total,
        clock(r.generated_at_ms)
    ));
    for m in &r.models {
        let status_class = serde_json::to_value(m.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        html.push_str(&format!(
            "<section><h2><span>{}</span><span class=\"w {}\">{}</span></h2>\
             <div class=\"small\">{} / {} routes healthy · current order:</div>\
             <table><tr><th>#</th><th>route</th><th>state</th><th>success</th><th class=\"hide\">TTFB</th><th class=\"hide\">tok/s</th></tr>",
            esc(&m.id),
            status_class,
            m.label,
            m.healthy_routes,
            m.routes
        ));
        for (i, route) in m.order.iter().enumerate() {
            let state = match (route.state, route.cooldown_until_ms) {
                ("cooling", Some(until)) => format!("<span class=\"demoted\">demoted until {}</span>", clock(until)),
                ("probe_due", _) => "<span class=\"demoted\">probe due</span>".to_string(),
                ("probe_in_flight", _) => "<span class=\"demoted\">probing</span>".to_string(),
                _ => "healthy".to_string(),
            };
            let pct = route.success_rate.map_or("–".into(), |s| format!("{:.0} %", s * 100.0));
            let ttfb = route.median_ttfb_ms.map_or("–".into(), |t| format!("{t} ms"));
            let tps = route.tokens_per_s.map_or("–".into(), |t| format!("{t:.0}"));
            html.push_str(&format!(
                "<tr><td>{}</td><td>{} <span class=\"small\">{}</span></td><td>{}</td><td>{}</td><td class=\"hide\">{}</td><td class=\"hide\">{}</td></tr>",
                i + 1,
                esc(&route.id),
                esc(&route.provider),
                state,
                pct,
                ttfb,
                tps
            ));
        }
        html.push_str("</table></section>");
    }
    html.push_str("</body></html>");
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
    let full = health::full(env, model_id).await.unwrap_or_default();
    let accounts = health::accounts(env).await.unwrap_or_default();
    let routes: Vec<serde_json::Value> = health::route_accounts(&catalog, model)
        .into_iter()
        .map(|(route, account)| {
            let breaker = full.routes.get(&route).map(|r| r.breaker.clone()).unwrap_or_default();
            serde_json::json!({
                "route": route,
                "account": account,
                "state": state_word(&breaker.state(now)).0,
                "breaker": breaker,
                "account_state": accounts.accounts.get(&account).map(|a| state_word(&a.state(now)).0).unwrap_or("healthy"),
                "stats": full.route_stats(&route, now),
            })
        })
        .collect();
    Ok(json_response(
        200,
        &serde_json::json!({"model": model_id, "status": full.status(now), "routes": routes, "accounts": accounts.accounts}),
    ))
}
