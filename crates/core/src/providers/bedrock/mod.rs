//! AWS Bedrock (SPEC §20): Anthropic models through InvokeModel (`messages`) and any model
//! through the Converse API (`converse`), signed with Signature Version 4, answering streams in
//! binary event-stream frames.
//!
//! - [`sigv4`]: the headers that sign a request as it will be sent.
//! - [`eventstream`]: the `application/vnd.amazon.eventstream` frame decoder.
//! - [`errors`]: its errors (HTTP answers and stream exceptions) as [`crate::classify::Verdict`]s.
//! - [`invoke_stream`]: an InvokeModel stream read as the Anthropic events it carries.
//! - [`converse_stream`]: a ConverseStream read as its events (`dialects::converse` reads them).

pub mod converse_stream;
pub mod errors;
pub mod eventstream;
pub mod invoke_stream;
pub mod sigv4;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

use super::{fields_of, BetaPlace, CloudAnthropic, CountCall, Counted, Provider, ProviderDoc, ProviderKind, Setup};
use crate::api::Api;
use crate::classify::Verdict;
use sigv4::{path_segment, Credentials, SignError};

/// The `anthropic_version` Bedrock's InvokeModel takes in an Anthropic body (the version goes in
/// the body there, not in a header).
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The `bedrock` kind.
pub struct Bedrock;

/// A `bedrock` provider's own settings: its region and the secrets of the AWS access key its
/// requests are signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The AWS region: its endpoint and the signature's scope.
    pub region: String,
    pub access_key_secret: String,
    pub secret_key_secret: String,
    /// Temporary credentials' session token.
    pub session_token_secret: Option<String>,
}

impl Settings {
    /// The secrets it names, with the field naming each.
    pub fn secrets(&self) -> Vec<(&'static str, &str)> {
        let mut names = vec![
            ("access_key_secret", self.access_key_secret.as_str()),
            ("secret_key_secret", self.secret_key_secret.as_str()),
        ];
        if let Some(token) = &self.session_token_secret {
            names.push(("session_token_secret", token.as_str()));
        }
        names
    }
}

impl ProviderKind for Bedrock {
    fn apis(&self) -> &'static [Api] {
        &[Api::Messages, Api::Converse]
    }
    fn own_fields(&self) -> &'static [&'static str] {
        &[
            "region",
            "access_key_secret",
            "secret_key_secret",
            "session_token_secret",
        ]
    }
    fn takes_key_secret(&self) -> bool {
        false
    }
    fn setup(&self, doc: &ProviderDoc) -> Result<Setup, (&'static str, String)> {
        let region = doc.region.as_deref().unwrap_or_default();
        let region_ok = !region.is_empty()
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !region_ok {
            return Err((
                "region",
                "required for kind `bedrock`: an AWS region like us-east-1".into(),
            ));
        }
        let required = |field: &'static str, name: &Option<String>| {
            name.clone()
                .ok_or_else(|| (field, "required for kind `bedrock`".to_string()))
        };
        Ok(Setup::Bedrock(Settings {
            region: region.to_string(),
            access_key_secret: required("access_key_secret", &doc.access_key_secret)?,
            secret_key_secret: required("secret_key_secret", &doc.secret_key_secret)?,
            session_token_secret: doc.session_token_secret.clone(),
        }))
    }
    fn default_base(&self, setup: &Setup) -> Option<String> {
        let Setup::Bedrock(s) = setup else { return None };
        Some(format!("https://bedrock-runtime.{}.amazonaws.com", s.region))
    }
    fn url(&self, p: &Provider, api: Api, model: &str, stream: bool) -> String {
        let action = match (api, stream) {
            (Api::Converse, true) => "converse-stream",
            (Api::Converse, false) => "converse",
            (_, true) => "invoke-with-response-stream",
            (_, false) => "invoke",
        };
        format!("{}/model/{}/{action}", p.base(), path_segment(model))
    }
    /// `CountTokens` (SPEC §21): the InvokeModel body it would be sent, base64, or the Converse
    /// request's input fields; the answer's count is `inputTokens`.
    fn count(
        &self,
        p: &Provider,
        api: Api,
        model: &str,
        body: &[u8],
        _: &dyn Fn() -> Option<Counted>,
    ) -> Option<CountCall> {
        let input = match api {
            Api::Messages => json!({"invokeModel": {"body": STANDARD.encode(body)}}),
            Api::Converse => {
                let keep = ["messages", "system", "toolConfig", "additionalModelRequestFields"];
                json!({ "converse": Value::Object(fields_of(body, &keep)?) })
            }
            _ => return None,
        };
        Some(CountCall {
            url: format!("{}/model/{}/count-tokens", p.base(), path_segment(model)),
            body: serde_json::to_vec(&json!({ "input": input })).ok()?,
            tokens_at: "/inputTokens",
        })
    }
    /// None: its requests are signed instead ([`ProviderKind::sign`]).
    fn key_headers(&self, _key: &str) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Signature Version 4 for the `bedrock` service in the provider's region, with the access
    /// key (and session token) its secrets hold.
    fn sign(
        &self,
        p: &Provider,
        secret: &dyn Fn(&str) -> Option<String>,
        request: &sigv4::Request,
        now_ms: u64,
    ) -> Result<Vec<(String, String)>, SignError> {
        let Setup::Bedrock(s) = &p.setup else {
            return Ok(Vec::new());
        };
        let value = |field: &'static str, name: &str| secret(name).ok_or(SignError::MissingSecret(field));
        let credentials = Credentials {
            access_key_id: value("access_key_secret", &s.access_key_secret)?,
            secret_access_key: value("secret_key_secret", &s.secret_key_secret)?,
            session_token: match &s.session_token_secret {
                Some(name) => Some(value("session_token_secret", name)?),
                None => None,
            },
        };
        Ok(sigv4::sign(request, &credentials, &s.region, "bedrock", now_ms)?.headers)
    }
    fn anthropic_body(&self) -> Option<CloudAnthropic> {
        Some(CloudAnthropic {
            version: BEDROCK_ANTHROPIC_VERSION,
            keep_stream: false,
            betas: BetaPlace::Body,
        })
    }
    fn streams_sse(&self) -> bool {
        false
    }
    fn error_verdict(
        &self,
        status: u16,
        _retry_after: Option<&str>,
        header: &dyn Fn(&str) -> Option<String>,
        body: &[u8],
    ) -> Verdict {
        errors::classify_bedrock(status, header("x-amzn-errortype").as_deref(), body)
    }
}
