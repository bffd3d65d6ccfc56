//! Google Gemini requests (`models/<model>:generateContent` and `:streamGenerateContent`): only
//! the request's own fields (the model is in the path), `contents` of `user`/`model` turns whose
//! parts each carry exactly one kind of data, function responses right after the turn of calls
//! they answer (as many of them), function declarations whose `parameters` use Google's schema
//! subset, and the known `generationConfig` keys.

use super::{name_ok, Check, Node};

const FIELDS: &[&str] = &[
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "safetySettings",
    "generationConfig",
    "cachedContent",
];

/// The one-of `data` of a part.
const DATA: &[&str] = &[
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
];

const PART_FIELDS: &[&str] = &[
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
    "thought",
    "thoughtSignature",
    "videoMetadata",
    "partMetadata",
    "mediaResolution",
];

const TOOL_KINDS: &[&str] = &[
    "functionDeclarations",
    "googleSearch",
    "googleSearchRetrieval",
    "codeExecution",
    "urlContext",
    "fileSearch",
    "computerUse",
    "googleMaps",
    "enterpriseWebSearch",
];

/// Google's `Schema` (an OpenAPI subset): JSON Schema keywords beyond it (`additionalProperties`,
/// `$schema`, `const`…) are unknown names; they belong in `parametersJsonSchema`.
const SCHEMA_FIELDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "items",
    "minimum",
    "maximum",
];
const SCHEMA_TYPES: &[&str] = &[
    "TYPE_UNSPECIFIED",
    "STRING",
    "NUMBER",
    "INTEGER",
    "BOOLEAN",
    "ARRAY",
    "OBJECT",
    "NULL",
];

const GENERATION_FIELDS: &[&str] = &[
    "temperature",
    "topP",
    "topK",
    "candidateCount",
    "maxOutputTokens",
    "stopSequences",
    "responseMimeType",
    "responseSchema",
    "responseJsonSchema",
    "thinkingConfig",
    "presencePenalty",
    "frequencyPenalty",
    "seed",
    "responseLogprobs",
    "logprobs",
    "responseModalities",
    "mediaResolution",
    "speechConfig",
    "imageConfig",
    "enableEnhancedCivicAnswers",
];

pub(super) fn check(body: &Node) -> Check {
    body.only(FIELDS)?;
    contents(&body.req("contents")?)?;
    body.opt("systemInstruction", system)?;
    body.opt("tools", tools)?;
    body.opt("toolConfig", tool_config)?;
    body.opt("generationConfig", generation_config)?;
    body.opt("safetySettings", |list| {
        for s in list.array()? {
            s.object()?;
            s.only(&["category", "threshold", "method"])?;
            s.req("category")?.str()?;
            s.req("threshold")?.str()?;
        }
        Ok(())
    })?;
    body.opt("cachedContent", Node::str)?;
    Ok(())
}

/// The turns; a turn of function responses answers the turn of calls just before it, one
/// response per call.
fn contents(list: &Node) -> Check {
    let mut calls_before = 0;
    for turn in list.nonempty_array()? {
        turn.object()?;
        turn.only(&["role", "parts"])?;
        if let Some(role) = turn.get("role") {
            if !matches!(role.str()?, "user" | "model") {
                return role.invalid("Please use a valid role: user, model.");
            }
        }
        let (mut calls, mut responses) = (0, 0);
        for p in turn.req("parts")?.nonempty_array()? {
            match part(&p)? {
                "functionCall" => calls += 1,
                "functionResponse" => responses += 1,
                _ => {}
            }
        }
        if responses > 0 && calls_before == 0 {
            return turn
                .invalid("Please ensure that function response turn comes immediately after a function call turn.");
        }
        if responses > 0 && responses != calls_before {
            return turn.invalid(format!(
                "Please ensure that the number of function response parts ({responses}) is equal to the number of function call parts of the function call turn ({calls_before})."
            ));
        }
        calls_before = calls;
    }
    Ok(())
}

/// A part: exactly one kind of data (returned), plus optional thought markers.
fn part(p: &Node) -> Check<&'static str> {
    p.object()?;
    p.only(PART_FIELDS)?;
    let set: Vec<&'static str> = DATA.iter().copied().filter(|d| p.get(d).is_some()).collect();
    let data = match set.as_slice() {
        [one] => *one,
        [] => return p.invalid("required oneof field 'data' must have one initialized field"),
        [first, second, ..] => {
            return p.invalid(format!(
                "oneof field 'data' is already set. Cannot set '{second}' beside '{first}'"
            ))
        }
    };
    let d = p.req(data)?;
    match data {
        "text" => {
            d.str()?;
        }
        "inlineData" => {
            d.object()?;
            d.only(&["mimeType", "data", "displayName"])?;
            d.req("mimeType")?.str()?;
            d.req("data")?.str()?;
        }
        "fileData" => {
            d.object()?;
            d.only(&["mimeType", "fileUri", "displayName"])?;
            d.opt("mimeType", Node::str)?;
            d.req("fileUri")?.str()?;
        }
        "functionCall" => {
            d.object()?;
            d.only(&["id", "name", "args", "partialArgs", "willContinue"])?;
            d.req("name")?.str()?;
            d.opt("args", Node::object)?;
        }
        "functionResponse" => {
            d.object()?;
            d.only(&["id", "name", "response", "parts", "willContinue", "scheduling"])?;
            d.req("name")?.str()?;
            d.req("response")?.object()?;
        }
        _ => {
            d.object()?;
        }
    }
    p.opt("thought", Node::bool)?;
    p.opt("thoughtSignature", Node::str)?;
    Ok(data)
}

/// `systemInstruction`: text parts (the role, if any, is ignored).
fn system(s: &Node) -> Check {
    s.object()?;
    s.only(&["role", "parts"])?;
    for p in s.req("parts")?.nonempty_array()? {
        p.object()?;
        p.only(&["text"])?;
        p.req("text")?.str()?;
    }
    Ok(())
}

fn tools(list: &Node) -> Check {
    for t in list.array()? {
        t.object()?;
        t.only(TOOL_KINDS)?;
        t.opt("functionDeclarations", |decls| {
            for f in decls.array()? {
                function_declaration(&f)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

fn function_declaration(f: &Node) -> Check {
    f.object()?;
    f.only(&[
        "name",
        "description",
        "parameters",
        "parametersJsonSchema",
        "response",
        "responseJsonSchema",
        "behavior",
    ])?;
    let name = f.req("name")?;
    let s = name.str()?;
    if !s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') || !name_ok(s, 128, &['.', ':']) {
        return name.invalid("Invalid function name. Must start with a letter or an underscore. Must be alphameric (a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a maximum length of 128.");
    }
    f.opt("description", Node::str)?;
    if let (Some(p), Some(_)) = (f.get("parameters"), f.get("parametersJsonSchema")) {
        return p.invalid("parameters and parametersJsonSchema cannot both be set");
    }
    f.opt("parameters", schema)?;
    f.opt("response", schema)?;
    Ok(())
}

/// A `Schema` (Google's subset of OpenAPI), recursively.
fn schema(s: &Node) -> Check {
    s.object()?;
    s.only(SCHEMA_FIELDS)?;
    s.opt("type", |t| {
        let kind = t.str()?;
        if SCHEMA_TYPES.iter().any(|k| k.eq_ignore_ascii_case(kind)) {
            return Ok(());
        }
        t.invalid(format!(
            "Invalid value ('{kind}'): expected one of {}",
            SCHEMA_TYPES.join(", ")
        ))
    })?;
    s.opt("properties", |props| {
        props.object()?;
        for (key, v) in props.v.as_object().into_iter().flatten() {
            schema(&props.child(v, props.path.key(key)))?;
        }
        Ok(())
    })?;
    s.opt("items", schema)?;
    s.opt("anyOf", |list| list.array()?.iter().try_for_each(schema))?;
    s.opt("required", Node::strings)?;
    Ok(())
}

fn tool_config(c: &Node) -> Check {
    c.object()?;
    c.only(&["functionCallingConfig", "retrievalConfig"])?;
    c.opt("functionCallingConfig", |f| {
        f.object()?;
        f.only(&["mode", "allowedFunctionNames"])?;
        f.opt("mode", |m| {
            m.one_of(&["MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED"])
        })?;
        f.opt("allowedFunctionNames", Node::strings).map(drop)
    })?;
    Ok(())
}

fn generation_config(g: &Node) -> Check {
    g.object()?;
    g.only(GENERATION_FIELDS)?;
    g.opt("temperature", |t| t.number(0.0, 2.0))?;
    g.opt("topP", |t| t.number(0.0, 1.0))?;
    g.opt("topK", |t| t.int(0))?;
    g.opt("candidateCount", |n| n.int(1))?;
    g.opt("maxOutputTokens", |n| n.int(1))?;
    g.opt("stopSequences", |s| {
        if s.strings()?.len() > 5 {
            return s.invalid("at most 5 stop sequences are allowed");
        }
        Ok(())
    })?;
    let mime = g.opt("responseMimeType", Node::str)?;
    g.opt("responseSchema", schema)?;
    for (key, mimes) in [
        ("responseSchema", &["application/json", "text/x.enum"][..]),
        ("responseJsonSchema", &["application/json"][..]),
    ] {
        match g.get(key) {
            Some(s) if !mime.is_some_and(|m| mimes.contains(&m)) => {
                return s.invalid(format!(
                    "a response schema needs responseMimeType {}",
                    mimes.join(" or ")
                ));
            }
            _ => {}
        }
    }
    if let (Some(_), Some(json)) = (g.get("responseSchema"), g.get("responseJsonSchema")) {
        return json.invalid("responseSchema and responseJsonSchema cannot both be set");
    }
    g.opt("thinkingConfig", |t| {
        t.object()?;
        t.only(&["thinkingBudget", "includeThoughts", "thinkingLevel"])?;
        t.opt("thinkingBudget", |b| b.int(-1))?;
        t.opt("includeThoughts", Node::bool)?;
        t.opt("thinkingLevel", |l| {
            let level = l.str()?;
            if ["MINIMAL", "LOW", "MEDIUM", "HIGH"]
                .iter()
                .any(|k| k.eq_ignore_ascii_case(level))
            {
                return Ok(());
            }
            l.invalid(format!(
                "Invalid value ('{level}'): expected one of minimal, low, medium, high"
            ))
        })
        .map(drop)
    })?;
    g.opt("responseModalities", Node::strings)?;
    g.opt("seed", |s| s.int(i64::MIN))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::scenario::Api;
    use crate::validate::{check, message};
    use serde_json::{json, Value};

    fn ok(body: Value) {
        if let Err(p) = check(Api::Gemini, &Ok(body.clone())) {
            panic!("{body} rejected: {}", message(Api::Gemini, &p));
        }
    }

    fn rejected(body: Value, field: &str) -> String {
        let p = check(Api::Gemini, &Ok(body.clone())).expect_err(&format!("{body} should be rejected"));
        let msg = message(Api::Gemini, &p);
        assert!(msg.contains(field), "{msg} should name {field}");
        msg
    }

    fn with(extra: Value) -> Value {
        let mut b = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    }

    fn turns(turns: Value) -> Value {
        with(json!({"contents": turns}))
    }

    fn call() -> Value {
        json!({"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}})
    }

    fn response() -> Value {
        json!({"functionResponse": {"name": "get_weather", "response": {"result": "22C"}}})
    }

    #[test]
    fn realistic_bodies_pass() {
        ok(with(json!({})));
        ok(with(
            json!({"generationConfig": {"maxOutputTokens": 1024, "stopSequences": ["END"], "temperature": 0.2,
                                            "thinkingConfig": {"thinkingBudget": -1, "includeThoughts": true}}}),
        ));
        ok(turns(json!([
            {"role": "user", "parts": [{"text": "weather?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBOR"}}]},
            {"role": "model", "parts": [call(), call()]},
            {"role": "user", "parts": [response(), response()]}])));
        // snake_case keys, as the REST API takes them.
        ok(
            json!({"contents": [{"parts": [{"text": "hi"}, {"inline_data": {"mime_type": "image/jpeg", "data": "x"}}]}],
                  "system_instruction": {"parts": [{"text": "be brief"}]},
                  "generation_config": {"max_output_tokens": 5, "response_mime_type": "application/json",
                                        "response_json_schema": {"type": "object", "additionalProperties": false}},
                  "tools": [{"function_declarations": [{"name": "get_weather",
                      "parameters": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}, "required": ["city"]}}]},
                            {"google_search": {}}],
                  "tool_config": {"function_calling_config": {"mode": "ANY", "allowed_function_names": ["get_weather"]}}}),
        );
    }

    #[test]
    fn top_level_and_generation_config() {
        assert_eq!(
            rejected(with(json!({"model": "gemini"})), "\"model\""),
            "Invalid JSON payload received. Unknown name \"model\": Cannot find field."
        );
        rejected(with(json!({"messages": []})), "\"messages\"");
        rejected(json!({}), "contents");
        rejected(with(json!({"contents": []})), "contents");
        rejected(
            with(json!({"generationConfig": {"max_tokens": 5}})),
            "Unknown name \"max_tokens\" at 'generationConfig'",
        );
        rejected(
            with(json!({"generationConfig": {"maxOutputTokens": 0}})),
            "generationConfig.maxOutputTokens",
        );
        rejected(
            with(json!({"generationConfig": {"stopSequences": ["a", "b", "c", "d", "e", "f"]}})),
            "generationConfig.stopSequences",
        );
        rejected(
            with(json!({"generationConfig": {"responseJsonSchema": {"type": "object"}}})),
            "generationConfig.responseJsonSchema",
        );
        rejected(
            with(
                json!({"generationConfig": {"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"},
                                             "responseJsonSchema": {"type": "object"}}}),
            ),
            "generationConfig.responseJsonSchema",
        );
        rejected(
            with(json!({"generationConfig": {"thinkingConfig": {"budget": 5}}})),
            "\"budget\"",
        );
        rejected(
            with(json!({"toolConfig": {"functionCallingConfig": {"mode": "REQUIRED"}}})),
            "toolConfig.functionCallingConfig.mode",
        );
        rejected(
            with(json!({"systemInstruction": {"parts": [{"inlineData": {}}]}})),
            "\"inlineData\"",
        );
        rejected(with(json!({"systemInstruction": "be brief"})), "systemInstruction");
    }

    #[test]
    fn turns_and_parts() {
        rejected(
            turns(json!([{"role": "assistant", "parts": [{"text": "x"}]}])),
            "contents[0].role",
        );
        rejected(turns(json!([{"role": "user", "parts": []}])), "contents[0].parts");
        rejected(
            turns(json!([{"role": "user", "content": "x"}])),
            "Unknown name \"content\" at 'contents[0]'",
        );
        rejected(
            turns(json!([{"role": "user", "parts": [{}]}])),
            "contents[0].parts[0]: required oneof",
        );
        rejected(
            turns(
                json!([{"role": "user", "parts": [{"text": "a", "inlineData": {"mimeType": "image/png", "data": "x"}}]}]),
            ),
            "contents[0].parts[0]",
        );
        rejected(
            turns(json!([{"role": "user", "parts": [{"inlineData": {"data": "x"}}]}])),
            "contents[0].parts[0].inlineData.mimeType",
        );
        rejected(
            turns(json!([{"role": "user", "parts": [{"type": "text", "text": "x"}]}])),
            "Unknown name \"type\"",
        );
        let mut string_args = call();
        string_args["functionCall"]["args"] = json!("{\"city\":\"Paris\"}");
        rejected(
            turns(json!([{"role": "user", "parts": [{"text": "x"}]}, {"role": "model", "parts": [string_args]}])),
            "contents[1].parts[0].functionCall.args",
        );
        let mut no_response = response();
        no_response["functionResponse"]
            .as_object_mut()
            .unwrap()
            .remove("response");
        rejected(
            turns(json!([{"role": "model", "parts": [call()]}, {"role": "user", "parts": [no_response]}])),
            "contents[1].parts[0].functionResponse.response",
        );
    }

    #[test]
    fn function_responses_answer_the_calls_just_made() {
        rejected(
            turns(json!([{"role": "user", "parts": [response()]}])),
            "contents[0]: Please ensure that function response turn",
        );
        rejected(
            turns(json!([{"role": "model", "parts": [call(), call()]}, {"role": "user", "parts": [response()]}])),
            "contents[1]: Please ensure that the number of function response parts",
        );
        ok(turns(
            json!([{"role": "user", "parts": [{"text": "x"}]}, {"role": "model", "parts": [call()]},
                        {"role": "user", "parts": [response()]}]),
        ));
    }

    #[test]
    fn tools_and_schemas() {
        // An OpenAI tool is a translation bug here.
        rejected(
            with(json!({"tools": [{"type": "function", "function": {"name": "f"}}]})),
            "at 'tools[0]': Cannot find field",
        );
        rejected(
            with(json!({"tools": [{"functionDeclarations": [{"description": "x"}]}]})),
            "tools[0].functionDeclarations[0].name",
        );
        rejected(
            with(json!({"tools": [{"functionDeclarations": [{"name": "1f"}]}]})),
            "tools[0].functionDeclarations[0].name",
        );
        rejected(
            with(
                json!({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object", "additionalProperties": false}}]}]}),
            ),
            "Unknown name \"additionalProperties\" at 'tools[0].functionDeclarations[0].parameters'",
        );
        rejected(
            with(
                json!({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object",
                "properties": {"city": {"type": "string", "const": "Paris"}}}}]}]}),
            ),
            "Unknown name \"const\" at 'tools[0].functionDeclarations[0].parameters.properties.city'",
        );
        rejected(
            with(
                json!({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": "object"},
                                                             "parametersJsonSchema": {"type": "object"}}]}]}),
            ),
            "tools[0].functionDeclarations[0].parameters",
        );
        ok(with(json!({"tools": [{"functionDeclarations": [{"name": "f",
            "parametersJsonSchema": {"type": "object", "additionalProperties": false, "$schema": "x"}}]}]})));
    }
}
