//! The real switch: `tcpvs run -c FILE` on a rule file of one virtual service on a free
//! loopback port whose only pool is the emulated cluster, under the module being measured.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A module and its options as rule-file lines (`t_low = 25`, ...).
#[derive(Clone, Debug)]
pub struct Module {
    pub name: &'static str,
    pub options: Vec<(String, String)>,
}

impl Module {
    pub fn plain(name: &'static str) -> Module {
        Module {
            name,
            options: Vec::new(),
        }
    }

    pub fn with(mut self, key: impl ToString, value: impl ToString) -> Module {
        self.options.push((key.to_string(), value.to_string()));
        self
    }
}

/// The rule file: access log off (it would cost the switch CPU that is not the point here),
/// room for every client and an idle server connection per client, so connections to the
/// emulated servers are reused rather than reopened.
pub fn rules(module: &Module, servers: &[SocketAddr], workers: usize) -> String {
    let mut text = format!(
        "[switch]\nworkers = {workers}\naccess_log = false\nserver_idle_max = 1024\n\
         idle_timeout = \"600s\"\n\n[virtual.bench]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"cluster\"\n\n[pool.cluster]\nscheduler = \"{}\"\n",
        module.name
    );
    for (key, value) in &module.options {
        text.push_str(&format!("{key} = {value}\n"));
    }
    text.push_str("servers = [\n");
    for addr in servers {
        text.push_str(&format!("  {{ addr = \"{addr}\" }},\n"));
    }
    text.push_str("]\n\n[pool.cluster.health]\nmax_fails = 0\n");
    text
}

pub struct Switch {
    child: Child,
    pub addr: SocketAddr,
}

impl Switch {
    /// Starts `binary run -c FILE` and waits (at most 20 s) for its `listening on` line.
    pub fn start(binary: &Path, rules_file: &Path) -> Result<Switch, String> {
        let mut child = Command::new(binary)
            .args(["run".as_ref(), "-c".as_ref(), rules_file.as_os_str()])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", binary.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, rx) = mpsc::channel();
        // Reads the log to its end, so the switch never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut seen = Vec::new();
        loop {
            let line = match rx.recv_timeout(Duration::from_secs(20)) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("tcpvs did not start: {seen:?}"));
                }
            };
            let addr = line
                .split("listening on http://")
                .nth(1)
                .and_then(|rest| rest.split('/').next())
                .and_then(|a| a.parse().ok());
            seen.push(line);
            if let Some(addr) = addr {
                // The rest of the log is drained by the thread above into a channel nobody
                // reads; dropping the receiver makes its sends fail, and it keeps reading.
                return Ok(Switch { child, addr });
            }
        }
    }

    /// CPU time the switch used so far (user + system), from /proc (in USER_HZ, 100 a second
    /// on Linux).
    pub fn cpu(&self) -> Duration {
        process_cpu(self.child.id())
    }

    pub fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// User + system CPU time of a process, from /proc/PID/stat.
pub fn process_cpu(pid: u32) -> Duration {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

/// A fresh folder for a run's rule files.
pub fn scratch_dir(label: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tcpvs-locality-{}-{label}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
