//! Google's JSON takes every field of a request under two names — lowerCamelCase (`fileData`)
//! and the proto's snake_case (`file_data`) — and means the same by both. Switchyard reads one: a
//! Gemini body is respelled in camelCase once, when it is parsed (`camel_case`), so the hold's
//! walk for input the body only names, the output limits, the translator and the body sent
//! upstream all see each field under one name, and no reader can miss a spelling (SPEC §18a).
//!
//! Only field names are respelled, never the client's data: the keys inside a function call's
//! `args`, a function response's `response`, a JSON schema, `labels`, part metadata and a schema's
//! `example` / `default`, and the property names of a schema's `properties`, stay as written.
//! A key written with escapes (`file\u005fdata`) is read as the name it spells.

use std::borrow::Cow;

use serde_json::value::RawValue;

use crate::dialects::body::Body;

/// Fields whose value is the client's data (a `Struct`, a map, a JSON schema): no key in it is a
/// field name.
const DATA: [&str; 11] = [
    "args",
    "response",
    "parametersJsonSchema",
    "responseJsonSchema",
    "_responseJsonSchema",
    "labels",
    "partMetadata",
    "example",
    "default",
    "enum",
    "const",
];

/// Fields whose value maps names the client chose to messages (a schema's `properties`).
const NAMES: [&str; 1] = ["properties"];

/// What the keys of an object are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keys {
    /// Field names of Google's messages: respelled.
    Fields,
    /// Names the client chose, each naming a message: kept, their values respelled.
    Names,
    /// The client's data: kept, and everything inside it.
    Data,
}

impl Keys {
    /// What the keys inside the value of `name` are, in an object whose keys are `self`.
    fn of_value(self, name: &str) -> Keys {
        match self {
            Keys::Data => Keys::Data,
            Keys::Names => Keys::Fields,
            Keys::Fields if DATA.contains(&name) => Keys::Data,
            Keys::Fields if NAMES.contains(&name) => Keys::Names,
            Keys::Fields => Keys::Fields,
        }
    }
}

/// `body` with every field name in camelCase, and how many bytes shorter that made it.
pub(crate) fn camel_case(body: Body) -> (Body, usize) {
    let mut saved = 0;
    let body = body.respell(|key, value| {
        let name = camel(&key).into_owned();
        saved += key.len().saturating_sub(name.len());
        let value = respell(value, Keys::Fields.of_value(&name), &mut saved);
        (name, value)
    });
    (body, saved)
}

/// A proto field name's lowerCamelCase (`file_data` → `fileData`); any other key as it is.
pub(crate) fn camel(key: &str) -> Cow<'_, str> {
    let mut words = key.split('_');
    let proto = key.contains('_')
        && key.starts_with(|c: char| c.is_ascii_lowercase())
        && key
            .split('_')
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
    if !proto {
        return Cow::Borrowed(key);
    }
    let mut out = String::with_capacity(key.len());
    out.push_str(words.next().unwrap_or_default());
    for word in words {
        let (first, rest) = word.split_at(1);
        out.push_str(&first.to_ascii_uppercase());
        out.push_str(rest);
    }
    Cow::Owned(out)
}

/// One open object or array of the value being respelled.
struct Open {
    object: bool,
    /// An object's keys, or an array's elements' keys.
    keys: Keys,
    /// The keys of the object's current value.
    value: Keys,
    /// The next string in the object is a key.
    want_key: bool,
}

/// A raw JSON value (valid: it was parsed) with its field names respelled, read once from left to
/// right with a stack of the open objects; the value itself when no name changes.
fn respell(raw: Box<RawValue>, keys: Keys, saved: &mut usize) -> Box<RawValue> {
    let text = raw.get();
    if keys == Keys::Data || !text.bytes().any(|b| b == b'_' || b == b'\\') {
        return raw;
    }
    let bytes = text.as_bytes();
    let mut out = String::new();
    let mut copied = 0;
    let mut stack: Vec<Open> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let end = string_end(bytes, i);
                if let Some(open) = stack.last_mut().filter(|o| o.object && o.want_key) {
                    open.want_key = false;
                    let written = text.get(i + 1..end.saturating_sub(1)).unwrap_or_default();
                    let key: Cow<str> = match written.contains('\\') {
                        true => serde_json::from_str::<String>(text.get(i..end).unwrap_or_default())
                            .map(Cow::Owned)
                            .unwrap_or(Cow::Borrowed(written)),
                        false => Cow::Borrowed(written),
                    };
                    let name = match open.keys {
                        Keys::Fields => camel(&key).into_owned(),
                        Keys::Names | Keys::Data => key.into_owned(),
                    };
                    open.value = open.keys.of_value(&name);
                    if name != written && open.keys == Keys::Fields {
                        let quoted = serde_json::to_string(&name).unwrap_or_default();
                        out.push_str(&text[copied..i]);
                        out.push_str(&quoted);
                        copied = end;
                        *saved += (end - i).saturating_sub(quoted.len());
                    }
                }
                i = end;
                continue;
            }
            c @ (b'{' | b'[') => {
                let inner = match stack.last() {
                    None => keys,
                    Some(o) if o.object => o.value,
                    Some(o) => o.keys,
                };
                stack.push(Open {
                    object: c == b'{',
                    keys: inner,
                    value: inner,
                    want_key: true,
                });
            }
            b'}' | b']' => {
                stack.pop();
            }
            b',' => {
                if let Some(open) = stack.last_mut() {
                    open.want_key = true;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if copied == 0 {
        return raw;
    }
    out.push_str(&text[copied..]);
    RawValue::from_string(out).unwrap_or(raw)
}

/// The index just past the string that opens at `start` (a `"`).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut j = start + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'"' => return j + 1,
            _ => j += 1,
        }
    }
    bytes.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Api;
    use crate::dialects::{parse_request, ClientRequest};
    use proptest::prelude::*;
    use serde_json::{json, Map, Value};

    fn parse(body: &Value) -> ClientRequest {
        parse_request(Api::Gemini, body.to_string().as_bytes(), Some(("gem", false))).unwrap()
    }

    /// Everything a reader of the request can see: the hold's inputs and the body itself.
    fn seen(r: &ClientRequest) -> (Option<String>, Option<u64>, u64, bool, u64, Vec<u8>) {
        (
            r.external_input.clone(),
            r.max_tokens,
            r.completions,
            r.stop_sequences,
            r.held_input_tokens(1_000_000),
            r.upstream_body("m"),
        )
    }

    /// `fileData` → `file_data`.
    fn snake(name: &str) -> String {
        let mut out = String::new();
        for c in name.chars() {
            if c.is_ascii_uppercase() {
                out.push('_');
                out.push(c.to_ascii_lowercase());
            } else {
                out.push(c);
            }
        }
        out
    }

    /// `v` with the field names `pick` chooses (by their order in the walk) in snake_case; data
    /// keys (`args`, `properties`' names…) as they are.
    fn snake_some(v: &Value, keys: Keys, pick: &mut impl FnMut() -> bool) -> Value {
        match v {
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, child) in map {
                    let inner = keys.of_value(k);
                    let k = match keys == Keys::Fields && pick() {
                        true => snake(k),
                        false => k.clone(),
                    };
                    out.insert(k, snake_some(child, inner, pick));
                }
                Value::Object(out)
            }
            Value::Array(items) => Value::Array(items.iter().map(|i| snake_some(i, keys, pick)).collect()),
            other => other.clone(),
        }
    }

    /// A Gemini body of the parts a request can hold, chosen by `seed`.
    fn body_of(seed: u64) -> Value {
        let bit = |n: u32| seed >> n & 1 == 1;
        let mut parts = vec![json!({"text": "hello"})];
        if bit(0) {
            parts.push(json!({"fileData": {"mimeType": "video/mp4", "fileUri": "gs://b/long.mp4"}}));
        }
        if bit(1) {
            parts.push(json!({"inlineData": {"mimeType": "image/png", "data": "iVBOR"}}));
        }
        let mut contents = vec![json!({"role": "user", "parts": parts})];
        if bit(2) {
            contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": "f", "args": {"user_id": 1, "file_data": 2}}, "thoughtSignature": "c2ln"}]}));
            contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {"output": "ok", "mime_type": "x"}}}]}));
        }
        let mut body = json!({"contents": contents});
        if bit(3) {
            body["systemInstruction"] = json!({"parts": [{"text": "be brief"}]});
        }
        if bit(4) {
            body["cachedContent"] = json!("cachedContents/abc");
        }
        if bit(5) {
            body["generationConfig"] = json!({"maxOutputTokens": 40 + (seed >> 16) % 50, "candidateCount": 1 + (seed >> 24) % 3,
                "stopSequences": ["END"], "responseMimeType": "application/json",
                "responseSchema": {"type": "OBJECT", "properties": {"first_name": {"type": "STRING", "maxLength": 3}}},
                "thinkingConfig": {"thinkingBudget": 0, "includeThoughts": false}});
        }
        if bit(6) {
            body["tools"] = json!([{"functionDeclarations": [{"name": "f", "parameters": {"type": "OBJECT",
                "properties": {"user_id": {"type": "INTEGER"}}, "propertyOrdering": ["user_id"]}}]}]);
            body["toolConfig"] = json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}});
        }
        if bit(7) {
            body["safetySettings"] = json!([{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]);
            body["labels"] = json!({"team_name": "x"});
        }
        body
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        /// SPEC §18a: every spelling Google takes counts as its camelCase form — the input the
        /// body only names, the limits, the hold and the body every reader and route gets.
        #[test]
        fn any_field_names_in_snake_case_change_nothing(seed in any::<u64>(), picks in any::<u64>()) {
            let body = body_of(seed);
            let mut n = 0;
            let mut pick = || { n += 1; picks >> (n % 64) & 1 == 1 };
            let snaked = snake_some(&body, Keys::Fields, &mut pick);
            let (camel, other) = (parse(&body), parse(&snaked));
            prop_assert_eq!(seen(&camel), seen(&other), "{} vs {}", body, snaked);
            let named_outside = seed & 1 == 1 || seed >> 4 & 1 == 1;
            prop_assert_eq!(camel.external_input.is_some(), named_outside, "{}", body);
            let read = |r: &ClientRequest| crate::dialects::neutral::request::read(Api::Gemini, r.body()).map(|n| n.turns.len()).map_err(|e| e.field);
            prop_assert_eq!(read(&camel), read(&other));
        }
    }

    #[test]
    fn each_spelling_of_input_held_elsewhere_is_found() {
        let video = json!({"contents": [{"parts": [{"text": "what happens?"},
                                                   {"file_data": {"mime_type": "video/mp4", "file_uri": "gs://b/long.mp4"}}]}]});
        assert_eq!(parse(&video).external_input.as_deref(), Some("contents[0].parts[1]"));
        let escaped = r#"{"contents":[{"parts":[{"file\u005fdata":{"file_uri":"gs://b/o"}}]}]}"#;
        let r = parse_request(Api::Gemini, escaped.as_bytes(), Some(("gem", false))).unwrap();
        assert_eq!(
            r.external_input.as_deref(),
            Some("contents[0].parts[0]"),
            "an escaped name is the name it spells"
        );
        let cached = json!({"contents": [{"parts": [{"text": "hi"}]}], "cached_content": "cachedContents/1"});
        assert_eq!(parse(&cached).external_input.as_deref(), Some("cachedContent"));
        let config = json!({"contents": [{"parts": [{"text": "hi"}]}],
                            "generation_config": {"max_output_tokens": 7, "candidate_count": 3, "stop_sequences": ["x"]}});
        let r = parse(&config);
        assert_eq!((r.max_tokens, r.completions, r.stop_sequences), (Some(7), 3, true));
        // Data keeps its keys: a call's arguments, a response, a schema's property names.
        let data = json!({"contents": [{"parts": [{"function_call": {"name": "f", "args": {"file_data": 1}}}]}],
                          "tools": [{"function_declarations": [{"name": "f", "parameters": {"properties": {"user_id": {"max_length": 2}}}}]}]});
        let sent: Value = serde_json::from_slice(&parse(&data).upstream_body("m")).unwrap();
        assert_eq!(
            sent["contents"][0]["parts"][0]["functionCall"]["args"],
            json!({"file_data": 1})
        );
        assert_eq!(
            sent["tools"][0]["functionDeclarations"][0]["parameters"]["properties"],
            json!({"user_id": {"maxLength": 2}})
        );
        assert_eq!(camel("file_data"), "fileData");
        assert_eq!(camel("_x_y"), "_x_y");
        assert_eq!(camel("Not_Proto"), "Not_Proto");
        assert_eq!(camel("plain"), "plain");
    }
}
