//! Zero-copy moves between two TCP sockets with splice(2) through a kernel pipe.
//!
//! Why by hand: tokio-splice only offers "until EOF, then shut the writer down", which is
//! right for a tunnel but kills keep-alive for a body, and tokio-splice2 was seen stopping early
//! on bounded moves (see design notes). The system calls come from rustix, so this module needs
//! no `unsafe`.
//!
//! The loop fills the pipe from the source (never past what is still owed) and drains it into
//! the destination, overlapping the two so the source keeps flowing while the destination
//! is slow. splice(2) into a pipe answers EAGAIN both for "socket empty" and "pipe full", so
//! tokio may clear the source's readiness only after an EAGAIN into an empty pipe.

use crate::relay::{Meter, RelayError};
use crate::socket::Socket;
use crate::stream::{wait, Limit};
use rustix::fd::OwnedFd;
use rustix::pipe::{fcntl_getpipe_size, pipe_with, splice, PipeFlags, SpliceFlags};
use std::cell::RefCell;
use std::io;
use tokio::io::Interest;

/// The kernel's default pipe capacity, kept as it is: 64 KiB pipes beat 256 KiB and 1 MiB ones
/// (bigger pipes hold more pages in flight; BENCHMARKS.md, "pipe size"). Used if the size
/// cannot be read.
const PIPE_BYTES: usize = 64 * 1024;
/// Empty pipes kept per thread for the next body.
pub const SPARE_PIPES_PER_THREAD: usize = 16;

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

thread_local! {
    static SPARE_PIPES: RefCell<Vec<Pipe>> = const { RefCell::new(Vec::new()) };
}

/// A pipe borrowed for one move. It goes back to the thread's spare list when dropped empty;
/// a pipe still holding bytes (the move failed half-way) is closed instead.
pub struct PipeLease {
    pipe: Option<Pipe>,
    held: usize,
}

impl PipeLease {
    pub fn take() -> io::Result<PipeLease> {
        let spare = SPARE_PIPES.with(|s| s.borrow_mut().pop());
        let pipe = match spare {
            Some(pipe) => pipe,
            None => {
                let (read, write) = pipe_with(PipeFlags::NONBLOCK | PipeFlags::CLOEXEC)?;
                let capacity = fcntl_getpipe_size(&write).unwrap_or(PIPE_BYTES);
                Pipe {
                    read,
                    write,
                    capacity,
                }
            }
        };
        Ok(PipeLease {
            pipe: Some(pipe),
            held: 0,
        })
    }
}

impl Drop for PipeLease {
    fn drop(&mut self) {
        if let Some(pipe) = self.pipe.take() {
            if self.held == 0 {
                SPARE_PIPES.with(|s| {
                    let mut spare = s.borrow_mut();
                    if spare.len() < SPARE_PIPES_PER_THREAD {
                        spare.push(pipe);
                    }
                });
            }
        }
    }
}

const FLAGS: SpliceFlags = SpliceFlags::MOVE.union(SpliceFlags::NONBLOCK);

/// Moves bytes from `src` to `dst` until `want` bytes have arrived in `dst` (`Some`), or until
/// `src` reaches end of stream (`None`). Returns the bytes moved.
///
/// Bytes after the `want`-th stay in `src` unread: the next pipelined message is untouched.
pub async fn splice_between(
    lease: &mut PipeLease,
    src: &Socket,
    dst: &Socket,
    want: Option<u64>,
    limit: Limit,
    meter: &Meter,
) -> Result<u64, RelayError> {
    let Some(pipe) = lease.pipe.as_ref() else {
        return Err(RelayError::Read(io::ErrorKind::BrokenPipe.into()));
    };
    let mut left = want.unwrap_or(u64::MAX);
    let mut moved = 0u64;
    let mut source_done = false;
    // The last read took all it asked for: the source is streaming and more is on its way.
    let mut source_flowing = false;
    while lease.held > 0 || (left > 0 && !source_done) {
        let mut progressed = false;
        if left > 0 && !source_done && lease.held < pipe.capacity {
            let len = left.min((pipe.capacity - lease.held) as u64) as usize;
            let result = if lease.held == 0 {
                // Empty pipe: EAGAIN can only mean "socket empty", so tokio may clear the
                // socket's readiness. (A short splice proves nothing: the pipe may have run out
                // of slots while the socket still holds data, so it must not clear it.)
                src.try_io(Interest::READABLE, |fd| {
                    splice(fd, None, &pipe.write, None, len, FLAGS).map_err(io::Error::from)
                })
            } else {
                // Pipe partly full: EAGAIN may mean "pipe full" while the socket still has
                // data, so this attempt must not clear the socket's readiness.
                splice(src, None, &pipe.write, None, len, FLAGS).map_err(io::Error::from)
            };
            match result {
                Ok(0) if want.is_none() => source_done = true,
                Ok(0) => return Err(RelayError::Truncated),
                Ok(n) => {
                    lease.held += n;
                    left -= n as u64;
                    progressed = true;
                    source_flowing = n == len;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(RelayError::Read(e)),
            }
        }
        if lease.held > 0 {
            let held = lease.held;
            // More of the body still to come and the source streaming: SPLICE_F_MORE
            // (MSG_MORE) lets TCP build full segments instead of pushing each piece, which
            // saves the receiver per-packet work (measured +35% req/s on 1 MiB bodies). A
            // source that paused, and the last piece, go without it: MSG_MORE would hold
            // them back up to 200 ms.
            let flags = if left > 0 && !source_done && source_flowing {
                FLAGS.union(SpliceFlags::MORE)
            } else {
                FLAGS
            };
            let result = dst.try_io(Interest::WRITABLE, |fd| {
                splice(&pipe.read, None, fd, None, held, flags).map_err(io::Error::from)
            });
            match result {
                Ok(0) => return Err(RelayError::Write(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    lease.held -= n;
                    moved += n as u64;
                    meter.add(n as u64);
                    progressed = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(RelayError::Write(e)),
            }
        }
        if !progressed {
            // Bytes waiting in the pipe: only the destination can unblock us. (Waiting on
            // the source too could spin, since its readiness may still be set.)
            if lease.held > 0 {
                wait(dst.writable(), limit)
                    .await
                    .map_err(RelayError::Write)?;
            } else {
                wait(src.readable(), limit)
                    .await
                    .map_err(RelayError::Read)?;
            }
        }
    }
    Ok(moved)
}
