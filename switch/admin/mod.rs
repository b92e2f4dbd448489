//! The admin endpoint: HTTP/1.1 on `[admin] listen`. It reads snapshots of the shared counters
//! and states (`/stats`, `/metrics`, the monitor page at `/`) and writes only through
//! `control::apply` (`PUT /pools/{pool}/servers/{addr}`), so it never takes a lock the data
//! path waits on longer than a status update. The `tcpvs list`/`set-weight`/`set-state`/
//! `reload` commands talk to it through [`client`].
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
pub mod metrics;
pub mod rates;
mod routes;
pub mod stats_json;
pub mod table;

use crate::config::admin::AdminConfig;
use crate::shared::Shared;
use endpoint::Endpoint;
use rates::Counters;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// Connections served at once. One more is answered 503 and closed at once, so that a caller
/// learns the endpoint is busy instead of waiting in the backlog; idle connections are closed
/// after a few seconds (http.rs), so a full house does not last.
pub const MAX_CONNECTIONS: usize = 64;

/// Binds the admin listener now, so that a taken address fails the start with a clear error.
pub fn bind(config: &AdminConfig) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(config.listen).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("the admin endpoint cannot listen on {}: {e}", config.listen),
        )
    })?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves the endpoint on the current tokio runtime until `shared.shutdown` turns true;
/// samples the counters for rates once a second meanwhile.
pub async fn serve(shared: Arc<Shared>, config: AdminConfig, listener: std::net::TcpListener) {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("the admin endpoint cannot start: {e}");
            return;
        }
    };
    let endpoint = Arc::new(Endpoint::new(Arc::clone(&shared), config.token));
    let sampling = tokio::spawn(sample_rates(Arc::clone(&endpoint)));
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // The connections' tasks: dropped (ended) with this function when the switch stops, on
    // whichever runtime the endpoint runs.
    let mut connections = JoinSet::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = shutdown.wait_for(|stop| *stop) => break,
        };
        let (stream, peer) = match accepted {
            Ok(pair) => pair,
            Err(e) => {
                tracing::warn!("admin endpoint: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            connections.spawn(http::refuse_busy(stream));
            continue;
        };
        let endpoint = Arc::clone(&endpoint);
        connections.spawn(async move {
            let _permit = permit;
            http::serve_connection(stream, |request| {
                let endpoint = Arc::clone(&endpoint);
                async move { routes::answer(&endpoint, request, peer).await }
            })
            .await;
        });
    }
    sampling.abort();
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
    config: AdminConfig,
    listener: std::net::TcpListener,
) -> io::Result<std::thread::JoinHandle<()>> {
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
            runtime.block_on(serve(shared, config, listener));
        })
}
