//! The listeners: the one binder of start, reload and binary upgrade, and the accept loops it
//! leaves running.
//!
//! [`bind`] opens each address a plan wants on every worker (or takes the sockets an old process
//! handed over for it: upgrade.rs), registered with each worker's runtime but not accepting, so
//! that any failure refuses the start or reload before anything changes. [`Listeners`] then
//! runs them (one accept loop per socket, on the socket's worker) and keeps, by bound address,
//! each loop and a copy of its socket for a successor at a binary upgrade.

use super::workers::Workers;
use crate::listener;
use crate::shared::Shared;
use crate::socket::Listener;
use crate::state::generation::Service;
use rustix::fd::OwnedFd;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use tokio::task::AbortHandle;

/// Sockets taken over from an old process, by the address they are bound to.
pub type Adopted = HashMap<SocketAddr, Vec<TcpListener>>;

/// An address bound for a service on every worker, not accepting yet.
pub struct Bound {
    /// The service's index in the plan's generation.
    pub service: usize,
    /// As bound (the port the kernel chose, for port 0).
    pub addr: SocketAddr,
    /// Each socket with its worker's index and a copy for a successor.
    sockets: Vec<(usize, Listener, OwnedFd)>,
}

/// Binds the listen address of each of `wanted` (indexes into `services`) on every worker:
/// the first worker binds what the rules say (and, with `reuse_port`, first makes sure no other
/// process listens there); with port 0 the others then join the port the kernel chose. Sockets
/// in `adopted` for an address are taken instead of binding it anew.
pub fn bind(
    services: &[Arc<Service>],
    wanted: &[usize],
    workers: &Workers,
    reuse_port: bool,
    adopted: &mut Adopted,
) -> io::Result<Vec<Bound>> {
    wanted
        .iter()
        .map(|&index| {
            let service = &services[index];
            let fail = |addr: SocketAddr, e: io::Error| {
                let (at, name) = (&service.listen_at, &service.name);
                io::Error::new(
                    e.kind(),
                    format!("{at}: virtual service `{name}`: cannot listen on {addr}: {e}"),
                )
            };
            let taken = match service.listen.port() {
                0 => Vec::new(),
                _ => adopted.remove(&service.listen).unwrap_or_default(),
            };
            let per_worker = if taken.is_empty() {
                bind_anew(service, workers.count(), reuse_port).map_err(|(a, e)| fail(a, e))?
            } else {
                share(&taken, workers.count())?
            };
            let addr = per_worker[0][0].local_addr()?;
            let mut sockets = Vec::new();
            for (worker, (handle, mine)) in workers.handles().zip(per_worker).enumerate() {
                // Registered with the worker's own reactor, from this thread.
                let _entered = handle.runtime.enter();
                for socket in mine {
                    let copy = rustix::io::fcntl_dupfd_cloexec(&socket, 0)?;
                    let socket = Listener::new(socket).map_err(|e| fail(addr, e))?;
                    sockets.push((worker, socket, copy));
                }
            }
            Ok(Bound {
                service: index,
                addr,
                sockets,
            })
        })
        .collect()
}

/// One new listening socket per worker for `service`, or the address that failed and why.
fn bind_anew(
    service: &Service,
    workers: usize,
    reuse_port: bool,
) -> Result<Vec<Vec<TcpListener>>, (SocketAddr, io::Error)> {
    let mut addr = service.listen;
    let mut sockets = Vec::with_capacity(workers);
    for worker in 0..workers.max(1) {
        let unclaimed = if reuse_port && worker == 0 {
            listener::ensure_unclaimed(addr)
        } else {
            Ok(())
        };
        let socket = unclaimed
            .and_then(|()| listener::bind_socket(addr, reuse_port, service.defer_accept))
            .map_err(|e| (addr, e))?;
        addr = socket.local_addr().map_err(|e| (addr, e))?;
        sockets.push(vec![socket]);
    }
    Ok(sockets)
}

/// Shares the sockets taken over for one address out among `workers`: each worker gets its
/// share; a worker beyond their number gets a copy of one (two workers then accept from one
/// queue). Every socket is used: one left unaccepted would hold connections nobody takes (in a
/// SO_REUSEPORT group the kernel gives it its share).
fn share(sockets: &[TcpListener], workers: usize) -> io::Result<Vec<Vec<TcpListener>>> {
    let workers = workers.max(1);
    (0..workers)
        .map(|worker| {
            if worker < sockets.len() {
                let mine = sockets.iter().skip(worker).step_by(workers);
                mine.map(TcpListener::try_clone).collect()
            } else {
                Ok(vec![sockets[worker % sockets.len()].try_clone()?])
            }
        })
        .collect()
}

/// One accept loop and a copy of its socket.
struct Accepting {
    task: AbortHandle,
    copy: OwnedFd,
}

/// The accept loops of each listening address (as bound), one or more per worker.
#[derive(Default)]
pub struct Listeners {
    by_addr: HashMap<SocketAddr, Vec<Accepting>>,
}

impl Listeners {
    /// Starts accepting on `bound`, each socket on its worker.
    pub fn start(&mut self, shared: &Arc<Shared>, bound: Bound, workers: &Workers) {
        let key = bound.addr;
        let accepting = self.by_addr.entry(key).or_default();
        for (worker, socket, copy) in bound.sockets {
            let handle = workers.get(worker);
            let accept_loop = listener::accept_loop(
                Arc::clone(shared),
                key,
                socket,
                Arc::clone(&handle.timeouts),
            );
            let task = handle.runtime.spawn(accept_loop).abort_handle();
            accepting.push(Accepting { task, copy });
        }
    }

    /// Stops accepting on `addr` and closes the copies of its sockets.
    pub fn stop(&mut self, addr: SocketAddr) {
        for accepting in self.by_addr.remove(&addr).unwrap_or_default() {
            accepting.task.abort();
        }
    }

    /// Stops accepting everywhere (a successor accepts now).
    pub fn stop_all(&mut self) {
        let addrs: Vec<SocketAddr> = self.by_addr.keys().copied().collect();
        for addr in addrs {
            self.stop(addr);
        }
    }

    /// Every listening socket's copy with its bound address.
    pub fn copies(&self) -> impl Iterator<Item = (SocketAddr, &OwnedFd)> {
        self.by_addr
            .iter()
            .flat_map(|(addr, all)| all.iter().map(move |a| (*addr, &a.copy)))
    }
}
