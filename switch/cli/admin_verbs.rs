//! The verbs that talk to a running switch's admin endpoint: `tcpvs list`, `set-weight`,
//! `set-state` and `reload`. Each finds the endpoint and its token ([`AdminArgs`]), sends one
//! request, and prints the answer on stdout (exit 0) or the reason on stderr (exit 1).

use super::admin_endpoint::{self, Asked};
use super::host_port::{AdminAddress, HostPort};
use clap::{Args, ValueEnum};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use tcpvs::admin::client::{self, AdminState, Endpoint};
use tcpvs::admin::table;

/// How the admin verbs find the endpoint and the token (the order: admin_endpoint.rs).
#[derive(Args)]
pub struct AdminArgs {
    /// The admin endpoint: HOST:PORT, or unix:PATH for a Unix socket [default: -c FILE's, else
    /// $TCPVS_ADMIN, else /etc/tcpvs/rules.toml's [admin] listen, else 127.0.0.1:9090].
    #[arg(long, value_name = "ADDR", conflicts_with = "config")]
    admin: Option<AdminAddress>,
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

impl AdminArgs {
    fn asked(&self) -> Asked<'_> {
        Asked {
            admin: self.admin.as_ref(),
            config: self.config.as_deref(),
            token_file: self.token_file.as_deref(),
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub enum StateWord {
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

/// `tcpvs list`: the table of services, pools and servers, or with `json` the endpoint's
/// /stats document.
pub fn list(json: bool, args: &AdminArgs) -> ExitCode {
    admin_verb(args, |endpoint| {
        if json {
            let text = client::get_stats_json(endpoint)?;
            Ok(table::pretty_json(&text) + "\n")
        } else {
            Ok(table::render(&client::get_stats(endpoint)?))
        }
    })
}

/// `tcpvs set-weight`: the server's line after the change. The server is named by address or
/// as the rule file writes it (`localhost:9102`).
pub fn set_weight(pool: &str, server: &HostPort, weight: u16, args: &AdminArgs) -> ExitCode {
    let Some(server) = resolve_server(server) else {
        return ExitCode::FAILURE;
    };
    admin_verb(args, |endpoint| {
        let now = client::set_weight(endpoint, pool, server, weight)?;
        Ok(changed_line(pool, server, now))
    })
}

/// `tcpvs set-state`: the server's line after the change; the server named as for
/// [`set_weight`].
pub fn set_state(pool: &str, server: &HostPort, state: StateWord, args: &AdminArgs) -> ExitCode {
    let Some(server) = resolve_server(server) else {
        return ExitCode::FAILURE;
    };
    admin_verb(args, |endpoint| {
        let now = client::set_state(endpoint, pool, server, state.into())?;
        Ok(changed_line(pool, server, now))
    })
}

/// The server's address: a name looked up as the rule file looked it up, so that it is the
/// server the file made. `None` after printing why not.
fn resolve_server(server: &HostPort) -> Option<SocketAddr> {
    match server.resolve() {
        Ok(addr) => Some(addr),
        Err(e) => {
            eprintln!("tcpvs: server {e}");
            None
        }
    }
}

/// `tcpvs reload`: the file the switch re-read and its new generation.
pub fn reload(args: &AdminArgs) -> ExitCode {
    admin_verb(args, |endpoint| {
        // `-c FILE` names a file: the switch must be running that one, as a reload
        // re-reads the switch's own file and not the one named here.
        if let Some(file) = &args.config {
            client::check_rule_file(endpoint, file)?;
        }
        let reloaded = client::reload(endpoint)?;
        Ok(match reloaded.file {
            Some(file) => format!("reloaded {file}: generation {}\n", reloaded.generation),
            None => format!("reloaded: generation {}\n", reloaded.generation),
        })
    })
}

/// Runs an admin verb: finds the endpoint, sends, prints what `verb` returns on stdout (exit 0)
/// or the error on stderr (exit 1). An endpoint that cannot be reached comes with where it was
/// looked for, unless `--admin` named it.
fn admin_verb(
    args: &AdminArgs,
    verb: impl FnOnce(&Endpoint) -> Result<String, client::Error>,
) -> ExitCode {
    let found = match admin_endpoint::find(&args.asked()) {
        Ok(found) => found,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    match verb(&found.endpoint) {
        Ok(text) => {
            let mut out = std::io::stdout().lock();
            // A closed pipe (`tcpvs list | head`) is not an error worth a message.
            let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tcpvs: {e}");
            if matches!(e, client::Error::Unreachable { .. })
                && !found.trail.named_on_command_line()
            {
                eprintln!("{}", found.trail);
            }
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
