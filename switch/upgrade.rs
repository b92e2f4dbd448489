//! Binary upgrade without dropping a connection: a new tcpvs takes the listening sockets over
//! from the running one, then the old one stops accepting, finishes its requests and exits.
//! As HAProxy's `-x` and Pingora's upgrade socket do, the sockets go over a Unix socket with
//! SCM_RIGHTS: they are the same kernel sockets, so no connection waiting in a listen queue is
//! refused or reset in between.
//!
//! - The running tcpvs (`run --upgrade-socket PATH`) listens on `PATH` (mode 0600).
//! - The new one (`run --take-over PATH`) connects and asks `listeners`; the old one answers
//!   with one message: a line per socket, its bound address, and the sockets themselves.
//! - The new one starts with them (binding only what they do not cover) and says `ready`.
//! - The old one stops accepting, removes `PATH`, answers `bye`, and stops as on SIGTERM:
//!   its requests in flight get `shutdown_timeout` to finish.
//!
//! If the new one fails before `ready` (a wrong rule file, a port it cannot bind), it exits
//! and the old one goes on as if nothing happened.

use crate::admin::listener::{AdminSocket, Handover};
use crate::supervisor::ReloadHandle;
use rustix::fd::{AsFd, OwnedFd};
use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// More sockets than one message carries (the kernel's SCM_MAX_FD is 253) is refused.
const MAX_SOCKETS: usize = 250;
/// How long each side waits for the other at each step.
const STEP_TIMEOUT: Duration = Duration::from_secs(30);

/// Listening sockets taken over from the old process, by bound address, and its admin
/// endpoint's socket.
#[derive(Debug, Default)]
pub struct Inherited {
    pub sockets: HashMap<SocketAddr, Vec<std::net::TcpListener>>,
    pub admin: Option<Handover>,
}

impl Inherited {
    /// The sockets bound to `addr`, taken out.
    pub fn take(&mut self, addr: SocketAddr) -> Vec<std::net::TcpListener> {
        self.sockets.remove(&addr).unwrap_or_default()
    }
}

/// The new process's side of a takeover in progress: say `ready` once serving.
pub struct Takeover {
    stream: std::os::unix::net::UnixStream,
}

/// Connects to the running tcpvs at `path` and takes its listening sockets.
pub fn take_over(path: &Path) -> io::Result<(Inherited, Takeover)> {
    let fail = |what: &str, e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "taking over from the tcpvs at {}: {what}: {e}",
                path.display()
            ),
        )
    };
    let mut stream = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| fail("cannot connect (is it running with --upgrade-socket?)", e))?;
    stream.set_read_timeout(Some(STEP_TIMEOUT))?;
    stream
        .write_all(b"listeners\n")
        .map_err(|e| fail("asking", e))?;
    let mut payload = vec![0u8; 64 * 1024];
    let mut space = vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_SOCKETS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let received = rustix::net::recvmsg(
        &stream,
        &mut [IoSliceMut::new(&mut payload)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| fail("receiving the sockets", e.into()))?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for message in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = message {
            fds.extend(rights);
        }
    }
    let text = String::from_utf8_lossy(&payload[..received.bytes]);
    let addrs: Vec<&str> = text.lines().collect();
    if addrs.len() != fds.len() {
        return Err(fail(
            "a malformed answer",
            io::Error::other(format!(
                "{} addresses for {} sockets",
                addrs.len(),
                fds.len()
            )),
        ));
    }
    let mut inherited = Inherited::default();
    for (addr, fd) in addrs.into_iter().zip(fds) {
        if let Some(admin) = AdminSocket::parse(addr) {
            let name = admin.map_err(|e| fail("a malformed answer", io::Error::other(e)))?;
            inherited.admin = Some(Handover {
                name,
                socket: fd,
                removes_file: None,
            });
            continue;
        }
        let addr: SocketAddr = addr
            .parse()
            .map_err(|_| fail("a malformed answer", io::Error::other(addr.to_string())))?;
        let socket = std::net::TcpListener::from(fd);
        socket.set_nonblocking(true)?;
        inherited.sockets.entry(addr).or_default().push(socket);
    }
    Ok((inherited, Takeover { stream }))
}

impl Takeover {
    /// Tells the old process that this one serves: it stops accepting and drains. Waits for
    /// its `bye` (its upgrade socket is gone by then, so this process may listen there). Then
    /// an admin socket file taken over is this process's to remove when it stops.
    pub fn ready(self, switch: &ReloadHandle) -> io::Result<()> {
        self.confirm()?;
        switch.took_over();
        Ok(())
    }

    fn confirm(self) -> io::Result<()> {
        let mut stream = self.stream;
        stream.write_all(b"ready\n")?;
        let mut line = String::new();
        BufReader::new(&stream).read_line(&mut line)?;
        if line.trim() != "bye" {
            return Err(io::Error::other(format!(
                "the old tcpvs answered {line:?} instead of bye"
            )));
        }
        Ok(())
    }
}

/// Listens for a successor on `path` (mode 0600; a stale file from a process that is gone is
/// replaced). A socket some process still answers on is refused.
pub fn bind(path: &Path) -> io::Result<tokio::net::UnixListener> {
    if path.exists() {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "{}: another tcpvs serves upgrades there (take it over with --take-over)",
                        path.display()
                    ),
                ))
            }
            Err(_) => std::fs::remove_file(path)?,
        }
    }
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    listener.set_nonblocking(true)?;
    tokio::net::UnixListener::from_std(listener)
}

/// Serves successors on `listener` until one takes over; returns then (the caller stops the
/// switch as on SIGTERM). A successor that goes away before `ready` changes nothing.
pub async fn serve(listener: tokio::net::UnixListener, path: PathBuf, switch: ReloadHandle) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        match hand_over(stream, &path, &switch).await {
            Ok(()) => return,
            Err(e) => tracing::warn!("upgrade: the new tcpvs did not take over: {e}"),
        }
    }
}

async fn hand_over(
    stream: tokio::net::UnixStream,
    path: &Path,
    switch: &ReloadHandle,
) -> io::Result<()> {
    let mut reader = tokio::io::BufReader::new(stream);
    let mut line = String::new();
    tokio::time::timeout(STEP_TIMEOUT, reader.read_line(&mut line))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    if line.trim() != "listeners" {
        return Err(io::Error::other(format!("asked {line:?}")));
    }
    let (lines, fds) = listener_sockets(switch)?;
    let stream = reader.get_mut();
    let payload: String = lines.iter().map(|line| format!("{line}\n")).collect();
    let borrowed: Vec<_> = fds.iter().map(|fd| fd.as_fd()).collect();
    let mut space =
        vec![MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(borrowed.len()))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(&borrowed)) {
        return Err(io::Error::other("too many sockets for one message"));
    }
    loop {
        stream.writable().await?;
        let sent = stream.try_io(tokio::io::Interest::WRITABLE, || {
            rustix::net::sendmsg(
                &*stream,
                &[IoSlice::new(payload.as_bytes())],
                &mut control,
                SendFlags::empty(),
            )
            .map_err(io::Error::from)
        });
        match sent {
            Ok(n) if n == payload.len() => break,
            Ok(_) => return Err(io::Error::other("the addresses did not fit in one message")),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    drop(fds);
    line.clear();
    tokio::time::timeout(STEP_TIMEOUT, reader.read_line(&mut line))
        .await
        .map_err(|_| io::Error::from(io::ErrorKind::TimedOut))??;
    if line.trim() != "ready" {
        return Err(io::Error::other(format!(
            "the new tcpvs said {line:?} instead of ready"
        )));
    }
    // From here the new process accepts: this one lets go of its listeners.
    switch.handed_over();
    let _ = std::fs::remove_file(path);
    reader.get_mut().write_all(b"bye\n").await?;
    tracing::info!(
        "upgrade: a new tcpvs took the listeners over; finishing the requests in flight"
    );
    Ok(())
}

/// A copy of every listening socket, each with the line naming it: its bound address, or
/// `admin tcp ADDR` / `admin unix PATH` for the admin endpoint's.
fn listener_sockets(switch: &ReloadHandle) -> io::Result<(Vec<String>, Vec<OwnedFd>)> {
    let (addrs, fds): (Vec<String>, Vec<OwnedFd>) =
        switch.sockets_for_successor()?.into_iter().unzip();
    if fds.len() > MAX_SOCKETS {
        return Err(io::Error::other(format!(
            "{} sockets: at most {MAX_SOCKETS}",
            fds.len()
        )));
    }
    Ok((addrs, fds))
}
