//! The exchange with a server: the rebuilt head goes up (with a small body in the same
//! write), the request body and the response move at once (full duplex, interim responses
//! relayed), and a 101 or a 2xx to CONNECT turns the connection into a tunnel.

use super::failure::{body_incomplete, request_body_error, timeout_evidence, ExchangeError};
use super::{Outcome, Session};
use crate::buffer::IoBuf;
use crate::edge::client_stream::ClientStream;
use crate::edge::proxy_protocol;
use crate::http::response::RequestKind;
use crate::http::rewrite::{
    add_field_to_head, client_connection, write_response_head, ClientConnection,
};
use crate::http::{
    parse_response, BodyFraming, HeadProgress, ResponseHead, Version, MAX_HEAD_BYTES,
};
use crate::relay::{
    relay_chunked, relay_length, relay_until_close, tunnel, ChunkedOutput, Meter, RelayError,
    RelaySettings,
};
use crate::socket::Socket;
use crate::state::control::Failure;
use crate::state::pool::Lease;
use crate::state::stats;
use crate::stream::{read_some, send_all, write_all, write_both, Limit, Then};
use std::io;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::Duration;
use tokio::time::Instant;

impl Session {
    /// The request head preceded by a PROXY protocol header naming this connection's client and
    /// the address it connected to (the one a PROXY header in named, else this socket's).
    fn with_proxy_header(&self, version: proxy_protocol::Version) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.upstream_head.len() + 64);
        self.write_proxy_header(&mut out, version);
        out.extend_from_slice(&self.upstream_head);
        out
    }

    /// A PROXY protocol header naming this connection's client and the address it connected to.
    pub(super) fn write_proxy_header(&self, out: &mut Vec<u8>, version: proxy_protocol::Version) {
        let destination = self
            .destination
            .or_else(|| self.client.local_addr().ok())
            .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
        proxy_protocol::write_header(out, version, self.peer, destination);
    }

    /// Sends the request to the server on `server` and relays the response to the client.
    pub(super) async fn exchange(
        &mut self,
        lease: &Lease<'_>,
        server: Socket,
        reused: bool,
        started: Instant,
    ) -> Result<Outcome, ExchangeError> {
        let backend = lease.backend();
        let request_kind = RequestKind {
            is_head: self.head.is_head,
            is_connect: self.head.is_connect,
        };
        let idle = self.relay.idle;
        let client_version = self.head.version;
        self.server_buf.consume(self.server_buf.len());
        let upload_meter = Meter::default();
        let download_meter = Meter::default();

        // 1. The head, with the body too when it is small and already here (one writev).
        let mut body_left = self.head.framing;
        let mut with_head: &[u8] = &[];
        if let BodyFraming::Length(n) = self.head.framing {
            if n <= self.inbuf.len() as u64 && n <= 64 * 1024 {
                with_head = &self.inbuf.filled()[..n as usize];
                body_left = BodyFraming::Empty;
            }
        }
        // A pool with `send_proxy` starts each new connection with a PROXY header naming the
        // client; its connections serve that client only (never parked for reuse).
        let send_proxy = lease.pool().config.send_proxy;
        let proxied;
        let head: &[u8] = match send_proxy {
            Some(version) if !reused => {
                proxied = self.with_proxy_header(version);
                &proxied
            }
            _ => &self.upstream_head,
        };
        // What the server answered so far, to tell a server too slow for this request from a
        // silent one should the response not come in time.
        let answered = stats::read(&backend.stats.responses);
        // Pushed at once even when a body follows: the client may wait for 100 Continue
        // before sending it, and MSG_MORE would hold the head back for up to 200 ms.
        if let Err(e) = write_both(&server, head, with_head, Then::Push, Limit::Idle(idle)).await {
            return Err(if reused {
                ExchangeError::Stale
            } else {
                ExchangeError::Unanswered(Failure::broken(format!("sending the request: {e}")))
            });
        }
        let early_body = with_head.len();
        self.inbuf.consume(early_body);
        stats::bump(&backend.stats.requests);

        // 2. The request body goes up while the response head is awaited: a server may answer
        //    100 Continue before the body, or its final status before reading all of it.
        // 3. The response comes down, the upload still going on if it has not ended: a server
        //    may stream its answer while it reads (full duplex).
        let uploading_at_start = !matches!(body_left, BodyFraming::Empty);
        let phase = {
            let Session {
                client,
                inbuf,
                server_buf,
                response,
                out,
                chunk_scratch,
                relay,
                head,
                timer,
                response_field,
                ..
            } = &mut *self;
            let client: &ClientStream = client;
            let relay: &RelaySettings = relay;
            let mut upload = pin!(upload_body(
                client,
                inbuf,
                &server,
                body_left,
                relay,
                chunk_scratch,
                &upload_meter
            ));
            let mut uploading = uploading_at_start;
            let mut upload_complete = !uploading;
            // While the body goes up, the server is held at the client's pace: another
            // request's timeout meanwhile is no evidence against it (see `relaying`).
            let mut upload_mark = uploading.then(|| backend.stats.relaying());
            {
                let mut response_head = pin!(read_response_head(
                    &server,
                    server_buf,
                    response,
                    request_kind,
                    client,
                    client_version,
                    out,
                    idle,
                    &upload_meter,
                    reused,
                ));
                loop {
                    tokio::select! {
                        biased;
                        result = &mut response_head => {
                            if let Err(e) = result {
                                // The upload may have ended in the same instant, unpolled.
                                if uploading && finishes_now(upload.as_mut()).await {
                                    upload_complete = true;
                                    drop(upload_mark.take());
                                }
                                let e = timeout_evidence(e, answered, &backend.stats);
                                return Err(if upload_complete { e } else { body_incomplete(e) });
                            }
                            break;
                        }
                        sent = &mut upload, if uploading => {
                            uploading = false;
                            drop(upload_mark.take());
                            match sent {
                                Ok(()) => upload_complete = true,
                                // The server stopped reading; its response may say why.
                                Err(RelayError::Write(_)) => {}
                                Err(e) => return Err(request_body_error(e)),
                            }
                        }
                    }
                }
            }
            stats::bump(&backend.stats.responses);
            backend.stats.latency.record(started.elapsed());
            // A server that answered before it had the whole body may not read the rest as
            // this request's (an early error, or a bug): the rest could be read as the next
            // request, so such a connection is not reused, however the upload ends.
            let uploaded_before_answer = upload_complete;

            let status = response.status;
            if status == 101 || (head.is_connect && (200..300).contains(&status)) {
                if status == 101 && !head.upgrade {
                    return Err(ExchangeError::server(
                        502,
                        "101 to a request that did not ask to upgrade",
                    ));
                }
                if !upload_complete {
                    return Err(body_incomplete(ExchangeError::server(
                        502,
                        "tunnel before the request body ended",
                    )));
                }
                backend.stats.classes.count(status);
                Phase::Tunnel
            } else {
                backend.stats.classes.count(status);
                let framing = response.framing;
                let dechunk = client_version == Version::Http10 && framing == BodyFraming::Chunked;
                // Announced now, so an upload still running means the connection must close.
                let keep_client = head.keep_alive
                    && upload_complete
                    && !dechunk
                    && framing != BodyFraming::UntilClose
                    && !timer.stopping();
                let connection = if keep_client {
                    client_connection(client_version, true)
                } else {
                    ClientConnection::Close
                };
                out.clear();
                write_response_head(
                    out,
                    response,
                    server_buf.filled(),
                    connection,
                    client_version,
                );
                if let Some(field) = response_field {
                    add_field_to_head(out, field.name.as_bytes(), field.value.as_bytes());
                }
                let head_bytes = out.len() as u64;
                server_buf.consume(response.len);
                let relayed = {
                    // The answer comes down at the client's pace, holding the server.
                    let _download_mark = backend.stats.relaying();
                    let mut download = pin!(relay_response(
                        client,
                        &server,
                        server_buf,
                        out,
                        framing,
                        dechunk,
                        // Closing after: the FIN leaves with the last bytes.
                        Then::more_if(!keep_client),
                        relay,
                        &download_meter
                    ));
                    loop {
                        tokio::select! {
                            biased;
                            relayed = &mut download => break relayed,
                            sent = &mut upload, if uploading => {
                                uploading = false;
                                drop(upload_mark.take());
                                upload_complete = sent.is_ok();
                            }
                        }
                    }
                };
                Phase::Relayed(Relayed {
                    status,
                    relayed,
                    keep_client,
                    upload_complete,
                    uploaded_before_answer,
                    head_bytes,
                })
            }
        };
        stats::add(
            &backend.stats.bytes_in,
            (self.upstream_head.len() + early_body) as u64 + upload_meter.get(),
        );
        let Relayed {
            status,
            relayed,
            keep_client,
            upload_complete,
            uploaded_before_answer,
            head_bytes,
        } = match phase {
            Phase::Tunnel => {
                return self
                    .open_tunnel(backend.addr, &backend.stats, &server)
                    .await
            }
            Phase::Relayed(relayed) => relayed,
        };
        self.response_corked = !keep_client;
        let bytes_out = head_bytes + download_meter.get();
        stats::add(&backend.stats.bytes_out, bytes_out);
        if let Err(e) = relayed {
            return Err(ExchangeError::AfterResponse(e.to_string()));
        }

        // 4. The server connection goes back to the idle list if the exchange ended cleanly
        //    on both sides with nothing extra pending.
        self.unread_input |= !upload_complete;
        if self.response.server_keep_alive
            && send_proxy.is_none()
            && upload_complete
            && uploaded_before_answer
            && self.server_buf.is_empty()
        {
            backend.park(
                self.timer.worker(),
                server,
                self.shared.settings.server_idle_max,
                self.timer.now_ms(),
            );
        }
        Ok(Outcome {
            status,
            bytes_out,
            keep_client,
            pool: None,
            server: Some(backend.addr),
        })
    }

    /// After 101 Switching Protocols (or 2xx to CONNECT): the response head goes to the client,
    /// then bytes flow both ways until the tunnel ends.
    async fn open_tunnel(
        &mut self,
        server_addr: SocketAddr,
        backend_stats: &stats::ServerStats,
        server: &Socket,
    ) -> Result<Outcome, ExchangeError> {
        let status = self.response.status;
        let connection = if status == 101 {
            ClientConnection::Upgrade
        } else {
            ClientConnection::Persistent
        };
        self.out.clear();
        write_response_head(
            &mut self.out,
            &self.response,
            self.server_buf.filled(),
            connection,
            self.head.version,
        );
        self.server_buf.consume(self.response.len);
        let head_bytes = self.out.len() as u64;
        write_all(&self.client, &self.out, Limit::Idle(self.relay.idle))
            .await
            .map_err(|e| ExchangeError::AfterResponse(e.to_string()))?;
        self.inbuf.make_room_for_body();
        let end = tunnel(
            &self.client,
            &mut self.inbuf,
            server,
            &mut self.server_buf,
            self.relay.splice_from.is_some(),
            self.relay.idle,
        )
        .await;
        if let Some(e) = end.failure() {
            tracing::debug!(server = %server_addr, "tunnel ended: {e}");
        }
        let moved = end.moved;
        let bytes_out = head_bytes + moved.server_to_client;
        stats::add(&backend_stats.bytes_in, moved.client_to_server);
        stats::add(&backend_stats.bytes_out, bytes_out);
        Ok(Outcome {
            status,
            bytes_out,
            keep_client: false,
            pool: None,
            server: Some(server_addr),
        })
    }
}

/// Where an exchange stands once the response head is in.
enum Phase {
    /// 101 or 2xx to CONNECT: the connection becomes a tunnel.
    Tunnel,
    Relayed(Relayed),
}

/// A response relayed to the client (or failed half-way, see `relayed`).
struct Relayed {
    status: u16,
    relayed: Result<(), RelayError>,
    keep_client: bool,
    upload_complete: bool,
    /// The request body had all gone up when the response head came.
    uploaded_before_answer: bool,
    head_bytes: u64,
}

/// Sends the rest of the request body (what was not sent with the head) to the server.
async fn upload_body(
    client: &ClientStream,
    inbuf: &mut IoBuf,
    server: &Socket,
    framing: BodyFraming,
    relay: &RelaySettings,
    scratch: &mut Vec<u8>,
    meter: &Meter,
) -> Result<(), RelayError> {
    match framing {
        BodyFraming::Empty | BodyFraming::UntilClose => Ok(()),
        BodyFraming::Length(n) => {
            if n > inbuf.len() as u64 {
                inbuf.make_room_for_body();
            }
            relay_length(client, inbuf, server, &[], n, Then::Push, relay, meter).await
        }
        BodyFraming::Chunked => {
            inbuf.make_room_for_body();
            scratch.clear();
            relay_chunked(
                client,
                inbuf,
                server,
                ChunkedOutput::Chunked,
                relay,
                scratch,
                meter,
            )
            .await
        }
    }
}

/// Sends the response head in `out` and then the body, as its framing says. `last` is what
/// follows the response on the client connection: `Then::More` when it closes right after.
#[allow(clippy::too_many_arguments)]
async fn relay_response(
    client: &ClientStream,
    server: &Socket,
    server_buf: &mut IoBuf,
    out: &mut Vec<u8>,
    framing: BodyFraming,
    dechunk: bool,
    last: Then,
    relay: &RelaySettings,
    meter: &Meter,
) -> Result<(), RelayError> {
    let limit = Limit::Idle(relay.idle);
    match framing {
        BodyFraming::Empty => send_all(client, out, last, limit)
            .await
            .map_err(RelayError::Write),
        // The head goes out with the first body bytes (one write).
        BodyFraming::Length(n) => {
            relay_length(server, server_buf, client, out, n, last, relay, meter).await
        }
        BodyFraming::Chunked => {
            let output = if dechunk {
                ChunkedOutput::Decoded
            } else {
                ChunkedOutput::Chunked
            };
            relay_chunked(server, server_buf, client, output, relay, out, meter).await
        }
        BodyFraming::UntilClose => {
            write_all(client, out, limit)
                .await
                .map_err(RelayError::Write)?;
            relay_until_close(server, server_buf, client, relay, meter).await
        }
    }
}

/// Whether `upload` is done, and done well, at this instant (it is polled once).
async fn finishes_now(
    mut upload: std::pin::Pin<&mut impl std::future::Future<Output = Result<(), RelayError>>>,
) -> bool {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(matches!(
            upload.as_mut().poll(cx),
            std::task::Poll::Ready(Ok(()))
        ))
    })
    .await
}

/// Interim (1xx) responses relayed before a final one, at most. Each moves bytes, so the idle
/// timeout never ends a server that streams `100 Continue` forever; a long operation's
/// `102 Processing` every few seconds, or a few `103 Early Hints`, stay far below this.
const MAX_INTERIM_RESPONSES: usize = 100;

/// Reads the server's answer until a final (or 101) response head is in `response`. Interim
/// 1xx responses go on to HTTP/1.1 clients as they arrive.
///
/// The server may stay silent for `idle` at most, counting only time in which no byte moved
/// either way: while the request body is still going up (`upload` advancing), silence is fine.
#[allow(clippy::too_many_arguments)]
async fn read_response_head(
    server: &Socket,
    server_buf: &mut IoBuf,
    response: &mut ResponseHead,
    kind: RequestKind,
    client: &ClientStream,
    client_version: Version,
    out: &mut Vec<u8>,
    idle: Duration,
    upload: &Meter,
    reused: bool,
) -> Result<(), ExchangeError> {
    let mut received_any = false;
    let mut uploaded = upload.get();
    let mut progress = HeadProgress::default();
    let mut interim = 0;
    loop {
        if !server_buf.is_empty() {
            received_any = true;
        }
        if !server_buf.is_empty() && progress.worth_parsing(server_buf.filled()) {
            match parse_response(server_buf.filled(), kind, response) {
                Ok(true) if response.is_informational() && response.status != 101 => {
                    interim += 1;
                    if interim > MAX_INTERIM_RESPONSES {
                        return Err(ExchangeError::server(
                            502,
                            format!("more than {MAX_INTERIM_RESPONSES} interim responses"),
                        ));
                    }
                    if client_version == Version::Http11 {
                        out.clear();
                        write_response_head(
                            out,
                            response,
                            server_buf.filled(),
                            ClientConnection::Persistent,
                            Version::Http11,
                        );
                        write_all(client, out, Limit::Idle(idle))
                            .await
                            .map_err(|_| ExchangeError::Client {
                                status: 0,
                                why: "client closed".into(),
                            })?;
                    }
                    server_buf.consume(response.len);
                    progress = HeadProgress::default();
                    continue;
                }
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(bad) => return Err(ExchangeError::server(502, bad.to_string())),
            }
        }
        server_buf.make_room_for_head(MAX_HEAD_BYTES);
        match read_some(server, server_buf, Limit::Idle(idle)).await {
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
