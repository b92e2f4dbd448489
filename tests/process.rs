//! The shape of a running `tcpvs run` process: how many threads its `workers` setting gives it.
//! One worker is the main thread itself, as HAProxy's `nbthread 1` is one thread: the kernel
//! then takes single-threaded shortcuts, such as looking file descriptors up without reference
//! counts on every socket call; measured 0.4-1 µs less CPU per request (BENCHMARKS.md).

mod common;

use common::{backend, Client, Process};
use std::io::Write;
use std::net::SocketAddr;

/// Starts `tcpvs run` on a rule file with `workers` and one pool, and returns the process and
/// the address it listens on (read from its log).
fn run_switch(dir: &std::path::Path, workers: usize, server: SocketAddr) -> (Process, SocketAddr) {
    let rules = dir.join(format!("workers{workers}.toml"));
    let mut file = std::fs::File::create(&rules).unwrap();
    write!(
        file,
        "[switch]\nworkers = {workers}\n\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"web\"\n\n[pool.web]\nservers = [{{ addr = \"{server}\" }}]\n"
    )
    .unwrap();
    let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (addr, _) = switch.address_after("listening on ");
    (switch, addr)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_is_the_main_thread_and_more_get_threads_of_their_own() {
    let server = backend().await;
    let dir = std::env::temp_dir().join(format!("tcpvs-process-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for workers in [1, 2] {
        let (switch, addr) = run_switch(&dir, workers, server.addr);
        // It serves before and after the count (the threads are not still starting).
        let mut client = Client::connect(addr).await;
        assert_eq!(client.get("/before").await.status, 200);
        let pid = switch.id();
        let names = tokio::task::spawn_blocking(move || thread_names(pid))
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
        let status = tokio::task::spawn_blocking(move || {
            let mut switch = switch;
            switch.terminate()
        })
        .await
        .unwrap();
        assert!(status.success(), "workers = {workers}: {status:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
