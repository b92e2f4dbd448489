//! Server addresses: `IP:PORT` as written, or `NAME:PORT` looked up with the system resolver
//! (`std::net::ToSocketAddrs`: `/etc/hosts`, then DNS, as `/etc/nsswitch.conf` says) each time
//! the file is read, so at start, at `tcpvs check` and at every reload.
//!
//! An IP literal never reaches the resolver. A name that does not resolve is an error of the
//! file. A name with several addresses gets one server, as HAProxy gives it without
//! `server-template`: the first IPv4 address if there is one, else the first address, with a
//! warning naming the others. The server is that address from then on (pool key across reloads,
//! statistics, hash placement); a name that resolves elsewhere at a reload is a new server.

use super::error::ErrorSink;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use toml::Spanned;

/// What a server address says, before any lookup.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Written<'a> {
    /// `IP:PORT` (`[IPv6]:PORT`): used as is.
    Literal(SocketAddr),
    /// `NAME:PORT`: for the resolver.
    Name { host: &'a str, port: u16 },
}

const IP_EXPECTED: &str = "expected IP:PORT like \"127.0.0.1:9001\"";
const ANY_EXPECTED: &str =
    "expected IP:PORT or NAME:PORT like \"127.0.0.1:9001\" or \"app1.internal:9001\"";

/// Reads `text` without resolving anything. The message of an `Err` follows
/// `invalid server address "TEXT": ` or is whole (port 0).
pub(super) fn parse(text: &str) -> Result<Written<'_>, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        if addr.port() == 0 {
            return Err(format!("server address {addr} has port 0"));
        }
        return Ok(Written::Literal(addr));
    }
    let invalid = |why: &str| format!("invalid server address {text:?}: {why}");
    let (host, port) = match text.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        // An IPv6 address without brackets, or without a port.
        _ => (text, None),
    };
    let unbracketed = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if looks_like_ip(unbracketed) || host.starts_with('[') {
        if let Some(port) = port_above_65535(text) {
            return Err(invalid(&format!("port {port} is out of range 1..=65535")));
        }
        // An IP literal with a missing or invalid port: the message it always had.
        return Err(invalid(IP_EXPECTED));
    }
    if !is_host_name(host) {
        return Err(invalid(ANY_EXPECTED));
    }
    let Some(port) = port else {
        return Err(invalid(&format!(
            "a port is required, like \"{host}:8080\""
        )));
    };
    match port.parse::<u16>() {
        Ok(0) if port.bytes().all(|b| b.is_ascii_digit()) => {
            Err(format!("server address {text:?} has port 0"))
        }
        Ok(port_number) if port.bytes().all(|b| b.is_ascii_digit()) => Ok(Written::Name {
            host,
            port: port_number,
        }),
        _ if port_above_65535(text).is_some() => {
            Err(invalid(&format!("port {port} is out of range 1..=65535")))
        }
        _ => Err(invalid(&format!(
            "the port {port:?} is not a number 1..=65535"
        ))),
    }
}

/// Whether `host` is a name for the resolver, as a rule file's server address may give one: a
/// host name, and nothing that could be meant as an IP literal (the admin verbs take servers
/// by the same rule).
pub fn is_resolvable_name(host: &str) -> bool {
    !looks_like_ip(host) && is_host_name(host)
}

/// The port of `HOST:PORT` when it is a whole number above 65535 (`127.0.0.1:70000`,
/// `[::1]:123456`, `app:65536`): an address whose only fault is its port, said in those words
/// rather than "expected IP:PORT", which sends the reader looking at the rest.
pub(super) fn port_above_65535(text: &str) -> Option<&str> {
    let (host, port) = text.rsplit_once(':')?;
    let number = !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit());
    let host_ok = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => v6.parse::<std::net::Ipv6Addr>().is_ok(),
        None => host.parse::<std::net::Ipv4Addr>().is_ok() || is_host_name(host),
    };
    (number && host_ok && port.parse::<u16>().is_err()).then_some(port)
}

/// An IP literal, or what can only have been meant as one (`300.1.1.1`, `::1`, `10.1`): never
/// handed to the resolver, which would read some of these its own way (`10.1` as 10.0.0.1).
fn looks_like_ip(host: &str) -> bool {
    host.parse::<IpAddr>().is_ok()
        || (host.contains(':')
            && host
                .bytes()
                .all(|b| b.is_ascii_hexdigit() || b":.[]%".contains(&b)))
        || host
            .trim_end_matches('.')
            .rsplit('.')
            .next()
            .is_some_and(|last| !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

/// A host name: dot-separated labels of letters, digits, `-` and `_` (1 to 63 each, 253 in
/// all), an optional final dot.
fn is_host_name(host: &str) -> bool {
    let name = host.strip_suffix('.').unwrap_or(host);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// The address to use out of what a name resolved to (in the resolver's order, duplicates
/// removed): the first IPv4 one if any, else the first; and the others, in order.
pub(super) fn choose(resolved: &[SocketAddr]) -> Option<(SocketAddr, Vec<SocketAddr>)> {
    let mut distinct: Vec<SocketAddr> = Vec::with_capacity(resolved.len());
    for addr in resolved {
        if !distinct.contains(addr) {
            distinct.push(*addr);
        }
    }
    let chosen = distinct
        .iter()
        .find(|a| a.is_ipv4())
        .or(distinct.first())
        .copied()?;
    distinct.retain(|a| *a != chosen);
    Some((chosen, distinct))
}

/// The warning for a name that resolved to `chosen` and `others`.
pub(super) fn several_addresses(text: &str, chosen: SocketAddr, others: &[SocketAddr]) -> String {
    let others: Vec<String> = others.iter().map(ToString::to_string).collect();
    format!(
        "server address {text:?}: the name resolves to {} addresses; only {chosen} is used, \
         not {} (give each address its own server to use them all)",
        others.len() + 1,
        others.join(", ")
    )
}

/// The resolver's answer for `host`, in its order; `Err` says why not, in words.
fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    match (host, port).to_socket_addrs() {
        Ok(addrs) => Ok(addrs.collect()),
        Err(e) => {
            let text = e.to_string();
            // std says "failed to lookup address information: Name or service not known".
            let why = text
                .strip_prefix("failed to lookup address information: ")
                .unwrap_or(&text);
            Err(why.to_string())
        }
    }
}

/// The address of a server as written in `addr`: parsed, resolved if it is a name, the choice
/// among several addresses warned about. Problems go to `sink`; `None` after an error.
pub(super) fn server_addr(addr: &Spanned<String>, sink: &mut ErrorSink<'_>) -> Option<SocketAddr> {
    let text = addr.get_ref();
    let (host, port) = match parse(text) {
        Ok(Written::Literal(a)) => return Some(a),
        Ok(Written::Name { host, port }) => (host, port),
        Err(message) => {
            sink.at(addr.span(), message);
            return None;
        }
    };
    let resolved = match resolve(host, port) {
        Ok(list) => list,
        Err(why) => {
            sink.at(
                addr.span(),
                format!("server address {text:?}: the name does not resolve ({why})"),
            );
            return None;
        }
    };
    let Some((chosen, others)) = choose(&resolved) else {
        sink.at(
            addr.span(),
            format!("server address {text:?}: the name resolves to no address"),
        );
        return None;
    };
    if !others.is_empty() {
        sink.warn(addr.span(), several_addresses(text, chosen, &others));
    }
    Some(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ip_literals_are_read_without_the_resolver() {
        assert_eq!(
            parse("127.0.0.1:9001"),
            Ok(Written::Literal(sa("127.0.0.1:9001")))
        );
        assert_eq!(parse("[::1]:9001"), Ok(Written::Literal(sa("[::1]:9001"))));
        assert_eq!(
            parse("127.0.0.1:0"),
            Err("server address 127.0.0.1:0 has port 0".into())
        );
    }

    #[test]
    fn an_ip_literal_with_a_bad_or_missing_port_keeps_its_message() {
        for text in [
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:http",
            "::1",
            "[::1]",
            "::1:80",
            "300.1.1.1:80",
            "10.1:80",
        ] {
            assert_eq!(
                parse(text),
                Err(format!(
                    "invalid server address {text:?}: expected IP:PORT like \"127.0.0.1:9001\""
                )),
                "{text}"
            );
        }
        // Only the port is wrong: said so.
        for (text, port) in [("127.0.0.1:90210", "90210"), ("[::1]:99999", "99999")] {
            assert_eq!(
                parse(text),
                Err(format!(
                    "invalid server address {text:?}: port {port} is out of range 1..=65535"
                ))
            );
        }
    }

    #[test]
    fn names_need_a_valid_port() {
        assert_eq!(
            parse("localhost:9001"),
            Ok(Written::Name {
                host: "localhost",
                port: 9001
            })
        );
        assert_eq!(
            parse("app1.internal.:8080"),
            Ok(Written::Name {
                host: "app1.internal.",
                port: 8080
            })
        );
        assert_eq!(
            parse("app1.internal"),
            Err("invalid server address \"app1.internal\": a port is required, like \"app1.internal:8080\"".into())
        );
        assert_eq!(
            parse("app1.internal:99999"),
            Err("invalid server address \"app1.internal:99999\": port 99999 is out of range 1..=65535".into())
        );
        for port in ["", "+80", "www", "-1"] {
            let text = format!("app1.internal:{port}");
            assert_eq!(
                parse(&text),
                Err(format!(
                    "invalid server address {text:?}: the port {port:?} is not a number 1..=65535"
                ))
            );
        }
        assert_eq!(
            parse("app1:0"),
            Err("server address \"app1:0\" has port 0".into())
        );
        for text in [
            ":80",
            "a b:80",
            "http://app1:80",
            "app1..internal:80",
            "app/1:80",
        ] {
            assert_eq!(
                parse(text),
                Err(format!(
                    "invalid server address {text:?}: expected IP:PORT or NAME:PORT like \"127.0.0.1:9001\" or \"app1.internal:9001\""
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn the_first_ipv4_address_is_chosen_else_the_first() {
        let v6 = sa("[::1]:80");
        let v6b = sa("[fd00::2]:80");
        let v4 = sa("127.0.0.1:80");
        let v4b = sa("10.0.0.2:80");
        assert_eq!(choose(&[]), None);
        assert_eq!(choose(&[v4]), Some((v4, vec![])));
        assert_eq!(choose(&[v6, v4, v6b, v4b]), Some((v4, vec![v6, v6b, v4b])));
        assert_eq!(choose(&[v6, v6b]), Some((v6, vec![v6b])));
        // The same address twice (one per socket type, say) is one address.
        assert_eq!(choose(&[v4, v6, v4]), Some((v4, vec![v6])));
        assert_eq!(
            several_addresses("app1.internal:80", v4, &[v6, v4b]),
            "server address \"app1.internal:80\": the name resolves to 3 addresses; only \
             127.0.0.1:80 is used, not [::1]:80, 10.0.0.2:80 (give each address its own server \
             to use them all)"
        );
    }

    #[test]
    fn localhost_resolves_and_invalid_names_do_not() {
        let mut sink = ErrorSink::new("t.toml", "");
        let addr = server_addr(&Spanned::new(0..0, "localhost:9001".into()), &mut sink).unwrap();
        assert!(addr.ip().is_loopback() && addr.port() == 9001, "{addr}");
        assert_eq!(
            server_addr(&Spanned::new(0..0, "nowhere.invalid:80".into()), &mut sink),
            None
        );
        let (errors, _) = sink.finish();
        assert_eq!(errors.0.len(), 1);
        assert!(
            errors.0[0]
                .message
                .starts_with("server address \"nowhere.invalid:80\": the name does not resolve ("),
            "{}",
            errors.0[0]
        );
    }
}
