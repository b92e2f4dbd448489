//! The KTCPVS schedulers with rules (`http`, `hhttp`, `chttp`, `phttp`): KTCPVS's rule list
//! (rules joined by pattern prefix, tried from the last written to the first, `.*` last) and a
//! tcpvs pool and rule for each of its rules; `hhttp`'s capture hash as `hash` on a regex key.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddrV4;

use super::{slug, Kind, KtRule, Lowering, KTCPVS_COOKIE};
use crate::import_ktcpvs::ere;
use crate::import_ktcpvs::model::{
    KServer, KService, Out, OutPool, OutRule, OutServer, OutService,
};
use crate::import_ktcpvs::output::{toml_literal, toml_string};
use crate::import_ktcpvs::Pos;

impl Lowering<'_> {
    /// Builds KTCPVS's rule list: merged by pattern prefix, in matching order.
    fn rule_list<'r>(
        &mut self,
        svc: &'r KService,
        kind: Kind,
        servers: &[&KServer],
    ) -> (Vec<KtRule<'r>>, Vec<usize>) {
        let mut rules: Vec<KtRule<'r>> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        // Which rule line took each server (a server is in one rule at most: EBUSY).
        let mut taken: HashMap<usize, usize> = HashMap::new();
        let hashing = matches!(kind, Kind::Hhttp | Kind::Phttp);
        for rule in &svc.rules {
            if svc.broken.contains(&rule.target.key()) {
                continue;
            }
            let Some(server) = servers
                .iter()
                .position(|s| s.addr.key() == rule.target.key())
            else {
                self.d.error(
                    rule.target_at,
                    format!(
                        "server {} is not a `server` of `virtual {}`: KTCPVS refuses the rule (ENOENT)",
                        rule.target.shown(), svc.name
                    ),
                );
                continue;
            };
            if let Some(line) = taken.get(&server) {
                self.d.error(
                    rule.target_at,
                    format!(
                        "server {} is already used by the rule on line {line}: KTCPVS puts a server in one rule only (EBUSY)",
                        rule.target.text
                    ),
                );
                continue;
            }
            taken.insert(server, rule.line);
            if rule.match_num.is_some() && !hashing {
                self.d.warn(
                    rule.line,
                    format!("`match` has no effect with the {} scheduler", kind.name()),
                );
            }
            let joined = order
                .iter()
                .copied()
                .find(|&k| rule.pattern.starts_with(rules[k].first.pattern.as_str()));
            if let Some(k) = joined {
                let existing = &mut rules[k];
                existing.members.push(server);
                existing.joined.push(rule.pattern_at);
                let first_line = existing.first.line;
                let first_pattern = existing.first.pattern.clone();
                let first_match = existing.match_num;
                if rule.pattern != first_pattern {
                    self.d.warn(
                        rule.line,
                        format!(
                            "KTCPVS added this rule's server to the rule of line {first_line}, whose pattern \"{first_pattern}\" begins this one's (it compares that many characters): this pattern \"{}\" was never used, and neither is it here",
                            rule.pattern
                        ),
                    );
                }
                if hashing && rule.match_num.unwrap_or(0) != first_match {
                    self.d.warn(
                        rule.line,
                        format!(
                            "match {} has no effect: this server joined the rule of line {first_line}, which hashes match {first_match}",
                            rule.match_num.unwrap_or(0)
                        ),
                    );
                }
                continue;
            }
            let parsed = match ere::parse(&rule.pattern) {
                Ok(r) => r,
                Err(e) => {
                    self.d.error(
                        Pos {
                            line: rule.pattern_at.line,
                            col: rule.pattern_at.col + e.at,
                        },
                        format!("invalid pattern \"{}\": {}", rule.pattern, e.message),
                    );
                    continue;
                }
            };
            let rust = ere::to_rust(&parsed.node);
            if let Err(e) = regex::bytes::Regex::new(&rust) {
                let why = e.to_string();
                let last = why.lines().last().unwrap_or("invalid").trim().to_string();
                self.d.error(
                    rule.pattern_at,
                    format!(
                        "pattern \"{}\" has no equivalent in tcpvs's regex syntax (as `{rust}`: {last})",
                        rule.pattern
                    ),
                );
                continue;
            }
            let catch_all = rule.pattern == ".*" || rule.pattern == "^/.*";
            rules.push(KtRule {
                first: rule,
                regex: parsed,
                rust,
                match_num: rule.match_num.unwrap_or(0),
                members: vec![server],
                joined: Vec::new(),
                catch_all,
            });
            let index = rules.len() - 1;
            if catch_all {
                order.push(index);
            } else {
                order.insert(0, index);
            }
        }
        (rules, order)
    }

    /// `http`, `hhttp`, `chttp`, `phttp`: a pool per rule, rules in KTCPVS's order.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn ruled(
        &mut self,
        svc: &KService,
        kind: Kind,
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
        redirect: Option<SocketAddrV4>,
        service: &mut OutService,
        out: &mut Out,
    ) {
        let (rules, order) = self.rule_list(svc, kind, servers);
        let redirect = if kind == Kind::Chttp {
            if let Some(r) = &svc.redirect {
                self.d.warn(
                    r.at.line,
                    "redirect has no effect with chttp: KTCPVS closed the connections chttp found no server for (kept as a comment)",
                );
                service
                    .notes
                    .push(format!("{} -- no effect with chttp", self.source(r.at)));
            }
            None
        } else {
            redirect
        };
        // Servers in no rule: KTCPVS's rule-based schedulers never chose them.
        let used: HashSet<usize> = rules
            .iter()
            .flat_map(|r| r.members.iter().copied())
            .collect();
        for (i, s) in servers.iter().enumerate() {
            if !used.contains(&i) {
                self.d.warn(
                    s.line,
                    format!(
                        "server {} is in no rule: KTCPVS's {} scheduler never sent it a request (kept as a comment)",
                        s.addr.text,
                        kind.name()
                    ),
                );
                service
                    .notes
                    .push(format!("{} -- in no rule: never used", self.source(s.at)));
            }
        }
        let plain_rules = order.iter().filter(|&&k| !rules[k].catch_all).count();
        let in_file_order = order
            .iter()
            .filter(|&&k| !rules[k].catch_all)
            .map(|&k| rules[k].first.line)
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[0] < w[1]);
        if plain_rules > 1 && !in_file_order {
            service.notes.push(
                "The rules are in the order KTCPVS tried them: the last written first (each new rule went to the front of its list), `.*` and `^/.*` after all others."
                    .to_string(),
            );
        }
        let mut query_lines: Vec<usize> = Vec::new();
        let mut default_taken = false;
        for &k in &order {
            let rule = &rules[k];
            let regex = &rule.regex;
            if rule.catch_all && default_taken {
                self.d.warn(
                    rule.first.line,
                    "never matched: an earlier `.*` or `^/.*` rule took every request (kept as a comment)",
                );
                service.notes.push(format!(
                    "{} -- never matched after the first catch-all",
                    self.source(rule.first.pattern_at)
                ));
                continue;
            }
            // The pool.
            let hint = if rule.catch_all {
                "default".to_string()
            } else {
                pattern_slug(&rule.first.pattern)
                    .unwrap_or_else(|| format!("line{}", rule.first.line))
            };
            let pool_name = self.unique_pool(format!("{}-{}", slug(&service.name), hint));
            let mut pool = OutPool {
                name: pool_name.clone(),
                notes: Vec::new(),
                scheduler: "wlc",
                options: Vec::new(),
                servers: self.pool_servers(&rule.members, servers, addrs),
            };
            for &at in &rule.joined {
                pool.notes
                    .push(format!("{} -- joined this rule", self.source(at)));
            }
            let hash_it = match kind {
                Kind::Hhttp => true,
                Kind::Phttp => rule.match_num > 0,
                _ => false,
            };
            if hash_it {
                self.hash_pool(kind, rule, servers, &mut pool);
            } else if kind == Kind::Chttp {
                pool.scheduler = "cookie";
                pool.options = vec![
                    ("name", toml_string(KTCPVS_COOKIE)),
                    ("inner", toml_string("wlc")),
                ];
                pool.notes.push(
                    "Persistence as chttp: a client keeps its server by cookie. Add `secret = \"...\"` so cookies survive restarts."
                        .to_string(),
                );
            }
            if let Some(r) = redirect {
                pool.servers.push(self.redirect_backup(svc, r));
            }
            // Query: KTCPVS matched the whole request-target, tcpvs's `path` excludes the query.
            if !rule.catch_all {
                if regex.node.has_eol() {
                    self.d.warn(
                        rule.first.line,
                        format!(
                            "`$` in \"{}\" ended the match at the end of the whole request URI in KTCPVS, query included, so a request with a query (`?v=2`) did not match; tcpvs matches `path`, which excludes the query, so such requests match here",
                            rule.first.pattern
                        ),
                    );
                }
                let rest = regex.node.trimmed();
                let crosses = rest.as_ref().is_some_and(|n| n.can_match('?'));
                let floats = rest.as_ref().is_some_and(|n| !n.anchored());
                if crosses || floats {
                    query_lines.push(rule.first.line);
                }
            }
            let comment = self.source(rule.first.pattern_at);
            if rule.catch_all {
                default_taken = true;
                service.default_pool = Some((
                    pool_name.clone(),
                    format!(
                        "{comment} -- KTCPVS tried it after every other rule{}",
                        if rule.first.pattern == "^/.*" {
                            " (it did not match absolute-form targets; this takes them too)"
                        } else {
                            ""
                        }
                    ),
                ));
            } else {
                service.rules.push(OutRule {
                    comment,
                    path: rule.rust.clone(),
                    pool: pool_name.clone(),
                });
            }
            out.pools.push(pool);
        }
        if !query_lines.is_empty() {
            let lines: Vec<String> = query_lines.iter().map(|l| l.to_string()).collect();
            self.d.warn(
                query_lines[0],
                format!(
                    "KTCPVS matched the pattern{} on line{} {} against the whole request URI, query included; tcpvs's `path` excludes the query, so a request whose match lies in the query or runs into it (`/?from=/users/x/`) is routed differently",
                    if lines.len() > 1 { "s" } else { "" },
                    if lines.len() > 1 { "s" } else { "" },
                    lines.join(", ")
                ),
            );
        }
        if default_taken {
            return;
        }
        // No catch-all: what KTCPVS did with requests that matched no rule.
        if let Some(r) = redirect {
            let pool_name = self.unique_pool(format!("{}-redirect", slug(&service.name)));
            let at = svc.redirect.as_ref().map_or(svc.at, |r| r.at);
            service.default_pool = Some((
                pool_name.clone(),
                format!("{} -- requests that match no rule", self.source(at)),
            ));
            out.pools.push(OutPool {
                name: pool_name,
                notes: Vec::new(),
                scheduler: "wlc",
                options: Vec::new(),
                servers: vec![OutServer {
                    addr: r,
                    weight: 1,
                    backup: false,
                    comment: self.source(at),
                }],
            });
        } else if kind == Kind::Phttp && !service.rules.is_empty() {
            let first = service.rules[0].pool.clone();
            self.d.warn(
                svc.at.line,
                format!(
                    "phttp sent requests that match no rule to the first server it had connected to, in rule order (fault.c:fault_redirect); here they go to the pool of the first rule, `{first}`"
                ),
            );
            service.default_pool = Some((first, "requests that match no rule (fault.c)".into()));
        } else {
            let why = if kind == Kind::Chttp {
                "chttp never redirects"
            } else {
                "there is no `.*` rule and no `redirect`"
            };
            self.d.warn(
                svc.at.line,
                format!(
                    "requests that match no rule of `virtual {}`: KTCPVS closed their connection without an answer ({why}); tcpvs answers them 503",
                    svc.name
                ),
            );
        }
        if kind == Kind::Chttp && !rules.is_empty() {
            self.d.warn(
                svc.at.line,
                "chttp looked the KTCPVS_SID cookie up before the rules, so a client stayed on its server whatever the URI, and set the cookie only on responses that set a cookie of their own; tcpvs's cookie keeps a client on its server within each rule's pool and sets the cookie on every new client's first response",
            );
        }
        if kind == Kind::Phttp {
            self.d.warn(
                svc.at.line,
                "phttp: rules with `match N` (N > 0) hash capture N, as tcp_vs_phttp.c of ktcpvs-matrix does; the others pick by least connections, as upstream KTCPVS did",
            );
        }
    }

    /// The pool of an `hhttp` rule (or a `phttp` rule with `match N`): `hash` on capture N.
    fn hash_pool(
        &mut self,
        kind: Kind,
        rule: &KtRule<'_>,
        servers: &[&KServer],
        pool: &mut OutPool,
    ) {
        let regex = &rule.regex;
        let n = rule.match_num as usize;
        let line = rule.first.line;
        if n > regex.groups {
            // regexec leaves such a slot at -1: the sum is 0, the first server of the rule's
            // list (the last one a rule added) takes every request.
            let chosen = *rule.members.last().expect("a rule has a server");
            self.d.warn(
                line,
                format!(
                    "match {n}, but \"{}\" has {} capture group{}: KTCPVS hashed nothing and sent every request of the rule to {}, and so does this (the others kept as comments)",
                    rule.first.pattern,
                    regex.groups,
                    if regex.groups == 1 { "" } else { "s" },
                    servers[chosen].addr
                ),
            );
            let keep = self.source(servers[chosen].at);
            pool.servers.retain(|s| s.comment == keep);
            for &m in &rule.members {
                if m != chosen {
                    pool.notes.push(format!(
                        "{} -- never chosen: match {n} does not exist",
                        self.source(servers[m].at)
                    ));
                }
            }
            return;
        }
        let (pattern, group) = if n == 0 {
            (format!("({})", rule.rust), 1)
        } else {
            (rule.rust.clone(), n)
        };
        pool.scheduler = "hash";
        pool.options = vec![
            ("key", toml_string("regex")),
            ("pattern", toml_literal(&pattern)),
            ("group", group.to_string()),
            ("balance_factor", "0".to_string()),
        ];
        pool.notes.push(format!(
            "As {}: requests with the same match {n} go to the same server (consistent hashing; no load bound, like KTCPVS).",
            kind.name()
        ));
        if regex.node.group_opens(n) {
            self.d.warn(
                line,
                format!(
                    "KTCPVS gave no server to a request whose match {n} begins at the URI's first byte (tcp_vs_hhttp.c tests `start && end`), and such requests went to the redirect address or were closed; tcpvs hashes them like the others"
                ),
            );
        }
        let weights: HashSet<u32> = rule.members.iter().map(|&m| servers[m].weight).collect();
        if weights.len() > 1 {
            self.d.warn(
                line,
                format!(
                    "{} ignored weights (each server of the rule got an equal share of the keys); tcpvs's hash gives each server a share by its weight: set equal weights to keep KTCPVS's split",
                    kind.name()
                ),
            );
        }
        if matches!(regex.node, ere::Node::Alt(_)) || rule.first.pattern.contains('|') {
            self.d.warn(
                line,
                format!(
                    "\"{}\" has alternatives: POSIX regexes capture the leftmost-longest match, tcpvs's the leftmost-first, so a capture can differ",
                    rule.first.pattern
                ),
            );
        }
    }
}

/// A pool-name piece from a pattern: its first words (`^/cgi-bin/` -> `cgi-bin`).
fn pattern_slug(pattern: &str) -> Option<String> {
    let words: Vec<String> = pattern
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() >= 2)
        .take(3)
        .map(str::to_ascii_lowercase)
        .collect();
    (!words.is_empty()).then(|| words.join("-"))
}

#[cfg(test)]
mod tests {
    use crate::import_ktcpvs::import;

    #[test]
    fn rules_join_by_pattern_prefix_as_tcp_vs_add_rule_compares() {
        let report = import(
            "k",
            "virtual web {\n listen = 127.0.0.1:80\n scheduler = http\n\
             server = 10.0.0.1:80 1\n server = 10.0.0.2:80 2\n\
             rule = pattern \"^/img\" use server 10.0.0.1:80\n\
             rule = pattern \"^/img/big\" use server 10.0.0.2:80\n}\n",
        );
        assert!(report.is_ok(), "{:?}", report.errors);
        assert_eq!(
            report.rules.matches("[[virtual.web.rule]]").count(),
            1,
            "{}",
            report.rules
        );
        assert!(
            report.rules.contains("10.0.0.2:80\", weight = 2"),
            "{}",
            report.rules
        );
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.line == 7 && w.message.contains("never used")),
            "{:?}",
            report.warnings
        );
    }

    #[test]
    fn hhttp_hashes_the_capture_without_a_load_bound() {
        let report = import(
            "k",
            "Virtual web {\n    listen = 0.0.0.0:webcache\n    scheduler = hhttp\n\
                 server = 192.168.0.12:www 1\n    server = 192.168.0.11:www 1\n\
                 rule = pattern \"/users/([^/]+)/.*\" match 1 use server 192.168.0.12:www\n\
                 rule = pattern \"/users/([^/]+)/.*\" match 1 use server 192.168.0.11:www\n}\n",
        );
        assert!(report.is_ok(), "{:?}", report.errors);
        let r = &report.rules;
        assert!(r.contains("listen = \"0.0.0.0:8080\""), "{r}");
        assert!(r.contains("scheduler = \"hash\"\nkey = \"regex\"\npattern = '/users/([^/]+)/.*'\ngroup = 1\nbalance_factor = 0"), "{r}");
        assert!(r.contains("192.168.0.11:80"), "{r}");
    }
}
