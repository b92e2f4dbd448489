//! `hash`: consistent hashing with bounded loads on a request key (path by default; the URI, a
//! regex capture like KTCPVS `hhttp`, a header or a cookie). The same key goes to the same
//! server as long as that server is not carrying more than `balance_factor` times its fair
//! share of the active requests; then the key spills to the next server on the ring. A request
//! without the key is placed by its client's address on the same ring, as `source-hash` does.
//!
//! Placement depends only on the rule file (server addresses and weights), so several tcpvs
//! instances behind an L4 director send a key to the same server without sharing state.

use crate::key::{client_hash, KeySource};
use crate::load::least_loaded_from;
use crate::options::Options;
use crate::ring::PoolRing;
use crate::{BuildError, PoolView, RequestView, Scheduler};
use std::sync::atomic::{AtomicU64, Ordering};

fn usable_weight(pool: &PoolView<'_>) -> u64 {
    pool.servers
        .iter()
        .map(|s| s.load())
        .filter(|l| l.is_usable())
        .map(|l| u64::from(l.weight))
        .sum()
}

#[derive(Debug)]
pub struct ConsistentHash {
    name: &'static str,
    key: KeySource,
    /// In thousandths; `None`: no load bound.
    balance_factor: Option<u64>,
    ring: PoolRing,
    /// Requests in flight in the pool, kept through connection_started/ended so a pick does
    /// not have to add up every server (HAProxy's lb_chash does the same).
    active: AtomicU64,
    /// Weight of the usable servers, refreshed when servers change.
    usable_weight: AtomicU64,
}

impl ConsistentHash {
    /// `hash` with the key read from the options.
    pub fn build(
        options: &mut Options<'_>,
        pool: &PoolView<'_>,
        server_ids: &[String],
    ) -> Result<Self, BuildError> {
        let key = KeySource::from_options(options, "path").map_err(BuildError::BadOption)?;
        Self::with_key("hash", key, options, pool, server_ids)
    }

    pub(crate) fn with_key(
        name: &'static str,
        key: KeySource,
        options: &mut Options<'_>,
        pool: &PoolView<'_>,
        server_ids: &[String],
    ) -> Result<Self, BuildError> {
        // 0 turns the bound off (plain consistent hashing), like HAProxy's hash-balance-factor.
        let factor = options
            .number("balance_factor", 1.25, 0.0, 100.0)
            .map_err(BuildError::BadOption)?;
        if factor != 0.0 && factor < 1.0 {
            let index = options.index_of("balance_factor").unwrap_or(0);
            return Err(BuildError::BadOption(options.error_at(
                index,
                "balance_factor must be 0 (no bound) or at least 1",
            )));
        }
        Ok(ConsistentHash {
            active: AtomicU64::new(pool.servers.iter().map(|s| u64::from(s.active())).sum()),
            usable_weight: AtomicU64::new(usable_weight(pool)),
            name,
            key,
            balance_factor: (factor != 0.0).then(|| (factor * 1000.0).round() as u64),
            ring: PoolRing::new(pool, server_ids),
        })
    }
}

impl Scheduler for ConsistentHash {
    fn name(&self) -> &'static str {
        self.name
    }

    fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        // No key (no such header or cookie, no regex match): the client's address places the
        // request on the same bounded-load ring, as `source-hash` would. Any server would do,
        // but this spreads keyless requests and keeps instances in agreement, where "least
        // loaded, ties to the first" would send every one of an idle pool's to server 0.
        let Some(hash) = self.key.hash(request).or_else(|| client_hash(request)) else {
            // Not even a known client: the least loaded server.
            return least_loaded_from(pool, tried, 0);
        };
        let bound = self.balance_factor.map(|factor| {
            (
                factor,
                self.active.load(Ordering::Relaxed),
                self.usable_weight.load(Ordering::Relaxed),
            )
        });
        let ring = self.ring.read()?;
        // Nothing on the ring: its servers are all down or tried, or the ring predates a weight
        // change. Ties start at the key's place so they spread too.
        ring.pick(hash, pool, tried, bound).or_else(|| {
            let count = pool.servers.len().max(1) as u64;
            least_loaded_from(pool, tried, (hash % count) as usize)
        })
    }

    fn connection_started(&self, _server: usize) {
        self.active.fetch_add(1, Ordering::Relaxed);
    }

    fn connection_ended(&self, _server: usize) {
        let _ = self
            .active
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
    }

    fn servers_changed(&self, pool: &PoolView<'_>) {
        self.ring.rebuild(pool);
        self.usable_weight
            .store(usable_weight(pool), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request};
    use crate::OptionValue;
    use std::net::{IpAddr, Ipv4Addr};

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("10.0.0.{i}:80")).collect()
    }

    fn hash(pool: &PoolView<'_>, ids: &[String], factor: f64) -> ConsistentHash {
        let given = vec![("balance_factor".to_string(), OptionValue::Float(factor))];
        let mut o = Options::new("hash", &given);
        ConsistentHash::build(&mut o, pool, ids).unwrap()
    }

    fn key_path(i: usize) -> Vec<u8> {
        format!("/k/{i}").into_bytes()
    }

    fn place(h: &ConsistentHash, pool: &PoolView<'_>, keys: usize) -> Vec<usize> {
        (0..keys)
            .map(|i| {
                let p = key_path(i);
                let mut r = request();
                r.path = &p;
                h.pick(&r, pool, &[]).unwrap()
            })
            .collect()
    }

    #[test]
    fn same_rules_same_placement() {
        let servers = pool_of(&[1; 5]);
        let pool = PoolView { servers: &servers };
        let a = hash(&pool, &ids(5), 0.0);
        let b = hash(&pool, &ids(5), 0.0);
        assert_eq!(place(&a, &pool, 1000), place(&b, &pool, 1000));
    }

    #[test]
    fn removing_one_of_ten_moves_about_a_tenth() {
        let servers = pool_of(&[1; 10]);
        let pool = PoolView { servers: &servers };
        let h = hash(&pool, &ids(10), 0.0);
        let before = place(&h, &pool, 20_000);
        servers[3].set_up(false);
        h.servers_changed(&pool);
        let after = place(&h, &pool, 20_000);
        let moved = before.iter().zip(&after).filter(|(a, b)| a != b).count();
        let expected = before.iter().filter(|&&s| s == 3).count();
        assert_eq!(moved, expected, "only the removed server's keys move");
        assert!((1500..=2500).contains(&moved), "{moved} of 20000 moved");
    }

    #[test]
    fn weights_shape_the_shares() {
        let servers = pool_of(&[1, 3]);
        let pool = PoolView { servers: &servers };
        let h = hash(&pool, &ids(2), 0.0);
        let placed = place(&h, &pool, 20_000);
        let heavy = placed.iter().filter(|&&s| s == 1).count();
        assert!(
            (13_500..=16_500).contains(&heavy),
            "{heavy} of 20000 on weight 3 of 4"
        );
    }

    /// Placement of pools whose servers all have weight 1 (the default) is what earlier
    /// versions gave, so a rolling upgrade does not move keys.
    #[test]
    fn placement_with_default_weights_is_pinned() {
        let servers = pool_of(&[1; 5]);
        let pool = PoolView { servers: &servers };
        assert_eq!(
            place(&hash(&pool, &ids(5), 0.0), &pool, 24),
            [0, 2, 1, 3, 4, 3, 2, 1, 2, 2, 4, 0, 0, 0, 2, 0, 4, 3, 3, 3, 0, 4, 4, 1]
        );
    }

    /// With mixed weights each server has 160 points per unit of weight (earlier versions
    /// scaled every count by the pool's total weight, so this placement differs from theirs).
    #[test]
    fn placement_with_mixed_weights_is_pinned() {
        let servers = pool_of(&[1, 2, 3, 1, 2]);
        let pool = PoolView { servers: &servers };
        assert_eq!(
            place(&hash(&pool, &ids(5), 0.0), &pool, 24),
            [0, 1, 2, 3, 4, 2, 4, 1, 2, 2, 1, 0, 2, 2, 2, 0, 4, 3, 2, 3, 0, 1, 2, 1]
        );
    }

    #[test]
    fn keyless_requests_go_by_client_like_source_hash() {
        let servers = pool_of(&[1; 4]);
        let pool = PoolView { servers: &servers };
        let ids = ids(4);
        let given = vec![
            ("key".to_string(), OptionValue::String("header".into())),
            ("header".to_string(), OptionValue::String("X-User".into())),
        ];
        let by_header = |pool: &PoolView<'_>| {
            let mut o = Options::new("hash", &given);
            let h = ConsistentHash::build(&mut o, pool, &ids).unwrap();
            o.finish().unwrap();
            h
        };
        let (a, b) = (by_header(&pool), by_header(&pool));
        let mut o = Options::new("source-hash", &[]);
        let source = crate::source_hash::build(&mut o, &pool, &ids).unwrap();
        let mut seen = std::collections::HashSet::new();
        for c in 0..64u8 {
            let mut r = request();
            r.client = IpAddr::V4(Ipv4Addr::new(192, 0, 2, c));
            let s = a.pick(&r, &pool, &[]).unwrap();
            assert_eq!(b.pick(&r, &pool, &[]), Some(s), "instances agree");
            assert_eq!(
                source.pick(&r, &pool, &[]),
                Some(s),
                "as source-hash places it"
            );
            seen.insert(s);
        }
        assert_eq!(
            seen.len(),
            4,
            "keyless clients spread over the pool: {seen:?}"
        );
        // No known client: the least loaded server, as before.
        let mut r = request();
        r.client = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        servers[0].add_active();
        assert_eq!(a.pick(&r, &pool, &[]), Some(1));
    }

    #[test]
    fn a_hot_key_spills_past_the_bound() {
        let servers = pool_of(&[1; 4]);
        let pool = PoolView { servers: &servers };
        let h = hash(&pool, &ids(4), 1.25);
        let mut r = request();
        r.path = b"/hot";
        let home = h.pick(&r, &pool, &[]).unwrap();
        // (The switch tells modules when requests start and end; so does this test.)
        // Hold every pick open: the bound for the home server is ceil(1.25 * (total+1) / 4).
        let mut counts = [0u32; 4];
        for _ in 0..40 {
            let s = h.pick(&r, &pool, &[]).unwrap();
            servers[s].add_active();
            h.connection_started(s);
            counts[s] += 1;
            let total: u32 = counts.iter().sum();
            let bound = (1.25 * f64::from(total) / 4.0).ceil() as u32;
            assert!(
                counts.iter().all(|&c| c <= bound),
                "{counts:?} bound {bound}"
            );
        }
        assert!(
            counts[home] >= 10,
            "the home server keeps its fair share: {counts:?}"
        );
    }
}
