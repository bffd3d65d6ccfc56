//! Issue 34's simulation: Switchyard's storage traffic at a platform's rates, as a discrete-event
//! model in simulated time (no clock is read; a seed fixes every draw, so a run is repeatable).
//!
//! Requests arrive (Poisson) at rate `R` over `I` isolates; keys and accounts are Zipf-drawn; answers
//! stream for ≈ 2 s. Each isolate has its own batches, snapshot flights and caches, and they are the
//! core's own types: `switchyard_core::batch::Batches` (health reports, settlements),
//! `switchyard_core::flight::Flight` (snapshot and status refresh with back-off),
//! `switchyard_core::health::ModelHealth` (breakers: the objects' state, each isolate's snapshot,
//! the plan's route order) and `for_accounts` (which outcomes go to the accounts' objects). Every
//! Durable Object instance and the D1 database is a single FIFO server with a service time per
//! call (`params::ServiceTimes`: assumptions until measured), reached over a round trip of 5–250 ms.
//!
//! - [`world`]: the deployment and the request path (`Design::Sharded`: what `src/` does, the
//!   health shards; `Design::Direct`: the path before them), in five parts: a request's stages,
//!   the isolates' batches, calls and stores, the public report, the shards;
//! - [`params`]: what a run simulates, and the Worker's rules as `src/` has them;
//! - [`stores`]: the stores and the kinds of call; [`server`]: a store as a FIFO server;
//! - [`report`]: the figures; [`scenarios`]: issue 34's runs;
//! - [`rng`]: the seeded generator.
//!
//! `cargo run -p switchyard-sim --release -- [scenario]` prints the tables (docs/SCALE.md,
//! "Simulation"); `cargo test -p switchyard-sim` runs short simulations that check the direct
//! design's ceilings, the shards' bounds, conservation and determinism.

pub mod params;
pub mod report;
pub mod rng;
pub mod scenarios;
pub mod server;
pub mod stores;
pub mod world;

pub use params::{Design, Params, ServiceTimes};
pub use report::Report;

/// Runs one simulation.
pub fn run(p: Params) -> Report {
    world::World::new(p).run()
}
