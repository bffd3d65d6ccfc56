//! OpenAI Chat Completions requests (`POST /v1/chat/completions`): the documented fields only,
//! messages by role, content parts by type, tool calls answered by tool messages (each
//! `tool_call_id` once, right after the assistant message that made the calls), function tools
//! nested under `function` with string `arguments`.

use super::{name_ok, Check, Node};

/// Every top-level field OpenAI documents (anything else: "Unrecognized request argument").
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "user",
    "metadata",
    "store",
    "logprobs",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "reasoning_effort",
    "service_tier",
    "modalities",
    "audio",
    "prediction",
    "web_search_options",
    "verbosity",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "functions",
    "function_call",
];

const ROLES: &[&str] = &["system", "developer", "user", "assistant", "tool", "function"];
const TEXT_PARTS: &[&str] = &["text"];
const USER_PARTS: &[&str] = &["text", "image_url", "input_audio", "file"];
const ASSISTANT_PARTS: &[&str] = &["text", "refusal"];

/// A Chat body; `model_required` is false where the URL names the model (an Azure deployment's).
pub(super) fn check(body: &Node, model_required: bool) -> Check {
    body.only(FIELDS)?;
    if model_required {
        body.req("model")?.str()?;
    } else {
        body.opt("model", Node::str)?;
    }
    messages(&body.req("messages")?)?;
    let stream = body.opt("stream", Node::bool)?.unwrap_or(false);
    for limit in ["max_tokens", "max_completion_tokens", "n"] {
        body.opt(limit, |n| n.int(1))?;
    }
    body.opt("temperature", |t| t.number(0.0, 2.0))?;
    body.opt("top_p", |t| t.number(0.0, 1.0))?;
    body.opt("stop", |s| if s.is_str() { Ok(()) } else { s.strings().map(drop) })?;
    let tools = body.opt("tools", tools)?.unwrap_or(0);
    body.opt("tool_choice", |c| tool_choice(c, tools))?;
    body.opt("parallel_tool_calls", Node::bool)?;
    body.opt("response_format", response_format)?;
    body.opt("stream_options", |o| {
        if !stream {
            return o.invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.");
        }
        o.object()?;
        o.only(&["include_usage", "include_obfuscation"])
    })?;
    Ok(())
}

/// The messages, in order: each by its role; tool messages answer the calls just made.
fn messages(list: &Node) -> Check {
    // The `tool_calls` of the last assistant message that made some, and the ids not answered yet.
    let mut open: Option<(Node, Vec<&str>)> = None;
    for m in list.nonempty_array()? {
        m.object()?;
        let role = m.req("role")?.one_of(ROLES)?;
        if role != "tool" {
            unanswered(open.take())?;
        }
        match role {
            "system" | "developer" | "user" => {
                m.only(&["role", "content", "name"])?;
                m.opt("name", Node::str)?;
                let kinds = if role == "user" { USER_PARTS } else { TEXT_PARTS };
                content(&m.req("content")?, kinds)?;
            }
            "assistant" => {
                m.only(&[
                    "role",
                    "content",
                    "name",
                    "tool_calls",
                    "function_call",
                    "refusal",
                    "audio",
                ])?;
                let calls_node = m.get("tool_calls");
                let calls = calls_node.as_ref().map(tool_calls).transpose()?.unwrap_or_default();
                match m.get("content") {
                    Some(c) => content(&c, ASSISTANT_PARTS)?,
                    // Content may be left out (or null) only beside tool calls.
                    None if !calls.is_empty() || m.get("function_call").is_some() => {}
                    None => return m.req("content").map(drop),
                }
                if let (Some(node), false) = (calls_node, calls.is_empty()) {
                    open = Some((node, calls));
                }
            }
            "tool" => {
                m.only(&["role", "content", "tool_call_id"])?;
                content(&m.req("content")?, TEXT_PARTS)?;
                let id_node = m.req("tool_call_id")?;
                let id = id_node.str()?;
                match open.as_mut() {
                    Some((_, ids)) if ids.contains(&id) => ids.retain(|x| *x != id),
                    _ => {
                        return id_node.invalid(format!(
                            "'{id}'. Messages with role 'tool' must be a response to a preceding message with 'tool_calls' that has this id."
                        ))
                    }
                }
            }
            _ => {
                // "function" (deprecated): a function's result by name.
                m.only(&["role", "content", "name"])?;
                m.req("name")?.str()?;
                m.req("content")?.str()?;
            }
        }
    }
    unanswered(open)
}

/// Fails when an assistant message's tool calls were not all answered by tool messages.
fn unanswered(open: Option<(Node, Vec<&str>)>) -> Check {
    match open {
        Some((calls, ids)) if !ids.is_empty() => calls.invalid(format!(
            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}",
            ids.join(", ")
        )),
        _ => Ok(()),
    }
}

/// Content: a string, or a non-empty array of parts of the given types.
fn content(c: &Node, kinds: &[&str]) -> Check {
    if c.is_str() {
        return Ok(());
    }
    if !c.v.is_array() {
        return c.type_error("a string or an array of content parts");
    }
    for part in c.nonempty_array()? {
        match part.tag(kinds)? {
            "text" => {
                part.only(&["type", "text"])?;
                part.req("text")?.str()?;
            }
            "refusal" => {
                part.only(&["type", "refusal"])?;
                part.req("refusal")?.str()?;
            }
            "image_url" => {
                part.only(&["type", "image_url"])?;
                let image = part.req("image_url")?;
                image.object()?;
                image.only(&["url", "detail"])?;
                image.req("url")?.str()?;
                image.opt("detail", |d| d.one_of(&["auto", "low", "high"]))?;
            }
            "input_audio" => {
                part.only(&["type", "input_audio"])?;
                let audio = part.req("input_audio")?;
                audio.object()?;
                audio.req("data")?.str()?;
                audio.req("format")?.one_of(&["wav", "mp3"])?;
            }
            _ => {
                part.only(&["type", "file"])?;
                let file = part.req("file")?;
                file.object()?;
                file.only(&["file_data", "file_id", "filename"])?;
                if file.get("file_data").is_none() {
                    file.req("file_id")?.str()?;
                }
            }
        }
    }
    Ok(())
}

/// An assistant message's `tool_calls`; returns their ids.
fn tool_calls<'a>(list: &Node<'a>) -> Check<Vec<&'a str>> {
    let mut ids = Vec::new();
    for call in list.nonempty_array()? {
        call.tag(&["function"])?;
        call.only(&["id", "type", "function"])?;
        ids.push(call.req("id")?.str()?);
        let f = call.req("function")?;
        f.object()?;
        f.only(&["name", "arguments"])?;
        f.req("name")?.str()?;
        f.req("arguments")?.str()?; // a JSON document as a string, never an object
    }
    Ok(ids)
}

/// `tools`: function tools (`{type, function: {name, description?, parameters?, strict?}}`) or
/// custom ones; returns how many.
fn tools(list: &Node) -> Check<usize> {
    let items = list.array()?;
    for t in &items {
        let kind = t.tag(&["function", "custom"])?;
        t.only(&["type", kind])?;
        let f = t.req(kind)?;
        f.object()?;
        let name = f.req("name")?;
        if !name_ok(name.str()?, 64, &[]) {
            return name.invalid(
                "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
            );
        }
        f.opt("description", Node::str)?;
        if kind == "function" {
            f.only(&["name", "description", "parameters", "strict"])?;
            f.opt("parameters", object_schema)?;
            f.opt("strict", Node::bool)?;
        }
    }
    Ok(items.len())
}

/// A function's `parameters`: a JSON Schema object whose type, if given, is `object`.
fn object_schema(s: &Node) -> Check {
    s.object()?;
    match s.get("type") {
        Some(t) if t.v.as_str() != Some("object") => t.invalid("schema must be a JSON Schema of 'type: \"object\"'."),
        _ => Ok(()),
    }
}

fn tool_choice(c: &Node, tools: usize) -> Check {
    if tools == 0 {
        return c.invalid("'tool_choice' is only allowed when 'tools' are specified.");
    }
    if c.is_str() {
        return c.one_of(&["none", "auto", "required"]).map(drop);
    }
    match c.tag(&["function", "custom", "allowed_tools"])? {
        kind @ ("function" | "custom") => {
            c.only(&["type", kind])?;
            let f = c.req(kind)?;
            f.object()?;
            f.req("name")?.str().map(drop)
        }
        _ => c.req("allowed_tools")?.object().map(drop),
    }
}

fn response_format(f: &Node) -> Check {
    if f.tag(&["text", "json_object", "json_schema"])? != "json_schema" {
        return f.only(&["type"]);
    }
    f.only(&["type", "json_schema"])?;
    let s = f.req("json_schema")?;
    s.object()?;
    s.only(&["name", "description", "schema", "strict"])?;
    let name = s.req("name")?;
    if !name_ok(name.str()?, 64, &[]) {
        return name.invalid(
            "string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
        );
    }
    s.req("schema")?.object()?;
    s.opt("strict", Node::bool).map(drop)
}

#[cfg(test)]
mod tests {
    use crate::scenario::Api;
    use crate::validate::{check, message, Kind};
    use serde_json::{json, Value};

    fn ok(body: Value) {
        if let Err(p) = check(Api::Chat, &Ok(body.clone())) {
            panic!("{body} rejected: {}", message(Api::Chat, &p));
        }
    }

    /// The rejection's message; it must name `field`.
    fn rejected(body: Value, field: &str) -> String {
        let p = check(Api::Chat, &Ok(body.clone())).expect_err(&format!("{body} should be rejected"));
        let msg = message(Api::Chat, &p);
        assert!(msg.contains(field), "{msg} should name {field}");
        msg
    }

    fn with(extra: Value) -> Value {
        let mut b = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    const CALL: &str = r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]}"#;

    fn call() -> Value {
        serde_json::from_str(CALL).unwrap()
    }

    #[test]
    fn realistic_bodies_pass() {
        ok(with(json!({})));
        ok(with(
            json!({"stream": true, "stream_options": {"include_usage": true}, "max_completion_tokens": 5,
                       "temperature": 0.25, "stop": ["\n\n"], "n": 2, "logprobs": true, "seed": 1, "user": "u"}),
        ));
        ok(with(json!({"messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]},
            call(),
            {"role": "tool", "tool_call_id": "call_1", "content": "22C"},
            {"role": "assistant", "content": "It is 22C."},
            {"role": "user", "content": "thanks"}],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}}})));
    }

    #[test]
    fn top_level_fields_and_types() {
        let msg = rejected(with(json!({"billing": 1})), "billing");
        assert_eq!(msg, "Unrecognized request argument supplied: billing");
        rejected(json!({"messages": [{"role": "user", "content": "hi"}]}), "'model'");
        rejected(with(json!({"model": 5})), "'model'");
        rejected(json!({"model": "m"}), "'messages'");
        rejected(with(json!({"messages": []})), "'messages'");
        rejected(with(json!({"max_tokens": 0})), "'max_tokens'");
        rejected(with(json!({"max_completion_tokens": 1.5})), "'max_completion_tokens'");
        rejected(with(json!({"n": 0})), "'n'");
        rejected(
            with(json!({"stream_options": {"include_usage": true}})),
            "'stream_options'",
        );
        rejected(
            with(json!({"stream": false, "stream_options": {"include_usage": true}})),
            "'stream_options'",
        );
        rejected(with(json!({"temperature": 3})), "'temperature'");
    }

    #[test]
    fn messages_by_role_and_parts_by_type() {
        rejected(
            with(json!({"messages": [{"role": "human", "content": "hi"}]})),
            "'messages[0].role'",
        );
        rejected(with(json!({"messages": [{"role": "user"}]})), "'messages[0].content'");
        rejected(
            with(json!({"messages": [{"role": "user", "content": 5}]})),
            "'messages[0].content'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [0, 0]}]})),
            "'messages[0].content[0]'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})),
            "'messages[0].content[0].type'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})),
            "'messages[0].content[0].image_url.url'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [{"type": "text"}]}]})),
            "'messages[0].content[0].text'",
        );
        rejected(
            with(json!({"messages": [{"role": "assistant"}]})),
            "'messages[0].content'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi", "tool_call_id": "x"}]})),
            "'messages[0].tool_call_id'",
        );
    }

    #[test]
    fn tool_calls_and_their_answers() {
        let mut bad_args = call();
        bad_args["tool_calls"][0]["function"]["arguments"] = json!({"city": "Paris"});
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, bad_args]})),
            "'messages[1].tool_calls[0].function.arguments'",
        );
        let mut no_type = call();
        no_type["tool_calls"][0].as_object_mut().unwrap().remove("type");
        rejected(with(json!({"messages": [no_type]})), "'messages[0].tool_calls[0].type'");
        // A tool message answering no call, or one not made just before.
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"},
                                     {"role": "tool", "tool_call_id": "call_1", "content": "22C"}]})),
            "'messages[1].tool_call_id'",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, call(),
                                     {"role": "tool", "tool_call_id": "call_2", "content": "22C"}]})),
            "call_2",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, call(),
                                     {"role": "tool", "content": "22C"}]})),
            "'messages[2].tool_call_id'",
        );
        // A call left unanswered.
        let msg = rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, call(), {"role": "user", "content": "?"}]})),
            "'messages[1].tool_calls'",
        );
        assert!(msg.contains("call_1"), "{msg}");
    }

    #[test]
    fn tools_and_choices() {
        rejected(
            with(json!({"tools": [{"type": "function", "name": "f"}]})),
            "'tools[0].name'",
        );
        rejected(
            with(json!({"tools": [{"name": "f", "input_schema": {"type": "object"}}]})),
            "'tools[0].type'",
        );
        rejected(
            with(json!({"tools": [{"type": "function", "function": {"name": "get weather"}}]})),
            "'tools[0].function.name'",
        );
        rejected(
            with(json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]})),
            "'tools[0].function.parameters'",
        );
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        rejected(with(json!({"tools": tools, "tool_choice": "any"})), "'tool_choice'");
        rejected(with(json!({"tool_choice": "auto"})), "'tool_choice'");
        rejected(
            with(json!({"tools": tools, "tool_choice": {"type": "function", "name": "f"}})),
            "'tool_choice.name'",
        );
        ok(with(json!({"tools": tools, "tool_choice": "required"})));
    }

    #[test]
    fn response_formats() {
        rejected(
            with(json!({"response_format": {"type": "json"}})),
            "'response_format.type'",
        );
        rejected(
            with(json!({"response_format": {"type": "json_schema", "json_schema": {"schema": {}}}})),
            "'response_format.json_schema.name'",
        );
        rejected(
            with(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})),
            "'response_format.json_schema.schema'",
        );
        // The Responses shape, flat, is a translation bug here.
        let p = check(
            Api::Chat,
            &Ok(with(
                json!({"response_format": {"type": "json_schema", "name": "x", "schema": {}}}),
            )),
        )
        .unwrap_err();
        assert_eq!(p.kind, Kind::Unknown);
        ok(with(json!({"response_format": {"type": "json_object"}})));
    }
}
