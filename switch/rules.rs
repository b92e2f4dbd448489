//! Routing: the rules of a virtual service, tried in file order; the first rule whose
//! conditions all hold names the pool. Requests no rule matches go to the default pool.

use regex::bytes::Regex;
use tcpvs_modules::RequestView;

/// One `[[virtual.NAME.rule]]`. A rule without conditions matches every request.
#[derive(Debug)]
pub struct Rule {
    /// Regex on the path, query excluded, as the client sent it (no decoding).
    pub path: Option<Regex>,
    /// Case-insensitive regex on the host, port excluded.
    pub host: Option<Regex>,
    /// Exact method.
    pub method: Option<String>,
    pub header: Option<HeaderCondition>,
    /// Index into the switch's pools.
    pub pool: usize,
}

/// A regex on the value of the first field named `name`; a missing field does not match.
#[derive(Debug)]
pub struct HeaderCondition {
    pub name: String,
    pub value: Regex,
}

impl Rule {
    pub fn matches(&self, request: &RequestView<'_>) -> bool {
        if let Some(method) = &self.method {
            if method != request.method {
                return false;
            }
        }
        if let Some(path) = &self.path {
            if !path.is_match(request.path) {
                return false;
            }
        }
        if let Some(host) = &self.host {
            match request.host {
                Some(h) if host.is_match(h) => {}
                _ => return false,
            }
        }
        if let Some(condition) = &self.header {
            match request.headers.header(&condition.name) {
                Some(value) if condition.value.is_match(value) => {}
                _ => return false,
            }
        }
        true
    }
}

#[derive(Debug, Default)]
pub struct RuleSet {
    pub rules: Vec<Rule>,
    pub default_pool: Option<usize>,
}

impl RuleSet {
    /// The pool for `request`, or `None` when no rule matches and there is no default pool.
    pub fn route(&self, request: &RequestView<'_>) -> Option<usize> {
        self.rules
            .iter()
            .find(|rule| rule.matches(request))
            .map_or(self.default_pool, |rule| Some(rule.pool))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};
    use tcpvs_modules::HeaderLookup;

    struct Headers(&'static [(&'static str, &'static [u8])]);
    impl HeaderLookup for Headers {
        fn header(&self, name: &str) -> Option<&[u8]> {
            self.0
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| *v)
        }
    }

    fn request<'a>(
        method: &'a str,
        path: &'a [u8],
        host: Option<&'a [u8]>,
        headers: &'a Headers,
    ) -> RequestView<'a> {
        RequestView {
            method,
            path,
            query: None,
            host,
            headers,
            client: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    fn regex(p: &str) -> Option<Regex> {
        Some(Regex::new(p).unwrap())
    }

    fn rules() -> RuleSet {
        RuleSet {
            rules: vec![
                Rule {
                    path: regex("^/cgi-bin/"),
                    host: None,
                    method: None,
                    header: None,
                    pool: 2,
                },
                Rule {
                    path: regex(r"\.(png|jpe?g)$"),
                    host: None,
                    method: None,
                    header: None,
                    pool: 1,
                },
                Rule {
                    path: None,
                    host: Some(
                        regex::bytes::RegexBuilder::new(r"^img\.")
                            .case_insensitive(true)
                            .build()
                            .unwrap(),
                    ),
                    method: Some("GET".into()),
                    header: Some(HeaderCondition {
                        name: "X-Pool".into(),
                        value: Regex::new("^images$").unwrap(),
                    }),
                    pool: 1,
                },
            ],
            default_pool: Some(0),
        }
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = rules();
        let none = Headers(&[]);
        assert_eq!(
            r.route(&request("GET", b"/cgi-bin/a.png", None, &none)),
            Some(2)
        );
        assert_eq!(r.route(&request("GET", b"/x/a.jpeg", None, &none)), Some(1));
        assert_eq!(
            r.route(&request("GET", b"/index.html", None, &none)),
            Some(0)
        );
    }

    #[test]
    fn all_conditions_must_hold() {
        let r = rules();
        let pool = Headers(&[("x-pool", b"images")]);
        let none = Headers(&[]);
        assert_eq!(
            r.route(&request("GET", b"/", Some(b"IMG.example"), &pool)),
            Some(1)
        );
        assert_eq!(
            r.route(&request("POST", b"/", Some(b"img.example"), &pool)),
            Some(0)
        );
        assert_eq!(
            r.route(&request("GET", b"/", Some(b"img.example"), &none)),
            Some(0)
        );
        assert_eq!(r.route(&request("GET", b"/", None, &pool)), Some(0));
    }

    #[test]
    fn no_default_pool() {
        let r = RuleSet {
            rules: vec![],
            default_pool: None,
        };
        assert_eq!(r.route(&request("GET", b"/", None, &Headers(&[]))), None);
    }
}
