//! Switchyard's pure core: every decision the gateway makes, as plain functions over plain data.
//!
//! Nothing here touches `worker`, the clock, randomness or the network: time and random bytes are
//! arguments, so all of it is tested natively with `cargo test -p switchyard-core`. The Worker in
//! `src/` moves bytes and calls into this crate.

pub mod admin;
pub mod api;
pub mod batch;
pub mod billing;
pub mod bodies;
pub mod catalog;
pub mod classify;
pub mod count;
pub mod desks;
pub mod dialects;
pub mod echo;
pub mod error;
pub mod flight;
pub mod generation;
pub mod health;
pub mod ids;
pub mod keyrings;
pub mod keys;
pub mod ledgers;
pub mod limits;
pub mod money;
pub mod outbox;
pub mod plan;
pub mod providers;
pub mod records;
pub mod redact;
pub mod relay;
pub mod rollup;
pub mod settlement;
pub mod spread;
pub mod sse;
pub mod status;
pub mod tools;
pub mod verify;
pub mod wire;

pub use error::ApiError;
