//! A server's connection handshakes as the switch sees them, to tell a SYN that its full
//! accept queue dropped from one still on its way (issue 42, item 6).
//!
//! A server whose accept queue is full (a prefork server with every worker busy, a small listen
//! backlog) makes the kernel drop the SYNs that reach it. The client's kernel sends a dropped
//! SYN again only a second later, so a connect waited a second for a slot that opened a few
//! milliseconds after its SYN was dropped, and lost it to a newer SYN that came just then; with
//! `connect_timeout = "1s"` the second came too late even for that. Under 20 connections to two
//! such servers, 2.5-7% of the requests ended `502` after three connects timed out, while the
//! servers served the others.
//!
//! So a pending connect is sent again (a new socket, a new SYN) at the moment a slot may have
//! opened, when a request of that server ends, but only once its SYN was surely dropped: a
//! connection to the same server whose SYN left after it has completed its handshake (a later
//! SYN got in, this one did not). A handshake still on its way on a slow path is never cut
//! short, and the connects waiting are woken one per request that ends, the longest waiting
//! first. Nothing of the request has been sent: this is safe for any request, and it stays one
//! attempt, within its `connect_timeout` (exchange/connect.rs).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use tokio::sync::Notify;

/// The order in which the switch's connects to one server began and completed, and the
/// connects that wait for a slot in its accept queue.
#[derive(Debug, Default)]
pub struct Handshakes {
    /// The last number handed to a connect: connects are numbered before their SYN leaves.
    begun: AtomicU64,
    /// The highest number among the connects whose handshake completed.
    completed: AtomicU64,
    /// Connects pending long enough to wait for a request of the server to end.
    waiting: AtomicUsize,
    /// Woken (the longest waiting first) when a request of the server ends.
    slot: Notify,
}

impl Handshakes {
    /// Numbers a connect about to send its SYN.
    pub fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The connect numbered `number` completed its handshake.
    pub fn completed(&self, number: u64) {
        self.completed.fetch_max(number, Ordering::Relaxed);
    }

    /// What a connect whose SYN has left reads: any connect numbered above it sent its SYN
    /// after this one's.
    pub fn sent(&self) -> u64 {
        self.begun.load(Ordering::Relaxed)
    }

    /// A request of the server ended: the connect waiting longest looks again. One relaxed
    /// load when none waits (the data path pays it once per request).
    pub fn request_ended(&self) {
        if self.waiting.load(Ordering::Relaxed) > 0 {
            self.slot.notify_one();
        }
    }

    /// Resolves when a request of the server has ended after a connect whose SYN left after
    /// `sent` (a [`Handshakes::sent`] reading) completed its handshake: the SYN read as `sent`
    /// was dropped, and a slot may be open now. Never resolves otherwise (the caller's
    /// connect has the time limit).
    pub async fn overtaken(&self, sent: u64) {
        let _waiting = Waiting::new(&self.waiting);
        loop {
            self.slot.notified().await;
            if self.completed.load(Ordering::Relaxed) > sent {
                return;
            }
        }
    }
}

/// A connect counted among those waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    fn poll<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> Poll<F::Output> {
        future.poll(&mut Context::from_waker(Waker::noop()))
    }

    #[test]
    fn a_connect_is_overtaken_only_by_a_later_one_that_completed() {
        let handshakes = Handshakes::default();
        let earlier = handshakes.begin();
        let ours = handshakes.begin();
        let sent = handshakes.sent();
        let mut overtaken = pin!(handshakes.overtaken(sent));
        assert!(poll(overtaken.as_mut()).is_pending());
        // An earlier connect completing says nothing of ours.
        handshakes.completed(earlier);
        handshakes.request_ended();
        assert!(poll(overtaken.as_mut()).is_pending());
        handshakes.completed(ours);
        handshakes.request_ended();
        assert!(poll(overtaken.as_mut()).is_pending(), "ours is not later");
        // A later one completed: at the next request's end, not before.
        let later = handshakes.begin();
        handshakes.completed(later);
        assert!(
            poll(overtaken.as_mut()).is_pending(),
            "no request ended yet"
        );
        handshakes.request_ended();
        assert!(poll(overtaken.as_mut()).is_ready());
        assert_eq!(handshakes.waiting.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_request_end_wakes_nobody_when_none_waits() {
        let handshakes = Handshakes::default();
        handshakes.request_ended();
        // No permit was stored for a later waiter.
        let later = handshakes.begin();
        handshakes.completed(later);
        let mut overtaken = pin!(handshakes.overtaken(0));
        assert!(poll(overtaken.as_mut()).is_pending());
    }
}
