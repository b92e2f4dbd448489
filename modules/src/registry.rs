//! Module names as the rule file spells them, and their constructors.

use crate::{OptionError, OptionValue, PoolView, Scheduler};
use std::fmt;

/// Every module a rule file may name, in the order `tcpvs check` lists them.
pub const MODULE_NAMES: &[&str] = &["wlc", "rr"];

#[derive(Clone, Debug, PartialEq)]
pub enum BuildError {
    UnknownModule(String),
    BadOption(OptionError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::UnknownModule(name) => write!(
                f,
                "unknown scheduler `{name}` (known: {})",
                MODULE_NAMES.join(", ")
            ),
            BuildError::BadOption(e) => f.write_str(&e.message),
        }
    }
}

/// Builds the module `name` for `pool` with the rule file's `options` (key, value pairs).
pub fn build(
    name: &str,
    options: &[(String, OptionValue)],
    pool: &PoolView<'_>,
) -> Result<Box<dyn Scheduler>, BuildError> {
    match name {
        "wlc" => {
            no_options(name, options)?;
            Ok(Box::new(crate::wlc::WeightedLeastConnection::new(pool)))
        }
        "rr" => {
            no_options(name, options)?;
            Ok(Box::new(crate::rr::RoundRobin::new()))
        }
        _ => Err(BuildError::UnknownModule(name.to_string())),
    }
}

fn no_options(module: &str, options: &[(String, OptionValue)]) -> Result<(), BuildError> {
    match options.first() {
        None => Ok(()),
        Some((key, _)) => Err(BuildError::BadOption(OptionError {
            index: 0,
            message: format!("unknown option `{key}` for scheduler `{module}` (it takes none)"),
        })),
    }
}
