//! Anthropic Messages (`/v1/messages`) read into a neutral request, and written from one.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::Api;
use crate::dialects::body::Body;
use crate::dialects::neutral::request::{
    arguments_object, drop_present, each, is_false, is_null, not_carried, parse, system_text, tag_of, text_or_list,
    unknown, Content, Effort, Few, Image, ImageSource, JsonObject, JsonSchema, Neutral, Part, Piece, Reasoning,
    ResponseFormat, Role, Seal, Setting, TextOr, Thinking, Tool, ToolCall, ToolChoice, ToolResult, Unable, Writer,
};

/// The smallest thinking budget Anthropic takes.
const MIN_BUDGET: u64 = 1024;

pub(crate) fn read(body: &Body) -> Result<Neutral, Unable> {
    let mut n = Neutral::new(Api::Messages);
    // The system prompt comes first, wherever the field stands.
    if let Some(raw) = body.raw("system").filter(|r| !is_null(r)) {
        read_system(&mut n, raw)?;
    }
    let (mut thinking, mut effort) = (None, None);
    for (name, raw) in body.fields() {
        if is_null(raw) {
            continue;
        }
        match name {
            "model" | "provider" | "models" | "system" => {}
            "messages" => each(raw, name, |i, m: Message| read_message(&mut n, i, m))?,
            "max_tokens" => n.max_output_tokens = Some(parse(raw, name)?),
            "stop_sequences" => n.stop = parse::<Few<String>>(raw, name)?.0,
            "stream" => n.stream = parse(raw, name)?,
            "temperature" => n.temperature = Some(parse(raw, name)?),
            "top_p" => n.top_p = Some(parse(raw, name)?),
            "top_k" => n.top_k = Some(parse(raw, name)?),
            "tools" => each(raw, name, |i, t: &RawValue| read_tool(&mut n, t, format!("tools[{i}]")))?,
            "tool_choice" => read_tool_choice(&mut n, raw)?,
            "thinking" => thinking = Some(parse::<ThinkingConfig>(raw, name)?),
            "output_config" => {
                let config: OutputConfig = parse(raw, name)?;
                effort = config
                    .effort
                    .map(|word| {
                        Effort::parse(&word).ok_or_else(|| Unable::new("output_config.effort", "is not an effort"))
                    })
                    .transpose()?;
                if let Some(format) = config.format {
                    n.response_format = Some(read_format(format)?);
                }
            }
            "metadata" => n.user = parse::<Metadata>(raw, name)?.user_id,
            // They choose capacity, region and caching: not the answer.
            "service_tier" | "inference_geo" | "cache_control" => n.dropped.push(name.into()),
            "context_management" => read_context_management(&mut n, raw)?,
            "container" | "mcp_servers" => return Err(not_carried(name, "it names state or tools held at Anthropic")),
            _ => return Err(unknown(name)),
        }
    }
    n.thinking = match (thinking.as_ref().map(|t| t.kind.as_str()), effort) {
        (Some("disabled"), _) => Some(Thinking::Off),
        (Some("enabled"), _) => Some(Thinking::Budget(
            thinking
                .as_ref()
                .and_then(|t| t.budget_tokens)
                .ok_or_else(|| Unable::new("thinking.budget_tokens", "is required when thinking is enabled"))?,
        )),
        (Some("adaptive"), effort) => Some(effort.map_or(Thinking::Auto, Thinking::Effort)),
        (Some(other), _) => {
            return Err(Unable::new(
                "thinking.type",
                format!("`{other}` is not a thinking mode"),
            ))
        }
        (None, effort) => effort.map(Thinking::Effort),
    };
    if let Some(t) = thinking.filter(|t| t.kind != "disabled") {
        n.show_reasoning = Some(t.display.as_deref() != Some("omitted"));
    }
    Ok(n)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ContextManagement {
    #[serde(default)]
    edits: Option<Few<Edit>>,
}

#[derive(Deserialize)]
struct Edit {
    #[serde(rename = "type")]
    kind: String,
}

/// `context_management`: edits Anthropic applies to the context it is sent. Clearing earlier
/// thinking changes nothing elsewhere — no other API is sent earlier thinking (the table above) —
/// so those edits are dropped and listed (SPEC §21: Claude Code sends one on every request);
/// any other edit (clearing tool results) would change the prompt the model reads: unable.
fn read_context_management(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let config: ContextManagement = parse(raw, "context_management")?;
    for (i, edit) in config.edits.map(|e| e.0).unwrap_or_default().iter().enumerate() {
        if !edit.kind.starts_with("clear_thinking_") {
            return Err(not_carried(
                format!("context_management.edits[{i}]"),
                &format!("`{}` edits the context at Anthropic", edit.kind),
            ));
        }
    }
    n.dropped.push("context_management".into());
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThinkingConfig {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    budget_tokens: Option<u64>,
    #[serde(default)]
    display: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutputConfig<'a> {
    #[serde(default)]
    effort: Option<String>,
    #[serde(borrow, default)]
    format: Option<FormatConfig<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FormatConfig<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
}

fn read_format(format: FormatConfig) -> Result<ResponseFormat, Unable> {
    let at = "output_config.format";
    match (format.kind.as_str(), format.schema) {
        ("json_schema", Some(schema)) => Ok(ResponseFormat::JsonSchema(JsonSchema {
            name: None,
            description: None,
            schema: schema.to_owned(),
            strict: None,
        })),
        (kind, _) => Err(Unable::new(
            at,
            format!("`{kind}` without a schema is not an output format"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Metadata {
    #[serde(default)]
    user_id: Option<String>,
}

fn read_system(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let list = match text_or_list(raw, "system")? {
        TextOr::Text(text) => return n.push(Role::System, "system".into(), Content::Text(text)),
        TextOr::List(list) => list,
    };
    each(list, "system", |j, block: &RawValue| {
        let at = format!("system[{j}]");
        match read_block(n, block, &at)? {
            Some(Content::Text(text)) => n.push(Role::System, at, Content::Text(text)),
            _ => Err(Unable::new(at, "a system prompt holds text blocks only")),
        }
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a message object")]
struct Message<'a> {
    role: String,
    #[serde(borrow)]
    content: &'a RawValue,
}

fn read_message(n: &mut Neutral, i: usize, m: Message) -> Result<(), Unable> {
    let at = format!("messages[{i}]");
    let role = match m.role.as_str() {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        // A system message inside the conversation (Anthropic's `mid-conversation-system` beta,
        // sent by Claude Code): a system turn at that place, text only (SPEC §21).
        "system" => Role::System,
        other => return Err(Unable::new(format!("{at}.role"), format!("`{other}` is not a role"))),
    };
    let at = format!("{at}.content");
    let list = match text_or_list(m.content, &at)? {
        TextOr::Text(text) => return n.push(role, at, Content::Text(text)),
        TextOr::List(list) => list,
    };
    each(list, &at, |j, block: &RawValue| {
        let block_at = format!("{at}[{j}]");
        let Some(content) = read_block(n, block, &block_at)? else {
            return Ok(());
        };
        let fits = match &content {
            Content::Text(_) => true,
            Content::Image(_) | Content::ToolResult(_) => role == Role::User,
            Content::ToolCall(_) | Content::Reasoning(_) => role == Role::Assistant,
        };
        if !fits {
            return Err(Unable::new(
                block_at,
                "this block does not belong in a turn of this role",
            ));
        }
        n.push(role, block_at, content)
    })
}

/// Every content block field, whatever the block's type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a content block object")]
struct Block<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    source: Option<Source>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(default)]
    tool_use_id: Option<String>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    is_error: Option<bool>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
    #[serde(default)]
    citations: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    url: Option<String>,
}

/// One content block as neutral content (`None`: nothing to carry).
fn read_block(n: &mut Neutral, raw: &RawValue, at: &str) -> Result<Option<Content>, Unable> {
    match tag_of(raw, at)?.as_deref() {
        Some("text" | "image" | "tool_use" | "tool_result" | "thinking" | "redacted_thinking") => {}
        Some("document" | "search_result") => return Err(not_carried(at, "documents are not translated")),
        Some(kind) if kind.ends_with("tool_result") || kind.ends_with("tool_use") || kind == "container_upload" => {
            return Err(not_carried(at, "it is the record of a tool Anthropic runs"))
        }
        _ => return Err(Unable::new(at, "is not a content block that is translated")),
    }
    let b: Block = parse(raw, at)?;
    drop_present(
        &mut n.dropped,
        at,
        &[
            (b.cache_control.is_some(), "cache_control"),
            (b.citations.is_some(), "citations"),
        ],
    );
    let missing = |field: &str| Unable::new(at, format!("a `{}` block needs `{field}`", b.kind));
    Ok(Some(match b.kind.as_str() {
        "text" => Content::Text(b.text.ok_or_else(|| missing("text"))?),
        "image" => Content::Image(read_image(b.source.ok_or_else(|| missing("source"))?, at)?),
        "tool_use" => Content::ToolCall(ToolCall {
            id: b.id.ok_or_else(|| missing("id"))?,
            name: b.name.ok_or_else(|| missing("name"))?,
            arguments: b.input.map_or_else(|| "{}".to_string(), |i| i.get().to_string()),
        }),
        "tool_result" => {
            let mut content = Vec::new();
            if let Some(raw) = b.content.filter(|r| !is_null(r)) {
                read_result_content(n, raw, &format!("{at}.content"), &mut content)?;
            }
            Content::ToolResult(ToolResult {
                call_id: b.tool_use_id.ok_or_else(|| missing("tool_use_id"))?,
                name: None,
                content,
                is_error: b.is_error.unwrap_or(false),
            })
        }
        "thinking" => Content::Reasoning(Reasoning {
            text: b.thinking.unwrap_or_default(),
            seal: b.signature.filter(|s| !s.is_empty()).map(|data| Seal {
                by: Api::Messages,
                data,
                redacted: false,
                id: None,
            }),
        }),
        _ => Content::Reasoning(Reasoning {
            text: String::new(),
            seal: Some(Seal {
                by: Api::Messages,
                data: b.data.ok_or_else(|| missing("data"))?,
                redacted: true,
                id: None,
            }),
        }),
    }))
}

fn read_image(source: Source, at: &str) -> Result<Image, Unable> {
    let image = |source| Image { source, detail: None };
    match (source.kind.as_str(), source.media_type, source.data, source.url) {
        ("base64", Some(media_type), Some(data), _) => Ok(image(ImageSource::Base64 { media_type, data })),
        ("url", _, _, Some(url)) => Ok(image(ImageSource::Url(url))),
        ("file", ..) => Err(not_carried(at, "it names a file uploaded to Anthropic")),
        _ => Err(Unable::new(at, "is not an image source that is translated")),
    }
}

/// A tool result's content: a string, or text and image blocks.
fn read_result_content(n: &mut Neutral, raw: &RawValue, at: &str, out: &mut Vec<Piece>) -> Result<(), Unable> {
    let list = match text_or_list(raw, at)? {
        TextOr::Text(text) => {
            out.push(Piece::Text(text));
            return Ok(());
        }
        TextOr::List(list) => list,
    };
    each(list, at, |j, block: &RawValue| {
        let block_at = format!("{at}[{j}]");
        match read_block(n, block, &block_at)? {
            Some(Content::Text(text)) => out.push(Piece::Text(text)),
            Some(Content::Image(image)) => out.push(Piece::Image(image)),
            _ => return Err(Unable::new(block_at, "a tool result holds text and images only")),
        }
        Ok(())
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClientTool<'a> {
    #[serde(rename = "type", default)]
    _kind: Option<IgnoredAny>,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    input_schema: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
    /// Tool search: the definition reaches the model once searched for (Claude Code marks tools
    /// so). Elsewhere the tool is declared from the start: the same calls, a longer prompt.
    #[serde(default)]
    defer_loading: Option<IgnoredAny>,
    /// Sample inputs shown to the model (advanced tool use): a hint, not the tool.
    #[serde(default)]
    input_examples: Option<IgnoredAny>,
    /// Who may call the tool: the model (`direct`) or Anthropic's code execution.
    #[serde(default)]
    allowed_callers: Option<Vec<String>>,
    /// Arguments streamed without buffering: how they arrive, not what they are.
    #[serde(default)]
    eager_input_streaming: Option<IgnoredAny>,
}

fn read_tool(n: &mut Neutral, raw: &RawValue, at: String) -> Result<(), Unable> {
    match tag_of(raw, &at)?.as_deref() {
        None | Some("custom") => {}
        Some(kind) => return Err(not_carried(at, &format!("`{kind}` is a tool Anthropic runs"))),
    }
    let t: ClientTool = parse(raw, &at)?;
    if t.allowed_callers
        .as_ref()
        .is_some_and(|c| !c.iter().any(|c| c == "direct"))
    {
        return Err(not_carried(
            format!("{at}.allowed_callers"),
            "only Anthropic's code execution may call the tool",
        ));
    }
    // Hints about loading, examples and streaming: the tool and its calls are the same without
    // them (SPEC §21, fields that steer, not change, the answer).
    drop_present(
        &mut n.dropped,
        &at,
        &[
            (t.cache_control.is_some(), "cache_control"),
            (t.defer_loading.is_some(), "defer_loading"),
            (t.input_examples.is_some(), "input_examples"),
            (t.allowed_callers.is_some(), "allowed_callers"),
            (t.eager_input_streaming.is_some(), "eager_input_streaming"),
        ],
    );
    n.add_tool(Tool {
        at,
        name: t.name,
        description: t.description,
        parameters: t.input_schema.map(RawValue::to_owned),
        strict: t.strict,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Choice {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    disable_parallel_tool_use: Option<bool>,
}

fn read_tool_choice(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let at = "tool_choice";
    let c: Choice = parse(raw, at)?;
    n.tool_choice = Some(match (c.kind.as_str(), c.name) {
        ("auto", _) => ToolChoice::Auto,
        ("any", _) => ToolChoice::Required,
        ("none", _) => ToolChoice::None,
        ("tool", Some(name)) => ToolChoice::Function(name),
        (kind, _) => {
            return Err(Unable::new(
                at,
                format!("`{kind}` is not a tool choice that is translated"),
            ))
        }
    });
    n.parallel_tool_calls = c.disable_parallel_tool_use.map(|disable| !disable);
    Ok(())
}

// ---- writing ----

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutBlock<'a> {
    Text {
        text: &'a str,
    },
    Image {
        source: OutSource<'a>,
    },
    ToolUse {
        id: Cow<'a, str>,
        name: &'a str,
        input: Box<RawValue>,
    },
    ToolResult {
        tool_use_id: Cow<'a, str>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<OutBlock<'a>>,
        #[serde(skip_serializing_if = "is_false")]
        is_error: bool,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutSource<'a> {
    Base64 { media_type: &'a str, data: &'a str },
    Url { url: &'a str },
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Vec<OutBlock<'a>>,
}

/// A tool call id as Anthropic takes it (`[A-Za-z0-9_-]`), the same for a call and its result.
fn tool_id(id: &str) -> Cow<'_, str> {
    let fits = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    match id.chars().all(fits) && !id.is_empty() {
        true => Cow::Borrowed(id),
        false => Cow::Owned(
            std::iter::once('t')
                .chain(id.chars().map(|c| if fits(c) { c } else { '_' }))
                .collect(),
        ),
    }
}

fn image<'a>(w: &mut Writer, at: &str, image: &'a Image) -> Result<OutBlock<'a>, Unable> {
    if image.detail.is_some() {
        w.dropped.push(format!("{at}.detail"));
    }
    let source = match &image.source {
        ImageSource::Base64 { media_type, data } => {
            if !matches!(
                media_type.as_str(),
                "image/jpeg" | "image/png" | "image/gif" | "image/webp"
            ) {
                return Err(Unable::new(
                    at,
                    format!("Anthropic Messages routes take JPEG, PNG, GIF and WebP images, not `{media_type}`"),
                ));
            }
            OutSource::Base64 { media_type, data }
        }
        ImageSource::Url(url) => OutSource::Url { url },
    };
    Ok(OutBlock::Image { source })
}

fn blocks<'a>(w: &mut Writer<'a>, parts: &'a [Part]) -> Result<Vec<OutBlock<'a>>, Unable> {
    let mut out = Vec::new();
    for part in parts {
        let block = match &part.content {
            // Anthropic refuses empty text blocks; an empty text says nothing.
            Content::Text(text) if text.is_empty() => continue,
            Content::Text(text) => OutBlock::Text { text },
            Content::Image(i) => image(w, &part.at, i)?,
            Content::ToolCall(c) => OutBlock::ToolUse {
                id: tool_id(&c.id),
                name: &c.name,
                input: arguments_object(&c.arguments, &part.at)?,
            },
            Content::ToolResult(r) => {
                let mut content = Vec::new();
                for piece in &r.content {
                    match piece {
                        Piece::Text(text) if text.is_empty() => {}
                        Piece::Text(text) => content.push(OutBlock::Text { text }),
                        Piece::Image(i) => content.push(image(w, &part.at, i)?),
                    }
                }
                OutBlock::ToolResult {
                    tool_use_id: tool_id(&r.call_id),
                    content,
                    is_error: r.is_error,
                }
            }
            Content::Reasoning(Reasoning { text, seal: Some(seal) }) if seal.by == Api::Messages => match seal.redacted
            {
                true => OutBlock::RedactedThinking { data: &seal.data },
                false => OutBlock::Thinking {
                    thinking: text,
                    signature: &seal.data,
                },
            },
            Content::Reasoning(r) => {
                w.other_reasoning(part, r)?;
                continue;
            }
        };
        out.push(block);
    }
    // A user turn answers the calls first (Anthropic reads tool results at the turn's start).
    out.sort_by_key(|b| !matches!(b, OutBlock::ToolResult { .. }));
    Ok(out)
}

fn messages<'a>(w: &mut Writer<'a>) -> Result<(Vec<&'a str>, Vec<OutMessage<'a>>), Unable> {
    let n: &'a Neutral = w.n;
    let mut system = Vec::new();
    let mut out: Vec<OutMessage> = Vec::new();
    for turn in &n.turns {
        let role = match turn.role {
            Role::System => {
                for part in &turn.parts {
                    system.push(system_text(part)?);
                }
                continue;
            }
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        let mut blocks = blocks(w, &turn.parts)?;
        if blocks.is_empty() {
            continue;
        }
        // Anthropic alternates roles: turns that meet after an empty one are merged.
        match out.last_mut() {
            Some(last) if last.role == role => last.content.append(&mut blocks),
            _ => out.push(OutMessage { role, content: blocks }),
        }
    }
    Ok((system, out))
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutSystem<'a> {
    Text(&'a str),
    Blocks(Vec<OutBlock<'a>>),
}

#[derive(Serialize)]
struct OutTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: InputSchema<'a>,
}

/// A tool's input schema: the one given, or for a function without parameters an empty object's
/// (Anthropic requires a schema, and so does Bedrock's Converse, which writes it the same way).
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum InputSchema<'a> {
    Given(&'a RawValue),
    NoParameters {
        #[serde(rename = "type")]
        kind: &'static str,
        properties: serde_json::Map<String, serde_json::Value>,
    },
}

impl<'a> InputSchema<'a> {
    pub(crate) fn of(parameters: Option<&'a RawValue>) -> InputSchema<'a> {
        match parameters {
            Some(p) => InputSchema::Given(p),
            None => InputSchema::NoParameters {
                kind: "object",
                properties: serde_json::Map::new(),
            },
        }
    }
}

#[derive(Serialize)]
struct OutChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    disable_parallel_tool_use: Option<bool>,
}

#[derive(Serialize)]
struct OutThinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u64,
}

#[derive(Serialize)]
struct OutOutputConfig<'a> {
    format: OutFormat<'a>,
}

#[derive(Serialize)]
struct OutFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    schema: &'a RawValue,
}

#[derive(Serialize)]
struct OutMetadata<'a> {
    user_id: &'a str,
}

/// The thinking budget this route gets (at least 1024, below `max_tokens`), or none; refused when
/// the rest of the request cannot go with thinking on.
fn thinking_budget(w: &Writer, messages: &[OutMessage]) -> Result<Option<u64>, Unable> {
    let n = w.n;
    let budget = match n.thinking {
        None | Some(Thinking::Off) => return Ok(None),
        Some(Thinking::Auto) => Effort::Medium.budget(),
        Some(Thinking::Effort(e)) => e.budget(),
        Some(Thinking::Budget(b)) => b,
    };
    let max = w.max_output_tokens;
    if max <= MIN_BUDGET {
        return Err(w.unable(Setting::Thinking, "think only with an output limit above 1024 tokens"));
    }
    if n.temperature.is_some_and(|t| t != 1.0) {
        return Err(w.unable(Setting::Temperature, "take no temperature but 1 while thinking"));
    }
    if n.top_k.is_some() {
        return Err(w.unable(Setting::TopK, "take no top_k while thinking"));
    }
    if n.top_p.is_some_and(|p| p < 0.95) {
        return Err(w.unable(Setting::TopP, "take no top_p below 0.95 while thinking"));
    }
    if matches!(n.tool_choice, Some(ToolChoice::Required | ToolChoice::Function(_))) && !n.tools.is_empty() {
        return Err(w.unable(Setting::ToolChoice, "cannot force a tool call while thinking"));
    }
    // Continuing a tool call with thinking on needs that turn's signed thinking.
    let last_assistant = messages.iter().rev().find(|m| m.role == "assistant");
    if let Some(m) = last_assistant {
        let calls = m.content.iter().any(|b| matches!(b, OutBlock::ToolUse { .. }));
        let signed = matches!(
            m.content.first(),
            Some(OutBlock::Thinking { .. } | OutBlock::RedactedThinking { .. })
        );
        if calls && !signed {
            return Err(w.unable(
                Setting::Thinking,
                "continue a tool call while thinking only with the signed thinking of the turn that made it",
            ));
        }
    }
    Ok(Some(budget.clamp(MIN_BUDGET, max - 1)))
}

pub(crate) fn write(w: &mut Writer, model: &str) -> Result<Vec<u8>, Unable> {
    let n = w.n;
    w.refuse_candidates()?;
    w.refuse_set(&[
        (n.seed.is_some(), Setting::Seed),
        (n.presence_penalty.is_some(), Setting::Presence),
        (n.frequency_penalty.is_some(), Setting::Frequency),
        (n.verbosity.is_some(), Setting::Verbosity),
    ])?;
    let (system, messages) = messages(w)?;
    let budget = thinking_budget(w, &messages)?;
    let mut o = JsonObject::new(crate::dialects::neutral::request::capacity(n));
    o.field("model", model)?;
    o.field("max_tokens", &w.max_output_tokens)?;
    match system.as_slice() {
        [] => {}
        [text] => o.field("system", &OutSystem::Text(text))?,
        texts => o.field(
            "system",
            &OutSystem::Blocks(texts.iter().map(|text| OutBlock::Text { text }).collect()),
        )?,
    }
    o.field("messages", &messages)?;
    if !n.stop.is_empty() {
        o.field("stop_sequences", &n.stop)?;
    }
    o.opt("temperature", n.temperature)?;
    o.opt("top_p", n.top_p)?;
    o.opt("top_k", n.top_k)?;
    if !n.tools.is_empty() {
        w.drop_tool_strictness();
        let tools: Vec<OutTool> = n
            .tools
            .iter()
            .map(|t| OutTool {
                name: &t.name,
                description: t.description.as_deref(),
                input_schema: InputSchema::of(t.parameters.as_deref()),
            })
            .collect();
        o.field("tools", &tools)?;
    }
    let choice = w.tool_choice();
    let serial = w.parallel_tool_calls() == Some(false) && choice != Some(&ToolChoice::None);
    if choice.is_some() || serial {
        let (kind, name) = match choice {
            None | Some(ToolChoice::Auto) => ("auto", None),
            Some(ToolChoice::None) => ("none", None),
            Some(ToolChoice::Required) => ("any", None),
            Some(ToolChoice::Function(name)) => ("tool", Some(name.as_str())),
        };
        o.field(
            "tool_choice",
            &OutChoice {
                kind,
                name,
                disable_parallel_tool_use: serial.then_some(true),
            },
        )?;
    }
    if let Some(budget_tokens) = budget {
        o.field(
            "thinking",
            &OutThinking {
                kind: "enabled",
                budget_tokens,
            },
        )?;
    }
    match &n.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(ResponseFormat::JsonObject) => {
            return Err(w.unable(
                Setting::Format,
                "give JSON only for a JSON schema, not in a schemaless JSON mode",
            ))
        }
        Some(ResponseFormat::JsonSchema(s)) => {
            w.drop_schema_details(s);
            let format = OutFormat {
                kind: "json_schema",
                schema: &s.schema,
            };
            o.field("output_config", &OutOutputConfig { format })?;
        }
    }
    if let Some(user_id) = n.user.as_deref() {
        o.field("metadata", &OutMetadata { user_id })?;
    }
    w.shared();
    if n.stream {
        o.field("stream", &true)?;
    }
    Ok(o.finish())
}
