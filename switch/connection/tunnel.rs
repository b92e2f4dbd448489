//! The tunnel front-end, for `mode = "tls-passthrough"`: content switching without decryption. The connection's
//! ClientHello is read (it may come in pieces, by the header deadline), the service's `sni`
//! rules pick the pool by its server name, the pool's module picks a server, and the bytes read
//! so far go to it first; then both directions are spliced until the connection ends.
//!
//! One connection is one "request" of the service and of its server: counted, logged (as
//! `TLS <server name>`, status 0: a tunnel has no HTTP status), and held on the server for as
//! long as it lasts, so that least-connection modules balance open connections.

use super::proxy_header::write_proxy_header;
use super::Connection;
use crate::edge::client_hello::{Hello, HelloReader};
use crate::exchange::account::Outcome;
use crate::exchange::route::route;
use crate::exchange::{Connected, Context, Picker};
use crate::http::MAX_HEAD_BYTES;
use crate::relay::{tunnel, RelayError, TunnelEnd};
use crate::state::control::{self, Failure};
use crate::state::pool::Lease;
use crate::state::stats;
use crate::stream::{read_some, write_all, TimeLimit};
use crate::upstream::connection::ServerConnection;
use crate::upstream::ServerLink;
use std::io;
use tokio::time::Instant;

impl Connection {
    /// Serves the whole connection.
    pub(super) async fn pass_through(&mut self, deadline: Instant) {
        let started = Instant::now();
        match self.read_client_hello(deadline).await {
            HelloRead::Hello(server_name) => self.sni = server_name,
            HelloRead::Refused(why) => {
                stats::bump(&self.service().stats.tls_handshake_failures);
                tracing::debug!(client = %self.peer, "TLS passthrough: {why}; closed");
                return;
            }
            HelloRead::Gone => return,
        }
        stats::bump(&self.service().stats.requests);
        let outcome = self.relay_passthrough().await;
        self.log_request.clear();
        self.log_request.push_str("TLS ");
        self.log_request
            .push_str(self.sni.as_deref().unwrap_or("-"));
        // Status 0: the access-log line, and no answer counted.
        self.account(&outcome, started);
    }

    /// Reads until `inbuf` holds a whole ClientHello.
    async fn read_client_hello(&mut self, deadline: Instant) -> HelloRead {
        let mut reader = HelloReader::default();
        loop {
            if !self.inbuf.is_empty() {
                match reader.offer(self.inbuf.filled()) {
                    Hello::Complete { server_name } => return HelloRead::Hello(server_name),
                    Hello::Invalid(why) => {
                        return HelloRead::Refused(format!("no TLS ClientHello: {why}"))
                    }
                    Hello::Incomplete => {}
                }
            }
            if self.inbuf.len() >= MAX_HEAD_BYTES {
                return HelloRead::Refused(format!(
                    "ClientHello larger than {MAX_HEAD_BYTES} bytes"
                ));
            }
            self.inbuf.make_room_for_head(MAX_HEAD_BYTES);
            match read_some(&self.client, &mut self.inbuf, TimeLimit::Until(deadline)).await {
                Ok(0) => return HelloRead::Gone,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    return HelloRead::Refused("ClientHello not received in time".into())
                }
                Err(_) => return HelloRead::Gone,
            }
        }
    }

    /// Routes by the server name, connects, and joins the two connections.
    async fn relay_passthrough(&mut self) -> Outcome {
        let Connection {
            shared,
            generation,
            service,
            client,
            peer,
            destination,
            sni,
            inbuf,
            head,
            work,
            tried,
            timer,
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
        // No HTTP request: the rules and the module see an empty head and the server name.
        let routed = route(&cx, (head, inbuf.filled()), None).and_then(|m| m.action.pool());
        let Some(pool_index) = routed else {
            tracing::debug!(client = %cx.peer, sni = ?cx.sni, "TLS passthrough: no pool for this server name; closed");
            stats::bump(&cx.service.stats.local_errors);
            return Outcome::local(0, 0, false, None);
        };
        let mut picker = Picker::new(cx, pool_index, tried);
        let pool = picker.pool;
        let picked = picker.pick_or_queue((head, inbuf.filled())).await;
        let Some((lease, server)) = plain_connection(picked, &cx, &pool.name) else {
            stats::bump(&cx.service.stats.local_errors);
            return Outcome::local(0, 0, false, Some(pool_index));
        };
        let backend = lease.backend();
        stats::bump(&backend.stats.requests);
        let idle = cx.relay.idle;
        if let Some(version) = pool.config.send_proxy {
            let mut header = Vec::with_capacity(64);
            write_proxy_header(&mut header, version, cx.peer, *destination, client);
            if let Err(e) = write_all(&server.stream, &header, TimeLimit::Idle(idle)).await {
                let why = format!("sending the PROXY header: {e}");
                picker.server_failed(lease.server, Failure::broken(why));
                return Outcome::local(0, 0, false, Some(pool_index));
            }
        }
        // The hello (and anything after it) waits in `inbuf`: the tunnel sends it first.
        inbuf.make_room_for_body();
        let splice = cx.relay.splice_from.is_some();
        let end = tunnel(
            client,
            inbuf,
            &server.stream,
            &mut work.server_buf,
            splice,
            idle,
        )
        .await;
        count_tunnel_end(&picker, &lease, &end);
        Outcome {
            status: 0,
            bytes_out: end.moved.server_to_client,
            keep_client: false,
            pool: Some(pool_index),
            server: Some(backend.addr),
            limited: None,
            trace: None,
            grpc: None,
        }
    }
}

/// Counts what a passthrough connection moved at its server, and tells passive health whether
/// the server answered the hello.
/// The connection picked, which is plain TCP: a passthrough pool speaks HTTP/1.1 (the check
/// refuses `protocol` on it). `None`: none could be had (logged).
fn plain_connection<'p>(
    picked: Result<Connected<'p>, (u16, &'static str)>,
    cx: &Context<'_>,
    pool: &str,
) -> Option<(Lease<'p>, ServerConnection)> {
    match picked {
        Ok(Connected {
            lease,
            server: ServerLink::H1(server),
            ..
        }) => Some((lease, server)),
        Ok(_) => {
            tracing::error!(pool, "TLS passthrough to an HTTP/2 pool; closed");
            None
        }
        Err((_, why)) => {
            tracing::debug!(client = %cx.peer, pool, "TLS passthrough: {why}; closed");
            None
        }
    }
}

fn count_tunnel_end(picker: &Picker<'_>, lease: &Lease<'_>, end: &TunnelEnd) {
    let backend = lease.backend();
    let moved = end.moved;
    stats::add(&backend.stats.bytes_in, moved.client_to_server);
    stats::add(&backend.stats.bytes_out, moved.server_to_client);
    if moved.server_to_client > 0 {
        stats::bump(&backend.stats.responses);
        control::exchange_succeeded(&picker.cx.shared.generation, picker.pool, lease.server);
    } else if let Some(why) = server_failure(end) {
        // Nothing came back to the hello, and not because of the client.
        stats::bump(&backend.stats.response_errors);
        picker.server_failed(lease.server, Failure::broken(why));
    }
    if let Some(e) = end.failure() {
        tracing::debug!(server = %backend.addr, "TLS passthrough ended: {e}");
    }
}

/// Why the server failed a passthrough connection that got nothing back, or `None` when the
/// client ended it: a client that closed or reset first, or stopped reading, is no failure of
/// the server's (else any client could take servers down by resetting after its hello).
fn server_failure(end: &TunnelEnd) -> Option<String> {
    if end.client_ended_first {
        return None;
    }
    match &end.server_to_client {
        Some(Err(RelayError::Write(_))) => None,
        Some(Err(e)) => Some(format!("no answer to the ClientHello: {e}")),
        Some(Ok(())) => Some("closed without answering the ClientHello".to_string()),
        None => Some("no answer to the ClientHello within idle_timeout".to_string()),
    }
}

/// How reading a ClientHello ended.
enum HelloRead {
    /// A whole hello, with the server name it asks for, if any.
    Hello(Option<Box<str>>),
    /// Not TLS, a broken hello, too large, or too late: counted and closed.
    Refused(String),
    /// The client closed first: nothing to count (a TCP health check of a director does this).
    Gone,
}
