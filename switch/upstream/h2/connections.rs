//! A server's HTTP/2 connections, per worker (as its idle HTTP/1.1 connections are): each
//! carries many requests at once, up to the server's `SETTINGS_MAX_CONCURRENT_STREAMS`, and a
//! new one is opened only when those that are open have no stream left (Pingora's h2 upstream
//! pool, HAProxy's `max-reuse`-less h2 backends). A connection leaves the list when its driver
//! task ends: the server closed it or sent GOAWAY, it broke, or it stayed idle for
//! `server_idle_timeout` (driver.rs).

use crate::upstream::tls::PoolTls;
use bytes::Bytes;
use h2::client::SendRequest;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// One HTTP/2 connection to a server.
pub(crate) struct H2Connection {
    send: SendRequest<Bytes>,
    /// Streams open on it now (requests between their pick and their end).
    in_flight: AtomicUsize,
    /// Its driver ended: no new stream may start on it.
    closed: AtomicBool,
    /// When its last stream ended, on the switch's coarse clock (milliseconds).
    idle_since_ms: AtomicU64,
    /// The TLS settings it was made with (`None`: plain TCP), as for HTTP/1.1 connections.
    tls: Option<Arc<PoolTls>>,
}

impl H2Connection {
    pub(crate) fn new(send: SendRequest<Bytes>, tls: Option<Arc<PoolTls>>) -> H2Connection {
        H2Connection {
            send,
            in_flight: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
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
        // Until the server's SETTINGS come, the h2 crate assumes no limit; one stream at a
        // time until then keeps a burst from opening more than the server allows.
        let limit = self.send.current_max_send_streams().max(1);
        same_tls
            && !self.closed.load(Ordering::Acquire)
            && self.in_flight.load(Ordering::Relaxed) < limit
    }

    /// Its driver ended.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether it has carried no stream for `idle_ms` (and carries none now).
    pub(crate) fn idle_for(&self, idle_ms: u64) -> bool {
        self.in_flight.load(Ordering::Relaxed) == 0
            && clock_ms().saturating_sub(self.idle_since_ms.load(Ordering::Relaxed)) >= idle_ms
    }
}

/// Milliseconds since the first call: when a connection's last stream ended. One clock read
/// per stream, beside the stream's own cost.
pub(crate) fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A stream's place on a connection, counted while it lives.
pub(crate) struct Channel {
    connection: Arc<H2Connection>,
}

impl Channel {
    /// A handle to start the stream with.
    pub(crate) fn sender(&self) -> SendRequest<Bytes> {
        self.connection.send.clone()
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

/// The HTTP/2 connections of one server, a list per worker.
#[derive(Default)]
pub struct H2Connections {
    lists: Box<[Mutex<Vec<Arc<H2Connection>>>]>,
}

impl std::fmt::Debug for H2Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "H2Connections({} open)", self.count())
    }
}

impl H2Connections {
    pub fn new(workers: usize) -> H2Connections {
        H2Connections {
            lists: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
        }
    }

    fn list(&self, worker: usize) -> Option<&Mutex<Vec<Arc<H2Connection>>>> {
        self.lists
            .get(worker.min(self.lists.len().saturating_sub(1)))
    }

    /// A stream's place on a connection of `worker` that has room, if any (connections that
    /// ended, or that were made under other TLS settings, leave the list on the way).
    pub(crate) fn take(&self, worker: usize, tls: Option<&Arc<PoolTls>>) -> Option<Channel> {
        let mut list = self.list(worker)?.lock().ok()?;
        list.retain(|c| !c.is_closed());
        let connection = list.iter().find(|c| c.has_room(tls))?;
        Some(Self::channel_on(connection))
    }

    /// Adds a new connection of `worker`, with the first stream's place on it.
    pub(crate) fn add(&self, worker: usize, connection: Arc<H2Connection>) -> Channel {
        let channel = Self::channel_on(&connection);
        if let Some(Ok(mut list)) = self.list(worker).map(Mutex::lock) {
            list.push(connection);
        }
        channel
    }

    fn channel_on(connection: &Arc<H2Connection>) -> Channel {
        connection.in_flight.fetch_add(1, Ordering::Relaxed);
        Channel {
            connection: Arc::clone(connection),
        }
    }

    /// Connections open, in every worker.
    pub fn count(&self) -> usize {
        self.lists
            .iter()
            .map(|list| {
                list.lock()
                    .map_or(0, |l| l.iter().filter(|c| !c.is_closed()).count())
            })
            .sum()
    }

    /// Closes every connection (their drivers end at their next wake-up); returns how many.
    pub fn close_all(&self) -> usize {
        let mut closed = 0;
        for list in self.lists.iter() {
            if let Ok(mut list) = list.lock() {
                closed += list.len();
                for connection in list.drain(..) {
                    connection.close();
                }
            }
        }
        closed
    }
}
