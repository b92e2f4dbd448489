//! An HTTP/2 connection to a server from its start: the client preface and SETTINGS (the h2
//! crate's handshake), then the connection's driver, a task of the worker that moves its
//! frames until the server ends it, it breaks, or it carried no stream for
//! `server_idle_timeout` (then it is dropped, which closes it). A connection is handed out
//! once the server's own SETTINGS came: until then nobody knows how many streams it takes.

use super::connections::H2Connection;
use super::io::H2ServerIo;
use crate::stream::{wait, TimeLimit};
use crate::tls::stream::ServerStream;
use crate::upstream::tls::PoolTls;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Each stream's receive window: a 1 MiB answer needs few WINDOW_UPDATEs, and a stream the
/// client reads slowly holds at most this much of the server's answer (what bounds memory).
const STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's receive window, shared by its streams: the largest there is (as HAProxy's
/// mux_h2 opens it), so that streams whose clients stopped reading, each holding up to its own
/// window, never close it for the others (an attacker's review found five slow readers froze
/// every stream of a 1 MiB window). Memory stays bounded by the streams' windows.
const CONNECTION_WINDOW: u32 = (1 << 31) - 1;
/// How often an idle connection is looked at, at most.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// Starts HTTP/2 on `stream` (just opened, its TLS done) and waits for the server's SETTINGS,
/// within `limit`; the connection then runs in a task of this worker. `tls`: the settings it
/// was made with.
pub(crate) async fn start(
    stream: ServerStream,
    tls: Option<Arc<PoolTls>>,
    idle: Duration,
    limit: TimeLimit,
) -> std::io::Result<Arc<H2Connection>> {
    let handshake = h2::client::Builder::new()
        .enable_push(false)
        // No stream opens before the server's SETTINGS say how many may (connections.rs).
        .initial_max_send_streams(0)
        // A head larger than the switch relays is refused anyway: not buffered first.
        .max_header_list_size(crate::http::MAX_HEAD_BYTES as u32)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake::<_, bytes::Bytes>(H2ServerIo::new(stream));
    let (send, connection) =
        wait(async { handshake.await.map_err(super::io_error) }, limit).await?;
    let shared = Arc::new(H2Connection::new(send, tls));
    let watched = Arc::clone(&shared);
    let idle_ms = idle.as_millis() as u64;
    tokio::spawn(async move {
        let mut connection = std::pin::pin!(connection);
        // Each turn of the connection may have brought the server's SETTINGS.
        let turn = std::future::poll_fn(|cx| {
            let polled = connection.as_mut().poll(cx);
            watched.check_settled();
            polled
        });
        let mut turn = std::pin::pin!(turn);
        let mut tick = tokio::time::interval(IDLE_CHECK.min(idle.max(Duration::from_millis(1))));
        loop {
            tokio::select! {
                ended = &mut turn => {
                    if let Err(e) = ended {
                        tracing::debug!("HTTP/2 connection to a server ended: {e}");
                    }
                    break;
                }
                _ = tick.tick() => {
                    // Retired (a GOAWAY, a reload's drop): ended once its streams are done.
                    let retired = watched.is_closed() && watched.is_unused();
                    if retired || watched.idle_for(idle_ms) {
                        break;
                    }
                }
            }
        }
        watched.close();
    });
    let settled = async {
        shared.settled().await;
        Ok(())
    };
    wait(settled, limit).await?;
    if shared.is_closed() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "the server ended the connection before its SETTINGS",
        ));
    }
    Ok(shared)
}
