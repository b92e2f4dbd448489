//! `tcpvs run` and `tcpvs demo`: a switch started from a rule file (or the demo's built-in
//! one), served until a signal stops it or a new tcpvs takes its listeners over.

use super::demo;
use super::signals::StopSignals;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcpvs::config::admin::{AdminConfig, AdminListen};
use tcpvs::config::Config;
use tcpvs::upgrade::{Inherited, Takeover};
use tcpvs::Switch;
use tokio::task::JoinHandle;

/// How `run` starts: with the demo's servers, and how it takes part in binary upgrades.
struct Launch {
    demo_servers: bool,
    upgrade_socket: Option<PathBuf>,
    take_over: Option<PathBuf>,
}

impl Launch {
    fn demo() -> Launch {
        Launch {
            demo_servers: true,
            upgrade_socket: None,
            take_over: None,
        }
    }
}

/// `tcpvs run -c FILE`: the switch with the rules of `file`.
pub fn run_file(
    file: &Path,
    upgrade_socket: Option<PathBuf>,
    take_over: Option<PathBuf>,
) -> ExitCode {
    match Config::load(file) {
        Ok(config) => run(
            config,
            Launch {
                demo_servers: false,
                upgrade_socket,
                take_over,
            },
        ),
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `tcpvs demo`: the built-in rules with the service on `listen` and the admin endpoint on
/// `admin` (loopback only), and demo servers for its pools. `tls`: the service speaks HTTPS
/// with a self-signed certificate made now.
pub fn run_demo(listen: SocketAddr, admin: SocketAddr, tls: bool) -> ExitCode {
    let mut config = match Config::parse("rules/demo.toml (built in)", demo::DEMO_RULES) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let certificate = if tls {
        match demo::self_signed_certificate() {
            Ok(certificate) => Some(certificate),
            Err(e) => {
                eprintln!("tcpvs demo: cannot make a certificate: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    for service in &mut config.services {
        service.listen = listen;
        service.certificates.extend(certificate.clone());
    }
    if !admin.ip().is_loopback() {
        // The demo's endpoint has no token: changes would be open to anyone.
        eprintln!(
            "tcpvs demo: --admin must be a loopback address (the demo sets no token), not {admin}"
        );
        return ExitCode::FAILURE;
    }
    // The endpoint is the demo's, not its rule file's: on loopback without a token, so that the
    // monitor page's buttons work at once. That is fine for a toy on one's own machine and not
    // for a real switch on a shared one, which `tcpvs check --strict` refuses; rules/demo.toml
    // has no `[admin]`, so that it passes as the example it is.
    config.admin = Some(AdminConfig {
        listen: AdminListen::Tcp(admin),
        token: None,
    });
    if let Err(message) = demo::ensure_addresses_free(&config, listen, admin) {
        eprintln!("{message}");
        return ExitCode::FAILURE;
    }
    run(config, Launch::demo())
}

/// The log's filter when `RUST_LOG` names no level: the switch's own lines from `info` up.
const DEFAULT_LOG: &str = "info";

/// Directives that come before `RUST_LOG`'s (which override them by naming the same target):
/// what dependencies log is about what a peer sent, line by line, with no throttle. The h2
/// crate wrote a WARN line for each unsolicited PING ACK (2 million lines in 5 s from one
/// connection, issue 42), others for each stream reset past its limits; rustls, built without
/// its `logging` feature today, writes WARN lines for alerts and odd handshakes when it has
/// it (its `log` records would come through tracing-subscriber's bridge). The switch says
/// what matters of these itself (`/stats`' `h2_*` counters, its own `debug` lines).
const QUIET_DEPENDENCIES: &str = "h2=off,rustls=off";

/// The filter of `rust_log` (the `RUST_LOG` variable, if set): [`QUIET_DEPENDENCIES`], then
/// its directives (or [`DEFAULT_LOG`] when it is unset, empty or unreadable).
fn log_filter(rust_log: Option<&str>) -> tracing_subscriber::EnvFilter {
    let directives = match rust_log.map(str::trim) {
        Some(asked) if !asked.is_empty() => asked,
        _ => DEFAULT_LOG,
    };
    tracing_subscriber::EnvFilter::try_new(format!("{QUIET_DEPENDENCIES},{directives}"))
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!("{QUIET_DEPENDENCIES},{DEFAULT_LOG}"))
        })
}

fn init_logging() {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = log_filter(rust_log.as_deref());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

/// Runs the switch of `config` until it is stopped: exit 0, or 1 with the reason on stderr
/// when it cannot start.
fn run(config: Config, launch: Launch) -> ExitCode {
    init_logging();
    config.log_warnings();
    let workers = match config.switch.workers {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // One worker runs on the main thread, beside the signals, shutdown and the demo's
    // servers: a process with one thread is cheaper in the kernel (for one, its file
    // descriptors are looked up without reference counts on every socket call), 0.4-1 µs per
    // request (BENCHMARKS.md). More workers get threads of their own
    // (Switch::start_workers), and the main thread only coordinates.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tcpvs: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(serve(config, launch, workers))
}

/// Starts the switch, serves until a stop signal or a handover, then stops it gracefully.
async fn serve(config: Config, launch: Launch, workers: usize) -> ExitCode {
    let grace = config.switch.shutdown_timeout;
    let announcement = Announcement {
        file: config.file.clone(),
        admin_listen: config.admin.as_ref().map(|admin| admin.listen.to_string()),
        workers,
        demo: launch.demo_servers,
    };
    let (stop, switch) = match start(config, &launch, workers).await {
        Ok(started) => started,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let handover = match &launch.upgrade_socket {
        Some(path) => match serve_upgrade_socket(path, &switch) {
            Ok(serving) => Some(serving),
            Err(e) => {
                eprintln!("tcpvs: upgrade socket {}: {e}", path.display());
                let _ = switch.shutdown(grace).await;
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    announcement.log(&switch);
    stop.wait(&switch, handover).await;
    tracing::info!("stopping: no new connections; waiting up to {grace:?} for requests in flight");
    let left = switch.shutdown(grace).await;
    if left > 0 {
        tracing::warn!("{left} client connections were still open at the deadline");
    }
    ExitCode::SUCCESS
}

/// Installs the signal handlers, starts the demo's servers if asked, takes the listeners over
/// from an old tcpvs if asked, and starts the switch. The error is the message to print.
async fn start(
    config: Config,
    launch: &Launch,
    workers: usize,
) -> Result<(StopSignals, Switch), String> {
    // Signal handlers first: a SIGTERM that arrives as soon as the switch answers must find
    // them in place, not the default action.
    let stop = StopSignals::install()
        .map_err(|e| format!("tcpvs: cannot install signal handlers: {e}"))?;
    if launch.demo_servers {
        demo::start_demo_servers(&config)
            .await
            .map_err(|e| format!("tcpvs demo: {e}"))?;
    }
    // A binary upgrade: the old process's listening sockets, before binding anything.
    let (inherited, takeover): (Inherited, Option<Takeover>) = match &launch.take_over {
        Some(path) => {
            let (inherited, takeover) =
                tcpvs::upgrade::take_over(path).map_err(|e| format!("tcpvs: {e}"))?;
            (inherited, Some(takeover))
        }
        None => Default::default(),
    };
    let started = if workers == 1 {
        Switch::start_inheriting(config, inherited).await
    } else {
        Switch::start_workers_inheriting(config, workers, inherited)
    };
    let switch = started.map_err(|e| format!("tcpvs: {e}"))?;
    if let Some(takeover) = takeover {
        // Serving now: the old process lets go of its listeners and drains.
        if let Err(e) = takeover.ready(&switch.reloads()) {
            tracing::warn!("upgrade: the old tcpvs did not confirm: {e}");
        } else {
            tracing::info!("upgrade: took the listeners over; the old tcpvs drains");
        }
    }
    Ok((stop, switch))
}

/// Hands the listening sockets over to a new tcpvs that asks on the Unix socket `path`; the
/// task ends once it has.
fn serve_upgrade_socket(path: &Path, switch: &Switch) -> std::io::Result<JoinHandle<()>> {
    let listener = tcpvs::upgrade::bind(path)?;
    let serving = tcpvs::upgrade::serve(listener, path.to_path_buf(), switch.reloads());
    Ok(tokio::spawn(serving))
}

/// What the switch tells once it serves: where each virtual service and the admin endpoint
/// listen, and for the demo what to open.
struct Announcement {
    /// The rule file.
    file: String,
    /// `[admin] listen` as the rule file writes it.
    admin_listen: Option<String>,
    workers: usize,
    demo: bool,
}

impl Announcement {
    fn log(&self, switch: &Switch) {
        let Announcement {
            file,
            admin_listen,
            workers,
            demo,
        } = self;
        let generation = switch.shared().generation.load();
        for (name, addr) in switch.addresses() {
            let plural = if *workers == 1 { "" } else { "s" };
            let service = generation.service(name).map(|(_, service)| service);
            match service.map(|s| (s.mode, s.tls.is_some())) {
                Some((tcpvs::config::ServiceMode::TlsPassthrough, _)) => tracing::info!("virtual service `{name}` listening on {addr} (TLS passthrough by server name; {file}, {workers} worker{plural})"),
                Some((_, true)) => tracing::info!("virtual service `{name}` listening on https://{addr}/ ({file}, {workers} worker{plural})"),
                _ => tracing::info!("virtual service `{name}` listening on http://{addr}/ ({file}, {workers} worker{plural})"),
            }
        }
        // The demo's page over HTTPS (`tcpvs demo --tls`).
        let first_is_tls = switch.addresses().first().is_some_and(|(name, _)| {
            generation
                .service(name)
                .is_some_and(|(_, service)| service.tls.is_some())
        });
        drop(generation);
        if let Some(admin) = switch.admin_addr() {
            tracing::info!("admin endpoint on http://{admin}/ (monitor page; /stats, /metrics)");
        } else if let Some(listen) = admin_listen {
            tracing::info!(
                "admin endpoint on {listen} (tcpvs list --admin {listen}; /stats, /metrics)"
            );
        }
        if *demo {
            if let Some((_, addr)) = switch.addresses().first() {
                let (scheme, certificate) = if first_is_tls {
                    (
                        "https",
                        ", a self-signed certificate made now: the browser warns first",
                    )
                } else {
                    ("http", "")
                };
                eprintln!(
                    "tcpvs demo: open {scheme}://{addr}/ (pages, images and CGI come from three pools{certificate}); Ctrl-C stops"
                );
            }
            if let Some(admin) = switch.admin_addr() {
                eprintln!("tcpvs demo: the monitor: http://{admin}/");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::log_filter;
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    /// The lines written through a subscriber filtered by `rust_log`'s filter while a WARN of
    /// the h2 crate's (its line for an unsolicited PING ACK), an INFO of rustls' and an INFO
    /// and a DEBUG of the switch's are logged.
    fn logged_under(rust_log: Option<&str>) -> String {
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl Write for Lines {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().expect("lines").extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let lines = Lines::default();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(log_filter(rust_log))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(target: "h2::proto::ping_pong", "recv PING ack that we never sent");
            tracing::info!(target: "rustls::conn", "sending fatal alert");
            tracing::info!(target: "tcpvs::supervisor", "the switch's own line");
            tracing::debug!(target: "tcpvs::connection::h2", "the switch's debug line");
        });
        let text = lines.0.lock().expect("lines").clone();
        String::from_utf8(text).expect("text")
    }

    #[test]
    fn dependencies_are_quiet_unless_rust_log_names_them() {
        for quiet in [
            None,
            Some(""),
            Some("info"),
            Some("warn"),
            Some("debug"),
            Some("%%"),
        ] {
            let text = logged_under(quiet);
            assert!(!text.contains("PING ack"), "RUST_LOG={quiet:?}: {text}");
            assert!(!text.contains("fatal alert"), "RUST_LOG={quiet:?}: {text}");
            let own = quiet != Some("warn");
            assert_eq!(text.contains("own line"), own, "RUST_LOG={quiet:?}: {text}");
            let debug = quiet == Some("debug");
            assert_eq!(
                text.contains("debug line"),
                debug,
                "RUST_LOG={quiet:?}: {text}"
            );
        }
        let text = logged_under(Some("info,h2=warn,rustls=info"));
        assert!(text.contains("PING ack"), "{text}");
        assert!(text.contains("fatal alert"), "{text}");
        assert!(text.contains("own line"), "{text}");
        assert!(logged_under(Some("off")).is_empty());
    }
}
