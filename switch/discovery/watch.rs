//! The watcher of a discovering pool: a task that asks the pool's name again at each turn and,
//! when the answer differs from the servers the running pool has found, hands it to the
//! supervisor, which plans and commits it as a reload does. One watcher per pool and question:
//! a reload that keeps both keeps the watcher; one that changes or removes them ends it.

use super::found;
use super::lookup::{self, next_turn};
use crate::config::discover::{Discover, MIN_INTERVAL};
use crate::config::ServerConfig;
use crate::shared::Shared;
use crate::state::generation::Generation;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::task::AbortHandle;

/// Makes `answer` the found servers of pool `pool` (asked as `discover`): the supervisor's
/// plan and commit. Blocking (it waits for a reload in progress): called off the runtime.
pub type Apply = Arc<dyn Fn(&str, &Discover, Vec<ServerConfig>) + Send + Sync>;

/// The running watchers, by pool name.
#[derive(Default)]
pub struct Watchers {
    running: HashMap<String, (Discover, AbortHandle)>,
}

impl Watchers {
    /// One watcher per discovering pool of `generation`, on the runtime entered: those asking
    /// the same as before go on, the others end, new ones start.
    pub fn follow(&mut self, generation: &Generation, shared: &Arc<Shared>, apply: &Apply) {
        let wanted: HashMap<&str, &Discover> = generation
            .pools
            .iter()
            .filter_map(|pool| Some((pool.name.as_str(), pool.config.discover.as_ref()?)))
            .collect();
        self.running.retain(|name, (discover, task)| {
            let keep = wanted.get(name.as_str()) == Some(&&*discover);
            if !keep {
                task.abort();
            }
            keep
        });
        for (name, discover) in wanted {
            if self.running.contains_key(name) {
                continue;
            }
            let task = tokio::spawn(watch(
                name.to_string(),
                discover.clone(),
                Arc::clone(shared),
                Arc::clone(apply),
            ));
            self.running
                .insert(name.to_string(), (discover.clone(), task.abort_handle()));
        }
    }

    /// Ends every watcher (the switch stops).
    pub fn stop(&mut self) {
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Asks at each turn, for ever (until aborted).
async fn watch(pool: String, discover: Discover, shared: Arc<Shared>, apply: Apply) {
    let resolver = match lookup::resolver(&discover) {
        Ok(resolver) => resolver,
        Err(why) => {
            tracing::error!(
                "discovery: pool `{pool}`: no resolver ({why}); its found servers stay as they are"
            );
            return;
        }
    };
    // The start or the reload asked just before: the first turn comes soon after.
    let mut wait = MIN_INTERVAL;
    let mut failing = false;
    loop {
        tokio::time::sleep(wait).await;
        let answer = lookup::lookup(&resolver, &discover.lookup).await;
        let answer = match answer {
            Ok(answer) if !answer.servers.is_empty() => answer,
            outcome => {
                if !failing {
                    let why = match outcome {
                        Err(why) => format!("failed ({why})"),
                        Ok(_) => "found no server".to_string(),
                    };
                    tracing::warn!(
                        "discovery: pool `{pool}`: {} {why}; the servers found before stay until it answers",
                        discover.lookup
                    );
                    failing = true;
                }
                wait = discover.interval;
                continue;
            }
        };
        if failing {
            tracing::info!(
                "discovery: pool `{pool}`: {} answers again",
                discover.lookup
            );
            failing = false;
        }
        wait = next_turn(&discover, answer.ttl);
        if !changes_running(&shared.generation.load(), &pool, &discover, &answer.servers) {
            continue;
        }
        let (pool, discover, apply) = (pool.clone(), discover.clone(), Arc::clone(&apply));
        // The commit waits for a reload in progress, which may wait on the resolver of names.
        let applied = tokio::task::spawn_blocking(move || apply(&pool, &discover, answer.servers));
        if applied.await.is_err() {
            return;
        }
    }
}

/// Whether `answer` changes what pool `pool` of `generation`, asking `discover`, has found.
pub fn changes_running(
    generation: &Generation,
    pool: &str,
    discover: &Discover,
    answer: &[ServerConfig],
) -> bool {
    generation
        .pool(pool)
        .filter(|running| running.config.discover.as_ref() == Some(discover))
        .is_some_and(|running| found::changes(&running.config, answer))
}
