//! One run: emulated servers, one or more switches under one module, closed-loop clients, the
//! same trace. Warm-up with costs scaled down (`warmup_cost_scale`) until the clients have made
//! `warmup_requests` requests (caches and the module's tables fill), then full costs: `settle`
//! unmeasured (queues and tables reach their loaded state), then `measure`.
//!
//! The warm-up is not free (it was until issue 27, `--warmup-costs 0`): in a free warm-up a
//! module that times requests (LARD's spills) measures a miss as fast as a hit, and LARD's
//! load-driven moves hardly happen, so the copies those moves keep at the paper's load (1.6 per
//! object on one switch) did not show (1.15). At a quarter of the costs every ratio holds, the
//! emulated servers stay the bottleneck at the paper's load, and a warm-up takes about 40 s; at
//! a tenth, tokio's 1 ms timer ticks outweigh a hit's service time, and `lard` moved 600
//! targets a second during the warm-up (against 50 to 150 once measured).

use super::clients::{Clients, Phase};
use super::costs::Costs;
use super::servers::{Cluster, ServerSnapshot};
use super::switch::{process_cpu, rules, scratch_dir, Module, Switch};
use super::workload::Workload;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

#[derive(Clone, Debug)]
pub struct RunSpec {
    /// What the report calls it (`lard`, `all-hits`, ...).
    pub label: String,
    pub module: Module,
    pub servers: usize,
    pub cache_bytes: u64,
    /// `cache_bytes` over the working set (what the report shows).
    pub cache_ratio: f64,
    pub clients: usize,
    /// Switch processes sharing the clients (client i talks to switch i % switches).
    pub switches: usize,
    pub workers: usize,
    pub costs: Costs,
    pub warmup_requests: u64,
    /// Every cost times this during the warm-up (0: free).
    pub warmup_cost_scale: f64,
    pub settle: Duration,
    pub measure: Duration,
}

#[derive(Clone, Debug)]
pub struct RunResult {
    pub spec: RunSpec,
    pub requests_per_s: f64,
    pub hit_rate: f64,
    /// Load balance: the busiest server's work (emulated CPU time served, disk waits aside)
    /// over the mean (1.0 = even). Request counts differ where sizes differ: see below.
    pub max_over_mean: f64,
    /// The same in requests served.
    pub requests_max_over_mean: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Real CPU used during the measurement, in percent of one core: the switches, and this
    /// process (clients and emulated servers).
    pub switch_cpu_percent: f64,
    pub harness_cpu_percent: f64,
    /// Busiest emulated CPU's and disk's utilisation, percent.
    pub max_cpu_busy_percent: f64,
    pub max_disk_busy_percent: f64,
    pub per_server_requests: Vec<u64>,
    /// Copies per cached object at the end (see `Cluster::copies_per_object`).
    pub copies_per_object: f64,
}

/// The paper's client count for `servers` servers: (n - 1) * T_high + T_low - 1 requests in
/// the cluster (the bound its front-end keeps, so that n - 1 servers cannot all be above
/// T_high while one is below T_low, which bounds the delay); T_low 25, T_high 65 by default.
pub fn paper_clients(servers: usize, (t_low, t_high): (u32, u32)) -> usize {
    (servers.max(1) - 1) * t_high as usize + (t_low as usize).saturating_sub(1).max(1)
}

pub async fn run(
    spec: &RunSpec,
    workload: &Workload,
    sizes: &Arc<Vec<u64>>,
    binary: &Path,
    progress: &dyn Fn(&str),
) -> Result<RunResult, String> {
    let cluster = Cluster::start(
        spec.servers,
        spec.cache_bytes,
        Arc::clone(sizes),
        spec.costs,
    )
    .await
    .map_err(|e| format!("emulated servers: {e}"))?;
    let dir = scratch_dir(&spec.label);
    let rules_file = dir.join(format!("{}-{}.toml", spec.label, spec.servers));
    std::fs::write(
        &rules_file,
        rules(&spec.module, &cluster.addrs(), spec.workers),
    )
    .map_err(|e| format!("{}: {e}", rules_file.display()))?;
    let mut switches = Vec::new();
    for _ in 0..spec.switches.max(1) {
        let file = rules_file.clone();
        let binary = binary.to_owned();
        match tokio::task::spawn_blocking(move || Switch::start(&binary, &file)).await {
            Ok(Ok(switch)) => switches.push(switch),
            Ok(Err(e)) => return Err(e),
            Err(e) => return Err(format!("starting the switch: {e}")),
        }
    }
    let addrs: Vec<_> = switches.iter().map(|s| s.addr).collect();
    let outcome = drive(spec, workload, &cluster, &switches, &addrs, progress).await;
    for switch in switches {
        switch.stop();
    }
    cluster.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

async fn drive(
    spec: &RunSpec,
    workload: &Workload,
    cluster: &Cluster,
    switches: &[Switch],
    addrs: &[std::net::SocketAddr],
    progress: &dyn Fn(&str),
) -> Result<RunResult, String> {
    // Bounded: a client never makes more than every phase could need at the emulated speed
    // of a hit (and the phases end by time anyway).
    let mut clients = Clients::start(workload, spec.clients, addrs, 10_000_000);
    progress("warm-up");
    cluster.set_cost_scale(spec.warmup_cost_scale);
    // A bound against a stuck run, not a budget: with costs on, 16 clients on caches of 40%
    // start on misses and take about 2 minutes for 150 000 requests.
    let warmup_deadline = Instant::now() + Duration::from_secs(600);
    while clients.completed() < spec.warmup_requests {
        if let Some(reason) = clients.failure() {
            return Err(reason);
        }
        if Instant::now() > warmup_deadline {
            return Err(format!(
                "warm-up: {} of {} requests in 600 s",
                clients.completed(),
                spec.warmup_requests
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster.set_cost_scale(1.0);
    clients.set_phase(Phase::Settle);
    progress("settle");
    sleep_watching(&mut clients, spec.settle).await?;
    let before = cluster.snapshot();
    let switch_cpu_before: Duration = switches.iter().map(Switch::cpu).sum();
    let harness_cpu_before = process_cpu(std::process::id());
    let started = Instant::now();
    clients.set_phase(Phase::Measure);
    progress("measure");
    sleep_watching(&mut clients, spec.measure).await?;
    clients.set_phase(Phase::Done);
    let elapsed = started.elapsed().as_secs_f64();
    let measured = clients.measured();
    let after = cluster.snapshot();
    let copies_per_object = cluster.copies_per_object();
    let switch_cpu: Duration =
        switches.iter().map(Switch::cpu).sum::<Duration>() - switch_cpu_before;
    let harness_cpu = process_cpu(std::process::id()).saturating_sub(harness_cpu_before);
    let latencies = clients.stop().await?;
    let deltas: Vec<ServerSnapshot> = after.iter().zip(&before).map(|(a, b)| a.since(b)).collect();
    let served: u64 = deltas.iter().map(|d| d.requests).sum();
    let hits: u64 = deltas.iter().map(|d| d.hits).sum();
    let per_server_requests: Vec<u64> = deltas.iter().map(|d| d.requests).collect();
    let max_over_mean = |values: Vec<f64>| {
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        let max = values.iter().copied().fold(0.0, f64::max);
        if mean > 0.0 {
            max / mean
        } else {
            0.0
        }
    };
    let busiest = |f: fn(&ServerSnapshot) -> Duration| {
        deltas
            .iter()
            .map(|d| f(d).as_secs_f64() / elapsed * 100.0)
            .fold(0.0, f64::max)
    };
    Ok(RunResult {
        spec: spec.clone(),
        requests_per_s: measured as f64 / elapsed,
        hit_rate: if served > 0 {
            hits as f64 / served as f64
        } else {
            0.0
        },
        max_over_mean: max_over_mean(deltas.iter().map(|d| d.cpu_busy.as_secs_f64()).collect()),
        requests_max_over_mean: max_over_mean(
            per_server_requests.iter().map(|&r| r as f64).collect(),
        ),
        p50_ms: latencies.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: latencies.value_at_quantile(0.99) as f64 / 1000.0,
        switch_cpu_percent: switch_cpu.as_secs_f64() / elapsed * 100.0,
        harness_cpu_percent: harness_cpu.as_secs_f64() / elapsed * 100.0,
        max_cpu_busy_percent: busiest(|d| d.cpu_busy),
        max_disk_busy_percent: busiest(|d| d.disk_busy),
        per_server_requests,
        copies_per_object,
    })
}

/// Sleeps for `span`, failing early if a client fails.
async fn sleep_watching(clients: &mut Clients, span: Duration) -> Result<(), String> {
    let end = Instant::now() + span;
    while Instant::now() < end {
        if let Some(reason) = clients.failure() {
            return Err(reason);
        }
        tokio::time::sleep_until((Instant::now() + Duration::from_millis(100)).min(end)).await;
    }
    Ok(())
}
