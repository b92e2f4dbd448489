//! Warnings: what a rule file may say but almost surely does not mean. The file stays valid;
//! `tcpvs check` prints these (`--strict` refuses the file for them) and `tcpvs run` logs them.
//!
//! - a `method` that is not upper case: methods are case-sensitive, so it never matches a
//!   request from a normal client;
//! - a rule after a catch-all rule of the same service (one without conditions, or with only a
//!   `path` that every request path matches): it is never reached;
//! - a rule with the same conditions as an earlier rule of the same service: never reached;
//! - a pool that no rule and no `default_pool` names;
//! - a virtual service that routes nowhere: no rule and no `default_pool`, or only pools whose
//!   every server has weight 0, so that every request gets 503 (every connection is closed,
//!   under `tls-passthrough`).
//! - a pool's cookie `secret` in a rule file that other users can read (the admin token's
//!   files are looked at in admin.rs).
//!
//! Rules and services that were not read whole (an unknown or unreadable key, reported as an
//! error) are left out, so that a misspelt condition does not also make a "catch-all".

use super::error::{line_and_column, ErrorSink};
use super::raw::{RawFile, RawRule};
use toml::Spanned;

pub(super) fn lint(raw: &RawFile, file: &str, sink: &mut ErrorSink<'_>) {
    for (_, service) in &raw.services {
        lint_rules(&service.rule, sink);
    }
    unused_pools(raw, sink);
    routes_nowhere(raw, sink);
    readable_secrets(raw, file, sink);
}

/// Virtual services that cannot route a single request: no rule and no `default_pool`, or
/// every pool they name has only servers of weight 0 (quiescent: they take no new work). Such
/// a service listens, and answers every request with 503. Services and rules not read whole,
/// and references to unknown pools (errors of their own), are left out.
fn routes_nowhere(raw: &RawFile, sink: &mut ErrorSink<'_>) {
    for (name, service) in &raw.services {
        if !service.whole || service.rule.iter().any(|r| !r.get_ref().whole) {
            continue;
        }
        let passthrough = service
            .mode
            .as_ref()
            .is_some_and(|m| m.get_ref() == "tls-passthrough");
        let outcome = if passthrough {
            "every connection is closed unrouted"
        } else {
            "every request gets 503"
        };
        let name_text = name.get_ref();
        if service.rule.is_empty() && service.default_pool.is_none() {
            sink.warn(
                name.span(),
                format!(
                    "virtual service `{name_text}` routes nowhere: it has no rules and no \
                     default_pool, so {outcome}"
                ),
            );
            continue;
        }
        let mut named: Vec<&str> = Vec::new();
        let references = service
            .rule
            .iter()
            .filter_map(|r| r.get_ref().pool.as_ref());
        for reference in references.chain(&service.default_pool) {
            if !named.contains(&reference.get_ref().as_str()) {
                named.push(reference.get_ref());
            }
        }
        // A rule that answers itself (redirect, respond) routes somewhere of its own.
        let answers = service
            .rule
            .iter()
            .any(|r| r.get_ref().redirect.is_some() || r.get_ref().respond.is_some());
        let mut quiescent = !named.is_empty() && !answers;
        for pool_name in &named {
            let Some((_, pool)) = raw.pools.iter().find(|(p, _)| p.get_ref() == pool_name) else {
                quiescent = false;
                break;
            };
            let servers = pool.servers.as_ref().map(|s| s.get_ref().as_slice());
            let all_zero = servers.is_some_and(|list| {
                !list.is_empty()
                    && list
                        .iter()
                        .all(|s| s.weight.as_ref().is_some_and(|w| *w.get_ref() == 0))
            });
            quiescent &= all_zero;
        }
        if quiescent {
            let pools: Vec<String> = named.iter().map(|p| format!("`{p}`")).collect();
            let what = if pools.len() == 1 {
                "the pool it routes to"
            } else {
                "every pool it routes to"
            };
            sink.warn(
                name.span(),
                format!(
                    "virtual service `{name_text}` routes nowhere: {what} ({}) has only \
                     servers of weight 0, which take no new requests, so {outcome}",
                    pools.join(", ")
                ),
            );
        }
    }
}

/// A cookie `secret` keys the hash that names each client's server: whoever reads it can make
/// cookies that pick a server of their choosing. Its rule file should be its owner's alone.
fn readable_secrets(raw: &RawFile, file: &str, sink: &mut ErrorSink<'_>) {
    for (name, pool) in &raw.pools {
        for (key, value) in &pool.options {
            if key.get_ref() == "secret" {
                super::admin::warn_if_readable(
                    std::path::Path::new(file),
                    value.span(),
                    &format!("pool `{}`'s cookie `secret` is in this rule file", name.get_ref()),
                    "whoever reads it can make cookies that choose a server; make the file mode 600",
                    sink,
                );
            }
        }
    }
}

fn lint_rules(rules: &[Spanned<RawRule>], sink: &mut ErrorSink<'_>) {
    // The first catch-all rule, and each whole rule's conditions with its line.
    let mut catch_all: Option<(usize, String)> = None;
    let mut seen: Vec<(Conditions<'_>, usize)> = Vec::new();
    for rule in rules {
        let raw = rule.get_ref();
        if let Some(method) = &raw.method {
            let text = method.get_ref();
            if is_token(text) && text.bytes().any(|b| b.is_ascii_lowercase()) {
                sink.warn(
                    method.span(),
                    format!(
                        "method {text:?} is not upper case: methods are case-sensitive, so this \
                         rule never matches a normal request (write {:?})",
                        text.to_ascii_uppercase()
                    ),
                );
            }
        }
        if !raw.whole {
            continue;
        }
        let (line, _) = line_and_column(sink.source(), rule.span().start);
        if let Some((at, why)) = &catch_all {
            sink.warn(
                rule.span(),
                format!(
                    "this rule is never reached: the rule at line {at} matches every request \
                     ({why})"
                ),
            );
            continue;
        }
        let conditions = Conditions::of(raw);
        if let Some((_, at)) = seen.iter().find(|(c, _)| *c == conditions) {
            sink.warn(
                rule.span(),
                format!(
                    "this rule is never reached: the rule at line {at} has the same conditions"
                ),
            );
            continue;
        }
        if let Some(why) = conditions.catches_all() {
            catch_all = Some((line, why));
        }
        seen.push((conditions, line));
    }
}

/// A rule's conditions as written (the header name in lower case: names are case-insensitive).
#[derive(PartialEq)]
struct Conditions<'a> {
    path: Option<&'a str>,
    host: Option<&'a str>,
    method: Option<&'a str>,
    header: Option<(String, &'a str)>,
    sni: Option<&'a str>,
    source: Option<Vec<&'a str>>,
}

impl<'a> Conditions<'a> {
    fn of(raw: &'a RawRule) -> Conditions<'a> {
        Conditions {
            path: raw.path.as_ref().map(|p| p.get_ref().as_str()),
            host: raw.host.as_ref().map(|h| h.get_ref().as_str()),
            method: raw.method.as_ref().map(|m| m.get_ref().as_str()),
            sni: raw.sni.as_ref().map(|m| m.get_ref().as_str()),
            source: raw
                .source
                .as_ref()
                .map(|s| s.get_ref().iter().map(|e| e.get_ref().as_str()).collect()),
            header: raw.header.as_ref().and_then(|h| {
                let h = h.get_ref();
                Some((
                    h.name.as_ref()?.get_ref().to_ascii_lowercase(),
                    h.value.as_ref()?.get_ref().as_str(),
                ))
            }),
        }
    }

    /// Why a rule with these conditions matches every request, if it does.
    fn catches_all(&self) -> Option<String> {
        if self.host.is_some()
            || self.method.is_some()
            || self.header.is_some()
            || self.sni.is_some()
            || self.source.is_some()
        {
            return None;
        }
        match self.path {
            None => Some("it has no conditions".into()),
            Some(path) if matches_every_path(path) => {
                Some(format!("its path {path:?} matches every path"))
            }
            Some(_) => None,
        }
    }
}

/// Path patterns that every request path matches (a path of a normal request is never empty and
/// starts with `/`). Only the usual spellings: a regex in general is not decided.
fn matches_every_path(pattern: &str) -> bool {
    const EVERY_PATH: &[&str] = &[
        "", "^", ".*", "^.*", ".*$", "^.*$", "(.*)", "^(.*)", "^(.*)$", ".", "^.", ".+", "^.+",
        "^.+$", "/", "^/", "/.*", "^/.*", "^/.*$", "^/(.*)", "^(/.*)",
    ];
    EVERY_PATH.contains(&pattern)
}

fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Pools that no rule and no `default_pool` names. Skipped when some reference could not be
/// read or names no pool: the pool it meant would be reported as unused.
fn unused_pools(raw: &RawFile, sink: &mut ErrorSink<'_>) {
    if raw.virtual_broken {
        return;
    }
    let exists = |name: &str| raw.pools.iter().any(|(p, _)| p.get_ref() == name);
    let mut used: Vec<&str> = Vec::new();
    for (_, service) in &raw.services {
        if !service.whole {
            return;
        }
        for reference in service.default_pool.iter().chain(
            service
                .rule
                .iter()
                .filter_map(|r| r.get_ref().pool.as_ref()),
        ) {
            if !exists(reference.get_ref()) {
                return;
            }
            used.push(reference.get_ref());
        }
        if service.rule.iter().any(|r| {
            let rule = r.get_ref();
            let answers = rule.redirect.is_some() || rule.respond.is_some();
            !rule.whole || (rule.pool.is_none() && !answers)
        }) {
            return;
        }
    }
    for (name, _) in &raw.pools {
        if !used.contains(&name.get_ref().as_str()) {
            sink.warn(
                name.span(),
                format!(
                    "pool `{}` is not used: no rule and no default_pool names it",
                    name.get_ref()
                ),
            );
        }
    }
}
