//! `[pool.NAME.tls]` as written (TLS to the pool's servers), and the pool's `protocol`.

use super::super::error::ErrorSink;
use super::super::walk::Table;
use toml::Spanned;

const POOL_TLS_KEYS: &[&str] = &["ca", "verify", "sni", "cert", "key"];

pub(crate) struct RawPoolTls {
    /// The table, for what concerns it whole (`cert` without `key`).
    pub span: std::ops::Range<usize>,
    pub ca: Option<Spanned<String>>,
    /// `verify`, and where it is written (the warning of `verify = false` points there).
    pub verify: Option<Spanned<bool>>,
    pub sni: Option<Spanned<String>>,
    pub cert: Option<Spanned<String>>,
    pub key: Option<Spanned<String>>,
}

pub(crate) fn read_pool_tls(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawPoolTls {
    t.check_keys(POOL_TLS_KEYS, sink);
    let verify = t
        .boolean("verify", sink)
        .zip(t.get("verify"))
        .map(|(verify, value)| Spanned::new(value.span(), verify));
    RawPoolTls {
        span: t.span.clone(),
        ca: t.string("ca", "a PEM file of CA certificates like \"ca.pem\"", sink),
        verify,
        sni: t.string("sni", "a server name like \"api.internal\"", sink),
        cert: t.string("cert", "a PEM file path like \"client.pem\"", sink),
        key: t.string("key", "a PEM file path like \"client.key\"", sink),
    }
}
