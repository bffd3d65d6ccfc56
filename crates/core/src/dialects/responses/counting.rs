//! OpenAI's input-token counting (`POST /v1/responses/input_tokens`, SPEC §21): the request is a
//! Responses request; the answer is `{"object": "response.input_tokens", "input_tokens": n}`.

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

/// The fields OpenAI's count endpoint takes: the input and what shapes it.
const COUNTED: [&str; 12] = [
    "model",
    "input",
    "instructions",
    "personality",
    "tools",
    "tool_choice",
    "text",
    "reasoning",
    "parallel_tool_calls",
    "previous_response_id",
    "conversation",
    "truncation",
];

/// A count request reads as the Responses request it counts (never streamed).
fn request(bytes: &[u8]) -> Result<Vec<u8>, ApiError> {
    let mut body = Body::parse(bytes)?;
    body.remove("stream");
    Ok(body.write(bytes.len()))
}

fn body(generation: &[u8], model: &str) -> Result<Vec<u8>, ApiError> {
    counted_fields(generation, model, &COUNTED)
}

fn answer(tokens: u64, estimated: bool) -> Value {
    count_answer(
        json!({"object": "response.input_tokens", "input_tokens": tokens}),
        estimated,
    )
}
