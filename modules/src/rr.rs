//! `rr`: round robin (LVS `ip_vs_rr.c`). Every usable server in turn, weights ignored except
//! that weight 0 (quiescent) and down servers are skipped.

use crate::{PoolView, RequestView, Scheduler};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Default)]
pub struct RoundRobin {
    next: AtomicUsize,
}

impl RoundRobin {
    pub fn new() -> Self {
        Self::default()
    }
}

impl Scheduler for RoundRobin {
    fn name(&self) -> &'static str {
        "rr"
    }

    fn pick(
        &self,
        _request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        let n = pool.servers.len();
        if n == 0 {
            return None;
        }
        // Like LVS, the turn moves to just after the server chosen, so a skipped (quiescent or
        // down) server does not hand an extra turn to its neighbour. The compare-exchange makes
        // two threads that read the same turn try again instead of choosing the same server.
        let mut start = self.next.load(Ordering::Relaxed);
        loop {
            let chosen = (0..n)
                .map(|step| (start + step) % n)
                .find(|&i| pool.servers[i].is_usable() && !tried.contains(&i))?;
            match self.next.compare_exchange_weak(
                start,
                chosen + 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(chosen),
                Err(current) => start = current,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};

    #[test]
    fn takes_turns_and_skips_quiescent() {
        let servers = pool_of(&[1, 0, 7]);
        let sched = RoundRobin::new();
        let pool = PoolView { servers: &servers };
        let picks: Vec<usize> = (0..6)
            .map(|_| sched.pick(&request(), &pool, &[]).unwrap())
            .collect();
        assert_eq!(picks, [0, 2, 0, 2, 0, 2]);
    }

    #[test]
    fn skips_tried_and_down() {
        let servers = pool_of(&[1, 1, 1]);
        servers[2].set_up(false);
        let sched = RoundRobin::new();
        let pool = PoolView { servers: &servers };
        assert_eq!(sched.pick(&request(), &pool, &[0]), Some(1));
        assert_eq!(sched.pick(&request(), &pool, &[0, 1]), None);
    }
}
