//! Anthropic Messages requests (`POST /v1/messages`): `max_tokens` required, `user`/`assistant`
//! turns starting with `user` (the system prompt is the top-level `system`; a `system` turn of text
//! further on is an instruction at that place, generally available since the
//! `mid-conversation-system-2026-04-07` beta), content blocks by
//! type and by turn (`tool_use` from the assistant, `tool_result` from the user, answering
//! exactly the previous turn's `tool_use` ids), custom tools with an object `input_schema`.

use super::{name_ok, Check, Node};

/// Every top-level field of the Messages API ("Extra inputs are not permitted" otherwise).
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "metadata",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
    "output_format",
    "cache_control",
    "inference_geo",
];

/// Block types a turn may carry; those without a check of their own are server tools' blocks.
const BLOCKS: &[&str] = &[
    "text",
    "image",
    "document",
    "search_result",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
];
const IMAGE_TYPES: &[&str] = &["image/jpeg", "image/png", "image/gif", "image/webp"];

/// The `anthropic_version` a Bedrock InvokeModel body must carry.
pub const BEDROCK_VERSION: &str = "bedrock-2023-05-31";
/// Fields of the Messages API that a Bedrock body must not have: the model is in the URL, the
/// stream is the operation (`invoke-with-response-stream`), the rest are Anthropic-only.
const NOT_ON_BEDROCK: &[&str] = &[
    "model",
    "stream",
    "service_tier",
    "container",
    "mcp_servers",
    "inference_geo",
];

/// The `anthropic_version` a Vertex `rawPredict` body must carry.
pub const VERTEX_VERSION: &str = "vertex-2023-10-16";
/// Fields of the Messages API that a Vertex body must not have: the model is in the URL, the rest
/// are Anthropic-only (`stream` stays: `streamRawPredict` reads it).
const NOT_ON_VERTEX: &[&str] = &["model", "service_tier", "container", "mcp_servers", "inference_geo"];

/// An Anthropic body for Vertex's `rawPredict` / `streamRawPredict`: `anthropic_version` (the one
/// version), no `model`, then the Messages rules.
pub(super) fn check_vertex(body: &Node) -> Check {
    let version = body.req("anthropic_version")?;
    if version.str()? != VERTEX_VERSION {
        return version.invalid(format!("{} is not a valid enum value", version.str()?));
    }
    let fields: Vec<&str> = FIELDS
        .iter()
        .copied()
        .filter(|f| !NOT_ON_VERTEX.contains(f))
        .chain(["anthropic_version"])
        .collect();
    body.only(&fields)?;
    body.opt("stream", Node::bool)?;
    request(body)
}

pub(super) fn check(body: &Node) -> Check {
    body.only(FIELDS)?;
    body.req("model")?.str()?;
    body.opt("stream", Node::bool)?;
    request(body)
}

/// An Anthropic body for Bedrock's InvokeModel: `anthropic_version` (required, the one
/// version), `anthropic_beta` (flags), no `model`, no `stream`, then the Messages rules.
pub(super) fn check_bedrock(body: &Node) -> Check {
    let version = body.req("anthropic_version")?;
    if version.str()? != BEDROCK_VERSION {
        return version.invalid(format!("{} is not a valid enum value", version.str()?));
    }
    let fields: Vec<&str> = FIELDS
        .iter()
        .copied()
        .filter(|f| !NOT_ON_BEDROCK.contains(f))
        .chain(["anthropic_version", "anthropic_beta"])
        .collect();
    body.only(&fields)?;
    body.opt("anthropic_beta", |betas| {
        for flag in betas.strings()? {
            if !CLOUD_BETAS.contains(&flag) {
                return betas.invalid(format!("invalid beta flag: {flag}"));
            }
        }
        Ok(())
    })?;
    request(body)
}

/// The beta flags Bedrock and Vertex take for Claude models (their documentation, 2026-12): any
/// other is refused.
pub const CLOUD_BETAS: [&str; 11] = [
    "computer-use-2024-10-22",
    "computer-use-2025-01-24",
    "token-efficient-tools-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "output-128k-2025-02-19",
    "dev-full-thinking-2025-05-14",
    "context-1m-2025-08-07",
    "context-management-2025-06-27",
    "effort-2025-11-24",
    "tool-search-tool-2025-10-19",
    "tool-examples-2025-10-29",
];

/// What the Messages API and Bedrock check alike: the limit, the turns, the sampling and the
/// tools.
fn request(body: &Node) -> Check {
    let max_tokens = body.req("max_tokens")?.int(1)?;
    messages(&body.req("messages")?)?;
    body.opt("system", |s| if s.is_str() { Ok(()) } else { text_blocks(s) })?;
    body.opt("stop_sequences", Node::strings)?;
    body.opt("temperature", |t| t.number(0.0, 1.0))?;
    body.opt("top_p", |t| t.number(0.0, 1.0))?;
    body.opt("top_k", |t| t.int(0))?;
    body.opt("metadata", |m| {
        m.object()?;
        m.only(&["user_id"])
    })?;
    body.opt("tools", tools)?;
    body.opt("tool_choice", tool_choice)?;
    body.opt("thinking", |t| thinking(t, max_tokens))?;
    Ok(())
}

/// The turns: `user` first; each `tool_result` answers a `tool_use` of the turn just before, and
/// every `tool_use` is answered in the turn right after it.
fn messages(list: &Node) -> Check {
    let items = list.nonempty_array()?;
    // The previous turn and the `tool_use` ids it made.
    let mut prev: Option<(&Node, Vec<&str>)> = None;
    for (i, m) in items.iter().enumerate() {
        m.object()?;
        m.only(&["role", "content"])?;
        let role_node = m.req("role")?;
        let role = role_node.one_of(&["user", "assistant", "system"])?;
        if i == 0 && role != "user" {
            return role_node.invalid("first message must use the \"user\" role.");
        }
        let last = i + 1 == items.len();
        let blocks = if role == "system" {
            system_turn(&m.req("content")?)?
        } else {
            content(&m.req("content")?, role == "assistant", last)?
        };
        let (turn, asked) = prev.take().map_or((None, Vec::new()), |(t, a)| (Some(t), a));
        if let Some((block, id)) = blocks.results.iter().find(|(_, id)| !asked.contains(id)) {
            return block.invalid(format!(
                "unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
            ));
        }
        let missing: Vec<&str> = asked
            .iter()
            .copied()
            .filter(|id| !blocks.results.iter().any(|(_, answered)| answered == id))
            .collect();
        if let (Some(turn), false) = (turn, missing.is_empty()) {
            return turn.invalid(format!(
                "`tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                missing.join(", ")
            ));
        }
        prev = Some((m, blocks.uses));
    }
    Ok(())
}

/// What a turn's content holds that the next turns care about.
struct Blocks<'a> {
    /// `tool_use` ids (assistant).
    uses: Vec<&'a str>,
    /// `tool_result` blocks and the id each answers (user).
    results: Vec<(Node<'a>, &'a str)>,
}

/// A turn's content: a string or blocks; empty only for a final assistant turn (a prefill).
fn content<'a>(c: &Node<'a>, assistant: bool, last: bool) -> Check<Blocks<'a>> {
    let mut blocks = Blocks {
        uses: Vec::new(),
        results: Vec::new(),
    };
    let empty = match c.v {
        serde_json::Value::String(s) => s.is_empty(),
        serde_json::Value::Array(a) => a.is_empty(),
        _ => return c.type_error("a string or an array of content blocks"),
    };
    if empty && !(assistant && last) {
        return c.invalid("all messages must have non-empty content except for the optional final assistant message");
    }
    if c.is_str() {
        return Ok(blocks);
    }
    for block in c.array()? {
        let kind = block.tag(BLOCKS)?;
        let turn_ok = match kind {
            "tool_use" | "thinking" | "redacted_thinking" => assistant,
            "tool_result" => !assistant,
            _ => true,
        };
        if !turn_ok {
            let whose = if assistant { "user" } else { "assistant" };
            return block
                .req("type")?
                .invalid(format!("`{kind}` blocks can only be in `{whose}` messages"));
        }
        match kind {
            "text" => text_block(&block)?,
            "image" => {
                block.only(&["type", "source", "cache_control"])?;
                source(&block.req("source")?, true)?;
            }
            "document" => {
                block.only(&["type", "source", "title", "context", "citations", "cache_control"])?;
                source(&block.req("source")?, false)?;
            }
            "tool_use" => {
                block.only(&["type", "id", "name", "input", "cache_control", "caller"])?;
                blocks.uses.push(block.req("id")?.str()?);
                block.req("name")?.str()?;
                block.req("input")?.object()?;
            }
            "tool_result" => {
                block.only(&["type", "tool_use_id", "content", "is_error", "cache_control"])?;
                let id = block.req("tool_use_id")?.str()?;
                block.opt("content", |r| if r.is_str() { Ok(()) } else { result_blocks(r) })?;
                block.opt("is_error", Node::bool)?;
                blocks.results.push((block, id));
            }
            "thinking" => {
                block.only(&["type", "thinking", "signature"])?;
                block.req("thinking")?.str()?;
                block.req("signature")?.str()?;
            }
            "redacted_thinking" => {
                block.only(&["type", "data"])?;
                block.req("data")?.str()?;
            }
            _ => {}
        }
    }
    Ok(blocks)
}

fn text_block(block: &Node) -> Check {
    block.only(&["type", "text", "cache_control", "citations"])?;
    let text = block.req("text")?;
    if text.str()?.is_empty() {
        return text.invalid("text content blocks must be non-empty");
    }
    Ok(())
}

/// A `system` turn inside the conversation: text only, as a string or text blocks.
fn system_turn<'a>(c: &Node<'a>) -> Check<Blocks<'a>> {
    match c.v {
        serde_json::Value::String(s) if s.is_empty() => {
            return c.invalid("system messages must have non-empty content")
        }
        serde_json::Value::String(_) => {}
        _ => text_blocks(c)?,
    }
    Ok(Blocks {
        uses: Vec::new(),
        results: Vec::new(),
    })
}

/// An array of text blocks (the system prompt).
fn text_blocks(list: &Node) -> Check {
    for block in list.array()? {
        block.tag(&["text"])?;
        text_block(&block)?;
    }
    Ok(())
}

/// A `tool_result`'s content blocks: text, images, documents.
fn result_blocks(list: &Node) -> Check {
    for block in list.array()? {
        match block.tag(&["text", "image", "document", "search_result"])? {
            "text" => text_block(&block)?,
            "image" => source(&block.req("source")?, true)?,
            "document" => source(&block.req("source")?, false)?,
            _ => {}
        }
    }
    Ok(())
}

/// An image's or a document's `source`.
fn source(s: &Node, image: bool) -> Check {
    let kinds: &[&str] = if image {
        &["base64", "url", "file"]
    } else {
        &["base64", "text", "url", "content", "file"]
    };
    match s.tag(kinds)? {
        "base64" => {
            s.only(&["type", "media_type", "data"])?;
            let media: &[&str] = if image { IMAGE_TYPES } else { &["application/pdf"] };
            s.req("media_type")?.one_of(media)?;
            s.req("data")?.str().map(drop)
        }
        "text" => {
            s.only(&["type", "media_type", "data"])?;
            s.req("media_type")?.one_of(&["text/plain"])?;
            s.req("data")?.str().map(drop)
        }
        "url" => {
            s.only(&["type", "url"])?;
            s.req("url")?.str().map(drop)
        }
        "file" => {
            s.only(&["type", "file_id"])?;
            s.req("file_id")?.str().map(drop)
        }
        _ => s.req("content").map(drop),
    }
}

/// A server tool's type: a name and a date, like `web_search_20250305`.
fn server_tool(kind: &str) -> bool {
    kind.rsplit_once('_')
        .is_some_and(|(name, date)| !name.is_empty() && date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()))
}

/// `tools`: custom tools (`{name, description?, input_schema}`, `type` absent or `custom`) or
/// typed server tools.
fn tools(list: &Node) -> Check {
    for t in list.array()? {
        t.object()?;
        let kind = t.opt("type", Node::str)?.unwrap_or("custom");
        if kind != "custom" {
            if !server_tool(kind) {
                return t.req("type")?.invalid(format!(
                    "Input tag '{kind}' found using 'type' does not match any of the expected tags: 'custom' or a server tool type such as 'web_search_20250305'"
                ));
            }
            t.req("name")?.str()?;
            if kind.starts_with("web_search_") {
                // Anthropic's web search tool: its name is `web_search`, `max_uses` a positive count.
                t.only(&[
                    "type",
                    "name",
                    "max_uses",
                    "allowed_domains",
                    "blocked_domains",
                    "user_location",
                    "cache_control",
                ])?;
                t.req("name")?.one_of(&["web_search"])?;
                t.opt("max_uses", |n| n.int(1))?;
            }
            continue;
        }
        t.only(&[
            "type",
            "name",
            "description",
            "input_schema",
            "cache_control",
            "strict",
            "input_examples",
            "defer_loading",
            "allowed_callers",
            "eager_input_streaming",
        ])?;
        let name = t.req("name")?;
        if !name_ok(name.str()?, 128, &[]) {
            return name.invalid("String should match pattern '^[a-zA-Z0-9_-]{1,128}$'");
        }
        t.opt("description", Node::str)?;
        let schema = t.req("input_schema")?;
        schema.object()?;
        schema.req("type")?.one_of(&["object"])?;
    }
    Ok(())
}

fn tool_choice(c: &Node) -> Check {
    let kind = c.tag(&["auto", "any", "tool", "none"])?;
    c.only(&["type", "name", "disable_parallel_tool_use"])?;
    if kind == "tool" {
        c.req("name")?.str()?;
    }
    c.opt("disable_parallel_tool_use", Node::bool).map(drop)
}

fn thinking(t: &Node, max_tokens: i64) -> Check {
    match t.tag(&["enabled", "disabled", "adaptive"])? {
        "enabled" => {
            t.only(&["type", "budget_tokens"])?;
            let budget = t.req("budget_tokens")?;
            if budget.int(1024)? >= max_tokens {
                return budget.invalid("`max_tokens` must be greater than `thinking.budget_tokens`");
            }
            Ok(())
        }
        "disabled" => t.only(&["type"]),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::scenario::Api;
    use crate::validate::{check, message};
    use serde_json::{json, Value};

    fn ok(body: Value) {
        if let Err(p) = check(Api::Messages, &Ok(body.clone())) {
            panic!("{body} rejected: {}", message(Api::Messages, &p));
        }
    }

    fn rejected(body: Value, field: &str) -> String {
        let p = check(Api::Messages, &Ok(body.clone())).expect_err(&format!("{body} should be rejected"));
        let msg = message(Api::Messages, &p);
        assert!(msg.starts_with(field), "{msg} should name {field}");
        msg
    }

    fn with(extra: Value) -> Value {
        let mut b = json!({"model": "c", "max_tokens": 256, "messages": [{"role": "user", "content": "hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    fn use_block(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "get_weather", "input": {"city": "Paris"}})
    }

    fn result_block(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "22C"})
    }

    fn conversation(uses: &[&str], results: &[&str]) -> Value {
        let uses: Vec<Value> = uses.iter().map(|id| use_block(id)).collect();
        let results: Vec<Value> = results.iter().map(|id| result_block(id)).collect();
        with(json!({"messages": [
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": uses},
            {"role": "user", "content": results}]}))
    }

    #[test]
    fn realistic_bodies_pass() {
        ok(with(json!({})));
        ok(with(
            json!({"stream": true, "stop_sequences": ["END"], "temperature": 0.5,
                       "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}]}),
        ));
        ok(conversation(&["toolu_1", "toolu_2"], &["toolu_2", "toolu_1"]));
        ok(with(json!({"messages": [{"role": "user", "content": [
            {"type": "text", "text": "What is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]},
            {"role": "assistant", "content": ""}],
            "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}},
                      {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}],
            "tool_choice": {"type": "tool", "name": "get_weather"},
            "thinking": {"type": "enabled", "budget_tokens": 1024}, "max_tokens": 2048})));
    }

    #[test]
    fn system_turns_inside_the_conversation() {
        // Claude Code's shape: the environment as a cached system turn after the first user turn.
        ok(with(json!({"messages": [
            {"role": "user", "content": [{"type": "text", "text": "Say hello"}]},
            {"role": "system", "content": [{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": "Hello"},
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "again"}]})));
        rejected(
            with(json!({"messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "hi"}]})),
            "messages.0.role",
        );
        rejected(
            with(
                json!({"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": [
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}}]}]}),
            ),
            "messages.1.content.0.type",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, {"role": "system", "content": ""}]})),
            "messages.1.content",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": "hi"}, {"role": "developer", "content": "x"}]})),
            "messages.1.role",
        );
    }

    #[test]
    fn top_level_fields() {
        assert_eq!(
            rejected(with(json!({"n": 1})), "n:"),
            "n: Extra inputs are not permitted"
        );
        let mut b = with(json!({}));
        b.as_object_mut().unwrap().remove("max_tokens");
        assert_eq!(rejected(b, "max_tokens"), "max_tokens: Field required");
        rejected(with(json!({"max_tokens": 0})), "max_tokens");
        rejected(with(json!({"messages": []})), "messages");
        rejected(with(json!({"temperature": 1.5})), "temperature");
        rejected(with(json!({"stop_sequences": "END"})), "stop_sequences");
        rejected(with(json!({"system": [{"type": "image"}]})), "system.0.type");
        rejected(
            with(json!({"thinking": {"type": "enabled", "budget_tokens": 512}})),
            "thinking.budget_tokens",
        );
        rejected(
            with(json!({"thinking": {"type": "enabled", "budget_tokens": 2048}})),
            "thinking.budget_tokens",
        );
        rejected(with(json!({"tool_choice": {"type": "tool"}})), "tool_choice.name");
        rejected(with(json!({"tool_choice": "auto"})), "tool_choice");
    }

    #[test]
    fn turns_and_blocks() {
        rejected(
            with(json!({"messages": [{"role": "system", "content": "x"}]})),
            "messages.0.role",
        );
        rejected(
            with(json!({"messages": [{"role": "assistant", "content": "x"}]})),
            "messages.0.role",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": ""}]})),
            "messages.0.content",
        );
        rejected(
            with(
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}),
            ),
            "messages.0.content.0.type",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "x"}}]}]})),
            "messages.0.content.0.source.media_type",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "x", "foo": 1}]}]})),
            "messages.0.content.0.foo",
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [use_block("t")]}]})),
            "messages.0.content.0.type",
        );
        let mut string_input = use_block("toolu_1");
        string_input["input"] = json!("{\"city\":\"Paris\"}");
        rejected(
            with(
                json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [string_input]}]}),
            ),
            "messages.1.content.0.input",
        );
    }

    #[test]
    fn tool_results_answer_the_previous_turn() {
        let msg = rejected(conversation(&["toolu_1", "toolu_2"], &["toolu_1"]), "messages.1");
        assert!(
            msg.contains("without `tool_result`") && msg.contains("toolu_2"),
            "{msg}"
        );
        let msg = rejected(
            conversation(&["toolu_1"], &["toolu_1", "toolu_9"]),
            "messages.2.content.1",
        );
        assert!(
            msg.contains("unexpected `tool_use_id`") && msg.contains("toolu_9"),
            "{msg}"
        );
        rejected(
            with(json!({"messages": [{"role": "user", "content": [result_block("toolu_1")]}]})),
            "messages.0.content.0",
        );
        rejected(
            with(
                json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [result_block("x")]}]}),
            ),
            "messages.1.content.0.type",
        );
    }

    #[test]
    fn tools() {
        // The OpenAI shape is a translation bug here.
        rejected(
            with(json!({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})),
            "tools.0.type",
        );
        rejected(with(json!({"tools": [{"name": "f"}]})), "tools.0.input_schema");
        rejected(
            with(json!({"tools": [{"name": "f", "input_schema": {"properties": {}}}]})),
            "tools.0.input_schema.type",
        );
        rejected(
            with(json!({"tools": [{"name": "f", "parameters": {}}]})),
            "tools.0.parameters",
        );
        rejected(
            with(json!({"tools": [{"name": "a b", "input_schema": {"type": "object"}}]})),
            "tools.0.name",
        );
    }
}
