//! The response head: read from the server connection until a head is in (an interim 1xx one
//! or the final one), parsed in place.

use super::H1Download;
use crate::exchange::failure::ExchangeError;
use crate::exchange::server::HeadRead;
use crate::http::{parse_response, HeadProgress, MAX_HEAD_BYTES};
use crate::relay::parts::PartReader;
use crate::relay::Meter;
use crate::state::control::Failure;
use crate::stream::{read_some, wait, Io, TimeLimit};
use std::io;

impl H1Download<'_> {
    /// Reads the server's answer until a response head is in `response`: an interim one (the
    /// caller passes it on and reads again) or the final one (or a 101), whose body is read
    /// next.
    ///
    /// The server may stay silent for `idle` at most, counting only time in which no byte
    /// moved either way: while the request body is still going up (`upload` advancing),
    /// silence is fine.
    pub(super) async fn read_response_head(
        &mut self,
        upload: &Meter,
    ) -> Result<HeadRead, ExchangeError> {
        // The interim head read last goes.
        self.buf.consume(std::mem::take(&mut self.head_len));
        let idle = self.request.idle;
        let reused = self.request.reused;
        let mut uploaded = upload.get();
        let mut progress = HeadProgress::default();
        loop {
            if !self.buf.is_empty() {
                self.received_any = true;
            }
            if !self.buf.is_empty() && progress.worth_parsing(self.buf.filled()) {
                if let Some(read) = self.parse()? {
                    return Ok(read);
                }
            }
            let received_any = self.received_any;
            match self.read_more(TimeLimit::Idle(idle)).await {
                Ok(0) if reused && !received_any => return Err(ExchangeError::Stale),
                Ok(0) if !received_any => {
                    return Err(ExchangeError::Unanswered(Failure::broken(
                        "server closed before any response byte",
                    )))
                }
                Ok(0) => {
                    return Err(ExchangeError::server(
                        502,
                        "server closed before a complete response head",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    let now = upload.get();
                    if now == uploaded {
                        return Err(ExchangeError::server(504, "no response in time"));
                    }
                    uploaded = now;
                }
                Err(_) if reused && !received_any => return Err(ExchangeError::Stale),
                Err(e) if !received_any => {
                    return Err(ExchangeError::Unanswered(Failure::broken(format!(
                        "reading the response: {e}"
                    ))))
                }
                Err(e) => return Err(ExchangeError::server(502, format!("reading response: {e}"))),
            }
        }
    }

    /// Reads more of the answer. The buffer's storage is taken only once the server has sent
    /// something: an exchange waiting for its answer (a slow server, a body still going up)
    /// holds no read buffer, as HAProxy takes buffers on demand (the first read waits for
    /// readiness instead of failing with `EAGAIN` first, so no system call is added).
    async fn read_more(&mut self, limit: TimeLimit) -> io::Result<usize> {
        let tls_holds_input = self
            .socket
            .tls()
            .is_some_and(|tls| tls.has_buffered_input());
        if !self.buf.is_allocated() && !tls_holds_input {
            wait(self.socket.readable(), limit).await?;
        }
        self.buf.make_room_for_head(MAX_HEAD_BYTES);
        read_some(self.socket, self.buf, limit).await
    }

    /// Parses what the server sent so far: `None` when more bytes are needed.
    fn parse(&mut self) -> Result<Option<HeadRead>, ExchangeError> {
        match parse_response(self.buf.filled(), self.request.kind, self.response) {
            Ok(true) if self.response.is_informational() && self.response.status != 101 => {
                self.head_len = self.response.len;
                Ok(Some(HeadRead::Interim))
            }
            Ok(true) => {
                // The body begins after the head, which stays in the buffer until then.
                self.body = PartReader::new(self.response.framing, self.response.len);
                Ok(Some(HeadRead::Final))
            }
            Ok(false) => Ok(None),
            Err(bad) => Err(ExchangeError::bad_response(bad)),
        }
    }
}
