//! The actions of rules (README, `[[virtual.NAME.rule]]`: routing rules): `pool` with its edits
//! (`path_rewrite`, `strip_prefix`, `request_headers`, `response_headers`, `limit`),
//! `redirect` and `respond`, and the `source` condition, each checked with its place in the
//! file. The run-time forms are policy/'s.

use super::error::ErrorSink;
use super::raw::{RawHeaderActions, RawRedirect, RawRespond, RawRule};
use crate::policy::headers::{refusal, value_refusal, HeaderActions};
use crate::policy::path::{is_path_byte, PathEdit};
use crate::policy::redirect::{self, Redirect, Scheme};
use crate::policy::respond::{has_no_content, Respond};
use crate::policy::source::SourceList;
use crate::policy::template::Template;
use crate::policy::{Action, Edits};
use std::collections::HashMap;
use toml::Spanned;

/// What the rule's action is built against: the pools and limits by name, and the number of
/// capture groups of the rule's path regex (`None`: no `path`).
pub(super) struct Names<'n> {
    pub pools: &'n HashMap<&'n str, usize>,
    pub limits: &'n HashMap<&'n str, usize>,
}

impl Names<'_> {
    /// The index of the pool `name` names; an unknown one is reported with the known ones.
    pub(super) fn pool(&self, name: &Spanned<String>, sink: &mut ErrorSink<'_>) -> Option<usize> {
        match self.pools.get(name.get_ref().as_str()) {
            Some(&i) => Some(i),
            None => {
                let mut known: Vec<&str> = self.pools.keys().copied().collect();
                known.sort_unstable();
                let known = if known.is_empty() {
                    "none defined".to_string()
                } else {
                    known.join(", ")
                };
                sink.at(
                    name.span(),
                    format!("unknown pool `{}` (pools: {known})", name.get_ref()),
                );
                None
            }
        }
    }
}

/// The rule's action; `None` when something is wrong (reported).
pub(super) fn build_action(
    raw: &RawRule,
    path_groups: Option<usize>,
    names: &Names<'_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Action> {
    if let Some(redirect) = &raw.redirect {
        refuse_pool_edits(raw, "redirect", sink);
        let built = build_redirect(redirect, path_groups, sink)?;
        return Some(Action::Redirect(Box::new(built)));
    }
    if let Some(respond) = &raw.respond {
        refuse_pool_edits(raw, "respond", sink);
        let built = build_respond(respond, sink)?;
        return Some(Action::Respond(Box::new(built)));
    }
    let pool = raw.pool.as_ref().and_then(|p| names.pool(p, sink));
    let edits = build_edits(raw, path_groups, names, sink)?;
    Some(Action::Pool {
        pool: pool?,
        edits: edits.map(Box::new),
    })
}

/// `source`: every entry a network or an address.
pub(super) fn build_source(
    source: &Spanned<Vec<Spanned<String>>>,
    sink: &mut ErrorSink<'_>,
) -> Option<SourceList> {
    let entries: Vec<&str> = source
        .get_ref()
        .iter()
        .map(|e| e.get_ref().as_str())
        .collect();
    if entries.is_empty() {
        sink.at(
            source.span(),
            "`source` is empty: list the networks the rule admits, like [\"10.0.0.0/8\"]",
        );
        return None;
    }
    match SourceList::parse(&entries) {
        Ok(list) => Some(list),
        Err(errors) => {
            for (index, why) in errors {
                sink.at(source.get_ref()[index].span(), format!("`source`: {why}"));
            }
            None
        }
    }
}

/// The keys that go beside `pool` only.
fn refuse_pool_edits(raw: &RawRule, action: &str, sink: &mut ErrorSink<'_>) {
    let beside_pool = raw.pool_edits();
    for (key, span) in beside_pool {
        if let Some(span) = span {
            sink.at(
                span,
                format!(
                    "`{key}` goes beside `pool`: a rule that answers with `{action}` sends \
                     nothing to a server"
                ),
            );
        }
    }
}

/// The edits of a `pool` rule; `Some(None)`: none.
fn build_edits(
    raw: &RawRule,
    path_groups: Option<usize>,
    names: &Names<'_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Option<Edits>> {
    let mut ok = true;
    let path = match (&raw.path_rewrite, &raw.strip_prefix) {
        (Some(_), Some(strip)) => {
            sink.at(
                strip.span(),
                "`path_rewrite` and `strip_prefix` exclude each other: a rule changes the path \
                 one way",
            );
            ok = false;
            None
        }
        (Some(rewrite), None) => {
            let built = build_path_rewrite(rewrite, path_groups, sink);
            ok &= built.is_some();
            built
        }
        (None, Some(strip)) => match PathEdit::strip_prefix(strip.get_ref()) {
            Ok(edit) => Some(edit),
            Err(why) => {
                sink.at(strip.span(), why);
                ok = false;
                None
            }
        },
        (None, None) => None,
    };
    let mut headers = |raw: &Option<Spanned<RawHeaderActions>>, key: &str| {
        let built = raw
            .as_ref()
            .map(|actions| build_header_actions(actions, key, sink));
        match built {
            Some(None) => {
                ok = false;
                None
            }
            Some(Some(actions)) => Some(actions),
            None => None,
        }
    };
    let request_headers = headers(&raw.request_headers, "request_headers");
    let response_headers = headers(&raw.response_headers, "response_headers");
    let limit = match &raw.limit {
        Some(name) => match names.limits.get(name.get_ref().as_str()) {
            Some(&index) => Some(index),
            None => {
                let mut known: Vec<&str> = names.limits.keys().copied().collect();
                known.sort_unstable();
                let known = if known.is_empty() {
                    "none defined: add a [limit.NAME] table".to_string()
                } else {
                    known.join(", ")
                };
                sink.at(
                    name.span(),
                    format!("unknown limit `{}` (limits: {known})", name.get_ref()),
                );
                ok = false;
                None
            }
        },
        None => None,
    };
    if !ok {
        return None;
    }
    let edits = Edits {
        path,
        request_headers,
        response_headers,
        limit,
        uncompressed: raw.compress.as_ref().is_some_and(|c| !*c.get_ref()),
    };
    let none = edits.path.is_none()
        && edits.request_headers.is_none()
        && edits.response_headers.is_none()
        && edits.limit.is_none()
        && !edits.uncompressed;
    Some((!none).then_some(edits))
}

/// A `$N` template checked against the path's groups; `place` names the key for messages.
fn build_template(
    text: &Spanned<String>,
    path_groups: Option<usize>,
    place: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<Template> {
    match Template::parse(text.get_ref(), path_groups) {
        Ok(template) => {
            if Template::looks_like_a_named_group(text.get_ref()) {
                sink.warn(
                    text.span(),
                    format!(
                        "{place}: a `$` before a name is taken as it is: only `$1`, `$2`, ... \
                         name the path regex's groups (write `$$` for a `$`)"
                    ),
                );
            }
            Some(template)
        }
        Err(missing) => {
            let why = match path_groups {
                None => "the rule has no `path` regex to take it from".to_string(),
                Some(0) => "the rule's `path` regex has no groups".to_string(),
                Some(1) => "the rule's `path` regex has 1 group".to_string(),
                Some(n) => format!("the rule's `path` regex has {n} groups"),
            };
            let span = text.span();
            // Past the opening quote, at the `$`.
            let at = span.start + 1 + missing.at;
            sink.at(
                at..at + 1,
                format!("{place}: `${}` names no group: {why}", missing.group),
            );
            None
        }
    }
}

fn build_path_rewrite(
    rewrite: &Spanned<String>,
    path_groups: Option<usize>,
    sink: &mut ErrorSink<'_>,
) -> Option<PathEdit> {
    let template = build_template(rewrite, path_groups, "`path_rewrite`", sink)?;
    if let Some(b) = template.literals().find(|&b| !is_path_byte(b) && b != b'$') {
        let why = if b == b'?' {
            "the query goes on as the client sent it; a rewrite changes the path only".to_string()
        } else {
            format!("{:?} cannot be in a path", b as char)
        };
        sink.at(
            rewrite.span(),
            format!("`path_rewrite` {:?}: {why}", rewrite.get_ref()),
        );
        return None;
    }
    Some(PathEdit::Rewrite(template))
}

pub(super) fn build_header_actions(
    raw: &Spanned<RawHeaderActions>,
    key: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<HeaderActions> {
    let actions = raw.get_ref();
    let mut ok = true;
    let names = actions
        .remove
        .iter()
        .chain(actions.set.iter().map(|(n, _)| n))
        .chain(actions.add.iter().map(|(n, _)| n));
    for name in names {
        if let Some(why) = refusal(name.get_ref()) {
            sink.at(name.span(), format!("`{key}`: {why}"));
            ok = false;
        }
    }
    for (_, value) in actions.set.iter().chain(&actions.add) {
        if let Some(why) = value_refusal(value.get_ref()) {
            sink.at(value.span(), format!("`{key}`: {why}"));
            ok = false;
        }
    }
    if actions.remove.is_empty() && actions.set.is_empty() && actions.add.is_empty() {
        sink.warn(
            raw.span(),
            format!("`{key}` does nothing: give it `set`, `add` or `remove`"),
        );
    }
    if !ok {
        return None;
    }
    let text = |list: &[(Spanned<String>, Spanned<String>)]| -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.get_ref().clone(), v.get_ref().clone()))
            .collect()
    };
    let remove: Vec<String> = actions.remove.iter().map(|n| n.get_ref().clone()).collect();
    Some(HeaderActions::new(
        &remove,
        &text(&actions.set),
        &text(&actions.add),
    ))
}

fn build_redirect(
    raw: &Spanned<RawRedirect>,
    path_groups: Option<usize>,
    sink: &mut ErrorSink<'_>,
) -> Option<Redirect> {
    let r = raw.get_ref();
    let mut ok = true;
    let scheme = r.scheme.as_ref().and_then(|s| {
        let parsed = Scheme::parse(s.get_ref());
        if parsed.is_none() {
            sink.at(
                s.span(),
                format!("redirect scheme {:?}: \"http\" or \"https\"", s.get_ref()),
            );
            ok = false;
        }
        parsed
    });
    let host = r.host.as_ref().and_then(|h| {
        let text = h.get_ref();
        if valid_host(text) {
            Some(text.as_str().into())
        } else {
            sink.at(
                h.span(),
                format!(
                    "redirect host {text:?} is not a host name or address (without port: \
                     give `port` apart)"
                ),
            );
            ok = false;
            None
        }
    });
    let port = r
        .port
        .as_ref()
        .and_then(|p| match u16::try_from(*p.get_ref()) {
            Ok(port) if port > 0 => Some(port),
            _ => {
                sink.at(
                    p.span(),
                    format!("redirect port {} is out of range 1..=65535", p.get_ref()),
                );
                ok = false;
                None
            }
        });
    let path = r.path.as_ref().and_then(|p| {
        let template = build_template(p, path_groups, "redirect `path`", sink);
        let bad = template.as_ref().and_then(|t| {
            t.literals()
                .find(|&b| !is_path_byte(b) && !matches!(b, b'?' | b'$'))
        });
        if let Some(b) = bad {
            sink.at(
                p.span(),
                format!(
                    "redirect path {:?}: {:?} cannot be in a path or query",
                    p.get_ref(),
                    b as char
                ),
            );
            return None;
        }
        if template.is_none() {
            ok = false;
        }
        template
    });
    if r.path.is_some() && path.is_none() {
        ok = false;
    }
    let code = match &r.code {
        None => 302,
        Some(c) => match u16::try_from(*c.get_ref()) {
            Ok(code) if redirect::CODES.contains(&code) => code,
            _ => {
                sink.at(
                    c.span(),
                    format!(
                        "redirect code {} is not a redirect: 301, 302, 303, 307 or 308",
                        c.get_ref()
                    ),
                );
                ok = false;
                302
            }
        },
    };
    if r.scheme.is_none() && r.host.is_none() && r.port.is_none() && r.path.is_none() {
        sink.at(
            raw.span(),
            "this redirect sends the client back where it was: give it a `scheme`, `host`, \
             `port` or `path`",
        );
        ok = false;
    }
    ok.then_some(Redirect {
        scheme,
        host,
        port,
        path,
        code,
    })
}

/// A host name (letters, digits, `-`, `.`), an IPv4 address, or an IPv6 one in brackets.
fn valid_host(text: &str) -> bool {
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

fn build_respond(raw: &Spanned<RawRespond>, sink: &mut ErrorSink<'_>) -> Option<Respond> {
    let r = raw.get_ref();
    let status = r.status.as_ref()?;
    let code = match u16::try_from(*status.get_ref()) {
        Ok(code) if (200..=599).contains(&code) => code,
        _ => {
            sink.at(
                status.span(),
                format!(
                    "respond status {} is out of range 200..=599",
                    status.get_ref()
                ),
            );
            return None;
        }
    };
    let body = r.body.as_ref().map_or("", |b| b.get_ref().as_str());
    if has_no_content(code) && !body.is_empty() {
        if let Some(b) = &r.body {
            sink.at(
                b.span(),
                format!("a {code} answer has no body (RFC 9110): remove `body`"),
            );
        }
        return None;
    }
    let content_type = match &r.content_type {
        Some(t) => {
            if let Some(why) = value_refusal(t.get_ref()).or_else(|| {
                t.get_ref()
                    .is_empty()
                    .then(|| "an empty content type".to_string())
            }) {
                sink.at(t.span(), format!("respond content_type: {why}"));
                return None;
            }
            Some(t.get_ref().as_str().into())
        }
        None if !body.is_empty() => Some("text/plain".into()),
        None => None,
    };
    Some(Respond {
        status: code,
        body: body.as_bytes().into(),
        content_type,
    })
}
