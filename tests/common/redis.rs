//! A `redis-server` of the test's own (Debian's `redis-server` package): on a loopback port, no
//! persistence (`--save '' --appendonly no`), its working folder the test's scratch folder;
//! killed when dropped, so a failed assertion leaves no process behind. A missing binary fails
//! the test with a message saying how to install it.
//!
//! A test file includes it as `#[path = "common/redis.rs"] mod redis;` beside `mod common;`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a started server may take to answer PING.
const START_PATIENCE: Duration = Duration::from_secs(10);

/// The `redis-server` binary: on PATH, or where Debian puts it.
pub fn redis_server_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "this test runs its own Redis and found no `redis-server` (PATH, /usr/bin, \
                 /usr/sbin): install it: apt-get install redis-server"
            )
        })
}

/// A running (or stopped, between [`Redis::kill`] and [`Redis::restart`]) redis-server.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    child: Option<std::process::Child>,
}

impl Redis {
    /// Starts a server on a free loopback port, its files in `dir`, and waits until it answers
    /// PING.
    pub fn start(dir: &Path) -> Redis {
        // The port is free when asked; the listener is closed just before redis binds it. A
        // port taken in between makes the start fail loudly, never silently.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free loopback port")
            .port();
        let mut redis = Redis {
            port,
            dir: dir.to_path_buf(),
            child: None,
        };
        redis.spawn();
        redis
    }

    /// `redis://127.0.0.1:PORT/0`, as a limit's `store` names it.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join(format!("redis-{}.log", self.port)))
            .expect("redis log file");
        let child = std::process::Command::new(redis_server_binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdout(log.try_clone().expect("redis log file"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("starting redis-server: {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + START_PATIENCE;
        loop {
            if self.ping() {
                return;
            }
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "redis-server exited at start ({status}): {}",
                        std::fs::read_to_string(self.dir.join(format!("redis-{}.log", self.port)))
                            .unwrap_or_default()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer PING within {START_PATIENCE:?}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// True when the server answers `PING` with `+PONG`.
    pub fn ping(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500))
        else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        if stream.write_all(b"PING\r\n").is_err() {
            return false;
        }
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).is_ok() && &answer == b"+PONG\r\n"
    }

    /// Kills the server at once (SIGKILL: no goodbye to its clients) and waits for it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty, and waits until it answers PING.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart after kill");
        self.spawn();
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}
