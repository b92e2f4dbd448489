//! One finished request as a span (`otlp`): what the exporter encodes, handed over from the
//! account step. It names its service and pool through the configuration generation they
//! belong to (one reference count) rather than copies of their names: no allocation per span
//! on the data path, and the exporter reads the names where they are. The generation is seen
//! through [`SpanNames`] (implemented in exchange/account.rs), so tracing does not depend on
//! the run-time state, which depends on the configuration, which reads tracing's settings.

use super::request::MethodName;
use std::net::SocketAddr;
use std::sync::Arc;

/// Where a span's service and pool are named: the generation a request ran under.
pub trait SpanNames: std::fmt::Debug + Send + Sync {
    /// The virtual service number `service`'s name.
    fn service_name(&self, service: usize) -> Option<&str>;
    /// The pool number `pool`'s name.
    fn pool_name(&self, pool: usize) -> Option<&str>;
}

/// A span of kind SERVER: the switch serving one client request.
#[derive(Clone, Debug)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, `None` when the trace started at the switch (a root span).
    pub parent_span_id: Option<[u8; 8]>,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub method: MethodName,
    /// The status sent to the client; 0 when the client left before any answer.
    pub status: u16,
    /// The configuration the request ran under, and its virtual service and pool in it.
    pub names: Arc<dyn SpanNames>,
    pub service: usize,
    pub pool: Option<usize>,
    pub server: Option<SocketAddr>,
    /// Bytes sent to the client for this request.
    pub response_bytes: u64,
    /// The client's protocol version: `1.0`, `1.1` or `2`.
    pub protocol: &'static str,
}

impl Span {
    /// Its name, as OpenTelemetry's HTTP conventions name a server span without a route:
    /// the method (`HTTP GET` here, which names the protocol too).
    pub fn write_name(&self, out: &mut String) {
        out.push_str("HTTP ");
        out.push_str(self.method.as_str());
    }

    /// The virtual service's name.
    pub fn service_name(&self) -> &str {
        self.names.service_name(self.service).unwrap_or("-")
    }

    /// The pool's name, if the request got as far as a pool.
    pub fn pool_name(&self) -> Option<&str> {
        self.names.pool_name(self.pool?)
    }
}

/// Nanoseconds since the Unix epoch (0 before it: a clock set that far back tells nothing).
pub fn unix_nanos(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
