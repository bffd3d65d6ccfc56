//! What a request's cost depends on beyond its body (SPEC §17): input it names instead of
//! carrying, and features billed per use.
//!
//! The hold must bound the charge. Input in the body is bounded by the body's size; input the
//! request only names — a stored response or conversation, a stored prompt, a cached content, an
//! uploaded file, a remote image or document the provider fetches — is not, so such a request is
//! held at the model's context window ([`external_input`]). A server-side tool the provider runs
//! and bills per use (web search, file search, a code container…) is found by
//! [`provider_tools`]: served only where a route prices it (`crate::tools`), refused otherwise.
//!
//! Only structure is read, never text: a message that *says* "file_id" names no file. The walk
//! covers the request's messages (and system prompt), not its tools' parameter schemas, where a
//! property may well be called `file_id`.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::body::{Body, Shape};

/// A visitor's answer to a scalar it has no use for: nothing (its `Value`'s default).
macro_rules! ignore_scalars {
    () => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

/// Consumes any value but the ones the visitor reads, keeping nothing.
macro_rules! ignore_the_rest {
    () => {
        ignore_scalars!();
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// The first field whose input is not in the body, as a path (`previous_response_id`,
/// `messages[0].content[1]`), if any. The walk builds no tree of the messages (SPEC §18).
pub fn external_input(body: &Body) -> Option<String> {
    for field in ["previous_response_id", "conversation", "cachedContent", "container"] {
        if !matches!(body.shape(field), Shape::Absent | Shape::Null) {
            return Some(field.to_string());
        }
    }
    // A Responses `prompt` object is a stored template (a legacy completion prompt is a string).
    if body.shape("prompt") == Shape::Object {
        return Some("prompt".into());
    }
    if body.shape("mcp_servers") == Shape::Array {
        return Some("mcp_servers".into());
    }
    [
        "messages",
        "input",
        "contents",
        "system",
        "instructions",
        "systemInstruction",
    ]
    .iter()
    .find_map(|field| {
        let raw = body.raw(field)?;
        let mut de = serde_json::Deserializer::from_str(raw.get());
        let found = Find.deserialize(&mut de).ok()??;
        Some(path(field, &found))
    })
}

/// A tool of the request the provider runs and bills per use: where it is declared, its kind as
/// the dialect spells it, and its own bound on its uses (Anthropic `max_uses`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderTool {
    pub param: String,
    pub kind: String,
    pub max_uses: Option<u64>,
    /// Grouped in a Responses `namespace`, which holds the client's own tools only.
    pub grouped: bool,
}

/// Every tool the provider runs and bills per use, in order: chat's `web_search_options` (web
/// search beside the tools), then every tool of `tools[i]` that is not the client's own function.
/// Chat and Responses function tools have `type` `function` (or `custom`); Anthropic client tools
/// have a name and an input schema and no `type` (or `custom`); a Gemini tool entry is the
/// client's only when it declares functions alone.
pub fn provider_tools(body: &Body) -> Vec<ProviderTool> {
    let mut found = Vec::new();
    if !matches!(body.shape("web_search_options"), Shape::Absent | Shape::Null) {
        found.push(ProviderTool {
            param: "web_search_options".into(),
            kind: "web_search".into(),
            max_uses: None,
            grouped: false,
        });
    }
    let Some(raw) = body.raw("tools") else {
        return found;
    };
    let mut de = serde_json::Deserializer::from_str(raw.get());
    let tools = de.deserialize_any(PricedTools).unwrap_or_default();
    found.extend(tools.into_iter().map(|(i, t)| ProviderTool {
        param: format!("tools[{i}]"),
        ..t
    }));
    found
}

/// The raw JSON of the first system (or developer) turn and of the first user turn of a
/// `messages` / `input` / `contents` array: a conversation's name when it has no other (SPEC §8a).
pub fn first_turns(raw: &RawValue) -> (Option<String>, Option<String>) {
    let mut de = serde_json::Deserializer::from_str(raw.get());
    de.deserialize_any(FirstTurns).unwrap_or_default()
}

fn path(field: &str, segs: &[Seg]) -> String {
    let mut out = field.to_string();
    for seg in segs.iter().rev() {
        match seg {
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
        }
    }
    out
}

/// One step of a path, innermost first.
enum Seg {
    Index(usize),
    Key(String),
}

/// What one object says about itself, read field by field.
#[derive(Default)]
struct Head {
    kind: Option<String>,
    file_id: bool,
    file_url: bool,
    remote_image: bool,
    source_type: Option<String>,
    file_file_id: bool,
    file_data: bool,
}

impl Head {
    /// The part names input held elsewhere: an uploaded file (`file_id`, `file_url`, Gemini
    /// `fileData`), a remote image (an `image_url` that is not a `data:` URL), an Anthropic
    /// source of type `url` or `file`.
    fn names_outside_input(&self) -> bool {
        match self.kind.as_deref() {
            // Chat: {"type":"image_url","image_url":{"url":…}}; Responses: {"type":"input_image","image_url":"…"}.
            Some("image_url") => self.remote_image,
            Some("input_image") => self.file_id || self.remote_image,
            Some("input_file") | Some("file") => self.file_id || self.file_url || self.file_file_id,
            Some("image") | Some("document") => matches!(self.source_type.as_deref(), Some("url" | "file")),
            _ => self.file_data,
        }
    }
}

/// Walks any value for the first object that names outside input; builds nothing.
struct Find;

impl<'de> DeserializeSeed<'de> for Find {
    type Value = Option<Vec<Seg>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Find {
    type Value = Option<Vec<Seg>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    ignore_scalars!();

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut i = 0;
        while let Some(inner) = seq.next_element_seed(Find)? {
            if let (None, Some(mut p)) = (&found, inner) {
                p.push(Seg::Index(i));
                found = Some(p);
            }
            i += 1;
        }
        Ok(found)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut head = Head::default();
        let mut found = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "type" => head.kind = map.next_value_seed(Text)?,
                "file_id" => head.file_id = map.next_value_seed(Text)?.is_some(),
                "file_url" => head.file_url = map.next_value_seed(Text)?.is_some(),
                "image_url" => head.remote_image = map.next_value_seed(RemoteUrl)?,
                "source" => head.source_type = map.next_value_seed(FieldText("type"))?,
                "file" => head.file_file_id = map.next_value_seed(FieldText("file_id"))?.is_some(),
                "fileData" => {
                    map.next_value::<IgnoredAny>()?;
                    head.file_data = true;
                }
                _ => {
                    if let (None, Some(mut p)) = (&found, map.next_value_seed(Find)?) {
                        p.push(Seg::Key(key));
                        found = Some(p);
                    }
                }
            }
        }
        Ok(if head.names_outside_input() {
            Some(Vec::new())
        } else {
            found
        })
    }
}

/// A string value as text, anything else consumed and `None`.
struct Text;

impl<'de> DeserializeSeed<'de> for Text {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Text {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(Some(s.to_string()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    ignore_the_rest!();
}

/// Whether an `image_url` (a string, or an object with `url`) points outside the body: any URL
/// but a `data:` one. Reads the URL's first bytes only.
struct RemoteUrl;

fn is_remote(url: &str) -> bool {
    !url.trim_start()
        .get(..5)
        .is_some_and(|p| p.eq_ignore_ascii_case("data:"))
}

impl<'de> DeserializeSeed<'de> for RemoteUrl {
    type Value = bool;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for RemoteUrl {
    type Value = bool;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, s: &str) -> Result<Self::Value, E> {
        Ok(is_remote(s))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut remote = false;
        while let Some(key) = map.next_key::<String>()? {
            if key == "url" {
                remote = map.next_value_seed(RemoteUrl)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(remote)
    }
    ignore_the_rest!();
}

/// One string field of an object value (`source.type`, `file.file_id`).
struct FieldText(&'static str);

impl<'de> DeserializeSeed<'de> for FieldText {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for FieldText {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut text = None;
        while let Some(key) = map.next_key::<String>()? {
            if key == self.0 {
                text = map.next_value_seed(Text)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(text)
    }
    ignore_the_rest!();
}

/// The tools of a `tools` array that are not the client's own functions: (index, tool).
struct PricedTools;

impl<'de> DeserializeSeed<'de> for PricedTools {
    type Value = Vec<(usize, ProviderTool)>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for PricedTools {
    type Value = Vec<(usize, ProviderTool)>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of tools")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut found = Vec::new();
        let mut i = 0;
        while let Some(tool) = seq.next_element_seed(ToolKind)? {
            found.extend(tool.map(|t| (i, t)));
            i += 1;
        }
        Ok(found)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Vec::new())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Vec::new())
    }
    ignore_scalars!();
}

/// One tool when the provider runs it (`None`: the client's own function, or no object); its
/// `param` is filled in by the caller.
struct ToolKind;

impl<'de> DeserializeSeed<'de> for ToolKind {
    type Value = Option<ProviderTool>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ToolKind {
    type Value = Option<ProviderTool>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a tool object")
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kind, mut typed, mut client_tool, mut other_key) = (None, false, false, None);
        let mut max_uses = None;
        // A Responses `namespace` groups the client's own tools; what it groups decides.
        let mut grouped: Option<Vec<(usize, ProviderTool)>> = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "tools" => grouped = Some(map.next_value_seed(PricedTools)?),
                "type" => {
                    typed = true;
                    kind = Some(map.next_value_seed(Text)?.unwrap_or_else(|| "unknown".into()));
                }
                "max_uses" => max_uses = map.next_value::<Option<serde_json::Value>>()?.and_then(|v| v.as_u64()),
                "name" | "input_schema" => {
                    map.next_value::<IgnoredAny>()?;
                    client_tool = true;
                }
                "functionDeclarations" => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    other_key.get_or_insert(key);
                }
            }
        }
        let tool = |kind: String, max_uses, grouped| ProviderTool {
            param: String::new(),
            kind,
            max_uses,
            grouped,
        };
        Ok(match kind {
            Some(k) if k == "function" || k == "custom" => None,
            Some(k) if k == "namespace" => grouped
                .and_then(|g| g.into_iter().next())
                .map(|(_, inner)| tool(inner.kind, inner.max_uses, true)),
            Some(k) if typed => Some(tool(k, max_uses, false)),
            // An Anthropic client tool: a name and an input schema, no type.
            _ if client_tool => None,
            // Gemini: `{functionDeclarations: […]}` is the client's; any other key is a Google tool.
            _ => other_key.map(|k| tool(k, None, false)),
        })
    }
    ignore_the_rest!();
}

/// The first system (or developer) turn and the first user turn of a conversation array, as raw
/// JSON; every other turn is skipped unread.
struct FirstTurns;

impl<'de> Visitor<'de> for FirstTurns {
    type Value = (Option<String>, Option<String>);
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of turns")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let (mut system, mut user) = (None, None);
        while let Some(turn) = seq.next_element::<&'de RawValue>()? {
            if system.is_some() && user.is_some() {
                continue;
            }
            let mut de = serde_json::Deserializer::from_str(turn.get());
            let role = FieldText("role").deserialize(&mut de).ok().flatten();
            match role.as_deref() {
                Some("system" | "developer") if system.is_none() => system = Some(turn.get().to_string()),
                Some("user") if user.is_none() => user = Some(turn.get().to_string()),
                _ => {}
            }
        }
        Ok((system, user))
    }
    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok((None, None))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok((None, None))
    }
    ignore_scalars!();
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn map(v: Value) -> Body {
        Body::from_value(&v).unwrap()
    }

    #[test]
    fn input_named_instead_of_carried_is_found_by_structure() {
        let cases = [
            (
                json!({"input": "hi", "previous_response_id": "resp_1"}),
                Some("previous_response_id"),
            ),
            (json!({"input": "hi", "conversation": "conv_1"}), Some("conversation")),
            (json!({"prompt": {"id": "pmpt_1"}}), Some("prompt")),
            (
                json!({"contents": [], "cachedContent": "cachedContents/1"}),
                Some("cachedContent"),
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]}),
                Some("messages[0].content[0]"),
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "file-1"}]}]}),
                Some("input[0].content[1]"),
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}]}]}),
                Some("messages[0].content[0]"),
            ),
            (
                json!({"contents": [{"role": "user", "parts": [{"fileData": {"fileUri": "gs://b/o"}}]}]}),
                Some("contents[0].parts[0]"),
            ),
            (
                json!({"messages": [], "mcp_servers": [{"url": "https://mcp"}]}),
                Some("mcp_servers"),
            ),
        ];
        for (body, want) in cases {
            assert_eq!(external_input(&map(body.clone())).as_deref(), want, "{body}");
        }
        let in_body = [
            json!({"messages": [{"role": "user", "content": "my file_id is file-1, see https://x/y.png"}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}),
            json!({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "AAAA"}}]}]}),
            json!({"messages": [], "tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"file_id": {"type": "string"}}}}}]}),
            json!({"input": "hi", "previous_response_id": null}),
        ];
        for body in in_body {
            assert_eq!(external_input(&map(body.clone())), None, "{body}");
        }
    }

    #[test]
    fn a_tool_the_provider_runs_and_bills_is_named() {
        let found = |v: Value| provider_tools(&map(v)).into_iter().next().map(|t| (t.param, t.kind));
        assert_eq!(
            found(json!({"tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]})),
            Some(("tools[1]".into(), "web_search".into()))
        );
        assert_eq!(
            found(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
            Some(("tools[0]".into(), "web_search_20250305".into()))
        );
        assert_eq!(
            found(json!({"tools": [{"functionDeclarations": []}, {"googleSearch": {}}]})),
            Some(("tools[1]".into(), "googleSearch".into()))
        );
        assert_eq!(
            found(json!({"tools": [{"name": "get_weather", "input_schema": {}}]})),
            None
        );
        assert_eq!(found(json!({"tools": [{"type": "custom", "name": "x"}]})), None);
        // A Responses namespace of the client's own tools is the client's; one grouping a
        // provider's tool is that tool.
        let namespace =
            |inner: Value| json!({"tools": [{"type": "namespace", "name": "crm", "description": "d", "tools": inner}]});
        assert_eq!(
            found(namespace(
                json!([{"type": "function", "name": "f"}, {"type": "custom", "name": "g"}])
            )),
            None
        );
        assert_eq!(
            found(namespace(
                json!([{"type": "function", "name": "f"}, {"type": "web_search"}])
            )),
            Some(("tools[0]".into(), "web_search".into()))
        );
        assert_eq!(found(json!({"tools": [{"type": "namespace", "name": "crm"}]})), None);
        assert_eq!(
            found(json!({"tools": [{"functionDeclarations": [{"name": "f"}]}]})),
            None
        );
        assert_eq!(found(json!({"messages": []})), None);
        // Chat's web search is set beside the tools, not among them.
        for options in [json!({}), json!({"search_context_size": "low"})] {
            assert_eq!(
                found(json!({"messages": [], "web_search_options": options})),
                Some(("web_search_options".into(), "web_search".into()))
            );
        }
        assert_eq!(found(json!({"messages": [], "web_search_options": null})), None);
    }

    #[test]
    fn every_provider_tool_is_listed_with_its_own_bound() {
        let tools = provider_tools(&map(json!({"tools": [
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
            {"name": "f", "input_schema": {}},
            {"type": "code_execution_20250522", "name": "code_execution"},
            {"type": "namespace", "name": "n", "description": "d", "tools": [{"type": "web_search"}]}
        ]})));
        let seen: Vec<(&str, &str, Option<u64>, bool)> = tools
            .iter()
            .map(|t| (t.param.as_str(), t.kind.as_str(), t.max_uses, t.grouped))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("tools[0]", "web_search_20250305", Some(3), false),
                ("tools[2]", "code_execution_20250522", None, false),
                ("tools[3]", "web_search", None, true),
            ]
        );
    }
}
