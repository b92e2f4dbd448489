//! A pool's server list with a discovery's answer in it: the servers its file lists first, in
//! the file's order, then those found, in address order. An address the file lists stays the
//! file's server (its weight, `max_conns` and `backup` as written).

use crate::config::{PoolConfig, ServerConfig};
use std::net::SocketAddr;

/// The switch's own addresses, which no answer may make a server (a record naming the switch
/// would loop every request back into it, or reach its admin endpoint from loopback): the
/// services' listeners and the admin endpoint's. A found address is the switch's own when it
/// has one of their ports and the same IP, or a loopback IP where the listener is bound to
/// every address. (Another address of the host's own behind a wildcard listener is not
/// known here: README, `discover`.)
pub fn own_addresses(
    listeners: impl Iterator<Item = SocketAddr>,
    admin: Option<&crate::config::admin::AdminConfig>,
) -> Vec<SocketAddr> {
    let mut own: Vec<SocketAddr> = listeners.collect();
    if let Some(crate::config::admin::AdminListen::Tcp(addr)) = admin.map(|a| &a.listen) {
        own.push(*addr);
    }
    own
}

/// `answer` without the switch's own addresses; how many were left out.
pub fn without_own(answer: &mut Vec<ServerConfig>, own: &[SocketAddr]) -> usize {
    let before = answer.len();
    answer.retain(|server| !own.iter().any(|o| is_same_socket(*o, server.addr)));
    before - answer.len()
}

fn is_same_socket(own: SocketAddr, found: SocketAddr) -> bool {
    let (a, b) = (own.ip(), found.ip());
    own.port() == found.port() && (a == b || (a.is_unspecified() && b.is_loopback()))
}

/// The servers of `config` that were found, not listed.
pub fn found(config: &PoolConfig) -> impl Iterator<Item = &ServerConfig> {
    config.servers.iter().filter(|s| s.discovered)
}

/// `config` with `answer` as its found servers, in place of those it had.
pub fn with_found(config: &PoolConfig, answer: &[ServerConfig]) -> PoolConfig {
    let mut next = config.clone();
    next.servers.retain(|s| !s.discovered);
    let listed = next.servers.len();
    for server in answer {
        if !next.servers[..listed].iter().any(|l| l.addr == server.addr) {
            next.servers.push(server.clone());
        }
    }
    next
}

/// What `answer` changes in what `config` has found, for the log: `3 servers (+10.0.0.4:80;
/// -10.0.0.1:80)`, at most eight addresses each way named.
pub fn described_change(config: &PoolConfig, answer: &[ServerConfig]) -> String {
    const NAMED: usize = 8;
    let before: Vec<_> = found(config).map(|s| s.addr).collect();
    // An address the file lists stays the file's server: not one found.
    let listed =
        |a: &std::net::SocketAddr| config.servers.iter().any(|s| !s.discovered && s.addr == *a);
    let added: Vec<_> = answer
        .iter()
        .map(|s| s.addr)
        .filter(|a| !before.contains(a) && !listed(a))
        .collect();
    let removed: Vec<_> = before
        .iter()
        .filter(|a| !answer.iter().any(|s| s.addr == **a))
        .collect();
    let named = |sign: char, list: Vec<String>| {
        let mut text: Vec<String> = list
            .iter()
            .take(NAMED)
            .map(|a| format!("{sign}{a}"))
            .collect();
        if list.len() > NAMED {
            text.push(format!("{sign}{} more", list.len() - NAMED));
        }
        text.join(", ")
    };
    let mut parts = Vec::new();
    if !added.is_empty() {
        parts.push(named('+', added.iter().map(ToString::to_string).collect()));
    }
    if !removed.is_empty() {
        parts.push(named(
            '-',
            removed.iter().map(ToString::to_string).collect(),
        ));
    }
    if parts.is_empty() {
        parts.push("weights or priorities changed".to_string());
    }
    let count = answer.len();
    format!(
        "{count} server{} ({})",
        if count == 1 { "" } else { "s" },
        parts.join("; ")
    )
}

/// Whether `answer` would change what `config` has found.
pub fn changes(config: &PoolConfig, answer: &[ServerConfig]) -> bool {
    with_found(config, answer).servers != config.servers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(addr: &str, discovered: bool, weight: u32) -> ServerConfig {
        ServerConfig {
            addr: addr.parse().unwrap(),
            host: discovered.then(|| "api.test".to_string()),
            weight,
            max_conns: 0,
            backup: false,
            discovered,
        }
    }

    fn pool(servers: Vec<ServerConfig>) -> PoolConfig {
        let text = "[virtual.v]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
                    [pool.p]\ndiscover = { dns = \"api.test:80\" }\n";
        let mut config = crate::config::Config::parse("t.toml", text)
            .unwrap()
            .pools
            .remove(0);
        config.servers = servers;
        config
    }

    #[test]
    fn an_answer_replaces_what_was_found_and_keeps_the_listed_servers_first() {
        let before = pool(vec![
            server("10.0.0.1:80", false, 3),
            server("10.0.0.7:80", true, 1),
        ]);
        let answer = [
            server("10.0.0.2:80", true, 1),
            server("10.0.0.3:80", true, 1),
        ];
        let after = with_found(&before, &answer);
        let addrs: Vec<String> = after.servers.iter().map(|s| s.addr.to_string()).collect();
        assert_eq!(addrs, ["10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"]);
        assert!(changes(&before, &answer));
        assert!(!changes(&after, &answer));
        assert_eq!(found(&after).count(), 2);
    }

    #[test]
    fn an_address_the_file_lists_stays_the_files_server() {
        let before = pool(vec![server("10.0.0.1:80", false, 3)]);
        let after = with_found(&before, &[server("10.0.0.1:80", true, 1)]);
        assert_eq!(after.servers, before.servers);
        assert!(!changes(&before, &[server("10.0.0.1:80", true, 1)]));
    }

    #[test]
    fn a_change_is_described_by_what_joins_and_what_leaves() {
        let before = with_found(&pool(Vec::new()), &[server("10.0.0.1:80", true, 1)]);
        let answer = [
            server("10.0.0.2:80", true, 1),
            server("10.0.0.3:80", true, 1),
        ];
        assert_eq!(
            described_change(&before, &answer),
            "2 servers (+10.0.0.2:80, +10.0.0.3:80; -10.0.0.1:80)"
        );
        let many: Vec<_> = (2..14)
            .map(|i| server(&format!("10.0.0.{i}:80"), true, 1))
            .collect();
        let text = described_change(&before, &many);
        assert!(text.starts_with("12 servers (+10.0.0.2:80, "), "{text}");
        assert!(
            text.ends_with("+10.0.0.9:80, +4 more; -10.0.0.1:80)"),
            "{text}"
        );
    }

    #[test]
    fn the_switchs_own_addresses_are_never_servers() {
        let own = [
            "0.0.0.0:8080".parse().unwrap(),
            "127.0.0.1:9090".parse().unwrap(),
        ];
        let mut answer = vec![
            server("127.0.0.5:8080", true, 1),
            server("127.0.0.1:9090", true, 1),
            server("127.0.0.2:9090", true, 1),
            server("127.0.0.1:9091", true, 1),
        ];
        assert_eq!(without_own(&mut answer, &own), 2);
        let kept: Vec<String> = answer.iter().map(|s| s.addr.to_string()).collect();
        assert_eq!(kept, ["127.0.0.2:9090", "127.0.0.1:9091"]);
    }

    #[test]
    fn a_weight_that_changes_is_a_change() {
        let before = with_found(&pool(Vec::new()), &[server("10.0.0.2:80", true, 1)]);
        assert!(changes(&before, &[server("10.0.0.2:80", true, 5)]));
    }
}
