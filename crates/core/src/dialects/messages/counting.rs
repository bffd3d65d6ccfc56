//! Anthropic's token counting (`POST /v1/messages/count_tokens`, SPEC §21): the request is a
//! Messages request without `max_tokens`; the answer is `{"input_tokens": n}`.

use serde_json::{json, Value};

use crate::dialects::body::Body;
use crate::dialects::{count_answer, counted_fields, Counting};
use crate::error::ApiError;

pub(crate) static COUNTING: Counting = Counting {
    request,
    body,
    tokens_at: "/input_tokens",
    answer,
};

/// The fields Anthropic's count endpoint takes: the input and what shapes it, nothing about the
/// output (`max_tokens`, `stream`, sampling) — it refuses those.
const COUNTED: [&str; 10] = [
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "thinking",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
];

/// A count request has no `max_tokens`; the Messages parser wants one, and the count body
/// leaves it out again.
fn request(bytes: &[u8]) -> Result<Vec<u8>, ApiError> {
    let mut body = Body::parse(bytes)?;
    if body.raw("max_tokens").is_none() {
        body.set("max_tokens", &Value::from(1));
    }
    body.remove("stream"); // a count is never streamed
    Ok(body.write(bytes.len()))
}

fn body(generation: &[u8], model: &str) -> Result<Vec<u8>, ApiError> {
    counted_fields(generation, model, &COUNTED)
}

fn answer(tokens: u64, estimated: bool) -> Value {
    count_answer(json!({"input_tokens": tokens}), estimated)
}
