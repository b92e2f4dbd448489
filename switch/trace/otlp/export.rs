//! Spans sent to the OTLP/HTTP collector (`otlp = "http://HOST:PORT"`), never in a request's
//! way: the account step offers each span to a bounded queue with `try_send` (a full queue
//! drops the span and counts it), and a thread of its own, apart from the workers' runtimes,
//! takes them in batches (every [`BATCH_INTERVAL`], or at [`BATCH_MAX`] spans) and POSTs each
//! batch to `/v1/traces` within [`EXPORT_TIMEOUT`]. The thread does not wait in the queue's
//! `recv`, which would have every span wake it (a futex wake and a context switch per request,
//! measured: it doubled a request's instructions); it sleeps until the batch is due, and the
//! data path wakes it only when [`BATCH_MAX`] spans are waiting. A collector that is down, slow or answers an
//! error loses that batch (counted as dropped, as the OpenTelemetry SDK's batch processor drops
//! what it cannot export): spans are never retried, so a collector that stays away costs one
//! connection attempt a batch and bounded memory. A blocking thread rather than a task keeps
//! the export's DNS look-up and socket waits off every worker's event loop; one a second is
//! nothing to schedule.

use super::encode::export_request;
use crate::trace::counters::TraceCounters;
use crate::trace::span::Span;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Spans waiting for export at most (`SwitchSettings::trace_queue`'s default): at 2048 spans
/// of a few hundred bytes, under a megabyte held when the collector is away.
pub const QUEUE_SPANS: usize = 2048;
/// A batch goes when it has this many spans...
pub const BATCH_MAX: usize = 512;
/// ...or this long after its first span came.
pub const BATCH_INTERVAL: Duration = Duration::from_secs(1);
/// How long one batch may take to reach the collector and be answered.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// Where spans go: `http://HOST:PORT[/PREFIX]`, as `OTEL_EXPORTER_OTLP_ENDPOINT` names a
/// collector: the traces go to `PREFIX/v1/traces` there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collector {
    /// `HOST:PORT`, resolved at each batch (a collector that moves is followed).
    pub authority: String,
    /// The path POSTed to.
    pub path: String,
}

impl Collector {
    /// Reads a collector URL; `Err` says what is wrong with it.
    pub fn parse(url: &str) -> Result<Collector, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(format!(
                "otlp must be an http:// URL like \"http://127.0.0.1:4318\" (OTLP/HTTP without TLS), not {url:?}"
            ));
        };
        let (authority, prefix) = match rest.find('/') {
            Some(slash) => rest.split_at(slash),
            None => (rest, ""),
        };
        let port = authority.rsplit_once(':').map(|(_, port)| port);
        if authority.is_empty() || port.is_none_or(|p| p.parse::<u16>().is_err()) {
            return Err(format!(
                "otlp needs a host and a port, like \"http://127.0.0.1:4318\", not {url:?}"
            ));
        }
        if authority.bytes().any(|b| !b.is_ascii_graphic())
            || prefix.bytes().any(|b| !b.is_ascii_graphic())
        {
            return Err(format!("otlp URL has spaces or non-ASCII bytes: {url:?}"));
        }
        Ok(Collector {
            authority: authority.to_string(),
            path: format!("{}/v1/traces", prefix.trim_end_matches('/')),
        })
    }
}

/// The data path's end of the export queue.
#[derive(Debug)]
pub struct Exporter {
    queue: SyncSender<Span>,
    /// Spans in the queue now (about: the thread subtracts what it takes), to wake the thread
    /// when a batch is full.
    waiting: Arc<AtomicUsize>,
    thread: Thread,
    counters: Arc<TraceCounters>,
}

impl Exporter {
    /// Starts the export thread for `collector` with a queue of `capacity` spans.
    pub fn start(
        collector: Collector,
        capacity: usize,
        counters: Arc<TraceCounters>,
    ) -> io::Result<Exporter> {
        let (queue, spans) = mpsc::sync_channel(capacity);
        let waiting = Arc::new(AtomicUsize::new(0));
        let thread_counters = Arc::clone(&counters);
        let thread_waiting = Arc::clone(&waiting);
        let thread = std::thread::Builder::new()
            .name("tcpvs-otlp".to_string())
            .spawn(move || export_batches(&spans, &thread_waiting, &collector, &thread_counters))?
            .thread()
            .clone();
        Ok(Exporter {
            queue,
            waiting,
            thread,
            counters,
        })
    }

    /// Queues `span` for export, or drops it (counted) when the queue is full: never waits.
    pub fn offer(&self, span: Span) {
        match self.queue.try_send(span) {
            Ok(()) => {
                if self.waiting.fetch_add(1, Ordering::Relaxed) + 1 == BATCH_MAX {
                    self.thread.unpark();
                }
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => self.counters.dropped(1),
        }
    }
}

/// The export thread: a batch at least every [`BATCH_INTERVAL`] (none when nothing came), or
/// at once when woken for a full one; until the switch is gone (the queue's sender dropped).
fn export_batches(
    spans: &mpsc::Receiver<Span>,
    waiting: &AtomicUsize,
    collector: &Collector,
    counters: &TraceCounters,
) {
    let mut batch = Vec::with_capacity(BATCH_MAX);
    let mut body = Vec::new();
    loop {
        let due = Instant::now() + BATCH_INTERVAL;
        let mut gone = false;
        loop {
            while batch.len() < BATCH_MAX {
                match spans.try_recv() {
                    Ok(span) => batch.push(span),
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        gone = true;
                        break;
                    }
                }
            }
            let now = Instant::now();
            if gone || batch.len() >= BATCH_MAX || now >= due {
                break;
            }
            std::thread::park_timeout(due - now);
        }
        waiting.fetch_sub(batch.len(), Ordering::Relaxed);
        if !batch.is_empty() {
            send_batch(&batch, &mut body, collector, counters);
            batch.clear();
        }
        if gone {
            return;
        }
    }
}

/// Encodes and POSTs one batch; counts its spans as exported or dropped.
fn send_batch(batch: &[Span], body: &mut Vec<u8>, collector: &Collector, counters: &TraceCounters) {
    body.clear();
    export_request(body, batch);
    let n = batch.len() as u64;
    match post(collector, body) {
        Ok(status) if (200..300).contains(&status) => counters.exported(n),
        Ok(status) => {
            tracing::debug!(status, "the OTLP collector refused a batch of {n} spans");
            counters.dropped(n);
        }
        Err(e) => {
            tracing::debug!("a batch of {n} spans not exported: {e}");
            counters.dropped(n);
        }
    }
}

/// POSTs `body` to the collector on a connection of its own; the answer's status. Every step
/// within what is left of [`EXPORT_TIMEOUT`].
fn post(collector: &Collector, body: &[u8]) -> io::Result<u16> {
    let deadline = Instant::now() + EXPORT_TIMEOUT;
    let address = collector
        .authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other("the collector's name has no address"))?;
    let mut stream = TcpStream::connect_timeout(&address, EXPORT_TIMEOUT)?;
    let _ = stream.set_nodelay(true);
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        collector.path,
        collector.authority,
        body.len()
    );
    stream.set_write_timeout(Some(left(deadline)?))?;
    stream.write_all(head.as_bytes())?;
    stream.write_all(body)?;
    // The status line is all that is read of the answer.
    let mut answer = [0u8; 256];
    let mut got = 0;
    while !answer[..got].contains(&b'\n') && got < answer.len() {
        stream.set_read_timeout(Some(left(deadline)?))?;
        match stream.read(&mut answer[got..])? {
            0 => break,
            n => got += n,
        }
    }
    status_of(&answer[..got])
        .ok_or_else(|| io::Error::other("the collector's answer has no HTTP status line"))
}

/// The time left until `deadline`, an error once it passed (a zero timeout means none).
fn left(deadline: Instant) -> io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(io::ErrorKind::TimedOut.into()),
    }
}

/// The status of an HTTP/1.x status line: `HTTP/1.1 200 OK`.
fn status_of(line: &[u8]) -> Option<u16> {
    let rest = line.strip_prefix(b"HTTP/1.")?.get(2..5)?;
    std::str::from_utf8(rest).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names nothing: these tests do not encode.
    #[derive(Debug)]
    struct NoNames;

    impl crate::trace::span::SpanNames for NoNames {
        fn service_name(&self, _: usize) -> Option<&str> {
            None
        }

        fn pool_name(&self, _: usize) -> Option<&str> {
            None
        }
    }

    fn span() -> Span {
        Span {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent_span_id: None,
            start_unix_nanos: 1,
            end_unix_nanos: 2,
            method: crate::trace::request::MethodName::new(b"GET"),
            status: 200,
            names: Arc::new(NoNames),
            service: 0,
            pool: None,
            server: None,
            response_bytes: 0,
            protocol: "1.1",
        }
    }

    #[test]
    fn collector_urls() {
        let c = Collector::parse("http://127.0.0.1:4318").expect("valid");
        assert_eq!(
            (c.authority.as_str(), c.path.as_str()),
            ("127.0.0.1:4318", "/v1/traces")
        );
        let c = Collector::parse("http://otel.local:4318/base/").expect("valid");
        assert_eq!(
            (c.authority.as_str(), c.path.as_str()),
            ("otel.local:4318", "/base/v1/traces")
        );
        for bad in [
            "https://x:4318",
            "127.0.0.1:4318",
            "http://x",
            "http://:",
            "http://x:y",
            "http://a b:1",
        ] {
            assert!(Collector::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts() {
        let counters = Arc::new(TraceCounters::default());
        let (queue, _spans) = mpsc::sync_channel(4);
        // No thread takes from this queue: exactly what does not fit is dropped.
        let exporter = Exporter {
            queue,
            waiting: Arc::default(),
            thread: std::thread::current(),
            counters: Arc::clone(&counters),
        };
        for _ in 0..10 {
            exporter.offer(span());
        }
        assert_eq!(counters.read().trace_spans_dropped, 6);
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(status_of(b"HTTP/1.0 503 x"), Some(503));
        assert_eq!(status_of(b"junk"), None);
    }
}
