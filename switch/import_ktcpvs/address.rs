//! Addresses as tcpvsadm reads them (`helper.c:parse_addrport`): `HOST[:PORT]`, the host by
//! `inet_aton` (octal and short forms) or the first IPv4 address of the name, the port a number
//! or a name from /etc/services (`getservbyname`).

use std::net::{Ipv4Addr, ToSocketAddrs};

use super::lex::c_number;
use super::model::Addr;

/// `parse_addrport`: the address and warnings about how it was read, or the error.
pub(super) fn parse_addrport(text: &str) -> Result<(Addr, Vec<String>), String> {
    let (host, port) = match text.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (text, None),
    };
    let mut notes = Vec::new();
    let ip = match inet_aton(host) {
        Some(ip) => {
            if ip.to_string() != host {
                notes.push(format!(
                    "KTCPVS read the address `{host}` as {ip} (inet_aton: a leading 0 is octal, 0x hexadecimal, missing parts fill the last one)"
                ));
            }
            ip
        }
        None => match resolve(host) {
            Some(ip) => {
                notes.push(format!(
                    "host name `{host}` resolves to {ip} now; KTCPVS resolved it when tcpvsadm loaded the file, and the rule file holds the address"
                ));
                ip
            }
            None => {
                return Err(format!(
                    "cannot resolve `{host}` to an IPv4 address (KTCPVS takes an IPv4 address or a host name)"
                ))
            }
        },
    };
    let port = match port {
        None => None,
        Some(p) => Some(match c_number(p, 0, 65535) {
            Some(n) => n as u16,
            None => service_port(p).ok_or_else(|| {
                format!("unknown port `{p}`: a number 0..65535 or a service name such as `www`")
            })?,
        }),
    };
    Ok((
        Addr {
            ip,
            port,
            text: text.to_string(),
        },
        notes,
    ))
}

/// glibc `inet_aton`: one to four parts, each decimal, octal (leading 0) or hexadecimal (0x);
/// the last part fills the remaining bytes.
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = s.split('.').map(c_unsigned).collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let (last, init) = parts.split_last()?;
    let room = [0xffff_ffff, 0xff_ffff, 0xffff, 0xff][init.len()];
    if *last > room || init.iter().any(|&p| p > 0xff) {
        return None;
    }
    let mut value = *last;
    for (i, part) in init.iter().enumerate() {
        value |= part << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(value as u32))
}

fn c_unsigned(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|&v| v <= u64::from(u32::MAX))
}

/// The first IPv4 address of a host name (gethostbyname takes AF_INET only).
fn resolve(host: &str) -> Option<Ipv4Addr> {
    if host.is_empty() {
        return None;
    }
    (host, 0).to_socket_addrs().ok()?.find_map(|a| match a {
        std::net::SocketAddr::V4(v4) => Some(*v4.ip()),
        std::net::SocketAddr::V6(_) => None,
    })
}

/// Port names of web services, as Debian's /etc/services (netbase) has them for TCP; names
/// not here are looked up in this machine's /etc/services, as getservbyname did.
const PORT_NAMES: &[(&str, u16)] = &[
    ("http", 80),
    ("www", 80),
    ("www-http", 80),
    ("https", 443),
    ("http-alt", 8080),
    ("webcache", 8080),
    ("tproxy", 8081),
];

fn service_port(name: &str) -> Option<u16> {
    if let Some(&(_, port)) = PORT_NAMES.iter().find(|(n, _)| *n == name) {
        return Some(port);
    }
    let services = std::fs::read_to_string("/etc/services").ok()?;
    services_lookup(&services, name)
}

/// `name` (or an alias) for TCP in the text of an /etc/services file.
fn services_lookup(services: &str, name: &str) -> Option<u16> {
    services.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let (port, proto) = words.next()?.split_once('/')?;
        let named = first == name || words.any(|alias| alias == name);
        (named && proto == "tcp")
            .then(|| port.parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_read_as_inet_aton_and_getservbyname_read_them() {
        let a = |s: &str| parse_addrport(s).map(|(a, _)| a.to_string());
        assert_eq!(a("10.0.0.1:80").unwrap(), "10.0.0.1:80");
        assert_eq!(a("127.0.0.1:www").unwrap(), "127.0.0.1:80");
        assert_eq!(a("0.0.0.0:webcache").unwrap(), "0.0.0.0:8080");
        assert_eq!(a("0.0.0.0:http-alt").unwrap(), "0.0.0.0:8080");
        assert_eq!(a("10.1:443").unwrap(), "10.0.0.1:443");
        assert_eq!(a("010.0.0.1:1").unwrap(), "8.0.0.1:1");
        assert_eq!(a("0x7f.1:2").unwrap(), "127.0.0.1:2");
        assert_eq!(a("localhost:3").unwrap(), "127.0.0.1:3");
        assert_eq!(a("10.0.0.1").unwrap(), "10.0.0.1:0");
        assert!(a("10.0.0.1:80000").is_err());
        assert!(a("10.0.0.1:no-such-port-name").is_err());
        assert_eq!(inet_aton("256.0.0.1"), None);
        assert_eq!(inet_aton("1.2.3.4.5"), None);
        assert_eq!(inet_aton("08.1.1.1"), None);
        let (_, notes) = parse_addrport("010.0.0.1:1").unwrap();
        assert!(notes[0].contains("as 8.0.0.1"), "{notes:?}");
        assert_eq!(
            services_lookup(
                "http-alt\t8080/tcp\twebcache  # caching\nfoo 1/udp\n",
                "webcache"
            ),
            Some(8080)
        );
        assert_eq!(services_lookup("foo 1/udp bar\n", "bar"), None);
    }
}
