//! `lard-r`: LARD with replication (Pai et al., ASPLOS 1998, figure 4). A popular target may be
//! served by a set of servers; the set grows by another server when its least loaded member is
//! overloaded, and shrinks by its most loaded member once it has not changed for `k` seconds:
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
//!
//! As in `lard`, "least loaded node" for a new target and for `p` is, in tcpvs, the target's
//! place on the rule file's ring and the first server along it below `T_low` (else the least
//! loaded), and the thresholds follow the pool's load by default (`lard_thresholds.rs`). n and
//! m are the members with the fewest and most requests in flight at the moment, as in the
//! paper; whether n is overloaded is judged as `lard` judges a server (with `auto`, on loads
//! averaged over 10 ms), and with `auto` only a hot target's set grows past `T_high`, any
//! target's at `2 T_high` (`lard_heat.rs`).

use crate::lard_common::{LardCommon, Step};
use crate::lard_heat::{Heat, HotTargets};
use crate::lard_thresholds::Smoothed;
use crate::load::{eligible, lighter_load};
use crate::options::Options;
use crate::{BuildContext, BuildError, Load, PoolView, RequestView, Scheduler, Ticket};
use lru::LruCache;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug)]
struct ServerSet {
    members: Vec<u32>,
    last_change: Duration,
    /// The target's recent requests: only a hot target's set grows (`lard_heat.rs`).
    heat: Heat,
}

impl ServerSet {
    /// A new target's set: `first` alone, the target's first request counted in `heat`.
    fn new(first: usize, heat: Heat, now: Duration) -> ServerSet {
        ServerSet {
            members: vec![first as u32],
            last_change: now,
            heat,
        }
    }
}

#[derive(Debug)]
pub struct LardReplicated {
    common: LardCommon,
    /// How long a set must stay unchanged before it shrinks.
    k: Duration,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    sets: LruCache<u64, ServerSet>,
    loads: Smoothed,
    hot: HotTargets,
}

impl LardReplicated {
    pub fn build(
        options: &mut Options<'_>,
        context: &BuildContext<'_>,
    ) -> Result<LardReplicated, BuildError> {
        let common = LardCommon::build(options, context)?;
        let k = options
            .number("k", 20.0, 0.0, 86_400.0)
            .map_err(BuildError::BadOption)?;
        Ok(LardReplicated {
            k: Duration::from_secs_f64(k),
            state: Mutex::new(State {
                sets: LruCache::new(common.settings.max_targets),
                loads: Smoothed::default(),
                hot: common.settings.hot_targets(),
            }),
            common,
        })
    }

    /// Targets currently remembered.
    pub fn targets(&self) -> usize {
        self.state.lock().map_or(0, |s| s.sets.len())
    }

    /// The server set of the target with key hash `target`, for tests and statistics.
    pub fn members(&self, target: u64) -> Vec<usize> {
        self.state
            .lock()
            .ok()
            .and_then(|mut s| {
                s.sets
                    .get(&target)
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
        self.pick_with_ticket(request, pool, tried).map(|(s, _)| s)
    }

    fn pick_with_ticket(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<(usize, Ticket)> {
        // The clock is read at most once per pick, and only when needed: with fixed
        // thresholds most picks neither change a set nor look at its age; auto reads it for
        // the smoothed loads. One reading keeps "is it stale" and "changed at" consistent.
        self.common.pick(request, pool, tried, |target, now| {
            self.member(target, pool, tried, now)
        })
    }

    fn request_ended(&self, _server: usize, ticket: Ticket) {
        self.common.request_ended(ticket);
    }

    fn servers_changed(&self, pool: &PoolView<'_>) {
        self.common.servers_changed(pool);
    }
}

impl LardReplicated {
    /// The member of `target`'s server set that takes the request, after the set grew or
    /// shrank as figure 4 says, and how loaded the pool is (`Judge::pool_load`).
    fn member(
        &self,
        target: u64,
        pool: &PoolView<'_>,
        tried: &[usize],
        now: &mut dyn FnMut() -> Duration,
    ) -> Step {
        let mut state = self.state.lock().ok()?;
        let State { sets, loads, hot } = &mut *state;
        let judge = self.common.settings.judge(pool, loads, now);
        let load = judge.pool_load();
        let Some(set) = sets.get_mut(&target) else {
            // A new target. Nothing is stored when no server is eligible: an empty set would
            // only take a place in the map.
            let mut heat = Heat::default();
            let first = self
                .common
                .placement
                .start(target, &judge, pool, tried, |server| {
                    hot.judge(&mut heat, server, tried.is_empty(), now)
                })?;
            sets.put(target, ServerSet::new(first, heat, now()));
            return Some((first, load));
        };
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
        let Some(Spread {
            lightest: (n, _),
            heaviest_other,
        }) = Spread::of(&set.members, pool)
        else {
            // Every member failed: the set starts again where the ring sends it.
            let Some(first) = self.common.placement.replace(target, &judge, pool, tried) else {
                sets.pop(&target);
                return None;
            };
            set.members.push(first as u32);
            set.last_change = now();
            return Some((first, load));
        };
        // n and m are both taken before the set changes, as in the paper.
        let mut chosen = n;
        if judge.sheds(n, hot.judge(&mut set.heat, n, tried.is_empty(), now), tried) {
            if let Some(p) = self.common.placement.relieve(target, &judge, pool, tried) {
                if !set.members.contains(&(p as u32)) {
                    set.members.push(p as u32);
                    changed = true;
                }
                chosen = p;
            }
        }
        // m is the most loaded member other than n. A one-member set that just grew by p has
        // no such member; there m is n itself, as in the paper (the target moves to p once
        // its set is old enough). Either way the server the request goes to never leaves.
        let m = heaviest_other.or((chosen != n).then_some(n));
        if let Some(m) = m.filter(|&m| m != chosen) {
            if set.members.len() > 1 && now().saturating_sub(set.last_change) > self.k {
                set.members.retain(|&x| x as usize != m);
                changed = true;
            }
        }
        if changed {
            set.last_change = now();
        }
        Some((chosen, load))
    }
}

/// The two members the LARD/R step needs, found in one pass that reads each member's load once
/// (loads move while we look; two readings of one server could disagree).
struct Spread {
    /// n: the least loaded member (per unit of weight); ties go to the earliest member.
    lightest: (usize, Load),
    /// m: the most loaded member other than n, if the set has another member.
    heaviest_other: Option<usize>,
}

impl Spread {
    fn of(members: &[u32], pool: &PoolView<'_>) -> Option<Spread> {
        let mut lightest: Option<(usize, Load)> = None;
        let mut heaviest_other: Option<(usize, Load)> = None;
        for &member in members {
            let Some(server) = pool.servers.get(member as usize) else {
                continue;
            };
            let candidate = (member as usize, server.load());
            // Every member but the final n passes through here exactly once: when it is met
            // and is no lighter than n, or when a lighter one takes its place as n.
            let not_lightest = match lightest {
                Some(current) if !lighter_load(candidate.1, current.1) => candidate,
                _ => match lightest.replace(candidate) {
                    Some(previous) => previous,
                    None => continue,
                },
            };
            if heaviest_other.is_none_or(|(_, load)| lighter_load(load, not_lightest.1)) {
                heaviest_other = Some(not_lightest);
            }
        }
        Some(Spread {
            lightest: lightest?,
            heaviest_other: heaviest_other.map(|(m, _)| m),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::key::stable_hash;
    use crate::testing::{context, pool_of, request, set_active};
    use crate::{OptionValue, ServerState};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    fn lard_r(servers: &[ServerState], clock: Arc<ManualClock>) -> LardReplicated {
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(2)),
            ("t_high".to_string(), OptionValue::Integer(5)),
            ("k".to_string(), OptionValue::Integer(20)),
        ];
        build(servers, clock, &given)
    }

    fn build(
        servers: &[ServerState],
        clock: Arc<ManualClock>,
        given: &[(String, OptionValue)],
    ) -> LardReplicated {
        let mut context = context(servers);
        context.clock = clock;
        let mut o = Options::new("lard-r", given);
        let l = LardReplicated::build(&mut o, &context).unwrap();
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
        let l = lard_r(&servers, Arc::clone(&clock));
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
    fn only_a_hot_targets_set_grows() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        // Placement alone: a busy pool's requests may spill too (lard_spill.rs).
        let no_spills = [("spill".to_string(), OptionValue::String("off".into()))];
        let l = build(&servers, Arc::clone(&clock), &no_spills);
        let pick_path = |path: &'static [u8]| {
            let mut r = request();
            r.path = path;
            l.pick(&r, &pool, &[]).unwrap()
        };
        let (cold, home) = crate::testing::hot_and_cold_on_one_server(pick_path);
        // Home overloaded (auto: past T_high once the averaged loads follow, below 2 T_high),
        // one server below T_low, the pool not light: the cold target's set stays as it is,
        // the hot one's grows.
        set_active(
            &servers,
            &[
                (home, 24),
                ((home + 1) % 4, 0),
                ((home + 2) % 4, 15),
                ((home + 3) % 4, 15),
            ],
        );
        clock.advance(Duration::from_millis(100));
        assert_eq!(pick_path(cold), home);
        assert_eq!(l.members(stable_hash(cold)), vec![home]);
        let grown = pick_path(b"/hot");
        assert_ne!(grown, home);
        assert_eq!(l.members(stable_hash(b"/hot")), vec![home, grown]);
    }

    #[test]
    fn shrinking_never_drops_the_server_the_request_goes_to() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(&servers, Arc::clone(&clock));
        let t = stable_hash(b"/hot");
        let first = pick(&l, &pool);
        let second = (first + 1) % 3;
        let third = (first + 2) % 3;
        set_active(&servers, &[(first, 6), (second, 1), (third, 3)]);
        assert_eq!(pick(&l, &pool), second);
        assert_eq!(l.members(t), vec![first, second]);
        // Both members equally loaded and the set old enough to shrink: n is the first
        // member, and m must be the other one, not n again.
        set_active(&servers, &[(first, 3), (second, 3), (third, 3)]);
        clock.advance(Duration::from_secs(21));
        let chosen = pick(&l, &pool);
        assert_eq!(chosen, first);
        assert_eq!(
            l.members(t),
            vec![chosen],
            "the set keeps the server it sent to"
        );
    }

    #[test]
    fn a_lone_overloaded_member_hands_over_once_the_set_is_old() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(&servers, Arc::clone(&clock));
        let t = stable_hash(b"/hot");
        let first = pick(&l, &pool);
        let second = (first + 1) % 3;
        clock.advance(Duration::from_secs(21));
        // The paper's m is then n itself: p replaces it instead of joining it.
        set_active(&servers, &[(first, 10), (second, 0), ((first + 2) % 3, 1)]);
        assert_eq!(pick(&l, &pool), second);
        assert_eq!(l.members(t), vec![second]);
    }

    #[test]
    fn no_empty_set_is_kept_when_no_server_is_eligible() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(&servers, clock);
        let mut r = request();
        r.path = b"/new";
        assert_eq!(l.pick(&r, &pool, &[0, 1]), None);
        assert_eq!(
            l.targets(),
            0,
            "a new target nobody can serve is not stored"
        );
        // A known target whose members all fail for this request, with nobody else left.
        let home = pick(&l, &pool);
        assert_eq!(l.targets(), 1);
        servers[1 - home].set_up(false);
        let mut r = request();
        r.path = b"/hot";
        assert_eq!(l.pick(&r, &pool, &[home]), None);
        assert_eq!(l.targets(), 0, "an emptied set is forgotten");
        assert_eq!(pick(&l, &pool), home);
    }

    #[test]
    fn keyless_requests_spread_by_client() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let given = vec![
            ("key".to_string(), OptionValue::String("cookie".into())),
            ("cookie".to_string(), OptionValue::String("session".into())),
        ];
        let l = build(&servers, clock, &given);
        let mut counts = [0; 4];
        for c in 0..=255u8 {
            let mut r = request();
            r.client = IpAddr::V4(Ipv4Addr::new(203, 0, 113, c));
            let s = l.pick(&r, &pool, &[]).unwrap();
            assert_eq!(l.pick(&r, &pool, &[]), Some(s), "a client keeps its server");
            counts[s] += 1;
        }
        assert!(counts.iter().all(|&c| c > 30), "{counts:?}");
        assert_eq!(l.targets(), 0);
    }

    #[test]
    fn a_member_that_fails_leaves_the_set() {
        let clock = Arc::new(ManualClock::new());
        let servers = pool_of(&[1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard_r(&servers, clock);
        let first = pick(&l, &pool);
        servers[first].set_up(false);
        let next = pick(&l, &pool);
        assert_ne!(next, first);
        assert_eq!(l.members(stable_hash(b"/hot")), vec![next]);
    }
}
