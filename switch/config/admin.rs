//! `[admin]`: where the admin endpoint listens and the token that guards changes.

use super::error::ErrorSink;
use super::listen::{parse_listen, ListenRegistry};
use super::raw::RawAdmin;
use std::net::SocketAddr;
use std::path::Path;
use toml::Spanned;

/// The admin endpoint as configured.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminConfig {
    pub listen: SocketAddr,
    /// `Authorization: Bearer <token>` required for changes. Without one, changes are accepted
    /// only because the listener is on loopback (checked at load).
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

/// Checks `[admin]`: its address (claimed against the services' ones), its token, and that a
/// listener reachable from other hosts is not left without one.
pub(super) fn build_admin(
    admin: &RawAdmin,
    file: &str,
    text: &str,
    listens: &mut ListenRegistry,
    sink: &mut ErrorSink<'_>,
) -> Option<AdminConfig> {
    // A missing `listen` was reported when the table was read.
    let listen_at = admin.listen.as_ref();
    let listen = listen_at.and_then(|listen| {
        let addr = parse_listen(listen, sink)?;
        listens.claim(addr, "the admin endpoint", listen.span(), text, sink);
        Some(addr)
    });
    let token = match (&admin.token, &admin.token_file) {
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
            Some(value.to_string())
        }
        (None, Some(token_file)) => read_token_file(token_file, file, sink),
        (None, None) => None,
    };
    let (addr, listen_at) = (listen?, listen_at?);
    if token.is_none() && !addr.ip().is_loopback() && admin.token_file.is_none() {
        sink.at(
            listen_at.span(),
            format!(
                "the admin endpoint on {addr} is reachable from other hosts: set `token` or \
                 `token_file`, or listen on a loopback address (127.0.0.1, ::1)"
            ),
        );
        return None;
    }
    Some(AdminConfig {
        listen: addr,
        token,
    })
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
