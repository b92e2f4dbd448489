//! The experiments of issue 15, each a list of runs over one workload and the same costs:
//! `goals` (4 servers, working set 2.5 times one cache, every module and the all-hits
//! ceiling), `fits` (the working set within one cache), `servers` (1 to 8 servers),
//! `cache` (cache size against the working set), `switches` (one, two and four switches
//! sharing the clients), `sweep` (16 to 438 clients, the working set within one cache and 2.5
//! caches: issue 27) and `quick` (lard against wlc in well under a minute, for the test).

use super::costs::Costs;
use super::run::{paper_clients, RunResult, RunSpec};
use super::switch::Module;
use super::workload::{Synthetic, Workload};
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Experiment {
    Goals,
    Fits,
    Servers,
    Cache,
    Switches,
    Sweep,
    Quick,
}

impl Experiment {
    pub const ALL: [Experiment; 6] = [
        Experiment::Goals,
        Experiment::Fits,
        Experiment::Servers,
        Experiment::Cache,
        Experiment::Switches,
        Experiment::Sweep,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Experiment::Goals => "goals",
            Experiment::Fits => "fits",
            Experiment::Servers => "servers",
            Experiment::Cache => "cache",
            Experiment::Switches => "switches",
            Experiment::Sweep => "sweep",
            Experiment::Quick => "quick",
        }
    }

    pub fn parse(name: &str) -> Option<Experiment> {
        [Experiment::Quick]
            .into_iter()
            .chain(Experiment::ALL)
            .find(|e| e.name() == name)
    }
}

/// What every run of an experiment shares.
#[derive(Clone, Debug)]
pub struct Common {
    pub working_set: u64,
    /// Bytes of the whole catalogue: a cache this large holds everything (the ceiling).
    pub catalogue: u64,
    pub costs: Costs,
    pub workers: usize,
    pub warmup_requests: u64,
    /// Every cost times this during the warm-up (0: free).
    pub warmup_cost_scale: f64,
    pub settle: Duration,
    pub measure: Duration,
    /// Clients in every run; `None`: the paper's count for the run's servers.
    pub clients: Option<usize>,
    /// LARD's fixed thresholds (lard and lard-r), `(t_low, t_high)` in requests in flight at
    /// a server; `None`: the modules' defaults (`thresholds = "auto"`, nothing to tune).
    pub fixed_thresholds: Option<(u32, u32)>,
    /// More options for `lard` and `lard-r`, as rule-file lines (`spill`, `"off"`).
    pub lard_options: Vec<(String, String)>,
}

/// The warm-up's costs against the measured phases' (`run.rs` says why not 0).
pub const WARMUP_COST_SCALE: f64 = 0.25;

/// The paper's thresholds, which size the paper's client count whatever the modules use.
pub const PAPER_THRESHOLDS: (u32, u32) = (25, 65);

/// The workload and settings of `--quick` (and of tests/locality.rs): 1000 objects, a short
/// warm-up, 1.5 s to settle and 3 s measured per run, at twice the paper's costs.
pub fn quick() -> (Workload, Common) {
    let workload = Synthetic::default_with(1000, 100_000, 15).build();
    let common = Common {
        working_set: workload.working_set(),
        catalogue: workload.sizes.iter().sum(),
        costs: Costs::paper(2.0),
        workers: 1,
        warmup_requests: 30_000,
        warmup_cost_scale: WARMUP_COST_SCALE,
        settle: Duration::from_millis(1500),
        measure: Duration::from_secs(3),
        clients: None,
        fixed_thresholds: None,
        lard_options: Vec::new(),
    };
    (workload, common)
}

/// The modules compared, with the options the rule file gives them: the defaults, but for
/// fixed LARD thresholds when asked for.
pub fn module(label: &str, common: &Common) -> Module {
    let thresholds = |module: Module| {
        let module = match common.fixed_thresholds {
            Some((t_low, t_high)) => module.with("t_low", t_low).with("t_high", t_high),
            None => module,
        };
        common
            .lard_options
            .iter()
            .fold(module, |module, (key, value)| module.with(key, value))
    };
    match label {
        "hash" => Module::plain("hash").with("balance_factor", 1.25),
        "lard" => thresholds(Module::plain("lard")),
        "lard-r" => thresholds(Module::plain("lard-r")).with("k", 20),
        // The ceiling: every cache holds the whole catalogue, wlc spreads the load.
        "all-hits" => Module::plain("wlc"),
        other => Module::plain(match other {
            "wrr" => "wrr",
            "rr" => "rr",
            _ => "wlc",
        }),
    }
}

/// The client counts of the sweep: from 4 requests in flight per server to twice the paper's
/// 219 on 4 servers.
pub const SWEEP_CLIENTS: [usize; 6] = [16, 32, 64, 128, 219, 438];

pub const EVERY_MODULE: [&str; 6] = ["wrr", "wlc", "lard", "lard-r", "hash", "all-hits"];

impl Common {
    /// The thresholds that size the paper's client count: the fixed ones if given.
    pub fn paper_thresholds(&self) -> (u32, u32) {
        self.fixed_thresholds.unwrap_or(PAPER_THRESHOLDS)
    }

    /// A run of `label` on `servers` servers whose caches each hold `cache_ratio` times the
    /// working set (the ceiling ignores the ratio).
    pub fn spec(&self, label: &str, servers: usize, cache_ratio: f64, switches: usize) -> RunSpec {
        let cache_bytes = if label == "all-hits" {
            self.catalogue + 1
        } else {
            (self.working_set as f64 * cache_ratio) as u64
        };
        RunSpec {
            label: label.to_string(),
            module: module(label, self),
            servers,
            cache_bytes,
            cache_ratio: if label == "all-hits" {
                0.0
            } else {
                cache_ratio
            },
            clients: self
                .clients
                .unwrap_or_else(|| paper_clients(servers, self.paper_thresholds())),
            switches,
            workers: self.workers,
            costs: self.costs,
            warmup_requests: self.warmup_requests,
            warmup_cost_scale: self.warmup_cost_scale,
            settle: self.settle,
            measure: self.measure,
        }
    }

    pub fn plan(&self, experiment: Experiment) -> Vec<RunSpec> {
        let mut runs = Vec::new();
        match experiment {
            Experiment::Goals => {
                for label in EVERY_MODULE {
                    runs.push(self.spec(label, 4, 0.4, 1));
                }
            }
            Experiment::Fits => {
                for label in ["wrr", "wlc", "lard", "lard-r", "hash", "all-hits"] {
                    runs.push(self.spec(label, 4, 1.0, 1));
                }
            }
            Experiment::Servers => {
                for servers in [1, 2, 3, 4, 6, 8] {
                    for label in EVERY_MODULE {
                        runs.push(self.spec(label, servers, 0.4, 1));
                    }
                }
            }
            Experiment::Cache => {
                for ratio in [0.1, 0.2, 0.4, 0.7, 1.0] {
                    for label in ["wlc", "lard", "lard-r", "hash"] {
                        runs.push(self.spec(label, 4, ratio, 1));
                    }
                }
            }
            Experiment::Switches => {
                for label in ["hash", "lard", "lard-r"] {
                    for switches in [1, 2, 4] {
                        runs.push(self.spec(label, 4, 0.4, switches));
                    }
                }
            }
            Experiment::Sweep => {
                // The ceiling is measured where the working set exceeds a cache; where it
                // fits, wlc is at the ceiling (every cache holds everything).
                for (ratio, labels) in [
                    (1.0, &["wlc", "lard", "lard-r"][..]),
                    (0.4, &["wlc", "lard", "lard-r", "all-hits"][..]),
                ] {
                    for clients in SWEEP_CLIENTS {
                        for label in labels {
                            let mut spec = self.spec(label, 4, ratio, 1);
                            spec.clients = clients;
                            runs.push(spec);
                        }
                    }
                }
            }
            Experiment::Quick => {
                for label in ["wlc", "lard"] {
                    runs.push(self.spec(label, 4, 0.4, 1));
                }
            }
        }
        runs
    }
}

/// The first result labelled `label` (with `switches` switches), if any.
pub fn find<'r>(results: &'r [RunResult], label: &str, switches: usize) -> Option<&'r RunResult> {
    results
        .iter()
        .find(|r| r.spec.label == label && r.spec.switches == switches)
}
