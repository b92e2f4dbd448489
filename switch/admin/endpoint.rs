//! What the admin routes read and write: the switch's shared state, its reloads, the token
//! that guards changes, the rate samples.

use super::http::Request;
use super::rates::Sampler;
use crate::shared::Shared;
use crate::supervisor::ReloadHandle;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug)]
pub struct Endpoint {
    pub shared: Arc<Shared>,
    /// `POST /reload` goes there.
    pub reloads: ReloadHandle,
    /// `Authorization: Bearer <token>` needed for changes; `None`: loopback rules apply.
    pub token: Option<String>,
    pub sampler: Sampler,
    /// The rule file a reload reads again, as given to `tcpvs run` (`None`: rules built in).
    pub rule_file: Option<PathBuf>,
}

impl Endpoint {
    pub fn new(shared: Arc<Shared>, reloads: ReloadHandle, token: Option<String>) -> Endpoint {
        // The supervisor runs before the endpoint serves (gateway.rs), and its file never
        // changes; read once here rather than under the supervisor's lock at each request,
        // which a reload in progress holds.
        let rule_file = reloads.rule_file();
        Endpoint {
            shared,
            reloads,
            token,
            sampler: Sampler::default(),
            rule_file,
        }
    }

    /// The rule file as the command line compares it: its canonical path now (symbolic links
    /// resolved, so that `tcpvs reload -c` can tell whether it names this file), or the path
    /// made absolute when it cannot be resolved (removed since).
    pub fn rule_file_shown(&self) -> Option<String> {
        let file = self.rule_file.as_ref()?;
        let shown = std::fs::canonicalize(file)
            .or_else(|_| std::path::absolute(file))
            .unwrap_or_else(|_| file.clone());
        Some(shown.display().to_string())
    }

    /// Whether `request` carries the valid token (there is one, and it is this).
    pub fn carries_token(&self, request: &Request) -> bool {
        match (&self.token, bearer(request)) {
            (Some(token), Some(given)) => same_secret(given.as_bytes(), token.as_bytes()),
            _ => false,
        }
    }
}

/// The credentials of `Authorization: Bearer <credentials>`; the scheme's name is
/// case-insensitive (RFC 9110, 11.1).
pub fn bearer(request: &Request) -> Option<&str> {
    let (scheme, credentials) = request.authorization.as_deref()?.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then_some(credentials.trim())
}

/// Compares without an early exit, so the time taken does not tell how much of a guess was
/// right.
pub fn same_secret(given: &[u8], expected: &[u8]) -> bool {
    if given.len() != expected.len() {
        return false;
    }
    given
        .iter()
        .zip(expected)
        .fold(0u8, |diff, (a, b)| diff | (a ^ b))
        == 0
}
