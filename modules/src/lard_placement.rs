//! Where a `lard` or `lard-r` target's server is: where it starts, where it goes when its
//! server is overloaded or gone. The thresholds that say "overloaded" are `lard_thresholds.rs`.
//!
//! **Where a target starts**: on the consistent-hash ring of the rule file (server addresses
//! and weights, as `hash` uses), not on the least loaded server as in the paper. The least
//! loaded server is a view of one instance; the ring is the same in every instance with the
//! same file, so several tcpvs behind an L4 director place a new target alike without talking
//! (measured: BENCHMARKS.md, "LARD without tuning"). A start that is already overloaded moves
//! at once, as any other target would; with `auto` a new target is cold (`lard_heat.rs`), so
//! that is only at `2 T_high`.
//!
//! **Where an overloaded target goes**: the first server along the target's own ring order
//! that is below `T_low`, else the least loaded (the paper's choice). Walking the same order
//! in every instance makes instances that move a target move it to the same server, and a
//! target that moves again comes back to servers that have had it. A target away from its
//! first server goes back there once that server is below `T_low` or idle, at the earliest a
//! second after it moved (`lard`): instances that moved it apart, each on its own view, come
//! together again.

use crate::lard_heat::Temperature;
use crate::lard_thresholds::Judge;
use crate::load::{eligible, least_loaded_from};
use crate::ring::PoolRing;
use crate::PoolView;
use std::sync::atomic::{AtomicU32, Ordering};

/// The ring a pool's targets start on, rebuilt when weights change.
#[derive(Debug)]
pub(crate) struct Placement {
    ring: PoolRing,
    /// Bumped whenever servers change (health, weight, drain): a target found on its first
    /// usable server in this generation needs no ring lookup to know it is home.
    generation: AtomicU32,
}

impl Placement {
    pub(crate) fn new(pool: &PoolView<'_>, server_ids: &[String]) -> Placement {
        Placement {
            ring: PoolRing::new(pool, server_ids),
            generation: AtomicU32::new(0),
        }
    }

    pub(crate) fn servers_changed(&self, pool: &PoolView<'_>) {
        self.ring.rebuild(pool);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// The current generation of the servers (see `generation`).
    pub(crate) fn generation(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// The first eligible server along `target`'s ring order that `accept`s its load.
    fn along_ring(
        &self,
        target: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        mut accept: impl FnMut(usize) -> bool,
    ) -> Option<usize> {
        let ring = self.ring.read()?;
        ring.first_where(target, |server| {
            pool.servers
                .get(server)
                .is_some_and(|s| eligible(s, server, tried) && accept(server))
        })
    }

    /// The target's first usable server on the ring, whatever its load and this request's
    /// tries: where every instance starts it.
    pub(crate) fn first_usable(&self, target: u64, pool: &PoolView<'_>) -> Option<usize> {
        self.along_ring(target, pool, &[], |_| true)
    }

    /// Where a new target starts: its first eligible server on the ring, unless that one is
    /// overloaded and sheds it (then where an overloaded target goes). `temperature` is asked
    /// once, of that first server, whatever the load: it counts the target's request
    /// (`lard_heat.rs`).
    pub(crate) fn start(
        &self,
        target: u64,
        judge: &Judge,
        pool: &PoolView<'_>,
        tried: &[usize],
        temperature: impl FnOnce(usize) -> Temperature,
    ) -> Option<usize> {
        match self.along_ring(target, pool, tried, |_| true) {
            Some(home) if !judge.sheds(home, temperature(home), tried) => Some(home),
            _ => self.relieve(target, judge, pool, tried),
        }
    }

    /// Where an overloaded target goes: the first server along its ring below T_low, else the
    /// least loaded (ties from the target's place, so they spread).
    pub(crate) fn relieve(
        &self,
        target: u64,
        judge: &Judge,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        self.along_ring(target, pool, tried, |server| judge.underloaded(server))
            .or_else(|| least_loaded_from(pool, tried, tie_start(target, pool)))
    }

    /// Where a target goes when its server left (down, quiescent, draining, or failed for
    /// this request): the next server along its ring that is not overloaded, which is where
    /// every instance sends it; else the least loaded.
    pub(crate) fn replace(
        &self,
        target: u64,
        judge: &Judge,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        self.along_ring(target, pool, tried, |server| {
            !judge.should_move(server, tried)
        })
        .or_else(|| least_loaded_from(pool, tried, tie_start(target, pool)))
    }
}

/// Where a scan for the least loaded server starts for `target`, so that ties spread.
pub(crate) fn tie_start(target: u64, pool: &PoolView<'_>) -> usize {
    (target % pool.servers.len().max(1) as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lard_thresholds::LardSettings;
    use crate::options::Options;
    use crate::testing::{pool_of, set_active};

    fn auto() -> LardSettings {
        let given = Vec::new();
        let mut o = Options::new("lard", &given);
        LardSettings::read(&mut o).unwrap()
    }

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{}:80", i + 1)).collect()
    }

    #[test]
    fn placement_depends_on_the_rule_file_only() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let one = Placement::new(&pool, &ids(4));
        let two = Placement::new(&pool, &ids(4));
        let judge = Judge::new(&auto(), &pool, None);
        for target in 0..200u64 {
            let t = target.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            // Different loads in the two instances' views (below any threshold) agree.
            set_active(&servers, &[((target % 4) as usize, 3)]);
            let a = one.start(t, &judge, &pool, &[], |_| Temperature::Unjudged);
            set_active(&servers, &[((target % 4) as usize, 0)]);
            assert_eq!(
                a,
                two.start(t, &judge, &pool, &[], |_| Temperature::Unjudged)
            );
        }
    }

    #[test]
    fn an_overloaded_target_walks_its_ring_to_an_underloaded_server() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let placement = Placement::new(&pool, &ids(4));
        let judge = Judge::new(&auto(), &pool, None);
        let t = 42u64;
        let home = placement
            .start(t, &judge, &pool, &[], |_| Temperature::Unjudged)
            .unwrap();
        // Every server but home underloaded: the next along the ring, which is also where a
        // second instance with other loads would send it.
        set_active(&servers, &[(home, 40)]);
        let judge = Judge::new(&auto(), &pool, None);
        let to = placement.relieve(t, &judge, &pool, &[]).unwrap();
        assert_ne!(to, home);
        let next = placement.replace(t, &judge, &pool, &[home]).unwrap();
        assert_eq!(to, next, "relief and replacement walk the same order");
        // Nobody underloaded: the least loaded.
        let others: Vec<usize> = (0..4).filter(|&i| i != home).collect();
        set_active(
            &servers,
            &[
                (home, 60),
                (others[0], 20),
                (others[1], 10),
                (others[2], 12),
            ],
        );
        let judge = Judge::new(&auto(), &pool, None);
        assert_eq!(placement.relieve(t, &judge, &pool, &[]), Some(others[1]));
    }
}
