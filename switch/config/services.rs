//! The virtual services of a rule file: each `[virtual.NAME]` with its listen address, its
//! default pool and its rules (conditions compiled, pools resolved by name).

use super::error::ErrorSink;
use super::listen::{parse_listen, ListenRegistry};
use super::raw::{RawRule, RawService};
use super::{valid_name, ServiceConfig};
use crate::rules::{HeaderCondition, Rule, RuleSet};
use regex::bytes::{Regex, RegexBuilder};
use std::collections::HashMap;
use toml::Spanned;

pub(super) fn build_services(
    raw: &[(Spanned<String>, RawService)],
    pools: &HashMap<&str, usize>,
    listens: &mut ListenRegistry,
    sink: &mut ErrorSink<'_>,
) -> Vec<ServiceConfig> {
    // In file order, so that "already used" points at the later address.
    let mut services = Vec::with_capacity(raw.len());
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
            .and_then(|p| resolve_pool(p, pools, sink));
        let rules = service
            .rule
            .iter()
            .filter_map(|r| build_rule(r, pools, sink))
            .collect();
        if let Some((listen, listen_span)) = listen {
            services.push(ServiceConfig {
                name: service_name.clone(),
                listen,
                listen_at: sink.position(listen_span),
                defer_accept: service.defer_accept.unwrap_or(true),
                proxy_protocol: service.proxy_protocol.unwrap_or(false),
                rules: RuleSet::new(rules, default_pool),
            });
        }
    }
    services
}

fn resolve_pool(
    name: &Spanned<String>,
    pools: &HashMap<&str, usize>,
    sink: &mut ErrorSink<'_>,
) -> Option<usize> {
    match pools.get(name.get_ref().as_str()) {
        Some(&i) => Some(i),
        None => {
            let mut known: Vec<&str> = pools.keys().copied().collect();
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

fn build_rule(
    rule: &Spanned<RawRule>,
    pools: &HashMap<&str, usize>,
    sink: &mut ErrorSink<'_>,
) -> Option<Rule> {
    let raw = rule.get_ref();
    let pool = raw.pool.as_ref().and_then(|p| resolve_pool(p, pools, sink));
    let path = raw.path.as_ref().and_then(|p| compile(p, false, sink));
    let host = raw.host.as_ref().and_then(|h| compile(h, true, sink));
    let method = raw.method.as_ref().and_then(|m| {
        let method = m.get_ref();
        if method.is_empty() || !method.bytes().all(is_token_byte) {
            sink.at(
                m.span(),
                format!("invalid method {method:?}: a method is a token like \"GET\""),
            );
            return None;
        }
        Some(method.clone())
    });
    let header = raw.header.as_ref().and_then(|h| {
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
    });
    let conditions_ok = raw.path.is_some() == path.is_some()
        && raw.host.is_some() == host.is_some()
        && raw.method.is_some() == method.is_some()
        && raw.header.is_some() == header.is_some();
    if !conditions_ok {
        return None;
    }
    Some(Rule {
        path,
        host,
        method,
        header,
        pool: pool?,
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
