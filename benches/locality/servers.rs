//! Emulated cache-limited web servers on loopback, all serving one catalogue. Each has an LRU
//! memory cache of a set size, a CPU and a disk arm (`resource.rs`): a hit queues for the CPU;
//! a miss first queues for the disk (one arm per server: misses wait for each other), then for
//! the CPU. Costs are virtual time (`costs.rs`), so a server's speed is the model's, not this
//! machine's. Answers carry `X-Cache: hit` or `miss` and `X-Served-By`, and a body of the
//! object's size.
//!
//! Every cost is multiplied by the cluster's cost scale: 1 while measuring, a fraction during
//! the warm-up (`Cluster::set_cost_scale`), so that caches and the switch's tables reach their
//! steady state in seconds while a miss still costs what it costs against a hit, and a module
//! that measures the servers sees the ratios it will see measured. 0 makes requests free.

use super::cache::ByteLru;
use super::costs::Costs;
use super::resource::FifoResource;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// Counters of one server, never reset: the harness reads differences.
#[derive(Default)]
pub struct ServerCounters {
    pub requests: AtomicU64,
    pub hits: AtomicU64,
    pub bytes: AtomicU64,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ServerSnapshot {
    pub requests: u64,
    pub hits: u64,
    pub bytes: u64,
    pub cpu_busy: Duration,
    pub disk_busy: Duration,
}

impl ServerSnapshot {
    pub fn since(&self, earlier: &ServerSnapshot) -> ServerSnapshot {
        ServerSnapshot {
            requests: self.requests - earlier.requests,
            hits: self.hits - earlier.hits,
            bytes: self.bytes - earlier.bytes,
            cpu_busy: self.cpu_busy.saturating_sub(earlier.cpu_busy),
            disk_busy: self.disk_busy.saturating_sub(earlier.disk_busy),
        }
    }
}

struct Server {
    addr: SocketAddr,
    cache: Mutex<ByteLru>,
    cpu: FifoResource,
    disk: FifoResource,
    counters: ServerCounters,
}

pub struct Cluster {
    servers: Vec<Arc<Server>>,
    cost_scale: Arc<AtomicU64>,
    tasks: JoinSet<()>,
}

/// What every server of a cluster shares.
struct Shared {
    sizes: Arc<Vec<u64>>,
    costs: Costs,
    /// The bits of an `f64`: what every cost is multiplied by now.
    cost_scale: Arc<AtomicU64>,
}

impl Cluster {
    /// `count` servers on free loopback ports, each with a cache of `cache_bytes`. A cache that
    /// can hold the whole catalogue starts with all of it (the all-hits ceiling: no warm-up
    /// could otherwise bring every object to every server).
    pub async fn start(
        count: usize,
        cache_bytes: u64,
        sizes: Arc<Vec<u64>>,
        costs: Costs,
    ) -> std::io::Result<Cluster> {
        let cost_scale = Arc::new(AtomicU64::new(0f64.to_bits()));
        let shared = Arc::new(Shared {
            sizes,
            costs,
            cost_scale: Arc::clone(&cost_scale),
        });
        let mut servers = Vec::with_capacity(count);
        let mut tasks = JoinSet::new();
        for _ in 0..count {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let mut cache = ByteLru::new(cache_bytes);
            if shared.sizes.iter().sum::<u64>() <= cache_bytes {
                for (id, &size) in shared.sizes.iter().enumerate() {
                    cache.access(id as u32, size);
                }
            }
            let server = Arc::new(Server {
                addr: listener.local_addr()?,
                cache: Mutex::new(cache),
                cpu: FifoResource::new(),
                disk: FifoResource::new(),
                counters: ServerCounters::default(),
            });
            servers.push(Arc::clone(&server));
            let shared = Arc::clone(&shared);
            tasks.spawn(accept_loop(listener, server, shared));
        }
        Ok(Cluster {
            servers,
            cost_scale,
            tasks,
        })
    }

    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(|s| s.addr).collect()
    }

    /// Every cost times `scale` from now on: 1 in the measured phases, a fraction (or 0: free)
    /// in the warm-up. A cluster starts free.
    pub fn set_cost_scale(&self, scale: f64) {
        self.cost_scale
            .store(scale.max(0.0).to_bits(), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Vec<ServerSnapshot> {
        self.servers
            .iter()
            .map(|s| ServerSnapshot {
                requests: s.counters.requests.load(Ordering::Relaxed),
                hits: s.counters.hits.load(Ordering::Relaxed),
                bytes: s.counters.bytes.load(Ordering::Relaxed),
                cpu_busy: s.cpu.busy(),
                disk_busy: s.disk.busy(),
            })
            .collect()
    }

    /// Copies per cached object: the objects all caches hold over the distinct ones (1.0: no
    /// object is cached twice; the cluster's memory holds as much as it can).
    pub fn copies_per_object(&self) -> f64 {
        let mut distinct = std::collections::HashSet::new();
        let mut total = 0usize;
        for server in &self.servers {
            if let Ok(cache) = server.cache.lock() {
                for id in cache.objects() {
                    total += 1;
                    distinct.insert(id);
                }
            }
        }
        total as f64 / distinct.len().max(1) as f64
    }

    pub async fn stop(mut self) {
        self.tasks.shutdown().await;
    }
}

async fn accept_loop(listener: TcpListener, server: Arc<Server>, shared: Arc<Shared>) {
    // The connections end with the accept loop (JoinSet drops abort them).
    let mut connections = JoinSet::new();
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let _ = stream.set_nodelay(true);
                connections.spawn(serve(stream, Arc::clone(&server), Arc::clone(&shared)));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
        // Reap finished connections so the set does not grow with every connection ever made.
        while connections.try_join_next().is_some() {}
    }
}

/// Zeros to send as bodies: what the bytes are does not matter, only how many.
static BODY: [u8; 64 * 1024] = [0; 64 * 1024];

/// The object id of a `/o/ID` target.
fn object_of(target: &[u8]) -> Option<u32> {
    std::str::from_utf8(target.strip_prefix(b"/o/")?)
        .ok()?
        .parse()
        .ok()
}

async fn serve(mut stream: TcpStream, server: Arc<Server>, shared: Arc<Shared>) {
    let mut buffer = vec![0u8; 16 * 1024];
    let mut filled = 0;
    let mut head = Vec::with_capacity(256);
    loop {
        // One request head (no bodies: the clients send GETs only).
        let (consumed, object) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut fields);
            match request.parse(&buffer[..filled]) {
                Ok(httparse::Status::Complete(n)) => {
                    break (n, request.path.and_then(|p| object_of(p.as_bytes())));
                }
                Ok(httparse::Status::Partial) if filled < buffer.len() => {}
                _ => return,
            }
            match stream.read(&mut buffer[filled..]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => filled += n,
            }
        };
        buffer.copy_within(consumed..filled, 0);
        filled -= consumed;
        let Some((id, size)) =
            object.and_then(|id| shared.sizes.get(id as usize).map(|&s| (id, s)))
        else {
            let _ = stream
                .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await;
            continue;
        };
        let hit = server
            .cache
            .lock()
            .map(|mut cache| cache.access(id, size))
            .unwrap_or(false);
        let scale = f64::from_bits(shared.cost_scale.load(Ordering::Relaxed));
        if scale > 0.0 {
            let mut ready = Instant::now();
            if !hit {
                let service = shared.costs.disk(size).mul_f64(scale);
                ready = server.disk.reserve(ready, service);
                tokio::time::sleep_until(ready).await;
                server.disk.served(service);
            }
            let service = shared.costs.cpu(size).mul_f64(scale);
            let done = server.cpu.reserve(ready, service);
            tokio::time::sleep_until(done).await;
            server.cpu.served(service);
        }
        server.counters.requests.fetch_add(1, Ordering::Relaxed);
        server.counters.bytes.fetch_add(size, Ordering::Relaxed);
        if hit {
            server.counters.hits.fetch_add(1, Ordering::Relaxed);
        }
        head.clear();
        head.extend_from_slice(b"HTTP/1.1 200 OK\r\nContent-Length: ");
        head.extend_from_slice(size.to_string().as_bytes());
        head.extend_from_slice(if hit {
            b"\r\nX-Cache: hit\r\nX-Served-By: ".as_slice()
        } else {
            b"\r\nX-Cache: miss\r\nX-Served-By: ".as_slice()
        });
        head.extend_from_slice(server.addr.to_string().as_bytes());
        head.extend_from_slice(b"\r\n\r\n");
        if stream.write_all(&head).await.is_err() {
            return;
        }
        let mut left = size as usize;
        while left > 0 {
            let n = left.min(BODY.len());
            if stream.write_all(&BODY[..n]).await.is_err() {
                return;
            }
            left -= n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asks `addr` for object `id` and reads the answer to its end.
    async fn get(addr: SocketAddr, id: u32, size: u64) -> String {
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        let request = format!("GET /o/{id} HTTP/1.1\r\nHost: x\r\n\r\n");
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut answer = Vec::new();
        let mut buffer = [0u8; 4096];
        while !answer.ends_with(b"\r\n\r\n") || answer.len() < size as usize {
            let n = stream.read(&mut buffer).await.expect("read");
            assert!(
                n > 0,
                "closed early: {:?}",
                String::from_utf8_lossy(&answer)
            );
            answer.extend_from_slice(&buffer[..n]);
            if let Some(end) = answer.windows(4).position(|w| w == b"\r\n\r\n") {
                if answer.len() >= end + 4 + size as usize {
                    answer.truncate(end + 4);
                    break;
                }
            }
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn the_cost_scale_multiplies_every_cost_and_zero_makes_requests_free() {
        // A cache of 64 KiB holds objects 0 and 1, not the catalogue (so it starts empty).
        let sizes = Arc::new(vec![8192u64, 4096, 100_000]);
        let costs = Costs::paper(1.0);
        let cluster = Cluster::start(1, 1 << 16, Arc::clone(&sizes), costs)
            .await
            .expect("cluster");
        let addr = cluster.addrs()[0];
        // A new cluster is free: a miss counts, and costs nothing.
        assert!(get(addr, 0, 8192).await.contains("X-Cache: miss"));
        let free = cluster.snapshot()[0];
        assert_eq!((free.requests, free.hits), (1, 0));
        assert_eq!(
            (free.cpu_busy, free.disk_busy),
            (Duration::ZERO, Duration::ZERO)
        );
        // A quarter: a miss costs a quarter of its disk and CPU time, a hit of its CPU time.
        cluster.set_cost_scale(0.25);
        assert!(get(addr, 1, 4096).await.contains("X-Cache: miss"));
        assert!(get(addr, 0, 8192).await.contains("X-Cache: hit"));
        let quarter = cluster.snapshot()[0].since(&free);
        assert_eq!((quarter.requests, quarter.hits), (2, 1));
        assert_eq!(quarter.disk_busy, costs.disk(4096).mul_f64(0.25));
        assert_eq!(
            quarter.cpu_busy,
            costs.cpu(4096).mul_f64(0.25) + costs.cpu(8192).mul_f64(0.25)
        );
        cluster.stop().await;
    }
}
