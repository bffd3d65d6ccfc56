//! Translation between the four client dialects (SPEC §19): a request written for one API sent to
//! a route that speaks another, and the route's answer turned back into the client's API.
//!
//! Both directions go through a neutral form (not through one hub dialect), so every pair costs one
//! lossy step in and one out: `request` reads a client body into a neutral request and writes it in
//! the route's dialect (or says which field cannot be carried); `answer` reads the route's stream
//! events and whole bodies into neutral answer events and writes them in the client's dialect, as
//! they arrive. Each dialect's own reader and writer live in its folder (`dialects/<name>/request.rs`
//! and `answer.rs`), reached through the registry (`dialects::of`); what is here is the
//! form and the machinery they share.

pub mod answer;
pub mod request;

use crate::classify::{FailureClass, Verdict};

pub use request::Unable;

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
