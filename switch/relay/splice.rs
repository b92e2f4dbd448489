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
use crate::stream::{wait, TimeLimit};
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
    limit: TimeLimit,
    meter: &Meter,
) -> Result<u64, RelayError> {
    let Some(pipe) = lease.pipe.as_ref() else {
        return Err(RelayError::Read(io::ErrorKind::BrokenPipe.into()));
    };
    let held = &mut lease.held;
    let mut flow = Flow {
        left: want.unwrap_or(u64::MAX),
        to_the_end: want.is_none(),
        moved: 0,
        source_done: false,
        source_flowing: false,
    };
    while *held > 0 || (flow.left > 0 && !flow.source_done) {
        let filled = flow.fill(pipe, held, src)?;
        let drained = flow.drain(pipe, held, dst, meter)?;
        if !filled && !drained {
            // Bytes waiting in the pipe: only the destination can unblock us. (Waiting on
            // the source too could spin, since its readiness may still be set.)
            if *held > 0 {
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
    Ok(flow.moved)
}

/// Where one [`splice_between`] stands.
struct Flow {
    /// Bytes still owed (`u64::MAX` when moving to the end of the stream).
    left: u64,
    /// Moving until the source ends, not a number of bytes.
    to_the_end: bool,
    moved: u64,
    source_done: bool,
    /// The last read took all it asked for: the source is streaming and more is on its way.
    source_flowing: bool,
}

impl Flow {
    /// Fills the pipe (`held` bytes in it) from `src`, never past what is still owed.
    /// `true`: bytes moved.
    fn fill(&mut self, pipe: &Pipe, held: &mut usize, src: &Socket) -> Result<bool, RelayError> {
        if self.left == 0 || self.source_done || *held >= pipe.capacity {
            return Ok(false);
        }
        let len = self.left.min((pipe.capacity - *held) as u64) as usize;
        let result = if *held == 0 {
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
            Ok(0) if self.to_the_end => {
                self.source_done = true;
                Ok(false)
            }
            Ok(0) => Err(RelayError::Truncated),
            Ok(n) => {
                *held += n;
                self.left -= n as u64;
                self.source_flowing = n == len;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(RelayError::Read(e)),
        }
    }

    /// Drains the pipe into `dst`. `true`: bytes moved.
    fn drain(
        &mut self,
        pipe: &Pipe,
        held: &mut usize,
        dst: &Socket,
        meter: &Meter,
    ) -> Result<bool, RelayError> {
        if *held == 0 {
            return Ok(false);
        }
        let in_pipe = *held;
        // More of the body still to come and the source streaming: SPLICE_F_MORE (MSG_MORE)
        // lets TCP build full segments instead of pushing each piece, which saves the
        // receiver per-packet work (measured +35% req/s on 1 MiB bodies). A source that
        // paused, and the last piece, go without it: MSG_MORE would hold them back up to
        // 200 ms.
        let flags = if self.left > 0 && !self.source_done && self.source_flowing {
            FLAGS.union(SpliceFlags::MORE)
        } else {
            FLAGS
        };
        let result = dst.try_io(Interest::WRITABLE, |fd| {
            splice(&pipe.read, None, fd, None, in_pipe, flags).map_err(io::Error::from)
        });
        match result {
            Ok(0) => Err(RelayError::Write(io::ErrorKind::WriteZero.into())),
            Ok(n) => {
                *held -= n;
                self.moved += n as u64;
                meter.add(n as u64);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(RelayError::Write(e)),
        }
    }
}
