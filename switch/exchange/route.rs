//! Route: the pool a request goes to, by the service's rules (rules.rs), and what the rules and
//! the pool's module see of the request ([`request_view`]): its path in normal form
//! (http/path.rs, given by the caller) and its host in normal form (http/host.rs), so that
//! `Admin.Example.Org.` meets the rules, and hashes, as `admin.example.org`.

use super::Context;
use crate::config::ServiceMode;
use crate::http::host::{normal_host, HostScratch};
use crate::http::RequestHead;
use crate::rules::Matched;
use tcpvs_modules::{HeaderLookup, RequestView};

/// The rule for a request the service admits: a refusal (status, reason) for a CONNECT the
/// service does not allow, or for a request no rule and no default pool takes. `path` is the
/// path the rules see: the request's in its normal form (http/path.rs).
pub(crate) fn admit<'a>(
    cx: &Context<'a>,
    (head, buf): (&RequestHead, &[u8]),
    path: &[u8],
) -> Result<Matched<'a>, (u16, &'static str)> {
    if head.is_connect && !cx.service.connect {
        // A tunnel would carry any bytes to the chosen server past routing,
        // X-Forwarded-For and framing checks (README, "What tcpvs does with HTTP"): only
        // by choice.
        return Err((405, "CONNECT is not allowed on this service"));
    }
    route(cx, (head, buf), Some(path)).ok_or((503, "no pool for this request"))
}

/// The rule for the request, by the service's rules, on `path` instead of the head's when
/// given (a passthrough connection has no head: its `sni` and `source` rules see the server
/// name and the client).
pub(crate) fn route<'a>(
    cx: &Context<'a>,
    (head, buf): (&RequestHead, &[u8]),
    path: Option<&[u8]>,
) -> Option<Matched<'a>> {
    let headers = head.lookup(buf);
    let mut host = HostScratch::default();
    let mut view = request_view(cx, head, buf, &headers, &mut host);
    if let Some(path) = path {
        view.path = path;
    }
    let sni = cx.sni.map(str::as_bytes);
    cx.service.rules.route(&view, sni)
}

/// The request as the rules and the pool's module see it, its host in normal form (made in
/// `host` when that is not a slice of the request's own).
pub(super) fn request_view<'a>(
    cx: &Context<'a>,
    head: &'a RequestHead,
    buf: &'a [u8],
    headers: &'a dyn HeaderLookup,
    host: &'a mut HostScratch,
) -> RequestView<'a> {
    let as_sent = match cx.service.mode {
        ServiceMode::Http => head.host.map(|h| h.get(buf)),
        // No HTTP request: the module sees the server name as the host (hash key "host"),
        // which rustls gives in lower case without a trailing dot already.
        ServiceMode::TlsPassthrough => cx.sni.map(str::as_bytes),
    };
    RequestView {
        method: head.method(buf),
        path: head.path.get(buf),
        query: head.query.map(|q| q.get(buf)),
        host: as_sent.map(|h| normal_host(h, host)),
        headers,
        client: cx.peer.ip(),
    }
}
