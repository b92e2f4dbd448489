//! Module names as the rule file spells them, and their constructors.

use crate::clock::Clock;
use crate::options::Options;
use crate::{OptionError, OptionValue, PoolView, Scheduler};
use std::fmt;
use std::sync::Arc;

/// Every module a rule file may name.
pub const MODULE_NAMES: &[&str] = &[
    "wlc",
    "lc",
    "rr",
    "wrr",
    "lard",
    "lard-r",
    "hash",
    "source-hash",
    "cookie",
];

/// What a module is built for: the pool's servers, their stable identities (addresses, used
/// where placement must not depend on list order, such as hash rings and cookie ids) and the
/// clock.
#[derive(Clone)]
pub struct BuildContext<'a> {
    pub pool: PoolView<'a>,
    pub server_ids: &'a [String],
    pub clock: Arc<dyn Clock>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum BuildError {
    UnknownModule(String),
    BadOption(OptionError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::UnknownModule(name) => {
                write!(
                    f,
                    "unknown scheduler `{name}` (known: {})",
                    MODULE_NAMES.join(", ")
                )
            }
            BuildError::BadOption(e) => f.write_str(&e.message),
        }
    }
}

/// Builds the module `name` with the rule file's `options` (key, value pairs, in file order).
pub fn build(
    name: &str,
    options: &[(String, OptionValue)],
    context: &BuildContext<'_>,
) -> Result<Box<dyn Scheduler>, BuildError> {
    let Some(&module) = MODULE_NAMES.iter().find(|&&m| m == name) else {
        return Err(BuildError::UnknownModule(name.to_string()));
    };
    let mut o = Options::new(module, options);
    let pool = &context.pool;
    let built: Box<dyn Scheduler> = match module {
        "wlc" => Box::new(crate::wlc::WeightedLeastConnection::new(pool)),
        "lc" => Box::new(crate::lc::LeastConnection::new(pool)),
        "rr" => Box::new(crate::rr::RoundRobin::new()),
        "wrr" => Box::new(crate::wrr::WeightedRoundRobin::new()),
        "lard" => Box::new(crate::lard::Lard::build(&mut o, context)?),
        "lard-r" => Box::new(crate::lard_r::LardReplicated::build(&mut o, context)?),
        "hash" => Box::new(crate::hash::ConsistentHash::build(
            &mut o,
            pool,
            context.server_ids,
        )?),
        "source-hash" => Box::new(crate::source_hash::build(&mut o, pool, context.server_ids)?),
        _ => Box::new(crate::cookie::CookiePersistence::build(
            &mut o, context, build,
        )?),
    };
    o.finish().map_err(BuildError::BadOption)?;
    Ok(built)
}
