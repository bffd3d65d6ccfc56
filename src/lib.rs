//! Switchyard's edge adapter: the Worker's entry points, wiring only.
//!
//! Everything that decides lives in `switchyard-core`; the modules here move bytes between
//! the client, D1 and the upstreams and call into the core.

mod clock;
mod http;
mod ids;
mod proxy;
mod store;
mod stream;

use worker::{event, Context, Env, Request, Response, Result};

#[event(start)]
fn start() {
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    Ok(http::handle(req, env, ctx).await)
}
