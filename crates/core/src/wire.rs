//! What one attempt sends a provider (SPEC §19, §20): the URL its kind wants for the dialect, the
//! body — the client's own with the route's model, or translated — and the headers that carry its
//! key. Signing (Bedrock) is the caller's, over exactly these bytes; so is minting Vertex's token.
//! Bedrock takes Anthropic bodies on InvokeModel (`messages` routes) and its own Converse bodies on
//! Converse (`converse` routes, always translated: no client speaks it).

use crate::api::Api;
use crate::dialects::body::Body;
use crate::dialects::neutral::request::{self, Neutral};
use crate::dialects::neutral::Unable;
use crate::dialects::ClientRequest;
use crate::providers::{self, BetaPlace, CloudAnthropic, Provider};

/// What one attempt sends a route: where, what, and which client fields it leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub url: String,
    pub body: Vec<u8>,
    /// The request was translated into the route's dialect (not sent as the client wrote it).
    pub translated: bool,
    /// Client fields left out in translation because they have no effect on the answer, and
    /// `anthropic-beta` flags the route does not take.
    pub dropped: Vec<String>,
    /// Headers of the request itself beside the key's (Vertex's `anthropic-beta`).
    pub headers: Vec<(&'static str, String)>,
}

/// The request as a route of `provider` speaking `wire` gets it for `upstream_model`: the client's
/// own body with the model replaced when `wire` is the client's dialect, else translated — or the
/// client field the route's dialect cannot carry.
pub fn outgoing(
    request: &ClientRequest,
    wire: Api,
    provider: &Provider,
    upstream_model: &str,
    model_max_output_tokens: u64,
) -> Result<Outgoing, Unable> {
    Requests::new(request).outgoing(wire, provider, upstream_model, model_max_output_tokens)
}

/// One request's [`outgoing`] bodies over its attempts: translated ones are written from the
/// neutral form read at the first of them, not read again for each route (SPEC §15).
pub struct Requests<'a> {
    request: &'a ClientRequest,
    neutral: Option<Result<Neutral, Unable>>,
}

impl<'a> Requests<'a> {
    pub fn new(request: &'a ClientRequest) -> Requests<'a> {
        Requests { request, neutral: None }
    }

    /// [`outgoing`] for the next attempt.
    pub fn outgoing(
        &mut self,
        wire: Api,
        provider: &Provider,
        upstream_model: &str,
        model_max_output_tokens: u64,
    ) -> Result<Outgoing, Unable> {
        let request = self.request;
        let url = url(provider, wire, upstream_model, request.stream);
        // How a cloud takes an Anthropic body, when this route is one.
        let cloud = providers::of(provider.kind())
            .anthropic_body()
            .filter(|_| wire == Api::Messages);
        // System messages inside an Anthropic conversation (the `mid-conversation-system` beta,
        // which Claude Code sends): a cloud takes neither the beta nor the role, so such a request
        // reaches it written through the neutral form, its system turns joined to the system
        // prompt (SPEC §21).
        let rewritten = cloud.is_some() && request.has_system_turns();
        let (body, translated, mut dropped) = if wire == request.api && !rewritten {
            (request.upstream_body(upstream_model), false, Vec::new())
        } else {
            let neutral = self
                .neutral
                .get_or_insert_with(|| request::neutral_of(request))
                .as_ref();
            let neutral = neutral.map_err(Clone::clone)?;
            let written = request::write(wire, neutral, upstream_model, model_max_output_tokens)?;
            (written.body, true, written.dropped)
        };
        // The client's `anthropic-beta` (SPEC §21): a native Anthropic route gets the header as it
        // is (`ProviderKind::takes_anthropic_headers`); a cloud the flags it takes, in its place;
        // a route of another dialect none.
        let mut headers = Vec::new();
        let body = match cloud {
            Some(cloud) => {
                let (taken, refused) = providers::cloud_betas(request.anthropic_beta.as_deref());
                dropped.extend(refused.iter().map(|b| format!("anthropic-beta: {b}")));
                match cloud.betas {
                    BetaPlace::Body => cloud_anthropic_body(&body, cloud, &taken),
                    BetaPlace::Header => {
                        if !taken.is_empty() {
                            headers.push(("anthropic-beta", taken.join(",")));
                        }
                        cloud_anthropic_body(&body, cloud, &[])
                    }
                }
            }
            None => body,
        };
        if wire != Api::Messages && request.anthropic_beta.is_some() {
            dropped.push("anthropic-beta".into());
        }
        Ok(Outgoing {
            url,
            body,
            translated,
            dropped,
            headers,
        })
    }
}

/// Where a route of `provider` speaking `api` is sent a request for `model`.
pub fn url(provider: &Provider, api: Api, model: &str, stream: bool) -> String {
    providers::of(provider.kind()).url(provider, api, model, stream)
}

/// The headers that carry a provider's key; none for Bedrock, whose requests are signed instead.
/// For Vertex the key is the access token minted from the service account.
pub fn key_headers(provider: &Provider, key: &str) -> Vec<(&'static str, String)> {
    providers::of(provider.kind()).key_headers(key)
}

/// An Anthropic body as a cloud takes it ([`CloudAnthropic`]), with `betas` in its
/// `anthropic_beta` when there are any.
fn cloud_anthropic_body(body: &[u8], cloud: CloudAnthropic, betas: &[&str]) -> Vec<u8> {
    let Ok(mut fields) = Body::parse(body) else {
        return body.to_vec(); // written by this gateway: always an object
    };
    fields.remove("model");
    if !cloud.keep_stream {
        fields.remove("stream");
    }
    fields.set("anthropic_version", &serde_json::Value::from(cloud.version));
    if !betas.is_empty() {
        fields.set("anthropic_beta", &serde_json::Value::from(betas.to_vec()));
    }
    fields.write_with_model("", body.len()) // no `model` left to set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;
    use crate::dialects;
    use crate::providers::bedrock::BEDROCK_ANTHROPIC_VERSION;
    use crate::providers::vertex;
    use serde_json::{json, Value};

    fn provider(fields: Value) -> Provider {
        let mut p = json!({"id": "p"});
        for (k, v) in fields.as_object().unwrap() {
            p[k] = v.clone();
        }
        Provider::from_json(p)
    }

    fn messages_request(stream: bool) -> ClientRequest {
        let body = json!({"model": "m", "max_tokens": 64, "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]});
        dialects::parse_request(Api::Messages, body.to_string().as_bytes(), None).unwrap()
    }

    #[test]
    fn each_kind_has_its_own_address_and_key_header() {
        let openai = provider(json!({"base_url": "https://api.example/v1", "auth": "bearer"}));
        assert_eq!(
            url(&openai, Api::Chat, "gpt", false),
            "https://api.example/v1/chat/completions"
        );
        assert_eq!(
            key_headers(&openai, "k"),
            vec![("authorization", "Bearer k".to_string())]
        );

        let v1 = provider(
            json!({"kind": "azure", "base_url": "https://r.openai.azure.com/openai/v1/",
                                 "key_secret": "AZ"}),
        );
        assert_eq!(
            url(&v1, Api::Responses, "dep", true),
            "https://r.openai.azure.com/openai/v1/responses"
        );
        assert_eq!(key_headers(&v1, "k"), vec![("api-key", "k".to_string())]);
        let deployment = provider(json!({"kind": "azure", "key_secret": "AZ", "api_version": "2024-10-21",
            "base_url": "https://r.openai.azure.com/openai/deployments/gpt-4o"}));
        assert_eq!(
            url(&deployment, Api::Chat, "gpt-4o", false),
            "https://r.openai.azure.com/openai/deployments/gpt-4o/chat/completions?api-version=2024-10-21"
        );

        let bedrock = provider(json!({"kind": "bedrock", "region": "us-west-2",
                                      "access_key_secret": "A", "secret_key_secret": "S"}));
        assert_eq!(
            url(&bedrock, Api::Messages, "anthropic.claude-3-haiku-20240307-v1:0", true),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke-with-response-stream"
        );
        assert!(key_headers(&bedrock, "k").is_empty(), "signed, not keyed");
        assert_eq!(
            url(&bedrock, Api::Converse, "anthropic.claude-3-haiku-20240307-v1:0", false),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
        );
        assert_eq!(
            url(&bedrock, Api::Converse, "us.meta.llama3-1-8b-instruct-v1:0", true),
            "https://bedrock-runtime.us-west-2.amazonaws.com/model/us.meta.llama3-1-8b-instruct-v1%3A0/converse-stream"
        );
    }

    /// SPEC §21: a cloud gets the client's beta flags it takes, in its own place; the rest, and
    /// every flag on a route of another dialect, are dropped and listed.
    #[test]
    fn anthropic_betas_reach_each_cloud_in_its_place_and_the_rest_are_listed() {
        let mut request = messages_request(false);
        request.anthropic_beta = Some("interleaved-thinking-2025-05-14, claude-code-20250219".into());
        let bedrock = provider(json!({"kind": "bedrock", "region": "eu-west-1",
                                      "access_key_secret": "A", "secret_key_secret": "S"}));
        let o = outgoing(&request, Api::Messages, &bedrock, "anthropic.claude-v2:1", 64).unwrap();
        let body: Value = serde_json::from_slice(&o.body).unwrap();
        assert_eq!(
            body["anthropic_beta"],
            json!(["interleaved-thinking-2025-05-14"]),
            "{body}"
        );
        assert_eq!(o.dropped, vec!["anthropic-beta: claude-code-20250219".to_string()]);
        assert!(o.headers.is_empty());

        let vertex = provider(json!({"kind": "vertex", "region": "us-east5", "project": "p", "key_secret": "SA"}));
        let o = outgoing(&request, Api::Messages, &vertex, "claude@1", 64).unwrap();
        let body: Value = serde_json::from_slice(&o.body).unwrap();
        assert!(body.get("anthropic_beta").is_none(), "{body}");
        assert_eq!(
            o.headers,
            vec![("anthropic-beta", "interleaved-thinking-2025-05-14".to_string())]
        );
        assert_eq!(o.dropped, vec!["anthropic-beta: claude-code-20250219".to_string()]);

        // A native Anthropic route gets the header unchanged (from the request), nothing listed.
        let anthropic = provider(json!({"base_url": "https://api.example/v1", "auth": "x-api-key"}));
        let o = outgoing(&request, Api::Messages, &anthropic, "claude", 64).unwrap();
        assert!(o.dropped.is_empty() && o.headers.is_empty(), "{o:?}");
        assert_eq!(
            request.anthropic_headers()[1],
            (
                "anthropic-beta",
                "interleaved-thinking-2025-05-14, claude-code-20250219".to_string()
            )
        );

        let openai = provider(json!({"base_url": "https://api.example/v1", "auth": "bearer"}));
        let o = outgoing(&request, Api::Chat, &openai, "gpt", 64).unwrap();
        assert!(o.dropped.contains(&"anthropic-beta".to_string()), "{:?}", o.dropped);
        let plain = messages_request(false);
        let o = outgoing(&plain, Api::Chat, &openai, "gpt", 64).unwrap();
        assert!(
            !o.dropped.iter().any(|d| d.starts_with("anthropic-beta")),
            "{:?}",
            o.dropped
        );
    }

    /// A cloud does not take the `mid-conversation-system` beta: a conversation that asks for it
    /// reaches Bedrock and Vertex with its system messages in the system prompt, and its answer
    /// is read back through the neutral form; a native Anthropic route gets it as sent.
    #[test]
    fn system_messages_inside_a_conversation_reach_a_cloud_in_its_system_prompt() {
        let body = json!({"model": "m", "max_tokens": 64, "system": "Be brief.", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "The user is in a hurry."},
            {"role": "user", "content": "again"}]});
        let mut request = dialects::parse_request(Api::Messages, body.to_string().as_bytes(), None).unwrap();
        assert!(request.has_system_turns());
        request.anthropic_beta = Some("mid-conversation-system-2026-04-07,interleaved-thinking-2025-05-14".into());
        let bedrock = provider(json!({"kind": "bedrock", "region": "eu-west-1",
                                      "access_key_secret": "A", "secret_key_secret": "S"}));
        let vertex = provider(json!({"kind": "vertex", "region": "us-east5", "project": "p", "key_secret": "SA"}));
        for cloud in [&bedrock, &vertex] {
            let o = outgoing(&request, Api::Messages, cloud, "claude@1", 64).unwrap();
            assert!(o.translated, "{:?}", cloud.kind());
            let sent: Value = serde_json::from_slice(&o.body).unwrap();
            let text = sent.to_string();
            assert!(
                text.contains("The user is in a hurry.") && text.contains("Be brief."),
                "{text}"
            );
            assert!(
                sent["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|m| m["role"] != "system"),
                "{text}"
            );
            assert!(
                o.dropped.iter().any(|d| d.contains("mid-conversation-system")),
                "{:?}",
                o.dropped
            );
        }
        let anthropic = provider(json!({"base_url": "https://api.example/v1", "auth": "x-api-key"}));
        let o = outgoing(&request, Api::Messages, &anthropic, "claude", 64).unwrap();
        assert!(!o.translated);
        let sent: Value = serde_json::from_slice(&o.body).unwrap();
        assert_eq!(sent["messages"][1]["role"], "system");
        // The cloud's answer, read back through the neutral form, is the client's own dialect.
        let answer = json!({"id": "msg_up", "type": "message", "role": "assistant", "model": "claude",
            "content": [{"type": "text", "text": "Hello"}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 1}});
        let ctx = crate::dialects::neutral::answer::AnswerContext {
            id: "g".into(),
            model: "m".into(),
            created: 1,
            choices: 1,
            ..Default::default()
        };
        let back =
            crate::dialects::neutral::answer::body(Api::Messages, Api::Messages, answer.to_string().as_bytes(), &ctx)
                .unwrap();
        let back: Value = serde_json::from_slice(&back).unwrap();
        assert_eq!(back["content"][0]["text"], "Hello", "{back}");
    }

    #[test]
    fn a_bedrock_body_has_no_model_and_no_stream_and_bedrocks_version() {
        let bedrock = provider(
            json!({"kind": "bedrock", "region": "eu-west-1", "base_url": "http://127.0.0.1:9/x",
                                      "access_key_secret": "A", "secret_key_secret": "S"}),
        );
        for stream in [false, true] {
            let o = outgoing(
                &messages_request(stream),
                Api::Messages,
                &bedrock,
                "anthropic.claude-v2:1",
                64,
            )
            .unwrap();
            let body: Value = serde_json::from_slice(&o.body).unwrap();
            assert!(body.get("model").is_none() && body.get("stream").is_none(), "{body}");
            assert_eq!(body["anthropic_version"], BEDROCK_ANTHROPIC_VERSION);
            assert_eq!(body["max_tokens"], 64);
            assert!(!o.translated);
            assert!(
                o.url
                    .starts_with("http://127.0.0.1:9/x/model/anthropic.claude-v2%3A1/invoke"),
                "{}",
                o.url
            );
        }
    }

    #[test]
    fn a_converse_body_is_the_translated_one_for_the_converse_action() {
        let bedrock = provider(json!({"kind": "bedrock", "region": "eu-west-1",
                                      "access_key_secret": "A", "secret_key_secret": "S"}));
        for stream in [false, true] {
            let o = outgoing(
                &messages_request(stream),
                Api::Converse,
                &bedrock,
                "meta.llama3-70b",
                64,
            )
            .unwrap();
            let body: Value = serde_json::from_slice(&o.body).unwrap();
            assert_eq!(
                body,
                json!({"messages": [{"role": "user", "content": [{"text": "hi"}]}],
                       "inferenceConfig": {"maxTokens": 64}})
            );
            assert!(o.translated);
            let action = if stream { "converse-stream" } else { "converse" };
            assert!(
                o.url.ends_with(&format!("/model/meta.llama3-70b/{action}")),
                "{}",
                o.url
            );
        }
    }

    #[test]
    fn the_catalog_refuses_a_kind_without_what_it_needs_naming_the_field() {
        let doc = |provider: Value, apis: Value| {
            json!({"providers": [provider], "models": [{"id": "m", "context_window": 100, "max_output_tokens": 10,
                "routes": [{"id": "r", "provider": "p", "upstream_model": "u", "apis": apis,
                            "price": {"input_per_mtok": 1, "output_per_mtok": 1}}]}]})
        };
        let refused = |provider: Value, apis: Value| {
            Catalog::parse(doc(provider, apis).to_string().as_bytes())
                .unwrap_err()
                .field
        };
        let bedrock = json!({"id": "p", "kind": "bedrock", "region": "us-east-1",
                             "access_key_secret": "AWS_ID", "secret_key_secret": "AWS_SECRET"});
        assert!(Catalog::parse(doc(bedrock.clone(), json!(["messages"])).to_string().as_bytes()).is_ok());
        assert!(Catalog::parse(doc(bedrock.clone(), json!(["converse"])).to_string().as_bytes()).is_ok());
        let openai = json!({"id": "p", "base_url": "https://a/v1", "auth": "bearer"});
        assert_eq!(
            refused(openai, json!(["chat", "converse"])),
            "models[0].routes[0].apis[1]",
            "only Bedrock speaks Converse"
        );
        assert_eq!(
            refused(bedrock.clone(), json!(["messages", "chat"])),
            "models[0].routes[0].apis[1]"
        );
        let mut no_region = bedrock.clone();
        no_region.as_object_mut().unwrap().remove("region");
        assert_eq!(refused(no_region, json!(["messages"])), "providers[0].region");
        let mut no_secret = bedrock.clone();
        no_secret.as_object_mut().unwrap().remove("secret_key_secret");
        assert_eq!(
            refused(no_secret, json!(["messages"])),
            "providers[0].secret_key_secret"
        );
        let mut keyed = bedrock;
        keyed["key_secret"] = json!("K");
        assert_eq!(refused(keyed, json!(["messages"])), "providers[0].key_secret");

        let azure = json!({"id": "p", "kind": "azure", "base_url": "https://r.openai.azure.com/openai/v1"});
        assert_eq!(refused(azure.clone(), json!(["chat"])), "providers[0].key_secret");
        let mut with_region = azure;
        with_region["key_secret"] = json!("AZ");
        assert!(Catalog::parse(
            doc(with_region.clone(), json!(["chat", "responses"]))
                .to_string()
                .as_bytes()
        )
        .is_ok());
        with_region["region"] = json!("eastus");
        assert_eq!(refused(with_region, json!(["chat"])), "providers[0].region");

        let old = json!({"id": "p", "base_url": "https://a/v1"});
        assert_eq!(
            refused(old, json!(["chat"])),
            "providers[0].auth",
            "the three header kinds need auth or a kind"
        );
        let mixed = json!({"id": "p", "base_url": "https://a/v1", "kind": "openai", "auth": "x-api-key"});
        assert_eq!(refused(mixed, json!(["chat"])), "providers[0].auth");
    }

    #[test]
    fn an_anthropic_body_loses_its_model_keeps_its_stream_and_gets_vertexs_version() {
        let vertex_kind = crate::providers::of(crate::providers::Kind::Vertex);
        let body = cloud_anthropic_body(
            br#"{"model":"m","stream":true,"max_tokens":5,"messages":[]}"#,
            vertex_kind.anthropic_body().unwrap(),
            &[],
        );
        let v: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            json!({"stream": true, "max_tokens": 5, "messages": [], "anthropic_version": vertex::ANTHROPIC_VERSION})
        );
    }

    #[test]
    fn one_requests_outgoing_bodies_are_what_each_attempt_would_write_alone() {
        let openai = provider(json!({"base_url": "http://127.0.0.1:9/v1", "auth": "bearer"}));
        let anthropic = provider(json!({"base_url": "http://127.0.0.1:9", "auth": "x-api-key"}));
        let bedrock = provider(json!({"kind": "bedrock", "region": "eu-west-1",
                                      "access_key_secret": "A", "secret_key_secret": "S"}));
        let request = messages_request(true);
        let mut requests = Requests::new(&request);
        for (api, provider, model) in [
            (Api::Chat, &openai, "gpt-a"),
            (Api::Converse, &bedrock, "meta.llama3-70b"),
            (Api::Messages, &anthropic, "claude-b"),
            (Api::Chat, &openai, "gpt-c"),
        ] {
            assert_eq!(
                requests.outgoing(api, provider, model, 64),
                outgoing(&request, api, provider, model, 64),
                "{api:?} {model}"
            );
        }
    }
}
