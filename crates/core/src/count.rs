//! Token counting (SPEC §21): `POST /v1/messages/count_tokens`, `POST /v1/responses/input_tokens`
//! and Gemini's `:countTokens`, answered by the serving route's own count endpoint.
//!
//! A count request is read as the generation request whose input it counts (the dialect's
//! [`Counting::request`](crate::dialects::Counting)), so it is validated, and translated for a
//! route of another dialect, exactly as that request would be. Each route then gets the body it
//! would be sent, as its provider's count request ([`ProviderKind::count`](crate::providers::ProviderKind)):
//! what it counts is what it would be charged for. A route whose provider cannot count in its
//! dialect (Chat Completions, Azure) is passed over, not sent anything. Only when no route
//! counted is the answer the local [`estimate`], marked `estimated`.

use serde_json::Value;

use crate::api::Api;
use crate::classify::{FailureClass, Verdict};
use crate::dialects::{self, ClientRequest, CHARS_PER_TOKEN};
use crate::error::ApiError;
use crate::providers::{self, CountCall, Counted, Provider};
use crate::wire::Requests;

/// A client's count request in `api`'s dialect (`gemini_model`: the model Gemini names in the
/// path), read as the generation request whose input it counts.
pub fn parse(api: Api, bytes: &[u8], gemini_model: Option<&str>) -> Result<ClientRequest, ApiError> {
    let counting = dialects::counting(api).ok_or_else(|| ApiError::NotFound {
        what: format!("Token counting in {}", api.as_str()),
    })?;
    let generation = (counting.request)(bytes)?;
    dialects::parse_counted(api, &generation, gemini_model)
}

/// What a route of `provider` speaking `wire` is sent to count the request's input for
/// `upstream_model`: the generation request it would be sent (translated when `wire` is not the
/// client's dialect) as its provider's count request — or why it cannot count it (class
/// `unable`: nothing is sent).
pub fn call(
    requests: &mut Requests,
    wire: Api,
    provider: &Provider,
    upstream_model: &str,
    model_max_output_tokens: u64,
) -> Result<CountCall, Verdict> {
    let outgoing = requests
        .outgoing(wire, provider, upstream_model, model_max_output_tokens)
        .map_err(|unable| unable.verdict())?;
    // The dialect's own count request, for the kinds that take it as it is (made only then).
    let own = || {
        let c = dialects::counting(wire)?;
        let body = (c.body)(&outgoing.body, upstream_model).ok()?;
        Some(Counted {
            body,
            tokens_at: c.tokens_at,
        })
    };
    providers::of(provider.kind())
        .count(provider, wire, upstream_model, &outgoing.body, &own)
        .ok_or_else(|| {
            Verdict::new(
                FailureClass::Unable,
                &format!("this route's provider counts no tokens in {}", wire.as_str()),
            )
        })
}

/// The count in a provider's answer, at `tokens_at` (its [`CountCall::tokens_at`]).
pub fn tokens(tokens_at: &str, answer: &[u8]) -> Result<u64, Verdict> {
    serde_json::from_slice::<Value>(answer)
        .ok()
        .and_then(|v| v.pointer(tokens_at).and_then(Value::as_u64))
        .ok_or_else(|| Verdict::bad("the count answer has no count"))
}

/// The count as a client of `api` gets it; `estimated`: the local [`estimate`], no route's.
pub fn answer(api: Api, tokens: u64, estimated: bool) -> Value {
    dialects::counting(api).map_or(Value::Null, |c| (c.answer)(tokens, estimated))
}

/// The local estimate, used only when no route counted: the request body's bytes divided by
/// [`CHARS_PER_TOKEN`], rounded up. JSON's punctuation and field names make it an overcount of
/// what a tokenizer finds in plain prose (by roughly a tenth to a third); it never undercounts
/// text by much, which is what a client deciding when to compact a conversation needs.
pub fn estimate(request: &ClientRequest) -> u64 {
    request.body_len.div_ceil(CHARS_PER_TOKEN) as u64
}

#[cfg(test)]
mod tests;
