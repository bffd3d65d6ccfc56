//! AWS Bedrock's Converse API written from a neutral request (SPEC §20). No client speaks
//! Converse, so there is no reader: a `converse` route gets every client dialect translated.
//!
//! The body is the Converse request without `modelId` (in the path: `/model/{id}/converse` or
//! `/converse-stream`, which also says the mode, so there is no `stream` field either):
//! `messages` (`user` / `assistant`, alternating, content blocks `text`, `image` (base64 bytes
//! only), `toolUse`, `toolResult`), `system` text blocks, `inferenceConfig` (`maxTokens`,
//! `temperature` and `topP` between 0 and 1, at most 4 `stopSequences`), `toolConfig` (`tools` as
//! `toolSpec`s, `toolChoice` `auto` / `any` / `tool`).
//!
//! What it cannot carry: images by URL, top_k, seed, penalties, verbosity, more than one
//! completion, reasoning settings and JSON output (model-specific on Bedrock: its
//! `additionalModelRequestFields`), a temperature above 1, more than four stop sequences, tool
//! choice `none` once the conversation holds tool calls — each unable. Dropped: parallel tool
//! calls, tools' `strict`, the user id, the OpenAI-shared fields, "reasoning off", images' `detail`.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;

use crate::dialects::neutral::request::{
    arguments_object, system_text, Content, Image, ImageSource, JsonObject, Neutral, Part, Piece, ResponseFormat, Role,
    Setting, Thinking, ToolChoice, Unable, Writer,
};

/// The most stop sequences Converse takes.
const MAX_STOP: usize = 4;

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum OutBlock<'a> {
    Text(&'a str),
    Image(OutImage<'a>),
    ToolUse(OutToolUse<'a>),
    ToolResult(OutToolResult<'a>),
}

#[derive(Serialize)]
struct OutImage<'a> {
    format: &'static str,
    source: OutImageSource<'a>,
}

#[derive(Serialize)]
struct OutImageSource<'a> {
    bytes: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutToolUse<'a> {
    tool_use_id: Cow<'a, str>,
    name: &'a str,
    input: Box<RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutToolResult<'a> {
    tool_use_id: Cow<'a, str>,
    content: Vec<OutBlock<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'static str>,
}

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    content: Vec<OutBlock<'a>>,
}

#[derive(Serialize)]
struct OutSystem<'a> {
    text: &'a str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InferenceConfig<'a> {
    max_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolConfig<'a> {
    tools: Vec<OutTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<OutChoice<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutTool<'a> {
    tool_spec: ToolSpec<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ToolSpec<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    input_schema: InputSchema<'a>,
}

#[derive(Serialize)]
struct InputSchema<'a> {
    json: crate::dialects::messages::request::InputSchema<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
enum OutChoice<'a> {
    Auto {},
    Any {},
    Tool { name: &'a str },
}

/// A tool call id as Converse takes it (`[a-zA-Z0-9_-]`, 1 to 64 characters), the same for a call
/// and its result.
fn tool_id(id: &str) -> Cow<'_, str> {
    let fits = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if !id.is_empty() && id.len() <= 64 && id.chars().all(fits) {
        return Cow::Borrowed(id);
    }
    let cleaned: String = id.chars().map(|c| if fits(c) { c } else { '_' }).collect();
    // A long id keeps its end (where ids differ) and a hash of the whole, so two calls stay two.
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    let tail: String = cleaned
        .chars()
        .rev()
        .take(40)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Cow::Owned(format!("t{hash:016x}{tail}"))
}

/// The image format Converse names for a media type.
fn image_format(media_type: &str) -> Option<&'static str> {
    Some(match media_type.to_ascii_lowercase().as_str() {
        "image/png" => "png",
        "image/jpeg" | "image/jpg" => "jpeg",
        "image/gif" => "gif",
        "image/webp" => "webp",
        _ => return None,
    })
}

fn image<'a>(w: &mut Writer, at: &str, image: &'a Image) -> Result<OutBlock<'a>, Unable> {
    if image.detail.is_some() {
        w.dropped.push(format!("{at}.detail"));
    }
    match &image.source {
        ImageSource::Base64 { media_type, data } => match image_format(media_type) {
            Some(format) => Ok(OutBlock::Image(OutImage {
                format,
                source: OutImageSource { bytes: data },
            })),
            None => Err(Unable::new(
                at,
                format!("Bedrock Converse routes take PNG, JPEG, GIF and WebP images, not `{media_type}`"),
            )),
        },
        ImageSource::Url(_) => Err(Unable::new(
            at,
            "Bedrock Converse routes take images as bytes only, not by URL",
        )),
    }
}

fn blocks<'a>(w: &mut Writer<'a>, parts: &'a [Part]) -> Result<Vec<OutBlock<'a>>, Unable> {
    let mut out = Vec::new();
    for part in parts {
        let block = match &part.content {
            // Converse refuses blank text blocks; an empty text says nothing.
            Content::Text(text) if text.is_empty() => continue,
            Content::Text(text) => OutBlock::Text(text),
            Content::Image(i) => image(w, &part.at, i)?,
            Content::ToolCall(c) => OutBlock::ToolUse(OutToolUse {
                tool_use_id: tool_id(&c.id),
                name: &c.name,
                input: arguments_object(&c.arguments, &part.at)?,
            }),
            Content::ToolResult(r) => {
                let mut content = Vec::new();
                for piece in &r.content {
                    match piece {
                        Piece::Text(text) if text.is_empty() => {}
                        Piece::Text(text) => content.push(OutBlock::Text(text)),
                        Piece::Image(i) => content.push(image(w, &part.at, i)?),
                    }
                }
                OutBlock::ToolResult(OutToolResult {
                    tool_use_id: tool_id(&r.call_id),
                    content,
                    status: r.is_error.then_some("error"),
                })
            }
            Content::Reasoning(r) => {
                w.other_reasoning(part, r)?;
                continue;
            }
        };
        out.push(block);
    }
    // A user turn answers the calls first.
    out.sort_by_key(|b| !matches!(b, OutBlock::ToolResult(_)));
    Ok(out)
}

fn messages<'a>(w: &mut Writer<'a>) -> Result<(Vec<OutSystem<'a>>, Vec<OutMessage<'a>>), Unable> {
    let n: &'a Neutral = w.n;
    let mut system = Vec::new();
    let mut out: Vec<OutMessage> = Vec::new();
    for turn in &n.turns {
        let role = match turn.role {
            Role::System => {
                for part in &turn.parts {
                    let text = system_text(part)?;
                    if !text.is_empty() {
                        system.push(OutSystem { text });
                    }
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
        // Converse alternates roles: turns that meet after an empty one are merged.
        match out.last_mut() {
            Some(last) if last.role == role => last.content.append(&mut blocks),
            _ => out.push(OutMessage { role, content: blocks }),
        }
    }
    Ok((system, out))
}

/// Whether the conversation holds tool calls or results (Converse then needs `toolConfig`).
fn has_tool_blocks(messages: &[OutMessage]) -> bool {
    messages
        .iter()
        .flat_map(|m| &m.content)
        .any(|b| matches!(b, OutBlock::ToolUse(_) | OutBlock::ToolResult(_)))
}

pub(crate) fn write(w: &mut Writer) -> Result<Vec<u8>, Unable> {
    let n = w.n;
    w.refuse_candidates()?;
    w.refuse_set(&[
        (n.top_k.is_some(), Setting::TopK),
        (n.seed.is_some(), Setting::Seed),
        (n.presence_penalty.is_some(), Setting::Presence),
        (n.frequency_penalty.is_some(), Setting::Frequency),
        (n.verbosity.is_some(), Setting::Verbosity),
    ])?;
    match n.thinking {
        None => {}
        Some(Thinking::Off) => w.drop_setting(Setting::Thinking),
        Some(_) => {
            return Err(w.unable(
                Setting::Thinking,
                "have no reasoning setting of their own (it is model-specific on Bedrock)",
            ))
        }
    }
    if n.show_reasoning.is_some() && n.thinking.is_none() {
        w.drop_setting(Setting::ShowReasoning);
    }
    match &n.response_format {
        None | Some(ResponseFormat::Text) => {}
        Some(_) => return Err(w.unable(Setting::Format, "have no JSON output mode")),
    }
    if n.temperature.is_some_and(|t| !(0.0..=1.0).contains(&t)) {
        return Err(w.unable(Setting::Temperature, "take a temperature between 0 and 1"));
    }
    if n.top_p.is_some_and(|p| !(0.0..=1.0).contains(&p)) {
        return Err(w.unable(Setting::TopP, "take a top_p between 0 and 1"));
    }
    if n.stop.len() > MAX_STOP {
        return Err(w.unable(Setting::Stop, "take at most 4 stop sequences"));
    }
    if n.user.is_some() {
        w.drop_setting(Setting::User);
    }
    let (system, messages) = messages(w)?;
    let mut o = JsonObject::new(crate::dialects::neutral::request::capacity(n));
    o.field("messages", &messages)?;
    if !system.is_empty() {
        o.field("system", &system)?;
    }
    o.field(
        "inferenceConfig",
        &InferenceConfig {
            max_tokens: w.max_output_tokens,
            temperature: n.temperature,
            top_p: n.top_p,
            stop_sequences: &n.stop,
        },
    )?;
    let choice = w.tool_choice();
    if w.parallel_tool_calls().is_some() {
        w.drop_setting(crate::dialects::neutral::request::Setting::Parallel);
    }
    if !n.tools.is_empty() {
        let tool_choice = match choice {
            None => None,
            Some(ToolChoice::Auto) => Some(OutChoice::Auto {}),
            Some(ToolChoice::Required) => Some(OutChoice::Any {}),
            Some(ToolChoice::Function(name)) => Some(OutChoice::Tool { name }),
            Some(ToolChoice::None) if has_tool_blocks(&messages) => {
                return Err(w.unable(
                    Setting::ToolChoice,
                    "have no tool choice `none` once the conversation holds tool calls",
                ))
            }
            // No tools offered is what `none` asks for.
            Some(ToolChoice::None) => {
                w.dropped.extend(n.tools.iter().map(|t| t.at.clone()));
                w.shared();
                return Ok(o.finish());
            }
        };
        w.drop_tool_strictness();
        let tools = n
            .tools
            .iter()
            .map(|t| OutTool {
                tool_spec: ToolSpec {
                    name: &t.name,
                    description: t.description.as_deref().filter(|d| !d.is_empty()),
                    input_schema: InputSchema {
                        json: crate::dialects::messages::request::InputSchema::of(t.parameters.as_deref()),
                    },
                },
            })
            .collect();
        o.field("toolConfig", &ToolConfig { tools, tool_choice })?;
    } else if has_tool_blocks(&messages) {
        // Bedrock refuses tool blocks without a `toolConfig` ("The toolConfig field must be
        // defined when using toolUse and toolResult content blocks."), though a client may replay
        // its tool calls and offer no tools for this turn: the tools the conversation used are
        // declared, by name, taking any object.
        if matches!(n.tool_choice, Some(ToolChoice::None)) {
            return Err(w.unable(
                Setting::ToolChoice,
                "have no tool choice `none` once the conversation holds tool calls",
            ));
        }
        let tools = used_tools(&messages);
        if tools.is_empty() {
            return Err(Unable::new(
                crate::dialects::of(n.from).conversation_field(),
                "Bedrock Converse routes take tool results only beside the calls they answer (the tools must be named)",
            ));
        }
        o.field(
            "toolConfig",
            &ToolConfig {
                tools,
                tool_choice: None,
            },
        )?;
    }
    w.shared();
    Ok(o.finish())
}

/// The tools a conversation's `toolUse` blocks name, each once, in order of first use.
fn used_tools<'a>(messages: &[OutMessage<'a>]) -> Vec<OutTool<'a>> {
    let mut names: Vec<&'a str> = Vec::new();
    for block in messages.iter().flat_map(|m| &m.content) {
        if let OutBlock::ToolUse(call) = block {
            if !names.contains(&call.name) {
                names.push(call.name);
            }
        }
    }
    names
        .into_iter()
        .map(|name| OutTool {
            tool_spec: ToolSpec {
                name,
                description: None,
                input_schema: InputSchema {
                    json: crate::dialects::messages::request::InputSchema::of(None),
                },
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_ids_fit_converse_and_stay_distinct() {
        assert_eq!(tool_id("call_abc-1"), "call_abc-1");
        let a = tool_id("call:1");
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'));
        assert_ne!(tool_id("call:1"), tool_id("call;1"));
        let long = "x".repeat(100);
        assert!(tool_id(&long).len() <= 64, "{}", tool_id(&long));
        assert_eq!(tool_id("call:1"), tool_id("call:1"), "a call and its result agree");
        assert_eq!(image_format("image/JPEG"), Some("jpeg"));
        assert_eq!(image_format("image/bmp"), None);
    }
}
