//! The verbs that talk to a running switch's admin endpoint: `tcpvs list`, `set-weight`,
//! `set-state` and `reload`. Each finds the endpoint and its token ([`AdminArgs`]), sends one
//! request, and prints the answer on stdout (exit 0) or the reason on stderr (exit 1).

use clap::{Args, ValueEnum};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcpvs::admin::client::{self, Address, AdminState, Endpoint};
use tcpvs::admin::table;

/// How the admin verbs find the endpoint and the token.
#[derive(Args)]
pub struct AdminArgs {
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

/// `tcpvs set-weight`: the server's line after the change.
pub fn set_weight(pool: &str, server: SocketAddr, weight: u16, args: &AdminArgs) -> ExitCode {
    admin_verb(args, |endpoint| {
        let now = client::set_weight(endpoint, pool, server, weight)?;
        Ok(changed_line(pool, server, now))
    })
}

/// `tcpvs set-state`: the server's line after the change.
pub fn set_state(pool: &str, server: SocketAddr, state: StateWord, args: &AdminArgs) -> ExitCode {
    admin_verb(args, |endpoint| {
        let now = client::set_state(endpoint, pool, server, state.into())?;
        Ok(changed_line(pool, server, now))
    })
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
