//! `hhttp`'s capture hash (and `phttp`'s with `match N`) as a tcpvs `hash` pool keyed on a
//! regex capture (`tcp_vs_hhttp.c:tcp_vs_hhttp_matchrule`).

use std::collections::HashSet;

use super::rule_list::KtRule;
use super::{Loaded, Lowering};
use crate::import_ktcpvs::ere;
use crate::import_ktcpvs::model::OutPool;
use crate::import_ktcpvs::output::{toml_literal, toml_string};

impl Lowering<'_> {
    /// The pool of an `hhttp` rule (or a `phttp` rule with `match N`): `hash` on capture N.
    pub(super) fn hash_pool(&mut self, loaded: &Loaded, rule: &KtRule<'_>, pool: &mut OutPool) {
        let n = rule.match_num as usize;
        if n > rule.regex.groups {
            self.missing_capture(loaded, rule, pool);
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
            loaded.kind.name()
        ));
        self.hash_warnings(loaded, rule);
    }

    /// `match N` past the pattern's groups: regexec leaves such a slot at -1, the sum is 0, and
    /// the first server of the rule's list (the last one a rule added) takes every request.
    fn missing_capture(&mut self, loaded: &Loaded, rule: &KtRule<'_>, pool: &mut OutPool) {
        let n = rule.match_num;
        let groups = rule.regex.groups;
        let chosen = *rule.members.last().expect("a rule has a server");
        self.d.warn(
            rule.first.line,
            format!(
                "match {n}, but \"{}\" has {groups} capture group{}: KTCPVS hashed nothing and sent every request of the rule to {}, and so does this (the others kept as comments)",
                rule.first.pattern,
                if groups == 1 { "" } else { "s" },
                loaded.servers[chosen].addr
            ),
        );
        let keep = self.source(loaded.servers[chosen].at);
        pool.servers.retain(|s| s.comment == keep);
        for &m in &rule.members {
            if m != chosen {
                pool.notes.push(format!(
                    "{} -- never chosen: match {n} does not exist",
                    self.source(loaded.servers[m].at)
                ));
            }
        }
    }

    /// Where the capture hash picks unlike KTCPVS's: a capture at the URI's first byte,
    /// weights, alternatives.
    fn hash_warnings(&mut self, loaded: &Loaded, rule: &KtRule<'_>) {
        let (regex, line) = (&rule.regex, rule.first.line);
        let n = rule.match_num as usize;
        if regex.node.group_opens(n) {
            self.d.warn(
                line,
                format!(
                    "KTCPVS gave no server to a request whose match {n} begins at the URI's first byte (tcp_vs_hhttp.c tests `start && end`), and such requests went to the redirect address or were closed; tcpvs hashes them like the others"
                ),
            );
        }
        let weights: HashSet<u32> = rule
            .members
            .iter()
            .map(|&m| loaded.servers[m].weight)
            .collect();
        if weights.len() > 1 {
            self.d.warn(
                line,
                format!(
                    "{} ignored weights (each server of the rule got an equal share of the keys); tcpvs's hash gives each server a share by its weight: set equal weights to keep KTCPVS's split",
                    loaded.kind.name()
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
