//! The PROXY protocol (HAProxy's proxy-protocol.txt, versions 1 and 2): a header at the start
//! of a connection naming the client an L4 director (LVS, a cloud load balancer, HAProxy in
//! `mode tcp`) accepted it from. Parsing and building are the `ppp` crate's; this file decides
//! what the switch makes of a header and bounds how much it waits for.

use std::net::SocketAddr;

/// The longest header waited for: a version 1 line is at most 107 bytes; a version 2 header
/// is 16 bytes, the addresses and TLVs, which directors keep small. Beyond this without a
/// complete header, the connection is refused.
pub const MAX_HEADER_BYTES: usize = 1024;

/// The longest version 1 line, CRLF included (proxy-protocol.txt, section 2.1).
const MAX_V1_LINE: usize = 107;

/// What the bytes at the start of a connection say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A complete header of `len` bytes. `client` is the address it names, or `None` when it
    /// names none (version 1 `UNKNOWN`, version 2 `LOCAL` such as a director's health check,
    /// or an address family other than TCP over IPv4 or IPv6): the connection's own peer then
    /// stands.
    Header {
        len: usize,
        client: Option<SocketAddr>,
        /// The address the client connected to, as the director saw it.
        destination: Option<SocketAddr>,
    },
    /// Not enough bytes yet to tell.
    Incomplete,
    /// Not a PROXY header, or a broken one: the connection is closed, never routed.
    Invalid,
}

/// Reads a header at the start of `bytes`.
pub fn read_header(bytes: &[u8]) -> Received {
    use ppp::{v2, HeaderResult, PartialResult};
    if bytes.starts_with(b"PROXY") || b"PROXY".starts_with(bytes) {
        // Version 1 ends at its first CRLF, and only there: `ppp` takes a line without one
        // (a bare LF, or what arrived so far after `UNKNOWN`) as a whole header, so the same
        // bytes would give a header of another length depending on how they arrived
        // (found by fuzzing). The line is cut here first.
        let window = &bytes[..bytes.len().min(MAX_V1_LINE)];
        return match window.windows(2).position(|w| w == b"\r\n") {
            Some(end) => read_v1_line(&bytes[..end + 2]),
            None if bytes.len() < MAX_V1_LINE => Received::Incomplete,
            None => Received::Invalid,
        };
    }
    let result = HeaderResult::parse(bytes);
    if result.is_incomplete() {
        return if bytes.len() >= MAX_HEADER_BYTES {
            Received::Invalid
        } else {
            Received::Incomplete
        };
    }
    match result {
        // Version 1 is read above; `ppp` falls back to it only for bytes that are not one.
        HeaderResult::V1(Ok(_)) => Received::Invalid,
        HeaderResult::V2(Ok(header)) => {
            let len = header.len();
            if len > bytes.len() {
                return Received::Incomplete;
            }
            let named =
                header.command == v2::Command::Proxy && header.protocol == v2::Protocol::Stream;
            let (client, destination) = match header.addresses {
                v2::Addresses::IPv4(a) if named => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                v2::Addresses::IPv6(a) if named => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                _ => (None, None),
            };
            Received::Header {
                len,
                client,
                destination,
            }
        }
        HeaderResult::V1(Err(_)) | HeaderResult::V2(Err(_)) => Received::Invalid,
    }
}

/// A complete version 1 line, CRLF included.
fn read_v1_line(line: &[u8]) -> Received {
    match ppp::v1::Header::try_from(line) {
        Ok(header) if header.header.len() == line.len() => {
            let (client, destination) = match header.addresses {
                ppp::v1::Addresses::Tcp4(a) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                ppp::v1::Addresses::Tcp6(a) => (
                    Some(SocketAddr::from((a.source_address, a.source_port))),
                    Some(SocketAddr::from((
                        a.destination_address,
                        a.destination_port,
                    ))),
                ),
                ppp::v1::Addresses::Unknown => (None, None),
            };
            Received::Header {
                len: line.len(),
                client,
                destination,
            }
        }
        _ => Received::Invalid,
    }
}

/// The version of header a pool sends its servers (`send_proxy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Appends the header that names `client`, connected to `destination`, to `out`. Addresses of
/// two families (an IPv4 client on an IPv6 listener) are both written as IPv6.
pub fn write_header(
    out: &mut Vec<u8>,
    version: Version,
    client: SocketAddr,
    destination: SocketAddr,
) {
    let (client, destination) = same_family(client, destination);
    match version {
        Version::V1 => {
            let addresses = match (client, destination) {
                (SocketAddr::V4(c), SocketAddr::V4(d)) => {
                    ppp::v1::Addresses::new_tcp4(*c.ip(), *d.ip(), c.port(), d.port())
                }
                (c, d) => ppp::v1::Addresses::new_tcp6(ipv6(c), ipv6(d), c.port(), d.port()),
            };
            out.extend_from_slice(addresses.to_string().as_bytes());
        }
        Version::V2 => {
            let header = ppp::v2::Builder::with_addresses(
                ppp::v2::Version::Two | ppp::v2::Command::Proxy,
                ppp::v2::Protocol::Stream,
                (client, destination),
            )
            .build();
            // Building writes into a vector: it cannot fail.
            if let Ok(header) = header {
                out.extend_from_slice(&header);
            }
        }
    }
}

fn same_family(a: SocketAddr, b: SocketAddr) -> (SocketAddr, SocketAddr) {
    match (a, b) {
        (SocketAddr::V4(_), SocketAddr::V4(_)) | (SocketAddr::V6(_), SocketAddr::V6(_)) => (a, b),
        _ => (
            SocketAddr::from((ipv6(a), a.port())),
            SocketAddr::from((ipv6(b), b.port())),
        ),
    }
}

fn ipv6(a: SocketAddr) -> std::net::Ipv6Addr {
    match a {
        SocketAddr::V4(a) => a.ip().to_ipv6_mapped(),
        SocketAddr::V6(a) => *a.ip(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn version_1() {
        let line = b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 443\r\nGET / HTTP/1.1\r\n";
        assert_eq!(
            read_header(line),
            Received::Header {
                len: 41,
                client: Some(addr("192.0.2.7:56324")),
                destination: Some(addr("10.0.0.1:443")),
            }
        );
        let line = b"PROXY TCP6 2001:db8::1 2001:db8::2 1000 80\r\n";
        assert!(
            matches!(read_header(line), Received::Header { client: Some(c), .. } if c == addr("[2001:db8::1]:1000"))
        );
        assert_eq!(
            read_header(b"PROXY UNKNOWN\r\n"),
            Received::Header {
                len: 15,
                client: None,
                destination: None
            }
        );
        assert_eq!(read_header(b"PROXY TCP4 192.0.2.7"), Received::Incomplete);
        assert_eq!(read_header(b"PRO"), Received::Incomplete);
        assert_eq!(
            read_header(b"PROXY TCP4 1.2.3.4 5.6.7.8 99999 1\r\n"),
            Received::Invalid
        );
        assert_eq!(read_header(b"GET / HTTP/1.1\r\n"), Received::Invalid);
    }

    #[test]
    fn version_2_round_trip_in_pieces() {
        let mut out = Vec::new();
        write_header(
            &mut out,
            Version::V2,
            addr("192.0.2.7:56324"),
            addr("10.0.0.1:443"),
        );
        out.extend_from_slice(b"GET /");
        for cut in 0..out.len() - 5 {
            assert_eq!(
                read_header(&out[..cut]),
                Received::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(
            read_header(&out),
            Received::Header {
                len: out.len() - 5,
                client: Some(addr("192.0.2.7:56324")),
                destination: Some(addr("10.0.0.1:443")),
            }
        );
        // LOCAL: a director's own connection, naming nobody.
        let local = b"\r\n\r\n\0\r\nQUIT\n\x20\x00\x00\x00";
        assert_eq!(
            read_header(local),
            Received::Header {
                len: 16,
                client: None,
                destination: None
            }
        );
    }

    #[test]
    fn version_1_written_and_mixed_families() {
        let mut out = Vec::new();
        write_header(
            &mut out,
            Version::V1,
            addr("192.0.2.7:5"),
            addr("10.0.0.1:80"),
        );
        assert_eq!(out, b"PROXY TCP4 192.0.2.7 10.0.0.1 5 80\r\n");
        out.clear();
        write_header(&mut out, Version::V1, addr("192.0.2.7:5"), addr("[::1]:80"));
        assert_eq!(out, b"PROXY TCP6 ::ffff:192.0.2.7 ::1 5 80\r\n");
    }

    #[test]
    fn a_version_1_header_ends_at_its_crlf_however_it_arrives() {
        let input = b"PROXY UNKNOWN \n\r\nGET / HTTP/1.1\r\n";
        let whole = read_header(input);
        assert_eq!(
            whole,
            Received::Header {
                len: 17,
                client: None,
                destination: None
            }
        );
        for cut in 0..17 {
            assert_eq!(
                read_header(&input[..cut]),
                Received::Incomplete,
                "cut at {cut}"
            );
        }
        assert_eq!(
            read_header(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n"),
            Received::Incomplete
        );
        assert_eq!(
            read_header(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\nGET"),
            Received::Incomplete
        );
    }

    #[test]
    fn an_endless_header_is_refused() {
        let mut line = b"PROXY TCP4 ".to_vec();
        line.resize(MAX_HEADER_BYTES, b'1');
        assert_eq!(read_header(&line), Received::Invalid);
    }
}
