//! Every discovering pool asked at once, waiting for the answers: at start and at a reload
//! (before the plan, so that a new pool starts with its servers), and by `tcpvs check`.
//!
//! The lookups run on a thread of their own with a runtime of its own: the callers are plain
//! threads (the start, `tcpvs check`) or a reload off the runtime's threads, and none may be
//! inside a runtime's `block_on`.

use super::found;
use super::lookup::{self, Answer};
use crate::config::discover::Discover;
use crate::config::PoolConfig;
use crate::state::generation::Generation;
use std::net::SocketAddr;

/// Asks each of `discovers`; the answers in the same order.
pub fn ask_all(discovers: Vec<Discover>) -> Vec<Result<Answer, String>> {
    if discovers.is_empty() {
        return Vec::new();
    }
    let count = discovers.len();
    let asked = std::thread::Builder::new()
        .name("tcpvs-discover".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            Ok(runtime.block_on(async move {
                // One task each: the lookups wait on the network, all at once.
                let tasks: Vec<_> = discovers
                    .into_iter()
                    .map(|discover| {
                        tokio::spawn(async move {
                            let resolver = lookup::resolver(&discover)?;
                            lookup::lookup(&resolver, &discover.lookup).await
                        })
                    })
                    .collect();
                let mut answers = Vec::with_capacity(tasks.len());
                for task in tasks {
                    answers.push(task.await.unwrap_or_else(|e| Err(e.to_string())));
                }
                answers
            }))
        });
    let outcome: Result<Vec<Result<Answer, String>>, String> = match asked {
        Ok(thread) => thread
            .join()
            .unwrap_or_else(|_| Err("the lookup thread failed".to_string())),
        Err(e) => Err(e.to_string()),
    };
    outcome.unwrap_or_else(|why| (0..count).map(|_| Err(why.clone())).collect())
}

/// Puts found servers into the discovering pools of `pools`: a pool that asks what it asked in
/// `current` keeps what it found there (its watcher goes on asking); any other is asked now.
/// A lookup that fails or answers nothing keeps what the running pool of that name found, if
/// any (a reload that changes the question while DNS is down must not empty the pool), else
/// the pool starts with its listed servers only; a warning either way (its watcher asks
/// again). No found server is one of `own` (found.rs `own_addresses`).
pub fn fill(pools: &mut [PoolConfig], current: &Generation, own: &[SocketAddr]) {
    let mut asked = Vec::new();
    for (index, pool) in pools.iter_mut().enumerate() {
        let Some(discover) = &pool.discover else {
            continue;
        };
        let running = current.pool(&pool.name);
        match running.filter(|r| r.config.discover.as_ref() == Some(discover)) {
            Some(running) => {
                let mut kept: Vec<_> = found::found(&running.config).cloned().collect();
                found::without_own(&mut kept, own);
                *pool = found::with_found(pool, &kept);
            }
            None => asked.push(index),
        }
    }
    let discovers = asked
        .iter()
        .filter_map(|&index| pools[index].discover.clone())
        .collect();
    for (index, answer) in asked.into_iter().zip(ask_all(discovers)) {
        let pool = &mut pools[index];
        let Some(discover) = pool.discover.clone() else {
            continue;
        };
        let why = match answer {
            Ok(mut answer) if !answer.servers.is_empty() => {
                let own_left_out = found::without_own(&mut answer.servers, own);
                tracing::info!(
                    "discovery: pool `{}`: {} found {}{}",
                    pool.name,
                    discover.lookup,
                    found::described_change(pool, &answer.servers),
                    left_out(own_left_out)
                );
                *pool = found::with_found(pool, &answer.servers);
                continue;
            }
            Ok(_) => "found no server".to_string(),
            Err(why) => format!("failed ({why})"),
        };
        let mut before: Vec<_> = current
            .pool(&pool.name)
            .map(|running| found::found(&running.config).cloned().collect())
            .unwrap_or_default();
        found::without_own(&mut before, own);
        tracing::warn!(
            "discovery: pool `{}`: {} {why}; {} until it answers (asked again every {:?})",
            pool.name,
            discover.lookup,
            match before.len() {
                0 => "no server found yet".to_string(),
                n => format!("the {n} servers found before stay"),
            },
            discover.interval
        );
        *pool = found::with_found(pool, &before);
    }
}

/// `, 2 addresses of the switch itself left out`, or nothing.
pub fn left_out(own: usize) -> String {
    match own {
        0 => String::new(),
        n => format!(
            ", {n} address{} of the switch itself left out",
            if n == 1 { "" } else { "es" }
        ),
    }
}

/// `10.0.0.1:80, 10.0.0.2:80 (weight 5, backup)`.
pub fn list(servers: &[crate::config::ServerConfig]) -> String {
    let shown: Vec<String> = servers
        .iter()
        .map(|s| {
            let mut text = s.addr.to_string();
            match (s.weight != 1, s.backup) {
                (true, true) => text.push_str(&format!(" (weight {}, backup)", s.weight)),
                (true, false) => text.push_str(&format!(" (weight {})", s.weight)),
                (false, true) => text.push_str(" (backup)"),
                (false, false) => {}
            }
            text
        })
        .collect();
    shown.join(", ")
}
