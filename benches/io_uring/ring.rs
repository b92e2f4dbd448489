//! What both io_uring drivers share: sockets named by descriptor or by registered index, a slab
//! of connection slots, the ring itself with its table of files, and the socket to a server.

use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::net::SocketAddr;
use std::os::fd::RawFd;

/// A socket as the ring's entries name it: a descriptor, or an index in the ring's table of
/// registered files (`--fixed-files`), which spares the kernel looking the descriptor up and
/// counting a reference to its file on every entry.
#[derive(Clone, Copy)]
pub enum Sock {
    Raw(RawFd),
    Fixed(u32),
}

/// Builds opcode `$kind` on a `Sock`: both arms give the same builder type.
#[macro_export]
macro_rules! op {
    ($kind:ident, $sock:expr $(, $arg:expr)*) => {
        match $sock {
            $crate::ring::Sock::Raw(fd) => io_uring::opcode::$kind::new(io_uring::types::Fd(fd) $(, $arg)*),
            $crate::ring::Sock::Fixed(i) => io_uring::opcode::$kind::new(io_uring::types::Fixed(i) $(, $arg)*),
        }
    };
}

/// With fixed files: accepted clients take indexes the kernel allocates below `SERVER_FILES`;
/// server connections sit at `SERVER_FILES + slot`.
pub const SERVER_FILES: u32 = 4096;
pub const FILES: u32 = 2 * SERVER_FILES;

pub struct Slab<T> {
    slots: Vec<Option<T>>,
    free: Vec<usize>,
}

impl<T> Slab<T> {
    pub fn new() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
    pub fn insert(&mut self, value: T) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(value);
                i
            }
            None => {
                self.slots.push(Some(value));
                self.slots.len() - 1
            }
        }
    }
    pub fn get(&mut self, i: usize) -> Option<&mut T> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }
    pub fn remove(&mut self, i: usize) {
        if let Some(slot) = self.slots.get_mut(i) {
            if slot.take().is_some() {
                self.free.push(i);
            }
        }
    }
}

/// `IORING_REGISTER_FILE_ALLOC_RANGE`, which the io-uring crate does not wrap: the indexes the
/// kernel may allocate for multishot accepts, so that they never take a server connection's.
/// The register opcode of `IORING_REGISTER_FILE_ALLOC_RANGE` (include/uapi/linux/io_uring.h).
const IORING_REGISTER_FILE_ALLOC_RANGE: libc::c_long = 25;

pub fn register_file_alloc_range(ring: &IoUring, offset: u32, len: u32) -> io::Result<()> {
    #[repr(C)]
    struct Range {
        off: u32,
        len: u32,
        resv: u64,
    }
    let range = Range {
        off: offset,
        len,
        resv: 0,
    };
    // SAFETY: the argument is the kernel's `struct io_uring_file_index_range`, live for the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            std::os::fd::AsRawFd::as_raw_fd(ring),
            IORING_REGISTER_FILE_ALLOC_RANGE,
            &range as *const Range,
            0,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The ring of a driver: one thread submits (`SINGLE_ISSUER`), and completion work runs only when
/// that thread enters the kernel (`DEFER_TASKRUN`), not in interrupts of the other CPU. With
/// `fixed_files`, a sparse table of registered files: clients' indexes allocated by the kernel
/// below `SERVER_FILES`, servers' at `SERVER_FILES + slot`.
pub fn new_ring(fixed_files: bool) -> io::Result<IoUring> {
    let ring = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(16 * 1024)
        .build(4096)?;
    if fixed_files {
        ring.submitter().register_files_sparse(FILES)?;
        register_file_alloc_range(&ring, 0, SERVER_FILES)?;
    }
    Ok(ring)
}

/// The server's address as connect(2) takes it; boxed, so an entry can point at it.
pub fn server_address(server: SocketAddr) -> io::Result<Box<libc::sockaddr_in>> {
    let SocketAddr::V4(v4) = server else {
        return Err(io::Error::other(
            "the prototype connects to IPv4 servers only",
        ));
    };
    Ok(Box::new(libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(v4.ip().octets()),
        },
        sin_zero: [0; 8],
    }))
}

/// A new socket to a server, with TCP_NODELAY; with fixed files, registered at `index` and its
/// descriptor closed (the ring holds the file).
pub fn server_socket(ring: &IoUring, fixed_index: Option<u32>) -> io::Result<Sock> {
    // SAFETY: plain socket(2); the descriptor is owned here, then by the caller's slot.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let one: libc::c_int = 1;
    // SAFETY: `one` is a live c_int of the length given.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let Some(index) = fixed_index else {
        return Ok(Sock::Raw(fd));
    };
    let registered = if index < FILES {
        ring.submitter()
            .register_files_update(index, &[fd])
            .map(drop)
    } else {
        Err(io::Error::other(
            "more server connections than the table of fixed files holds",
        ))
    };
    // SAFETY: `fd` is ours; once registered, the ring holds its own reference to the file.
    unsafe { libc::close(fd) };
    registered.map(|()| Sock::Fixed(index))
}

/// One turn of a driver's loop: one `io_uring_enter` submits what the last turn queued and waits
/// for a completion; the completions are copied out (user data, result, flags) so the handlers
/// can queue entries while they run.
pub fn turn(ring: &mut IoUring, completions: &mut Vec<(u64, i32, u32)>) -> io::Result<()> {
    match ring.submit_and_wait(1) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
        // The completion queue is full: drain it, then submit again.
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
        Err(e) => return Err(e),
    }
    completions.clear();
    completions.extend(
        ring.completion()
            .map(|c| (c.user_data(), c.result(), c.flags())),
    );
    Ok(())
}

/// Queues `entries` together (linked entries must land in one queue); a full queue goes to the
/// kernel first.
///
/// # Safety
/// Every buffer and address the entries point into must stay valid, and unwritten by the
/// relay, until each entry completes.
pub unsafe fn push(ring: &mut IoUring, entries: &[squeue::Entry]) {
    let room = {
        let sq = ring.submission();
        sq.capacity() - sq.len()
    };
    if room < entries.len() {
        let _ = ring.submit();
    }
    // SAFETY: the caller's promise; there is room for every entry.
    unsafe {
        let _ = ring.submission().push_multiple(entries);
    }
}

/// The multishot accept on the listener: one entry for its life. With fixed files the kernel
/// picks each client's index (a direct descriptor has no close-on-exec flag to set: the kernel
/// refuses it).
pub fn accept_entry(listener: RawFd, fixed_files: bool, user_data: u64) -> squeue::Entry {
    let flags = if fixed_files {
        libc::SOCK_NONBLOCK
    } else {
        libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC
    };
    opcode::AcceptMulti::new(types::Fd(listener))
        .allocate_file_index(fixed_files)
        .flags(flags)
        .build()
        .user_data(user_data)
}
