//! The admin endpoint: HTTP/1.1 on `[admin] listen`. It reads snapshots of the shared counters
//! and states (`/stats`, `/metrics`, the monitor page at `/`) and writes only through
//! `control::apply` (`PUT /pools/{pool}/servers/{addr}`), so it never takes a lock the data
//! path waits on longer than a status update. The `tcpvs list`/`set-weight`/`set-state`/
//! `reload` commands talk to it through [`client`].
//!
//! It listens on TCP or on a Unix socket whose mode says who may connect (`listener.rs`), and
//! serves at most 64 connections, closing the one that has waited longest for a request when
//! another comes, never a token holder's (`slots.rs` says why).
//!
//! Where it runs: with several workers, on a thread of its own, off the workers. With one
//! worker the process is a single thread on purpose (the kernel then looks file descriptors up
//! without reference counts: 0.4-1 µs per request, BENCHMARKS.md), so there the endpoint runs
//! as tasks beside the worker's sessions: a scrape costs the worker the time of one snapshot,
//! and the rate sampler reads the counters once a second (BENCHMARKS.md, "What the admin
//! endpoint costs").

pub mod client;
mod endpoint;
mod http;
pub mod listener;
pub mod metrics;
pub mod rates;
mod routes;
mod slots;
pub mod stats_json;
pub mod table;

use crate::config::admin::AdminConfig;
use crate::shared::Shared;
use crate::supervisor::ReloadHandle;
use endpoint::Endpoint;
pub use listener::{bind, Listener, Peer};
use rates::Counters;
pub use slots::MAX_CONNECTIONS;
use slots::{Admission, Slot, Slots};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// Refusals (503) answered at once; a connection beyond them is closed unanswered, so that a
/// flood of connections to a house full of kept ones costs no more descriptors than this.
const MAX_REFUSING: usize = 8;

/// The endpoint's listening socket in the runtime it serves on.
enum Accepting {
    Tcp(tokio::net::TcpListener),
    /// The socket file is removed when this is dropped: when the endpoint stops, or its task
    /// is ended with the switch.
    Unix(tokio::net::UnixListener, listener::SocketFile),
}

impl Accepting {
    /// `listener` in the current runtime.
    fn new(listener: Listener) -> std::io::Result<Accepting> {
        match listener {
            Listener::Tcp(l) => tokio::net::TcpListener::from_std(l).map(Accepting::Tcp),
            Listener::Unix(l, file) => {
                tokio::net::UnixListener::from_std(l).map(|l| Accepting::Unix(l, file))
            }
        }
    }
}

/// Serves the endpoint on the current tokio runtime until `shared.shutdown` turns true;
/// samples the counters for rates once a second meanwhile.
pub async fn serve(
    shared: Arc<Shared>,
    reloads: ReloadHandle,
    config: AdminConfig,
    listener: Listener,
) {
    let accepting = match Accepting::new(listener) {
        Ok(accepting) => accepting,
        Err(e) => {
            tracing::error!("the admin endpoint cannot start: {e}");
            return;
        }
    };
    let endpoint = Arc::new(Endpoint::new(Arc::clone(&shared), reloads, config.token));
    let sampling = tokio::spawn(sample_rates(Arc::clone(&endpoint)));
    let slots = Slots::new(MAX_CONNECTIONS);
    // The connections' tasks: dropped (ended) with this function when the switch stops, on
    // whichever runtime the endpoint runs.
    let mut connections = JoinSet::new();
    let mut refusing = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        // Ended connections first: a task that ended keeps its memory (the size of its
        // future, some KiB) until it is joined, and under a flood of connections the accepts,
        // always ready, would otherwise outpace the joins (measured: hundreds of MiB).
        while connections.try_join_next().is_some() {}
        while refusing.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            _ = shutdown.wait_for(|stop| *stop) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            Some(_) = refusing.join_next(), if !refusing.is_empty() => continue,
            accepted = accept(&accepting) => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("admin endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let slot = match slots.admit() {
            Admission::Admitted { slot, made_room } => {
                if made_room {
                    tracing::debug!(
                        "admin endpoint: {MAX_CONNECTIONS} connections; closed the one that \
                         waited longest for {peer}"
                    );
                }
                slot
            }
            Admission::Full => {
                if refusing.len() < MAX_REFUSING {
                    refusing.spawn(stream.refuse_busy());
                }
                continue;
            }
        };
        connections.spawn(serve_accepted(Arc::clone(&endpoint), stream, slot, peer));
        // Let the connection just taken read what it was sent before the next is accepted: a
        // flood of new connections then cannot make a change that came with its request at
        // once wait long enough to be the one that makes room.
        tokio::task::yield_now().await;
    }
    sampling.abort();
}

/// Serves the requests of one admitted connection until it ends; `slot` is its place among
/// the kept connections.
async fn serve_accepted(endpoint: Arc<Endpoint>, stream: Accepted, slot: Slot, peer: Peer) {
    let privileged = {
        let endpoint = Arc::clone(&endpoint);
        move |request: &http::Request| endpoint.carries_token(request)
    };
    let answer = |request| {
        let endpoint = Arc::clone(&endpoint);
        async move { routes::answer(&endpoint, request, peer).await }
    };
    match stream {
        Accepted::Tcp(stream) => http::serve_connection(stream, slot, privileged, answer).await,
        Accepted::Unix(stream) => http::serve_connection(stream, slot, privileged, answer).await,
    }
}

/// A connection accepted, of either kind.
enum Accepted {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl Accepted {
    async fn refuse_busy(self) {
        match self {
            Accepted::Tcp(stream) => http::refuse_busy(stream).await,
            Accepted::Unix(stream) => http::refuse_busy(stream).await,
        }
    }
}

async fn accept(accepting: &Accepting) -> std::io::Result<(Accepted, Peer)> {
    match accepting {
        Accepting::Tcp(listener) => {
            let (stream, addr) = listener.accept().await?;
            Ok((Accepted::Tcp(stream), Peer::Tcp(addr)))
        }
        Accepting::Unix(listener, _file) => {
            let (stream, _) = listener.accept().await?;
            let credentials = stream.peer_cred().ok();
            let peer = Peer::Unix {
                uid: credentials.map(|c| c.uid()),
                pid: credentials.and_then(|c| c.pid()),
            };
            Ok((Accepted::Unix(stream), peer))
        }
    }
}

/// Once a second, the counters the rates are computed from.
async fn sample_rates(endpoint: Arc<Endpoint>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let counters = Counters::read(&endpoint.shared);
        endpoint.sampler.record(std::time::Instant::now(), counters);
    }
}

/// The endpoint on a thread of its own with a single-threaded runtime; it ends when the switch
/// stops (`shared.shutdown`).
pub fn spawn_thread(
    shared: Arc<Shared>,
    reloads: ReloadHandle,
    config: AdminConfig,
    listener: Listener,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("tcpvs-admin".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    tracing::error!("the admin endpoint cannot start its runtime: {e}");
                    return;
                }
            };
            runtime.block_on(serve(shared, reloads, config, listener));
        })
}
