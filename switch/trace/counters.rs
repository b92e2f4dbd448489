//! The switch-wide counters of span export, declared once: the atomics the exporter and the
//! data path bump, and [`TraceCounts`], the values read at once, which is what the snapshot
//! holds, what `/stats` shows (flattened: top-level keys) and what `/metrics` lists
//! ([`TraceCounts::metrics`]). A counter added here shows everywhere.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// The atomics.
#[derive(Debug, Default)]
pub struct TraceCounters {
    dropped: AtomicU64,
    exported: AtomicU64,
}

impl TraceCounters {
    /// `n` spans lost: the queue was full, or their batch could not be delivered.
    pub fn dropped(&self, n: u64) {
        self.dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` spans the collector took (a 2xx answer to their batch).
    pub fn exported(&self, n: u64) {
        self.exported.fetch_add(n, Ordering::Relaxed);
    }

    pub fn read(&self) -> TraceCounts {
        TraceCounts {
            trace_spans_dropped: self.dropped.load(Ordering::Relaxed),
            trace_spans_exported: self.exported.load(Ordering::Relaxed),
        }
    }
}

/// The counts as `/stats` names them (top-level keys).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TraceCounts {
    /// Spans dropped: the export queue was full, or the collector did not take their batch
    /// (down, slow past the timeout, or answering an error).
    pub trace_spans_dropped: u64,
    /// Spans the collector took.
    pub trace_spans_exported: u64,
}

impl TraceCounts {
    /// The Prometheus families: (name without `_total`, help, value), all counters.
    pub fn metrics(&self) -> [(&'static str, &'static str, u64); 2] {
        [
            (
                "tcpvs_trace_spans_dropped",
                "Spans dropped: export queue full, or their batch not taken by the collector",
                self.trace_spans_dropped,
            ),
            (
                "tcpvs_trace_spans_exported",
                "Spans the OTLP collector took",
                self.trace_spans_exported,
            ),
        ]
    }
}
