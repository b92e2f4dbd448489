//! The client side of an exchange over an HTTP/1 connection (exchange/client.rs): the request
//! head in the connection's buffer, its body read from the connection (Content-Length or
//! chunked, re-framed for the server), and the response written back in HTTP/1 (its head
//! rebuilt for the client's version, its body re-framed when needed).

use super::parts::{self, Delivery};
use crate::buffer::IoBuf;
use crate::buffering::held::HeldBody;
use crate::connection::proxy_header::write_proxy_header;
use crate::connection::Connection;
use crate::edge::proxy_protocol;
use crate::exchange::client::{
    BodyRefused, BodySource, ClientSide, Origin, ResponseEdit, ResponseSink,
};
use crate::exchange::server::{RequestBodySink, ResponseBody};
use crate::exchange::{Buffers, Context};
use crate::http::chunked::ChunkedDecoder;
use crate::http::part::BodyPart;
use crate::http::rewrite::{
    add_field_to_head, client_connection, write_response_head, write_response_head_with,
    ClientConnection, ForwardedFor, ResponseFieldEdit, Scheme,
};
use crate::http::status::{write_answer, Answer};
use crate::http::{BodyFraming, RequestHead, ResponseHead, Version};
use crate::relay::parts::{PartFraming, PartReader};
use crate::relay::{tunnel, BodyRelay, ChunkedOutput, Meter, RelayError, RelaySettings, TunnelEnd};
use crate::socket::Socket;
use crate::stream::{send_all, write_all, write_all_parts, Then, TimeLimit};
use crate::timeouts::Slot;
use crate::tls::stream::ClientStream;
use crate::tls::stream::ServerStream;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A body at most this large that came whole with its head goes up in the same write.
const EARLY_BODY_BYTES: u64 = 64 * 1024;

/// The connection's pieces an exchange borrows for one request.
pub(in crate::connection) struct H1Client<'c> {
    pub(super) body: H1Body<'c>,
    sink: H1Sink<'c>,
    pub(super) head: &'c mut RequestHead,
    client_text: &'c ForwardedFor,
    peer: SocketAddr,
    destination: Option<SocketAddr>,
    unread_input: &'c mut bool,
    response_corked: &'c mut bool,
}

impl Connection {
    /// What the exchange of the current request borrows: the context, the client side, the
    /// server-side buffers and the servers tried.
    pub(in crate::connection) fn exchange_parts(
        &mut self,
    ) -> (Context<'_>, H1Client<'_>, &mut Buffers, &mut Vec<usize>) {
        let Connection {
            shared,
            generation,
            service,
            client,
            peer,
            destination,
            sni,
            client_text,
            inbuf,
            head,
            chunk_scratch,
            work,
            tried,
            timer,
            unread_input,
            response_corked,
            relay,
            ..
        } = self;
        let cx = Context {
            shared,
            generation,
            service: &generation.services[*service],
            timer,
            relay: *relay,
            peer: *peer,
            sni: sni.as_deref(),
        };
        let sink = H1Sink {
            stream: client,
            version: head.version,
            keep_alive: head.keep_alive,
            timer,
            idle: relay.idle,
            framing: BodyFraming::Empty,
            dechunk: false,
            last: Then::Push,
        };
        let client = H1Client {
            body: H1Body {
                stream: client,
                inbuf,
                scratch: chunk_scratch,
                held: HeldBody::new(&shared.buffer_memory),
            },
            sink,
            head,
            client_text,
            peer: *peer,
            destination: *destination,
            unread_input,
            response_corked,
        };
        (cx, client, work, tried)
    }
}

impl<'c> ClientSide for H1Client<'c> {
    /// gRPC runs over HTTP/2 only.
    fn grpc(&self) -> bool {
        false
    }

    type Body = H1Body<'c>;
    type Sink = H1Sink<'c>;

    fn request(&self) -> (&RequestHead, &[u8]) {
        (self.head, self.body.inbuf.filled())
    }

    /// Drops the current request head from the input: what follows it is its body or the next
    /// request. The head's spans must not be read after this.
    fn release_head(&mut self) {
        self.body.inbuf.consume(self.head.len);
        self.head.len = 0;
    }

    fn origin(&self) -> Origin<'_> {
        Origin {
            forwarded_for: self.client_text.as_bytes(),
            scheme: match self.body.stream.tls() {
                None => Scheme::Http,
                Some(_) => Scheme::Https,
            },
        }
    }

    fn write_proxy_header(&self, out: &mut Vec<u8>, version: proxy_protocol::Version) {
        write_proxy_header(out, version, self.peer, self.destination, self.body.stream);
    }

    fn early_body(&self) -> Option<&[u8]> {
        let inbuf = &*self.body.inbuf;
        match self.head.framing {
            // A whole body held by the switch (`request_buffer`) in one buffer goes with the
            // head too: one write, and the server reads it at once.
            BodyFraming::Length(n) if n > 0 && n == self.body.held.len() => self.body.held.single(),
            BodyFraming::Length(n) if n <= inbuf.len() as u64 && n <= EARLY_BODY_BYTES => {
                Some(&inbuf.filled()[..n as usize])
            }
            _ => None,
        }
    }

    fn consume_early(&mut self, n: usize) {
        // The early body came from the held one when one is held (early_body).
        if n > 0 && !self.body.held.is_empty() {
            self.body.held.release();
        } else {
            self.body.inbuf.consume(n);
        }
    }

    async fn hold_body(&mut self, up_to: u64, received: &Meter) -> Result<(), BodyRefused> {
        let idle = TimeLimit::Idle(self.sink.idle);
        H1Client::hold_body(self, up_to, idle, received).await
    }

    fn split(&mut self) -> (&mut H1Body<'c>, &mut H1Sink<'c>) {
        (&mut self.body, &mut self.sink)
    }

    async fn answer(&mut self, out: &mut Vec<u8>, answer: &Answer<'_>) -> (u64, bool) {
        self.send_own(out, |out, connection, with_body| {
            write_answer(out, answer, connection, with_body)
        })
        .await
    }

    async fn tunnel(
        &mut self,
        work: &mut Buffers,
        server: &ServerStream,
        relay: &RelaySettings,
    ) -> io::Result<(u64, TunnelEnd)> {
        let connection = if work.response.status == 101 {
            ClientConnection::Upgrade
        } else {
            ClientConnection::Persistent
        };
        work.out.clear();
        write_response_head(
            &mut work.out,
            &work.response,
            work.server_buf.filled(),
            connection,
            self.head.version,
            None,
        );
        work.server_buf.consume(work.response.len);
        let head_bytes = work.out.len() as u64;
        let body = &mut self.body;
        write_all(body.stream, &work.out, TimeLimit::Idle(relay.idle)).await?;
        body.inbuf.make_room_for_body();
        let end = tunnel(
            body.stream,
            body.inbuf,
            server,
            &mut work.server_buf,
            relay.splice_from.is_some(),
            relay.idle,
        )
        .await;
        Ok((head_bytes, end))
    }

    fn leave_unread(&mut self) {
        *self.unread_input = true;
    }

    fn held_for_close(&mut self, held: bool) {
        *self.response_corked = held;
    }
}

impl H1Client<'_> {
    /// Sends an answer of the switch's own, written into `out` by `write` (given the
    /// Connection treatment and whether a body goes with it). The client may go on only if
    /// no unread request body is left on the connection. Returns the bytes sent and whether
    /// the client may send another request.
    async fn send_own(
        &mut self,
        out: &mut Vec<u8>,
        write: impl FnOnce(&mut Vec<u8>, ClientConnection, bool),
    ) -> (u64, bool) {
        let head = &*self.head;
        let keep = head.keep_alive && !head.has_body() && !self.sink.timer.stopping();
        *self.unread_input |= head.has_body();
        out.clear();
        write(out, client_connection(head.version, keep), !head.is_head);
        let sent = write_all(self.body.stream, out, TimeLimit::Idle(self.sink.idle)).await;
        (out.len() as u64, keep && sent.is_ok())
    }
}

/// The request body, read from the connection.
pub(in crate::connection) struct H1Body<'c> {
    pub(super) stream: &'c ClientStream,
    pub(super) inbuf: &'c mut IoBuf,
    /// Re-framed chunks on their way to the server.
    scratch: &'c mut Vec<u8>,
    /// The part of a body received before the server was picked (`request_buffer`:
    /// buffer_body.rs); it goes first.
    pub(super) held: HeldBody<'c>,
}

impl BodySource for H1Body<'_> {
    /// Sends the rest of the request body (what was not sent with the head) to the server:
    /// as it came to an HTTP/1 server over a plain socket, else part by part.
    async fn upload<U: RequestBodySink>(
        &mut self,
        to: &mut U,
        framing: BodyFraming,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        let limit = TimeLimit::Idle(relay.idle);
        let held = self.held.len();
        // A chunked body held: its data, and where the rest starts.
        let chunked = self.held.take_chunked();
        let framing = match framing {
            BodyFraming::Length(n) if held > 0 => BodyFraming::Length(n - held),
            other => other,
        };
        let Some(server) = to.h1_wire() else {
            for part in self.held.slices() {
                to.send(BodyPart::Data(part)).await?;
            }
            meter.add(held);
            self.held.release();
            let client = (self.stream, &mut *self.inbuf);
            let reader = match chunked {
                Some(decoder) => PartReader::resume_chunked(decoder),
                None => PartReader::new(framing, 0),
            };
            return parts::upload(client, reader, to, limit, meter).await;
        };
        if let Some(decoder) = &chunked {
            self.send_held_chunk(server, decoder, limit, meter).await?;
            if decoder.is_done() {
                return Ok(());
            }
        } else if held > 0 {
            // The held part in one write, right after the head.
            write_all_parts(server, self.held.slices(), limit)
                .await
                .map_err(RelayError::Write)?;
            meter.add(held);
            self.held.release();
            if framing == BodyFraming::Length(0) {
                return Ok(());
            }
        }
        let mut body = BodyRelay {
            src: self.stream,
            buf: &mut *self.inbuf,
            dst: server,
            settings: relay,
            meter,
        };
        match framing {
            BodyFraming::Empty | BodyFraming::UntilClose => Ok(()),
            BodyFraming::Length(n) => {
                if n > body.buf.len() as u64 {
                    body.buf.make_room_for_body();
                }
                body.length(&[], n, Then::Push).await
            }
            BodyFraming::Chunked => {
                body.buf.make_room_for_body();
                self.scratch.clear();
                // From where a held part's decoder stands, or from the start.
                let decoder = chunked.unwrap_or_default();
                body.chunked_from(decoder, ChunkedOutput::Chunked, self.scratch)
                    .await
            }
        }
    }
}

impl H1Body<'_> {
    /// The data of a chunked body held by the switch, to an HTTP/1 server: one chunk right
    /// after the head, with the body's end and trailers in the same write when it is all
    /// held (the rest, if any, is relayed from where `decoder` stands).
    async fn send_held_chunk(
        &mut self,
        server: &Socket,
        decoder: &ChunkedDecoder,
        limit: TimeLimit,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        let held = self.held.len();
        let (size, end) = (&mut *self.scratch, &mut Vec::new());
        size.clear();
        if held > 0 {
            crate::relay::push_hex(size, held as usize);
            size.extend_from_slice(b"\r\n");
            end.extend_from_slice(b"\r\n");
        }
        if decoder.is_done() {
            end.extend_from_slice(b"0\r\n");
            crate::http::chunked::put_trailers(end, decoder.trailers());
            end.extend_from_slice(b"\r\n");
        }
        let parts = std::iter::once(&size[..])
            .chain(self.held.slices())
            .chain(std::iter::once(&end[..]));
        write_all_parts(server, parts, limit)
            .await
            .map_err(RelayError::Write)?;
        meter.add(held);
        self.held.release();
        Ok(())
    }
}

/// The response, written to the connection.
pub(in crate::connection) struct H1Sink<'c> {
    stream: &'c ClientStream,
    /// The request's version, which the response takes.
    version: Version,
    /// The request allows another one after it.
    keep_alive: bool,
    timer: &'c Slot,
    idle: Duration,
    /// The response's framing, as the server sent it.
    framing: BodyFraming,
    /// A chunked response to an HTTP/1.0 client: sent decoded, delimited by the close.
    dechunk: bool,
    /// What follows the response: `Then::More` when the connection closes right after.
    last: Then,
}

impl ResponseSink for H1Sink<'_> {
    /// Interim responses go to HTTP/1.1 clients only.
    async fn interim(
        &mut self,
        out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
    ) -> io::Result<()> {
        if self.version != Version::Http11 {
            return Ok(());
        }
        out.clear();
        let connection = ClientConnection::Persistent;
        write_response_head(out, response, raw, connection, Version::Http11, None);
        write_all(self.stream, out, TimeLimit::Idle(self.idle)).await
    }

    fn start_response(
        &mut self,
        out: &mut Vec<u8>,
        response: &ResponseHead,
        raw: &[u8],
        edit: ResponseEdit<'_>,
        upload_complete: bool,
    ) -> bool {
        // A recoded body's length is unknown until it ends: chunked (or to the close).
        let framing = match edit.recoded {
            Some(recoded) if recoded.changes_body() => BodyFraming::Chunked,
            _ => response.framing,
        };
        let dechunk = self.version == Version::Http10 && framing == BodyFraming::Chunked;
        // Announced now, so an upload still running means the connection must close.
        let keep_client = self.keep_alive
            && upload_complete
            && !dechunk
            && framing != BodyFraming::UntilClose
            && !self.timer.stopping();
        let connection = if keep_client {
            client_connection(self.version, true)
        } else {
            ClientConnection::Close
        };
        out.clear();
        let fields = ResponseFieldEdit {
            headers: edit.headers,
            recoded: edit.recoded,
        };
        write_response_head_with(out, response, raw, (connection, self.version), fields);
        if let Some(field) = edit.field {
            add_field_to_head(out, field.name.as_bytes(), field.value.as_bytes());
        }
        self.framing = framing;
        self.dechunk = dechunk;
        // Closing after: the FIN leaves with the last bytes.
        self.last = Then::more_if(!keep_client);
        keep_client
    }

    /// Sends the response head in `out` and then the body, as its framing says: from an
    /// HTTP/1 server over a plain socket as it came (spliced from the threshold up), else part
    /// by part.
    async fn relay_body<R: ResponseBody>(
        &mut self,
        from: &mut R,
        out: &mut Vec<u8>,
        relay: &RelaySettings,
        meter: &Meter,
    ) -> Result<(), RelayError> {
        let client = self.stream;
        let limit = TimeLimit::Idle(relay.idle);
        let Some(wire) = from.h1_wire() else {
            let framing = match (self.framing, self.dechunk) {
                (BodyFraming::Chunked, false) => PartFraming::Chunked,
                _ => PartFraming::Raw,
            };
            let delivery = Delivery {
                framing,
                last: self.last,
                limit,
            };
            return parts::download(client, from, out, delivery, meter).await;
        };
        let mut body = BodyRelay {
            src: wire.socket,
            buf: wire.buf,
            dst: client,
            settings: relay,
            meter,
        };
        match self.framing {
            BodyFraming::Empty => send_all(client, out, self.last, limit)
                .await
                .map_err(RelayError::Write),
            // The head goes out with the first body bytes (one write).
            BodyFraming::Length(n) => body.length(out, n, self.last).await,
            BodyFraming::Chunked => {
                let output = if self.dechunk {
                    ChunkedOutput::Decoded
                } else {
                    ChunkedOutput::Chunked
                };
                body.chunked(output, out).await
            }
            BodyFraming::UntilClose => {
                write_all(client, out, limit)
                    .await
                    .map_err(RelayError::Write)?;
                body.until_close().await
            }
        }
    }
}
