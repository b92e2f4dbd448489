//! `cargo bench --bench locality -- [OPTIONS]`: the locality harness (issue 15). Emulated
//! cache-limited servers on loopback behind the real `tcpvs` binary, closed-loop clients
//! replaying one trace, each module in turn; Markdown tables and SVG plots in
//! `benches/results/`. `--quick` is the short run `tests/locality.rs` makes. See BENCHMARKS.md.

// Cargo compiles a bench target with cfg(test) but, with `harness = false`, runs no test: the
// harness's unit tests are run by tests/locality.rs, and only compiled here.
#![cfg_attr(test, allow(unused_imports, dead_code))]

#[path = "mod.rs"]
mod harness;

use clap::Parser;
use harness::experiments;
use harness::experiments::{Common, Experiment};
use harness::workload::{Synthetic, Workload};
use harness::{access_log, costs::Costs, report};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(about = "Locality harness: LARD and friends on emulated cache-limited servers")]
struct Args {
    /// The short run of the test: wlc and lard on 4 servers, a small catalogue.
    #[arg(long)]
    quick: bool,
    /// goals, fits, servers, cache, switches (repeatable; default: all of them).
    #[arg(long = "experiment")]
    experiments: Vec<String>,
    /// Objects in the synthetic catalogue.
    #[arg(long, default_value_t = 3000)]
    objects: usize,
    /// Requests in the synthetic trace (replayed from its start, wrapping around).
    #[arg(long, default_value_t = 300_000)]
    requests: usize,
    /// Zipf exponent of popularity.
    #[arg(long, default_value_t = 0.9)]
    zipf: f64,
    #[arg(long, default_value_t = 15)]
    seed: u64,
    /// A Common or Combined Log Format file to replay instead of the synthetic trace.
    #[arg(long)]
    log: Option<PathBuf>,
    /// Every emulated cost times this (2: half the paper's speed, half the real CPU).
    #[arg(long, default_value_t = 2.0)]
    time_scale: f64,
    /// Requests served before the measurement, at `--warmup-costs` (fills caches and tables:
    /// enough that the least popular objects have been asked for a few times).
    #[arg(long, default_value_t = 150_000)]
    warmup: u64,
    /// Every cost times this during the warm-up; 0 makes the warm-up free, as it was before
    /// issue 27 (a module that times requests then sees misses cost nothing).
    #[arg(long, default_value_t = experiments::WARMUP_COST_SCALE)]
    warmup_costs: f64,
    /// Seconds with costs on before measuring.
    #[arg(long, default_value_t = 3.0)]
    settle: f64,
    /// Seconds measured.
    #[arg(long, default_value_t = 8.0)]
    measure: f64,
    /// The switch's `workers`.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Clients in every run (default: the paper's (n - 1) * 65 + 24 for n servers).
    #[arg(long)]
    clients: Option<usize>,
    /// Fixed LARD thresholds (lard, lard-r): t_low, in requests in flight at a server; also
    /// sizes the paper's client count. Default: the modules' own (`thresholds = "auto"`).
    #[arg(long)]
    t_low: Option<u32>,
    /// Fixed LARD thresholds: t_high (the other one, if not given, is the paper's).
    #[arg(long)]
    t_high: Option<u32>,
    /// A rule-file option for `lard` and `lard-r`, `KEY=VALUE` with a TOML value
    /// (`--lard-option 'spill="off"'`; repeatable).
    #[arg(long)]
    lard_option: Vec<String>,
    /// Only the runs of these labels (wrr, wlc, lard, lard-r, hash, all-hits; repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Redraw the plots of an experiment from the table it wrote (`--experiment servers
    /// --replot benches/results/locality-servers.md`), without running it again.
    #[arg(long)]
    replot: Option<PathBuf>,
    /// Appended to the names of the files written (`locality-fits-TAG.md`), so that variants
    /// of an experiment do not overwrite each other.
    #[arg(long)]
    tag: Option<String>,
    /// Where the tables and plots go.
    #[arg(long, default_value = "benches/results")]
    out: PathBuf,
    /// Print the tables only, write nothing.
    #[arg(long)]
    dry: bool,
    /// What cargo bench passes to every bench target.
    #[arg(long, hide = true)]
    bench: bool,
}

fn main() {
    let args = Args::parse();
    if let Err(e) = real_main(args) {
        eprintln!("locality: {e}");
        std::process::exit(1);
    }
}

/// The synthetic trace the options describe, or the access log `--log` names.
fn workload(args: &Args) -> Result<Workload, String> {
    Ok(match &args.log {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let parsed = access_log::parse(&text, &path.display().to_string());
            eprintln!(
                "locality: {} lines of {} skipped",
                parsed.skipped,
                path.display()
            );
            if parsed.workload.trace.is_empty() {
                return Err(format!("{}: no successful GET in the log", path.display()));
            }
            parsed.workload
        }
        None => {
            let mut spec = Synthetic::default_with(args.objects, args.requests, args.seed);
            spec.zipf_exponent = args.zipf;
            spec.build()
        }
    })
}

fn real_main(args: Args) -> Result<(), String> {
    let (workload, common) = if args.quick {
        experiments::quick()
    } else {
        let workload = workload(&args)?;
        let common = Common {
            working_set: workload.working_set(),
            catalogue: workload.sizes.iter().sum(),
            costs: Costs::paper(args.time_scale),
            workers: args.workers,
            warmup_requests: args.warmup,
            warmup_cost_scale: args.warmup_costs,
            settle: Duration::from_secs_f64(args.settle),
            measure: Duration::from_secs_f64(args.measure),
            clients: args.clients,
            fixed_thresholds: match (args.t_low, args.t_high) {
                (None, None) => None,
                (low, high) => Some((
                    low.unwrap_or(experiments::PAPER_THRESHOLDS.0),
                    high.unwrap_or(experiments::PAPER_THRESHOLDS.1),
                )),
            },
            lard_options: args
                .lard_option
                .iter()
                .map(|option| match option.split_once('=') {
                    Some((key, value)) if !key.trim().is_empty() => {
                        Ok((key.trim().to_string(), value.trim().to_string()))
                    }
                    _ => Err(format!("--lard-option {option:?}: expected KEY=VALUE")),
                })
                .collect::<Result<_, _>>()?,
        };
        (workload, common)
    };
    let experiments: Vec<Experiment> = if args.quick {
        vec![Experiment::Quick]
    } else if args.experiments.is_empty() {
        Experiment::ALL.to_vec()
    } else {
        args.experiments
            .iter()
            .map(|name| Experiment::parse(name).ok_or(format!("unknown experiment {name:?}")))
            .collect::<Result<_, _>>()?
    };
    if let Some(table) = &args.replot {
        let text =
            std::fs::read_to_string(table).map_err(|e| format!("{}: {e}", table.display()))?;
        let experiment = experiments
            .first()
            .copied()
            .ok_or("--replot needs --experiment")?;
        let stem = table
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or("--replot: a file name")?;
        let results = report::read_table(&text, &common.spec("wlc", 1, 0.0, 1));
        let dir = table.parent().unwrap_or(std::path::Path::new("."));
        for plot in report::plots(experiment, &results, dir, &stem)? {
            eprintln!("locality: wrote {plot}");
        }
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let binary = PathBuf::from(env!("CARGO_BIN_EXE_tcpvs"));
    let command: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    for experiment in experiments {
        let results = runtime.block_on(harness::run_experiment(
            experiment, &common, &workload, &binary, &args.only,
        ))?;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "## Locality: {}\n\nCommand: `cargo bench --bench locality -- {}`\n\n\
             Workload: {}; working set {:.1} MiB, catalogue {:.1} MiB. LARD thresholds: {}. Costs: the paper's \
             times {} (CPU {} µs + {} µs/KiB; disk {} ms + size at {:.1} MB/s + {} ms per {} KiB \
             past the first), {} switch worker(s), warm-up {} requests at {} times the costs, settle {:.1} s, measure {:.1} s.\n",
            experiment.name(),
            command.join(" "),
            workload.description,
            common.working_set as f64 / 1048576.0,
            common.catalogue as f64 / 1048576.0,
            match common.fixed_thresholds {
                Some((low, high)) => format!("fixed, t_low {low}, t_high {high}"),
                None => "the default, auto".to_string(),
            } + &common
                .lard_options
                .iter()
                .map(|(key, value)| format!(", {key} = {value}"))
                .collect::<String>(),
            common.costs.time_scale,
            common.costs.cpu_per_request.as_micros(),
            common.costs.cpu_per_kib.as_micros(),
            common.costs.disk_seek.as_millis(),
            common.costs.disk_bandwidth / 1e6,
            common.costs.disk_chunk_seek.as_millis(),
            common.costs.disk_chunk / 1024,
            common.workers,
            common.warmup_requests,
            common.warmup_cost_scale,
            common.settle.as_secs_f64(),
            common.measure.as_secs_f64(),
        );
        text.push_str(&report::table(&results));
        let goals = report::goals(experiment, &results);
        if !goals.is_empty() {
            text.push('\n');
            text.push_str(&goals);
        }
        println!("{text}");
        if !args.dry && !args.quick {
            std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
            let stem = match &args.tag {
                Some(tag) => format!("locality-{}-{tag}", experiment.name()),
                None => format!("locality-{}", experiment.name()),
            };
            let file = args.out.join(format!("{stem}.md"));
            std::fs::write(&file, &text).map_err(|e| format!("{}: {e}", file.display()))?;
            for plot in report::plots(experiment, &results, &args.out, &stem)? {
                eprintln!("locality: wrote {plot}");
            }
            eprintln!("locality: wrote {}", file.display());
        }
    }
    Ok(())
}
