//! Every way an exchange with a server can fail, and whose failure it is: the server's
//! (counted by passive health, with the [`Evidence`] it gives), the client's (never counted at
//! a server), or nobody's. The exchange returns an [`ExchangeError`]; `handle_request`
//! answers it.

use crate::relay::RelayError;
use crate::state::control::{Evidence, Failure};
use crate::state::stats;
use std::io;

/// Why an exchange with a server failed.
pub(super) enum ExchangeError {
    /// A reused connection failed before any response byte: the server may have closed it
    /// while idle. Safe to retry an idempotent request without body on a new connection.
    Stale,
    /// A new connection broke (closed, reset, refused the request) before any response byte:
    /// the server failed, and an idempotent request without body may go to another one.
    Unanswered(Failure),
    /// Nothing usable came back (502), or nothing in time (504).
    Server { status: u16, failure: Failure },
    /// The client's request body was invalid (400), late (408), or the client went away (0).
    Client { status: u16, why: String },
    /// Failure after the response head went to the client: nothing to do but close.
    AfterResponse(String),
    /// This process could not go on (out of descriptors): nobody's failure, a 503.
    Local { status: u16, why: String },
}

impl ExchangeError {
    /// The server failed in a way that shows it broken (502): see [`Evidence::Broken`].
    pub(super) fn server(status: u16, why: impl Into<String>) -> ExchangeError {
        ExchangeError::Server {
            status,
            failure: Failure::broken(why),
        }
    }
}

pub(super) fn short_reason(status: u16) -> &'static str {
    match status {
        400 => "invalid request body",
        408 => "request body not received in time",
        502 => "the server failed to answer",
        504 => "the server did not answer in time",
        _ => "",
    }
}

/// An exchange that failed before the response head while the request body was still
/// incomplete on the client's side is the client's failure, whatever the server did: a client
/// that stalls its body makes the server's answer late (504) or the server give up and close
/// (nginx's `client_body_timeout`), and blaming the server for that would let any client take
/// healthy servers down (issue 22). So: 408, and no failure counted at the server. A server
/// that really died mid-upload shows itself to the next request, or to its checks.
pub(super) fn body_incomplete(e: ExchangeError) -> ExchangeError {
    match e {
        ExchangeError::Unanswered(Failure { why, .. })
        | ExchangeError::Server {
            failure: Failure { why, .. },
            ..
        } => ExchangeError::Client {
            status: 408,
            why: format!("request body incomplete when the exchange failed: {why}"),
        },
        other => other,
    }
}

/// A response that did not come in time (504) speaks of a busy server when it answered other
/// requests meanwhile (`answered`: its response count when this request went up) or is moving
/// other exchanges' bodies, of a silent one otherwise (see [`Evidence`]).
pub(super) fn timeout_evidence(
    e: ExchangeError,
    answered: u64,
    server: &stats::ServerStats,
) -> ExchangeError {
    match e {
        ExchangeError::Server {
            status: 504,
            failure,
        } => ExchangeError::Server {
            status: 504,
            failure: Failure {
                why: failure.why,
                evidence: Evidence::of_timeout(server.alive_since(answered)),
            },
        },
        other => other,
    }
}

/// Maps a failure of the request body relay to what the client is told.
pub(super) fn request_body_error(e: RelayError) -> ExchangeError {
    match e {
        RelayError::Framing(e) => ExchangeError::Client {
            status: 400,
            why: e.to_string(),
        },
        RelayError::Read(e) if e.kind() == io::ErrorKind::TimedOut => ExchangeError::Client {
            status: 408,
            why: "request body stalled".into(),
        },
        RelayError::Truncated | RelayError::Read(_) => ExchangeError::Client {
            status: 0,
            why: "client closed during the request body".into(),
        },
        RelayError::Write(e) => ExchangeError::server(502, format!("sending request body: {e}")),
    }
}
