//! `mock-upstream`: a fake LLM provider for testing the Switchyard gateway.
//!
//! It speaks OpenAI Chat Completions, Anthropic Messages, OpenAI Responses
//! and Google Gemini (stream and non-stream), validates requests as strictly
//! as the real providers, and misbehaves on demand: the request
//! path picks a scenario (error statuses with realistic bodies, hangs,
//! resets, slow or cut streams, error and malformed events, flaky keys…,
//! and answers that use the request: tool calls, tool results, JSON).
//! See [`scenario`] for the path grammar.
//!
//! Modules: [`http`] (HTTP/1.1 wire format), [`scenario`] (path parsing),
//! [`validate`] (request validation per dialect), [`answer`] (answers the
//! request decides), [`dialect`] (bodies and SSE plans), [`state`] (per-key
//! counters), [`server`] (sockets and scenario execution), [`sock`] (RST on
//! close), [`json`] (ordered JSON builder).

// The workspace bans `Instant::now` because it panics on wasm32; this crate
// is a native test tool that needs a real clock (delays, `down-for`, `hang`).
#![allow(clippy::disallowed_methods, reason = "native binary, never built for wasm32")]

pub mod answer;
pub mod dialect;
pub mod http;
pub mod json;
pub mod scenario;
pub mod server;
pub mod sock;
pub mod state;
pub mod validate;

pub use server::{bind, serve, spawn};
pub use state::Shared;
