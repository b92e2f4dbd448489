//! `lard`: locality-aware request distribution (Pai et al., "Locality-Aware Request
//! Distribution in Cluster-based Network Servers", ASPLOS 1998).
//!
//! Each target (by default the path) is assigned to one server, so that server's cache holds
//! it; the assignment moves to the least loaded server only when its server is overloaded while
//! another is underloaded, or when its load is extreme:
//!
//! ```text
//! if server[t] is unassigned:  server[t] <- least loaded
//! else if (load(server[t]) > T_high and some load < T_low) or load(server[t]) >= 2 T_high:
//!                              server[t] <- least loaded
//! ```
//!
//! Load is the server's active requests as the switch counts them; "least loaded" compares
//! active requests per unit of weight. The map is bounded (`max_targets`, least recently used
//! targets forgotten) and keyed by a 64-bit hash of the target, so a target costs the same
//! whatever its length.

use crate::key::{client_hash, KeySource};
use crate::load::{any_below, eligible, least_loaded_from};
use crate::options::Options;
use crate::{BuildError, PoolView, RequestView, Scheduler};
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Mutex;

/// The thresholds and target map size, shared with `lard-r`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LardSettings {
    pub t_low: u32,
    pub t_high: u32,
    pub max_targets: NonZeroUsize,
}

impl LardSettings {
    pub(crate) fn read(options: &mut Options<'_>) -> Result<LardSettings, BuildError> {
        let t_low = options
            .integer("t_low", 25, 0, 1_000_000)
            .map_err(BuildError::BadOption)? as u32;
        let t_high_index = options.index_of("t_high");
        let t_high = options
            .integer("t_high", 65, 1, 1_000_000)
            .map_err(BuildError::BadOption)? as u32;
        if t_high <= t_low {
            return Err(BuildError::BadOption(options.error_at(
                t_high_index.unwrap_or(0),
                format!("t_high ({t_high}) must be above t_low ({t_low})"),
            )));
        }
        let max_targets = options
            .integer("max_targets", 100_000, 1, 100_000_000)
            .map_err(BuildError::BadOption)?;
        Ok(LardSettings {
            t_low,
            t_high,
            max_targets: NonZeroUsize::new(max_targets as usize).unwrap_or(NonZeroUsize::MIN),
        })
    }

    /// The LARD imbalance test for a server carrying `load`.
    pub(crate) fn should_move(&self, load: u32, pool: &PoolView<'_>, tried: &[usize]) -> bool {
        (load > self.t_high && any_below(pool, tried, self.t_low))
            || load >= self.t_high.saturating_mul(2)
    }
}

/// A request without a key (no such header or cookie, no regex match) has no target to keep
/// local, so it goes to the least loaded server. Ties start at the client's hash rather than
/// at server 0: in an idle pool every keyless request would otherwise land on server 0, while
/// this way clients spread and each keeps its server while loads are even. Without a known
/// client address the scan starts at server 0.
pub(crate) fn least_loaded_for_client(
    request: &RequestView<'_>,
    pool: &PoolView<'_>,
    tried: &[usize],
) -> Option<usize> {
    let count = pool.servers.len().max(1) as u64;
    let start = client_hash(request).map_or(0, |hash| (hash % count) as usize);
    least_loaded_from(pool, tried, start)
}

#[derive(Debug)]
pub struct Lard {
    key: KeySource,
    settings: LardSettings,
    servers: Mutex<LruCache<u64, u32>>,
}

impl Lard {
    pub fn build(options: &mut Options<'_>) -> Result<Lard, BuildError> {
        let key = KeySource::from_options(options, "path").map_err(BuildError::BadOption)?;
        let settings = LardSettings::read(options)?;
        Ok(Lard {
            key,
            settings,
            servers: Mutex::new(LruCache::new(settings.max_targets)),
        })
    }

    /// Targets currently remembered.
    pub fn targets(&self) -> usize {
        self.servers.lock().map_or(0, |m| m.len())
    }
}

impl Scheduler for Lard {
    fn name(&self) -> &'static str {
        "lard"
    }

    fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        let n = pool.servers.len().max(1);
        let Some(target) = self.key.hash(request) else {
            return least_loaded_for_client(request, pool, tried);
        };
        // Ties between equally loaded servers go by the target's hash, so new targets spread
        // over an idle pool instead of piling onto the first server.
        let start = (target % n as u64) as usize;
        let mut servers = self.servers.lock().ok()?;
        // One map lookup: the entry is read and, if the target moves, updated in place.
        if let Some(home) = servers.get_mut(&target) {
            let s = *home as usize;
            let stays = s < pool.servers.len()
                && eligible(&pool.servers[s], s, tried)
                && !self
                    .settings
                    .should_move(pool.servers[s].active(), pool, tried);
            if !stays {
                *home = least_loaded_from(pool, tried, start)? as u32;
            }
            return Some(*home as usize);
        }
        let chosen = least_loaded_from(pool, tried, start)?;
        servers.put(target, chosen as u32);
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, request, set_active};
    use crate::OptionValue;
    use std::net::{IpAddr, Ipv4Addr};

    fn lard(t_low: i64, t_high: i64) -> Lard {
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(t_low)),
            ("t_high".to_string(), OptionValue::Integer(t_high)),
        ];
        let mut o = Options::new("lard", &given);
        let l = Lard::build(&mut o).unwrap();
        o.finish().unwrap();
        l
    }

    fn pick(l: &Lard, pool: &PoolView<'_>, path: &'static [u8]) -> usize {
        let mut r = request();
        r.path = path;
        l.pick(&r, pool, &[]).unwrap()
    }

    #[test]
    fn a_target_stays_until_the_thresholds_say_move() {
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard(2, 5);
        let home = pick(&l, &pool, b"/a");
        let other = (home + 1) % 3;
        let third = (home + 2) % 3;
        // Loaded but not past t_high: stays.
        set_active(&servers, &[(home, 5), (other, 1), (third, 1)]);
        assert_eq!(pick(&l, &pool, b"/a"), home);
        // Past t_high (6 > 5), but nobody below t_low (2): stays.
        set_active(&servers, &[(home, 6), (other, 2), (third, 2)]);
        assert_eq!(pick(&l, &pool, b"/a"), home);
        // Past t_high and one server below t_low: moves to the least loaded.
        set_active(&servers, &[(home, 6), (other, 1), (third, 3)]);
        assert_eq!(pick(&l, &pool, b"/a"), other);
        // The new home holds it, at loads that would not move it.
        set_active(&servers, &[(home, 0), (other, 5), (third, 0)]);
        assert_eq!(pick(&l, &pool, b"/a"), other);
        // At 2 * t_high (10) it moves whatever the others carry.
        set_active(&servers, &[(home, 9), (other, 10), (third, 9)]);
        let moved = pick(&l, &pool, b"/a");
        assert_ne!(moved, other);
        // Just below 2 * t_high with nobody under t_low: stays.
        set_active(&servers, &[(home, 9), (other, 9), (third, 9)]);
        assert_eq!(pick(&l, &pool, b"/a"), moved);
    }

    #[test]
    fn new_targets_spread_over_an_idle_pool() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard(25, 65);
        let mut counts = [0; 4];
        let paths: Vec<Vec<u8>> = (0..400).map(|i| format!("/p/{i}").into_bytes()).collect();
        for p in &paths {
            let mut r = request();
            r.path = p;
            counts[l.pick(&r, &pool, &[]).unwrap()] += 1;
        }
        assert!(counts.iter().all(|&c| c > 60), "{counts:?}");
        // Each target keeps its server.
        for p in &paths {
            let mut r = request();
            r.path = p;
            let first = l.pick(&r, &pool, &[]);
            assert_eq!(l.pick(&r, &pool, &[]), first);
        }
    }

    #[test]
    fn keyless_requests_spread_by_client() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let given = vec![
            ("key".to_string(), OptionValue::String("header".into())),
            ("header".to_string(), OptionValue::String("X-User".into())),
        ];
        let mut o = Options::new("lard", &given);
        let l = Lard::build(&mut o).unwrap();
        o.finish().unwrap();
        let mut counts = [0; 4];
        for c in 0..=255u8 {
            let mut r = request();
            r.client = IpAddr::V4(Ipv4Addr::new(198, 51, 100, c));
            let s = l.pick(&r, &pool, &[]).unwrap();
            assert_eq!(l.pick(&r, &pool, &[]), Some(s), "a client keeps its server");
            counts[s] += 1;
        }
        assert!(counts.iter().all(|&c| c > 30), "{counts:?}");
        assert_eq!(l.targets(), 0, "keyless requests are no target");
        // Load still decides first: the least loaded server whoever asks.
        set_active(&servers, &[(0, 1), (1, 1), (3, 1)]);
        let mut r = request();
        r.client = IpAddr::V4(Ipv4Addr::new(198, 51, 100, 9));
        assert_eq!(l.pick(&r, &pool, &[]), Some(2));
        // No known client: the scan starts at server 0, as before.
        set_active(&servers, &[(0, 0), (1, 0), (3, 0)]);
        r.client = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
        assert_eq!(l.pick(&r, &pool, &[]), Some(0));
    }

    #[test]
    fn a_failed_or_quiescent_server_loses_its_targets() {
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard(25, 65);
        let home = pick(&l, &pool, b"/x");
        let mut r = request();
        r.path = b"/x";
        assert_eq!(l.pick(&r, &pool, &[home]), Some(1 - home));
        servers[1 - home].set_weight(0);
        assert_eq!(l.pick(&r, &pool, &[]), Some(home));
    }

    #[test]
    fn the_map_is_bounded() {
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let given = vec![("max_targets".to_string(), OptionValue::Integer(10))];
        let mut o = Options::new("lard", &given);
        let l = Lard::build(&mut o).unwrap();
        for i in 0..100 {
            let p = format!("/{i}").into_bytes();
            let mut r = request();
            r.path = &p;
            l.pick(&r, &pool, &[]);
        }
        assert_eq!(l.targets(), 10);
    }

    #[test]
    fn thresholds_are_checked() {
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(50)),
            ("t_high".to_string(), OptionValue::Integer(40)),
        ];
        let mut o = Options::new("lard", &given);
        match Lard::build(&mut o) {
            Err(BuildError::BadOption(e)) => assert_eq!(e.index, 1),
            other => panic!("{other:?}"),
        }
    }
}
