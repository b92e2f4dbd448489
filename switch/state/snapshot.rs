//! The counters and states of every service, pool and server, read at once: what tests,
//! `tcpvs list`, `/stats`, `/metrics` and the monitor page show.

use crate::buffering::BufferMemory;
use crate::config::health::CheckKind;
use crate::config::ServerProtocol;
use crate::state::generation::{Generation, Service};
use crate::state::pool::Pool;
use crate::state::server::Backend;
use crate::state::stats::counters::{
    counter_literal, counter_struct, server_counters, service_counters,
};
use crate::state::stats::{self, LatencySnapshot};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tcpvs_modules::ServerState;

/// The counters and states of every service, pool and server of `generation`, and the count
/// of open client connections. Each value is read once with a relaxed load: a snapshot taken
/// under load is not one instant, but each counter in it is exact as of its read.
///
/// `clients` is read last: a connection is counted in it before its service counts it
/// `accepted` (listener.rs), so a snapshot that shows a connection accepted shows it open too.
pub fn take(generation: &Generation, clients: &AtomicUsize, buffers: &BufferMemory) -> Snapshot {
    let services = generation
        .services
        .iter()
        .map(|s| service_snapshot(s))
        .collect();
    let mut pools = Vec::with_capacity(generation.pools.len());
    let mut servers = Vec::new();
    for pool in generation.pools.iter() {
        pools.push(PoolSnapshot {
            name: pool.name.clone(),
            scheduler: pool.scheduler.name().to_string(),
            queued: pool.waiting(),
            panic: pool.in_panic(),
            discover: pool.config.discover.as_ref().map(|d| d.lookup.to_string()),
        });
        for (state, backend) in pool.servers.iter().zip(pool.backends.iter()) {
            servers.push(server_snapshot(pool, state, backend));
        }
    }
    let limits = generation
        .limits
        .iter()
        .map(|limiter| LimitSnapshot {
            name: limiter.spec().name.clone(),
            allowed: limiter.allowed(),
            limited: limiter.limited(),
            keys: limiter.keys(),
            dry_run: limiter.spec().dry_run,
            store_up: limiter.store_up(),
        })
        .collect();
    Snapshot {
        generation: generation.number,
        clients: clients.load(Ordering::Relaxed),
        buffered_bytes: buffers.in_use(),
        buffer_fallbacks: buffers.fallbacks(),
        // Filled by `Shared::snapshot`, which holds the tracing counters.
        trace: Default::default(),
        services,
        pools,
        servers,
        limits,
    }
}

fn service_snapshot(service: &Service) -> ServiceSnapshot {
    let s = &service.stats;
    service_counters!(
        counter_literal,
        ServiceSnapshot {
            name: service.name.clone(),
            listen: service.bound.get().copied().unwrap_or(service.listen),
            classes: s.classes.read(),
            duration: s.duration.read(),
        }
        stats::read,
        s
    )
}

fn server_snapshot(pool: &Pool, state: &ServerState, backend: &Backend) -> ServerSnapshot {
    let now = Instant::now();
    let kind = match pool.health.health.check {
        CheckKind::None => "none",
        CheckKind::Tcp => "tcp",
        CheckKind::Http => "http",
        CheckKind::Grpc => "grpc",
    };
    let status = backend
        .status
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let check = CheckSnapshot {
        kind,
        last: status
            .last_check
            .as_ref()
            .map(|(passed, why, at)| (*passed, why.clone(), now.saturating_duration_since(*at))),
        successes: status.check_successes,
        failures: status.check_failures,
    };
    let (shown, reason, since, admin_weight) = (
        status.shown,
        status.reason.clone(),
        now.saturating_duration_since(status.since),
        status.admin_weight,
    );
    drop(status);
    let s = &backend.stats;
    server_counters!(
        counter_literal,
        ServerSnapshot {
            pool: pool.name.clone(),
            addr: backend.addr,
            state: shown,
            reason,
            backup: backend.is_backup(),
            discovered: pool
                .config
                .servers
                .iter()
                .any(|line| line.addr == backend.addr && line.discovered),
            protocol: match pool.config.protocol {
                ServerProtocol::Http1 => "http/1.1",
                ServerProtocol::H2 => "h2",
                ServerProtocol::Auto if backend.chose_h2.load(Ordering::Relaxed) => "h2",
                ServerProtocol::Auto => "http/1.1",
            },
            tls: pool.config.tls.is_some(),
            offered: state.load().is_usable(),
            weight: state.weight(),
            active: state.active(),
            idle: backend.idle_count(),
            responses: stats::read(&s.responses),
            classes: s.classes.read(),
            latency: s.latency.read(),
            configured_weight: backend.weight(),
            admin_weight,
            max_conns: backend.max_conns(),
            since,
            check,
        }
        stats::read,
        s
    )
}

server_counters!(
    counter_struct,
    /// A server as `tcpvs list` will show it: its counters (the table's rows) and the rest.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ServerSnapshot {
        pub pool: String,
        pub addr: std::net::SocketAddr,
        /// `up`, `down`, `drain` or `maint`, and why (the last transition's reason).
        pub state: crate::state::status::State,
        pub reason: String,
        pub backup: bool,
        /// Found by the pool's `discover`, not listed in the file.
        pub discovered: bool,
        /// New requests may go to it now (a backup only while no primary is usable).
        pub offered: bool,
        /// The effective weight (admin, agent and slow start applied).
        pub weight: u32,
        pub active: u32,
        pub idle: usize,
        /// Response heads received (their times since the request head was read: `latency`).
        pub responses: u64,
        /// Final responses by class 1xx..5xx.
        pub classes: [u64; 5],
        pub latency: LatencySnapshot,
        /// As configured, and the operator's override (`None`: the configured one holds).
        pub configured_weight: u32,
        pub admin_weight: Option<u32>,
        pub max_conns: u32,
        /// What its connections speak (`http/1.1`, `h2`; for `protocol = "auto"` what the last
        /// connection chose), and whether over TLS (`[pool.NAME.tls]`).
        pub protocol: &'static str,
        pub tls: bool,
        /// How long the shown state has held.
        pub since: std::time::Duration,
        pub check: CheckSnapshot,
    }
    counters: u64
);

/// What active checks last said of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckSnapshot {
    /// `http`, `tcp` or `none`.
    pub kind: &'static str,
    /// The last result: passed or not, why it failed, how long ago.
    pub last: Option<(bool, String, std::time::Duration)>,
    /// Consecutive successes and failures.
    pub successes: u32,
    pub failures: u32,
}

service_counters!(
    counter_struct,
    /// A virtual service: its counters (the table's rows) and the rest.
    #[derive(Clone, Debug, PartialEq, Eq)]
    pub struct ServiceSnapshot {
        pub name: String,
        pub listen: std::net::SocketAddr,
        pub classes: [u64; 5],
        pub duration: LatencySnapshot,
    }
    counters: u64
);

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The configuration generation read: 1 at start, one more per reload.
    pub generation: u64,
    /// Client connections open right now.
    pub clients: usize,
    /// Bytes of request bodies held and responses read ahead now (`request_buffer`, `response_buffer`; within `buffer_memory`).
    pub buffered_bytes: u64,
    /// Request bodies that streamed because `buffer_memory` was spent.
    pub buffer_fallbacks: u64,
    /// Span export (trace/counters.rs).
    pub trace: crate::trace::counters::TraceCounts,
    pub services: Vec<ServiceSnapshot>,
    pub pools: Vec<PoolSnapshot>,
    /// Every pool's servers, in pool order.
    pub servers: Vec<ServerSnapshot>,
    /// `[limit.NAME]`, in name order.
    pub limits: Vec<LimitSnapshot>,
}

/// A rate limit's counts (policy/rate_limit/).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitSnapshot {
    pub name: String,
    /// Requests let through (under `dry_run`: every request).
    pub allowed: u64,
    /// Requests refused (under `dry_run`: those that would have been).
    pub limited: u64,
    /// Keys held now (at most `max_keys`).
    pub keys: usize,
    pub dry_run: bool,
    /// With a `store`: whether it works now (its last call through the script succeeded).
    pub store_up: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolSnapshot {
    pub name: String,
    pub scheduler: String,
    /// Requests waiting for a slot now.
    pub queued: usize,
    /// Below its `panic_threshold`: requests go to its down servers too.
    pub panic: bool,
    /// What its servers are found by (`dns NAME:PORT`, `srv NAME`), if anything.
    pub discover: Option<String>,
}

impl Snapshot {
    pub fn server(&self, addr: std::net::SocketAddr) -> Option<&ServerSnapshot> {
        self.servers.iter().find(|s| s.addr == addr)
    }
}
