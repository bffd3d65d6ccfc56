//! Strict request validation per dialect: what the real provider would reject, the mock rejects,
//! with a 400 in the dialect's own error shape whose message names the offending field.
//!
//! The gateway translates between dialects; a translation bug (an OpenAI-shaped tool sent to
//! Anthropic, a tool result answering no call, a schema keyword Google does not know…) must show
//! up as a test failure, not as a friendly mock answering anything. The checks follow the
//! providers' API references: required fields, JSON types, enumerations, the tool-call/result
//! pairing rules, and unknown fields (top level and inside the shapes that matter).
//!
//! Each dialect has its module ([`chat`], [`messages`], [`responses`], [`gemini`]); they walk the
//! body with [`Node`] (a value and its path) and stop at the first [`Problem`], which
//! [`error`] renders in the dialect's words (OpenAI `Missing required parameter: 'x'.`,
//! Anthropic `x: Field required`, Google `Invalid JSON payload received. Unknown name "x"`…).
//!
//! Google's JSON takes both camelCase and snake_case keys, as the real API does: Gemini bodies
//! are looked up and checked by their camelCase names.
//!
//! A cloud that hosts a dialect changes a little ([`check_on`]): Bedrock's Anthropic bodies carry
//! `anthropic_version` and neither `model` nor `stream`, and say what is wrong in their own
//! words ([`bedrock_message`]); a Chat body sent to an Azure deployment's URL need not name its
//! model.

mod chat;
mod gemini;
pub(crate) mod messages;
mod responses;

use serde_json::{Map, Value};

use crate::dialect::ErrSpec;
use crate::scenario::{Api, Host};

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// Where in the body a problem is (empty: the body itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Path(Vec<Seg>);

impl Path {
    fn key(&self, k: &str) -> Path {
        let mut p = self.clone();
        p.0.push(Seg::Key(k.to_string()));
        p
    }

    fn at(&self, i: usize) -> Path {
        let mut p = self.clone();
        p.0.push(Seg::Index(i));
        p
    }

    /// `messages[0].content` (OpenAI, Google), or `messages.0.content` with `dotted` (Anthropic).
    pub fn render(&self, dotted: bool) -> String {
        let mut out = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => {
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(k);
                }
                Seg::Index(i) if dotted => out.push_str(&format!(".{i}")),
                Seg::Index(i) => out.push_str(&format!("[{i}]")),
            }
        }
        out
    }

    /// A JSON pointer as JSON-schema validators write it: `#/messages/0/content` (`#`: the body).
    fn pointer(&self) -> String {
        let mut out = String::from("#");
        for seg in &self.0 {
            match seg {
                Seg::Key(k) => out.push_str(&format!("/{k}")),
                Seg::Index(i) => out.push_str(&format!("/{i}")),
            }
        }
        out
    }

    /// The last key and the path of its parent (Google and Bedrock name an unknown field that way).
    fn split_last(&self) -> (String, Path) {
        let mut parent = self.clone();
        match parent.0.pop() {
            Some(Seg::Key(k)) => (k, parent),
            Some(Seg::Index(i)) => (i.to_string(), parent),
            None => (String::new(), parent),
        }
    }
}

/// What is wrong at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The body is not JSON (the parser's words).
    NotJson(String),
    /// A required field is absent (or null).
    Missing,
    /// The JSON type is wrong: (expected, got), e.g. ("a string", "an integer").
    Type(&'static str, &'static str),
    /// The value is not allowed: why.
    Value(String),
    /// A field the dialect does not know.
    Unknown,
}

/// The first thing wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: Path,
    pub kind: Kind,
}

/// The result of a check.
pub type Check<T = ()> = Result<T, Problem>;

/// Validates a request body (as parsed, or the parser's error) in `api`'s dialect, as the
/// provider itself takes it.
pub fn check(api: Api, body: &Result<Value, serde_json::Error>) -> Check {
    check_on(api, &Host::Direct, body)
}

/// Validates a request body in `api`'s dialect as `host` takes it.
pub fn check_on(api: Api, host: &Host, body: &Result<Value, serde_json::Error>) -> Check {
    let value = body.as_ref().map_err(|e| Problem {
        path: Path::default(),
        kind: Kind::NotJson(e.to_string()),
    })?;
    let root = Node {
        v: value,
        path: Path::default(),
        google: api == Api::Gemini,
    };
    root.object()?;
    match (api, host) {
        (Api::Chat, Host::Azure { deployment: Some(_) }) => chat::check(&root, false),
        (Api::Chat, _) => chat::check(&root, true),
        (Api::Messages, Host::Bedrock { .. }) => messages::check_bedrock(&root),
        (Api::Messages, Host::Vertex { .. }) => messages::check_vertex(&root),
        (Api::Messages, _) => messages::check(&root),
        (Api::Responses, _) => responses::check(&root),
        (Api::Gemini, _) => gemini::check(&root),
    }
}

/// The problem in the dialect's words.
pub fn message(api: Api, p: &Problem) -> String {
    let path = p.path.render(api == Api::Messages);
    match (api, &p.kind) {
        (Api::Chat | Api::Responses, Kind::NotJson(e)) => {
            format!("We could not parse the JSON body of your request ({e}). The OpenAI API expects a JSON payload.")
        }
        (Api::Chat | Api::Responses, Kind::Missing) => format!("Missing required parameter: '{path}'."),
        (Api::Chat | Api::Responses, Kind::Type(want, got)) => {
            format!("Invalid type for '{path}': expected {want}, but got {got} instead.")
        }
        (Api::Chat | Api::Responses, Kind::Value(why)) => format!("Invalid value for '{path}': {why}"),
        (Api::Chat, Kind::Unknown) if p.path.0.len() == 1 => {
            format!("Unrecognized request argument supplied: {path}")
        }
        (Api::Chat | Api::Responses, Kind::Unknown) => format!("Unknown parameter: '{path}'."),
        (Api::Messages, Kind::NotJson(e)) => format!("The request body is not valid JSON: {e}"),
        (Api::Messages, Kind::Missing) => format!("{path}: Field required"),
        (Api::Messages, Kind::Type(want, _)) => format!("{path}: Input should be {want}"),
        (Api::Messages, Kind::Value(why)) => format!("{path}: {why}"),
        (Api::Messages, Kind::Unknown) => format!("{path}: Extra inputs are not permitted"),
        (Api::Gemini, Kind::NotJson(e)) => format!("Invalid JSON payload received. {e}"),
        (Api::Gemini, Kind::Missing) => {
            format!("* GenerateContentRequest.{path}: required field is not specified")
        }
        (Api::Gemini, Kind::Type(want, got)) => {
            format!("Invalid value at '{path}': expected {want}, got {got}")
        }
        (Api::Gemini, Kind::Value(why)) => format!("* GenerateContentRequest.{path}: {why}"),
        (Api::Gemini, Kind::Unknown) => match p.path.split_last() {
            (name, parent) if parent.0.is_empty() => {
                format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field.")
            }
            (name, parent) => format!(
                "Invalid JSON payload received. Unknown name \"{name}\" at '{}': Cannot find field.",
                parent.render(false)
            ),
        },
    }
}

/// The problem in Bedrock's words (its JSON-schema validator's, framed as its
/// `ValidationException` says them): `Malformed input request: #/max_tokens: expected type:
/// Integer, found: String, please reformat your input and try again.`
pub fn bedrock_message(p: &Problem) -> String {
    let (name, parent) = p.path.split_last();
    let java_type = |t: &'static str| match t {
        "a string" => "String",
        "an integer" => "Integer",
        "a number" => "Number",
        "a boolean" => "Boolean",
        "an array" => "JSONArray",
        "an object" => "JSONObject",
        "null" => "Null",
        other => other,
    };
    let detail = match &p.kind {
        Kind::NotJson(e) => format!("#: {e}"),
        Kind::Missing => format!("{}: required key [{name}] not found", parent.pointer()),
        Kind::Unknown => format!("{}: extraneous key [{name}] is not permitted", parent.pointer()),
        Kind::Type(want, got) => format!(
            "{}: expected type: {}, found: {}",
            p.path.pointer(),
            java_type(want),
            java_type(got)
        ),
        Kind::Value(why) => format!("{}: {why}", p.path.pointer()),
    };
    format!("Malformed input request: {detail}, please reformat your input and try again.")
}

/// The 400 for a problem, for [`crate::dialect::error_body`].
pub fn error(api: Api, p: &Problem) -> ErrSpec {
    let msg = message(api, p);
    let param = (!p.path.0.is_empty()).then(|| p.path.render(false));
    let code = match &p.kind {
        Kind::Missing => Some("missing_required_parameter"),
        Kind::Type(..) => Some("invalid_type"),
        Kind::Value(_) => Some("invalid_value"),
        Kind::Unknown if api == Api::Responses || p.path.0.len() > 1 => Some("unknown_parameter"),
        Kind::Unknown | Kind::NotJson(_) => None,
    };
    ErrSpec {
        message: msg.clone(),
        oa_type: Some("invalid_request_error".into()),
        oa_param: param,
        oa_code: code.map(str::to_string),
        an_type: "invalid_request_error".into(),
        an_message: msg,
        code: 400,
    }
}

/// A tool name of 1..=`max` characters from `[a-zA-Z0-9_-]` (`extra` adds more).
fn name_ok(name: &str, max: usize, extra: &[char]) -> bool {
    (1..=max).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || extra.contains(&c))
}

/// `inline_data` → `inlineData`.
fn camel(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    let mut upper = false;
    for c in key.chars() {
        match c {
            '_' => upper = true,
            c if upper => {
                out.push(c.to_ascii_uppercase());
                upper = false;
            }
            c => out.push(c),
        }
    }
    out
}

/// `inlineData` → `inline_data`.
fn snake(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    for c in key.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The JSON type of a value, in the words of a type error.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A value of the body and where it is.
#[derive(Debug, Clone)]
pub(crate) struct Node<'a> {
    v: &'a Value,
    path: Path,
    /// Gemini: keys may be camelCase or snake_case.
    google: bool,
}

impl<'a> Node<'a> {
    fn child(&self, v: &'a Value, path: Path) -> Node<'a> {
        Node {
            v,
            path,
            google: self.google,
        }
    }

    fn fail<T>(&self, kind: Kind) -> Check<T> {
        Err(Problem {
            path: self.path.clone(),
            kind,
        })
    }

    /// Fails with "this value is not allowed: `why`".
    fn invalid<T>(&self, why: impl Into<String>) -> Check<T> {
        self.fail(Kind::Value(why.into()))
    }

    /// Fails with a type error (`expected`, and what the value is).
    fn type_error<T>(&self, expected: &'static str) -> Check<T> {
        self.fail(Kind::Type(expected, type_name(self.v)))
    }

    fn is_str(&self) -> bool {
        self.v.is_string()
    }

    fn object(&self) -> Check<&'a Map<String, Value>> {
        match self.v.as_object() {
            Some(m) => Ok(m),
            None => self.type_error("an object"),
        }
    }

    fn str(&self) -> Check<&'a str> {
        match self.v.as_str() {
            Some(s) => Ok(s),
            None => self.type_error("a string"),
        }
    }

    fn bool(&self) -> Check<bool> {
        match self.v.as_bool() {
            Some(b) => Ok(b),
            None => self.type_error("a boolean"),
        }
    }

    /// An integer of at least `min`.
    fn int(&self, min: i64) -> Check<i64> {
        match self.v.as_i64() {
            Some(n) if n >= min => Ok(n),
            Some(n) => self.invalid(format!(
                "integer below minimum value. Expected a value >= {min}, but got {n} instead."
            )),
            None => self.type_error("an integer"),
        }
    }

    /// A number in `lo..=hi`.
    fn number(&self, lo: f64, hi: f64) -> Check<f64> {
        match self.v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(x),
            Some(x) => self.invalid(format!("{x} is not between {lo} and {hi}.")),
            None => self.type_error("a number"),
        }
    }

    /// A string among `allowed`.
    fn one_of(&self, allowed: &[&str]) -> Check<&'a str> {
        let s = self.str()?;
        if allowed.contains(&s) {
            return Ok(s);
        }
        let list: Vec<String> = allowed.iter().map(|a| format!("'{a}'")).collect();
        self.invalid(format!("'{s}'. Supported values are: {}.", list.join(", ")))
    }

    /// The items of an array, each with its path.
    fn array(&self) -> Check<Vec<Node<'a>>> {
        match self.v.as_array() {
            Some(items) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, v)| self.child(v, self.path.at(i)))
                .collect()),
            None => self.type_error("an array"),
        }
    }

    /// The items of an array that must not be empty.
    fn nonempty_array(&self) -> Check<Vec<Node<'a>>> {
        let items = self.array()?;
        if items.is_empty() {
            return self
                .invalid("empty array. Expected an array with minimum length 1, but got an empty array instead.");
        }
        Ok(items)
    }

    /// An array of strings.
    fn strings(&self) -> Check<Vec<&'a str>> {
        self.array()?.iter().map(Node::str).collect()
    }

    /// A field of this object (absent or null: `None`); Google's keys in either case style.
    fn get(&self, name: &str) -> Option<Node<'a>> {
        let m = self.v.as_object()?;
        let (key, v) = match m.get_key_value(name) {
            Some(kv) => kv,
            None if self.google => m.get_key_value(&snake(name))?,
            None => return None,
        };
        (!v.is_null()).then(|| self.child(v, self.path.key(key)))
    }

    /// A required field.
    fn req(&self, name: &str) -> Check<Node<'a>> {
        match self.get(name) {
            Some(n) => Ok(n),
            None => Err(Problem {
                path: self.path.key(name),
                kind: Kind::Missing,
            }),
        }
    }

    /// Runs `f` on an optional field.
    fn opt<T>(&self, name: &str, f: impl FnOnce(&Node<'a>) -> Check<T>) -> Check<Option<T>> {
        self.get(name).map(|n| f(&n)).transpose()
    }

    /// Fails on the first key not in `known` (Google's keys compared in camelCase).
    fn only(&self, known: &[&str]) -> Check {
        let Some(m) = self.v.as_object() else {
            return Ok(());
        };
        for key in m.keys() {
            let name = if self.google { camel(key) } else { key.clone() };
            if !known.contains(&name.as_str()) {
                return Err(Problem {
                    path: self.path.key(key),
                    kind: Kind::Unknown,
                });
            }
        }
        Ok(())
    }

    /// The `type` of an object: required, and among `allowed`.
    fn tag(&self, allowed: &[&str]) -> Check<&'a str> {
        self.object()?;
        self.req("type")?.one_of(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problem(api: Api, body: &Value) -> Problem {
        check(api, &Ok(body.clone())).expect_err("should be rejected")
    }

    #[test]
    fn paths_render_per_dialect() {
        let p = Path::default().key("messages").at(2).key("content").at(0);
        assert_eq!(p.render(false), "messages[2].content[0]");
        assert_eq!(p.render(true), "messages.2.content.0");
        assert_eq!(camel("function_declarations"), "functionDeclarations");
        assert_eq!(snake("functionDeclarations"), "function_declarations");
        assert!(name_ok("get_weather-2", 64, &[]) && !name_ok("get weather", 64, &[]) && !name_ok("", 64, &[]));
    }

    #[test]
    fn not_json_and_not_an_object() {
        for api in [Api::Chat, Api::Messages, Api::Responses, Api::Gemini] {
            let bad = serde_json::from_slice::<Value>(b"{nope");
            let p = check(api, &bad).unwrap_err();
            assert!(matches!(p.kind, Kind::NotJson(_)), "{api:?}");
            let p = problem(api, &json!([1]));
            assert_eq!(p.kind, Kind::Type("an object", "an array"));
        }
    }

    #[test]
    fn messages_in_each_dialects_words() {
        let missing = Problem {
            path: Path::default().key("max_tokens"),
            kind: Kind::Missing,
        };
        assert_eq!(message(Api::Messages, &missing), "max_tokens: Field required");
        assert_eq!(
            message(Api::Chat, &missing),
            "Missing required parameter: 'max_tokens'."
        );
        let unknown = Problem {
            path: Path::default().key("foo"),
            kind: Kind::Unknown,
        };
        assert_eq!(
            message(Api::Chat, &unknown),
            "Unrecognized request argument supplied: foo"
        );
        assert_eq!(message(Api::Responses, &unknown), "Unknown parameter: 'foo'.");
        assert_eq!(message(Api::Messages, &unknown), "foo: Extra inputs are not permitted");
        assert_eq!(
            message(Api::Gemini, &unknown),
            "Invalid JSON payload received. Unknown name \"foo\": Cannot find field."
        );
        let nested = Problem {
            path: Path::default()
                .key("contents")
                .at(0)
                .key("parts")
                .at(1)
                .key("thought_x"),
            kind: Kind::Unknown,
        };
        assert_eq!(
            message(Api::Gemini, &nested),
            "Invalid JSON payload received. Unknown name \"thought_x\" at 'contents[0].parts[1]': Cannot find field."
        );
        let e = error(Api::Chat, &unknown);
        assert_eq!((e.oa_param.as_deref(), e.oa_code), (Some("foo"), None));
        let e = error(Api::Responses, &missing);
        assert_eq!(e.oa_code.as_deref(), Some("missing_required_parameter"));
    }

    #[test]
    fn bedrock_bodies_and_words() {
        let bedrock = Host::Bedrock {
            model: "anthropic.claude-3-haiku-20240307-v1:0".into(),
            stream: false,
            converse: false,
        };
        let hello = json!([{"role": "user", "content": "hi"}]);
        let refused = |body: Value| {
            let p =
                check_on(Api::Messages, &bedrock, &Ok(body.clone())).expect_err(&format!("{body} should be rejected"));
            bedrock_message(&p)
        };
        let ok = json!({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": hello,
                        "anthropic_beta": ["computer-use-2024-10-22"], "system": "be brief", "temperature": 0.5});
        assert_eq!(check_on(Api::Messages, &bedrock, &Ok(ok.clone())), Ok(()));
        // The same body is not one Anthropic's own API takes.
        assert!(check(Api::Messages, &Ok(ok.clone())).is_err());
        let mut with_model = ok.clone();
        with_model["model"] = json!("claude");
        assert_eq!(
            refused(with_model),
            "Malformed input request: #: extraneous key [model] is not permitted, please reformat your input and try again."
        );
        let mut streamed = ok.clone();
        streamed["stream"] = json!(true);
        assert!(refused(streamed).contains("extraneous key [stream]"));
        let mut unversioned = ok.clone();
        unversioned.as_object_mut().unwrap().remove("anthropic_version");
        assert!(refused(unversioned).contains("#: required key [anthropic_version] not found"));
        // Only the beta flags Bedrock documents.
        let mut beta = ok.clone();
        beta["anthropic_beta"] = json!(["claude-code-20250219"]);
        assert!(refused(beta).contains("invalid beta flag: claude-code-20250219"));
        let mut dated = ok.clone();
        dated["anthropic_version"] = json!("2023-06-01");
        assert!(refused(dated).contains("#/anthropic_version: 2023-06-01 is not a valid enum value"));
        // The Messages rules still hold, in Bedrock's words.
        let mut bad = ok.clone();
        bad["max_tokens"] = json!("64");
        assert!(refused(bad).contains("#/max_tokens: expected type: Integer, found: String"));
        let mut bad = ok.clone();
        bad["messages"][0]["extra"] = json!(1);
        assert!(refused(bad).contains("#/messages/0: extraneous key [extra] is not permitted"));
    }

    #[test]
    fn an_azure_deployment_needs_no_model() {
        let body = json!({"messages": [{"role": "user", "content": "hi"}]});
        let deployment = Host::Azure {
            deployment: Some("gpt-4o".into()),
        };
        assert_eq!(check_on(Api::Chat, &deployment, &Ok(body.clone())), Ok(()));
        let v1 = Host::Azure { deployment: None };
        assert_eq!(
            check_on(Api::Chat, &v1, &Ok(body.clone())).map_err(|p| p.kind),
            Err(Kind::Missing)
        );
        let mut numbered = body;
        numbered["model"] = json!(4);
        assert!(check_on(Api::Chat, &deployment, &Ok(numbered)).is_err());
    }

    /// Bodies as the gateway forwards them in the end-to-end suite (`tests/`), the SDK tests, the
    /// bench and the gateway's own verification checks (`crates/core/src/verify.rs`): `model`
    /// replaced, a limit added when the client set none, chat streams asking for usage.
    #[test]
    fn the_gateways_bodies_pass() {
        let hello = json!([{"role": "user", "content": "Say hello"}]);
        let gemini_hello = json!([{"role": "user", "parts": [{"text": "Say hello"}]}]);
        let bodies = [
            (
                Api::Chat,
                json!({"model": "u", "stream": false, "messages": hello, "max_completion_tokens": 1024}),
            ),
            (
                Api::Chat,
                json!({"model": "u", "stream": true, "messages": hello, "max_completion_tokens": 1024,
                               "stream_options": {"include_usage": true}}),
            ),
            (
                Api::Chat,
                json!({"model": "u", "stream": false, "max_tokens": 16, "messages": [{"role": "user", "content": "check"}]}),
            ),
            (
                Api::Chat,
                json!({"model": "u", "messages": hello, "n": 3, "max_tokens": 100, "logprobs": true,
                               "temperature": 0.25, "stop": ["\n\n"]}),
            ),
            (
                Api::Chat,
                json!({"model": "u", "messages": hello, "max_completion_tokens": 1, "max_tokens": 100}),
            ),
            (
                Api::Chat,
                json!({"model": "u", "max_tokens": 16, "messages": [{"role": "user", "content":
                [{"type": "text", "text": "What is in https://example.com/cat.png?"}]}]}),
            ),
            (
                Api::Messages,
                json!({"model": "u", "stream": true, "max_tokens": 256, "messages": hello, "stop_sequences": ["END"]}),
            ),
            (
                Api::Messages,
                json!({"model": "u", "stream": false, "max_tokens": 16, "messages": [{"role": "user", "content": "check"}]}),
            ),
            (
                Api::Responses,
                json!({"model": "u", "stream": true, "input": "Say hello", "max_output_tokens": 1024}),
            ),
            (
                Api::Responses,
                json!({"model": "u", "stream": false, "max_output_tokens": 16, "input": "check"}),
            ),
            (
                Api::Responses,
                json!({"model": "u", "input": "Say hello", "previous_response_id": "resp_mock", "max_output_tokens": 1024}),
            ),
            (
                Api::Gemini,
                json!({"contents": gemini_hello, "generationConfig": {"maxOutputTokens": 1024}}),
            ),
            (
                Api::Gemini,
                json!({"contents": [{"parts": [{"text": "hi"}], "role": "user"}],
                                 "generationConfig": {"stopSequences": ["END"], "maxOutputTokens": 16}}),
            ),
        ];
        for (api, body) in bodies {
            if let Err(p) = check(api, &Ok(body.clone())) {
                panic!("{api:?} {body}: {}", message(api, &p));
            }
        }
    }

    /// Bodies of end-to-end tests that the real providers would refuse: their answering routes
    /// need `lenient` (reported, not let through silently).
    #[test]
    fn odd_end_to_end_bodies_are_refused() {
        let hello = json!([{"role": "user", "content": "Say hello"}]);
        for (api, body, field) in [
            (
                Api::Responses,
                json!({"model": "u", "input": "Say hello", "first": true}),
                "first",
            ),
            (
                Api::Chat,
                json!({"model": "u", "messages": hello, "billing": 1}),
                "billing",
            ),
            (
                Api::Chat,
                json!({"model": "u", "messages": hello, "poison": true}),
                "poison",
            ),
            (
                Api::Chat,
                json!({"model": "u", "messages": [{"role": "user", "content": [0, 0, 0]}]}),
                "messages[0].content[0]",
            ),
        ] {
            let p = problem(api, &body);
            assert!(message(api, &p).contains(field), "{}", message(api, &p));
        }
    }
}
