//! Counters kept per server and per virtual service, LVS style: updated with relaxed atomics on
//! the data path, read as snapshots (by tests, and by the admin endpoint off the workers).

pub mod counters;
pub mod latency;

use counters::{counter_struct, server_counters, service_counters};
pub use latency::{Latency, LatencySnapshot};
use std::sync::atomic::{AtomicU64, Ordering};

server_counters!(
    counter_struct,
    /// A server's counters (the table's rows, as atomics) and what is not a plain counter.
    #[derive(Debug, Default)]
    pub struct ServerStats {
        /// Responses whose head arrived (not shown: evidence that the server is alive).
        pub responses: AtomicU64,
        /// Final response heads the server sent, by class: 1xx (101 and tunnels), 2xx, 3xx,
        /// 4xx, 5xx; not those the switch refused to relay (a 101 nobody asked for: 502).
        pub classes: StatusClasses,
        /// Request head read -> response head received, connection set-up included; with its
        /// sum.
        pub latency: Latency,
        /// Exchanges moving a body to or from the server now (a gauge): see
        /// [`ServerStats::relaying`].
        relaying: AtomicU64,
    }
    counters: AtomicU64
);

impl ServerStats {
    /// Marks an exchange as moving a body (the request's up, or the response's down) until
    /// the mark drops. Bodies move at their clients' pace: a client that trickles its upload
    /// or reads its answer slowly holds the server (a worker of it, or all of a one-worker
    /// server) for as long as it likes, and the server's other requests then wait. Those
    /// waits must not be evidence against the server (issue 22: one client trickling a body
    /// took a healthy server down through the others' 504s and its failed checks).
    pub fn relaying(&self) -> RelayingBody<'_> {
        bump(&self.relaying);
        RelayingBody(&self.relaying)
    }

    /// Whether the server showed itself alive since `answered` (its response count read
    /// then): it answered another request, or it is moving another exchange's body now. A
    /// timeout then says busy, not dead (see [`crate::state::control::Evidence`]).
    pub fn alive_since(&self, answered: u64) -> bool {
        read(&self.responses) > answered || read(&self.relaying) > 0
    }
}

/// An exchange moving a body at a server; see [`ServerStats::relaying`].
pub struct RelayingBody<'a>(&'a AtomicU64);

impl Drop for RelayingBody<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

service_counters!(
    counter_struct,
    /// A virtual service's counters (the table's rows, as atomics) and what is not a plain
    /// counter.
    #[derive(Debug, Default)]
    pub struct ServiceStats {
        /// Answers, by the status the client got: the server's, or the switch's own (refusals
        /// of requests that could not be read included).
        pub classes: StatusClasses,
        /// Request head read -> response relayed (or refused), for requests that got an
        /// answer.
        pub duration: Latency,
    }
    counters: AtomicU64
);

/// Responses counted by status class: 1xx, 2xx, 3xx, 4xx, 5xx.
#[derive(Debug, Default)]
pub struct StatusClasses([AtomicU64; 5]);

impl StatusClasses {
    /// Counts `status`; anything outside 100..=599 (0: the client went away first) is not
    /// an answer and is not counted.
    pub fn count(&self, status: u16) {
        if let Some(class) = (status / 100).checked_sub(1) {
            if let Some(counter) = self.0.get(usize::from(class)) {
                bump(counter);
            }
        }
    }

    pub fn read(&self) -> [u64; 5] {
        std::array::from_fn(|i| read(&self.0[i]))
    }
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
