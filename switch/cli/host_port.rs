//! Addresses the admin verbs take as an operator writes them: a server as the rule file names
//! it (`127.0.0.1:9102` or `localhost:9102`), and the admin endpoint as `--admin` and
//! `TCPVS_ADMIN` give it (`HOST:PORT` or `unix:PATH`).
//!
//! Parsing only checks the shape, so that clap refuses a malformed word (exit 2) before anything
//! is sent; names are looked up when the verb runs, and a name that does not resolve is an
//! error of the verb (exit 1), said in words.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use tcpvs::admin::client::Address;

/// `IP:PORT` (`[IPv6]:PORT`) as written, or `NAME:PORT` for the system resolver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPort {
    Literal(SocketAddr),
    Name { host: String, port: u16 },
}

impl std::fmt::Display for HostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostPort::Literal(addr) => write!(f, "{addr}"),
            HostPort::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

impl std::str::FromStr for HostPort {
    type Err = String;

    fn from_str(text: &str) -> Result<HostPort, String> {
        let expected = || {
            format!(
                "{text:?} is neither IP:PORT nor NAME:PORT (like 127.0.0.1:9102, [::1]:9102 or \
                 localhost:9102)"
            )
        };
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return nonzero_port(text, addr.port()).map(|()| HostPort::Literal(addr));
        }
        let (host, port) = text.rsplit_once(':').ok_or_else(expected)?;
        // The rule files draw the same line between names and IP literals.
        if !tcpvs::config::is_resolvable_name(host) {
            return Err(expected());
        }
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(expected());
        }
        let port: u16 = port
            .parse()
            .map_err(|_| format!("{text:?}: port {port} is out of range 1..=65535"))?;
        nonzero_port(text, port)?;
        Ok(HostPort::Name {
            host: host.to_string(),
            port,
        })
    }
}

fn nonzero_port(text: &str, port: u16) -> Result<(), String> {
    if port == 0 {
        return Err(format!("{text:?} has port 0"));
    }
    Ok(())
}

impl HostPort {
    /// The socket address: the literal, or the address a rule file gets for the same name, so
    /// that `localhost:9102` here is the server that `addr = "localhost:9102"` made. A rule
    /// file takes the first IPv4 address the resolver gives, else its first address
    /// (switch/config/server_addr.rs, private to the rule files' reader); the same rule is
    /// kept here.
    pub fn resolve(&self) -> Result<SocketAddr, String> {
        let (host, port) = match self {
            HostPort::Literal(addr) => return Ok(*addr),
            HostPort::Name { host, port } => (host.as_str(), *port),
        };
        let resolved: Vec<SocketAddr> = match (host, port).to_socket_addrs() {
            Ok(addrs) => addrs.collect(),
            Err(e) => {
                let text = e.to_string();
                // std says "failed to lookup address information: Name or service not known".
                let why = text
                    .strip_prefix("failed to lookup address information: ")
                    .unwrap_or(&text);
                return Err(format!("{self}: the name does not resolve ({why})"));
            }
        };
        resolved
            .iter()
            .find(|addr| addr.is_ipv4())
            .or(resolved.first())
            .copied()
            .ok_or_else(|| format!("{self}: the name resolves to no address"))
    }
}

/// Where the admin endpoint is, as `--admin` and `TCPVS_ADMIN` write it: `HOST:PORT` or
/// `unix:PATH`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAddress {
    Tcp(HostPort),
    Unix(PathBuf),
}

impl std::fmt::Display for AdminAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminAddress::Tcp(host_port) => write!(f, "{host_port}"),
            AdminAddress::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl std::str::FromStr for AdminAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<AdminAddress, String> {
        if text.starts_with("unix:") {
            return match text.parse::<Address>()? {
                Address::Unix(path) => Ok(AdminAddress::Unix(path)),
                Address::Tcp(addr) => Ok(AdminAddress::Tcp(HostPort::Literal(addr))),
            };
        }
        text.parse::<HostPort>()
            .map(AdminAddress::Tcp)
            .map_err(|_| {
                format!(
                    "{text:?} is neither HOST:PORT (127.0.0.1:9090, localhost:9090) nor unix:PATH"
                )
            })
    }
}

impl AdminAddress {
    /// The address to connect to, a name looked up now.
    pub fn resolve(&self) -> Result<Address, String> {
        match self {
            AdminAddress::Tcp(host_port) => host_port.resolve().map(Address::Tcp),
            AdminAddress::Unix(path) => Ok(Address::Unix(path.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_are_taken_as_literals_or_names() {
        let literal: SocketAddr = "127.0.0.1:9102".parse().expect("an address");
        assert_eq!("127.0.0.1:9102".parse(), Ok(HostPort::Literal(literal)));
        assert_eq!(
            "localhost:9102".parse(),
            Ok(HostPort::Name {
                host: "localhost".into(),
                port: 9102
            })
        );
        for wrong in [
            "web1",
            "localhost:",
            "localhost:x",
            ":80",
            "10.1:80",
            "::1:80",
        ] {
            assert!(wrong.parse::<HostPort>().is_err(), "{wrong}");
        }
        assert_eq!(
            "app:70000".parse::<HostPort>(),
            Err("\"app:70000\": port 70000 is out of range 1..=65535".to_string())
        );
        assert!("localhost:0".parse::<HostPort>().is_err());
    }

    #[test]
    fn admin_addresses_are_host_port_or_a_socket() {
        assert_eq!(
            "unix:/run/tcpvs/admin.sock".parse(),
            Ok(AdminAddress::Unix("/run/tcpvs/admin.sock".into()))
        );
        assert!("unix:".parse::<AdminAddress>().is_err());
        let named: AdminAddress = "localhost:9090".parse().expect("a name");
        assert_eq!(named.to_string(), "localhost:9090");
        assert!("9090".parse::<AdminAddress>().is_err());
    }
}
