//! The request going up: its head as HTTP/1.1 text (http/rewrite.rs writes it once per
//! request, the same for every server of the pool), with the body in the same write when it is
//! small and already here.

use super::H1Server;
use crate::exchange::client::Origin;
use crate::exchange::failure::ExchangeError;
use crate::http::rewrite::{write_request_head, RequestEdit};
use crate::http::RequestHead;
use crate::state::control::Failure;
use crate::stream::{write_both, Then, TimeLimit};

impl H1Server<'_> {
    /// Writes the head the server gets for `request` (its head and the bytes its spans index)
    /// into `out` (http/rewrite.rs: X-Forwarded-For and -Proto from `origin`, `host_field` when
    /// the request has no Host of its own, the framing), with what the rule changes (`edit`).
    pub(crate) fn write_head(
        out: &mut Vec<u8>,
        (head, bytes): (&RequestHead, &[u8]),
        origin: Origin<'_>,
        host_field: &[u8],
        edit: RequestEdit<'_>,
    ) {
        let client = origin.forwarded_for;
        write_request_head(out, head, bytes, client, host_field, origin.scheme, edit);
    }

    /// Adds `Connection: close` to a head [`H1Server::write_head`] wrote (which has no
    /// Connection field of the client's: connection fields are the switch's own).
    pub(crate) fn ask_close(out: &mut Vec<u8>) {
        if out.ends_with(b"\r\n\r\n") {
            out.truncate(out.len() - 2);
            out.extend_from_slice(b"Connection: close\r\n\r\n");
        }
    }

    /// Sends `head` (after `preamble`: a PROXY header, on a new connection of a `send_proxy`
    /// pool) and `early`, a whole small body, in one write. A reused connection that fails
    /// here may have been closed by the server while idle ([`ExchangeError::Stale`]).
    pub(crate) async fn send_request(
        &mut self,
        preamble: &[u8],
        head: &[u8],
        early: &[u8],
    ) -> Result<(), ExchangeError> {
        let joined;
        let head = if preamble.is_empty() {
            head
        } else {
            joined = [preamble, head].concat();
            &joined[..]
        };
        let request = self.down.request;
        // Pushed at once even when a body follows: the client may wait for 100 Continue
        // before sending it, and MSG_MORE would hold the head back for up to 200 ms.
        let limit = TimeLimit::Idle(request.idle);
        match write_both(self.up.socket, head, early, Then::Push, limit).await {
            Ok(()) => Ok(()),
            Err(_) if request.reused => Err(ExchangeError::Stale),
            Err(e) => Err(ExchangeError::Unanswered(Failure::broken(format!(
                "sending the request: {e}"
            )))),
        }
    }
}
