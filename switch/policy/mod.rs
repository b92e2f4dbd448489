//! Traffic policy: what a rule does besides choosing a pool (README, `[[virtual.NAME.rule]]`:
//! routing rules, its actions). A rule has one action ([`Action`]): a pool (with the request's
//! path and fields edited on the way, and a rate limit: [`Edits`]), a redirect or an answer of
//! the switch's own. The `source` condition is here too, beside the other conditions of
//! rules.rs.
//!
//! Everything here is decided when the rule file is read (config/policy.rs builds it, with
//! `FILE:LINE:COL` for each mistake); a request only matches, fills in and copies. A rule
//! without edits holds `None` and costs the plain path one branch.

pub mod headers;
pub mod own_answers;
pub mod path;
pub mod rate_limit;
pub mod redirect;
pub mod respond;
pub mod source;
pub mod source_conns;
pub mod template;

use headers::HeaderActions;
use path::PathEdit;
use redirect::Redirect;
use respond::Respond;

/// What a rule does with the requests it matches.
#[derive(Debug)]
pub enum Action {
    /// To a pool (an index into the generation's pools).
    Pool {
        pool: usize,
        edits: Option<Box<Edits>>,
    },
    Redirect(Box<Redirect>),
    Respond(Box<Respond>),
}

impl Action {
    /// The pool a request goes to, if it goes to one.
    pub fn pool(&self) -> Option<usize> {
        match self {
            Action::Pool { pool, .. } => Some(*pool),
            _ => None,
        }
    }
}

/// What happens to a request on its way to a pool, and to its response.
#[derive(Debug, Default)]
pub struct Edits {
    pub path: Option<PathEdit>,
    pub request_headers: Option<HeaderActions>,
    pub response_headers: Option<HeaderActions>,
    /// An index into the generation's limits.
    pub limit: Option<usize>,
    /// `compress = false`: the answers are sent as the server made them, whatever the
    /// service's `[virtual.NAME.compress]`.
    pub uncompressed: bool,
}
