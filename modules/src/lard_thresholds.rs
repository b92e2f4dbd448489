//! When a `lard` or `lard-r` target's server counts as overloaded, and when a server is free
//! enough to take targets: the paper's rule, `load > T_high` while some server is below
//! `T_low`, or `load >= 2 T_high`.
//!
//! Its fixed `T_low` = 25 and `T_high` = 65 only act when the pool carries about
//! `(n - 1) T_high + T_low` requests, the level the paper's front-end held its cluster at; with
//! fewer in flight no server passes `T_high` and hot targets stay where they first landed (64
//! clients on 4 servers: 0.78x `wlc`). `auto` (the default) solves the same equation for the
//! load the pool carries now: with `A` requests in flight over `n` servers,
//! `T_low = A / ((n - 1) r + 1)` and `T_high = r T_low`, `r` = 65/25 being the paper's ratio,
//! per unit of weight. At the paper's load that gives the paper's thresholds; at a quarter of
//! it, a quarter of them. Several instances each count their own requests, so each scales to
//! its own share of the load. `auto` judges each server's requests in flight averaged over the
//! last 10 ms (`SMOOTHING`), not the count of the moment, which jumps by its square root from
//! one pick to the next when an instance carries a fraction of the load. A server carrying at
//! most `QUIET` requests is never overloaded: in a nearly idle pool one request more or less is
//! noise, and a target moved on noise costs a cache miss.

use crate::lard_heat::{HotTargets, Temperature};
use crate::load::eligible;
use crate::options::Options;
use crate::{BuildError, PoolView};
use std::num::NonZeroUsize;
use std::time::Duration;

/// The paper's ratio T_high / T_low = 65 / 25, as 13 / 5 so the tests stay in integers.
const RATIO_NUM: u64 = 13;
const RATIO_DEN: u64 = 5;

/// Requests in flight at a server up to which `auto` never calls it overloaded, whatever the
/// others carry: with one or two requests in flight a server is not overloaded but between
/// requests. Measured with the locality harness on loads of the moment (before `SMOOTHING`),
/// 16 clients on 4 servers whose caches each hold the working set (4 in flight at a server on
/// average): a floor of 8 kept hot targets in place and served 0.85x `wlc`, 4 and 2 both
/// 0.94x; from 32 clients up the floor is below `T_high` and changes nothing.
pub(crate) const QUIET: u32 = 4;

/// Requests in flight per server up to which the pool is light, and a request may spill to a
/// server half as loaded, or probe, by whole times (`lard_spill.rs`): twice `QUIET`. Measured
/// with the locality harness (4 s runs, before spills were measured): spills at any load
/// lifted 64 clients on 2.5 caches from 0.94x to 1.01x the ceiling, but four switches at the
/// paper's load (14 in flight per server in each switch's count) ended with 1.64 copies of
/// each object instead of 1.15.
pub(crate) const LIGHT: u32 = 2 * QUIET;

/// Requests in flight per server up to which the pool is moderately loaded: a request may
/// spill there too, but only while spills are measured to pay, never as a probe
/// (`lard_spill.rs`). Where every cache holds the working set, 32 clients on 4 servers carry
/// about `LIGHT` per server, and with only hot targets moving (`lard_heat.rs`) their servers
/// idled in turn whenever the pool was over `LIGHT`: 0.94x and 0.98x `wlc` in two runs, 0.99x
/// with spills up to 16 per server. But each of four switches at the paper's load counts
/// about 14 per server, and there a spill to a shorter queue is measured faster than home
/// even when it misses: up to 16, four switches held 1.19 copies of each object and lost 0.4
/// points of hits (1.12 and +0.03 without). So 12, between the two; busier pools judge
/// spills per place in the queue.
pub(crate) const MODERATE: u32 = LIGHT + LIGHT / 2;

/// How loaded the pool is, for spills (`Judge::pool_load`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolLoad {
    /// At most `LIGHT` per server: spills while they pay, probes otherwise.
    Light,
    /// At most `MODERATE` per server: spills only while they pay.
    Moderate,
    /// Busier: spills and probes judged per place in the queue.
    Busy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Thresholds {
    /// The paper's, in requests in flight at a server.
    Fixed { t_low: u32, t_high: u32 },
    /// Following the load the pool carries (above).
    Auto,
}

/// The options both modules read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LardSettings {
    pub thresholds: Thresholds,
    pub max_targets: NonZeroUsize,
    /// Requests may go to a less loaded server than their target's when that has been
    /// measured to pay (`lard_spill.rs`).
    pub spill: bool,
}

impl LardSettings {
    /// `thresholds = "auto" | "fixed"`, `t_low`, `t_high`, `max_targets`, `spill = "measured"
    /// | "off"`. Giving `t_low` or `t_high` means `fixed`, and `fixed` means no spill unless
    /// `spill` is given, so rule files written before `auto` keep their meaning.
    pub(crate) fn read(options: &mut Options<'_>) -> Result<LardSettings, BuildError> {
        let given_fixed = options.index_of("t_low").or(options.index_of("t_high"));
        let mode_index = options.index_of("thresholds");
        let default_mode = if given_fixed.is_some() {
            "fixed"
        } else {
            "auto"
        };
        let mode = options
            .choice("thresholds", default_mode, &["auto", "fixed"])
            .map_err(BuildError::BadOption)?;
        let t_low = options
            .integer("t_low", 25, 0, 1_000_000)
            .map_err(BuildError::BadOption)? as u32;
        let t_high_index = options.index_of("t_high");
        let t_high = options
            .integer("t_high", 65, 1, 1_000_000)
            .map_err(BuildError::BadOption)? as u32;
        if mode == "auto" {
            if let Some(index) = given_fixed {
                return Err(BuildError::BadOption(options.error_at(
                    index,
                    "t_low and t_high are fixed thresholds, and thresholds = \"auto\" computes \
                     them from the pool's load: remove them, or set thresholds = \"fixed\"",
                )));
            }
        } else if t_high <= t_low {
            return Err(BuildError::BadOption(options.error_at(
                t_high_index.or(mode_index).unwrap_or(0),
                format!("t_high ({t_high}) must be above t_low ({t_low})"),
            )));
        }
        let max_targets = options
            .integer("max_targets", 100_000, 1, 100_000_000)
            .map_err(BuildError::BadOption)?;
        let spill = options
            .choice(
                "spill",
                if mode == "auto" { "measured" } else { "off" },
                &["measured", "off"],
            )
            .map_err(BuildError::BadOption)?;
        Ok(LardSettings {
            spill: spill == "measured",
            thresholds: if mode == "auto" {
                Thresholds::Auto
            } else {
                Thresholds::Fixed { t_low, t_high }
            },
            max_targets: NonZeroUsize::new(max_targets as usize).unwrap_or(NonZeroUsize::MIN),
        })
    }
}

impl LardSettings {
    /// Which targets an overloaded server sheds: with `auto`, its hot ones; with the fixed
    /// thresholds, any, as in the paper (`lard_heat.rs`).
    pub(crate) fn hot_targets(&self) -> HotTargets {
        HotTargets::new(self.thresholds == Thresholds::Auto)
    }
}

/// How long `auto` averages each server's requests in flight over (an exponentially weighted
/// mean in time). An instance counts only its own requests: with four switches on 4 servers
/// at the paper's load each counts about 14 at a server, and such counts jump by their square
/// root from one pick to the next. Judged on the counts of the moment, each instance moved
/// targets on its own noise and the four caches held 1.50 to 1.62 copies of each object (1.11
/// with one switch); averaged over 10 ms, 1.14 to 1.17 (1 ms: 1.51, 5 ms: 1.19, 20 and 50 ms:
/// 1.15 and 1.16). The price is paid by one switch at light load, where those noisy moves
/// had helped: with 64 clients on 4 servers whose working set is 2.5 caches, the counts of the
/// moment moved hot objects around until the caches held 1.57 copies of each, and served 0.97x
/// the all-hits ceiling; averaged over 1 to 10 ms, 0.93x with 1.18 copies. (Measured with the
/// locality harness: BENCHMARKS.md, "LARD without tuning".)
pub(crate) const SMOOTHING: Duration = Duration::from_millis(10);

/// Each server's mean requests in flight over about `SMOOTHING`, for `auto`, and what the
/// thresholds need of them, added up in the same pass.
#[derive(Debug, Default)]
pub(crate) struct Smoothed {
    loads: Vec<f64>,
    last: Option<Duration>,
    /// S: the usable servers' means per unit of weight, added up.
    per_weight_sum: f64,
    usable: u64,
}

impl Smoothed {
    /// Brings every server's mean up to `now`: each moves toward the count of the moment by
    /// `dt / (SMOOTHING + dt)`, the first-order form of an exponential mean's `1 - e^(-dt /
    /// SMOOTHING)` (the same for short steps, 1 for long ones) that needs no `exp` per pick. The first reading starts from the counts of the moment (so
    /// would one after the pool changed size, which a module's pool never does: a reload
    /// builds a new module).
    pub(crate) fn update(&mut self, pool: &PoolView<'_>, now: Duration) {
        let weight = match self.last {
            Some(last) if self.loads.len() == pool.servers.len() => {
                let dt = now.saturating_sub(last);
                // Means younger than a sixteenth of the smoothing time are kept as they are:
                // a busy pool's picks skip the pass over its servers (64 servers: 355 ns a
                // pick with the pass on every pick, BENCHMARKS.md).
                if dt < SMOOTHING / 16 {
                    return;
                }
                let dt = dt.as_secs_f64();
                dt / (SMOOTHING.as_secs_f64() + dt)
            }
            _ => 1.0,
        };
        self.loads.resize(pool.servers.len(), 0.0);
        self.per_weight_sum = 0.0;
        self.usable = 0;
        for (mean, server) in self.loads.iter_mut().zip(pool.servers) {
            let load = server.load();
            *mean += (f64::from(load.active) - *mean) * weight;
            if load.is_usable() {
                self.per_weight_sum += *mean / f64::from(load.weight);
                self.usable += 1;
            }
        }
        self.last = Some(now);
    }
}

/// The thresholds of one pick, read from the pool once.
///
/// `auto` compares loads per unit of weight (`x = load / weight`), so that a server of weight
/// 3 carrying three times the requests of one of weight 1 is as loaded as it. With `S` the sum
/// of every usable server's `x`, the paper's equation in these units gives
/// `T_low = S / ((n - 1) r + 1)` and `T_high = r T_low`; with equal weights that is the
/// request count of the module header. Each test is multiplied out (`x < T_low` as
/// `load ((n - 1) r + 1) < S weight`, with `r` = 13/5 as integers), so that loads that are
/// whole numbers compare exactly, as the paper's counts do, and no pick divides per test.
pub(crate) struct Judge<'a> {
    thresholds: Thresholds,
    view: &'a PoolView<'a>,
    /// Smoothed loads (auto), else the counts of the moment.
    smoothed: Option<&'a [f64]>,
    /// S: the usable servers' loads per unit of weight, added up (auto).
    per_weight_sum: f64,
    /// `RATIO_NUM (n - 1) + RATIO_DEN`: `RATIO_DEN ((n - 1) r + 1)` (auto).
    spread: f64,
    /// Usable servers (auto).
    usable: u64,
}

impl LardSettings {
    /// The judge of one pick. With `auto` the smoothed loads are brought up to `now()` first;
    /// the fixed thresholds compare the counts of the moment, as the paper's do, and read no
    /// clock.
    pub(crate) fn judge<'a>(
        &self,
        pool: &'a PoolView<'a>,
        loads: &'a mut Smoothed,
        now: &mut dyn FnMut() -> Duration,
    ) -> Judge<'a> {
        if self.thresholds == Thresholds::Auto {
            loads.update(pool, now());
        }
        Judge::new(self, pool, Some(loads))
    }
}

impl<'a> Judge<'a> {
    pub(crate) fn new(
        settings: &LardSettings,
        view: &'a PoolView<'a>,
        smoothed: Option<&'a Smoothed>,
    ) -> Judge<'a> {
        let smoothed = match settings.thresholds {
            // A module is built for one pool and never sees it change size (a reload builds
            // a new one), so the length test is a defence only.
            Thresholds::Auto => smoothed.filter(|s| s.loads.len() == view.servers.len()),
            Thresholds::Fixed { .. } => None,
        };
        let mut judge = Judge {
            thresholds: settings.thresholds,
            view,
            smoothed: smoothed.map(|s| s.loads.as_slice()),
            per_weight_sum: 0.0,
            spread: 0.0,
            usable: 0,
        };
        if judge.thresholds == Thresholds::Auto {
            let servers = match smoothed {
                Some(s) => {
                    judge.per_weight_sum = s.per_weight_sum;
                    s.usable
                }
                None => {
                    let mut servers = 0u64;
                    for (i, server) in view.servers.iter().enumerate() {
                        let load = server.load();
                        if load.is_usable() {
                            judge.per_weight_sum += judge.level(i) / f64::from(load.weight);
                            servers += 1;
                        }
                    }
                    servers
                }
            };
            judge.spread = (RATIO_NUM * servers.saturating_sub(1) + RATIO_DEN) as f64;
            judge.usable = servers;
        }
        judge
    }

    /// How loaded the pool is: its usable servers' mean requests in flight per unit of
    /// weight (smoothed with `auto`, of the moment with `fixed`) against `LIGHT` and
    /// `MODERATE`.
    pub(crate) fn pool_load(&self) -> PoolLoad {
        let (sum, usable) = match self.thresholds {
            Thresholds::Auto => (self.per_weight_sum, self.usable),
            Thresholds::Fixed { .. } => self
                .view
                .servers
                .iter()
                .map(|s| s.load())
                .filter(|l| l.is_usable())
                .fold((0.0, 0), |(sum, n), l| {
                    (sum + f64::from(l.active) / f64::from(l.weight), n + 1)
                }),
        };
        let usable = usable as f64;
        if sum <= f64::from(LIGHT) * usable {
            PoolLoad::Light
        } else if sum <= f64::from(MODERATE) * usable {
            PoolLoad::Moderate
        } else {
            PoolLoad::Busy
        }
    }

    /// Server `i`'s requests in flight: the smoothed mean, or the count of the moment.
    fn level(&self, i: usize) -> f64 {
        match self.smoothed {
            Some(loads) => loads[i],
            None => f64::from(self.view.servers[i].active()),
        }
    }

    /// (load side, threshold side) of server `i` against `times` / `RATIO_DEN` T_low (auto).
    /// In an idle pool S is 0, so no server is below T_low (nowhere to move to, nothing to
    /// move) and none above T_high.
    fn sides(&self, i: usize, times: u64) -> (f64, f64) {
        let weight = f64::from(self.view.servers[i].weight());
        (
            self.level(i) * self.spread,
            times as f64 * self.per_weight_sum * weight,
        )
    }

    /// Below T_low: a server an overloaded target may go to.
    pub(crate) fn underloaded(&self, i: usize) -> bool {
        match self.thresholds {
            Thresholds::Fixed { t_low, .. } => self.view.servers[i].active() < t_low,
            Thresholds::Auto => {
                let (load, low) = self.sides(i, RATIO_DEN);
                load < low
            }
        }
    }

    /// Above T_high (and, for auto, above the quiet floor).
    fn above_high(&self, i: usize) -> bool {
        match self.thresholds {
            Thresholds::Fixed { t_high, .. } => self.view.servers[i].active() > t_high,
            Thresholds::Auto => {
                if self.level(i) <= f64::from(QUIET) {
                    return false;
                }
                let (load, high) = self.sides(i, RATIO_NUM);
                load > high
            }
        }
    }

    /// At 2 T_high or more (and, for auto, at twice the quiet floor).
    fn extreme(&self, i: usize) -> bool {
        match self.thresholds {
            Thresholds::Fixed { t_high, .. } => {
                self.view.servers[i].active() >= t_high.saturating_mul(2)
            }
            Thresholds::Auto => {
                if self.level(i) < f64::from(2 * QUIET) {
                    return false;
                }
                let (load, twice_high) = self.sides(i, 2 * RATIO_NUM);
                load >= twice_high
            }
        }
    }

    /// Whether server `i` sheds a target of this `temperature` (`lard_heat.rs`): a hot or
    /// unjudged one when `should_move`, a cold one only at 2 T_high, where any target is
    /// relief.
    pub(crate) fn sheds(&self, i: usize, temperature: Temperature, tried: &[usize]) -> bool {
        match temperature {
            Temperature::Cold => self.extreme(i),
            Temperature::Hot | Temperature::Unjudged => self.should_move(i, tried),
        }
    }

    /// The paper's imbalance test for server `i`: above T_high while some other eligible
    /// server is below T_low, or at 2 T_high.
    pub(crate) fn should_move(&self, i: usize, tried: &[usize]) -> bool {
        if self.extreme(i) {
            return true;
        }
        self.above_high(i)
            && self
                .view
                .servers
                .iter()
                .enumerate()
                .any(|(j, s)| eligible(s, j, tried) && self.underloaded(j))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{pool_of, set_active};
    use crate::OptionValue;

    fn settings(given: &[(&str, OptionValue)]) -> Result<LardSettings, BuildError> {
        let given: Vec<(String, OptionValue)> = given
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        let mut o = Options::new("lard", &given);
        let s = LardSettings::read(&mut o)?;
        o.finish().map_err(BuildError::BadOption)?;
        Ok(s)
    }

    fn auto() -> LardSettings {
        settings(&[]).unwrap()
    }

    fn moves(settings: &LardSettings, loads: &[u32], home: usize) -> bool {
        let servers = pool_of(&vec![1; loads.len()]);
        let pool = PoolView { servers: &servers };
        let loads: Vec<(usize, u32)> = loads.iter().copied().enumerate().collect();
        set_active(&servers, &loads);
        Judge::new(settings, &pool, None).should_move(home, &[])
    }

    #[test]
    fn auto_is_the_default_and_fixed_is_implied_by_the_paper_thresholds() {
        assert_eq!(auto().thresholds, Thresholds::Auto);
        let fixed = settings(&[("t_high", OptionValue::Integer(40))]).unwrap();
        assert_eq!(
            fixed.thresholds,
            Thresholds::Fixed {
                t_low: 25,
                t_high: 40
            }
        );
        let named = settings(&[("thresholds", OptionValue::String("fixed".into()))]).unwrap();
        assert_eq!(
            named.thresholds,
            Thresholds::Fixed {
                t_low: 25,
                t_high: 65
            }
        );
        match settings(&[
            ("thresholds", OptionValue::String("auto".into())),
            ("t_low", OptionValue::Integer(3)),
        ]) {
            Err(BuildError::BadOption(e)) => {
                assert_eq!(e.index, 1);
                assert!(
                    e.message.contains("thresholds = \"fixed\""),
                    "{}",
                    e.message
                );
            }
            other => panic!("{other:?}"),
        }
        match settings(&[("thresholds", OptionValue::String("atuo".into()))]) {
            Err(BuildError::BadOption(e)) => {
                assert!(e.message.contains("did you mean \"auto\""), "{}", e.message)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn auto_at_the_papers_load_is_the_papers_rule() {
        // 4 servers carrying (n - 1) 65 + 25 = 220: T_low 25, T_high 65 exactly.
        let auto = auto();
        let fixed = settings(&[("thresholds", OptionValue::String("fixed".into()))]).unwrap();
        for loads in [
            [66, 24, 65, 65],
            [65, 25, 65, 65],
            [66, 25, 64, 65],
            [130, 30, 30, 30],
            [129, 31, 30, 30],
        ] {
            assert_eq!(loads.iter().sum::<u32>(), 220);
            assert_eq!(
                moves(&auto, &loads, 0),
                moves(&fixed, &loads, 0),
                "{loads:?}"
            );
        }
        assert!(moves(&auto, &[66, 24, 65, 65], 0));
        assert!(!moves(&auto, &[66, 25, 64, 65], 0));
        assert!(moves(&auto, &[130, 30, 30, 30], 0));
    }

    #[test]
    fn auto_moves_a_hot_target_off_a_server_holding_most_of_a_light_load() {
        // 64 in flight: T_low 7.3, T_high 18.9. The fixed paper thresholds never move here.
        let fixed = settings(&[("thresholds", OptionValue::String("fixed".into()))]).unwrap();
        assert!(moves(&auto(), &[40, 10, 8, 6], 0));
        assert!(!moves(&fixed, &[40, 10, 8, 6], 0));
        // Above T_high but nobody below T_low: stays; at 2 T_high it goes anyway.
        assert!(!moves(&auto(), &[20, 15, 15, 14], 0));
        assert!(moves(&auto(), &[38, 9, 9, 8], 0));
        // A balanced pool: nothing moves.
        assert!(!moves(&auto(), &[17, 16, 16, 15], 0));
    }

    #[test]
    fn nothing_moves_in_a_nearly_idle_pool() {
        for loads in [
            [1, 0, 0, 0],
            [3, 0, 0, 0],
            [QUIET, 0, 0, 0],
            [QUIET, 1, 0, 1],
        ] {
            assert!(!moves(&auto(), &loads, 0), "{loads:?}");
        }
        assert!(moves(&auto(), &[QUIET + 1, 0, 0, 0], 0));
        assert!(!moves(&auto(), &[0, 0, 0, 0], 0));
    }

    #[test]
    fn weights_scale_the_thresholds() {
        // Server 0 has weight 3: 30 of 40 in flight is its fair share, not an overload, and
        // 30 of 40 would be one for a server of weight 1.
        let servers = pool_of(&[3, 1]);
        let pool = PoolView { servers: &servers };
        set_active(&servers, &[(0, 30), (1, 10)]);
        let judge = Judge::new(&auto(), &pool, None);
        assert!(!judge.should_move(0, &[]));
        assert!(moves(&auto(), &[30, 10], 0));
        set_active(&servers, &[(0, 38), (1, 2)]);
        let judge = Judge::new(&auto(), &pool, None);
        assert!(judge.should_move(0, &[]));
    }

    #[test]
    fn auto_judges_loads_averaged_over_the_smoothing_time() {
        use crate::Clock;
        let clock = crate::ManualClock::new();
        let servers = pool_of(&[1, 1, 1, 1]);
        let pool = PoolView { servers: &servers };
        let settings = auto();
        let mut loads = Smoothed::default();
        // A steady, even pool.
        set_active(&servers, &[(0, 16), (1, 16), (2, 16), (3, 16)]);
        assert!(!settings
            .judge(&pool, &mut loads, &mut || clock.now())
            .should_move(0, &[]));
        // One pick later (0.1 ms) server 0 jumps to 40 and server 3 drops to 4: noise of one
        // instance's counts. The means have barely moved: nothing moves.
        clock.advance(Duration::from_micros(100));
        set_active(&servers, &[(0, 40), (3, 4)]);
        assert!(!settings
            .judge(&pool, &mut loads, &mut || clock.now())
            .should_move(0, &[]));
        // Judged on the counts of the moment it would have moved.
        assert!(Judge::new(&settings, &pool, None).should_move(0, &[]));
        // Held for 5 smoothing times (the means have come 5/6 of the way): it moves.
        clock.advance(SMOOTHING * 5);
        assert!(settings
            .judge(&pool, &mut loads, &mut || clock.now())
            .should_move(0, &[]));
        // The fixed thresholds take the counts of the moment, as the paper's front-end did.
        let fixed = settings_fixed(10, 30);
        let mut fresh = Smoothed::default();
        assert!(fixed
            .judge(&pool, &mut fresh, &mut || clock.now())
            .should_move(0, &[]));
    }

    fn settings_fixed(t_low: i64, t_high: i64) -> LardSettings {
        settings(&[
            ("t_low", OptionValue::Integer(t_low)),
            ("t_high", OptionValue::Integer(t_high)),
        ])
        .unwrap()
    }
}
