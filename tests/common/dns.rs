//! A real DNS server for tests: Debian's dnsmasq on a loopback port of its own, answering
//! from a hosts file the test rewrites (SIGHUP makes dnsmasq read it again) and from SRV
//! records given at start. Killed when dropped.

use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::Duration;

pub struct Dnsmasq {
    pub addr: SocketAddr,
    hosts: PathBuf,
    child: Option<std::process::Child>,
}

/// `name target port priority weight`, as dnsmasq's `--srv-host`.
pub struct Srv<'a> {
    pub name: &'a str,
    pub target: &'a str,
    pub port: u16,
    pub priority: u16,
    pub weight: u16,
}

fn binary() -> &'static str {
    ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .expect("dnsmasq is installed (Debian package dnsmasq: .ci/run installs it)")
}

impl Dnsmasq {
    /// Starts dnsmasq answering from `hosts` (lines `IP NAME`, written into `folder`) and
    /// `srv`, with a TTL of 1 s; returns once it answers. A port that another test took for
    /// TCP meanwhile (dnsmasq binds both) makes dnsmasq exit: another port is tried, 5 in all.
    pub fn start(folder: &std::path::Path, hosts: &str, srv: &[Srv<'_>]) -> Dnsmasq {
        let path = folder.join("hosts");
        std::fs::write(&path, hosts).unwrap();
        for _ in 0..5 {
            let port = free_port();
            let mut dns = Dnsmasq {
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                hosts: path.clone(),
                child: Some(spawn(folder, &path, port, srv)),
            };
            if dns.wait_until_answering() {
                return dns;
            }
            dns.stop();
        }
        panic!("dnsmasq did not start on any of 5 ports");
    }

    /// Replaces the hosts file and has dnsmasq read it again.
    pub fn set_hosts(&self, hosts: &str) {
        std::fs::write(&self.hosts, hosts).unwrap();
        self.signal(rustix::process::Signal::HUP);
    }

    /// Stops the DNS server (lookups time out from now on).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn signal(&self, signal: rustix::process::Signal) {
        let child = self.child.as_ref().expect("dnsmasq runs");
        let pid = rustix::process::Pid::from_child(child);
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Asks for `probe.invalid` until an answer (NXDOMAIN) comes back: at most 5 s, less if
    /// dnsmasq exits (its port was taken). Whether it answers.
    fn wait_until_answering(&mut self) -> bool {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        // A query: id 0x7463, recursion desired, one question `probe.invalid` A IN.
        let mut query = vec![0x74, 0x63, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in ["probe", "invalid"] {
            query.push(label.len() as u8);
            query.extend_from_slice(label.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let mut answer = [0u8; 512];
        for _ in 0..50 {
            let exited = self
                .child
                .as_mut()
                .is_none_or(|child| !matches!(child.try_wait(), Ok(None)));
            if exited {
                return false;
            }
            let _ = socket.send_to(&query, self.addr);
            if let Ok((n, _)) = socket.recv_from(&mut answer) {
                if n >= 2 && answer[..2] == query[..2] {
                    return true;
                }
            }
        }
        false
    }
}

/// A port free for both UDP and TCP on 127.0.0.1 now (dnsmasq listens on both).
fn free_port() -> u16 {
    loop {
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = udp.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

fn spawn(
    folder: &std::path::Path,
    hosts: &std::path::Path,
    port: u16,
    srv: &[Srv<'_>],
) -> std::process::Child {
    let mut command = std::process::Command::new(binary());
    command.args([
        "--keep-in-foreground",
        "--conf-file=/dev/null",
        "--no-resolv",
        "--no-hosts",
        "--no-negcache",
        "--listen-address=127.0.0.1",
        "--bind-interfaces",
        "--local-ttl=1",
        // Authoritative for `.test`: a name without an AAAA record gets an empty answer
        // (NODATA), not REFUSED for want of an upstream server.
        "--local=/test/",
    ]);
    command.arg(format!("--port={port}"));
    command.arg(format!("--addn-hosts={}", hosts.display()));
    command.arg(format!(
        "--pid-file={}",
        folder.join("dnsmasq.pid").display()
    ));
    if rustix::process::getuid().is_root() {
        command.arg("--user=root");
    }
    for r in srv {
        command.arg(format!(
            "--srv-host={},{},{},{},{}",
            r.name, r.target, r.port, r.priority, r.weight
        ));
    }
    command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("dnsmasq starts")
}

impl Drop for Dnsmasq {
    fn drop(&mut self) {
        self.stop();
    }
}
