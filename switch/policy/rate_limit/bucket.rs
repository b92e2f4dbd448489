//! The bucket of one key: GCRA, the generic cell rate algorithm (ATM's, as used by Redis Cell
//! and `redis-rate`), which keeps a single number per key, its theoretical arrival time (`tat`):
//! the moment the bucket would be full again if no more requests came.
//!
//! With the emission interval `T = per / count` and the tolerance `(burst - 1) * T`, a request
//! at `now` starts from `max(tat, now)` and is admitted when that is at most the tolerance
//! ahead of `now`, which then moves `tat` on by `T`. A fresh key (`tat <= now`) thus takes
//! `burst` requests at once, then one every `T`; a refused request changes nothing, and it may
//! come back after exactly `max(tat, now) - now - tolerance`.

use super::{Nanos, Rate};

/// The fixed part of a limit's buckets: how far one request moves `tat`, and how far ahead
/// of now `tat` may be for a request to be admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Gcra {
    interval: Nanos,
    tolerance: Nanos,
}

impl Gcra {
    /// The bucket of `rate` with room for `burst` requests. The interval is rounded up to the
    /// nanosecond, so that a limit never admits more than its rate; a count or a burst of 0
    /// (which the configuration refuses) is taken as 1 rather than dividing by it.
    pub fn new(rate: &Rate, burst: u32) -> Gcra {
        let per = u64::try_from(rate.per.as_nanos()).unwrap_or(u64::MAX);
        let interval = per.div_ceil(u64::from(rate.count.max(1))).max(1);
        let tolerance = interval.saturating_mul(u64::from(burst.max(1) - 1));
        Gcra {
            interval,
            tolerance,
        }
    }

    /// How far one admitted request moves `tat`.
    pub fn interval(&self) -> Nanos {
        self.interval
    }

    /// How far ahead of now `tat` may be for a request to be admitted.
    pub fn tolerance(&self) -> Nanos {
        self.tolerance
    }

    /// One request at `now`: admitted (`tat` moved on) or, unchanged, refused with the time
    /// after which the same request would be admitted.
    #[inline]
    pub fn admit(&self, tat: &mut Nanos, now: Nanos) -> Result<(), Nanos> {
        let start = (*tat).max(now);
        let ahead = start - now;
        if ahead <= self.tolerance {
            *tat = start.saturating_add(self.interval);
            Ok(())
        } else {
            Err(ahead - self.tolerance)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const SECOND: Nanos = 1_000_000_000;

    fn rate(count: u32, per: Duration) -> Rate {
        Rate { count, per }
    }

    #[test]
    fn a_fresh_key_takes_its_burst_at_once_then_the_rate() {
        // 20/s, burst 5: T = 50 ms, tolerance 200 ms.
        let gcra = Gcra::new(&rate(20, Duration::from_secs(1)), 5);
        assert_eq!(gcra.interval(), 50_000_000);
        assert_eq!(gcra.tolerance(), 200_000_000);
        let start = 1_700_000_000 * SECOND;
        let mut tat = 0;
        for n in 0..5 {
            assert_eq!(
                gcra.admit(&mut tat, start),
                Ok(()),
                "request {n} of the burst"
            );
        }
        // The sixth at the same instant waits exactly one interval.
        assert_eq!(gcra.admit(&mut tat, start), Err(50_000_000));
        assert_eq!(tat, start + 5 * 50_000_000, "a refusal moves nothing");
        // One nanosecond early is still refused, with 1 ns left; on time it passes.
        assert_eq!(gcra.admit(&mut tat, start + 50_000_000 - 1), Err(1));
        assert_eq!(gcra.admit(&mut tat, start + 50_000_000), Ok(()));
        // Then exactly one per interval, whatever the number of attempts between.
        let mut admitted = 0;
        for step in 0..1000u64 {
            let now = start + 50_000_000 + step * 1_000_000; // one attempt a millisecond
            if gcra.admit(&mut tat, now).is_ok() {
                admitted += 1;
            }
        }
        // 999 ms after the last admission at 50 ms: at 100, 150, ..., 1000 ms → 19.
        assert_eq!(admitted, 19);
    }

    #[test]
    fn retry_after_is_exact() {
        // 3/min, burst 2: T = 20 s, tolerance 20 s.
        let gcra = Gcra::new(&rate(3, Duration::from_secs(60)), 2);
        let now = 1_000 * SECOND;
        let mut tat = 0;
        assert_eq!(gcra.admit(&mut tat, now), Ok(()));
        assert_eq!(gcra.admit(&mut tat, now), Ok(()));
        assert_eq!(gcra.admit(&mut tat, now), Err(20 * SECOND));
        assert_eq!(gcra.admit(&mut tat, now + 7 * SECOND), Err(13 * SECOND));
        assert_eq!(gcra.admit(&mut tat, now + 20 * SECOND), Ok(()));
        // Idle long enough, the bucket is full again: a burst of 2.
        let later = now + 3600 * SECOND;
        assert_eq!(gcra.admit(&mut tat, later), Ok(()));
        assert_eq!(gcra.admit(&mut tat, later), Ok(()));
        assert_eq!(gcra.admit(&mut tat, later), Err(20 * SECOND));
    }

    #[test]
    fn a_burst_of_one_is_the_rate_alone_and_zeroes_are_ones() {
        let gcra = Gcra::new(&rate(10, Duration::from_secs(1)), 1);
        assert_eq!(gcra.tolerance(), 0);
        let mut tat = 0;
        assert_eq!(gcra.admit(&mut tat, SECOND), Ok(()));
        assert_eq!(gcra.admit(&mut tat, SECOND), Err(100_000_000));
        assert_eq!(Gcra::new(&rate(0, Duration::from_secs(1)), 0), {
            Gcra::new(&rate(1, Duration::from_secs(1)), 1)
        });
        // 3/s does not divide: the interval is rounded up, never more than the rate.
        assert_eq!(
            Gcra::new(&rate(3, Duration::from_secs(1)), 1).interval(),
            333_333_334
        );
    }
}
