//! Routing: the rules of a virtual service, tried in file order; the first rule whose
//! conditions all hold decides what happens to the request (its [`Action`]: a pool, a
//! redirect, an answer). Requests no rule matches go to the default pool.

use crate::policy::source::SourceList;
use crate::policy::{Action, Edits};
use regex::bytes::Regex;
use regex_automata::meta;
use regex_automata::nfa::thompson::WhichCaptures;
use regex_automata::util::syntax;
use regex_automata::{Input, MatchKind, PatternID, PatternSet};
use std::cell::RefCell;
use tcpvs_modules::RequestView;

/// One `[[virtual.NAME.rule]]`. A rule without conditions matches every request.
#[derive(Debug)]
pub struct Rule {
    /// Regex on the path in its normal form (http/path.rs), query excluded.
    pub path: Option<Regex>,
    /// Case-insensitive regex on the host in its normal form (http/host.rs: port excluded, lower
    /// case, no trailing dot), as exchange/route.rs gives it.
    pub host: Option<Regex>,
    /// Exact method.
    pub method: Option<String>,
    pub header: Option<HeaderCondition>,
    /// Case-insensitive regex on the TLS server name (SNI) of the connection: a TLS service's
    /// handshake, or a passthrough service's ClientHello. A connection without one does not
    /// match.
    pub sni: Option<Regex>,
    /// Networks the client's address (a PROXY header's, if any) must be in.
    pub source: Option<SourceList>,
    pub action: Action,
}

/// The rule a request matched (or the default pool): what to do, and the path regex whose
/// captures `$N` refer to.
#[derive(Clone, Copy)]
pub struct Matched<'r> {
    pub action: &'r Action,
    pub path: Option<&'r Regex>,
}

/// A regex on the value of the first field named `name`; a missing field does not match.
#[derive(Debug)]
pub struct HeaderCondition {
    pub name: String,
    pub value: Regex,
}

impl Rule {
    /// Whether the rule holds for `request` on a connection whose TLS server name is `sni`.
    pub fn matches(&self, request: &RequestView<'_>, sni: Option<&[u8]>) -> bool {
        self.path.as_ref().is_none_or(|p| p.is_match(request.path))
            && self.matches_besides_path(request, sni)
    }

    /// The method, host, header, source and SNI conditions.
    fn matches_besides_path(&self, request: &RequestView<'_>, sni: Option<&[u8]>) -> bool {
        if let Some(source) = &self.source {
            if !source.contains(request.client) {
                return false;
            }
        }
        if let Some(pattern) = &self.sni {
            match sni {
                Some(name) if pattern.is_match(name) => {}
                _ => return false,
            }
        }
        if let Some(method) = &self.method {
            if method != request.method {
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
    rules: Vec<Rule>,
    /// `Action::Pool` of the default pool, without edits.
    default: Option<Action>,
    /// Every path regex of the rules in one automaton, so one pass over the path says which
    /// path conditions hold, instead of one regex run per rule (measured: 2.1 µs to 0.x µs
    /// for 50 rules, BENCHMARKS.md "hot path").
    paths: Option<PathPrefilter>,
}

#[derive(Debug)]
struct PathPrefilter {
    set: meta::Regex,
    /// For each rule, the pattern of its path regex in `set`.
    pattern_of_rule: Vec<Option<PatternID>>,
}

/// Below this many path rules, one regex per rule is as quick as the combined automaton.
const PREFILTER_FROM: usize = 4;

thread_local! {
    /// Which patterns matched, reused from request to request (no allocation per request).
    static MATCHED: RefCell<PatternSet> = RefCell::new(PatternSet::new(0));
}

impl RuleSet {
    pub fn new(rules: Vec<Rule>, default_pool: Option<usize>) -> RuleSet {
        let paths = PathPrefilter::build(&rules);
        RuleSet {
            rules,
            default: default_pool.map(|pool| Action::Pool { pool, edits: None }),
            paths,
        }
    }

    /// The default pool's action with `edits` (a service's own field actions:
    /// config/service_policy.rs); `None` keeps the plain path.
    pub fn with_default_edits(mut self, edits: Option<Box<Edits>>) -> RuleSet {
        if let Some(Action::Pool { edits: default, .. }) = &mut self.default {
            *default = edits;
        }
        self
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn default_pool(&self) -> Option<usize> {
        self.default.as_ref().and_then(Action::pool)
    }

    /// What happens to `request` on a connection whose TLS server name is `sni`, or `None`
    /// when no rule matches and there is no default pool.
    pub fn route(&self, request: &RequestView<'_>, sni: Option<&[u8]>) -> Option<Matched<'_>> {
        let Some(paths) = &self.paths else {
            return self.first_match(request, sni, |_, rule| {
                rule.path.as_ref().is_none_or(|p| p.is_match(request.path))
            });
        };
        MATCHED.with(|matched| {
            let mut matched = matched.borrow_mut();
            if matched.capacity() < paths.set.pattern_len() {
                *matched = PatternSet::new(paths.set.pattern_len());
            }
            matched.clear();
            paths
                .set
                .which_overlapping_matches(&Input::new(request.path), &mut matched);
            self.first_match(request, sni, |rule_index, _| {
                match paths.pattern_of_rule[rule_index] {
                    Some(pattern) => matched.contains(pattern),
                    None => true,
                }
            })
        })
    }

    /// The first rule whose conditions hold, the path one decided by `path_holds`.
    fn first_match(
        &self,
        request: &RequestView<'_>,
        sni: Option<&[u8]>,
        path_holds: impl Fn(usize, &Rule) -> bool,
    ) -> Option<Matched<'_>> {
        match self
            .rules
            .iter()
            .enumerate()
            .find(|(i, rule)| path_holds(*i, rule) && rule.matches_besides_path(request, sni))
        {
            Some((_, rule)) => Some(Matched {
                action: &rule.action,
                path: rule.path.as_ref(),
            }),
            None => self
                .default
                .as_ref()
                .map(|action| Matched { action, path: None }),
        }
    }
}

impl PathPrefilter {
    fn build(rules: &[Rule]) -> Option<PathPrefilter> {
        let patterns: Vec<&str> = rules
            .iter()
            .filter_map(|r| r.path.as_ref().map(Regex::as_str))
            .collect();
        if patterns.len() < PREFILTER_FROM {
            return None;
        }
        let set = meta::Builder::new()
            .configure(
                meta::Config::new()
                    .match_kind(MatchKind::All)
                    .utf8_empty(false)
                    .which_captures(WhichCaptures::None),
            )
            .syntax(syntax::Config::new().utf8(false))
            .build_many(&patterns)
            // Each pattern compiled alone already; if the combination is refused (size
            // limits), routing simply runs them one by one.
            .ok()?;
        let mut next = 0;
        let pattern_of_rule = rules
            .iter()
            .map(|r| {
                r.path.as_ref().map(|_| {
                    let id = PatternID::new_unchecked(next);
                    next += 1;
                    id
                })
            })
            .collect();
        Some(PathPrefilter {
            set,
            pattern_of_rule,
        })
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

    /// The pool a request goes to.
    fn pool_of(r: &RuleSet, req: &RequestView<'_>, sni: Option<&[u8]>) -> Option<usize> {
        r.route(req, sni).and_then(|m| m.action.pool())
    }

    fn rules() -> RuleSet {
        RuleSet::new(
            vec![
                Rule {
                    path: regex("^/cgi-bin/"),
                    host: None,
                    method: None,
                    header: None,
                    sni: None,
                    source: None,
                    action: Action::Pool {
                        pool: 2,
                        edits: None,
                    },
                },
                Rule {
                    path: regex(r"\.(png|jpe?g)$"),
                    host: None,
                    method: None,
                    header: None,
                    sni: None,
                    source: None,
                    action: Action::Pool {
                        pool: 1,
                        edits: None,
                    },
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
                    sni: None,
                    source: None,
                    action: Action::Pool {
                        pool: 1,
                        edits: None,
                    },
                },
            ],
            Some(0),
        )
    }

    #[test]
    fn first_matching_rule_wins() {
        let r = rules();
        let none = Headers(&[]);
        assert_eq!(
            pool_of(&r, &request("GET", b"/cgi-bin/a.png", None, &none), None),
            Some(2)
        );
        assert_eq!(
            pool_of(&r, &request("GET", b"/x/a.jpeg", None, &none), None),
            Some(1)
        );
        assert_eq!(
            pool_of(&r, &request("GET", b"/index.html", None, &none), None),
            Some(0)
        );
    }

    #[test]
    fn all_conditions_must_hold() {
        let r = rules();
        let pool = Headers(&[("x-pool", b"images")]);
        let none = Headers(&[]);
        assert_eq!(
            pool_of(&r, &request("GET", b"/", Some(b"IMG.example"), &pool), None),
            Some(1)
        );
        assert_eq!(
            pool_of(
                &r,
                &request("POST", b"/", Some(b"img.example"), &pool),
                None
            ),
            Some(0)
        );
        assert_eq!(
            pool_of(&r, &request("GET", b"/", Some(b"img.example"), &none), None),
            Some(0)
        );
        assert_eq!(
            pool_of(&r, &request("GET", b"/", None, &pool), None),
            Some(0)
        );
    }

    /// The combined automaton must route exactly as rule-by-rule matching does.
    #[test]
    fn prefilter_agrees_with_rule_by_rule() {
        let patterns = [
            r"^/a/",
            r"\.png$",
            r"^/a/b",
            r"^/(x|y)+$",
            r"[0-9]{3}",
            r"^/caf\xE9",
            r"^/$",
            r"(?i)^/UP/",
        ];
        let make = |n: usize| {
            patterns[..n]
                .iter()
                .enumerate()
                .map(|(i, p)| Rule {
                    path: Some(Regex::new(p).unwrap()),
                    host: None,
                    method: (i == 2).then(|| "POST".to_string()),
                    header: None,
                    sni: None,
                    source: None,
                    action: Action::Pool {
                        pool: i + 1,
                        edits: None,
                    },
                })
                .collect::<Vec<_>>()
        };
        let with = RuleSet::new(make(8), Some(0));
        assert!(with.paths.is_some());
        let paths: [&[u8]; 12] = [
            b"/a/b.png",
            b"/a/bc",
            b"/img.png",
            b"/xyxy",
            b"/y",
            b"/p/123",
            b"/caf\xE9",
            b"/",
            b"/up/x",
            b"/UP/x",
            b"/nothing",
            b"",
        ];
        let none = Headers(&[]);
        for path in paths {
            for method in ["GET", "POST"] {
                let req = request(method, path, None, &none);
                let expected = with
                    .rules()
                    .iter()
                    .find(|r| r.matches(&req, None))
                    .map_or(Some(0), |r| r.action.pool());
                assert_eq!(
                    pool_of(&with, &req, None),
                    expected,
                    "{method} {:?}",
                    String::from_utf8_lossy(path)
                );
            }
        }
    }

    #[test]
    fn sni_conditions_need_a_server_name() {
        let api = Rule {
            path: None,
            host: None,
            method: None,
            header: None,
            sni: Some(
                regex::bytes::RegexBuilder::new(r"^api\.")
                    .case_insensitive(true)
                    .build()
                    .unwrap(),
            ),
            source: None,
            action: Action::Pool {
                pool: 1,
                edits: None,
            },
        };
        let r = RuleSet::new(vec![api], Some(0));
        let none = Headers(&[]);
        let get = request("GET", b"/", None, &none);
        assert_eq!(pool_of(&r, &get, Some(b"api.example.com")), Some(1));
        assert_eq!(pool_of(&r, &get, Some(b"API.example.com")), Some(1));
        assert_eq!(pool_of(&r, &get, Some(b"www.example.com")), Some(0));
        assert_eq!(pool_of(&r, &get, None), Some(0));
    }

    #[test]
    fn no_default_pool() {
        let r = RuleSet::new(vec![], None);
        assert_eq!(
            pool_of(&r, &request("GET", b"/", None, &Headers(&[])), None),
            None
        );
    }
}
