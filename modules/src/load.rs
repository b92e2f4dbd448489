//! Load comparisons shared by the modules: active requests per unit of weight, compared by
//! cross-multiplication so no precision is lost.

use crate::{Load, PoolView, ServerState};

/// A server may get new work: up, weight above 0, and not already tried for this request.
pub(crate) fn eligible(server: &ServerState, index: usize, tried: &[usize]) -> bool {
    server.is_usable() && !tried.contains(&index)
}

/// `a` carries less load per weight than `b` (both weights above 0).
pub(crate) fn lighter_load(a: Load, b: Load) -> bool {
    u64::from(a.active) * u64::from(b.weight) < u64::from(b.active) * u64::from(a.weight)
}

/// The eligible server with the least load per weight. Ties go to the first one met when
/// scanning circularly from `start`, so callers spread ties by choosing `start`.
pub(crate) fn least_loaded_from(
    pool: &PoolView<'_>,
    tried: &[usize],
    start: usize,
) -> Option<usize> {
    let n = pool.servers.len();
    let mut best: Option<(usize, Load)> = None;
    for step in 0..n {
        let i = (start + step) % n;
        let load = pool.servers[i].load();
        if !load.is_usable() || tried.contains(&i) {
            continue;
        }
        if best.is_none_or(|(_, b)| lighter_load(load, b)) {
            best = Some((i, load));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pool_of;

    #[test]
    fn least_loaded_spreads_ties_by_start() {
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        assert_eq!(least_loaded_from(&pool, &[], 0), Some(0));
        assert_eq!(least_loaded_from(&pool, &[], 2), Some(2));
        assert_eq!(least_loaded_from(&pool, &[2], 2), Some(0));
        servers[0].add_active();
        assert_eq!(least_loaded_from(&pool, &[], 0), Some(1));
    }

    #[test]
    fn weight_scales_load() {
        let servers = pool_of(&[1, 4]);
        let pool = PoolView { servers: &servers };
        for _ in 0..3 {
            servers[1].add_active();
        }
        // 3 active on weight 4 is lighter than 1 on weight 1.
        servers[0].add_active();
        assert_eq!(least_loaded_from(&pool, &[], 0), Some(1));
    }
}
