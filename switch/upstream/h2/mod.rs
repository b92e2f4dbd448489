//! HTTP/2 to a server (`protocol = "h2"`, or `"auto"` when the server chose `h2`), on the h2
//! crate's client side: the request made from the request's message (request.rs; written by
//! the same writer as the HTTP/1.1 head, with no HTTP/1.1 text made), its body sent as DATA
//! within the stream's flow-control window ([`H2Upload`]), the response head given to the
//! exchange as a message head (response_head.rs: status and fields, framed by the stream), and
//! its body as the DATA and trailers that came ([`H2Download`]). Streams to one server share
//! few connections (connections.rs), each run by a task of the worker (driver.rs) over the
//! switch's own stream (io.rs).

pub mod connections;
pub(crate) mod driver;
pub(crate) mod io;
pub(crate) mod request;
mod response_head;

use crate::buffer::IoBuf;
use crate::exchange::failure::ExchangeError;
use crate::exchange::server::{
    H1Wire, HeadRead, RequestBodySink, ResponseBody, ResponseSource, ServerSide,
};
use crate::http::part::BodyPart;
use crate::http::response::RequestKind;
use crate::http::{BodyFraming, ResponseHead};
use crate::relay::{Meter, RelayError};
use crate::socket::Socket;
use crate::stream::{wait, TimeLimit};
use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use std::future::poll_fn;
use std::io as stdio;
use std::time::Duration;

/// One request on an HTTP/2 stream to a server: its two directions, which run at once.
pub(crate) struct H2Server<'x> {
    up: H2Upload,
    down: H2Download<'x>,
}

impl<'x> H2Server<'x> {
    /// The stream whose request went with `send` (`None`: the request ended with its head)
    /// and whose response comes with `response`; the response head's bytes go into `buf` and
    /// its form into `head`.
    pub(crate) fn new(
        send: Option<SendStream<Bytes>>,
        response: ResponseFuture,
        (buf, head): (&'x mut IoBuf, &'x mut ResponseHead),
        kind: RequestKind,
        idle: Duration,
    ) -> Self {
        buf.consume(buf.len());
        H2Server {
            up: H2Upload {
                ended: send.is_none(),
                send,
                idle,
            },
            down: H2Download {
                response: Some(response),
                body: None,
                buf,
                head,
                kind,
                idle,
                data: Bytes::new(),
                trailers: Vec::new(),
                state: BodyState::Data,
            },
        }
    }
}

impl<'x> ServerSide for H2Server<'x> {
    type Up = H2Upload;
    type Down = H2Download<'x>;

    fn split(&mut self) -> (&mut H2Upload, &mut H2Download<'x>) {
        (&mut self.up, &mut self.down)
    }
}

/// An h2 error as the relay sees it.
pub(crate) fn io_error(e: h2::Error) -> stdio::Error {
    stdio::Error::other(e)
}

/// The request body, sent as DATA (and trailers) on the stream.
pub(crate) struct H2Upload {
    send: Option<SendStream<Bytes>>,
    /// END_STREAM went.
    ended: bool,
    idle: Duration,
}

impl H2Upload {
    /// Sends `data` as DATA frames as the stream's window opens, each wait bounded by `idle`.
    async fn send_data(&mut self, data: &[u8]) -> Result<(), RelayError> {
        let Some(send) = self.send.as_mut() else {
            return Ok(());
        };
        let mut rest = data;
        while !rest.is_empty() {
            send.reserve_capacity(rest.len());
            let window = wait(
                poll_fn(|cx| match send.poll_capacity(cx) {
                    std::task::Poll::Ready(Some(r)) => std::task::Poll::Ready(r.map_err(io_error)),
                    std::task::Poll::Ready(None) => std::task::Poll::Ready(Err(
                        stdio::Error::from(stdio::ErrorKind::BrokenPipe),
                    )),
                    std::task::Poll::Pending => std::task::Poll::Pending,
                }),
                TimeLimit::Idle(self.idle),
            )
            .await
            .map_err(RelayError::Write)?;
            let n = window.min(rest.len());
            if n == 0 {
                continue;
            }
            send.send_data(Bytes::copy_from_slice(&rest[..n]), false)
                .map_err(|e| RelayError::Write(io_error(e)))?;
            rest = &rest[n..];
        }
        Ok(())
    }
}

impl RequestBodySink for H2Upload {
    async fn send(&mut self, part: BodyPart<'_>) -> Result<(), RelayError> {
        if self.ended {
            return Ok(());
        }
        match part {
            BodyPart::Data(data) => self.send_data(data).await,
            BodyPart::Trailers(trailers) => {
                self.ended = true;
                let map = response_head::trailer_map(trailers);
                match self.send.as_mut() {
                    Some(send) => send
                        .send_trailers(map)
                        .map_err(|e| RelayError::Write(io_error(e))),
                    None => Ok(()),
                }
            }
            BodyPart::End => {
                self.ended = true;
                match self.send.as_mut() {
                    Some(send) => send
                        .send_data(Bytes::new(), true)
                        .map_err(|e| RelayError::Write(io_error(e))),
                    None => Ok(()),
                }
            }
        }
    }

    fn h1_wire(&self) -> Option<&Socket> {
        None
    }
}

/// Where the response body's reading stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BodyState {
    /// DATA may come.
    Data,
    /// The trailers were given: only the end follows.
    Trailed,
    /// The end was given.
    Ended,
}

/// The response, from the stream.
pub(crate) struct H2Download<'x> {
    /// Until the head came.
    response: Option<ResponseFuture>,
    /// From the head on.
    body: Option<RecvStream>,
    buf: &'x mut IoBuf,
    head: &'x mut ResponseHead,
    kind: RequestKind,
    idle: Duration,
    /// The DATA given last.
    data: Bytes,
    /// The trailers, as field lines.
    trailers: Vec<u8>,
    state: BodyState,
}

impl ResponseSource for H2Download<'_> {
    async fn read_head(&mut self, uploaded: &Meter) -> Result<HeadRead, ExchangeError> {
        self.read_response_head(uploaded).await
    }

    fn head(&self) -> (&ResponseHead, &[u8]) {
        (self.head, self.buf.filled())
    }
}

impl ResponseBody for H2Download<'_> {
    async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
        match self.state {
            BodyState::Ended => return Ok(BodyPart::End),
            BodyState::Trailed => {
                self.state = BodyState::Ended;
                return Ok(BodyPart::End);
            }
            BodyState::Data => {}
        }
        let limit = TimeLimit::Idle(self.idle);
        let Some(body) = self.body.as_mut() else {
            self.state = BodyState::Ended;
            return Ok(BodyPart::End);
        };
        loop {
            let next = wait(async { Ok::<_, stdio::Error>(body.data().await) }, limit)
                .await
                .map_err(RelayError::Read)?;
            match next {
                Some(Ok(data)) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    if data.is_empty() {
                        continue;
                    }
                    if self.head.framing == BodyFraming::Empty {
                        // Content in an answer that has none (204, 304, to HEAD): HTTP/1.1
                        // would read it as the next answer on the client's connection
                        // (response splitting). Malformed (RFC 9113 section 8.1.1): refused,
                        // the client's connection closed.
                        return Err(RelayError::Read(stdio::Error::new(
                            stdio::ErrorKind::InvalidData,
                            "DATA in an HTTP/2 answer that has no content",
                        )));
                    }
                    self.data = data;
                    return Ok(BodyPart::Data(&self.data));
                }
                Some(Err(e)) => return Err(RelayError::Read(io_error(e))),
                None => break,
            }
        }
        let trailers = wait(
            async { Ok::<_, stdio::Error>(body.trailers().await) },
            limit,
        )
        .await
        .map_err(RelayError::Read)?
        .map_err(|e| RelayError::Read(io_error(e)))?;
        match trailers {
            Some(map) if !map.is_empty() => {
                self.trailers.clear();
                response_head::put_field_lines(&mut self.trailers, &map);
                self.state = BodyState::Trailed;
                Ok(BodyPart::Trailers(crate::http::part::Trailers(
                    &self.trailers,
                )))
            }
            _ => {
                self.state = BodyState::Ended;
                Ok(BodyPart::End)
            }
        }
    }

    fn finished(&self) -> bool {
        self.state != BodyState::Data || self.body.as_ref().is_none_or(RecvStream::is_end_stream)
    }

    fn has_buffered(&self) -> bool {
        false
    }

    fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
        None
    }
}
