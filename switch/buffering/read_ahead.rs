//! `[pool.NAME] response_buffer`: the response is read from the server ahead of a client that
//! reads slowly, up to the pool's buffer, so that the server is done with it (its worker free
//! for the next request) while the client still takes it: nginx's `proxy_buffering`. Two
//! halves run at once in the exchange's task: [`ReadAhead::fill`] takes the server side's
//! parts into pooled 16 KiB buffers, and a [`Drain`] gives them to the client's sink as a
//! [`ResponseBody`] (each buffer moved out whole, not copied again). The buffers are charged
//! to `buffer_memory` as they are taken and given back as they are sent; a response that
//! finds the budget spent is read one buffer at a time, as without read-ahead (counted once
//! as a fallback).

use super::{BufferLease, BufferMemory};
use crate::buffer::IoBuf;
use crate::exchange::server::{H1Wire, ResponseBody};
use crate::http::part::{BodyPart, Trailers};
use crate::recycle::BUFFER_BYTES;
use crate::relay::RelayError;
use std::collections::VecDeque;
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use tokio::sync::Notify;

/// What was read ahead and not yet taken by the client's side.
#[derive(Debug)]
struct Queue<'m> {
    /// Each buffer, and whether it is charged to the budget (one past it may be queued
    /// uncharged).
    buffers: VecDeque<(IoBuf, bool)>,
    /// Bytes in `buffers`.
    bytes: u64,
    /// The charged buffers' share of the budget.
    lease: BufferLease<'m>,
    /// The trailer section, once the body ended with one.
    trailers: Vec<u8>,
    /// How the server's body ended, once it did.
    end: Option<Result<(), RelayError>>,
    /// The budget was found spent (counted once).
    fell_back: bool,
}

/// A response read ahead of its client: shared by the two halves.
#[derive(Debug)]
pub struct ReadAhead<'m> {
    queue: Mutex<Queue<'m>>,
    /// The most bytes read ahead at once (`response_buffer`).
    limit: u64,
    /// The drain took a buffer: room for the filler.
    room: Notify,
    /// The filler queued data or the end: something for the drain.
    arrived: Notify,
}

impl<'m> ReadAhead<'m> {
    pub fn new(limit: u64, memory: &'m BufferMemory) -> Self {
        ReadAhead {
            queue: Mutex::new(Queue {
                buffers: VecDeque::new(),
                bytes: 0,
                lease: BufferLease::new(memory),
                trailers: Vec::new(),
                end: None,
                fell_back: false,
            }),
            limit,
            room: Notify::new(),
            arrived: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<'m>> {
        // Both halves run in one task and hold the lock only between awaits: never poisoned
        // in practice, and the queue stays consistent if it were.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the body from `source` into the queue until its end (or its failure, which the
    /// drain returns once it has given what came before).
    pub async fn fill(&self, source: &mut impl ResponseBody) {
        let end = loop {
            let part = match source.next_part().await {
                Ok(part) => part,
                Err(e) => break Err(e),
            };
            match part {
                BodyPart::Data(data) => self.push(data).await,
                BodyPart::Trailers(trailers) => self.lock().trailers = trailers.0.to_vec(),
                BodyPart::End => break Ok(()),
            }
        };
        self.lock().end = Some(end);
        self.arrived.notify_one();
    }

    /// Whether the server's body ended well (and the drain has not yet given its end).
    pub fn ended_well(&self) -> bool {
        matches!(self.lock().end, Some(Ok(())))
    }

    /// Queues a copy of `data`, waiting for room while the queue holds `limit` bytes (or, past
    /// the budget, any buffer at all).
    async fn push(&self, mut data: &[u8]) {
        while !data.is_empty() {
            let mut room = pin!(self.room.notified());
            room.as_mut().enable();
            if let Some(taken) = self.push_some(data) {
                data = &data[taken..];
                self.arrived.notify_one();
            } else {
                room.await;
            }
        }
    }

    /// Queues what fits of `data` now; `None`: no room.
    fn push_some(&self, data: &[u8]) -> Option<usize> {
        let mut queue = self.lock();
        let queue = &mut *queue;
        if queue.bytes >= self.limit {
            return None;
        }
        let last_has_room = queue
            .buffers
            .back()
            .is_some_and(|(b, _)| b.is_allocated() && b.spare_len() > 0);
        if !last_has_room {
            let charged = queue.lease.grow(BUFFER_BYTES as u64);
            if !charged {
                if !queue.buffers.is_empty() {
                    return None;
                }
                // Past the budget: one buffer at a time, as without read-ahead.
                if !queue.fell_back {
                    queue.fell_back = true;
                    queue.lease.count_fallback();
                }
            }
            queue.buffers.push_back((IoBuf::unallocated(), charged));
        }
        let (buffer, _) = queue.buffers.back_mut()?;
        let spare = buffer.spare();
        let n = spare.len().min(data.len());
        spare[..n].copy_from_slice(&data[..n]);
        buffer.fill(n);
        queue.bytes += n as u64;
        Some(n)
    }
}

/// The client's side of a [`ReadAhead`]: the response body as the sink takes it.
pub struct Drain<'a, 'm> {
    ahead: &'a ReadAhead<'m>,
    /// The buffer the last part lent, and whether it is charged to the budget.
    current: IoBuf,
    charged: bool,
    /// The trailers, moved out of the queue when given.
    trailers: Vec<u8>,
}

impl<'a, 'm> Drain<'a, 'm> {
    pub fn new(ahead: &'a ReadAhead<'m>) -> Self {
        Drain {
            ahead,
            current: IoBuf::unallocated(),
            charged: false,
            trailers: Vec::new(),
        }
    }

    /// The buffer lent last goes back to the free list, and its bytes to the budget.
    fn give_back_current(&mut self) {
        if self.current.is_allocated() {
            self.current.consume(self.current.len());
            self.current.release();
            if std::mem::take(&mut self.charged) {
                self.ahead.lock().lease.shrink(BUFFER_BYTES as u64);
            }
        }
    }

    /// What the queue has for the drain now: `None` when it must wait.
    fn take(&mut self) -> Option<Result<Taken, RelayError>> {
        let mut queue = self.ahead.lock();
        if let Some((buffer, charged)) = queue.buffers.pop_front() {
            queue.bytes -= buffer.len() as u64;
            drop(queue);
            self.ahead.room.notify_one();
            self.current = buffer;
            self.charged = charged;
            return Some(Ok(Taken::Data));
        }
        match queue.end.take()? {
            Err(e) => Some(Err(e)),
            Ok(()) if !queue.trailers.is_empty() => {
                self.trailers = std::mem::take(&mut queue.trailers);
                queue.end = Some(Ok(()));
                Some(Ok(Taken::Trailers))
            }
            Ok(()) => {
                queue.end = Some(Ok(()));
                Some(Ok(Taken::End))
            }
        }
    }
}

/// What [`Drain::take`] found.
enum Taken {
    Data,
    Trailers,
    End,
}

impl ResponseBody for Drain<'_, '_> {
    async fn next_part(&mut self) -> Result<BodyPart<'_>, RelayError> {
        self.give_back_current();
        loop {
            let mut arrived = pin!(self.ahead.arrived.notified());
            arrived.as_mut().enable();
            match self.take() {
                Some(Ok(Taken::Data)) => return Ok(BodyPart::Data(self.current.filled())),
                Some(Ok(Taken::Trailers)) => {
                    return Ok(BodyPart::Trailers(Trailers(&self.trailers)));
                }
                Some(Ok(Taken::End)) => return Ok(BodyPart::End),
                Some(Err(e)) => return Err(e),
                None => arrived.await,
            }
        }
    }

    fn finished(&self) -> bool {
        let queue = self.ahead.lock();
        queue.buffers.is_empty() && queue.trailers.is_empty() && queue.end.is_some()
    }

    fn has_buffered(&self) -> bool {
        let queue = self.ahead.lock();
        !queue.buffers.is_empty() || queue.end.is_some()
    }

    fn h1_wire(&mut self) -> Option<H1Wire<'_>> {
        None
    }
}

impl Drop for Drain<'_, '_> {
    fn drop(&mut self) {
        self.give_back_current();
    }
}
