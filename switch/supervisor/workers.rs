//! The workers: the runtimes the sessions run on, each with its coarse timeouts and its
//! housekeeping (parked server connections reaped, the timeout sweeper; on the first worker
//! also the access log's reopening, and health checks with their trials and ramps).
//!
//! Either one worker runs on the runtime that started the switch ([`Placement::Here`]), or each
//! runs on its own thread with its own single-threaded runtime ([`Placement::Threads`]), where
//! its sessions never move between threads. Listeners are bound for them and their tasks
//! spawned onto them from outside (listeners.rs, commit.rs), through their runtime's handle.

use super::affinity::{self, CpuPlan};
use crate::config::CpuAffinity;
use crate::shared::Shared;
use crate::timeouts::Timeouts;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// Where the workers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// One worker, on the runtime that starts the switch.
    Here,
    /// This many workers, each on a thread of its own.
    Threads(usize),
}

/// A worker as the supervisor reaches it: its runtime and its timeouts.
#[derive(Clone, Debug)]
pub struct WorkerHandle {
    pub runtime: tokio::runtime::Handle,
    pub timeouts: Arc<Timeouts>,
}

/// One worker and what ends it.
struct Worker {
    handle: WorkerHandle,
    /// Its housekeeping tasks (and, on the first, the health tasks of the start), ended when
    /// the switch stops.
    tasks: Vec<AbortHandle>,
    /// A worker thread and the signal that ends it (it drops its runtime, and with it whatever
    /// still runs there).
    thread: Option<(std::thread::JoinHandle<()>, oneshot::Sender<()>)>,
    /// The CPU its thread is tied to (`cpu_affinity = "auto"`).
    cpu: Option<usize>,
}

/// The switch's workers, the first one first.
pub struct Workers {
    workers: Vec<Worker>,
}

impl Workers {
    /// Starts the runtimes; with `cpu_affinity = "auto"` and two threads or more, each thread
    /// on a CPU of its own (one worker has nothing to spread, and one on the starting runtime
    /// runs on the caller's thread). Nothing runs on them yet.
    pub fn start(placement: Placement, affinity: CpuAffinity) -> io::Result<Workers> {
        let mut workers = Workers {
            workers: Vec::new(),
        };
        match placement {
            Placement::Here => workers.workers.push(Worker {
                handle: WorkerHandle {
                    runtime: tokio::runtime::Handle::current(),
                    timeouts: Timeouts::for_worker(0),
                },
                tasks: Vec::new(),
                thread: None,
                cpu: None,
            }),
            Placement::Threads(count) => {
                let cpus = match affinity {
                    CpuAffinity::Auto if count >= 2 => cpu_plan(),
                    _ => None,
                };
                for index in 0..count.max(1) {
                    match on_thread(index, cpus.as_ref().map(|plan| plan.cpu_of(index))) {
                        Ok(worker) => workers.workers.push(worker),
                        Err(e) => {
                            // All workers or none.
                            workers.end_now();
                            return Err(e);
                        }
                    }
                }
                if cpus.is_some() {
                    let placed: Vec<String> = (workers.workers.iter())
                        .map(|w| w.cpu.map_or("none".to_string(), |cpu| cpu.to_string()))
                        .collect();
                    tracing::info!(
                        "cpu_affinity = \"auto\": workers on CPUs {}",
                        placed.join(", ")
                    );
                }
            }
        }
        if affinity == CpuAffinity::Auto && workers.count() < 2 {
            tracing::info!("cpu_affinity = \"auto\": one worker, not pinned");
        }
        Ok(workers)
    }

    pub fn count(&self) -> usize {
        self.workers.len()
    }

    /// Every worker's handle, the first one first.
    pub fn handles(&self) -> impl Iterator<Item = &WorkerHandle> {
        self.workers.iter().map(|w| &w.handle)
    }

    /// Worker `index` (the last one for an index beyond them, which cannot happen).
    pub fn get(&self, index: usize) -> &WorkerHandle {
        &self.workers[index.min(self.workers.len() - 1)].handle
    }

    /// The first worker, beside whose sessions the health checks run.
    pub fn first(&self) -> &WorkerHandle {
        self.get(0)
    }

    /// Starts each worker's housekeeping; the first one's also reopens the access log on
    /// SIGUSR1 and runs the trials and slow starts of health.
    pub fn start_housekeeping(&mut self, shared: &Arc<Shared>) -> io::Result<()> {
        for (index, worker) in self.workers.iter_mut().enumerate() {
            let (runtime, timeouts) = (&worker.handle.runtime, &worker.handle.timeouts);
            let reaper = reap_idle_connections(Arc::clone(shared), Arc::clone(timeouts));
            worker.tasks.push(runtime.spawn(reaper).abort_handle());
            let sweeper = Arc::clone(timeouts).run_sweeper();
            worker.tasks.push(runtime.spawn(sweeper).abort_handle());
            if index == 0 {
                let _entered = runtime.enter();
                let log = Arc::clone(&shared.access_log);
                let reopen = crate::access_log::spawn_reopen(log, shared.shutdown.clone())?;
                worker.tasks.push(reopen.abort_handle());
                let trials = crate::health::spawn_housekeeping(shared);
                worker.tasks.push(trials.abort_handle());
            }
        }
        Ok(())
    }

    /// Keeps `tasks` of the first worker to end with it.
    pub fn keep(&mut self, tasks: impl IntoIterator<Item = AbortHandle>) {
        self.workers[0].tasks.extend(tasks);
    }

    /// The switch is stopping: sessions waiting for a request leave. Every worker is marked
    /// before any session is woken: a client let go on one worker is a sign that a request in
    /// flight on another is answered with `Connection: close` (marked and woken worker by
    /// worker, a response written between the two was told the connection stays; seen in CI,
    /// tests/process.rs).
    pub fn stop_timeouts(&self) {
        for worker in &self.workers {
            worker.handle.timeouts.mark_stopping();
        }
        for worker in &self.workers {
            worker.handle.timeouts.wake_all();
        }
    }

    /// Wakes every session of every worker (a reload removed a service).
    pub fn wake_sessions(&self) {
        for worker in &self.workers {
            worker.handle.timeouts.wake_all();
        }
    }

    /// Ends every task and thread (at the end of a shutdown).
    pub async fn end(mut self) {
        for worker in std::mem::take(&mut self.workers) {
            for task in &worker.tasks {
                task.abort();
            }
            if let Some((thread, exit)) = worker.thread {
                let _ = exit.send(());
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
        }
    }

    /// [`Workers::end`] from a thread that may block (a start that failed).
    pub fn end_now(mut self) {
        for worker in std::mem::take(&mut self.workers) {
            for task in &worker.tasks {
                task.abort();
            }
            if let Some((thread, exit)) = worker.thread {
                let _ = exit.send(());
                let _ = thread.join();
            }
        }
    }
}

/// The CPUs to place workers on; `None` (with a warning) when the process's mask cannot be
/// read: the workers then run unpinned, as with `"off"`.
fn cpu_plan() -> Option<CpuPlan> {
    CpuPlan::of_this_thread()
        .map_err(|e| {
            tracing::warn!(
                "cpu_affinity = \"auto\": the CPUs cannot be read ({e}): workers not pinned"
            )
        })
        .ok()
}

/// A worker on a thread of its own, tied to `cpu` if given, its runtime idle until tasks are
/// spawned onto it.
fn on_thread(index: usize, cpu: Option<usize>) -> io::Result<Worker> {
    let (started, report) = std::sync::mpsc::channel();
    let (exit, exited) = oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name(format!("tcpvs-worker-{index}"))
        .spawn(move || {
            // Before the runtime: its first allocations then come from this CPU's memory. A
            // CPU that refuses (taken offline since the start) leaves the worker unpinned, with
            // a warning: it still serves.
            let cpu = cpu.filter(|&cpu| match affinity::pin_this_thread(cpu) {
                Ok(()) => true,
                Err(e) => {
                    tracing::warn!("worker {index}: cannot run on CPU {cpu} only: {e}");
                    false
                }
            });
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
            let _ = started.send(Ok((runtime.handle().clone(), cpu)));
            runtime.block_on(async move {
                let _ = exited.await;
            });
        })?;
    let runtime = report
        .recv()
        .map_err(|_| io::Error::other("worker thread ended while starting"))
        .and_then(|result| result);
    match runtime {
        Ok((runtime, cpu)) => Ok(Worker {
            handle: WorkerHandle {
                runtime,
                timeouts: Timeouts::for_worker(index),
            },
            cpu,
            tasks: Vec::new(),
            thread: Some((thread, exit)),
        }),
        Err(e) => {
            let _ = exit.send(());
            let _ = thread.join();
            Err(e)
        }
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
