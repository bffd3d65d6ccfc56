//! `mock-upstream`: a fake LLM provider for testing the Switchyard gateway.
//!
//! It speaks OpenAI Chat Completions, Anthropic Messages, OpenAI Responses
//! and Google Gemini (stream and non-stream), and fakes two clouds that host them — Azure
//! OpenAI, AWS Bedrock (InvokeModel and Converse, SigV4, eventstream) and Google Vertex AI
//! (service-account tokens, Gemini and Anthropic models) — checking what they check. It
//! validates requests as strictly as the real providers, and misbehaves on demand: the request
//! path picks a scenario (error statuses with realistic bodies, hangs,
//! resets, slow or cut streams, error and malformed events, flaky keys…,
//! and answers that use the request: tool calls, tool results, JSON).
//! See [`scenario`] for the path grammar.
//!
//! Modules: [`http`] (HTTP/1.1 wire format), [`scenario`] (path parsing),
//! [`validate`] (request validation per dialect), [`count`] (the token-count endpoints), [`answer`] (answers the
//! request decides), [`dialect`] (bodies and SSE plans), [`state`] (per-key
//! counters), [`server`] (sockets and scenario execution), [`sock`] (RST on
//! close), [`json`] (ordered JSON builder); for the clouds [`azure`], [`bedrock`], [`converse`]
//! (Bedrock's Converse API), [`sigv4`] (signature verification), [`eventstream`] (AWS binary
//! framing), [`vertex`] (tokens and calls), [`rsa`] (RS256 verification) and [`crypto`] (SHA-256,
//! HMAC, CRC-32, base64).

// The workspace bans `Instant::now` and `SystemTime::now` because they panic on wasm32; this
// crate is a native test tool that needs real clocks (delays, `down-for`, `hang`, SigV4's
// five-minute window).
#![allow(clippy::disallowed_methods, reason = "native binary, never built for wasm32")]

pub mod answer;
pub mod azure;
pub mod bedrock;
pub mod converse;
pub mod count;
pub mod crypto;
pub mod dialect;
pub mod eventstream;
pub mod http;
pub mod json;
pub mod rsa;
pub mod scenario;
pub mod server;
pub mod sigv4;
pub mod sock;
pub mod state;
pub mod validate;
pub mod vertex;

pub use server::{bind, serve, spawn, spawn_with};
pub use state::{Secrets, Shared};
