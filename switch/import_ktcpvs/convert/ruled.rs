//! The KTCPVS schedulers with rules (`http`, `hhttp`, `chttp`, `phttp`): a tcpvs pool and rule
//! for each rule of KTCPVS's rule list (`rule_list.rs`), in the order KTCPVS tried them, and
//! what KTCPVS did with the requests no rule matched.

use std::collections::HashSet;

use super::rule_list::{KtRule, RuleList};
use super::{slug, Kind, Loaded, Lowering, KTCPVS_COOKIE};
use crate::import_ktcpvs::model::{KService, Out, OutPool, OutRule, OutServer, OutService};
use crate::import_ktcpvs::output::toml_string;

impl Lowering<'_> {
    /// `http`, `hhttp`, `chttp`, `phttp`: a pool per rule, rules in KTCPVS's order.
    pub(super) fn ruled(&mut self, mut loaded: Loaded, service: &mut OutService, out: &mut Out) {
        let list = self.rule_list(&loaded);
        if loaded.kind == Kind::Chttp {
            self.chttp_redirect(loaded.svc, service);
            loaded.redirect = None;
        }
        self.unused_servers(&loaded, &list, service);
        if list.out_of_file_order() {
            service.notes.push(
                "The rules are in the order KTCPVS tried them: the last written first (each new rule went to the front of its list), `.*` and `^/.*` after all others."
                    .to_string(),
            );
        }
        let mut query_lines: Vec<usize> = Vec::new();
        let mut default_taken = false;
        for &k in &list.order {
            let rule = &list.rules[k];
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
            let pool = self.rule_pool(&loaded, rule, &service.name);
            if !rule.catch_all && self.query_matters(rule) {
                query_lines.push(rule.first.line);
            }
            default_taken |= rule.catch_all;
            self.route(rule, &pool.name, service);
            out.pools.push(pool);
        }
        self.query_warning(&query_lines);
        if default_taken {
            return;
        }
        self.unmatched(&loaded, service, out);
        self.scheduler_warnings(&loaded, !list.rules.is_empty());
    }

    /// chttp never used the redirect address: a note for it.
    fn chttp_redirect(&mut self, svc: &KService, service: &mut OutService) {
        if let Some(r) = &svc.redirect {
            self.d.warn(
                r.at.line,
                "redirect has no effect with chttp: KTCPVS closed the connections chttp found no server for (kept as a comment)",
            );
            service
                .notes
                .push(format!("{} -- no effect with chttp", self.source(r.at)));
        }
    }

    /// Servers in no rule: KTCPVS's rule-based schedulers never chose them.
    fn unused_servers(&mut self, loaded: &Loaded, list: &RuleList, service: &mut OutService) {
        let used: HashSet<usize> = list
            .rules
            .iter()
            .flat_map(|r| r.members.iter().copied())
            .collect();
        for (i, s) in loaded.servers.iter().enumerate() {
            if !used.contains(&i) {
                self.d.warn(
                    s.line,
                    format!(
                        "server {} is in no rule: KTCPVS's {} scheduler never sent it a request (kept as a comment)",
                        s.addr.text,
                        loaded.kind.name()
                    ),
                );
                service
                    .notes
                    .push(format!("{} -- in no rule: never used", self.source(s.at)));
            }
        }
    }

    /// The pool of a rule: its servers, scheduled as the KTCPVS scheduler picked among them,
    /// and the redirect address as a backup.
    fn rule_pool(&mut self, loaded: &Loaded, rule: &KtRule, service_name: &str) -> OutPool {
        let hint = if rule.catch_all {
            "default".to_string()
        } else {
            pattern_slug(&rule.first.pattern).unwrap_or_else(|| format!("line{}", rule.first.line))
        };
        let mut pool = OutPool {
            name: self.unique_pool(format!("{}-{}", slug(service_name), hint)),
            notes: Vec::new(),
            scheduler: "wlc",
            options: Vec::new(),
            servers: self.pool_servers(&rule.members, loaded),
        };
        for &at in &rule.joined {
            pool.notes
                .push(format!("{} -- joined this rule", self.source(at)));
        }
        let hash_it = match loaded.kind {
            Kind::Hhttp => true,
            Kind::Phttp => rule.match_num > 0,
            _ => false,
        };
        if hash_it {
            self.hash_pool(loaded, rule, &mut pool);
        } else if loaded.kind == Kind::Chttp {
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
        if let Some(r) = loaded.redirect {
            pool.servers.push(self.redirect_backup(loaded.svc, r));
        }
        pool
    }

    /// Whether the query can change what the (not catch-all) rule matches: KTCPVS matched the
    /// whole request-target, tcpvs's `path` excludes the query. A `$` is a warning of its own.
    fn query_matters(&mut self, rule: &KtRule) -> bool {
        let regex = &rule.regex;
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
        crosses || floats
    }

    /// The rule in the service: a `path` rule to `pool`, or `pool` as its default when the
    /// rule is `.*` or `^/.*`.
    fn route(&mut self, rule: &KtRule, pool: &str, service: &mut OutService) {
        let comment = self.source(rule.first.pattern_at);
        if rule.catch_all {
            service.default_pool = Some((
                pool.to_string(),
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
                pool: pool.to_string(),
            });
        }
    }

    /// One warning for the rules whose match the query can change, at the first of them.
    fn query_warning(&mut self, query_lines: &[usize]) {
        let Some(&first) = query_lines.first() else {
            return;
        };
        let lines: Vec<String> = query_lines.iter().map(|l| l.to_string()).collect();
        self.d.warn(
            first,
            format!(
                "KTCPVS matched the pattern{} on line{} {} against the whole request URI, query included; tcpvs's `path` excludes the query, so a request whose match lies in the query or runs into it (`/?from=/users/x/`) is routed differently",
                if lines.len() > 1 { "s" } else { "" },
                if lines.len() > 1 { "s" } else { "" },
                lines.join(", ")
            ),
        );
    }

    /// No catch-all: what KTCPVS did with requests that matched no rule.
    fn unmatched(&mut self, loaded: &Loaded, service: &mut OutService, out: &mut Out) {
        let svc = loaded.svc;
        if let Some(r) = loaded.redirect {
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
        } else if loaded.kind == Kind::Phttp && !service.rules.is_empty() {
            let first = service.rules[0].pool.clone();
            self.d.warn(
                svc.at.line,
                format!(
                    "phttp sent requests that match no rule to the first server it had connected to, in rule order (fault.c:fault_redirect); here they go to the pool of the first rule, `{first}`"
                ),
            );
            service.default_pool = Some((first, "requests that match no rule (fault.c)".into()));
        } else {
            let why = if loaded.kind == Kind::Chttp {
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
    }

    /// How `chttp` and `phttp` picked a server unlike their tcpvs pools do.
    fn scheduler_warnings(&mut self, loaded: &Loaded, has_rules: bool) {
        let line = loaded.svc.at.line;
        if loaded.kind == Kind::Chttp && has_rules {
            self.d.warn(
                line,
                "chttp looked the KTCPVS_SID cookie up before the rules, so a client stayed on its server whatever the URI, and set the cookie only on responses that set a cookie of their own; tcpvs's cookie keeps a client on its server within each rule's pool and sets the cookie on every new client's first response",
            );
        }
        if loaded.kind == Kind::Phttp {
            self.d.warn(
                line,
                "phttp: rules with `match N` (N > 0) hash capture N, as tcp_vs_phttp.c of ktcpvs-matrix does; the others pick by least connections, as upstream KTCPVS did",
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
