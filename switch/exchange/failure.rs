//! Every way an exchange with a server can fail, classified in this one place: the status the
//! client gets, whose failure it is ([`Blame`]: the server's, counted by passive health with the
//! [`Evidence`] it gives; the client's, never counted at a server; or nobody's), whether the
//! request may go to the next server, and what is counted at the server. The steps return an
//! [`ExchangeError`]; [`ExchangeError::verdict`] says what follows, and `Exchange::failed`
//! (mod.rs) carries it out.
//!
//! A response the server did send is never evidence that it is dead. A head the switch cannot
//! relay after a valid status line (CR, LF or NUL in a value, a bad `Content-Length`, too many
//! or too large fields) is answered `502` and counted in the server's `response_errors`, but
//! passive health hears it as [`Evidence::Answered`] and counts nothing: what is wrong may be a
//! field its application filled from the request, and counting it let six requests take both
//! servers of a pool down (issue 42; the control bytes an application lets through are relayed
//! since: http/response.rs). nginx counts an `invalid_header` toward `max_fails`; HAProxy counts
//! an invalid response only under `observe layer7`, off by default. A server that answers every
//! request so is found by its active check, which no client steers. An answer that is not HTTP
//! at all (no `HTTP/1.x NNN` first: a wrong port) stays [`Evidence::Broken`].

use super::connect::{ConnectFailure, OUT_OF_DESCRIPTORS};
use super::Picker;
use crate::http::response::BadResponse;
use crate::relay::RelayError;
use crate::state::control::{self, Evidence, Failure};
use crate::state::stats;
use std::io;

/// Why an exchange with a server failed.
pub(crate) enum ExchangeError {
    /// A reused connection failed before any response byte: the server may have closed it
    /// while idle. Safe to retry an idempotent request without body on a new connection.
    Stale,
    /// The server did not process the request: an HTTP/2 stream it refused (`REFUSED_STREAM`),
    /// one a GOAWAY left unprocessed, or a connection that could take no new stream. Safe to
    /// send again on another stream whatever the method (RFC 9113 section 8.7).
    Refused,
    /// A new connection broke (closed, reset, refused the request) before any response byte:
    /// the server failed, and an idempotent request without body may go to another one.
    Unanswered(Failure),
    /// Nothing usable came back (502), or nothing in time (504).
    Server { status: u16, failure: Failure },
    /// The client's request body was invalid (400), late (408), or the client went away (0).
    Client { status: u16, why: String },
    /// Failure after the response head went to the client: nothing to do but close. `side`
    /// says whose: a client that resets or stops reading is not the server's failure.
    AfterResponse { why: String, side: Side },
    /// This process could not go on (out of descriptors): nobody's failure, a 503.
    Local { status: u16, why: String },
}

impl ExchangeError {
    /// The server failed in a way that shows it broken (502): see [`Evidence::Broken`].
    pub(crate) fn server(status: u16, why: impl Into<String>) -> ExchangeError {
        ExchangeError::Server {
            status,
            failure: Failure::broken(why),
        }
    }

    /// The server's head cannot be relayed (502): [`Evidence::Answered`] when it began with a
    /// valid status line, [`Evidence::Broken`] when it is not HTTP.
    pub(crate) fn bad_response(bad: BadResponse) -> ExchangeError {
        ExchangeError::Server {
            status: 502,
            failure: Failure {
                why: bad.to_string(),
                evidence: match bad.answered {
                    true => Evidence::Answered,
                    false => Evidence::Broken,
                },
            },
        }
    }
}

/// The reason an error response gives for `status`.
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

impl From<ConnectFailure> for ExchangeError {
    fn from(failure: ConnectFailure) -> ExchangeError {
        match failure {
            ConnectFailure::OutOfDescriptors => ExchangeError::Local {
                status: 503,
                why: OUT_OF_DESCRIPTORS.to_string(),
            },
            ConnectFailure::Server(failure) => ExchangeError::Unanswered(failure),
        }
    }
}

/// The side of an exchange a relay failed on after the response head went out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// The client reset, closed or stopped reading.
    Client,
    /// The server closed early, failed, or broke the body's framing.
    Server,
}

impl ExchangeError {
    /// A response body that could not be relayed: writing to the client failed (its failure),
    /// or reading the server did (the server's).
    pub(super) fn response_relay(e: RelayError) -> ExchangeError {
        let side = match e {
            RelayError::Write(_) => Side::Client,
            RelayError::Read(_) | RelayError::Truncated | RelayError::Framing(_) => Side::Server,
        };
        ExchangeError::AfterResponse {
            why: e.to_string(),
            side,
        }
    }
}

/// Whose failure a failed exchange is.
pub(super) enum Blame {
    /// The server's: counted as a response error (and a timeout for 504), and heard by
    /// passive health with its evidence.
    Server(Failure),
    /// The client's (its body invalid or late, or it went away), a reused connection the
    /// server had closed while idle, or this process's: nothing is counted at the server.
    NotTheServer,
}

/// What follows a failed exchange.
pub(super) enum Verdict {
    /// The request reached no server and may go to the next one (the failure counted first).
    Retry(Failure),
    /// The client gets `status` (0: it went away, nobody to answer).
    Answer {
        status: u16,
        why: String,
        blame: Blame,
    },
    /// The relay broke off after the response head went to the client: nothing to do but
    /// close (when the server's side broke, counted as a response error at the server; never
    /// reported to passive health).
    BrokeOff { why: String, side: Side },
}

impl ExchangeError {
    /// Classifies the failure; `retry_allowed`: the request may be sent to another server
    /// (idempotent, without body, attempts left).
    pub(super) fn verdict(self, retry_allowed: bool) -> Verdict {
        let (status, why, blame) = match self {
            ExchangeError::Unanswered(failure) if retry_allowed => return Verdict::Retry(failure),
            ExchangeError::Unanswered(failure) => {
                (502, failure.why.clone(), Blame::Server(failure))
            }
            ExchangeError::Stale => (
                502,
                "server closed the connection".to_string(),
                Blame::NotTheServer,
            ),
            ExchangeError::Refused => (
                502,
                "server refused the request".to_string(),
                Blame::NotTheServer,
            ),
            ExchangeError::Server { status, failure } => {
                (status, failure.why.clone(), Blame::Server(failure))
            }
            ExchangeError::Client { status, why } | ExchangeError::Local { status, why } => {
                (status, why, Blame::NotTheServer)
            }
            ExchangeError::AfterResponse { why, side } => return Verdict::BrokeOff { why, side },
        };
        Verdict::Answer { status, why, blame }
    }
}

/// Counts a failure the client is answered for at the server it blames, and returns what passive
/// health is to hear of it.
pub(super) fn counted_at_server(
    blame: Blame,
    status: u16,
    server: &stats::ServerStats,
) -> Option<Failure> {
    match blame {
        Blame::Server(failure) => {
            stats::bump(&server.response_errors);
            if status == 504 {
                stats::bump(&server.timeouts);
            }
            Some(failure)
        }
        Blame::NotTheServer => None,
    }
}

/// A reused connection that failed before any response byte, its request sent again on a new
/// one: a response error and a retry at the server, not a failure (it may have closed the
/// connection while idle).
pub(super) fn count_stale_retry(server: &stats::ServerStats) {
    stats::bump(&server.response_errors);
    stats::bump(&server.retries);
}

impl Picker<'_> {
    /// A server failed this request: passive health detection hears of it, and the log
    /// does, at most once a second per server.
    pub(crate) fn server_failed(&self, server: usize, failure: Failure) {
        let pool = self.pool;
        let backend = &pool.backends[server];
        if let Some(unlogged) = backend.may_warn(self.cx.timer.now_ms()) {
            let why = &failure.why;
            let busy = match failure.evidence {
                Evidence::Busy => {
                    " (busy: it answered other requests meanwhile; not counted against it)"
                }
                Evidence::Answered => " (it answered: not counted against it)",
                Evidence::Broken | Evidence::Silent => "",
            };
            if unlogged > 0 {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why}{busy} ({unlogged} more failures since the last warning)");
            } else {
                tracing::warn!(pool = %pool.name, server = %backend.addr, "{why}{busy}");
            }
        }
        control::exchange_failed(&self.cx.shared.generation, pool, server, failure);
    }
}
