use base64::Engine;
use serde_json::{json, Value};

use super::*;

fn provider(fields: Value) -> Provider {
    let mut p = json!({"id": "p"});
    for (k, v) in fields.as_object().unwrap() {
        p[k] = v.clone();
    }
    Provider::from_json(p)
}

fn anthropic() -> Provider {
    provider(json!({"base_url": "https://up.example/v1", "auth": "x-api-key"}))
}

fn openai() -> Provider {
    provider(json!({"base_url": "https://up.example/v1", "auth": "bearer"}))
}

fn gemini() -> Provider {
    provider(json!({"base_url": "https://up.example/v1beta", "auth": "x-goog-api-key"}))
}

fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn keys(v: &Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    k.sort();
    k
}

fn count_call(request: &ClientRequest, wire: Api, p: &Provider, model: &str) -> Result<CountCall, Verdict> {
    call(&mut Requests::new(request), wire, p, model, 4096)
}

/// Anthropic's count request: no `max_tokens`; the route gets only the fields its count endpoint
/// takes, with its own model.
#[test]
fn a_messages_count_goes_to_the_anthropic_count_endpoint_with_only_what_it_takes() {
    let body = json!({"model": "claude", "system": "be brief", "messages": [{"role": "user", "content": "hi"}],
                      "tools": [{"name": "f", "input_schema": {"type": "object"}}]});
    let request = parse(Api::Messages, body.to_string().as_bytes(), None).unwrap();
    assert_eq!(request.model, "claude");
    let c = count_call(&request, Api::Messages, &anthropic(), "claude-up").unwrap();
    assert_eq!(c.url, "https://up.example/v1/messages/count_tokens");
    let sent = json_of(&c.body);
    assert_eq!(keys(&sent), ["messages", "model", "system", "tools"], "{sent}");
    assert_eq!(sent["model"], "claude-up");
    assert_eq!(c.tokens_at, "/input_tokens");
    assert_eq!(tokens(c.tokens_at, br#"{"input_tokens": 17}"#).unwrap(), 17);
}

/// A count request is validated as the request it counts: a malformed one is the client's 400.
#[test]
fn a_count_request_is_validated_as_the_request_it_counts() {
    let e = parse(Api::Messages, br#"{"model": "m"}"#, None).unwrap_err();
    assert_eq!(e.status(), 400, "{e:?}");
    let e = parse(Api::Responses, br#"{"model": "m", "input": 5}"#, None).unwrap_err();
    assert_eq!(e.status(), 400, "{e:?}");
    let e = parse(Api::Chat, br#"{"model": "m", "messages": []}"#, None).unwrap_err();
    assert_eq!(e.status(), 404, "Chat Completions has no count: {e:?}");
    let both = json!({"contents": [], "generateContentRequest": {"contents": []}});
    let e = parse(Api::Gemini, both.to_string().as_bytes(), Some("g")).unwrap_err();
    assert_eq!(e.status(), 400, "{e:?}");
}

/// A count through a route of another dialect is that route's count of the translated request.
#[test]
fn a_messages_count_on_a_responses_route_is_translated_and_counted_there() {
    let body = json!({"model": "claude", "system": "be brief", "messages": [{"role": "user", "content": "hi"}]});
    let request = parse(Api::Messages, body.to_string().as_bytes(), None).unwrap();
    let c = count_call(&request, Api::Responses, &openai(), "gpt-up").unwrap();
    assert_eq!(c.url, "https://up.example/v1/responses/input_tokens");
    let sent = json_of(&c.body);
    assert_eq!(sent["model"], "gpt-up");
    assert!(sent.get("input").is_some(), "{sent}");
    assert!(
        sent.get("max_output_tokens").is_none() && sent.get("stream").is_none(),
        "only what the count endpoint takes: {sent}"
    );
}

/// Gemini counts `contents` alone or a whole wrapped generation request; the route gets the
/// wrapped form, naming its model.
#[test]
fn a_gemini_count_of_contents_or_a_wrapped_request_counts_the_same_request() {
    let contents = json!([{"role": "user", "parts": [{"text": "hi"}]}]);
    let plain = parse(
        Api::Gemini,
        json!({"contents": contents}).to_string().as_bytes(),
        Some("g"),
    )
    .unwrap();
    let wrapped = json!({"generateContentRequest": {"model": "models/g", "contents": contents}});
    let wrapped = parse(Api::Gemini, wrapped.to_string().as_bytes(), Some("g")).unwrap();
    let a = count_call(&plain, Api::Gemini, &gemini(), "g-up").unwrap();
    let b = count_call(&wrapped, Api::Gemini, &gemini(), "g-up").unwrap();
    assert_eq!(a, b);
    assert_eq!(a.url, "https://up.example/v1beta/models/g-up:countTokens");
    let sent = json_of(&a.body);
    assert_eq!(sent["generateContentRequest"]["model"], "models/g-up", "{sent}");
    assert_eq!(sent["generateContentRequest"]["contents"], contents);
    assert_eq!(tokens(a.tokens_at, br#"{"totalTokens": 3}"#).unwrap(), 3);
}

/// Where nothing can count, nothing is sent: the route is `unable`.
#[test]
fn a_route_whose_provider_cannot_count_is_unable() {
    let body = json!({"model": "m", "input": "hi"});
    let request = parse(Api::Responses, body.to_string().as_bytes(), None).unwrap();
    let chat = count_call(&request, Api::Chat, &openai(), "x").unwrap_err();
    assert_eq!(chat.class, FailureClass::Unable);
    let azure =
        provider(json!({"kind": "azure", "base_url": "https://r.openai.azure.com/openai/v1", "key_secret": "K"}));
    let az = count_call(&request, Api::Responses, &azure, "x").unwrap_err();
    assert_eq!(az.class, FailureClass::Unable);
}

/// Bedrock counts the InvokeModel body it would be sent (base64) or a Converse request's input.
#[test]
fn bedrock_counts_the_invoke_body_it_would_be_sent_or_the_converse_input() {
    let bedrock = provider(json!({"kind": "bedrock", "region": "us-east-1",
                                  "access_key_secret": "A", "secret_key_secret": "S"}));
    let body = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]});
    let request = parse(Api::Messages, body.to_string().as_bytes(), None).unwrap();
    let c = count_call(&request, Api::Messages, &bedrock, "anthropic.claude-v2:1").unwrap();
    assert_eq!(
        c.url,
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/anthropic.claude-v2%3A1/count-tokens"
    );
    let sent = json_of(&c.body);
    let b64 = sent["input"]["invokeModel"]["body"].as_str().unwrap();
    let invoke = json_of(&base64::engine::general_purpose::STANDARD.decode(b64).unwrap());
    assert_eq!(invoke["anthropic_version"], "bedrock-2023-05-31", "{invoke}");
    assert!(invoke.get("model").is_none(), "{invoke}");
    assert_eq!(tokens(c.tokens_at, br#"{"inputTokens": 9}"#).unwrap(), 9);

    let c = count_call(&request, Api::Converse, &bedrock, "meta.llama").unwrap();
    let sent = json_of(&c.body);
    let converse = &sent["input"]["converse"];
    assert!(converse.get("messages").is_some(), "{sent}");
    assert!(converse.get("inferenceConfig").is_none(), "{sent}");
}

/// Vertex counts Anthropic's models through the `count-tokens` model, Google's by `countTokens`.
#[test]
fn vertex_counts_by_publisher() {
    let vertex = provider(json!({"kind": "vertex", "region": "us-east5", "project": "proj", "key_secret": "SA"}));
    let body = json!({"model": "claude", "messages": [{"role": "user", "content": "hi"}]});
    let request = parse(Api::Messages, body.to_string().as_bytes(), None).unwrap();
    let c = count_call(&request, Api::Messages, &vertex, "claude-sonnet@2025").unwrap();
    assert_eq!(
        c.url,
        "https://us-east5-aiplatform.googleapis.com/v1/projects/proj/locations/us-east5/publishers/anthropic/models/count-tokens:rawPredict"
    );
    let sent = json_of(&c.body);
    assert_eq!(sent["model"], "claude-sonnet@2025");
    assert_eq!(sent["anthropic_version"], "vertex-2023-10-16");
    assert!(sent.get("max_tokens").is_none(), "{sent}");

    let c = count_call(&request, Api::Gemini, &vertex, "gemini-2.5-pro").unwrap();
    assert!(
        c.url.ends_with("/publishers/google/models/gemini-2.5-pro:countTokens"),
        "{}",
        c.url
    );
    let sent = json_of(&c.body);
    assert!(
        sent.get("contents").is_some() && sent.get("generationConfig").is_some(),
        "{sent}"
    );
    assert_eq!(c.tokens_at, "/totalTokens");
}

/// An answer without a number is no count.
#[test]
fn an_answer_without_a_count_is_a_bad_response() {
    let body = json!({"model": "m", "input": "hi"});
    let request = parse(Api::Responses, body.to_string().as_bytes(), None).unwrap();
    let c = count_call(&request, Api::Responses, &openai(), "x").unwrap();
    for answer in [&b"{}"[..], br#"{"input_tokens": "7"}"#, b"not json"] {
        assert_eq!(
            tokens(c.tokens_at, answer).unwrap_err().class,
            FailureClass::BadResponse
        );
    }
}

/// Each client gets the count in its own shape; an estimate says so.
#[test]
fn each_client_gets_the_count_in_its_shape() {
    assert_eq!(answer(Api::Messages, 5, false), json!({"input_tokens": 5}));
    assert_eq!(
        answer(Api::Responses, 5, false),
        json!({"object": "response.input_tokens", "input_tokens": 5})
    );
    assert_eq!(answer(Api::Gemini, 5, false), json!({"totalTokens": 5}));
    assert_eq!(answer(Api::Gemini, 5, true)["estimated"], true);
}

/// The estimate is the body's bytes over four, rounded up.
#[test]
fn the_estimate_is_a_quarter_of_the_body_rounded_up() {
    let body = json!({"model": "m", "input": "x".repeat(101)});
    let request = parse(Api::Responses, body.to_string().as_bytes(), None).unwrap();
    assert_eq!(estimate(&request), (request.body_len as u64).div_ceil(4));
    assert!(estimate(&request) >= 26);
}
