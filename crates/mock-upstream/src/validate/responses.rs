//! OpenAI Responses requests (`POST /v1/responses`): `input` as a string or items (messages with
//! the parts their role may carry, `function_call` with string `arguments`, and
//! `function_call_output` answering an earlier call unless the conversation is stored), flat
//! function tools (`{type, name, parameters}`, not Chat's nested `function`), `text.format` with
//! its schema flat too, and `max_output_tokens` of at least 16.

use super::{name_ok, Check, Node};

/// Every top-level field of the Responses API ("Unknown parameter" otherwise).
const FIELDS: &[&str] = &[
    "model",
    "input",
    "instructions",
    "stream",
    "stream_options",
    "max_output_tokens",
    "max_tool_calls",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "reasoning",
    "previous_response_id",
    "conversation",
    "store",
    "metadata",
    "temperature",
    "top_p",
    "top_logprobs",
    "truncation",
    "user",
    "include",
    "background",
    "service_tier",
    "prompt",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "context_management",
    "client_metadata",
];

/// Input items taken as they are (built-in tools' calls and outputs, references).
const OTHER_ITEMS: &[&str] = &[
    "item_reference",
    "custom_tool_call",
    "custom_tool_call_output",
    "web_search_call",
    "file_search_call",
    "computer_call",
    "computer_call_output",
    "image_generation_call",
    "code_interpreter_call",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "compaction",
];

/// Built-in tool types.
const BUILT_IN_TOOLS: &[&str] = &[
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "computer_use_preview",
    "code_interpreter",
    "image_generation",
    "mcp",
    "local_shell",
    "shell",
    "apply_patch",
];

const INPUT_PARTS: &[&str] = &["input_text", "input_image", "input_file", "input_audio"];
const OUTPUT_PARTS: &[&str] = &["output_text", "refusal"];

pub(super) fn check(body: &Node) -> Check {
    body.only(FIELDS)?;
    body.req("model")?.str()?;
    // A stored conversation holds the calls that outputs in `input` may answer.
    let stored = body.get("previous_response_id").is_some() || body.get("conversation").is_some();
    match body.get("input") {
        Some(i) => input(&i, stored)?,
        None if body.get("prompt").is_some() => {}
        None => return body.req("input").map(drop),
    }
    body.opt("instructions", Node::str)?;
    body.opt("previous_response_id", Node::str)?;
    let stream = body.opt("stream", Node::bool)?.unwrap_or(false);
    body.opt("stream_options", |o| {
        if !stream {
            return o.invalid("The 'stream_options' parameter is only allowed when 'stream' is enabled.");
        }
        o.object()?;
        o.only(&["include_obfuscation"])
    })?;
    body.opt("max_output_tokens", |n| n.int(16))?;
    body.opt("max_tool_calls", |n| n.int(1))?;
    body.opt("temperature", |t| t.number(0.0, 2.0))?;
    body.opt("top_p", |t| t.number(0.0, 1.0))?;
    body.opt("truncation", |t| t.one_of(&["auto", "disabled"]))?;
    body.opt("include", Node::strings)?;
    // Codex CLI's per-turn metadata: string values, one of them a whole JSON document.
    body.opt("client_metadata", |m| {
        for key in m.object()?.keys() {
            m.req(key)?.str()?;
        }
        Ok(())
    })?;
    body.opt("tools", tools)?;
    body.opt("tool_choice", tool_choice)?;
    body.opt("text", text)?;
    body.opt("reasoning", |r| {
        r.object()?;
        r.only(&["effort", "summary", "generate_summary"])?;
        r.opt("effort", |e| {
            e.one_of(&["none", "minimal", "low", "medium", "high", "xhigh"])
        })?;
        r.opt("summary", |s| s.one_of(&["auto", "concise", "detailed"]))
            .map(drop)
    })?;
    Ok(())
}

/// `input`: a string, or items in order (outputs answer calls made before them).
fn input(i: &Node, stored: bool) -> Check {
    if i.is_str() {
        return Ok(());
    }
    let mut calls: Vec<&str> = Vec::new();
    for item in i.array()? {
        item.object()?;
        let kind = match item.get("type") {
            Some(t) => t.str()?,
            // `{role, content}` alone is a message.
            None if item.get("role").is_some() => "message",
            None => return item.req("type").map(drop),
        };
        match kind {
            "message" => message(&item)?,
            "function_call" => {
                item.only(&["type", "id", "call_id", "name", "arguments", "status"])?;
                calls.push(item.req("call_id")?.str()?);
                item.req("name")?.str()?;
                item.req("arguments")?.str()?; // a JSON document as a string, never an object
            }
            "function_call_output" => {
                item.only(&["type", "id", "call_id", "output", "status"])?;
                let id_node = item.req("call_id")?;
                let id = id_node.str()?;
                let output = item.req("output")?;
                if !output.is_str() {
                    parts(&output, INPUT_PARTS)?;
                }
                if !stored && !calls.contains(&id) {
                    return id_node.invalid(format!(
                        "No tool call found for function call output with call_id {id}."
                    ));
                }
            }
            "reasoning" => {
                item.only(&["type", "id", "summary", "content", "encrypted_content", "status"])?;
                item.req("summary")?.array()?;
            }
            other if OTHER_ITEMS.contains(&other) => {}
            _ => {
                let mut known = vec!["message", "function_call", "function_call_output", "reasoning"];
                known.extend_from_slice(OTHER_ITEMS);
                return item.req("type")?.one_of(&known).map(drop);
            }
        }
    }
    Ok(())
}

/// A message item: input parts from the user, system and developer; output parts from the
/// assistant.
fn message(m: &Node) -> Check {
    m.only(&["type", "role", "content", "id", "status"])?;
    let role = m.req("role")?.one_of(&["user", "assistant", "system", "developer"])?;
    let content = m.req("content")?;
    if content.is_str() {
        return Ok(());
    }
    parts(&content, if role == "assistant" { OUTPUT_PARTS } else { INPUT_PARTS })
}

/// Content parts of the given types.
fn parts(list: &Node, kinds: &[&str]) -> Check {
    for part in list.array()? {
        match part.tag(kinds)? {
            "input_text" => {
                part.only(&["type", "text"])?;
                part.req("text")?.str()?;
            }
            "output_text" => {
                part.only(&["type", "text", "annotations", "logprobs"])?;
                part.req("text")?.str()?;
            }
            "refusal" => {
                part.only(&["type", "refusal"])?;
                part.req("refusal")?.str()?;
            }
            "input_image" => {
                part.only(&["type", "image_url", "file_id", "detail"])?;
                if part.get("file_id").is_none() {
                    part.req("image_url")?.str()?;
                }
                part.opt("detail", |d| d.one_of(&["auto", "low", "high"]))?;
            }
            "input_file" => {
                part.only(&["type", "file_id", "file_data", "file_url", "filename"])?;
                if ["file_data", "file_url"].iter().all(|f| part.get(f).is_none()) {
                    part.req("file_id")?.str()?;
                }
            }
            _ => {
                part.only(&["type", "input_audio"])?;
                part.req("input_audio")?.object()?;
            }
        }
    }
    Ok(())
}

/// `tools`: flat function tools (`{type: "function", name, parameters?, strict?}`), built-ins, or
/// a `namespace` grouping function and custom tools (`{type, name, description, tools}`).
fn tools(list: &Node) -> Check {
    for t in list.array()? {
        t.object()?;
        let kind = t.req("type")?.str()?;
        match kind {
            "namespace" => {
                t.only(&["type", "name", "description", "tools"])?;
                let name = t.req("name")?;
                if !name_ok(name.str()?, 64, &[]) {
                    return name.invalid("string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.");
                }
                t.req("description")?.str()?;
                let inner = t.req("tools")?;
                for each in inner.array()? {
                    each.object()?;
                    each.req("type")?.one_of(&["function", "custom"])?;
                }
                tools(&inner)?;
            }
            "function" | "custom" => {
                // Chat's `{type, function: {name}}` is the classic translation bug: no `name` here.
                let name = t.req("name")?;
                if !name_ok(name.str()?, 64, &[]) {
                    return name.invalid("string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.");
                }
                t.opt("description", Node::str)?;
                if kind == "function" {
                    t.only(&["type", "name", "description", "parameters", "strict"])?;
                    t.opt("parameters", Node::object)?;
                    t.opt("strict", Node::bool)?;
                }
            }
            // Web search takes its own settings only (OpenAI's `WebSearchTool`).
            "web_search" | "web_search_2025_08_26" => {
                t.only(&[
                    "type",
                    "filters",
                    "search_context_size",
                    "user_location",
                    "external_web_access",
                ])?;
                t.opt("search_context_size", |n| {
                    n.one_of(&["low", "medium", "high"]).map(drop)
                })?;
            }
            other if BUILT_IN_TOOLS.contains(&other) => {}
            _ => {
                let mut known = vec!["function", "custom"];
                known.extend_from_slice(BUILT_IN_TOOLS);
                return t.req("type")?.one_of(&known).map(drop);
            }
        }
    }
    Ok(())
}

fn tool_choice(c: &Node) -> Check {
    if c.is_str() {
        return c.one_of(&["none", "auto", "required"]).map(drop);
    }
    c.object()?;
    match c.req("type")?.str()? {
        "function" | "custom" => {
            c.only(&["type", "name"])?;
            c.req("name")?.str().map(drop)
        }
        _ => Ok(()),
    }
}

/// `text`: the output `format` (a JSON schema flat in it: `{type, name, schema, strict?}`) and
/// `verbosity`.
fn text(t: &Node) -> Check {
    t.object()?;
    t.only(&["format", "verbosity"])?;
    t.opt("verbosity", |v| v.one_of(&["low", "medium", "high"]))?;
    t.opt("format", |f| {
        if f.tag(&["text", "json_object", "json_schema"])? != "json_schema" {
            return f.only(&["type"]);
        }
        f.only(&["type", "name", "description", "schema", "strict"])?;
        f.req("name")?.str()?;
        f.req("schema")?.object()?;
        f.opt("strict", Node::bool).map(drop)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenario::Api;
    use crate::validate::{check, message};
    use serde_json::{json, Value};

    fn ok(body: Value) {
        if let Err(p) = check(Api::Responses, &Ok(body.clone())) {
            panic!("{body} rejected: {}", message(Api::Responses, &p));
        }
    }

    fn rejected(body: Value, field: &str) -> String {
        let p = check(Api::Responses, &Ok(body.clone())).expect_err(&format!("{body} should be rejected"));
        let msg = message(Api::Responses, &p);
        assert!(msg.contains(field), "{msg} should name {field}");
        msg
    }

    fn with(extra: Value) -> Value {
        let mut b = json!({"model": "m", "input": "hi"});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    fn call() -> Value {
        json!({"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"})
    }

    #[test]
    fn realistic_bodies_pass() {
        ok(with(json!({})));
        ok(with(
            json!({"stream": true, "max_output_tokens": 16, "instructions": "be brief",
                       "reasoning": {"effort": "low", "summary": "auto"}}),
        ));
        ok(with(json!({"input": [
            {"role": "user", "content": "weather?"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and this?"},
                {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "auto"}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me see.", "annotations": []}]},
            call(),
            {"type": "function_call_output", "call_id": "call_1", "output": "22C"}],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": true},
                      {"type": "web_search"}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}}})));
        // An output for a call of a stored response.
        ok(with(json!({"previous_response_id": "resp_1",
                       "input": [{"type": "function_call_output", "call_id": "call_9", "output": "22C"}]})));
    }

    #[test]
    fn top_level_fields() {
        assert_eq!(
            rejected(with(json!({"first": true})), "'first'"),
            "Unknown parameter: 'first'."
        );
        rejected(with(json!({"messages": []})), "'messages'");
        rejected(json!({"model": "m"}), "'input'");
        rejected(json!({"input": "hi"}), "'model'");
        rejected(with(json!({"input": 5})), "'input'");
        rejected(with(json!({"max_output_tokens": 10})), "'max_output_tokens'");
        rejected(with(json!({"stream_options": {}})), "'stream_options'");
        rejected(with(json!({"reasoning": {"effort": "max"}})), "'reasoning.effort'");
        rejected(with(json!({"instructions": ["be brief"]})), "'instructions'");
    }

    #[test]
    fn codexs_client_metadata() {
        ok(with(
            json!({"client_metadata": {"x-codex-turn-metadata": "{\"turn_id\":\"t-1\"}", "session_id": "s-1"}}),
        ));
        rejected(with(json!({"client_metadata": "s-1"})), "'client_metadata'");
        rejected(with(json!({"client_metadata": {"turn": 1}})), "'client_metadata.turn'");
    }

    #[test]
    fn items_and_parts() {
        rejected(
            with(json!({"input": [{"role": "robot", "content": "x"}]})),
            "'input[0].role'",
        );
        rejected(with(json!({"input": [{"content": "x"}]})), "'input[0].type'");
        rejected(with(json!({"input": [{"type": "banana"}]})), "'input[0].type'");
        rejected(
            with(json!({"input": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]})),
            "'input[0].content[0].type'",
        );
        // An assistant turn carries output parts, a user turn input parts.
        rejected(
            with(json!({"input": [{"role": "assistant", "content": [{"type": "input_text", "text": "x"}]}]})),
            "'input[0].content[0].type'",
        );
        rejected(
            with(json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]})),
            "'input[0].content[0].image_url'",
        );
        let mut object_args = call();
        object_args["arguments"] = json!({"city": "Paris"});
        rejected(with(json!({"input": [object_args]})), "'input[0].arguments'");
        rejected(
            with(json!({"input": [{"type": "function_call_output", "call_id": "call_1", "output": "22C"}, call()]})),
            "'input[0].call_id'",
        );
        rejected(
            with(json!({"input": [call(), {"type": "function_call_output", "call_id": "call_1"}]})),
            "'input[1].output'",
        );
    }

    #[test]
    fn tools_choices_and_formats() {
        // Chat's nested tool shape: no flat `name`.
        assert_eq!(
            rejected(
                with(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
                "'tools[0].name'"
            ),
            "Missing required parameter: 'tools[0].name'."
        );
        rejected(
            with(json!({"tools": [{"type": "function", "name": "f", "function": {}}]})),
            "'tools[0].function'",
        );
        rejected(with(json!({"tools": [{"type": "browser"}]})), "'tools[0].type'");
        // A namespace groups function and custom tools, and only those.
        let namespace = |inner: Value| json!({"tools": [{"type": "namespace", "name": "crm", "description": "CRM", "tools": inner}]});
        ok(with(namespace(
            json!([{"type": "function", "name": "f", "parameters": {"type": "object"}}, {"type": "custom", "name": "g"}]),
        )));
        rejected(
            with(namespace(json!([{"type": "web_search"}]))),
            "'tools[0].tools[0].type'",
        );
        rejected(
            with(json!({"tools": [{"type": "namespace", "name": "crm", "tools": []}]})),
            "'tools[0].description'",
        );
        rejected(
            with(json!({"tools": [{"type": "function", "name": "f", "parameters": []}]})),
            "'tools[0].parameters'",
        );
        rejected(with(json!({"tool_choice": "any"})), "'tool_choice'");
        rejected(
            with(json!({"tool_choice": {"type": "function", "function": {"name": "f"}}})),
            "'tool_choice.",
        );
        rejected(
            with(json!({"text": {"format": {"type": "json_schema", "json_schema": {"name": "x"}}}})),
            "'text.format.",
        );
        rejected(
            with(json!({"text": {"format": {"type": "json_schema", "name": "x"}}})),
            "'text.format.schema'",
        );
        rejected(
            with(json!({"response_format": {"type": "json_object"}})),
            "'response_format'",
        );
    }
}
