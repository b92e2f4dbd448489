//! A server's HTTP/2 connections, per worker (as its idle HTTP/1.1 connections are): each
//! carries many requests at once, up to the server's `SETTINGS_MAX_CONCURRENT_STREAMS`, and a
//! new one is opened only when those that are open have no stream left (Pingora's h2 upstream
//! pool). One connection of a worker is opened at a time: requests that find no room while
//! one is being opened wait for it (its SETTINGS say how many it takes) rather than each
//! opening its own, so a burst of a hundred requests to a server that allows ten streams a
//! connection opens ten connections, not a hundred. A connection leaves the list when its
//! driver task ends: the server closed it or sent GOAWAY, it broke, or it stayed idle for
//! `server_idle_timeout` (driver.rs).

use crate::upstream::tls::PoolTls;
use bytes::Bytes;
use h2::client::SendRequest;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;
use tokio::sync::Notify;

/// One HTTP/2 connection to a server.
pub(crate) struct H2Connection {
    send: SendRequest<Bytes>,
    /// Streams open on it now (requests between their pick and their end).
    in_flight: AtomicUsize,
    /// Its driver ended: no new stream may start on it.
    closed: AtomicBool,
    /// The server's first SETTINGS came (its stream limit is known), or it ended first.
    settled: AtomicBool,
    /// Woken when it settles.
    settling: Notify,
    /// When its last stream ended (milliseconds of [`clock_ms`]).
    idle_since_ms: AtomicU64,
    /// The TLS settings it was made with (`None`: plain TCP), as for HTTP/1.1 connections.
    tls: Option<Arc<PoolTls>>,
}

/// Milliseconds since the first call: when a connection's last stream ended. One clock read
/// per stream, beside the stream's own cost.
pub(crate) fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

impl H2Connection {
    pub(crate) fn new(send: SendRequest<Bytes>, tls: Option<Arc<PoolTls>>) -> H2Connection {
        H2Connection {
            send,
            in_flight: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            settled: AtomicBool::new(false),
            settling: Notify::new(),
            idle_since_ms: AtomicU64::new(clock_ms()),
            tls,
        }
    }

    /// Whether a new stream may start on it now, made as the pool makes connections now.
    fn has_room(&self, tls: Option<&Arc<PoolTls>>) -> bool {
        let same_tls = match (&self.tls, tls) {
            (None, None) => true,
            (Some(mine), Some(now)) => Arc::ptr_eq(mine, now),
            _ => false,
        };
        same_tls
            && !self.closed.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Relaxed) < self.send.current_max_send_streams()
    }

    /// Called by the driver after each turn: the first time the server's limit is known (the
    /// h2 crate starts it at 0, driver.rs), or the connection ended, its waiters go on.
    pub(crate) fn check_settled(&self) {
        if self.settled.load(Ordering::Relaxed) {
            return;
        }
        if self.send.current_max_send_streams() > 0 || self.is_closed() {
            self.settled.store(true, Ordering::Release);
            self.settling.notify_waiters();
        }
    }

    /// Waits until the server's SETTINGS came (or the connection ended).
    pub(crate) async fn settled(&self) {
        let notified = self.settling.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if !self.settled.load(Ordering::Acquire) {
            notified.await;
        }
    }

    /// Its driver ended, or it is not to take new streams (those it carries go on: the driver
    /// ends it once they are done).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.check_settled();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether it carries no stream now.
    pub(crate) fn is_unused(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
    }

    /// Whether it has carried no stream for `idle_ms` (and carries none now).
    pub(crate) fn idle_for(&self, idle_ms: u64) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
            && clock_ms().saturating_sub(self.idle_since_ms.load(Ordering::Relaxed)) >= idle_ms
    }
}

/// A stream's place on a connection, counted while it lives.
pub(crate) struct Channel {
    connection: Arc<H2Connection>,
    /// The connection was opened for this stream: losing it is the server's failure, not a
    /// connection that went stale.
    fresh: bool,
}

impl Channel {
    /// A handle to start the stream with.
    pub(crate) fn sender(&self) -> SendRequest<Bytes> {
        self.connection.send.clone()
    }

    /// Whether the connection was opened for this stream.
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// The connection is going away (a GOAWAY, an error): no new stream on it.
    pub(crate) fn retire(&self) {
        self.connection.close();
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        let connection = &self.connection;
        connection
            .idle_since_ms
            .store(clock_ms(), Ordering::Relaxed);
        connection.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One worker's connections to the server.
#[derive(Default)]
struct WorkerConnections {
    list: Mutex<Vec<Arc<H2Connection>>>,
    /// A connection is being opened (see the module comment).
    opening: AtomicBool,
    /// Woken when that opening ends, well or not.
    opened: Notify,
}

/// What [`H2Connections::take`] found.
pub(crate) enum Taken<'c> {
    /// A stream's place on a connection with room.
    Stream(Channel),
    /// No room: the caller opens a connection (and adds it), holding this while it does.
    Open(Opening<'c>),
    /// No room, and a connection is being opened: wait for it ([`H2Connections::opened`]),
    /// then take again.
    Wait,
}

/// The right to open this worker's next connection to the server; when it drops, requests
/// that waited for it look again.
pub(crate) struct Opening<'c> {
    worker: &'c WorkerConnections,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        self.worker.opening.store(false, Ordering::Release);
        self.worker.opened.notify_waiters();
    }
}

/// The HTTP/2 connections of one server, per worker.
#[derive(Default)]
pub struct H2Connections {
    workers: Box<[WorkerConnections]>,
}

impl std::fmt::Debug for H2Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "H2Connections({} open)", self.count())
    }
}

impl H2Connections {
    pub fn new(workers: usize) -> H2Connections {
        H2Connections {
            workers: (0..workers.max(1))
                .map(|_| WorkerConnections::default())
                .collect(),
        }
    }

    fn of(&self, worker: usize) -> Option<&WorkerConnections> {
        self.workers
            .get(worker.min(self.workers.len().saturating_sub(1)))
    }

    /// A stream's place on a connection of `worker` with room, if any (connections that
    /// ended, or that were made under other TLS settings, leave the list on the way).
    pub(crate) fn take(&self, worker: usize, tls: Option<&Arc<PoolTls>>) -> Option<Channel> {
        let mut list = self.of(worker)?.list.lock().ok()?;
        list.retain(|c| !c.is_closed());
        let connection = list.iter().find(|c| c.has_room(tls))?;
        Some(Self::channel_on(connection, false))
    }

    /// A stream's place, or the right to open a connection, or word to wait for one.
    pub(crate) fn take_or_open(&self, worker: usize, tls: Option<&Arc<PoolTls>>) -> Taken<'_> {
        if let Some(channel) = self.take(worker, tls) {
            return Taken::Stream(channel);
        }
        let Some(mine) = self.of(worker) else {
            return Taken::Wait;
        };
        match mine.opening.swap(true, Ordering::AcqRel) {
            false => Taken::Open(Opening { worker: mine }),
            true => Taken::Wait,
        }
    }

    /// Waits until `worker`'s connection being opened is open (or failed), if one is.
    pub(crate) async fn opened(&self, worker: usize) {
        let Some(mine) = self.of(worker) else {
            return;
        };
        let notified = mine.opened.notified();
        let mut notified = std::pin::pin!(notified);
        notified.as_mut().enable();
        if mine.opening.load(Ordering::Acquire) {
            notified.await;
        }
    }

    /// Adds a new, settled connection of `worker`, with the first stream's place on it.
    pub(crate) fn add(&self, worker: usize, connection: Arc<H2Connection>) -> Channel {
        let channel = Self::channel_on(&connection, true);
        if let Some(Ok(mut list)) = self.of(worker).map(|w| w.list.lock()) {
            list.push(connection);
        }
        channel
    }

    fn channel_on(connection: &Arc<H2Connection>, fresh: bool) -> Channel {
        connection.in_flight.fetch_add(1, Ordering::Relaxed);
        Channel {
            connection: Arc::clone(connection),
            fresh,
        }
    }

    /// Connections open, in every worker.
    pub fn count(&self) -> usize {
        self.workers
            .iter()
            .map(|w| {
                w.list
                    .lock()
                    .map_or(0, |l| l.iter().filter(|c| !c.is_closed()).count())
            })
            .sum()
    }

    /// Closes every connection (their drivers end at their next wake-up); returns how many.
    pub fn close_all(&self) -> usize {
        let mut closed = 0;
        for worker in self.workers.iter() {
            if let Ok(mut list) = worker.list.lock() {
                closed += list.len();
                for connection in list.drain(..) {
                    connection.close();
                }
            }
        }
        closed
    }
}
