//! Where the admin verbs find the admin endpoint and its token, and the record of where they
//! looked, so that an endpoint that cannot be reached comes with the places tried.
//!
//! The endpoint, first found first taken: `--admin ADDR`; the `[admin] listen` of `-c FILE`;
//! the environment variable `TCPVS_ADMIN` (`HOST:PORT` or `unix:PATH`, as `--admin`); the
//! `[admin] listen` of the usual rule file, /etc/tcpvs/rules.toml (deploy/ installs it there),
//! when it exists and this user may read it; else 127.0.0.1:9090. So on a deployed machine
//! root's `tcpvs list` reaches the Unix socket of deploy/rules.toml with no option, and a script
//! sets `TCPVS_ADMIN` once, as HAProxy's scripts keep their stats socket's path in a variable.
//!
//! The token: `--token-file`, else `TCPVS_ADMIN_TOKEN`, else that of the rule file the endpoint
//! was found in.

use super::host_port::AdminAddress;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use tcpvs::admin::client::{Address, Endpoint};
use tcpvs::config::admin::AdminConfig;
use tcpvs::config::LoadError;

/// The environment variable with the endpoint's address.
pub const ADDRESS_VARIABLE: &str = "TCPVS_ADMIN";
/// The environment variable with the token.
const TOKEN_VARIABLE: &str = "TCPVS_ADMIN_TOKEN";
/// Where deploy/ installs the rule file (README, "Deploying").
pub const USUAL_RULE_FILE: &str = "/etc/tcpvs/rules.toml";
/// The endpoint when nothing names one: the demo's, and `[admin] listen`'s usual value.
const DEFAULT_ADMIN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 9090));

/// What the command line says about the endpoint and the token.
pub struct Asked<'a> {
    pub admin: Option<&'a AdminAddress>,
    pub config: Option<&'a Path>,
    pub token_file: Option<&'a Path>,
}

/// The endpoint found, and where it was looked for.
pub struct Found {
    pub endpoint: Endpoint,
    pub trail: Trail,
}

/// Each place looked at for the endpoint, in order, with what was there; the last one gave the
/// address.
pub struct Trail {
    places: Vec<(String, String)>,
    /// `--admin` named the endpoint: the only place looked at.
    named_by_option: bool,
}

impl Trail {
    fn note(&mut self, place: impl Into<String>, finding: impl Into<String>) {
        self.places.push((place.into(), finding.into()));
    }

    /// Whether the operator named the endpoint on the command line (`--admin`): then it was the
    /// only place looked at, and the error's address says it all.
    pub fn named_on_command_line(&self) -> bool {
        self.named_by_option
    }
}

impl std::fmt::Display for Trail {
    /// `tcpvs: looked for the admin endpoint, in this order:` and a line per place.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tcpvs: looked for the admin endpoint, in this order:")?;
        for (place, finding) in &self.places {
            write!(f, "\n  {place}: {finding}")?;
        }
        Ok(())
    }
}

/// The endpoint and token for `asked`. The error is the message to print: a rule file whose
/// `[admin]` is wrong (`FILE:LINE:COL: message`), a `TCPVS_ADMIN` that is no address, a name
/// that does not resolve, a token file that cannot be read.
pub fn find(asked: &Asked<'_>) -> Result<Found, String> {
    let mut trail = Trail {
        places: Vec::new(),
        named_by_option: asked.admin.is_some(),
    };
    let (addr, file_token) = find_address(asked, &mut trail)?;
    let token = match asked.token_file {
        Some(path) => Some(read_token_file(path)?),
        None => match std::env::var(TOKEN_VARIABLE) {
            Ok(value) if !value.trim().is_empty() => Some(value.trim().to_string()),
            Ok(_) | Err(std::env::VarError::NotPresent) => file_token,
            Err(std::env::VarError::NotUnicode(_)) => {
                return Err(format!("tcpvs: {TOKEN_VARIABLE} is not valid UTF-8"))
            }
        },
    };
    Ok(Found {
        endpoint: Endpoint { addr, token },
        trail,
    })
}

/// The address, by the order of the module's comment, and the token of the rule file it came
/// from. Each place looked at is noted in `trail`.
fn find_address(asked: &Asked<'_>, trail: &mut Trail) -> Result<(Address, Option<String>), String> {
    if let Some(admin) = asked.admin {
        trail.note("--admin", format!("{admin}, tried"));
        return Ok((admin.resolve().map_err(|e| format!("tcpvs: {e}"))?, None));
    }
    trail.note("--admin", "not given");
    if let Some(path) = asked.config {
        let admin = load_admin(path)?.ok_or_else(|| {
            format!(
                "tcpvs: {} has no [admin] listen: a switch run with it serves no admin endpoint",
                path.display()
            )
        })?;
        return Ok(from_rule_file(
            &format!("-c {}", path.display()),
            admin,
            trail,
        ));
    }
    trail.note("-c FILE", "not given");
    if let Some(admin) = address_variable()? {
        trail.note(ADDRESS_VARIABLE, format!("{admin}, tried"));
        let addr = admin
            .resolve()
            .map_err(|e| format!("tcpvs: {ADDRESS_VARIABLE}: {e}"))?;
        return Ok((addr, None));
    }
    trail.note(ADDRESS_VARIABLE, "not set");
    if let Some(admin) = usual_rule_file(trail)? {
        return Ok(from_rule_file(USUAL_RULE_FILE, admin, trail));
    }
    trail.note("the default", format!("{DEFAULT_ADMIN}, tried"));
    Ok((Address::Tcp(DEFAULT_ADMIN), None))
}

/// The address and token of a rule file's `[admin]` table, noted in `trail` under `place`.
fn from_rule_file(place: &str, admin: AdminConfig, trail: &mut Trail) -> (Address, Option<String>) {
    let addr = Address::from(&admin.listen);
    trail.note(place, format!("[admin] listen = \"{addr}\", tried"));
    (addr, admin.token)
}

/// A rule file's `[admin]` table alone (a mistake elsewhere in the file, being fixed or the
/// reason for a reload the switch will refuse, does not stop the verbs). `[admin]`'s errors and
/// TOML syntax errors are the message, as `FILE:LINE:COL: message`.
fn load_admin(path: &Path) -> Result<Option<AdminConfig>, String> {
    tcpvs::config::admin::load_admin_only(path).map_err(|e| e.to_string())
}

/// `TCPVS_ADMIN`, if set and not blank.
fn address_variable() -> Result<Option<AdminAddress>, String> {
    match std::env::var(ADDRESS_VARIABLE) {
        Ok(value) if value.trim().is_empty() => Ok(None),
        Ok(value) => value
            .trim()
            .parse()
            .map(Some)
            .map_err(|e| format!("tcpvs: {ADDRESS_VARIABLE}: {e}")),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => {
            Err(format!("tcpvs: {ADDRESS_VARIABLE} is not valid UTF-8"))
        }
    }
}

/// The usual rule file's `[admin]`, when the file is there, this user may read it, and it has
/// one; what was found is noted in `trail` otherwise. A file that is there but whose `[admin]`
/// is wrong stops the verb: it is most likely the switch's own file, and another endpoint
/// would be a guess.
fn usual_rule_file(trail: &mut Trail) -> Result<Option<AdminConfig>, String> {
    match tcpvs::config::admin::load_admin_only(Path::new(USUAL_RULE_FILE)) {
        Ok(Some(admin)) => Ok(Some(admin)),
        Ok(None) => {
            trail.note(USUAL_RULE_FILE, "has no [admin] listen");
            Ok(None)
        }
        Err(LoadError::Read(_, e)) => {
            let why = match e.kind() {
                std::io::ErrorKind::NotFound => "no such file".to_string(),
                std::io::ErrorKind::PermissionDenied => {
                    "this user may not read it (give --admin ADDR or set TCPVS_ADMIN)".to_string()
                }
                _ => format!("cannot read it: {e}"),
            };
            trail.note(USUAL_RULE_FILE, why);
            Ok(None)
        }
        Err(invalid @ LoadError::Invalid(_)) => Err(format!(
            "{invalid}\ntcpvs: {USUAL_RULE_FILE} was read for its [admin] listen, as neither \
             --admin, -c nor {ADDRESS_VARIABLE} named the admin endpoint"
        )),
    }
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
