//! Which new HTTP/2 stream runs, decided as it arrives, and what it holds while it runs.
//!
//! Each running stream may hold a server connection, so streams share `max_clients` (the
//! descriptor budget) with the client connections. An attacker once took that budget with a
//! few connections of 100 POST streams that announce a body and never send it, and every other
//! HTTP/2 client stalled, its streams left unanswered until the budget freed. Now:
//!
//! - a stream that does not fit is answered `503` at once and never runs (counted as
//!   `h2_streams_refused`), whatever the reason: nothing waits unanswered;
//! - the budget is full at `max_clients` connections and streams, and its last quarter is
//!   kept for light sources: there a stream is refused to a client whose address (an IPv6
//!   client's /64) holds a quarter of the free room or more, its connections and streams in
//!   the whole switch counted (capacity/share.rs, the rule new connections meet too). nginx gets
//!   the like by counting streams in `limit_conn` and buffering bodies; a switch without
//!   request buffering must not let streams pile up at servers;
//! - under `max_conns_per_source`, a connection's streams beyond its first each take one of
//!   its client's places, as nginx's `limit_conn` counts streams: an HTTP/2 connection counts
//!   for its streams running, and for one while it has none.
//!
//! Refused streams cost the switch a decoded head and a small answer each, so they are charged
//! to a budget of their own (`Driver::refusals`): a client that keeps opening streams the
//! switch refuses gets `GOAWAY` with `ENHANCE_YOUR_CALM`, as a control-frame flood does.

use crate::capacity::share::Crowding;
use crate::policy::source_conns::SourceGuard;
use crate::shared::Shared;
use crate::state::generation::Service;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

/// Why a stream does not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Client connections and streams fill `max_clients`, or the client holds its share of
    /// their last quarter.
    Crowded(Crowding),
    /// The client has `max_conns_per_source` connections and streams already.
    OverSourceCap,
}

impl Refusal {
    /// The text of the `503` answer.
    pub(super) fn why(self) -> &'static str {
        match self {
            Refusal::Crowded(Crowding::Full) => "the switch is full",
            Refusal::Crowded(Crowding::HeavySource) => {
                "too many requests from your address while the switch is busy"
            }
            Refusal::OverSourceCap => "too many connections and requests from your address",
        }
    }
}

/// The connection's place under `max_conns_per_source`, lent to its streams: the first stream
/// running takes it, the others take places of their own, and it comes back when a stream
/// ends with none left here.
#[derive(Default)]
pub(super) struct SparePlace(Mutex<Option<SourceGuard>>);

impl SparePlace {
    pub(super) fn new(place: Option<SourceGuard>) -> SparePlace {
        SparePlace(Mutex::new(place))
    }

    fn take(&self) -> Option<SourceGuard> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    /// Keeps `place` as the connection's, or lets it go if the connection has one.
    fn give_back(&self, place: SourceGuard) {
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.is_none() {
            *spare = Some(place);
        }
    }
}

/// What a running stream holds, given back when its task ends.
pub(super) struct StreamPass {
    /// Its count in what its client holds in the whole switch.
    _in_switch: SourceGuard,
    _place: ServicePlace,
}

/// One of the client's places under `max_conns_per_source` (none without a cap).
struct ServicePlace {
    place: Option<SourceGuard>,
    spare: Arc<SparePlace>,
}

impl Drop for ServicePlace {
    fn drop(&mut self) {
        if let Some(place) = self.place.take() {
            self.spare.give_back(place);
        }
    }
}

/// A connection's client, as its streams are admitted.
pub(super) struct Client<'c> {
    pub shared: &'c Shared,
    pub address: IpAddr,
    /// The connection's place under `max_conns_per_source`.
    pub spare: &'c Arc<SparePlace>,
}

/// Decides whether a stream of `client` runs on `service`.
pub(super) fn admit(client: Client<'_>, service: &Service) -> Result<StreamPass, Refusal> {
    let Client {
        shared,
        address,
        spare,
    } = client;
    let cap = service.max_conns_per_source;
    let place = match cap {
        0 => None,
        _ => match spare.take() {
            Some(place) => Some(place),
            None => Some(
                service
                    .source_conns
                    .enter(address, cap)
                    .ok_or(Refusal::OverSourceCap)?,
            ),
        },
    };
    // Given back to the connection if the budget refuses the stream.
    let place = ServicePlace {
        place,
        spare: Arc::clone(spare),
    };
    // What the client holds counts this connection too: a stream is judged by what it holds
    // besides it, so a newcomer's first stream is let in wherever its connection was (an
    // HTTP/1.1 client's request needs no more than its connection either).
    let in_switch = shared
        .take_share(address, shared.places_in_use(), 1)
        .map_err(Refusal::Crowded)?;
    Ok(StreamPass {
        _in_switch: in_switch,
        _place: place,
    })
}
