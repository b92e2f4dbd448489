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
/// `current` keeps what it found there (its watcher goes on asking); any other is asked now. A
/// lookup that fails or answers nothing leaves the pool with its listed servers only, with a
/// warning (its watcher asks again).
pub fn fill(pools: &mut [PoolConfig], current: &Generation) {
    let mut asked = Vec::new();
    for (index, pool) in pools.iter_mut().enumerate() {
        let Some(discover) = &pool.discover else {
            continue;
        };
        let running = current
            .pool(&pool.name)
            .filter(|running| running.config.discover.as_ref() == Some(discover));
        match running {
            Some(running) => {
                let kept: Vec<_> = found::found(&running.config).cloned().collect();
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
        let Some(discover) = &pool.discover else {
            continue;
        };
        match answer {
            Ok(answer) if !answer.servers.is_empty() => {
                tracing::info!(
                    "discovery: pool `{}`: {} found {}",
                    pool.name,
                    discover.lookup,
                    found::described_change(pool, &answer.servers)
                );
                *pool = found::with_found(pool, &answer.servers);
            }
            Ok(_) => tracing::warn!(
                "discovery: pool `{}`: {} found no server yet; asked again every {:?}",
                pool.name,
                discover.lookup,
                discover.interval
            ),
            Err(why) => tracing::warn!(
                "discovery: pool `{}`: {} failed ({why}); asked again every {:?}",
                pool.name,
                discover.lookup,
                discover.interval
            ),
        }
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
