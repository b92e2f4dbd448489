//! The wait for a request's first bytes (or leftovers of a pipelined one), with nothing but the
//! socket held meanwhile.

use super::{Await, Waited};
use crate::connection::Connection;
use crate::stream::Io;
use std::io;
use std::task::Poll;

/// What ended a wait for the next request.
enum Wake {
    Readable(io::Result<()>),
    Expired,
    Stop,
}

impl Connection {
    /// Waits until bytes of a request (or leftovers of a pipelined one) are in `inbuf`.
    ///
    /// Meanwhile the connection holds no request memory (it went back to the thread), but for
    /// its field tables and head bytes in the grace right after a response (`Await::Grace`,
    /// at most h1.rs's `BURST_GRACE`), kept for the burst's next request; and a stopping
    /// switch lets it go at once. `head_deadline` is the first request's: its head must be
    /// complete within header_timeout of the accept; later requests may wait
    /// keepalive_timeout for their first byte.
    pub(super) async fn wait_for_request(&mut self, waiting: Await) -> Result<(), Waited> {
        let deadline = match waiting {
            Await::FirstHead(at) => self.timer.deadline_at(at),
            Await::KeepAlive(d) | Await::Grace(d) => self.timer.deadline_after(d),
        };
        // A connection that has not joined the reactor has no readiness to consult: a new
        // one's request has usually arrived with it, so it is read speculatively (socket.rs);
        // only a read that would block makes the socket join, in the wait below.
        let mut read_first = !self.client.is_registered();
        loop {
            // Empty lines before a request line are ignored (RFC 9112 section 2.2); dropping
            // them here keeps a stray CRLF after a body from counting as a started head.
            while let [b'\r' | b'\n', ..] = self.inbuf.filled() {
                self.inbuf.consume(1);
            }
            if !self.inbuf.is_empty() {
                return Ok(());
            }
            if read_first {
                match self.client.try_recv(self.inbuf.spare()) {
                    Ok(0) => return Err(Waited::Closed),
                    Ok(n) => {
                        self.inbuf.fill(n);
                        continue;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return Err(Waited::Closed),
                }
            }
            // Within a burst the field tables and head bytes stay for the next request, as
            // they do for a pipelined one: given back and taken again around each wait, they
            // cost a client that waits for each answer about 400 instructions a request
            // (BENCHMARKS.md). The buffers, most of the memory, go back at once; the rest
            // when the grace ends.
            match waiting {
                Await::Grace(_) => self.give_back_buffers(),
                Await::FirstHead(_) | Await::KeepAlive(_) => self.give_back_workspace(),
            }
            // A hand-written wait: the state an idle connection keeps is only this.
            let (client, timer) = (&self.client, &self.timer);
            let woken = std::future::poll_fn(|cx| {
                if timer.stopping() {
                    return Poll::Ready(Wake::Stop);
                }
                if let Poll::Ready(result) = client.poll_read_ready(cx) {
                    return Poll::Ready(Wake::Readable(result));
                }
                match timer.poll_expired(deadline, cx) {
                    Poll::Ready(()) => Poll::Ready(Wake::Expired),
                    // Checked again now that the waker is registered: a stop that came after
                    // the first check found no waker to wake, and would be missed until the
                    // deadline.
                    Poll::Pending if timer.stopping() => Poll::Ready(Wake::Stop),
                    Poll::Pending => Poll::Pending,
                }
            })
            .await;
            match woken {
                Wake::Stop => return Err(Waited::Closed),
                Wake::Expired => {
                    return Err(match waiting {
                        // A new connection that sent nothing gets 408, like one that stopped
                        // half-way through its head; an idle keep-alive one is closed quietly.
                        Await::FirstHead(_) => {
                            Waited::Refuse(408, "request head not received in time")
                        }
                        Await::KeepAlive(_) => Waited::Closed,
                        Await::Grace(_) => Waited::GraceOver,
                    });
                }
                Wake::Readable(Err(_)) => return Err(Waited::Closed),
                // Readiness can be a false alarm (a new socket starts out "ready"): the read
                // says, and a read that finds nothing leads back to the wait.
                Wake::Readable(Ok(())) => read_first = true,
            }
        }
    }
}
