//! Switchyard's edge adapter: the Worker's entry points, wiring only.
//!
//! Everything that decides lives in `switchyard-core`; the modules here move bytes between
//! the client, D1 and the upstreams and call into the core.

mod batch;
mod billing;
mod budget;
mod calls;
mod count;
mod desk;
mod faults;
mod finish;
mod health;
mod http;
mod keyring;
mod limits;
mod object;
mod outbox;
mod proxy;
mod records;
mod relay;
mod report;
mod runtime;
mod shard;
mod store;
mod upstream;
mod verify;
mod vertex;

use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    Ok(http::handle(req, env, ctx).await)
}

/// The cron trigger: releases holds past their expiry, so a crash between hold and settlement
/// never locks money for good (SPEC §11); then rolls old ledger charges up into totals, so the
/// ledger does not grow without bound (SPEC §22).
#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    if billing::sweep(&env).await.is_err() {
        worker::console_error!("{{\"event\":\"sweep_failed\"}}");
    }
    if billing::roll_up(&env).await.is_err() {
        worker::console_error!("{{\"event\":\"ledger_rollup_failed\"}}");
    }
}
