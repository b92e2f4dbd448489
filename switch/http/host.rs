//! Host syntax (RFC 3986 section 3.2): the host of a `Host` field, an absolute-form target's
//! authority or a CONNECT target, with the port removed, or `None` when it is not well formed
//! (which RFC 9112 section 3.2 answers with 400).

/// The host of `authority` (`host[:port]`, IPv6 literals in brackets) with the port removed,
/// or `None` if the authority is not well formed (RFC 3986 section 3.2).
pub(crate) fn host_without_port(authority: &[u8]) -> Option<&[u8]> {
    let (host, port) = if authority.first() == Some(&b'[') {
        let close = authority.iter().position(|&b| b == b']')?;
        let literal = &authority[1..close];
        // An IPv6 address, as std reads it (`[.:1]` is none; IPvFuture is not accepted).
        std::str::from_utf8(literal)
            .ok()?
            .parse::<std::net::Ipv6Addr>()
            .ok()?;
        (&authority[..=close], &authority[close + 1..])
    } else {
        match authority.iter().rposition(|&b| b == b':') {
            Some(colon) => (&authority[..colon], &authority[colon..]),
            None => (authority, &authority[authority.len()..]),
        }
    };
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    let host_ok = host.first() == Some(&b'[') || is_reg_name(host);
    // An empty host with a port (`:80`) names no host at all (RFC 9110 section 4.2.3: an
    // `http` URI with an empty host is invalid); an empty Host field alone stays allowed (RFC
    // 9112 section 3.2: a target without authority).
    let named = !host.is_empty() || port.is_empty();
    (port_ok && host_ok && named).then_some(host)
}

/// A reg-name: its bytes, and each `%` followed by two hexadecimal digits (RFC 3986 section
/// 3.2.2; `Host: %x` is refused, as RFC 9112 section 3.2 asks for an invalid Host).
fn is_reg_name(host: &[u8]) -> bool {
    host.iter().all(|&b| is_reg_name_byte(b))
        && host.iter().enumerate().all(|(i, &b)| {
            b != b'%'
                || host
                    .get(i + 1..i + 3)
                    .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
        })
}

/// unreserved / pct-encoded / sub-delims (RFC 3986 reg-name).
fn is_reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        )
}
