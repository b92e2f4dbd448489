//! `wlc`: weighted least-connection, as LVS and KTCPVS (`tcp_vs_wlc.c`) define it.
//!
//! The server with the fewest active connections per unit of weight wins; the ratios are
//! compared by cross-multiplication (`a1 * w2 < a2 * w1`), never by division, so no precision is
//! lost. Weight 0 is quiescent: such a server keeps its current connections but gets no new one.
//!
//! LVS breaks ties by list order, which sends every request of a lightly loaded pool (all
//! counts 0 between sequential requests) to the first server. Here ties go to the server with
//! the fewest picks per unit of weight, so an idle pool is shared in weight proportion (1:2
//! weights give 1/3 and 2/3 of sequential requests). Those pick counters restart whenever
//! servers change, so a server that comes back is not flooded while it catches up.

use crate::{PoolView, RequestView, Scheduler};
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug)]
pub struct WeightedLeastConnection {
    picks: Box<[AtomicU64]>,
}

impl WeightedLeastConnection {
    pub fn new(pool: &PoolView<'_>) -> Self {
        WeightedLeastConnection {
            picks: pool.servers.iter().map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl WeightedLeastConnection {
    /// The least loaded usable server not in `tried`; with `weighted` false every weight
    /// counts as 1 (the `lc` module), though weight 0 still means quiescent.
    pub(crate) fn choose(
        &self,
        pool: &PoolView<'_>,
        tried: &[usize],
        weighted: bool,
    ) -> Option<usize> {
        // (index, active, weight) of the best so far; one atomic read per server.
        let mut best: Option<(usize, u64, u64)> = None;
        for (index, server) in pool.servers.iter().enumerate() {
            let load = server.load();
            if !load.is_usable() || tried.contains(&index) {
                continue;
            }
            let active = u64::from(load.active);
            let weight = if weighted { u64::from(load.weight) } else { 1 };
            let better = match best {
                None => true,
                Some((b, b_active, b_weight)) => {
                    let mine = active * b_weight;
                    let theirs = b_active * weight;
                    mine < theirs
                        || (mine == theirs && self.fewer_picks(index, weight, b, b_weight))
                }
            };
            if better {
                best = Some((index, active, weight));
            }
        }
        let (chosen, _, _) = best?;
        if let Some(picks) = self.picks.get(chosen) {
            picks.fetch_add(1, Ordering::Relaxed);
        }
        Some(chosen)
    }

    /// Tie-break: server `a` has had fewer picks per unit of weight than `b`.
    fn fewer_picks(&self, a: usize, a_weight: u64, b: usize, b_weight: u64) -> bool {
        let picks = |i: usize| self.picks.get(i).map_or(0, |p| p.load(Ordering::Relaxed));
        // u128: a pick counter times a 16-bit weight may exceed u64 after years of uptime.
        u128::from(picks(a)) * u128::from(b_weight) < u128::from(picks(b)) * u128::from(a_weight)
    }

    pub(crate) fn forget_picks(&self) {
        for picks in self.picks.iter() {
            picks.store(0, Ordering::Relaxed);
        }
    }
}

impl Scheduler for WeightedLeastConnection {
    fn name(&self) -> &'static str {
        "wlc"
    }

    fn pick(
        &self,
        _request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        self.choose(pool, tried, true)
    }

    fn servers_changed(&self, _pool: &PoolView<'_>) {
        self.forget_picks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};
    use crate::ServerState;

    fn wlc(servers: &[ServerState]) -> WeightedLeastConnection {
        WeightedLeastConnection::new(&PoolView { servers })
    }

    #[test]
    fn sequential_requests_follow_weights() {
        let servers = pool_of(&[1, 2]);
        let sched = wlc(&servers);
        let pool = PoolView { servers: &servers };
        let mut counts = [0usize; 2];
        for _ in 0..300 {
            let i = sched.pick(&request(), &pool, &[]).unwrap();
            counts[i] += 1;
        }
        assert_eq!(counts, [100, 200]);
    }

    #[test]
    fn least_active_per_weight_wins() {
        let servers = pool_of(&[1, 3]);
        // 2 active on weight 1 (ratio 2) against 5 active on weight 3 (ratio 1.67): server 1.
        for _ in 0..2 {
            servers[0].add_active();
        }
        for _ in 0..5 {
            servers[1].add_active();
        }
        let sched = wlc(&servers);
        let pool = PoolView { servers: &servers };
        assert_eq!(sched.pick(&request(), &pool, &[]), Some(1));
        // One more at server 1: 6/3 = 2 equals 2/1; the tie goes by picks per weight: server 0
        // has 0 picks, server 1 has 1.
        servers[1].add_active();
        assert_eq!(sched.pick(&request(), &pool, &[]), Some(0));
    }

    #[test]
    fn quiescent_and_down_servers_get_nothing() {
        let servers = pool_of(&[0, 5, 1]);
        servers[1].set_up(false);
        let sched = wlc(&servers);
        let pool = PoolView { servers: &servers };
        for _ in 0..10 {
            assert_eq!(sched.pick(&request(), &pool, &[]), Some(2));
        }
        servers[2].set_weight(0);
        assert_eq!(sched.pick(&request(), &pool, &[]), None);
    }

    #[test]
    fn tried_servers_yield_the_next_candidates() {
        let servers = pool_of(&[1, 1, 1]);
        servers[0].add_active();
        servers[1].add_active();
        servers[1].add_active();
        let sched = wlc(&servers);
        let pool = PoolView { servers: &servers };
        assert_eq!(sched.pick(&request(), &pool, &[]), Some(2));
        assert_eq!(sched.pick(&request(), &pool, &[2]), Some(0));
        assert_eq!(sched.pick(&request(), &pool, &[2, 0]), Some(1));
        assert_eq!(sched.pick(&request(), &pool, &[2, 0, 1]), None);
    }

    #[test]
    fn a_returning_server_is_not_flooded() {
        let servers = pool_of(&[1, 1]);
        let sched = wlc(&servers);
        let pool = PoolView { servers: &servers };
        servers[1].set_up(false);
        sched.servers_changed(&pool);
        for _ in 0..1000 {
            sched.pick(&request(), &pool, &[]);
        }
        servers[1].set_up(true);
        sched.servers_changed(&pool);
        let mut counts = [0usize; 2];
        for _ in 0..100 {
            counts[sched.pick(&request(), &pool, &[]).unwrap()] += 1;
        }
        assert_eq!(counts, [50, 50]);
    }
}
