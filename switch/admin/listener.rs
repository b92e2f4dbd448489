//! The endpoint's listening socket: TCP, or a Unix socket whose file's permissions say who may
//! connect (HAProxy's stats socket).
//!
//! A Unix socket is bound under a temporary name in its folder, given its mode, then renamed
//! to its path: the path never names a socket with the permissions the umask would have given
//! it. What is at the path already is replaced only when it is a socket nobody listens on (left
//! by a tcpvs that crashed); a socket somebody serves is "in use", as a TCP address would be,
//! and anything else (a regular file, a folder, a symbolic link) is an error. The file is
//! removed when the endpoint stops, unless another socket has replaced it meanwhile.
//!
//! At a binary upgrade (upgrade.rs) the socket goes to the new process with the services'
//! listeners, as a [`Handover`]: the new process serves the same kernel socket (so `tcpvs list`
//! never finds the address taken or the file gone), and the old one then leaves the file to it.

use crate::config::admin::{AdminConfig, AdminListen};
use rustix::fd::OwnedFd;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A bound admin listener, not yet serving.
#[derive(Debug)]
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, SocketFile),
}

impl Listener {
    /// The bound TCP address (`None` for a Unix socket).
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        match self {
            Listener::Tcp(listener) => listener.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// A copy of the socket for a successor at a binary upgrade, with what names it.
    pub fn handover(&self) -> io::Result<Handover> {
        Ok(match self {
            Listener::Tcp(listener) => Handover {
                name: AdminSocket::Tcp(listener.local_addr()?),
                socket: rustix::io::fcntl_dupfd_cloexec(listener, 0)?,
                removes_file: None,
            },
            Listener::Unix(listener, file) => Handover {
                name: AdminSocket::Unix(file.path.clone()),
                socket: rustix::io::fcntl_dupfd_cloexec(listener, 0)?,
                removes_file: Some(Arc::clone(&file.removes)),
            },
        })
    }
}

/// The endpoint's socket as a binary upgrade hands it over: its name (a line of the upgrade's
/// message, see [`AdminSocket::line`]) and a copy of the socket.
#[derive(Debug)]
pub struct Handover {
    pub name: AdminSocket,
    pub socket: OwnedFd,
    /// Whether this process removes the socket file when its endpoint stops: cleared in the old
    /// process once a successor took the socket, set in the new one once it serves.
    pub removes_file: Option<Arc<AtomicBool>>,
}

impl Handover {
    /// This process removes the socket file when its endpoint stops (`true`), or leaves it.
    pub fn set_removes_file(&self, removes: bool) {
        if let Some(flag) = &self.removes_file {
            flag.store(removes, Ordering::Relaxed);
        }
    }
}

/// Which admin socket: a TCP address or a Unix socket's path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminSocket {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl AdminSocket {
    /// The line naming it in the upgrade's message: `admin tcp ADDR` or `admin unix PATH`;
    /// `None` for a path that a line cannot carry (a newline in it): then it is not handed over.
    pub fn line(&self) -> Option<String> {
        match self {
            AdminSocket::Tcp(addr) => Some(format!("admin tcp {addr}")),
            AdminSocket::Unix(path) => {
                let text = path.to_str()?;
                (!text.contains('\n')).then(|| format!("admin unix {text}"))
            }
        }
    }

    /// The socket a line names, if it is an `admin` line.
    pub fn parse(line: &str) -> Option<Result<AdminSocket, String>> {
        let rest = line.strip_prefix("admin ")?;
        Some(match rest.split_once(' ') {
            Some(("tcp", addr)) => addr
                .parse()
                .map(AdminSocket::Tcp)
                .map_err(|_| format!("bad admin address {addr:?}")),
            Some(("unix", path)) => Ok(AdminSocket::Unix(PathBuf::from(path))),
            _ => Err(format!("bad admin line {line:?}")),
        })
    }

    fn of(listen: &AdminListen) -> AdminSocket {
        match listen {
            AdminListen::Tcp(addr) => AdminSocket::Tcp(*addr),
            AdminListen::Unix { path, .. } => AdminSocket::Unix(path.clone()),
        }
    }
}

/// Who is on the other end of a connection, for the rules on changes and for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    /// Over the Unix socket: the peer's user and process, as the kernel reports them
    /// (SO_PEERCRED), when it does.
    Unix {
        uid: Option<u32>,
        pid: Option<i32>,
    },
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix { uid, pid } => {
                match (uid, pid) {
                    (Some(uid), Some(pid)) => write!(f, "uid {uid}, pid {pid}, over")?,
                    (Some(uid), None) => write!(f, "uid {uid} over")?,
                    _ => f.write_str("a process over")?,
                }
                f.write_str(" the Unix socket")
            }
        }
    }
}

/// Binds the admin listener now, so that a taken address fails the start with a clear error;
/// or, at a binary upgrade, serves the socket the old process handed over when it is the one
/// the rule file names (`inherited`, taken). The file of an inherited Unix socket is removed at
/// the end only once this process serves (see [`Handover::set_removes_file`]): a successor that
/// fails before must leave it to the old process.
pub fn bind(config: &AdminConfig, inherited: &mut Option<Handover>) -> io::Result<Listener> {
    if inherited
        .as_ref()
        .is_some_and(|h| h.name == AdminSocket::of(&config.listen))
    {
        if let Some(handover) = inherited.take() {
            return adopt(handover);
        }
    }
    match &config.listen {
        AdminListen::Tcp(addr) => {
            let listener = std::net::TcpListener::bind(addr).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("the admin endpoint cannot listen on {addr}: {e}"),
                )
            })?;
            listener.set_nonblocking(true)?;
            Ok(Listener::Tcp(listener))
        }
        AdminListen::Unix { path, mode } => {
            let (listener, file) = bind_unix(path, *mode).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "the admin endpoint cannot listen on unix:{}: {e}",
                        path.display()
                    ),
                )
            })?;
            listener.set_nonblocking(true)?;
            Ok(Listener::Unix(listener, file))
        }
    }
}

/// Serves the socket an old process handed over.
fn adopt(handover: Handover) -> io::Result<Listener> {
    Ok(match handover.name {
        AdminSocket::Tcp(_) => {
            let listener = std::net::TcpListener::from(handover.socket);
            listener.set_nonblocking(true)?;
            Listener::Tcp(listener)
        }
        AdminSocket::Unix(path) => {
            let listener = std::os::unix::net::UnixListener::from(handover.socket);
            listener.set_nonblocking(true)?;
            let metadata = std::fs::symlink_metadata(&path)?;
            let file = SocketFile {
                path,
                identity: (metadata.dev(), metadata.ino()),
                removes: Arc::new(AtomicBool::new(false)),
            };
            Listener::Unix(listener, file)
        }
    })
}

/// The socket file at a path, as bound: removed when dropped if it is still the same file and
/// this process has not handed it to a successor.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    /// Device and inode of the socket bound, to leave alone a file that replaced it.
    identity: (u64, u64),
    removes: Arc<AtomicBool>,
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let still_ours = self.removes.load(Ordering::Relaxed)
            && std::fs::symlink_metadata(&self.path)
                .is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        if still_ours {
            if let Err(e) = std::fs::remove_file(&self.path) {
                tracing::warn!(
                    "the admin socket {} could not be removed: {e}",
                    self.path.display()
                );
            }
        }
    }
}

fn bind_unix(path: &Path, mode: u32) -> io::Result<(std::os::unix::net::UnixListener, SocketFile)> {
    check_replaceable(path)?;
    let folder = match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() => folder,
        _ => Path::new("."),
    };
    let temporary = folder.join(format!(".tcpvs-admin.{}.sock", std::process::id()));
    let listener = if temporary.as_os_str().len() <= 107 {
        // A file of ours with this name can only be left by a process of the same id that
        // crashed: it is not in use.
        if std::fs::symlink_metadata(&temporary).is_ok_and(|m| m.file_type().is_socket()) {
            std::fs::remove_file(&temporary)?;
        }
        let listener = std::os::unix::net::UnixListener::bind(&temporary)?;
        let placed = std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(mode))
            .and_then(|()| std::fs::rename(&temporary, path));
        if let Err(e) = placed {
            let _ = std::fs::remove_file(&temporary);
            return Err(e);
        }
        listener
    } else {
        // A temporary name would not fit in a socket address: bind at the path itself; the
        // socket has the umask's permissions until the chmod right after.
        if std::fs::symlink_metadata(path).is_ok() {
            std::fs::remove_file(path)?;
        }
        let listener = std::os::unix::net::UnixListener::bind(path)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        listener
    };
    let metadata = std::fs::symlink_metadata(path)?;
    Ok((
        listener,
        SocketFile {
            path: path.to_path_buf(),
            identity: (metadata.dev(), metadata.ino()),
            removes: Arc::new(AtomicBool::new(true)),
        },
    ))
}

/// Whether what is at `path` may be replaced: nothing, or a socket nobody listens on.
fn check_replaceable(path: &Path) -> io::Result<()> {
    let metadata = match std::fs::symlink_metadata(path) {
        Ok(metadata) => metadata,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let kind = metadata.file_type();
    if !kind.is_socket() {
        let what = if kind.is_file() {
            "a regular file"
        } else if kind.is_dir() {
            "a folder"
        } else if kind.is_symlink() {
            "a symbolic link"
        } else {
            "not a socket"
        };
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "{} is {what}: tcpvs replaces only a socket left by a tcpvs that stopped; \
                 remove it or choose another path",
                path.display()
            ),
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::AddrInUse,
            "another process serves this socket (a second tcpvs?)",
        )),
        // Nobody listens: a socket a stopped process left behind.
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Ok(()),
        Err(e) => Err(e),
    }
}
