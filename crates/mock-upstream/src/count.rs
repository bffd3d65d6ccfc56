//! The providers' token-count endpoints, checked as the providers check them:
//!
//! - Anthropic `POST …/messages/count_tokens` (`model`, `messages`; the output's settings such as
//!   `max_tokens` are refused as extra inputs) → `{"input_tokens": n}`;
//! - OpenAI `POST …/responses/input_tokens` (the input and what shapes it; anything else is an
//!   unrecognized argument) → `{"object": "response.input_tokens", "input_tokens": n}`;
//! - Gemini `POST …/models/M:countTokens` (`contents`, or a whole `generateContentRequest` naming
//!   `models/M` — never both) → `{"totalTokens": n}`;
//! - Bedrock `POST /model/M/count-tokens` (`input.invokeModel.body`, base64 of an InvokeModel
//!   body, or `input.converse`) → `{"inputTokens": n}`;
//! - Vertex `…/publishers/anthropic/models/count-tokens:rawPredict` (Anthropic's count body with
//!   `model` and `anthropic_version: vertex-2023-10-16`) and `…/publishers/google/models/M:countTokens`
//!   (`contents` and the request's input fields) → Anthropic's or Gemini's answer.
//!
//! The count is the counted body's bytes / 4 (at least 1) — the mock's tokenizer, the same rule
//! its answers report usage by — so a test can ask the mock directly what it counts for a body.

use serde_json::{Map, Value};

use crate::dialect::{self, ErrSpec};
use crate::http::JsonReply;
use crate::rsa::base64_decode;
use crate::scenario::{Api, Host, Route};
use crate::{bedrock, vertex};

/// Anthropic's count endpoint's fields.
const ANTHROPIC: [&str; 10] = [
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
/// OpenAI's `input_tokens` fields.
const OPENAI: [&str; 12] = [
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
/// A wrapped Gemini generation request's fields.
const GEMINI_REQUEST: [&str; 8] = [
    "model",
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
];
/// Vertex's `countTokens` fields for Google's models.
const VERTEX_GOOGLE: [&str; 4] = ["contents", "systemInstruction", "tools", "generationConfig"];
/// Bedrock's Converse input fields.
const CONVERSE: [&str; 4] = ["messages", "system", "toolConfig", "additionalModelRequestFields"];

/// The mock's tokenizer: a quarter of the bytes, at least one.
pub fn tokens(counted: &[u8]) -> u64 {
    ((counted.len() / 4) as u64).max(1)
}

/// The answer to a count request: the count, or the provider's 400 for a body it would refuse.
pub fn reply(route: &Route, body: &[u8]) -> JsonReply {
    let refuse = |message: String| refusal(route, message);
    let Ok(Value::Object(fields)) = serde_json::from_slice::<Value>(body) else {
        return refuse("The request body is not a JSON object.".into());
    };
    match (&route.host, route.api) {
        (Host::Bedrock { .. }, _) => bedrock_count(&fields).map_or_else(&refuse, |n| answer("inputTokens", n)),
        (Host::Vertex { publisher, .. }, _) if publisher == "anthropic" => {
            match only(&fields, &[&ANTHROPIC[..], &["anthropic_version"]].concat())
                .and_then(|()| required(&fields, &["model", "messages"]))
                .and_then(|()| match fields.get("anthropic_version").and_then(Value::as_str) {
                    Some("vertex-2023-10-16") => Ok(()),
                    _ => Err("anthropic_version: must be vertex-2023-10-16".into()),
                }) {
                Ok(()) => answer("input_tokens", tokens(body)),
                Err(m) => refuse(m),
            }
        }
        (Host::Vertex { .. }, _) => match only(&fields, &VERTEX_GOOGLE).and_then(|()| required(&fields, &["contents"]))
        {
            Ok(()) => answer("totalTokens", tokens(body)),
            Err(m) => refuse(m),
        },
        (_, Api::Messages) => {
            match only(&fields, &ANTHROPIC).and_then(|()| required(&fields, &["model", "messages"])) {
                Ok(()) => answer("input_tokens", tokens(body)),
                Err(m) => refuse(m),
            }
        }
        (_, Api::Responses) => match only(&fields, &OPENAI).and_then(|()| required(&fields, &["model"])) {
            Ok(()) => JsonReply::new(
                200,
                format!(
                    r#"{{"object":"response.input_tokens","input_tokens":{}}}"#,
                    tokens(body)
                ),
            ),
            Err(m) => refuse(m),
        },
        (_, Api::Gemini) => gemini_count(&fields).map_or_else(&refuse, |n| answer("totalTokens", n)),
        (_, Api::Chat) => refuse("Chat Completions has no token count.".into()),
    }
}

fn answer(field: &str, n: u64) -> JsonReply {
    JsonReply::new(200, format!(r#"{{"{field}":{n}}}"#))
}

/// The provider's 400, in its shape.
fn refusal(route: &Route, message: String) -> JsonReply {
    match &route.host {
        Host::Bedrock { .. } => bedrock::error_reply(400, &message),
        Host::Vertex { .. } if route.api == Api::Gemini => vertex::google_error(400, "INVALID_ARGUMENT", &message),
        _ => {
            let e = ErrSpec {
                message: message.clone(),
                an_message: message,
                oa_type: Some("invalid_request_error".into()),
                ..dialect::status_error(None, 400, "count")
            };
            JsonReply::new(400, dialect::error_body(route.api, &e))
        }
    }
}

/// Every field is one of `allowed`; the first other is named as the providers name it.
fn only(fields: &Map<String, Value>, allowed: &[&str]) -> Result<(), String> {
    match fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(format!("{k}: Extra inputs are not permitted")),
        None => Ok(()),
    }
}

fn required(fields: &Map<String, Value>, names: &[&str]) -> Result<(), String> {
    match names.iter().find(|n| fields.get(**n).is_none_or(Value::is_null)) {
        Some(n) => Err(format!("{n}: Field required")),
        None => Ok(()),
    }
}

/// Gemini: `contents`, or a `generateContentRequest` with its `models/…` model — one of them.
fn gemini_count(fields: &Map<String, Value>) -> Result<u64, String> {
    only(fields, &["contents", "generateContentRequest"])?;
    match (fields.get("contents"), fields.get("generateContentRequest")) {
        (Some(_), Some(_)) => Err("contents and generateContentRequest are mutually exclusive.".into()),
        (Some(contents), None) => Ok(tokens(contents.to_string().as_bytes())),
        (None, Some(Value::Object(inner))) => {
            only(inner, &GEMINI_REQUEST)?;
            required(inner, &["model", "contents"])?;
            if !inner["model"].as_str().is_some_and(|m| m.starts_with("models/")) {
                return Err("generateContentRequest.model: must be models/{model}".into());
            }
            Ok(tokens(Value::Object(inner.clone()).to_string().as_bytes()))
        }
        _ => Err("contents: Field required".into()),
    }
}

/// Bedrock's `CountTokens`: the InvokeModel body (base64, an Anthropic body with Bedrock's
/// version) or a Converse request's input.
fn bedrock_count(fields: &Map<String, Value>) -> Result<u64, String> {
    only(fields, &["input"])?;
    let input = fields
        .get("input")
        .and_then(Value::as_object)
        .ok_or("input: Field required")?;
    match (input.get("invokeModel"), input.get("converse")) {
        (Some(invoke), None) => {
            let b64 = invoke
                .get("body")
                .and_then(Value::as_str)
                .ok_or("input.invokeModel.body: Field required")?;
            let bytes = base64_decode(b64).ok_or("input.invokeModel.body: not base64")?;
            let body: Value = serde_json::from_slice(&bytes).map_err(|_| "input.invokeModel.body: not JSON")?;
            if body.get("anthropic_version").and_then(Value::as_str) != Some("bedrock-2023-05-31") {
                return Err("anthropic_version: must be bedrock-2023-05-31".into());
            }
            if body.get("messages").is_none() || body.get("model").is_some() {
                return Err("input.invokeModel.body: an InvokeModel body has messages and no model".into());
            }
            Ok(tokens(&bytes))
        }
        (None, Some(Value::Object(converse))) => {
            only(converse, &CONVERSE)?;
            required(converse, &["messages"])?;
            Ok(tokens(Value::Object(converse.clone()).to_string().as_bytes()))
        }
        _ => Err("input: exactly one of invokeModel or converse".into()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;
    use crate::scenario::route;

    fn ask(path: &str, body: &Value) -> (u16, Value) {
        let r = route(path).unwrap();
        assert!(r.count, "{path} is a count endpoint");
        let reply = reply(&r, body.to_string().as_bytes());
        (reply.status, serde_json::from_str(&reply.body).unwrap())
    }

    #[test]
    fn each_providers_count_endpoint_is_found_and_generation_paths_are_not_counts() {
        // A count's key is its provider's: scenarios and stats are shared with its generations.
        for (count, generation) in [
            ("/k/v1/messages/count_tokens", "/k/v1/messages"),
            ("/k/v1/responses/input_tokens", "/k/v1/responses"),
            ("/k/v1beta/models/g:countTokens", "/k/v1beta/models/g:generateContent"),
            (
                "/k/model/anthropic.claude%3A1/count-tokens",
                "/k/model/anthropic.claude%3A1/invoke",
            ),
            (
                "/k/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict",
                "/k/v1/projects/p/locations/us-east5/publishers/anthropic/models/c:rawPredict",
            ),
            (
                "/k/v1/projects/p/locations/us-east5/publishers/google/models/g:countTokens",
                "/k/v1/projects/p/locations/us-east5/publishers/google/models/g:generateContent",
            ),
        ] {
            let r = route(count).unwrap();
            assert!(r.count, "{count}");
            assert_eq!(r.key, route(generation).unwrap().key, "{count}");
        }
        for path in [
            "/k/v1/messages",
            "/k/v1/responses",
            "/k/v1beta/models/g:generateContent",
            "/k/model/m/invoke",
        ] {
            assert!(!route(path).unwrap().count, "{path}");
        }
    }

    #[test]
    fn anthropic_counts_the_body_and_refuses_output_settings() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        let (status, answer) = ask("/k/v1/messages/count_tokens", &body);
        assert_eq!(status, 200);
        assert_eq!(answer["input_tokens"], tokens(body.to_string().as_bytes()));
        let with_max = json!({"model": "m", "max_tokens": 5, "messages": []});
        let (status, answer) = ask("/k/v1/messages/count_tokens", &with_max);
        assert_eq!(status, 400);
        assert!(answer.to_string().contains("max_tokens"), "{answer}");
    }

    #[test]
    fn openai_gemini_bedrock_and_vertex_check_their_own_shapes() {
        let (status, answer) = ask("/k/v1/responses/input_tokens", &json!({"model": "m", "input": "hi"}));
        assert_eq!(
            (status, answer["object"].as_str()),
            (200, Some("response.input_tokens"))
        );
        let (status, _) = ask(
            "/k/v1/responses/input_tokens",
            &json!({"model": "m", "input": "hi", "stream": true}),
        );
        assert_eq!(status, 400);

        let wrapped = json!({"generateContentRequest": {"model": "models/g", "contents": []}});
        assert_eq!(ask("/k/v1beta/models/g:countTokens", &wrapped).0, 200);
        let both = json!({"contents": [], "generateContentRequest": {"model": "models/g", "contents": []}});
        assert_eq!(ask("/k/v1beta/models/g:countTokens", &both).0, 400);

        let invoke = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 1, "messages": []});
        let b64 = crate::crypto::base64(invoke.to_string().as_bytes());
        let (status, answer) = ask(
            "/k/model/m/count-tokens",
            &json!({"input": {"invokeModel": {"body": b64}}}),
        );
        assert_eq!(
            (status, answer["inputTokens"].as_u64()),
            (200, Some(tokens(invoke.to_string().as_bytes())))
        );
        let (status, _) = ask(
            "/k/model/m/count-tokens",
            &json!({"input": {"converse": {"inferenceConfig": {}}}}),
        );
        assert_eq!(status, 400);

        let vertex = "/k/v1/projects/p/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict";
        let body = json!({"model": "c", "messages": [], "anthropic_version": "vertex-2023-10-16"});
        assert_eq!(ask(vertex, &body).0, 200);
        assert_eq!(ask(vertex, &json!({"model": "c", "messages": []})).0, 400);
    }
}
