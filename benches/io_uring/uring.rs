//! The io_uring driver: one ring, one thread, every socket call an entry of the ring.
//!
//! A loop turn is one `io_uring_enter`: it submits every entry queued while the last turn's
//! completions were handled and waits for at least one more completion. With
//! `IORING_SETUP_DEFER_TASKRUN` (and `SINGLE_ISSUER`) the kernel runs completion work only inside
//! that call, not in interrupts of the other CPU. Entries that must follow one another are linked
//! (`IO_LINK`), so one turn can carry "send the request, then receive the answer" or "send the
//! answer, then receive the next request". Accepts are multishot: one entry for the listener's
//! life. Sends carry `MSG_WAITALL`, so a send completes whole or fails, and a linked receive never
//! overwrites a buffer that is still being sent.
//!
//! Every buffer an entry points into is owned by a slot (a client or a server connection) that is
//! freed only once no entry of it is in flight (`pending`) and its close completed.

use crate::framing::{self, Request, Response};
use crate::op;
use crate::ring::{self, Slab, Sock, SERVER_FILES};
use io_uring::{squeue, IoUring};
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{IntoRawFd, RawFd};

const INPUT: usize = 16 * 1024;
const RELAY: usize = 64 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Accept,
    ClientRecv,
    ClientSend,
    ClientClose,
    Connect,
    ServerSend,
    ServerRecv,
    ServerClose,
}

const OPS: [Op; 8] = [
    Op::Accept,
    Op::ClientRecv,
    Op::ClientSend,
    Op::ClientClose,
    Op::Connect,
    Op::ServerSend,
    Op::ServerRecv,
    Op::ServerClose,
];

fn user_data(op: Op, slot: usize) -> u64 {
    ((slot as u64) << 8) | op as u64
}

fn decode(user_data: u64) -> (Op, usize) {
    (OPS[(user_data & 0xff) as usize], (user_data >> 8) as usize)
}

struct Client {
    fd: Sock,
    input: Box<[u8]>,
    filled: usize,
    /// The request as it goes to the server; not touched while its send is in flight.
    request: Vec<u8>,
    server: Option<usize>,
    close_after: bool,
    /// The send in flight carries the end of the response.
    last_send: bool,
    pending: u32,
    closing: bool,
}

struct Server {
    fd: Sock,
    buf: Box<[u8]>,
    filled: usize,
    head_done: bool,
    remaining: u64,
    reusable: bool,
    client: Option<usize>,
    pending: u32,
    closing: bool,
}

pub struct Relay {
    ring: IoUring,
    listener: RawFd,
    server_addr: Box<libc::sockaddr_in>,
    clients: Slab<Client>,
    servers: Slab<Server>,
    idle_servers: Vec<usize>,
    fixed_files: bool,
    /// `IORING_RECVSEND_POLL_FIRST` (`--poll-first`): a receive waits for data before trying,
    /// as the answer to a request just sent cannot be there yet.
    recv_ioprio: u16,
}

/// How the ring is used; each a flag of the prototype, so each is measured on its own.
pub struct Options {
    pub fixed_files: bool,
    pub poll_first: bool,
}

pub fn run(listener: TcpListener, server: SocketAddr, options: Options) -> io::Result<()> {
    let server_addr = ring::server_address(server)?;
    let ring = ring::new_ring(options.fixed_files)?;
    let mut relay = Relay {
        ring,
        listener: listener.into_raw_fd(),
        server_addr,
        clients: Slab::new(),
        servers: Slab::new(),
        idle_servers: Vec::new(),
        fixed_files: options.fixed_files,
        recv_ioprio: if options.poll_first {
            IORING_RECVSEND_POLL_FIRST
        } else {
            0
        },
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
            Op::ClientRecv => self.client_received(slot, result),
            Op::ClientSend => self.client_sent(slot, result),
            Op::ClientClose => self.client_closed(slot, result),
            Op::Connect => self.connected(slot, result),
            Op::ServerSend => self.server_sent(slot, result),
            Op::ServerRecv => self.server_received(slot, result),
            Op::ServerClose => self.server_closed(slot, result),
        }
    }

    fn accepted(&mut self, result: i32, flags: u32) {
        if !io_uring::cqueue::more(flags) {
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
            close_after: false,
            last_send: false,
            pending: 0,
            closing: false,
        });
        self.recv_request(slot, false);
    }

    /// Receives (more of) a request; `linked` when the entry before it in the queue (the send of
    /// the last response) must complete first.
    fn recv_request(&mut self, slot: usize, linked: bool) -> Option<squeue::Entry> {
        let c = self.clients.get(slot)?;
        c.pending += 1;
        let free = &mut c.input[c.filled..];
        let e = op!(Recv, c.fd, free.as_mut_ptr(), free.len() as u32)
            .ioprio(self.recv_ioprio)
            .build()
            .user_data(user_data(Op::ClientRecv, slot));
        if linked {
            return Some(e);
        }
        self.push(&[e]);
        None
    }

    fn client_received(&mut self, slot: usize, result: i32) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.pending -= 1;
        if c.closing || result <= 0 {
            self.close_client(slot);
            return;
        }
        c.filled += result as usize;
        self.next_request(slot);
    }

    /// Dispatches the request at the start of the client's input, or receives more of it.
    fn next_request(&mut self, slot: usize) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        match framing::request(&c.input[..c.filled], &mut c.request) {
            Request::Partial if c.filled < c.input.len() => {
                self.recv_request(slot, false);
            }
            Request::Partial | Request::Refused => self.close_client(slot),
            Request::Complete {
                consumed,
                close_after,
            } => {
                c.input.copy_within(consumed..c.filled, 0);
                c.filled -= consumed;
                c.close_after = close_after;
                self.forward(slot);
            }
        }
    }

    /// Sends the client's request on a kept-alive server connection, or on a new one.
    fn forward(&mut self, client: usize) {
        let (server, connect) = match self.idle_servers.pop() {
            Some(s) => (s, None),
            None => match self.new_server() {
                Ok((s, e)) => (s, Some(e)),
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
        let Some(s) = self.servers.get(server) else {
            return;
        };
        s.client = Some(client);
        s.filled = 0;
        s.head_done = false;
        s.pending += 2;
        let send = op!(Send, s.fd, req_ptr, req_len)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .flags(squeue::Flags::IO_LINK)
            .user_data(user_data(Op::ServerSend, server));
        let recv = op!(Recv, s.fd, s.buf.as_mut_ptr(), s.buf.len() as u32)
            .ioprio(self.recv_ioprio)
            .build()
            .user_data(user_data(Op::ServerRecv, server));
        match connect {
            Some(connect) => self.push(&[connect, send, recv]),
            None => self.push(&[send, recv]),
        }
    }

    fn new_server(&mut self) -> io::Result<(usize, squeue::Entry)> {
        let slot = self.servers.insert(Server {
            fd: Sock::Raw(-1),
            buf: vec![0; RELAY].into_boxed_slice(),
            filled: 0,
            head_done: false,
            remaining: 0,
            reusable: true,
            client: None,
            pending: 1,
            closing: false,
        });
        let fixed_index = self.fixed_files.then_some(SERVER_FILES + slot as u32);
        let fd = match ring::server_socket(&self.ring, fixed_index) {
            Ok(fd) => fd,
            Err(e) => {
                self.servers.remove(slot);
                return Err(e);
            }
        };
        if let Some(s) = self.servers.get(slot) {
            s.fd = fd;
        }
        let addr = &*self.server_addr as *const libc::sockaddr_in as *const libc::sockaddr;
        let e = op!(
            Connect,
            fd,
            addr,
            std::mem::size_of::<libc::sockaddr_in>() as u32
        )
        .build()
        .flags(squeue::Flags::IO_LINK)
        .user_data(user_data(Op::Connect, slot));
        Ok((slot, e))
    }

    fn connected(&mut self, slot: usize, result: i32) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.pending -= 1;
        if result < 0 {
            // The linked send and receive complete with -ECANCELED and end the exchange.
            s.reusable = false;
        }
    }

    fn server_sent(&mut self, slot: usize, result: i32) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.pending -= 1;
        if result < 0 {
            s.reusable = false;
        }
    }

    fn server_received(&mut self, slot: usize, result: i32) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.pending -= 1;
        if s.closing {
            self.close_server(slot);
            return;
        }
        if result <= 0 {
            self.fail_exchange(slot);
            return;
        }
        let got = result as usize;
        let chunk = if s.head_done {
            s.remaining = s.remaining.saturating_sub(got as u64);
            got
        } else {
            s.filled += got;
            match framing::response(&s.buf[..s.filled]) {
                Response::Partial if s.filled < s.buf.len() => {
                    s.pending += 1;
                    let free = &mut s.buf[s.filled..];
                    let e = op!(Recv, s.fd, free.as_mut_ptr(), free.len() as u32)
                        .ioprio(self.recv_ioprio)
                        .build()
                        .user_data(user_data(Op::ServerRecv, slot));
                    self.push(&[e]);
                    return;
                }
                Response::Partial | Response::Refused => {
                    self.fail_exchange(slot);
                    return;
                }
                Response::Head {
                    head_len,
                    body_len,
                    reusable,
                    connection,
                } => {
                    let body_here = (s.filled - head_len) as u64;
                    if body_here > body_len {
                        // The server sent more than one answer's worth.
                        self.fail_exchange(slot);
                        return;
                    }
                    let client_closes = s
                        .client
                        .and_then(|c| self.clients.get(c))
                        .is_some_and(|c| c.close_after);
                    if client_closes {
                        framing::mark_close(&mut s.buf[..s.filled], connection);
                    }
                    s.head_done = true;
                    s.reusable &= reusable;
                    s.remaining = body_len - body_here;
                    s.filled
                }
            }
        };
        self.relay_to_client(slot, chunk);
    }

    /// Sends the first `len` bytes of the server's buffer to its client, linked to what follows:
    /// the next receive from the server, or the end of the exchange.
    fn relay_to_client(&mut self, server: usize, len: usize) {
        let Some(s) = self.servers.get(server) else {
            return;
        };
        let Some(client) = s.client else { return };
        let (sfd, buf_ptr, buf_len, more) =
            (s.fd, s.buf.as_mut_ptr(), s.buf.len(), s.remaining > 0);
        if more {
            s.pending += 1;
        }
        let Some(c) = self.clients.get(client) else {
            return;
        };
        c.pending += 1;
        c.last_send = !more;
        let send = op!(Send, c.fd, buf_ptr, len as u32)
            .flags(libc::MSG_WAITALL | libc::MSG_NOSIGNAL)
            .build()
            .user_data(user_data(Op::ClientSend, client));
        let linked = send.clone().flags(squeue::Flags::IO_LINK);
        if more {
            let recv = op!(Recv, sfd, buf_ptr, buf_len as u32)
                .ioprio(self.recv_ioprio)
                .build()
                .user_data(user_data(Op::ServerRecv, server));
            self.push(&[linked, recv]);
        } else if c.close_after {
            c.pending += 1;
            c.closing = true;
            let close = op!(Close, c.fd)
                .build()
                .user_data(user_data(Op::ClientClose, client));
            self.push(&[linked, close]);
        } else if c.filled == 0 {
            // Nothing pipelined: the next request is received once the answer is out.
            if let Some(recv) = self.recv_request(client, true) {
                self.push(&[linked, recv]);
            }
        } else {
            self.push(&[send]);
        }
    }

    fn client_closed(&mut self, slot: usize, result: i32) {
        if result == -libc::ECANCELED {
            // A close linked after a send that failed: close for real.
            if let Some(c) = self.clients.get(slot) {
                c.pending = 0;
            }
            self.close_client(slot);
            return;
        }
        self.clients.remove(slot);
    }

    fn server_closed(&mut self, slot: usize, _result: i32) {
        self.servers.remove(slot);
    }

    fn client_sent(&mut self, slot: usize, result: i32) {
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        c.pending -= 1;
        let last = c.last_send;
        let server = if last { c.server.take() } else { c.server };
        if result < 0 {
            // A linked receive or close completes with -ECANCELED; the server connection was
            // mid-answer or its buffer was being sent: neither is reused.
            if let Some(server) = server {
                self.close_server(server);
            }
            self.close_client(slot);
            return;
        }
        if !last {
            return;
        }
        if let Some(server) = server {
            self.release_server(server);
        }
        let Some(c) = self.clients.get(slot) else {
            return;
        };
        if !c.close_after && c.filled > 0 && c.pending == 0 {
            self.next_request(slot);
        }
    }

    fn release_server(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.client = None;
        if s.reusable && s.pending == 0 && !s.closing {
            self.idle_servers.push(slot);
        } else {
            self.close_server(slot);
        }
    }

    /// The server failed mid-exchange: its client is closed (the prototype answers no 502).
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
        if c.pending > 0 {
            // Closed when the last entry in flight completes.
            return;
        }
        c.pending += 1;
        let e = op!(Close, c.fd)
            .build()
            .user_data(user_data(Op::ClientClose, slot));
        self.push(&[e]);
    }

    fn close_server(&mut self, slot: usize) {
        let Some(s) = self.servers.get(slot) else {
            return;
        };
        s.closing = true;
        s.reusable = false;
        if s.pending > 0 {
            return;
        }
        s.pending += 1;
        let e = op!(Close, s.fd)
            .build()
            .user_data(user_data(Op::ServerClose, slot));
        self.push(&[e]);
    }
}

/// `IORING_RECVSEND_POLL_FIRST` (include/uapi/linux/io_uring.h), the ioprio flag of a receive;
/// the io-uring crate keeps its constants private.
const IORING_RECVSEND_POLL_FIRST: u16 = 1;
