//! The end of a client connection: closing without losing the last response.

use super::Connection;
use crate::stream::{read_some, Io, TimeLimit};
use std::time::Duration;
use tokio::time::Instant;

impl Connection {
    /// Closes the client connection without losing the last response. Closing with unread
    /// bytes from the client (a pipelined request, the rest of a refused body, a stray CRLF)
    /// makes the kernel reset the connection and discard what it has not sent yet, which can
    /// destroy the response. So our side is shut down first, then what the client still sends
    /// is read and dropped, briefly.
    pub(super) async fn linger(&mut self) {
        const LINGER_TIME: Duration = Duration::from_secs(2);
        const LINGER_BYTES: usize = 1 << 20;
        // Under TLS the close always starts with a close_notify: a client reading a body
        // delimited by the close learns that it ended, not that it was cut.
        let mut shut = false;
        if self.response_corked || self.client.tls().is_some() {
            // The held-back answer leaves now, with the FIN in the same segment, before
            // anything the client sends meanwhile could turn the close into a reset.
            let _ = self.client.shutdown_write().await;
            shut = true;
        }
        // Asked of the kernel, not of the reactor's readiness: bytes may have arrived since the
        // reactor last looked (or the socket never joined it).
        if !self.unread_input && self.inbuf.is_empty() && !self.client.has_unread_bytes() {
            // Nothing unread: a plain close cannot reset the connection.
            return;
        }
        if !shut {
            let _ = self.client.shutdown_write().await;
        }
        let deadline = Instant::now() + LINGER_TIME;
        self.inbuf.consume(self.inbuf.len());
        let mut dropped = 0;
        while dropped < LINGER_BYTES {
            match read_some(&self.client, &mut self.inbuf, TimeLimit::Until(deadline)).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    dropped += n;
                    self.inbuf.consume(n);
                }
            }
        }
    }
}
