//! Request buffering for an HTTP/1 client (`request_buffer`, buffering/): the body is received
//! before a server is picked, up to the pool's buffer, so that a slow uploader holds the
//! switch's memory and not a server. A body by Content-Length is held in pooled buffers (what
//! came with the head moved there first, so that the body stays in order); a chunked body is
//! held in the connection's own buffer, up to its size. The server gets the held part right
//! after the head, in one write, and the rest as it comes (h1/client.rs `upload`).

use super::client::H1Client;
use crate::exchange::client::BodyRefused;
use crate::http::{BodyFraming, RequestHead};
use crate::relay::Meter;
use crate::stream::{wait, Io, TimeLimit};
use std::io;

/// The answer an HTTP/1.1 client that sent `Expect: 100-continue` waits for before its body.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

impl H1Client<'_> {
    /// Receives the body, up to `up_to` bytes of it; then the request goes on (the rest, if
    /// any, streams). A budget (`buffer_memory`) with no room leaves the body to stream, counted.
    pub(super) async fn hold_body(
        &mut self,
        up_to: u64,
        idle: TimeLimit,
        received: &Meter,
    ) -> Result<(), BodyRefused> {
        let BodyFraming::Length(length) = self.head.framing else {
            return Ok(());
        };
        let want = length.min(up_to);
        let head_len = self.head.len;
        let here = (self.body.inbuf.len() - head_len) as u64;
        if here >= want {
            return Ok(());
        }
        let came = &self.body.inbuf.filled()[head_len..];
        if !self.body.held.hold_first(came) {
            self.body.held.count_fallback();
            return Ok(());
        }
        self.body.inbuf.truncate(head_len);
        received.add(here);
        if expects_continue(self.head, self.body.inbuf.filled()) {
            crate::stream::write_all(self.body.stream, CONTINUE, idle)
                .await
                .map_err(|_| gone())?;
        }
        self.receive(want, idle, received).await
    }

    /// Reads from the client into the held body until it holds `want` bytes (never past the
    /// body: what follows is the next request's).
    async fn receive(
        &mut self,
        want: u64,
        idle: TimeLimit,
        received: &Meter,
    ) -> Result<(), BodyRefused> {
        let stream = self.body.stream;
        let held = &mut self.body.held;
        while held.len() < want {
            let remaining = want - held.len();
            let Some(chunk) = held.room() else {
                held.count_fallback();
                return Ok(());
            };
            let spare = chunk.spare();
            let max = spare
                .len()
                .min(usize::try_from(remaining).unwrap_or(usize::MAX));
            match stream.try_recv(&mut spare[..max]) {
                Ok(0) => return Err(gone()),
                Ok(n) => {
                    chunk.fill(n);
                    held.filled(n);
                    received.add(n as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    match wait(stream.readable(), idle).await {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                            return Err(BodyRefused::LATE)
                        }
                        Err(_) => return Err(gone()),
                    }
                }
                Err(_) => return Err(gone()),
            }
        }
        Ok(())
    }
}

fn gone() -> BodyRefused {
    BodyRefused::GONE
}

/// Whether the request asks for `100 Continue` before its body.
fn expects_continue(head: &RequestHead, buf: &[u8]) -> bool {
    head.version == crate::http::Version::Http11
        && head.fields.iter().any(|f| {
            f.name.get(buf).eq_ignore_ascii_case(b"expect")
                && f.value.get(buf).eq_ignore_ascii_case(b"100-continue")
        })
}
