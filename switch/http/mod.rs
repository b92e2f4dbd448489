//! HTTP/1.x framing (RFC 9112) for both sides of the switch.
//!
//! Heads are parsed with httparse into [`Span`]s that point into the connection's own read
//! buffer, so a request costs no allocation once the connection's vectors have grown; heads sent
//! on are rebuilt (never the client's raw bytes), so whatever httparse tolerates cannot reach a
//! server in an ambiguous form.

pub mod chunked;
pub mod fields;
pub mod grpc;
pub mod head_progress;
pub mod head_writer;
pub mod host;
pub mod part;
pub mod path;
pub mod request;
mod request_fields;
mod request_head;
pub mod request_message;
pub mod response;
pub mod rewrite;
pub mod status;

pub use fields::{Field, Span, Version};
pub use head_progress::HeadProgress;
pub use request::{parse_request, RequestHead};
pub use response::{parse_response, ResponseHead};

/// The largest request or response head accepted (request line and all fields).
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The most header fields in one head.
pub const MAX_HEADER_FIELDS: usize = 100;

/// How the body of a message is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body at all.
    Empty,
    /// Exactly this many bytes (Content-Length).
    Length(u64),
    /// Transfer-Encoding: chunked.
    Chunked,
    /// Response bytes until the server closes the connection.
    UntilClose,
}

/// Why a head was refused; the switch answers `status` and closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadError {
    pub status: u16,
    pub reason: &'static str,
}

impl HeadError {
    pub const fn bad_request(reason: &'static str) -> Self {
        HeadError {
            status: 400,
            reason,
        }
    }
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}
