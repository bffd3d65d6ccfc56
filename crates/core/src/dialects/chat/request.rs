//! Chat Completions (`/v1/chat/completions`) read into a neutral request, and written from one.

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::Api;
use crate::dialects::body::Body;
use crate::dialects::neutral::request::{
    drop_present, each, image_from_url, is_null, not_carried, parse, strings, tag_of, text_or_list, unknown,
    word_or_object, Content, Effort, Few, Image, ImageUrl, JsonObject, JsonSchema, Neutral, Part, Piece,
    ResponseFormat, Role, Setting, TextOr, Thinking, Tool, ToolCall, ToolChoice, ToolResult, Unable, Writer,
    OPENAI_SHARED,
};

pub(crate) fn read(body: &Body) -> Result<Neutral, Unable> {
    let mut n = Neutral::new(Api::Chat);
    for (name, raw) in body.fields() {
        if is_null(raw) {
            continue;
        }
        match name {
            "model" | "provider" | "models" => {}
            "messages" => each(raw, name, |i, m: &RawValue| read_message(&mut n, i, m))?,
            "stream" => n.stream = parse(raw, name)?,
            "stream_options" => {
                let o: StreamOptions = parse(raw, name)?;
                n.stream_usage = o.include_usage.unwrap_or(false);
                if o.include_obfuscation.is_some() {
                    n.dropped.push("stream_options.include_obfuscation".into());
                }
            }
            // Both limits set: the larger one (SPEC §11).
            "max_tokens" | "max_completion_tokens" => {
                let limit: u64 = parse(raw, name)?;
                n.max_output_tokens = Some(n.max_output_tokens.map_or(limit, |m| m.max(limit)));
            }
            "temperature" => n.temperature = Some(parse(raw, name)?),
            "top_p" => n.top_p = Some(parse(raw, name)?),
            "top_k" => n.top_k = Some(parse(raw, name)?),
            "n" => n.candidates = Some(parse(raw, name)?),
            "seed" => n.seed = Some(parse(raw, name)?),
            "presence_penalty" => n.presence_penalty = Some(parse(raw, name)?),
            "frequency_penalty" => n.frequency_penalty = Some(parse(raw, name)?),
            "stop" => n.stop = strings(raw, name)?,
            "tools" => each(raw, name, |i, t: &RawValue| {
                let tool = read_tool(t, &format!("tools[{i}]"))?;
                n.add_tool(tool)
            })?,
            "tool_choice" => n.tool_choice = Some(read_tool_choice(raw)?),
            "parallel_tool_calls" => n.parallel_tool_calls = Some(parse(raw, name)?),
            "response_format" => n.response_format = Some(read_format(raw)?),
            "reasoning_effort" => n.thinking = Some(read_effort(raw, name)?),
            "verbosity" => n.verbosity = Some(parse(raw, name)?),
            "user" => n.user = Some(parse(raw, name)?),
            _ if OPENAI_SHARED.contains(&name) => n.share(name, raw),
            // Predicted output only makes the answer faster.
            "prediction" => n.dropped.push(name.into()),
            "logprobs" => {
                if parse::<bool>(raw, name)? {
                    return Err(not_carried(name, "log probabilities are not translated"));
                }
            }
            "top_logprobs" => return Err(not_carried(name, "log probabilities are not translated")),
            "logit_bias" => {
                if raw.get().trim() != "{}" {
                    return Err(not_carried(name, "token biases are model-specific"));
                }
            }
            "modalities" => {
                let modalities: Few<String> = parse(raw, name)?;
                if modalities.0.iter().any(|m| m != "text") {
                    return Err(not_carried(name, "only text answers are translated"));
                }
            }
            "audio" => return Err(not_carried(name, "only text answers are translated")),
            "web_search_options" => return Err(not_carried(name, "web search is a built-in tool of the provider")),
            "functions" | "function_call" => {
                return Err(not_carried(
                    name,
                    "the deprecated function form is not translated (use `tools`)",
                ))
            }
            _ => return Err(unknown(name)),
        }
    }
    Ok(n)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
    #[serde(default)]
    include_obfuscation: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a message object")]
struct Message<'a> {
    role: String,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
    #[serde(default)]
    tool_call_id: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    name: Option<IgnoredAny>,
    #[serde(default)]
    annotations: Option<IgnoredAny>,
    #[serde(default)]
    audio: Option<IgnoredAny>,
    #[serde(default)]
    function_call: Option<IgnoredAny>,
}

fn read_message(n: &mut Neutral, i: usize, raw: &RawValue) -> Result<(), Unable> {
    let at = format!("messages[{i}]");
    let m: Message = crate::dialects::neutral::request::parse(raw, &at)?;
    drop_present(
        &mut n.dropped,
        &at,
        &[(m.name.is_some(), "name"), (m.annotations.is_some(), "annotations")],
    );
    if m.audio.is_some() {
        return Err(not_carried(
            format!("{at}.audio"),
            "it names audio of an earlier answer",
        ));
    }
    if m.function_call.is_some() {
        return Err(not_carried(
            format!("{at}.function_call"),
            "the deprecated function form is not translated (use `tool_calls`)",
        ));
    }
    let role = match m.role.as_str() {
        "system" | "developer" => Role::System,
        "user" | "tool" => Role::User,
        "assistant" => Role::Assistant,
        other => {
            return Err(Unable::new(
                format!("{at}.role"),
                format!("`{other}` is not a role that is translated"),
            ))
        }
    };
    if m.tool_calls.is_some() && role != Role::Assistant {
        return Err(Unable::new(
            format!("{at}.tool_calls"),
            "only assistant messages make tool calls",
        ));
    }
    if m.role == "tool" {
        let Some(call_id) = m.tool_call_id else {
            return Err(Unable::new(
                format!("{at}.tool_call_id"),
                "a tool message needs the id of its call",
            ));
        };
        let mut content = Vec::new();
        let mut dropped = Vec::new();
        if let Some(raw) = m.content {
            read_content(raw, &format!("{at}.content"), &mut dropped, |_, part| match part {
                Content::Text(t) => {
                    content.push(Piece::Text(t));
                    Ok(())
                }
                _ => Err(Unable::new(&at, "a tool message holds text only")),
            })?;
        }
        let result = ToolResult {
            call_id,
            name: None,
            content,
            is_error: false,
        };
        n.dropped.append(&mut dropped);
        return n.push(role, at, Content::ToolResult(result));
    }
    if m.tool_call_id.is_some() {
        return Err(Unable::new(
            format!("{at}.tool_call_id"),
            "only tool messages answer a call",
        ));
    }
    if let Some(raw) = m.content {
        let mut dropped = Vec::new();
        read_content(raw, &format!("{at}.content"), &mut dropped, |part_at, content| {
            match (&content, role) {
                (Content::Image(_), Role::User) | (Content::Text(_), _) => {}
                _ => return Err(Unable::new(part_at, "only user messages hold images")),
            }
            n.push(role, part_at, content)
        })?;
        n.dropped.append(&mut dropped);
    }
    if let Some(refusal) = m.refusal {
        n.push(role, format!("{at}.refusal"), Content::Text(refusal))?;
    }
    if let Some(calls) = m.tool_calls {
        let base = format!("{at}.tool_calls");
        each(calls, &base, |j, call: Call| {
            let call_at = format!("{base}[{j}]");
            if call.kind.as_deref().is_some_and(|k| k != "function") {
                return Err(Unable::new(&call_at, "only function tool calls are translated"));
            }
            drop_present(&mut n.dropped, &call_at, &[(call.index.is_some(), "index")]);
            let call = ToolCall {
                id: call.id,
                name: call.function.name,
                arguments: call.function.arguments.unwrap_or_default(),
            };
            n.push(role, call_at, Content::ToolCall(call))
        })?;
    }
    Ok(())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a tool call object")]
struct Call {
    id: String,
    #[serde(rename = "type", default)]
    kind: Option<String>,
    function: CallFunction,
    #[serde(default)]
    index: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallFunction {
    name: String,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a content part object")]
struct ContentPart {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    image_url: Option<PartImage>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    cache_control: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PartImage {
    url: String,
    #[serde(default)]
    detail: Option<String>,
}

/// A message's `content` (a string or a list of parts): `f` gets each part with its path.
/// Fields left out (`cache_control`, which only prices the prompt) go to `dropped`.
fn read_content(
    raw: &RawValue,
    at: &str,
    dropped: &mut Vec<String>,
    mut f: impl FnMut(String, Content) -> Result<(), Unable>,
) -> Result<(), Unable> {
    if is_null(raw) {
        return Ok(());
    }
    let list = match text_or_list(raw, at)? {
        TextOr::Text(text) => return f(at.to_string(), Content::Text(text)),
        TextOr::List(list) => list,
    };
    each(list, at, |j, part: &RawValue| {
        let part_at = format!("{at}[{j}]");
        match tag_of(part, &part_at)?.as_deref() {
            Some("text" | "image_url" | "refusal") => {}
            Some("input_audio") => return Err(not_carried(part_at, "audio input is not translated")),
            Some("file") => return Err(not_carried(part_at, "files are not translated")),
            _ => return Err(Unable::new(part_at, "is not a content part that is translated")),
        }
        let p: ContentPart = parse(part, &part_at)?;
        drop_present(dropped, &part_at, &[(p.cache_control.is_some(), "cache_control")]);
        let missing = |field: &str| Unable::new(&part_at, format!("a `{}` part needs `{field}`", p.kind));
        let content = match p.kind.as_str() {
            "text" => Content::Text(p.text.ok_or_else(|| missing("text"))?),
            "refusal" => Content::Text(p.refusal.ok_or_else(|| missing("refusal"))?),
            _ => {
                let image = p.image_url.ok_or_else(|| missing("image_url"))?;
                Content::Image(image_from_url(image.url, image.detail, &part_at)?)
            }
        };
        f(part_at, content)
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChatTool<'a> {
    #[serde(rename = "type")]
    _kind: IgnoredAny,
    #[serde(borrow)]
    function: FunctionDef<'a>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FunctionDef<'a> {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

fn read_tool(raw: &RawValue, at: &str) -> Result<Tool, Unable> {
    match tag_of(raw, at)?.as_deref() {
        Some("function") => {}
        Some(kind) => {
            return Err(Unable::new(
                at,
                format!("is a `{kind}` tool; only function tools are translated"),
            ))
        }
        None => return Err(Unable::new(at, "a tool needs a `type`")),
    }
    let t: ChatTool = parse(raw, at)?;
    Ok(Tool {
        at: at.to_string(),
        name: t.function.name,
        description: t.function.description,
        parameters: t.function.parameters.filter(|p| !is_null(p)).map(RawValue::to_owned),
        strict: t.function.strict,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NamedChoice {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    function: Option<Named>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    name: String,
}

fn read_tool_choice(raw: &RawValue) -> Result<ToolChoice, Unable> {
    let at = "tool_choice";
    if let Some(word) = word_or_object(raw, at)? {
        return choice_word(&word, at);
    }
    let c: NamedChoice = parse(raw, at)?;
    match (c.kind.as_str(), c.function) {
        ("function", Some(f)) => Ok(ToolChoice::Function(f.name)),
        _ => Err(Unable::new(
            at,
            format!("`{}` is not a tool choice that is translated", c.kind),
        )),
    }
}

/// `auto`, `none` or `required` (both OpenAI dialects).
pub(crate) fn choice_word(word: &str, at: &str) -> Result<ToolChoice, Unable> {
    match word {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        other => Err(Unable::new(at, format!("`{other}` is not a tool choice"))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Format<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(borrow, default)]
    json_schema: Option<SchemaDef<'a>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaDef<'a> {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
    #[serde(default)]
    strict: Option<bool>,
}

fn read_format(raw: &RawValue) -> Result<ResponseFormat, Unable> {
    let at = "response_format";
    let f: Format = parse(raw, at)?;
    match (f.kind.as_str(), f.json_schema) {
        ("text", _) => Ok(ResponseFormat::Text),
        ("json_object", _) => Ok(ResponseFormat::JsonObject),
        ("json_schema", Some(s)) => Ok(ResponseFormat::JsonSchema(json_schema(
            Some(s.name),
            s.description,
            s.schema,
            s.strict,
            "response_format.json_schema.schema",
        )?)),
        (kind, _) => Err(Unable::new(
            at,
            format!("`{kind}` is not a response format that is translated"),
        )),
    }
}

/// A JSON-schema output format (both OpenAI dialects).
pub(crate) fn json_schema(
    name: Option<String>,
    description: Option<String>,
    schema: Option<&RawValue>,
    strict: Option<bool>,
    at: &str,
) -> Result<JsonSchema, Unable> {
    let schema = schema
        .filter(|s| !is_null(s))
        .ok_or_else(|| Unable::new(at, "a JSON-schema output format needs its schema"))?;
    Ok(JsonSchema {
        name,
        description,
        schema: schema.to_owned(),
        strict,
    })
}

fn read_effort(raw: &RawValue, at: &str) -> Result<Thinking, Unable> {
    effort_of(&parse::<String>(raw, at)?, at)
}

/// An OpenAI reasoning effort word (`none` is no reasoning).
pub(crate) fn effort_of(word: &str, at: &str) -> Result<Thinking, Unable> {
    if word == "none" {
        return Ok(Thinking::Off);
    }
    Effort::parse(word)
        .filter(|e| *e != Effort::Max)
        .map(Thinking::Effort)
        .ok_or_else(|| Unable::new(at, format!("`{word}` is not a reasoning effort")))
}

// ---- writing ----

#[derive(Serialize)]
struct OutMessage<'a> {
    role: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<OutContent<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<OutCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutContent<'a> {
    Text(&'a str),
    Parts(Vec<OutPart<'a>>),
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum OutPart<'a> {
    Text { text: &'a str },
    ImageUrl { image_url: OutImage<'a> },
}

#[derive(Serialize)]
struct OutImage<'a> {
    url: ImageUrl<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct OutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction<'a>,
}

#[derive(Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// One message's content: a string for one text part, else a list.
fn content(parts: Vec<OutPart<'_>>) -> Option<OutContent<'_>> {
    if let [OutPart::Text { text }] = parts.as_slice() {
        return Some(OutContent::Text(text));
    }
    (!parts.is_empty()).then_some(OutContent::Parts(parts))
}

fn image(image: &Image) -> OutPart<'_> {
    OutPart::ImageUrl {
        image_url: OutImage {
            url: ImageUrl(&image.source),
            detail: image.detail.as_deref(),
        },
    }
}

fn messages<'a>(w: &mut Writer<'a>) -> Result<Vec<OutMessage<'a>>, Unable> {
    let n: &'a Neutral = w.n;
    let mut out = Vec::new();
    for turn in &n.turns {
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        let role = turn.role.openai();
        for part in &turn.parts {
            match &part.content {
                Content::Text(text) => parts.push(OutPart::Text { text }),
                Content::Image(i) if turn.role == Role::User => parts.push(image(i)),
                Content::Image(_) => return Err(w.no_place(part, "an image outside a user message")),
                Content::ToolCall(c) => calls.push(OutCall {
                    id: &c.id,
                    kind: "function",
                    function: OutFunction {
                        name: &c.name,
                        arguments: &c.arguments,
                    },
                }),
                Content::ToolResult(r) => {
                    // Each result is its own `tool` message, in the turn's order.
                    if let Some(content) = content(std::mem::take(&mut parts)) {
                        out.push(plain(role, content));
                    }
                    out.push(tool_message(w, part, r)?);
                }
                Content::Reasoning(r) => w.other_reasoning(part, r)?,
            }
        }
        let content = content(parts);
        if turn.role == Role::Assistant && (content.is_some() || !calls.is_empty()) {
            out.push(OutMessage {
                role,
                content: Some(content.unwrap_or(OutContent::Text(""))),
                tool_calls: calls,
                tool_call_id: None,
            });
        } else if let Some(content) = content {
            out.push(plain(role, content));
        }
    }
    Ok(out)
}

fn plain<'a>(role: &'static str, content: OutContent<'a>) -> OutMessage<'a> {
    OutMessage {
        role,
        content: Some(content),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

fn tool_message<'a>(w: &Writer<'a>, part: &Part, r: &'a ToolResult) -> Result<OutMessage<'a>, Unable> {
    let mut parts = Vec::new();
    for piece in &r.content {
        match piece {
            Piece::Text(text) => parts.push(OutPart::Text { text }),
            Piece::Image(_) => return Err(w.no_place(part, "an image in a tool result")),
        }
    }
    Ok(OutMessage {
        role: "tool",
        content: Some(content(parts).unwrap_or(OutContent::Text(""))),
        tool_calls: Vec::new(),
        tool_call_id: Some(&r.call_id),
    })
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunctionDef<'a>,
}

#[derive(Serialize)]
struct OutFunctionDef<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

#[derive(Serialize)]
#[serde(untagged)]
enum OutChoice<'a> {
    Word(&'static str),
    Function {
        #[serde(rename = "type")]
        kind: &'static str,
        function: OutName<'a>,
    },
}

#[derive(Serialize)]
struct OutName<'a> {
    name: &'a str,
}

#[derive(Serialize)]
struct OutFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    json_schema: Option<OutSchema<'a>>,
}

#[derive(Serialize)]
struct OutSchema<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    schema: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

#[derive(Serialize)]
struct OutStreamOptions {
    include_usage: bool,
}

/// The tool choice in either OpenAI dialect's words.
pub(crate) fn choice_word_of(choice: &ToolChoice) -> Option<&'static str> {
    match choice {
        ToolChoice::Auto => Some("auto"),
        ToolChoice::None => Some("none"),
        ToolChoice::Required => Some("required"),
        ToolChoice::Function(_) => None,
    }
}

/// The reasoning effort either OpenAI dialect gets ("off" has no word every model takes: dropped).
pub(crate) fn effort_word(w: &mut Writer) -> Option<&'static str> {
    match w.n.thinking {
        Some(Thinking::Off) => {
            w.drop_setting(Setting::Thinking);
            None
        }
        thinking => thinking.and_then(Thinking::effort).map(Effort::openai),
    }
}

pub(crate) fn write(w: &mut Writer, model: &str) -> Result<Vec<u8>, Unable> {
    let n = w.n;
    let messages = messages(w)?;
    let mut o = JsonObject::new(crate::dialects::neutral::request::capacity(n));
    o.field("model", model)?;
    o.field("messages", &messages)?;
    if !n.tools.is_empty() {
        let tools: Vec<OutTool> = n
            .tools
            .iter()
            .map(|t| OutTool {
                kind: "function",
                function: OutFunctionDef {
                    name: &t.name,
                    description: t.description.as_deref(),
                    parameters: t.parameters.as_deref(),
                    strict: t.strict,
                },
            })
            .collect();
        o.field("tools", &tools)?;
    }
    if let Some(choice) = w.tool_choice() {
        let out = match choice {
            ToolChoice::Function(name) => OutChoice::Function {
                kind: "function",
                function: OutName { name },
            },
            other => OutChoice::Word(choice_word_of(other).unwrap_or("auto")),
        };
        o.field("tool_choice", &out)?;
    }
    o.opt("parallel_tool_calls", w.parallel_tool_calls())?;
    if !n.stop.is_empty() {
        o.field("stop", &n.stop)?;
    }
    o.opt("temperature", n.temperature)?;
    o.opt("top_p", n.top_p)?;
    // Not OpenAI's own, but the OpenAI-compatible servers' (vLLM, Together, OpenRouter…).
    o.opt("top_k", n.top_k)?;
    o.opt("n", n.candidates)?;
    o.opt("seed", n.seed)?;
    o.opt("presence_penalty", n.presence_penalty)?;
    o.opt("frequency_penalty", n.frequency_penalty)?;
    // The field the gateway itself forwards (SPEC §11); OpenAI's reasoning models refuse `max_tokens`.
    o.field("max_completion_tokens", &w.max_output_tokens)?;
    match &n.response_format {
        None => {}
        Some(ResponseFormat::Text) => o.field(
            "response_format",
            &OutFormat {
                kind: "text",
                json_schema: None,
            },
        )?,
        Some(ResponseFormat::JsonObject) => o.field(
            "response_format",
            &OutFormat {
                kind: "json_object",
                json_schema: None,
            },
        )?,
        Some(ResponseFormat::JsonSchema(s)) => o.field(
            "response_format",
            &OutFormat {
                kind: "json_schema",
                json_schema: Some(OutSchema {
                    name: s.name.as_deref().unwrap_or("response"),
                    description: s.description.as_deref(),
                    schema: &s.schema,
                    strict: s.strict,
                }),
            },
        )?,
    }
    let effort = effort_word(w);
    o.opt("reasoning_effort", effort)?;
    // Asked for in so many words (Responses, Gemini); Anthropic's thinking shows itself.
    if n.show_reasoning == Some(true) && n.from != Api::Messages {
        w.drop_setting(Setting::ShowReasoning);
    }
    o.opt("verbosity", n.verbosity.as_deref())?;
    o.opt("user", n.user.as_deref())?;
    for extra in w.shared() {
        o.field(&extra.field, &extra.value)?;
    }
    if n.stream {
        o.field("stream", &true)?;
        // Always: the gateway bills from it (SPEC §7).
        o.field("stream_options", &OutStreamOptions { include_usage: true })?;
    }
    Ok(o.finish())
}
