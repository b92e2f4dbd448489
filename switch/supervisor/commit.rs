//! The last step of a start or reload: a planned and bound generation becomes the running one.
//! Nothing here can fail, so nothing is left half done.

use super::listeners::Bound;
use super::Running;
use crate::reload::Plan;
use crate::shared::Shared;
use crate::state::control::{self, Change};
use std::sync::Arc;
use tokio::task::JoinHandle;

impl Running {
    /// Makes `plan` the running generation: the kept servers take their new lines and the new
    /// pools are shown to their modules (before anyone can see them: a new backup is hidden
    /// from the first request), the generation is swapped in, removed addresses stop accepting,
    /// new ones start, and the new pools' health checks start (their tasks returned: the start
    /// ends them with the switch; the checks of a reload end on their own, with their pool).
    pub(super) fn commit(
        &mut self,
        shared: &Arc<Shared>,
        plan: Plan,
        bound: Vec<Bound>,
    ) -> Vec<JoinHandle<()>> {
        let Plan {
            generation,
            listen: _,
            unlisten,
            fresh,
            lines_changed,
            joined,
            fresh_limits,
        } = plan;
        for (pool, server) in &lines_changed {
            control::apply(pool, *server, Change::LineChanged);
        }
        for (pool, server) in &joined {
            control::apply(pool, *server, Change::Joined);
        }
        for pool in &fresh {
            control::apply(pool, 0, Change::Tick);
        }
        for listener in &bound {
            // A new service's own address, unseen until the swap.
            let _ = generation.services[listener.service]
                .bound
                .set(listener.addr);
        }
        let reloading = generation.number > 1;
        let retired = shared.generation.swap(Arc::new(generation));
        let now = shared.generation.load();
        for pool in retired.pools.iter().filter(|pool| !now.has_pool(pool)) {
            // Its health tasks end now (the new pool's have started in their place).
            pool.retire();
        }
        let removed_services = !unlisten.is_empty();
        for addr in unlisten {
            self.listeners.stop(addr);
            tracing::info!("reload: no longer listening on {addr}");
        }
        if removed_services {
            // Their HTTP/2 connections, idle or not, say GOAWAY now (connection/h2.rs).
            self.workers.wake_sessions();
        }
        for listener in bound {
            let addr = listener.addr;
            self.listeners.start(shared, listener, &self.workers);
            if reloading {
                tracing::info!("reload: listening on {addr}");
            }
        }
        // The checks run beside the first worker's sessions, off their path; the tasks of the
        // pools replaced end on their own.
        let _entered = self.workers.first().runtime.enter();
        for limiter in &fresh_limits {
            limiter.start_store();
        }
        crate::health::spawn(shared, &fresh)
    }
}
