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
        self.sweep_at(self.start.elapsed().as_millis() as u64);
    }

    /// [`Timeouts::sweep`] with the clock set to `now` milliseconds (tests drive it by hand).
    fn sweep_at(&self, now: u64) {
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
        self.mark_stopping();
        self.wake_all();
    }

    /// Marks the switch as stopping, without waking anyone (the workers are all marked
    /// before any session is woken: supervisor/workers.rs, `stop_timeouts`).
    pub fn mark_stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// Wakes every session, so that those that follow the configuration look at it again (a
    /// reload removed a service: its HTTP/2 connections say GOAWAY).
    pub fn wake_all(&self) {
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

    /// A new slot of the same worker, for a task this session starts (an HTTP/2 stream).
    pub fn sibling(&self) -> Arc<Slot> {
        self.timeouts.register()
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

    /// A waker that counts its wake-ups.
    struct Counter(AtomicU64);

    impl std::task::Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn poll_once(expiry: &mut Expiry<'_>, waker: &std::task::Waker) -> Poll<()> {
        Pin::new(expiry).poll(&mut Context::from_waker(waker))
    }

    /// The clock is driven by hand (`sweep_at`), so the verdict depends on no real time.
    #[test]
    fn a_wait_ends_at_its_deadline_and_not_before() {
        let timeouts = Timeouts::new();
        let slot = timeouts.register();
        let counter = Arc::new(Counter(AtomicU64::new(0)));
        let waker = std::task::Waker::from(Arc::clone(&counter));
        let woken = || counter.0.load(Ordering::SeqCst);

        let deadline = slot.deadline_after(Duration::from_millis(100));
        assert_eq!(deadline, 100);
        let mut wait = slot.expiry(deadline);
        assert!(poll_once(&mut wait, &waker).is_pending());
        timeouts.sweep_at(99);
        assert_eq!(woken(), 0, "not woken before its deadline");
        assert!(poll_once(&mut wait, &waker).is_pending());
        timeouts.sweep_at(100);
        assert_eq!(woken(), 1, "woken at its deadline");
        assert!(poll_once(&mut wait, &waker).is_ready());

        // Two waits at once in one task: the slot holds the earlier deadline, and each wait
        // ends at its own.
        let near = slot.deadline_after(Duration::from_millis(40));
        let far = slot.deadline_after(Duration::from_millis(200));
        let (mut near_wait, mut far_wait) = (slot.expiry(near), slot.expiry(far));
        assert!(poll_once(&mut far_wait, &waker).is_pending());
        assert!(poll_once(&mut near_wait, &waker).is_pending());
        timeouts.sweep_at(near);
        assert_eq!(woken(), 2);
        assert!(poll_once(&mut near_wait, &waker).is_ready());
        assert!(poll_once(&mut far_wait, &waker).is_pending(), "far re-arms");
        timeouts.sweep_at(far - 1);
        assert_eq!(woken(), 2);
        timeouts.sweep_at(far);
        assert_eq!(woken(), 3);
        assert!(poll_once(&mut far_wait, &waker).is_ready());
    }

    #[test]
    fn a_stop_wakes_every_waiting_session() {
        let timeouts = Timeouts::new();
        let slot = timeouts.register();
        let counter = Arc::new(Counter(AtomicU64::new(0)));
        let waker = std::task::Waker::from(Arc::clone(&counter));
        let mut wait = slot.expiry(slot.deadline_after(Duration::from_secs(3600)));
        assert!(poll_once(&mut wait, &waker).is_pending());
        assert!(!slot.stopping());
        timeouts.stop();
        assert_eq!(counter.0.load(Ordering::SeqCst), 1);
        assert!(slot.stopping());
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
