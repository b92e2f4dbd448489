//! Coarse timeouts for client sessions, without a tokio timer per wait.
//!
//! Why by hand: a tokio timer costs about a microsecond per wait that registers one; with two
//! waits per request (the next request head, the response head) that was 14% of the CPU of a
//! small keep-alive request (BENCHMARKS.md). Session timeouts are seconds long and need no
//! precision, so each session has one [`Slot`] holding its earliest pending deadline (in
//! milliseconds of a coarse clock) and its task's waker, and one sweeper task per switch
//! advances the coarse clock every [`TICK`] and wakes the sessions whose deadline has passed. A
//! wait then costs an atomic `fetch_min` and a waker registration.
//!
//! The session's slot travels as a tokio task-local, so the socket helpers in `stream` find it
//! without every call carrying it. Every task of the switch that does I/O has one (sessions,
//! busy refusals, demo servers); `stream::wait` falls back to a tokio timer without it.

use atomic_waker::AtomicWaker;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// How often the sweeper looks; a timeout fires up to this much late.
pub const TICK: Duration = Duration::from_millis(20);

const NONE: u64 = u64::MAX;

tokio::task_local! {
    /// The timeout slot of the session running in this task.
    pub static SESSION_TIMER: Arc<Slot>;
}

/// The sessions of one switch and their coarse clock.
#[derive(Debug)]
pub struct Timeouts {
    start: Instant,
    now_ms: AtomicU64,
    slots: Mutex<Vec<Weak<Slot>>>,
    /// The worker whose sessions these are (its index), for state kept per worker.
    worker: usize,
    /// The switch is stopping: sessions waiting for a request give up (see [`Timeouts::stop`]).
    stopping: AtomicBool,
}

/// One session's pending deadline and waker.
#[derive(Debug)]
pub struct Slot {
    deadline_ms: AtomicU64,
    waker: AtomicWaker,
    timeouts: Arc<Timeouts>,
}

impl Timeouts {
    pub fn new() -> Arc<Timeouts> {
        Timeouts::for_worker(0)
    }

    pub fn for_worker(worker: usize) -> Arc<Timeouts> {
        Arc::new(Timeouts {
            start: Instant::now(),
            now_ms: AtomicU64::new(0),
            slots: Mutex::new(Vec::new()),
            worker,
            stopping: AtomicBool::new(false),
        })
    }

    pub fn worker(&self) -> usize {
        self.worker
    }

    /// A slot for a new session; it leaves the sweep when the session drops it.
    pub fn register(self: &Arc<Self>) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            deadline_ms: AtomicU64::new(NONE),
            waker: AtomicWaker::new(),
            timeouts: Arc::clone(self),
        });
        if let Ok(mut slots) = self.slots.lock() {
            slots.push(Arc::downgrade(&slot));
        }
        slot
    }

    /// The coarse clock: milliseconds since the switch started, as of the last sweep.
    pub fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    /// Milliseconds of the coarse clock at `at`.
    fn ms_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.start).as_millis() as u64
    }

    /// Advances the clock, wakes the sessions whose deadline passed and forgets ended ones.
    pub fn sweep(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.now_ms.store(now, Ordering::Relaxed);
        if let Ok(mut slots) = self.slots.lock() {
            slots.retain(|weak| match weak.upgrade() {
                None => false,
                Some(slot) => {
                    if slot.deadline_ms.load(Ordering::Relaxed) <= now {
                        // Cleared first: a wait armed meanwhile re-arms when its task runs.
                        slot.deadline_ms.store(NONE, Ordering::Relaxed);
                        slot.waker.wake();
                    }
                    true
                }
            });
        }
    }

    /// Marks the switch as stopping and wakes every session, so those waiting for a request
    /// can see it and leave.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        if let Ok(slots) = self.slots.lock() {
            for slot in slots.iter().filter_map(Weak::upgrade) {
                slot.waker.wake();
            }
        }
    }

    /// Sweeps every [`TICK`] until the switch stops.
    pub async fn run_sweeper(self: Arc<Self>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.sweep();
        }
    }
}

impl Slot {
    /// The coarse-clock deadline `after` from now, or at instant `at`.
    pub fn deadline_after(&self, after: Duration) -> u64 {
        self.timeouts
            .now_ms()
            .saturating_add(after.as_millis() as u64)
    }

    pub fn deadline_at(&self, at: tokio::time::Instant) -> u64 {
        self.timeouts.ms_at(at.into_std())
    }

    /// The coarse clock (milliseconds), as of the last sweep.
    pub fn now_ms(&self) -> u64 {
        self.timeouts.now_ms()
    }

    pub fn stopping(&self) -> bool {
        self.timeouts.stopping.load(Ordering::Relaxed)
    }

    /// The worker this session runs on.
    pub fn worker(&self) -> usize {
        self.timeouts.worker
    }

    /// Ready once the coarse clock has reached `deadline_ms`; until then the task is woken
    /// when it may have (and when the switch stops).
    pub fn poll_expired(&self, deadline_ms: u64, cx: &mut Context<'_>) -> Poll<()> {
        if self.timeouts.now_ms() >= deadline_ms {
            return Poll::Ready(());
        }
        self.waker.register(cx.waker());
        self.deadline_ms.fetch_min(deadline_ms, Ordering::Relaxed);
        // The sweeper may have passed between the check and the arming.
        if self.timeouts.now_ms() >= deadline_ms {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    /// Completes once the coarse clock has reached `deadline_ms`.
    pub fn expiry(&self, deadline_ms: u64) -> Expiry<'_> {
        Expiry {
            slot: self,
            deadline_ms,
        }
    }
}

/// See [`Slot::expiry`].
pub struct Expiry<'a> {
    slot: &'a Slot,
    deadline_ms: u64,
}

impl Future for Expiry<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.slot.poll_expired(self.deadline_ms, cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn a_wait_ends_at_its_deadline_and_not_before() {
        let timeouts = Timeouts::new();
        let sweeper = tokio::spawn(Arc::clone(&timeouts).run_sweeper());
        let slot = timeouts.register();
        let started = Instant::now();
        let deadline = slot.deadline_after(Duration::from_millis(100));
        slot.expiry(deadline).await;
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(100) - TICK, "{waited:?}");
        // Two waits at once in one task: each ends at its own deadline.
        let near = slot.deadline_after(Duration::from_millis(40));
        let far = slot.deadline_after(Duration::from_millis(200));
        let first = tokio::select! {
            _ = slot.expiry(far) => "far",
            _ = slot.expiry(near) => "near",
        };
        assert_eq!(first, "near");
        sweeper.abort();
    }

    #[test]
    fn ended_sessions_leave_the_sweep() {
        let timeouts = Timeouts::new();
        let a = timeouts.register();
        let b = timeouts.register();
        drop(a);
        timeouts.sweep();
        assert_eq!(timeouts.slots.lock().unwrap().len(), 1);
        drop(b);
        timeouts.sweep();
        assert!(timeouts.slots.lock().unwrap().is_empty());
    }
}
