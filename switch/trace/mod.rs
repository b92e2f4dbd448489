//! Tracing (issue 48): a request's W3C trace context carried on with the switch's own span
//! (`trace = "w3c"`), its `X-Request-Id` (`request_id = true`), both in the access log, and a
//! span per request exported over OTLP/HTTP (`otlp`).
//!
//! Where the data path meets it, in the order a request goes:
//! - `exchange::serve` asks [`Tracing::begin`] for the request's [`RequestTrace`] before
//!   routing (one branch when everything is off: the plain path pays nothing else);
//! - the head written for the server (http/rewrite.rs, the same for HTTP/1.1 and HTTP/2
//!   servers and whatever the client spoke) leaves out the client's `traceparent` and
//!   `X-Request-Id` and writes the trace's ([`RequestTrace::for_each_field`]); `tracestate`
//!   passes as any field;
//! - the account step (exchange/account.rs) puts both ids in the log line and hands the
//!   finished span to [`Tracing::finish`], which queues it for the exporter without waiting.
//!
//! One concept per file: `ids.rs` random ids, `context.rs` the `traceparent`, `request_id.rs`
//! the `X-Request-Id`, `request.rs` what a request carries, `span.rs` a finished span,
//! `counters.rs` the export counters, `otlp/` the encoder and the export thread.

pub mod context;
pub mod counters;
pub mod ids;
pub mod otlp;
pub mod request;
pub mod request_id;
pub mod span;

use crate::http::RequestHead;
use counters::{TraceCounters, TraceCounts};
use otlp::collector::Collector;
use otlp::export::Exporter;
pub use request::RequestTrace;
use span::{Span, SpanNames};
use std::net::SocketAddr;
use std::sync::Arc;

/// `[switch] trace`, `request_id`, `otlp` as the switch runs with them (process settings: a
/// reload that changes them asks for a restart).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceSettings {
    /// `trace = "w3c"`.
    pub w3c: bool,
    /// `request_id = true`.
    pub request_id: bool,
    /// `otlp = "http://..."` (only with `w3c`: config/trace.rs).
    pub otlp: Option<Collector>,
    /// Spans the export queue holds at most: [`otlp::export::QUEUE_SPANS`]; not a key of the
    /// rule file, a knob for tests that need a full queue.
    pub queue_spans: usize,
}

impl TraceSettings {
    pub fn off() -> TraceSettings {
        TraceSettings {
            queue_spans: otlp::export::QUEUE_SPANS,
            ..TraceSettings::default()
        }
    }
}

/// Tracing as the data plane shares it (`Shared::tracing`).
#[derive(Debug)]
pub struct Tracing {
    w3c: bool,
    request_id: bool,
    exporter: Option<Exporter>,
    counters: Arc<TraceCounters>,
}

/// What the account step knows of a finished request, for its span.
pub struct Finished<'a, N> {
    /// The configuration it ran under, and its service and pool there (indexes).
    pub generation: &'a Arc<N>,
    pub service: usize,
    pub pool: Option<usize>,
    pub server: Option<SocketAddr>,
    pub status: u16,
    pub response_bytes: u64,
}

impl Tracing {
    /// Tracing with `settings`; starts the export thread when there is a collector.
    pub fn new(settings: &TraceSettings) -> std::io::Result<Tracing> {
        let counters = Arc::new(TraceCounters::default());
        let exporter = match &settings.otlp {
            Some(collector) => Some(Exporter::start(
                collector.clone(),
                settings.queue_spans.max(1),
                Arc::clone(&counters),
            )?),
            None => None,
        };
        Ok(Tracing {
            w3c: settings.w3c,
            request_id: settings.request_id,
            exporter,
            counters,
        })
    }

    /// The trace of the request `head` (bytes in `buf`) that came in `protocol` (`1.1`,
    /// `2`): `None` when tracing and request ids are off. Boxed: the outcome that carries it
    /// to the account step stays one word wide.
    #[inline]
    pub fn begin(
        &self,
        (head, buf): (&RequestHead, &[u8]),
        protocol: &'static str,
    ) -> Option<Box<RequestTrace>> {
        if !(self.w3c || self.request_id) {
            return None;
        }
        let on = (self.w3c, self.request_id, self.exporter.is_some());
        Some(Box::new(RequestTrace::begin(on, (head, buf), protocol)))
    }

    /// Queues the span of a finished request for export (with `otlp`); never waits.
    pub fn finish<N: SpanNames + 'static>(&self, trace: &RequestTrace, done: &Finished<'_, N>) {
        let (Some(exporter), Some(context)) = (&self.exporter, &trace.context) else {
            return;
        };
        exporter.offer(Span {
            trace_id: context.trace_id,
            span_id: context.span_id,
            parent_span_id: context.parent_span_id,
            start_unix_nanos: span::unix_nanos(trace.started),
            end_unix_nanos: span::unix_nanos(std::time::SystemTime::now()),
            method: trace.method,
            status: done.status,
            names: Arc::clone(done.generation) as Arc<dyn SpanNames>,
            service: done.service,
            pool: done.pool,
            server: done.server,
            response_bytes: done.response_bytes,
            protocol: trace.protocol,
        });
    }

    /// The export counters now.
    pub fn counts(&self) -> TraceCounts {
        self.counters.read()
    }
}
