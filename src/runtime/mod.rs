//! The JS boundary: the clock (the only place that reads time) and timers, aborting upstream
//! fetches and reading their bodies, random ids, and WebCrypto's RS256 signature (Vertex's JWT). The calls the runtime may refuse go through
//! `host.js`, where a refusal comes back as a value instead of an exception through Wasm.
//! Everything else in `src/` reaches the runtime through here or through `worker`.

pub mod abort;
pub mod clock;
pub mod ids;
pub mod sign;

use std::cell::Cell;

/// The request header that triggers a failure drill, honoured only when [`test_faults`] is on
/// (the health object's faults, the handler's abandonment).
pub const TEST_FAULT: &str = "x-switchyard-test-fault";

thread_local! {
    static TEST_FAULTS: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Whether the failure drills are on: the Worker var `SWITCHYARD_TEST_FAULTS` is `1` (set by
/// `scripts/test`, never in a deploy). Read once per isolate.
pub fn test_faults(env: &worker::Env) -> bool {
    TEST_FAULTS.with(|c| {
        if let Some(on) = c.get() {
            return on;
        }
        let on = env.var("SWITCHYARD_TEST_FAULTS").is_ok_and(|v| v.to_string() == "1");
        c.set(Some(on));
        on
    })
}
