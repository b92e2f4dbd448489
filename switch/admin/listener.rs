//! The endpoint's listening socket: TCP, or a Unix socket whose file's permissions say who may
//! connect (HAProxy's stats socket).
//!
//! A Unix socket is bound under a temporary name in its folder, given its mode, then renamed
//! to its path: the path never names a socket with the permissions the umask would have given
//! it. What is at the path already is replaced only when it is a socket nobody listens on (left
//! by a tcpvs that crashed); a socket somebody serves is "in use", as a TCP address would be,
//! and anything else (a regular file, a folder, a symbolic link) is an error. The file is
//! removed when the endpoint stops, unless another socket has replaced it meanwhile.

use crate::config::admin::{AdminConfig, AdminListen};
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

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

/// Binds the admin listener now, so that a taken address fails the start with a clear error.
pub fn bind(config: &AdminConfig) -> io::Result<Listener> {
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

/// The socket file at a path, as bound: removed when dropped if it is still the same file.
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    /// Device and inode of the socket bound, to leave alone a file that replaced it.
    identity: (u64, u64),
}

impl SocketFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        let still_ours = std::fs::symlink_metadata(&self.path)
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
