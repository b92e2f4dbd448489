//! The running switch: its shared state (shared.rs, what the data plane reads), its supervisor
//! (supervisor/: workers, listeners, reloads), its admin endpoint, and shutdown.
//!
//! Starting is a reload from nothing: the configuration is planned from an empty generation
//! (reload/plan.rs), its addresses bound on every worker, or taken over from an old process
//! (supervisor/listeners.rs), and the plan committed (supervisor/commit.rs).

use crate::capacity::descriptors::Demand;
use crate::config::admin::AdminConfig;
use crate::config::{Config, SwitchSettings};
use crate::policy::source_conns::{Grouping, SourceConns};
use crate::reload::{Builder, Plan};
pub use crate::shared::Shared;
use crate::state::generation::Generation;
pub use crate::state::generation::Service;
use crate::state::snapshot::Snapshot;
use crate::supervisor::workers::Placement;
use crate::supervisor::{ReloadHandle, Settings, Supervisor};
use crate::upgrade::Inherited;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A started switch. Dropping it does not stop it; call [`Switch::shutdown`].
pub struct Switch {
    shared: Arc<Shared>,
    supervisor: Arc<Supervisor>,
    addresses: Vec<(String, SocketAddr)>,
    /// The admin endpoint's bound address, and its thread or task (one worker).
    admin: Option<SocketAddr>,
    admin_thread: Option<std::thread::JoinHandle<()>>,
    admin_task: Option<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl Switch {
    /// Binds every virtual service's listener and starts accepting on the current tokio runtime
    /// (one worker). Must run inside a tokio runtime.
    pub async fn start(config: Config) -> io::Result<Switch> {
        Switch::start_inheriting(config, Inherited::default()).await
    }

    /// [`Switch::start`] with the listening sockets of an old process (upgrade.rs) for the
    /// addresses they are bound to; the others are bound anew.
    pub async fn start_inheriting(config: Config, inherited: Inherited) -> io::Result<Switch> {
        Switch::launch(config, Placement::Here, inherited)
    }

    /// Starts `count` workers, each on its own thread with a single-threaded runtime and its
    /// own listening sockets (SO_REUSEPORT: the kernel spreads new connections over them).
    /// Sessions stay on the thread that accepted them, so no wake-up crosses threads.
    pub fn start_workers(config: Config, count: usize) -> io::Result<Switch> {
        Switch::start_workers_inheriting(config, count, Inherited::default())
    }

    /// [`Switch::start_workers`] with the listening sockets of an old process (upgrade.rs).
    pub fn start_workers_inheriting(
        config: Config,
        count: usize,
        inherited: Inherited,
    ) -> io::Result<Switch> {
        Switch::launch(config, Placement::Threads(count.max(1)), inherited)
    }

    /// Plans the configuration from an empty generation, binds the admin endpoint, starts the
    /// supervisor (workers, listeners: the plan bound and committed), then the endpoint.
    fn launch(
        config: Config,
        placement: Placement,
        mut inherited: Inherited,
    ) -> io::Result<Switch> {
        let workers = match placement {
            Placement::Here => 1,
            Placement::Threads(count) => count,
        };
        let builder = Builder::new(workers);
        let mut config = config;
        let own = crate::discovery::found::own_addresses(
            config.services.iter().map(|s| s.listen),
            config.admin.as_ref(),
        );
        crate::discovery::once::fill(&mut config.pools, &Generation::empty(), &own);
        let plan = builder
            .plan(
                &Generation::empty(),
                config.services,
                &config.pools,
                config.limits,
            )
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let admin = match config.admin {
            Some(admin) => {
                let listener = crate::admin::bind(&admin, &mut inherited.admin)?;
                Some((admin, listener))
            }
            None => None,
        };
        let (stop, shutdown) = watch::channel(false);
        let shared = shared_state(config.switch, &plan, admin.is_some(), workers, shutdown)?;
        let shared = Arc::new(shared);
        let settings = Settings {
            file: config.path,
            admin: admin.as_ref().map(|(config, _)| config.clone()),
            // A copy for a successor at a binary upgrade (none: it binds its own).
            admin_socket: admin
                .as_ref()
                .and_then(|(_, listener)| listener.handover().ok()),
            builder,
            placement,
        };
        let supervisor =
            Supervisor::start(Arc::clone(&shared), settings, plan, &mut inherited.sockets)?;
        let mut switch = Switch {
            addresses: bound_addresses(&shared.generation.load()),
            shared,
            supervisor,
            admin: None,
            admin_thread: None,
            admin_task: None,
            stop,
        };
        if let Some((config, listener)) = admin {
            if let Err(e) = switch.serve_admin(config, listener, placement) {
                if let Some(workers) = switch.supervisor.stop() {
                    workers.end_now();
                }
                return Err(e);
            }
        }
        Ok(switch)
    }

    /// Serves the admin endpoint: with one worker, as tasks beside it; with several, on a
    /// thread of its own, off theirs (admin/mod.rs says why).
    fn serve_admin(
        &mut self,
        config: AdminConfig,
        listener: crate::admin::Listener,
        placement: Placement,
    ) -> io::Result<()> {
        self.admin = listener.tcp_addr();
        let (shared, reloads) = (Arc::clone(&self.shared), self.reloads());
        match placement {
            Placement::Here => {
                let serving = crate::admin::serve(shared, reloads, config, listener);
                self.admin_task = Some(tokio::spawn(serving));
            }
            Placement::Threads(_) => {
                let thread = crate::admin::spawn_thread(shared, reloads, config, listener)?;
                self.admin_thread = Some(thread);
            }
        }
        Ok(())
    }

    /// Reads the rule file again and swaps it in (reload/).
    pub fn reload(&self) -> Result<crate::reload::Reloaded, crate::reload::ReloadError> {
        self.reloads().reload()
    }

    /// What reaches the supervisor from outside the switch: reloads (SIGHUP, the admin
    /// endpoint) and a binary upgrade's handover (upgrade.rs).
    pub fn reloads(&self) -> ReloadHandle {
        ReloadHandle::new(&self.supervisor)
    }

    /// The shared state, for what runs beside the switch (signals: cli/signals.rs).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The bound address of a virtual service (useful with port 0).
    pub fn local_addr(&self, service: &str) -> Option<SocketAddr> {
        self.addresses
            .iter()
            .find(|(name, _)| name == service)
            .map(|(_, a)| *a)
    }

    pub fn addresses(&self) -> &[(String, SocketAddr)] {
        &self.addresses
    }

    /// The bound address of the admin endpoint, if `[admin] listen` is set to a TCP address.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin
    }

    /// The counters and states of every service, pool and server, read now.
    pub fn stats(&self) -> Snapshot {
        self.shared.snapshot()
    }

    /// Stops accepting, lets idle keep-alive clients go, and waits up to `grace` for requests
    /// in flight to finish. Returns how many client connections were still open at the end.
    pub async fn shutdown(self, grace: Duration) -> usize {
        let _ = self.stop.send(true);
        // No reload from now on; the copies of the listening sockets close.
        let workers = self.supervisor.stop();
        if let Some(workers) = &workers {
            workers.stop_timeouts();
        }
        let deadline = Instant::now() + grace;
        let open = loop {
            let open = self.shared.clients.load(Ordering::Relaxed);
            if open == 0 || Instant::now() >= deadline {
                break open;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        for pool in self.shared.generation.load().pools.iter() {
            for backend in pool.backends.iter() {
                backend.drop_idle();
            }
        }
        if let Some(thread) = self.admin_thread {
            // It saw the stop signal and ends with its connections.
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        if let Some(task) = self.admin_task {
            // It ends at the stop signal, with its connections; waited for, so that its Unix
            // socket is removed before the switch is said to have stopped.
            let _ = task.await;
        }
        if let Some(workers) = workers {
            workers.end().await;
        }
        open
    }
}

/// Each virtual service's name and bound address.
fn bound_addresses(generation: &Generation) -> Vec<(String, SocketAddr)> {
    generation
        .services
        .iter()
        .filter_map(|s| Some((s.name.clone(), *s.bound.get()?)))
        .collect()
}

/// What every worker will share, before the first generation is committed.
fn shared_state(
    settings: SwitchSettings,
    plan: &Plan,
    admin: bool,
    workers: usize,
    shutdown: watch::Receiver<bool>,
) -> io::Result<Shared> {
    let access_log = Arc::new(crate::access_log::AccessLog::new(&settings)?);
    let generation = &plan.generation;
    let max_clients = crate::capacity::descriptors::apply(&Demand {
        max_clients: settings.max_clients,
        max_clients_given: settings.max_clients_given,
        workers,
        listeners: generation.services.len(),
        servers: generation.pools.iter().map(|p| p.backends.len()).sum(),
        admin,
    });
    let buffer_memory = crate::buffering::BufferMemory::new(settings.buffer_memory);
    let compress_memory = crate::buffering::BufferMemory::new(settings.compress_memory);
    let tracing = crate::trace::Tracing::new(&settings.trace)?;
    Ok(Shared {
        settings,
        generation: arc_swap::ArcSwap::from_pointee(Generation::empty()),
        clients: AtomicUsize::new(0),
        h2_streams: AtomicUsize::new(0),
        source_load: Arc::new(SourceConns::grouped(Grouping::Ipv6Networks)),
        max_clients,
        shutdown,
        started: std::time::Instant::now(),
        access_log,
        buffer_memory,
        compress_memory,
        tracing,
    })
}
