//! OpenAI Responses (`/v1/responses`) read into a neutral request, and written from one.

use std::borrow::Cow;

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::Api;
use crate::dialects::body::Body;
use crate::dialects::chat::request::{choice_word, choice_word_of, effort_of, effort_word, json_schema};
use crate::dialects::neutral::request::{
    drop_present, each, image_from_url, is_null, not_carried, parse, result_text, system_text, tag_of, text_or_list,
    unknown, word_or_object, Content, Few, Image, ImageUrl, JsonObject, Neutral, Piece, Reasoning, ResponseFormat,
    Role, Seal, Setting, TextOr, Tool, ToolCall, ToolChoice, ToolResult, Unable, Writer, OPENAI_SHARED,
};

pub(crate) fn read(body: &Body) -> Result<Neutral, Unable> {
    let mut n = Neutral::new(Api::Responses);
    // The instructions come first, wherever the field stands.
    if let Some(raw) = body.raw("instructions").filter(|r| !is_null(r)) {
        let text: String = parse(raw, "instructions")?;
        n.push(Role::System, "instructions".into(), Content::Text(text))?;
    }
    for (name, raw) in body.fields() {
        if is_null(raw) {
            continue;
        }
        match name {
            "model" | "provider" | "models" | "instructions" => {}
            "input" => match text_or_list(raw, name)? {
                TextOr::Text(text) => n.push(Role::User, name.into(), Content::Text(text))?,
                TextOr::List(list) => each(list, name, |i, item: &RawValue| read_item(&mut n, i, item))?,
            },
            "tools" => each(raw, name, |i, t: &RawValue| {
                let at = format!("tools[{i}]");
                match tag_of(t, &at)?.as_deref() {
                    // The client's own tools, grouped: flattened, each under its own name (its
                    // calls are written back with the namespace, `AnswerContext::namespaces`).
                    Some("namespace") => read_namespace(&mut n, t, at),
                    _ => n.add_tool(read_tool(t, at)?),
                }
            })?,
            "tool_choice" => n.tool_choice = Some(read_tool_choice(raw)?),
            "parallel_tool_calls" => n.parallel_tool_calls = Some(parse(raw, name)?),
            "max_output_tokens" => n.max_output_tokens = Some(parse(raw, name)?),
            "temperature" => n.temperature = Some(parse(raw, name)?),
            "top_p" => n.top_p = Some(parse(raw, name)?),
            "text" => read_text(&mut n, raw)?,
            "reasoning" => read_reasoning(&mut n, raw)?,
            "stream" => n.stream = parse(raw, name)?,
            "user" => n.user = Some(parse(raw, name)?),
            _ if OPENAI_SHARED.contains(&name) => n.share(name, raw),
            "include" => {
                let include: Few<String> = parse(raw, name)?;
                if include.0.iter().any(|i| i.contains("logprobs")) {
                    return Err(not_carried(name, "log probabilities are not translated"));
                }
                n.dropped.push(name.into());
            }
            // How a stream is framed, what to do past the context window, a limit on the
            // provider's own tools: none changes the answer to this request.
            "stream_options" | "truncation" | "max_tool_calls" => n.dropped.push(name.into()),
            // Metadata about the calling client (Codex sends it on every request): never the answer.
            "client_metadata" => n.dropped.push(name.into()),
            "previous_response_id" | "conversation" | "prompt" => {
                return Err(not_carried(name, "it names a conversation stored at the provider"))
            }
            "background" => {
                if parse::<bool>(raw, name)? {
                    return Err(not_carried(name, "a background response is kept at the provider"));
                }
            }
            "top_logprobs" => return Err(not_carried(name, "log probabilities are not translated")),
            _ => return Err(unknown(name)),
        }
    }
    Ok(n)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a message item")]
struct MessageItem<'a> {
    #[serde(rename = "type", default)]
    _kind: Option<IgnoredAny>,
    role: String,
    #[serde(borrow)]
    content: &'a RawValue,
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a function call item")]
struct CallItem {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    call_id: String,
    name: String,
    /// The namespace of a call to a namespaced tool: its tools are flattened, and so is it.
    #[serde(default)]
    namespace: Option<IgnoredAny>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a function call output item")]
struct OutputItem<'a> {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    call_id: String,
    #[serde(borrow)]
    output: &'a RawValue,
    #[serde(default)]
    id: Option<IgnoredAny>,
    #[serde(default)]
    status: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a reasoning item")]
struct ReasoningItem {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    summary: Vec<Summary>,
    #[serde(default)]
    content: Option<Vec<Summary>>,
    #[serde(default)]
    encrypted_content: Option<String>,
    #[serde(default)]
    status: Option<IgnoredAny>,
}

/// A `summary_text` or `reasoning_text` part.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Summary {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    text: String,
}

fn read_item(n: &mut Neutral, i: usize, raw: &RawValue) -> Result<(), Unable> {
    let at = format!("input[{i}]");
    match tag_of(raw, &at)?.as_deref() {
        None | Some("message") => {
            let m: MessageItem = parse(raw, &at)?;
            drop_present(
                &mut n.dropped,
                &at,
                &[(m.id.is_some(), "id"), (m.status.is_some(), "status")],
            );
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                other => return Err(Unable::new(format!("{at}.role"), format!("`{other}` is not a role"))),
            };
            read_message_content(n, role, m.content, &format!("{at}.content"))
        }
        Some("function_call") => {
            let c: CallItem = parse(raw, &at)?;
            drop_present(
                &mut n.dropped,
                &at,
                &[
                    (c.id.is_some(), "id"),
                    (c.status.is_some(), "status"),
                    (c.namespace.is_some(), "namespace"),
                ],
            );
            let call = ToolCall {
                id: c.call_id,
                name: c.name,
                arguments: c.arguments.unwrap_or_default(),
            };
            n.push(Role::Assistant, at, Content::ToolCall(call))
        }
        Some("function_call_output") => {
            let o: OutputItem = parse(raw, &at)?;
            drop_present(
                &mut n.dropped,
                &at,
                &[(o.id.is_some(), "id"), (o.status.is_some(), "status")],
            );
            let mut content = Vec::new();
            match text_or_list(o.output, &format!("{at}.output"))? {
                TextOr::Text(text) => content.push(Piece::Text(text)),
                TextOr::List(list) => read_parts(list, &format!("{at}.output"), &mut n.dropped, |part_at, c| {
                    content.push(match c {
                        Content::Text(t) => Piece::Text(t),
                        Content::Image(i) => Piece::Image(i),
                        _ => {
                            return Err(Unable::new(
                                part_at,
                                "a function call output holds text and images only",
                            ))
                        }
                    });
                    Ok(())
                })?,
            }
            let result = ToolResult {
                call_id: o.call_id,
                name: None,
                content,
                is_error: false,
            };
            n.push(Role::User, at, Content::ToolResult(result))
        }
        Some("reasoning") => {
            let r: ReasoningItem = parse(raw, &at)?;
            drop_present(&mut n.dropped, &at, &[(r.status.is_some(), "status")]);
            let texts = r.content.unwrap_or_default().into_iter().chain(r.summary);
            let text = texts.map(|s| s.text).collect::<Vec<_>>().join("\n\n");
            let seal = r.encrypted_content.map(|data| Seal {
                by: Api::Responses,
                data,
                redacted: false,
                id: r.id,
            });
            n.push(Role::Assistant, at, Content::Reasoning(Reasoning { text, seal }))
        }
        Some("item_reference") => Err(not_carried(at, "it names an item stored at the provider")),
        Some(kind) => Err(not_carried(
            at,
            &format!("`{kind}` is the record of a tool the provider runs"),
        )),
    }
}

/// Every content part field, whatever the part's type.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a content part object")]
struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    image_url: Option<String>,
    #[serde(default)]
    file_id: Option<String>,
    #[serde(default)]
    detail: Option<String>,
    #[serde(default)]
    annotations: Option<IgnoredAny>,
    #[serde(default)]
    logprobs: Option<IgnoredAny>,
}

/// A list of content parts: `f` gets each with its path; what is left out goes to `dropped`.
fn read_parts(
    list: &RawValue,
    at: &str,
    dropped: &mut Vec<String>,
    mut f: impl FnMut(String, Content) -> Result<(), Unable>,
) -> Result<(), Unable> {
    each(list, at, |j, raw: &RawValue| {
        let part_at = format!("{at}[{j}]");
        match tag_of(raw, &part_at)?.as_deref() {
            Some("input_text" | "output_text" | "refusal" | "input_image") => {}
            Some("input_file") => return Err(not_carried(part_at, "files are not translated")),
            Some("input_audio") => return Err(not_carried(part_at, "audio input is not translated")),
            _ => return Err(Unable::new(part_at, "is not a content part that is translated")),
        }
        let p: ContentPart = parse(raw, &part_at)?;
        drop_present(
            dropped,
            &part_at,
            &[
                (p.annotations.is_some(), "annotations"),
                (p.logprobs.is_some(), "logprobs"),
            ],
        );
        let missing = |field: &str| Unable::new(&part_at, format!("an `{}` part needs `{field}`", p.kind));
        let content = match p.kind.as_str() {
            "refusal" => Content::Text(p.refusal.ok_or_else(|| missing("refusal"))?),
            "input_image" => match (p.image_url, p.file_id) {
                (Some(url), _) => Content::Image(image_from_url(url, p.detail, &part_at)?),
                (None, Some(_)) => return Err(not_carried(part_at, "it names a file uploaded to OpenAI")),
                (None, None) => return Err(missing("image_url")),
            },
            _ => Content::Text(p.text.ok_or_else(|| missing("text"))?),
        };
        f(part_at, content)
    })
}

fn read_message_content(n: &mut Neutral, role: Role, raw: &RawValue, at: &str) -> Result<(), Unable> {
    let list = match text_or_list(raw, at)? {
        TextOr::Text(text) => return n.push(role, at.to_string(), Content::Text(text)),
        TextOr::List(list) => list,
    };
    let mut dropped = Vec::new();
    read_parts(list, at, &mut dropped, |part_at, content| {
        if matches!(content, Content::Image(_)) && role != Role::User {
            return Err(Unable::new(part_at, "only user messages hold images"));
        }
        n.push(role, part_at, content)
    })?;
    n.dropped.append(&mut dropped);
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionTool<'a> {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

fn read_tool(raw: &RawValue, at: String) -> Result<Tool, Unable> {
    match tag_of(raw, &at)?.as_deref() {
        Some("function") => {}
        Some("custom") => return Err(not_carried(at, "custom (grammar) tools are not translated")),
        Some(kind) => return Err(not_carried(at, &format!("`{kind}` is a tool the provider runs"))),
        None => return Err(Unable::new(at, "a tool needs a `type`")),
    }
    let t: FunctionTool = parse(raw, &at)?;
    Ok(Tool {
        at,
        name: t.name,
        description: t.description,
        parameters: t.parameters.filter(|p| !is_null(p)).map(RawValue::to_owned),
        // Strict unless said otherwise, in this API.
        strict: Some(t.strict.unwrap_or(true)),
    })
}

/// A Responses `namespace`: a name for a group of the client's function tools.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Namespace<'a> {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    #[serde(rename = "name")]
    _name: IgnoredAny,
    #[serde(default, rename = "description")]
    _description: Option<IgnoredAny>,
    #[serde(borrow)]
    tools: Vec<&'a RawValue>,
}

/// A namespace's function tools, each a tool of its own (the grouping dropped and listed as
/// `namespace`); a name another tool has already taken cannot be told apart in a call, so
/// it is not carried.
fn read_namespace(n: &mut Neutral, raw: &RawValue, at: String) -> Result<(), Unable> {
    let group: Namespace = parse(raw, &at)?;
    for (i, inner) in group.tools.into_iter().enumerate() {
        let tool = read_tool(inner, format!("{at}.tools[{i}]"))?;
        if n.tools.iter().any(|t| t.name == tool.name) {
            return Err(not_carried(
                tool.at,
                &format!(
                    "the tool name `{}` is used twice once namespaces are flattened",
                    tool.name
                ),
            ));
        }
        n.add_tool(tool)?;
    }
    // The grouping says nothing to a route that sees the tools flat.
    if !n.dropped.iter().any(|d| d == "namespace") {
        n.dropped.push("namespace".into());
    }
    Ok(())
}

/// The (function name, namespace) of each tool a request's `namespace` tools group: the calls a
/// route of another dialect makes to them are written back with their namespace.
pub(crate) fn namespaces(body: &Body) -> Vec<(String, String)> {
    let Some(raw) = body.raw("tools").filter(|raw| raw.get().contains("\"namespace\"")) else {
        return Vec::new();
    };
    #[derive(Deserialize)]
    struct Grouped<'a> {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(borrow, default)]
        tools: Vec<&'a RawValue>,
    }
    #[derive(Deserialize)]
    struct Named {
        #[serde(default)]
        name: Option<String>,
    }
    let groups: Vec<Grouped> = serde_json::from_str(raw.get()).unwrap_or_default();
    groups
        .into_iter()
        .filter(|g| g.kind.as_deref() == Some("namespace"))
        .flat_map(|g| {
            let space = g.name.unwrap_or_default();
            g.tools.into_iter().filter_map(move |t| {
                let named: Named = serde_json::from_str(t.get()).ok()?;
                Some((named.name?, space.clone()))
            })
        })
        .collect()
}

#[derive(Deserialize)]
struct ObjectChoice {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
}

fn read_tool_choice(raw: &RawValue) -> Result<ToolChoice, Unable> {
    let at = "tool_choice";
    if let Some(word) = word_or_object(raw, at)? {
        return choice_word(&word, at);
    }
    let c: ObjectChoice = parse(raw, at)?;
    match (c.kind.as_str(), c.name) {
        ("function", Some(name)) => Ok(ToolChoice::Function(name)),
        (kind, _) => Err(not_carried(
            at,
            &format!("`{kind}` is not a tool choice that is translated"),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextConfig<'a> {
    #[serde(borrow, default)]
    format: Option<TextFormat<'a>>,
    #[serde(default)]
    verbosity: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextFormat<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

fn read_text(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let t: TextConfig = parse(raw, "text")?;
    n.verbosity = t.verbosity;
    let Some(f) = t.format else {
        return Ok(());
    };
    n.response_format = Some(match f.kind.as_str() {
        "text" => ResponseFormat::Text,
        "json_object" => ResponseFormat::JsonObject,
        "json_schema" => ResponseFormat::JsonSchema(json_schema(
            f.name,
            f.description,
            f.schema,
            f.strict,
            "text.format.schema",
        )?),
        other => return Err(Unable::new("text.format", format!("`{other}` is not an output format"))),
    });
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReasoningConfig {
    #[serde(default)]
    effort: Option<String>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    generate_summary: Option<String>,
}

fn read_reasoning(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let r: ReasoningConfig = parse(raw, "reasoning")?;
    if let Some(word) = r.effort {
        n.thinking = Some(effort_of(&word, "reasoning.effort")?);
    }
    if let Some(summary) = r.summary.or(r.generate_summary) {
        n.show_reasoning = Some(summary != "none");
    }
    Ok(())
}

// ---- writing ----

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutItem<'a> {
    Message {
        role: &'static str,
        content: Vec<OutPart<'a>>,
    },
    FunctionCall {
        call_id: &'a str,
        name: &'a str,
        arguments: &'a str,
    },
    FunctionCallOutput {
        call_id: &'a str,
        output: OutOutput<'a>,
    },
    Reasoning {
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<&'a str>,
        summary: Vec<OutSummary<'a>>,
        encrypted_content: &'a str,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutPart<'a> {
    InputText { text: &'a str },
    InputImage { image_url: ImageUrl<'a>, detail: &'a str },
    OutputText { text: &'a str, annotations: [(); 0] },
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutOutput<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<OutPart<'a>>),
}

#[derive(Serialize)]
struct OutSummary<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

fn image(image: &Image) -> OutPart<'_> {
    OutPart::InputImage {
        image_url: ImageUrl(&image.source),
        detail: image.detail.as_deref().unwrap_or("auto"),
    }
}

fn output<'a>(r: &'a ToolResult) -> OutOutput<'a> {
    if let Some(text) = result_text(r) {
        return OutOutput::Text(text);
    }
    let parts = r.content.iter().map(|p| match p {
        Piece::Text(text) => OutPart::InputText { text },
        Piece::Image(i) => image(i),
    });
    OutOutput::Parts(parts.collect())
}

/// The leading system turn (the `instructions`) and the input items.
fn items<'a>(w: &mut Writer<'a>) -> Result<(Option<String>, Vec<OutItem<'a>>), Unable> {
    let n: &'a Neutral = w.n;
    let mut turns = n.turns.iter().peekable();
    let instructions = match turns.next_if(|t| t.role == Role::System) {
        Some(turn) => Some(
            turn.parts
                .iter()
                .map(system_text)
                .collect::<Result<Vec<_>, _>>()?
                .join("\n\n"),
        ),
        None => None,
    };
    let mut out = Vec::new();
    for turn in turns {
        let (role, mut parts) = (turn.role, Vec::new());
        let word = role.openai();
        let flush = |parts: &mut Vec<OutPart<'a>>, out: &mut Vec<OutItem<'a>>| {
            if !parts.is_empty() {
                out.push(OutItem::Message {
                    role: word,
                    content: std::mem::take(parts),
                });
            }
        };
        for part in &turn.parts {
            match &part.content {
                Content::Text(text) if role == Role::Assistant => {
                    parts.push(OutPart::OutputText { text, annotations: [] })
                }
                Content::Text(text) => parts.push(OutPart::InputText { text }),
                Content::Image(i) if role == Role::User => parts.push(image(i)),
                Content::Image(_) => return Err(w.no_place(part, "an image outside a user message")),
                Content::ToolCall(c) => {
                    flush(&mut parts, &mut out);
                    out.push(OutItem::FunctionCall {
                        call_id: &c.id,
                        name: &c.name,
                        arguments: &c.arguments,
                    });
                }
                Content::ToolResult(r) => {
                    flush(&mut parts, &mut out);
                    out.push(OutItem::FunctionCallOutput {
                        call_id: &r.call_id,
                        output: output(r),
                    });
                }
                Content::Reasoning(Reasoning { text, seal: Some(seal) }) if seal.by == Api::Responses => {
                    flush(&mut parts, &mut out);
                    let summary = (!text.is_empty()).then_some(OutSummary {
                        kind: "summary_text",
                        text,
                    });
                    out.push(OutItem::Reasoning {
                        id: seal.id.as_deref(),
                        summary: summary.into_iter().collect(),
                        encrypted_content: &seal.data,
                    });
                }
                Content::Reasoning(r) => w.other_reasoning(part, r)?,
            }
        }
        flush(&mut parts, &mut out);
    }
    Ok((instructions, out))
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    parameters: Option<&'a RawValue>,
    strict: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutChoice<'a> {
    Word(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        name: &'a str,
    },
}

#[derive(Serialize)]
struct OutText<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<OutFormat<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    verbosity: Option<&'a str>,
}

#[derive(Serialize)]
struct OutFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

#[derive(Serialize)]
struct OutReasoning {
    #[serde(skip_serializing_if = "Option::is_none")]
    effort: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    summary: Option<&'static str>,
}

fn format(f: &ResponseFormat) -> OutFormat<'_> {
    let plain = |kind| OutFormat {
        kind,
        name: None,
        description: None,
        schema: None,
        strict: None,
    };
    match f {
        ResponseFormat::Text => plain("text"),
        ResponseFormat::JsonObject => plain("json_object"),
        ResponseFormat::JsonSchema(s) => OutFormat {
            kind: "json_schema",
            name: Some(s.name.as_deref().unwrap_or("response")),
            description: s.description.as_deref(),
            schema: Some(&s.schema),
            strict: s.strict,
        },
    }
}

pub(crate) fn write(w: &mut Writer, model: &str) -> Result<Vec<u8>, Unable> {
    let n = w.n;
    w.refuse_candidates()?;
    w.refuse_set(&[
        (!n.stop.is_empty(), Setting::Stop),
        (n.top_k.is_some(), Setting::TopK),
        (n.seed.is_some(), Setting::Seed),
        (n.presence_penalty.is_some(), Setting::Presence),
        (n.frequency_penalty.is_some(), Setting::Frequency),
    ])?;
    let (instructions, input) = items(w)?;
    let mut o = JsonObject::new(crate::dialects::neutral::request::capacity(n));
    o.field("model", model)?;
    o.opt("instructions", instructions)?;
    o.field("input", &input)?;
    if !n.tools.is_empty() {
        let tools: Vec<OutTool> = n
            .tools
            .iter()
            .map(|t| OutTool {
                kind: "function",
                name: &t.name,
                description: t.description.as_deref(),
                parameters: t.parameters.as_deref(),
                // Other APIs' functions are not strict unless they say so; this one's are.
                strict: t.strict.unwrap_or(false),
            })
            .collect();
        o.field("tools", &tools)?;
    }
    if let Some(choice) = w.tool_choice() {
        let out = match choice {
            ToolChoice::Function(name) => OutChoice::Function { kind: "function", name },
            other => OutChoice::Word(choice_word_of(other).unwrap_or("auto")),
        };
        o.field("tool_choice", &out)?;
    }
    o.opt("parallel_tool_calls", w.parallel_tool_calls())?;
    o.field("max_output_tokens", &w.max_output_tokens)?;
    o.opt("temperature", n.temperature)?;
    o.opt("top_p", n.top_p)?;
    let text = OutText {
        format: n.response_format.as_ref().map(format),
        verbosity: n.verbosity.as_deref(),
    };
    if text.format.is_some() || text.verbosity.is_some() {
        o.field("text", &text)?;
    }
    let reasoning = OutReasoning {
        effort: effort_word(w),
        summary: (n.show_reasoning == Some(true)).then_some("auto"),
    };
    if reasoning.effort.is_some() || reasoning.summary.is_some() {
        o.field("reasoning", &reasoning)?;
    }
    o.opt("user", n.user.as_deref())?;
    let shared = w.shared();
    for extra in shared {
        o.field(&extra.field, &extra.value)?;
    }
    // Nothing is kept at the provider unless the client asked (the other APIs keep nothing).
    if !shared.iter().any(|e| e.field == "store") {
        o.field("store", &false)?;
    }
    if n.stream {
        o.field("stream", &true)?;
    }
    Ok(o.finish())
}
