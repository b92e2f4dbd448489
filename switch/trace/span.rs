//! One finished request as a span (`otlp`): what the exporter encodes, handed over from the
//! account step. It owns its strings so the data path lends the exporter nothing.

use std::net::SocketAddr;

/// A span of kind SERVER: the switch serving one client request.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    /// The client's span, `None` when the trace started at the switch (a root span).
    pub parent_span_id: Option<[u8; 8]>,
    pub start_unix_nanos: u64,
    pub end_unix_nanos: u64,
    pub method: String,
    /// The status sent to the client; 0 when the client left before any answer.
    pub status: u16,
    /// The virtual service.
    pub service: String,
    pub pool: Option<String>,
    pub server: Option<SocketAddr>,
    /// Bytes sent to the client for this request.
    pub response_bytes: u64,
    /// The client's protocol version: `1.0`, `1.1` or `2`.
    pub protocol: &'static str,
}

impl Span {
    /// Its name, as OpenTelemetry's HTTP conventions name a server span without a route:
    /// the method (`HTTP GET` here, which names the protocol too).
    pub fn name(&self) -> String {
        format!("HTTP {}", self.method)
    }
}

/// Nanoseconds since the Unix epoch (0 before it: a clock set that far back tells nothing).
pub fn unix_nanos(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
