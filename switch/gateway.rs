//! The running switch: listeners, shared state, the idle-connection reaper and shutdown.

use crate::config::admin::AdminConfig;
use crate::config::Config;
use crate::limits::descriptors::Demand;
use crate::listener;
use crate::reload::{Reloader, WorkerHandle};
pub use crate::shared::Shared;
use crate::state::generation::Generation;
pub use crate::state::generation::Service;
use crate::state::pool::Pool;
use crate::state::snapshot::Snapshot;
use crate::timeouts::Timeouts;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A started switch. Dropping it does not stop it; call [`Switch::shutdown`].
pub struct Switch {
    shared: Arc<Shared>,
    addresses: Vec<(String, SocketAddr)>,
    /// The admin endpoint's bound address, and its thread or task (one worker).
    admin: Option<SocketAddr>,
    admin_thread: Option<std::thread::JoinHandle<()>>,
    admin_task: Option<JoinHandle<()>>,
    stop: watch::Sender<bool>,
    workers: Vec<Worker>,
}

/// One worker: the listeners, sessions and timeouts of one runtime. Either it runs on the
/// runtime that started the switch ([`Switch::start`]), or on its own thread with its own
/// single-threaded runtime ([`Switch::start_workers`]), where its sessions never move between
/// threads.
struct Worker {
    timeouts: Arc<Timeouts>,
    /// Tasks on the caller's runtime, ended at the end of a shutdown.
    tasks: Vec<JoinHandle<()>>,
    /// A worker thread and the signal that ends it.
    thread: Option<(std::thread::JoinHandle<()>, oneshot::Sender<()>)>,
}

/// What a worker needs to start: the listeners to bind (service index, address), and the
/// sockets taken over from an old process for some of them (upgrade.rs).
struct Plan {
    shared: Arc<Shared>,
    listen: Vec<(usize, SocketAddr)>,
    adopted: Vec<(usize, std::net::TcpListener)>,
    reuse_port: bool,
    /// The worker's index (its idle server connections, its share of housekeeping).
    worker: usize,
}

/// A worker once started: the addresses it bound (in the plan's order), its timeouts, its tasks.
struct Launched {
    bound: Vec<SocketAddr>,
    timeouts: Arc<Timeouts>,
    tasks: Vec<JoinHandle<()>>,
    /// What a reload needs of the worker: its runtime, its accept loops by address.
    handle: WorkerHandle,
    listeners: Vec<(SocketAddr, tokio::task::AbortHandle, rustix::fd::OwnedFd)>,
}

/// A switch's shared state, its stop signal and the listeners to bind.
struct Prepared {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    listen: Vec<(usize, SocketAddr)>,
    /// The admin endpoint, its listener bound already.
    admin: Option<(AdminConfig, crate::admin::Listener)>,
    /// What reloads will need (the workers and listeners are added once they run).
    reloader: Reloader,
}

impl Plan {
    /// Binds the listeners and spawns the worker's tasks on the current runtime.
    fn launch(mut self) -> io::Result<Launched> {
        let timeouts = Timeouts::for_worker(self.worker);
        let generation = self.shared.generation.load_full();
        let mut bound = Vec::new();
        let mut listeners = Vec::new();
        for &(service, addr) in &self.listen {
            let service_info = &generation.services[service];
            let adopted: Vec<std::net::TcpListener> = extract(&mut self.adopted, service);
            let fail = |e: io::Error| {
                let (at, name) = (&service_info.listen_at, &service_info.name);
                io::Error::new(
                    e.kind(),
                    format!("{at}: virtual service `{name}`: cannot listen on {addr}: {e}"),
                )
            };
            let mut mine = Vec::new();
            if adopted.is_empty() {
                // The first worker makes sure no other process shares the address with it.
                let unclaimed = if self.reuse_port && self.worker == 0 {
                    listener::ensure_unclaimed(addr)
                } else {
                    Ok(())
                };
                let listener = unclaimed
                    .and_then(|()| listener::bind(addr, self.reuse_port, service_info.defer_accept))
                    .map_err(fail)?;
                mine.push(listener);
            } else {
                for socket in adopted {
                    mine.push(crate::socket::Listener::new(socket).map_err(fail)?);
                }
            }
            let local = mine[0].local_addr()?;
            let _ = service_info.bound.set(local);
            bound.push(local);
            for listener in mine {
                listeners.push((local, listener));
            }
        }
        let mut tasks = Vec::new();
        let mut accepting = Vec::new();
        for (key, listener) in listeners {
            let copy = rustix::io::fcntl_dupfd_cloexec(&listener, 0)?;
            let task = tokio::spawn(listener::accept_loop(
                Arc::clone(&self.shared),
                key,
                listener,
                Arc::clone(&timeouts),
            ));
            accepting.push((key, task.abort_handle(), copy));
            tasks.push(task);
        }
        tasks.push(tokio::spawn(reap_idle_connections(
            Arc::clone(&self.shared),
            Arc::clone(&timeouts),
        )));
        tasks.push(tokio::spawn(Arc::clone(&timeouts).run_sweeper()));
        if self.worker == 0 {
            // Checks and trials run beside the first worker's sessions, off their path.
            tasks.extend(crate::health::spawn(&self.shared, &generation.pools, true));
            tasks.push(crate::access_log::spawn_reopen(
                Arc::clone(&self.shared.access_log),
                self.shared.shutdown.clone(),
            )?);
        }
        Ok(Launched {
            bound,
            handle: WorkerHandle {
                runtime: tokio::runtime::Handle::current(),
                timeouts: Arc::clone(&timeouts),
            },
            timeouts,
            tasks,
            listeners: accepting,
        })
    }
}

impl Switch {
    /// Binds every virtual service's listener and starts accepting on the current tokio runtime
    /// (one worker). Must run inside a tokio runtime.
    pub async fn start(config: Config) -> io::Result<Switch> {
        Switch::start_inheriting(config, crate::upgrade::Inherited::default()).await
    }

    /// [`Switch::start`] with the listening sockets of an old process (upgrade.rs) for the
    /// addresses they are bound to; the others are bound anew.
    pub async fn start_inheriting(
        config: Config,
        mut inherited: crate::upgrade::Inherited,
    ) -> io::Result<Switch> {
        let Prepared {
            shared,
            stop,
            listen,
            admin,
            mut reloader,
        } = Switch::prepare(config, 1, &mut inherited.admin)?;
        let mut shares = share_out(&mut inherited, &shared.generation.load(), 1)?;
        let plan = Plan {
            shared: Arc::clone(&shared),
            listen: listen.clone(),
            adopted: shares.pop().unwrap_or_default(),
            reuse_port: false,
            worker: 0,
        };
        let Launched {
            bound,
            timeouts,
            tasks,
            handle,
            listeners,
        } = plan.launch()?;
        reloader.workers.push(handle);
        for (key, task, copy) in listeners {
            reloader.listeners.entry(key).or_default().push(task);
            reloader.sockets.entry(key).or_default().push(copy);
        }
        Switch::ready_to_reload(&shared, reloader);
        // One worker: the endpoint's tasks run beside it (admin/mod.rs says why).
        let (admin_addr, admin_task) = match admin {
            Some((config, listener)) => {
                let addr = listener.tcp_addr();
                let serving = crate::admin::serve(Arc::clone(&shared), config, listener);
                (addr, Some(tokio::spawn(serving)))
            }
            None => (None, None),
        };
        Ok(Switch {
            addresses: Switch::named(&shared, &listen, &bound),
            admin: admin_addr,
            admin_thread: None,
            admin_task,
            shared,
            stop,
            workers: vec![Worker {
                timeouts,
                tasks,
                thread: None,
            }],
        })
    }

    /// Starts `count` workers, each on its own thread with a single-threaded runtime and its
    /// own listening sockets (SO_REUSEPORT: the kernel spreads new connections over them).
    /// Sessions stay on the thread that accepted them, so no wake-up crosses threads.
    pub fn start_workers(config: Config, count: usize) -> io::Result<Switch> {
        Switch::start_workers_inheriting(config, count, crate::upgrade::Inherited::default())
    }

    /// [`Switch::start_workers`] with the listening sockets of an old process (upgrade.rs).
    pub fn start_workers_inheriting(
        config: Config,
        count: usize,
        mut inherited: crate::upgrade::Inherited,
    ) -> io::Result<Switch> {
        let Prepared {
            shared,
            stop,
            listen,
            admin,
            mut reloader,
        } = Switch::prepare(config, count.max(1), &mut inherited.admin)?;
        reloader.reuse_port = true;
        let shares = share_out(&mut inherited, &shared.generation.load(), count.max(1))?;
        let mut shares = shares.into_iter();
        let mut workers: Vec<Worker> = Vec::with_capacity(count);
        // The first worker binds what the rules say; with port 0 the others then join the port
        // the kernel chose.
        let mut addresses = listen.clone();
        for index in 0..count.max(1) {
            let plan = Plan {
                shared: Arc::clone(&shared),
                listen: addresses.clone(),
                adopted: shares.next().unwrap_or_default(),
                reuse_port: true,
                worker: index,
            };
            let (started, report) = std::sync::mpsc::channel();
            let (exit, exited) = oneshot::channel::<()>();
            let thread = std::thread::Builder::new()
                .name(format!("tcpvs-worker-{index}"))
                .spawn(move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(r) => r,
                        Err(e) => {
                            let _ = started.send(Err(e));
                            return;
                        }
                    };
                    runtime.block_on(async move {
                        let launched = plan.launch();
                        let ok = launched.is_ok();
                        let _ = started
                            .send(launched.map(|l| (l.bound, l.timeouts, l.handle, l.listeners)));
                        if ok {
                            let _ = exited.await;
                        }
                    });
                })?;
            let launched = report
                .recv()
                .map_err(|_| io::Error::other("worker thread ended while starting"))
                .and_then(|result| result);
            let (bound, timeouts, handle, listeners) = match launched {
                Ok(launched) => launched,
                Err(e) => {
                    // Those already running stop again: all workers or none.
                    let _ = stop.send(true);
                    let _ = exit.send(());
                    let _ = thread.join();
                    for worker in workers {
                        if let Some((thread, exit)) = worker.thread {
                            let _ = exit.send(());
                            let _ = thread.join();
                        }
                    }
                    return Err(e);
                }
            };
            if index == 0 {
                addresses = listen
                    .iter()
                    .zip(&bound)
                    .map(|(&(service, _), &addr)| (service, addr))
                    .collect();
            }
            reloader.workers.push(handle);
            for (key, task, copy) in listeners {
                reloader.listeners.entry(key).or_default().push(task);
                reloader.sockets.entry(key).or_default().push(copy);
            }
            workers.push(Worker {
                timeouts,
                tasks: Vec::new(),
                thread: Some((thread, exit)),
            });
        }
        Switch::ready_to_reload(&shared, reloader);
        let bound: Vec<SocketAddr> = addresses.iter().map(|&(_, a)| a).collect();
        // Several workers: the endpoint gets a thread of its own, off theirs.
        let (admin_addr, admin_thread) = match admin {
            Some((config, listener)) => {
                let addr = listener.tcp_addr();
                let thread = crate::admin::spawn_thread(Arc::clone(&shared), config, listener)?;
                (addr, Some(thread))
            }
            None => (None, None),
        };
        Ok(Switch {
            addresses: Switch::named(&shared, &listen, &bound),
            admin: admin_addr,
            admin_thread,
            admin_task: None,
            shared,
            stop,
            workers,
        })
    }

    /// The shared state of a switch, the stop signal and the listeners to bind.
    /// `inherited_admin`: the admin socket an old process handed over (upgrade.rs), if any.
    fn prepare(
        config: Config,
        workers: usize,
        inherited_admin: &mut Option<crate::admin::listener::Handover>,
    ) -> io::Result<Prepared> {
        let clock: Arc<dyn tcpvs_modules::Clock> = Arc::new(tcpvs_modules::MonotonicClock::new());
        let pools = config
            .pools
            .iter()
            .map(|p| Pool::new(p, Arc::clone(&clock), workers).map(Arc::new))
            .collect::<Result<Box<[Arc<Pool>]>, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // Ticket keys and a session cache per TLS service, for every generation (reloads too).
        let resumption = crate::edge::tls::ResumptionByService::default();
        let mut reloader = Reloader {
            file: config.path.clone(),
            admin: config.admin.clone(),
            admin_socket: None,
            clock: Arc::clone(&clock),
            resumption: resumption.clone(),
            reuse_port: false,
            workers: Vec::new(),
            listeners: Default::default(),
            sockets: Default::default(),
        };
        let admin = match config.admin {
            Some(admin) => {
                let listener = crate::admin::bind(&admin, inherited_admin)?;
                // A copy for a successor at a binary upgrade (none: it binds its own).
                reloader.admin_socket = listener.handover().ok();
                Some((admin, listener))
            }
            None => None,
        };
        let listen: Vec<(usize, SocketAddr)> = config
            .services
            .iter()
            .enumerate()
            .map(|(i, s)| (i, s.listen))
            .collect();
        let access_log = Arc::new(crate::access_log::AccessLog::new(&config.switch)?);
        let (stop, shutdown) = watch::channel(false);
        let services: Box<[Service]> = config
            .services
            .into_iter()
            .map(|s| {
                let resumes = resumption.of(&s.name);
                Service::new(s, Default::default(), Default::default(), &resumes)
            })
            .collect::<Result<_, _>>()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let max_clients = crate::limits::descriptors::apply(&Demand {
            max_clients: config.switch.max_clients,
            max_clients_given: config.switch.max_clients_given,
            workers,
            listeners: listen.len(),
            servers: pools.iter().map(|p| p.backends.len()).sum(),
            admin: admin.is_some(),
        });
        let shared = Arc::new(Shared {
            settings: config.switch,
            generation: arc_swap::ArcSwap::from_pointee(Generation {
                number: 1,
                services,
                pools,
            }),
            reload: std::sync::Mutex::new(None),
            clients: AtomicUsize::new(0),
            max_clients,
            shutdown,
            started: std::time::Instant::now(),
            access_log,
        });
        Ok(Prepared {
            shared,
            stop,
            listen,
            admin,
            reloader,
        })
    }

    /// Reloads may come from now on (SIGHUP, the admin endpoint).
    fn ready_to_reload(shared: &Shared, reloader: Reloader) {
        *shared
            .reload
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(reloader);
    }

    /// Reads the rule file again and swaps it in (reload.rs).
    pub fn reload(&self) -> Result<crate::reload::Reloaded, crate::reload::ReloadError> {
        crate::reload::reload(&self.shared)
    }

    /// The shared state, for what runs beside the switch (signals in main.rs).
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    fn named(
        shared: &Shared,
        listen: &[(usize, SocketAddr)],
        bound: &[SocketAddr],
    ) -> Vec<(String, SocketAddr)> {
        listen
            .iter()
            .zip(bound)
            .map(|(&(service, _), &addr)| {
                (
                    shared.generation.load().services[service].name.clone(),
                    addr,
                )
            })
            .collect()
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
        // No reload from now on; the copies of the listening sockets kept for an upgrade close
        // with it (else the kernel would go on queueing connections nobody accepts).
        *self
            .shared
            .reload
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
        for worker in &self.workers {
            worker.timeouts.stop();
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
        for worker in self.workers {
            for task in &worker.tasks {
                task.abort();
            }
            if let Some((thread, exit)) = worker.thread {
                // The thread drops its runtime, and with it whatever was still running there.
                let _ = exit.send(());
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        }
        open
    }
}

/// Hands the allocator's free memory back to the operating system. After a burst (thousands of
/// clients arriving at once, each holding buffers for a moment) glibc keeps the freed chunks
/// mapped, and the process would keep the burst's size long after; HAProxy trims for the same
/// reason. Measured: 10 000 idle clients after a burst of 10 000 first requests cost 13.9 KB
/// each without, about 4 KB with.
///
/// Only when the allocator holds more than [`TRIM_ABOVE`] free: under a steady load the free
/// chunks are about to be reused, and trimming them made the next allocations fault their pages
/// in again (page faults per request under `CLOSE=1`, perf).
fn return_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallinfo2 and malloc_trim only read and release the allocator's own bookkeeping
    // and free memory; they take no pointers from us and are safe from any thread at any time.
    unsafe {
        if libc::mallinfo2().fordblks > TRIM_ABOVE {
            libc::malloc_trim(0);
        }
    }
}

/// Free bytes inside the allocator worth giving back (see [`return_free_memory`]).
const TRIM_ABOVE: usize = 4 << 20;

/// Closes this worker's parked server connections that aged out or that their server closed;
/// the first worker also gives memory freed by a burst of connections back to the system.
async fn reap_idle_connections(shared: Arc<Shared>, timeouts: Arc<Timeouts>) {
    let max_age = shared.settings.server_idle_timeout;
    let period = (max_age / 2).clamp(Duration::from_millis(100), Duration::from_secs(1));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_trim = Instant::now();
    loop {
        tick.tick().await;
        if timeouts.worker() == 0 && last_trim.elapsed() >= Duration::from_secs(1) {
            last_trim = Instant::now();
            return_free_memory();
        }
        let now_ms = timeouts.now_ms();
        for pool in shared.generation.load().pools.iter() {
            for backend in pool.backends.iter() {
                backend.purge_idle(timeouts.worker(), now_ms, max_age);
            }
        }
    }
}

/// The sockets of `service` out of `adopted`.
fn extract(
    adopted: &mut Vec<(usize, std::net::TcpListener)>,
    service: usize,
) -> Vec<std::net::TcpListener> {
    let mut taken = Vec::new();
    let mut index = 0;
    while index < adopted.len() {
        if adopted[index].0 == service {
            taken.push(adopted.swap_remove(index).1);
        } else {
            index += 1;
        }
    }
    taken
}

/// Shares the sockets taken over from an old process out among `workers`, by service: each
/// worker gets its share of a service's sockets; a worker beyond their number gets a copy of
/// one (two workers then accept from one queue). Every socket is used: one left unaccepted
/// would hold connections nobody takes (in a SO_REUSEPORT group the kernel gives it its share).
fn share_out(
    inherited: &mut crate::upgrade::Inherited,
    generation: &Generation,
    workers: usize,
) -> io::Result<Vec<Vec<(usize, std::net::TcpListener)>>> {
    let mut shares: Vec<Vec<(usize, std::net::TcpListener)>> =
        (0..workers).map(|_| Vec::new()).collect();
    for (index, service) in generation.services.iter().enumerate() {
        if service.listen.port() == 0 {
            continue;
        }
        let sockets = inherited.take(service.listen);
        let count = sockets.len();
        if count == 0 {
            continue;
        }
        for (worker, share) in shares.iter_mut().enumerate() {
            if worker < count {
                for socket in sockets.iter().skip(worker).step_by(workers) {
                    share.push((index, socket.try_clone()?));
                }
            } else {
                share.push((index, sockets[worker % count].try_clone()?));
            }
        }
    }
    Ok(shares)
}
