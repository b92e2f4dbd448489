//! The rule file's policy keys as written (README, `[[virtual.NAME.rule]]` and `[limit.NAME]`):
//! a rule's `source`, `redirect`, `respond` and field actions, and the `[limit.NAME]` tables.
//! Read as the rest of raw.rs reads: every problem reported, reading goes on.

use super::super::error::ErrorSink;
use super::super::walk::{self, Table};
use super::spanned_key;
use toml::Spanned;

const REDIRECT_KEYS: &[&str] = &["scheme", "host", "port", "path", "code"];
const RESPOND_KEYS: &[&str] = &["status", "body", "content_type"];
const HEADER_ACTION_KEYS: &[&str] = &["set", "add", "remove"];
const LIMIT_KEYS: &[&str] = &[
    "key", "header", "cookie", "rate", "burst", "status", "dry_run", "max_keys", "store",
];
/// `redirect = { scheme, host, port, path, code }`.
pub(crate) struct RawRedirect {
    pub scheme: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub port: Option<Spanned<i64>>,
    pub path: Option<Spanned<String>>,
    pub code: Option<Spanned<i64>>,
}

/// `respond = { status, body, content_type }`.
pub(crate) struct RawRespond {
    pub status: Option<Spanned<i64>>,
    pub body: Option<Spanned<String>>,
    pub content_type: Option<Spanned<String>>,
}

/// `request_headers` / `response_headers`: `{ set = {..}, add = {..}, remove = [..] }`.
#[derive(Default)]
pub(crate) struct RawHeaderActions {
    pub set: Vec<(Spanned<String>, Spanned<String>)>,
    pub add: Vec<(Spanned<String>, Spanned<String>)>,
    pub remove: Vec<Spanned<String>>,
}

/// `error_pages = { 502 = "PATH", ... }`: each status as written (a key) and its file's path.
pub(crate) type RawErrorPages = Vec<(Spanned<String>, Spanned<String>)>;

/// `[limit.NAME]`.
pub(crate) struct RawLimit {
    /// The table's span, for what it lacks.
    pub span: std::ops::Range<usize>,
    pub key: Option<Spanned<String>>,
    pub header: Option<Spanned<String>>,
    pub cookie: Option<Spanned<String>>,
    pub rate: Option<Spanned<String>>,
    pub burst: Option<Spanned<i64>>,
    pub status: Option<Spanned<i64>>,
    pub dry_run: Option<bool>,
    pub max_keys: Option<Spanned<i64>>,
    pub store: Option<Spanned<String>>,
}

/// `source = ["10.0.0.0/8", "::1"]` (a single string is taken as a list of one).
pub(super) fn read_source(
    t: &Table<'_, '_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<Vec<Spanned<String>>>> {
    let expected = "a list of networks like [\"10.0.0.0/8\", \"::1\"]";
    read_string_list(t, "source", expected, sink)
}

/// A list of strings (one string alone stands for a list of it), each with its place.
pub(super) fn read_string_list(
    t: &Table<'_, '_>,
    key: &str,
    expected: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<Vec<Spanned<String>>>> {
    let value = t.get(key)?;
    match value.get_ref() {
        toml::de::DeValue::String(s) => Some(Spanned::new(
            value.span(),
            vec![Spanned::new(value.span(), s.to_string())],
        )),
        toml::de::DeValue::Array(list) => {
            let mut entries = Vec::with_capacity(list.len());
            for entry in list.iter() {
                match entry.get_ref() {
                    toml::de::DeValue::String(s) => {
                        entries.push(Spanned::new(entry.span(), s.to_string()))
                    }
                    _ => {
                        walk::wrong_type(key, expected, entry, sink);
                        return None;
                    }
                }
            }
            Some(Spanned::new(value.span(), entries))
        }
        _ => {
            walk::wrong_type(key, expected, value, sink);
            None
        }
    }
}

pub(super) fn read_redirect(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawRedirect {
    t.check_keys(REDIRECT_KEYS, sink);
    RawRedirect {
        scheme: t.string("scheme", "\"http\" or \"https\"", sink),
        host: t.string("host", "a host name like \"www.example.org\"", sink),
        port: t.integer("port", sink),
        path: t.string("path", "a path like \"/new/$1\"", sink),
        code: t.integer("code", sink),
    }
}

pub(super) fn read_respond(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawRespond {
    t.check_keys(RESPOND_KEYS, sink);
    if t.get("status").is_none() {
        sink.at(
            t.span.clone(),
            "`respond` has no `status`: write { status = 403, body = \"forbidden\\n\" }",
        );
    }
    RawRespond {
        status: t.integer("status", sink),
        body: t.string("body", "a string", sink),
        content_type: t.string("content_type", "a media type like \"text/plain\"", sink),
    }
}

/// `request_headers` or `response_headers`.
pub(super) fn read_header_actions(
    t: &Table<'_, '_>,
    key: &str,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<RawHeaderActions>> {
    let expected = "a table like { set = { \"X-A\" = \"1\" }, add = { \"Via\" = \"tcpvs\" }, remove = [\"Server\"] }";
    let table = t.table(key, expected, format!("`{key}`"), sink)?;
    table.check_keys(HEADER_ACTION_KEYS, sink);
    let mut actions = RawHeaderActions::default();
    for (which, list) in [("set", &mut actions.set), ("add", &mut actions.add)] {
        let fields = "a table of fields like { \"X-Pool\" = \"images\" }";
        if let Some(fields) = table.table(which, fields, format!("`{key}.{which}`"), sink) {
            for (name, value) in fields.entries() {
                match value.get_ref() {
                    toml::de::DeValue::String(v) => {
                        list.push((spanned_key(name), Spanned::new(value.span(), v.to_string())))
                    }
                    _ => walk::wrong_type(name.get_ref(), "a field value (a string)", value, sink),
                }
            }
        }
    }
    if let Some((list, _)) = table.array("remove", "a list of field names like [\"Server\"]", sink)
    {
        for name in list.iter() {
            match name.get_ref() {
                toml::de::DeValue::String(n) => actions
                    .remove
                    .push(Spanned::new(name.span(), n.to_string())),
                _ => walk::wrong_type("remove", "a field name (a string)", name, sink),
            }
        }
    }
    Some(Spanned::new(table.span.clone(), actions))
}

/// `error_pages` of a service; the statuses and files are judged when it is built.
pub(super) fn read_error_pages(
    t: &Table<'_, '_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<RawErrorPages>> {
    let expected = "a table like { 502 = \"errors/502.html\", 503 = \"errors/503.html\" }";
    let table = t.table("error_pages", expected, "`error_pages`", sink)?;
    let mut pages = Vec::new();
    for (status, path) in table.entries() {
        match path.get_ref() {
            toml::de::DeValue::String(p) => pages.push((
                spanned_key(status),
                Spanned::new(path.span(), p.to_string()),
            )),
            _ => walk::wrong_type(
                status.get_ref(),
                "an HTML file's path (a string)",
                path,
                sink,
            ),
        }
    }
    Some(Spanned::new(table.span.clone(), pages))
}

pub(super) fn read_limit(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawLimit {
    t.check_keys(LIMIT_KEYS, sink);
    if t.get("rate").is_none() {
        sink.at(
            t.span.clone(),
            format!("{} has no `rate`: write it like rate = \"20/s\"", t.place),
        );
    }
    RawLimit {
        span: t.span.clone(),
        key: t.string(
            "key",
            "\"source\", \"header\", \"host\", \"path\" or \"cookie\"",
            sink,
        ),
        header: t.string("header", "a header name like \"X-Api-Key\"", sink),
        cookie: t.string("cookie", "a cookie name like \"session\"", sink),
        rate: t.string(
            "rate",
            "a rate like \"20/s\", \"100/m\" or \"1000/h\"",
            sink,
        ),
        burst: t.integer("burst", sink),
        status: t.integer("status", sink),
        dry_run: t.boolean("dry_run", sink),
        max_keys: t.integer("max_keys", sink),
        store: t.string("store", "a store like \"redis://127.0.0.1:6379/0\"", sink),
    }
}
