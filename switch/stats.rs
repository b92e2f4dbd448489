//! Counters kept per server and per virtual service, LVS style: updated with relaxed atomics on
//! the data path, read as snapshots.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct ServerStats {
    /// TCP connections opened to the server.
    pub connections: AtomicU64,
    /// Requests sent (a retry counts again).
    pub requests: AtomicU64,
    /// Bytes of requests sent to the server, heads included.
    pub bytes_in: AtomicU64,
    /// Bytes of responses relayed to clients, heads as rebuilt.
    pub bytes_out: AtomicU64,
    /// Connection attempts that failed or timed out.
    pub connect_errors: AtomicU64,
    /// Exchanges that failed after connecting: bad response, reset, timeout.
    pub response_errors: AtomicU64,
    /// Sum of times from a request's head being read to its response head arriving, in
    /// microseconds (connection set-up included).
    pub response_time_us: AtomicU64,
    /// Responses whose head arrived (the count behind `response_time_us`).
    pub responses: AtomicU64,
}

#[derive(Debug, Default)]
pub struct ServiceStats {
    pub accepted: AtomicU64,
    /// Connections refused with 503 because `max_clients` were connected.
    pub refused: AtomicU64,
    pub requests: AtomicU64,
    /// Responses the switch produced itself (4xx refusals, 502, 503, 504).
    pub local_errors: AtomicU64,
}

pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

pub fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A server as `tcpvs list` will show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSnapshot {
    pub pool: String,
    pub addr: std::net::SocketAddr,
    /// `up`, `down`, `drain` or `maint`, and why (the last transition's reason).
    pub state: crate::control::State,
    pub reason: String,
    pub backup: bool,
    /// New requests may go to it now (a backup only while no primary is usable).
    pub offered: bool,
    /// The effective weight (admin, agent and slow start applied).
    pub weight: u32,
    pub active: u32,
    pub idle: usize,
    pub connections: u64,
    pub requests: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub connect_errors: u64,
    pub response_errors: u64,
    /// Response heads received, and the sum of their times since the request head was read.
    pub responses: u64,
    pub response_time_us: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSnapshot {
    pub name: String,
    pub accepted: u64,
    pub refused: u64,
    pub requests: u64,
    pub local_errors: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Client connections open right now.
    pub clients: usize,
    pub services: Vec<ServiceSnapshot>,
    pub servers: Vec<ServerSnapshot>,
}

impl Snapshot {
    pub fn server(&self, addr: std::net::SocketAddr) -> Option<&ServerSnapshot> {
        self.servers.iter().find(|s| s.addr == addr)
    }
}
