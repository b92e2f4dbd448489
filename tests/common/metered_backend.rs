//! A backend that records the request heads it gets and counts the response bytes it managed
//! to write, per connection: for tests of a client that stops reading, where what matters is
//! how much the switch took from the server (the rest of a large body must stay with the
//! server, blocked in its write).
//!
//! `GET /big/N` answers N pattern bytes ([`crate::common::pattern`]`(N, N)`) with Content-Length,
//! written in 16 KiB pieces from a socket whose send buffer is set small
//! ([`SEND_BUFFER`]), so the kernel holds little on the server's side. Any other path gets a
//! small body naming it.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The send buffer asked of each accepted socket (the kernel doubles it for its bookkeeping).
pub const SEND_BUFFER: usize = 64 * 1024;

/// One connection the backend accepted.
#[derive(Default)]
pub struct Metered {
    /// Request heads, verbatim.
    pub heads: Mutex<Vec<String>>,
    /// Response bytes written so far (heads included), counted as each write completes.
    pub written: AtomicU64,
}

pub struct MeteredBackend {
    pub addr: SocketAddr,
    /// One entry per accepted connection, in accept order.
    pub connections: Arc<Mutex<Vec<Arc<Metered>>>>,
    /// Connections whose task ended (the peer closed, or a write failed).
    ended: tokio::sync::watch::Sender<usize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MeteredBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MeteredBackend {
    pub async fn start() -> MeteredBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections: Arc<Mutex<Vec<Arc<Metered>>>> = Arc::default();
        let ended = tokio::sync::watch::channel(0).0;
        let (list, done) = (Arc::clone(&connections), ended.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let fd = rustix::fd::AsFd::as_fd(&stream);
                rustix::net::sockopt::set_socket_send_buffer_size(fd, SEND_BUFFER)
                    .expect("SO_SNDBUF");
                let meter = Arc::new(Metered::default());
                list.lock().expect("list").push(Arc::clone(&meter));
                let done = done.clone();
                tokio::spawn(async move {
                    let _ = serve(stream, addr, &meter).await;
                    done.send_modify(|n| *n += 1);
                });
            }
        });
        MeteredBackend {
            addr,
            connections,
            ended,
            task,
        }
    }

    /// All request heads, over every connection.
    pub fn heads(&self) -> Vec<String> {
        let list = self.connections.lock().expect("list");
        list.iter()
            .flat_map(|c| c.heads.lock().expect("heads").clone())
            .collect()
    }

    /// The connection whose first request head contains `needle`, once it has come.
    pub async fn connection_with(&self, needle: &str) -> Arc<Metered> {
        let deadline = tokio::time::Instant::now() + crate::common::PATIENCE;
        loop {
            {
                let list = self.connections.lock().expect("list");
                if let Some(c) = list.iter().find(|c| {
                    c.heads
                        .lock()
                        .expect("heads")
                        .first()
                        .is_some_and(|h| h.contains(needle))
                }) {
                    return Arc::clone(c);
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no request with {needle:?} reached the backend within PATIENCE"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// Waits until `n` connections have ended in all.
    pub async fn wait_for_ended(&self, n: usize) {
        let mut ended = self.ended.subscribe();
        let reached =
            tokio::time::timeout(crate::common::PATIENCE, ended.wait_for(|&count| count >= n))
                .await;
        assert!(
            matches!(reached, Ok(Ok(_))),
            "{} backend connections ended, not {n}, within PATIENCE",
            *self.ended.borrow()
        );
    }
}

async fn serve(mut stream: TcpStream, me: SocketAddr, meter: &Metered) -> std::io::Result<()> {
    let mut buf = Vec::new();
    loop {
        let (path, head_len) = loop {
            let mut fields = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut fields);
            if let httparse::Status::Complete(len) =
                request.parse(&buf).expect("a valid request head")
            {
                let path = request.path.expect("a path");
                let path = path.split('?').next().unwrap_or(path).to_string();
                break (path, len);
            }
            let mut chunk = [0u8; 16384];
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_len]).into_owned();
        buf.drain(..head_len);
        meter.heads.lock().expect("heads").push(head);
        let body = match path.strip_prefix("/big/") {
            Some(n) => {
                let n: usize = n.parse().expect("a size");
                crate::common::pattern(n, n as u64)
            }
            None => format!("path {path}\n").into_bytes(),
        };
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nX-Served-By: {me}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await?;
        meter.written.fetch_add(head.len() as u64, Ordering::SeqCst);
        for piece in body.chunks(16 * 1024) {
            stream.write_all(piece).await?;
            meter
                .written
                .fetch_add(piece.len() as u64, Ordering::SeqCst);
        }
    }
}
