//! The virtual services of a rule file: each `[virtual.NAME]` with its listen address, its
//! default pool and its rules (conditions compiled, pools resolved by name).

use super::certificates::load_certificates;
use super::error::ErrorSink;
use super::health::CheckKind;
use super::listen::{parse_listen, ListenRegistry};
use super::policy::{build_action, build_source, Names};
use super::raw::{RawHeaderCondition, RawRule, RawService};
use super::service_policy::ServicePolicy;
use super::{valid_name, PoolConfig, ServiceConfig, ServiceMode};
use crate::rules::{HeaderCondition, Rule, RuleSet};
use regex::bytes::{Regex, RegexBuilder};
use std::collections::{HashMap, HashSet};
use tcpvs_modules::OptionValue;
use toml::Spanned;

pub(super) fn build_services(
    raw: &[(Spanned<String>, RawService)],
    pool_configs: &[PoolConfig],
    names: &Names<'_>,
    listens: &mut ListenRegistry,
    file: &str,
    sink: &mut ErrorSink<'_>,
) -> Vec<ServiceConfig> {
    let pools = names.pools;
    // In file order, so that "already used" points at the later address.
    let mut services = Vec::with_capacity(raw.len());
    let mut protocols = PoolProtocols::default();
    for (name, service) in raw {
        let service_name = name.get_ref();
        if !valid_name(service_name) {
            sink.at(
                name.span(),
                format!("invalid virtual service name `{service_name}`"),
            );
        }
        let listen = service.listen.as_ref().and_then(|listen| {
            let addr = parse_listen(listen, sink)?;
            listens.claim(
                addr,
                &format!("virtual service `{service_name}`"),
                listen.span(),
                sink.source(),
                sink,
            );
            Some((addr, listen.span()))
        });
        let default_pool = service
            .default_pool
            .as_ref()
            .and_then(|p| names.pool(p, sink));
        let mode = build_mode(service, sink);
        let certificates = match (&service.tls, mode) {
            (Some(list), ServiceMode::TlsPassthrough) => {
                sink.at(
                    list.span(),
                    "`tls` and mode = \"tls-passthrough\" exclude each other: passthrough \
                     relays TLS without decrypting it, so it needs no certificate",
                );
                Vec::new()
            }
            (Some(list), ServiceMode::Http) => load_certificates(list, file, sink),
            (None, _) => Vec::new(),
        };
        protocols.check(service_name, service, mode, pool_configs, pools, sink);
        let sees = Sees {
            http: mode == ServiceMode::Http,
            sni: mode == ServiceMode::TlsPassthrough || service.tls.is_some(),
        };
        let policy = ServicePolicy::build(service, mode, file, sink);
        let rules = service
            .rule
            .iter()
            .filter_map(|r| build_rule(r, names, sees, sink))
            .map(|mut rule| {
                policy.compose_into(&mut rule.action);
                rule
            })
            .collect();
        let max_conns_per_source =
            service
                .max_conns_per_source
                .as_ref()
                .and_then(|m| match u32::try_from(*m.get_ref()) {
                    Ok(n) if n <= 1_000_000 => Some(n),
                    _ => {
                        sink.at(
                            m.span(),
                            format!(
                                "max_conns_per_source = {} is out of range 0..=1000000 (0: no cap)",
                                m.get_ref()
                            ),
                        );
                        None
                    }
                });
        let compress = service
            .compress
            .as_ref()
            .and_then(|(_, raw)| super::compress::build_compress(raw, sink));
        if service.compress.is_none() {
            for rule in &service.rule {
                if let Some(given) = &rule.get_ref().compress {
                    sink.warn(
                        given.span(),
                        format!(
                            "`compress` has no effect: [virtual.{service_name}] has no \
                             [virtual.{service_name}.compress] table"
                        ),
                    );
                }
            }
        }
        if let Some((listen, listen_span)) = listen {
            services.push(ServiceConfig {
                name: service_name.clone(),
                listen,
                listen_at: sink.position(listen_span),
                defer_accept: service.defer_accept.unwrap_or(true),
                proxy_protocol: service.proxy_protocol.unwrap_or(false),
                connect: service.connect.unwrap_or(false),
                http2: service.http2.unwrap_or(true),
                max_conns_per_source: max_conns_per_source.unwrap_or(0),
                mode,
                certificates,
                compress,
                rules: RuleSet::new(rules, default_pool).with_default_edits(policy.default_edits()),
                own_answers: policy.own_answers,
            });
        }
    }
    services
}

/// Which protocol each pool's servers are spoken to in, by the first service that uses it:
/// HTTP, or TLS relayed undecrypted. A pool cannot be both, and a passthrough pool's servers
/// cannot be checked with HTTP.
#[derive(Default)]
struct PoolProtocols {
    first_user: HashMap<usize, (ServiceMode, String)>,
    reported: HashSet<usize>,
    warned: HashSet<usize>,
}

/// What a pool's module would look for in vain on a tls-passthrough connection, which shows a
/// module only its server name (as the host) and its client's address.
fn sees_nothing_of_tls(pool: &PoolConfig) -> Option<String> {
    let keyed = ["hash", "lard", "lard-r"];
    if pool.scheduler == "cookie" {
        return Some(
            "uses `cookie`, but tls-passthrough connections carry no cookies it can read: each \
             connection is placed by its `inner` module"
                .to_string(),
        );
    }
    if !keyed.contains(&pool.scheduler.as_str()) {
        return None;
    }
    let key = pool
        .options
        .iter()
        .find(|(name, _)| name == "key")
        .and_then(|(_, value)| match value {
            OptionValue::String(key) => Some(key.as_str()),
            _ => None,
        })
        .unwrap_or("path");
    (!matches!(key, "host" | "source")).then(|| {
        format!(
            "keys `{}` by {key:?}, which a tls-passthrough connection does not have: each \
             connection is placed as a request without its key (by its client's address); \
             key = \"host\" keys by the server name",
            pool.scheduler
        )
    })
}

impl PoolProtocols {
    fn check(
        &mut self,
        service_name: &str,
        service: &RawService,
        mode: ServiceMode,
        pool_configs: &[PoolConfig],
        pools: &HashMap<&str, usize>,
        sink: &mut ErrorSink<'_>,
    ) {
        let references = service.default_pool.iter().chain(
            service
                .rule
                .iter()
                .filter_map(|r| r.get_ref().pool.as_ref()),
        );
        for reference in references {
            let Some(&index) = pools.get(reference.get_ref().as_str()) else {
                continue; // reported as unknown
            };
            let name = reference.get_ref();
            let (first_mode, first_service) = self
                .first_user
                .entry(index)
                .or_insert_with(|| (mode, service_name.to_string()))
                .clone();
            if first_mode != mode && self.reported.insert(index) {
                sink.at(
                    reference.span(),
                    format!(
                        "pool `{name}` takes {} from [virtual.{first_service}] and {} here: its \
                         servers speak one protocol; give each service its own pool",
                        first_mode.protocol(),
                        mode.protocol()
                    ),
                );
            }
            let has_tls = pool_configs.get(index).is_some_and(|p| p.tls.is_some());
            let speaks_h2 = pool_configs
                .get(index)
                .is_some_and(|p| p.protocol != crate::config::ServerProtocol::Http1);
            if mode == ServiceMode::TlsPassthrough && speaks_h2 && self.reported.insert(index) {
                sink.at(
                    reference.span(),
                    format!(
                        "pool `{name}` has a `protocol` of HTTP/2, but its servers take TLS \
                         passthrough here: the clients' bytes go to them as they came; remove \
                         `protocol`"
                    ),
                );
            }
            if mode == ServiceMode::TlsPassthrough && has_tls && self.reported.insert(index) {
                sink.at(
                    reference.span(),
                    format!(
                        "pool `{name}` has [pool.{name}.tls], but its servers take TLS                          passthrough here: the clients' TLS goes to them as it came; remove the                          table"
                    ),
                );
            }
            if mode == ServiceMode::TlsPassthrough && self.warned.insert(index) {
                if let Some(why) = pool_configs.get(index).and_then(sees_nothing_of_tls) {
                    sink.warn(reference.span(), format!("pool `{name}` {why}"));
                }
            }
            let checked_by_http = pool_configs
                .get(index)
                .is_some_and(|p| p.health.health.check == CheckKind::Http);
            if mode == ServiceMode::TlsPassthrough && checked_by_http && self.reported.insert(index)
            {
                sink.at(
                    reference.span(),
                    format!(
                        "pool `{name}` has check = \"http\", but its servers take TLS passthrough \
                         here: check them with check = \"tcp\""
                    ),
                );
            }
        }
    }
}

/// `mode`: "http" (the default) or "tls-passthrough".
fn build_mode(service: &RawService, sink: &mut ErrorSink<'_>) -> ServiceMode {
    let Some(mode) = &service.mode else {
        return ServiceMode::Http;
    };
    match mode.get_ref().as_str() {
        "http" => ServiceMode::Http,
        "tls-passthrough" => ServiceMode::TlsPassthrough,
        other => {
            sink.at(
                mode.span(),
                format!("unknown mode {other:?}: \"http\" or \"tls-passthrough\""),
            );
            ServiceMode::Http
        }
    }
}

/// What the rules of a service can look at.
#[derive(Clone, Copy)]
struct Sees {
    /// The HTTP request: path, host, method, headers.
    http: bool,
    /// A TLS server name: a TLS service's handshake, or a passthrough ClientHello.
    sni: bool,
}

fn build_rule(
    rule: &Spanned<RawRule>,
    names: &Names<'_>,
    sees: Sees,
    sink: &mut ErrorSink<'_>,
) -> Option<Rule> {
    let raw = rule.get_ref();
    refuse_unseen_conditions(raw, sees, sink);
    let sni = raw.sni.as_ref().and_then(|p| compile(p, true, sink));
    let path = raw.path.as_ref().and_then(|p| compile(p, false, sink));
    // A path that did not compile: its `$N` are not judged (no second message).
    let path_groups = path.as_ref().map(|p| p.captures_len() - 1);
    let action = if raw.path.is_some() && path.is_none() {
        None
    } else {
        build_action(raw, path_groups, names, sink)
    };
    let source = raw.source.as_ref().and_then(|s| build_source(s, sink));
    let host = raw.host.as_ref().and_then(|h| compile(h, true, sink));
    let method = raw.method.as_ref().and_then(|m| build_method(m, sink));
    let header = raw.header.as_ref().and_then(|h| build_header(h, sink));
    let conditions_ok = raw.path.is_some() == path.is_some()
        && raw.host.is_some() == host.is_some()
        && raw.method.is_some() == method.is_some()
        && raw.header.is_some() == header.is_some()
        && raw.sni.is_some() == sni.is_some()
        && raw.source.is_some() == source.is_some();
    if !conditions_ok {
        return None;
    }
    Some(Rule {
        path,
        host,
        method,
        header,
        sni,
        source,
        action: action?,
    })
}

/// Reports the conditions on what the service cannot see: the HTTP request of a
/// `tls-passthrough` service, the server name of a service without TLS.
fn refuse_unseen_conditions(raw: &RawRule, sees: Sees, sink: &mut ErrorSink<'_>) {
    if !sees.http {
        let http_conditions = [
            ("path", raw.path.as_ref().map(Spanned::span)),
            ("host", raw.host.as_ref().map(Spanned::span)),
            ("method", raw.method.as_ref().map(Spanned::span)),
            ("header", raw.header.as_ref().map(Spanned::span)),
            ("redirect", raw.redirect.as_ref().map(Spanned::span)),
            ("respond", raw.respond.as_ref().map(Spanned::span)),
        ];
        for (key, span) in http_conditions.into_iter().chain(raw.pool_edits()) {
            if let Some(span) = span {
                sink.at(
                    span,
                    format!(
                        "`{key}`: a tls-passthrough service sees no HTTP request (it does not \
                         decrypt): route by `sni` and `source`"
                    ),
                );
            }
        }
    }
    if let (Some(sni), false) = (&raw.sni, sees.sni) {
        sink.at(
            sni.span(),
            "`sni`: this service takes no TLS (no `tls` list, no mode = \"tls-passthrough\"), \
             so its connections have no server name",
        );
    }
}

/// `method`: a token like `GET`.
fn build_method(m: &Spanned<String>, sink: &mut ErrorSink<'_>) -> Option<String> {
    let method = m.get_ref();
    if method.is_empty() || !method.bytes().all(is_token_byte) {
        sink.at(
            m.span(),
            format!("invalid method {method:?}: a method is a token like \"GET\""),
        );
        return None;
    }
    Some(method.clone())
}

/// `header`: a field name and a regex its value must match.
fn build_header(
    h: &Spanned<RawHeaderCondition>,
    sink: &mut ErrorSink<'_>,
) -> Option<HeaderCondition> {
    let condition = h.get_ref();
    let name = condition.name.as_ref().and_then(|name| {
        let text = name.get_ref();
        if text.is_empty() || !text.bytes().all(is_token_byte) {
            sink.at(name.span(), format!("invalid header name {text:?}"));
            return None;
        }
        Some(text.clone())
    });
    let value = condition
        .value
        .as_ref()
        .and_then(|v| compile(v, false, sink));
    Some(HeaderCondition {
        name: name?,
        value: value?,
    })
}

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn compile(
    pattern: &Spanned<String>,
    case_insensitive: bool,
    sink: &mut ErrorSink<'_>,
) -> Option<Regex> {
    match RegexBuilder::new(pattern.get_ref())
        .case_insensitive(case_insensitive)
        .build()
    {
        Ok(r) => Some(r),
        Err(e) => {
            // The regex crate explains syntax errors over several lines with a caret; keep the
            // final "error: ..." line so each problem stays on one line.
            let text = e.to_string();
            let why = text
                .lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("error: "))
                .unwrap_or(text.lines().next().unwrap_or("invalid"));
            sink.at(
                pattern.span(),
                format!("invalid regex {:?}: {why}", pattern.get_ref()),
            );
            None
        }
    }
}
