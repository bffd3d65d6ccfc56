//! The public health surfaces (SPEC §14), as data and markup: the status word of a model from its
//! per-request buckets ([`crate::health::Bucket`], filled by
//! [`crate::health::ModelHealth::observe_request`]); the [`Report`] behind `GET /api/health/models`,
//! built by [`report`] from every model's full health and the accounts'; the `/status` page
//! ([`render_html`], no JavaScript), rendered from that same report so both always say the same
//! thing; and the JSON of `GET /admin/health/{model}` ([`admin_report`]). The Worker adapter only
//! fetches the health objects and responds.
//!
//! This module owns the thresholds. Invariants: only the last hour counts (the same window as
//! [`crate::health::recent`]); only counted requests are in the buckets — those a route answered
//! or failed ([`crate::generation::AttemptRecord::failed_by_route`]: client errors, the gateway's
//! own refusals and cancellations never reach them) — and a request a later route answered is
//! answered. Down needs both a
//! rate under 50 % and at least 3 unanswered requests, so a handful of failures on a quiet model
//! reads Degraded, not Down. A report lists each model's routes in the order a request would try
//! them now (route and account breakers applied); a route is healthy only when both its breakers
//! are; a model missing from the health map counts as one without any traffic. Ids are escaped in
//! the HTML. The history applies the same word rules to each hour alone
//! ([`hour_status`] on [`crate::health::Hour`]); `/status` draws it as one bar per hour and each
//! route's last hour as an inline SVG chart, every bar and chart with its words as text.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::api::Api;
use crate::catalog::{Catalog, Model, Price};
use crate::health::{
    last_hours, median_ms, recent, BreakerState, Bucket, ChartPoint, Hour, ModelHealth, CHART_POINT_MINUTES,
    SLOW_TTFB_MS,
};
use crate::limits::RouteLoad;

/// Below this share answered: Degraded.
const OPERATIONAL_MIN_ANSWERED: f64 = 0.95;
/// Below this share answered (with [`DOWN_MIN_UNANSWERED`]): Down.
const DOWN_BELOW_ANSWERED: f64 = 0.5;
const DOWN_MIN_UNANSWERED: u64 = 3;
/// Median stream TTFB above this: Degraded.
const DEGRADED_TTFB_MS: u64 = SLOW_TTFB_MS;
/// Hours of history on `/status` and `GET /api/health/models`, the current one last.
pub const HISTORY_HOURS: u64 = 24;

/// A model's status over the last hour of real requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusWord {
    Operational,
    Degraded,
    Down,
    NoRecentRequests,
    /// Requests answered in the last hour, but nothing — no live answer, no passed check — proved
    /// the model answers within `verify_idle_ms` (SPEC §8a).
    Unverified,
}

impl StatusWord {
    /// The word as shown on `/status`.
    pub fn label(self) -> &'static str {
        match self {
            StatusWord::Operational => "Operational",
            StatusWord::Degraded => "Degraded",
            StatusWord::Down => "Down",
            StatusWord::NoRecentRequests => "No recent requests",
            StatusWord::Unverified => "Not recently verified",
        }
    }

    /// The word as a bar of the history shows it: an hour without requests had none.
    pub fn hour_label(self) -> &'static str {
        match self {
            StatusWord::NoRecentRequests => "No requests",
            other => other.label(),
        }
    }

    /// The word's wire name (also its CSS class on `/status`).
    pub fn wire(self) -> &'static str {
        match self {
            StatusWord::Operational => "operational",
            StatusWord::Degraded => "degraded",
            StatusWord::Down => "down",
            StatusWord::NoRecentRequests => "no_recent_requests",
            StatusWord::Unverified => "unverified",
        }
    }
}

/// The status word over the last hour of `buckets` at `now_ms`: no requests → No recent requests;
/// under 50 % answered and ≥ 3 unanswered → Down; under 95 % answered or median stream TTFB over
/// 10 s → Degraded; else Operational.
pub fn model_status(buckets: &[Bucket], now_ms: u64) -> StatusWord {
    let (mut requests, mut answered) = (0u64, 0u64);
    for b in recent(buckets, now_ms) {
        requests += u64::from(b.requests);
        answered += u64::from(b.answered.min(b.requests));
    }
    let slow = || {
        median_ms(recent(buckets, now_ms).flat_map(|b| b.ttfb_samples_ms.iter().copied()))
            .is_some_and(|t| t > DEGRADED_TTFB_MS)
    };
    word(requests, answered, slow)
}

/// The same rules applied to one hour of the history: its median stream TTFB is over 10 s when
/// more than half of its TTFBs were ([`Hour::mostly_slow`]).
pub fn hour_status(hour: &Hour) -> StatusWord {
    let requests = u64::from(hour.requests);
    word(requests, u64::from(hour.answered).min(requests), || hour.mostly_slow())
}

/// The rules of SPEC §14 on counts; `slow` tells whether the median stream TTFB is over 10 s.
fn word(requests: u64, answered: u64, slow: impl FnOnce() -> bool) -> StatusWord {
    if requests == 0 {
        return StatusWord::NoRecentRequests;
    }
    let share = answered as f64 / requests as f64;
    let unanswered = requests - answered;
    if share < DOWN_BELOW_ANSWERED && unanswered >= DOWN_MIN_UNANSWERED {
        return StatusWord::Down;
    }
    if share < OPERATIONAL_MIN_ANSWERED || slow() {
        return StatusWord::Degraded;
    }
    StatusWord::Operational
}

impl ModelHealth {
    /// The model's status word (SPEC §14) from its request buckets.
    pub fn status(&self, now_ms: u64) -> StatusWord {
        model_status(&self.model_buckets, now_ms)
    }

    /// The status word with SPEC §8a applied: Operational only if the model answered a request
    /// or a route passed a check within `verify_idle_ms` (0: no such rule).
    pub fn verified_status(&self, verify_idle_ms: u64, now_ms: u64) -> StatusWord {
        let word = self.status(now_ms);
        // Routes keep the exact time of their last answer; the minute buckets count from the
        // start of their minute, never making evidence look newer than it is.
        let answered = |b: &Bucket| (b.answered > 0).then(|| b.minute * 60_000);
        let newest = self.routes.values().filter_map(|r| r.last_ok_ms).max();
        let newest = newest.max(self.model_buckets.iter().filter_map(answered).max());
        let stale = verify_idle_ms > 0 && newest.is_none_or(|t| t.saturating_add(verify_idle_ms) < now_ms);
        if word == StatusWord::Operational && stale {
            StatusWord::Unverified
        } else {
            word
        }
    }
}

/// One route of a model on `/status` and `GET /api/health/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RouteReport {
    pub id: String,
    pub provider: String,
    pub healthy: bool,
    /// `healthy`, `cooling`, `probe_due` or `probe_in_flight` (route or its account).
    pub state: Cow<'static, str>,
    /// When the cooldown ends (ms since the epoch), for a demoted route.
    pub cooldown_until_ms: Option<u64>,
    pub success_rate: Option<f64>,
    pub median_ttfb_ms: Option<u64>,
    pub tokens_per_s: Option<f64>,
    /// The latest passed verification check (SPEC §8a), ms since the epoch.
    pub last_verified_ms: Option<u64>,
    /// The last hour in five-minute points, oldest first (the route's chart).
    pub chart: Vec<ChartPoint>,
}

/// One hour of a model's history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HourReport {
    /// The hour's start, ms since the epoch.
    pub start_ms: u64,
    pub answered: u32,
    pub unanswered: u32,
    /// The status word of that hour's requests alone (never `unverified`).
    pub status: StatusWord,
    pub label: Cow<'static, str>,
}

impl HourReport {
    pub fn of(hour: &Hour) -> HourReport {
        let status = hour_status(hour);
        HourReport {
            start_ms: hour.start_ms(),
            answered: hour.answered,
            unanswered: hour.unanswered(),
            status,
            label: status.hour_label().into(),
        }
    }
}

/// One model of the report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelReport {
    pub id: String,
    pub status: StatusWord,
    pub label: Cow<'static, str>,
    pub healthy_routes: usize,
    pub routes: usize,
    /// Routes in the order a request would try them now.
    pub order: Vec<RouteReport>,
    /// The last [`HISTORY_HOURS`] hours, oldest first; the last one is the current hour so far.
    pub history: Vec<HourReport>,
}

/// The body of `GET /api/health/models`; `/status` renders the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub total: usize,
    pub healthy: usize,
    pub models: Vec<ModelReport>,
    pub generated_at_ms: u64,
}

/// A breaker state's wire word, and the cooldown's end for a cooling one.
pub fn state_word(s: &BreakerState) -> (&'static str, Option<u64>) {
    match s {
        BreakerState::Healthy => ("healthy", None),
        BreakerState::Cooling { until_ms } => ("cooling", Some(*until_ms)),
        BreakerState::AwaitingCheck => ("awaiting_check", None),
        BreakerState::ProbeDue => ("probe_due", None),
        BreakerState::ProbeInFlight { .. } => ("probe_in_flight", None),
    }
}

/// The report at `now_ms`: every catalog model, in catalog order, from its full health in `models`
/// (by model id; a missing one counts as [`ModelHealth::default`]) and the accounts' breakers in
/// `accounts`.
pub fn report(
    catalog: &Catalog,
    models: &BTreeMap<String, ModelHealth>,
    accounts: &ModelHealth,
    now_ms: u64,
) -> Report {
    let none = ModelHealth::default();
    let mut out = Vec::new();
    for model in &catalog.doc().models {
        let full = models.get(&model.id).unwrap_or(&none);
        let view = full.with_accounts(accounts);
        let routes = catalog.route_accounts(model);
        let order = view.plan_order(&routes, now_ms);
        let order: Vec<RouteReport> = order
            .into_iter()
            .filter_map(|(i, _, _)| {
                let route = model.routes.get(i)?;
                let (_, account) = routes.get(i)?;
                let shown = view.route_state(&route.id, account, now_ms);
                let (state, cooldown_until_ms) = state_word(&shown);
                let stats = full.route_stats(&route.id, now_ms);
                Some(RouteReport {
                    id: route.id.clone(),
                    provider: route.provider.clone(),
                    healthy: matches!(shown, BreakerState::Healthy),
                    state: state.into(),
                    cooldown_until_ms,
                    success_rate: stats.success_rate,
                    median_ttfb_ms: stats.median_ttfb_ms,
                    tokens_per_s: stats.tokens_per_s,
                    last_verified_ms: full
                        .routes
                        .get(&route.id)
                        .and_then(|r| r.last_check.as_ref())
                        .filter(|c| c.passed)
                        .map(|c| c.at_ms),
                    chart: full.route_chart(&route.id, now_ms),
                })
            })
            .collect();
        let status = full.verified_status(catalog.policy_for(model).verify_idle_ms, now_ms);
        out.push(ModelReport {
            id: model.id.clone(),
            status,
            label: status.label().into(),
            healthy_routes: order.iter().filter(|r| r.healthy).count(),
            routes: order.len(),
            order,
            history: last_hours(&full.model_hours, HISTORY_HOURS, now_ms)
                .iter()
                .map(HourReport::of)
                .collect(),
        });
    }
    Report {
        total: out.len(),
        healthy: out.iter().filter(|m| m.healthy_routes > 0).count(),
        models: out,
        generated_at_ms: now_ms,
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `HH:MM:SS UTC` of a time in ms since the epoch.
fn clock(ms: u64) -> String {
    let secs = ms / 1000;
    format!("{:02}:{:02}:{:02} UTC", (secs / 3600) % 24, (secs / 60) % 60, secs % 60)
}

/// `HH:MM` (UTC) of a time in ms since the epoch.
fn hm(ms: u64) -> String {
    let mins = ms / 60_000;
    format!("{:02}:{:02}", (mins / 60) % 24, mins % 60)
}

const STYLE: &str = "body{font:15px/1.4 system-ui,sans-serif;margin:0 auto;max-width:52rem;padding:1rem;color:#1b1b1b}\
     h1{font-size:1.4rem}section{border:1px solid #ddd;border-radius:8px;padding:.75rem 1rem;margin:1rem 0}\
     h2{font-size:1.1rem;margin:.2rem 0;display:flex;justify-content:space-between;gap:1rem;flex-wrap:wrap}\
     .w{font-weight:600}.operational{color:#137333}.degraded{color:#b06000}.down{color:#c5221f}.no_recent_requests,.unverified{color:#5f6368}\
     table{border-collapse:collapse;width:100%;font-size:.9rem}td,th{text-align:left;padding:.25rem .4rem;border-top:1px solid #eee}\
     .demoted{color:#c5221f}.small{color:#5f6368;font-size:.85rem}@media(max-width:30rem){.hide{display:none}}\
     .sr{position:absolute;width:1px;height:1px;margin:-1px;padding:0;border:0;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap}\
     .strip{display:flex;gap:2px;margin:.5rem 0 0}.bar{position:relative;flex:1 1 0;min-width:0;height:1.6rem;border-radius:2px}\
     .bar,.key{background:#dadce0}.bar.operational,.key.operational{background:#1e8e3e}.bar.degraded,.key.degraded{background:#f9ab00}\
     .bar.down,.key.down{background:#d93025}.axis{display:flex;justify-content:space-between;margin-bottom:.4rem}\
     .legend{display:flex;flex-wrap:wrap;gap:.2rem .9rem}.key{display:inline-block;width:.8rem;height:.8rem;border-radius:2px;margin-right:.3rem;vertical-align:-.1rem}\
     .key.ttfb{background:none;height:0;border-top:2px solid #1a73e8}\
     .charts{display:flex;flex-wrap:wrap;gap:.5rem 1rem;margin-top:.6rem}figure{margin:0;flex:1 1 12rem;max-width:20rem;min-width:0}\
     figure svg{display:block;width:100%;height:auto}figcaption{overflow-wrap:anywhere}";

/// The legend of the history bars and the route charts, once at the top of the page.
const LEGEND: &str = "<div class=\"legend small\"><span>Bars, one per hour of the last 24 (UTC):</span>\
     <span><i class=\"key operational\"></i>Operational</span><span><i class=\"key degraded\"></i>Degraded</span>\
     <span><i class=\"key down\"></i>Down</span><span><i class=\"key\"></i>No requests</span></div>\
     <div class=\"legend small\"><span>Route charts, the last hour in 5-minute steps:</span>\
     <span><i class=\"key operational\"></i>success rate</span><span><i class=\"key ttfb\"></i>median time to first content</span></div>";

/// One bar's text: its hour, its word and its counts.
fn hour_text(h: &HourReport, current: bool) -> String {
    let when = format!("{} UTC", hm(h.start_ms));
    let so_far = if current { " (this hour so far)" } else { "" };
    let requests = u64::from(h.answered) + u64::from(h.unanswered);
    if requests == 0 {
        return format!("{when}: {}{so_far}", h.label);
    }
    format!("{when}: {}, {} of {requests} answered{so_far}", h.label, h.answered)
}

/// A model's last hours as a strip of bars, each with its hour and word as text.
fn history_strip(history: &[HourReport]) -> String {
    let mut html = String::from(
        "<div class=\"strip\" role=\"list\" aria-label=\"Status by hour, last 24 hours (UTC), oldest first\">",
    );
    for (i, h) in history.iter().enumerate() {
        let text = hour_text(h, i + 1 == history.len());
        html.push_str(&format!(
            "<span class=\"bar {}\" role=\"listitem\" title=\"{text}\"><span class=\"sr\">{text}</span></span>",
            h.status.wire()
        ));
    }
    html.push_str("</div>");
    if let Some(first) = history.first() {
        html.push_str(&format!(
            "<div class=\"axis small\" aria-hidden=\"true\"><span>{} UTC</span><span>now</span></div>",
            hm(first.start_ms)
        ));
    }
    html
}

/// Chart geometry, in SVG units: one column per point, the plot between `TOP` and `BASE`.
const COLUMN: u64 = 20;
const TOP: u64 = 6;
const BASE: u64 = 54;

/// A route's last hour as an inline SVG (columns: success rate; line: median TTFB, scaled to the
/// slowest point), with a title and a hidden list as its text. `n` makes the title's id unique.
fn route_chart(route: &RouteReport, n: usize) -> String {
    let points = &route.chart;
    let width = COLUMN * points.len() as u64;
    let plot = (BASE - TOP) as f64;
    let slowest = points.iter().filter_map(|p| p.median_ttfb_ms).max();
    let id = esc(&route.id);
    let mut svg = format!(
        "<svg role=\"img\" aria-labelledby=\"chart-{n}\" viewBox=\"0 0 {width} {h}\" width=\"{width}\" height=\"{h}\">\
         <title id=\"chart-{n}\">{id}: success rate and median time to first content, last hour{}</title>\
         <line x1=\"0\" y1=\"{BASE}.5\" x2=\"{width}\" y2=\"{BASE}.5\" stroke=\"#dadce0\"/>",
        slowest.map_or(String::new(), |t| format!("; slowest {t} ms")),
        h = BASE + 6,
    );
    let mut line = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let x = i as u64 * COLUMN;
        if let Some(rate) = p.success_rate {
            let height = (rate * plot).round().max(2.0);
            let fill = match rate {
                r if r >= OPERATIONAL_MIN_ANSWERED => "#1e8e3e",
                r if r >= DOWN_BELOW_ANSWERED => "#f9ab00",
                _ => "#d93025",
            };
            svg.push_str(&format!(
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{height}\" fill=\"{fill}\"/>",
                x + 3,
                BASE as f64 - height,
                COLUMN - 6
            ));
        }
        if let (Some(t), Some(max)) = (p.median_ttfb_ms, slowest) {
            let y = BASE as f64 - t as f64 * plot / max.max(1) as f64;
            line.push(format!("{},{y:.1}", x + COLUMN / 2));
        }
    }
    if !line.is_empty() {
        svg.push_str(&format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"#1a73e8\" stroke-width=\"2\"/>",
            line.join(" ")
        ));
        for pt in &line {
            if let Some((x, y)) = pt.split_once(',') {
                svg.push_str(&format!("<circle cx=\"{x}\" cy=\"{y}\" r=\"2.5\" fill=\"#1a73e8\"/>"));
            }
        }
    }
    if points.iter().all(|p| p.success_rate.is_none()) {
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"12\" fill=\"#5f6368\">no attempts</text>",
            width / 2,
            BASE / 2 + 4
        ));
    }
    svg.push_str("</svg>");
    let mut list = String::from("<ul class=\"sr\">");
    for p in points {
        let span = format!(
            "{}–{} UTC",
            hm(p.start_ms),
            hm(p.start_ms + CHART_POINT_MINUTES * 60_000)
        );
        let text = match (p.success_rate, p.median_ttfb_ms) {
            (None, _) => "no attempts".to_string(),
            (Some(r), t) => format!(
                "{:.0} % success of {}{}",
                r * 100.0,
                p.answered + p.failed,
                t.map_or(String::new(), |t| format!(", median time to first content {t} ms"))
            ),
        };
        list.push_str(&format!("<li>{span}: {text}</li>"));
    }
    list.push_str("</ul>");
    let slowest = slowest.map_or(String::new(), |t| format!(" · slowest {t} ms"));
    format!("<figure><figcaption class=\"small\">{id} · last hour{slowest}</figcaption>{svg}{list}</figure>")
}

/// The `/status` page of `report`: a legend, then one section per model: its word, its last 24
/// hours as bars, its routes in their current order, and each route's last hour as a chart.
pub fn render_html(report: &Report) -> String {
    let r = report;
    let mut html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"15\"><title>Switchyard status</title><style>{STYLE}</style></head>\
         <body><h1>Switchyard status</h1>"
    );
    html.push_str(&format!(
        "<p class=\"small\">{} of {} models have a healthy route. Last hour of real requests; updated {}.</p>",
        r.healthy,
        r.total,
        clock(r.generated_at_ms)
    ));
    html.push_str(LEGEND);
    let mut charts = 0;
    for m in &r.models {
        html.push_str(&format!(
            "<section><h2><span>{}</span><span class=\"w {}\">{}</span></h2>{}\
             <div class=\"small\">{} / {} routes healthy · current order:</div>\
             <table><tr><th>#</th><th>route</th><th>state</th><th>success</th><th class=\"hide\">TTFB</th><th class=\"hide\">tok/s</th><th class=\"hide\">verified</th></tr>",
            esc(&m.id),
            m.status.wire(),
            m.label,
            history_strip(&m.history),
            m.healthy_routes,
            m.routes
        ));
        for (i, route) in m.order.iter().enumerate() {
            let state = match (route.state.as_ref(), route.cooldown_until_ms) {
                ("cooling", Some(until)) => format!("<span class=\"demoted\">demoted until {}</span>", clock(until)),
                ("awaiting_check", _) => "<span class=\"demoted\">awaiting check</span>".to_string(),
                ("probe_due", _) => "<span class=\"demoted\">probe due</span>".to_string(),
                ("probe_in_flight", _) => "<span class=\"demoted\">probing</span>".to_string(),
                _ => "healthy".to_string(),
            };
            let pct = route.success_rate.map_or("–".into(), |s| format!("{:.0} %", s * 100.0));
            let ttfb = route.median_ttfb_ms.map_or("–".into(), |t| format!("{t} ms"));
            let tps = route.tokens_per_s.map_or("–".into(), |t| format!("{t:.0}"));
            let verified = route.last_verified_ms.map_or("–".into(), clock);
            html.push_str(&format!(
                "<tr><td>{}</td><td>{} <span class=\"small\">{}</span></td><td>{}</td><td>{}</td><td class=\"hide\">{}</td><td class=\"hide\">{}</td><td class=\"hide\">{}</td></tr>",
                i + 1,
                esc(&route.id),
                esc(&route.provider),
                state,
                pct,
                ttfb,
                tps,
                verified
            ));
        }
        html.push_str("</table><div class=\"charts\">");
        for route in &m.order {
            charts += 1;
            html.push_str(&route_chart(route, charts));
        }
        html.push_str("</div></section>");
    }
    html.push_str("</body></html>");
    html
}

/// USD per token, as the decimal string OpenAI-compatible model lists use (never an exponent).
fn per_token(per_mtok: f64) -> String {
    let v = per_mtok / 1_000_000.0;
    let s = format!("{v:.12}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s.is_empty() {
        "0".to_string()
    } else {
        s.to_string()
    }
}

/// The body of `GET /v1/models`: the OpenAI list shape, each model with its context window and
/// output limit, the APIs it can be called with and those its routes speak natively, `pricing` (USD per token) of its usual first route and
/// `pricing_max` (the highest of any route: what a request can be charged at most), and its status
/// word from `report`.
pub fn model_list(catalog: &Catalog, report: &Report) -> serde_json::Value {
    let data: Vec<serde_json::Value> = catalog
        .doc()
        .models
        .iter()
        .map(|m| {
            let mut native: Vec<Api> = m.routes.iter().flat_map(|r| r.apis.iter().copied()).collect();
            native.sort_by_key(|a| a.as_str());
            native.dedup();
            // Every API reaches a route of another dialect translated, unless the model forbids it
            // (SPEC §19).
            let apis = match catalog.policy_for(m).translate && !native.is_empty() {
                true => Api::ALL.to_vec(),
                false => native.iter().copied().filter(|a| a.is_client()).collect(),
            };
            let max = |f: fn(&Price) -> f64| m.routes.iter().map(|r| f(&r.price)).fold(0.0, f64::max);
            let pricing = m.routes.first().map(|r| {
                serde_json::json!({"prompt": per_token(r.price.input_per_mtok), "completion": per_token(r.price.output_per_mtok)})
            });
            let status = report.models.iter().find(|r| r.id == m.id);
            serde_json::json!({
                "id": m.id,
                "object": "model",
                "created": 0,
                "owned_by": "switchyard",
                "context_window": m.context_window,
                "max_output_tokens": m.max_output_tokens,
                "supported_apis": apis.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
                "native_apis": native.iter().map(|a| a.as_str()).collect::<Vec<_>>(),
                "pricing": pricing,
                "pricing_max": {"prompt": per_token(max(|p| p.input_per_mtok)), "completion": per_token(max(|p| p.output_per_mtok))},
                "status": status.map(|s| s.status),
                "status_label": status.map(|s| s.label.as_ref()),
            })
        })
        .collect();
    serde_json::json!({"object": "list", "data": data})
}

/// The body of `GET /admin/health/{model}` at `now_ms`: every route's breaker (catalog order) with
/// its account's state and its stats, the model's status word, and all accounts' breakers. `full`
/// is the model's full health, `accounts` its accounts' breakers (the model's object's copies).
pub fn admin_report(
    catalog: &Catalog,
    model: &Model,
    full: &ModelHealth,
    accounts: &ModelHealth,
    loads: &BTreeMap<String, RouteLoad>,
    now_ms: u64,
) -> serde_json::Value {
    let routes: Vec<serde_json::Value> = catalog
        .route_accounts(model)
        .into_iter()
        .zip(&model.routes)
        .map(|((route, account), r)| {
            let state = full.routes.get(&route).cloned().unwrap_or_default();
            let breaker = state.breaker;
            let load = loads.get(&route).copied().unwrap_or_default();
            serde_json::json!({
                "max_concurrency": r.max_concurrency,
                "in_flight": load.in_flight,
                "queued": load.queued,
                "route": route,
                "account": account,
                "state": state_word(&breaker.state(now_ms)).0,
                "breaker": breaker,
                "account_state": accounts.accounts.get(&account).map(|a| state_word(&a.state(now_ms)).0).unwrap_or("healthy"),
                "stats": full.route_stats(&route, now_ms),
                "verify": r.verify(),
                "last_check": state.last_check,
                "last_ok_ms": state.last_ok_ms,
            })
        })
        .collect();
    let status = full.verified_status(catalog.policy_for(model).verify_idle_ms, now_ms);
    let history: Vec<HourReport> = full.model_hours.iter().map(HourReport::of).collect();
    serde_json::json!({"model": model.id, "status": status, "routes": routes, "accounts": accounts.accounts,
                       "history": history})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FailureClass;
    use crate::health::{AttemptOutcome, HealthConfig, Observation, RequestObservation};
    use serde_json::json;

    const MIN: u64 = 60_000;
    const HOUR: u64 = 60 * MIN;
    const T0: u64 = 1_000 * MIN;

    /// A report's (or one model's) JSON without the history and the routes' charts (tested on
    /// their own).
    fn without_history(mut v: serde_json::Value) -> serde_json::Value {
        fn strip(m: &mut serde_json::Value) {
            if let Some(m) = m.as_object_mut() {
                m.remove("history");
                for r in m.get_mut("order").and_then(|o| o.as_array_mut()).into_iter().flatten() {
                    if let Some(r) = r.as_object_mut() {
                        r.remove("chart");
                    }
                }
            }
        }
        if let Some(models) = v.get_mut("models").and_then(|m| m.as_array_mut()) {
            models.iter_mut().for_each(strip);
        } else {
            strip(&mut v);
        }
        v
    }

    /// `answered` answered and `unanswered` unanswered requests spread over the last half hour, the
    /// answered ones streams with `ttfb_ms`.
    fn traffic(answered: u32, unanswered: u32, ttfb_ms: Option<u64>) -> ModelHealth {
        let mut h = ModelHealth::default();
        let total = u64::from(answered + unanswered);
        for i in 0..total {
            h.observe_request(&RequestObservation {
                provoked_at: Vec::new(),
                at_ms: T0 + (i * 30 * MIN) / total.max(1),
                answered: i < u64::from(answered),
                counted: true,
                stream_ttfb_ms: ttfb_ms,
            });
        }
        h
    }

    #[test]
    fn status_words_for_crafted_traffic() {
        let now = T0 + 30 * MIN;
        let cases: &[(&str, u32, u32, Option<u64>, StatusWord)] = &[
            ("none", 0, 0, None, StatusWord::NoRecentRequests),
            ("all answered", 20, 0, Some(800), StatusWord::Operational),
            ("95 % exactly", 19, 1, Some(800), StatusWord::Operational),
            ("96 %", 96, 4, None, StatusWord::Operational),
            ("94 %", 94, 6, Some(800), StatusWord::Degraded),
            ("50 % exactly: not down", 3, 3, None, StatusWord::Degraded),
            ("40 %, 3 unanswered", 2, 3, None, StatusWord::Down),
            ("40 %, 30 unanswered", 20, 30, None, StatusWord::Down),
            ("33 %, 2 unanswered", 1, 2, None, StatusWord::Degraded),
            ("0 %, 2 unanswered", 0, 2, None, StatusWord::Degraded),
            ("0 %, 3 unanswered", 0, 3, None, StatusWord::Down),
            ("median TTFB 11 s", 20, 0, Some(11_000), StatusWord::Degraded),
            ("median TTFB 10 s exactly", 20, 0, Some(10_000), StatusWord::Operational),
            ("non-stream traffic has no TTFB", 20, 0, None, StatusWord::Operational),
        ];
        for (name, answered, unanswered, ttfb, want) in cases {
            let h = traffic(*answered, *unanswered, *ttfb);
            assert_eq!(h.status(now), *want, "{name}");
            assert_eq!(model_status(&h.model_buckets, now), *want, "{name}");
        }
    }

    #[test]
    fn only_the_last_hour_and_counted_requests_matter() {
        let h = traffic(0, 10, None);
        assert_eq!(h.status(T0 + 30 * MIN), StatusWord::Down);
        // An hour after the last request it is all gone.
        assert_eq!(h.status(T0 + 30 * MIN + 60 * MIN), StatusWord::NoRecentRequests);
        // Part aged out: the newer half (answered) decides.
        let mut h = traffic(0, 10, None);
        for i in 0..10 {
            h.observe_request(&RequestObservation {
                provoked_at: Vec::new(),
                at_ms: T0 + 70 * MIN + i,
                answered: true,
                counted: true,
                stream_ttfb_ms: None,
            });
        }
        assert_eq!(h.status(T0 + 70 * MIN), StatusWord::Degraded);
        assert_eq!(h.status(T0 + 90 * MIN), StatusWord::Operational);
        // Client errors, 402 and our 429 are not counted.
        let mut h = ModelHealth::default();
        for _ in 0..10 {
            h.observe_request(&RequestObservation {
                provoked_at: Vec::new(),
                at_ms: T0,
                answered: false,
                counted: false,
                stream_ttfb_ms: None,
            });
        }
        assert_eq!(h.status(T0), StatusWord::NoRecentRequests);
        // TTFB median mixes samples across the hour.
        let mut h = traffic(2, 0, Some(12_000));
        for i in 0..3 {
            h.observe_request(&RequestObservation {
                provoked_at: Vec::new(),
                at_ms: T0 + 40 * MIN + i,
                answered: true,
                counted: true,
                stream_ttfb_ms: Some(2_000),
            });
        }
        assert_eq!(h.status(T0 + 40 * MIN), StatusWord::Operational);
    }

    #[test]
    fn labels_and_wire_names() {
        let table = [
            (StatusWord::Operational, "Operational", "operational"),
            (StatusWord::Degraded, "Degraded", "degraded"),
            (StatusWord::Down, "Down", "down"),
            (StatusWord::NoRecentRequests, "No recent requests", "no_recent_requests"),
            (StatusWord::Unverified, "Not recently verified", "unverified"),
        ];
        for (word, label, wire) in table {
            assert_eq!(word.label(), label);
            assert_eq!(word.wire(), wire, "the page's class is the wire name");
            assert_eq!(serde_json::to_value(word).unwrap(), serde_json::json!(wire));
            assert_eq!(
                serde_json::from_value::<StatusWord>(serde_json::json!(wire)).unwrap(),
                word
            );
        }
    }

    // ---- the report, `/status` and admin health ----------------------------------------------

    /// Providers `a` (account `acct-a`) and `b` (account `acct-b`); `models` as (id, [(route, provider)]).
    fn catalog(models: &[(&str, &[(&str, &str)])]) -> Catalog {
        let models: Vec<serde_json::Value> = models
            .iter()
            .map(|(id, routes)| {
                let routes: Vec<serde_json::Value> = routes
                    .iter()
                    .map(|(r, p)| {
                        json!({"id": r, "provider": p, "upstream_model": "u", "apis": ["chat"],
                               "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0}})
                    })
                    .collect();
                json!({"id": id, "context_window": 8000, "max_output_tokens": 1000, "routes": routes})
            })
            .collect();
        let doc = json!({
            "providers": [
                {"id": "a", "base_url": "https://a/v1", "auth": "bearer", "account": "acct-a"},
                {"id": "b", "base_url": "https://b/v1", "auth": "bearer", "account": "acct-b"}
            ],
            "models": models
        });
        Catalog::parse(doc.to_string().as_bytes()).unwrap()
    }

    fn attempt(route: &str, account: &str, outcome: AttemptOutcome, at_ms: u64) -> Observation {
        Observation::at(route, account, outcome, at_ms)
    }

    fn request(h: &mut ModelHealth, at_ms: u64, answered: bool) {
        h.observe_request(&RequestObservation {
            provoked_at: Vec::new(),
            at_ms,
            answered,
            counted: true,
            stream_ttfb_ms: None,
        });
    }

    fn healths(list: Vec<(&str, ModelHealth)>) -> BTreeMap<String, ModelHealth> {
        list.into_iter().map(|(id, h)| (id.to_string(), h)).collect()
    }

    /// The HTML section of the model shown as `id` (escaped as on the page).
    fn section<'a>(html: &'a str, id: &str) -> &'a str {
        html.split("<section>")
            .find(|s| s.starts_with(&format!("<h2><span>{id}</span>")))
            .unwrap_or_else(|| panic!("{id} not on the page: {html}"))
    }

    /// A section's heading and route table, without the history strip and the charts.
    fn table_part(section: &str) -> String {
        let (head, rest) = section.split_once("</h2>").unwrap();
        let from = rest.find("<div class=\"small\">").unwrap();
        let to = rest.find("</table>").unwrap() + "</table>".len();
        format!("{head}</h2>{}", &rest[from..to])
    }

    #[test]
    fn a_demoted_route_is_listed_last_as_cooling_until_its_cooldown_ends() {
        // T0 is 16:40:00 UTC; r0 is overloaded at 16:40:07 (demoted for 5 minutes), r1 answers.
        let c = catalog(&[("m", &[("r0", "a"), ("r1", "b")])]);
        let at = T0 + 7_000;
        let mut h = ModelHealth::default();
        h.observe(
            &attempt("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Overloaded), at),
            &HealthConfig::default(),
        );
        let mut answer = attempt("r1", "acct-b", AttemptOutcome::Success, at);
        answer.ttfb_ms = Some(800);
        answer.output_tokens = 100;
        answer.duration_ms = 2_800; // 100 tokens in 2 s after the first byte
        h.observe(&answer, &HealthConfig::default());
        request(&mut h, at, true);
        let models = healths(vec![("m", h)]);
        let now = T0 + MIN;

        let r = report(&c, &models, &ModelHealth::default(), now);
        assert_eq!(
            without_history(serde_json::to_value(&r).unwrap()),
            json!({
                "total": 1,
                "healthy": 1,
                "models": [{
                    "id": "m",
                    "status": "operational",
                    "label": "Operational",
                    "healthy_routes": 1,
                    "routes": 2,
                    "order": [
                        {"id": "r1", "provider": "b", "healthy": true, "state": "healthy",
                         "cooldown_until_ms": null, "success_rate": 1.0, "median_ttfb_ms": 800,
                         "tokens_per_s": 50.0, "last_verified_ms": null},
                        {"id": "r0", "provider": "a", "healthy": false, "state": "cooling",
                         "cooldown_until_ms": at + 5 * MIN, "success_rate": 0.0, "median_ttfb_ms": null,
                         "tokens_per_s": null, "last_verified_ms": null}
                    ]
                }],
                "generated_at_ms": now
            })
        );

        // The history ends with the current hour (16:00), which holds the one request; the charts
        // end with the current minute.
        let history = &r.models[0].history;
        assert_eq!(
            history.len(),
            17,
            "00:00 to 16:00 of the first day: no hours before the epoch"
        );
        let hour = |h: &HourReport| (h.start_ms, h.answered, h.unanswered, h.status, h.label.to_string());
        assert_eq!(
            hour(&history[16]),
            (16 * HOUR, 1, 0, StatusWord::Operational, "Operational".to_string())
        );
        assert_eq!(
            hour(&history[0]),
            (0, 0, 0, StatusWord::NoRecentRequests, "No requests".to_string())
        );
        let chart = &r.models[0].order[0].chart;
        assert_eq!(chart.len(), 12);
        assert_eq!(
            chart[11].start_ms,
            T0 - 3 * MIN,
            "16:37, the last five minutes to 16:41"
        );
        assert_eq!(
            (chart[11].success_rate, chart[11].median_ttfb_ms),
            (Some(1.0), Some(800))
        );
        assert!(chart[..11].iter().all(|p| p.success_rate.is_none()));

        let html = render_html(&r);
        assert!(html.starts_with("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"));
        assert!(html.ends_with("</ul></figure></div></section></body></html>"), "{html}");
        assert!(html.contains(
            "<p class=\"small\">1 of 1 models have a healthy route. Last hour of real requests; updated 16:41:00 UTC.</p>"
        ));
        assert_eq!(
            table_part(section(&html, "m")),
            "<h2><span>m</span><span class=\"w operational\">Operational</span></h2>\
             <div class=\"small\">1 / 2 routes healthy · current order:</div>\
             <table><tr><th>#</th><th>route</th><th>state</th><th>success</th><th class=\"hide\">TTFB</th><th class=\"hide\">tok/s</th><th class=\"hide\">verified</th></tr>\
             <tr><td>1</td><td>r1 <span class=\"small\">b</span></td><td>healthy</td><td>100 %</td><td class=\"hide\">800 ms</td><td class=\"hide\">50</td><td class=\"hide\">–</td></tr>\
             <tr><td>2</td><td>r0 <span class=\"small\">a</span></td><td><span class=\"demoted\">demoted until 16:45:07 UTC</span></td><td>0 %</td><td class=\"hide\">–</td><td class=\"hide\">–</td><td class=\"hide\">–</td></tr>\
             </table>"
        );

        // Once the cooldown has ended the route is back in its place, probe due, still not healthy.
        let later = report(&c, &models, &ModelHealth::default(), at + 5 * MIN);
        let m = &later.models[0];
        let order: Vec<(&str, &str, bool)> = m
            .order
            .iter()
            .map(|r| (r.id.as_str(), r.state.as_ref(), r.healthy))
            .collect();
        assert_eq!(order, [("r0", "probe_due", false), ("r1", "healthy", true)]);
        assert_eq!((m.healthy_routes, m.routes), (1, 2));
        assert!(render_html(&later).contains("<td><span class=\"demoted\">probe due</span></td>"));
    }

    #[test]
    fn a_route_whose_account_is_cooling_is_demoted_too() {
        let c = catalog(&[("m", &[("r0", "a"), ("r1", "b")])]);
        let mut accounts = ModelHealth::default();
        accounts.observe(
            &attempt("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Account), T0),
            &HealthConfig::default(),
        );
        // The model's own health is empty (missing from the map): only the account demotes r0.
        let r = report(&c, &BTreeMap::new(), &accounts, T0 + MIN);
        let order: Vec<(&str, &str, Option<u64>)> = r.models[0]
            .order
            .iter()
            .map(|r| (r.id.as_str(), r.state.as_ref(), r.cooldown_until_ms))
            .collect();
        assert_eq!(order, [("r1", "healthy", None), ("r0", "cooling", Some(T0 + 5 * MIN))]);
        assert_eq!(r.models[0].healthy_routes, 1);
    }

    #[test]
    fn a_model_without_requests_reads_no_recent_requests() {
        let c = catalog(&[("quiet", &[("r0", "a")])]);
        let r = report(&c, &BTreeMap::new(), &ModelHealth::default(), T0);
        assert_eq!(
            without_history(serde_json::to_value(&r.models[0]).unwrap()),
            json!({
                "id": "quiet",
                "status": "no_recent_requests",
                "label": "No recent requests",
                "healthy_routes": 1,
                "routes": 1,
                "order": [{"id": "r0", "provider": "a", "healthy": true, "state": "healthy",
                           "cooldown_until_ms": null, "success_rate": null, "median_ttfb_ms": null,
                           "tokens_per_s": null, "last_verified_ms": null}]
            })
        );
        assert_eq!((r.total, r.healthy), (1, 1));
        let html = render_html(&r);
        assert_eq!(
            table_part(section(&html, "quiet")),
            "<h2><span>quiet</span><span class=\"w no_recent_requests\">No recent requests</span></h2>\
             <div class=\"small\">1 / 1 routes healthy · current order:</div>\
             <table><tr><th>#</th><th>route</th><th>state</th><th>success</th><th class=\"hide\">TTFB</th><th class=\"hide\">tok/s</th><th class=\"hide\">verified</th></tr>\
             <tr><td>1</td><td>r0 <span class=\"small\">a</span></td><td>healthy</td><td>–</td><td class=\"hide\">–</td><td class=\"hide\">–</td><td class=\"hide\">–</td></tr>\
             </table>"
        );
    }

    #[test]
    fn a_model_whose_requests_went_unanswered_reads_down_and_has_no_healthy_route() {
        let c = catalog(&[("up", &[("u0", "b")]), ("down", &[("d0", "a")])]);
        let mut down = ModelHealth::default();
        for i in 0..3 {
            down.observe(
                &attempt("d0", "acct-a", AttemptOutcome::Failure(FailureClass::Timeout), T0 + i),
                &HealthConfig::default(),
            );
            request(&mut down, T0 + i, false);
        }
        let mut up = ModelHealth::default();
        request(&mut up, T0, true);
        let models = healths(vec![("down", down), ("up", up)]);
        let r = report(&c, &models, &ModelHealth::default(), T0 + MIN);

        assert_eq!((r.total, r.healthy), (2, 1));
        let ids: Vec<&str> = r.models.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["up", "down"], "catalog order");
        let m = &r.models[1];
        assert_eq!((m.status, m.label.as_ref()), (StatusWord::Down, "Down"));
        assert_eq!((m.healthy_routes, m.routes), (0, 1));
        assert_eq!(
            (m.order[0].state.as_ref(), m.order[0].success_rate),
            ("cooling", Some(0.0))
        );
        assert_eq!(r.models[0].status, StatusWord::Operational);

        let html = render_html(&r);
        assert!(
            html.contains("<p class=\"small\">1 of 2 models have a healthy route."),
            "{html}"
        );
        let s = section(&html, "down");
        assert!(
            table_part(s).starts_with(
                "<h2><span>down</span><span class=\"w down\">Down</span></h2>\
                 <div class=\"small\">0 / 1 routes healthy · current order:</div>"
            ),
            "{s}"
        );
        assert!(s.contains("<td>d0 <span class=\"small\">a</span></td><td><span class=\"demoted\">demoted until 16:45:00 UTC</span></td><td>0 %</td>"), "{s}");
        assert!(section(&html, "up").contains("<span class=\"w operational\">Operational</span>"));
    }

    #[test]
    fn each_hour_of_the_history_has_its_own_word() {
        let hour = |requests, answered, ttfb_samples, ttfb_slow| Hour {
            hour: 0,
            requests,
            answered,
            ttfb_samples,
            ttfb_slow,
        };
        let cases = [
            ("no requests", hour(0, 0, 0, 0), StatusWord::NoRecentRequests),
            ("all answered", hour(20, 20, 20, 0), StatusWord::Operational),
            ("95 % exactly", hour(20, 19, 0, 0), StatusWord::Operational),
            ("94 %", hour(100, 94, 0, 0), StatusWord::Degraded),
            ("40 %, 3 unanswered", hour(5, 2, 0, 0), StatusWord::Down),
            ("0 %, 2 unanswered", hour(2, 0, 0, 0), StatusWord::Degraded),
            ("most TTFBs slow", hour(20, 20, 5, 3), StatusWord::Degraded),
            ("half slow", hour(20, 20, 4, 2), StatusWord::Operational),
        ];
        for (name, h, want) in cases {
            assert_eq!(hour_status(&h), want, "{name}");
        }
        assert_eq!(StatusWord::NoRecentRequests.hour_label(), "No requests");
        assert_eq!(StatusWord::Down.hour_label(), "Down");
        // Folded from real requests: the hour before holds an outage, this one is fine.
        let now = 20_000 * 24 * HOUR + 14 * HOUR + 20 * MIN; // 14:20 UTC
        let mut h = ModelHealth::default();
        for i in 0..3 {
            request(&mut h, now - HOUR - i, false);
        }
        request(&mut h, now - MIN, true);
        let c = catalog(&[("m", &[("r0", "a")])]);
        let r = report(&c, &healths(vec![("m", h)]), &ModelHealth::default(), now);
        let words: Vec<StatusWord> = r.models[0].history.iter().map(|h| h.status).collect();
        let mut want = vec![StatusWord::NoRecentRequests; 24];
        want[22] = StatusWord::Down;
        want[23] = StatusWord::Operational;
        assert_eq!(words, want);
        assert_eq!(r.models[0].history[22].start_ms, now - 20 * MIN - HOUR);
        assert_eq!(
            r.models[0].status,
            StatusWord::Operational,
            "the outage left the last hour"
        );
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v["models"][0]["history"][22],
            json!({"start_ms": now - 20 * MIN - HOUR, "answered": 0, "unanswered": 3, "status": "down",
                   "label": "Down"})
        );
    }

    #[test]
    fn the_page_shows_each_hour_as_a_bar_with_its_words_and_each_route_as_a_chart() {
        let now = 20_000 * 24 * HOUR + 14 * HOUR + 20 * MIN; // 14:20 UTC
        let mut h = ModelHealth::default();
        for i in 0..3 {
            request(&mut h, now - HOUR - i, false);
        }
        request(&mut h, now - MIN, true);
        let mut answer = attempt("r0", "acct-a", AttemptOutcome::Success, now - MIN);
        answer.ttfb_ms = Some(900);
        h.observe(&answer, &HealthConfig::default());
        let c = catalog(&[("m", &[("r0", "a"), ("r1", "b")])]);
        let r = report(&c, &healths(vec![("m", h)]), &ModelHealth::default(), now);
        let html = render_html(&r);
        let s = section(&html, "m");
        let bars: Vec<&str> = s.split("<span class=\"bar ").skip(1).collect();
        assert_eq!(bars.len(), 24);
        assert!(
            bars[0].starts_with(
                "no_recent_requests\" role=\"listitem\" title=\"15:00 UTC: No requests\">\
                 <span class=\"sr\">15:00 UTC: No requests</span></span>"
            ),
            "{}",
            bars[0]
        );
        assert!(
            bars[22].starts_with("down\" role=\"listitem\" title=\"13:00 UTC: Down, 0 of 3 answered\">"),
            "{}",
            bars[22]
        );
        assert!(
            bars[23].contains("<span class=\"sr\">14:00 UTC: Operational, 1 of 1 answered (this hour so far)</span>"),
            "{}",
            bars[23]
        );
        assert!(
            s.contains("<div class=\"axis small\" aria-hidden=\"true\"><span>15:00 UTC</span><span>now</span></div>")
        );
        // One chart per route, in the order's order, each an image with a title and a text list.
        let figures: Vec<&str> = s.split("<figure>").skip(1).collect();
        assert_eq!(figures.len(), 2);
        assert!(figures[0].starts_with("<figcaption class=\"small\">r0 · last hour · slowest 900 ms</figcaption>\
             <svg role=\"img\" aria-labelledby=\"chart-1\" viewBox=\"0 0 240 60\" width=\"240\" height=\"60\">\
             <title id=\"chart-1\">r0: success rate and median time to first content, last hour; slowest 900 ms</title>"), "{}", figures[0]);
        assert!(
            figures[0].contains("<rect x=\"223\" y=\"6\" width=\"14\" height=\"48\" fill=\"#1e8e3e\"/>"),
            "{}",
            figures[0]
        );
        assert!(figures[0].contains("<circle cx=\"230\" cy=\"6.0\""), "{}", figures[0]);
        assert!(
            figures[0].contains("<li>13:21–13:26 UTC: no attempts</li>"),
            "{}",
            figures[0]
        );
        assert!(
            figures[0]
                .contains("<li>14:16–14:21 UTC: 100 % success of 1, median time to first content 900 ms</li></ul>"),
            "{}",
            figures[0]
        );
        assert!(figures[1]
            .contains("<title id=\"chart-2\">r1: success rate and median time to first content, last hour</title>"));
        assert!(!figures[1].contains("<rect"), "no attempts, no columns");
        assert!(figures[1].contains(">no attempts</text></svg>"), "{}", figures[1]);
        assert!(!figures[0].contains(">no attempts</text>"));
        // The legend names every colour.
        for word in [
            "Operational",
            "Degraded",
            "Down",
            "No requests",
            "success rate",
            "median time to first content",
        ] {
            assert!(html.contains(&format!("{word}</span>")), "{word}");
        }
    }

    #[test]
    fn ids_are_escaped_in_the_html() {
        let evil = "<script>alert(\"1&2\")</script>";
        let r = Report {
            total: 1,
            healthy: 1,
            models: vec![ModelReport {
                id: evil.into(),
                status: StatusWord::Operational,
                label: StatusWord::Operational.label().into(),
                healthy_routes: 1,
                routes: 1,
                order: vec![RouteReport {
                    id: evil.into(),
                    provider: "<b>p</b>".into(),
                    healthy: true,
                    state: "healthy".into(),
                    cooldown_until_ms: None,
                    success_rate: Some(0.994),
                    median_ttfb_ms: Some(1_234),
                    tokens_per_s: Some(41.6),
                    last_verified_ms: Some(T0 + 3_723_000),
                    chart: vec![ChartPoint {
                        start_ms: T0,
                        answered: 1,
                        failed: 0,
                        success_rate: Some(1.0),
                        median_ttfb_ms: Some(700),
                    }],
                }],
                history: Vec::new(),
            }],
            generated_at_ms: T0,
        };
        let html = render_html(&r);
        // The report as the status object sends it to every isolate (SPEC §22): read back, it
        // says and renders the same.
        let sent: Report = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert_eq!(render_html(&sent), html);
        assert_eq!(
            (sent.models[0].label.as_ref(), sent.models[0].order[0].state.as_ref()),
            ("Operational", "healthy")
        );
        let escaped = "&lt;script&gt;alert(&quot;1&amp;2&quot;)&lt;/script&gt;";
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<b>"), "{html}");
        assert!(html.contains(&format!("<h2><span>{escaped}</span>")), "{html}");
        assert!(
            html.contains(&format!(
                "<tr><td>1</td><td>{escaped} <span class=\"small\">&lt;b&gt;p&lt;/b&gt;</span></td><td>healthy</td>\
                 <td>99 %</td><td class=\"hide\">1234 ms</td><td class=\"hide\">42</td><td class=\"hide\">17:42:03 UTC</td></tr>"
            )),
            "{html}"
        );
        // In the route's chart too: its caption and the SVG's title.
        assert!(
            html.contains(&format!(
                "<figcaption class=\"small\">{escaped} · last hour · slowest 700 ms</figcaption>"
            )),
            "{html}"
        );
        assert!(
            html.contains(&format!("<title id=\"chart-1\">{escaped}: success rate")),
            "{html}"
        );
    }

    #[test]
    fn the_model_list_carries_apis_prices_and_the_status_word() {
        let doc = json!({
            "providers": [{"id": "a", "base_url": "https://a/v1", "auth": "bearer"}],
            "models": [{"id": "m", "context_window": 8000, "max_output_tokens": 1000, "routes": [
                {"id": "r0", "provider": "a", "upstream_model": "u", "apis": ["chat", "responses"],
                 "price": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}},
                {"id": "r1", "provider": "a", "upstream_model": "u", "apis": ["messages", "chat"],
                 "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}}]}]
        });
        let c = Catalog::parse(doc.to_string().as_bytes()).unwrap();
        let mut full = ModelHealth::default();
        request(&mut full, T0, true);
        let models = BTreeMap::from([("m".to_string(), full)]);
        let r = report(&c, &models, &ModelHealth::default(), T0 + MIN);
        let list = model_list(&c, &r);
        let m = &list["data"][0];
        assert_eq!(list["object"], "list");
        assert_eq!((&m["id"], &m["context_window"]), (&json!("m"), &json!(8000)));
        assert_eq!(
            m["supported_apis"],
            json!(["chat", "gemini", "messages", "responses"]),
            "translated"
        );
        assert_eq!(m["native_apis"], json!(["chat", "messages", "responses"]));
        let mut strict = doc.clone();
        strict["models"][0]["policy"] = json!({"translate": false});
        let strict = Catalog::parse(strict.to_string().as_bytes()).unwrap();
        assert_eq!(
            model_list(&strict, &r)["data"][0]["supported_apis"],
            json!(["chat", "messages", "responses"]),
            "a model that forbids translation is called only natively"
        );
        assert_eq!(m["pricing"], json!({"prompt": "0.00000015", "completion": "0.0000006"}));
        assert_eq!(
            m["pricing_max"],
            json!({"prompt": "0.000003", "completion": "0.000015"})
        );
        assert_eq!(m["status"], json!(r.models[0].status));
        assert_eq!(m["status"], "operational");
    }

    #[test]
    fn admin_report_shows_each_routes_breaker_and_its_accounts_state() {
        let c = catalog(&[("m", &[("r0", "a"), ("r1", "b")])]);
        let mut full = ModelHealth::default();
        full.observe(
            &attempt("r0", "acct-a", AttemptOutcome::Failure(FailureClass::Overloaded), T0),
            &HealthConfig::default(),
        );
        request(&mut full, T0, true);
        let mut accounts = ModelHealth::default();
        accounts.observe(
            &attempt("r1", "acct-b", AttemptOutcome::Failure(FailureClass::Account), T0),
            &HealthConfig::default(),
        );
        let model = c.model("m").unwrap();
        let loads = BTreeMap::from([(
            "r1".to_string(),
            RouteLoad {
                in_flight: 2,
                queued: 3,
            },
        )]);
        let v = admin_report(&c, model, &full, &accounts, &loads, T0 + MIN);
        assert_eq!(v["model"], "m");
        assert_eq!(v["status"], "operational");
        let routes = v["routes"].as_array().unwrap();
        let rows: Vec<(&str, &str, &str, &str)> = routes
            .iter()
            .map(|r| {
                (
                    r["route"].as_str().unwrap(),
                    r["account"].as_str().unwrap(),
                    r["state"].as_str().unwrap(),
                    r["account_state"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            rows,
            [
                ("r0", "acct-a", "cooling", "healthy"),
                ("r1", "acct-b", "healthy", "cooling")
            ],
            "catalog order; route and account breakers apart"
        );
        assert_eq!(routes[0]["breaker"]["consecutive_failures"], 1);
        assert_eq!(routes[0]["breaker"]["demoted_until_ms"], T0 + 5 * MIN);
        assert_eq!(routes[0]["stats"]["failed"], 1);
        assert_eq!(routes[1]["breaker"]["consecutive_failures"], 0);
        assert_eq!(v["accounts"]["acct-b"]["demoted_until_ms"], T0 + 5 * MIN);
        assert_eq!((&routes[1]["in_flight"], &routes[1]["queued"]), (&json!(2), &json!(3)));
        assert_eq!((&routes[0]["in_flight"], &routes[0]["queued"]), (&json!(0), &json!(0)));
    }

    #[test]
    fn operational_needs_an_answer_within_verify_idle_ms() {
        // 20 answered requests over 30 minutes, the last one 16 minutes ago.
        let mut h = traffic(20, 0, None);
        let now = T0 + 46 * MIN;
        assert_eq!(h.status(now), StatusWord::Operational);
        assert_eq!(h.verified_status(20 * MIN, now), StatusWord::Operational);
        // Nothing answered (live or checked) since: not Operational while the rule is on.
        assert_eq!(h.verified_status(15 * MIN, now), StatusWord::Unverified);
        assert_eq!(
            h.verified_status(0, now),
            StatusWord::Operational,
            "0 turns the rule off"
        );
        h.observe(
            &attempt("r", "a", AttemptOutcome::Success, now - 16 * MIN),
            &HealthConfig::default(),
        );
        assert_eq!(
            h.verified_status(15 * MIN, now),
            StatusWord::Unverified,
            "16 minutes old"
        );
        let check = crate::verify::CheckKind::Idle;
        h.record_check("r", check, &Ok(()), now - MIN, true, &HealthConfig::default());
        assert_eq!(h.verified_status(15 * MIN, now), StatusWord::Operational);
        // The rule never makes a worse word better.
        let down = traffic(0, 10, None);
        assert_eq!(down.verified_status(15 * MIN, now), StatusWord::Down);
        let c = catalog(&[("m", &[("r", "a")])]);
        let r = report(
            &c,
            &BTreeMap::from([("m".to_string(), h)]),
            &ModelHealth::default(),
            now,
        );
        assert_eq!(
            r.models[0]
                .order
                .iter()
                .find(|x| x.id == "r")
                .and_then(|x| x.last_verified_ms),
            Some(now - MIN)
        );
    }
}
