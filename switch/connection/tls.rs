//! TLS termination for a connection of a service with `tls`: the handshake (edge/tls/) before
//! the first request, after the PROXY header if there is one; from then on the client stream
//! carries TLS and every HTTP behaviour of the connection holds over it.

use super::Connection;
use crate::edge::tls::handshake;
use crate::state::stats;
use std::io;
use std::sync::Arc;
use tokio::time::Instant;

impl Connection {
    /// Completes the handshake by `deadline`. `false`: it failed (counted, logged at debug
    /// level) and the connection closes.
    pub(super) async fn start_tls(
        &mut self,
        config: Arc<rustls::ServerConfig>,
        deadline: Instant,
    ) -> bool {
        let stats = Arc::clone(&self.service().stats);
        match handshake::accept(self.client.socket(), config, &mut self.inbuf, deadline).await {
            Ok(layer) => {
                stats::bump(&stats.tls_handshakes);
                if layer.resumed() {
                    stats::bump(&stats.tls_resumed);
                }
                self.sni = layer.server_name();
                self.client.start_tls(layer);
                true
            }
            Err(failure) => {
                // A client that closes before finishing is no TLS failure (a director's TCP
                // check does that); a refusal or a handshake past the deadline is.
                let counted = match &failure {
                    handshake::HandshakeFailure::Refused(_) => true,
                    handshake::HandshakeFailure::Abandoned(e) => {
                        e.kind() == io::ErrorKind::TimedOut
                    }
                };
                if counted {
                    stats::bump(&stats.tls_handshake_failures);
                }
                tracing::debug!(client = %self.peer, "TLS {failure}");
                false
            }
        }
    }
}
