//! The PROXY protocol (edge/proxy_protocol.rs) on the connection: the header a director puts
//! first, read before anything else, and the one sent to the servers of a `send_proxy` pool.

use super::Connection;
use crate::edge::proxy_protocol;
use crate::http::rewrite::forwarded_for;
use crate::state::stats;
use crate::stream::{read_some, TimeLimit};
use crate::tls::stream::ClientStream;
use std::net::SocketAddr;
use tokio::time::Instant;

impl Connection {
    /// Reads the PROXY protocol header the connection starts with by `deadline`, and takes
    /// the client it names as this connection's: for X-Forwarded-For, `source-hash`, the log
    /// and the servers' PROXY headers. `false`: none came, or a broken one; the connection is
    /// counted and closed without a word, never routed.
    pub(super) async fn read_proxy_header(&mut self, deadline: Instant) -> bool {
        loop {
            match proxy_protocol::read_header(self.inbuf.filled()) {
                proxy_protocol::Received::Header {
                    len,
                    client,
                    destination,
                } => {
                    self.inbuf.consume(len);
                    if let Some(client) = client {
                        self.peer = client;
                        self.client_text = forwarded_for(client.ip());
                    }
                    self.destination = destination;
                    return true;
                }
                proxy_protocol::Received::Incomplete => {
                    match read_some(&self.client, &mut self.inbuf, TimeLimit::Until(deadline)).await
                    {
                        Ok(n) if n > 0 => continue,
                        _ => {}
                    }
                }
                proxy_protocol::Received::Invalid => {}
            }
            stats::bump(&self.service().stats.proxy_refused);
            tracing::debug!(client = %self.peer, "no valid PROXY protocol header; closed");
            return false;
        }
    }
}

/// A PROXY protocol header naming the connection's client (`peer`) and the address it connected
/// to (`destination`, the one a PROXY header in named, else this socket's).
pub(super) fn write_proxy_header(
    out: &mut Vec<u8>,
    version: proxy_protocol::Version,
    peer: SocketAddr,
    destination: Option<SocketAddr>,
    client: &ClientStream,
) {
    let destination = destination.or_else(|| client.local_addr().ok());
    proxy_protocol::write_header(out, version, peer, destination_or_unknown(destination));
}

/// The address the client connected to, or `0.0.0.0:0` when it cannot be known.
pub(super) fn destination_or_unknown(destination: Option<SocketAddr>) -> SocketAddr {
    destination.unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)))
}
