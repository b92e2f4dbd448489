//! The parsed KTCPVS services mapped to tcpvs: each service with its listener and settings, the
//! one pool of the schedulers without rules (`wlc`, `lc`, `rr`, `wrr`), the redirect address as
//! a backup, and a warning for each part that has no equivalent. The schedulers with rules are
//! `ruled.rs`.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

use super::ere;
use super::model::{KRule, KServer, KService, Out, OutPool, OutServer, OutService};
use super::{Diags, Pos};

mod ruled;

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
    /// The rules that joined this rule after the first (their patterns' places).
    joined: Vec<Pos>,
    catch_all: bool,
}

pub(super) struct Lowering<'a> {
    pub(super) lines: &'a [&'a str],
    /// Where each statement is written (parse.rs): a line may hold several.
    pub(super) statements: &'a [(Pos, usize)],
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
    /// `# ktcpvs line N: <the line>`: where a part came from, `at` being a place in its
    /// statement. A line holding several statements (a service written on one line) shows
    /// only the statement's own words.
    fn source(&self, at: Pos) -> String {
        let line = at.line;
        let whole = self.lines.get(line - 1).map_or("", |l| l.trim());
        let mut on_line = self.statements.iter().filter(|(s, _)| s.line == line);
        let text = match on_line.clone().nth(1) {
            None => whole.to_string(),
            Some(_) => match on_line.find(|(s, end)| (s.col..*end).contains(&at.col)) {
                Some((s, end)) => self.lines[line - 1]
                    .chars()
                    .skip(s.col - 1)
                    .take(end - s.col)
                    .collect(),
                None => whole.to_string(),
            },
        };
        format!("ktcpvs line {line}: {}", printable(&text))
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
            comment: format!("{} (scheduler {})", self.source(svc.at), kind.name()),
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
        for &at in &svc.overridden {
            self.d.warn(
                at.line,
                "replaced by a later line with the same setting, as in KTCPVS (kept as a comment)",
            );
            service
                .notes
                .push(format!("{} -- replaced by a later line", self.source(at)));
        }
        // Process knobs.
        for knob in &svc.knobs {
            if knob.key == "maxclients" {
                service
                    .notes
                    .push(format!("{} -- [switch] max_clients", self.source(knob.at)));
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
                self.source(knob.at)
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
                self.source(rule.pattern_at)
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
                comment: self.source(servers[i].at),
            })
            .collect()
    }

    fn redirect_backup(&self, svc: &KService, addr: SocketAddrV4) -> OutServer {
        let at = svc.redirect.as_ref().map_or(svc.at, |r| r.at);
        OutServer {
            addr,
            weight: 1,
            backup: true,
            comment: format!(
                "{} -- used when no server of the pool is usable",
                self.source(at)
            ),
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
}
