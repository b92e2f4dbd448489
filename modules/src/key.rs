//! Request keys for locality and hashing modules: what part of a request names its "target".

use crate::options::Options;
use crate::{OptionError, RequestView};
use regex::bytes::Regex;
use std::net::IpAddr;
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Where a request's key comes from (`key = ...` in the pool table).
#[derive(Debug, Clone)]
pub enum KeySource {
    /// The path, query excluded (default).
    Path,
    /// Path and query.
    Uri,
    /// A capture group of a regex on the path, like KTCPVS `hhttp` (`pattern`, `group`).
    Capture { pattern: Regex, group: usize },
    /// The host the request is for, without port, lower case (a TLS passthrough connection:
    /// its ClientHello's server name).
    Host,
    /// The value of a request header (`header = "X-User"`).
    Header(String),
    /// The value of a cookie (`cookie = "session"`).
    Cookie(String),
    /// The client's IP address.
    Source,
}

impl KeySource {
    /// Reads `key` and its companion options.
    pub fn from_options(
        options: &mut Options<'_>,
        default: &'static str,
    ) -> Result<KeySource, OptionError> {
        let kind = options.choice(
            "key",
            default,
            &["path", "uri", "regex", "host", "header", "cookie", "source"],
        )?;
        let key_index = options.index_of("key").unwrap_or(0);
        // The companions of the other kinds: a misspelt one is compared with them, and one
        // given with the wrong kind is refused for that reason.
        let companions = [
            ("pattern", "regex", "with key = \"regex\""),
            ("group", "regex", "with key = \"regex\""),
            ("header", "header", "with key = \"header\""),
            ("cookie", "cookie", "with key = \"cookie\""),
        ];
        let others: Vec<(&'static str, &'static str)> = companions
            .iter()
            .filter(|(_, with, _)| *with != kind)
            .map(|(option, _, why)| (*option, *why))
            .collect();
        options.read_only(&others);
        Ok(match kind {
            "path" => KeySource::Path,
            "uri" => KeySource::Uri,
            "host" => KeySource::Host,
            "regex" => {
                let (i, text) = options.string("pattern")?.ok_or_else(|| {
                    options.error_at(
                        key_index,
                        "key = \"regex\" needs `pattern`, a regex with a capture group",
                    )
                })?;
                let pattern = Regex::new(text).map_err(|e| {
                    let why = e.to_string();
                    let last = why
                        .lines()
                        .rev()
                        .find_map(|l| l.trim().strip_prefix("error: "))
                        .unwrap_or("invalid");
                    options.error_at(i, format!("invalid regex {text:?}: {last}"))
                })?;
                let groups = pattern.captures_len() as i64 - 1;
                if groups < 1 {
                    return Err(
                        options.error_at(i, format!("pattern {text:?} has no capture group"))
                    );
                }
                let group = options.integer("group", 1, 1, groups)? as usize;
                KeySource::Capture { pattern, group }
            }
            "header" => {
                let (i, name) = options.string("header")?.ok_or_else(|| {
                    options.error_at(key_index, "key = \"header\" needs `header`, the field name")
                })?;
                if !is_token(name) {
                    return Err(options.error_at(i, format!("invalid header name {name:?}")));
                }
                KeySource::Header(name.to_string())
            }
            "cookie" => {
                let (i, name) = options.string("cookie")?.ok_or_else(|| {
                    options.error_at(
                        key_index,
                        "key = \"cookie\" needs `cookie`, the cookie name",
                    )
                })?;
                // A name that is no token could never match a cookie-pair (RFC 6265 4.1.1):
                // refusing it at load time beats a key that silently never exists.
                if !is_token(name) {
                    return Err(options.error_at(i, format!("invalid cookie name {name:?}")));
                }
                KeySource::Cookie(name.to_string())
            }
            _ => KeySource::Source,
        })
    }

    /// A stable 64-bit hash of the request's key, or `None` when the request has no such key
    /// (no header, no cookie, no match).
    pub fn hash(&self, request: &RequestView<'_>) -> Option<u64> {
        Some(match self {
            KeySource::Path => stable_hash(request.path),
            KeySource::Uri => {
                let path = stable_hash(request.path);
                match request.query {
                    // The query hashed with the path's hash as seed: no concatenation needed.
                    Some(q) => xxh3_64_with_seed(q, path),
                    None => path,
                }
            }
            KeySource::Capture { pattern, group } => {
                let captures = pattern.captures(request.path)?;
                stable_hash(captures.get(*group)?.as_bytes())
            }
            KeySource::Host => host_hash(request.host?),
            KeySource::Header(name) => stable_hash(request.headers.header(name)?),
            KeySource::Cookie(name) => stable_hash(cookie_value(request, name)?),
            KeySource::Source => client_address_hash(request.client),
        })
    }
}

/// A stable hash of a client address. An IPv4 client seen through an IPv6 socket (mapped
/// address) hashes as the IPv4 address, so it is the same client either way.
fn client_address_hash(client: IpAddr) -> u64 {
    match client.to_canonical() {
        IpAddr::V4(a) => stable_hash(&a.octets()),
        IpAddr::V6(a) => stable_hash(&a.octets()),
    }
}

/// The hash `source-hash` places the request's client by, or `None` when the switch does not
/// know the client (an unspecified address): modules place keyless requests by it, so a
/// client's keyless requests stay together and different clients spread over the pool.
pub(crate) fn client_hash(request: &RequestView<'_>) -> Option<u64> {
    (!request.client.is_unspecified()).then(|| client_address_hash(request.client))
}

/// `name` is an HTTP token (RFC 9110 5.6.2 `tchar`s, at least one), the syntax of header field
/// names and of cookie names (RFC 6265 4.1.1).
pub(crate) fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A hash whose output is the same in every process, on every machine and in every version of
/// tcpvs (XXH3 is a fixed specification), so switches with the same rules agree on placement.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, STABLE_SEED)
}

const STABLE_SEED: u64 = 0x7463_7076_735f_6b30;

/// [`stable_hash`] of a host name in lower case: host names ignore ASCII case (RFC 4343), so
/// `Site1.Example` keys as `site1.example`. The view carries the host as the client sent it;
/// a name already in lower case (nearly all) is hashed as it is, another is lowered on the
/// stack (a DNS name has at most 253 bytes; a longer one is lowered on the heap).
fn host_hash(host: &[u8]) -> u64 {
    if !host.iter().any(u8::is_ascii_uppercase) {
        return stable_hash(host);
    }
    let mut lowered = [0u8; 256];
    match lowered.get_mut(..host.len()) {
        Some(copy) => {
            copy.copy_from_slice(host);
            copy.make_ascii_lowercase();
            stable_hash(copy)
        }
        None => stable_hash(&host.to_ascii_lowercase()),
    }
}

/// The value of cookie `name` in the request's Cookie field (RFC 6265 section 5.4 syntax:
/// `a=1; b=2`).
pub fn cookie_value<'a>(request: &RequestView<'a>, name: &str) -> Option<&'a [u8]> {
    let field = request.headers.header("cookie")?;
    cookies_named(field, name).next()
}

/// The value of every cookie `name` in one Cookie field's value (`a=1; b=2; a=3`), in order.
pub fn cookies_named<'a, 'n>(
    field: &'a [u8],
    name: &'n str,
) -> impl Iterator<Item = &'a [u8]> + use<'a, 'n> {
    field.split(|&b| b == b';').filter_map(move |pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        (trim(&pair[..eq]) == name.as_bytes()).then(|| trim(&pair[eq + 1..]))
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{request, Headers};
    use crate::OptionValue;

    fn source(pairs: &[(&str, &str)]) -> Result<KeySource, OptionError> {
        let given: Vec<(String, OptionValue)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), OptionValue::String(v.to_string())))
            .collect();
        let mut o = Options::new("t", &given);
        let k = KeySource::from_options(&mut o, "path")?;
        o.finish()?;
        Ok(k)
    }

    const PINNED_PATH_HASH: u64 = 5_970_922_785_492_984_894;

    #[test]
    fn the_host_key_ignores_ascii_case_at_any_length() {
        let host_key = source(&[("key", "host")]).unwrap();
        for name in [
            "site1.example".to_string(),
            format!("{}.example", "a".repeat(300)),
        ] {
            let upper = name.to_uppercase();
            let mut r = request();
            r.host = Some(name.as_bytes());
            let lower = host_key.hash(&r).unwrap();
            assert_eq!(lower, stable_hash(name.as_bytes()));
            r.host = Some(upper.as_bytes());
            assert_eq!(host_key.hash(&r), Some(lower), "{upper}");
        }
    }

    #[test]
    fn keys_come_from_the_right_part() {
        let headers = Headers(vec![
            ("cookie", b"a=1; session = xyz ;b=2"),
            ("x-user", b"ann"),
        ]);
        let mut r = request();
        r.path = b"/users/ann/photos";
        r.query = Some(b"page=2");
        r.headers = &headers;
        let path = source(&[]).unwrap().hash(&r).unwrap();
        assert_eq!(path, stable_hash(b"/users/ann/photos"));
        // Pinned: placement must not change between versions (rolling upgrades).
        assert_eq!(stable_hash(b"/users/ann/photos"), PINNED_PATH_HASH);
        assert_ne!(source(&[("key", "uri")]).unwrap().hash(&r).unwrap(), path);
        let capture = source(&[("key", "regex"), ("pattern", "^/users/([^/]+)/")]).unwrap();
        assert_eq!(capture.hash(&r), Some(stable_hash(b"ann")));
        assert_eq!(
            source(&[("key", "header"), ("header", "X-User")])
                .unwrap()
                .hash(&r),
            Some(stable_hash(b"ann"))
        );
        assert_eq!(
            source(&[("key", "cookie"), ("cookie", "session")])
                .unwrap()
                .hash(&r),
            Some(stable_hash(b"xyz"))
        );
        assert_eq!(
            source(&[("key", "cookie"), ("cookie", "none")])
                .unwrap()
                .hash(&r),
            None
        );
        let host = source(&[("key", "host")]).unwrap();
        assert_eq!(host.hash(&r), None, "no host, no key");
        r.host = Some(b"img.example.com");
        assert_eq!(host.hash(&r), Some(stable_hash(b"img.example.com")));
        r.path = b"/other";
        assert_eq!(capture.hash(&r), None);
    }

    #[test]
    fn bad_key_options_are_refused() {
        assert!(source(&[("key", "regex")]).is_err());
        assert!(source(&[("key", "regex"), ("pattern", "^/users/")]).is_err());
        assert!(source(&[("key", "regex"), ("pattern", "(")]).is_err());
        assert!(source(&[("key", "header")]).is_err());
        assert!(source(&[("key", "header"), ("header", "X User")]).is_err());
        assert!(source(&[("key", "body")]).is_err());
    }

    #[test]
    fn cookie_names_are_checked_like_header_names() {
        assert!(source(&[("key", "cookie"), ("cookie", "session_id")]).is_ok());
        for bad in ["", "a b", "a=b", "a;b", "s\u{e9}ance"] {
            let e = source(&[("key", "cookie"), ("cookie", bad)]).unwrap_err();
            assert_eq!(e.index, 1, "{bad:?}");
            assert!(e.message.contains("invalid cookie name"), "{bad:?}: {e:?}");
        }
        assert!(source(&[("key", "cookie")]).is_err());
    }

    #[test]
    fn tokens() {
        assert!(is_token("X-User") && is_token("!#$%&'*+-.^_`|~09az"));
        assert!(!is_token("") && !is_token("a:b") && !is_token("a\"b") && !is_token("\u{e9}"));
    }

    #[test]
    fn client_hash_is_the_source_key_and_absent_for_an_unknown_client() {
        let mut r = request();
        r.client = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 7));
        assert_eq!(
            client_hash(&r),
            source(&[("key", "source")]).unwrap().hash(&r)
        );
        r.client = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
        assert_eq!(client_hash(&r), None);
        r.client = IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED);
        assert_eq!(client_hash(&r), None);
    }
}
