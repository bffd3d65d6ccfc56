//! One conversation written in each dialect, translated to each other one; what cannot be carried;
//! what is dropped; and no input makes the readers or writers panic.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;

const SYSTEM: &str = "You are terse.";
const QUESTION: &str = "What is in this image, and what is the weather in Paris?";
const PNG: &str = "iVBORw0KGgo=";
const CHECKING: &str = "Let me check.";
const ARGS: &str = r#"{"city":"Paris"}"#;
const RESULT: &str = "sunny, 21C";
const FOLLOW_UP: &str = "Thanks. Answer in JSON.";
const ALL: [Api; 4] = [Api::Chat, Api::Messages, Api::Responses, Api::Gemini];

fn params() -> Value {
    json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})
}

fn schema() -> Value {
    json!({"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]})
}

/// The same conversation in `api`'s dialect: a system prompt, a question with an image, a tool
/// call and its result, a follow-up; a tool, a stop sequence (none in Responses), a temperature,
/// an output limit and a JSON-schema output.
fn conversation(api: Api) -> Value {
    let data_url = format!("data:image/png;base64,{PNG}");
    match api {
        Api::Converse => unreachable!("Converse has its own tests"),
        Api::Chat => json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": data_url}}]},
                {"role": "assistant", "content": CHECKING, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
                {"role": "user", "content": FOLLOW_UP}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": params()}}],
            "stop": ["END"], "temperature": 0.2, "max_tokens": 300,
            "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema(), "strict": true}}
        }),
        Api::Messages => json!({
            "model": "m", "max_tokens": 300, "system": SYSTEM,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": QUESTION},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]},
                {"role": "assistant", "content": [{"type": "text", "text": CHECKING},
                    {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": RESULT},
                    {"type": "text", "text": FOLLOW_UP}]}],
            "tools": [{"name": "get_weather", "description": "Weather now", "input_schema": params()}],
            "stop_sequences": ["END"], "temperature": 0.2,
            "output_config": {"format": {"type": "json_schema", "schema": schema()}}
        }),
        Api::Responses => json!({
            "model": "m", "instructions": SYSTEM,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": QUESTION}, {"type": "input_image", "image_url": data_url}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": CHECKING}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": ARGS},
                {"type": "function_call_output", "call_id": "call_1", "output": RESULT},
                {"role": "user", "content": FOLLOW_UP}],
            "tools": [{"type": "function", "name": "get_weather", "description": "Weather now", "parameters": params(), "strict": false}],
            "temperature": 0.2, "max_output_tokens": 300,
            "text": {"format": {"type": "json_schema", "name": "answer", "schema": schema(), "strict": true}}
        }),
        Api::Gemini => json!({
            "systemInstruction": {"parts": [{"text": SYSTEM}]},
            "contents": [
                {"role": "user", "parts": [{"text": QUESTION}, {"inlineData": {"mimeType": "image/png", "data": PNG}}]},
                {"role": "model", "parts": [{"text": CHECKING}, {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": RESULT}}}, {"text": FOLLOW_UP}]}],
            "tools": [{"functionDeclarations": [{"name": "get_weather", "description": "Weather now", "parametersJsonSchema": params()}]}],
            "generationConfig": {"stopSequences": ["END"], "temperature": 0.2, "maxOutputTokens": 300,
                "responseMimeType": "application/json", "responseJsonSchema": schema()}
        }),
    }
}

/// The call id the conversation has in `from`'s dialect (Gemini's calls have none: one is made).
fn call_id(from: Api) -> &'static str {
    match from {
        Api::Gemini => "call_1_1",
        _ => "call_1",
    }
}

fn body(v: &Value) -> Body {
    Body::from_value(v).unwrap()
}

fn go(from: Api, v: &Value, to: Api) -> Result<Written, Unable> {
    translate(from, &body(v), to, "up-model", false, 4096)
}

fn sent(from: Api, v: &Value, to: Api) -> (Value, Vec<String>) {
    let written = go(from, v, to).unwrap_or_else(|e| panic!("{from:?} -> {to:?}: {e}"));
    (serde_json::from_slice(&written.body).unwrap(), written.dropped)
}

fn refused(from: Api, v: &Value, to: Api) -> Unable {
    match go(from, v, to) {
        Err(e) => e,
        Ok(w) => panic!("{from:?} -> {to:?} was written: {}", String::from_utf8_lossy(&w.body)),
    }
}

/// The conversation without its stop sequence (Responses has none).
fn without_stop(from: Api) -> Value {
    let mut v = conversation(from);
    let o = v.as_object_mut().unwrap();
    o.remove("stop");
    o.remove("stop_sequences");
    if let Some(c) = o.get_mut("generationConfig").and_then(Value::as_object_mut) {
        c.remove("stopSequences");
    }
    v
}

#[test]
fn to_chat() {
    for from in [Api::Messages, Api::Responses, Api::Gemini] {
        let (v, dropped) = sent(from, &conversation(from), Api::Chat);
        let id = call_id(from);
        let data_url = format!("data:image/png;base64,{PNG}");
        assert_eq!(
            v["messages"],
            json!([
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": [{"type": "text", "text": QUESTION}, {"type": "image_url", "image_url": {"url": data_url}}]},
                {"role": "assistant", "content": CHECKING, "tool_calls": [
                    {"id": id, "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}]},
                {"role": "tool", "content": RESULT, "tool_call_id": id},
                {"role": "user", "content": FOLLOW_UP}]),
            "{from:?}"
        );
        assert_eq!(v["model"], "up-model");
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(v["max_completion_tokens"], 300);
        assert_eq!(v.get("max_tokens"), None);
        assert_eq!(v.get("stream"), None);
        let mut tool = json!({"type": "function", "function": {"name": "get_weather", "description": "Weather now", "parameters": params()}});
        let mut format = json!({"type": "json_schema", "json_schema": {"name": "response", "schema": schema()}});
        match from {
            Api::Responses => {
                assert_eq!(v.get("stop"), None);
                tool["function"]["strict"] = json!(false);
                format["json_schema"]["name"] = json!("answer");
                format["json_schema"]["strict"] = json!(true);
            }
            _ => assert_eq!(v["stop"], json!(["END"])),
        }
        assert_eq!(v["tools"], json!([tool]), "{from:?}");
        assert_eq!(v["response_format"], format, "{from:?}");
        assert_eq!(dropped, Vec::<String>::new(), "{from:?}");
    }
}

#[test]
fn to_messages() {
    for from in [Api::Chat, Api::Responses, Api::Gemini] {
        let (v, dropped) = sent(from, &conversation(from), Api::Messages);
        let id = call_id(from);
        assert_eq!(v["model"], "up-model");
        assert_eq!(v["max_tokens"], 300);
        assert_eq!(v["system"], SYSTEM);
        assert_eq!(
            v["messages"],
            json!([
                {"role": "user", "content": [{"type": "text", "text": QUESTION},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]},
                {"role": "assistant", "content": [{"type": "text", "text": CHECKING},
                    {"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": [{"type": "text", "text": RESULT}]},
                    {"type": "text", "text": FOLLOW_UP}]}]),
            "{from:?}"
        );
        assert_eq!(
            v["tools"],
            json!([{"name": "get_weather", "description": "Weather now", "input_schema": params()}])
        );
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(
            v["output_config"],
            json!({"format": {"type": "json_schema", "schema": schema()}})
        );
        let (stop, want_dropped): (Value, Vec<&str>) = match from {
            Api::Chat => (json!(["END"]), vec!["response_format.name", "response_format.strict"]),
            Api::Responses => (
                Value::Null,
                vec!["tools[*].strict", "text.format.name", "text.format.strict"],
            ),
            _ => (json!(["END"]), vec![]),
        };
        assert_eq!(v["stop_sequences"], stop, "{from:?}");
        assert_eq!(dropped, want_dropped, "{from:?}");
    }
}

#[test]
fn to_responses() {
    for from in [Api::Chat, Api::Messages, Api::Gemini] {
        let (v, dropped) = sent(from, &without_stop(from), Api::Responses);
        let id = call_id(from);
        let data_url = format!("data:image/png;base64,{PNG}");
        assert_eq!(v["model"], "up-model");
        assert_eq!(v["instructions"], SYSTEM);
        assert_eq!(
            v["input"],
            json!([
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": QUESTION},
                    {"type": "input_image", "image_url": data_url, "detail": "auto"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": CHECKING, "annotations": []}]},
                {"type": "function_call", "call_id": id, "name": "get_weather", "arguments": ARGS},
                {"type": "function_call_output", "call_id": id, "output": RESULT},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": FOLLOW_UP}]}]),
            "{from:?}"
        );
        assert_eq!(
            v["tools"],
            json!([{"type": "function", "name": "get_weather", "description": "Weather now", "parameters": params(), "strict": false}])
        );
        assert_eq!(v["max_output_tokens"], 300);
        assert_eq!(v["temperature"], 0.2);
        assert_eq!(v["store"], false, "nothing is kept upstream unless asked");
        let mut format = json!({"type": "json_schema", "name": "response", "schema": schema()});
        if from == Api::Chat {
            format["name"] = json!("answer");
            format["strict"] = json!(true);
        }
        assert_eq!(v["text"], json!({"format": format}), "{from:?}");
        assert_eq!(dropped, Vec::<String>::new());
        // With its stop sequence, the conversation cannot go to Responses.
        let stop = refused(from, &conversation(from), Api::Responses);
        let spelled = match from {
            Api::Chat => "stop",
            Api::Messages => "stop_sequences",
            Api::Gemini => "generationConfig.stopSequences",
            other => unreachable!("{other:?} is not a client here"),
        };
        assert_eq!(stop.field, spelled);
    }
}

#[test]
fn to_gemini() {
    for from in [Api::Chat, Api::Messages, Api::Responses] {
        let (v, dropped) = sent(from, &conversation(from), Api::Gemini);
        assert_eq!(v.get("model"), None, "the model is in the path");
        assert_eq!(
            v["contents"],
            json!([
                {"role": "user", "parts": [{"text": QUESTION}, {"inlineData": {"mimeType": "image/png", "data": PNG}}]},
                {"role": "model", "parts": [{"text": CHECKING}, {"functionCall": {"id": "call_1", "name": "get_weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"id": "call_1", "name": "get_weather", "response": {"output": RESULT}}},
                    {"text": FOLLOW_UP}]}]),
            "{from:?}"
        );
        assert_eq!(v["systemInstruction"], json!({"parts": [{"text": SYSTEM}]}));
        assert_eq!(
            v["tools"],
            json!([{"functionDeclarations": [{"name": "get_weather", "description": "Weather now", "parametersJsonSchema": params()}]}])
        );
        let mut config = json!({"temperature": 0.2, "maxOutputTokens": 300,
            "responseMimeType": "application/json", "responseJsonSchema": schema()});
        if from != Api::Responses {
            config["stopSequences"] = json!(["END"]);
        }
        assert_eq!(v["generationConfig"], config, "{from:?}");
        let want: Vec<&str> = match from {
            Api::Chat => vec!["response_format.name", "response_format.strict"],
            Api::Responses => vec!["tools[*].strict", "text.format.name", "text.format.strict"],
            _ => vec![],
        };
        assert_eq!(dropped, want, "{from:?}");
    }
}

#[test]
fn a_round_trip_through_the_neutral_form_keeps_the_conversation() {
    use Role::*;
    // Responses images always say their detail (`auto` when the client did not).
    let contents = |n: &Neutral| -> Vec<Content> {
        let mut all: Vec<Content> = n
            .turns
            .iter()
            .flat_map(|t| t.parts.iter().map(|p| p.content.clone()))
            .collect();
        for c in &mut all {
            if let (Content::Image(i), Api::Responses) = (c, n.from) {
                i.detail.get_or_insert_with(|| "auto".into());
            }
        }
        all
    };
    for api in ALL {
        let n = read(api, &body(&conversation(api))).unwrap();
        let shape: Vec<(Role, usize)> = n.turns.iter().map(|t| (t.role, t.parts.len())).collect();
        assert_eq!(
            shape,
            vec![(System, 1), (User, 2), (Assistant, 2), (User, 2)],
            "{api:?}"
        );
        let w = write(api, &n, "m", 4096).unwrap();
        let again = read(api, &Body::parse(&w.body).unwrap()).unwrap();
        assert_eq!(contents(&again), contents(&n), "{api:?}");
    }
}

#[test]
fn streams_ask_for_usage_and_gemini_streams_in_its_path() {
    let from = Api::Messages;
    let streamed = |to| {
        let w = translate(from, &body(&without_stop(from)), to, "u", true, 4096).unwrap();
        serde_json::from_slice::<Value>(&w.body).unwrap()
    };
    let chat = streamed(Api::Chat);
    assert_eq!(
        (chat["stream"].clone(), chat["stream_options"].clone()),
        (json!(true), json!({"include_usage": true}))
    );
    assert_eq!(streamed(Api::Responses)["stream"], true);
    let gemini = streamed(Api::Gemini);
    assert_eq!((gemini.get("stream"), gemini.get("stream_options")), (None, None));
    let mut chat_client = conversation(Api::Chat);
    chat_client["stream"] = json!(true);
    let w = translate(Api::Chat, &body(&chat_client), Api::Messages, "u", true, 4096).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&w.body).unwrap()["stream"], true);
}

#[test]
fn the_output_limit_is_always_written_in_the_targets_field() {
    let v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let limit = |to| {
        let w = translate(Api::Chat, &body(&v), to, "u", false, 777).unwrap();
        serde_json::from_slice::<Value>(&w.body).unwrap()
    };
    assert_eq!(limit(Api::Messages)["max_tokens"], 777);
    assert_eq!(limit(Api::Responses)["max_output_tokens"], 777);
    assert_eq!(limit(Api::Gemini)["generationConfig"]["maxOutputTokens"], 777);
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}]});
    let w = translate(Api::Gemini, &body(&g), Api::Chat, "u", false, 555).unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&w.body).unwrap()["max_completion_tokens"],
        555
    );
    // Both chat limits: the larger is the limit (SPEC §11).
    let both = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "max_completion_tokens": 90});
    let w = translate(Api::Chat, &body(&both), Api::Messages, "u", false, 1).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&w.body).unwrap()["max_tokens"], 90);
}

#[test]
fn a_parsed_request_translates_with_its_own_mode_limit_and_usage_wish() {
    let bytes = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}).to_string();
    let mut request = crate::dialects::parse_request(Api::Chat, bytes.as_bytes(), None).unwrap();
    request.limit_output(321);
    let w = translate_request(&request, Api::Messages, "claude", 9999).unwrap();
    let v: Value = serde_json::from_slice(&w.body).unwrap();
    assert_eq!(
        (v["model"].clone(), v["max_tokens"].clone(), v["stream"].clone()),
        (json!("claude"), json!(321), json!(true))
    );
    assert_eq!(
        w.dropped,
        Vec::<String>::new(),
        "the gateway's own stream_options is not the client's"
    );
    let n = read(Api::Chat, request.body()).unwrap();
    assert!(
        n.stream_usage,
        "the body asks the upstream for usage; translate_request uses the client's wish"
    );
    let gemini = crate::dialects::parse_request(
        Api::Gemini,
        br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#,
        Some(("gemini-x", true)),
    )
    .unwrap();
    let w = translate_request(&gemini, Api::Chat, "gpt", 100).unwrap();
    let v: Value = serde_json::from_slice(&w.body).unwrap();
    assert_eq!(
        (v["stream"].clone(), v["stream_options"]["include_usage"].clone()),
        (json!(true), json!(true))
    );
}

#[test]
fn closest_prefers_chat_and_sends_the_clients_own_dialect_as_is() {
    use Api::*;
    assert_eq!(Messages.wire_for(&[Gemini, Messages, Chat]), Some(Messages));
    assert_eq!(Messages.wire_for(&[Gemini, Responses, Chat]), Some(Chat));
    assert_eq!(Responses.wire_for(&[Gemini, Messages]), Some(Messages));
    assert_eq!(Gemini.wire_for(&[Responses, Chat]), Some(Chat));
    assert_eq!(Gemini.wire_for(&[Responses, Messages]), Some(Messages));
    assert_eq!(Chat.wire_for(&[Gemini, Messages, Responses]), Some(Responses));
    assert_eq!(Chat.wire_for(&[]), None);
}

// ---- what cannot be carried ----

#[test]
fn signed_reasoning_goes_only_to_its_own_dialect() {
    let v = json!({"model": "m", "max_tokens": 2000, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hmm", "signature": "sig=="}, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"}]});
    for to in [Api::Chat, Api::Responses, Api::Gemini] {
        let e = refused(Api::Messages, &v, to);
        assert_eq!(e.field, "messages[1].content[0]", "{to:?}");
        assert!(e.reason.contains("signed by Anthropic Messages"), "{}", e.reason);
    }
    let (back, _) = sent(Api::Messages, &v, Api::Messages);
    assert_eq!(
        back["messages"][1]["content"][0],
        json!({"type": "thinking", "thinking": "hmm", "signature": "sig=="})
    );
    let redacted = json!({"model": "m", "max_tokens": 2000, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "xyz"}, {"type": "text", "text": "hello"}]},
        {"role": "user", "content": "again"}]});
    assert_eq!(
        refused(Api::Messages, &redacted, Api::Gemini).field,
        "messages[1].content[0]"
    );
    let encrypted = json!({"model": "m", "input": [
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "thought"}], "encrypted_content": "enc"},
        {"role": "assistant", "content": "hello"}]});
    assert_eq!(refused(Api::Responses, &encrypted, Api::Chat).field, "input[1]");
    let signed_call = json!({"contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}, "thoughtSignature": "c2ln"}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "ok"}}}]}]});
    assert_eq!(
        refused(Api::Gemini, &signed_call, Api::Chat).field,
        "contents[1].parts[0].thoughtSignature"
    );
    let (back, _) = sent(Api::Gemini, &signed_call, Api::Gemini);
    assert_eq!(
        back["contents"][1]["parts"][0]["thoughtSignature"], "c2ln",
        "its own dialect takes it back"
    );
}

#[test]
fn unsigned_earlier_reasoning_is_dropped_and_listed() {
    let v = json!({"contents": [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"text": "pondering", "thought": true}, {"text": "hello"}]},
        {"role": "user", "parts": [{"text": "again"}]}]});
    let (out, dropped) = sent(Api::Gemini, &v, Api::Chat);
    assert_eq!(out["messages"][1], json!({"role": "assistant", "content": "hello"}));
    assert_eq!(dropped, vec!["contents[*].parts[*]"]);
}

#[test]
fn tools_the_provider_runs_are_unable_everywhere() {
    let cases = [
        (
            Api::Responses,
            json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}),
            "tools[1]",
        ),
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "custom", "custom": {"name": "x"}}]}),
            "tools[0]",
        ),
        (
            Api::Messages,
            json!({"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]}),
            "tools[0]",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"googleSearch": {}}]}),
            "tools[0].googleSearch",
        ),
    ];
    for (from, v, field) in cases {
        for to in ALL.into_iter().filter(|to| *to != from) {
            assert_eq!(refused(from, &v, to).field, field, "{from:?} -> {to:?}");
        }
    }
}

#[test]
fn settings_a_target_lacks_are_unable_naming_the_clients_field() {
    let chat = |extra: Value| {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    };
    let cases = [
        (chat(json!({"n": 2})), Api::Messages, "n"),
        (chat(json!({"n": 2})), Api::Responses, "n"),
        (chat(json!({"seed": 7})), Api::Messages, "seed"),
        (chat(json!({"top_k": 5})), Api::Responses, "top_k"),
        (chat(json!({"stop": "END"})), Api::Responses, "stop"),
        (
            chat(json!({"response_format": {"type": "json_object"}})),
            Api::Messages,
            "response_format",
        ),
        (chat(json!({"verbosity": "low"})), Api::Gemini, "verbosity"),
        (
            chat(json!({"reasoning_effort": "high", "temperature": 0.3})),
            Api::Messages,
            "temperature",
        ),
        (
            chat(json!({"reasoning_effort": "high", "max_tokens": 1000})),
            Api::Messages,
            "reasoning_effort",
        ),
        (
            chat(json!({"stop": ["a", "b", "c", "d", "e", "f"]})),
            Api::Gemini,
            "stop",
        ),
    ];
    for (v, to, field) in cases {
        assert_eq!(refused(Api::Chat, &v, to).field, field, "{v} -> {to:?}");
    }
    let n2 = chat(json!({"n": 2}));
    assert_eq!(
        sent(Api::Chat, &n2, Api::Gemini).0["generationConfig"]["candidateCount"],
        2
    );
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"candidateCount": 3}});
    assert_eq!(
        refused(Api::Gemini, &g, Api::Messages).field,
        "generationConfig.candidateCount"
    );
}

#[test]
fn fields_no_other_api_has_are_unable_at_reading() {
    let cases = [
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "logprobs": true}),
            "logprobs",
        ),
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"},
            {"type": "input_audio", "input_audio": {"data": "AA", "format": "wav"}}]}]}),
            "messages[0].content[1]",
        ),
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1}),
            "frobnicate",
        ),
        (
            Api::Responses,
            json!({"model": "m", "input": "hi", "previous_response_id": "resp_1"}),
            "previous_response_id",
        ),
        (
            Api::Responses,
            json!({"model": "m", "input": [{"type": "item_reference", "id": "msg_1"}]}),
            "input[0]",
        ),
        (
            Api::Messages,
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}}]}]}),
            "messages[0].content[0]",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"parts": [{"text": "hi"}]}], "cachedContent": "cachedContents/1"}),
            "cachedContent",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"parts": [{"inlineData": {"mimeType": "audio/wav", "data": "AA"}}]}]}),
            "contents[0].parts[0]",
        ),
        (
            Api::Gemini,
            json!({"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]}]}),
            "contents[0].parts[0]",
        ),
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "oops": 1}]}]}),
            "messages[0].content[0]",
        ),
    ];
    for (from, v, field) in cases {
        let e = read(from, &body(&v)).unwrap_err();
        assert_eq!(e.field, field, "{v}: {e}");
        assert!(!e.reason.contains(" at line "), "no position inside a fragment: {e}");
    }
    let err = read(
        Api::Chat,
        &body(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "frobnicate": 1})),
    )
    .unwrap_err();
    match err.to_api_error() {
        ApiError::InvalidRequest { param, message } => {
            assert_eq!(param.as_deref(), Some("frobnicate"));
            assert!(message.starts_with("`frobnicate`: "), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn images_a_target_cannot_take_are_unable() {
    let url = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "high"}}]}]});
    assert_eq!(refused(Api::Chat, &url, Api::Gemini).field, "messages[0].content[0]");
    let (m, dropped) = sent(Api::Chat, &url, Api::Messages);
    assert_eq!(
        m["messages"][0]["content"][0],
        json!({"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}})
    );
    assert_eq!(dropped, vec!["messages[*].content[*].detail"]);
    let (r, _) = sent(Api::Chat, &url, Api::Responses);
    assert_eq!(
        r["input"][0]["content"][0],
        json!({"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "high"})
    );
    let tiff = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}]}]});
    assert_eq!(refused(Api::Chat, &tiff, Api::Messages).field, "messages[0].content[0]");
}

#[test]
fn thinking_that_cannot_continue_a_tool_call_is_unable() {
    let mut v = conversation(Api::Chat);
    v["reasoning_effort"] = json!("medium");
    v["max_tokens"] = json!(20000);
    v.as_object_mut().unwrap().remove("temperature");
    let e = refused(Api::Chat, &v, Api::Messages);
    assert_eq!(e.field, "reasoning_effort");
    assert!(e.reason.contains("signed thinking"), "{}", e.reason);
}

#[test]
fn a_huge_list_of_tiny_values_is_refused_at_its_first_element() {
    // SPEC §18: no tree of the messages is built; the first element that is no message stops it.
    let mut text = String::from(r#"{"model":"m","messages":[0"#);
    for _ in 0..(2 << 20) {
        text.push_str(",0");
    }
    text.push_str("]}");
    let body = Body::parse(text.as_bytes()).unwrap();
    let e = read(Api::Chat, &body).unwrap_err();
    assert_eq!(e.field, "messages[0]");
    assert!(e.reason.contains("expected a message object"), "{}", e.reason);
}

#[test]
fn long_lists_of_settings_are_refused_not_built() {
    let stops: Vec<Value> = (0..=1024).map(|_| json!("")).collect();
    let v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": stops});
    assert_eq!(read(Api::Chat, &body(&v)).unwrap_err().field, "stop");
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"stopSequences": stops}});
    assert_eq!(read(Api::Gemini, &body(&g)).unwrap_err().field, "generationConfig");
    let mut tool = serde_json::Map::new();
    for i in 0..1000 {
        tool.insert(format!("k{i}"), json!(0));
    }
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [tool]});
    assert_eq!(
        read(Api::Gemini, &body(&g)).unwrap_err().field,
        "tools[0].k0",
        "the first field stops the walk"
    );
}

#[test]
fn too_many_parts_are_refused() {
    let parts: Vec<Value> = (0..MAX_PARTS).map(|_| json!({"type": "text", "text": ""})).collect();
    let v = json!({"model": "m", "messages": [{"role": "user", "content": parts}]});
    let e = read(Api::Chat, &body(&v)).unwrap_err();
    assert_eq!(e.field, format!("messages[0].content[{}]", MAX_PARTS - 1));
}

// ---- what is dropped, and what is mapped ----

#[test]
fn fields_with_no_effect_are_dropped_and_listed_or_carried_between_openai_dialects() {
    let v = json!({"model": "m", "messages": [{"role": "user", "name": "ann", "content": "hi"}],
        "store": true, "metadata": {"k": "v"}, "service_tier": "flex", "user": "u-1", "prompt_cache_key": "p",
        "tools": [{"type": "function", "function": {"name": "f"}}], "parallel_tool_calls": false});
    let (m, dropped) = sent(Api::Chat, &v, Api::Messages);
    assert_eq!(m["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(
        m["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    assert_eq!(
        m["tools"],
        json!([{"name": "f", "input_schema": {"type": "object", "properties": {}}}])
    );
    assert_eq!(
        dropped,
        vec![
            "messages[*].name",
            "store",
            "metadata",
            "service_tier",
            "prompt_cache_key"
        ]
    );
    let (g, dropped) = sent(Api::Chat, &v, Api::Gemini);
    assert_eq!(g.get("metadata"), None);
    assert_eq!(
        dropped,
        vec![
            "messages[*].name",
            "parallel_tool_calls",
            "user",
            "store",
            "metadata",
            "service_tier",
            "prompt_cache_key"
        ]
    );
    let (r, dropped) = sent(Api::Chat, &v, Api::Responses);
    assert_eq!(
        (
            r["store"].clone(),
            r["metadata"].clone(),
            r["service_tier"].clone(),
            r["user"].clone(),
            r["prompt_cache_key"].clone()
        ),
        (json!(true), json!({"k": "v"}), json!("flex"), json!("u-1"), json!("p"))
    );
    assert_eq!(r["parallel_tool_calls"], false);
    assert_eq!(dropped, vec!["messages[*].name"]);
    let cached = json!({"model": "m", "max_tokens": 5, "service_tier": "auto", "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}]});
    let (c, dropped) = sent(Api::Messages, &cached, Api::Chat);
    assert_eq!(
        c["messages"],
        json!([{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}])
    );
    assert_eq!(
        dropped,
        vec![
            "system[*].cache_control",
            "service_tier",
            "messages[*].content[*].cache_control"
        ]
    );
}

#[test]
fn reasoning_settings_map_between_effort_and_budget() {
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high", "max_tokens": 32000});
    assert_eq!(
        sent(Api::Chat, &chat, Api::Messages).0["thinking"],
        json!({"type": "enabled", "budget_tokens": 24576})
    );
    assert_eq!(
        sent(Api::Chat, &chat, Api::Gemini).0["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 24576})
    );
    assert_eq!(
        sent(Api::Chat, &chat, Api::Responses).0["reasoning"],
        json!({"effort": "high"})
    );
    let small = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high", "max_tokens": 5000});
    assert_eq!(
        sent(Api::Chat, &small, Api::Messages).0["thinking"]["budget_tokens"],
        4999,
        "below max_tokens"
    );
    let anthropic = json!({"model": "m", "max_tokens": 9000, "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 5000}});
    let (c, dropped) = sent(Api::Messages, &anthropic, Api::Chat);
    assert_eq!(
        (c["reasoning_effort"].clone(), dropped),
        (json!("medium"), Vec::<String>::new())
    );
    assert_eq!(
        sent(Api::Messages, &anthropic, Api::Responses).0["reasoning"],
        json!({"effort": "medium", "summary": "auto"}),
        "Anthropic shows its thinking: the answer asks for it"
    );
    assert_eq!(
        sent(Api::Messages, &anthropic, Api::Gemini).0["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 5000, "includeThoughts": true})
    );
    let off = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}}});
    let (c, dropped) = sent(Api::Gemini, &off, Api::Chat);
    assert_eq!(c.get("reasoning_effort"), None);
    assert_eq!(dropped, vec!["generationConfig.thinkingConfig"]);
    assert_eq!(
        sent(Api::Gemini, &off, Api::Messages).0.get("thinking"),
        None,
        "off is Anthropic's default"
    );
    let level = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"thinkingConfig": {"thinkingLevel": "LOW", "includeThoughts": true}}});
    assert_eq!(
        sent(Api::Gemini, &level, Api::Responses).0["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
}

#[test]
fn tool_choice_maps_to_each_dialect() {
    let mut v = conversation(Api::Chat);
    v["tool_choice"] = json!({"type": "function", "function": {"name": "get_weather"}});
    assert_eq!(
        sent(Api::Chat, &v, Api::Messages).0["tool_choice"],
        json!({"type": "tool", "name": "get_weather"})
    );
    assert_eq!(
        sent(Api::Chat, &v, Api::Gemini).0["toolConfig"],
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}})
    );
    let r = sent(
        Api::Chat,
        &without_stop(Api::Chat).tap(|v| v["tool_choice"] = json!("required")),
        Api::Responses,
    )
    .0;
    assert_eq!(r["tool_choice"], "required");
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}], "tools": [{"functionDeclarations": [{"name": "f"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "NONE"}}});
    assert_eq!(sent(Api::Gemini, &g, Api::Chat).0["tool_choice"], "none");
    assert_eq!(
        sent(Api::Gemini, &g, Api::Messages).0["tool_choice"],
        json!({"type": "none"})
    );
    let several = json!({"contents": [{"parts": [{"text": "hi"}]}], "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a", "b"]}}});
    assert_eq!(
        read(Api::Gemini, &body(&several)).unwrap_err().field,
        "toolConfig.functionCallingConfig"
    );
}

trait Tap {
    fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
}

impl Tap for Value {
    fn tap(mut self, f: impl FnOnce(&mut Value)) -> Value {
        f(&mut self);
        self
    }
}

#[test]
fn gemini_schemas_become_json_schema_and_responses_answer_calls_by_name() {
    let g = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"responseMimeType": "application/json",
        "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "STRING", "nullable": true}, "type": {"type": "INTEGER"}},
            "propertyOrdering": ["a", "type"], "required": ["a"]}}});
    assert_eq!(
        sent(Api::Gemini, &g, Api::Chat).0["response_format"]["json_schema"]["schema"],
        json!({"type": "object", "properties": {"a": {"type": ["string", "null"]}, "type": {"type": "integer"}}, "required": ["a"]})
    );
    let json_mode = json!({"contents": [{"parts": [{"text": "hi"}]}], "generationConfig": {"responseMimeType": "application/json"}});
    assert_eq!(
        sent(Api::Gemini, &json_mode, Api::Chat).0["response_format"],
        json!({"type": "json_object"})
    );
    // A chat tool result whose call id is unknown cannot be named for Gemini.
    let orphan = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "r"}]});
    assert_eq!(refused(Api::Chat, &orphan, Api::Gemini).field, "messages[1]");
    // A JSON object result is the response itself; an error is under `error`.
    let messages = json!({"model": "m", "max_tokens": 9, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t:1", "name": "f", "input": {}}, {"type": "tool_use", "id": "t2", "name": "g", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t:1", "content": "{\"temp\": 21}"},
            {"type": "tool_result", "tool_use_id": "t2", "content": "boom", "is_error": true}]}]});
    let parts = sent(Api::Messages, &messages, Api::Gemini).0["contents"][2]["parts"].clone();
    assert_eq!(
        parts[0]["functionResponse"],
        json!({"id": "t:1", "name": "f", "response": {"temp": 21}})
    );
    assert_eq!(
        parts[1]["functionResponse"],
        json!({"id": "t2", "name": "g", "response": {"error": "boom"}})
    );
    // And back to Anthropic, ids keep to its alphabet, the same for a call and its result.
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "call:1", "type": "function", "function": {"name": "f", "arguments": ""}}]},
        {"role": "tool", "tool_call_id": "call:1", "content": "ok"}]});
    let m = sent(Api::Chat, &chat, Api::Messages).0;
    assert_eq!(
        m["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "tcall_1", "name": "f", "input": {}}])
    );
    assert_eq!(m["messages"][2]["content"][0]["tool_use_id"], "tcall_1");
}

// ---- no input panics ----

fn vocabulary() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "type",
        "role",
        "content",
        "text",
        "parts",
        "messages",
        "contents",
        "input",
        "tools",
        "function",
        "name",
        "arguments",
        "tool_calls",
        "tool_call_id",
        "image_url",
        "url",
        "source",
        "media_type",
        "data",
        "input_schema",
        "parameters",
        "functionCall",
        "functionResponse",
        "args",
        "response",
        "inlineData",
        "mimeType",
        "call_id",
        "output",
        "tool_use_id",
        "id",
        "thinking",
        "signature",
        "system",
        "instructions",
        "systemInstruction",
        "generationConfig",
        "thinkingConfig",
        "thinkingBudget",
        "tool_choice",
        "toolConfig",
        "functionDeclarations",
        "functionCallingConfig",
        "mode",
        "response_format",
        "json_schema",
        "schema",
        "text.format",
        "format",
        "reasoning",
        "effort",
        "max_tokens",
        "stop",
        "n",
        "user",
        "metadata",
        "summary",
        "encrypted_content",
        "user_id",
        "budget_tokens",
        "responseSchema",
        "stopSequences",
        "candidateCount",
        "thought",
        "thoughtSignature",
        "fileData",
        "fileUri",
        "is_error",
        "model",
        "assistant",
        "tool_result",
        "tool_use",
        "image",
        "base64",
        "input_text",
        "input_image",
        "function_call",
        "function_call_output",
        "message",
    ])
    .prop_map(str::to_string)
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        vocabulary().prop_map(Value::from),
        Just(json!("data:image/png;base64,AA")),
        Just(json!("{\"a\":1}")),
    ];
    leaf.prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((vocabulary(), inner), 0..6).prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn no_body_makes_reading_or_writing_panic(fields in prop::collection::vec((vocabulary(), json_value()), 0..6)) {
        let v = Value::Object(fields.into_iter().collect());
        let body = body(&v);
        for from in ALL {
            if let Ok(n) = read(from, &body) {
                for to in ALL {
                    if let Ok(w) = write(to, &n, "m", 100) {
                        prop_assert!(serde_json::from_slice::<Value>(&w.body).is_ok(), "{from:?} -> {to:?} wrote no JSON");
                    }
                }
            }
        }
    }

    #[test]
    fn no_bytes_make_reading_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(body) = Body::parse(&bytes) {
            for from in ALL {
                let _ = read(from, &body);
            }
        }
    }
}

/// The conversation without its JSON-schema output (Converse has no JSON mode).
fn without_format(from: Api) -> Value {
    let mut v = conversation(from);
    let o = v.as_object_mut().unwrap();
    o.remove("response_format");
    o.remove("output_config");
    o.remove("text");
    if let Some(c) = o.get_mut("generationConfig").and_then(Value::as_object_mut) {
        c.remove("responseMimeType");
        c.remove("responseJsonSchema");
    }
    v
}

#[test]
fn to_converse() {
    for from in ALL {
        let (v, dropped) = sent(from, &without_format(from), Api::Converse);
        let id = call_id(from);
        assert_eq!(
            v,
            json!({
                "messages": [
                    {"role": "user", "content": [{"text": QUESTION}, {"image": {"format": "png", "source": {"bytes": PNG}}}]},
                    {"role": "assistant", "content": [{"text": CHECKING},
                        {"toolUse": {"toolUseId": id, "name": "get_weather", "input": {"city": "Paris"}}}]},
                    {"role": "user", "content": [{"toolResult": {"toolUseId": id, "content": [{"text": RESULT}]}},
                        {"text": FOLLOW_UP}]}],
                "system": [{"text": SYSTEM}],
                "inferenceConfig": match from {
                    Api::Responses => json!({"maxTokens": 300, "temperature": 0.2}),
                    _ => json!({"maxTokens": 300, "temperature": 0.2, "stopSequences": ["END"]}),
                },
                "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "description": "Weather now",
                                                       "inputSchema": {"json": params()}}}]},
            }),
            "{from:?}: no model, no stream: both are in the path"
        );
        let want: Vec<&str> = match from {
            Api::Responses => vec!["tools[*].strict"],
            _ => vec![],
        };
        assert_eq!(dropped, want, "{from:?}");
    }
    // Tool choice, a failed tool result, a stream: still no `stream` field.
    let chat = json!({"model": "m", "stream": true, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "call:1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call:1", "content": "boom"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required",
        "parallel_tool_calls": false, "user": "u1"});
    let written = translate(Api::Chat, &body(&chat), Api::Converse, "up", true, 64).unwrap();
    let v: Value = serde_json::from_slice(&written.body).unwrap();
    assert_eq!(v.get("stream"), None);
    assert_eq!(v["inferenceConfig"], json!({"maxTokens": 64}));
    assert_eq!(
        v["toolConfig"],
        json!({"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object", "properties": {}}}}}],
               "toolChoice": {"any": {}}})
    );
    let call = &v["messages"][1]["content"][0]["toolUse"]["toolUseId"];
    let result = &v["messages"][2]["content"][0]["toolResult"]["toolUseId"];
    assert_eq!(call, result, "a call and its result keep one id");
    assert!(call
        .as_str()
        .unwrap()
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
    assert_eq!(written.dropped, ["user", "parallel_tool_calls"]);
    let messages = json!({"model": "m", "max_tokens": 10, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "no", "is_error": true}]}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "f"}});
    let (v, _) = sent(Api::Messages, &messages, Api::Converse);
    assert_eq!(v["messages"][2]["content"][0]["toolResult"]["status"], "error");
    assert_eq!(v["toolConfig"]["toolChoice"], json!({"tool": {"name": "f"}}));
}

#[test]
fn what_converse_cannot_carry_is_unable_naming_the_clients_field() {
    let chat = |extra: Value| {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    for (extra, field) in [
        (json!({"temperature": 1.5}), "temperature"),
        (json!({"top_p": 2}), "top_p"),
        (json!({"n": 2}), "n"),
        (json!({"seed": 1}), "seed"),
        (json!({"stop": ["a", "b", "c", "d", "e"]}), "stop"),
        (json!({"reasoning_effort": "high"}), "reasoning_effort"),
        (json!({"response_format": {"type": "json_object"}}), "response_format"),
    ] {
        let unable = refused(Api::Chat, &chat(extra.clone()), Api::Converse);
        assert_eq!(unable.field, field, "{extra}");
        assert!(unable.reason.starts_with("Bedrock Converse routes"), "{unable}");
    }
    let by_url = chat(json!({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}));
    assert_eq!(
        refused(Api::Chat, &by_url, Api::Converse).field,
        "messages[0].content[0]"
    );
    let top_k = json!({"model": "m", "max_tokens": 5, "top_k": 3, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(refused(Api::Messages, &top_k, Api::Converse).field, "top_k");
    let none_after_calls = json!({"model": "m", "tool_choice": "none", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}]});
    assert_eq!(
        refused(Api::Chat, &none_after_calls, Api::Converse).field,
        "tool_choice"
    );
    // `none` before any call: no tools are offered, which is what it asks.
    let none = chat(json!({"tool_choice": "none", "tools": [{"type": "function", "function": {"name": "f"}}]}));
    let (v, dropped) = sent(Api::Chat, &none, Api::Converse);
    assert_eq!(v.get("toolConfig"), None);
    assert_eq!(dropped, ["tools[*]"]);
    // No client speaks Converse.
    assert!(read(Api::Converse, &body(&json!({"messages": []}))).is_err());
}

/// The conversation's tool call and result kept, its tools (and output format) left out: an
/// agent's last turn, asking for text.
fn history_without_tools(from: Api) -> Value {
    let mut v = conversation(from);
    let o = v.as_object_mut().unwrap();
    for field in ["tools", "tool_choice", "response_format", "output_config", "text"] {
        o.remove(field);
    }
    if let Some(c) = o.get_mut("generationConfig").and_then(Value::as_object_mut) {
        c.remove("responseMimeType");
        c.remove("responseJsonSchema");
    }
    v
}

/// Whether a written body is one its provider takes with tool history and no tools offered:
/// Bedrock Converse needs a `toolConfig` naming every tool its `toolUse` blocks call; the others
/// take tool history as it is.
fn takes_tool_history(to: Api, sent: &Value) -> Result<(), String> {
    if to != Api::Converse {
        return Ok(());
    }
    let blocks: Vec<&Value> = sent["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|m| m["content"].as_array().into_iter().flatten())
        .collect();
    let used: Vec<&str> = blocks
        .iter()
        .filter_map(|b| b.pointer("/toolUse/name").and_then(Value::as_str))
        .collect();
    let tool_blocks = blocks
        .iter()
        .any(|b| b.get("toolUse").is_some() || b.get("toolResult").is_some());
    let declared: Vec<&str> = sent
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.pointer("/toolSpec/name").and_then(Value::as_str))
        .collect();
    match (
        tool_blocks,
        used.iter().all(|u| declared.contains(u)),
        declared.is_empty(),
    ) {
        (false, _, _) => Ok(()),
        (true, true, false) => Ok(()),
        _ => Err(format!(
            "tool blocks without a toolConfig naming their tools ({used:?}, declared {declared:?})"
        )),
    }
}

#[test]
fn tool_history_without_tools_is_written_so_the_route_takes_it_or_unable() {
    // Issue 31: a route that cannot take a body is unable (the next route is tried), never sent
    // one its provider refuses as the client's error.
    for from in ALL {
        for to in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini, Api::Converse] {
            let v = history_without_tools(from);
            match go(from, &v, to) {
                Ok(w) => {
                    let sent: Value = serde_json::from_slice(&w.body).unwrap();
                    if let Err(why) = takes_tool_history(to, &sent) {
                        panic!("{from:?} -> {to:?}: {why}: {sent}");
                    }
                }
                Err(e) => assert!(!e.field.is_empty(), "{from:?} -> {to:?}: unable names a field: {e}"),
            }
        }
        // Bedrock takes it once the tools the history used are declared.
        let (sent, _) = sent(from, &history_without_tools(from), Api::Converse);
        assert_eq!(
            sent.pointer("/toolConfig/tools/0/toolSpec/name"),
            Some(&json!("get_weather")),
            "{from:?}: {sent}"
        );
        assert!(
            sent.pointer("/toolConfig/toolChoice").is_none(),
            "{from:?}: no tool forced: {sent}"
        );
        // Tool choice `none` cannot be said with a toolConfig: unable, not a call it forbade.
        let mut none = history_without_tools(from);
        match from {
            Api::Gemini => none["toolConfig"] = json!({"functionCallingConfig": {"mode": "NONE"}}),
            Api::Messages => none["tool_choice"] = json!({"type": "none"}),
            _ => none["tool_choice"] = json!("none"),
        }
        refused(from, &none, Api::Converse);
    }
    assert!(takes_tool_history(
        Api::Converse,
        &json!({"messages": [{"role": "user", "content": [{"toolResult": {"toolUseId": "t"}}]}]})
    )
    .is_err());
}

#[test]
fn a_system_message_inside_a_messages_conversation_stays_at_its_place() {
    // Claude Code's `mid-conversation-system` beta: `{"role": "system"}` among the messages.
    use Role::*;
    let b = json!({"model": "m", "max_tokens": 64, "system": "first", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "now be brief"}]},
        {"role": "user", "content": "go"}]});
    let n = read(Api::Messages, &body(&b)).unwrap();
    let roles: Vec<Role> = n.turns.iter().map(|t| t.role).collect();
    assert_eq!(roles, vec![System, User, Assistant, System, User]);
    let chat: Value = serde_json::from_slice(&write(Api::Chat, &n, "u", 64).unwrap().body).unwrap();
    let roles: Vec<&str> = chat["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "system", "user"], "{chat}");
    assert_eq!(chat["messages"][3]["content"], "now be brief", "{chat}");
    // Only text belongs in a system message.
    let image = json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"},
        {"role": "system", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]}]});
    let e = read(Api::Messages, &body(&image)).unwrap_err();
    assert!(e.to_string().contains("messages[1].content[0]"), "{e}");
}

#[test]
fn clearing_earlier_thinking_is_dropped_and_other_context_edits_are_unable() {
    // Claude Code sends this on every request: a no-op where earlier thinking is never sent.
    let with = |edits: Value| {
        json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],
               "context_management": {"edits": edits}})
    };
    for to in [Api::Chat, Api::Responses, Api::Gemini] {
        let w = translate(
            Api::Messages,
            &body(&with(json!([{"type": "clear_thinking_20251015", "keep": "all"}]))),
            to,
            "u",
            false,
            64,
        )
        .unwrap();
        assert_eq!(w.dropped, vec!["context_management".to_string()], "{to:?}");
        assert!(!String::from_utf8_lossy(&w.body).contains("clear_thinking"), "{to:?}");
        let e = translate(
            Api::Messages,
            &body(&with(json!([{"type": "clear_tool_uses_20250919"}]))),
            to,
            "u",
            false,
            64,
        )
        .unwrap_err();
        assert!(e.to_string().contains("context_management.edits[0]"), "{e}");
    }
}

#[test]
fn claude_codes_tool_hints_are_dropped_and_listed_and_the_tools_declared() {
    // Claude Code marks tools for tool search (`defer_loading`); the advanced-tool-use hints
    // change how tools load, stream or are shown, not what they are.
    let tool = |extra: Value| {
        let mut t = json!({"name": "Read", "input_schema": params()});
        for (k, v) in extra.as_object().unwrap() {
            t[k] = v.clone();
        }
        json!({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}], "tools": [t]})
    };
    let hints = json!({"defer_loading": true, "input_examples": [{"city": "Paris"}],
                       "allowed_callers": ["direct"], "eager_input_streaming": true});
    for to in [Api::Chat, Api::Responses, Api::Gemini] {
        let w = translate(Api::Messages, &body(&tool(hints.clone())), to, "u", false, 64).unwrap();
        let mut dropped = w.dropped.clone();
        dropped.sort();
        assert_eq!(
            dropped,
            [
                "tools[*].allowed_callers",
                "tools[*].defer_loading",
                "tools[*].eager_input_streaming",
                "tools[*].input_examples"
            ],
            "{to:?}"
        );
        let text = String::from_utf8_lossy(&w.body);
        assert!(
            text.contains("\"Read\"") && !text.contains("defer_loading"),
            "{to:?}: {text}"
        );
        // A tool only Anthropic's code execution may call cannot be offered to the model.
        let e = translate(
            Api::Messages,
            &body(&tool(json!({"allowed_callers": ["code_execution_20250825"]}))),
            to,
            "u",
            false,
            64,
        )
        .unwrap_err();
        assert!(e.to_string().contains("tools[0].allowed_callers"), "{e}");
    }
}

#[test]
fn codexs_client_metadata_is_dropped_and_listed_when_translated() {
    let b = json!({"model": "m", "input": "hi", "client_metadata": {"session_id": "s-1", "originator": "codex_exec"}});
    for to in [Api::Chat, Api::Messages, Api::Gemini] {
        let w = translate(Api::Responses, &body(&b), to, "u", false, 64).unwrap();
        assert_eq!(w.dropped, vec!["client_metadata".to_string()], "{to:?}");
        assert!(!String::from_utf8_lossy(&w.body).contains("codex_exec"), "{to:?}");
    }
}

/// A Responses `namespace` (the client's own tools, grouped) is not a tool the provider runs: a
/// route of another API is unable for it, and says so — not that the provider would run it.
#[test]
fn a_namespace_is_flattened_into_function_tools_under_their_own_names() {
    let v = json!({"model": "m", "input": [
                       {"type": "message", "role": "user", "content": "hi"},
                       {"type": "function_call", "call_id": "c1", "name": "find", "namespace": "crm", "arguments": "{}"},
                       {"type": "function_call_output", "call_id": "c1", "output": "none"}],
                   "tools": [{"type": "namespace", "name": "crm", "description": "d",
                              "tools": [{"type": "function", "name": "find", "parameters": {"type": "object"}},
                                        {"type": "function", "name": "add"}]},
                             {"type": "function", "name": "f"}]});
    for to in [Api::Chat, Api::Messages, Api::Gemini, Api::Converse] {
        let (out, dropped) = sent(Api::Responses, &v, to);
        let text = out.to_string();
        for name in ["find", "add", "f"] {
            assert!(
                text.contains(&format!("\"{name}\"")),
                "{to:?} lost the tool {name}: {text}"
            );
        }
        assert!(!text.contains("crm"), "{to:?}: {text}");
        assert!(dropped.contains(&"namespace".to_string()), "{to:?}: {dropped:?}");
        assert!(
            dropped.contains(&"input[*].namespace".to_string()),
            "{to:?}: {dropped:?}"
        );
    }
    // Two tools of one name cannot be told apart once flattened.
    let twice = json!({"model": "m", "input": "hi", "tools": [
        {"type": "function", "name": "find"},
        {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}]}]});
    let e = refused(Api::Responses, &twice, Api::Chat);
    assert_eq!(e.field, "tools[1].tools[0]");
    assert!(e.to_string().contains("used twice"), "{e}");
    // A namespace grouping a provider-run tool is not the client's to flatten.
    let run = json!({"model": "m", "input": "hi", "tools": [
        {"type": "namespace", "name": "crm", "tools": [{"type": "file_search"}]}]});
    assert!(refused(Api::Responses, &run, Api::Chat)
        .to_string()
        .contains("the provider runs"));
}

/// The client's namespaces, for writing its calls back.
#[test]
fn a_requests_namespaces_name_each_grouped_function() {
    let v = json!({"model": "m", "input": "hi", "tools": [
        {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "find"}, {"type": "function", "name": "add"}]},
        {"type": "function", "name": "f"}]});
    let request = crate::dialects::parse_request(Api::Responses, v.to_string().as_bytes(), None).unwrap();
    assert_eq!(
        request.tool_namespaces(),
        vec![
            ("find".to_string(), "crm".to_string()),
            ("add".to_string(), "crm".to_string())
        ]
    );
    let plain = json!({"model": "m", "input": "hi", "tools": [{"type": "function", "name": "f"}]});
    let request = crate::dialects::parse_request(Api::Responses, plain.to_string().as_bytes(), None).unwrap();
    assert!(request.tool_namespaces().is_empty());
}

/// SPEC §21: request metadata (`metadata`, `user`, `safety_identifier`, `prompt_cache_key`,
/// Codex's `client_metadata`) is never a reason to refuse a route of another API: carried where
/// the target has a place, else dropped and listed.
#[test]
fn request_metadata_is_carried_or_listed_never_refused() {
    let cases = [
        (
            Api::Chat,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "metadata": {"run": "1"},
                   "user": "u-1", "safety_identifier": "s-1", "prompt_cache_key": "conv-1"}),
        ),
        (
            Api::Responses,
            json!({"model": "m", "input": "hi", "metadata": {"run": "1"}, "user": "u-1", "safety_identifier": "s-1",
                   "prompt_cache_key": "conv-1", "client_metadata": {"originator": "codex_exec"}}),
        ),
        (
            Api::Messages,
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}],
                   "metadata": {"user_id": "u-1"}}),
        ),
    ];
    for (from, v) in cases {
        for to in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini, Api::Converse] {
            if to == from {
                continue;
            }
            let (out, dropped) = sent(from, &v, to);
            let text = out.to_string();
            assert!(text.contains("hi"), "{from:?} -> {to:?}: {text}");
            for field in [
                "metadata",
                "user",
                "safety_identifier",
                "prompt_cache_key",
                "client_metadata",
            ] {
                let asked = v.get(field).is_some();
                let carried = out.get(field).is_some() || text.contains("u-1") && field == "user";
                let listed = dropped
                    .iter()
                    .any(|d| d == field || d.starts_with(&format!("{field}.")));
                assert!(
                    !asked || carried || listed || field == "metadata" && text.contains("u-1"),
                    "{from:?} -> {to:?}: `{field}` neither carried nor listed: {text} {dropped:?}"
                );
            }
        }
    }
}
