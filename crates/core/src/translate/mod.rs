//! Translation between the four client dialects (SPEC §19): a request written for one API sent to
//! a route that speaks another, and the route's answer turned back into the client's API.
//!
//! Both directions go through a neutral form (not through one hub dialect), so every pair costs one
//! lossy step in and one out: `request` reads a client body into a neutral request and writes it in
//! the route's dialect (or says which field cannot be carried); `answer` reads the route's stream
//! events and whole bodies into neutral answer events and writes them in the client's dialect, as
//! they arrive.

pub mod answer;
pub mod request;

use crate::catalog::Api;
use crate::classify::{FailureClass, Verdict};
use crate::dialect::ClientRequest;

pub use request::Unable;

/// What one attempt sends a route: where, what, and which client fields it leaves out.
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub url: String,
    pub body: Vec<u8>,
    /// The request was translated into the route's dialect (not sent as the client wrote it).
    pub translated: bool,
    /// Client fields left out in translation because they have no effect on the answer.
    pub dropped: Vec<String>,
}

/// The request as a route speaking `wire` gets it at `base_url` for `upstream_model`: the client's
/// own body with the model replaced when `wire` is the client's dialect, else translated — or the
/// client field the route's dialect cannot carry.
pub fn outgoing(
    request: &ClientRequest,
    wire: Api,
    base_url: &str,
    upstream_model: &str,
    model_max_output_tokens: u64,
) -> Result<Outgoing, Unable> {
    let url = wire.upstream_url(base_url, upstream_model, request.stream);
    if wire == request.api {
        return Ok(Outgoing {
            url,
            body: request.upstream_body(upstream_model),
            translated: false,
            dropped: Vec::new(),
        });
    }
    let written = request::translate_request(request, wire, upstream_model, model_max_output_tokens)?;
    Ok(Outgoing {
        url,
        body: written.body,
        translated: true,
        dropped: written.dropped,
    })
}

impl Unable {
    /// The attempt's verdict: `unable`, naming the field — nothing was sent, nothing is blamed,
    /// and a request no route could take gets a 400 naming it (`Plan::final_error`).
    pub fn verdict(&self) -> Verdict {
        Verdict {
            param: Some(self.field.clone()),
            ..Verdict::new(FailureClass::Unable, &self.to_string())
        }
    }
}
