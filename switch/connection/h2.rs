//! The HTTP/2 front-end (RFC 9113), beside `h1.rs`: a connection that chose `h2` in its TLS
//! handshake (ALPN), or a plain one that began with the preface (prior knowledge), is served
//! by the h2 crate over the client stream (`h2/io.rs`); every stream it accepts is one
//! request, carried out by the same exchange as an HTTP/1 request, in a task of its own
//! (`h2/stream.rs`). This driver accepts streams, keeps the connection's limits, and ends it:
//! GOAWAY when the switch stops or the service leaves at a reload, when the client is idle past
//! `keepalive_timeout`, with `ENHANCE_YOUR_CALM` when the client floods it (`h2/frames.rs`), and
//! with `PROTOCOL_ERROR` when its preface is not HTTP/2's or is not followed by SETTINGS
//! (RFC 9113 section 3.4: `h2/io.rs`, `refuse_preface`).
//!
//! The limits, and the attack each one bounds (each has a test in tests/h2_abuse.rs):
//!
//! | limit | value | bounds |
//! |---|---|---|
//! | streams running at once | [`MAX_CONCURRENT_STREAMS`] (more: `REFUSED_STREAM`) | many streams |
//! | streams running in the switch | client connections + streams <= `max_clients` (the descriptor budget); beyond, `503` at once (`h2/admission.rs`) | descriptors exhausted by many connections of many streams |
//! | streams one client address runs | in the budget's last quarter, less than a quarter of the free room for its connections and streams together, an IPv6 client's /64 counted as one source (`503` beyond: `capacity/share.rs`); under `max_conns_per_source`, its connections and their streams beyond the first | one source stalling every other client |
//! | streams refused at once | a budget of their own, as large as the control frames' (`frames::Budget`), then `ENHANCE_YOUR_CALM` | a flood of streams the switch answers without running |
//! | streams whose task runs, reset or not | the same: no new stream is accepted meanwhile | Rapid Reset (CVE-2023-44487) |
//! | streams reset before they were accepted | [`MAX_PENDING_ACCEPT_RESETS`], then `ENHANCE_YOUR_CALM` | Rapid Reset |
//! | streams the switch reset for the client's errors | [`MAX_LOCAL_ERROR_RESETS`], then `ENHANCE_YOUR_CALM` | MadeYouReset (CVE-2025-8671) |
//! | a header block, decoded | [`MAX_HEADER_LIST`] (then 431), its CONTINUATION frames counted by the h2 crate | HPACK bombs, CONTINUATION flood (CVE-2024-27316) |
//! | frames that carry no request: PING and SETTINGS (ACK or not), WINDOW_UPDATE, PRIORITY, PRIORITY_UPDATE and unknown types, RST_STREAM, GOAWAY, empty or padding-only DATA, HEADERS, CONTINUATION | 1000 at once, 100 a second; each DATA frame sent lets 2 WINDOW_UPDATEs through, up to 1000 kept (`frames::Budget`), then `ENHANCE_YOUR_CALM` | floods of free frames (a worker's CPU, log lines) |
//! | bytes the client may send unread | [`STREAM_WINDOW`] per stream, [`CONNECTION_WINDOW`] in all | memory |
//! | bytes waiting for a client that does not read | [`MAX_SEND_BUFFER`] per stream | zero-window readers |

mod admission;
mod error;
mod frames;
mod head_block;
mod io;
mod request;
mod response;
mod stream;
mod task_memory;

use super::Connection;
use crate::http::rewrite::Scheme;
use crate::state::generation::{self, Followed, Generation};
use crate::state::stats::{self, ServiceStats};
use crate::stream::{wait, write_all, TimeLimit};
use bytes::Bytes;
use h2::server::{RawRequest, SendResponse};
use h2::{Reason, RecvStream};
use io::{Alarm, H2Io};
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use stream::{Link, LiveStreams};
use tokio::time::Instant;

/// The connection preface of a client with prior knowledge (RFC 9113 section 3.4).
pub(super) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// `SETTINGS_MAX_CONCURRENT_STREAMS`: HAProxy's default is 100, nginx's 128.
pub(super) const MAX_CONCURRENT_STREAMS: u32 = 100;
/// The receive window of each stream: a 1 MiB upload needs four window updates.
const STREAM_WINDOW: u32 = 256 * 1024;
/// The receive window of the connection: what all its streams may have sent and not been read.
const CONNECTION_WINDOW: u32 = 1024 * 1024;
/// `SETTINGS_MAX_HEADER_LIST_SIZE`: the largest request head an HTTP/1 client may send.
const MAX_HEADER_LIST: u32 = crate::http::MAX_HEAD_BYTES as u32;
/// Bytes of a response the h2 crate may hold for one stream beyond what the client's window
/// lets out.
const MAX_SEND_BUFFER: usize = 64 * 1024;
/// Streams the client may reset before they are accepted (the h2 crate's default is 20).
const MAX_PENDING_ACCEPT_RESETS: usize = 20;
/// Streams the switch may reset for the client's errors (h2's default is 1024).
const MAX_LOCAL_ERROR_RESETS: usize = 200;
/// How long a connection that said GOAWAY waits for its streams to end.
const GOING_AWAY_GRACE: Duration = Duration::from_secs(5);
/// How long a connection runs no stream before the h2 crate gives back its stream store, frame
/// queues and HPACK buffers (about 5 KiB, taken again by the next request: the vendored
/// crate's `release_idle_memory`; its read and write buffers go back to their pool as soon as
/// the last stream ends). Not at once: a busy connection would free and take them between
/// requests, 2.6% of an HTTP/2 request's instructions (BENCHMARKS.md).
const RELEASE_IDLE_AFTER_MS: u64 = 200;

/// What wakes the driver.
enum Event {
    /// A new stream: its request as it came, its body and its answer (not boxed: a box cost
    /// more than moving the parts, about 200 bytes, `H2=1 benches/instructions.sh`).
    Stream((RawRequest, RecvStream, SendResponse<Bytes>)),
    /// The connection ended (the h2 crate's error, if any).
    Closed(Option<h2::Error>),
    /// The I/O raised its alarm (`h2/io.rs`) with this code: the client spent its overhead
    /// budget (`ENHANCE_YOUR_CALM`), or its first frame was not SETTINGS (`PROTOCOL_ERROR`).
    Alarm(Reason),
    /// The switch stops, or the service left at a reload.
    Leave,
    /// No stream for `keepalive_timeout`.
    Idle,
    /// The streams did not end within the grace after GOAWAY.
    GraceOver,
}

/// How a connection's preface turned out, for what the end of the connection owes the client.
enum Preface {
    /// Nothing more is owed: the preface was HTTP/2's and followed by SETTINGS (or the
    /// connection ended before that was known), and the h2 crate ended the connection.
    Ended,
    /// Not HTTP/2's: the h2 crate sent its SETTINGS, the GOAWAY is ours to send.
    Invalid,
    /// Followed by another frame than SETTINGS: the h2 crate sent GOAWAY, that frame is unread.
    NoSettings,
}

/// The connection's state while streams come and go.
struct Driver<'c> {
    conn: h2::server::Connection<H2Io<'c>, Bytes>,
    link: Arc<Link>,
    alarm: &'c Alarm,
    generation: Arc<Generation>,
    service: usize,
    /// GOAWAY sent: no new stream, the connection ends with its last one.
    going_away: bool,
    /// GOAWAY sent for the client's fault (a flood, a first frame other than SETTINGS):
    /// nothing more of it is read or accepted.
    flooded: bool,
    /// Streams answered `503` at once: more than a budget's worth is a flood (a browser's
    /// burst of requests on a full switch fits in it).
    refusals: frames::Budget,
    /// Coarse-clock deadline of the current wait: idle, or the grace after GOAWAY.
    deadline_ms: u64,
    keepalive_ms: u64,
    /// Coarse-clock time at which the idle connection's memory goes back
    /// ([`RELEASE_IDLE_AFTER_MS`] without a stream); `u64::MAX` once it has.
    release_at_ms: u64,
}

impl Connection {
    /// Serves the connection in HTTP/2; its preface and SETTINGS are due by `deadline`.
    pub(super) async fn serve_h2(&mut self, deadline: Instant) {
        let stats = Arc::clone(&self.service().stats);
        stats::bump(&stats.h2_connections);
        // A plain connection's preface, read while telling HTTP/2 from HTTP/1.
        let early = self.inbuf.filled().to_vec();
        self.inbuf.consume(self.inbuf.len());
        // The HTTP/1 input buffer is not used again: back to the worker's free list (4 KiB
        // less per HTTP/2 connection).
        self.inbuf.release();
        let destination = self.destination.or_else(|| self.client.local_addr().ok());
        let link = Arc::new(Link {
            shared: Arc::clone(&self.shared),
            peer: self.peer,
            destination,
            sni: self.sni.clone(),
            client_text: self.client_text,
            scheme: match self.client.tls() {
                None => Scheme::Http,
                Some(_) => Scheme::Https,
            },
            relay: self.relay,
            timer: Arc::clone(&self.timer),
            live_streams: LiveStreams::default(),
            spare_place: Arc::new(admission::SparePlace::new(self.source_place.take())),
        });
        match self.drive(early, link, &stats, deadline).await {
            Preface::Ended => {}
            Preface::Invalid => Box::pin(self.refuse_preface(&stats)).await,
            Preface::NoSettings => {
                // The h2 crate sent GOAWAY and closed, and the frame was never read; closing
                // over unread bytes would reset the connection and could destroy the GOAWAY
                // on its way.
                self.unread_input = true;
                Box::pin(self.linger()).await;
            }
        }
    }

    /// Hands the client stream to the h2 crate, and the connection to its driver until it
    /// ends. Apart from `serve_h2`, so that the stream is no longer borrowed when the end
    /// needs the connection itself (`refuse_preface`, `linger`).
    async fn drive(
        &self,
        early: Vec<u8>,
        link: Arc<Link>,
        stats: &ServiceStats,
        deadline: Instant,
    ) -> Preface {
        let alarm = Alarm::default();
        let io = H2Io::new(&self.client, early, &alarm, stats);
        let conn = match self.handshake(io, deadline).await {
            Ok(conn) => conn,
            Err(preface) => return preface,
        };
        let keepalive_ms = self.shared.settings.keepalive_timeout.as_millis() as u64;
        let mut driver = Driver {
            conn,
            link,
            alarm: &alarm,
            generation: Arc::clone(&self.generation),
            service: self.service,
            going_away: false,
            flooded: false,
            refusals: frames::Budget::new(),
            deadline_ms: self.timer.now_ms().saturating_add(keepalive_ms),
            keepalive_ms,
            release_at_ms: self.timer.now_ms().saturating_add(RELEASE_IDLE_AFTER_MS),
        };
        driver.run().await;
        match alarm.raised() {
            Some(io::PROTOCOL_ERROR) => Preface::NoSettings,
            _ => Preface::Ended,
        }
    }

    /// The h2 crate's handshake (the client's preface and SETTINGS, ours sent), due by
    /// `deadline`. Its future (about 6 KB, the codec inside) is boxed and freed once it is
    /// done: held inline, it would size the connection's future for its whole life (7.6 KB
    /// where the served connection needs 1.7).
    async fn handshake<'c>(
        &self,
        io: H2Io<'c>,
        deadline: Instant,
    ) -> Result<h2::server::Connection<H2Io<'c>, Bytes>, Preface> {
        let handshake = Box::pin(builder().handshake::<_, Bytes>(io));
        match wait(async { Ok(handshake.await) }, TimeLimit::Until(deadline)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => {
                tracing::debug!(client = %self.peer, "HTTP/2 handshake failed: {e}");
                // The one GOAWAY error of the handshake: the h2 crate read a preface that is
                // not HTTP/2's, after it sent its SETTINGS, and leaves the GOAWAY to us.
                if e.is_go_away() && e.reason() == Some(Reason::PROTOCOL_ERROR) {
                    return Err(Preface::Invalid);
                }
                Err(Preface::Ended)
            }
            Err(_) => Err(Preface::Ended),
        }
    }

    /// Ends a connection whose preface is not HTTP/2's (RFC 9113 section 3.4: a connection
    /// error of type PROTOCOL_ERROR) with GOAWAY, after the SETTINGS the h2 crate sent, and
    /// closes it without losing the GOAWAY to a reset (the rest of the client's bytes are
    /// unread).
    async fn refuse_preface(&mut self, stats: &ServiceStats) {
        let limit = TimeLimit::Idle(Duration::from_secs(5));
        if write_all(&self.client, &PREFACE_GOAWAY, limit)
            .await
            .is_ok()
        {
            // Counted as io.rs counts the GOAWAYs the h2 crate writes.
            stats::bump(&stats.h2_goaways_sent);
            stats::bump(&stats.h2_protocol_errors);
        }
        self.unread_input = true;
        self.linger().await;
    }
}

/// GOAWAY for a preface that is not HTTP/2's: its header (length 8, type GOAWAY 0x7, no flags,
/// stream 0), last stream id 0 (no stream was processed), `PROTOCOL_ERROR` (0x1), no debug
/// data.
const PREFACE_GOAWAY: [u8; 17] = [0, 0, 8, 0x7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1];
const _: () =
    assert!(PREFACE_GOAWAY[3] == frames::GOAWAY && PREFACE_GOAWAY[16] as u32 == io::PROTOCOL_ERROR);

/// The h2 crate's settings for a client connection (the limits of the module comment).
fn builder() -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(MAX_HEADER_LIST)
        .max_send_buffer_size(MAX_SEND_BUFFER)
        .max_pending_accept_reset_streams(MAX_PENDING_ACCEPT_RESETS)
        .max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS));
    builder
}

impl Driver<'_> {
    async fn run(&mut self) {
        loop {
            match poll_fn(|cx| self.poll_event(cx)).await {
                Event::Stream(accepted) => {
                    if !self.start_stream(accepted) {
                        tracing::debug!(client = %self.link.peer, "HTTP/2 client keeps opening refused streams: GOAWAY");
                        self.flooded = true;
                        self.conn.abrupt_shutdown(Reason::ENHANCE_YOUR_CALM);
                        self.go_away_until_grace();
                    }
                }
                Event::Closed(error) => {
                    if let Some(e) = error {
                        tracing::debug!(client = %self.link.peer, "HTTP/2 connection ended: {e}");
                    }
                    return;
                }
                Event::Alarm(reason) => {
                    tracing::debug!(client = %self.link.peer, "HTTP/2 client flooded or began without SETTINGS: GOAWAY {reason}");
                    self.flooded = true;
                    self.conn.abrupt_shutdown(reason);
                    self.go_away_until_grace();
                }
                Event::Leave | Event::Idle => {
                    self.conn.graceful_shutdown();
                    self.go_away_until_grace();
                }
                Event::GraceOver => return,
            }
        }
    }

    fn go_away_until_grace(&mut self) {
        self.going_away = true;
        let timer = &self.link.timer;
        self.deadline_ms = timer.deadline_after(GOING_AWAY_GRACE);
    }

    /// Runs the stream's request under the current configuration if the service is still
    /// there (else under the connection's, which is leaving), or answers `503` at once if it
    /// is not admitted (admission.rs). `false`: the client spent its budget of refusals.
    fn start_stream(
        &mut self,
        (request, body, mut respond): (RawRequest, RecvStream, SendResponse<Bytes>),
    ) -> bool {
        let current = &self.link.shared.generation;
        if let Followed::Moved {
            generation,
            service,
        } = generation::follow_reloads(current, &self.generation, self.service)
        {
            self.generation = generation;
            self.service = service;
        }
        let service = &self.generation.services[self.service];
        let client = admission::Client {
            shared: &self.link.shared,
            address: self.link.peer.ip(),
            spare: &self.link.spare_place,
        };
        match admission::admit(client, service) {
            Ok(pass) => {
                let at = (Arc::clone(&self.generation), self.service);
                stream::spawn(&self.link, at, pass, (request, body, respond));
                true
            }
            Err(refusal) => {
                stats::bump(&service.stats.h2_streams_refused);
                tracing::debug!(client = %self.link.peer, service = %service.name, ?refusal, "HTTP/2 stream refused: 503");
                let is_head = request.method() == http::Method::HEAD;
                let own = &service.own_answers;
                response::refuse_at_once(&mut respond, is_head, refusal.why(), own);
                self.refusals.spend()
            }
        }
    }

    /// Whether the connection should say GOAWAY: the switch stops, or its service is gone.
    fn should_leave(&self) -> bool {
        if self.link.timer.stopping() {
            return true;
        }
        let current = &self.link.shared.generation;
        matches!(
            generation::follow_reloads(current, &self.generation, self.service),
            Followed::Gone
        )
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        if let Some(code) = self.alarm.raised().filter(|_| !self.flooded) {
            return Poll::Ready(Event::Alarm(Reason::from(code)));
        }
        if !self.going_away && self.should_leave() {
            return Poll::Ready(Event::Leave);
        }
        let running = self.link.live_streams.poll_count(cx);
        // A stream the budget has no room for is answered at once (admission.rs), so the
        // driver accepts whenever the connection's own limit allows.
        let room = running < MAX_CONCURRENT_STREAMS as usize;
        // After a graceful GOAWAY the streams the client opened before it still come in.
        let polled = if room && !self.flooded {
            match self.conn.poll_accept_raw(cx) {
                Poll::Ready(Some(Ok(stream))) => return Poll::Ready(Event::Stream(stream)),
                Poll::Ready(Some(Err(e))) => Poll::Ready(Some(e)),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        } else {
            // Full, or flooded: the connection is driven, new streams wait in the h2 crate
            // (which refuses those beyond the limit, and counts those reset meanwhile).
            self.conn.poll_closed(cx).map(Result::err)
        };
        if let Poll::Ready(error) = polled {
            return Poll::Ready(Event::Closed(error));
        }
        self.poll_deadline(cx, running)
    }

    /// The idle timeout (no stream running), or the grace after GOAWAY; the slot also wakes the
    /// driver when the switch stops or a reload removes services. An idle connection gives its
    /// memory back on the way ([`RELEASE_IDLE_AFTER_MS`]).
    fn poll_deadline(&mut self, cx: &mut Context<'_>, running: usize) -> Poll<Event> {
        let timer = &self.link.timer;
        if !self.going_away && running > 0 {
            let now = timer.now_ms();
            self.deadline_ms = now.saturating_add(self.keepalive_ms);
            self.release_at_ms = now.saturating_add(RELEASE_IDLE_AFTER_MS);
            let _ = timer.poll_expired(u64::MAX, cx);
            if self.should_leave() {
                return Poll::Ready(Event::Leave);
            }
            return Poll::Pending;
        }
        loop {
            let release = !self.going_away && self.release_at_ms < self.deadline_ms;
            let wake_at = if release {
                self.release_at_ms
            } else {
                self.deadline_ms
            };
            return match timer.poll_expired(wake_at, cx) {
                // Checked again now that the waker is registered: a stop that came after the
                // first check found no waker to wake.
                Poll::Pending if !self.going_away && self.should_leave() => {
                    Poll::Ready(Event::Leave)
                }
                Poll::Pending => Poll::Pending,
                Poll::Ready(()) if release => {
                    // A stream still in the h2 crate (its last frames on their way): later.
                    self.release_at_ms = if self.conn.release_idle_memory() {
                        u64::MAX
                    } else {
                        timer.now_ms().saturating_add(RELEASE_IDLE_AFTER_MS)
                    };
                    continue;
                }
                Poll::Ready(()) if self.going_away => Poll::Ready(Event::GraceOver),
                Poll::Ready(()) => Poll::Ready(Event::Idle),
            };
        }
    }
}
