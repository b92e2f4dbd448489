//! KTCPVS's rule list of a service (`tcp_vs_ctl.c:tcp_vs_add_rule`): each rule's server must be
//! a server of the service and in no other rule; a rule whose pattern begins with the pattern
//! of an existing rule joins it; a new rule goes to the front, `.*` and `^/.*` to the back.

use std::collections::HashMap;

use super::{Kind, Loaded, Lowering};
use crate::import_ktcpvs::ere;
use crate::import_ktcpvs::model::KRule;
use crate::import_ktcpvs::Pos;

/// A rule as KTCPVS keeps it: rules that joined it by pattern prefix add their servers.
pub(super) struct KtRule<'a> {
    pub(super) first: &'a KRule,
    pub(super) regex: ere::Regex,
    /// The pattern in the syntax of the Rust `regex` crate.
    pub(super) rust: String,
    pub(super) match_num: u32,
    /// Indices into the service's servers, in the order the rules added them.
    pub(super) members: Vec<usize>,
    /// The rules that joined this rule after the first (their patterns' places).
    pub(super) joined: Vec<Pos>,
    pub(super) catch_all: bool,
}

pub(super) struct RuleList<'a> {
    pub(super) rules: Vec<KtRule<'a>>,
    /// Indices into `rules`, in the order KTCPVS tried them.
    pub(super) order: Vec<usize>,
}

impl RuleList<'_> {
    /// The rules other than `.*` and `^/.*` are not tried in the order they are written.
    pub(super) fn out_of_file_order(&self) -> bool {
        let lines: Vec<usize> = self
            .order
            .iter()
            .filter(|&&k| !self.rules[k].catch_all)
            .map(|&k| self.rules[k].first.line)
            .collect();
        lines.len() > 1 && !lines.windows(2).all(|w| w[0] < w[1])
    }
}

impl Lowering<'_> {
    /// Builds KTCPVS's rule list: merged by pattern prefix, in matching order.
    pub(super) fn rule_list<'r>(&mut self, loaded: &Loaded<'r>) -> RuleList<'r> {
        let svc = loaded.svc;
        let hashing = matches!(loaded.kind, Kind::Hhttp | Kind::Phttp);
        let mut list = RuleList {
            rules: Vec::new(),
            order: Vec::new(),
        };
        // Which rule line took each server (a server is in one rule at most: EBUSY).
        let mut taken: HashMap<usize, usize> = HashMap::new();
        for rule in &svc.rules {
            if svc.broken.contains(&rule.target.key()) {
                continue;
            }
            let Some(server) = self.rule_server(loaded, rule, &mut taken) else {
                continue;
            };
            if rule.match_num.is_some() && !hashing {
                self.d.warn(
                    rule.line,
                    format!(
                        "`match` has no effect with the {} scheduler",
                        loaded.kind.name()
                    ),
                );
            }
            if self.join(&mut list, rule, server, hashing) {
                continue;
            }
            let Some((regex, rust)) = self.compile(rule) else {
                continue;
            };
            let catch_all = rule.pattern == ".*" || rule.pattern == "^/.*";
            list.rules.push(KtRule {
                first: rule,
                regex,
                rust,
                match_num: rule.match_num.unwrap_or(0),
                members: vec![server],
                joined: Vec::new(),
                catch_all,
            });
            let index = list.rules.len() - 1;
            if catch_all {
                list.order.push(index);
            } else {
                list.order.insert(0, index);
            }
        }
        list
    }

    /// The index of the rule's server among the service's, unless KTCPVS refused the rule for
    /// it: not a server of the service (ENOENT), or taken by another rule (EBUSY).
    fn rule_server(
        &mut self,
        loaded: &Loaded,
        rule: &KRule,
        taken: &mut HashMap<usize, usize>,
    ) -> Option<usize> {
        let Some(server) = loaded
            .servers
            .iter()
            .position(|s| s.addr.key() == rule.target.key())
        else {
            self.d.error(
                rule.target_at,
                format!(
                    "server {} is not a `server` of `virtual {}`: KTCPVS refuses the rule (ENOENT)",
                    rule.target.shown(),
                    loaded.svc.name
                ),
            );
            return None;
        };
        if let Some(line) = taken.get(&server) {
            self.d.error(
                rule.target_at,
                format!(
                    "server {} is already used by the rule on line {line}: KTCPVS puts a server in one rule only (EBUSY)",
                    rule.target.text
                ),
            );
            return None;
        }
        taken.insert(server, rule.line);
        Some(server)
    }

    /// Adds `server` to the existing rule whose pattern begins `rule`'s (`strncmp` over the
    /// existing pattern's length), if there is one: then `rule`'s own pattern is unused.
    fn join(&mut self, list: &mut RuleList, rule: &KRule, server: usize, hashing: bool) -> bool {
        let Some(k) = list.order.iter().copied().find(|&k| {
            rule.pattern
                .starts_with(list.rules[k].first.pattern.as_str())
        }) else {
            return false;
        };
        let existing = &mut list.rules[k];
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
        true
    }

    /// The rule's pattern as regcomp read it, and in the Rust `regex` syntax; `None` (an
    /// error) when regcomp refused it or it has no Rust equivalent.
    fn compile(&mut self, rule: &KRule) -> Option<(ere::Regex, String)> {
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
                return None;
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
            return None;
        }
        Some((parsed, rust))
    }
}
