//! The JS boundary: the clock (the only place that reads time) and timers, aborting upstream
//! fetches and reading their bodies, random ids, and WebCrypto's RS256 signature (Vertex's JWT). The calls the runtime may refuse go through
//! `host.js`, where a refusal comes back as a value instead of an exception through Wasm.
//! Everything else in `src/` reaches the runtime through here or through `worker`. `apart` keeps
//! a future out of its caller's compiled code (V8 compiles a Wasm function on its first call).

pub mod abort;
pub mod apart;
pub mod clock;
pub mod ids;
pub mod sign;
