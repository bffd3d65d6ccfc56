//! OpenAI Chat Completions (`POST /v1/chat/completions`): request validation.

use serde_json::Value;

use super::{optional_bool, optional_u64, parse_common, ClientRequest};
use crate::catalog::Api;
use crate::error::ApiError;

/// Parses and validates a Chat Completions request body.
pub fn parse_request(bytes: &[u8]) -> Result<ClientRequest, ApiError> {
    let (body, model, provider) = parse_common(bytes)?;
    match body.get("messages") {
        Some(Value::Array(m)) if !m.is_empty() => {}
        Some(Value::Array(_)) => return Err(ApiError::invalid("`messages` must not be empty.", Some("messages"))),
        None => return Err(ApiError::invalid("`messages` is required.", Some("messages"))),
        Some(_) => return Err(ApiError::invalid("`messages` must be an array.", Some("messages"))),
    }
    let stream = optional_bool(&body, "stream")?.unwrap_or(false);
    let max_tokens = match optional_u64(&body, "max_completion_tokens")? {
        Some(n) => Some(n),
        None => optional_u64(&body, "max_tokens")?,
    };
    let include_usage = match body.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => match o.get("include_usage") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(ApiError::invalid(
                    "`stream_options.include_usage` must be true or false.",
                    Some("stream_options.include_usage"),
                ))
            }
        },
        Some(_) => return Err(ApiError::invalid("`stream_options` must be an object.", Some("stream_options"))),
    };
    Ok(ClientRequest {
        api: Api::Chat,
        model,
        stream,
        max_tokens,
        include_usage,
        provider,
        body_len: bytes.len(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> Result<ClientRequest, ApiError> {
        parse_request(v.to_string().as_bytes())
    }

    fn param_of(e: ApiError) -> Option<String> {
        match e {
            ApiError::InvalidRequest { param, .. } => param,
            other => panic!("expected invalid_request, got {other:?}"),
        }
    }

    #[test]
    fn reads_the_fields_the_gateway_needs() {
        let r = parse(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true,
            "max_tokens": 50, "stream_options": {"include_usage": true},
            "provider": {"only": ["a"], "allow_fallbacks": false}, "models": ["m"]}))
        .unwrap();
        assert_eq!(r.model, "m");
        assert!(r.stream && r.include_usage);
        assert_eq!(r.max_tokens, Some(50));
        assert_eq!(r.provider.only, Some(vec!["a".to_string()]));
        assert_eq!(r.provider.allow_fallbacks, Some(false));
    }

    #[test]
    fn upstream_body_rewrites_model_keeps_order_and_drops_own_fields() {
        let raw = r#"{"temperature":0.5,"model":"public/m","messages":[{"role":"user","content":"hi"}],"provider":{"sort":"price"},"models":["public/m"],"zeta":1}"#;
        let r = parse_request(raw.as_bytes()).unwrap();
        let out = String::from_utf8(r.upstream_body("up-7")).unwrap();
        assert_eq!(out, r#"{"temperature":0.5,"model":"up-7","messages":[{"role":"user","content":"hi"}],"zeta":1}"#);
    }

    #[test]
    fn bad_input_is_a_400_naming_the_field() {
        assert!(matches!(parse_request(b"{not json"), Err(ApiError::InvalidRequest { .. })));
        assert!(matches!(parse_request(b"[1]"), Err(ApiError::InvalidRequest { .. })));
        assert_eq!(param_of(parse(json!({"messages": [{}]})).unwrap_err()).as_deref(), Some("model"));
        assert_eq!(param_of(parse(json!({"model": 3, "messages": [{}]})).unwrap_err()).as_deref(), Some("model"));
        assert_eq!(param_of(parse(json!({"model": "m"})).unwrap_err()).as_deref(), Some("messages"));
        assert_eq!(param_of(parse(json!({"model": "m", "messages": [{}], "stream": "yes"})).unwrap_err()).as_deref(), Some("stream"));
        assert_eq!(param_of(parse(json!({"model": "m", "messages": [{}], "max_tokens": -1})).unwrap_err()).as_deref(), Some("max_tokens"));
        assert_eq!(param_of(parse(json!({"model": "m", "messages": [{}], "models": ["m", "n"]})).unwrap_err()).as_deref(), Some("models"));
        assert_eq!(param_of(parse(json!({"model": "m", "messages": [{}], "provider": {"only": "a"}})).unwrap_err()).as_deref(), Some("provider"));
        assert_eq!(param_of(parse(json!({"model": "m", "messages": [{}], "provider": {"colour": 1}})).unwrap_err()).as_deref(), Some("provider"));
        let big = vec![b' '; super::super::MAX_BODY_BYTES + 1];
        assert!(matches!(parse_request(&big), Err(ApiError::InvalidRequest { .. })));
    }
}
