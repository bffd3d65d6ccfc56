//! The facts of one request that its handler learns and its log line reports: ids, start time,
//! the error shape of its path, the key, the model and the route that answered, and its drills.

use switchyard_core::error::ErrorShape;

use crate::faults::Faults;

/// Per-request facts shared by the handlers and the log line.
pub struct RequestCtx {
    pub request_id: String,
    pub generation_id: String,
    pub started_ms: u64,
    /// Which error body shape this path speaks.
    pub shape: ErrorShape,
    /// Filled in by handlers for the log line: the public model and the route that answered.
    pub model: Option<String>,
    pub route: Option<String>,
    /// Attempts made at routes (set by the handlers that try routes).
    pub attempts: Option<u32>,
    /// Aborted when the client disconnects (`enable_request_signal`).
    pub client: worker::AbortSignal,
    /// The authenticated key and its account, once known.
    pub key_id: Option<String>,
    pub account_id: Option<String>,
    /// The request's drills, read once when it arrives (`crate::faults`; inert in production).
    pub faults: Faults,
}
