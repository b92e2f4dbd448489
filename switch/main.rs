//! The `tcpvs` command: run a switch from a rule file, check rule files, or run the demo.

use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
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
    },
    /// Check rule files; print a summary of each, or every error as FILE:LINE:COL: message.
    Check {
        #[arg(value_name = "FILE", required = true)]
        files: Vec<PathBuf>,
    },
    /// Run the built-in demo: rules/demo.toml with in-process servers for its pools.
    Demo {
        /// Address of the demo's virtual service.
        #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { files } => check(&files),
        Command::Run { config } => match Config::load(&config) {
            Ok(config) => run(config, false),
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Demo { listen } => {
            match Config::parse("rules/demo.toml (built in)", demo::DEMO_RULES) {
                Ok(mut config) => {
                    for service in &mut config.services {
                        service.listen = listen;
                    }
                    run(config, true)
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

fn check(files: &[PathBuf]) -> ExitCode {
    let mut ok = true;
    for file in files {
        match Config::load(file) {
            Ok(config) => println!("{}", config.summary()),
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
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

fn run(config: Config, with_demo_servers: bool) -> ExitCode {
    init_logging();
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
        let started = if workers == 1 {
            Switch::start(config).await
        } else {
            Switch::start_workers(config, workers)
        };
        let switch = match started {
            Ok(s) => s,
            Err(e) => {
                eprintln!("tcpvs: {e}");
                return ExitCode::FAILURE;
            }
        };
        for (name, addr) in switch.addresses() {
            tracing::info!("virtual service `{name}` listening on http://{addr}/ ({file}, {workers} worker{})", if workers == 1 { "" } else { "s" });
        }
        if with_demo_servers {
            if let Some((_, addr)) = switch.addresses().first() {
                eprintln!(
                    "tcpvs demo: open http://{addr}/ (pages, images and CGI come from three pools); Ctrl-C stops"
                );
            }
        }
        stop.wait().await;
        tracing::info!("stopping: no new connections; waiting up to {grace:?} for requests in flight");
        let left = switch.shutdown(grace).await;
        if left > 0 {
            tracing::warn!("{left} client connections were still open at the deadline");
        }
        ExitCode::SUCCESS
    })
}

/// SIGTERM and SIGINT, the signals that stop the switch gracefully.
struct StopSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> std::io::Result<StopSignals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(StopSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn wait(mut self) {
        tokio::select! {
            _ = self.terminate.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}
