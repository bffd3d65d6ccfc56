//! Answers that depend on the request: tool calls to its first declared tool (`tool-call`) or to
//! a tool it names with given arguments (`tool-call-to`), an
//! echo of the tool results it ends with (always), a JSON object for its response schema
//! (`json`), the count of its images (`echo-images`).
//!
//! This reads the request leniently (it was validated before, unless `lenient`): anything
//! missing just means "not there". Dialect differences are only where things live: Chat
//! `messages`/`tools[].function`, Anthropic `messages`/`tools`, Responses `input`/flat `tools`,
//! Gemini `contents`/`functionDeclarations` (camelCase or snake_case).

use serde_json::Value;

use crate::json::{string, Obj};
use crate::scenario::{Api, Scenario};

/// A call the answer makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    pub name: String,
    /// The arguments as JSON text (an object).
    pub arguments: String,
}

/// What the answer says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Answer {
    /// The usual words (one per content event, see [`crate::dialect::content_pieces`]).
    #[default]
    Words,
    /// This text, spread over the content events.
    Text(String),
    /// Calls to a tool, no text.
    Calls(Vec<ToolCall>),
}

/// Arguments of a call to a tool whose schema names no properties.
pub const DEFAULT_ARGUMENTS: &str = r#"{"city":"Paris","unit":"celsius"}"#;
/// The `json` answer when the request gives no schema with properties.
pub const DEFAULT_JSON: &str = r#"{"answer":"mock"}"#;
/// How much of each tool result the answer repeats.
pub const RESULT_CHARS: usize = 200;

/// The answer to `body` under `sc`: tool calls (`tool-call`, tools declared, or `tool-call-to`,
/// that tool declared; the last turn not a tool result), else JSON (`json`), else the tool results
/// the request ends with, else the image count (`echo-images`), else the usual words.
pub fn decide(api: Api, body: &Value, sc: &Scenario) -> Answer {
    let results = tool_results(api, body);
    if let (Some((name, arguments)), None) = (&sc.tool_call_to, &results) {
        if declares(api, body, name) {
            let call = ToolCall {
                name: name.clone(),
                arguments: arguments.clone(),
            };
            return Answer::Calls(vec![call]);
        }
    }
    if let (Some(n), None) = (sc.tool_calls, &results) {
        if let Some((name, schema)) = first_tool(api, body) {
            let call = ToolCall {
                name,
                arguments: sample_object(schema, DEFAULT_ARGUMENTS),
            };
            return Answer::Calls(vec![call; n]);
        }
    }
    if sc.json {
        return Answer::Text(sample_object(response_schema(api, body), DEFAULT_JSON));
    }
    if let Some(results) = results {
        let shown: Vec<String> = results.iter().map(|r| r.chars().take(RESULT_CHARS).collect()).collect();
        return Answer::Text(format!("The tool said: {}", shown.join(" | ")));
    }
    if sc.echo_images {
        return Answer::Text(format!("images: {}", count_images(api, body)));
    }
    Answer::Words
}

/// The web searches the provider runs before answering (SPEC §21's priced tools): none unless
/// the request declares a web search tool — Responses `web_search` (and its dated and preview
/// types), Anthropic `web_search_YYYYMMDD`, Gemini `googleSearch` / `google_search` — then
/// `searches/N` (default 1), never more than the request allows, as the providers keep to it
/// (Anthropic's tool `max_uses`, Responses `max_tool_calls`). Tool calls are answered without.
pub fn web_searches(api: Api, body: &Value, sc: &Scenario, answer: &Answer) -> usize {
    if matches!(answer, Answer::Calls(_)) {
        return 0;
    }
    let tools = items(body.get("tools"));
    let search = tools.iter().find(|t| match api {
        Api::Responses => str_of(t, "type").is_some_and(|k| k == "web_search" || k.starts_with("web_search_")),
        Api::Messages => str_of(t, "type").is_some_and(|k| k.starts_with("web_search_")),
        Api::Gemini => field(t, &["googleSearch", "google_search"]).is_some(),
        Api::Chat => false,
    });
    let Some(search) = search else { return 0 };
    let limit = match api {
        Api::Messages => search.get("max_uses").and_then(Value::as_u64),
        Api::Responses => body.get("max_tool_calls").and_then(Value::as_u64),
        _ => None,
    };
    let n = sc.searches.unwrap_or(1);
    limit.map_or(n, |l| n.min(usize::try_from(l).unwrap_or(usize::MAX)))
}

/// The first of `names` that `v` has (Google's keys come in two spellings).
fn field<'a>(v: &'a Value, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| v.get(n))
}

fn items(v: Option<&Value>) -> &[Value] {
    v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The first function tool the request declares: its name and its parameters' schema.
fn first_tool(api: Api, body: &Value) -> Option<(String, Option<&Value>)> {
    let tools = items(body.get("tools"));
    let (name, schema) = match api {
        Api::Chat => tools
            .iter()
            .filter(|t| str_of(t, "type") == Some("function"))
            .find_map(|t| t.get("function"))
            .map(|f| (f.get("name"), f.get("parameters")))?,
        Api::Responses => tools
            .iter()
            .find(|t| str_of(t, "type") == Some("function"))
            .map(|t| (t.get("name"), t.get("parameters")))?,
        Api::Messages => tools
            .iter()
            .find(|t| matches!(str_of(t, "type"), None | Some("custom")))
            .map(|t| (t.get("name"), t.get("input_schema")))?,
        Api::Gemini => tools
            .iter()
            .flat_map(|t| items(field(t, &["functionDeclarations", "function_declarations"])))
            .next()
            .map(|f| {
                (
                    f.get("name"),
                    field(f, &["parameters", "parametersJsonSchema", "parameters_json_schema"]),
                )
            })?,
    };
    Some((name?.as_str()?.to_string(), schema))
}

/// Whether the request declares a function tool named `name` (top level; Responses namespaces
/// hold their own).
fn declares(api: Api, body: &Value, name: &str) -> bool {
    let tools = items(body.get("tools"));
    let named = |v: Option<&Value>| v.and_then(Value::as_str) == Some(name);
    match api {
        Api::Chat => tools.iter().any(|t| named(t.pointer("/function/name"))),
        Api::Responses => tools
            .iter()
            .any(|t| str_of(t, "type") == Some("function") && named(t.get("name"))),
        Api::Messages => tools
            .iter()
            .any(|t| matches!(str_of(t, "type"), None | Some("custom")) && named(t.get("name"))),
        Api::Gemini => tools
            .iter()
            .flat_map(|t| items(field(t, &["functionDeclarations", "function_declarations"])))
            .any(|f| named(f.get("name"))),
    }
}

/// The text of content: a string, or its parts' `text` joined.
fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts.iter().filter_map(|p| str_of(p, "text")).collect(),
        _ => String::new(),
    }
}

/// The tool results the request ends with, if its last turn is one (parallel results: several).
fn tool_results(api: Api, body: &Value) -> Option<Vec<String>> {
    let results: Vec<String> = match api {
        Api::Chat => trailing(items(body.get("messages")), |m| str_of(m, "role") == Some("tool"))
            .iter()
            .map(|m| text_of(m.get("content")))
            .collect(),
        Api::Responses => trailing(items(body.get("input")), |i| {
            str_of(i, "type") == Some("function_call_output")
        })
        .iter()
        .map(|i| text_of(i.get("output")))
        .collect(),
        Api::Messages => {
            let last = items(body.get("messages")).last()?;
            if str_of(last, "role") != Some("user") {
                return None;
            }
            items(last.get("content"))
                .iter()
                .filter(|b| str_of(b, "type") == Some("tool_result"))
                .map(|b| text_of(b.get("content")))
                .collect()
        }
        Api::Gemini => {
            let last = items(body.get("contents")).last()?;
            items(last.get("parts"))
                .iter()
                .filter_map(|p| field(p, &["functionResponse", "function_response"]))
                .map(|r| r.get("response").map(Value::to_string).unwrap_or_default())
                .collect()
        }
    };
    (!results.is_empty()).then_some(results)
}

/// The items at the end of `list` that match.
fn trailing(list: &[Value], matches: impl Fn(&Value) -> bool) -> &[Value] {
    let start = list.iter().rposition(|v| !matches(v)).map_or(0, |i| i + 1);
    &list[start..]
}

/// The schema the answer must follow (`json`), if the request gives one.
fn response_schema(api: Api, body: &Value) -> Option<&Value> {
    let at = |path: &str| body.pointer(path);
    match api {
        Api::Chat => at("/response_format/json_schema/schema"),
        Api::Responses => at("/text/format/schema"),
        Api::Messages => at("/output_config/format/schema").or_else(|| at("/output_format/schema")),
        Api::Gemini => {
            let config = field(body, &["generationConfig", "generation_config"])?;
            field(
                config,
                &[
                    "responseJsonSchema",
                    "response_json_schema",
                    "responseSchema",
                    "response_schema",
                ],
            )
        }
    }
}

/// How many image parts the request carries, wherever they are (tool results too).
pub fn count_images(api: Api, v: &Value) -> usize {
    let here = match v {
        Value::Object(o) => match api {
            Api::Chat => str_of(v, "type") == Some("image_url"),
            Api::Messages => str_of(v, "type") == Some("image"),
            Api::Responses => str_of(v, "type") == Some("input_image"),
            Api::Gemini => ["inlineData", "inline_data", "fileData", "file_data"]
                .iter()
                .filter_map(|k| o.get(*k))
                .filter_map(|d| field(d, &["mimeType", "mime_type"]).and_then(Value::as_str))
                .any(|m| m.starts_with("image/")),
        },
        _ => false,
    };
    let inside: usize = match v {
        Value::Object(o) => o.values().map(|x| count_images(api, x)).sum(),
        Value::Array(a) => a.iter().map(|x| count_images(api, x)).sum(),
        _ => 0,
    };
    usize::from(here) + inside
}

/// A JSON object following `schema` when it names properties, else `fallback`.
fn sample_object(schema: Option<&Value>, fallback: &str) -> String {
    match schema {
        Some(s) if s.get("properties").is_some_and(Value::is_object) => sample(s),
        _ => fallback.to_string(),
    }
}

/// A value that follows a JSON schema (or Google's): an object with each required property
/// (every property when none is listed), strings `"mock"` (or the first `enum` value), numbers
/// 1, `true`, empty arrays.
fn sample(schema: &Value) -> String {
    if let Some(first) = schema.get("enum").and_then(Value::as_array).and_then(|e| e.first()) {
        return first.to_string();
    }
    if let Some(alt) = field(schema, &["anyOf", "any_of", "oneOf"])
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return sample(alt);
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.to_ascii_lowercase(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null")
            .to_string(),
        _ if schema.get("properties").is_some() => "object".to_string(),
        _ => "string".to_string(),
    };
    match kind.as_str() {
        "object" => {
            let props = schema.get("properties").and_then(Value::as_object);
            let names: Vec<&str> = match schema.get("required").and_then(Value::as_array) {
                Some(required) => required.iter().filter_map(Value::as_str).collect(),
                None => props
                    .map(|p| p.keys().map(String::as_str).collect())
                    .unwrap_or_default(),
            };
            names
                .into_iter()
                .fold(Obj::new(), |o, name| {
                    let value = props.and_then(|p| p.get(name)).map_or_else(|| string("mock"), sample);
                    o.raw(name, &value)
                })
                .build()
        }
        "array" => "[]".to_string(),
        "integer" | "number" => "1".to_string(),
        "boolean" => "true".to_string(),
        "null" => "null".to_string(),
        _ => string("mock"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::parse_scenario;
    use serde_json::json;

    fn decide_with(api: Api, body: Value, scenario: &str) -> Answer {
        decide(api, &body, &parse_scenario(scenario).unwrap())
    }

    fn weather_schema() -> Value {
        json!({"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                                                 "days": {"type": "integer"}}, "required": ["city", "unit"]})
    }

    #[test]
    fn tool_calls_go_to_the_first_declared_tool_in_every_dialect() {
        let schema = weather_schema();
        let bodies = [
            (
                Api::Chat,
                json!({"messages": [{"role": "user", "content": "hi"}],
                               "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": schema}},
                                         {"type": "function", "function": {"name": "other"}}]}),
            ),
            (
                Api::Responses,
                json!({"input": "hi", "tools": [{"type": "web_search"},
                                    {"type": "function", "name": "get_weather", "parameters": schema}]}),
            ),
            (
                Api::Messages,
                json!({"messages": [{"role": "user", "content": "hi"}],
                                   "tools": [{"type": "web_search_20250305", "name": "web_search"},
                                             {"name": "get_weather", "input_schema": schema}]}),
            ),
            (
                Api::Gemini,
                json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
                                 "tools": [{"googleSearch": {}}, {"function_declarations": [{"name": "get_weather", "parameters": schema}]}]}),
            ),
        ];
        for (api, body) in bodies {
            let want = ToolCall {
                name: "get_weather".into(),
                arguments: r#"{"city":"mock","unit":"celsius"}"#.into(),
            };
            assert_eq!(
                decide_with(api, body.clone(), "tool-call/2"),
                Answer::Calls(vec![want.clone(), want]),
                "{api:?}"
            );
            assert_eq!(
                decide_with(api, body, "ok"),
                Answer::Words,
                "{api:?}: only with the directive"
            );
        }
        // No schema properties: the default arguments; no tools: words.
        let body = json!({"input": "hi", "tools": [{"type": "function", "name": "f"}]});
        assert_eq!(
            decide_with(Api::Responses, body, "tool-call"),
            Answer::Calls(vec![ToolCall {
                name: "f".into(),
                arguments: DEFAULT_ARGUMENTS.into()
            }])
        );
        assert_eq!(
            decide_with(Api::Responses, json!({"input": "hi"}), "tool-call"),
            Answer::Words
        );
    }

    #[test]
    fn a_named_tool_is_called_with_the_given_arguments_in_every_dialect() {
        let tools = |names: [&str; 2]| -> [(Api, Value); 4] {
            [
                (
                    Api::Chat,
                    json!({"messages": [{"role": "user", "content": "hi"}], "tools": [
                        {"type": "function", "function": {"name": names[0]}},
                        {"type": "function", "function": {"name": names[1]}}]}),
                ),
                (
                    Api::Responses,
                    json!({"input": "hi", "tools": [{"type": "function", "name": names[0]},
                        {"type": "namespace", "name": "ns", "description": "d", "tools": []},
                        {"type": "function", "name": names[1]}]}),
                ),
                (
                    Api::Messages,
                    json!({"messages": [{"role": "user", "content": "hi"}], "tools": [
                        {"name": names[0], "input_schema": {"type": "object"}},
                        {"name": names[1], "input_schema": {"type": "object"}}]}),
                ),
                (
                    Api::Gemini,
                    json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [
                        {"functionDeclarations": [{"name": names[0]}, {"name": names[1]}]}]}),
                ),
            ]
        };
        let scenario = "tool-call-to/Read/%7B%22file_path%22%3A%22a.txt%22%7D";
        for (api, body) in tools(["Bash", "Read"]) {
            let want = ToolCall {
                name: "Read".into(),
                arguments: r#"{"file_path":"a.txt"}"#.into(),
            };
            assert_eq!(decide_with(api, body, scenario), Answer::Calls(vec![want]), "{api:?}");
        }
        // No tool of that name: as usual (a model calls no tool it was not given).
        for (api, body) in tools(["Bash", "Write"]) {
            assert_eq!(decide_with(api, body, scenario), Answer::Words, "{api:?}");
        }
    }

    #[test]
    fn a_request_ending_with_tool_results_is_answered_with_them() {
        let said = |s: &str| Answer::Text(format!("The tool said: {s}"));
        let tools = json!([{"type": "function", "function": {"name": "get_weather"}}]);
        let chat = json!({"tools": tools, "messages": [{"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "a"}, {"id": "b"}]},
            {"role": "tool", "tool_call_id": "a", "content": "22C"},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "sunny"}]}]});
        assert_eq!(decide_with(Api::Chat, chat, "tool-call"), said("22C | sunny"));
        let messages = json!({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": []},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "22C"}]}]}]});
        assert_eq!(decide_with(Api::Messages, messages, "ok"), said("22C"));
        let responses = json!({"input": [{"type": "function_call", "call_id": "c"},
            {"type": "function_call_output", "call_id": "c", "output": "x".repeat(300)}]});
        assert_eq!(
            decide_with(Api::Responses, responses, "ok"),
            said(&"x".repeat(RESULT_CHARS))
        );
        let gemini = json!({"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f"}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"result": "22C"}}}]}]});
        assert_eq!(
            decide_with(Api::Gemini, gemini, "tool-call"),
            said(r#"{"result":"22C"}"#)
        );
        // Results earlier in the conversation are history, not the last turn.
        let chat = json!({"messages": [{"role": "tool", "content": "old"}, {"role": "user", "content": "hi"}]});
        assert_eq!(decide_with(Api::Chat, chat, "ok"), Answer::Words);
    }

    #[test]
    fn json_follows_the_schema() {
        let body = json!({"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": weather_schema()}}});
        assert_eq!(
            decide_with(Api::Chat, body, "json"),
            Answer::Text(r#"{"city":"mock","unit":"celsius"}"#.into())
        );
        let schema = json!({"type": "OBJECT", "properties": {"ok": {"type": "BOOLEAN"}, "n": {"type": "NUMBER"},
            "tags": {"type": "ARRAY"}, "inner": {"type": "OBJECT", "properties": {"x": {"type": ["null", "string"]}}}}});
        let body = json!({"generationConfig": {"responseMimeType": "application/json", "responseSchema": schema}});
        let Answer::Text(text) = decide_with(Api::Gemini, body, "json") else {
            panic!()
        };
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v, json!({"ok": true, "n": 1, "tags": [], "inner": {"x": "mock"}}));
        assert_eq!(
            decide_with(Api::Responses, json!({"input": "x"}), "json"),
            Answer::Text(DEFAULT_JSON.into())
        );
    }

    #[test]
    fn images_are_counted_where_each_dialect_puts_them() {
        let chat = json!({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
            {"type": "image_url", "image_url": {"url": "u"}}, {"type": "image_url", "image_url": {"url": "v"}}]}]});
        assert_eq!(
            decide_with(Api::Chat, chat, "echo-images"),
            Answer::Text("images: 2".into())
        );
        let messages = json!({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
            "content": [{"type": "image", "source": {}}]}, {"type": "image", "source": {}}]}]});
        assert_eq!(count_images(Api::Messages, &messages), 2);
        let responses = json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]});
        assert_eq!(count_images(Api::Responses, &responses), 1);
        let gemini = json!({"contents": [{"parts": [{"inlineData": {"mimeType": "image/png"}},
            {"file_data": {"mime_type": "image/jpeg"}}, {"inlineData": {"mimeType": "application/pdf"}}]}]});
        assert_eq!(count_images(Api::Gemini, &gemini), 2);
        assert_eq!(
            decide_with(Api::Gemini, gemini, "echo-images"),
            Answer::Text("images: 2".into())
        );
    }
}
