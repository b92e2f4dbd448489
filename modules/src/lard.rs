//! `lard`: locality-aware request distribution (Pai et al., "Locality-Aware Request
//! Distribution in Cluster-based Network Servers", ASPLOS 1998).
//!
//! Each target (by default the path) is assigned to one server, so that server's cache holds
//! it; the assignment moves only when its server is overloaded while another is underloaded,
//! or when its load is extreme:
//!
//! ```text
//! if server[t] is unassigned:  server[t] <- t's server on the ring (moved at once if overloaded)
//! else if (load(server[t]) > T_high and some load < T_low) or load(server[t]) >= 2 T_high:
//!                              server[t] <- first server along t's ring below T_low,
//!                                           else the least loaded
//! (with auto, the first condition moves only a hot t, and a new t is cold)
//! ```
//!
//! The paper starts a target on the least loaded server and moves it there; tcpvs uses the
//! rule file's ring for both, so instances agree (`lard_placement.rs`), and by default
//! computes `T_low`/`T_high` from the load the pool carries (`lard_thresholds.rs`) and moves
//! only a hot target off an overloaded server, not whichever is asked for next, unless the
//! server is at `2 T_high` (`lard_heat.rs`); a moved target goes back to its first server once
//! that one is below `T_low`. Load is the server's active requests as this switch counts them
//! (per unit of weight, averaged over 10 ms, with `auto`; the count of the moment with
//! `fixed`). One request may go to a server half as loaded instead while that is measured to
//! pay, the target staying (`lard_spill.rs`: whole times in a light or moderately loaded
//! pool, times per place in the queue in a busy one; the frame both LARD modules share around
//! their step is `lard_common.rs`). The map is bounded (`max_targets`, least recently used
//! targets forgotten) and keyed by a 64-bit hash of the target, so a target costs the same
//! whatever its length.

use crate::lard_common::LardCommon;
use crate::lard_heat::{Heat, HotTargets};
use crate::lard_thresholds::{Judge, Smoothed};
use crate::load::eligible;
use crate::options::Options;
use crate::{BuildContext, BuildError, PoolView, RequestView, Scheduler, Ticket};
use lru::LruCache;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug)]
pub struct Lard {
    common: LardCommon,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    targets: Targets,
    loads: Smoothed,
}

/// The targets' servers, and the pool's hottest target's requests (`lard_heat.rs`).
#[derive(Debug)]
struct Targets {
    homes: LruCache<u64, Home>,
    hot: HotTargets,
}

/// A target's server, and the generation of the servers (`Placement::generation`) in which
/// that server was found to be the target's first on the ring: until the servers change, such
/// a target is home and needs no ring lookup.
#[derive(Clone, Copy, Debug)]
struct Home {
    server: u32,
    settled: u32,
    /// When the target came to `server`, in milliseconds of the module's clock (wrapping).
    since_ms: u32,
    /// Its recent requests: only a hot target moves off an overloaded server.
    heat: Heat,
}

/// `Home::settled` of a target not known to be on its first server.
const UNSETTLED: u32 = u32::MAX;

/// How long a target stays where it moved before it may go back to its first server. Without
/// it one hot key flipped between two servers every 10 ms (away while its first server was
/// overloaded by it, back as soon as that server drained: 268 moves in one h2load run of an
/// attack round), and a client holding a few slow requests on a server had each of that
/// server's targets moved away and back in turn.
const RETURN_AFTER_MS: u32 = 1000;

fn millis(now: Duration) -> u32 {
    now.as_millis() as u32 // wraps after 49 days; compared with wrapping_sub
}

impl Lard {
    pub fn build(
        options: &mut Options<'_>,
        context: &BuildContext<'_>,
    ) -> Result<Lard, BuildError> {
        let common = LardCommon::build(options, context)?;
        Ok(Lard {
            state: Mutex::new(State {
                targets: Targets {
                    homes: LruCache::new(common.settings.max_targets),
                    hot: common.settings.hot_targets(),
                },
                loads: Smoothed::default(),
            }),
            common,
        })
    }

    /// Targets currently remembered.
    pub fn targets(&self) -> usize {
        self.state.lock().map_or(0, |s| s.targets.homes.len())
    }

    /// A target that stays: back to its first server on the ring if it is away from it and
    /// that server may take this request and is below T_low, so that instances that moved it
    /// apart, each on its own view, come together again; else where it is. The first server
    /// is looked up afresh, not remembered from the target's start (a server down then, or
    /// a ring rebuilt since, would leave it wrong for good), but only until the target is
    /// found there in the current generation of the servers.
    fn stay_or_return(
        &self,
        target: u64,
        home: &mut Home,
        now: &mut dyn FnMut() -> Duration,
        judge: &Judge,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> usize {
        let current = home.server as usize;
        let generation = self.common.placement.generation();
        if home.settled == generation {
            return current;
        }
        let now_ms = millis(now());
        if now_ms.wrapping_sub(home.since_ms) < RETURN_AFTER_MS {
            return current;
        }
        match self.common.placement.first_usable(target, pool) {
            Some(first) if first == current => home.settled = generation,
            // Below T_low, or idle: in a pool with nothing in flight no server is below a
            // T_low of 0, and a target moved while the pool was busy would stay away for good.
            Some(first)
                if eligible(&pool.servers[first], first, tried)
                    && (judge.underloaded(first) || pool.servers[first].active() == 0) =>
            {
                *home = Home {
                    server: first as u32,
                    settled: generation,
                    since_ms: now_ms,
                    heat: home.heat,
                };
            }
            _ => {}
        }
        home.server as usize
    }

    /// The target's server: remembered (moved if hot on an overloaded server, back to its
    /// first server, or replaced if it may not take the request), or a new target's start.
    fn place(
        &self,
        target: u64,
        targets: &mut Targets,
        now: &mut dyn FnMut() -> Duration,
        judge: &Judge,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<usize> {
        let Targets { homes, hot } = targets;
        // One map lookup: the entry is read and, if the target moves, updated in place.
        if let Some(home) = homes.get_mut(&target) {
            let s = home.server as usize;
            let moved = match pool.servers.get(s) {
                Some(server) if eligible(server, s, tried) => {
                    let temperature = hot.judge(&mut home.heat, s, tried.is_empty(), now);
                    if !judge.sheds(s, temperature, tried) {
                        return Some(self.stay_or_return(target, home, now, judge, pool, tried));
                    }
                    self.common.placement.relieve(target, judge, pool, tried)?
                }
                _ => self.common.placement.replace(target, judge, pool, tried)?,
            };
            *home = Home {
                server: moved as u32,
                settled: UNSETTLED,
                since_ms: millis(now()),
                heat: home.heat,
            };
            return Some(moved);
        }
        let mut heat = Heat::default();
        let chosen = self
            .common
            .placement
            .start(target, judge, pool, tried, |server| {
                hot.judge(&mut heat, server, tried.is_empty(), now)
            })?;
        homes.put(
            target,
            Home {
                server: chosen as u32,
                settled: UNSETTLED,
                since_ms: millis(now()),
                heat,
            },
        );
        Some(chosen)
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
        self.pick_with_ticket(request, pool, tried).map(|(s, _)| s)
    }

    fn pick_with_ticket(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
    ) -> Option<(usize, Ticket)> {
        self.common.pick(request, pool, tried, |target, now| {
            let mut state = self.state.lock().ok()?;
            let State { targets, loads } = &mut *state;
            let judge = self.common.settings.judge(pool, loads, now);
            let home = self.place(target, targets, now, &judge, pool, tried)?;
            Some((home, judge.pool_load()))
        })
    }

    fn request_ended(&self, _server: usize, ticket: Ticket) {
        self.common.request_ended(ticket);
    }

    fn servers_changed(&self, pool: &PoolView<'_>) {
        self.common.servers_changed(pool);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{context, pool_of, request, set_active};
    use crate::ManualClock;
    use crate::{OptionValue, ServerState};
    use std::net::{IpAddr, Ipv4Addr};
    use std::sync::Arc;

    fn lard(servers: &[ServerState], t_low: i64, t_high: i64) -> Lard {
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(t_low)),
            ("t_high".to_string(), OptionValue::Integer(t_high)),
        ];
        build(servers, &given)
    }

    fn build(servers: &[ServerState], given: &[(String, OptionValue)]) -> Lard {
        build_clocked(servers, given, Arc::new(ManualClock::new()))
    }

    fn build_clocked(
        servers: &[ServerState],
        given: &[(String, OptionValue)],
        clock: Arc<ManualClock>,
    ) -> Lard {
        let mut context = context(servers);
        context.clock = clock;
        let mut o = Options::new("lard", given);
        let l = Lard::build(&mut o, &context).unwrap();
        o.finish().unwrap();
        l
    }

    /// `lard` with t_low 2, t_high 5 and a clock the test moves.
    fn lard_clocked(servers: &[ServerState]) -> (Lard, Arc<ManualClock>) {
        let clock = Arc::new(ManualClock::new());
        let given = vec![
            ("t_low".to_string(), OptionValue::Integer(2)),
            ("t_high".to_string(), OptionValue::Integer(5)),
        ];
        (build_clocked(servers, &given, Arc::clone(&clock)), clock)
    }

    fn pick(l: &Lard, pool: &PoolView<'_>, path: &'static [u8]) -> usize {
        let mut r = request();
        r.path = path;
        l.pick(&r, pool, &[]).unwrap()
    }

    /// Three servers and `lard` with t_low 2, t_high 5; `/a` placed: (servers, lard, its
    /// first server, the next two).
    fn three_servers_and_a() -> (Vec<ServerState>, Lard, usize, usize, usize) {
        let servers = pool_of(&[1, 1, 1]);
        let l = lard(&servers, 2, 5);
        let home = pick(&l, &PoolView { servers: &servers }, b"/a");
        (servers, l, home, (home + 1) % 3, (home + 2) % 3)
    }

    #[test]
    fn a_target_stays_until_the_thresholds_say_move() {
        let (servers, l, home, other, third) = three_servers_and_a();
        let pool = PoolView { servers: &servers };
        let path: &'static [u8] = b"/a";
        // Loaded but not past t_high: stays.
        set_active(&servers, &[(home, 5), (other, 1), (third, 1)]);
        assert_eq!(pick(&l, &pool, path), home);
        // Past t_high (6 > 5), but nobody below t_low (2): stays.
        set_active(&servers, &[(home, 6), (other, 2), (third, 2)]);
        assert_eq!(pick(&l, &pool, path), home);
        // Past t_high and one server below t_low: moves there.
        set_active(&servers, &[(home, 6), (other, 1), (third, 3)]);
        assert_eq!(pick(&l, &pool, path), other);
        // The new server holds it, at loads that would not move it, while its first server
        // is not below t_low.
        set_active(&servers, &[(home, 2), (other, 5), (third, 0)]);
        assert_eq!(pick(&l, &pool, path), other);
        // At 2 * t_high (10) it moves whatever the others carry.
        set_active(&servers, &[(home, 9), (other, 10), (third, 9)]);
        let moved = pick(&l, &pool, path);
        assert_ne!(moved, other);
        // Just below 2 * t_high with nobody under t_low: stays.
        set_active(&servers, &[(home, 9), (other, 9), (third, 9)]);
        assert_eq!(pick(&l, &pool, path), moved);
    }

    /// `testing::hot_and_cold_on_one_server` for `l`.
    fn hot_and_cold_on_one_server(l: &Lard, servers: &[ServerState]) -> (&'static [u8], usize) {
        let pool = PoolView { servers };
        crate::testing::hot_and_cold_on_one_server(|path| pick(l, &pool, path))
    }

    #[test]
    fn an_overloaded_server_sheds_its_hot_targets_and_keeps_its_cold_ones() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let clock = Arc::new(ManualClock::new());
        // Placement alone: a busy pool's requests may spill too (lard_spill.rs).
        let no_spills = [("spill".to_string(), OptionValue::String("off".into()))];
        let auto = build_clocked(&servers, &no_spills, Arc::clone(&clock));
        let (cold, home) = hot_and_cold_on_one_server(&auto, &servers);
        let (idle, b, c) = ((home + 1) % 4, (home + 2) % 4, (home + 3) % 4);
        // 24 in flight at home, 0 at one server, 15 at the others: the pool is not light, home
        // is past T_high (the loads averaged over 10 ms follow within 100 ms), below 2 T_high,
        // and one server is below T_low. A target asked for less than a `HOT_SHARE`th as often as the pool's
        // hottest stays: moving it would cost a miss and relieve nothing.
        set_active(&servers, &[(home, 24), (idle, 0), (b, 15), (c, 15)]);
        clock.advance(Duration::from_millis(100));
        assert_eq!(pick(&auto, &pool, cold), home);
        assert_eq!(pick(&auto, &pool, cold), home);
        // The hot one moves.
        let moved = pick(&auto, &pool, b"/hot");
        assert_eq!(moved, idle);
        assert_eq!(pick(&auto, &pool, b"/hot"), moved);
        // At 2 T_high any target is relief: the cold one moves too.
        set_active(&servers, &[(home, 40), (b, 0), (c, 0)]);
        clock.advance(Duration::from_millis(100));
        assert_ne!(pick(&auto, &pool, cold), home);
        // The paper's fixed thresholds move any target past T_high.
        set_active(&servers, &[(home, 0)]);
        let fixed = lard(&servers, 2, 5);
        let (cold, home) = hot_and_cold_on_one_server(&fixed, &servers);
        set_active(&servers, &[(home, 6), ((home + 1) % 4, 1)]);
        assert_ne!(pick(&fixed, &pool, cold), home);
    }

    #[test]
    fn a_moved_target_returns_to_its_first_server_once_that_is_below_t_low() {
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let (l, clock) = lard_clocked(&servers);
        let path: &'static [u8] = b"/a";
        let home = pick(&l, &pool, path);
        let (other, third) = ((home + 1) % 3, (home + 2) % 3);
        set_active(&servers, &[(home, 6), (other, 1), (third, 3)]);
        assert_eq!(pick(&l, &pool, path), other);
        // Its first server is where every instance starts it: back there once it is below
        // t_low, though nothing overloads the server it moved to; but not within a second of
        // the move, so that one hot key does not flip between two servers.
        set_active(&servers, &[(home, 1), (other, 3), (third, 3)]);
        assert_eq!(pick(&l, &pool, path), other);
        clock.advance(Duration::from_millis(999));
        assert_eq!(pick(&l, &pool, path), other);
        clock.advance(Duration::from_millis(1));
        assert_eq!(pick(&l, &pool, path), home);
        assert_eq!(pick(&l, &pool, path), home);
    }

    #[test]
    fn a_light_pool_spills_a_request_to_a_server_half_as_loaded_once_spills_are_measured_to_pay() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let clock = Arc::new(ManualClock::new());
        let auto = build_clocked(&servers, &[], Arc::clone(&clock));
        let mut r = request();
        r.path = b"/a";
        let home = auto.pick(&r, &pool, &[]).unwrap();
        let idle = (home + 1) % 4;
        // Two in flight at home, one idle server, 5 in flight in all: light.
        set_active(
            &servers,
            &[
                (home, 2),
                (idle, 0),
                ((home + 2) % 4, 2),
                ((home + 3) % 4, 1),
            ],
        );
        // The first is a probe; the target stays home.
        let (probe, ticket) = auto.pick_with_ticket(&r, &pool, &[]).unwrap();
        assert_eq!(probe, idle);
        assert_ne!(ticket, Ticket::NONE);
        clock.advance(Duration::from_millis(1));
        auto.request_ended(probe, ticket);
        // Home requests (within the probe interval) that take 10 ms: spills (1 ms) pay.
        let mut timed = 0;
        for _ in 0..8 {
            let (server, ticket) = auto.pick_with_ticket(&r, &pool, &[]).unwrap();
            assert_eq!(server, home);
            if ticket != Ticket::NONE {
                clock.advance(Duration::from_millis(10));
                auto.request_ended(server, ticket);
                timed += 1;
                break;
            }
        }
        assert_eq!(timed, 1, "one home request in four is timed");
        clock.advance(Duration::from_millis(1));
        for _ in 0..5 {
            assert_eq!(auto.pick(&r, &pool, &[]), Some(idle));
        }
        // With nobody half as loaded as home the request stays; one in flight is half of two.
        set_active(&servers, &[(idle, 2), ((home + 3) % 4, 2)]);
        assert_eq!(auto.pick(&r, &pool, &[]), Some(home));
        set_active(&servers, &[((home + 3) % 4, 1)]);
        assert_eq!(auto.pick(&r, &pool, &[]), Some((home + 3) % 4));
        // One in flight at home: nothing to gain.
        set_active(&servers, &[(idle, 0), (home, 1)]);
        assert_eq!(auto.pick(&r, &pool, &[]), Some(home));
        // A moderately loaded pool (11 in flight per server) spills while spills pay; so does a
        // busy one (17 per server), where they are judged per place in the queue: the probe
        // took 1 ms with nothing ahead of it, the home request 10 ms with 2 ahead.
        set_active(
            &servers,
            &[
                (home, 13),
                (idle, 0),
                ((home + 2) % 4, 16),
                ((home + 3) % 4, 16),
            ],
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            auto.pick(&r, &pool, &[]),
            Some(idle),
            "moderate, spills pay"
        );
        set_active(&servers, &[((home + 2) % 4, 26), ((home + 3) % 4, 30)]);
        clock.advance(Duration::from_secs(1));
        assert_eq!(
            auto.pick(&r, &pool, &[]),
            Some(idle),
            "busy, spills pay per place"
        );
        // Light again (the averaged loads follow within a second): a retry does not spill to
        // the server it failed on, and no other is half as loaded. The paper's fixed
        // thresholds, and `spill = "off"`, never spill.
        set_active(
            &servers,
            &[(home, 2), ((home + 2) % 4, 2), ((home + 3) % 4, 2)],
        );
        clock.advance(Duration::from_secs(1));
        assert_eq!(auto.pick(&r, &pool, &[]), Some(idle), "light, spills pay");
        assert_eq!(auto.pick(&r, &pool, &[idle]), Some(home));
        let fixed = lard(&servers, 25, 65);
        let off = build(
            &servers,
            &[("spill".to_string(), OptionValue::String("off".to_string()))],
        );
        for l in [&fixed, &off] {
            assert_eq!(
                l.pick_with_ticket(&r, &pool, &[]),
                Some((home, Ticket::NONE))
            );
        }
    }

    #[test]
    fn in_an_idle_pool_a_moved_target_goes_back_too() {
        // Nothing in flight: T_low is 0 and no server is below it, but an idle first server
        // takes its targets back (an attack round found them away for good after a drain).
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let (l, clock) = lard_clocked(&servers);
        let home = pick(&l, &pool, b"/a");
        set_active(&servers, &[(home, 6)]);
        let away = pick(&l, &pool, b"/a");
        assert_ne!(away, home);
        set_active(&servers, &[(home, 0)]);
        clock.advance(Duration::from_secs(2));
        assert_eq!(pick(&l, &pool, b"/a"), home);
    }

    #[test]
    fn a_target_placed_while_its_first_server_was_down_goes_back_to_it() {
        // What a second instance sees when it places a target while the target's first
        // server is down: it must end up where the first instance has it once that server is
        // back, or the two would cache it apart for good.
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let one = lard(&servers, 2, 5);
        let first = pick(&one, &pool, b"/a");
        servers[first].set_up(false);
        let (two, clock) = lard_clocked(&servers);
        let elsewhere = pick(&two, &pool, b"/a");
        assert_ne!(elsewhere, first);
        servers[first].set_up(true);
        set_active(&servers, &[(first, 1), (elsewhere, 3)]);
        clock.advance(Duration::from_secs(1));
        assert_eq!(pick(&two, &pool, b"/a"), first);
        assert_eq!(pick(&one, &pool, b"/a"), first);
    }

    #[test]
    fn new_targets_spread_over_an_idle_pool() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let l = lard(&servers, 25, 65);
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
        let l = build(&servers, &given);
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
        let l = lard(&servers, 25, 65);
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
        let l = build(&servers, &given);
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
        let servers = pool_of(&[1]);
        let mut o = Options::new("lard", &given);
        match Lard::build(&mut o, &context(&servers)) {
            Err(BuildError::BadOption(e)) => assert_eq!(e.index, 1),
            other => panic!("{other:?}"),
        }
    }
}
