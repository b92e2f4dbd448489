//! Server pools at run time: the module that picks, the live state it reads, and per server the
//! idle keep-alive connections waiting for reuse.

use crate::config::health::PoolHealth;
use crate::config::scheduler::build_scheduler;
use crate::config::PoolConfig;
use crate::state::server::Backend;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tcpvs_modules::{BuildError, Clock, PoolView, RequestView, Scheduler, ServerState, Ticket};

mod offer;

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
    /// Held while what the module sees is recomputed (offer.rs), one recomputation at a time:
    /// each reads every server's status and writes their views. Shared with the pools of the
    /// same name in earlier and later generations, since they share servers (and so the views
    /// the modules read): two pools recomputing a kept server at once could otherwise leave
    /// the older result last. A server's state itself is recorded under its own lock
    /// (`control::apply`), never while holding this one.
    offering: Arc<Mutex<()>>,
    /// Requests waiting for a slot (every usable server at `max_conns`), woken in arrival
    /// order when a request of the pool ends. Shared with the pools of the same name in
    /// earlier and later generations, as their servers' slots are: a request queued under one
    /// generation must wake when a request of the next ends (an attacker's review found queued
    /// requests stranded until `queue_timeout` by each change a discovery made).
    queue: Arc<Queue>,
    /// Told once a reload or a discovery's answer retires the pool: its health tasks end then,
    /// not at their next turn (each change would otherwise leave a task per server asleep).
    retired: tokio::sync::watch::Sender<bool>,
    /// Too few servers are up: health does not decide who gets requests (`panic_threshold`);
    /// written by `control::apply`.
    panic: AtomicBool,
}

impl Pool {
    /// A pool on its own (tests, benches), shown to its module at once. `workers`: how many
    /// workers will use the pool (each keeps its own idle connections).
    pub fn new(
        config: &PoolConfig,
        clock: Arc<dyn Clock>,
        workers: usize,
    ) -> Result<Pool, BuildError> {
        let pool = Pool::with_servers_of(config, clock, workers, None)?;
        pool.show(Instant::now());
        Ok(pool)
    }

    /// A pool for `config` that takes over the servers of `previous` (the pool of the same name
    /// in the running configuration) that it keeps, with their load, statistics, idle
    /// connections, health and admin state. Building it changes none of them: the kept servers
    /// whose line changed are listed by [`Pool::lines_changed`], and a reload's commit applies
    /// `Change::LineChanged` to them (which ends the admin's runtime changes: the rule file now
    /// says what it wants) and `Change::Tick` to the pool (which shows it to its module: backups
    /// hidden while a primary is usable) before the pool can be seen.
    pub fn with_servers_of(
        config: &PoolConfig,
        clock: Arc<dyn Clock>,
        workers: usize,
        previous: Option<&Pool>,
    ) -> Result<Pool, BuildError> {
        let backends: Box<[Arc<Backend>]> = config
            .servers
            .iter()
            .map(|server| {
                let kept = previous.and_then(|p| p.backends.iter().find(|b| b.addr == server.addr));
                match kept {
                    Some(backend) => Arc::clone(backend),
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
        let mut config = config.clone();
        // The same TLS settings as before stay the very same, so that the connections the
        // kept servers parked under them are reused (ServerConnection::made_as).
        if let Some(previous) = previous.filter(|p| same_tls(&p.config, &config)) {
            config.tls.clone_from(&previous.config.tls);
        }
        Ok(Pool {
            name: config.name.clone(),
            health: config.health.clone(),
            config,
            backends,
            servers,
            scheduler,
            offering: previous.map_or_else(Arc::default, |p| Arc::clone(&p.offering)),
            queue: previous.map_or_else(Arc::default, |p| Arc::clone(&p.queue)),
            retired: tokio::sync::watch::Sender::new(false),
            panic: AtomicBool::new(false),
        })
    }

    /// The servers (indexes) kept from an earlier pool whose line in the rule file differs from
    /// what they run with: a new server is built from its line.
    pub fn lines_changed(&self) -> impl Iterator<Item = usize> + '_ {
        self.backends
            .iter()
            .zip(&self.config.servers)
            .enumerate()
            .filter(|(_, (backend, line))| !backend.has_line(line))
            .map(|(index, _)| index)
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
        self.queue.waiting.load(Ordering::Relaxed)
    }

    /// A request of the pool ended or a server changed: the first queued request looks again.
    pub(crate) fn wake_queue(&self) {
        if self.queue.waiting.load(Ordering::Relaxed) > 0 {
            self.queue.notify.notify_one();
        }
    }

    /// The running generation no longer has this pool (the commit): its health tasks end.
    pub(crate) fn retire(&self) {
        self.retired.send_replace(true);
    }

    /// What a health task of the pool waits on beside its timer: `true` once retired.
    pub(crate) fn retirement(&self) -> tokio::sync::watch::Receiver<bool> {
        self.retired.subscribe()
    }

    /// A place in the pool's queue: while it lives, each request of the pool that ends (and
    /// each change of a server) wakes the longest waiting holder, which then looks again.
    pub(crate) fn queued(&self) -> QueueTicket<'_> {
        self.queue.waiting.fetch_add(1, Ordering::Relaxed);
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
                    .is_ok_and(|s| s.state() == crate::state::status::State::Up)
            })
            .min_by_key(|(i, _)| self.servers[*i].active())
            .map(|(i, _)| i)
    }

    pub fn view(&self) -> PoolView<'_> {
        PoolView {
            servers: &self.servers,
        }
    }

    /// The next candidate for `request`, skipping `tried`, and the module's ticket for it
    /// (handed back when the request's lease ends).
    pub fn pick(&self, request: &RequestView<'_>, tried: &[usize]) -> Option<(usize, Ticket)> {
        // A module answering out of range would be a bug in the module; treat it as "no server"
        // rather than index past the end.
        self.scheduler
            .pick_with_ticket(request, &self.view(), tried)
            .filter(|&(i, _)| i < self.backends.len())
    }

    /// Counts a request as active at `server` until the lease is dropped; `None` when the
    /// server is at its `max_conns` (checked and counted in one atomic step). `ticket` is the
    /// module's, from the pick of `server` (`Ticket::NONE` for a server it did not pick).
    pub fn try_lease(&self, server: usize, ticket: Ticket) -> Option<Lease<'_>> {
        if !self.servers.get(server)?.try_add_active() {
            return None;
        }
        self.scheduler.connection_started(server);
        Some(Lease {
            pool: self,
            server,
            ticket,
            answered: false,
            let_go: AtomicBool::new(false),
        })
    }
}

/// A request's hold on a server: the server's active count includes it while this lives.
#[derive(Debug)]
pub struct Lease<'a> {
    pool: &'a Pool,
    pub server: usize,
    ticket: Ticket,
    /// The server served the request (2xx or 3xx): only then is the ticket handed back. A
    /// connection refused, a 503 at once or a client gone before the answer would teach the
    /// module that the server is fast (an attack round: a server failing fast drew spills); so
    /// would a server that answers 404 or 403 without reading its disk. A 101 holds its server
    /// for as long as the tunnel lasts, and is not timed; a 2xx to CONNECT opens a tunnel too
    /// and is timed, one long sample that the module clips.
    answered: bool,
    /// The server was let go before the exchange ended ([`Lease::let_go`]).
    let_go: AtomicBool,
}

impl<'a> Lease<'a> {
    /// The server answered with `status`.
    pub fn answered(&mut self, status: u16) {
        self.answered = served(status);
    }

    /// The server is done with the request before the exchange is: its whole answer, of
    /// `status`, was read ahead of a client that takes it slowly (`response_buffer`,
    /// buffering/read_ahead.rs). Its place is given back now, as at the lease's end: the active
    /// count that `max_conns`, the queue and the modules read (LARD's places among them) counts
    /// only requests the server still works on, and the time sample ends when the server's
    /// part did. Once only; dropping the lease then does nothing more.
    pub fn let_go(&self, status: u16) {
        if !self.let_go.swap(true, Ordering::Relaxed) {
            self.end(served(status));
        }
    }

    /// The request leaves the server's counts; `served`: its ticket goes back to the module.
    fn end(&self, served: bool) {
        if let Some(state) = self.pool.servers.get(self.server) {
            state.remove_active();
        }
        self.pool.scheduler.connection_ended(self.server);
        if served && self.ticket != Ticket::NONE {
            self.pool.scheduler.request_ended(self.server, self.ticket);
        }
        self.pool.wake_queue();
    }

    pub fn backend(&self) -> &'a Backend {
        &self.pool.backends[self.server]
    }

    pub fn pool(&self) -> &'a Pool {
        self.pool
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if !*self.let_go.get_mut() {
            self.end(self.answered);
        }
    }
}

/// Whether an answer of `status` says the server served the request (2xx or 3xx): only then is
/// the module's ticket handed back (see [`Lease`]).
fn served(status: u16) -> bool {
    (200..400).contains(&status)
}

/// The queue of the pools of one name across generations.
#[derive(Debug, Default)]
struct Queue {
    notify: tokio::sync::Notify,
    waiting: AtomicUsize,
}

/// A request's place in its pool's queue; leaving it (drop) ends the wait.
pub(crate) struct QueueTicket<'a> {
    pool: &'a Pool,
}

impl<'a> QueueTicket<'a> {
    /// A wake-up to wait for, registered before the caller looks for a slot again.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'a> {
        self.pool.queue.notify.notified()
    }
}

impl Drop for QueueTicket<'_> {
    fn drop(&mut self) {
        self.pool.queue.waiting.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether connections made under `previous`'s TLS are good for `next`: the same settings, and
/// no kept server known by another name (the name its certificate was checked against: an
/// attacker's review found a renamed server reused connections verified for the old name).
fn same_tls(previous: &PoolConfig, next: &PoolConfig) -> bool {
    previous.tls == next.tls
        && next.servers.iter().all(|server| {
            previous
                .servers
                .iter()
                .find(|old| old.addr == server.addr)
                .is_none_or(|old| old.host == server.host)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Mutex;

    /// Issues a ticket with every pick and records the ones handed back.
    #[derive(Debug, Default)]
    struct Recorder {
        ended: Mutex<Vec<(usize, Ticket)>>,
        issued: AtomicU64,
    }

    impl Scheduler for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }

        fn pick(&self, _: &RequestView<'_>, _: &PoolView<'_>, _: &[usize]) -> Option<usize> {
            Some(0)
        }

        fn request_ended(&self, server: usize, ticket: Ticket) {
            self.ended.lock().unwrap().push((server, ticket));
        }
    }

    impl Recorder {
        fn ticket(&self) -> Ticket {
            Ticket::issued(self.issued.fetch_add(1, Ordering::Relaxed) + 1)
        }
    }

    fn pool_with(recorder: &Arc<Recorder>) -> Pool {
        let text = "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[pool.p]\n\
                    servers = [{ addr = \"127.0.0.1:1\" }]\n";
        let config = crate::config::Config::parse("test.toml", text).unwrap();
        let clock: Arc<dyn Clock> = Arc::new(tcpvs_modules::MonotonicClock::new());
        let mut pool = Pool::new(&config.pools[0], clock, 1).unwrap();
        pool.scheduler = Arc::clone(recorder) as Arc<dyn Scheduler>;
        pool
    }

    #[test]
    fn only_requests_the_server_served_hand_their_ticket_back() {
        let recorder = Arc::new(Recorder::default());
        let pool = pool_with(&recorder);
        let mut handed_back = Vec::new();
        for status in [
            None,
            Some(101),
            Some(200),
            Some(206),
            Some(304),
            Some(403),
            Some(404),
            Some(503),
        ] {
            let ticket = recorder.ticket();
            let mut lease = pool.try_lease(0, ticket).unwrap();
            if let Some(status) = status {
                lease.answered(status);
            }
            drop(lease);
            if recorder.ended.lock().unwrap().last() == Some(&(0, ticket)) {
                handed_back.push(status);
            }
        }
        assert_eq!(handed_back, [Some(200), Some(206), Some(304)]);
        assert_eq!(
            pool.servers[0].active(),
            0,
            "every lease gave its slot back"
        );
        // A lease let go early counts once, when it is let go.
        let ticket = recorder.ticket();
        let lease = pool.try_lease(0, ticket).unwrap();
        assert_eq!(pool.servers[0].active(), 1);
        lease.let_go(200);
        assert_eq!(
            pool.servers[0].active(),
            0,
            "the place is given back at once"
        );
        assert_eq!(recorder.ended.lock().unwrap().last(), Some(&(0, ticket)));
        let other = pool.try_lease(0, recorder.ticket()).unwrap();
        lease.let_go(200);
        drop(lease);
        assert_eq!(pool.servers[0].active(), 1, "only the other lease counts");
        assert_eq!(
            recorder.ended.lock().unwrap().len(),
            4,
            "one ticket handed back"
        );
        drop(other);
        // A lease without a ticket hands nothing back, whatever the answer.
        let mut lease = pool.try_lease(0, Ticket::NONE).unwrap();
        lease.answered(200);
        drop(lease);
        assert_eq!(recorder.ended.lock().unwrap().len(), 4);
    }
}
