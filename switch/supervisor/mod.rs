//! The supervisor: what runs the data plane and is no part of it. It keeps the workers (their
//! runtimes, timeouts and housekeeping: workers.rs; each tied to a CPU with `cpu_affinity`:
//! affinity.rs), the listeners (accept loops by address, and a copy of each socket for a
//! successor at a binary upgrade: listeners.rs), the admin endpoint's socket for that
//! handover, and what a reload needs (the rule file, the builder of generations). The switch
//! (gateway.rs) owns it; the admin endpoint, the SIGHUP handler and the binary upgrade reach
//! it through a [`ReloadHandle`]. The data plane reads only [`Shared`].
//!
//! Start and reload take the same three steps, one at a time (the supervisor's lock): the
//! plan (reload/plan.rs; the start plans from an empty generation), pure; the binding of its
//! new addresses on every worker (listeners.rs), which may fail and then changes nothing; the
//! commit (commit.rs), which cannot fail. reload/mod.rs says what a reload keeps and changes.

pub mod affinity;
mod commit;
pub mod listeners;
pub mod workers;

use crate::admin::listener::Handover;
use crate::config::admin::AdminConfig;
use crate::config::discover::Discover;
use crate::config::ServerConfig;
use crate::discovery::{self, watch::Watchers};
use crate::reload::{self, Builder, Plan, ReloadError, Reloaded};
use crate::shared::Shared;
use listeners::{Adopted, Listeners};
use rustix::fd::OwnedFd;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use workers::{Placement, Workers};

/// What the switch starts its supervisor with, beside the first plan.
pub struct Settings {
    /// The rule file; `None` for rules built into the binary (the demo).
    pub file: Option<PathBuf>,
    pub admin: Option<AdminConfig>,
    /// A copy of the admin endpoint's socket, for a successor at a binary upgrade.
    pub admin_socket: Option<Handover>,
    pub builder: Builder,
    pub placement: Placement,
}

/// The supervisor of a running switch.
pub struct Supervisor {
    shared: Arc<Shared>,
    /// `None` once the switch stops (or, for reloads, once a successor took over).
    running: Mutex<Option<Running>>,
}

/// What the supervisor keeps while the switch runs.
struct Running {
    file: Option<PathBuf>,
    /// As the switch started with it: a reload that changes it reports a restart needed.
    admin: Option<AdminConfig>,
    builder: Builder,
    /// Several workers bind each address with SO_REUSEPORT.
    reuse_port: bool,
    workers: Workers,
    listeners: Listeners,
    admin_socket: Option<Handover>,
    /// A task per pool that finds its servers by DNS (discovery/).
    watchers: Watchers,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor").finish_non_exhaustive()
    }
}

impl Supervisor {
    /// Starts the workers, binds the plan's addresses (taking `adopted` sockets for theirs) and
    /// commits it: the switch serves. On an error nothing runs any more.
    pub fn start(
        shared: Arc<Shared>,
        settings: Settings,
        plan: Plan,
        adopted: &mut Adopted,
    ) -> io::Result<Arc<Supervisor>> {
        let mut workers = Workers::start(settings.placement, shared.settings.cpu_affinity)?;
        let reuse_port = matches!(settings.placement, Placement::Threads(_));
        let services = &plan.generation.services;
        let bound = workers
            .start_housekeeping(&shared)
            .and_then(|()| listeners::bind(services, &plan.listen, &workers, reuse_port, adopted));
        let bound = match bound {
            Ok(bound) => bound,
            Err(e) => {
                workers.end_now();
                return Err(e);
            }
        };
        let mut running = Running {
            file: settings.file,
            admin: settings.admin,
            builder: settings.builder,
            reuse_port,
            workers,
            listeners: Listeners::default(),
            admin_socket: settings.admin_socket,
            watchers: Watchers::default(),
        };
        let checks = running.commit(&shared, plan, bound);
        running
            .workers
            .keep(checks.iter().map(|task| task.abort_handle()));
        let supervisor = Arc::new(Supervisor {
            shared,
            running: Mutex::new(Some(running)),
        });
        if let Some(running) = supervisor.lock().as_mut() {
            supervisor.follow_discovery(running);
        }
        Ok(supervisor)
    }

    /// A watcher for each discovering pool of the running generation (discovery/watch.rs),
    /// whose answers come back through [`Supervisor::apply_found`].
    fn follow_discovery(self: &Arc<Self>, running: &mut Running) {
        let supervisor = Arc::downgrade(self);
        let apply: discovery::watch::Apply = Arc::new(move |pool, discover, servers| {
            if let Some(supervisor) = supervisor.upgrade() {
                supervisor.apply_found(pool, discover, servers);
            }
        });
        let generation = self.shared.generation.load_full();
        let _entered = running.workers.first().runtime.enter();
        running.watchers.follow(&generation, &self.shared, &apply);
    }

    /// A discovery's answer for pool `pool`: the pool's servers as a reload would make them,
    /// planned and committed as a reload is (one reload or answer at a time). Nothing when a
    /// reload changed the pool's question since it was asked, or the answer changes nothing.
    fn apply_found(&self, pool: &str, discover: &Discover, mut answer: Vec<ServerConfig>) {
        let mut guard = self.lock();
        let Some(running) = guard.as_mut() else {
            return;
        };
        if *self.shared.shutdown.borrow() {
            return;
        }
        let own = discovery::found::own_addresses(self.bound().into_iter(), running.admin.as_ref());
        let own_left_out = discovery::found::without_own(&mut answer, &own);
        let current = self.shared.generation.load_full();
        if !discovery::watch::changes_running(&current, pool, discover, &answer) {
            return;
        }
        let mut described = String::new();
        let configs: Vec<_> = current
            .pools
            .iter()
            .map(|p| match p.name == pool {
                true => {
                    described = discovery::found::described_change(&p.config, &answer);
                    discovery::found::with_found(&p.config, &answer)
                }
                false => p.config.clone(),
            })
            .collect();
        let plan = match running.builder.plan_found(&current, &configs) {
            Ok(plan) => plan,
            Err(why) => {
                tracing::error!("discovery: pool `{pool}`: the answer cannot be used: {why}");
                return;
            }
        };
        let generation = plan.generation.number;
        drop(running.commit(&self.shared, plan, Vec::new()));
        tracing::info!(
            "discovery: pool `{pool}`: {} now finds {described}{} (generation {generation})",
            discover.lookup,
            discovery::once::left_out(own_left_out)
        );
    }

    /// The rule file a reload reads, while the switch runs.
    fn running_file(&self) -> Result<PathBuf, ReloadError> {
        let guard = self.lock();
        let running = guard.as_ref().ok_or(ReloadError::NotRunning)?;
        if *self.shared.shutdown.borrow() {
            return Err(ReloadError::NotRunning);
        }
        running.file.clone().ok_or(ReloadError::NoFile)
    }

    /// The addresses the running services are bound to (with port 0 in the file: the
    /// kernel's port).
    fn bound(&self) -> Vec<std::net::SocketAddr> {
        let generation = self.shared.generation.load();
        generation
            .services
            .iter()
            .filter_map(|s| s.bound.get().copied())
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, Option<Running>> {
        self.running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The switch stops: no reload from now on, and the copies of the listening sockets kept
    /// for an upgrade close (else the kernel would go on queueing connections nobody accepts).
    /// Returns the workers, to end once requests in flight had their time.
    pub fn stop(&self) -> Option<Workers> {
        let running = self.lock().take()?;
        Some(running.workers)
    }

    /// Reads the rule file again and commits it: plan, bind, commit.
    fn reload(self: &Arc<Self>) -> Result<Reloaded, ReloadError> {
        let file = self.running_file()?;
        // The file is read and its pools' names asked before the lock is taken: a slow DNS
        // server must not hold the supervisor (and with it the stop) while it answers.
        let mut config = reload::load(&file)?;
        let own = discovery::found::own_addresses(
            config.services.iter().map(|s| s.listen).chain(self.bound()),
            config.admin.as_ref(),
        );
        discovery::once::fill(&mut config.pools, &self.shared.generation.load_full(), &own);
        let mut guard = self.lock();
        let running = guard.as_mut().ok_or(ReloadError::NotRunning)?;
        if *self.shared.shutdown.borrow() || running.file.as_ref() != Some(&file) {
            return Err(ReloadError::NotRunning);
        }
        let settings = &self.shared.settings;
        let restart_needed = reload::restart_needed(settings, running.admin.as_ref(), &config);
        let current = self.shared.generation.load_full();
        let plan = running
            .builder
            .plan(&current, config.services, &config.pools, config.limits)
            .map_err(|e| ReloadError::Invalid(vec![e]))?;
        let services = &plan.generation.services;
        let workers = &running.workers;
        let bound = listeners::bind(
            services,
            &plan.listen,
            workers,
            running.reuse_port,
            &mut Adopted::new(),
        )
        .map_err(|e| ReloadError::Listen(e.to_string()))?;
        let generation = plan.generation.number;
        // The checks of a reload's pools end with their pool (health/mod.rs `Place`).
        drop(running.commit(&self.shared, plan, bound));
        self.follow_discovery(running);
        Ok(Reloaded {
            generation,
            restart_needed,
        })
    }
}

/// What the admin endpoint, the SIGHUP handler and a binary upgrade reach of the supervisor:
/// reloads, the rule file, and the handover of the listening sockets. Cheap to clone.
#[derive(Clone, Debug)]
pub struct ReloadHandle {
    supervisor: Arc<Supervisor>,
}

impl ReloadHandle {
    pub fn new(supervisor: &Arc<Supervisor>) -> ReloadHandle {
        ReloadHandle {
            supervisor: Arc::clone(supervisor),
        }
    }

    /// Reads the rule file again and swaps it in; one reload at a time. Logs the outcome.
    /// Blocks (server names may be resolved): call it off a runtime's thread.
    pub fn reload(&self) -> Result<Reloaded, ReloadError> {
        let result = self.supervisor.reload();
        reload::log(&result);
        result
    }

    /// The rule file a reload reads (`None`: rules built in, or handed over to a successor).
    pub fn rule_file(&self) -> Option<PathBuf> {
        self.supervisor
            .lock()
            .as_ref()
            .and_then(|running| running.file.clone())
    }

    /// A copy of every listening socket, each with the line naming it in the upgrade's message:
    /// its bound address, or `admin tcp ADDR` / `admin unix PATH` for the admin endpoint's.
    pub fn sockets_for_successor(&self) -> io::Result<Vec<(String, OwnedFd)>> {
        let guard = self.supervisor.lock();
        let running = guard
            .as_ref()
            .ok_or_else(|| io::Error::other("the switch is not running"))?;
        let mut sockets = Vec::new();
        for (addr, copy) in running.listeners.copies() {
            sockets.push((addr.to_string(), rustix::io::fcntl_dupfd_cloexec(copy, 0)?));
        }
        if let Some(admin) = &running.admin_socket {
            if let Some(line) = admin.name.line() {
                sockets.push((line, rustix::io::fcntl_dupfd_cloexec(&admin.socket, 0)?));
            }
        }
        Ok(sockets)
    }

    /// A successor took the sockets over and accepts now: every accept loop ends and the
    /// copies close; the admin socket's file is the successor's (it stays when this process
    /// stops); no reload after this: the successor has the rules now.
    pub fn handed_over(&self) {
        if let Some(running) = self.supervisor.lock().as_mut() {
            running.listeners.stop_all();
            if let Some(admin) = running.admin_socket.take() {
                admin.set_removes_file(false);
            }
            running.file = None;
        }
    }

    /// This process took the sockets over and serves: an admin socket file taken over is its
    /// to remove when it stops.
    pub fn took_over(&self) {
        if let Some(running) = self.supervisor.lock().as_ref() {
            if let Some(admin) = &running.admin_socket {
                admin.set_removes_file(true);
            }
        }
    }
}
