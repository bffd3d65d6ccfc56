//! The dialects by name: the [`Api`] a client calls and a route speaks, with what depends on the
//! name alone (its catalog spelling, its URL path, the wire preference). What a dialect knows
//! beyond its name is in `dialects/`, reached by `dialects::of`.

use serde::{Deserialize, Serialize};

/// A request dialect; a route lists the ones it serves natively. Clients call the first four;
/// `converse` (AWS Bedrock's Converse API) is spoken by routes only: every client reaches it
/// translated (SPEC §20).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    Chat,
    Messages,
    Responses,
    Gemini,
    Converse,
}

impl Api {
    /// Every dialect a client can call, in the order their names sort.
    pub const ALL: [Api; 4] = [Api::Chat, Api::Gemini, Api::Messages, Api::Responses];

    /// Whether clients call Switchyard in this dialect (every one but Converse).
    pub fn is_client(self) -> bool {
        self != Api::Converse
    }

    /// The name as the catalog and the generation record spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Messages => "messages",
            Api::Responses => "responses",
            Api::Gemini => "gemini",
            Api::Converse => "converse",
        }
    }

    /// The dialect a request in this one is sent in to a route that speaks `speaks` natively: its
    /// own when the route speaks it (bytes through), else the closest the route speaks (SPEC §19:
    /// the chat family first — every pair goes through one neutral form, so closeness is only
    /// how much of each request both sides can say).
    pub fn wire_for(self, speaks: &[Api]) -> Option<Api> {
        // Converse, spoken by no client, is the last choice of every one.
        let preference: [Api; 5] = match self {
            Api::Chat | Api::Converse => [Api::Chat, Api::Responses, Api::Messages, Api::Gemini, Api::Converse],
            Api::Messages => [Api::Messages, Api::Chat, Api::Responses, Api::Gemini, Api::Converse],
            Api::Responses => [Api::Responses, Api::Chat, Api::Messages, Api::Gemini, Api::Converse],
            Api::Gemini => [Api::Gemini, Api::Chat, Api::Messages, Api::Responses, Api::Converse],
        };
        preference.into_iter().find(|a| speaks.contains(a))
    }

    /// Where a route speaking this dialect is sent a request for `model` at its provider's
    /// `base_url` (Gemini names the model and the mode in the path; the others in the body).
    pub fn upstream_url(self, base_url: &str, model: &str, stream: bool) -> String {
        let base = base_url.trim_end_matches('/');
        match self {
            Api::Chat => format!("{base}/chat/completions"),
            Api::Messages => format!("{base}/messages"),
            Api::Responses => format!("{base}/responses"),
            Api::Gemini if stream => format!("{base}/models/{model}:streamGenerateContent?alt=sse"),
            Api::Gemini => format!("{base}/models/{model}:generateContent"),
            // Bedrock's own path (`crate::wire::url`); no other kind speaks Converse.
            Api::Converse if stream => format!("{base}/model/{model}/converse-stream"),
            Api::Converse => format!("{base}/model/{model}/converse"),
        }
    }

    /// Where a provider speaking this dialect at `base_url` counts a request's input tokens for
    /// `model` (SPEC §21), when the dialect has a count endpoint (Chat Completions has none).
    pub fn count_url(self, base_url: &str, model: &str) -> Option<String> {
        let base = base_url.trim_end_matches('/');
        match self {
            Api::Messages => Some(format!("{base}/messages/count_tokens")),
            Api::Responses => Some(format!("{base}/responses/input_tokens")),
            Api::Gemini => Some(format!("{base}/models/{model}:countTokens")),
            Api::Chat | Api::Converse => None,
        }
    }
}
