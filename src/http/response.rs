//! How handlers answer: the result type every handler returns, JSON responses, and the one
//! function that turns an [`ApiError`] into a response in the client's dialect.

use serde_json::Value;
use switchyard_core::error::ErrorShape;
use switchyard_core::ApiError;
use worker::{Headers, Response, ResponseBuilder};

pub type HandlerResult = Result<Response, ApiError>;

/// The one function that turns an error into a response.
pub fn error_response(err: &ApiError, shape: ErrorShape, generation_id: &str) -> Response {
    let mut response = json_response(err.status(), &err.body(shape, generation_id));
    for (name, value) in err.headers() {
        let _ = response.headers_mut().set(name, &value);
    }
    response
}

/// A JSON response with the given status.
pub fn json_response(status: u16, body: &Value) -> Response {
    let headers = Headers::new();
    let _ = headers.set("content-type", "application/json");
    ResponseBuilder::new()
        .with_status(status)
        .with_headers(headers)
        .fixed(serde_json::to_vec(body).unwrap_or_default())
}
