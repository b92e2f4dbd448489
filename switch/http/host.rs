//! Host syntax (RFC 3986 section 3.2): the host of a `Host` field, an absolute-form target's
//! authority or a CONNECT target, with the port removed, or `None` when it is not well formed
//! (which RFC 9112 section 3.2 answers with 400); and the host's normal form, the one rules,
//! limit keys and the pools' modules compare ([`normal_host`]).
//!
//! `Admin.Example.Org.` and `admin.example.org` name one site: DNS names are case-insensitive
//! (RFC 4343) and a trailing dot only says the name is fully qualified, and the servers behind
//! read them alike (nginx's `ngx_http_validate_host` and Apache's `fix_hostname` lower the
//! case and take one trailing dot off before they choose a virtual host). A `host` rule or a
//! `key = "host"` limit that saw the host as sent would let the dotted or upper-case spelling
//! past a rule written for the plain one, to the same virtual host (issue 42). So the switch
//! compares hosts in that form, and refuses what those servers refuse (an empty label: `a..b`,
//! a host that is only `.`), while the server still gets the host as the client sent it.

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
    let host_ok = host.first() == Some(&b'[') || (is_reg_name(host) && !has_empty_label(host));
    // An empty host with a port (`:80`) names no host at all (RFC 9110 section 4.2.3: an
    // `http` URI with an empty host is invalid); an empty Host field alone stays allowed (RFC
    // 9112 section 3.2: a target without authority).
    let named = !host.is_empty() || port.is_empty();
    (port_ok && host_ok && named).then_some(host)
}

/// Whether a reg-name has a label that is empty besides the root's (a trailing dot): `a..b`,
/// `a..`, `.`; nginx and Apache answer those 400, so no server behind reads them as a site.
/// A leading dot (`.a`), which both take, is left as it is.
fn has_empty_label(host: &[u8]) -> bool {
    host == b"." || host.windows(2).any(|pair| pair == b"..")
}

/// The longest host whose normal form is made on the stack: a DNS name is at most 253 bytes
/// (RFC 1035 section 2.3.4, without its trailing dot); longer ones are no DNS name, and pay for
/// a copy on the heap when they have upper case.
const ON_STACK: usize = 256;

/// Room for a host's normal form when it is not a slice of the host as sent (it has upper
/// case): left unused, and costing nothing, for the common host already in normal form.
#[derive(Default)]
pub struct HostScratch {
    stack: Option<[u8; ON_STACK]>,
    heap: Vec<u8>,
}

/// The normal form of `host` (a host without its port, as [`host_without_port`] gives it):
/// ASCII lower case, without one trailing dot. Rules, limit keys and the pools' modules see
/// hosts in this form, so `Admin.Example.Org.` is `admin.example.org` to each of them. A host
/// already in it (the usual one) is returned as it is, and one that only ends in a dot as a
/// shorter slice of itself; only upper case is copied, into `scratch`. IPv6 literals come out
/// with their hexadecimal digits in lower case, which is the same address.
pub fn normal_host<'a>(host: &'a [u8], scratch: &'a mut HostScratch) -> &'a [u8] {
    let host = host.strip_suffix(b".").unwrap_or(host);
    if !host.iter().any(u8::is_ascii_uppercase) {
        return host;
    }
    let lower: &mut [u8] = if host.len() <= ON_STACK {
        &mut scratch.stack.insert([0; ON_STACK])[..host.len()]
    } else {
        scratch.heap.clear();
        scratch.heap.resize(host.len(), 0);
        &mut scratch.heap
    };
    lower.copy_from_slice(host);
    lower.make_ascii_lowercase();
    lower
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The normal form of the host of `authority`, as the request parser and then the rules
    /// take it; `None` when the parser refuses it.
    fn normal(authority: &str) -> Option<String> {
        let host = host_without_port(authority.as_bytes())?;
        let mut scratch = HostScratch::default();
        Some(String::from_utf8_lossy(normal_host(host, &mut scratch)).into_owned())
    }

    #[test]
    fn case_a_trailing_dot_and_the_port_make_no_other_host() {
        for spelling in [
            "admin.example.org",
            "admin.example.org.",
            "Admin.Example.Org.",
            "ADMIN.EXAMPLE.ORG",
            "admin.example.org:80",
            "admin.example.org.:80",
            "Admin.Example.Org.:8080",
            "admin.example.org:",
        ] {
            assert_eq!(
                normal(spelling).as_deref(),
                Some("admin.example.org"),
                "{spelling}"
            );
        }
        assert_eq!(normal("[::1]:80").as_deref(), Some("[::1]"));
        assert_eq!(normal("[::FFFF:A00:1]").as_deref(), Some("[::ffff:a00:1]"));
        assert_eq!(normal("127.0.0.1.:80").as_deref(), Some("127.0.0.1"));
        // A leading dot is kept, as nginx and Apache keep it: no server reads `.a` as `a`.
        assert_eq!(normal(".a.example").as_deref(), Some(".a.example"));
    }

    /// What nginx and Apache answer 400 (an empty label) is refused before any rule sees it.
    #[test]
    fn empty_labels_are_refused() {
        for refused in [
            "admin.example.org..",
            "admin..example.org",
            "admin.example.org..:80",
            ".",
            ".:80",
            "..",
            "a...",
        ] {
            assert_eq!(normal(refused), None, "{refused}");
        }
    }

    #[test]
    fn a_host_in_normal_form_is_not_copied() {
        let mut scratch = HostScratch::default();
        let host = b"www.example.com.";
        let normal = normal_host(host, &mut scratch);
        assert_eq!(normal, b"www.example.com");
        assert!(
            std::ptr::eq(normal.as_ptr(), host.as_ptr()),
            "a slice of the host"
        );
        assert!(scratch.stack.is_none() && scratch.heap.capacity() == 0);
    }

    #[test]
    fn long_hosts_with_upper_case_are_lowered_on_the_heap() {
        for len in [ON_STACK - 1, ON_STACK, ON_STACK + 1, 5000] {
            let upper = "A".repeat(len) + ".";
            let mut scratch = HostScratch::default();
            let normal = normal_host(upper.as_bytes(), &mut scratch);
            assert_eq!(normal, "a".repeat(len).as_bytes(), "{len}");
            assert_eq!(scratch.heap.is_empty(), len <= ON_STACK, "{len}");
        }
        let mut scratch = HostScratch::default();
        assert_eq!(normal_host(b"", &mut scratch), b"");
    }
}
