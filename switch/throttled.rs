//! A warning said at most once a second, with the count of the ones held back in between: a
//! dead server or an exhausted process must not also fill the disk with its log. Warnings of
//! one kind arrive on several workers at once, so the right to say one is claimed by a
//! compare-and-swap of the time stamp; of two that find it due, only one says it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// A warning said at most once a second; the ones held back in between are counted and the
/// count is said with the next one.
#[derive(Debug, Default)]
pub struct Throttled {
    /// Milliseconds of the clock the caller uses of the last warning said, plus one (0: never).
    last_said_ms: AtomicU64,
    held_back: AtomicU64,
}

/// The moment [`Throttled::warn`] measures from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Throttled {
    pub const fn new() -> Self {
        Throttled {
            last_said_ms: AtomicU64::new(0),
            held_back: AtomicU64::new(0),
        }
    }

    /// Calls `say` with the number of warnings held back since the last one, if a second has
    /// passed since then; else counts this one as held back.
    pub fn warn(&self, say: impl FnOnce(u64)) {
        self.warn_at(epoch().elapsed().as_millis() as u64, say);
    }

    /// [`Throttled::warn`] at `now_ms` on the caller's clock (the switch's coarse clock on the
    /// data path), which must be the same clock for every call on one `Throttled`.
    pub fn warn_at(&self, now_ms: u64, say: impl FnOnce(u64)) {
        let now = now_ms.saturating_add(1);
        let claimed =
            self.last_said_ms
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |last| {
                    let due = last == 0 || now.saturating_sub(last) >= 1000;
                    due.then_some(now)
                });
        match claimed {
            Ok(_) => say(self.held_back.swap(0, Ordering::Relaxed)),
            Err(_) => {
                self.held_back.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// " (N more like it since the last such warning)" when warnings were held back.
pub fn held_back(count: u64) -> String {
    if count == 0 {
        String::new()
    } else {
        format!(" ({count} more like it since the last such warning)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    #[test]
    fn said_once_then_counted() {
        let throttled = Throttled::new();
        let mut said = Vec::new();
        for ms in 0..100 {
            throttled.warn_at(5_000 + ms * 9, |held| said.push(held));
        }
        assert_eq!(said, vec![0], "one warning in a burst");
        // A second after the first, the next one is said with the count held back.
        throttled.warn_at(5_999, |held| said.push(held));
        assert_eq!(said, vec![0], "not yet");
        throttled.warn_at(6_000, |held| said.push(held));
        assert_eq!(said, vec![0, 100]);
        assert_eq!(throttled.held_back.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn of_warnings_on_many_threads_at_once_one_is_said_and_the_rest_are_counted() {
        const THREADS: usize = 8;
        const ROUNDS: u64 = 200;
        let throttled = Throttled::new();
        let start = Barrier::new(THREADS);
        let said: Vec<Vec<u64>> = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|_| {
                    scope.spawn(|| {
                        let mut mine = Vec::new();
                        for round in 1..=ROUNDS {
                            start.wait();
                            throttled.warn_at(round * 1000, |held| mine.push(held));
                            start.wait();
                        }
                        mine
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        let warnings: usize = said.iter().map(Vec::len).sum();
        assert_eq!(warnings as u64, ROUNDS, "one warning a second, not more");
        let held: u64 = said.iter().flatten().sum();
        let still_held = throttled.held_back.load(Ordering::Relaxed);
        assert_eq!(
            held + still_held,
            ROUNDS * (THREADS as u64 - 1),
            "every warning not said is counted once"
        );
    }
}
