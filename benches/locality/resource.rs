//! One resource of an emulated server (its CPU, its disk arm): it serves one job at a time, in
//! the order jobs reach it, each for its service time. The time is virtual: a job's finish is
//! computed (start = the later of its arrival and the previous job's finish), and the request
//! waits for it on a tokio timer. Nothing spins, so the emulated servers' throughput is set by
//! their modelled costs, not by this machine's cores, as long as the real CPU keeps up.
//! Timer lateness (tokio's timers tick in milliseconds) delays an answer but not the next job,
//! whose start comes from the computed finish, not from when the timer fired.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub struct FifoResource {
    free_at: Mutex<Instant>,
    /// Service time handed out so far, in nanoseconds: the utilisation, read as a difference.
    busy_nanos: AtomicU64,
}

impl FifoResource {
    pub fn new() -> FifoResource {
        FifoResource {
            free_at: Mutex::new(Instant::now()),
            busy_nanos: AtomicU64::new(0),
        }
    }

    /// Queues a job that is ready at `ready` and needs `service`; returns when it finishes.
    pub fn reserve(&self, ready: Instant, service: Duration) -> Instant {
        let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let finish = (*free_at).max(ready) + service;
        *free_at = finish;
        finish
    }

    /// Counts a job's service once it has finished (counting it when queued would put work
    /// still waiting into a window that has not served it).
    pub fn served(&self, service: Duration) {
        self.busy_nanos
            .fetch_add(service.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn busy(&self) -> Duration {
        Duration::from_nanos(self.busy_nanos.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_queue_in_arrival_order() {
        let r = FifoResource::new();
        let t0 = Instant::now() + Duration::from_secs(1);
        let ms = Duration::from_millis;
        assert_eq!(r.reserve(t0, ms(10)), t0 + ms(10));
        assert_eq!(r.reserve(t0, ms(10)), t0 + ms(20), "waits for the first");
        assert_eq!(
            r.reserve(t0 + ms(50), ms(5)),
            t0 + ms(55),
            "idle in between"
        );
        assert_eq!(r.busy(), ms(0), "nothing served yet");
        r.served(ms(10));
        assert_eq!(r.busy(), ms(10));
    }
}
