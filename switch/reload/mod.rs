//! Reloading the rule file while the switch runs (SIGHUP, `POST /reload`, `tcpvs reload`):
//! read and check the whole file, plan the next generation, bind its new addresses, then commit
//! it at once. The supervisor (supervisor/) drives the three steps, one reload at a time; start-up
//! takes the same steps from an empty generation.
//!
//! - A refused reload changes nothing: the file is read and checked whole, and the plan
//!   ([`plan`]) builds the next generation's services and pools without touching any live
//!   server or the running generation; then every new address is bound on every worker
//!   (supervisor/listeners.rs), and one that cannot be bound refuses the reload with nothing
//!   changed. Only the commit (supervisor/commit.rs), which cannot fail, changes anything.
//! - Pools whose configuration did not change are kept whole. A changed pool is built anew over
//!   the servers it keeps (same pool name and address), which keep their load, statistics, idle
//!   connections, health and admin state; if its servers and module are the same (only checks,
//!   queue or slow start changed), it keeps its module too, with its state (LARD tables, hash
//!   rings) (state/pool.rs `Pool::with_servers_of`). A kept server whose line in the rule file
//!   changed takes the new line at the commit and forgets the admin's runtime changes
//!   (`Change::LineChanged`); the new pools are shown to their modules (`Change::Tick`) and
//!   their health checks start.
//! - Services keep their counters by name. Listeners whose address stays are kept, never
//!   closed; new addresses are bound (on every worker) before the commit; removed ones stop
//!   accepting after the swap and their connections end after the request in progress.
//! - Requests in flight finish under the generation they started with; a kept-alive client
//!   takes the new one at its next request (state/generation.rs `follow_reloads`).
//! - `[switch]` and `[admin]` settings are the process's: a reload that changes them reports
//!   each as needing a restart ([`restart_needed`]), and keeps the running values.
//! - A binary upgrade (upgrade.rs) hands the listening sockets and the admin socket over to a
//!   new process, which binds through the same binder, taking them instead of binding anew;
//!   the old process then stops accepting and takes no reload any more (its file is the new
//!   process's now).
//!
//! Sozu turns a new configuration into a diff of orders and Pingora swaps its backends behind
//! an `ArcSwap`; this is the same idea with one swap of the whole generation.

pub mod plan;

use crate::config::admin::AdminConfig;
use crate::config::{Config, LoadError, SwitchSettings};
use std::fmt;
use std::path::Path;

pub use plan::{Builder, Plan};

/// A reload that took effect.
#[derive(Debug)]
pub struct Reloaded {
    pub generation: u64,
    /// `[switch]`/`[admin]` keys the file changed that only a restart applies.
    pub restart_needed: Vec<String>,
}

/// A reload refused: the running configuration is unchanged.
#[derive(Debug)]
pub enum ReloadError {
    /// The rules are built in (the demo): there is no file to read again.
    NoFile,
    /// The switch is starting or stopping.
    NotRunning,
    /// The file could not be read, or has errors (each `FILE:LINE:COL: message`).
    Invalid(Vec<String>),
    /// A new listen address could not be bound.
    Listen(String),
}

impl fmt::Display for ReloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReloadError::NoFile => {
                f.write_str("the rules are built in: there is no file to reload")
            }
            ReloadError::NotRunning => f.write_str("the switch is not running"),
            ReloadError::Invalid(errors) => f.write_str(&errors.join("\n")),
            ReloadError::Listen(e) => f.write_str(e),
        }
    }
}

impl ReloadError {
    /// Every message, one per problem.
    pub fn messages(&self) -> Vec<String> {
        match self {
            ReloadError::Invalid(errors) => errors.clone(),
            other => vec![other.to_string()],
        }
    }
}

/// Logs a reload's outcome.
pub fn log(result: &Result<Reloaded, ReloadError>) {
    match result {
        Ok(done) => {
            tracing::info!("reloaded: generation {}", done.generation);
            if !done.restart_needed.is_empty() {
                tracing::warn!(
                    "reload: {} changed; it takes a restart to apply (the running value stays)",
                    done.restart_needed.join(", ")
                );
            }
        }
        Err(e) => {
            for message in e.messages() {
                tracing::error!("reload refused, the running rules stay: {message}");
            }
        }
    }
}

/// Reads and checks the rule file whole; logs its warnings.
pub fn load(file: &Path) -> Result<Config, ReloadError> {
    let config = Config::load(file).map_err(|e| match e {
        LoadError::Read(..) => ReloadError::Invalid(vec![e.to_string()]),
        LoadError::Invalid(errors) => {
            ReloadError::Invalid(errors.0.iter().map(ToString::to_string).collect())
        }
    })?;
    config.log_warnings();
    Ok(config)
}

/// The `[switch]` keys, and `[admin]`, that `config` changes from the running values: only a
/// restart applies them.
pub fn restart_needed(
    running: &SwitchSettings,
    admin: Option<&AdminConfig>,
    config: &Config,
) -> Vec<String> {
    let mut changed = changed_settings(running, &config.switch);
    if config.admin.as_ref() != admin {
        changed.push("[admin]".to_string());
    }
    changed
}

/// The `[switch]` keys whose value differs.
fn changed_settings(running: &SwitchSettings, file: &SwitchSettings) -> Vec<String> {
    let mut changed = Vec::new();
    macro_rules! compare {
        ($($key:ident),*) => {
            $(if running.$key != file.$key {
                changed.push(concat!("[switch] ", stringify!($key)).to_string());
            })*
        };
    }
    compare!(
        workers,
        max_clients,
        header_timeout,
        idle_timeout,
        keepalive_timeout,
        connect_timeout,
        shutdown_timeout,
        access_log,
        access_log_format,
        splice,
        splice_threshold,
        connect_attempts,
        server_idle_max,
        server_idle_timeout,
        cpu_affinity,
        buffer_memory,
        compress_memory,
        min_body_rate,
        trace
    );
    changed
}
