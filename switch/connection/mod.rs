//! One client connection. The data path reads top to bottom:
//!
//! accept (listener.rs) -> [`Connection::run`]: the PROXY header (`proxy_header.rs`), the TLS
//! handshake (`tls.rs`) -> a protocol front-end: `h2.rs` (HTTP/2, chosen by ALPN or by the
//! preface: each stream one exchange, in a task of its own), `h1.rs` (HTTP/1: waits for a
//! request, reads its head, serves bursts of requests on keep-alive, refuses what cannot be
//! read) or `tunnel.rs`
//! (`tls-passthrough`: ClientHello, route by server name, pick, tunnel) -> for each request, an
//! exchange (exchange/: route -> pick -> connect or reuse -> relay -> account) -> closing
//! without losing the last response (`close.rs`).
//!
//! The connection holds what outlives a request: the client's stream and address, its input
//! buffer, its timer, the configuration it runs under (it follows reloads at each request:
//! [`Connection::follow_reloads`]), and the memory its requests reuse. Every request on a
//! keep-alive connection is routed and picked again, so one connection can reach several
//! pools. The HTTP/2 front-end (`h2.rs`) sits beside `h1.rs`, running one exchange per stream.

mod close;
mod h1;
mod h2;
mod proxy_header;
mod tls;
mod tunnel;

use crate::access_log;
use crate::buffer::IoBuf;
use crate::capacity::share::Crowding;
use crate::config::ServiceMode;
use crate::exchange::account::{account, Outcome};
use crate::exchange::{Buffers, Context};
use crate::http::rewrite::ClientConnection;
use crate::http::rewrite::{forwarded_for, ForwardedFor};
use crate::http::status::{write_answer, Answer};
use crate::http::RequestHead;
use crate::policy::source_conns::SourceGuard;
use crate::recycle;
use crate::relay::RelaySettings;
use crate::shared::Shared;
use crate::socket::Socket;
use crate::state::generation::{self, Followed, Generation, Service};
use crate::state::stats;
use crate::stream::{read_some, write_all, Io, TimeLimit};
use crate::timeouts::Slot;
use crate::tls::stream::ClientStream;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

pub(crate) struct Connection {
    shared: Arc<Shared>,
    /// The configuration the current request runs under, and the service's index in it. A
    /// new request takes the current generation (a reload happened meanwhile) when its service
    /// is still there.
    generation: Arc<Generation>,
    service: usize,
    /// A reload removed this connection's service: it closes after the request in progress.
    service_gone: bool,
    client: ClientStream,
    peer: SocketAddr,
    /// The address the client connected to, when a PROXY protocol header named it.
    destination: Option<SocketAddr>,
    /// The TLS server name the client asked for (SNI), for `sni` rules.
    sni: Option<Box<str>>,
    /// The client's address as X-Forwarded-For carries it.
    client_text: ForwardedFor,
    inbuf: IoBuf,
    /// The h1 front-end's current request head.
    head: RequestHead,
    /// Re-framed chunks of a request body on their way to the server.
    chunk_scratch: Vec<u8>,
    /// The exchange's server-side memory, reused from request to request.
    work: Buffers,
    /// Servers picked for the current request (exchange/pick.rs), reused.
    tried: Vec<usize>,
    /// What the access log keeps of the current request's head.
    log_request: access_log::Request,
    /// This connection's timeout slot, which also says when the switch is stopping.
    timer: Arc<Slot>,
    /// The client may still be sending what the switch did not read (a refused request's
    /// body, an upload cut short): closing must drain it (see `linger`).
    unread_input: bool,
    /// The last response went out held back for the FIN (`Then::More`, the connection closes
    /// after it): nothing is sent until our side shuts down or closes (see `linger`).
    response_corked: bool,
    relay: RelaySettings,
    /// Counts this connection against its client's `max_conns_per_source` while it lives
    /// (over HTTP/2, lent to its streams: h2/admission.rs).
    source_place: Option<SourceGuard>,
    /// Counts this connection in what its client holds in the whole switch (capacity/share.rs).
    source_load: Option<SourceGuard>,
}

/// Why a connection's client may not hold it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SourceRefusal {
    /// It has `max_conns_per_source` connections open already.
    OverCap,
    /// `max_clients` is full, or the client holds its share of the last quarter.
    Crowded(Crowding),
}

impl SourceRefusal {
    /// The text of the `503` answer.
    fn why(self) -> &'static str {
        match self {
            SourceRefusal::OverCap => "too many connections from your address",
            SourceRefusal::Crowded(Crowding::Full) => "too many clients",
            SourceRefusal::Crowded(Crowding::HeavySource) => {
                "too many connections from your address while the switch is busy"
            }
        }
    }
}

/// A closed connection's request memory goes back to the thread's free lists too: with a new
/// connection per request, freeing it to the allocator instead made every connection fault in
/// fresh pages for its buffers (1.3-1.9 page faults and a 16 KiB memset per request, measured
/// with perf under `CLOSE=1`).
impl Drop for Connection {
    fn drop(&mut self) {
        self.inbuf.consume(self.inbuf.len());
        self.work.server_buf.consume(self.work.server_buf.len());
        self.give_back_workspace();
    }
}

impl Connection {
    pub(crate) fn new(
        shared: Arc<Shared>,
        generation: Arc<Generation>,
        service: usize,
        client: Socket,
        peer: SocketAddr,
        timer: Arc<Slot>,
    ) -> Connection {
        let settings = &shared.settings;
        let relay = RelaySettings {
            idle: settings.idle_timeout,
            splice_from: settings.splice.then_some(settings.splice_threshold),
        };
        Connection {
            shared,
            generation,
            service,
            service_gone: false,
            client: ClientStream::plain(client),
            peer,
            destination: None,
            sni: None,
            client_text: forwarded_for(peer.ip()),
            inbuf: IoBuf::unallocated_for_heads(),
            head: RequestHead::default(),
            chunk_scratch: Vec::new(),
            work: Buffers::new(),
            tried: Vec::new(),
            log_request: access_log::Request::default(),
            timer,
            unread_input: false,
            response_corked: false,
            relay,
            source_place: None,
            source_load: None,
        }
    }

    fn service(&self) -> &Service {
        &self.generation.services[self.service]
    }

    /// What an exchange reads of this connection.
    fn context(&self) -> Context<'_> {
        Context {
            shared: &self.shared,
            generation: &self.generation,
            service: self.service(),
            timer: &self.timer,
            relay: self.relay,
            peer: self.peer,
            sni: self.sni.as_deref(),
        }
    }

    /// At a request's start: moves to the current configuration if a reload happened, by the
    /// service's name. One atomic load when nothing changed.
    fn follow_reloads(&mut self) {
        match generation::follow_reloads(&self.shared.generation, &self.generation, self.service) {
            Followed::Unchanged => {}
            Followed::Moved {
                generation,
                service,
            } => {
                self.generation = generation;
                self.service = service;
            }
            // Removed: this request still runs under the rules it came with, then the
            // connection closes (its listener is closed already).
            Followed::Gone => self.service_gone = true,
        }
    }

    /// Serves the connection: the PROXY header, then the service's front-end. By reference:
    /// the connection stays where the task's future captured it (listener.rs), once; taken by
    /// value, an async fn keeps its argument and a moved copy of it, and the spawning block a
    /// third (issue 42: 2.4 of the 3.3 KiB of every connection's task).
    pub(crate) async fn run(&mut self) {
        // The PROXY header, the TLS handshake or ClientHello and the first request's head are
        // all due by this.
        let connection_deadline = Instant::now() + self.shared.settings.header_timeout;
        if self.service().proxy_protocol {
            // Boxed: read once, its state need not stay in the connection's task.
            if !Box::pin(self.read_proxy_header(connection_deadline)).await {
                return;
            }
        }
        if let Err(refusal) = self.count_source() {
            Box::pin(self.refuse_source(refusal)).await;
            return;
        }
        if self.service().mode == ServiceMode::TlsPassthrough {
            Box::pin(self.pass_through(connection_deadline)).await;
            return;
        }
        if let Some(config) = self.service().tls.clone() {
            if !Box::pin(self.start_tls(config, connection_deadline)).await {
                return;
            }
            if self.client.tls().is_some_and(|tls| tls.speaks_h2()) {
                // Boxed: an HTTP/2 connection's state is its own, apart from HTTP/1's.
                Box::pin(self.serve_h2(connection_deadline)).await;
                return;
            }
        }
        self.serve_h1(connection_deadline).await;
    }

    /// Counts the connection among what its client holds: against the service's
    /// `max_conns_per_source`, and in the whole switch, where the last quarter of
    /// `max_clients` goes to light sources (capacity/share.rs).
    fn count_source(&mut self) -> Result<(), SourceRefusal> {
        let service = &self.generation.services[self.service];
        let address = self.peer.ip();
        let cap = service.max_conns_per_source;
        if cap != 0 {
            self.source_place = service.source_conns.enter(address, cap);
            if self.source_place.is_none() {
                return Err(SourceRefusal::OverCap);
            }
        }
        let shared = &self.shared;
        // Taken now, this connection aside (the listener counted it in `clients`). The
        // listener decided `max_clients` for it already, counting the connections that linger
        // to deliver its refusals too (a burst of them must not refuse the connections it let
        // in: tests/descriptors.rs): here only the share applies, so a client that holds
        // nothing is never refused.
        let in_use =
            (shared.places_in_use().saturating_sub(1)).min(shared.max_clients.saturating_sub(1));
        let taken = shared.take_share(address, in_use, 0);
        self.source_load = Some(taken.map_err(SourceRefusal::Crowded)?);
        Ok(())
    }

    /// A connection its client may not hold (`count_source`): 503 and closed. A TLS client gets no
    /// plain-text answer it could not read: the connection is closed, as at `max_clients`.
    /// Quickly, since the refused connection holds a client slot meanwhile (an address opening
    /// hundreds a second must not fill `max_clients` with them; lingering 2 s, then 200 ms,
    /// let one address do it): what the client sent already (`TCP_DEFER_ACCEPT` hands a
    /// connection over with its first bytes) is dropped without waiting, and the answer leaves
    /// with the FIN. Only a client that has sent nothing yet (`defer_accept = false`) is waited
    /// for, briefly, so that its request arriving after the close does not reset the answer
    /// away.
    async fn refuse_source(&mut self, refusal: SourceRefusal) {
        const SEND: Duration = Duration::from_millis(20);
        const FIRST_BYTES: Duration = Duration::from_millis(200);
        let service = &self.generation.services[self.service];
        let counter = match refusal {
            SourceRefusal::OverCap => &service.stats.source_refused,
            SourceRefusal::Crowded(Crowding::Full) => &service.stats.refused,
            SourceRefusal::Crowded(Crowding::HeavySource) => &service.stats.share_refused,
        };
        stats::bump(counter);
        tracing::debug!(client = %self.peer, service = %service.name, ?refusal, "refused");
        if service.tls.is_some() || service.mode == ServiceMode::TlsPassthrough {
            return;
        }
        let mut out = Vec::new();
        let answer = Answer::Error {
            status: 503,
            why: refusal.why(),
        };
        // Sent before the request is read and within `SEND`: the service's fields, no page.
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let answer = service
            .own_answers
            .dress_short(&answer, &mut text, &mut fields);
        write_answer(&mut out, &answer, ClientConnection::Close, true);
        let mut scratch = IoBuf::with_capacity(4096);
        let mut received = false;
        while let Ok(n @ 1..) = self.client.try_recv(scratch.spare()) {
            received |= n > 0;
        }
        if write_all(&self.client, &out, TimeLimit::Idle(SEND))
            .await
            .is_err()
        {
            return;
        }
        let _ = self.client.shutdown_write().await;
        if !received {
            let limit = TimeLimit::Until(Instant::now() + FIRST_BYTES);
            let _ = read_some(&self.client, &mut scratch, limit).await;
        }
    }

    /// Counts the request and writes its access-log line.
    fn account(&self, outcome: &Outcome, started: Instant) {
        account(&self.context(), &self.log_request, outcome, started);
    }

    /// Gives the per-request memory back while the connection waits for its next request.
    fn give_back_workspace(&mut self) {
        // In this order, as the free lists hand them out again (the exchange's: Buffers::take).
        self.give_back_buffers();
        recycle::give_fields(&mut self.head.fields);
        recycle::give_fields(&mut self.work.response.fields);
        recycle::give_bytes(&mut self.work.upstream_head);
        recycle::give_bytes(&mut self.work.out);
        recycle::give_bytes(&mut self.chunk_scratch);
        // Cleared, not freed: a client that waits for each answer comes back within the
        // burst grace, and freeing them made every such request allocate them again. They go
        // when the burst ends (h1.rs).
        self.tried.clear();
        self.log_request.clear();
    }

    /// Gives the read buffers back (the large part of the per-request memory), keeping the
    /// field tables and head bytes: what a connection keeps between the requests of a burst
    /// (h1/wait.rs).
    fn give_back_buffers(&mut self) {
        self.inbuf.release();
        self.work.server_buf.release();
        // A head vector a large head grew goes back too: kept, one large request would pin
        // it for as long as its client goes on asking within the grace.
        for bytes in [
            &mut self.work.upstream_head,
            &mut self.work.out,
            &mut self.chunk_scratch,
        ] {
            if bytes.capacity() > recycle::HEAD_BUFFER_BYTES {
                recycle::give_bytes(bytes);
            }
        }
    }
}
