//! `lard-r`: LARD with replication (Pai et al., ASPLOS 1998, figure 4). A popular target may be
//! served by a set of servers; the set grows by the least loaded server when its least loaded
//! member is overloaded, and shrinks by its most loaded member once it has not changed for `k`
//! seconds:
//!
//! ```text
//! if serverSet[t] is empty:  n, serverSet[t] <- least loaded node
//! else:
//!   n <- least loaded node in serverSet[t];  m <- most loaded node in serverSet[t]
//!   if (load(n) > T_high and some load < T_low) or load(n) >= 2 T_high:
//!     p <- least loaded node;  add p to serverSet[t];  n <- p
//!   if |serverSet[t]| > 1 and time() - serverSet[t].lastMod > K:
//!     remove m from serverSet[t]
//! send t to n;  if serverSet[t] changed: serverSet[t].lastMod <- time()
//! ```

use crate::clock::Clock;
use crate::key::KeySource;
use crate::lard::LardSettings;
use crate::load::{eligible, least_loaded_from, lighter};
use crate::options::Options;
use crate::{BuildError, PoolView, RequestView, Scheduler};
use lru::LruCache;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug)]
struct ServerSet {
    members: Vec<u32>,
    last_change: Duration,
}

#[derive(Debug)]
pub struct LardReplicated {
    key: KeySource,
    settings: LardSettings,
    /// How long a set must stay unchanged before it shrinks.
    k: Duration,
    clock: Arc<dyn Clock>,
    sets: Mutex<LruCache<u64, ServerSet>>,
}

impl LardReplicated {
    pub fn build(
        options: &mut Options<'_>,
        clock: Arc<dyn Clock>,
    ) -> Result<LardReplicated, BuildError> {
        let key = KeySource::from_options(options, "path").map_err(BuildError::BadOption)?;
        let settings = LardSettings::read(options)?;
        let k = options
            .number("k", 20.0, 0.0, 86_400.0)
            .map_err(BuildError::BadOption)?;
        Ok(LardReplicated {
            key,
            settings,
            k: Duration::from_secs_f64(k),
            clock,
            sets: Mutex::new(LruCache::new(settings.max_targets)),
        })
    }

    /// The server set of the target with key hash `target`, for tests and statistics.
    pub fn members(&self, target: u64) -> Vec<usize> {
        self.sets
            .lock()
            .ok()
            .and_then(|mut s| {
                s.get(&target)
                    .map(|set| set.members.iter().map(|&m| m as usize).collect())
            })
            .unwrap_or_default()
    }
}

impl Scheduler for LardReplicated {
    fn name(&self) -> &'static str {
        "lard-r"
    }

    fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        let count = pool.servers.len().max(1);
        let Some(target) = self.key.hash(request) else {
            return least_loaded_from(pool, tried, 0);
        };
        let start = (target % count as u64) as usize;
        let mut sets = self.sets.lock().ok()?;
        let set = sets.get_or_insert_mut(target, || ServerSet {
            members: Vec::new(),
            last_change: Duration::ZERO,
        });
        // Servers that went away, became quiescent or failed for this request are no member.
        let member_ok = |m: &u32| {
            let m = *m as usize;
            m < pool.servers.len() && eligible(&pool.servers[m], m, tried)
        };
        let mut changed = false;
        if !set.members.iter().all(member_ok) {
            set.members.retain(member_ok);
            changed = true;
        }
        let heavier = |a: usize, b: usize| {
            if lighter(&pool.servers[a], &pool.servers[b]) {
                b
            } else {
                a
            }
        };
        let lighter_of = |a: usize, b: usize| {
            if lighter(&pool.servers[b], &pool.servers[a]) {
                b
            } else {
                a
            }
        };
        let members = set.members.iter().map(|&m| m as usize);
        let chosen = match members.clone().reduce(lighter_of) {
            None => {
                let n = least_loaded_from(pool, tried, start)?;
                set.members.push(n as u32);
                changed = true;
                n
            }
            Some(n) => {
                // Both taken before the set changes, as in the paper.
                let m = members.reduce(heavier).unwrap_or(n);
                let mut chosen = n;
                if self
                    .settings
                    .should_move(pool.servers[n].active(), pool, tried)
                {
                    if let Some(p) = least_loaded_from(pool, tried, start) {
                        if !set.members.contains(&(p as u32)) {
                            set.members.push(p as u32);
                            changed = true;
                        }
                        chosen = p;
                    }
                }
                // The clock is read only for sets that may shrink: most targets have one server.
                if set.members.len() > 1
                    && self.clock.now().saturating_sub(set.last_change) > self.k
                {
                    set.members.retain(|&x| x as usize != m);
                    changed = true;
                }
                chosen
            }
        };
        if changed {
            set.last_change = self.clock.now();
        }
        Some(chosen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::key::stable_hash;
    use crate::testing::{pool_of, request, set_active};
    use crate::OptionValue;

    fn lard_r(clock: Arc<ManualClock>) -> LardReplicated {
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(2)),
            ("t_high".to_string(), OptionValue::Integer(5)),
            ("k".to_string(), OptionValue::Integer(20)),
        ];
        let mut o = Options::new("lard-r", &given);
        let l = LardReplicated::build(&mut o, clock).unwrap();
        o.finish().unwrap();
        l
    }

    fn pick(l: &LardReplicated, pool: &PoolView<'_>) -> usize {
        let mut r = request();
        r.path = b"/hot";
        l.pick(&r, pool, &[]).unwrap()
    }

    #[test]
    fn the_set_grows_under_load_and_shrinks_after_k() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(Arc::clone(&clock));
        let t = stable_hash(b"/hot");
        let first = pick(&l, &pool);
        assert_eq!(l.members(t), vec![first]);
        let second = (first + 1) % 3;
        let third = (first + 2) % 3;

        // Overloaded member, an underloaded server elsewhere: the set grows by it.
        set_active(&servers, &[(first, 6), (second, 1), (third, 3)]);
        assert_eq!(pick(&l, &pool), second);
        assert_eq!(l.members(t), vec![first, second]);

        // Requests go to the least loaded member while no threshold is crossed.
        set_active(&servers, &[(first, 3), (second, 4), (third, 0)]);
        clock.advance(Duration::from_secs(10));
        assert_eq!(pick(&l, &pool), first);
        assert_eq!(l.members(t).len(), 2, "changed 10 s ago: no shrinking yet");

        // 21 s after the last change: the most loaded member leaves.
        clock.advance(Duration::from_secs(11));
        assert_eq!(pick(&l, &pool), first);
        assert_eq!(l.members(t), vec![first]);

        // Right after a change the set keeps its size.
        set_active(&servers, &[(first, 10), (second, 9), (third, 10)]);
        assert_eq!(
            pick(&l, &pool),
            second,
            "at 2 * t_high the set grows whatever the others carry"
        );
        assert_eq!(l.members(t).len(), 2);
        clock.advance(Duration::from_secs(19));
        set_active(&servers, &[(first, 3), (second, 3), (third, 3)]);
        pick(&l, &pool);
        assert_eq!(l.members(t).len(), 2);
    }

    #[test]
    fn a_member_that_fails_leaves_the_set() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(clock);
        let first = pick(&l, &pool);
        servers[first].set_up(false);
        let next = pick(&l, &pool);
        assert_ne!(next, first);
        assert_eq!(l.members(stable_hash(b"/hot")), vec![next]);
    }
}
