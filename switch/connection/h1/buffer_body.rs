//! Request buffering for an HTTP/1 client (`request_buffer`, buffering/): the body is received
//! before a server is picked, up to the pool's buffer, so that a slow uploader holds the
//! switch's memory and not a server. A body by Content-Length is held in pooled buffers (what
//! came with the head moved there first, so that the body stays in order); a chunked body is
//! decoded as it comes and its data held the same way, the decoder kept for the rest, and
//! what follows its end (a pipelined request) left in the connection's buffer. The server gets
//! the held part right after the head, in one write (a chunked body's as one chunk), and the
//! rest as it comes (h1/client.rs `upload`).

use super::client::H1Client;
use crate::exchange::client::BodyRefused;
use crate::http::chunked::{ChunkedDecoder, Decoded};
use crate::http::{BodyFraming, RequestHead};
use crate::relay::Meter;
use crate::stream::{wait, Io, TimeLimit};
use crate::tls::stream::ClientStream;
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
        let length = match self.head.framing {
            BodyFraming::Length(length) => length,
            BodyFraming::Chunked => return self.hold_chunked(up_to, idle, received).await,
            BodyFraming::Empty | BodyFraming::UntilClose => return Ok(()),
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
        self.continue_if_asked(idle).await?;
        self.receive(want, idle, received).await
    }

    /// Answers `100 Continue` if the client waits for it before its body.
    async fn continue_if_asked(&mut self, idle: TimeLimit) -> Result<(), BodyRefused> {
        if expects_continue(self.head, self.body.inbuf.filled()) {
            crate::stream::write_all(self.body.stream, CONTINUE, idle)
                .await
                .map_err(|_| gone())?;
        }
        Ok(())
    }

    /// A chunked body: decoded as it comes, its data held until `up_to` bytes of it, its end,
    /// or the budget's; the decoder is kept with it for the rest.
    async fn hold_chunked(
        &mut self,
        up_to: u64,
        idle: TimeLimit,
        received: &Meter,
    ) -> Result<(), BodyRefused> {
        // Room for one buffer before a byte is decoded: with none, the body streams untouched.
        if !self.body.held.reserve(1) {
            self.body.held.count_fallback();
            return Ok(());
        }
        self.continue_if_asked(idle).await?;
        let mut decoder = ChunkedDecoder::new();
        while !self.take_chunks(&mut decoder, up_to, received)? {
            if !self.read_more(idle).await? {
                break;
            }
        }
        self.body.held.set_chunked(decoder);
        Ok(())
    }

    /// Decodes what the connection's buffer holds past the head, holding its data; `true`
    /// when holding is over (the body ended, `up_to` bytes are held, or the budget is spent).
    /// The bytes decoded leave the buffer; what follows the body's end moves up to the head.
    fn take_chunks(
        &mut self,
        decoder: &mut ChunkedDecoder,
        up_to: u64,
        received: &Meter,
    ) -> Result<bool, BodyRefused> {
        let head_len = self.head.len;
        let (inbuf, held) = (&mut *self.body.inbuf, &mut self.body.held);
        let mut at = head_len;
        let over = loop {
            let input = &inbuf.filled()[at..];
            let left = usize::try_from(up_to.saturating_sub(held.len())).unwrap_or(usize::MAX);
            if left == 0 {
                break true;
            }
            if input.is_empty() {
                break false;
            }
            // No more input than the buffer has room for: data never outgrows its input, so
            // the held part never passes `up_to`, and room for it is taken before decoding.
            let window = &input[..input.len().min(left)];
            if !held.reserve(window.len()) {
                // The budget is spent: the rest streams, counted as for a body by length.
                held.count_fallback();
                break true;
            }
            let (used, decoded) = decoder.decode(window).map_err(|_| BodyRefused::MALFORMED)?;
            if let Decoded::Data(range) = &decoded {
                received.add(held.push(&window[range.clone()]) as u64);
            }
            at += used;
            if decoded == Decoded::End {
                break true;
            }
        };
        held.trim();
        let filled = inbuf.len();
        inbuf.filled_mut().copy_within(at..filled, head_len);
        inbuf.truncate(head_len + (filled - at));
        Ok(over)
    }

    /// Reads more of the body into the connection's buffer, after the head; `false` when the
    /// head leaves no room to (the rest then streams).
    async fn read_more(&mut self, idle: TimeLimit) -> Result<bool, BodyRefused> {
        let (stream, inbuf) = (self.body.stream, &mut *self.body.inbuf);
        loop {
            if inbuf.spare_len() == 0 {
                inbuf.make_room_for_body();
            }
            if inbuf.spare().is_empty() {
                return Ok(false);
            }
            match stream.try_recv(inbuf.spare()) {
                Ok(0) => return Err(gone()),
                Ok(n) => {
                    inbuf.fill(n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => more_input(stream, idle).await?,
                Err(_) => return Err(gone()),
            }
        }
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
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => more_input(stream, idle).await?,
                Err(_) => return Err(gone()),
            }
        }
        Ok(())
    }
}

fn gone() -> BodyRefused {
    BodyRefused::GONE
}

/// Waits for the client to send more of its body, within `idle`: a timeout is the client's
/// `408`, any other failure its going away.
async fn more_input(stream: &ClientStream, idle: TimeLimit) -> Result<(), BodyRefused> {
    match wait(stream.readable(), idle).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::TimedOut => Err(BodyRefused::LATE),
        Err(_) => Err(gone()),
    }
}

/// Whether the request asks for `100 Continue` before its body.
fn expects_continue(head: &RequestHead, buf: &[u8]) -> bool {
    head.version == crate::http::Version::Http11
        && head.fields.iter().any(|f| {
            f.name.get(buf).eq_ignore_ascii_case(b"expect")
                && f.value.get(buf).eq_ignore_ascii_case(b"100-continue")
        })
}
