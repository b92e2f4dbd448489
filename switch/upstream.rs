//! Server pools at run time: the module that picks, the live state it reads, and per server the
//! idle keep-alive connections waiting for reuse.

use crate::config::health::PoolHealth;
use crate::config::PoolConfig;
use crate::control::ServerStatus;
use crate::socket::Socket;
use crate::stats::{self, ServerStats};
use crate::stream::{wait, Limit};
use rustix::net::RecvFlags;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use tcpvs_modules::{
    BuildContext, BuildError, Clock, PoolView, RequestView, Scheduler, ServerState,
};

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
    pub stats: ServerStats,
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
    /// When a failure was last logged as a warning (coarse ms), so a dead server does not
    /// flood the log; and how many were not logged since.
    warned_ms: AtomicU64,
    unlogged: AtomicU64,
}

#[derive(Debug)]
struct IdleConnection {
    stream: Socket,
    /// When it was parked, on the switch's coarse clock (milliseconds).
    since_ms: u64,
}

impl Backend {
    fn new(config: &crate::config::ServerConfig, workers: usize) -> Self {
        Backend {
            addr: config.addr,
            host_field: config.addr.to_string().into_bytes().into_boxed_slice(),
            idle: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            stats: ServerStats::default(),
            state: ServerState::with_limit(config.weight, config.max_conns),
            weight: AtomicU32::new(config.weight),
            max_conns: AtomicU32::new(config.max_conns),
            backup: AtomicBool::new(config.backup),
            status: Mutex::new(ServerStatus::new(config.weight)),
            report_success: AtomicBool::new(false),
            warned_ms: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
        }
    }

    /// Whether health (checks, passive detection or the agent) holds it down.
    pub fn is_down(&self) -> bool {
        self.status
            .lock()
            .is_ok_and(|s| s.state() == crate::control::State::Down)
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

    /// A reload brought this line for the server: true if it differs from the last one.
    fn reconfigure(&self, config: &crate::config::ServerConfig) -> bool {
        let changed = self.weight() != config.weight
            || self.max_conns() != config.max_conns
            || self.is_backup() != config.backup;
        self.weight.store(config.weight, Ordering::Relaxed);
        self.max_conns.store(config.max_conns, Ordering::Relaxed);
        self.backup.store(config.backup, Ordering::Relaxed);
        changed
    }

    /// A failure worth a warning, at most one per second per server (`now_ms` on the coarse
    /// clock): returns how many were left unlogged before this one, or `None` to stay quiet.
    pub fn may_warn(&self, now_ms: u64) -> Option<u64> {
        let last = self.warned_ms.load(Ordering::Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < 1000 {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.warned_ms.store(now_ms.max(1), Ordering::Relaxed);
        Some(self.unlogged.swap(0, Ordering::Relaxed))
    }

    /// The idle list of `worker` (worker indexes beyond the count share the last list, which
    /// cannot happen in the switch but keeps this total).
    fn idle_of(&self, worker: usize) -> &Mutex<Vec<IdleConnection>> {
        &self.idle[worker.min(self.idle.len() - 1)]
    }

    /// The most recently parked connection of `worker` that is still usable, if any.
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
    ) -> Option<Socket> {
        loop {
            let parked = self.idle_of(worker).lock().ok()?.pop()?;
            if too_old(parked.since_ms, now_ms, max_age) {
                continue;
            }
            let usable = if certain || parked.stream.input_pending() {
                still_open(&parked.stream)
            } else {
                true
            };
            if usable {
                return Some(parked.stream);
            }
        }
    }

    /// Parks a connection whose last exchange ended cleanly, if `worker` has room for it.
    pub fn park(&self, worker: usize, stream: Socket, max_idle: usize, now_ms: u64) {
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
            idle.retain(|c| !too_old(c.since_ms, now_ms, max_age) && still_open(&c.stream));
        }
    }

    /// Closes every parked connection.
    pub fn drop_idle(&self) {
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
        wait(Socket::connect_with(fd, self.addr), Limit::Idle(timeout)).await
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

/// An idle server connection is usable if it has neither data nor end of stream pending: a
/// server that closed it, or that sent something unasked, makes it unusable. One peek.
fn still_open(stream: &Socket) -> bool {
    let mut byte = [0u8; 1];
    match rustix::net::recv(stream, &mut byte, RecvFlags::PEEK | RecvFlags::DONTWAIT) {
        Err(rustix::io::Errno::AGAIN) => true,
        Ok(_) | Err(_) => false,
    }
}

/// A pool at run time.
#[derive(Debug)]
pub struct Pool {
    pub name: String,
    /// The pool as configured: a reload that brings the same keeps this pool (and its module's
    /// state) whole.
    pub config: PoolConfig,
    /// The servers' states in list order, for the module (handles shared with `backends`).
    pub servers: Box<[ServerState]>,
    pub backends: Box<[Arc<Backend>]>,
    /// Shared with the pool of the next configuration when its servers and module are the same
    /// (only checks, queue or slow start changed), so the module's state (LARD tables) stays.
    pub scheduler: Arc<dyn Scheduler>,
    /// Checks, passive detection, queue and slow start, as configured.
    pub health: PoolHealth,
    /// Serialises `control::apply` for this pool.
    control: Mutex<()>,
    /// Requests waiting for a slot (every usable server at `max_conns`), woken in arrival
    /// order when a request of the pool ends.
    queue: tokio::sync::Notify,
    waiting: AtomicUsize,
    /// Too few servers are up: health does not decide who gets requests (`panic_threshold`);
    /// written by `control::apply`.
    panic: AtomicBool,
}

/// The live server states of a pool as configured.
pub fn server_states(config: &PoolConfig) -> Box<[ServerState]> {
    config
        .servers
        .iter()
        .map(|s| ServerState::with_limit(s.weight, s.max_conns))
        .collect()
}

/// Builds the pool's scheduling module over `servers`. Server addresses are the identities
/// modules place by (hash rings, cookie ids), so placement does not depend on list order.
pub fn build_scheduler(
    config: &PoolConfig,
    servers: &[ServerState],
    clock: Arc<dyn Clock>,
) -> Result<Box<dyn Scheduler>, BuildError> {
    let ids: Vec<String> = config.servers.iter().map(|s| s.addr.to_string()).collect();
    let context = BuildContext {
        pool: PoolView { servers },
        server_ids: &ids,
        clock,
    };
    tcpvs_modules::build(&config.scheduler, &config.options, &context)
}

impl Pool {
    /// `workers`: how many workers will use the pool (each keeps its own idle connections).
    pub fn new(
        config: &PoolConfig,
        clock: Arc<dyn Clock>,
        workers: usize,
    ) -> Result<Pool, BuildError> {
        Pool::with_servers_of(config, clock, workers, None)
    }

    /// A pool for `config` that takes over the servers of `previous` (the pool of the same name
    /// in the running configuration) that it keeps, with their load, statistics, idle
    /// connections, health and admin state; a kept server whose line changed forgets the
    /// admin's runtime changes (the rule file now says what it wants).
    pub fn with_servers_of(
        config: &PoolConfig,
        clock: Arc<dyn Clock>,
        workers: usize,
        previous: Option<&Pool>,
    ) -> Result<Pool, BuildError> {
        let mut reconfigured = Vec::new();
        let backends: Box<[Arc<Backend>]> = config
            .servers
            .iter()
            .enumerate()
            .map(|(index, server)| {
                let kept = previous.and_then(|p| p.backends.iter().find(|b| b.addr == server.addr));
                match kept {
                    Some(backend) => {
                        if backend.reconfigure(server) {
                            reconfigured.push(index);
                        }
                        Arc::clone(backend)
                    }
                    None => Arc::new(Backend::new(server, workers)),
                }
            })
            .collect();
        let servers: Box<[ServerState]> = backends.iter().map(|b| b.state.clone()).collect();
        let same_module = previous.filter(|p| {
            p.config.servers == config.servers
                && p.config.scheduler == config.scheduler
                && p.config.options == config.options
        });
        let scheduler = match same_module {
            Some(previous) => Arc::clone(&previous.scheduler),
            None => Arc::from(build_scheduler(config, &servers, clock)?),
        };
        let pool = Pool {
            name: config.name.clone(),
            config: config.clone(),
            backends,
            servers,
            scheduler,
            health: config.health.clone(),
            control: Mutex::new(()),
            queue: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
            panic: AtomicBool::new(false),
        };
        for index in reconfigured {
            crate::control::apply(&pool, index, crate::control::Change::LineChanged);
        }
        // Backups start hidden from the module while a primary is usable; kept servers are
        // shown to the new module as they are.
        crate::control::apply(&pool, 0, crate::control::Change::Tick);
        Ok(pool)
    }

    /// Held while `control::apply` writes this pool's state.
    pub(crate) fn control_lock(&self) -> MutexGuard<'_, ()> {
        self.control
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether the pool is in panic: requests go to its down servers too.
    pub fn in_panic(&self) -> bool {
        self.panic.load(Ordering::Relaxed)
    }

    /// Records whether the pool is in panic; `true` when that changed.
    pub(crate) fn set_panic(&self, panic: bool) -> bool {
        self.panic.swap(panic, Ordering::Relaxed) != panic
    }

    /// Requests waiting in the queue now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A request of the pool ended or a server changed: the first queued request looks again.
    pub(crate) fn wake_queue(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.queue.notify_one();
        }
    }

    /// A place in the pool's queue: while it lives, each request of the pool that ends (and
    /// each change of a server) wakes the longest waiting holder, which then looks again.
    pub(crate) fn queued(&self) -> QueueTicket<'_> {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        QueueTicket { pool: self }
    }

    /// The best backup server not yet tried that is usable by its own state, for the retry of
    /// a request whose primaries failed before passive detection took them down.
    pub fn backup_candidate(&self, tried: &[usize]) -> Option<usize> {
        self.backends
            .iter()
            .enumerate()
            .filter(|(i, b)| b.is_backup() && !tried.contains(i))
            .filter(|(_, b)| {
                b.status
                    .lock()
                    .is_ok_and(|s| s.state() == crate::control::State::Up)
            })
            .min_by_key(|(i, _)| self.servers[*i].active())
            .map(|(i, _)| i)
    }

    pub fn view(&self) -> PoolView<'_> {
        PoolView {
            servers: &self.servers,
        }
    }

    /// The next candidate for `request`, skipping `tried`.
    pub fn pick(&self, request: &RequestView<'_>, tried: &[usize]) -> Option<usize> {
        // A module answering out of range would be a bug in the module; treat it as "no server"
        // rather than index past the end.
        self.scheduler
            .pick(request, &self.view(), tried)
            .filter(|&i| i < self.backends.len())
    }

    /// Counts a request as active at `server` until the lease is dropped; `None` when the
    /// server is at its `max_conns` (checked and counted in one atomic step).
    pub fn try_lease(&self, server: usize) -> Option<Lease<'_>> {
        if !self.servers.get(server)?.try_add_active() {
            return None;
        }
        self.scheduler.connection_started(server);
        Some(Lease { pool: self, server })
    }
}

/// A request's hold on a server: the server's active count includes it while this lives.
#[derive(Debug)]
pub struct Lease<'a> {
    pool: &'a Pool,
    pub server: usize,
}

impl<'a> Lease<'a> {
    pub fn backend(&self) -> &'a Backend {
        &self.pool.backends[self.server]
    }

    pub fn pool(&self) -> &'a Pool {
        self.pool
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(state) = self.pool.servers.get(self.server) {
            state.remove_active();
        }
        self.pool.scheduler.connection_ended(self.server);
        self.pool.wake_queue();
    }
}

/// A request's place in its pool's queue; leaving it (drop) ends the wait.
pub(crate) struct QueueTicket<'a> {
    pool: &'a Pool,
}

impl<'a> QueueTicket<'a> {
    /// A wake-up to wait for, registered before the caller looks for a slot again.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'a> {
        self.pool.queue.notified()
    }
}

impl Drop for QueueTicket<'_> {
    fn drop(&mut self) {
        self.pool.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}
