//! The locality harness (issue 15): emulated cache-limited servers behind the real switch,
//! closed-loop clients replaying one trace, each scheduling module in turn. Shared by the
//! `locality` bench (`main.rs`, the command line) and `tests/locality.rs` (quick mode).

pub mod access_log;
pub mod cache;
pub mod clients;
pub mod costs;
pub mod experiments;
pub mod random;
pub mod report;
pub mod resource;
pub mod run;
pub mod servers;
pub mod switch;
pub mod workload;

use experiments::{Common, Experiment};
use indicatif::{ProgressBar, ProgressStyle};
use run::RunResult;
use std::path::Path;
use std::sync::Arc;
use workload::Workload;

/// Runs every run of `experiment` in turn through the switch `binary`, with a progress bar
/// (hidden when stderr is no terminal).
pub async fn run_experiment(
    experiment: Experiment,
    common: &Common,
    workload: &Workload,
    binary: &Path,
    only: &[String],
) -> Result<Vec<RunResult>, String> {
    let mut plan = common.plan(experiment);
    if !only.is_empty() {
        plan.retain(|spec| only.contains(&spec.label));
    }
    let sizes = Arc::new(workload.sizes.clone());
    let bar = ProgressBar::new(plan.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {elapsed_precise} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(experiment.name());
    let mut results = Vec::with_capacity(plan.len());
    for spec in &plan {
        let name = format!(
            "{} on {} servers{}",
            spec.label,
            spec.servers,
            if spec.switches > 1 {
                format!(", {} switches", spec.switches)
            } else {
                String::new()
            }
        );
        let show = |phase: &str| bar.set_message(format!("{name}: {phase}"));
        let result = run::run(spec, workload, &sizes, binary, &show).await?;
        let line = format!(
            "{name}: {:.0} req/s, {:.1}% hits, {:.2} copies per cached object, max/mean load {:.2} (requests per server {:?}), p99 {:.0} ms, \
             switch CPU {:.0}%, harness CPU {:.0}%",
            result.requests_per_s,
            result.hit_rate * 100.0,
            result.copies_per_object,
            result.max_over_mean,
            result.per_server_requests,
            result.p99_ms,
            result.switch_cpu_percent,
            result.harness_cpu_percent
        );
        // Without a terminal the bar draws nothing, its println included: the log still
        // gets each run as it ends.
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        results.push(result);
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(results)
}
