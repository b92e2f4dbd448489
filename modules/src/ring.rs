//! A consistent-hash ring with bounded loads (Mirrokni, Thorup, Zadimoghaddam, "Consistent
//! Hashing with Bounded Loads", SODA 2018; HAProxy's `hash-balance-factor`).
//!
//! Each server owns points on a 64-bit circle, a fixed number per unit of its own weight; a key
//! goes to the first server clockwise from its hash whose load stays within `balance_factor`
//! times its fair share. A server's points depend on nothing but its own identity and weight:
//! two switches with the same rules place keys alike, and adding, removing or reweighting one
//! server moves keys only onto or off that server (about 1/N of them for one of N servers of
//! equal weight), whatever the other servers' weights.

use crate::key::stable_hash;
use crate::load::lighter_load;
use crate::{Load, PoolView};
use std::io::Write;
use std::sync::{RwLock, RwLockReadGuard};

/// Points per unit of weight. Weight 1 (the default) gets 160, what every server got when all
/// weights were equal in earlier versions, so such pools keep their placement.
const POINTS_PER_WEIGHT: u64 = 160;

/// Most points on one ring (1.5 MB of positions and owners). Weights are up to 65535, so a ring
/// of 160 points per unit could reach billions; above this every server's count is halved,
/// as often as needed, which keeps the proportions. Only then does one server's weight change
/// the others' points, and only when the unhalved total crosses this cap times a power of two.
const MAX_POINTS: u64 = 1 << 17;

#[derive(Debug, Default)]
pub struct Ring {
    /// Point positions, sorted; `owners[i]` is the server of `positions[i]`. Kept apart so the
    /// search touches only positions.
    positions: Vec<u64>,
    owners: Vec<u32>,
    /// `buckets[b]`: the first point whose position's top `BUCKET_BITS` bits are >= b, so a
    /// lookup starts next to its answer instead of binary-searching the whole ring.
    buckets: Vec<u32>,
    /// How many servers own points: a walk that has met them all can stop.
    servers: usize,
}

const BUCKET_BITS: u32 = 12;

/// Points of a server of `weight` when every count is halved `halvings` times; at least one
/// for any server of weight above 0.
fn points_of(weight: u32, halvings: u32) -> u64 {
    if weight == 0 {
        return 0;
    }
    ((u64::from(weight) * POINTS_PER_WEIGHT) >> halvings).max(1)
}

impl Ring {
    /// Builds the ring for servers named `ids` (stable identities, e.g. addresses) with
    /// `weights`; weight 0 servers get no points.
    pub fn build(ids: &[String], weights: &[u32]) -> Ring {
        let servers: Vec<(&String, u32)> = ids.iter().zip(weights.iter().copied()).collect();
        let total_at = |halvings: u32| -> u64 {
            servers
                .iter()
                .map(|&(_, weight)| points_of(weight, halvings))
                .sum()
        };
        // A weight of 65535 is below 2^16 and 160 below 2^8: 24 halvings leave one point per
        // server, so the search ends; a pool of more than MAX_POINTS servers keeps one each.
        let halvings = (0..=24).find(|&h| total_at(h) <= MAX_POINTS).unwrap_or(24);
        let total = total_at(halvings);
        if total == 0 {
            return Ring::default();
        }
        let mut points: Vec<(u64, u32)> = Vec::with_capacity(total as usize);
        let mut label = Vec::new();
        for (index, &(id, weight)) in servers.iter().enumerate() {
            for replica in 0..points_of(weight, halvings) {
                // "<id>#<replica>": halving keeps each server's first points, so keys on them
                // stay put.
                label.clear();
                label.extend_from_slice(id.as_bytes());
                let _ = write!(label, "#{replica}"); // writing to a Vec cannot fail
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
            servers: servers.iter().filter(|&&(_, w)| w > 0).count(),
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
    /// W its usable weight. `None` means plain consistent hashing. When every eligible server
    /// is at its bound, the least loaded of them (per unit of weight).
    pub fn pick(
        &self,
        hash: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        bound: Option<(u64, u64, u64)>,
    ) -> Option<usize> {
        self.walk(hash, pool, tried, bound).0
    }

    /// `pick`, and how many points the walk visited.
    fn walk(
        &self,
        hash: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        bound: Option<(u64, u64, u64)>,
    ) -> (Option<usize>, usize) {
        if self.positions.is_empty() {
            return (None, 0);
        }
        let start = self.first_at_or_after(hash);
        let n = self.positions.len();
        // A server's later points give the same answer as its first, so each server is looked
        // at once, and the walk ends when all have been: with most servers tried, down or at
        // their bound it would otherwise cover the whole ring.
        let mut seen = SeenServers::default();
        let mut examined = 0;
        let mut least_loaded: Option<(usize, Load)> = None;
        for step in 0..n {
            let server = self.owners[(start + step) % n] as usize;
            if !seen.insert(server) {
                continue;
            }
            examined += 1;
            let load = pool.servers.get(server).map(|s| s.load());
            if let Some(load) = load.filter(|l| l.is_usable() && !tried.contains(&server)) {
                let Some((factor, active_total, weight_total)) = bound else {
                    return (Some(server), step + 1);
                };
                // active + 1 <= ceil(x)  <=>  active < x  <=>  (integers, no division)
                // active * W * 1000 < factor * (T + 1) * w.
                if u128::from(load.active) * u128::from(weight_total) * 1000
                    < u128::from(factor) * u128::from(active_total + 1) * u128::from(load.weight)
                {
                    return (Some(server), step + 1);
                }
                // Ties keep the first clockwise, so the fallback is still the key's own.
                if least_loaded.is_none_or(|(_, best)| lighter_load(load, best)) {
                    least_loaded = Some((server, load));
                }
            }
            if examined == self.servers {
                return (least_loaded.map(|(s, _)| s), step + 1);
            }
        }
        (least_loaded.map(|(s, _)| s), n)
    }
}

impl Ring {
    /// The first server clockwise from `hash` that `accept` takes, each server asked once (in
    /// the order its first point is met): a key's preference order, the same in every
    /// instance with the same servers and weights.
    pub fn first_where(&self, hash: u64, mut accept: impl FnMut(usize) -> bool) -> Option<usize> {
        if self.positions.is_empty() {
            return None;
        }
        let start = self.first_at_or_after(hash);
        let n = self.positions.len();
        let mut seen = SeenServers::default();
        let mut examined = 0;
        for step in 0..n {
            let server = self.owners[(start + step) % n] as usize;
            if !seen.insert(server) {
                continue;
            }
            if accept(server) {
                return Some(server);
            }
            examined += 1;
            if examined == self.servers {
                return None;
            }
        }
        None
    }
}

/// The ring of a pool's rule file: built from the servers' stable identities and weights, and
/// rebuilt when a weight changes (health and drains change no weight: a walk skips such
/// servers). Shared by `hash`, `source-hash` and LARD's placement.
#[derive(Debug)]
pub struct PoolRing {
    server_ids: Vec<String>,
    ring: RwLock<Ring>,
}

impl PoolRing {
    pub fn new(pool: &PoolView<'_>, server_ids: &[String]) -> PoolRing {
        PoolRing {
            ring: RwLock::new(Ring::build(server_ids, &weights_of(pool))),
            server_ids: server_ids.to_vec(),
        }
    }

    /// Builds the ring again for the pool's weights of now.
    pub fn rebuild(&self, pool: &PoolView<'_>) {
        // Built before taking the lock, so picks wait only for the swap.
        let rebuilt = Ring::build(&self.server_ids, &weights_of(pool));
        if let Ok(mut ring) = self.ring.write() {
            *ring = rebuilt;
        }
    }

    /// The ring to walk; `None` only if a writer panicked.
    pub fn read(&self) -> Option<RwLockReadGuard<'_, Ring>> {
        self.ring.read().ok()
    }
}

fn weights_of(pool: &PoolView<'_>) -> Vec<u32> {
    pool.servers.iter().map(|s| s.weight()).collect()
}

/// Servers met on one walk, a bit each: inline for pools of up to 256 servers, so a pick does
/// not allocate.
#[derive(Default)]
struct SeenServers {
    inline: [u64; 4],
    more: Vec<u64>,
}

impl SeenServers {
    /// Marks `server`; true if it was not marked yet.
    fn insert(&mut self, server: usize) -> bool {
        let (word, bit) = (server / 64, 1u64 << (server % 64));
        let slot = if word < self.inline.len() {
            &mut self.inline[word]
        } else {
            let index = word - self.inline.len();
            if self.more.len() <= index {
                self.more.resize(index + 1, 0);
            }
            &mut self.more[index]
        };
        let fresh = *slot & bit == 0;
        *slot |= bit;
        fresh
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

    fn points_per_server(ring: &Ring) -> Vec<usize> {
        let mut counts = vec![0; ring.servers];
        for &o in &ring.owners {
            counts[o as usize] += 1;
        }
        counts
    }

    #[test]
    fn points_depend_only_on_the_own_weight() {
        let ids: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
        let three = Ring::build(&ids[..3], &[1, 2, 3]);
        let four = Ring::build(&ids, &[1, 2, 3, 3]);
        assert_eq!(points_per_server(&three), [160, 320, 480]);
        assert_eq!(points_per_server(&four), [160, 320, 480, 480]);
        // The same points, so the old servers' keys stay unless the newcomer takes them.
        let old: Vec<(u64, u32)> = four
            .positions
            .iter()
            .zip(&four.owners)
            .filter(|&(_, &o)| o < 3)
            .map(|(&p, &o)| (p, o))
            .collect();
        let kept: Vec<(u64, u32)> = three
            .positions
            .iter()
            .copied()
            .zip(three.owners.iter().copied())
            .collect();
        assert_eq!(old, kept);
        // Reweighting one server leaves the others' points alone.
        let reweighted = Ring::build(&ids, &[1, 2, 1, 3]);
        assert_eq!(points_per_server(&reweighted), [160, 320, 160, 480]);
    }

    #[test]
    fn heavy_weights_are_capped_in_proportion() {
        let ids: Vec<String> = (0..3).map(|i| format!("s{i}")).collect();
        let ring = Ring::build(&ids, &[65_535, 65_535, 1]);
        assert!(
            ring.positions.len() as u64 <= MAX_POINTS,
            "{}",
            ring.positions.len()
        );
        let counts = points_per_server(&ring);
        assert_eq!(counts[0], counts[1]);
        assert!(counts[2] >= 1);
        assert!(
            counts[0] as u64 * 2 > MAX_POINTS / 2,
            "{counts:?}: not halved too far"
        );
        // Many weight-1 servers beyond the cap: every one keeps at least a point.
        let many: Vec<String> = (0..1000).map(|i| format!("m{i}")).collect();
        let ring = Ring::build(&many, &[1; 1000]);
        assert!(ring.positions.len() as u64 <= MAX_POINTS);
        assert!(points_per_server(&ring).iter().all(|&c| c == 80));
    }

    #[test]
    fn a_walk_stops_once_every_server_was_examined() {
        let ids: Vec<String> = (0..3).map(|i| format!("s{i}")).collect();
        let ring = Ring::build(&ids, &[100, 100, 100]);
        let servers = crate::testing::pool_of(&[100, 100, 100]);
        crate::testing::set_active(&servers, &[(1, 5)]);
        let pool = PoolView { servers: &servers };
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let (answer, visited) = ring.walk(x, &pool, &[0, 1, 2], None);
            assert_eq!(answer, None);
            assert!(
                visited < ring.positions.len() / 10,
                "{visited} points visited"
            );
            let (answer, visited) = ring.walk(x, &pool, &[0, 2], Some((1000, 0, 300)));
            assert_eq!(answer, Some(1), "the only candidate, though over its bound");
            assert!(
                visited < ring.positions.len() / 10,
                "{visited} points visited"
            );
        }
    }

    #[test]
    fn at_the_bound_everywhere_the_least_loaded_candidate_wins() {
        let ids: Vec<String> = (0..4).map(|i| format!("s{i}")).collect();
        let ring = Ring::build(&ids, &[1, 1, 2, 1]);
        let servers = crate::testing::pool_of(&[1, 1, 2, 1]);
        crate::testing::set_active(&servers, &[(0, 5), (1, 4), (2, 7), (3, 6)]);
        let pool = PoolView { servers: &servers };
        // Factor 1, no active request counted, a usable weight of 1000: each server's bound is
        // ceil(w / 1000) = 1 request, and every one already has more. Per unit of weight server
        // 2 (3.5) is the least loaded, then 1 (4).
        let nobody = Some((1000, 0, 1000));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..1000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            assert_eq!(ring.pick(x, &pool, &[], nobody), Some(2));
            assert_eq!(ring.pick(x, &pool, &[2], nobody), Some(1));
        }
    }
}
