//! Building a pool's scheduling module from its configuration: at start and reload for the
//! pool that will run, and in `tcpvs check` to refuse options the module does not take.

use crate::config::PoolConfig;
use std::sync::Arc;
use tcpvs_modules::{BuildContext, BuildError, Clock, PoolView, Scheduler, ServerState};

/// The live server states of a pool as configured.
pub fn server_states(config: &PoolConfig) -> Box<[ServerState]> {
    config
        .servers
        .iter()
        .map(|s| ServerState::with_limit(s.weight, s.max_conns))
        .collect()
}

/// Builds the pool's scheduling module over `servers`. Server addresses are the identities
/// modules place by (hash rings, cookie ids), so placement does not depend on list order.
pub fn build_scheduler(
    config: &PoolConfig,
    servers: &[ServerState],
    clock: Arc<dyn Clock>,
) -> Result<Box<dyn Scheduler>, BuildError> {
    let ids: Vec<String> = config.servers.iter().map(|s| s.addr.to_string()).collect();
    let context = BuildContext {
        pool: PoolView { servers },
        server_ids: &ids,
        clock,
    };
    tcpvs_modules::build(&config.scheduler, &config.options, &context)
}
