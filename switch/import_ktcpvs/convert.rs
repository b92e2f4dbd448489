//! The parsed KTCPVS services mapped to tcpvs: pools, rules in the order KTCPVS tried them,
//! and a warning for each part that has no equivalent.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

use super::ere;
use super::model::{KRule, KServer, KService, Out, OutPool, OutRule, OutServer, OutService};
use super::output::{toml_literal, toml_string};
use super::{Diags, Pos};

/// The schedulers KTCPVS ships (userspace/SCHEDULERS) and the tcpvs modules of the same name.
const SCHEDULERS: &str = "wlc, http, hhttp, chttp, phttp (and lc, rr, wrr, as tcpvs has them)";
/// The cookie `chttp` set (tcp_vs_chttp.c:inject_session_id_cookie).
const KTCPVS_COOKIE: &str = "KTCPVS_SID";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// `wlc`, `lc`, `rr`, `wrr`: one pool of every server.
    Plain(&'static str),
    Http,
    Hhttp,
    Chttp,
    Phttp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain(n) => n,
            Kind::Http => "http",
            Kind::Hhttp => "hhttp",
            Kind::Chttp => "chttp",
            Kind::Phttp => "phttp",
        }
    }
}

/// A rule as KTCPVS keeps it: rules that joined it by pattern prefix add their servers.
struct KtRule<'a> {
    first: &'a KRule,
    regex: ere::Regex,
    rust: String,
    match_num: u32,
    /// Indices into the service's servers, in the order the rules added them.
    members: Vec<usize>,
    /// The rule lines that joined this rule after the first.
    joined: Vec<usize>,
    catch_all: bool,
}

pub(super) struct Lowering<'a> {
    pub(super) lines: &'a [&'a str],
    pub(super) d: &'a mut Diags,
    pub(super) pool_names: HashSet<String>,
    pub(super) service_names: HashSet<String>,
}

/// `text` with control characters (but tabs) shown as `?`: fit for a TOML comment.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}

impl Lowering<'_> {
    /// `# ktcpvs line N: <the line>`: where a part came from.
    fn source(&self, line: usize) -> String {
        let text = self.lines.get(line - 1).map_or("", |l| l.trim());
        format!("ktcpvs line {line}: {}", printable(text))
    }

    pub(super) fn run(mut self, services: &[KService]) -> Out {
        let mut out = Out::default();
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut listens: Vec<(SocketAddrV4, &str, usize)> = Vec::new();
        // Per service: its thread limit (the larger of maxclients and startservers: a service
        // without maxclients kept its startservers threads), and the maxclients line if any.
        let mut limits: Vec<(&str, u32, Option<usize>)> = Vec::new();
        for svc in services {
            if let Some(line) = names.get(svc.name.as_str()) {
                self.d.error(
                    svc.name_at,
                    format!(
                        "`virtual {}` is already defined on line {line}: KTCPVS refuses the second (EEXIST)",
                        svc.name
                    ),
                );
                continue;
            }
            names.insert(&svc.name, svc.at.line);
            let listen = match &svc.listen {
                Some(l) => SocketAddrV4::new(l.value.ip, l.value.port.unwrap_or(0)),
                None => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            };
            if listen.port() != 0 {
                if let Some((_, other, line)) = listens.iter().find(|(a, _, _)| *a == listen) {
                    let at = svc.listen.as_ref().map_or(svc.at, |l| l.at);
                    self.d.error(
                        at,
                        format!(
                            "listen address {listen} is also the address of `virtual {other}` (line {line}): only one of them could listen"
                        ),
                    );
                    continue;
                }
                listens.push((listen, &svc.name, svc.at.line));
            }
            let knob = |key: &str| svc.knobs.iter().find(|k| k.key == key);
            let max = knob("maxclients");
            let start = knob("startservers").map_or(0, |k| k.value);
            let limit = max.map_or(0, |m| m.value).max(start);
            if limit > 0 {
                limits.push((&svc.name, limit, max.map(|m| m.line)));
            }
            if let Some(service) = self.service(svc, listen, &mut out) {
                out.services.push(service);
            }
        }
        // Only a file that sets maxclients somewhere gets a max_clients.
        if limits.iter().any(|(_, _, line)| line.is_some()) {
            let total: u64 = limits.iter().map(|(_, v, _)| u64::from(*v)).sum();
            let parts: Vec<String> = limits
                .iter()
                .map(|(name, v, line)| {
                    // Into a comment: control characters as `?` (found by fuzzing, I2).
                    let name = printable(name);
                    match line {
                        Some(line) => format!("`{name}` {v} (line {line})"),
                        None => format!("`{name}` {v} (startservers, no maxclients)"),
                    }
                })
                .collect();
            for (name, value, line) in &limits {
                let Some(line) = line else { continue };
                let shared = if limits.len() > 1 {
                    format!(", the sum over the virtual services ({})", parts.join(", "))
                } else {
                    String::new()
                };
                self.d.warn(
                    *line,
                    format!(
                        "maxclients becomes [switch] max_clients = {total}{shared}: KTCPVS ran at most {value} threads for `{name}`, one client connection each, and left more connections waiting in the listen queue; tcpvs needs no thread per client and answers 503 beyond max_clients, which counts the clients of all virtual services"
                    ),
                );
            }
            out.max_clients = Some((total, format!("KTCPVS threads: {}", parts.join(", "))));
        }
        out
    }

    fn unique_pool(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut n = 2;
        while !self.pool_names.insert(name.clone()) {
            name = format!("{wanted}-{n}");
            n += 1;
        }
        name
    }

    fn service(
        &mut self,
        svc: &KService,
        listen: SocketAddrV4,
        out: &mut Out,
    ) -> Option<OutService> {
        let Some(scheduler) = &svc.scheduler else {
            self.d.error(
                svc.at,
                format!(
                    "`virtual {}` has no `scheduler`: tcpvsadm -f has no default and KTCPVS refuses it (known: {SCHEDULERS})",
                    svc.name
                ),
            );
            return None;
        };
        let kind = match scheduler.value.as_str() {
            "wlc" => Kind::Plain("wlc"),
            "lc" => Kind::Plain("lc"),
            "rr" => Kind::Plain("rr"),
            "wrr" => Kind::Plain("wrr"),
            "http" => Kind::Http,
            "hhttp" => Kind::Hhttp,
            "chttp" => Kind::Chttp,
            "phttp" => Kind::Phttp,
            other => {
                self.d.error(
                    scheduler.at,
                    format!(
                        "unknown scheduler `{other}` (known: {SCHEDULERS}; names are lowercase)"
                    ),
                );
                return None;
            }
        };
        // The tcpvs name: letters, digits, `-`, `_`, `.`.
        let mut name: String = svc
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name != svc.name {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` is `[virtual.{name}]`: tcpvs names are letters, digits, `-`, `_` and `.`",
                    svc.name
                ),
            );
        }
        let base = name.clone();
        let mut n = 2;
        while !self.service_names.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        let mut service = OutService {
            name: name.clone(),
            comment: format!("{} (scheduler {})", self.source(svc.at.line), kind.name()),
            listen: listen.to_string(),
            default_pool: None,
            notes: Vec::new(),
            rules: Vec::new(),
        };
        if svc.listen.is_none() {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` has no `listen`: KTCPVS listened on 0.0.0.0 port 0 (a port the kernel picks), and so does this",
                    svc.name
                ),
            );
        } else if svc.listen.as_ref().is_some_and(|l| l.value.port.is_none()) {
            let line = svc.listen.as_ref().map_or(svc.at.line, |l| l.at.line);
            self.d.warn(
                line,
                "listen address without a port: KTCPVS listened on port 0 (a port the kernel picks), and so does this",
            );
        }
        for &line in &svc.overridden {
            self.d.warn(
                line,
                "replaced by a later line with the same setting, as in KTCPVS (kept as a comment)",
            );
            service
                .notes
                .push(format!("{} -- replaced by a later line", self.source(line)));
        }
        // Process knobs.
        for knob in &svc.knobs {
            if knob.key == "maxclients" {
                service.notes.push(format!(
                    "{} -- [switch] max_clients",
                    self.source(knob.line)
                ));
                continue;
            }
            self.d.warn(
                knob.line,
                format!(
                    "{} = {} has no equivalent: it sized KTCPVS's pool of kernel threads, and tcpvs runs no thread per connection (kept as a comment)",
                    knob.key, knob.value
                ),
            );
            service.notes.push(format!(
                "{} -- no equivalent: tcpvs runs no thread per connection",
                self.source(knob.line)
            ));
        }
        let knob = |key: &str| {
            svc.knobs
                .iter()
                .find(|k| k.key == key)
                .map_or(0, |k| k.value)
        };
        if knob("startservers") == 0 && (knob("minspareservers") == 0 || knob("maxclients") == 0) {
            self.d.warn(
                svc.at.line,
                format!(
                    "KTCPVS started no thread for `virtual {}` (tcpvsadm -f sets what is left out to 0: no startservers, and no minspareservers with maxclients), so it accepted no connection; tcpvs serves it",
                    svc.name
                ),
            );
        }
        // Servers: KTCPVS refused a second server with the same address (EEXIST).
        let mut servers: Vec<&KServer> = Vec::new();
        for s in &svc.servers {
            if let Some(first) = servers.iter().find(|p| p.addr.key() == s.addr.key()) {
                self.d.error(
                    s.at,
                    format!(
                        "server {} is already declared on line {}: KTCPVS refuses the second (EEXIST)",
                        s.addr.shown(), first.line
                    ),
                );
                continue;
            }
            servers.push(s);
        }
        // A server without a port: port 0 to KTCPVS, which could not connect to it; the man
        // page promises the listen port, which is taken here.
        let mut addrs = Vec::with_capacity(servers.len());
        for s in &servers {
            let port = match s.addr.port {
                Some(p) if p != 0 => p,
                _ if listen.port() != 0 => {
                    self.d.warn(
                        s.line,
                        format!(
                            "server `{}` has no port: KTCPVS used port 0 and could not connect; the rule file uses the listen port {}, as tcpvsadm(8) describes",
                            s.addr.text,
                            listen.port()
                        ),
                    );
                    listen.port()
                }
                _ => {
                    self.d.error(
                        s.at,
                        format!(
                            "server `{}` has no port (or port 0), and the listen port is 0 too: give it a port",
                            s.addr.text
                        ),
                    );
                    0
                }
            };
            addrs.push(SocketAddrV4::new(s.addr.ip, port));
        }
        let redirect = svc.redirect.as_ref().and_then(|r| match r.value.port {
            Some(p) if p != 0 => Some(SocketAddrV4::new(r.value.ip, p)),
            _ => {
                self.d.error(
                    r.at,
                    "redirect address without a port: KTCPVS never redirected to it (it checks the port)",
                );
                None
            }
        });
        match kind {
            Kind::Plain(module) => {
                self.plain(svc, module, &servers, &addrs, redirect, &mut service, out)
            }
            _ => self.ruled(svc, kind, &servers, &addrs, redirect, &mut service, out),
        }
        Some(service)
    }

    /// `wlc` (and `lc`, `rr`, `wrr`): one pool of every server; rules are unused.
    #[allow(clippy::too_many_arguments)]
    fn plain(
        &mut self,
        svc: &KService,
        module: &'static str,
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
        redirect: Option<SocketAddrV4>,
        service: &mut OutService,
        out: &mut Out,
    ) {
        for rule in &svc.rules {
            self.d.warn(
                rule.line,
                format!("the {module} scheduler uses no rules: this one had no effect in KTCPVS (kept as a comment)"),
            );
            service.notes.push(format!(
                "{} -- no effect: the {module} scheduler uses no rules",
                self.source(rule.line)
            ));
        }
        if servers.is_empty() && redirect.is_none() {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` has no server: KTCPVS closed every connection; tcpvs answers 503",
                    svc.name
                ),
            );
            return;
        }
        let pool = self.unique_pool(slug(&service.name));
        let members: Vec<usize> = (0..servers.len()).collect();
        let mut list = self.pool_servers(&members, servers, addrs);
        if let Some(r) = redirect {
            list.push(self.redirect_backup(svc, r));
        }
        service.default_pool = Some((
            pool.clone(),
            "every request: KTCPVS's scheduler picked among all servers".into(),
        ));
        out.pools.push(OutPool {
            name: pool,
            notes: Vec::new(),
            scheduler: module,
            options: Vec::new(),
            servers: list,
        });
    }

    fn pool_servers(
        &self,
        members: &[usize],
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
    ) -> Vec<OutServer> {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        sorted
            .into_iter()
            .map(|i| OutServer {
                addr: addrs[i],
                weight: servers[i].weight,
                backup: false,
                comment: self.source(servers[i].line),
            })
            .collect()
    }

    fn redirect_backup(&self, svc: &KService, addr: SocketAddrV4) -> OutServer {
        let line = svc.redirect.as_ref().map_or(svc.at.line, |r| r.at.line);
        OutServer {
            addr,
            weight: 1,
            backup: true,
            comment: format!(
                "{} -- used when no server of the pool is usable",
                self.source(line)
            ),
        }
    }

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
                existing.joined.push(rule.line);
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
    fn ruled(
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
                service.notes.push(format!(
                    "{} -- no effect with chttp",
                    self.source(r.at.line)
                ));
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
                    .push(format!("{} -- in no rule: never used", self.source(s.line)));
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
                    self.source(rule.first.line)
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
            for &line in &rule.joined {
                pool.notes
                    .push(format!("{} -- joined this rule", self.source(line)));
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
            let comment = self.source(rule.first.line);
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
            let line = svc.redirect.as_ref().map_or(svc.at.line, |r| r.at.line);
            service.default_pool = Some((
                pool_name.clone(),
                format!("{} -- requests that match no rule", self.source(line)),
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
                    comment: self.source(line),
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
            let keep = self.source(servers[chosen].line);
            pool.servers.retain(|s| s.comment == keep);
            for &m in &rule.members {
                if m != chosen {
                    pool.notes.push(format!(
                        "{} -- never chosen: match {n} does not exist",
                        self.source(servers[m].line)
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

/// A pool-name piece from a service name: lowercase letters, digits and `-`.
fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "service".to_string()
    } else {
        s
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

    const MAN_PAGE: &str = "virtual web {
    listen = 0.0.0.0:80
    scheduler = http
    startservers = 8
    maxclients = 256
    minspareservers = 6
    maxspareservers = 18
    server = 192.168.10.3:80 1
    server = 192.168.10.2:80 1
    server = 192.168.10.1:80 1
    rule = pattern \"^/cgi-bin/\"  use server 192.168.10.1:80
    rule = pattern \"^/images/\"  use server 192.168.10.2:80
    rule = pattern \".*\"  use server 192.168.10.3:80
}
";

    #[test]
    fn the_man_page_example_converts_with_its_rules_in_ktcpvs_order() {
        let report = import("ktcpvs.conf", MAN_PAGE);
        assert!(report.is_ok(), "{:?}", report.errors);
        let r = &report.rules;
        let images = r.find("path = '^/images/'").expect(r);
        let cgi = r.find("path = '^/cgi-bin/'").expect(r);
        assert!(images < cgi, "the later rule is tried first:\n{r}");
        assert!(r.contains("default_pool = \"web-default\""), "{r}");
        assert!(r.contains("max_clients = 256"), "{r}");
        assert!(
            r.contains("# ktcpvs line 4: startservers = 8 -- no equivalent"),
            "{r}"
        );
        let warned: Vec<usize> = report.warnings.iter().map(|w| w.line).collect();
        for line in [4, 5, 6, 7] {
            assert!(
                warned.contains(&line),
                "no warning for line {line}: {warned:?}"
            );
        }
        assert!(report.warnings[0]
            .to_string()
            .starts_with("ktcpvs.conf:4: warning: startservers = 8"));
        crate::config::Config::parse("out.toml", r).unwrap();
    }

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
