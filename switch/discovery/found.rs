//! A pool's server list with a discovery's answer in it: the servers its file lists first, in
//! the file's order, then those found, in address order. An address the file lists stays the
//! file's server (its weight, `max_conns` and `backup` as written).

use crate::config::{PoolConfig, ServerConfig};

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
    fn a_weight_that_changes_is_a_change() {
        let before = with_found(&pool(Vec::new()), &[server("10.0.0.2:80", true, 1)]);
        assert!(changes(&before, &[server("10.0.0.2:80", true, 5)]));
    }
}
