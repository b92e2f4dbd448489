//! The `tcpvs` command: run a switch from a rule file, check rule files, run the demo, or talk
//! to a running switch's admin endpoint (`list`, `set-weight`, `set-state`, `reload`).

use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcpvs::admin::client::{self, Address, AdminState, Endpoint};
use tcpvs::admin::table;
use tcpvs::config::Config;
use tcpvs::demo;
use tcpvs::Switch;

#[derive(Parser)]
#[command(
    name = "tcpvs",
    version,
    about = "A layer-7 content switch: routes every HTTP/1.x request by rules to server pools"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the switch with a rule file.
    Run {
        /// The rule file (TOML).
        #[arg(short, long, value_name = "FILE")]
        config: PathBuf,
        /// Hand the listening sockets over to a new tcpvs that asks on this Unix socket
        /// (`--take-over PATH`), then finish the requests in flight and exit.
        #[arg(long, value_name = "PATH")]
        upgrade_socket: Option<PathBuf>,
        /// Take the listening sockets over from the tcpvs serving this upgrade socket; it then
        /// stops accepting and drains. No connection is refused in between.
        #[arg(long, value_name = "PATH")]
        take_over: Option<PathBuf>,
    },
    /// Check rule files; print a summary of each, or every error as FILE:LINE:COL: message.
    /// Warnings (rules that can never match, unused pools) go to stderr as
    /// FILE:LINE:COL: warning: message and leave the exit status 0.
    Check {
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
        /// Refuse a file with warnings too (exit 1), printing them as errors.
        #[arg(long)]
        strict: bool,
    },
    /// Run the built-in demo: rules/demo.toml with in-process servers for its pools.
    Demo {
        /// Address of the demo's virtual service.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// Address of the admin endpoint: the monitor page, /stats, /metrics.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
        admin: SocketAddr,
    },
    /// List virtual services, pools and servers with their state and traffic (the shape of
    /// `ipvsadm -L -n`), from a running switch's admin endpoint.
    List {
        /// Print the endpoint's /stats JSON instead of the table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Set a server's weight in a running switch, until its line in the rule file changes or
    /// the process restarts.
    SetWeight {
        /// The pool, as named in the rule file.
        pool: String,
        /// The server's address in that pool (IP:PORT).
        #[arg(value_name = "SERVER")]
        server: SocketAddr,
        /// The weight, 0..=65535 (0: no new requests).
        #[arg(value_name = "N", value_parser = clap::value_parser!(u16))]
        weight: u16,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Set a server's state in a running switch: ready (back in service), drain (keeps its
    /// requests and persistent clients, gets no new ones) or maint (no new requests, not
    /// checked).
    SetState {
        /// The pool, as named in the rule file.
        pool: String,
        /// The server's address in that pool (IP:PORT).
        #[arg(value_name = "SERVER")]
        server: SocketAddr,
        #[arg(value_enum, value_name = "STATE")]
        state: StateWord,
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Make a running switch re-read its rule file (refused as a whole if the file is wrong).
    Reload {
        #[command(flatten)]
        admin: AdminArgs,
    },
    /// Print a tcpvs rule file equivalent to a KTCPVS configuration (as `tcpvsadm -f` reads
    /// it); what has no equivalent is kept as a comment and warned about on stderr.
    ImportKtcpvs {
        /// The KTCPVS configuration file.
        #[arg(value_name = "FILE")]
        file: PathBuf,
    },
}

/// How the admin verbs find the endpoint and the token.
#[derive(Args)]
struct AdminArgs {
    /// The admin endpoint: IP:PORT, or unix:PATH for a Unix socket [default: 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    admin: Option<Address>,
    /// Find the endpoint by this rule file's `[admin]` table (`listen`, and its token if it has
    /// one and no other is given); the rest of the file is not read. `reload` also checks that
    /// the switch runs this file.
    #[arg(short, long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Read the token from this file (its first line); else from the environment variable
    /// TCPVS_ADMIN_TOKEN.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
}

/// The admin endpoint's address when neither `--admin` nor `-c` is given.
const DEFAULT_ADMIN: &str = "127.0.0.1:9090";
/// The environment variable with the token.
const TOKEN_VARIABLE: &str = "TCPVS_ADMIN_TOKEN";

#[derive(Clone, Copy, ValueEnum)]
enum StateWord {
    /// Back in service.
    Ready,
    /// No new requests; those in progress and persistent clients stay.
    Drain,
    /// Maintenance: no new requests, no checks.
    Maint,
}

impl From<StateWord> for AdminState {
    fn from(word: StateWord) -> AdminState {
        match word {
            StateWord::Ready => AdminState::Ready,
            StateWord::Drain => AdminState::Drain,
            StateWord::Maint => AdminState::Maint,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { files, strict } => check(&files, strict),
        Command::Run {
            config,
            upgrade_socket,
            take_over,
        } => match Config::load(&config) {
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
        },
        Command::Demo { listen, admin } => {
            match Config::parse("rules/demo.toml (built in)", demo::DEMO_RULES) {
                Ok(mut config) => {
                    for service in &mut config.services {
                        service.listen = listen;
                    }
                    // Its endpoint is on loopback without a token on purpose, so that the
                    // monitor page's buttons work at once; the warning that any local user
                    // can change servers is for rule files of real switches (`tcpvs check
                    // rules/demo.toml` still says it).
                    config.warnings.retain(|w| {
                        !w.as_error()
                            .message
                            .starts_with("any local user can change servers")
                    });
                    if !admin.ip().is_loopback() {
                        // The demo's endpoint has no token: changes would be open to anyone.
                        eprintln!("tcpvs demo: --admin must be a loopback address (the demo sets no token), not {admin}");
                        return ExitCode::FAILURE;
                    }
                    if let Some(endpoint) = &mut config.admin {
                        endpoint.listen = tcpvs::config::admin::AdminListen::Tcp(admin);
                    }
                    run(config, Launch::demo())
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::List { json, admin } => admin_verb(&admin, |endpoint| {
            if json {
                let text = client::get_stats_json(endpoint)?;
                Ok(table::pretty_json(&text) + "\n")
            } else {
                Ok(table::render(&client::get_stats(endpoint)?))
            }
        }),
        Command::SetWeight {
            pool,
            server,
            weight,
            admin,
        } => admin_verb(&admin, |endpoint| {
            let now = client::set_weight(endpoint, &pool, server, weight)?;
            Ok(changed_line(&pool, server, now))
        }),
        Command::SetState {
            pool,
            server,
            state,
            admin,
        } => admin_verb(&admin, |endpoint| {
            let now = client::set_state(endpoint, &pool, server, state.into())?;
            Ok(changed_line(&pool, server, now))
        }),
        Command::Reload { admin } => admin_verb(&admin, |endpoint| {
            // `-c FILE` names a file: the switch must be running that one, as a reload
            // re-reads the switch's own file and not the one named here.
            if let Some(file) = &admin.config {
                client::check_rule_file(endpoint, file)?;
            }
            let reloaded = client::reload(endpoint)?;
            Ok(match reloaded.file {
                Some(file) => format!("reloaded {file}: generation {}\n", reloaded.generation),
                None => format!("reloaded: generation {}\n", reloaded.generation),
            })
        }),
        Command::ImportKtcpvs { file } => import_ktcpvs(&file),
    }
}

/// `tcpvs import-ktcpvs`: the rule file on stdout (exit 0), warnings on stderr; or every
/// error on stderr (exit 1).
fn import_ktcpvs(file: &Path) -> ExitCode {
    let report = match tcpvs::import_ktcpvs::import_file(file) {
        Ok(report) => report,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    for diagnostic in report.diagnostics() {
        eprintln!("{diagnostic}");
    }
    if !report.is_ok() {
        return ExitCode::FAILURE;
    }
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // A closed pipe (`... | head`) is not worth a message.
    let _ = out
        .write_all(report.rules.as_bytes())
        .and_then(|()| out.flush());
    ExitCode::SUCCESS
}

/// Runs an admin verb: finds the endpoint, sends, prints what `verb` returns on stdout (exit 0)
/// or the error on stderr (exit 1).
fn admin_verb(
    args: &AdminArgs,
    verb: impl FnOnce(&Endpoint) -> Result<String, client::Error>,
) -> ExitCode {
    let endpoint = match endpoint(args) {
        Ok(e) => e,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    match verb(&endpoint) {
        Ok(text) => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            // A closed pipe (`tcpvs list | head`) is not an error worth a message.
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tcpvs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The server's line after a change; the address asked for when the answer lacks one.
fn changed_line(pool: &str, server: SocketAddr, mut now: client::ServerJson) -> String {
    if now.addr.is_empty() {
        now.addr = server.to_string();
    }
    table::server_line(pool, &now) + "\n"
}

/// The endpoint's address (`--admin`, else the rule file's `[admin] listen`, else the
/// default) and the token (`--token-file`, else TCPVS_ADMIN_TOKEN, else the rule file's). Of
/// the rule file only `[admin]` is read: a mistake elsewhere in it (being fixed, or the reason
/// for a reload the switch will refuse with its errors) does not stop the verbs. The error is
/// the message to print: `[admin]`'s errors (or a TOML syntax error) as `FILE:LINE:COL: message`.
fn endpoint(args: &AdminArgs) -> Result<Endpoint, String> {
    let mut addr = args.admin.clone();
    let mut file_token = None;
    if let Some(path) = &args.config {
        let admin = tcpvs::config::admin::load_admin_only(path).map_err(|e| e.to_string())?;
        let Some(admin) = admin else {
            return Err(format!(
                "tcpvs: {} has no [admin] listen: a switch run with it serves no admin endpoint",
                path.display()
            ));
        };
        addr = Some(Address::from(&admin.listen));
        file_token = admin.token;
    }
    let addr = addr
        .unwrap_or_else(|| Address::Tcp(DEFAULT_ADMIN.parse().expect("a valid default address")));
    let token = match &args.token_file {
        Some(path) => Some(read_token_file(path)?),
        None => match std::env::var(TOKEN_VARIABLE) {
            Ok(value) if !value.trim().is_empty() => Some(value.trim().to_string()),
            Ok(_) | Err(std::env::VarError::NotPresent) => file_token,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("tcpvs: {TOKEN_VARIABLE} is not valid UTF-8"))
            }
        },
    };
    Ok(Endpoint { addr, token })
}

/// The token in a file: its first line, trimmed.
fn read_token_file(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("tcpvs: cannot read the token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim();
    if token.is_empty() {
        return Err(format!("tcpvs: the token file {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// `tcpvs check`: for each file, the summary on stdout (exit 0), or every error on stderr
/// (exit 1); its warnings on stderr in either case, among the errors in file order. With
/// `strict`, warnings are errors: printed without `warning:`, and the file is refused.
fn check(files: &[PathBuf], strict: bool) -> ExitCode {
    let mut ok = true;
    for file in files {
        let checked = match Config::check_file(file) {
            Ok(checked) => checked,
            Err(e) => {
                eprintln!("{e}");
                ok = false;
                continue;
            }
        };
        let warnings = &checked.warnings;
        let refused = checked.config.is_err() || (strict && !warnings.is_empty());
        // Errors and warnings of one file, in file order (errors first at one place).
        let mut lines: Vec<(usize, usize, String)> = Vec::new();
        match &checked.config {
            Ok(config) if !refused => println!("{}", config.summary()),
            Ok(_) => {}
            Err(errors) => lines.extend(errors.0.iter().map(|e| (e.line, e.column, e.to_string()))),
        }
        lines.extend(warnings.iter().map(|w| {
            let e = w.as_error();
            let text = if strict { e.to_string() } else { w.to_string() };
            (e.line, e.column, text)
        }));
        lines.sort_by_key(|(line, column, _)| (*line, *column));
        for (_, _, text) in lines {
            eprintln!("{text}");
        }
        ok &= !refused;
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false)
        .init();
}

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

fn run(config: Config, launch: Launch) -> ExitCode {
    let with_demo_servers = launch.demo_servers;
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
    runtime.block_on(async move {
        // Signal handlers first: a SIGTERM that arrives as soon as the switch answers must
        // find them in place, not the default action.
        let stop = match StopSignals::install() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tcpvs: cannot install signal handlers: {e}");
                return ExitCode::FAILURE;
            }
        };
        if with_demo_servers {
            if let Err(e) = demo::start_demo_servers(&config).await {
                eprintln!("tcpvs demo: {e}");
                return ExitCode::FAILURE;
            }
        }
        let grace = config.switch.shutdown_timeout;
        let file = config.file.clone();
        let admin_listen = config.admin.as_ref().map(|admin| admin.listen.to_string());
        // A binary upgrade: the old process's listening sockets, before binding anything.
        let (inherited, takeover) = match &launch.take_over {
            Some(path) => match tcpvs::upgrade::take_over(path) {
                Ok((inherited, takeover)) => (inherited, Some(takeover)),
                Err(e) => {
                    eprintln!("tcpvs: {e}");
                    return ExitCode::FAILURE;
                }
            },
            None => Default::default(),
        };
        let started = if workers == 1 {
            Switch::start_inheriting(config, inherited).await
        } else {
            Switch::start_workers_inheriting(config, workers, inherited)
        };
        let switch = match started {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tcpvs: {e}");
                return ExitCode::FAILURE;
            }
        };
        if let Some(takeover) = takeover {
            // Serving now: the old process lets go of its listeners and drains.
            if let Err(e) = takeover.ready(&switch.reloads()) {
                tracing::warn!("upgrade: the old tcpvs did not confirm: {e}");
            } else {
                tracing::info!("upgrade: took the listeners over; the old tcpvs drains");
            }
        }
        let handover = match &launch.upgrade_socket {
            Some(path) => match tcpvs::upgrade::bind(path) {
                Ok(listener) => {
                    let serving = tcpvs::upgrade::serve(listener, path.clone(), switch.reloads());
                    Some(tokio::spawn(serving))
                }
                Err(e) => {
                    eprintln!("tcpvs: upgrade socket {}: {e}", path.display());
                    let _ = switch.shutdown(grace).await;
                    return ExitCode::FAILURE;
                }
            },
            None => None,
        };
        let generation = switch.shared().generation.load();
        for (name, addr) in switch.addresses() {
            let plural = if workers == 1 { "" } else { "s" };
            let service = generation.service(name).map(|(_, service)| service);
            match service.map(|s| (s.mode, s.tls.is_some())) {
                Some((tcpvs::config::ServiceMode::TlsPassthrough, _)) => tracing::info!("virtual service `{name}` listening on {addr} (TLS passthrough by server name; {file}, {workers} worker{plural})"),
                Some((_, true)) => tracing::info!("virtual service `{name}` listening on https://{addr}/ ({file}, {workers} worker{plural})"),
                _ => tracing::info!("virtual service `{name}` listening on http://{addr}/ ({file}, {workers} worker{plural})"),
            }
        }
        drop(generation);
        if let Some(admin) = switch.admin_addr() {
            tracing::info!("admin endpoint on http://{admin}/ (monitor page; /stats, /metrics)");
        } else if let Some(listen) = &admin_listen {
            tracing::info!("admin endpoint on {listen} (tcpvs list --admin {listen}; /stats, /metrics)");
        }
        if with_demo_servers {
            if let Some((_, addr)) = switch.addresses().first() {
                eprintln!(
                    "tcpvs demo: open http://{addr}/ (pages, images and CGI come from three pools); Ctrl-C stops"
                );
            }
            if let Some(admin) = switch.admin_addr() {
                eprintln!("tcpvs demo: the monitor: http://{admin}/");
            }
        }
        stop.wait(&switch, handover).await;
        tracing::info!("stopping: no new connections; waiting up to {grace:?} for requests in flight");
        let left = switch.shutdown(grace).await;
        if left > 0 {
            tracing::warn!("{left} client connections were still open at the deadline");
        }
        ExitCode::SUCCESS
    })
}

/// SIGTERM and SIGINT, the signals that stop the switch gracefully; SIGHUP, which reloads its
/// rule file meanwhile.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// Until SIGTERM or SIGINT, or a new tcpvs took the listeners over (`handover` ended);
    /// each SIGHUP reloads the rule file (the outcome is logged).
    async fn wait(mut self, switch: &Switch, mut handover: Option<tokio::task::JoinHandle<()>>) {
        loop {
            tokio::select! {
                _ = self.terminate.recv() => return,
                _ = self.interrupt.recv() => return,
                _ = async { handover.as_mut().expect("checked").await }, if handover.is_some() => return,
                _ = self.hangup.recv() => {
                    tracing::info!("SIGHUP: reloading the rule file");
                    // Off this thread: resolving server names may wait on DNS, and with one
                    // worker this thread serves requests.
                    let reloads = switch.reloads();
                    let _ = tokio::task::spawn_blocking(move || reloads.reload()).await;
                }
            }
        }
    }
}
