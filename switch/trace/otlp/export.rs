//! Spans sent to the OTLP/HTTP collector (`otlp = "http://HOST:PORT"`), never in a request's
//! way: the account step offers each span to a bounded queue with `try_send` (a full queue
//! drops the span and counts it), and a thread of its own, apart from the workers' runtimes,
//! takes them in batches (every [`BATCH_INTERVAL`], or at [`BATCH_MAX`] spans) and POSTs each
//! batch to `/v1/traces` within 2 s (`post::EXPORT_TIMEOUT`), over a connection kept between batches
//! (post.rs). The thread does not wait in the queue's
//! `recv`, which would have every span wake it (a futex wake and a context switch per request,
//! measured: it doubled a request's instructions); it sleeps until the batch is due, and the
//! data path wakes it only when [`BATCH_MAX`] spans are waiting. A collector that is down, slow or answers an
//! error loses that batch (counted as dropped, as the OpenTelemetry SDK's batch processor drops
//! what it cannot export): spans are never retried (but for one batch that met a kept
//! connection the collector had closed, sent once more on a new one), so a collector that
//! stays away costs one connection attempt a batch and bounded memory. A blocking thread rather than a task keeps
//! the export's DNS look-up and socket waits off every worker's event loop; one a second is
//! nothing to schedule.

use super::collector::Collector;
use super::encode::Encoder;
use super::post::CollectorLink;
use crate::trace::counters::TraceCounters;
use crate::trace::span::Span;
use std::io;
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
    let mut encoder = Encoder::default();
    let mut link = CollectorLink::default();
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
            send_batch(&batch, (&mut encoder, &mut link), collector, counters);
            batch.clear();
        }
        if gone {
            return;
        }
    }
}

/// Encodes and POSTs one batch; counts its spans as exported or dropped.
fn send_batch(
    batch: &[Span],
    (encoder, link): (&mut Encoder, &mut CollectorLink),
    collector: &Collector,
    counters: &TraceCounters,
) {
    let body = encoder.export_request(batch);
    let n = batch.len() as u64;
    match link.post(collector, body) {
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
}
