//! The pools of a rule file: each `[pool.NAME]` with its servers, its scheduler options and
//! its health settings, the scheduler built once so that a bad option is refused at load.

use super::error::ErrorSink;
use super::raw::{self, RawPool};
use super::walk::{self, Scalar};
use super::{health, pool_tls, server_addr, valid_name, PoolConfig, ServerConfig};
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use tcpvs_modules::OptionValue;
use toml::Spanned;

pub(super) fn build_pools(
    raw: &[(Spanned<String>, RawPool)],
    file: &str,
    sink: &mut ErrorSink<'_>,
) -> Vec<PoolConfig> {
    let folder = std::path::Path::new(file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let mut pools = Vec::new();
    for (name, pool) in raw {
        let pool_span = name.span();
        let name = name.get_ref();
        if !valid_name(name) {
            sink.at(
                pool_span.clone(),
                format!("invalid pool name `{name}`: use letters, digits, `-`, `_`, `.`"),
            );
        }
        let scheduler = pool
            .scheduler
            .as_ref()
            .map_or_else(|| "wlc".to_string(), |s| s.get_ref().clone());
        let discover = super::discover::build_discover(pool, sink);
        let servers = build_servers(name, pool, sink);
        let options = build_options(pool, sink);
        let pool_health = health::build_pool_health(pool, sink);
        let plain: Vec<(String, OptionValue)> = options
            .iter()
            .map(|(k, v, _)| (k.clone(), v.clone()))
            .collect();
        let send_proxy = send_proxy_of(pool, sink);
        let (protocol, tls) = pool_tls::build_transport(pool, send_proxy.is_some(), folder, sink);
        let config = PoolConfig {
            name: name.clone(),
            scheduler,
            options: plain,
            servers,
            health: pool_health,
            send_proxy,
            request_buffer: size_or_zero(pool.request_buffer.as_ref(), "request_buffer", sink),
            response_buffer: size_or_zero(pool.response_buffer.as_ref(), "response_buffer", sink),
            tls,
            protocol,
            discover,
        };
        // Build the module once now, so an unknown name or a bad option is refused at load.
        let states = crate::config::scheduler::server_states(&config);
        let clock = Arc::new(tcpvs_modules::MonotonicClock::new());
        if let Err(e) = crate::config::scheduler::build_scheduler(&config, &states, clock) {
            let mut message = e.to_string();
            let span = match &e {
                tcpvs_modules::BuildError::BadOption(o) => {
                    options.get(o.index).map(|(key, _, span)| {
                        // A misspelt pool key reaches the module as an option; the module
                        // names an option of its own when one is closer.
                        if !o.suggests {
                            if let Some(close) = walk::suggest(key, raw::POOL_KEYS) {
                                message.push_str(&format!(": did you mean `{close}`?"));
                            }
                        }
                        span.clone()
                    })
                }
                tcpvs_modules::BuildError::UnknownModule(name) => {
                    if let Some(close) = walk::suggest(name, tcpvs_modules::MODULE_NAMES) {
                        message.push_str(&format!(": did you mean `{close}`?"));
                    }
                    pool.scheduler.as_ref().map(|s| s.span())
                }
            };
            sink.at(span.unwrap_or(pool_span), message);
        }
        pools.push(config);
    }
    pools
}

/// `send_proxy`: the PROXY protocol version each server connection starts with.
fn send_proxy_of(
    pool: &RawPool,
    sink: &mut ErrorSink<'_>,
) -> Option<crate::edge::proxy_protocol::Version> {
    let v = pool.send_proxy.as_ref()?;
    match v.get_ref().as_str() {
        "v1" => Some(crate::edge::proxy_protocol::Version::V1),
        "v2" => Some(crate::edge::proxy_protocol::Version::V2),
        other => {
            sink.at(
                v.span(),
                format!("`send_proxy`: expected \"v1\" or \"v2\", found \"{other}\""),
            );
            None
        }
    }
}

/// A size key of the pool, 0 when absent (or wrong: reported).
fn size_or_zero(v: Option<&Spanned<Scalar>>, key: &str, sink: &mut ErrorSink<'_>) -> u64 {
    super::size_of(v, key, sink).unwrap_or(0)
}

/// The servers of a pool; one that has any error is left out, after all its errors are
/// reported.
fn build_servers(pool_name: &str, pool: &RawPool, sink: &mut ErrorSink<'_>) -> Vec<ServerConfig> {
    // Missing or not a list: reported when read.
    let Some(list) = &pool.servers else {
        return Vec::new();
    };
    if list.get_ref().is_empty() && pool.discover.is_none() {
        sink.at(
            list.span(),
            format!("pool `{pool_name}` is empty: list at least one server"),
        );
    }
    let mut servers: Vec<ServerConfig> = Vec::new();
    for raw in list.get_ref() {
        // An IP literal as written; a name resolved now (at each load and reload).
        let addr = raw.addr.as_ref().and_then(|addr| {
            let resolved = server_addr::server_addr(addr, sink)?;
            Some((resolved, addr))
        });
        let weight = match &raw.weight {
            None => Some(1),
            Some(w) => match u32::try_from(*w.get_ref()) {
                Ok(w) if w <= 65_535 => Some(w),
                _ => {
                    sink.at(
                        w.span(),
                        format!("weight {} is out of range 0..=65535", w.get_ref()),
                    );
                    None
                }
            },
        };
        let max_conns = match &raw.max_conns {
            None => Some(0),
            Some(m) => match u32::try_from(*m.get_ref()) {
                Ok(m) if m <= 1_000_000 => Some(m),
                _ => {
                    sink.at(
                        m.span(),
                        format!("max_conns {} is out of range 0..=1000000", m.get_ref()),
                    );
                    None
                }
            },
        };
        let (Some((addr, written)), Some(weight), Some(max_conns)) = (addr, weight, max_conns)
        else {
            continue;
        };
        if servers.iter().any(|s| s.addr == addr) {
            // A name is shown with the address it resolved to, which is the server.
            let shown = if written.get_ref().parse::<SocketAddr>().is_ok() {
                addr.to_string()
            } else {
                format!("{} ({addr})", written.get_ref())
            };
            sink.at(
                written.span(),
                format!("server {shown} is listed twice in pool `{pool_name}`"),
            );
            continue;
        }
        // The name as written, for TLS (the name asked for and checked); none for an IP.
        let host = match server_addr::parse(written.get_ref()) {
            Ok(server_addr::Written::Name { host, .. }) => Some(host.to_string()),
            _ => None,
        };
        servers.push(ServerConfig {
            addr,
            host,
            weight,
            max_conns,
            backup: raw.backup.unwrap_or(false),
            discovered: false,
        });
    }
    servers
}

fn build_options(
    pool: &RawPool,
    sink: &mut ErrorSink<'_>,
) -> Vec<(String, OptionValue, Range<usize>)> {
    let mut options = Vec::new();
    for (key, value) in &pool.options {
        let converted = match value.get_ref() {
            Scalar::Integer(n) => OptionValue::Integer(*n),
            Scalar::Float(f) => OptionValue::Float(*f),
            Scalar::String(s) => OptionValue::String(s.clone()),
            Scalar::Boolean(b) => OptionValue::Boolean(*b),
            Scalar::Other(what) => {
                let mut message = format!(
                    "option `{}` must be a number, string or boolean, not {what}",
                    key.get_ref()
                );
                if let Some(close) = walk::suggest(key.get_ref(), raw::POOL_KEYS) {
                    message.push_str(&format!(": did you mean `{close}`?"));
                }
                sink.at(value.span(), message);
                continue;
            }
        };
        options.push((key.get_ref().clone(), converted, key.span()));
    }
    options
}
