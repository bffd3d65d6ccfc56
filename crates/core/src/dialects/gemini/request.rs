//! Gemini `generateContent` read into a neutral request, and written from one. The model and the
//! stream mode are in the path, never in the body. Google's JSON takes field names in camelCase
//! or in the proto's snake_case: the body was respelled in camelCase when it was parsed
//! (`dialects::gemini::names`), so only camelCase is read here, and written.

use std::collections::{HashMap, VecDeque};

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::api::Api;
use crate::dialects::body::{Body, SMALL_FIELD_BYTES};
use crate::dialects::neutral::request::{
    arguments_object, drop_present, each, each_field, is_null, not_carried, parse, result_text, system_text, unknown,
    Content, Effort, Few, ImageSource, JsonObject, JsonSchema, Neutral, Part, Piece, Reasoning, ResponseFormat, Role,
    Seal, Setting, Thinking, Tool, ToolCall, ToolChoice, ToolResult, Unable, Writer,
};

/// The most stop sequences Gemini takes.
const MAX_STOP: usize = 5;

pub(crate) fn read(body: &Body) -> Result<Neutral, Unable> {
    let mut n = Neutral::new(Api::Gemini);
    // The system instruction comes first, wherever the field stands.
    if let Some(raw) = body.raw("systemInstruction").filter(|r| !is_null(r)) {
        read_system(&mut n, raw)?;
    }
    let mut calls = Calls::default();
    for (name, raw) in body.fields() {
        if is_null(raw) {
            continue;
        }
        match name {
            "model" | "provider" | "models" | "systemInstruction" => {}
            "contents" => each(raw, name, |i, c: Turn| read_turn(&mut n, &mut calls, i, c))?,
            "tools" => each(raw, name, |i, t: &RawValue| read_tool(&mut n, i, t))?,
            "toolConfig" => read_tool_config(&mut n, raw)?,
            "generationConfig" => read_config(&mut n, raw)?,
            // Google's own filters and billing labels: no other provider has them.
            "safetySettings" | "labels" => n.dropped.push(name.into()),
            "cachedContent" => return Err(not_carried(name, "it names content cached at Google")),
            _ => return Err(unknown(name)),
        }
    }
    Ok(n)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a content object")]
struct Turn<'a> {
    #[serde(default)]
    role: Option<String>,
    #[serde(borrow)]
    parts: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", expecting = "a part object")]
struct GPart<'a> {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: Option<bool>,
    #[serde(default)]
    thought_signature: Option<String>,
    #[serde(default)]
    inline_data: Option<Blob>,
    #[serde(default)]
    file_data: Option<FileData>,
    #[serde(borrow, default)]
    function_call: Option<Call<'a>>,
    #[serde(borrow, default)]
    function_response: Option<Response<'a>>,
    #[serde(default)]
    executable_code: Option<IgnoredAny>,
    #[serde(default)]
    code_execution_result: Option<IgnoredAny>,
    #[serde(default)]
    video_metadata: Option<IgnoredAny>,
    #[serde(default)]
    part_metadata: Option<IgnoredAny>,
    #[serde(default)]
    media_resolution: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Blob {
    mime_type: String,
    data: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct FileData {
    #[serde(default)]
    mime_type: Option<String>,
    file_uri: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Call<'a> {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(borrow, default)]
    args: Option<&'a RawValue>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Response<'a> {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(borrow, default)]
    response: Option<&'a RawValue>,
    #[serde(default)]
    parts: Option<IgnoredAny>,
    #[serde(default)]
    will_continue: Option<IgnoredAny>,
    #[serde(default)]
    scheduling: Option<IgnoredAny>,
}

/// Calls not answered yet: Gemini answers a call by its name, the others by an id. Each call is
/// found by a hash lookup and its queue's front, never by scanning the calls still open: 40k
/// calls and responses cost 80k steps, not 8×10⁸ (SPEC §18a).
#[derive(Default)]
struct Calls {
    /// Every call's id, and whether it is still open.
    made: Vec<(String, bool)>,
    /// The calls of each id, and of each name, in order (closed ones skipped when met).
    by_id: HashMap<String, VecDeque<usize>>,
    by_name: HashMap<String, VecDeque<usize>>,
}

impl Calls {
    /// A call's id: its own, else one made from where it stands.
    fn call(&mut self, id: Option<String>, name: &str, at: (usize, usize)) -> String {
        let id = id.unwrap_or_else(|| format!("call_{}_{}", at.0, at.1));
        let index = self.made.len();
        self.made.push((id.clone(), true));
        self.by_id.entry(id.clone()).or_default().push_back(index);
        self.by_name.entry(name.to_string()).or_default().push_back(index);
        id
    }

    /// The id a response answers: its own, else the first open call of that name.
    fn answer(&mut self, id: Option<String>, name: &str, at: &str) -> Result<String, Unable> {
        let queue = match &id {
            Some(id) => self.by_id.get_mut(id),
            None => self.by_name.get_mut(name),
        };
        // Each call leaves each queue once: the skipping costs O(calls) over the whole request.
        let open = queue.and_then(|queue| {
            while let Some(index) = queue.pop_front() {
                if self.made.get(index).is_some_and(|(_, open)| *open) {
                    return Some(index);
                }
            }
            None
        });
        let open = open.and_then(|index| self.made.get_mut(index)).map(|call| {
            call.1 = false;
            call.0.clone()
        });
        match (open, id) {
            (_, Some(id)) => Ok(id),
            (Some(call_id), None) => Ok(call_id),
            (None, None) => Err(Unable::new(
                at,
                format!("answers no earlier `functionCall` of `{name}`, so it has no call to refer to"),
            )),
        }
    }
}

fn read_system(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let t: Turn = parse(raw, "systemInstruction")?;
    each(t.parts, "systemInstruction.parts", |j, p: GPart| {
        let at = format!("systemInstruction.parts[{j}]");
        match p.text {
            Some(text) => n.push(Role::System, at, Content::Text(text)),
            None => Err(Unable::new(at, "a system instruction holds text only")),
        }
    })
}

fn read_turn(n: &mut Neutral, calls: &mut Calls, i: usize, t: Turn) -> Result<(), Unable> {
    let at = format!("contents[{i}]");
    let role = match t.role.as_deref() {
        None | Some("user" | "function" | "tool") => Role::User,
        Some("model") => Role::Assistant,
        Some(other) => return Err(Unable::new(format!("{at}.role"), format!("`{other}` is not a role"))),
    };
    let base = format!("{at}.parts");
    each(t.parts, &base, |j, p: GPart| {
        let at = format!("{base}[{j}]");
        let unused = [
            (p.part_metadata.is_some(), "partMetadata"),
            (p.media_resolution.is_some(), "mediaResolution"),
        ];
        drop_present(&mut n.dropped, &at, &unused);
        if p.executable_code.is_some() || p.code_execution_result.is_some() {
            return Err(not_carried(at, "code execution runs at Google"));
        }
        if p.video_metadata.is_some() {
            return Err(not_carried(at, "video is not translated"));
        }
        let seal = p.thought_signature.map(|data| Seal {
            by: Api::Gemini,
            data,
            redacted: false,
            id: None,
        });
        let content = if let Some(text) = p.text {
            if p.thought == Some(true) {
                return n.push(role, at, Content::Reasoning(Reasoning { text, seal }));
            }
            Content::Text(text)
        } else if let Some(blob) = p.inline_data.filter(|_| role == Role::User) {
            if !blob.mime_type.starts_with("image/") {
                return Err(not_carried(
                    at,
                    &format!("`{}` input is not translated", blob.mime_type),
                ));
            }
            Content::Image(crate::dialects::neutral::request::Image {
                source: ImageSource::Base64 {
                    media_type: blob.mime_type,
                    data: blob.data,
                },
                detail: None,
            })
        } else if let Some(file) = p.file_data.filter(|_| role == Role::User) {
            let image = file.mime_type.as_deref().is_some_and(|m| m.starts_with("image/"));
            let google = file.file_uri.starts_with("gs://") || file.file_uri.contains("googleapis.com/");
            if !image || google || !file.file_uri.starts_with("https://") {
                return Err(not_carried(
                    at,
                    "it names a file stored at Google, or one that is not an image",
                ));
            }
            Content::Image(crate::dialects::neutral::request::Image {
                source: ImageSource::Url(file.file_uri),
                detail: None,
            })
        } else if let Some(call) = p.function_call.filter(|_| role == Role::Assistant) {
            let id = calls.call(call.id, &call.name, (i, j));
            Content::ToolCall(ToolCall {
                id,
                name: call.name,
                arguments: call.args.map_or_else(|| "{}".to_string(), |a| a.get().to_string()),
            })
        } else if let Some(response) = p.function_response.filter(|_| role == Role::User) {
            if response.parts.is_some() {
                return Err(not_carried(at, "function responses with media are not translated"));
            }
            let unused = [
                (response.will_continue.is_some(), "willContinue"),
                (response.scheduling.is_some(), "scheduling"),
            ];
            drop_present(&mut n.dropped, &format!("{at}.functionResponse"), &unused);
            let call_id = calls.answer(response.id, &response.name, &at)?;
            let (text, is_error) = response_text(response.response, &at)?;
            Content::ToolResult(ToolResult {
                call_id,
                name: Some(response.name),
                content: vec![Piece::Text(text)],
                is_error,
            })
        } else {
            return Err(Unable::new(
                at,
                "this part does not belong in a turn of this role, or holds nothing",
            ));
        };
        if let Some(seal) = seal {
            // Kept just before the part it came with (written back onto it for Gemini).
            n.push(
                role,
                format!("{at}.thoughtSignature"),
                Content::Reasoning(Reasoning {
                    text: String::new(),
                    seal: Some(seal),
                }),
            )?;
        }
        n.push(role, at, content)
    })
}

/// A function response's `response` as text: `{"output": "…"}` is its text, `{"error": "…"}` an
/// error; any other object is its JSON.
fn response_text(response: Option<&RawValue>, at: &str) -> Result<(String, bool), Unable> {
    let Some(raw) = response.filter(|r| !is_null(r)) else {
        return Ok((String::new(), false));
    };
    let (mut count, mut first) = (0, None);
    each_field(raw, &format!("{at}.functionResponse.response"), |key, value| {
        count += 1;
        first.get_or_insert((key, value));
        Ok(())
    })?;
    if let (1, Some((key, value))) = (count, first) {
        if let (Ok(text), "output" | "error") = (serde_json::from_str::<String>(value.get()), key.as_str()) {
            return Ok((text, key == "error"));
        }
    }
    Ok((raw.get().to_string(), false))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Declaration<'a> {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(borrow, default)]
    parameters: Option<&'a RawValue>,
    #[serde(borrow, default)]
    parameters_json_schema: Option<&'a RawValue>,
    #[serde(default)]
    response: Option<IgnoredAny>,
    #[serde(default)]
    response_json_schema: Option<IgnoredAny>,
    #[serde(default)]
    behavior: Option<IgnoredAny>,
}

fn read_tool(n: &mut Neutral, i: usize, tool: &RawValue) -> Result<(), Unable> {
    each_field(tool, &format!("tools[{i}]"), |key, raw| {
        let at = format!("tools[{i}].{key}");
        if key != "functionDeclarations" {
            return Err(not_carried(at, &format!("`{key}` is a tool Google runs")));
        }
        each(raw, &at, |j, d: Declaration| {
            let at = format!("{at}[{j}]");
            let unused = [
                (d.response.is_some() || d.response_json_schema.is_some(), "response"),
                (d.behavior.is_some(), "behavior"),
            ];
            drop_present(&mut n.dropped, &at, &unused);
            let parameters = match (d.parameters_json_schema, d.parameters) {
                (Some(schema), _) => Some(schema.to_owned()),
                (None, Some(schema)) => Some(json_schema_of(schema, &format!("{at}.parameters"))?),
                (None, None) => None,
            };
            n.add_tool(Tool {
                at,
                name: d.name,
                description: d.description,
                parameters,
                strict: None,
            })
        })
    })
}

/// A Gemini `Schema` (OpenAPI's subset: `"type": "OBJECT"`, `nullable`) as JSON Schema. Schemas
/// are small: one past [`SMALL_FIELD_BYTES`] is refused rather than built into a tree.
fn json_schema_of(raw: &RawValue, at: &str) -> Result<Box<RawValue>, Unable> {
    if raw.get().len() > SMALL_FIELD_BYTES {
        return Err(Unable::new(at, "is too large a schema to translate (at most 64 KiB)"));
    }
    let mut schema: Value = parse(raw, at)?;
    to_json_schema(&mut schema);
    serde_json::value::to_raw_value(&schema).map_err(|e| Unable::new(at, e.to_string()))
}

fn to_json_schema(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(kind)) = map.get_mut("type") {
                *kind = kind.to_ascii_lowercase();
            }
            if let Some(Value::Bool(nullable)) = map.get("nullable").cloned() {
                map.remove("nullable");
                if let (true, Some(kind @ Value::String(_))) = (nullable, map.get("type").cloned()) {
                    map.insert("type".into(), Value::Array(vec![kind, Value::from("null")]));
                }
            }
            if map.get("propertyOrdering").is_some_and(Value::is_array) {
                map.remove("propertyOrdering");
            }
            for (key, child) in map.iter_mut() {
                if !matches!(key.as_str(), "enum" | "required" | "example" | "default" | "const") {
                    to_json_schema(child);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(to_json_schema),
        _ => {}
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ToolConfig {
    #[serde(default)]
    function_calling_config: Option<CallingConfig>,
    #[serde(default)]
    retrieval_config: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallingConfig {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    allowed_function_names: Option<Few<String>>,
}

fn read_tool_config(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let at = "toolConfig.functionCallingConfig";
    let config: ToolConfig = parse(raw, "toolConfig")?;
    if config.retrieval_config.is_some() {
        n.dropped.push("toolConfig.retrievalConfig".into());
    }
    let Some(calling) = config.function_calling_config else {
        return Ok(());
    };
    let mode = calling.mode.unwrap_or_default().to_ascii_uppercase();
    let names = calling.allowed_function_names.map(|few| few.0).unwrap_or_default();
    n.tool_choice = match (mode.as_str(), names.as_slice()) {
        ("" | "MODE_UNSPECIFIED" | "AUTO", _) => Some(ToolChoice::Auto),
        ("NONE", _) => Some(ToolChoice::None),
        ("ANY", []) => Some(ToolChoice::Required),
        ("ANY", [name]) => Some(ToolChoice::Function(name.clone())),
        ("ANY", _) => {
            return Err(not_carried(
                at,
                "a choice among several named functions is not translated",
            ))
        }
        (other, _) => return Err(not_carried(at, &format!("mode `{other}` is not translated"))),
    };
    Ok(())
}

#[derive(Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
struct Config<'a> {
    temperature: Option<f64>,
    top_p: Option<f64>,
    top_k: Option<f64>,
    max_output_tokens: Option<u64>,
    stop_sequences: Option<Few<String>>,
    candidate_count: Option<u64>,
    seed: Option<i64>,
    presence_penalty: Option<f64>,
    frequency_penalty: Option<f64>,
    response_mime_type: Option<String>,
    #[serde(borrow)]
    response_schema: Option<&'a RawValue>,
    #[serde(borrow, alias = "_responseJsonSchema")]
    response_json_schema: Option<&'a RawValue>,
    thinking_config: Option<ThinkingConfig>,
    response_logprobs: Option<bool>,
    logprobs: Option<IgnoredAny>,
    response_modalities: Option<Few<String>>,
    speech_config: Option<IgnoredAny>,
    image_config: Option<IgnoredAny>,
    media_resolution: Option<IgnoredAny>,
    enable_enhanced_civic_answers: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ThinkingConfig {
    #[serde(default)]
    thinking_budget: Option<i64>,
    #[serde(default)]
    include_thoughts: Option<bool>,
    #[serde(default)]
    thinking_level: Option<String>,
}

fn read_config(n: &mut Neutral, raw: &RawValue) -> Result<(), Unable> {
    let at = "generationConfig";
    let c: Config = parse(raw, at)?;
    let field = |name: &str| format!("{at}.{name}");
    if c.response_logprobs == Some(true) || c.logprobs.is_some() {
        return Err(not_carried(
            field("responseLogprobs"),
            "log probabilities are not translated",
        ));
    }
    if c.speech_config.is_some() || c.image_config.is_some() {
        return Err(not_carried(field("speechConfig"), "only text answers are translated"));
    }
    if let Some(modalities) = &c.response_modalities {
        if modalities.0.iter().any(|m| !m.eq_ignore_ascii_case("text")) {
            return Err(not_carried(
                field("responseModalities"),
                "only text answers are translated",
            ));
        }
    }
    let unused = [
        (c.media_resolution.is_some(), "mediaResolution"),
        (c.enable_enhanced_civic_answers.is_some(), "enableEnhancedCivicAnswers"),
    ];
    drop_present(&mut n.dropped, at, &unused);
    n.temperature = c.temperature;
    n.top_p = c.top_p;
    n.top_k = match c.top_k {
        Some(k) if k >= 0.0 && k.fract() == 0.0 && k <= u32::MAX as f64 => Some(k as u64),
        Some(_) => return Err(Unable::new(field("topK"), "must be a whole number")),
        None => None,
    };
    n.max_output_tokens = c.max_output_tokens;
    n.stop = c.stop_sequences.map(|few| few.0).unwrap_or_default();
    n.candidates = c.candidate_count;
    n.seed = c.seed;
    n.presence_penalty = c.presence_penalty;
    n.frequency_penalty = c.frequency_penalty;
    let schema = match (c.response_json_schema, c.response_schema) {
        (Some(schema), _) => Some(schema.to_owned()),
        (None, Some(schema)) => Some(json_schema_of(schema, &field("responseSchema"))?),
        (None, None) => None,
    };
    n.response_format = match (c.response_mime_type.as_deref(), schema) {
        (_, Some(schema)) => Some(ResponseFormat::JsonSchema(JsonSchema {
            name: None,
            description: None,
            schema,
            strict: None,
        })),
        (Some("application/json"), None) => Some(ResponseFormat::JsonObject),
        (Some("text/plain") | None, None) => c.response_mime_type.as_ref().map(|_| ResponseFormat::Text),
        (Some(other), None) => {
            return Err(not_carried(
                field("responseMimeType"),
                &format!("`{other}` answers are not translated"),
            ))
        }
    };
    if let Some(t) = c.thinking_config {
        n.show_reasoning = t.include_thoughts;
        n.thinking = match (t.thinking_budget, t.thinking_level) {
            (Some(0), _) => Some(Thinking::Off),
            (Some(b), _) if b < 0 => Some(Thinking::Auto),
            (Some(b), _) => Some(Thinking::Budget(b.unsigned_abs())),
            (None, Some(level)) => Some(Thinking::Effort(Effort::parse(&level).ok_or_else(|| {
                Unable::new(
                    field("thinkingConfig.thinkingLevel"),
                    format!("`{level}` is not a thinking level"),
                )
            })?)),
            (None, None) => None,
        };
    }
    Ok(())
}

// ---- writing ----

#[derive(Serialize)]
struct OutTurn<'a> {
    role: &'static str,
    parts: Vec<OutPart<'a>>,
}

#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct OutPart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<OutBlob<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<OutCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<OutCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutBlob<'a> {
    mime_type: &'a str,
    data: &'a str,
}

/// A `functionCall` (`args`) or a `functionResponse` (`response`): an id, a name and an object.
#[derive(Serialize)]
struct OutCall<'a> {
    id: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    args: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<Box<RawValue>>,
}

#[derive(Serialize)]
struct Wrapped<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    output: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// A tool result as a `response` object: JSON object text as itself, other text under `output`
/// (`error` for a failed call), as Google asks.
fn response_object(w: &Writer, part: &Part, r: &ToolResult) -> Result<Box<RawValue>, Unable> {
    let text = result_text(r).ok_or_else(|| w.no_place(part, "an image in a tool result"))?;
    if !r.is_error && text.trim_start().starts_with('{') {
        if let Ok(raw) = RawValue::from_string(text.trim().to_string()) {
            return Ok(raw);
        }
    }
    let wrapped = match r.is_error {
        true => Wrapped {
            output: None,
            error: Some(&text),
        },
        false => Wrapped {
            output: Some(&text),
            error: None,
        },
    };
    serde_json::value::to_raw_value(&wrapped).map_err(|e| Unable::new(&part.at, e.to_string()))
}

fn parts<'a>(
    w: &mut Writer<'a>,
    names: &HashMap<&'a str, &'a str>,
    turn: &'a crate::dialects::neutral::request::Turn,
) -> Result<Vec<OutPart<'a>>, Unable> {
    let mut out = Vec::new();
    let mut signature = None;
    for part in &turn.parts {
        let mut p = match &part.content {
            Content::Text(text) if text.is_empty() => continue,
            Content::Text(text) => OutPart {
                text: Some(text),
                ..OutPart::default()
            },
            Content::Image(image) => {
                if image.detail.is_some() {
                    w.dropped.push(format!("{}.detail", part.at));
                }
                match &image.source {
                    ImageSource::Base64 { media_type, data } => OutPart {
                        inline_data: Some(OutBlob {
                            mime_type: media_type,
                            data,
                        }),
                        ..OutPart::default()
                    },
                    ImageSource::Url(_) => return Err(w.no_place(part, "an image by URL (only inline images)")),
                }
            }
            Content::ToolCall(c) => OutPart {
                function_call: Some(OutCall {
                    id: &c.id,
                    name: &c.name,
                    args: Some(arguments_object(&c.arguments, &part.at)?),
                    response: None,
                }),
                ..OutPart::default()
            },
            Content::ToolResult(r) => {
                let name = names
                    .get(r.call_id.as_str())
                    .copied()
                    .or(r.name.as_deref())
                    .ok_or_else(|| {
                        Unable::new(
                            &part.at,
                            "Gemini routes answer a call by its name, and no earlier call has this id",
                        )
                    })?;
                OutPart {
                    function_response: Some(OutCall {
                        id: &r.call_id,
                        name,
                        args: None,
                        response: Some(response_object(w, part, r)?),
                    }),
                    ..OutPart::default()
                }
            }
            Content::Reasoning(Reasoning { text, seal: Some(seal) }) if seal.by == Api::Gemini => {
                if text.is_empty() {
                    signature = Some(seal.data.as_str());
                    continue;
                }
                OutPart {
                    text: Some(text),
                    thought: Some(true),
                    thought_signature: Some(&seal.data),
                    ..OutPart::default()
                }
            }
            Content::Reasoning(r) => {
                w.other_reasoning(part, r)?;
                continue;
            }
        };
        p.thought_signature = p.thought_signature.or(signature.take());
        out.push(p);
    }
    Ok(out)
}

#[derive(Serialize)]
struct OutSystem<'a> {
    parts: Vec<OutPart<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutTool<'a> {
    function_declarations: Vec<OutDeclaration<'a>>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutDeclaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters_json_schema: Option<&'a RawValue>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutToolConfig<'a> {
    function_calling_config: OutCalling<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutCalling<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    allowed_function_names: Option<[&'a str; 1]>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutConfig<'a> {
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    candidate_count: Option<u64>,
    max_output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_mime_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_json_schema: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<OutThinking>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutThinking {
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_budget: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    include_thoughts: Option<bool>,
}

fn thinking(n: &Neutral) -> Option<OutThinking> {
    let budget = n.thinking.map(|t| match t {
        Thinking::Off => 0,
        Thinking::Auto => -1,
        Thinking::Effort(e) => e.budget() as i64,
        Thinking::Budget(b) => i64::try_from(b).unwrap_or(i64::MAX),
    });
    (budget.is_some() || n.show_reasoning.is_some()).then_some(OutThinking {
        thinking_budget: budget,
        include_thoughts: n.show_reasoning,
    })
}

pub(crate) fn write(w: &mut Writer) -> Result<Vec<u8>, Unable> {
    let n = w.n;
    w.refuse_set(&[(n.verbosity.is_some(), Setting::Verbosity)])?;
    if n.stop.len() > MAX_STOP {
        return Err(w.unable(Setting::Stop, "take at most 5 stop sequences"));
    }
    let names = w.call_names();
    let mut system = Vec::new();
    let mut contents: Vec<OutTurn> = Vec::new();
    for turn in &n.turns {
        let role = match turn.role {
            Role::System => {
                for part in &turn.parts {
                    system.push(OutPart {
                        text: Some(system_text(part)?),
                        ..OutPart::default()
                    });
                }
                continue;
            }
            Role::User => "user",
            Role::Assistant => "model",
        };
        let mut parts = parts(w, &names, turn)?;
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.append(&mut parts),
            _ => contents.push(OutTurn { role, parts }),
        }
    }
    let mut o = JsonObject::new(crate::dialects::neutral::request::capacity(n));
    o.field("contents", &contents)?;
    if !system.is_empty() {
        o.field("systemInstruction", &OutSystem { parts: system })?;
    }
    if !n.tools.is_empty() {
        w.drop_tool_strictness();
        let declarations = n
            .tools
            .iter()
            .map(|t| OutDeclaration {
                name: &t.name,
                description: t.description.as_deref(),
                parameters_json_schema: t.parameters.as_deref(),
            })
            .collect();
        o.field(
            "tools",
            &[OutTool {
                function_declarations: declarations,
            }],
        )?;
    }
    if let Some(choice) = w.tool_choice() {
        let (mode, name) = match choice {
            ToolChoice::Auto => ("AUTO", None),
            ToolChoice::None => ("NONE", None),
            ToolChoice::Required => ("ANY", None),
            ToolChoice::Function(name) => ("ANY", Some([name.as_str()])),
        };
        let function_calling_config = OutCalling {
            mode,
            allowed_function_names: name,
        };
        o.field(
            "toolConfig",
            &OutToolConfig {
                function_calling_config,
            },
        )?;
    }
    if n.parallel_tool_calls.is_some() {
        w.drop_setting(Setting::Parallel);
    }
    if n.user.is_some() {
        w.drop_setting(Setting::User);
    }
    w.shared();
    let (mime, schema) = match &n.response_format {
        None => (None, None),
        Some(ResponseFormat::Text) => (Some("text/plain"), None),
        Some(ResponseFormat::JsonObject) => (Some("application/json"), None),
        Some(ResponseFormat::JsonSchema(s)) => {
            w.drop_schema_details(s);
            (Some("application/json"), Some(&*s.schema))
        }
    };
    let config = OutConfig {
        stop_sequences: &n.stop,
        temperature: n.temperature,
        top_p: n.top_p,
        top_k: n.top_k,
        candidate_count: n.candidates,
        max_output_tokens: w.max_output_tokens,
        seed: n.seed,
        presence_penalty: n.presence_penalty,
        frequency_penalty: n.frequency_penalty,
        response_mime_type: mime,
        response_json_schema: schema,
        thinking_config: thinking(n),
    };
    o.field("generationConfig", &config)?;
    Ok(o.finish())
}
