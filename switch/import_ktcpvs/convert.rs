//! The parsed KTCPVS services mapped to tcpvs: the file's services with their listeners, and
//! `[switch] max_clients` from their thread limits, here; each service's settings, servers and
//! the one pool of the schedulers without rules (`wlc`, `lc`, `rr`, `wrr`) in `service.rs`; the
//! schedulers with rules in `ruled.rs`, over KTCPVS's rule list (`rule_list.rs`), with
//! `hhttp`'s capture hash in `hash.rs`.

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddrV4};

use super::model::{KServer, KService, Out, OutServer};
use super::{Diags, Pos};

mod hash;
mod rule_list;
mod ruled;
mod service;

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

/// The scheduler names KTCPVS knows (case matters) and how each converts.
const KINDS: &[(&str, Kind)] = &[
    ("wlc", Kind::Plain("wlc")),
    ("lc", Kind::Plain("lc")),
    ("rr", Kind::Plain("rr")),
    ("wrr", Kind::Plain("wrr")),
    ("http", Kind::Http),
    ("hhttp", Kind::Hhttp),
    ("chttp", Kind::Chttp),
    ("phttp", Kind::Phttp),
];

impl Kind {
    fn of(scheduler: &str) -> Option<Kind> {
        KINDS
            .iter()
            .find(|(name, _)| *name == scheduler)
            .map(|&(_, kind)| kind)
    }

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

pub(super) struct Lowering<'a> {
    lines: &'a [&'a str],
    /// Where each statement is written (parse.rs): a line may hold several.
    statements: &'a [(Pos, usize)],
    d: &'a mut Diags,
    pool_names: HashSet<String>,
    service_names: HashSet<String>,
}

/// A service as KTCPVS loaded it, which the steps after its settings share: its scheduler,
/// the servers it accepted (no second of one address) with the addresses the rule file gives
/// them, and the redirect address it could use.
struct Loaded<'s> {
    svc: &'s KService,
    kind: Kind,
    servers: Vec<&'s KServer>,
    /// The address of each of `servers`, in the same order.
    addrs: Vec<SocketAddrV4>,
    redirect: Option<SocketAddrV4>,
}

/// The services already converted, to refuse a second of a name or listen address.
#[derive(Default)]
struct Seen<'s> {
    /// Each name and the line of its `virtual`.
    names: HashMap<&'s str, usize>,
    listens: Vec<(SocketAddrV4, &'s str, usize)>,
}

/// How many connections a service served at once: its number of kernel threads.
struct ThreadLimit<'s> {
    service: &'s str,
    /// The larger of maxclients and startservers: a service without maxclients kept its
    /// startservers threads.
    threads: u32,
    /// The line of its `maxclients`, if any.
    maxclients_line: Option<usize>,
}

/// `text` with control characters (but tabs) shown as `?`: fit for a TOML comment.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
        .collect()
}

impl<'a> Lowering<'a> {
    pub(super) fn new(
        lines: &'a [&'a str],
        statements: &'a [(Pos, usize)],
        d: &'a mut Diags,
    ) -> Self {
        Lowering {
            lines,
            statements,
            d,
            pool_names: HashSet::new(),
            service_names: HashSet::new(),
        }
    }
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
        let mut seen = Seen::default();
        let mut limits: Vec<ThreadLimit> = Vec::new();
        for svc in services {
            let Some(listen) = self.first_of_its_kind(svc, &mut seen) else {
                continue;
            };
            let knob = |key: &str| svc.knobs.iter().find(|k| k.key == key);
            let max = knob("maxclients");
            let start = knob("startservers").map_or(0, |k| k.value);
            let threads = max.map_or(0, |m| m.value).max(start);
            if threads > 0 {
                limits.push(ThreadLimit {
                    service: &svc.name,
                    threads,
                    maxclients_line: max.map(|m| m.line),
                });
            }
            if let Some(service) = self.service(svc, listen, &mut out) {
                out.services.push(service);
            }
        }
        out.max_clients = self.max_clients(&limits);
        out
    }

    /// The listen address of `svc`, or `None` (an error) when an earlier service has its name
    /// or its address (with a port: port 0 is one the kernel picks).
    fn first_of_its_kind<'s>(
        &mut self,
        svc: &'s KService,
        seen: &mut Seen<'s>,
    ) -> Option<SocketAddrV4> {
        if let Some(line) = seen.names.get(svc.name.as_str()) {
            self.d.error(
                svc.name_at,
                format!(
                    "`virtual {}` is already defined on line {line}: KTCPVS refuses the second (EEXIST)",
                    svc.name
                ),
            );
            return None;
        }
        seen.names.insert(&svc.name, svc.at.line);
        let listen = match &svc.listen {
            Some(l) => SocketAddrV4::new(l.value.ip, l.value.port.unwrap_or(0)),
            None => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
        };
        if listen.port() == 0 {
            return Some(listen);
        }
        if let Some((_, other, line)) = seen.listens.iter().find(|(a, _, _)| *a == listen) {
            let at = svc.listen.as_ref().map_or(svc.at, |l| l.at);
            self.d.error(
                at,
                format!(
                    "listen address {listen} is also the address of `virtual {other}` (line {line}): only one of them could listen"
                ),
            );
            return None;
        }
        seen.listens.push((listen, &svc.name, svc.at.line));
        Some(listen)
    }

    /// `[switch] max_clients` and its comment, with a warning at each `maxclients`: only a
    /// file that sets maxclients somewhere gets one.
    fn max_clients(&mut self, limits: &[ThreadLimit]) -> Option<(u64, String)> {
        if limits.iter().all(|l| l.maxclients_line.is_none()) {
            return None;
        }
        let total: u64 = limits.iter().map(|l| u64::from(l.threads)).sum();
        let parts: Vec<String> = limits
            .iter()
            .map(|l| {
                // Into a comment: control characters as `?` (found by fuzzing, I2).
                let name = printable(l.service);
                let v = l.threads;
                match l.maxclients_line {
                    Some(line) => format!("`{name}` {v} (line {line})"),
                    None => format!("`{name}` {v} (startservers, no maxclients)"),
                }
            })
            .collect();
        for limit in limits {
            let Some(line) = limit.maxclients_line else {
                continue;
            };
            let shared = if limits.len() > 1 {
                format!(", the sum over the virtual services ({})", parts.join(", "))
            } else {
                String::new()
            };
            let (value, name) = (limit.threads, limit.service);
            self.d.warn(
                line,
                format!(
                    "maxclients becomes [switch] max_clients = {total}{shared}: KTCPVS ran at most {value} threads for `{name}`, one client connection each, and left more connections waiting in the listen queue; tcpvs needs no thread per client and answers 503 beyond max_clients, which counts the clients of all virtual services"
                ),
            );
        }
        Some((total, format!("KTCPVS threads: {}", parts.join(", "))))
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

    /// The servers `members` (indices into `loaded.servers`) of a pool, in file order.
    fn pool_servers(&self, members: &[usize], loaded: &Loaded) -> Vec<OutServer> {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        sorted
            .into_iter()
            .map(|i| OutServer {
                addr: loaded.addrs[i],
                weight: loaded.servers[i].weight,
                backup: false,
                comment: self.source(loaded.servers[i].at),
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
