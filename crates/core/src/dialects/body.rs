//! A request body as its top-level fields, each kept as the client's raw JSON text (SPEC §18).
//!
//! Parsing a body into a full `serde_json::Value` tree costs tens of bytes per JSON value: 10 MiB
//! of `[0,0,0,…]` would become hundreds of megabytes on wasm32, past an isolate's 128 MB, and take
//! every other request of the isolate down with it. So the body is read once into its top-level
//! fields, each field's value kept as raw text (validated, never built into a tree); the few
//! small fields Switchyard reads (`model`, `stream`, the output limits, `stream_options`,
//! `provider`, `generationConfig`…) are decoded one at a time and must be small
//! ([`SMALL_FIELD_BYTES`]); the large ones (`messages`, `input`, `contents`, `tools`) are only
//! ever scanned ([`Body::shape`], and the walks in `external.rs` and `conversation`), and go
//! upstream as the bytes the client sent, with `model` replaced.
//!
//! Invariants: fields keep the client's order; a key given twice keeps its last value (as a JSON
//! object read into a map would); every value is valid JSON.
//!
//! Work is linear in the body, whatever its shape (SPEC §18a): before anything else one pass over
//! the bytes bounds how deep arrays and objects nest ([`MAX_DEPTH`], in every field, read or not —
//! the body goes upstream as bytes, so a provider would otherwise be the one to fail on it); and a
//! body has at most [`MAX_FIELDS`] top-level keys, so finding a field (and a repeated key) is a
//! search among a bounded few.

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

use crate::error::ApiError;

/// How deep arrays and objects may nest, the body's own object counting as one: what
/// `serde_json` allows a value it builds (and what Switchyard answered when it built the body as
/// one), far beyond any real request.
pub const MAX_DEPTH: usize = 128;

/// How many top-level keys a body may have (repeated keys counted each time): every API's request
/// has a few dozen fields at most.
pub const MAX_FIELDS: usize = 256;

/// The largest field decoded whole: a setting, never content (32 K values at most).
pub const SMALL_FIELD_BYTES: usize = 64 * 1024;

/// What a field's value is, read from its first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    Absent,
    Null,
    EmptyArray,
    Array,
    EmptyString,
    String,
    Object,
    /// A number or a boolean.
    Scalar,
}

/// The top-level fields of a JSON object body, in order, values as raw JSON.
#[derive(Debug, Clone)]
pub struct Body {
    fields: Vec<(String, Box<RawValue>)>,
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        self.fields.len() == other.fields.len()
            && self
                .fields
                .iter()
                .zip(&other.fields)
                .all(|((k, v), (k2, v2))| k == k2 && v.get() == v2.get())
    }
}

impl Body {
    /// Reads a JSON object body into its fields (no value is built into a tree).
    pub fn parse(bytes: &[u8]) -> Result<Body, ApiError> {
        check_depth(bytes)?;
        let mut de = serde_json::Deserializer::from_slice(bytes);
        let fields = de
            .deserialize_any(FieldsVisitor)
            .and_then(|fields| de.end().map(|()| fields))
            .map_err(|e| match e.classify() {
                serde_json::error::Category::Data if e.to_string().starts_with(TOO_MANY) => ApiError::invalid(
                    format!("Request body has more than {MAX_FIELDS} top-level fields."),
                    None,
                ),
                serde_json::error::Category::Data => ApiError::invalid("Request body must be a JSON object.", None),
                _ => ApiError::invalid(format!("Request body is not valid JSON: {e}."), None),
            })?;
        Ok(Body { fields })
    }

    /// A body from a JSON value (tests, and requests Switchyard builds itself).
    pub fn from_value(value: &Value) -> Result<Body, ApiError> {
        let bytes = serde_json::to_vec(value).map_err(|_| ApiError::invalid("Unwritable body.", None))?;
        Body::parse(&bytes)
    }

    /// Every field in the client's order, values as raw JSON (translation reads each one, SPEC §19).
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&str, &RawValue)> {
        self.fields.iter().map(|(k, v)| (k.as_str(), v.as_ref()))
    }

    pub fn raw(&self, name: &str) -> Option<&RawValue> {
        self.fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_ref())
    }

    /// What the field holds, without decoding it.
    pub fn shape(&self, name: &str) -> Shape {
        let Some(raw) = self.raw(name) else {
            return Shape::Absent;
        };
        let text = raw.get().trim_start();
        let inner = |open: char, close: char| {
            text.strip_prefix(open)
                .is_some_and(|rest| rest.trim_start().starts_with(close))
        };
        match text.chars().next() {
            Some('n') => Shape::Null,
            Some('[') if inner('[', ']') => Shape::EmptyArray,
            Some('[') => Shape::Array,
            Some('"') if text.starts_with("\"\"") => Shape::EmptyString,
            Some('"') => Shape::String,
            Some('{') => Shape::Object,
            _ => Shape::Scalar,
        }
    }

    /// A small field decoded (`None` when absent): a field past [`SMALL_FIELD_BYTES`] is a 400
    /// naming it — settings are small, and a large one is a tree Switchyard will not build.
    pub fn small(&self, name: &str) -> Result<Option<Value>, ApiError> {
        let Some(raw) = self.raw(name) else {
            return Ok(None);
        };
        if raw.get().len() > SMALL_FIELD_BYTES {
            return Err(ApiError::invalid(
                format!("`{name}` is too large (at most {} KiB).", SMALL_FIELD_BYTES / 1024),
                Some(name),
            ));
        }
        serde_json::from_str(raw.get())
            .map(Some)
            .map_err(|_| ApiError::invalid(format!("`{name}` is not valid JSON."), Some(name)))
    }

    /// A small field if it is one, else nothing (for fields read only as hints).
    pub fn hint(&self, name: &str) -> Option<Value> {
        self.small(name).ok().flatten()
    }

    /// Sets a field (replacing it in place, or appending it).
    pub fn set(&mut self, name: &str, value: &Value) {
        let Ok(raw) = serde_json::value::to_raw_value(value) else {
            return; // a Value always serialises
        };
        match self.fields.iter_mut().find(|(k, _)| k == name) {
            Some((_, v)) => *v = raw,
            None => self.fields.push((name.to_string(), raw)),
        }
    }

    /// The body with each field's key and value respelled by `f` (a dialect's one spelling of
    /// its field names); a key made equal to an earlier one replaces its value, as a repeated key
    /// does.
    pub(crate) fn respell(self, mut f: impl FnMut(String, Box<RawValue>) -> (String, Box<RawValue>)) -> Body {
        let mut fields: Vec<(String, Box<RawValue>)> = Vec::with_capacity(self.fields.len());
        let mut at: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for (key, value) in self.fields {
            let (key, value) = f(key, value);
            match at.get(&key) {
                Some(&i) => {
                    if let Some(field) = fields.get_mut(i) {
                        field.1 = value;
                    }
                }
                None => {
                    at.insert(key.clone(), fields.len());
                    fields.push((key, value));
                }
            }
        }
        Body { fields }
    }

    pub fn remove(&mut self, name: &str) {
        self.fields.retain(|(k, _)| k != name);
    }

    /// Keeps only the fields named in `names`, in their order.
    pub fn keep_only(&mut self, names: &[&str]) {
        self.fields.retain(|(k, _)| names.contains(&k.as_str()));
    }

    /// The body as sent upstream: every field as the client wrote it, in its order, with `model`
    /// set to `upstream_model` — no value re-serialised (SPEC §15).
    pub fn write_with_model(&self, upstream_model: &str, size_hint: usize) -> Vec<u8> {
        self.write_fields(Some(upstream_model), size_hint)
    }

    /// The body as it is, every field as written.
    pub fn write(&self, size_hint: usize) -> Vec<u8> {
        self.write_fields(None, size_hint)
    }

    fn write_fields(&self, model: Option<&str>, size_hint: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(size_hint + model.map_or(0, str::len) + 16);
        out.push(b'{');
        for (i, (key, value)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if serde_json::to_writer(&mut out, key).is_err() {
                return Vec::new(); // a String always serialises
            }
            out.push(b':');
            match model.filter(|_| key == "model") {
                Some(model) => {
                    if serde_json::to_writer(&mut out, model).is_err() {
                        return Vec::new();
                    }
                }
                None => out.extend_from_slice(value.get().as_bytes()),
            }
        }
        out.push(b'}');
        out
    }
}

/// Refuses a body whose arrays and objects nest past [`MAX_DEPTH`]: one pass over the bytes,
/// brackets inside strings not counted. Malformed JSON is left to the parser.
pub fn check_depth(bytes: &[u8]) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(ApiError::invalid(
                        format!("Request body nests arrays and objects more than {MAX_DEPTH} deep."),
                        None,
                    ));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The start of the visitor's error for a body past [`MAX_FIELDS`].
const TOO_MANY: &str = "too many top-level fields";

struct FieldsVisitor;

impl<'de> Visitor<'de> for FieldsVisitor {
    type Value = Vec<(String, Box<RawValue>)>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields: Vec<(String, Box<RawValue>)> = Vec::new();
        let mut keys = 0usize;
        while let Some(key) = map.next_key::<String>()? {
            keys += 1;
            if keys > MAX_FIELDS {
                return Err(serde::de::Error::custom(TOO_MANY));
            }
            let value: Box<RawValue> = map.next_value()?;
            // A search among at most MAX_FIELDS: the body's work stays linear in its size.
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => *v = value,
                None => fields.push((key, value)),
            }
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_keep_their_order_and_text_and_only_model_changes() {
        let text = br#"{"b": [1, 2,  3], "model":"m", "a":{"x":"y"}, "b": "last"}"#;
        let body = Body::parse(text).unwrap();
        assert_eq!(body.raw("a").unwrap().get(), r#"{"x":"y"}"#);
        assert_eq!(
            body.small("b").unwrap(),
            Some(json!("last")),
            "a repeated key keeps its last value"
        );
        let out = body.write_with_model("up", text.len());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"b":"last","model":"up","a":{"x":"y"}}"#
        );
    }

    #[test]
    fn shapes_are_read_from_the_raw_text() {
        let body = Body::parse(br#"{"e":[ ],"a":[0],"s":"","t":"x","o":{},"n":null,"k":3}"#).unwrap();
        let shapes: Vec<Shape> = ["e", "a", "s", "t", "o", "n", "k", "missing"]
            .iter()
            .map(|f| body.shape(f))
            .collect();
        use Shape::*;
        assert_eq!(
            shapes,
            vec![EmptyArray, Array, EmptyString, String, Object, Null, Scalar, Absent]
        );
    }

    #[test]
    fn bad_bodies_are_400s_and_large_settings_are_refused_by_name() {
        for bad in [&b"[1]"[..], b"not json", b"{\"a\":1", b"{\"a\":1} x", b"\"s\""] {
            assert!(
                matches!(Body::parse(bad), Err(ApiError::InvalidRequest { .. })),
                "{bad:?}"
            );
        }
        let mut big = String::from(r#"{"metadata":["#);
        big.push_str(&vec!["0"; SMALL_FIELD_BYTES].join(","));
        big.push_str("]}");
        let body = Body::parse(big.as_bytes()).unwrap();
        match body.small("metadata") {
            Err(ApiError::InvalidRequest { param, .. }) => assert_eq!(param.as_deref(), Some("metadata")),
            other => panic!("{other:?}"),
        }
        assert_eq!(body.hint("metadata"), None);
    }

    #[test]
    fn ten_mib_of_tiny_values_go_upstream_as_sent() {
        // SPEC §18: the request is read, validated and forwarded without a tree of its values.
        let mut text = String::from(r#"{"model":"m","messages":[{"role":"user","content":[0"#);
        for _ in 0..(5 << 20) - 100 {
            text.push_str(",0");
        }
        text.push_str("]}]}");
        let r = crate::dialects::parse_request(crate::api::Api::Chat, text.as_bytes(), None).unwrap();
        let sent = r.upstream_body("m");
        assert_eq!(
            sent.len(),
            text.len() - text.find(r#""messages""#).unwrap() + r#"{"model":"m","#.len()
        );
        assert!(sent.ends_with(b"0,0]}]}"));
    }

    /// `depth` arrays (or objects) nested around a string, in `field` of an otherwise valid chat body.
    fn nested(field: &str, depth: usize, objects: bool) -> String {
        let (open, close) = if objects { (r#"{"a":"#, "}") } else { ("[", "]") };
        let deep = format!("{}\"x\"{}", open.repeat(depth), close.repeat(depth));
        match field {
            "content" => format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi","extra":{deep}}}]}}"#),
            _ => format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"{field}":{deep}}}"#),
        }
    }

    #[test]
    fn nesting_is_bounded_in_every_field_read_or_not() {
        use crate::api::Api;
        // The body's object is level 1; `messages[0]` is 3 levels in; a top-level field's value 2.
        let cases = [
            ("unread", MAX_DEPTH - 1, true),
            ("unread", MAX_DEPTH, false),
            ("unread", 10_000, false),
            ("metadata", MAX_DEPTH - 1, true),
            ("metadata", MAX_DEPTH, false),
            ("tools", MAX_DEPTH, false),
            ("content", MAX_DEPTH - 3, true),
            ("content", MAX_DEPTH - 2, false),
            ("content", 10_000, false),
        ];
        for objects in [false, true] {
            for (field, depth, fits) in cases {
                let text = nested(field, depth, objects);
                let what = format!("{field} {depth} deep (objects: {objects})");
                assert_eq!(check_depth(text.as_bytes()).is_ok(), fits, "{what}");
                match Body::parse(text.as_bytes()) {
                    Ok(_) => assert!(fits, "{what}"),
                    Err(ApiError::InvalidRequest { message, .. }) => {
                        assert!(!fits, "{what}: {message}");
                        assert!(message.contains(&format!("{MAX_DEPTH} deep")), "{what}: {message}");
                    }
                    Err(e) => panic!("{what}: {e:?}"),
                }
                if !fits {
                    let refused = crate::dialects::parse_request(Api::Chat, text.as_bytes(), None);
                    assert!(matches!(refused, Err(ApiError::InvalidRequest { .. })), "{what}");
                }
            }
        }
        // Brackets in strings (escaped quotes too) are text, not nesting.
        let text = format!(
            r#"{{"model":"m","s":"\"{}","t":"{}"}}"#,
            "[".repeat(1000),
            "{".repeat(1000)
        );
        assert!(Body::parse(text.as_bytes()).is_ok());
    }

    #[test]
    fn a_body_has_at_most_max_fields_top_level_keys_counting_repeats() {
        let body = |n: usize, distinct: bool| {
            let keys: Vec<String> = (0..n)
                .map(|i| {
                    if distinct {
                        format!(r#""k{i}":0"#)
                    } else {
                        r#""k":0"#.to_string()
                    }
                })
                .collect();
            format!("{{{}}}", keys.join(","))
        };
        for distinct in [true, false] {
            assert!(Body::parse(body(MAX_FIELDS, distinct).as_bytes()).is_ok());
            match Body::parse(body(MAX_FIELDS + 1, distinct).as_bytes()) {
                Err(ApiError::InvalidRequest { message, .. }) => {
                    assert!(message.contains(&format!("{MAX_FIELDS} top-level fields")), "{message}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn set_replaces_in_place_and_appends_new_fields() {
        let mut body = Body::parse(br#"{"model":"m","stream_options":{"x":1},"n":2}"#).unwrap();
        body.set("stream_options", &json!({"include_usage": true}));
        body.set("max_tokens", &json!(10));
        body.remove("n");
        let out = String::from_utf8(body.write_with_model("m", 0)).unwrap();
        assert_eq!(
            out,
            r#"{"model":"m","stream_options":{"include_usage":true},"max_tokens":10}"#
        );
    }
}
