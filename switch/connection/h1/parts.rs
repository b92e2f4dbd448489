//! An HTTP/1 client's body and response part by part, for a server side that is not an
//! HTTP/1 connection over a plain socket (exchange/server.rs): the request body read from the
//! connection as its head framed it, the response written as the client's framing says.
//! Between two HTTP/1 ends the body moves as it came instead (h1/client.rs, relay/).

use crate::buffer::IoBuf;
use crate::exchange::server::{RequestBodySink, ResponseBody};
use crate::http::part::BodyPart;
use crate::relay::parts::{put_part, PartFraming, PartReader};
use crate::relay::{Meter, RelayError};
use crate::stream::{send_all, Then, TimeLimit};
use crate::tls::stream::ClientStream;

/// Output is written once this much has gathered, to bound memory per connection.
const FLUSH_BYTES: usize = 32 * 1024;

/// Reads the request body from the client (starting with what `inbuf` holds) and sends it to
/// `to` part by part, counting its bytes in `meter`.
pub(super) async fn upload(
    (client, inbuf): (&ClientStream, &mut IoBuf),
    mut reader: PartReader,
    to: &mut impl RequestBodySink,
    limit: TimeLimit,
    meter: &Meter,
) -> Result<(), RelayError> {
    loop {
        let part = reader.next_part(client, inbuf, limit).await?;
        let n = match part {
            BodyPart::Data(data) => data.len(),
            _ => 0,
        };
        let end = part == BodyPart::End;
        to.send(part).await?;
        meter.add(n as u64);
        if end {
            return Ok(());
        }
    }
}

/// How a response goes to the client.
pub(super) struct Delivery {
    pub framing: PartFraming,
    /// What follows the last bytes (see [`Then`]).
    pub last: Then,
    pub limit: TimeLimit,
}

/// Sends the head in `out`, then the response body from `from` part by part, framed as
/// `delivery` says; gathered up to [`FLUSH_BYTES`] while more is already here. The bytes after
/// the head count in `meter`.
pub(super) async fn download(
    client: &ClientStream,
    from: &mut impl ResponseBody,
    out: &mut Vec<u8>,
    delivery: Delivery,
    meter: &Meter,
) -> Result<(), RelayError> {
    let mut unmetered = out.len();
    let mut ended = false;
    loop {
        let part = from.next_part().await?;
        let end = part == BodyPart::End;
        put_part(out, part, delivery.framing, &mut ended);
        if end || out.len() >= FLUSH_BYTES || !from.has_buffered() {
            let then = if end { delivery.last } else { Then::Push };
            if !out.is_empty() {
                send_all(client, out, then, delivery.limit)
                    .await
                    .map_err(RelayError::Write)?;
            }
            meter.add((out.len() - unmetered) as u64);
            unmetered = 0;
            out.clear();
        }
        if end {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    //! The HTTP/1 front-end against server sides of a protocol it was not written for: test
    //! doubles that speak only the parts of exchange/server.rs. What the client gets, and what
    //! the server side is given, are checked byte for byte.

    use super::*;
    use crate::buffer::IoBuf;
    use crate::exchange::failure::ExchangeError;
    use crate::exchange::server::{H1Wire, HeadRead};
    use crate::http::part::Trailers;
    use crate::http::BodyFraming;
    use crate::http::ResponseHead;
    use crate::socket::Socket;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::time::Duration;

    /// A response from memory, all of it already here.
    struct Scripted {
        head: ResponseHead,
        parts: Vec<BodyPart<'static>>,
        next: usize,
    }

    impl crate::exchange::server::ResponseSource for Scripted {
        async fn read_head(&mut self, _uploaded: &Meter) -> Result<HeadRead, ExchangeError> {
            Ok(HeadRead::Final)
        }

        fn head(&self) -> (&ResponseHead, &[u8]) {
            (&self.head, &[])
        }
    }

    impl ResponseBody for Scripted {
        async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
            let part = self.parts.get(self.next).copied().unwrap_or(BodyPart::End);
            self.next += 1;
            Ok(part)
        }

        fn finished(&self) -> bool {
            let rest = self.parts.get(self.next..).unwrap_or_default();
            !rest.iter().any(|p| matches!(p, BodyPart::Data(_)))
        }

        fn has_buffered(&self) -> bool {
            self.next < self.parts.len()
        }

        fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
            None
        }
    }

    /// A request body sink that keeps what it is given.
    #[derive(Default)]
    struct Recorded {
        data: Vec<u8>,
        trailers: Vec<(Vec<u8>, Vec<u8>)>,
        ends: usize,
    }

    impl RequestBodySink for Recorded {
        async fn send(&mut self, part: BodyPart<'_>) -> Result<(), RelayError> {
            match part {
                BodyPart::Data(data) => self.data.extend_from_slice(data),
                BodyPart::Trailers(trailers) => trailers.for_each(|name, value| {
                    self.trailers.push((name.to_vec(), value.to_vec()));
                }),
                BodyPart::End => self.ends += 1,
            }
            Ok(())
        }

        fn h1_wire(&self) -> Option<&Socket> {
            None
        }
    }

    /// A connected pair over loopback: the switch's end as a client stream, and the peer.
    fn pair() -> (ClientStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let peer = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ours, _) = listener.accept().expect("accept");
        ours.set_nonblocking(true).expect("nonblocking");
        (ClientStream::plain(Socket::detached(ours)), peer)
    }

    fn scripted(parts: Vec<BodyPart<'static>>) -> Scripted {
        Scripted {
            head: ResponseHead::default(),
            parts,
            next: 0,
        }
    }

    async fn delivered(parts: Vec<BodyPart<'static>>, framing: PartFraming) -> (String, u64) {
        let (client, mut peer) = pair();
        let mut out = b"HEAD\r\n".to_vec();
        let meter = Meter::default();
        let delivery = Delivery {
            framing,
            last: Then::Push,
            limit: TimeLimit::Idle(Duration::from_secs(5)),
        };
        download(&client, &mut scripted(parts), &mut out, delivery, &meter)
            .await
            .expect("delivered");
        drop(client);
        let mut got = String::new();
        peer.read_to_string(&mut got).expect("read");
        (got, meter.get())
    }

    const RESPONSE: [BodyPart<'static>; 4] = [
        BodyPart::Data(b"hello"),
        BodyPart::Data(b", world of parts"),
        BodyPart::Trailers(Trailers(b"x-checksum: 42\r\nauthorization: no\r\n")),
        BodyPart::End,
    ];

    #[tokio::test]
    async fn parts_from_another_protocol_reach_an_http11_client_chunked() {
        let (got, metered) = delivered(RESPONSE.to_vec(), PartFraming::Chunked).await;
        // The trailer that must not be one (authorization) is left out.
        let body = "5\r\nhello\r\n10\r\n, world of parts\r\n0\r\nx-checksum: 42\r\n\r\n";
        assert_eq!(got, format!("HEAD\r\n{body}"));
        assert_eq!(metered, body.len() as u64);
    }

    #[tokio::test]
    async fn parts_reach_an_http10_client_as_they_are_without_trailers() {
        let (got, metered) = delivered(RESPONSE.to_vec(), PartFraming::Raw).await;
        assert_eq!(got, "HEAD\r\nhello, world of parts");
        assert_eq!(metered, 21);
    }

    #[tokio::test]
    async fn an_empty_body_ends_a_chunked_response_once() {
        let (got, _) = delivered(vec![BodyPart::End], PartFraming::Chunked).await;
        assert_eq!(got, "HEAD\r\n0\r\n\r\n");
    }

    /// The client sends `wire` as a body framed as `framing`; what the server side is given.
    async fn uploaded(wire: &'static [u8], framing: BodyFraming) -> (Recorded, u64, Vec<u8>) {
        let (client, mut peer) = pair();
        peer.write_all(wire).expect("write");
        let mut inbuf = IoBuf::unallocated();
        let mut sink = Recorded::default();
        let meter = Meter::default();
        let limit = TimeLimit::Idle(Duration::from_secs(5));
        let reader = PartReader::new(framing, 0);
        upload((&client, &mut inbuf), reader, &mut sink, limit, &meter)
            .await
            .expect("uploaded");
        let rest = inbuf.filled().to_vec();
        (sink, meter.get(), rest)
    }

    #[tokio::test]
    async fn a_chunked_request_body_goes_to_another_protocol_as_parts() {
        let wire = b"5\r\nhello\r\n3;ext=1\r\n!!!\r\n0\r\nx-sum: 7\r\n\r\nGET /next";
        let (sink, metered, rest) = uploaded(wire, BodyFraming::Chunked).await;
        assert_eq!(sink.data, b"hello!!!");
        assert_eq!(sink.trailers, vec![(b"x-sum".to_vec(), b"7".to_vec())]);
        assert_eq!(sink.ends, 1);
        assert_eq!(metered, 8);
        // What follows the body (a pipelined request) stays for the connection.
        assert_eq!(rest, b"GET /next");
    }

    #[tokio::test]
    async fn a_request_body_by_length_stops_at_its_length() {
        let (sink, metered, rest) = uploaded(b"0123456789GET", BodyFraming::Length(10)).await;
        assert_eq!(sink.data, b"0123456789");
        assert!(sink.trailers.is_empty());
        assert_eq!((sink.ends, metered), (1, 10));
        assert_eq!(rest, b"GET");
    }
}
