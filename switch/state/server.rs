//! One server at run time: its address, load, statistics, status and idle keep-alive
//! connections, shared by the pools of successive generations that keep it.

use crate::socket::Socket;
use crate::state::handshakes::Handshakes;
use crate::state::stats::{self, ServerStats};
use crate::state::status::ServerStatus;
use crate::stream::{wait, TimeLimit};
use crate::throttled::Throttled;
use crate::upstream::connection::ServerConnection;
use crate::upstream::h2::connections::H2Connections;
use crate::upstream::tls::PoolTls;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tcpvs_modules::ServerState;

/// One server of a pool, shared by the pools of successive configurations that keep it (same
/// pool name, same address): its load, statistics, idle connections, health and admin state
/// survive a reload; what its line in the rule file says (weight, `max_conns`, backup) is
/// updated in place. It is freed, with its idle connections, when the last configuration that
/// names it and the last request that uses it are gone (as KTCPVS freed a removed server).
#[derive(Debug)]
pub struct Backend {
    pub addr: SocketAddr,
    /// `ip:port`, the Host sent for HTTP/1.0 requests that carry none.
    pub host_field: Box<[u8]>,
    /// Parked connections, one list per worker: a tokio socket belongs to the runtime that
    /// registered it, so a connection is reused only by the worker that opened it (its
    /// readiness comes from that worker's reactor, and its age from that worker's clock).
    idle: Box<[Mutex<Vec<IdleConnection>>]>,
    /// HTTP/2 connections, one list per worker as for `idle` (`protocol = "h2"`/`"auto"`).
    pub h2: H2Connections,
    /// Its last connection chose HTTP/2 by ALPN (`protocol = "auto"`): what `/stats` shows.
    pub chose_h2: AtomicBool,
    pub stats: ServerStats,
    /// The switch's connects to it, in order: a SYN its full accept queue dropped is sent
    /// again when a slot may have opened (exchange/connect.rs).
    pub handshakes: Handshakes,
    /// What the pool's module reads of it: load, weight, up (a handle shared with the pool).
    pub state: ServerState,
    /// As its line in the rule file says: weight, `max_conns`, backup.
    weight: AtomicU32,
    max_conns: AtomicU32,
    backup: AtomicBool,
    /// Health, admin and agent state; written only by `control::apply`.
    pub status: Mutex<ServerStatus>,
    /// Set while a good exchange would change the status (failures counted, on trial, or
    /// down without checks): otherwise the data path reports nothing, at one relaxed load.
    pub report_success: AtomicBool,
    /// Its failures logged at most once a second, so a dead server does not flood the log.
    warnings: Throttled,
}

#[derive(Debug)]
struct IdleConnection {
    stream: ServerConnection,
    /// When it was parked, on the switch's coarse clock (milliseconds).
    since_ms: u64,
}

impl Backend {
    pub fn new(config: &crate::config::ServerConfig, workers: usize) -> Self {
        Backend {
            addr: config.addr,
            host_field: config.addr.to_string().into_bytes().into_boxed_slice(),
            idle: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            h2: H2Connections::new(workers),
            chose_h2: AtomicBool::new(false),
            stats: ServerStats::default(),
            handshakes: Handshakes::default(),
            state: ServerState::with_limit(config.weight, config.max_conns),
            weight: AtomicU32::new(config.weight),
            max_conns: AtomicU32::new(config.max_conns),
            backup: AtomicBool::new(config.backup),
            status: Mutex::new(ServerStatus::new(config.weight)),
            report_success: AtomicBool::new(false),
            warnings: Throttled::new(),
        }
    }

    /// Whether health (checks, passive detection or the agent) holds it down.
    pub fn is_down(&self) -> bool {
        self.status
            .lock()
            .is_ok_and(|s| s.state() == crate::state::status::State::Down)
    }

    /// The weight its line in the rule file gives.
    pub fn weight(&self) -> u32 {
        self.weight.load(Ordering::Relaxed)
    }

    /// Most requests in flight at once (0: no limit), as its line says.
    pub fn max_conns(&self) -> u32 {
        self.max_conns.load(Ordering::Relaxed)
    }

    /// Used only while no other server of its pool is usable.
    pub fn is_backup(&self) -> bool {
        self.backup.load(Ordering::Relaxed)
    }

    /// Whether it runs with what `config` (its line in the rule file) says.
    pub fn has_line(&self, config: &crate::config::ServerConfig) -> bool {
        self.weight() == config.weight
            && self.max_conns() == config.max_conns
            && self.is_backup() == config.backup
    }

    /// Takes what its line in the rule file says now; only `control::apply`
    /// (`Change::LineChanged`) calls this, under the server's status lock.
    pub(crate) fn reconfigure(&self, config: &crate::config::ServerConfig) {
        self.weight.store(config.weight, Ordering::Relaxed);
        self.max_conns.store(config.max_conns, Ordering::Relaxed);
        self.backup.store(config.backup, Ordering::Relaxed);
    }

    /// A failure worth a warning, at most one per second per server (`now_ms` on the coarse
    /// clock): returns how many were left unlogged before this one, or `None` to stay quiet.
    pub fn may_warn(&self, now_ms: u64) -> Option<u64> {
        let mut said = None;
        self.warnings.warn_at(now_ms, |held| said = Some(held));
        said
    }

    /// The idle list of `worker` (worker indexes beyond the count share the last list, which
    /// cannot happen in the switch but keeps this total).
    fn idle_of(&self, worker: usize) -> &Mutex<Vec<IdleConnection>> {
        &self.idle[worker.min(self.idle.len() - 1)]
    }

    /// The most recently parked connection of `worker` that is still usable, if any, and made
    /// as the pool makes them now (`tls`: its `[pool.NAME.tls]`).
    ///
    /// `certain`: confirm with a system call that the server has not closed it. Without, the
    /// socket's readiness decides (nothing arrived, so the server said nothing, not even
    /// goodbye), which spares a system call per request; the rare connection closed an
    /// instant ago then fails on use, which only requests that may be retried accept.
    pub fn take_idle(
        &self,
        worker: usize,
        now_ms: u64,
        max_age: Duration,
        certain: bool,
        tls: Option<&Arc<PoolTls>>,
    ) -> Option<ServerConnection> {
        loop {
            let parked = self.idle_of(worker).lock().ok()?.pop()?;
            if too_old(parked.since_ms, now_ms, max_age) || !parked.stream.made_as(tls) {
                continue;
            }
            let usable = if certain || parked.stream.input_pending() {
                parked.stream.still_open()
            } else {
                true
            };
            if usable {
                return Some(parked.stream);
            }
        }
    }

    /// Parks a connection whose last exchange ended cleanly, if `worker` has room for it.
    pub fn park(&self, worker: usize, stream: ServerConnection, max_idle: usize, now_ms: u64) {
        if let Ok(mut idle) = self.idle_of(worker).lock() {
            if idle.len() < max_idle {
                idle.push(IdleConnection {
                    stream,
                    since_ms: now_ms,
                });
            }
        }
    }

    pub fn idle_count(&self) -> usize {
        self.idle
            .iter()
            .map(|list| list.lock().map_or(0, |idle| idle.len()))
            .sum()
    }

    /// Closes `worker`'s parked connections that are too old or that the server has closed.
    pub fn purge_idle(&self, worker: usize, now_ms: u64, max_age: Duration) {
        if let Ok(mut idle) = self.idle_of(worker).lock() {
            idle.retain(|c| !too_old(c.since_ms, now_ms, max_age) && c.stream.still_open());
        }
    }

    /// Closes every parked connection (and every HTTP/2 connection once its streams end).
    pub fn drop_idle(&self) {
        self.h2.close_all();
        for list in self.idle.iter() {
            if let Ok(mut idle) = list.lock() {
                idle.clear();
            }
        }
    }

    pub async fn connect(&self, timeout: Duration) -> io::Result<Socket> {
        // A socket that cannot be had (out of descriptors) is no attempt at the server.
        let fd = crate::socket::new_tcp_socket(self.addr)?;
        stats::bump(&self.stats.connections);
        // Bounded by the session's coarse timeout slot, not a tokio timer per connect.
        wait(
            Socket::connect_with(fd, self.addr),
            TimeLimit::Idle(timeout),
        )
        .await
    }

    /// Closes the idle connections `worker` keeps to this server, to give their descriptors
    /// back when the process has run out; returns how many were closed.
    pub fn shed_idle(&self, worker: usize) -> usize {
        match self.idle_of(worker).lock() {
            Ok(mut idle) => {
                let closed = idle.len();
                idle.clear();
                closed
            }
            Err(_) => 0,
        }
    }
}

fn too_old(since_ms: u64, now_ms: u64, max_age: Duration) -> bool {
    now_ms.saturating_sub(since_ms) >= max_age.as_millis() as u64
}
