//! The `tcpvs` command: run a switch from a rule file, check rule files, run the demo, or talk
//! to a running switch's admin endpoint (`list`, `set-weight`, `set-state`, `reload`).

mod cli;

use clap::{Parser, Subcommand};
use cli::admin_verbs::{self, AdminArgs, StateWord};
use cli::check::check;
use cli::host_port::HostPort;
use cli::import_ktcpvs::import_ktcpvs;
use cli::run;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "tcpvs",
    version,
    about = "A layer-7 content switch: routes every HTTP/1.1 and HTTP/2 request by rules to server pools"
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
        /// Serve the demo over HTTPS, with a self-signed certificate (for localhost and
        /// 127.0.0.1) made at start, so that browsers speak HTTP/2 to it (ALPN h2); they warn
        /// about the certificate first.
        #[arg(long)]
        tls: bool,
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
        /// The server in that pool: its address (IP:PORT), or NAME:PORT as the rule file
        /// writes it (localhost:9102), looked up as the rule file was.
        #[arg(value_name = "SERVER")]
        server: HostPort,
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
        /// The server in that pool: its address (IP:PORT), or NAME:PORT as the rule file
        /// writes it (localhost:9102), looked up as the rule file was.
        #[arg(value_name = "SERVER")]
        server: HostPort,
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { files, strict } => check(&files, strict),
        Command::Run {
            config,
            upgrade_socket,
            take_over,
        } => run::run_file(&config, upgrade_socket, take_over),
        Command::Demo { listen, admin, tls } => run::run_demo(listen, admin, tls),
        Command::List { json, admin } => admin_verbs::list(json, &admin),
        Command::SetWeight {
            pool,
            server,
            weight,
            admin,
        } => admin_verbs::set_weight(&pool, &server, weight, &admin),
        Command::SetState {
            pool,
            server,
            state,
            admin,
        } => admin_verbs::set_state(&pool, &server, state, &admin),
        Command::Reload { admin } => admin_verbs::reload(&admin),
        Command::ImportKtcpvs { file } => import_ktcpvs(&file),
    }
}
