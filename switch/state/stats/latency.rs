//! A latency histogram that every worker records into at once: one relaxed atomic add per
//! value, read as percentiles and Prometheus buckets by the admin endpoint.
//!
//! Hand-written because the crates do not fit a shared, always-on recorder: `hdrhistogram`
//! records through `&mut` (a lock per request, or a recorder per thread that the reader must
//! synchronise with), and `prometheus-client`'s histogram takes a lock and walks its bucket
//! list on every observation. Here the bucket is computed from the value (a base-10 log and one
//! division) and bumped with `fetch_add`; reading sums the buckets.
//!
//! Buckets are log-linear in microseconds: 1 µs wide below 100 µs, then 90 per decade (10
//! µs wide from 100 µs, 100 µs wide from 1 ms, ...), so a percentile is within 5% of the
//! truth (the bucket's middle is reported), and every Prometheus bound of the 1-2.5-5 series
//! from 100 µs to 100 s falls on a bucket edge, so those cumulative counts are exact. 641
//! buckets, 5 KiB per histogram.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Values up to this many microseconds get their own bucket; above, the overflow bucket.
const LINEAR_BELOW: u64 = 100;
const PER_DECADE: usize = 90;
/// Decades above `LINEAR_BELOW`: 100 µs .. 100 s.
const DECADES: usize = 6;
const BUCKETS: usize = LINEAR_BELOW as usize + DECADES * PER_DECADE + 1;

/// Upper bounds (seconds) of the buckets shown to Prometheus: each is an edge of ours.
pub const PROMETHEUS_BOUNDS: [f64; 19] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 25.0, 50.0, 100.0,
];

pub struct Latency {
    buckets: Box<[AtomicU64; BUCKETS]>,
    /// The sum of every value recorded, in microseconds (Prometheus `_sum`, averages).
    sum_us: AtomicU64,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            buckets: Box::new(std::array::from_fn(|_| AtomicU64::new(0))),
            sum_us: AtomicU64::new(0),
        }
    }
}

impl std::fmt::Debug for Latency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Latency")
            .field("count", &self.read().count())
            .finish()
    }
}

/// The bucket of `micros`. Buckets hold (lower, upper]: a value equal to an edge falls in the
/// bucket below it, as Prometheus' `le` ("less or equal") counts it.
fn bucket_of(micros: u64) -> usize {
    let v = micros.saturating_sub(1);
    if v < LINEAR_BELOW {
        return v as usize;
    }
    let decade = v.ilog10() as usize; // 2 for 100..=999
    if decade >= 2 + DECADES {
        return BUCKETS - 1;
    }
    let unit = 10u64.pow(decade as u32 - 1);
    LINEAR_BELOW as usize + (decade - 2) * PER_DECADE + (v / unit) as usize - 10
}

/// The bucket's range in microseconds: (lower, upper].
fn bounds_of(bucket: usize) -> (u64, u64) {
    if bucket < LINEAR_BELOW as usize {
        return (bucket as u64, bucket as u64 + 1);
    }
    if bucket >= BUCKETS - 1 {
        return (10u64.pow(2 + DECADES as u32), u64::MAX);
    }
    let above = bucket - LINEAR_BELOW as usize;
    let decade = above / PER_DECADE + 2;
    let unit = 10u64.pow(decade as u32 - 1);
    let lower = (above % PER_DECADE + 10) as u64 * unit;
    (lower, lower + unit)
}

impl Latency {
    pub fn record(&self, elapsed: Duration) {
        let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
        self.record_micros(micros);
    }

    pub fn record_micros(&self, micros: u64) {
        self.buckets[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
        self.sum_us.fetch_add(micros, Ordering::Relaxed);
    }

    /// A copy of the counts (each bucket read once; recordings meanwhile land or not).
    pub fn read(&self) -> LatencySnapshot {
        LatencySnapshot {
            sum_us: self.sum_us.load(Ordering::Relaxed),
            counts: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
        }
    }
}

/// Bucket counts read at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencySnapshot {
    counts: Vec<u64>,
    /// The sum of the values, in microseconds.
    pub sum_us: u64,
}

impl LatencySnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The value below which `quantile` (0..=1) of the recordings lie, in microseconds: the
    /// middle of the bucket that holds it. `None` when nothing was recorded.
    pub fn quantile_micros(&self, quantile: f64) -> Option<f64> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        // The rank of the recording wanted, 1-based: the p50 of 4 values is the 2nd.
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (lower, upper) = bounds_of(bucket);
                if bucket == BUCKETS - 1 {
                    // Beyond the last edge: the edge is all that is known.
                    return Some(lower as f64);
                }
                return Some((lower + upper) as f64 / 2.0);
            }
        }
        None
    }

    /// Recordings at or below each of [`PROMETHEUS_BOUNDS`], cumulative; then the total.
    pub fn cumulative_at_bounds(&self) -> ([u64; PROMETHEUS_BOUNDS.len()], u64) {
        let mut out = [0u64; PROMETHEUS_BOUNDS.len()];
        let mut seen = 0;
        let mut next = 0;
        for (bucket, &n) in self.counts.iter().enumerate() {
            let (_, upper) = bounds_of(bucket);
            // Every bound this bucket's upper edge passes gets the count before the bucket.
            while next < out.len() && (upper as f64) > PROMETHEUS_BOUNDS[next] * 1e6 + 0.5 {
                out[next] = seen;
                next += 1;
            }
            seen += n;
        }
        while next < out.len() {
            out[next] = seen;
            next += 1;
        }
        (out, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_tile_the_range_without_gaps() {
        let mut previous_upper = 0;
        for bucket in 0..BUCKETS - 1 {
            let (lower, upper) = bounds_of(bucket);
            assert_eq!(lower, previous_upper, "bucket {bucket}");
            assert!(upper > lower);
            previous_upper = upper;
        }
        assert_eq!(previous_upper, 100_000_000);
    }

    #[test]
    fn a_value_lands_in_the_bucket_whose_range_holds_it() {
        for micros in (1..2_000_000u64)
            .step_by(7)
            .chain([1, 100, 101, 250, 999, 1000, 1001])
        {
            let (lower, upper) = bounds_of(bucket_of(micros));
            assert!(
                lower < micros && micros <= upper,
                "{micros}: ({lower}, {upper}]"
            );
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket_of(100_000_001), BUCKETS - 1);
    }

    #[test]
    fn every_prometheus_bound_is_a_bucket_edge() {
        for bound in PROMETHEUS_BOUNDS {
            let micros = (bound * 1e6).round() as u64;
            let (_, upper) = bounds_of(bucket_of(micros));
            assert_eq!(upper, micros, "{bound}s");
        }
    }

    #[test]
    fn quantiles_are_within_five_percent() {
        let latency = Latency::default();
        // 1..=1000 ms, one each: p50 = 500 ms, p90 = 900 ms, p99 = 990 ms.
        for ms in 1..=1000u64 {
            latency.record_micros(ms * 1000);
        }
        let snap = latency.read();
        assert_eq!(snap.count(), 1000);
        for (q, want) in [(0.5, 500_000.0), (0.9, 900_000.0), (0.99, 990_000.0)] {
            let got = snap.quantile_micros(q).unwrap();
            assert!((got - want).abs() / want < 0.05, "p{q}: {got} vs {want}");
        }
        assert_eq!(Latency::default().read().quantile_micros(0.5), None);
    }

    #[test]
    fn cumulative_counts_at_the_bounds_are_exact() {
        let latency = Latency::default();
        for micros in [50, 100, 101, 250, 251, 1000, 4_000_000, 200_000_000] {
            latency.record_micros(micros);
        }
        let (cumulative, total) = latency.read().cumulative_at_bounds();
        assert_eq!(total, 8);
        assert_eq!(cumulative[0], 2, "<= 100us");
        assert_eq!(cumulative[1], 4, "<= 250us");
        assert_eq!(cumulative[3], 6, "<= 1ms");
        assert_eq!(cumulative[14], 7, "<= 5s");
        assert_eq!(
            cumulative[18], 7,
            "<= 100s: the 200 s value is only in +Inf"
        );
    }
}
