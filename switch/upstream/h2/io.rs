//! A server connection as the h2 crate's client reads and writes it: tokio's `AsyncRead` and
//! `AsyncWrite` over the switch's readiness-driven stream (tls/stream.rs, TLS or not), owned by
//! the connection's driver task. The client side's twin (connection/h2/io.rs) also watches
//! the frames for floods; a server the pool names is trusted that far, so nothing is watched
//! here.

use crate::stream::{Io, Then};
use crate::tls::stream::ServerStream;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

pub(crate) struct H2ServerIo {
    stream: ServerStream,
    shut_down: bool,
}

impl H2ServerIo {
    pub(crate) fn new(stream: ServerStream) -> H2ServerIo {
        H2ServerIo {
            stream,
            shut_down: false,
        }
    }
}

impl AsyncRead for H2ServerIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            // Zeroed once per buffer by tokio, then reused: no `unsafe` for a path that moves
            // a server's frames, whose cost is the frames' own.
            let spare = buf.initialize_unfilled();
            match this.stream.try_recv(spare) {
                Ok(n) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    ready!(this.stream.poll_read_ready(cx))?;
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for H2ServerIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_send(cx, &[IoSlice::new(buf)], Then::Push)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        parts: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.stream.poll_send(cx, parts, Then::Push)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_flush(cx, Then::Push)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.stream.poll_shutdown(cx, &mut this.shut_down)
    }
}
