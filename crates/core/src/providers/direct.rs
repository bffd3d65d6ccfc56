//! The kinds whose key is one header and whose routes may speak every client dialect: `openai`
//! (`Authorization: Bearer`), `anthropic` (`x-api-key`, with `anthropic-version` and the
//! client's `anthropic-beta` as headers) and `gemini` (`x-goog-api-key`). They differ in that header only.

use super::{base_url_required, AuthScheme, ProviderDoc, ProviderKind, Setup};
use crate::api::Api;

/// One header-key kind.
pub struct Direct {
    auth: AuthScheme,
}

/// OpenAI and every OpenAI-compatible provider.
pub const OPENAI: Direct = Direct {
    auth: AuthScheme::Bearer,
};
/// Anthropic's own API.
pub const ANTHROPIC: Direct = Direct {
    auth: AuthScheme::XApiKey,
};
/// Google's Gemini API.
pub const GEMINI: Direct = Direct {
    auth: AuthScheme::XGoogApiKey,
};

impl ProviderKind for Direct {
    fn apis(&self) -> &'static [Api] {
        &Api::ALL
    }
    fn header_auth(&self) -> Option<AuthScheme> {
        Some(self.auth)
    }
    fn setup(&self, doc: &ProviderDoc) -> Result<Setup, (&'static str, String)> {
        base_url_required(doc)?;
        Ok(match self.auth {
            AuthScheme::Bearer => Setup::Openai,
            AuthScheme::XApiKey => Setup::Anthropic,
            AuthScheme::XGoogApiKey => Setup::Gemini,
        })
    }
    fn key_headers(&self, key: &str) -> Vec<(&'static str, String)> {
        match self.auth {
            AuthScheme::Bearer => vec![("authorization", format!("Bearer {key}"))],
            AuthScheme::XApiKey => vec![("x-api-key", key.to_string())],
            AuthScheme::XGoogApiKey => vec![("x-goog-api-key", key.to_string())],
        }
    }
    fn takes_anthropic_headers(&self) -> bool {
        self.auth == AuthScheme::XApiKey
    }
}
