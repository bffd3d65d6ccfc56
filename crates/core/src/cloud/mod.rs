//! What the clouds' own wire formats need that the four dialects (`crate::dialect`) do not: request
//! signing, binary stream framing, and the clouds' error shapes read into failure classes.
//!
//! - [`sigv4`]: AWS Signature Version 4, the headers that sign a request as it will be sent.
//! - [`eventstream`]: the `application/vnd.amazon.eventstream` frame decoder (Bedrock's streams).
//! - [`bedrock`]: Bedrock's errors (HTTP answers and stream exceptions) as [`crate::classify::Verdict`]s.
//! - [`invoke_stream`]: a Bedrock InvokeModel stream read as the Anthropic events it carries.
//! - [`vertex`]: Vertex AI's addresses and bodies, and its service-account access tokens.
//! - [`converse_stream`]: a Bedrock ConverseStream read as its events (`dialects::neutral::answer` reads
//!   them).

pub mod bedrock;
pub mod converse_stream;
pub mod eventstream;
pub mod invoke_stream;
pub mod sigv4;
pub mod vertex;
