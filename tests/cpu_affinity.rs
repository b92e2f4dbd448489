//! `[switch] cpu_affinity = "auto"`: with two workers or more, each worker thread runs on one
//! CPU of those the process may use, in turn, and requests are served as without it; one
//! worker is not pinned. `"off"` (the default) leaves the threads where the kernel puts them.
//! What the test reads is the kernel's own record: each thread's `Cpus_allowed_list` in /proc.

mod common;

use common::*;
use std::net::SocketAddr;
use std::time::Duration;

/// The CPUs the calling thread may run on, in order.
fn allowed_cpus() -> Vec<usize> {
    let set = rustix::thread::sched_getaffinity(None).unwrap();
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&cpu| set.is_set(cpu))
        .collect()
}

/// A `Cpus_allowed_list` ("0-1,4") as CPU numbers.
fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => cpus.push(part.parse().unwrap()),
        }
    }
    cpus
}

/// This process's worker threads (`tcpvs-worker-N`) with the CPUs each may run on, by N.
fn worker_threads() -> Vec<(usize, Vec<usize>)> {
    let mut workers = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        // A thread that ended since the listing has no files left: skipped.
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else {
            continue;
        };
        let Some(index) = name.trim().strip_prefix("tcpvs-worker-") else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let list = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .expect("a Cpus_allowed_list line");
        workers.push((index.parse().unwrap(), parse_cpu_list(list)));
    }
    workers.sort();
    workers
}

fn rules_text(backend: SocketAddr, affinity: &str) -> String {
    format!(
        "[switch]\naccess_log = false\n{affinity}\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"p\"\n[pool.p]\nservers = [{{ addr = \"{backend}\" }}]\n"
    )
}

fn rules(backend: SocketAddr, affinity: &str) -> tcpvs::Config {
    tcpvs::Config::parse("affinity.toml", &rules_text(backend, affinity)).unwrap()
}

/// Waits until no worker thread of an earlier switch is left (they end after its shutdown).
async fn no_worker_threads() {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !worker_threads().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "worker threads left after shutdown: {:?}",
            worker_threads()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One test, run in order: the worker threads of two switches started at once could not be
/// told apart by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_ties_each_worker_to_a_cpu_and_off_or_one_worker_leaves_them() {
    let server = backend().await;
    let cpus = allowed_cpus();
    no_worker_threads().await;

    // "auto", three workers: worker i on the i-th allowed CPU, taking turns past their number.
    let switch =
        tcpvs::Switch::start_workers(rules(server.addr, "cpu_affinity = \"auto\""), 3).unwrap();
    let addr = switch.local_addr("web").unwrap();
    let expected: Vec<(usize, Vec<usize>)> =
        (0..3).map(|i| (i, vec![cpus[i % cpus.len()]])).collect();
    assert_eq!(worker_threads(), expected);
    // Served as ever: byte-exact bodies over connections spread by the kernel.
    let mut tasks = Vec::new();
    for c in 0..12u64 {
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await;
            for i in 0..5u64 {
                let size = ((c * 131 + i * 977) % 70_000) as usize;
                let r = client.get(&format!("/bytes/{size}")).await;
                assert_eq!(r.status, 200);
                assert_eq!(r.body, pattern(size, size as u64));
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let snap = settle(&switch).await;
    assert_eq!(snap.servers.iter().map(|s| s.requests).sum::<u64>(), 60);
    assert_eq!(switch.shutdown(Duration::from_secs(3)).await, 0);
    no_worker_threads().await;

    // The default: every worker may run on every CPU the process may.
    let switch = tcpvs::Switch::start_workers(rules(server.addr, ""), 2).unwrap();
    assert_eq!(worker_threads(), vec![(0, cpus.clone()), (1, cpus.clone())]);
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(client.get("/bytes/100").await.body, pattern(100, 100));
    drop(client);
    assert_eq!(switch.shutdown(Duration::from_secs(3)).await, 0);
    no_worker_threads().await;

    // "auto" with one worker thread: nothing to spread, nothing pinned.
    let switch =
        tcpvs::Switch::start_workers(rules(server.addr, "cpu_affinity = \"auto\""), 1).unwrap();
    assert_eq!(worker_threads(), vec![(0, cpus.clone())]);
    assert_eq!(switch.shutdown(Duration::from_secs(3)).await, 0);
}

#[test]
fn a_cpu_list_reads_ranges_and_single_cpus() {
    assert_eq!(parse_cpu_list("0-2,5,7-8\n"), [0, 1, 2, 5, 7, 8]);
    assert_eq!(parse_cpu_list("3"), [3]);
}

#[test]
fn a_value_other_than_off_or_auto_is_refused_at_its_place() {
    let server: SocketAddr = "127.0.0.1:9".parse().unwrap();
    for (key, message) in [
        (
            "cpu_affinity = \"always\"",
            "affinity.toml:3:16: cpu_affinity must be \"off\" or \"auto\", not \"always\"",
        ),
        (
            "cpu_affinity = 1",
            "affinity.toml:3:16: `cpu_affinity`: expected \"off\" or \"auto\", found the number 1",
        ),
    ] {
        let text = rules_text(server, key);
        let error = tcpvs::Config::parse("affinity.toml", &text).unwrap_err();
        assert_eq!(error.to_string().trim_end(), message, "{key}");
    }
}
