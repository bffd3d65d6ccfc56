//! Azure OpenAI (SPEC §20): chat and responses on a resource's v1 API or on a deployment URL
//! with its `api-version`, the key in an `api-key` header.

use super::{base_url_required, CountCall, Counted, Provider, ProviderKind};
use crate::api::Api;
use crate::providers::bedrock::sigv4::path_segment;

/// The `azure` kind.
pub struct Azure;

impl ProviderKind for Azure {
    fn apis(&self) -> &'static [Api] {
        &[Api::Chat, Api::Responses]
    }
    fn own_fields(&self) -> &'static [&'static str] {
        &["api_version"]
    }
    fn check(&self, p: &Provider) -> Result<(), (&'static str, String)> {
        if p.key_secret.is_none() {
            return Err(("key_secret", "required for kind `azure`".into()));
        }
        base_url_required(p)
    }
    fn url(&self, p: &Provider, base: &str, api: Api, model: &str, stream: bool) -> String {
        match &p.api_version {
            Some(version) => format!(
                "{}?api-version={}",
                api.upstream_url(base, model, stream),
                path_segment(version)
            ),
            None => api.upstream_url(base, model, stream),
        }
    }
    fn key_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        vec![("api-key", key.to_string())]
    }
    /// Azure OpenAI publishes no input-token count: its routes do not count (SPEC §21).
    fn count(
        &self,
        _: &Provider,
        _: &str,
        _: Api,
        _: &str,
        _: &[u8],
        _: &dyn Fn() -> Option<Counted>,
    ) -> Option<CountCall> {
        None
    }
}
