//! A connection to a server as it is opened, used for requests and parked between them: its
//! stream (plain TCP, or TLS over it), and the TLS settings it was made with, so that a
//! connection parked before a reload changed its pool's `[pool.NAME.tls]` is never reused
//! under the new settings.

use super::tls::PoolTls;
use crate::socket::Socket;
use crate::tls::stream::ServerStream;
use std::sync::Arc;

#[derive(Debug)]
pub struct ServerConnection {
    pub stream: ServerStream,
    /// `None`: plain TCP.
    tls: Option<Arc<PoolTls>>,
}

impl ServerConnection {
    pub fn plain(socket: Socket) -> ServerConnection {
        ServerConnection {
            stream: ServerStream::plain(socket),
            tls: None,
        }
    }

    /// A connection whose handshake under `tls` is complete.
    pub fn with_tls(stream: ServerStream, tls: Arc<PoolTls>) -> ServerConnection {
        ServerConnection {
            stream,
            tls: Some(tls),
        }
    }

    /// Whether it was made as a pool with `tls` makes its connections now: the same settings
    /// (the very same, which a reload keeps when it changes none), or plain TCP for both.
    pub fn made_as(&self, tls: Option<&Arc<PoolTls>>) -> bool {
        match (&self.tls, tls) {
            (None, None) => true,
            (Some(mine), Some(now)) => Arc::ptr_eq(mine, now),
            _ => false,
        }
    }

    /// Whether the server may have sent something: the socket's readiness (no system call),
    /// or what TLS read and holds.
    pub fn input_pending(&self) -> bool {
        self.stream.socket().input_pending()
            || self
                .stream
                .tls()
                .is_some_and(|tls| tls.has_buffered_input())
    }

    /// Whether an idle connection can take a request: the server sent nothing (data or its
    /// close) since the last response, on the socket or already read into TLS. One peek.
    pub fn still_open(&self) -> bool {
        let mut byte = [0u8; 1];
        let flags = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
        let quiet = matches!(
            rustix::net::recv(self.stream.socket(), &mut byte, flags),
            Err(rustix::io::Errno::AGAIN)
        );
        quiet
            && !self
                .stream
                .tls()
                .is_some_and(|tls| tls.has_buffered_input())
    }
}
