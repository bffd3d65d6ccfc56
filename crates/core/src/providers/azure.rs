//! Azure OpenAI (SPEC §20): chat and responses on a resource's v1 API or on a deployment URL
//! with its `api-version`, the key in an `api-key` header.

use super::{base_url_required, CountCall, Counted, Provider, ProviderDoc, ProviderKind, Setup};
use crate::api::Api;
use crate::providers::bedrock::sigv4::path_segment;

/// The `azure` kind.
pub struct Azure;

/// An `azure` provider's own settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// For deployment URLs: the `api-version` query parameter (the v1 API needs none).
    pub api_version: Option<String>,
}

impl ProviderKind for Azure {
    fn apis(&self) -> &'static [Api] {
        &[Api::Chat, Api::Responses]
    }
    fn own_fields(&self) -> &'static [&'static str] {
        &["api_version"]
    }
    fn setup(&self, doc: &ProviderDoc) -> Result<Setup, (&'static str, String)> {
        if doc.key_secret.is_none() {
            return Err(("key_secret", "required for kind `azure`".into()));
        }
        base_url_required(doc)?;
        Ok(Setup::Azure(Settings {
            api_version: doc.api_version.clone(),
        }))
    }
    fn url(&self, p: &Provider, api: Api, model: &str, stream: bool) -> String {
        let base = p.base();
        let version = match &p.setup {
            Setup::Azure(s) => s.api_version.as_ref(),
            _ => None,
        };
        match version {
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
    fn count(&self, _: &Provider, _: Api, _: &str, _: &[u8], _: &dyn Fn() -> Option<Counted>) -> Option<CountCall> {
        None
    }
}
