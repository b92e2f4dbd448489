//! What went wrong in an exchange with the admin endpoint, worded for the operator.

use super::{Address, CONNECT_TIMEOUT, IO_TIMEOUT};

/// What went wrong, worded for the operator.
#[derive(Debug)]
pub enum Error {
    /// No connection: the switch is not running, or not with this `[admin] listen`.
    Unreachable {
        addr: Address,
        error: std::io::Error,
    },
    /// The connection broke or stalled during the exchange.
    Exchange {
        addr: Address,
        error: std::io::Error,
    },
    /// The answer is not HTTP, or not the JSON expected.
    Malformed { addr: Address, what: String },
    /// `tcpvs reload -c FILE`: the switch at that endpoint runs another file (`running`), or
    /// does not say which (`None`).
    OtherFile {
        addr: Address,
        asked: String,
        running: Option<String>,
    },
    /// The token is not something an HTTP field can carry.
    TokenText,
    /// 401: the token was refused (`sent`: one was sent at all).
    Token { sent: bool },
    /// 501 to `POST /reload`.
    ReloadUnsupported,
    /// 422 to `POST /reload`: the rule file's errors; the running configuration is unchanged.
    ReloadRefused { errors: Vec<String> },
    /// Any other answer that is not a success (400, 404, 500, ...), with the endpoint's text.
    Status {
        status: u16,
        reason: String,
        message: String,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Unreachable { addr, error } => write_unreachable(f, addr, error),
            Error::Exchange { addr, error } => match error.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => write!(
                    f,
                    "the admin endpoint at {addr} did not answer within {}s",
                    IO_TIMEOUT.as_secs()
                ),
                _ => write!(
                    f,
                    "the exchange with the admin endpoint at {addr} failed: {error}"
                ),
            },
            Error::Malformed { addr, what } => {
                write!(
                    f,
                    "unexpected answer from the admin endpoint at {addr}: {what}"
                )
            }
            Error::TokenText => write!(
                f,
                "the token must be printable ASCII without spaces (it is sent as \
                 `Authorization: Bearer <token>`)"
            ),
            Error::Token { sent: true } => write!(
                f,
                "the admin endpoint refused the token: set TCPVS_ADMIN_TOKEN or --token-file"
            ),
            Error::Token { sent: false } => write!(
                f,
                "the admin endpoint wants a token: set TCPVS_ADMIN_TOKEN or --token-file"
            ),
            Error::ReloadUnsupported => write!(f, "this tcpvs does not support reload yet"),
            Error::OtherFile {
                addr,
                asked,
                running: Some(running),
            } => write!(
                f,
                "not reloading: the switch at {addr} runs {running}, not {asked}; a reload \
                 re-reads the switch's own file (use --admin {addr} to reload it whatever it is)"
            ),
            Error::OtherFile {
                addr,
                asked,
                running: None,
            } => write!(
                f,
                "not reloading: the switch at {addr} does not say which rule file it runs (rules \
                 built in, or an older tcpvs), so it cannot be told whether that is {asked} (use \
                 --admin {addr} to reload it anyway)"
            ),
            Error::ReloadRefused { errors } => write_reload_refused(f, errors),
            Error::Status {
                status,
                reason,
                message,
            } => write_status(f, *status, reason, message),
        }
    }
}

/// `Unreachable`: why the connection failed, and what to look at.
fn write_unreachable(
    f: &mut std::fmt::Formatter<'_>,
    addr: &Address,
    error: &std::io::Error,
) -> std::fmt::Result {
    let unix = matches!(addr, Address::Unix(_));
    let why = match error.kind() {
        std::io::ErrorKind::ConnectionRefused if unix => {
            "connection refused (a socket left by a tcpvs that stopped?)".to_string()
        }
        std::io::ErrorKind::ConnectionRefused => "connection refused".to_string(),
        std::io::ErrorKind::NotFound if unix => "no such socket".to_string(),
        std::io::ErrorKind::PermissionDenied if unix => {
            return write!(
                f,
                "cannot reach the admin endpoint at {addr}: permission denied - the \
                 socket's mode (its `[admin] mode`) or its folder's does not let this \
                 user in; run as its owner, or as a member of its group when the \
                 mode lets the group in"
            );
        }
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => {
            format!("no answer within {}s", CONNECT_TIMEOUT.as_secs())
        }
        _ => error.to_string(),
    };
    write!(
        f,
        "cannot reach the admin endpoint at {addr}: {why} - is tcpvs running with \
         [admin] listen = \"{addr}\"?"
    )
}

/// `ReloadRefused`: the rule file's errors, one a line.
fn write_reload_refused(f: &mut std::fmt::Formatter<'_>, errors: &[String]) -> std::fmt::Result {
    write!(f, "reload refused; the running configuration is unchanged")?;
    if errors.is_empty() {
        return Ok(());
    }
    write!(f, ":")?;
    for e in errors {
        write!(f, "\n{e}")?;
    }
    Ok(())
}

/// `Status`: the status, its reason and the endpoint's message, those given.
fn write_status(
    f: &mut std::fmt::Formatter<'_>,
    status: u16,
    reason: &str,
    message: &str,
) -> std::fmt::Result {
    write!(f, "the admin endpoint answered {status}")?;
    if !reason.is_empty() {
        write!(f, " {reason}")?;
    }
    if !message.is_empty() {
        write!(f, ": {message}")?;
    }
    Ok(())
}

impl std::error::Error for Error {}
