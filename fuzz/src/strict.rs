//! A small, strict RFC 9112 request-head parser, written for the differential target only.
//!
//! It shares no code with tcpvs (which parses with httparse) and plays the part of a careful
//! origin server reading what the switch sends it: whatever this parser refuses, or reads
//! differently from the switch, is a head the switch should not have sent.
//!
//! Grammar (RFC 9112 sections 2.2, 3, 5, 6.3; RFC 9110 sections 5.5, 5.6; RFC 3986 section 3):
//! - `request-line = method SP request-target SP HTTP-version CRLF`, no leading empty lines, no
//!   other white space, `HTTP-version` exactly `HTTP/1.0` or `HTTP/1.1`;
//! - `field-line = field-name ":" OWS field-value OWS CRLF`, no white space before the colon,
//!   no obs-fold, `field-value` of VCHAR, obs-text, SP and HTAB (none at its ends);
//! - every line ends in CRLF (a bare CR or LF anywhere is an error);
//! - request-target in origin form (RFC 3986 `absolute-path [ "?" query ]`, `%` followed by two
//!   hex digits), asterisk form (OPTIONS only), authority form (CONNECT only, `host:port`), or
//!   absolute form (`http://` / `https://`);
//! - HTTP/1.1 needs exactly one Host field, whose value is `uri-host [ ":" port ]` (or empty);
//! - framing: Transfer-Encoding with Content-Length is an error; Transfer-Encoding whose last
//!   coding is not `chunked`, or with `chunked` twice, is an error; Content-Length is a list of
//!   identical decimal numbers; none of the two: no body.

/// How the body of the parsed request is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (no framing field, or Content-Length: 0).
    None,
    Length(u64),
    Chunked,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    Origin,
    Absolute,
    Authority,
    Asterisk,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: Vec<u8>,
    pub target: Vec<u8>,
    pub form: Form,
    pub minor: u8,
    /// Field names as sent, values with the surrounding OWS removed.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub framing: Framing,
    /// Bytes of the head, final empty line included.
    pub len: usize,
}

impl Request {
    /// The values of all fields called `name` (case-insensitive), in order.
    pub fn values<'a>(&'a self, name: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

pub type Error = &'static str;

/// tchar (RFC 9110 section 5.6.2).
pub fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'!' | b'#'
                | b'$'
                | b'%'
                | b'&'
                | b'\''
                | b'*'
                | b'+'
                | b'-'
                | b'.'
                | b'^'
                | b'_'
                | b'`'
                | b'|'
                | b'~'
        )
}

fn is_token(s: &[u8]) -> bool {
    !s.is_empty() && s.iter().all(|&b| is_tchar(b))
}

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

fn is_sub_delim(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'='
    )
}

/// `s` is made of `allowed` bytes and well-formed pct-encodings only.
fn pct_chars(s: &[u8], allowed: impl Fn(u8) -> bool) -> bool {
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            if i + 2 >= s.len() {
                return false;
            }
            if !(s[i + 1].is_ascii_hexdigit() && s[i + 2].is_ascii_hexdigit()) {
                return false;
            }
            i += 3;
        } else if allowed(s[i]) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

fn is_pchar(b: u8) -> bool {
    is_unreserved(b) || is_sub_delim(b) || b == b':' || b == b'@'
}

/// `absolute-path [ "?" query ]` (RFC 9112 section 3.2.1).
fn valid_origin_form(t: &[u8]) -> bool {
    let (path, query) = match t.iter().position(|&b| b == b'?') {
        Some(q) => (&t[..q], Some(&t[q + 1..])),
        None => (t, None),
    };
    path.first() == Some(&b'/')
        && pct_chars(path, |b| is_pchar(b) || b == b'/')
        && query.is_none_or(|q| pct_chars(q, |b| is_pchar(b) || b == b'/' || b == b'?'))
}

/// `uri-host [ ":" port ]`; `port_required` for authority-form. Returns the host.
pub fn split_host_port(a: &[u8], port_required: bool) -> Result<(&[u8], Option<&[u8]>), Error> {
    split_host_port_with(a, port_required, false)
}

fn lax_reg_name_byte(b: u8) -> bool {
    is_unreserved(b) || is_sub_delim(b) || b == b'%'
}

/// [`split_host_port`], with tcpvs's looser host grammar when `lax` (see [`Tolerance`]).
pub fn split_host_port_with(
    a: &[u8],
    port_required: bool,
    lax: bool,
) -> Result<(&[u8], Option<&[u8]>), Error> {
    let (host, port) = if a.first() == Some(&b'[') {
        let close = a
            .iter()
            .position(|&b| b == b']')
            .ok_or("unclosed IP-literal")?;
        let literal = &a[1..close];
        let ok = std::str::from_utf8(literal)
            .ok()
            .and_then(|s| s.parse::<std::net::Ipv6Addr>().ok())
            .is_some()
            || (literal.first() == Some(&b'v') || literal.first() == Some(&b'V'))
            || (lax
                && !literal.is_empty()
                && literal
                    .iter()
                    .all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.'));
        if !ok {
            return Err("bad IP-literal");
        }
        match &a[close + 1..] {
            [] => (&a[..=close], None),
            [b':', port @ ..] => (&a[..=close], Some(port)),
            _ => return Err("junk after IP-literal"),
        }
    } else {
        match a.iter().position(|&b| b == b':') {
            Some(c) => (&a[..c], Some(&a[c + 1..])),
            None => (a, None),
        }
    };
    let host_ok = if lax {
        host.iter().all(|&b| lax_reg_name_byte(b))
    } else {
        pct_chars(host, |b| is_unreserved(b) || is_sub_delim(b))
    };
    if !host.starts_with(b"[") && !host_ok {
        return Err("bad reg-name");
    }
    match port {
        Some(p) if !p.iter().all(u8::is_ascii_digit) => return Err("bad port"),
        None if port_required => return Err("port required"),
        Some(p) if port_required && p.is_empty() && !lax => return Err("port required"),
        _ => {}
    }
    Ok((host, port))
}

fn field_value_ok(v: &[u8]) -> bool {
    // field-vchar = VCHAR / obs-text; SP and HTAB only inside.
    v.iter()
        .all(|&b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b) || b >= 0x80)
        && !matches!(v.first(), Some(b' ' | b'\t'))
        && !matches!(v.last(), Some(b' ' | b'\t'))
}

fn trim_ows(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

/// Splits `v` at each `sep` outside quoted strings (RFC 9110 section 5.6.4).
fn split_unquoted(v: &[u8], sep: u8) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    for (i, &b) in v.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            out.push(&v[start..i]);
            start = i + 1;
        }
    }
    out.push(&v[start..]);
    out
}

/// List elements (RFC 9110 section 5.6.1), empty ones skipped; commas inside quoted strings
/// do not split.
fn list(v: &[u8]) -> Vec<&[u8]> {
    split_unquoted(v, b',')
        .into_iter()
        .map(trim_ows)
        .filter(|e| !e.is_empty())
        .collect()
}

/// `quoted-string` (RFC 9110 section 5.6.4), whole.
fn is_quoted_string(v: &[u8]) -> bool {
    if v.len() < 2 || v[0] != b'"' || v[v.len() - 1] != b'"' {
        return false;
    }
    let inner = &v[1..v.len() - 1];
    let mut i = 0;
    while i < inner.len() {
        match inner[i] {
            b'\\' if i + 1 < inner.len() => i += 2,
            b'"' | b'\\' => return false,
            b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff => i += 1,
            _ => return false,
        }
    }
    true
}

/// `transfer-coding = token *( OWS ";" OWS transfer-parameter )`, `transfer-parameter = token
/// BWS "=" BWS ( token / quoted-string )`; returns the coding name.
fn transfer_coding_name(item: &[u8]) -> Result<&[u8], Error> {
    let parts = split_unquoted(item, b';');
    let name = trim_ows(parts[0]);
    if !is_token(name) {
        return Err("bad transfer-coding");
    }
    for p in &parts[1..] {
        let p = trim_ows(p);
        let Some(eq) = p.iter().position(|&b| b == b'=') else {
            return Err("transfer-parameter without =");
        };
        let (k, v) = (trim_ows(&p[..eq]), trim_ows(&p[eq + 1..]));
        if !is_token(k) || !(is_token(v) || is_quoted_string(v)) {
            return Err("bad transfer-parameter");
        }
    }
    Ok(name)
}

/// Known, deliberate leniencies of tcpvs that the differential target accepts, so that it
/// looks past them for framing disagreements. Each is reported in RELIABILITY.md ("Fuzzing").
#[derive(Clone, Copy, Debug, Default)]
pub struct Tolerance {
    /// Request targets in origin form (and the path of absolute form) may hold any VCHAR or
    /// obs-text byte after the `/`, not only RFC 3986 characters and well-formed `%XX`:
    /// httparse accepts `!`..=`~` and 0x80..=0xFF in targets (tcpvs then requires UTF-8) and
    /// tcpvs forwards them as sent. Finding F4 of RELIABILITY.md ("Fuzzing").
    pub lax_target: bool,
    /// A Host value (and a CONNECT target's host) may use `%` without two hex digits after it,
    /// and an IP-literal may be any hex digits, `:` and `.` in brackets (`[.:1]`): tcpvs's own
    /// check (`host_without_port` in switch/http/request.rs) is that loose, and takes `host:`
    /// as a CONNECT target with a port. Finding F2 of RELIABILITY.md ("Fuzzing").
    pub lax_host: bool,
    /// A transfer-coding may be any text up to its first `;`, and its parameters anything:
    /// tcpvs decides "chunked" by the text before `;` alone (`transfer_coding` in
    /// switch/http/fields.rs) and forwards the field as sent. This is finding F1 of
    /// RELIABILITY.md ("Fuzzing"): a server that reads `chunked;ext]1` or `x y, chunked` as invalid frames
    /// the body otherwise than the switch.
    pub lax_transfer_coding: bool,
}

/// The tolerance the differential target runs with: known findings still open are tolerated so
/// that the fuzzer looks past them for new disagreements.
/// `lax_host` (F2) and `lax_transfer_coding` (F1) were on for the runs of RELIABILITY.md ("Fuzzing"); tcpvs
/// refuses both since d44a1f0 and 7ebdfb4, so they are off: a regression is a crash again.
pub const FUZZ_TOLERANCE: Tolerance = Tolerance {
    lax_target: true,
    lax_host: false,
    lax_transfer_coding: false,
};

fn lax_origin_form(t: &[u8]) -> bool {
    t.first() == Some(&b'/') && t.iter().all(|&b| (0x21..=0x7e).contains(&b) || b >= 0x80)
}

/// Parses one request head at the start of `buf`, with no tolerance at all.
pub fn parse(buf: &[u8]) -> Result<Request, Error> {
    parse_with(buf, Tolerance::default())
}

/// Parses one request head at the start of `buf`. Only a complete head parses.
pub fn parse_with(buf: &[u8], tolerance: Tolerance) -> Result<Request, Error> {
    let origin_ok = |t: &[u8]| {
        if tolerance.lax_target {
            lax_origin_form(t)
        } else {
            valid_origin_form(t)
        }
    };
    let mut lines = Vec::new();
    let mut at = 0;
    let len = loop {
        let nl = buf[at..]
            .iter()
            .position(|&b| b == b'\n')
            .ok_or("incomplete head")?;
        let line_end = at + nl;
        if line_end == at || buf[line_end - 1] != b'\r' {
            return Err("line not ended by CRLF");
        }
        let line = &buf[at..line_end - 1];
        if line.contains(&b'\r') {
            return Err("bare CR");
        }
        at = line_end + 1;
        if line.is_empty() {
            if lines.is_empty() {
                return Err("empty line before the request line");
            }
            break at;
        }
        lines.push(line);
    };

    // Request line.
    let request_line = lines[0];
    let parts: Vec<&[u8]> = request_line.split(|&b| b == b' ').collect();
    let [method, target, version] = parts.as_slice() else {
        return Err("request line is not three parts separated by single spaces");
    };
    if !is_token(method) {
        return Err("method is not a token");
    }
    let minor = match *version {
        b"HTTP/1.1" => 1,
        b"HTTP/1.0" => 0,
        _ => return Err("version is not HTTP/1.0 or HTTP/1.1"),
    };
    let form = if *target == b"*" {
        if *method != b"OPTIONS" {
            return Err("asterisk-form outside OPTIONS");
        }
        Form::Asterisk
    } else if *method == b"CONNECT" {
        split_host_port_with(target, true, tolerance.lax_host)?;
        Form::Authority
    } else if target.first() == Some(&b'/') {
        if !origin_ok(target) {
            return Err("invalid origin-form target");
        }
        Form::Origin
    } else {
        let lower = target.to_ascii_lowercase();
        let rest = if lower.starts_with(b"http://") {
            &target[7..]
        } else if lower.starts_with(b"https://") {
            &target[8..]
        } else {
            return Err("invalid request target");
        };
        let end = rest
            .iter()
            .position(|&b| b == b'/' || b == b'?')
            .unwrap_or(rest.len());
        split_host_port_with(&rest[..end], false, tolerance.lax_host)?;
        let pq = &rest[end..];
        if !pq.is_empty() && !origin_ok(pq) {
            return Err("invalid path in absolute-form target");
        }
        Form::Absolute
    };

    // Field lines.
    let mut fields = Vec::new();
    for line in &lines[1..] {
        if matches!(line.first(), Some(b' ' | b'\t')) {
            return Err("obs-fold");
        }
        let colon = line
            .iter()
            .position(|&b| b == b':')
            .ok_or("field line without colon")?;
        let name = &line[..colon];
        if !is_token(name) {
            return Err("field name is not a token");
        }
        let value = trim_ows(&line[colon + 1..]);
        if !field_value_ok(value) {
            return Err("invalid field value");
        }
        fields.push((name.to_vec(), value.to_vec()));
    }
    let mut request = Request {
        method: method.to_vec(),
        target: target.to_vec(),
        form,
        minor,
        fields,
        framing: Framing::None,
        len,
    };

    // Host (RFC 9112 section 3.2).
    let hosts: Vec<&[u8]> = request.values(b"host").collect();
    if hosts.len() > 1 {
        return Err("more than one Host");
    }
    if minor == 1 && hosts.is_empty() {
        return Err("HTTP/1.1 without Host");
    }
    if let Some(h) = hosts.first() {
        if !h.is_empty() {
            split_host_port_with(h, false, tolerance.lax_host)?;
        }
    }

    // Framing (RFC 9112 section 6.3).
    let te: Vec<&[u8]> = request.values(b"transfer-encoding").collect();
    let cl: Vec<&[u8]> = request.values(b"content-length").collect();
    request.framing = if !te.is_empty() {
        if !cl.is_empty() {
            return Err("Transfer-Encoding and Content-Length");
        }
        if minor == 0 {
            return Err("Transfer-Encoding in HTTP/1.0");
        }
        let mut codings = Vec::new();
        for v in te {
            let items: Vec<&[u8]> = if tolerance.lax_transfer_coding {
                v.split(|&b| b == b',')
                    .map(trim_ows)
                    .filter(|e| !e.is_empty())
                    .collect()
            } else {
                list(v)
            };
            if items.is_empty() {
                return Err("empty Transfer-Encoding");
            }
            for item in items {
                let name = if tolerance.lax_transfer_coding {
                    trim_ows(item.split(|&b| b == b';').next().unwrap_or_default())
                } else {
                    transfer_coding_name(item)?
                };
                codings.push(name.to_ascii_lowercase());
            }
        }
        let chunked = codings
            .iter()
            .filter(|c| c.as_slice() == b"chunked")
            .count();
        if chunked != 1 || codings.last().map(Vec::as_slice) != Some(b"chunked") {
            return Err("chunked is not the final coding, exactly once");
        }
        Framing::Chunked
    } else if !cl.is_empty() {
        let mut n: Option<u64> = None;
        for v in cl {
            let items: Vec<&[u8]> = v.split(|&b| b == b',').map(trim_ows).collect();
            for item in items {
                if item.is_empty() || !item.iter().all(u8::is_ascii_digit) {
                    return Err("invalid Content-Length");
                }
                let mut x: u64 = 0;
                for &d in item {
                    x = x
                        .checked_mul(10)
                        .and_then(|x| x.checked_add(u64::from(d - b'0')))
                        .ok_or("Content-Length overflows")?;
                }
                if n.is_some_and(|n| n != x) {
                    return Err("different Content-Length values");
                }
                n = Some(x);
            }
        }
        match n {
            Some(0) | None => Framing::None,
            Some(n) => Framing::Length(n),
        }
    } else {
        Framing::None
    };
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_heads() {
        let r = parse(b"GET /a?b HTTP/1.1\r\nHost: x:80\r\nAccept: */*\r\n\r\nrest").unwrap();
        assert_eq!(r.method, b"GET");
        assert_eq!(r.target, b"/a?b");
        assert_eq!(r.framing, Framing::None);
        assert_eq!(r.len, 46);
        let r = parse(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
            .unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        let r = parse(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\n").unwrap();
        assert_eq!(r.framing, Framing::Length(5));
        let r = parse(
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: x;p=\";,\\\"\", chunked\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.framing, Framing::Chunked);
        let r = parse(b"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n").unwrap();
        assert_eq!(r.form, Form::Authority);
    }

    #[test]
    fn refuses_what_a_careful_server_refuses() {
        for bad in [
            &b"GET / HTTP/1.1\nHost: x\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\nHost: x\r\n X: folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
            b"GET  / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /a%2 HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3, 4\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: x\r\nX: a\rb\r\n\r\n",
            b"\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip;p=\",chunked;x=\"\r\n\r\n",
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked;ext]1\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
