//! `redirect = { scheme, host, port, path, code }`: the switch answers with a redirect of its
//! own, built from the request. Any part the rule omits is kept from the request (the README's
//! `redirect`), with two choices HAProxy's `redirect scheme` and nginx's `return` make alike: a
//! new scheme or a new host drops the request's explicit port (`example.org:8080` moved to
//! https is `https://example.org/...`) unless `port` is given, and a default port is never
//! written. The query goes on unless the new path carries one of its own.

use super::template::Template;
use crate::http::host::host_without_port;

/// The redirect statuses a rule may answer with.
pub const CODES: &[u16] = &[301, 302, 303, 307, 308];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn parse(text: &str) -> Option<Scheme> {
        match text.to_ascii_lowercase().as_str() {
            "http" => Some(Scheme::Http),
            "https" => Some(Scheme::Https),
            _ => None,
        }
    }

    fn text(self) -> &'static [u8] {
        match self {
            Scheme::Http => b"http",
            Scheme::Https => b"https",
        }
    }

    fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub scheme: Option<Scheme>,
    /// A host name or address (IPv6 in brackets), without port.
    pub host: Option<Box<str>>,
    pub port: Option<u16>,
    pub path: Option<Template>,
    pub code: u16,
}

/// What a redirect keeps of the request.
pub struct Origin<'r> {
    /// The request came over TLS.
    pub https: bool,
    /// `Host` (or the absolute target's authority) as sent: host and maybe a port.
    pub authority: Option<&'r [u8]>,
    pub path: &'r [u8],
    /// Without its `?`.
    pub query: Option<&'r [u8]>,
}

impl Redirect {
    /// Whether the path regex must be run for its captures.
    pub fn uses_groups(&self) -> bool {
        self.path.as_ref().is_some_and(Template::uses_groups)
    }

    /// Writes the `Location` value for `request` into `out` (cleared first). Without a host
    /// from the rule or the request (an HTTP/1.0 request without Host), the location is the
    /// path alone, which clients resolve against the address they asked (RFC 9110 section
    /// 10.2.2).
    pub fn write_location(
        &self,
        request: &Origin<'_>,
        captures: Option<&regex::bytes::Captures<'_>>,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        let request_scheme = if request.https {
            Scheme::Https
        } else {
            Scheme::Http
        };
        let scheme = self.scheme.unwrap_or(request_scheme);
        let (request_host, request_port) = match request.authority {
            Some(authority) => split_authority(authority),
            None => (None, None),
        };
        let host = self.host.as_deref().map(str::as_bytes).or(request_host);
        if let Some(host) = host {
            out.extend_from_slice(scheme.text());
            out.extend_from_slice(b"://");
            out.extend_from_slice(host);
            let kept_port = if self.scheme.is_some() || self.host.is_some() {
                None
            } else {
                request_port.and_then(|p| std::str::from_utf8(p).ok()?.parse::<u16>().ok())
            };
            if let Some(port) = self.port.or(kept_port) {
                if port != scheme.default_port() {
                    out.push(b':');
                    out.extend_from_slice(itoa::Buffer::new().format(port).as_bytes());
                }
            }
        }
        let path_start = out.len();
        match &self.path {
            Some(template) => template.expand(captures, out),
            None => out.extend_from_slice(request.path),
        }
        if out.len() == path_start || out[path_start] != b'/' {
            out.insert(path_start, b'/');
        }
        let sets_query = out[path_start..].contains(&b'?');
        if let (false, Some(query)) = (sets_query, request.query) {
            out.push(b'?');
            out.extend_from_slice(query);
        }
    }
}

/// Host and port of an authority (`[::1]:8080`, `example.org:81`, `example.org`), by the
/// host syntax requests are read with (http/host.rs); `None`s for one that is not well formed.
fn split_authority(authority: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
    match host_without_port(authority) {
        Some(host) if !host.is_empty() => {
            let port = authority[host.len()..].strip_prefix(b":");
            (Some(host), port.filter(|p| !p.is_empty()))
        }
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::bytes::Regex;

    fn redirect(scheme: Option<&str>, host: Option<&str>, port: Option<u16>) -> Redirect {
        Redirect {
            scheme: scheme.and_then(Scheme::parse),
            host: host.map(Into::into),
            port,
            path: None,
            code: 301,
        }
    }

    fn location(r: &Redirect, authority: Option<&str>, path: &str, query: Option<&str>) -> String {
        let origin = Origin {
            https: false,
            authority: authority.map(str::as_bytes),
            path: path.as_bytes(),
            query: query.map(str::as_bytes),
        };
        let mut out = Vec::new();
        r.write_location(&origin, None, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn scheme_redirects_keep_path_and_query_and_drop_the_port() {
        let https = redirect(Some("https"), None, None);
        assert_eq!(
            location(&https, Some("example.org:8080"), "/a/b", Some("x=1&y")),
            "https://example.org/a/b?x=1&y"
        );
        assert_eq!(
            location(&https, Some("[::1]:8080"), "/", None),
            "https://[::1]/"
        );
        let with_port = redirect(Some("https"), None, Some(8443));
        assert_eq!(
            location(&with_port, Some("example.org:8080"), "/", None),
            "https://example.org:8443/"
        );
        let default_port = redirect(Some("https"), None, Some(443));
        assert_eq!(
            location(&default_port, Some("example.org"), "/", None),
            "https://example.org/"
        );
    }

    #[test]
    fn omitted_parts_come_from_the_request() {
        let path_only = Redirect {
            path: Some(Template::parse("/moved", None).unwrap()),
            ..redirect(None, None, None)
        };
        assert_eq!(
            location(&path_only, Some("example.org:8080"), "/old", Some("q")),
            "http://example.org:8080/moved?q"
        );
        assert_eq!(location(&path_only, None, "/old", None), "/moved");
    }

    #[test]
    fn host_and_path_with_captures() {
        let re = Regex::new("^/old/(.*)$").unwrap();
        let r = Redirect {
            host: Some("www.example.org".into()),
            path: Some(Template::parse("/new/$1", Some(1)).unwrap()),
            code: 308,
            ..redirect(None, None, None)
        };
        let captures = re.captures(b"/old/x/y");
        let origin = Origin {
            https: true,
            authority: Some(b"old.example.org:8443"),
            path: b"/old/x/y",
            query: Some(b"k=v"),
        };
        let mut out = Vec::new();
        r.write_location(&origin, captures.as_ref(), &mut out);
        assert_eq!(out, b"https://www.example.org/new/x/y?k=v");
    }

    #[test]
    fn a_path_with_a_query_replaces_the_request_query() {
        let r = Redirect {
            path: Some(Template::parse("/search?q=new", None).unwrap()),
            ..redirect(None, None, None)
        };
        assert_eq!(
            location(&r, Some("h"), "/s", Some("q=old")),
            "http://h/search?q=new"
        );
    }
}
