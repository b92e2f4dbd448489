//! `[admin]`: where the admin endpoint listens (an address, or a Unix socket and its mode) and
//! the token that guards changes; the warnings about who else can use them.

use super::error::{ConfigErrors, ErrorSink};
use super::listen::{parse_listen, ListenRegistry};
use super::raw::RawAdmin;
use super::LoadError;
use std::fmt;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The permissions of the admin socket when `mode` is not given: its owner only.
pub const DEFAULT_SOCKET_MODE: u32 = 0o600;
/// `sun_path` holds 108 bytes, the final NUL included.
const MAX_SOCKET_PATH: usize = 107;

/// Where the admin endpoint listens.
#[derive(Clone, PartialEq, Eq)]
pub enum AdminListen {
    /// TCP, `listen = "127.0.0.1:9090"`.
    Tcp(SocketAddr),
    /// A Unix socket, `listen = "unix:/run/tcpvs/admin.sock"` (a relative path is taken from
    /// the rule file's folder): who may connect is decided by the file's permissions, `mode`.
    Unix { path: PathBuf, mode: u32 },
}

impl fmt::Display for AdminListen {
    /// As the rule file writes it: `127.0.0.1:9090` or `unix:/run/tcpvs/admin.sock`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminListen::Tcp(addr) => write!(f, "{addr}"),
            AdminListen::Unix { path, .. } => write!(f, "unix:{}", path.display()),
        }
    }
}

impl fmt::Debug for AdminListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminListen::Tcp(_) => write!(f, "{self}"),
            AdminListen::Unix { mode, .. } => write!(f, "{self} (mode {mode:04o})"),
        }
    }
}

/// The admin endpoint as configured.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminConfig {
    pub listen: AdminListen,
    /// `Authorization: Bearer <token>` required for changes. Without one, changes are accepted
    /// only from loopback peers (checked at load) or over the Unix socket.
    pub token: Option<String>,
}

impl std::fmt::Debug for AdminConfig {
    // The token stays out of debug output (and so out of logs and panics).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminConfig")
            .field("listen", &self.listen)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// Checks `[admin]`: its address (claimed against the services' ones) or socket and mode, its
/// token, and that a listener reachable from other hosts is not left without one. Warns when
/// other local users can make changes, or read the token.
pub(super) fn build_admin(
    admin: &RawAdmin,
    file: &str,
    text: &str,
    listens: &mut ListenRegistry,
    sink: &mut ErrorSink<'_>,
) -> Option<AdminConfig> {
    // A missing `listen` was reported when the table was read.
    let listen_at = admin.listen.as_ref();
    let listen =
        listen_at.and_then(|listen| parse_admin_listen(listen, admin, file, text, listens, sink));
    if let (Some(mode), Some(AdminListen::Tcp(_))) = (&admin.mode, &listen) {
        sink.at(
            mode.span(),
            "`mode` sets the permissions of a Unix socket: it needs `listen = \"unix:PATH\"`",
        );
    }
    let token = build_token(admin, file, sink);
    let (listen, listen_at) = (listen?, listen_at?);
    let guarded = token.is_some() || admin.token_file.is_some();
    if let AdminListen::Unix { path, .. } = &listen {
        warn_if_folder_shared(path, listen_at.span(), sink);
    }
    if !check_exposure(&listen, listen_at, admin, guarded, sink) {
        return None;
    }
    Some(AdminConfig { listen, token })
}

/// The token: `token` (checked, and warned about when the rule file is readable by others) or
/// what `token_file` holds; both set is an error.
fn build_token(admin: &RawAdmin, file: &str, sink: &mut ErrorSink<'_>) -> Option<String> {
    match (&admin.token, &admin.token_file) {
        (Some(_), Some(token_file)) => {
            sink.at(
                token_file.span(),
                "`token` and `token_file` are both set: keep one",
            );
            None
        }
        (Some(token), None) => {
            let value = token.get_ref().trim();
            if value.is_empty() {
                sink.at(token.span(), "`token` is empty");
            }
            check_token_text(value, token.span(), sink);
            warn_if_readable(
                Path::new(file),
                token.span(),
                "the admin token is in this rule file",
                "move it to a `token_file` of mode 600, or make this file mode 600",
                sink,
            );
            Some(value.to_string())
        }
        (None, Some(token_file)) => read_token_file(token_file, file, sink),
        (None, None) => None,
    }
}

/// Who can reach the endpoint at `listen` without a token (`guarded`: there is one): refuses
/// (`false`) a TCP address other hosts reach, and warns when other local users can make
/// changes.
fn check_exposure(
    listen: &AdminListen,
    listen_at: &Spanned<String>,
    admin: &RawAdmin,
    guarded: bool,
    sink: &mut ErrorSink<'_>,
) -> bool {
    match listen {
        AdminListen::Tcp(addr) if !guarded && !addr.ip().is_loopback() => {
            sink.at(
                listen_at.span(),
                format!(
                    "the admin endpoint on {addr} is reachable from other hosts: set `token` or \
                     `token_file`, or listen on a loopback address (127.0.0.1, ::1) or a Unix \
                     socket (\"unix:/run/tcpvs/admin.sock\")"
                ),
            );
            return false;
        }
        AdminListen::Tcp(addr) if !guarded => sink.warn(
            listen_at.span(),
            format!(
                "any local user can change servers and reload through the admin endpoint on \
                 {addr} (it has no token): set `token_file`, or listen on a Unix socket \
                 (\"unix:/run/tcpvs/admin.sock\") whose `mode` says who may"
            ),
        ),
        AdminListen::Unix { mode, .. } if !guarded && mode & 0o002 != 0 => {
            let at = admin.mode.as_ref().map_or(listen_at.span(), Spanned::span);
            sink.warn(
                at,
                format!(
                    "mode {mode:04o} lets any local user connect to the admin socket, and \
                     without a token that means change servers and reload: take `o+w` away \
                     (\"0660\": its owner and group) or set `token_file`"
                ),
            );
        }
        _ => {}
    }
    true
}

/// `listen`: `IP:PORT`, or `unix:PATH` with the socket's `mode`.
fn parse_admin_listen(
    listen: &Spanned<String>,
    admin: &RawAdmin,
    file: &str,
    text: &str,
    listens: &mut ListenRegistry,
    sink: &mut ErrorSink<'_>,
) -> Option<AdminListen> {
    let Some(path) = listen.get_ref().strip_prefix("unix:") else {
        let addr = parse_listen(listen, sink)?;
        listens.claim(addr, "the admin endpoint", listen.span(), text, sink);
        return Some(AdminListen::Tcp(addr));
    };
    let mode = match &admin.mode {
        None => Some(DEFAULT_SOCKET_MODE),
        Some(mode) => parse_mode(mode, sink),
    };
    if path.is_empty() {
        sink.at(
            listen.span(),
            "`unix:` needs the socket's path, like \"unix:/run/tcpvs/admin.sock\"",
        );
        return None;
    }
    if path.contains('\0') {
        sink.at(listen.span(), "the socket's path has a NUL byte");
        return None;
    }
    // Relative to the rule file's folder, as every path of a rule file.
    let path = Path::new(file).parent().unwrap_or(Path::new("")).join(path);
    let length = path.as_os_str().len();
    if length > MAX_SOCKET_PATH {
        sink.at(
            listen.span(),
            format!(
                "the socket's path {} is {length} bytes long; a Unix socket's path holds at most \
                 {MAX_SOCKET_PATH}",
                path.display()
            ),
        );
        return None;
    }
    Some(AdminListen::Unix { path, mode: mode? })
}

/// `mode`: an octal string of permission bits, `"0600"`, `"660"`, at most `0777`.
fn parse_mode(mode: &Spanned<String>, sink: &mut ErrorSink<'_>) -> Option<u32> {
    let text = mode.get_ref().trim();
    let digits = text.strip_prefix("0o").unwrap_or(text);
    let valid = !digits.is_empty()
        && digits.len() <= 4
        && digits.bytes().all(|b| (b'0'..=b'7').contains(&b));
    match u32::from_str_radix(digits, 8) {
        Ok(bits) if valid && bits <= 0o777 => Some(bits),
        Ok(bits) if valid => {
            sink.at(
                mode.span(),
                format!(
                    "mode {bits:04o} has setuid, setgid or sticky bits, which mean nothing for a \
                     socket: give the permission bits only, like \"0660\""
                ),
            );
            None
        }
        _ => {
            sink.at(
                mode.span(),
                format!(
                    "mode {text:?} is not an octal permission like \"0600\" (owner) or \"0660\" \
                     (owner and group)"
                ),
            );
            None
        }
    }
}

/// A token goes into an HTTP field: visible ASCII only.
fn check_token_text(value: &str, span: std::ops::Range<usize>, sink: &mut ErrorSink<'_>) {
    if !value.bytes().all(|b| b.is_ascii_graphic()) {
        sink.at(
            span,
            "the token must be printable ASCII without spaces (it is sent as `Authorization: Bearer <token>`)",
        );
    }
}

/// Reads `token_file` (relative to the rule file's folder): its first line, trimmed.
fn read_token_file(
    token_file: &Spanned<String>,
    file: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<String> {
    let path = Path::new(file)
        .parent()
        .unwrap_or(Path::new("."))
        .join(token_file.get_ref());
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let value = text.lines().next().unwrap_or("").trim().to_string();
            if value.is_empty() {
                sink.at(
                    token_file.span(),
                    format!("token_file {} is empty", path.display()),
                );
                return None;
            }
            check_token_text(&value, token_file.span(), sink);
            warn_if_readable(
                &path,
                token_file.span(),
                &format!("the admin token is in {} (token_file)", path.display()),
                &format!("chmod 600 {}", path.display()),
                sink,
            );
            Some(value)
        }
        Err(e) => {
            sink.at(
                token_file.span(),
                format!("cannot read token_file {}: {e}", path.display()),
            );
            None
        }
    }
}

/// Warns at `span` when the Unix socket at `path` is in a folder every local user can write
/// (`/tmp`, even with its sticky bit): any of them can create the path before the switch does,
/// which then cannot start, or listen there in its place, and the command line's admin verbs
/// would send that process the token. A folder that does not exist yet is not warned about.
fn warn_if_folder_shared(path: &Path, span: std::ops::Range<usize>, sink: &mut ErrorSink<'_>) {
    let Some(folder) = path.parent() else { return };
    let Ok(metadata) = std::fs::metadata(folder) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o7777;
    if mode & 0o002 != 0 {
        sink.warn(
            span,
            format!(
                "every local user can create files in {} (mode {mode:04o}): one could take the \
                 admin socket's path first (the switch then cannot start) or listen there in its \
                 place (the admin verbs would send it the token): put the socket in a folder \
                 only the switch's user can write, such as /run/tcpvs",
                folder.display()
            ),
        );
    }
}

/// Warns at `span` when the file at `path` can be read by its group or by others: `what` (a
/// secret) is then theirs too. A file that cannot be looked at (rules given as text) is not
/// warned about.
pub(super) fn warn_if_readable(
    path: &Path,
    span: std::ops::Range<usize>,
    what: &str,
    fix: &str,
    sink: &mut ErrorSink<'_>,
) {
    let Ok(metadata) = std::fs::metadata(path) else {
        return;
    };
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o044 != 0 {
        let who = match (mode & 0o040 != 0, mode & 0o004 != 0) {
            (true, true) => "its group and every other user",
            (true, false) => "its group",
            _ => "every other user",
        };
        sink.warn(
            span,
            format!("{what}, which {who} can read (mode {mode:04o}): {fix}"),
        );
    }
}

/// The `[admin]` table of the rule file at `path`, read and checked alone: the command line's
/// admin verbs find the endpoint and its token with it, and the rest of the file may have
/// errors (the switch reports those when it reloads). `Ok(None)`: the file has no `[admin]`.
/// A TOML syntax error anywhere still refuses the file, as its tables cannot be told apart.
pub fn load_admin_only(path: &Path) -> Result<Option<AdminConfig>, LoadError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::Read(file.clone(), e))?;
    let mut sink = ErrorSink::new(&file, &text);
    let (doc, syntax) = toml::de::DeTable::parse_recoverable(&text);
    let admin = if syntax.is_empty() {
        super::raw::read_admin_only(&doc, &mut sink).and_then(|raw| {
            build_admin(
                &raw,
                &file,
                &text,
                &mut ListenRegistry::default(),
                &mut sink,
            )
        })
    } else {
        super::report_syntax_errors(syntax, &text, &mut sink);
        None
    };
    let (errors, _warnings) = sink.finish();
    if !errors.0.is_empty() {
        return Err(LoadError::Invalid(ConfigErrors(errors.0)));
    }
    Ok(admin)
}
