//! `wrr`: interleaved weighted round robin (LVS `ip_vs_wrr.c`).
//!
//! A current weight `cw` starts at the largest weight and steps down by the gcd of the weights
//! once per pass over the servers; a server is chosen when its weight is at least `cw`. Weights
//! A=4, B=3, C=2 give A A B A B C A B C, repeating. Weight 0 and down servers are skipped.

use crate::load::eligible;
use crate::{PoolView, RequestView, Scheduler};
use std::sync::Mutex;

#[derive(Debug)]
pub struct WeightedRoundRobin {
    /// Last server index chosen (`None` before the first) and the current weight.
    state: Mutex<(Option<usize>, u32)>,
}

impl WeightedRoundRobin {
    pub fn new() -> Self {
        WeightedRoundRobin {
            state: Mutex::new((None, 0)),
        }
    }
}

impl Default for WeightedRoundRobin {
    fn default() -> Self {
        Self::new()
    }
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

impl Scheduler for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        "wrr"
    }

    fn pick(
        &self,
        _request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        let n = pool.servers.len();
        // Weights as they are now, over servers that may take work.
        let (mut max, mut step) = (0u32, 0u32);
        for s in pool.servers.iter().filter(|s| s.is_usable()) {
            max = max.max(s.weight());
            step = gcd(step, s.weight());
        }
        if max == 0 {
            return None;
        }
        if !tried.is_empty() {
            // A retry after a failed connection: the heaviest untried server, without moving
            // the shared sequence (which may need many steps to reach a light server).
            return (0..n)
                .filter(|&i| eligible(&pool.servers[i], i, tried))
                .max_by_key(|&i| (pool.servers[i].weight(), std::cmp::Reverse(i)));
        }
        let mut state = self.state.lock().ok()?;
        let (mut last, cw_before) = *state;
        // After a weight decrease the current weight may exceed the new largest weight; left
        // there it would hand only the heaviest servers turns for (cw - max) / gcd passes. LVS
        // clamps it the same way when a destination changes.
        let mut cw = cw_before.min(max);
        // At most one full cycle of the sequence: n servers times max/gcd weight levels.
        let limit = n * (max / step) as usize + n;
        for _ in 0..=limit {
            let i = last.map_or(0, |l| (l + 1) % n);
            if i == 0 {
                cw = cw.saturating_sub(step);
                if cw == 0 {
                    cw = max;
                }
            }
            last = Some(i);
            let server = &pool.servers[i];
            if server.is_usable() && server.weight() >= cw {
                *state = (last, cw);
                return Some(i);
            }
        }
        *state = (last, cw);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};

    fn sequence(weights: &[u32], count: usize) -> String {
        let servers = pool_of(weights);
        let pool = PoolView { servers: &servers };
        let sched = WeightedRoundRobin::new();
        (0..count)
            .map(|_| (b'A' + sched.pick(&request(), &pool, &[]).unwrap() as u8) as char)
            .collect()
    }

    #[test]
    fn lvs_vector() {
        assert_eq!(sequence(&[4, 3, 2], 18), "AABABCABCAABABCABC");
    }

    #[test]
    fn gcd_steps_and_zero_weights() {
        assert_eq!(sequence(&[4, 2], 6), "AABAAB");
        assert_eq!(sequence(&[2, 0, 1], 6), "AACAAC");
        let servers = pool_of(&[0, 0]);
        let pool = PoolView { servers: &servers };
        assert_eq!(WeightedRoundRobin::new().pick(&request(), &pool, &[]), None);
    }

    #[test]
    fn a_weight_decrease_restarts_the_sequence_at_the_new_largest_weight() {
        let servers = pool_of(&[100, 1]);
        let pool = PoolView { servers: &servers };
        let sched = WeightedRoundRobin::new();
        let picks = |count: usize| -> String {
            (0..count)
                .map(|_| (b'A' + sched.pick(&request(), &pool, &[]).unwrap() as u8) as char)
                .collect()
        };
        // Two picks leave the current weight at 99.
        assert_eq!(picks(2), "AA");
        servers[0].set_weight(2);
        // Weights 2 and 1 from here: B gets its third at once, not after 97 more A's.
        assert_eq!(picks(6), "ABAABA");
    }

    #[test]
    fn retries_go_to_the_heaviest_untried() {
        let servers = pool_of(&[1, 5, 3]);
        let pool = PoolView { servers: &servers };
        let sched = WeightedRoundRobin::new();
        assert_eq!(sched.pick(&request(), &pool, &[1]), Some(2));
        assert_eq!(sched.pick(&request(), &pool, &[1, 2]), Some(0));
        assert_eq!(sched.pick(&request(), &pool, &[0, 1, 2]), None);
    }
}
