//! The epoll driver: the same framing on tokio's current-thread runtime (epoll, a task per client
//! connection, kept-alive server connections in one pool), so that beside the io_uring driver
//! only the way the kernel is entered differs. tcpvs itself runs on the same tokio reactor.

use crate::framing::{self, Request, Response};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const INPUT: usize = 16 * 1024;
const RELAY: usize = 64 * 1024;

type Pool = Rc<RefCell<Vec<TcpStream>>>;

pub fn run(listener: std::net::TcpListener, server: SocketAddr) -> io::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&runtime, async move {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let pool: Pool = Rc::new(RefCell::new(Vec::new()));
        loop {
            let (client, _) = listener.accept().await?;
            let pool = pool.clone();
            tokio::task::spawn_local(async move {
                let _ = serve(client, server, pool).await;
            });
        }
    })
}

async fn serve(mut client: TcpStream, server_addr: SocketAddr, pool: Pool) -> io::Result<()> {
    let mut input = vec![0u8; INPUT];
    let mut filled = 0;
    let mut request = Vec::with_capacity(512);
    let mut relay = vec![0u8; RELAY];
    loop {
        let (consumed, close_after) = loop {
            match framing::request(&input[..filled], &mut request) {
                Request::Complete {
                    consumed,
                    close_after,
                } => break (consumed, close_after),
                Request::Partial if filled < input.len() => {
                    let n = client.read(&mut input[filled..]).await?;
                    if n == 0 {
                        return Ok(());
                    }
                    filled += n;
                }
                Request::Partial | Request::Refused => return Ok(()),
            }
        };
        input.copy_within(consumed..filled, 0);
        filled -= consumed;
        let reused = pool.borrow_mut().pop();
        let mut server = match reused {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(server_addr).await?;
                s.set_nodelay(true)?;
                s
            }
        };
        server.write_all(&request).await?;
        let mut have = 0;
        let (mut remaining, reusable) = loop {
            let n = server.read(&mut relay[have..]).await?;
            if n == 0 {
                return Ok(());
            }
            have += n;
            match framing::response(&relay[..have]) {
                Response::Partial if have < relay.len() => continue,
                Response::Partial | Response::Refused => return Ok(()),
                Response::Head {
                    head_len,
                    body_len,
                    reusable,
                    connection,
                } => {
                    let body_here = (have - head_len) as u64;
                    if body_here > body_len {
                        return Ok(());
                    }
                    if close_after {
                        framing::mark_close(&mut relay[..have], connection);
                    }
                    break (body_len - body_here, reusable);
                }
            }
        };
        client.write_all(&relay[..have]).await?;
        while remaining > 0 {
            let n = server.read(&mut relay).await?;
            if n == 0 {
                return Ok(());
            }
            remaining = remaining.saturating_sub(n as u64);
            client.write_all(&relay[..n]).await?;
        }
        if reusable {
            pool.borrow_mut().push(server);
        }
        if close_after {
            return Ok(());
        }
    }
}
