//! Closed-loop clients: each keeps one connection alive to its switch and, as soon as an answer
//! is complete, asks for the next object of the shared trace (the trace is replayed in order,
//! whichever client is free takes the next request, as the paper's simulator fed its cluster).
//! The number of clients is the number of requests in the cluster at any time.

use super::workload::Workload;
use hdrhistogram::Histogram;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the clients are doing; only `Measure` is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    Warmup = 0,
    Settle = 1,
    Measure = 2,
    Done = 3,
}

pub struct Clients {
    shared: Arc<Shared>,
    tasks: JoinSet<Result<(), String>>,
}

struct Shared {
    paths: Vec<Vec<u8>>,
    cursor: AtomicUsize,
    phase: AtomicU8,
    /// Answers completed while measuring.
    measured: AtomicU64,
    /// Answers completed in all phases (the warm-up waits for a number of them).
    completed: AtomicU64,
    /// Latencies of the answers completed while measuring, in microseconds. Shared rather
    /// than per client: most clients are waiting for an answer when the run stops, and are
    /// dropped there.
    latencies: Mutex<Histogram<u64>>,
}

/// The request line and head of every trace entry, built once.
fn request_heads(workload: &Workload) -> Vec<Vec<u8>> {
    workload
        .trace
        .iter()
        .map(|&id| {
            format!(
                "GET {} HTTP/1.1\r\nHost: locality.bench\r\n\r\n",
                Workload::path(id)
            )
            .into_bytes()
        })
        .collect()
}

impl Clients {
    /// `count` clients; client `i` talks to `switches[i % switches.len()]` (as an L4 director
    /// would spread connections over several switches). Every loop ends: a client stops when
    /// the phase is `Done`, and after `max_requests` requests of its own in any case.
    pub fn start(
        workload: &Workload,
        count: usize,
        switches: &[SocketAddr],
        max_requests: u64,
    ) -> Clients {
        let shared = Arc::new(Shared {
            paths: request_heads(workload),
            cursor: AtomicUsize::new(0),
            phase: AtomicU8::new(Phase::Warmup as u8),
            measured: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            latencies: Mutex::new(new_histogram()),
        });
        let mut tasks = JoinSet::new();
        for i in 0..count {
            let addr = switches[i % switches.len()];
            tasks.spawn(client(Arc::clone(&shared), addr, max_requests));
        }
        Clients { shared, tasks }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.shared.phase.store(phase as u8, Ordering::Relaxed);
    }

    pub fn completed(&self) -> u64 {
        self.shared.completed.load(Ordering::Relaxed)
    }

    pub fn measured(&self) -> u64 {
        self.shared.measured.load(Ordering::Relaxed)
    }

    /// A client that failed (its connection refused or broken) ends the run with its reason.
    pub fn failure(&mut self) -> Option<String> {
        while let Some(done) = self.tasks.try_join_next() {
            match done {
                Ok(Err(reason)) => return Some(reason),
                Err(e) if e.is_panic() => return Some(format!("a client panicked: {e}")),
                _ => {}
            }
        }
        None
    }

    /// Stops every client (those waiting for an answer are dropped: their connections close)
    /// and returns the latencies measured.
    pub async fn stop(mut self) -> Result<Histogram<u64>, String> {
        self.set_phase(Phase::Done);
        if let Some(reason) = self.failure() {
            return Err(reason);
        }
        self.tasks.shutdown().await;
        let latencies = self
            .shared
            .latencies
            .lock()
            .map_err(|_| "a client panicked while recording".to_string())?;
        Ok(latencies.clone())
    }
}

fn new_histogram() -> Histogram<u64> {
    // Microseconds, up to 10 minutes, 3 significant digits.
    Histogram::new_with_bounds(1, 600_000_000, 3).unwrap_or_else(|_| Histogram::new(3).unwrap())
}

async fn client(shared: Arc<Shared>, addr: SocketAddr, max_requests: u64) -> Result<(), String> {
    let mut stream = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("client: connecting to the switch at {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    let mut reader = ResponseReader::new();
    for _ in 0..max_requests {
        let phase = shared.phase.load(Ordering::Relaxed);
        if phase == Phase::Done as u8 {
            break;
        }
        let index = shared.cursor.fetch_add(1, Ordering::Relaxed) % shared.paths.len();
        let started = Instant::now();
        stream
            .write_all(&shared.paths[index])
            .await
            .map_err(|e| format!("client: sending to {addr}: {e}"))?;
        reader
            .read_response(&mut stream)
            .await
            .map_err(|e| format!("client: answer from {addr}: {e}"))?;
        shared.completed.fetch_add(1, Ordering::Relaxed);
        // Counted when it ends within the measurement, whenever it started: throughput is
        // answers per second of the window, and latency that of the answers in it.
        if shared.phase.load(Ordering::Relaxed) == Phase::Measure as u8 {
            shared.measured.fetch_add(1, Ordering::Relaxed);
            let micros = started.elapsed().as_micros() as u64;
            if let Ok(mut latencies) = shared.latencies.lock() {
                let _ = latencies.record(micros.max(1));
            }
        }
    }
    Ok(())
}

/// Reads one response (status 200 and a Content-Length body expected) and discards the body.
struct ResponseReader {
    buffer: Vec<u8>,
    filled: usize,
}

impl ResponseReader {
    fn new() -> ResponseReader {
        ResponseReader {
            buffer: vec![0; 64 * 1024],
            filled: 0,
        }
    }

    async fn fill(&mut self, stream: &mut TcpStream) -> Result<(), String> {
        match stream.read(&mut self.buffer[self.filled..]).await {
            Ok(0) => Err("connection closed".into()),
            Ok(n) => {
                self.filled += n;
                Ok(())
            }
            Err(e) => Err(e.to_string()),
        }
    }

    async fn read_response(&mut self, stream: &mut TcpStream) -> Result<(), String> {
        let (head, length) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut fields);
            match response.parse(&self.buffer[..self.filled]) {
                Ok(httparse::Status::Complete(n)) => {
                    if response.code != Some(200) {
                        return Err(format!("status {:?}", response.code));
                    }
                    let length = response
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
                        .ok_or("no Content-Length")?;
                    break (n, length);
                }
                Ok(httparse::Status::Partial) if self.filled < self.buffer.len() => {
                    self.fill(stream).await?
                }
                Ok(httparse::Status::Partial) => return Err("response head too large".into()),
                Err(e) => return Err(format!("bad response head: {e}")),
            }
        };
        let mut body_left: usize = length;
        let in_buffer = (self.filled - head).min(body_left);
        body_left -= in_buffer;
        let used = head + in_buffer;
        self.buffer.copy_within(used..self.filled, 0);
        self.filled -= used;
        while body_left > 0 {
            // The buffer is empty here: whatever is read belongs to this body first.
            self.fill(stream).await?;
            let take = self.filled.min(body_left);
            body_left -= take;
            self.buffer.copy_within(take..self.filled, 0);
            self.filled -= take;
        }
        Ok(())
    }
}
