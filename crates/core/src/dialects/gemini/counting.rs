//! Gemini's token counting (`POST /v1beta/models/{model}:countTokens`, SPEC §21): the request is
//! `{"contents": […]}` or `{"generateContentRequest": {…}}` (a whole generation request, with
//! its system instruction and tools); the answer is `{"totalTokens": n}`.

use serde_json::{json, Value};

use crate::dialects::body::Body;
use crate::dialects::{count_answer, Counting};
use crate::error::ApiError;

pub(crate) static COUNTING: Counting = Counting {
    request,
    body,
    tokens_at: "/totalTokens",
    answer,
};

/// The fields of a generation request the count takes (inside `generateContentRequest`).
const COUNTED: [&str; 7] = [
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
];

/// The generation request a count request stands for: the one it wraps, or its `contents`.
fn request(bytes: &[u8]) -> Result<Vec<u8>, ApiError> {
    let body = Body::parse(bytes)?;
    let wrapped = ["generateContentRequest", "generate_content_request"]
        .into_iter()
        .find_map(|name| body.raw(name).map(|raw| (name, raw)));
    match wrapped {
        Some((name, _)) if body.raw("contents").is_some() => Err(ApiError::invalid(
            format!("Give `contents` or `{name}`, not both."),
            Some("contents"),
        )),
        Some((name, raw)) => {
            let mut inner = Body::parse(raw.get().as_bytes())
                .map_err(|_| ApiError::invalid(format!("`{name}` must be an object."), Some(name)))?;
            inner.remove("model"); // the path names it
            Ok(inner.write(raw.get().len()))
        }
        None => Ok(body.write(bytes.len())),
    }
}

/// Gemini counts a whole generation request when it is wrapped, with the model named
/// `models/<model>`.
fn body(generation: &[u8], model: &str) -> Result<Vec<u8>, ApiError> {
    let mut inner = Body::parse(generation)?;
    inner.keep_only(&COUNTED);
    let name = format!("models/{model}");
    inner.set("model", &Value::from(name.as_str()));
    let inner = inner.write(generation.len());
    let mut out = Vec::with_capacity(inner.len() + 32);
    out.extend_from_slice(b"{\"generateContentRequest\":");
    out.extend_from_slice(&inner);
    out.push(b'}');
    Ok(out)
}

fn answer(tokens: u64, estimated: bool) -> Value {
    count_answer(json!({"totalTokens": tokens}), estimated)
}
