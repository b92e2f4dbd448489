//! What every worker shares while the switch runs: settings, the current configuration
//! generation (services and pools), the count of client connections, the stop signal; and the
//! snapshot of their counters and states that tests, `tcpvs list` and the admin endpoint read.
//! Only what the data plane reads: the runtimes, listeners and reloads are the supervisor's
//! (supervisor/).

use crate::access_log::AccessLog;
use crate::capacity::share::{self, Crowding};
use crate::config::SwitchSettings;
use crate::policy::source_conns::{SourceConns, SourceGuard};
use crate::state::generation::Generation;
use crate::state::snapshot::{self, Snapshot};
use arc_swap::ArcSwap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::watch;

/// State every worker shares.
#[derive(Debug)]
pub struct Shared {
    /// As the switch started with them: a reload reports changed ones as needing a restart.
    pub settings: SwitchSettings,
    /// The current services and pools; a reload swaps in the next.
    pub generation: ArcSwap<Generation>,
    /// Client connections open now (bounded by `max_clients`).
    pub clients: AtomicUsize,
    /// HTTP/2 streams running now. Each may hold a server connection, so together with the
    /// client connections they stay within `max_clients`, the descriptor budget
    /// (capacity/descriptors.rs: a client and its server): without this, one client's
    /// connections of 100 streams each ran the switch out of descriptors.
    pub h2_streams: AtomicUsize,
    /// Client connections and HTTP/2 streams held now per source (an IPv4 address, an IPv6
    /// /64), in the whole switch: who may take the last quarter of `max_clients`
    /// (capacity/share.rs).
    pub source_load: std::sync::Arc<SourceConns>,
    /// `max_clients` in effect: the configured one, or lower if the open-file limit could not
    /// be raised far enough (capacity/descriptors.rs).
    pub max_clients: usize,
    /// Turns true when the switch stops: listeners close.
    pub shutdown: watch::Receiver<bool>,
    /// When the switch started.
    pub started: Instant,
    /// Where each request's line goes (`access_log`, `access_log_format`); shared with the
    /// SIGUSR1 task that reopens its file.
    pub access_log: std::sync::Arc<AccessLog>,
    /// What buffered request bodies hold now, within `buffer_memory` (buffering/).
    pub buffer_memory: crate::buffering::BufferMemory,
    /// What response encoders hold now, within `compress_memory` (compress/).
    pub compress_memory: crate::buffering::BufferMemory,
    /// `trace`, `request_id`, `otlp` (trace/): what each request carries and where its span
    /// goes.
    pub tracing: crate::trace::Tracing,
}

impl Shared {
    /// Client connections and HTTP/2 streams that take places of `max_clients` now.
    pub fn places_in_use(&self) -> usize {
        self.clients.load(Ordering::Relaxed) + self.h2_streams.load(Ordering::Relaxed)
    }

    /// Counts one more connection or stream of `address` in what its source holds, if the
    /// share rule (capacity/share.rs) admits it with `in_use` places taken; `besides` is what
    /// the source's count already holds of the newcomer's own (a stream's connection), which
    /// its verdict leaves out. Read and counted under one lock.
    pub fn take_share(
        &self,
        address: IpAddr,
        in_use: usize,
        besides: u32,
    ) -> Result<SourceGuard, Crowding> {
        let mut verdict = Ok(());
        let taken = self.source_load.enter_if(address, |held| {
            verdict = share::admits(in_use, self.max_clients, held.saturating_sub(besides));
            verdict.is_ok()
        });
        taken.ok_or(verdict.err().unwrap_or(Crowding::Full))
    }

    /// The counters and states of every service, pool and server, read now
    /// ([`snapshot::take`]).
    pub fn snapshot(&self) -> Snapshot {
        let mut snapshot =
            snapshot::take(&self.generation.load(), &self.clients, &self.buffer_memory);
        snapshot.trace = self.tracing.counts();
        snapshot
    }
}
