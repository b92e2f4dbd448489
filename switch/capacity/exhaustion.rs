//! Running out of descriptors (or of kernel memory for a socket) is the switch's own trouble,
//! not a client's or a server's: accept backs off instead of spinning on a connection it cannot
//! take, a server connection that cannot be opened is not a failure of that server (no passive
//! health strike, no connect error counted), and each is logged at most once a second with the
//! count of what was left unsaid, so that an exhausted switch does not also fill its disk.

pub use crate::throttled::{held_back, Throttled};
use std::time::Duration;

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

/// Accept failures for lack of descriptors, process-wide.
pub static ACCEPT: Throttled = Throttled::new();
/// Server connections not opened for lack of descriptors, process-wide.
pub static CONNECT: Throttled = Throttled::new();

#[cfg(test)]
mod tests {
    use super::*;

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
