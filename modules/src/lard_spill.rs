//! When one request of a `lard` or `lard-r` target goes to a less loaded server than its
//! target's (a *spill*: the target itself stays where it is), decided by what spills have been
//! measured to cost, not by an assumption about the servers' caches.
//!
//! LARD keeps a target on one server so that this server's cache holds it. Where every cache
//! holds the whole working set, locality buys nothing, and keeping targets in place costs
//! throughput at light load: with 16 clients on 4 servers a target's server often has a queue
//! while another server is idle (a randomly routed server is idle 16% of the time, a `wlc`
//! one never), and `lard` served 0.88x `wlc` (no threshold, floor or smoothing changed that:
//! BENCHMARKS.md, "LARD without tuning"). Where the working set is larger than a cache, the
//! same spill is a cache miss: the harness's disk takes 56 ms where a hit takes 1.5 ms of CPU.
//! The switch cannot see caches, but it can see how long requests take, so:
//!
//! - While the pool is light (`lard_thresholds::LIGHT`: at most 8 in flight per server), a
//!   request whose target's server has 2 or more in flight goes to the least loaded server
//!   instead, if that one carries at most half the load of the target's server (per unit of
//!   weight), while spilled requests have lately taken less than 5/4 of the time of requests
//!   served by their target's server (exponential means over requests, `AWAY_WEIGHT` and
//!   `HOME_WEIGHT`; arithmetic, since the mean time is what a closed loop's throughput
//!   follows).
//! - Otherwise at most one such request every `PROBE_EVERY_MS` is spilled anyway, so that the
//!   measurement follows the servers (a catalogue that grows, caches that warm up).
//! - While the pool is moderately loaded (`lard_thresholds::MODERATE`: at most 12 per
//!   server), requests spill in the same way while spills are measured to pay, with no
//!   probes.
//! - While the pool is busy, requests spill and probe as in a light pool, but the times are
//!   counted *per place in the queue*: each timed request's time divided by the requests in
//!   flight at its server when it left, itself included. Each measure has its own means and
//!   probes, fed only by the requests that left under it (`Gate`).
//!
//! Whole times say whether a spill finished sooner than it would have at home, which is what
//! it is for while queues are short. In long queues they hide misses: a spill to a shorter
//! queue looks faster than home even when it misses. Each of four switches at the paper's
//! load counts about 14 in flight per server, and with spills by whole times up to 16 per
//! server they held 1.19 copies of each object and lost 0.4 points of hits; so busy pools did
//! not spill, and 64 clients on one cache (16 per server; LARD's servers idled in turn)
//! served 0.978x `wlc`. Per place, a hit costs about the same in any queue and a miss (the
//! harness's disk: 28 ms and more, against about 3 ms of CPU) several times more. Not at
//! every load: per place, a short queue's hit carries more of a request's fixed part
//! (connect, relay, the harness's millisecond timers) than a long queue's, and with per-place
//! times at every load 16 and 32 clients on one cache served 0.96x and 0.97x `wlc`; asking
//! only for less than twice home's cost per place brought those back to 0.99x and 1.00x but
//! let four switches hold 1.20 copies and lose 1.1 points of hits (their per-place view of a
//! queue sees a quarter of it). A server that runs requests side by side (several cores)
//! shows short queues as costlier per place than long ones: there busy pools' spills stop
//! sooner, which leaves the paper's LARD.
//!
//! Half as loaded, not only idle: with 16 clients on 4 servers and every cache holding the
//! working set, spills to idle servers only served 0.92x `wlc`, these 0.93x to 0.99x
//! (BENCHMARKS.md, "LARD after a warm-up at real cost ratios"). They were first measured
//! copying objects into every cache, in the locality harness's former free warm-up, where a
//! spill is measured as fast as a hit. With a warm-up at real cost ratios
//! (`benches/locality/run.rs`) four switches at the paper's load keep the same copies with
//! spills on and off: there the pool is not light, and the copies come from LARD's moves.
//!
//! Each spill and one in `HOME_SAMPLE` requests served at their target's server carry a
//! [`Ticket`] with the time they left and their server's queue then; the switch hands it
//! back when the request stops occupying its server (`Scheduler::request_ended`), if the
//! server served it (2xx or 3xx). `spill = "off"`, and the paper's fixed thresholds unless
//! `spill` is given, keep every request on its target's server.

use crate::lard_thresholds::PoolLoad;
use crate::load::least_loaded_from;
use crate::{PoolView, Ticket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// At most one probing spill this often, in milliseconds, while spills are measured to cost
/// more; each probe that took longer than spills may (`PAYS_NUM / PAYS_DEN` of the time at
/// home) doubles the wait, up to `PROBE_EVERY_MAX_MS`, each one that did not halves it, and
/// one that opens the gate brings it back. A fixed 10 probes a second cost an attacker's test
/// pool (8 clients, misses 15 times a hit) a fifth of its throughput: each probe was a miss
/// and evicted a hot object of the idle server. The wait first doubled for every spill that
/// ended with the gate shut, and never shrank: in the locality harness, with 16 clients on 4
/// servers whose caches each hold the working set, the spills in flight when the costs rose
/// fourfold after the warm-up took it to 10 s at once, and the gate stayed shut through the
/// 11 s measured (`lard` 0.82x and 0.88x `wlc`; a trace of the means showed it).
const PROBE_EVERY_MS: u32 = 100;
const PROBE_EVERY_MAX_MS: u32 = 10_000;

/// A sample counts at most this many times the mean it joins: one request held for minutes
/// (a slow client's upload or download is part of the lease) would otherwise hold the mean
/// up for as many requests again.
const CLIP: u64 = 4;

/// The least mean a sample is clipped against, in microseconds (`blend`).
const CLIP_FLOOR_US: u64 = 1000;

/// One home request in this many is timed (two clock readings each).
const HOME_SAMPLE: u32 = 4;

/// How far one sample moves each mean (1 / weight). Home requests are many; spills are many
/// while they pay, and only probes, a few a second at most, while they cost more: so a probe
/// moves the spills' mean by a quarter (`PROBE_WEIGHT`), and a few probes that find the
/// servers changed open the gate again or keep it shut.
const AWAY_WEIGHT: u64 = 16;
const PROBE_WEIGHT: u64 = 4;
const HOME_WEIGHT: u64 = 64;

/// Spills pay while they take less than 5/4 of a request at home, on average. A spill that
/// takes a little longer (a small miss) still shortens the queue it left; a miss on the
/// harness's disk takes 56 ms against the 8 ms of a request at home with 16 clients. Asking
/// for spills to be faster (4/5) closed the gate on noise where caches hold everything (16
/// clients: 0.93x `wlc`, against 0.98x).
const PAYS_NUM: u64 = 5;
const PAYS_DEN: u64 = 4;

/// A mean no sample has set yet.
const UNKNOWN: u32 = u32::MAX;

/// The ticket's top bit: the request was spilled.
const AWAY_BIT: u64 = 1 << 63;

/// The ticket's next bit: the spill was a probe.
const PROBE_BIT: u64 = 1 << 62;

/// The ticket's next bit: the pool was busy when the request left, so the gate in force was
/// the one per place in the queue.
const BUSY_BIT: u64 = 1 << 61;

/// The ticket's bits 48 to 60: how many requests were in flight at the request's server when
/// it left (at most `DEPTH_MAX`), for its time per place in that queue.
const DEPTH_SHIFT: u32 = 48;
const DEPTH_MAX: u64 = (1 << 13) - 1;

/// The ticket's low 48 bits: when the request left, in microseconds (8.9 years).
const TIME_MASK: u64 = (1 << DEPTH_SHIFT) - 1;

/// What a spill decided for one request: the server, and the ticket to hand back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decision {
    pub server: usize,
    pub ticket: Ticket,
}

/// One measure of what requests cost at their target's server and away from it, and the
/// probes that keep it fresh. Each measure has its own probes: a probe's cost says something
/// only of its own measure, and a gate open by one measure must not hurry the other's probes.
#[derive(Debug)]
struct Gate {
    /// Mean cost of a request at its target's server, in microseconds (`UNKNOWN` at first).
    home_us: AtomicU32,
    /// Mean cost of a spilled request at the server it went to, in microseconds.
    away_us: AtomicU32,
    /// When the last probe left, in milliseconds of the module's clock, plus one (0: never).
    last_probe_ms: AtomicU32,
    /// The wait between probes now, in milliseconds.
    probe_every_ms: AtomicU32,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            home_us: AtomicU32::new(UNKNOWN),
            away_us: AtomicU32::new(UNKNOWN),
            last_probe_ms: AtomicU32::new(0),
            probe_every_ms: AtomicU32::new(PROBE_EVERY_MS),
        }
    }
}

impl Gate {
    /// Spilled requests have lately cost less than `PAYS_NUM / PAYS_DEN` of requests at home.
    fn open(&self) -> bool {
        self.would_pay(self.away_us.load(Ordering::Relaxed))
    }

    /// A spill that cost `away_us` cost less than `PAYS_NUM / PAYS_DEN` of requests at home.
    fn would_pay(&self, away_us: u32) -> bool {
        let home = self.home_us.load(Ordering::Relaxed);
        home != UNKNOWN && u64::from(away_us) * PAYS_DEN < u64::from(home) * PAYS_NUM
    }

    /// A request that cost `cost` microseconds ended: home, a regular spill or a probe.
    fn ended(&self, cost: u32, away: bool, probe: bool) {
        if !away {
            blend(&self.home_us, cost, HOME_WEIGHT);
            return;
        }
        blend(
            &self.away_us,
            cost,
            if probe { PROBE_WEIGHT } else { AWAY_WEIGHT },
        );
        // The wait moves once per probe, not once per spill: the spills in flight when the
        // gate shuts would each have doubled it. A regular spill only brings it back when the
        // gate is open. Read and written in one step, so that a probe and a spill that end
        // together keep both changes.
        let (open, paid) = (self.open(), self.would_pay(cost));
        _ = self
            .probe_every_ms
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |every| {
                if open {
                    Some(PROBE_EVERY_MS)
                } else if !probe {
                    None
                } else if paid {
                    Some((every / 2).max(PROBE_EVERY_MS))
                } else {
                    Some(every.saturating_mul(2).min(PROBE_EVERY_MAX_MS))
                }
            });
    }

    /// `(last, now)` in the probe clock's milliseconds when no probe left in the last
    /// `probe_every_ms`.
    fn probe_slot(&self, now: &mut dyn FnMut() -> Duration) -> Option<(u32, u32)> {
        let now_ms = (now().as_millis() as u32).wrapping_add(1).max(1);
        let last = self.last_probe_ms.load(Ordering::Relaxed);
        let every = self.probe_every_ms.load(Ordering::Relaxed);
        (last == 0 || now_ms.wrapping_sub(last) >= every).then_some((last, now_ms))
    }

    /// Takes the probe slot: false when another request took it first.
    fn claim_probe(&self, (last, now_ms): (u32, u32)) -> bool {
        self.last_probe_ms
            .compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    }

    #[cfg(test)]
    fn means(&self) -> (u32, u32) {
        (
            self.home_us.load(Ordering::Relaxed),
            self.away_us.load(Ordering::Relaxed),
        )
    }
}

/// The two gates of one pool's module.
#[derive(Debug, Default)]
pub(crate) struct Spill {
    /// Each request's whole time at its server: the gate while the pool is light or
    /// moderately loaded.
    whole: Gate,
    /// Each request's time divided by the places in its server's queue when it left, itself
    /// included: the gate while the pool is busy.
    per_place: Gate,
    /// Home requests seen, for `HOME_SAMPLE`.
    home_count: AtomicU32,
}

impl Spill {
    /// Where the request of a target whose server is `home` goes: `home`, or a spill to the
    /// least loaded server (ties from `tie_start`) when `home` has 2 or more in flight, that
    /// server at most half as many per unit of weight, and spills pay (by whole times, or per
    /// place when the pool is busy) or a probe is due (not in a moderately loaded pool). `now`
    /// is read only when a ticket is issued.
    pub(crate) fn decide(
        &self,
        home: usize,
        tie_start: usize,
        load: PoolLoad,
        pool: &PoolView<'_>,
        tried: &[usize],
        now: &mut dyn FnMut() -> Duration,
    ) -> Decision {
        let stay = |ticket| Decision {
            server: home,
            ticket,
        };
        let (gate, busy_bit) = match load {
            PoolLoad::Busy => (&self.per_place, BUSY_BIT),
            PoolLoad::Light | PoolLoad::Moderate => (&self.whole, 0),
        };
        // Cheapest first: the queue at home, then the gate (a probe's slot is only claimed
        // once a destination is found), and only then the pass over the servers.
        if pool.servers[home].active() >= 2 {
            let open = gate.open();
            let probe = match open || load == PoolLoad::Moderate {
                true => None,
                false => gate.probe_slot(now),
            };
            if open || probe.is_some() {
                if let Some(away) = relief(pool, tried, tie_start, home) {
                    if probe.is_none_or(|slot| gate.claim_probe(slot)) {
                        let kind = match probe {
                            Some(_) => AWAY_BIT | PROBE_BIT,
                            None => AWAY_BIT,
                        };
                        let bits = micros(now()) | depth(pool, away) | busy_bit | kind;
                        return Decision {
                            server: away,
                            ticket: Ticket::issued(bits),
                        };
                    }
                }
            }
        }
        let count = self.home_count.fetch_add(1, Ordering::Relaxed);
        match count % HOME_SAMPLE {
            0 => stay(Ticket::issued(micros(now()) | depth(pool, home) | busy_bit)),
            _ => stay(Ticket::NONE),
        }
    }

    /// A request with `ticket` stopped occupying its server at `now`: its cost joins the
    /// means of the gate it was issued under, whole or per place.
    pub(crate) fn ended(&self, ticket: Ticket, now: Duration) {
        let Some(bits) = ticket.get() else {
            return;
        };
        let whole = micros(now).saturating_sub(bits & TIME_MASK);
        let (gate, cost) = match bits & BUSY_BIT != 0 {
            true => (
                &self.per_place,
                whole / (((bits >> DEPTH_SHIFT) & DEPTH_MAX) + 1),
            ),
            false => (&self.whole, whole),
        };
        let cost = u32::try_from(cost).unwrap_or(UNKNOWN - 1);
        gate.ended(cost, bits & AWAY_BIT != 0, bits & PROBE_BIT != 0);
    }

    #[cfg(test)]
    fn means(&self) -> (u32, u32) {
        self.whole.means()
    }

    #[cfg(test)]
    fn spills_pay(&self) -> bool {
        self.whole.open()
    }
}

/// Where a request spills from `home`: the least loaded server that may take it (ties from
/// `start`), if it carries at most half of `home`'s load per unit of weight (with 2 or 3 in
/// flight at home and equal weights: at most 1).
fn relief(pool: &PoolView<'_>, tried: &[usize], start: usize, home: usize) -> Option<usize> {
    let away = least_loaded_from(pool, tried, start)?;
    let (home_load, away_load) = (pool.servers[home].load(), pool.servers[away].load());
    let half = u64::from(away_load.active) * 2 * u64::from(home_load.weight)
        <= u64::from(home_load.active) * u64::from(away_load.weight);
    (away != home && half).then_some(away)
}

/// Microseconds since the clock's start, kept below the ticket's depth and flag bits.
fn micros(now: Duration) -> u64 {
    (now.as_micros() as u64) & TIME_MASK
}

/// The requests in flight at `server` now, in the ticket's depth bits.
fn depth(pool: &PoolView<'_>, server: usize) -> u64 {
    u64::from(pool.servers[server].active()).min(DEPTH_MAX) << DEPTH_SHIFT
}

/// Moves `mean` toward `sample` (at most `CLIP` times the mean, or times `CLIP_FLOOR_US`
/// while the mean is below it) by 1 / `weight`, rounded toward the sample; the first sample
/// sets it. Truncated, and clipped against the mean alone, a small mean could not be raised:
/// at 21 us with weight 64 (5 us with 16) the largest sample allowed moved it by less than
/// one, and a mean per place driven that low behind a few hundred held requests kept a gate
/// open for good (an attacker's reading of the code). Two requests ending at once may each
/// read the old mean and one update is lost: a sample among many.
fn blend(mean: &AtomicU32, sample: u32, weight: u64) {
    let old = mean.load(Ordering::Relaxed);
    let new = match old {
        UNKNOWN => u64::from(sample),
        old => {
            let old = u64::from(old);
            let sample = u64::from(sample).min(old.max(CLIP_FLOOR_US) * CLIP);
            if sample >= old {
                old + (sample - old).div_ceil(weight)
            } else {
                old - (old - sample).div_ceil(weight)
            }
        }
    };
    mean.store(new.min(u64::from(UNKNOWN - 1)) as u32, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, set_active};

    fn at(ms: u64) -> impl FnMut() -> Duration {
        move || Duration::from_millis(ms)
    }

    /// Ends the request of `decision` `held_ms` after `sent_ms`.
    fn end(spill: &Spill, decision: Decision, sent_ms: u64, held_ms: u64) {
        spill.ended(decision.ticket, Duration::from_millis(sent_ms + held_ms));
    }

    #[test]
    fn an_idle_home_keeps_its_request() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        let d = spill.decide(2, 0, PoolLoad::Light, &pool, &[], &mut at(5));
        assert_eq!(d.server, 2);
        // The first home request is timed.
        assert!(d.ticket.get().is_some());
    }

    #[test]
    fn spills_only_probe_until_they_are_measured_to_pay() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        set_active(&servers, &[(0, 3), (1, 2), (2, 1), (3, 0)]);
        // Nothing measured: the first request is a probe, to the idle server.
        let probe = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1000));
        assert_eq!(probe.server, 3);
        // The next within PROBE_EVERY_MS stays home, measured or not.
        for ms in [1000, 1050, 1099] {
            assert_eq!(
                spill
                    .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(ms))
                    .server,
                0
            );
        }
        // Home requests took 8 ms, the probes 60 ms (misses): probes only.
        for _ in 0..HOME_SAMPLE * 2 {
            let d = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1099));
            end(&spill, d, 1099, 8);
        }
        end(&spill, probe, 1000, 60);
        assert_eq!(spill.means(), (8000, 60_000));
        // The probe left spills costing more: the next waits twice as long.
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1150))
                .server,
            0
        );
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1199))
                .server,
            0
        );
        let probe = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1200));
        assert_eq!(probe.server, 3);
        end(&spill, probe, 1200, 60);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1599))
                .server,
            0
        );
        // A probe that comes back fast (the cache now holds the objects) halves the wait: the
        // next is due 200 ms later, not 800.
        let probe = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1600));
        assert_eq!(probe.server, 3);
        end(&spill, probe, 1600, 2);
        assert!(!spill.spills_pay(), "{:?}", spill.means());
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1799))
                .server,
            0
        );
        let probe = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1800));
        assert_eq!(probe.server, 3);
        end(&spill, probe, 1800, 2);
        // Fast probes open spilling within a few, each moving the mean by a quarter.
        let mut ms = 1850;
        let mut probes = 2;
        while !spill.spills_pay() {
            let d = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(ms));
            if d.server == 3 {
                end(&spill, d, ms, 2);
                probes += 1;
            }
            ms += 50;
            assert!(ms < 1_000_000, "{:?}", spill.means());
        }
        assert!((3..=8).contains(&probes), "{probes}");
        // Below 5/4 of the home mean, not yet below it.
        let (home, away) = spill.means();
        assert!(
            away * 4 < home * 5 && away * 4 > home * 4,
            "{:?}",
            (home, away)
        );
        for ms in ms..ms + 9 {
            assert_eq!(
                spill
                    .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(ms))
                    .server,
                3
            );
        }
    }

    #[test]
    fn spills_that_shut_the_gate_leave_the_wait_to_probes() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        set_active(&servers, &[(0, 3), (1, 2), (2, 1), (3, 0)]);
        // Spills pay (10 ms at home, 8 ms away): eight leave at once.
        spill.ended(Ticket::issued(0), Duration::from_millis(10));
        spill.ended(Ticket::issued(AWAY_BIT), Duration::from_millis(8));
        let spills: Vec<Decision> = (0..8)
            .map(|_| spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1000)))
            .collect();
        assert!(spills.iter().all(|d| d.server == 3));
        // The servers slowed down: all eight take 60 ms; the third shuts the gate.
        for d in spills {
            end(&spill, d, 1000, 60);
        }
        assert!(!spill.spills_pay(), "{:?}", spill.means());
        // The wait is still the shortest: a probe leaves at once, and the next 100 ms later.
        let probe = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1060));
        assert_eq!(probe.server, 3);
        assert_ne!(probe.ticket.get().map(|bits| bits & PROBE_BIT), Some(0));
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1159))
                .server,
            0
        );
        // That probe costs more too: the wait doubles, once.
        end(&spill, probe, 1060, 60);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1259))
                .server,
            0
        );
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1260))
                .server,
            3
        );
    }

    #[test]
    fn a_moderately_loaded_pool_spills_only_while_spills_pay_and_never_probes() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        set_active(&servers, &[(0, 12), (1, 12), (2, 6), (3, 12)]);
        // Nothing measured: a light pool would probe now; a moderate one keeps every request
        // home, at any time.
        for ms in [0, 1000, 20_000] {
            assert_eq!(
                spill
                    .decide(0, 0, PoolLoad::Moderate, &pool, &[], &mut at(ms))
                    .server,
                0
            );
        }
        // Measured to pay (spills 1 ms, home 10 ms): to the server half as loaded.
        spill.ended(Ticket::issued(0), Duration::from_millis(10));
        spill.ended(Ticket::issued(AWAY_BIT), Duration::from_millis(1));
        let d = spill.decide(0, 0, PoolLoad::Moderate, &pool, &[], &mut at(20_001));
        assert_eq!(d.server, 2);
        // Spills measured to cost more (60 ms misses against 10 ms at home): home again,
        // and no probe.
        for _ in 0..100 {
            spill.ended(Ticket::issued(AWAY_BIT), Duration::from_millis(60));
        }
        assert!(!spill.spills_pay(), "{:?}", spill.means());
        for ms in [20_002, 30_000, 60_000] {
            assert_eq!(
                spill
                    .decide(0, 0, PoolLoad::Moderate, &pool, &[], &mut at(ms))
                    .server,
                0
            );
        }
        // The same pool, light, probes.
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(60_001))
                .server,
            2
        );
    }

    #[test]
    fn a_busy_pool_times_spills_per_place_in_the_queue_so_a_short_queue_hides_no_miss() {
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        let busy = PoolLoad::Busy;
        // 16 in flight at home, 4 at the least loaded server.
        set_active(&servers, &[(0, 16), (1, 15), (2, 14), (3, 4)]);
        // A home request that left behind 16 others took 51 ms: 3 ms per place.
        spill.ended(
            Ticket::issued((16 << DEPTH_SHIFT) | BUSY_BIT),
            Duration::from_millis(51),
        );
        // A probe to the server with 4 in flight misses: 40 ms, less than the 51 at home,
        // but 8 ms per place of its queue.
        let probe = spill.decide(0, 0, busy, &pool, &[], &mut at(1000));
        assert_eq!(probe.server, 3);
        end(&spill, probe, 1000, 40);
        assert_eq!(spill.per_place.means(), (3000, 8000));
        assert!(!spill.per_place.open());
        // By whole times the miss would have looked cheaper than home (40 ms against 51):
        // the busy pool's requests feed only their own gate, so the one of a moderately
        // loaded pool, which never probes, heard nothing and keeps its requests home.
        assert_eq!(spill.whole.means(), (UNKNOWN, UNKNOWN));
        let moderate = spill.decide(0, 0, PoolLoad::Moderate, &pool, &[], &mut at(1001));
        assert_eq!(moderate.server, 0);
        assert_eq!(
            spill.decide(0, 0, busy, &pool, &[], &mut at(1001)).server,
            0
        );
        // The probe cost more: the next leaves 200 ms later.
        assert_eq!(
            spill.decide(0, 0, busy, &pool, &[], &mut at(1199)).server,
            0
        );
        // Now the objects are there: 12 ms in the same queue, 2.4 ms per place. Each such
        // probe halves the wait and moves the mean by a quarter; a few open the gate.
        let mut ms = 1200;
        let mut probes = 0;
        while !spill.per_place.open() {
            let d = spill.decide(0, 0, busy, &pool, &[], &mut at(ms));
            if d.server == 3 {
                end(&spill, d, ms, 12);
                probes += 1;
            }
            ms += 50;
            assert!(probes < 20, "{:?}", spill.per_place.means());
        }
        assert_eq!(probes, 5);
        // Every request with a queue at home now spills to the server half as loaded; its
        // ticket carries the queue it joined.
        let d = spill.decide(0, 0, busy, &pool, &[], &mut at(ms));
        assert_eq!(d.server, 3);
        let bits = d.ticket.get().unwrap_or(0);
        assert_eq!(
            bits & (AWAY_BIT | PROBE_BIT | BUSY_BIT),
            AWAY_BIT | BUSY_BIT
        );
        assert_eq!((bits >> DEPTH_SHIFT) & DEPTH_MAX, 4);
    }

    #[test]
    fn a_mean_driven_near_zero_is_raised_again_by_real_samples() {
        // Cheap requests behind many held ones cost a few microseconds per place.
        let mean = AtomicU32::new(UNKNOWN);
        blend(&mean, 3, AWAY_WEIGHT);
        assert_eq!(mean.load(Ordering::Relaxed), 3);
        // Honest misses of 40 ms per place raise it past 5/4 of a 3 ms home within 64.
        for _ in 0..64 {
            blend(&mean, 40_000, AWAY_WEIGHT);
        }
        assert!(mean.load(Ordering::Relaxed) > 3750, "{mean:?}");
        // Rounded toward the sample: one microsecond more moves a mean of 100 with weight 64.
        let mean = AtomicU32::new(100);
        blend(&mean, 101, HOME_WEIGHT);
        assert_eq!(mean.load(Ordering::Relaxed), 101);
        blend(&mean, 100, HOME_WEIGHT);
        assert_eq!(mean.load(Ordering::Relaxed), 100);
    }

    #[test]
    fn a_long_held_request_moves_a_mean_by_at_most_clip_times_its_weight() {
        let spill = Spill::default();
        let at_ms = |ms: u64| Ticket::issued(micros(Duration::from_millis(ms)));
        spill.ended(at_ms(0), Duration::from_millis(8));
        // Held for an hour: counts as 4 x 8 ms.
        spill.ended(at_ms(10), Duration::from_secs(3600));
        let expected = (8000 * (HOME_WEIGHT - 1) + 8000 * CLIP) / HOME_WEIGHT;
        assert_eq!(spill.means().0, expected as u32);
    }

    #[test]
    fn only_a_queue_at_home_spills_and_only_to_a_server_half_as_loaded() {
        let servers = pool_of(&[1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        // Make spills pay.
        spill.ended(Ticket::issued(0), Duration::from_millis(10));
        spill.ended(Ticket::issued(AWAY_BIT), Duration::from_millis(1));
        assert!(spill.spills_pay());
        // One in flight at home: nothing to gain.
        set_active(&servers, &[(0, 1), (1, 0), (2, 0)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            0
        );
        // Two at home, two everywhere else: none half as loaded.
        set_active(&servers, &[(0, 2), (1, 2), (2, 2)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            0
        );
        // One in flight is half of two; the spill's ticket says so.
        set_active(&servers, &[(2, 1)]);
        let d = spill.decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1));
        assert_eq!(d.server, 2);
        assert_ne!(d.ticket.get().map(|bits| bits & AWAY_BIT), Some(0));
        // Four at home: the least loaded of 3 and 2 takes it; 3 would not have.
        set_active(&servers, &[(0, 4), (1, 3), (2, 2)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            2
        );
        set_active(&servers, &[(2, 3)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            0
        );
        // Server 2 failed this request: only server 1 is left, and it is not half as loaded.
        set_active(&servers, &[(1, 3), (2, 0)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[2], &mut at(1))
                .server,
            0
        );
        // Ties: the first least loaded server from the target's start.
        set_active(&servers, &[(1, 0)]);
        assert_eq!(
            spill
                .decide(0, 2, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            2
        );
        assert_eq!(
            spill
                .decide(0, 1, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            1
        );
    }

    #[test]
    fn half_as_loaded_is_per_unit_of_weight() {
        let servers = pool_of(&[1, 2, 1]);
        let pool = PoolView { servers: &servers };
        let spill = Spill::default();
        spill.ended(Ticket::issued(0), Duration::from_millis(10));
        spill.ended(Ticket::issued(AWAY_BIT), Duration::from_millis(1));
        // Two on weight 2 is one per unit: half of two at home (weight 1).
        set_active(&servers, &[(0, 2), (1, 2), (2, 2)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            1
        );
        // Three on weight 2 is 1.5 per unit: more than half.
        set_active(&servers, &[(1, 3)]);
        assert_eq!(
            spill
                .decide(0, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            0
        );
        // A home of weight 2 with 4 in flight (2 per unit): one on weight 1 is half; with 3
        // (1.5 per unit) it is not, though it is less than half of 3.
        set_active(&servers, &[(0, 2), (1, 4), (2, 1)]);
        assert_eq!(
            spill
                .decide(1, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            2
        );
        set_active(&servers, &[(1, 3)]);
        assert_eq!(
            spill
                .decide(1, 0, PoolLoad::Light, &pool, &[], &mut at(1))
                .server,
            1
        );
    }

    #[test]
    fn tickets_time_the_request_they_were_issued_for() {
        let spill = Spill::default();
        spill.ended(Ticket::NONE, Duration::from_secs(5));
        assert_eq!(spill.means(), (UNKNOWN, UNKNOWN));
        spill.ended(
            Ticket::issued(micros(Duration::from_millis(3))),
            Duration::from_millis(7),
        );
        spill.ended(
            Ticket::issued(micros(Duration::from_millis(3)) | AWAY_BIT),
            Duration::from_millis(5),
        );
        assert_eq!(spill.means(), (4000, 2000));
        // A clock that went backwards (a ticket from another clock) counts as no time.
        spill.ended(
            Ticket::issued(micros(Duration::from_secs(9))),
            Duration::from_secs(1),
        );
        assert_eq!(
            spill.means().0,
            4000 * (HOME_WEIGHT as u32 - 1) / HOME_WEIGHT as u32
        );
    }
}
