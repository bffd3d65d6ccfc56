//! The AWS Bedrock fake's Converse API: `POST …/model/<model id>/converse` and
//! `…/converse-stream`, signed like InvokeModel ([`crate::bedrock::authenticate`]).
//!
//! The body is checked as Bedrock checks it ([`check`]): a JSON object of the Converse members
//! only (`model`, `modelId` or `stream` in the body, or any other unknown member, is refused),
//! `messages` present and non-empty, starting with `user` and alternating `user` / `assistant`,
//! each content block one known member (`text` not blank, `image` with a known `format` and
//! base64 `source.bytes`, `toolUse` with `toolUseId`, `name` and an object `input`, `toolResult`
//! with `toolUseId` and a `content` list), `system` text blocks, `inferenceConfig` (`maxTokens`
//! ≥ 1, `temperature` and `topP` in 0..=1, at most 4 `stopSequences`), `toolConfig` (tools as
//! `toolSpec`s with an object `inputSchema.json`, `toolChoice` one of `auto`, `any`, `tool`),
//! and `toolConfig` present when the conversation holds tool blocks. A refusal is a 400
//! `ValidationException` naming the problem.
//!
//! The answer is the Messages answer the scenario gives ([`crate::dialect`]) said the Converse way:
//! [`body`] (`output.message.content` blocks, `stopReason`, `usage` with `inputTokens` the
//! uncached input beside `cacheReadInputTokens` / `cacheWriteInputTokens`, `metrics.latencyMs`),
//! and [`stream_plan`]: event-stream frames `messageStart`, `contentBlockStart` (tool calls),
//! `contentBlockDelta`, `contentBlockStop`, `messageStop`, `metadata` (each with a `p` padding
//! member, as AWS pads them), mid-stream errors as exception frames, cuts in the middle of a frame.
//! What the answer says is decided from the request read as a Messages body ([`messages_view`]).

use serde_json::{json, Map, Value};

use crate::bedrock::{self, exception_frame, padding};
use crate::dialect::{self, ReqInfo, Step};
use crate::eventstream::frame;
use crate::scenario::Scenario;

/// The request members Converse takes.
const MEMBERS: [&str; 10] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "guardrailConfig",
    "additionalModelRequestFields",
    "additionalModelResponseFieldPaths",
    "promptVariables",
    "requestMetadata",
    "performanceConfig",
];
const IMAGE_FORMATS: [&str; 4] = ["png", "jpeg", "gif", "webp"];

/// Checks a Converse body as Bedrock does: `Err` is the `ValidationException`'s message.
pub fn check(body: &Result<Value, serde_json::Error>) -> Result<(), String> {
    let v = body
        .as_ref()
        .map_err(|e| format!("Malformed input request: {e}, please reformat your input and try again."))?;
    let o = v
        .as_object()
        .ok_or("Malformed input request: the body must be a JSON object.")?;
    if let Some(k) = o.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
        return Err(format!(
            "Malformed input request: extraneous key [{k}] is not permitted, please reformat your input and try again."
        ));
    }
    let messages = match o.get("messages") {
        None | Some(Value::Null) => {
            return Err(
                "1 validation error detected: Value null at 'messages' failed to satisfy constraint: Member must not be null"
                    .into(),
            )
        }
        Some(Value::Array(m)) if !m.is_empty() => m,
        Some(_) => return Err("The messages field must be a non-empty list of messages.".into()),
    };
    let mut tool_blocks = false;
    let mut last_role = None;
    for (i, m) in messages.iter().enumerate() {
        let role = m.get("role").and_then(Value::as_str);
        match (i, role) {
            (_, Some("user" | "assistant")) => {}
            _ => {
                return Err(format!(
                    "1 validation error detected: Value at 'messages.{}.member.role' failed to satisfy constraint: Member must satisfy enum value set: [user, assistant]",
                    i + 1
                ))
            }
        }
        if i == 0 && role != Some("user") {
            return Err(
                "A conversation must start with a user message. Try again with a conversation that starts with a user message."
                    .into(),
            );
        }
        if last_role == role {
            return Err("A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".into());
        }
        last_role = role;
        let content = match m.get("content") {
            Some(Value::Array(c)) if !c.is_empty() => c,
            _ => {
                return Err(format!(
                    "The content field in message {i} must be a non-empty list of blocks."
                ))
            }
        };
        for (j, block) in content.iter().enumerate() {
            tool_blocks |= check_block(block, &format!("messages.{i}.content.{j}"))?;
        }
    }
    if let Some(system) = o.get("system") {
        let ok = system.as_array().is_some_and(|s| {
            s.iter()
                .all(|b| b.get("text").and_then(Value::as_str).is_some_and(|t| !t.is_empty()))
        });
        if !ok {
            return Err("The system field must be a list of blocks with non-empty text.".into());
        }
    }
    if let Some(config) = o.get("inferenceConfig") {
        check_inference(config)?;
    }
    match o.get("toolConfig") {
        Some(config) => check_tools(config)?,
        None if tool_blocks => {
            return Err("The toolConfig field must be defined when using toolUse and toolResult content blocks.".into())
        }
        None => {}
    }
    Ok(())
}

/// Checks one content block at `at`; `true` for a tool block.
fn check_block(block: &Value, at: &str) -> Result<bool, String> {
    let members: Vec<&String> = block.as_object().map(|o| o.keys().collect()).unwrap_or_default();
    let [member] = members.as_slice() else {
        return Err(format!("The content block {at} must set exactly one member."));
    };
    let b = &block[member.as_str()];
    match member.as_str() {
        "text" if b.as_str().is_some_and(|t| !t.trim().is_empty()) => Ok(false),
        "text" => Err(format!(
            "The text field in the ContentBlock object at {at} is blank. Add text to the text field, and try again."
        )),
        "image" => {
            let format = b.get("format").and_then(Value::as_str).unwrap_or_default();
            let bytes = b.pointer("/source/bytes").and_then(Value::as_str).unwrap_or_default();
            if !IMAGE_FORMATS.contains(&format) || !is_base64(bytes) {
                return Err(format!(
                    "The image at {at} needs a format (png, jpeg, gif, webp) and base64 source.bytes."
                ));
            }
            Ok(false)
        }
        "toolUse" => {
            let ok = b.get("toolUseId").and_then(Value::as_str).is_some_and(tool_id_ok)
                && b.get("name").and_then(Value::as_str).is_some_and(|n| !n.is_empty())
                && b.get("input").is_some_and(Value::is_object);
            ok.then_some(true)
                .ok_or_else(|| format!("The toolUse at {at} needs a toolUseId, a name and an object input."))
        }
        "toolResult" => {
            let ok = b.get("toolUseId").and_then(Value::as_str).is_some_and(tool_id_ok)
                && b.get("content").is_some_and(Value::is_array)
                && b.get("status")
                    .is_none_or(|s| matches!(s.as_str(), Some("success" | "error")));
            ok.then_some(true)
                .ok_or_else(|| format!("The toolResult at {at} needs a toolUseId and a content list."))
        }
        other => Err(format!(
            "Malformed input request: unknown content block member [{other}] at {at}."
        )),
    }
}

/// Standard base64 with its padding (how JSON carries a blob).
fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    !s.is_empty()
        && s.len().is_multiple_of(4)
        && s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// A `toolUseId` as Bedrock takes it.
fn tool_id_ok(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn check_inference(config: &Value) -> Result<(), String> {
    let o = config.as_object().ok_or("inferenceConfig must be an object.")?;
    for (k, v) in o {
        let ok = match k.as_str() {
            "maxTokens" => v.as_u64().is_some_and(|n| n >= 1),
            "temperature" | "topP" => v.as_f64().is_some_and(|x| (0.0..=1.0).contains(&x)),
            "stopSequences" => v
                .as_array()
                .is_some_and(|s| s.len() <= 4 && s.iter().all(|x| x.as_str().is_some_and(|t| !t.is_empty()))),
            _ => {
                return Err(format!(
                    "Malformed input request: extraneous key [inferenceConfig.{k}] is not permitted."
                ))
            }
        };
        if !ok {
            return Err(format!(
                "1 validation error detected: Value at 'inferenceConfig.{k}' failed to satisfy constraint."
            ));
        }
    }
    Ok(())
}

fn check_tools(config: &Value) -> Result<(), String> {
    let tools = config
        .get("tools")
        .and_then(Value::as_array)
        .filter(|t| !t.is_empty())
        .ok_or("toolConfig.tools must be a non-empty list.")?;
    for (i, t) in tools.iter().enumerate() {
        let spec = t.get("toolSpec");
        let ok = spec
            .and_then(|s| s.get("name"))
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
            && spec
                .and_then(|s| s.pointer("/inputSchema/json"))
                .is_some_and(Value::is_object);
        if !ok {
            return Err(format!(
                "toolConfig.tools.{i} needs a toolSpec with a name and an object inputSchema.json."
            ));
        }
    }
    if let Some(choice) = config.get("toolChoice") {
        let ok = match choice.as_object().map(|o| o.iter().collect::<Vec<_>>()).as_deref() {
            Some([(k, v)]) => match k.as_str() {
                "auto" | "any" => v.is_object(),
                "tool" => v.get("name").and_then(Value::as_str).is_some(),
                _ => false,
            },
            _ => false,
        };
        if !ok {
            return Err("toolConfig.toolChoice must set exactly one of auto, any, tool.".into());
        }
    }
    Ok(())
}

/// The Converse body read as the Messages body it stands for (for [`crate::answer::decide`]):
/// messages with their blocks, tools with their schemas.
pub fn messages_view(v: &Value) -> Value {
    let block = |b: &Value| -> Value {
        if let Some(t) = b.get("text") {
            return json!({"type": "text", "text": t});
        }
        if let Some(u) = b.get("toolUse") {
            return json!({"type": "tool_use", "id": u["toolUseId"], "name": u["name"], "input": u["input"]});
        }
        if let Some(r) = b.get("toolResult") {
            let content: Vec<Value> = r["content"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| match (c.get("text"), c.get("json")) {
                    (Some(t), _) => json!({"type": "text", "text": t}),
                    (_, Some(j)) => json!({"type": "text", "text": j.to_string()}),
                    _ => json!({"type": "image"}),
                })
                .collect();
            return json!({"type": "tool_result", "tool_use_id": r["toolUseId"], "content": content});
        }
        if b.get("image").is_some() {
            return json!({"type": "image"});
        }
        json!({})
    };
    let messages: Vec<Value> = v["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| {
            let content: Vec<Value> = m["content"].as_array().into_iter().flatten().map(block).collect();
            json!({"role": m["role"], "content": content})
        })
        .collect();
    let tools: Vec<Value> = v
        .pointer("/toolConfig/tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|t| json!({"name": t.pointer("/toolSpec/name"), "input_schema": t.pointer("/toolSpec/inputSchema/json")}))
        .collect();
    json!({"messages": messages, "tools": tools})
}

/// Converse usage: the uncached input, the cache reads and writes beside it, the output.
fn usage(info: &ReqInfo, output: u64) -> Value {
    let (read, write) = info.cache;
    let input = info.prompt_tokens;
    let mut u = json!({"inputTokens": input, "outputTokens": output,
                       "totalTokens": input + read + write + output});
    if info.cache != (0, 0) {
        u["cacheReadInputTokens"] = json!(read);
        u["cacheWriteInputTokens"] = json!(write);
    }
    u
}

/// A Messages answer body (from [`dialect::nonstream_body`]) as the Converse answer.
pub fn body(messages_body: &str, info: &ReqInfo, sc: &Scenario) -> String {
    let Ok(m) = serde_json::from_str::<Value>(messages_body) else {
        return messages_body.to_string(); // malformed on purpose: stays malformed
    };
    let content: Vec<Value> = m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| match b["type"].as_str() {
            Some("text") => Some(json!({"text": b["text"]})),
            Some("thinking") => Some(json!({"reasoningContent": {"reasoningText": {"text": b["thinking"]}}})),
            Some("tool_use") => {
                Some(json!({"toolUse": {"toolUseId": b["id"], "name": b["name"], "input": b["input"]}}))
            }
            _ => None,
        })
        .collect();
    let mut out = Map::new();
    out.insert(
        "output".into(),
        json!({"message": {"role": "assistant", "content": content}}),
    );
    out.insert(
        "stopReason".into(),
        m.get("stop_reason").cloned().unwrap_or_else(|| json!("end_turn")),
    );
    if !sc.no_usage {
        out.insert("usage".into(), usage(info, dialect::output_tokens(info, sc)));
    }
    out.insert("metrics".into(), json!({"latencyMs": dialect::nonstream_delay_ms(sc)}));
    Value::Object(out).to_string()
}

/// One Converse event frame of `kind` with `payload` (plus its padding).
fn event(kind: &str, mut payload: Value, index: usize) -> Vec<u8> {
    payload["p"] = json!(padding(index));
    let headers = [
        (":event-type", kind),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ];
    frame(&headers, payload.to_string().as_bytes())
}

/// The Converse frame of one Messages stream event, `None` for one Converse has no event for.
fn converse_frame(name: Option<&str>, data: &str, index: usize, info: &ReqInfo, sc: &Scenario) -> Option<Vec<u8>> {
    if name == Some("error") {
        return Some(exception_frame(info, sc));
    }
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        // A malformed event: a frame whose payload is not JSON.
        let headers = [(":event-type", "contentBlockDelta"), (":message-type", "event")];
        return Some(frame(&headers, data.as_bytes()));
    };
    let block = v.get("index").cloned().unwrap_or(json!(0));
    let e = |kind, payload| Some(event(kind, payload, index));
    match v["type"].as_str()? {
        "message_start" => e("messageStart", json!({"role": "assistant"})),
        "content_block_start" if v.pointer("/content_block/type") == Some(&json!("tool_use")) => {
            let b = &v["content_block"];
            e(
                "contentBlockStart",
                json!({"contentBlockIndex": block, "start": {"toolUse": {"toolUseId": b["id"], "name": b["name"]}}}),
            )
        }
        "content_block_delta" => {
            let d = &v["delta"];
            let delta = match d["type"].as_str()? {
                "text_delta" => json!({"text": d["text"]}),
                "input_json_delta" => json!({"toolUse": {"input": d["partial_json"]}}),
                "thinking_delta" => json!({"reasoningContent": {"text": d["thinking"]}}),
                _ => return None,
            };
            e("contentBlockDelta", json!({"contentBlockIndex": block, "delta": delta}))
        }
        "content_block_stop" => e("contentBlockStop", json!({"contentBlockIndex": block})),
        "message_delta" => e(
            "messageStop",
            json!({"stopReason": v.pointer("/delta/stop_reason").cloned().unwrap_or(json!("end_turn"))}),
        ),
        "message_stop" if !sc.no_usage => e(
            "metadata",
            json!({"usage": usage(info, dialect::output_tokens(info, sc)),
                   "metrics": {"latencyMs": dialect::nonstream_delay_ms(sc)}}),
        ),
        _ => None, // ping, a text block's start, message_stop without usage
    }
}

/// The steps of a `converse-stream` answer.
pub fn stream_plan(info: &ReqInfo, sc: &Scenario) -> Vec<Step> {
    bedrock::plan_with(info, sc, converse_frame)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::{self, Answer};
    use crate::scenario::{parse_scenario, Api};

    fn ok_body() -> Value {
        json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
               "inferenceConfig": {"maxTokens": 64}})
    }

    fn refusal(v: Value) -> String {
        check(&Ok(v.clone())).expect_err(&format!("{v} should be refused"))
    }

    #[test]
    fn bodies_are_checked_as_bedrock_checks_them() {
        assert_eq!(check(&Ok(ok_body())), Ok(()));
        let mut with_model = ok_body();
        with_model["model"] = json!("x");
        assert!(refusal(with_model).contains("extraneous key [model]"));
        let mut with_stream = ok_body();
        with_stream["stream"] = json!(true);
        assert!(refusal(with_stream).contains("extraneous key [stream]"));
        assert!(refusal(json!({"system": [{"text": "s"}]})).contains("'messages'"));
        let twice = json!({"messages": [{"role": "user", "content": [{"text": "a"}]},
                                        {"role": "user", "content": [{"text": "b"}]}]});
        assert!(refusal(twice).contains("alternate"));
        let assistant_first = json!({"messages": [{"role": "assistant", "content": [{"text": "a"}]}]});
        assert!(refusal(assistant_first).contains("start with a user message"));
        let blank = json!({"messages": [{"role": "user", "content": [{"text": " "}]}]});
        assert!(refusal(blank).contains("blank"));
        let mut hot = ok_body();
        hot["inferenceConfig"]["temperature"] = json!(1.5);
        assert!(refusal(hot).contains("inferenceConfig.temperature"));
        let calls = json!({"messages": [
            {"role": "user", "content": [{"text": "a"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "r"}]}}]}]});
        assert!(refusal(calls.clone()).contains("toolConfig"));
        let mut with_tools = calls;
        with_tools["toolConfig"] = json!({"tools": [{"toolSpec": {"name": "f", "inputSchema": {"json": {"type": "object"}}}}],
                                          "toolChoice": {"any": {}}});
        assert_eq!(check(&Ok(with_tools.clone())), Ok(()));
        let mut bad_choice = with_tools;
        bad_choice["toolConfig"]["toolChoice"] = json!({"none": {}});
        assert!(refusal(bad_choice).contains("toolChoice"));
        let image = json!({"messages": [{"role": "user", "content": [{"image": {"format": "bmp", "source": {"bytes": "AAAA"}}}]}]});
        assert!(refusal(image).contains("image"));
    }

    #[test]
    fn the_answer_is_decided_from_the_converse_body() {
        let body = json!({"messages": [{"role": "user", "content": [{"text": "weather?"}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}]}});
        let sc = parse_scenario("tool-call").unwrap();
        let Answer::Calls(calls) = answer::decide(Api::Messages, &messages_view(&body), &sc) else {
            panic!("a call to the request's tool");
        };
        assert_eq!(calls[0].name, "get_weather");
        let results = json!({"messages": [
            {"role": "user", "content": [{"text": "a"}]},
            {"role": "assistant", "content": [{"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]},
            {"role": "user", "content": [{"toolResult": {"toolUseId": "t1", "content": [{"text": "22C"}]}}]}]});
        assert_eq!(
            answer::decide(Api::Messages, &messages_view(&results), &sc),
            Answer::Text("The tool said: 22C".into())
        );
    }

    fn info(sc: &Scenario, body: &Value) -> ReqInfo {
        let mut i = ReqInfo::from_json(body, 100).model_from_path("meta.llama3-8b", true);
        i.cache = sc.cache.unwrap_or_default();
        i.answer = answer::decide(Api::Messages, &messages_view(body), sc);
        i
    }

    /// (headers, payload) of each whole frame of a plan.
    fn frames(steps: &[Step]) -> Vec<(String, Value)> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Frame(f) => {
                    let head = u32::from_be_bytes([f[4], f[5], f[6], f[7]]) as usize;
                    let text = String::from_utf8_lossy(&f[12..12 + head]).into_owned();
                    let payload = serde_json::from_slice(&f[12 + head..f.len() - 4]).unwrap_or(Value::Null);
                    Some((text, payload))
                }
                _ => None,
            })
            .collect()
    }

    fn kind(headers: &str) -> &str {
        [
            "messageStart",
            "contentBlockStart",
            "contentBlockDelta",
            "contentBlockStop",
            "messageStop",
            "metadata",
        ]
        .into_iter()
        .find(|k| headers.contains(k))
        .unwrap_or("exception")
    }

    #[test]
    fn a_stream_is_converse_events_ending_with_the_usage() {
        let sc = parse_scenario("cache/3/4").unwrap();
        let i = info(&sc, &ok_body());
        let got = frames(&stream_plan(&i, &sc));
        let kinds: Vec<&str> = got.iter().map(|(h, _)| kind(h)).collect();
        assert_eq!(kinds.first(), Some(&"messageStart"));
        assert_eq!(
            &kinds[kinds.len() - 3..],
            ["contentBlockStop", "messageStop", "metadata"]
        );
        let text: String = got
            .iter()
            .filter_map(|(_, p)| p.pointer("/delta/text").and_then(Value::as_str))
            .collect();
        assert_eq!(text, "Hello from the mock upstream,");
        let usage = &got.last().unwrap().1["usage"];
        assert_eq!(usage["inputTokens"], 25);
        assert_eq!(
            (
                usage["cacheReadInputTokens"].as_u64(),
                usage["cacheWriteInputTokens"].as_u64()
            ),
            (Some(3), Some(4))
        );
        assert!(got.iter().all(|(_, p)| p["p"].is_string()), "padded");

        let tools = json!({"messages": [{"role": "user", "content": [{"text": "weather?"}]}],
            "toolConfig": {"tools": [{"toolSpec": {"name": "get_weather", "inputSchema": {"json": {"type": "object"}}}}]}});
        let sc = parse_scenario("tool-call").unwrap();
        let got = frames(&stream_plan(&info(&sc, &tools), &sc));
        let start = got.iter().find(|(h, _)| kind(h) == "contentBlockStart").unwrap();
        assert_eq!(start.1["start"]["toolUse"]["name"], "get_weather");
        let stop = got.iter().find(|(h, _)| kind(h) == "messageStop").unwrap();
        assert_eq!(stop.1["stopReason"], "tool_use");
        let input: String = got
            .iter()
            .filter_map(|(_, p)| p.pointer("/delta/toolUse/input").and_then(Value::as_str))
            .collect();
        assert!(serde_json::from_str::<Value>(&input).unwrap().is_object(), "{input}");

        let sc = parse_scenario("error-event-after/2/rate_limit").unwrap();
        let got = frames(&stream_plan(&info(&sc, &ok_body()), &sc));
        assert!(got.last().unwrap().0.contains("throttlingException"));
    }

    #[test]
    fn a_whole_answer_is_a_converse_body() {
        let sc = parse_scenario("cache/3/4").unwrap();
        let mut i = info(&sc, &ok_body());
        i.stream = false;
        let out: Value =
            serde_json::from_str(&body(&dialect::nonstream_body(Api::Messages, &i, &sc), &i, &sc)).unwrap();
        assert_eq!(out["output"]["message"]["role"], "assistant");
        assert!(out["output"]["message"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Hello"));
        assert_eq!(out["stopReason"], "end_turn");
        assert_eq!(out["usage"]["cacheReadInputTokens"], 3);
        assert_eq!(
            out["usage"]["totalTokens"],
            25 + 3 + 4 + dialect::output_tokens(&i, &sc)
        );
        assert!(out["metrics"]["latencyMs"].is_u64());
    }
}
