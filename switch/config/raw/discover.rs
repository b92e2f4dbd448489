//! A pool's `discover`, `interval` and `resolvers` as written (switch/discovery/).

use super::super::error::ErrorSink;
use super::super::walk::Table;
use super::policy::read_string_list;
use super::RawPool;
use std::ops::Range;
use toml::Spanned;

const DISCOVER_KEYS: &[&str] = &["dns", "srv"];

/// `discover = { dns = "NAME:PORT" }` or `{ srv = "NAME" }`, with the table's place.
pub(crate) struct RawDiscover {
    pub span: Range<usize>,
    pub dns: Option<Spanned<String>>,
    pub srv: Option<Spanned<String>>,
}

/// Reads the pool's discovery keys into `pool`.
pub(super) fn read_discovery(
    name: &str,
    t: &Table<'_, '_>,
    pool: &mut RawPool,
    sink: &mut ErrorSink<'_>,
) {
    pool.discover = t
        .table(
            "discover",
            "a table like { dns = \"api.internal:8080\" } or { srv = \"_http._tcp.api.service.consul\" }",
            format!("`discover` of [pool.{name}]"),
            sink,
        )
        .map(|d| {
            d.check_keys(DISCOVER_KEYS, sink);
            RawDiscover {
                span: d.span.clone(),
                dns: d.string("dns", "a name and port like \"api.internal:8080\"", sink),
                srv: d.string("srv", "a SRV name like \"_http._tcp.api.service.consul\"", sink),
            }
        });
    pool.interval = t.duration("interval", sink);
    pool.resolvers = read_string_list(
        t,
        "resolvers",
        "a list of addresses like [\"127.0.0.1:8600\"]",
        sink,
    );
}
