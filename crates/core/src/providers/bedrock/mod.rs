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

use super::{fields_of, BetaPlace, CloudAnthropic, CountCall, Counted, Provider, ProviderKind};
use crate::api::Api;
use crate::classify::Verdict;
use sigv4::path_segment;

/// The `anthropic_version` Bedrock's InvokeModel takes in an Anthropic body (the version goes in
/// the body there, not in a header).
pub const BEDROCK_ANTHROPIC_VERSION: &str = "bedrock-2023-05-31";

/// The `bedrock` kind.
pub struct Bedrock;

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
    fn check(&self, p: &Provider) -> Result<(), (&'static str, String)> {
        let region = p.region.as_deref().unwrap_or_default();
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
        for (field, name) in [
            ("access_key_secret", &p.access_key_secret),
            ("secret_key_secret", &p.secret_key_secret),
        ] {
            if name.is_none() {
                return Err((field, "required for kind `bedrock`".into()));
            }
        }
        Ok(())
    }
    fn default_base(&self, p: &Provider) -> Option<String> {
        let region = p.region.as_deref()?;
        Some(format!("https://bedrock-runtime.{region}.amazonaws.com"))
    }
    fn url(&self, _p: &Provider, base: &str, api: Api, model: &str, stream: bool) -> String {
        let action = match (api, stream) {
            (Api::Converse, true) => "converse-stream",
            (Api::Converse, false) => "converse",
            (_, true) => "invoke-with-response-stream",
            (_, false) => "invoke",
        };
        format!("{base}/model/{}/{action}", path_segment(model))
    }
    /// `CountTokens` (SPEC §21): the InvokeModel body it would be sent, base64, or the Converse
    /// request's input fields; the answer's count is `inputTokens`.
    fn count(
        &self,
        _: &Provider,
        base: &str,
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
            url: format!("{base}/model/{}/count-tokens", path_segment(model)),
            body: serde_json::to_vec(&json!({ "input": input })).ok()?,
            tokens_at: "/inputTokens",
        })
    }
    /// None: its requests are signed instead (the caller's, over exactly what is sent).
    fn key_headers(&self, _key: &str) -> Vec<(&'static str, String)> {
        Vec::new()
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
