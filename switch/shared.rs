//! What every worker shares while the switch runs: settings, the current configuration
//! generation (services and pools), the count of client connections, the stop signal; and the
//! snapshot of their counters and states that tests, `tcpvs list` and the admin endpoint read.

use crate::access_log::AccessLog;
use crate::config::health::CheckKind;
use crate::config::SwitchSettings;
use crate::generation::{Generation, Service};
use crate::stats::{self, CheckSnapshot, PoolSnapshot, ServerSnapshot, ServiceSnapshot, Snapshot};
use crate::upstream::{Backend, Pool};
use arc_swap::ArcSwap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tcpvs_modules::ServerState;
use tokio::sync::watch;

/// State every worker shares.
#[derive(Debug)]
pub struct Shared {
    /// As the switch started with them: a reload reports changed ones as needing a restart.
    pub settings: SwitchSettings,
    /// The current services and pools; a reload swaps in the next.
    pub generation: ArcSwap<Generation>,
    /// Reloads: the rule file, the workers' listeners, one at a time (reload.rs); set once the
    /// workers run.
    pub reload: std::sync::Mutex<Option<crate::reload::Reloader>>,
    /// Client connections open now (bounded by `max_clients`).
    pub clients: AtomicUsize,
    /// `max_clients` in effect: the configured one, or lower if the open-file limit could not
    /// be raised far enough (limits/descriptors.rs).
    pub max_clients: usize,
    /// Turns true when the switch stops: listeners close.
    pub shutdown: watch::Receiver<bool>,
    /// When the switch started.
    pub started: Instant,
    /// Where each request's line goes (`access_log`, `access_log_format`); shared with the
    /// SIGUSR1 task that reopens its file.
    pub access_log: std::sync::Arc<AccessLog>,
}

impl Shared {
    /// The counters and states of every service, pool and server, read now. Each value is
    /// read once with a relaxed load: a snapshot taken under load is not one instant, but
    /// each counter in it is exact as of its read.
    pub fn snapshot(&self) -> Snapshot {
        let generation = self.generation.load();
        let services = generation.services.iter().map(service_snapshot).collect();
        let mut pools = Vec::with_capacity(generation.pools.len());
        let mut servers = Vec::new();
        for pool in generation.pools.iter() {
            pools.push(PoolSnapshot {
                name: pool.name.clone(),
                scheduler: pool.scheduler.name().to_string(),
                queued: pool.waiting(),
                panic: pool.in_panic(),
            });
            for (state, backend) in pool.servers.iter().zip(pool.backends.iter()) {
                servers.push(server_snapshot(pool, state, backend));
            }
        }
        Snapshot {
            generation: generation.number,
            clients: self.clients.load(Ordering::Relaxed),
            services,
            pools,
            servers,
        }
    }
}

fn service_snapshot(service: &Service) -> ServiceSnapshot {
    let s = &service.stats;
    ServiceSnapshot {
        name: service.name.clone(),
        listen: service.bound.get().copied().unwrap_or(service.listen),
        accepted: stats::read(&s.accepted),
        open: stats::read(&s.open),
        refused: stats::read(&s.refused),
        proxy_refused: stats::read(&s.proxy_refused),
        tls_handshakes: stats::read(&s.tls_handshakes),
        tls_resumed: stats::read(&s.tls_resumed),
        tls_handshake_failures: stats::read(&s.tls_handshake_failures),
        requests: stats::read(&s.requests),
        local_errors: stats::read(&s.local_errors),
        classes: s.classes.read(),
        duration: s.duration.read(),
    }
}

fn server_snapshot(pool: &Pool, state: &ServerState, backend: &Backend) -> ServerSnapshot {
    let now = Instant::now();
    let kind = match pool.health.health.check {
        CheckKind::None => "none",
        CheckKind::Tcp => "tcp",
        CheckKind::Http => "http",
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
    ServerSnapshot {
        pool: pool.name.clone(),
        addr: backend.addr,
        state: shown,
        reason,
        backup: backend.is_backup(),
        offered: state.load().is_usable(),
        weight: state.weight(),
        active: state.active(),
        idle: backend.idle_count(),
        connections: stats::read(&s.connections),
        requests: stats::read(&s.requests),
        bytes_in: stats::read(&s.bytes_in),
        bytes_out: stats::read(&s.bytes_out),
        connect_errors: stats::read(&s.connect_errors),
        response_errors: stats::read(&s.response_errors),
        responses: stats::read(&s.responses),
        classes: s.classes.read(),
        timeouts: stats::read(&s.timeouts),
        retries: stats::read(&s.retries),
        latency: s.latency.read(),
        configured_weight: backend.weight(),
        admin_weight,
        max_conns: backend.max_conns(),
        since,
        check,
    }
}
