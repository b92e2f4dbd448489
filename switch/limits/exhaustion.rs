//! Running out of descriptors (or of kernel memory for a socket) is the switch's own trouble,
//! not a client's or a server's: accept backs off instead of spinning on a connection it cannot
//! take, a server connection that cannot be opened is not a failure of that server (no passive
//! health strike, no connect error counted), and each is logged at most once a second with the
//! count of what was left unsaid, so that an exhausted switch does not also fill its disk.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long an accept loop waits before trying again after running out of descriptors: long
/// enough not to spin (the refused connection stays in the kernel's queue and makes the
/// listener readable again at once), short enough that a freed descriptor is used soon.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Whether `error` says that the process or the system is out of descriptors or socket memory.
pub fn is_exhaustion(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM)
    )
}

/// Accept errors that concern one connection only (it was reset while queued, a firewall
/// refused it): the next one may be fine, so the loop goes on at once, quietly.
pub fn is_per_connection(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ECONNABORTED | libc::ECONNRESET | libc::EPERM | libc::EPROTO)
    )
}

/// A warning said at most once a second; the ones held back in between are counted and the
/// count is said with the next one.
#[derive(Debug, Default)]
pub struct Throttled {
    /// Milliseconds since [`epoch`] of the last warning said, plus one (0: never).
    last_said_ms: AtomicU64,
    held_back: AtomicU64,
}

/// The moment throttled warnings measure from.
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
    /// passed since then; else counts this one as held back. Several threads may race: only
    /// the one that moves the time stamp says it.
    pub fn warn(&self, say: impl FnOnce(u64)) {
        self.warn_at(epoch().elapsed().as_millis() as u64, say);
    }

    /// [`Throttled::warn`] at `now_ms` since the epoch.
    fn warn_at(&self, now_ms: u64, say: impl FnOnce(u64)) {
        let now = now_ms + 1;
        let last = self.last_said_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= 1000;
        if due
            && self
                .last_said_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            say(self.held_back.swap(0, Ordering::Relaxed));
        } else {
            self.held_back.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Accept failures for lack of descriptors, process-wide.
pub static ACCEPT: Throttled = Throttled::new();
/// Server connections not opened for lack of descriptors, process-wide.
pub static CONNECT: Throttled = Throttled::new();

/// " (N more like it in the last second)" when warnings were held back.
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
    fn classifies_errors() {
        let e = |code| std::io::Error::from_raw_os_error(code);
        assert!(is_exhaustion(&e(libc::EMFILE)));
        assert!(is_exhaustion(&e(libc::ENFILE)));
        assert!(!is_exhaustion(&e(libc::ECONNREFUSED)));
        assert!(is_per_connection(&e(libc::ECONNABORTED)));
        assert!(!is_per_connection(&e(libc::EMFILE)));
    }
}
