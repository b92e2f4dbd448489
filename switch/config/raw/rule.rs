//! A rule as written: its conditions, its action (`pool`, `redirect` or `respond`, exactly one)
//! and what goes beside `pool`.

use super::super::error::ErrorSink;
use super::super::walk::{Table, Value};
use super::policy::{read_header_actions, read_redirect, read_respond, read_source};
use super::policy::{RawHeaderActions, RawRedirect, RawRespond};
use super::{POOL_NAME, REGEX};
use toml::Spanned;

const RULE_KEYS: &[&str] = &[
    "path",
    "host",
    "method",
    "header",
    "sni",
    "source",
    "pool",
    "redirect",
    "respond",
    "path_rewrite",
    "strip_prefix",
    "request_headers",
    "response_headers",
    "limit",
    "compress",
];
const HEADER_KEYS: &[&str] = &["name", "value"];
pub(crate) struct RawRule {
    pub path: Option<Spanned<String>>,
    pub host: Option<Spanned<String>>,
    pub method: Option<Spanned<String>>,
    pub header: Option<Spanned<RawHeaderCondition>>,
    /// Regex on the TLS server name (SNI).
    pub sni: Option<Spanned<String>>,
    /// Networks the client's address must be in.
    pub source: Option<Spanned<Vec<Spanned<String>>>>,
    pub pool: Option<Spanned<String>>,
    pub redirect: Option<Spanned<RawRedirect>>,
    pub respond: Option<Spanned<RawRespond>>,
    pub path_rewrite: Option<Spanned<String>>,
    pub strip_prefix: Option<Spanned<String>>,
    pub request_headers: Option<Spanned<RawHeaderActions>>,
    pub response_headers: Option<Spanned<RawHeaderActions>>,
    pub limit: Option<Spanned<String>>,
    /// `compress = false`: the service's compression is not applied to this rule's answers.
    pub compress: Option<Spanned<bool>>,
    /// Every key of the rule was known and read: its conditions are the ones meant (a rule
    /// with a misspelt condition is no catch-all, whatever it looks like without it).
    pub whole: bool,
}

pub(crate) struct RawHeaderCondition {
    pub name: Option<Spanned<String>>,
    pub value: Option<Spanned<String>>,
}

impl RawRule {
    /// The keys that go beside `pool` only, with the spans of those given.
    pub(crate) fn pool_edits(&self) -> [(&'static str, Option<std::ops::Range<usize>>); 6] {
        [
            (
                "path_rewrite",
                self.path_rewrite.as_ref().map(Spanned::span),
            ),
            (
                "strip_prefix",
                self.strip_prefix.as_ref().map(Spanned::span),
            ),
            (
                "request_headers",
                self.request_headers.as_ref().map(Spanned::span),
            ),
            (
                "response_headers",
                self.response_headers.as_ref().map(Spanned::span),
            ),
            ("limit", self.limit.as_ref().map(Spanned::span)),
            ("compress", self.compress.as_ref().map(Spanned::span)),
        ]
    }
}

pub(super) fn read_rule(
    service: &str,
    value: &Value<'_>,
    sink: &mut ErrorSink<'_>,
) -> Option<Spanned<RawRule>> {
    let place = format!("a rule of [virtual.{service}]");
    let expected = format!("a rule table [[virtual.{service}.rule]]");
    let t = Table::of(value, "rule", &expected, place, sink)?;
    let mut whole = t.check_keys(RULE_KEYS, sink);
    let mut read = |key: &str, got: bool| whole &= got || t.get(key).is_none();
    let path = t.string("path", REGEX, sink);
    read("path", path.is_some());
    let host = t.string("host", "a regex like \"^img\\\\.\"", sink);
    read("host", host.is_some());
    let method = t.string("method", "a method like \"GET\"", sink);
    read("method", method.is_some());
    let header = t
        .table(
            "header",
            "a table like { name = \"X-Pool\", value = \"^images$\" }",
            "`header`",
            sink,
        )
        .map(|h| Spanned::new(h.span.clone(), read_header(&h, sink)));
    read(
        "header",
        header
            .as_ref()
            .is_some_and(|h| h.get_ref().name.is_some() && h.get_ref().value.is_some()),
    );
    let sni = t.string("sni", "a regex like \"^api\\\\.\"", sink);
    read("sni", sni.is_some());
    let source = read_source(&t, sink);
    read("source", source.is_some());
    let pool = t.string("pool", POOL_NAME, sink);
    let redirect = t
        .table(
            "redirect",
            "a table like { scheme = \"https\", code = 301 }",
            "`redirect`",
            sink,
        )
        .map(|r| Spanned::new(r.span.clone(), read_redirect(&r, sink)));
    let respond = t
        .table(
            "respond",
            "a table like { status = 403, body = \"forbidden\\n\" }",
            "`respond`",
            sink,
        )
        .map(|r| Spanned::new(r.span.clone(), read_respond(&r, sink)));
    let actions = [
        ("pool", t.get("pool")),
        ("redirect", t.get("redirect")),
        ("respond", t.get("respond")),
    ];
    let given: Vec<&str> = actions
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| *k)
        .collect();
    match given.as_slice() {
        [] => sink.at(
            t.span.clone(),
            format!(
                "a rule of [virtual.{service}] has no `pool`: name the pool its requests go \
                 to (or answer them with `redirect` or `respond`)"
            ),
        ),
        [_] => {}
        [first, rest @ ..] => {
            for key in rest {
                if let Some(value) = t.get(key) {
                    sink.at(
                        value.span(),
                        format!("a rule has one action: `{first}` and `{key}` exclude each other"),
                    );
                }
            }
        }
    }
    let path_rewrite = t.string("path_rewrite", "a path like \"/img/$1\"", sink);
    let strip_prefix = t.string("strip_prefix", "a path like \"/images\"", sink);
    let request_headers = read_header_actions(&t, "request_headers", sink);
    let response_headers = read_header_actions(&t, "response_headers", sink);
    let limit = t.string("limit", "a limit name like \"per-client\"", sink);
    let compress = t
        .boolean("compress", sink)
        .zip(t.get("compress"))
        .map(|(compress, value)| Spanned::new(value.span(), compress));
    Some(Spanned::new(
        t.span.clone(),
        RawRule {
            path,
            host,
            method,
            header,
            sni,
            source,
            pool,
            redirect,
            respond,
            path_rewrite,
            strip_prefix,
            request_headers,
            response_headers,
            limit,
            compress,
            whole,
        },
    ))
}

fn read_header(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawHeaderCondition {
    t.check_keys(HEADER_KEYS, sink);
    let name = t.string("name", "a header name like \"X-Pool\"", sink);
    let value = t.string("value", REGEX, sink);
    for (key, got) in [("name", t.get("name")), ("value", t.get("value"))] {
        if got.is_none() {
            sink.at(
                t.span.clone(),
                format!(
                    "`header` has no `{key}`: write {{ name = \"X-Pool\", value = \"^images$\" }}"
                ),
            );
        }
    }
    RawHeaderCondition { name, value }
}
