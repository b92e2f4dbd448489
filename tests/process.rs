//! The shape of a running `tcpvs run` process: how many threads its `workers` setting gives it.
//! One worker is the main thread itself, as HAProxy's `nbthread 1` is one thread: the kernel
//! then takes single-threaded shortcuts, such as looking file descriptors up without reference
//! counts on every socket call; measured 0.4-1 µs less CPU per request (BENCHMARKS.md).

mod common;

use common::{backend, Client};
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running `tcpvs run`, killed if a failed assertion leaves it behind.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `tcpvs run` on a rule file with `workers` and one pool, and returns the process and
/// the address it listens on (read from its log).
fn run_switch(dir: &std::path::Path, workers: usize, server: SocketAddr) -> (Running, SocketAddr) {
    let rules = dir.join(format!("workers{workers}.toml"));
    let mut file = std::fs::File::create(&rules).unwrap();
    write!(
        file,
        "[switch]\nworkers = {workers}\n\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"web\"\n\n[pool.web]\nservers = [{{ addr = \"{server}\" }}]\n"
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(["run", "-c"])
        .arg(&rules)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let child = Running(Some(child));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut seen = Vec::new();
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no listening line from tcpvs: {seen:?}"));
        let addr = line
            .split("listening on http://")
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|a| a.parse().ok());
        if let Some(addr) = addr {
            return (child, addr);
        }
        seen.push(line);
    }
}

/// The names of the process's threads, from /proc.
fn thread_names(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim().to_string())
        .collect();
    names.sort();
    names
}

/// Stops it as an operator does (SIGTERM) and checks that it exits cleanly.
fn stop(mut running: Running) {
    let Some(mut child) = running.0.take() else {
        return;
    };
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_is_the_main_thread_and_more_get_threads_of_their_own() {
    let server = backend().await;
    let dir = std::env::temp_dir().join(format!("tcpvs-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for workers in [1, 2] {
        let (child, addr) = run_switch(&dir, workers, server.addr);
        // It serves before and after the count (the threads are not still starting).
        let mut client = Client::connect(addr).await;
        assert_eq!(client.get("/before").await.status, 200);
        let names = tokio::task::spawn_blocking({
            let pid = child.0.as_ref().map_or(0, Child::id);
            move || thread_names(pid)
        })
        .await
        .unwrap();
        assert_eq!(client.get("/after").await.status, 200);
        let expected: Vec<String> = match workers {
            1 => vec!["tcpvs".into()],
            _ => vec![
                "tcpvs".into(),
                "tcpvs-worker-0".into(),
                "tcpvs-worker-1".into(),
            ],
        };
        assert_eq!(names, expected, "workers = {workers}");
        drop(client);
        tokio::task::spawn_blocking(move || stop(child))
            .await
            .unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
