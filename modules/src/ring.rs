//! A consistent-hash ring with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads", SODA 2018; HAProxy's `hash-balance-factor`).
//!
//! Each server owns points on a 64-bit circle, in proportion to its weight; a key goes to the
//! first server clockwise from its hash whose load stays within `balance_factor` times its fair
//! share. Points depend only on server identities and weights, so two switches with the same
//! rules place keys alike, and adding or removing one of N servers moves about 1/N of keys.

use crate::key::stable_hash;
use crate::PoolView;

/// Points per server of average weight.
const POINTS_PER_SERVER: u64 = 160;

#[derive(Debug, Default)]
pub struct Ring {
    /// Point positions, sorted; `owners[i]` is the server of `positions[i]`. Kept apart so the
    /// search touches only positions.
    positions: Vec<u64>,
    owners: Vec<u32>,
    /// `buckets[b]`: the first point whose position's top `BUCKET_BITS` bits are >= b, so a
    /// lookup starts next to its answer instead of binary-searching the whole ring.
    buckets: Vec<u32>,
}

const BUCKET_BITS: u32 = 12;

impl Ring {
    /// Builds the ring for servers named `ids` (stable identities, e.g. addresses) with
    /// `weights`; weight 0 servers get no points.
    pub fn build(ids: &[String], weights: &[u32]) -> Ring {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        let live = weights.iter().filter(|&&w| w > 0).count() as u64;
        let mut points: Vec<(u64, u32)> = Vec::new();
        if total == 0 {
            return Ring::default();
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
        let positions: Vec<u64> = points.iter().map(|&(p, _)| p).collect();
        let owners = points.iter().map(|&(_, s)| s).collect();
        let buckets = (0..1u64 << BUCKET_BITS)
            .map(|b| positions.partition_point(|&p| p >> (64 - BUCKET_BITS) < b) as u32)
            .collect();
        Ring {
            positions,
            owners,
            buckets,
        }
    }

    /// Index of the first point at or after `hash` (may be `len`, meaning wrap to 0).
    fn first_at_or_after(&self, hash: u64) -> usize {
        let bucket = (hash >> (64 - BUCKET_BITS)) as usize;
        let from = self.buckets[bucket] as usize;
        let to = self
            .buckets
            .get(bucket + 1)
            .map_or(self.positions.len(), |&b| b as usize);
        from + self.positions[from..to].partition_point(|&p| p < hash)
    }

    /// The first eligible server clockwise from `hash` whose load would stay within its bound:
    /// with `bound` = Some((factor in thousandths, T, W)), server s may take the key if
    /// active_s + 1 <= ceil(factor * (T + 1) * w_s / W), T being the pool's active requests and
    /// W its usable weight. `None` means plain consistent hashing.
    pub fn pick(
        &self,
        hash: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        bound: Option<(u64, u64, u64)>,
    ) -> Option<usize> {
        if self.positions.is_empty() {
            return None;
        }
        let start = self.first_at_or_after(hash);
        let n = self.positions.len();
        let mut fallback = None;
        for step in 0..n {
            let server = self.owners[(start + step) % n] as usize;
            let Some(state) = pool.servers.get(server) else {
                continue;
            };
            let load = state.load();
            if !load.is_usable() || tried.contains(&server) {
                continue;
            }
            fallback.get_or_insert(server);
            let Some((factor, active_total, weight_total)) = bound else {
                return Some(server);
            };
            // active + 1 <= ceil(x)  <=>  active < x  <=>  (integers, no division)
            // active * W * 1000 < factor * (T + 1) * w.
            if u128::from(load.active) * u128::from(weight_total) * 1000
                < u128::from(factor) * u128::from(active_total + 1) * u128::from(load.weight)
            {
                return Some(server);
            }
        }
        // Only reachable with rounding at tiny loads: every candidate is at its bound.
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_lookup_agrees_with_binary_search() {
        let ids: Vec<String> = (0..37).map(|i| format!("s{i}")).collect();
        let ring = Ring::build(&ids, &[1; 37]);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(
                ring.first_at_or_after(x),
                ring.positions.partition_point(|&p| p < x)
            );
        }
        assert_eq!(
            ring.first_at_or_after(u64::MAX),
            ring.positions.partition_point(|&p| p < u64::MAX)
        );
        assert_eq!(ring.first_at_or_after(0), 0);
    }
}
