//! `lc`: least-connection (LVS `ip_vs_lc.c`): the usable server with the fewest active
//! requests, whatever its weight; weight 0 is still quiescent. Ties are spread like `wlc`'s.

use crate::wlc::WeightedLeastConnection;
use crate::{PoolView, RequestView, Scheduler};

#[derive(Debug)]
pub struct LeastConnection {
    inner: WeightedLeastConnection,
}

impl LeastConnection {
    pub fn new(pool: &PoolView<'_>) -> Self {
        LeastConnection {
            inner: WeightedLeastConnection::new(pool),
        }
    }
}

impl Scheduler for LeastConnection {
    fn name(&self) -> &'static str {
        "lc"
    }

    fn pick(
        &self,
        _request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        self.inner.choose(pool, tried, false)
    }

    fn servers_changed(&self, _pool: &PoolView<'_>) {
        self.inner.forget_picks();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};

    #[test]
    fn weight_does_not_count_but_zero_is_quiescent() {
        let servers = pool_of(&[1, 100, 0]);
        let sched = LeastConnection::new(&PoolView { servers: &servers });
        let pool = PoolView { servers: &servers };
        servers[1].add_active();
        assert_eq!(sched.pick(&request(), &pool, &[]), Some(0));
        servers[0].add_active();
        servers[0].add_active();
        assert_eq!(sched.pick(&request(), &pool, &[]), Some(1));
        let mut counts = [0; 3];
        servers[0].remove_active();
        for _ in 0..100 {
            counts[sched.pick(&request(), &pool, &[]).unwrap()] += 1;
        }
        assert_eq!(
            counts,
            [50, 50, 0],
            "equal load: shared evenly, whatever the weights"
        );
    }
}
