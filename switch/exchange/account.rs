//! Account: what happened to a request, counted in the service's statistics and written to
//! the access log.

use super::Context;
use crate::access_log;
use crate::state::generation::Generation;
use crate::trace::span::SpanNames;
use crate::trace::{Finished, RequestTrace};
use std::net::SocketAddr;
use tokio::time::Instant;

/// What happened to one request, for the access log and the connection's fate.
pub(crate) struct Outcome {
    pub status: u16,
    /// Bytes sent to the client for this request.
    pub bytes_out: u64,
    /// The client connection may carry another request.
    pub keep_client: bool,
    pub pool: Option<usize>,
    pub server: Option<SocketAddr>,
    /// The limit (an index into the generation's) that refused the request, or would have
    /// under `dry_run`: the access log names it.
    pub limited: Option<usize>,
    /// A gRPC call's status, when one came back (http/grpc.rs): the access log says it.
    pub grpc: Option<u8>,
    /// Its trace and id (trace/), `None` with both off.
    pub trace: Option<Box<RequestTrace>>,
}

impl Outcome {
    /// An answer from the switch itself (or none: status 0).
    pub(crate) fn local(
        status: u16,
        bytes_out: u64,
        keep_client: bool,
        pool: Option<usize>,
    ) -> Self {
        Outcome {
            status,
            bytes_out,
            keep_client,
            pool,
            server: None,
            limited: None,
            grpc: None,
            trace: None,
        }
    }
}

/// Counts the request and writes its access-log line (`request`: what the log keeps of its
/// head).
pub(crate) fn account(
    cx: &Context<'_>,
    request: &access_log::Request,
    outcome: &Outcome,
    started: Instant,
) {
    let elapsed = started.elapsed();
    if outcome.status != 0 {
        // Status 0: the client went away before any answer; nothing was answered.
        let service = &cx.service.stats;
        service.classes.count(outcome.status);
        service.duration.record(elapsed);
    }
    let pool = outcome.pool.map(|p| cx.generation.pools[p].name.as_str());
    let trace = outcome.trace.as_deref();
    cx.shared.access_log.write(&access_log::Entry {
        service: &cx.service.name,
        client: cx.peer,
        request: Some(request),
        status: outcome.status,
        bytes: outcome.bytes_out,
        pool,
        server: outcome.server,
        end: access_log::End::Took(elapsed),
        limit: outcome
            .limited
            .and_then(|l| cx.generation.limits.get(l))
            .map(|l| l.spec().name.as_str()),
        grpc: outcome.grpc,
        trace,
    });
    if let Some(trace) = trace {
        let services = &cx.generation.services;
        let done = Finished {
            generation: cx.generation,
            service: services
                .iter()
                .position(|s| std::ptr::eq(&**s, cx.service))
                .unwrap_or(usize::MAX),
            pool: outcome.pool,
            server: outcome.server,
            status: outcome.status,
            response_bytes: outcome.bytes_out,
        };
        cx.shared.tracing.finish(trace, &done);
    }
}

/// A span names its service and pool through the generation the request ran under.
impl SpanNames for Generation {
    fn service_name(&self, service: usize) -> Option<&str> {
        self.services.get(service).map(|s| s.name.as_str())
    }

    fn pool_name(&self, pool: usize) -> Option<&str> {
        self.pools.get(pool).map(|p| p.name.as_str())
    }
}
