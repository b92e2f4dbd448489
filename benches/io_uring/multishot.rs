//! The io_uring driver with multishot receives (`--io io_uring --multishot`): one receive entry
//! per connection for the connection's life, filling buffers the relay provides through a ring of
//! buffers the kernel picks from (one ring for clients' requests, one for servers' answers). Beside
//! `uring.rs` this saves the entry and the arming of the kernel's internal poll that every
//! one-shot receive costs, twice per request.
//!
//! What it changes in the relay: a client's bytes are copied out of the provided buffer into the
//! client's input at once (requests are small); a server's answer head is copied likewise, and its
//! body goes to the client straight from the provided buffer, which returns to the ring when that
//! send completes. Sends to a client are queued, one in flight at a time, so they stay in order. A
//! connection is closed by shutting it down first: its receive, which holds the socket, then ends.
//! A slot is freed once no entry of it is in flight (`pending`) and its close completed.

use crate::framing::{self, Request, Response};
use crate::op;
use crate::ring::{self, Slab, Sock, SERVER_FILES};
use io_uring::types::BufRingEntry;
use io_uring::{cqueue, squeue, IoUring};
use std::alloc::{alloc_zeroed, Layout};
use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{IntoRawFd, RawFd};
use std::sync::atomic::{AtomicU16, Ordering};

const INPUT: usize = 16 * 1024;
const HEAD: usize = 16 * 1024;
const CLIENT_GROUP: u16 = 0;
const SERVER_GROUP: u16 = 1;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Accept,
    ClientRecv,
    ClientSend,
    ClientShutdown,
    ClientClose,
    Connect,
    ServerSend,
    ServerRecv,
    ServerShutdown,
    ServerClose,
}

const OPS: [Op; 10] = [
    Op::Accept,
    Op::ClientRecv,
    Op::ClientSend,
    Op::ClientShutdown,
    Op::ClientClose,
    Op::Connect,
    Op::ServerSend,
    Op::ServerRecv,
    Op::ServerShutdown,
    Op::ServerClose,
];

fn user_data(op: Op, slot: usize) -> u64 {
    ((slot as u64) << 8) | op as u64
}

fn decode(user_data: u64) -> (Op, usize) {
    (OPS[(user_data & 0xff) as usize], (user_data >> 8) as usize)
}

/// A ring of provided buffers (`IORING_REGISTER_PBUF_RING`): `count` buffers of `size` bytes.
struct BufRing {
    entries: *mut BufRingEntry,
    memory: Box<[u8]>,
    count: u16,
    size: usize,
    tail: u16,
}

impl BufRing {
    fn new(ring: &IoUring, group: u16, count: u16, size: usize) -> io::Result<Self> {
        let layout =
            Layout::from_size_align(count as usize * std::mem::size_of::<BufRingEntry>(), 4096)
                .map_err(io::Error::other)?;
        // SAFETY: a non-zero layout; the memory lives as long as the relay (and so the ring).
        let entries = unsafe { alloc_zeroed(layout) } as *mut BufRingEntry;
        if entries.is_null() {
            return Err(io::Error::other("out of memory for the buffer ring"));
        }
        // SAFETY: `entries` is page-aligned, holds `count` entries and is never freed.
        unsafe {
            ring.submitter()
                .register_buf_ring_with_flags(entries as u64, count, group, 0)?
        };
        let mut ring = BufRing {
            entries,
            memory: vec![0; count as usize * size].into_boxed_slice(),
            count,
            size,
            tail: 0,
        };
        for bid in 0..count {
            ring.give_back(bid);
        }
        Ok(ring)
    }

    fn buffer(&self, bid: u16) -> *const u8 {
        self.memory[bid as usize * self.size..].as_ptr()
    }

    fn bytes(&self, bid: u16, len: usize) -> &[u8] {
        &self.memory[bid as usize * self.size..][..len]
    }

    fn bytes_mut(&mut self, bid: u16, len: usize) -> &mut [u8] {
        &mut self.memory[bid as usize * self.size..][..len]
    }

    /// Hands buffer `bid` back to the kernel.
    fn give_back(&mut self, bid: u16) {
        let index = (self.tail & (self.count - 1)) as usize;
        // SAFETY: `index` < `count`; the kernel reads an entry only below the published tail.
        let entry = unsafe { &mut *self.entries.add(index) };
        entry.set_addr(self.buffer(bid) as u64);
        entry.set_len(self.size as u32);
        entry.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is the u16 the kernel reads in the first entry; published with release
        // ordering after the entry is written.
        unsafe {
            (*(BufRingEntry::tail(self.entries) as *const AtomicU16))
                .store(self.tail, Ordering::Release)
        };
    }
}

/// A piece of an answer queued for a client: bytes of the server's head buffer, or a provided
/// buffer of the server ring (`bid`), handed back once sent.
struct Chunk {
    ptr: *const u8,
    len: u32,
    bid: Option<u16>,
    last: bool,
}

struct Client {
    fd: Sock,
    input: Box<[u8]>,
    filled: usize,
    request: Vec<u8>,
    server: Option<usize>,
    /// An exchange is under way: requests wait in `input`.
    busy: bool,
    /// The client shut its side: the requests it sent are still answered, then it is closed.
    eof: bool,
    close_after: bool,
    queue: VecDeque<Chunk>,
    in_flight: Option<Chunk>,
    receiving: bool,
    pending: u32,
    closing: bool,
    shut: bool,
    close_sent: bool,
}

struct Server {
    fd: Sock,
    head: Box<[u8]>,
    filled: usize,
    head_done: bool,
    remaining: u64,
    reusable: bool,
    client: Option<usize>,
    receiving: bool,
    /// The receive ended for want of buffers: armed again when one is handed back.
    starved: bool,
    pending: u32,
    closing: bool,
    shut: bool,
    close_sent: bool,
}

pub struct Relay {
    ring: IoUring,
    listener: RawFd,
    server_addr: Box<libc::sockaddr_in>,
    clients: Slab<Client>,
    servers: Slab<Server>,
    idle_servers: Vec<usize>,
    fixed_files: bool,
    client_buffers: BufRing,
    server_buffers: BufRing,
}

pub fn run(listener: TcpListener, server: SocketAddr, fixed_files: bool) -> io::Result<()> {
    let server_addr = ring::server_address(server)?;
    let ring = ring::new_ring(fixed_files)?;
    let client_buffers = BufRing::new(&ring, CLIENT_GROUP, 2048, 2048)?;
    let server_buffers = BufRing::new(&ring, SERVER_GROUP, 512, 64 * 1024)?;
    let mut relay = Relay {
        ring,
        listener: listener.into_raw_fd(),
        server_addr,
        clients: Slab::new(),
        servers: Slab::new(),
        idle_servers: Vec::new(),
        fixed_files,
        client_buffers,
        server_buffers,
    };
    relay.arm_accept();
    let mut completions = Vec::with_capacity(1024);
    loop {
        ring::turn(&mut relay.ring, &mut completions)?;
        for &(data, result, flags) in &completions {
            let (op, slot) = decode(data);
            if cfg!(debug_assertions) && std::env::var_os("TRACE").is_some() {
                eprintln!("{op:?} {slot}: {result} {flags:x}");
            }
            relay.complete(op, slot, result, flags);
        }
    }
}

impl Relay {
    fn push(&mut self, entries: &[squeue::Entry]) {
        // SAFETY: every buffer and address an entry points into is owned by a slot (or by the
        // relay) that outlives the entry: slots are freed only when `pending` is 0 and their
        // close completed; what an entry reads is not written until it completes, and is boxed
        // (or a Vec not grown meanwhile), so moving a slot does not move it.
        unsafe { ring::push(&mut self.ring, entries) }
    }

    fn arm_accept(&mut self) {
        let e = ring::accept_entry(self.listener, self.fixed_files, user_data(Op::Accept, 0));
        self.push(&[e]);
    }

    fn complete(&mut self, op: Op, slot: usize, result: i32, flags: u32) {
        match op {
            Op::Accept => self.accepted(result, flags),
            Op::ClientRecv => self.client_received(slot, result, flags),
            Op::ClientSend => self.client_sent(slot, result),
            Op::ClientShutdown => {
                if let Some(c) = self.clients.get(slot) {
                    c.pending -= 1;
                }
            }
            Op::ClientClose => {
                self.clients.remove(slot);
                return;
            }
            Op::Connect | Op::ServerSend => {
                if let Some(s) = self.servers.get(slot) {
                    s.pending -= 1;
                    if result < 0 {
                        // The entries linked after it end with -ECANCELED, the receive among them.
                        s.reusable = false;
                    }
                }
                if result < 0 {
                    self.fail_exchange(slot);
                }
            }
            Op::ServerRecv => self.server_received(slot, result, flags),
            Op::ServerShutdown => {
                if let Some(s) = self.servers.get(slot) {
                    s.pending -= 1;
                }
            }
            Op::ServerClose => {
                self.servers.remove(slot);
                return;
            }
        }
        match op {
            Op::Accept => {}
            Op::ClientRecv | Op::ClientSend | Op::ClientShutdown => self.settle_client(slot),
            _ => self.settle_server(slot),
        }
    }

    fn arm_client_recv(&mut self, slot: usize) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.receiving = true;
        c.pending += 1;
        let e = op!(RecvMulti, c.fd, CLIENT_GROUP)
            .build()
            .user_data(user_data(Op::ClientRecv, slot));
        self.push(&[e]);
    }

    fn accepted(&mut self, result: i32, flags: u32) {
        if !cqueue::more(flags) {
            self.arm_accept();
        }
        if result < 0 {
            return;
        }
        let slot = self.clients.insert(Client {
            fd: if self.fixed_files {
                Sock::Fixed(result as u32)
            } else {
                Sock::Raw(result)
            },
            input: vec![0; INPUT].into_boxed_slice(),
            filled: 0,
            request: Vec::with_capacity(512),
            server: None,
            busy: false,
            eof: false,
            close_after: false,
            queue: VecDeque::new(),
            in_flight: None,
            receiving: false,
            pending: 0,
            closing: false,
            shut: false,
            close_sent: false,
        });
        self.arm_client_recv(slot);
    }

    fn client_received(&mut self, slot: usize, result: i32, flags: u32) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        if !cqueue::more(flags) {
            c.pending -= 1;
            c.receiving = false;
        }
        if result > 0 {
            let len = result as usize;
            let Some(bid) = cqueue::buffer_select(flags) else {
                return;
            };
            let fits = c.filled + len <= c.input.len();
            if fits && !c.closing {
                c.input[c.filled..c.filled + len]
                    .copy_from_slice(self.client_buffers.bytes(bid, len));
                c.filled += len;
            }
            self.client_buffers.give_back(bid);
            if !fits {
                self.close_client(slot);
                return;
            }
        } else if result == 0 {
            c.eof = true;
            if !c.busy {
                self.next_request(slot);
            }
            return;
        } else if result == -libc::ENOBUFS {
            // Every client buffer was taken for a moment (each is handed back at once): armed
            // again below.
        } else {
            // The client closed, or the receive failed.
            self.close_client(slot);
            return;
        }
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        if c.closing {
            return;
        }
        if !c.receiving && !c.eof {
            self.arm_client_recv(slot);
        }
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        if !c.busy {
            self.next_request(slot);
        }
    }

    fn next_request(&mut self, slot: usize) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        match framing::request(&c.input[..c.filled], &mut c.request) {
            Request::Partial if c.filled < c.input.len() && !c.eof => {}
            Request::Partial | Request::Refused => self.close_client(slot),
            Request::Complete {
                consumed,
                close_after,
            } => {
                c.input.copy_within(consumed..c.filled, 0);
                c.filled -= consumed;
                c.close_after = close_after;
                c.busy = true;
                self.forward(slot);
            }
        }
    }

    fn forward(&mut self, client: usize) {
        let (server, connect) = match self.idle_servers.pop() {
            Some(s) => (s, false),
            None => match self.new_server() {
                Ok(s) => (s, true),
                Err(_) => {
                    self.close_client(client);
                    return;
                }
            },
        };
        let Some(c) = self.clients.get(client) else {
            return;
        };
        c.server = Some(server);
        let (req_ptr, req_len) = (c.request.as_ptr(), c.request.len() as u32);
        let addr = &*self.server_addr as *const libc::sockaddr_in as *const libc::sockaddr;
        let Some(s) = self.servers.get(server) else {
            return;
        };
        s.client = Some(client);
        s.filled = 0;
        s.head_done = false;
        s.pending += 1;
        let send = op!(Send, s.fd, req_ptr, req_len)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Op::ServerSend, server));
        if !connect {
            self.push(&[send]);
            return;
        }
        // connect, then the request, then the receive that lasts the connection's life.
        s.pending += 2;
        s.receiving = true;
        let connect = op!(
            Connect,
            s.fd,
            addr,
            std::mem::size_of::<libc::sockaddr_in>() as u32
        )
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(user_data(Op::Connect, server));
        let recv = op!(RecvMulti, s.fd, SERVER_GROUP)
            .build()
            .user_data(user_data(Op::ServerRecv, server));
        self.push(&[connect, send.flags(squeue::Flags::IO_LINK), recv]);
    }

    fn new_server(&mut self) -> io::Result<usize> {
        let slot = self.servers.insert(Server {
            fd: Sock::Raw(-1),
            head: vec![0; HEAD].into_boxed_slice(),
            filled: 0,
            head_done: false,
            remaining: 0,
            reusable: true,
            client: None,
            receiving: false,
            starved: false,
            pending: 0,
            closing: false,
            shut: false,
            close_sent: false,
        });
        let fixed_index = self.fixed_files.then_some(SERVER_FILES + slot as u32);
        match ring::server_socket(&self.ring, fixed_index) {
            Ok(fd) => {
                if let Some(s) = self.servers.get(slot) {
                    s.fd = fd;
                }
                Ok(slot)
            }
            Err(e) => {
                self.servers.remove(slot);
                Err(e)
            }
        }
    }

    fn arm_server_recv(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.receiving = true;
        s.starved = false;
        s.pending += 1;
        let e = op!(RecvMulti, s.fd, SERVER_GROUP)
            .build()
            .user_data(user_data(Op::ServerRecv, slot));
        self.push(&[e]);
    }

    fn server_received(&mut self, slot: usize, result: i32, flags: u32) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        if !cqueue::more(flags) {
            s.pending -= 1;
            s.receiving = false;
        }
        if result == -libc::ENOBUFS {
            s.starved = true;
            return;
        }
        if result <= 0 {
            // Closed by the server (idle or mid-answer), cancelled after a failed send, or failed.
            self.idle_servers.retain(|&i| i != slot);
            self.fail_exchange(slot);
            return;
        }
        let len = result as usize;
        let Some(bid) = cqueue::buffer_select(flags) else {
            return;
        };
        let (Some(client), false) = (s.client, s.closing) else {
            // Bytes from a server with no request outstanding.
            self.server_buffers.give_back(bid);
            self.idle_servers.retain(|&i| i != slot);
            self.fail_exchange(slot);
            return;
        };
        let chunk = if s.head_done {
            if len as u64 > s.remaining {
                self.server_buffers.give_back(bid);
                self.fail_exchange(slot);
                return;
            }
            s.remaining -= len as u64;
            Some(Chunk {
                ptr: self.server_buffers.buffer(bid),
                len: len as u32,
                bid: Some(bid),
                last: s.remaining == 0,
            })
        } else {
            // The head: parsed in place when it starts in this buffer (the body after it is sent
            // from there too), else gathered in `head`.
            let in_place = s.filled == 0;
            if !in_place {
                let fits = s.filled + len <= s.head.len();
                if fits {
                    s.head[s.filled..s.filled + len]
                        .copy_from_slice(self.server_buffers.bytes(bid, len));
                    s.filled += len;
                }
                self.server_buffers.give_back(bid);
                if !fits {
                    self.fail_exchange(slot);
                    return;
                }
            }
            let bytes = if in_place {
                self.server_buffers.bytes(bid, len)
            } else {
                &s.head[..s.filled]
            };
            match framing::response(bytes) {
                Response::Partial if in_place && len <= s.head.len() => {
                    s.head[..len].copy_from_slice(self.server_buffers.bytes(bid, len));
                    s.filled = len;
                    self.server_buffers.give_back(bid);
                    None
                }
                Response::Partial if !in_place => None,
                Response::Partial | Response::Refused => {
                    if in_place {
                        self.server_buffers.give_back(bid);
                    }
                    self.fail_exchange(slot);
                    return;
                }
                Response::Head {
                    head_len,
                    body_len,
                    reusable,
                    connection,
                } => {
                    let body_here = (bytes.len() - head_len) as u64;
                    if body_here > body_len {
                        if in_place {
                            self.server_buffers.give_back(bid);
                        }
                        self.fail_exchange(slot);
                        return;
                    }
                    s.head_done = true;
                    s.reusable &= reusable;
                    s.remaining = body_len - body_here;
                    let last = s.remaining == 0;
                    if self.clients.get(client).is_some_and(|c| c.close_after) {
                        let head = if in_place {
                            self.server_buffers.bytes_mut(bid, len)
                        } else {
                            &mut s.head[..s.filled]
                        };
                        framing::mark_close(head, connection);
                    }
                    Some(if in_place {
                        Chunk {
                            ptr: self.server_buffers.buffer(bid),
                            len: len as u32,
                            bid: Some(bid),
                            last,
                        }
                    } else {
                        Chunk {
                            ptr: s.head.as_ptr(),
                            len: s.filled as u32,
                            bid: None,
                            last,
                        }
                    })
                }
            }
        };
        let rearm = !s.receiving && !s.closing;
        if rearm {
            self.arm_server_recv(slot);
        }
        if let Some(chunk) = chunk {
            self.queue_to_client(client, chunk);
        }
    }

    fn queue_to_client(&mut self, client: usize, chunk: Chunk) {
        let Some(c) = self.clients.get(client) else {
            return;
        };
        c.queue.push_back(chunk);
        if c.in_flight.is_none() {
            self.send_next(client);
        }
    }

    fn send_next(&mut self, client: usize) {
        let Some(c) = self.clients.get(client) else {
            return;
        };
        let Some(chunk) = c.queue.pop_front() else {
            return;
        };
        c.pending += 1;
        let e = op!(Send, c.fd, chunk.ptr, chunk.len)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Op::ClientSend, client));
        c.in_flight = Some(chunk);
        self.push(&[e]);
    }

    fn client_sent(&mut self, slot: usize, result: i32) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.pending -= 1;
        let Some(chunk) = c.in_flight.take() else {
            return;
        };
        let server = c.server;
        if let Some(bid) = chunk.bid {
            self.server_buffers.give_back(bid);
            self.unstarve(server);
        }
        if result < 0 || result as u32 != chunk.len {
            if let Some(server) = server {
                self.fail_exchange(server);
            }
            self.close_client(slot);
            return;
        }
        if !chunk.last {
            self.send_next(slot);
            return;
        }
        // The answer is out: the server connection goes back to the pool.
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.server = None;
        c.busy = false;
        let (close_after, more) = (c.close_after, c.filled > 0 || c.eof);
        if let Some(server) = server {
            self.release_server(server);
        }
        if close_after {
            self.close_client(slot);
        } else if more {
            self.next_request(slot);
        }
    }

    /// A server whose receive ended for want of buffers receives again once one is back.
    fn unstarve(&mut self, server: Option<usize>) {
        let Some(server) = server else { return };
        let Some(s) = self.servers.get(server) else {
            return;
        };
        if s.starved && !s.receiving && !s.closing {
            self.arm_server_recv(server);
        }
    }

    fn release_server(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.client = None;
        if s.reusable && s.receiving && !s.closing {
            self.idle_servers.push(slot);
        } else {
            self.close_server(slot);
        }
    }

    fn fail_exchange(&mut self, server: usize) {
        let client = self.servers.get(server).and_then(|s| s.client.take());
        self.close_server(server);
        if let Some(client) = client {
            if let Some(c) = self.clients.get(client) {
                c.server = None;
            }
            self.close_client(client);
        }
    }

    fn close_client(&mut self, slot: usize) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.closing = true;
        // Chunks not yet sent hand their buffers back now.
        let queued: Vec<u16> = c.queue.drain(..).filter_map(|chunk| chunk.bid).collect();
        for bid in queued {
            self.server_buffers.give_back(bid);
        }
        self.settle_client(slot);
    }

    /// A closing client: shut down while its receive is armed (the receive then ends), closed
    /// once nothing of it is in flight.
    fn settle_client(&mut self, slot: usize) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        if !c.closing || c.close_sent {
            return;
        }
        if c.receiving && !c.shut {
            c.shut = true;
            c.pending += 1;
            let e = op!(Shutdown, c.fd, libc::SHUT_RDWR)
                .build()
                .user_data(user_data(Op::ClientShutdown, slot));
            self.push(&[e]);
        } else if c.pending == 0 {
            c.close_sent = true;
            let e = op!(Close, c.fd)
                .build()
                .user_data(user_data(Op::ClientClose, slot));
            self.push(&[e]);
        }
    }

    fn close_server(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.closing = true;
        s.reusable = false;
        self.settle_server(slot);
    }

    fn settle_server(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        if !s.closing || s.close_sent {
            return;
        }
        if s.receiving && !s.shut {
            s.shut = true;
            s.pending += 1;
            let e = op!(Shutdown, s.fd, libc::SHUT_RDWR)
                .build()
                .user_data(user_data(Op::ServerShutdown, slot));
            self.push(&[e]);
        } else if s.pending == 0 {
            s.close_sent = true;
            let e = op!(Close, s.fd)
                .build()
                .user_data(user_data(Op::ServerClose, slot));
            self.push(&[e]);
        }
    }
}
