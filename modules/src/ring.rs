//! A consistent-hash ring with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads", SODA 2018; HAProxy's `hash-balance-factor`).
//!
//! Each server owns points on a 64-bit circle, in proportion to its weight; a key goes to the
//! first server clockwise from its hash whose load stays within `balance_factor` times its fair
//! share. Points depend only on server identities and weights, so two switches with the same
//! rules place keys alike, and adding or removing one of N servers moves about 1/N of keys.

use crate::key::stable_hash;
use crate::load::eligible;
use crate::PoolView;

/// Points per server of average weight.
const POINTS_PER_SERVER: u64 = 160;

#[derive(Debug, Default)]
pub struct Ring {
    /// (position, server index), sorted by position.
    points: Vec<(u64, u32)>,
}

impl Ring {
    /// Builds the ring for servers named `ids` (stable identities, e.g. addresses) with
    /// `weights`; weight 0 servers get no points.
    pub fn build(ids: &[String], weights: &[u32]) -> Ring {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let live = weights.iter().filter(|&&w| w > 0).count() as u64;
        let mut points = Vec::new();
        if total == 0 {
            return Ring { points };
        }
        for (index, (id, &weight)) in ids.iter().zip(weights).enumerate() {
            if weight == 0 {
                continue;
            }
            // Proportional to weight, `POINTS_PER_SERVER` for the average one, at least one.
            let count = (POINTS_PER_SERVER * live * u64::from(weight) / total).max(1);
            for replica in 0..count {
                let mut label = id.as_bytes().to_vec();
                label.push(b'#');
                label.extend_from_slice(replica.to_string().as_bytes());
                points.push((stable_hash(&label), index as u32));
            }
        }
        points.sort_unstable();
        Ring { points }
    }

    /// The first eligible server clockwise from `hash` whose load would stay within its bound,
    /// where the bound of server s is ceil(balance_factor * (total active + 1) * w_s / W).
    /// `balance_factor` of `f64::INFINITY` means plain consistent hashing.
    pub fn pick(
        &self,
        hash: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        balance_factor: f64,
    ) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let (mut active_total, mut weight_total) = (1u64, 0u64);
        for (i, s) in pool.servers.iter().enumerate() {
            if eligible(s, i, tried) {
                active_total += u64::from(s.active());
                weight_total += u64::from(s.weight());
            }
        }
        if weight_total == 0 {
            return None;
        }
        let start = self.points.partition_point(|&(p, _)| p < hash);
        let n = self.points.len();
        let mut fallback = None;
        for step in 0..n {
            let server = self.points[(start + step) % n].1 as usize;
            let Some(state) = pool.servers.get(server) else {
                continue;
            };
            if !eligible(state, server, tried) {
                continue;
            }
            fallback.get_or_insert(server);
            if balance_factor.is_infinite() {
                return Some(server);
            }
            let share = (active_total * u64::from(state.weight())) as f64 / weight_total as f64;
            let bound = (balance_factor * share).ceil() as u64;
            if u64::from(state.active()) < bound {
                return Some(server);
            }
        }
        // Only reachable with rounding at tiny loads: every candidate is at its bound.
        fallback
    }
}
