//! The JS boundary: the clock (the only place that reads time) and timers, aborting upstream
//! fetches and reading their bodies, random ids, and JS calls made so that a refusal by the
//! runtime comes back as an error. Everything else in `src/` reaches the runtime through here or
//! through `worker`.

pub mod abort;
pub mod clock;
pub mod ids;
pub mod js;
