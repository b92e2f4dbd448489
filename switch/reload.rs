//! Reloading the rule file while the switch runs (SIGHUP, `POST /reload`, `tcpvs reload`):
//! read and check the whole file, build the next generation, then swap it in at once.
//!
//! - Pools whose configuration did not change are kept whole. A changed pool is built anew over
//!   the servers it keeps (same pool name and address), which keep their load, statistics, idle
//!   connections, health and admin state; if its servers and module are the same (only checks,
//!   queue or slow start changed), it keeps its module too, with its state (LARD tables, hash
//!   rings) (upstream.rs `Pool::with_servers_of`).
//! - Services keep their counters by name. Listeners whose address stays are kept, never
//!   closed; new addresses are bound (on every worker) before the swap, so one that cannot be
//!   bound refuses the reload with nothing changed; removed ones stop accepting after the swap
//!   and their connections end after the request in progress.
//! - Requests in flight finish under the generation they started with; a kept-alive client
//!   takes the new one at its next request (session.rs `follow_reloads`).
//! - `[switch]` and `[admin]` settings are the process's: a reload that changes them reports
//!   each as needing a restart, and keeps the running values.
//!
//! Sozu turns a new configuration into a diff of orders and Pingora swaps its backends behind
//! an `ArcSwap`; this is the same idea with one swap of the whole generation.

use crate::config::admin::AdminConfig;
use crate::config::{Config, LoadError, SwitchSettings};
use crate::listener;
use crate::shared::Shared;
use crate::state::control::{self, Change};
use crate::state::generation::{Generation, Service};
use crate::state::pool::Pool;
use crate::timeouts::Timeouts;
use rustix::fd::OwnedFd;
use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tcpvs_modules::Clock;
use tokio::task::AbortHandle;

/// What a reload needs beside the generations: where the rules come from, the workers (to
/// adopt new listeners, run new health checks) and the accept loops by address.
pub struct Reloader {
    /// The rule file; `None` for rules built into the binary (the demo).
    pub file: Option<PathBuf>,
    pub admin: Option<AdminConfig>,
    pub clock: Arc<dyn Clock>,
    /// TLS resumption state of each service, kept across generations by the service's name
    /// (edge/tls/server_config.rs).
    pub resumption: crate::edge::tls::ResumptionByService,
    pub reuse_port: bool,
    pub workers: Vec<WorkerHandle>,
    /// The accept loops of each listening address (as bound), one per worker.
    pub listeners: HashMap<SocketAddr, Vec<AbortHandle>>,
    /// A copy of each of those listening sockets, to hand over to a new process (upgrade.rs).
    pub sockets: HashMap<SocketAddr, Vec<OwnedFd>>,
    /// A copy of the admin endpoint's socket, likewise.
    pub admin_socket: Option<crate::admin::listener::Handover>,
}

impl fmt::Debug for Reloader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reloader")
            .field("file", &self.file)
            .field("workers", &self.workers.len())
            .field("listeners", &self.listeners.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A worker as a reload reaches it: its runtime and its timeouts.
pub struct WorkerHandle {
    pub runtime: tokio::runtime::Handle,
    pub timeouts: Arc<Timeouts>,
}

/// A reload that took effect.
#[derive(Debug)]
pub struct Reloaded {
    pub generation: u64,
    /// `[switch]`/`[admin]` keys the file changed that only a restart applies.
    pub restart_needed: Vec<String>,
}

/// A reload refused: the running configuration is unchanged.
#[derive(Debug)]
pub enum ReloadError {
    /// The rules are built in (the demo): there is no file to read again.
    NoFile,
    /// The switch is starting or stopping.
    NotRunning,
    /// The file could not be read, or has errors (each `FILE:LINE:COL: message`).
    Invalid(Vec<String>),
    /// A new listen address could not be bound.
    Listen(String),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::NoFile => {
                f.write_str("the rules are built in: there is no file to reload")
            }
            ReloadError::NotRunning => f.write_str("the switch is not running"),
            ReloadError::Invalid(errors) => f.write_str(&errors.join("\n")),
            ReloadError::Listen(e) => f.write_str(e),
        }
    }
}

impl ReloadError {
    /// Every message, one per problem.
    pub fn messages(&self) -> Vec<String> {
        match self {
            ReloadError::Invalid(errors) => errors.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// Reads the rule file again and swaps it in; one reload at a time. Logs the outcome.
pub fn reload(shared: &Arc<Shared>) -> Result<Reloaded, ReloadError> {
    let result = reload_locked(shared);
    match &result {
        Ok(done) => {
            tracing::info!("reloaded: generation {}", done.generation);
            if !done.restart_needed.is_empty() {
                tracing::warn!(
                    "reload: {} changed; it takes a restart to apply (the running value stays)",
                    done.restart_needed.join(", ")
                );
            }
        }
        Err(e) => {
            for message in e.messages() {
                tracing::error!("reload refused, the running rules stay: {message}");
            }
        }
    }
    result
}

fn reload_locked(shared: &Arc<Shared>) -> Result<Reloaded, ReloadError> {
    let mut guard = shared
        .reload
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let reloader = guard.as_mut().ok_or(ReloadError::NotRunning)?;
    if *shared.shutdown.borrow() {
        return Err(ReloadError::NotRunning);
    }
    let file = reloader.file.clone().ok_or(ReloadError::NoFile)?;
    let config = Config::load(&file).map_err(|e| match e {
        LoadError::Read(..) => ReloadError::Invalid(vec![e.to_string()]),
        LoadError::Invalid(errors) => {
            ReloadError::Invalid(errors.0.iter().map(ToString::to_string).collect())
        }
    })?;
    config.log_warnings();
    let mut restart_needed = changed_settings(&shared.settings, &config.switch);
    if config.admin != reloader.admin {
        restart_needed.push("[admin]".to_string());
    }
    let current = shared.generation.load_full();
    let workers = reloader.workers.len();

    // Services: counters by name; the bound address while the listen address stays.
    let services: Box<[Service]> = config
        .services
        .into_iter()
        .map(|s| {
            let previous = current.service(&s.name).map(|(_, service)| service);
            // The listener stays with its address; an address with port 0 (the kernel picks)
            // is the same one only for the service of the same name.
            let kept_listen = current
                .services
                .iter()
                .find(|o| o.listen == s.listen && (s.listen.port() != 0 || o.name == s.name));
            let stats = previous.map(|p| Arc::clone(&p.stats)).unwrap_or_default();
            let bound = kept_listen
                .map(|o| Arc::clone(&o.bound))
                .unwrap_or_default();
            let resumes = reloader.resumption.of(&s.name);
            Service::new(s, stats, bound, &resumes)
        })
        .collect::<Result<_, _>>()
        .map_err(|e| ReloadError::Invalid(vec![e]))?;

    // New addresses are bound on every worker before anything changes.
    let mut added = Vec::new();
    for service in services.iter() {
        if service
            .bound
            .get()
            .is_some_and(|bound| reloader.listeners.contains_key(bound))
        {
            continue;
        }
        let mut sockets = Vec::with_capacity(workers);
        let mut addr = service.listen;
        for worker in 0..workers {
            let unclaimed = if reloader.reuse_port && worker == 0 {
                listener::ensure_unclaimed(addr)
            } else {
                Ok(())
            };
            let socket = unclaimed
                .and_then(|()| {
                    listener::bind_socket(addr, reloader.reuse_port, service.defer_accept)
                })
                .map_err(|e| {
                    ReloadError::Listen(format!(
                        "{}: virtual service `{}`: cannot listen on {addr}: {e}",
                        service.listen_at, service.name
                    ))
                })?;
            // With port 0 the other workers join the port the kernel chose.
            addr = socket
                .local_addr()
                .map_err(|e| ReloadError::Listen(e.to_string()))?;
            sockets.push(socket);
        }
        let _ = service.bound.set(addr);
        added.push((addr, sockets));
    }
    let removed: Vec<SocketAddr> = reloader
        .listeners
        .keys()
        .filter(|addr| !services.iter().any(|s| s.bound.get() == Some(*addr)))
        .copied()
        .collect();

    // Pools: the same configuration keeps the pool; another builds one over the kept servers
    // (without changing them: that waits until nothing can refuse the reload any more).
    let mut pools = Vec::with_capacity(config.pools.len());
    let mut fresh = Vec::new();
    for pool_config in &config.pools {
        let previous = current.pool(&pool_config.name);
        match previous {
            Some(pool) if pool.config == *pool_config => pools.push(Arc::clone(pool)),
            _ => {
                let pool = Pool::with_servers_of(
                    pool_config,
                    Arc::clone(&reloader.clock),
                    workers,
                    previous.map(|p| &**p),
                )
                .map_err(|e| {
                    ReloadError::Invalid(vec![format!("pool `{}`: {e}", pool_config.name)])
                })?;
                let pool = Arc::new(pool);
                fresh.push(Arc::clone(&pool));
                pools.push(pool);
            }
        }
    }

    // The kept servers take their new lines, and the new pools are shown to their modules,
    // before anyone can see them.
    for pool in &fresh {
        let changed: Vec<usize> = pool.lines_changed().collect();
        for index in changed {
            control::apply(pool, index, Change::LineChanged);
        }
        control::apply(pool, 0, Change::Tick);
    }
    let number = current.number + 1;
    shared.generation.store(Arc::new(Generation {
        number,
        services,
        pools: pools.into_boxed_slice(),
    }));

    for addr in removed {
        for task in reloader.listeners.remove(&addr).unwrap_or_default() {
            task.abort();
        }
        reloader.sockets.remove(&addr);
        tracing::info!("reload: no longer listening on {addr}");
    }
    for (key, sockets) in added {
        let mut tasks = Vec::with_capacity(sockets.len());
        let mut copies = Vec::with_capacity(sockets.len());
        for socket in &sockets {
            if let Ok(copy) = rustix::io::fcntl_dupfd_cloexec(socket, 0) {
                copies.push(copy);
            }
        }
        reloader.sockets.insert(key, copies);
        for (worker, socket) in reloader.workers.iter().zip(sockets) {
            let (shared, timeouts) = (Arc::clone(shared), Arc::clone(&worker.timeouts));
            let task = worker.runtime.spawn(async move {
                match crate::socket::Listener::new(socket) {
                    Ok(listener) => listener::accept_loop(shared, key, listener, timeouts).await,
                    Err(e) => tracing::error!("reload: cannot accept on {key}: {e}"),
                }
            });
            tasks.push(task.abort_handle());
        }
        reloader.listeners.insert(key, tasks);
        tracing::info!("reload: listening on {key}");
    }
    if let Some(first) = reloader.workers.first() {
        // The new pools' checks run beside the first worker's sessions, as at start; the
        // tasks of the pools they replace end on their own.
        let _runtime = first.runtime.enter();
        drop(crate::health::spawn(shared, &fresh, false));
    }
    Ok(Reloaded {
        generation: number,
        restart_needed,
    })
}

/// The `[switch]` keys whose value differs.
fn changed_settings(running: &SwitchSettings, file: &SwitchSettings) -> Vec<String> {
    let mut changed = Vec::new();
    macro_rules! compare {
        ($($key:ident),*) => {
            $(if running.$key != file.$key {
                changed.push(concat!("[switch] ", stringify!($key)).to_string());
            })*
        };
    }
    compare!(
        workers,
        max_clients,
        header_timeout,
        idle_timeout,
        keepalive_timeout,
        connect_timeout,
        shutdown_timeout,
        access_log,
        access_log_format,
        splice,
        splice_threshold,
        connect_attempts,
        server_idle_max,
        server_idle_timeout
    );
    changed
}
