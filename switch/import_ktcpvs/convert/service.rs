//! One KTCPVS service: its scheduler, its tcpvs name and listener, what its settings become
//! (notes for what has no equivalent), the servers KTCPVS accepted and their ports, its
//! redirect address; and the one pool of the schedulers without rules (`wlc`, `lc`, `rr`,
//! `wrr`).

use std::net::SocketAddrV4;

use super::{slug, Kind, Loaded, Lowering, SCHEDULERS};
use crate::import_ktcpvs::model::{KServer, KService, Out, OutPool, OutService};

impl Lowering<'_> {
    /// The tcpvs service of `svc`, listening on `listen`, its pools added to `out`; `None` when
    /// its scheduler is missing or unknown.
    pub(super) fn service(
        &mut self,
        svc: &KService,
        listen: SocketAddrV4,
        out: &mut Out,
    ) -> Option<OutService> {
        let kind = self.kind(svc)?;
        let name = self.tcpvs_name(svc);
        let mut service = OutService {
            name,
            comment: format!("{} (scheduler {})", self.source(svc.at), kind.name()),
            listen: listen.to_string(),
            default_pool: None,
            notes: Vec::new(),
            rules: Vec::new(),
        };
        self.listen_warnings(svc);
        self.setting_notes(svc, &mut service);
        let servers = self.accepted_servers(svc);
        let addrs = self.server_addrs(&servers, listen);
        let redirect = self.redirect(svc);
        let loaded = Loaded {
            svc,
            kind,
            servers,
            addrs,
            redirect,
        };
        match kind {
            Kind::Plain(module) => self.plain(&loaded, module, &mut service, out),
            _ => self.ruled(loaded, &mut service, out),
        }
        Some(service)
    }

    fn kind(&mut self, svc: &KService) -> Option<Kind> {
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
        let kind = Kind::of(&scheduler.value);
        if kind.is_none() {
            self.d.error(
                scheduler.at,
                format!(
                    "unknown scheduler `{}` (known: {SCHEDULERS}; names are lowercase)",
                    scheduler.value
                ),
            );
        }
        kind
    }

    /// The service's name in tcpvs: letters, digits, `-`, `_`, `.`, and unique.
    fn tcpvs_name(&mut self, svc: &KService) -> String {
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
        name
    }

    /// A listen address left out, or without a port: port 0, as in KTCPVS.
    fn listen_warnings(&mut self, svc: &KService) {
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
    }

    /// Settings a later one replaced, and the process knobs: comments in the service, and a
    /// warning for each that has no equivalent.
    fn setting_notes(&mut self, svc: &KService, service: &mut OutService) {
        for &at in &svc.overridden {
            self.d.warn(
                at.line,
                "replaced by a later line with the same setting, as in KTCPVS (kept as a comment)",
            );
            service
                .notes
                .push(format!("{} -- replaced by a later line", self.source(at)));
        }
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
    }

    /// The servers KTCPVS accepted: it refused a second server with the same address (EEXIST).
    fn accepted_servers<'s>(&mut self, svc: &'s KService) -> Vec<&'s KServer> {
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
        servers
    }

    /// Each server's address in the rule file. A server without a port: port 0 to KTCPVS,
    /// which could not connect to it; the man page promises the listen port, which is taken
    /// here.
    fn server_addrs(&mut self, servers: &[&KServer], listen: SocketAddrV4) -> Vec<SocketAddrV4> {
        let mut addrs = Vec::with_capacity(servers.len());
        for s in servers {
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
        addrs
    }

    /// The redirect address, when KTCPVS could use it.
    fn redirect(&mut self, svc: &KService) -> Option<SocketAddrV4> {
        svc.redirect.as_ref().and_then(|r| match r.value.port {
            Some(p) if p != 0 => Some(SocketAddrV4::new(r.value.ip, p)),
            _ => {
                self.d.error(
                    r.at,
                    "redirect address without a port: KTCPVS never redirected to it (it checks the port)",
                );
                None
            }
        })
    }

    /// `wlc` (and `lc`, `rr`, `wrr`): one pool of every server; rules are unused.
    fn plain(
        &mut self,
        loaded: &Loaded,
        module: &'static str,
        service: &mut OutService,
        out: &mut Out,
    ) {
        let svc = loaded.svc;
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
        if loaded.servers.is_empty() && loaded.redirect.is_none() {
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
        let members: Vec<usize> = (0..loaded.servers.len()).collect();
        let mut list = self.pool_servers(&members, loaded);
        if let Some(r) = loaded.redirect {
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
}
