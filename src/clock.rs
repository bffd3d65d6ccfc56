//! The only place that reads time: wall-clock milliseconds from the Workers runtime.
//!
//! (`std::time` panics on wasm32; inside a request the runtime's clock advances only across I/O,
//! which is what deadlines and logs need.)

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    worker::Date::now().as_millis()
}
