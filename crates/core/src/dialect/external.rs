//! What a request's cost depends on beyond its body (SPEC §17): input it names instead of
//! carrying, and features billed per use.
//!
//! The hold must bound the charge. Input in the body is bounded by the body's size; input the
//! request only names — a stored response or conversation, a stored prompt, a cached content, an
//! uploaded file, a remote image or document the provider fetches — is not, so such a request is
//! held at the model's context window ([`external_input`]). A server-side tool the provider runs
//! and bills per use (web search, file search, a code container…) has a price no route of the
//! catalog states, so it is refused rather than served at an unknown cost ([`priced_tool`]).
//!
//! Only structure is read, never text: a message that *says* "file_id" names no file. The walk
//! covers the request's messages (and system prompt), not its tools' parameter schemas, where a
//! property may well be called `file_id`.

use serde_json::{Map, Value};

/// The first field whose input is not in the body, as a path (`previous_response_id`,
/// `messages[0].content[1]`), if any.
pub fn external_input(body: &Map<String, Value>) -> Option<String> {
    for field in ["previous_response_id", "conversation", "cachedContent", "container"] {
        if body.get(field).is_some_and(|v| !v.is_null()) {
            return Some(field.to_string());
        }
    }
    // A Responses `prompt` object is a stored template (a Chat `prompt` does not exist, and a
    // legacy completion prompt is a string).
    if body.get("prompt").is_some_and(Value::is_object) {
        return Some("prompt".into());
    }
    if body
        .get("mcp_servers")
        .and_then(Value::as_array)
        .is_some_and(|s| !s.is_empty())
    {
        return Some("mcp_servers".into());
    }
    for field in ["messages", "input", "contents", "system", "instructions", "systemInstruction"] {
        if let Some(v) = body.get(field) {
            if let Some(at) = find_reference(v, field, 0) {
                return Some(at);
            }
        }
    }
    None
}

/// The first tool the provider runs and bills per use, as (`tools[i]`, its kind), if any: every
/// tool that is not the client's own function. Chat and Responses function tools have `type`
/// `function` (or `custom`); Anthropic client tools have no `type` (or `custom`); a Gemini tool
/// entry is the client's only when it declares functions alone.
pub fn priced_tool(body: &Map<String, Value>) -> Option<(String, String)> {
    let tools = body.get("tools")?.as_array()?;
    tools.iter().enumerate().find_map(|(i, tool)| {
        let obj = tool.as_object()?;
        let kind = match obj.get("type") {
            Some(Value::String(t)) if t == "function" || t == "custom" => return None,
            Some(Value::String(t)) => t.clone(),
            Some(_) => "unknown".to_string(),
            // Gemini: `{functionDeclarations: […]}` is the client's; any other key is a Google tool.
            // An Anthropic client tool: a name and an input schema, no type.
            None if obj.contains_key("name") || obj.contains_key("input_schema") => return None,
            // Gemini: `{functionDeclarations: […]}` is the client's; any other key is a Google tool.
            None => obj.keys().find(|k| k.as_str() != "functionDeclarations")?.clone(),
        };
        Some((format!("tools[{i}]"), kind))
    })
}

/// Deep enough for any real message shape (tool results inside messages inside…); serde_json
/// itself refuses nesting past 128.
const MAX_DEPTH: usize = 12;

fn find_reference(v: &Value, at: &str, depth: usize) -> Option<String> {
    if depth > MAX_DEPTH {
        return None;
    }
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .find_map(|(i, item)| find_reference(item, &format!("{at}[{i}]"), depth + 1)),
        Value::Object(obj) => {
            if names_outside_input(obj) {
                return Some(at.to_string());
            }
            obj.iter()
                .filter(|(_, v)| v.is_array() || v.is_object())
                .find_map(|(k, v)| find_reference(v, &format!("{at}.{k}"), depth + 1))
        }
        _ => None,
    }
}

fn is_remote(url: Option<&Value>) -> bool {
    url.and_then(Value::as_str)
        .is_some_and(|u| !u.trim_start().to_ascii_lowercase().starts_with("data:"))
}

/// One content part that names input held elsewhere: an uploaded file (`file_id`, `file_url`,
/// Gemini `fileData`), a remote image (`image_url` that is not a `data:` URL), an Anthropic
/// source of type `url` or `file`.
fn names_outside_input(part: &Map<String, Value>) -> bool {
    let kind = part.get("type").and_then(Value::as_str);
    let string = |k: &str| part.get(k).is_some_and(Value::is_string);
    match kind {
        // Chat: {"type":"image_url","image_url":{"url":…}}; Responses: {"type":"input_image","image_url":"…"}.
        Some("image_url") => is_remote(part.get("image_url").and_then(|i| i.get("url"))),
        Some("input_image") => string("file_id") || is_remote(part.get("image_url")),
        Some("input_file") | Some("file") => {
            string("file_id")
                || string("file_url")
                || part.get("file").is_some_and(|f| f.get("file_id").is_some_and(Value::is_string))
        }
        Some("image") | Some("document") => matches!(
            part.get("source").and_then(|s| s.get("type")).and_then(Value::as_str),
            Some("url" | "file")
        ),
        _ => part.contains_key("fileData"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn input_named_instead_of_carried_is_found_by_structure() {
        let cases = [
            (json!({"input": "hi", "previous_response_id": "resp_1"}), Some("previous_response_id")),
            (json!({"input": "hi", "conversation": "conv_1"}), Some("conversation")),
            (json!({"prompt": {"id": "pmpt_1"}}), Some("prompt")),
            (json!({"contents": [], "cachedContent": "cachedContents/1"}), Some("cachedContent")),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
                Some("messages[0].content[0]"),
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "file-1"}]}]}),
                Some("input[0].content[1]"),
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}]}]}),
                Some("messages[0].content[0]"),
            ),
            (
                json!({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "gs://b/o"}}]}]}),
                Some("contents[0].parts[0]"),
            ),
            (json!({"messages": [], "mcp_servers": [{"url": "https://mcp"}]}), Some("mcp_servers")),
        ];
        for (body, want) in cases {
            assert_eq!(external_input(&map(body.clone())).as_deref(), want, "{body}");
        }
        let in_body = [
            json!({"messages": [{"role": "user", "content": "my file_id is file-1, see https://x/y.png"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}]}),
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"file_id": {"type": "string"}}}}}]}),
            json!({"input": "hi", "previous_response_id": null}),
        ];
        for body in in_body {
            assert_eq!(external_input(&map(body.clone())), None, "{body}");
        }
    }

    #[test]
    fn a_tool_the_provider_runs_and_bills_is_named() {
        let found = |v: Value| priced_tool(&map(v));
        assert_eq!(
            found(json!({"tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]})),
            Some(("tools[1]".into(), "web_search".into()))
        );
        assert_eq!(
            found(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            Some(("tools[0]".into(), "web_search_20250305".into()))
        );
        assert_eq!(
            found(json!({"tools": [{"functionDeclarations": []}, {"googleSearch": {}}]})),
            Some(("tools[1]".into(), "googleSearch".into()))
        );
        assert_eq!(found(json!({"tools": [{"name": "get_weather", "input_schema": {}}]})), None);
        assert_eq!(found(json!({"tools": [{"type": "custom", "name": "x"}]})), None);
        assert_eq!(found(json!({"tools": [{"functionDeclarations": [{"name": "f"}]}]})), None);
        assert_eq!(found(json!({"messages": []})), None);
    }
}
