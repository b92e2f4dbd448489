//! `[pool.NAME.tls]`, TLS to a pool's servers: its files read and checked now (a missing `ca`,
//! a `ca` without certificates, a client certificate without its key refuse the rule file at
//! that key's `FILE:LINE:COL`), `verify = false` warned, and the rustls configuration built
//! once (upstream/tls/). And the pool's `protocol`. Paths are relative to the rule file's
//! folder.

use super::error::ErrorSink;
use super::raw::{RawPool, RawPoolTls};
use super::ServerProtocol;
use crate::edge::tls::certificates::{self, Part};
use crate::upstream::tls::{PoolTls, TlsSettings};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use std::path::Path;
use std::sync::Arc;
use toml::Spanned;

/// The pool's TLS, or `None` with the errors in `sink`.
fn build_pool_tls(
    raw: &RawPoolTls,
    protocol: ServerProtocol,
    folder: &Path,
    sink: &mut ErrorSink<'_>,
) -> Option<Arc<PoolTls>> {
    let errors_before = sink.error_count();
    let ca = raw.ca.as_ref().and_then(|ca| read_ca(ca, folder, sink));
    let verify = raw.verify.as_ref().is_none_or(|v| *v.get_ref());
    if let (false, Some(span)) = (verify, raw.verify.as_ref().map(Spanned::span)) {
        sink.warn(
            span,
            "`verify = false`: any certificate is taken, so whoever is between the switch and \
             these servers can read and change their traffic; give their CA as `ca` instead",
        );
    }
    let sni = raw
        .sni
        .as_ref()
        .and_then(|sni| match ServerName::try_from(sni.get_ref().as_str()) {
            Ok(ServerName::DnsName(name)) => Some(ServerName::DnsName(name.to_owned())),
            _ => {
                sink.at(
                    sni.span(),
                    format!(
                        "`sni`: {:?} is not a server name like \"api.internal\"",
                        sni.get_ref()
                    ),
                );
                None
            }
        });
    let client_certificate = client_certificate(raw, folder, sink);
    if sink.error_count() > errors_before {
        return None;
    }
    let settings = TlsSettings {
        alpn: protocol.alpn(),
        ca,
        verify,
        sni,
        client_certificate,
    };
    match PoolTls::new(settings) {
        Ok(tls) => Some(Arc::new(tls)),
        Err(why) => {
            let span = raw.ca.as_ref().map_or(raw.span.clone(), Spanned::span);
            sink.at(span, why);
            None
        }
    }
}

/// The certificates of the `ca` file.
fn read_ca(
    ca: &Spanned<String>,
    folder: &Path,
    sink: &mut ErrorSink<'_>,
) -> Option<Vec<CertificateDer<'static>>> {
    let path = folder.join(ca.get_ref());
    let shown = path.display();
    let read = std::fs::read(&path)
        .map_err(|e| format!("cannot read CA file {shown}: {e}"))
        .and_then(|text| {
            CertificateDer::pem_slice_iter(&text)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("CA file {shown}: {e}"))
        });
    match read {
        Ok(certs) if certs.is_empty() => {
            sink.at(
                ca.span(),
                format!(
                    "CA file {shown} holds no certificate (a PEM block -----BEGIN CERTIFICATE-----)"
                ),
            );
            None
        }
        Ok(certs) => Some(certs),
        Err(why) => {
            sink.at(ca.span(), why);
            None
        }
    }
}

/// `cert` and `key`, both or neither.
fn client_certificate(
    raw: &RawPoolTls,
    folder: &Path,
    sink: &mut ErrorSink<'_>,
) -> Option<Arc<rustls::sign::CertifiedKey>> {
    match (&raw.cert, &raw.key) {
        (None, None) => None,
        (Some(cert), Some(key)) => {
            let loaded =
                certificates::load(&folder.join(cert.get_ref()), &folder.join(key.get_ref()));
            match loaded {
                Ok(certificate) => Some(certificate.key),
                Err(e) => {
                    let span = match e.part {
                        Part::Cert => cert.span(),
                        Part::Key => key.span(),
                    };
                    sink.at(span, e.message);
                    None
                }
            }
        }
        (Some(only), None) | (None, Some(only)) => {
            let (has, lacks) = match raw.cert {
                Some(_) => ("cert", "key"),
                None => ("key", "cert"),
            };
            sink.at(
                only.span(),
                format!("`{has}` without `{lacks}`: a client certificate needs both, like cert = \"client.pem\", key = \"client.key\""),
            );
            None
        }
    }
}

/// How the pool's servers are reached: `protocol`, and TLS (`[pool.NAME.tls]`). `proxied`: the
/// pool has `send_proxy`, which names one client per connection (HTTP/1.1 only).
pub(super) fn build_transport(
    pool: &RawPool,
    proxied: bool,
    folder: &Path,
    sink: &mut ErrorSink<'_>,
) -> (ServerProtocol, Option<Arc<PoolTls>>) {
    let protocol = build_protocol(pool.protocol.as_ref(), pool.tls.is_some(), sink);
    if let (true, Some(written)) = (proxied, &pool.protocol) {
        if protocol != ServerProtocol::Http1 {
            sink.at(
                written.span(),
                "`send_proxy` names one client per server connection, and an HTTP/2 \
                 connection carries many clients' requests: use one or the other",
            );
        }
    }
    let grpc_check = pool.health.as_ref().and_then(|h| h.check.as_ref());
    if let Some(check) = grpc_check.filter(|c| c.get_ref() == "grpc") {
        if protocol == ServerProtocol::Http1 {
            sink.at(
                check.span(),
                "`check = \"grpc\"` speaks gRPC, which runs over HTTP/2: give the pool \
                 `protocol = \"h2\"` (or \"auto\" over TLS)",
            );
        }
    }
    let tls = pool
        .tls
        .as_ref()
        .and_then(|tls| build_pool_tls(tls, protocol, folder, sink));
    (protocol, tls)
}

/// `protocol`: what the servers are spoken to in; `"auto"` only over TLS (ALPN chooses).
fn build_protocol(
    protocol: Option<&Spanned<String>>,
    has_tls: bool,
    sink: &mut ErrorSink<'_>,
) -> ServerProtocol {
    let Some(protocol) = protocol else {
        return ServerProtocol::Http1;
    };
    match protocol.get_ref().as_str() {
        "http/1.1" => ServerProtocol::Http1,
        "h2" => ServerProtocol::H2,
        "auto" if has_tls => ServerProtocol::Auto,
        "auto" => {
            sink.at(
                protocol.span(),
                "`protocol = \"auto\"` lets each server choose by ALPN, which needs TLS: add a \
                 [pool.NAME.tls] table, or say \"h2\" (prior knowledge) or \"http/1.1\"",
            );
            ServerProtocol::Http1
        }
        other => {
            sink.at(
                protocol.span(),
                format!("`protocol`: expected \"http/1.1\", \"h2\" or \"auto\", found {other:?}"),
            );
            ServerProtocol::Http1
        }
    }
}
