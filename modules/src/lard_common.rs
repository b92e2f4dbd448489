//! What `lard` and `lard-r` share around their own tables: the request's key, the options,
//! where targets start and move (`lard_placement.rs`), spills (`lard_spill.rs`) and the clock;
//! and one pick's frame around the module's own step: a keyless request to the least loaded
//! server, the clock read at most once, the spill after the step.

use crate::clock::Clock;
use crate::key::{client_hash, KeySource};
use crate::lard_placement::{tie_start, Placement};
use crate::lard_spill::Spill;
use crate::lard_thresholds::{LardSettings, PoolLoad};
use crate::load::least_loaded_from;
use crate::options::Options;
use crate::{BuildContext, BuildError, PoolView, RequestView, Ticket};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct LardCommon {
    pub key: KeySource,
    pub settings: LardSettings,
    pub placement: Placement,
    spill: Spill,
    clock: Arc<dyn Clock>,
}

/// What a module's own step answered: the server, and how loaded the pool is
/// (`Judge::pool_load`), which says whether a request may spill.
pub(crate) type Step = Option<(usize, PoolLoad)>;

impl LardCommon {
    /// Reads `key` (default: the path) and the options of `LardSettings`.
    pub(crate) fn build(
        options: &mut Options<'_>,
        context: &BuildContext<'_>,
    ) -> Result<LardCommon, BuildError> {
        let key = KeySource::from_options(options, "path").map_err(BuildError::BadOption)?;
        let settings = LardSettings::read(options)?;
        Ok(LardCommon {
            key,
            settings,
            placement: Placement::new(&context.pool, context.server_ids),
            spill: Spill::default(),
            clock: Arc::clone(&context.clock),
        })
    }

    /// One pick: `step` places the request's target (its key hash) with a clock read at
    /// most once per pick, and only when needed; then the request may spill.
    pub(crate) fn pick(
        &self,
        request: &RequestView<'_>,
        pool: &PoolView<'_>,
        tried: &[usize],
        step: impl FnOnce(u64, &mut dyn FnMut() -> Duration) -> Step,
    ) -> Option<(usize, Ticket)> {
        let Some(target) = self.key.hash(request) else {
            return least_loaded_for_client(request, pool, tried).map(|s| (s, Ticket::NONE));
        };
        let mut now_read = None;
        let mut now = || *now_read.get_or_insert_with(|| self.clock.now());
        let (chosen, load) = step(target, &mut now)?;
        if !self.settings.spill {
            return Some((chosen, Ticket::NONE));
        }
        let spill = self
            .spill
            .decide(chosen, tie_start(target, pool), load, pool, tried, &mut now);
        Some((spill.server, spill.ticket))
    }

    pub(crate) fn request_ended(&self, ticket: Ticket) {
        self.spill.ended(ticket, self.clock.now());
    }

    pub(crate) fn servers_changed(&self, pool: &PoolView<'_>) {
        self.placement.servers_changed(pool);
    }
}

/// A request without a key (no such header or cookie, no regex match) has no target to keep
/// local, so it goes to the least loaded server. Ties start at the client's hash rather than
/// at server 0: in an idle pool every keyless request would otherwise land on server 0, while
/// this way clients spread and each keeps its server while loads are even. Without a known
/// client address the scan starts at server 0.
fn least_loaded_for_client(
    request: &RequestView<'_>,
    pool: &PoolView<'_>,
    tried: &[usize],
) -> Option<usize> {
    let count = pool.servers.len().max(1) as u64;
    let start = client_hash(request).map_or(0, |hash| (hash % count) as usize);
    least_loaded_from(pool, tried, start)
}
