//! Reading what a connection sends before each request is carried out: the PROXY protocol
//! header a director puts first (`proxy_protocol`), the wait for a request's first bytes, and
//! the request head itself, with the memory each step holds while a slow client takes its time.

use super::*;

impl Session {
    /// Reads the PROXY protocol header the connection starts with (edge/proxy_protocol.rs) by
    /// `deadline`, and takes the client it names as this connection's: for X-Forwarded-For,
    /// `source-hash`, the log and the servers' PROXY headers. `false`: none came, or a broken
    /// one; the connection is counted and closed without a word, never routed.
    pub(super) async fn read_proxy_header(&mut self, deadline: Instant) -> bool {
        loop {
            match proxy_protocol::read_header(self.inbuf.filled()) {
                proxy_protocol::Received::Header {
                    len,
                    client,
                    destination,
                } => {
                    self.inbuf.consume(len);
                    if let Some(client) = client {
                        self.peer = client;
                        self.client_text = forwarded_for(client.ip());
                    }
                    self.destination = destination;
                    return true;
                }
                proxy_protocol::Received::Incomplete => {
                    match read_some(&self.client, &mut self.inbuf, Limit::Until(deadline)).await {
                        Ok(n) if n > 0 => continue,
                        _ => {}
                    }
                }
                proxy_protocol::Received::Invalid => {}
            }
            stats::bump(&self.service().stats.proxy_refused);
            tracing::debug!(client = %self.peer, "no valid PROXY protocol header; closed");
            return false;
        }
    }

    /// Waits until bytes of a request (or leftovers of a pipelined one) are in `inbuf`.
    ///
    /// Meanwhile the connection holds no request memory (it went back to the thread), and a
    /// stopping switch lets it go at once. `head_deadline` is the first request's: its head must
    /// be complete within header_timeout of the accept; later requests may wait
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
            self.give_back_workspace();
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

    /// Reads until `self.head` holds a complete, valid request head; the first bytes are in
    /// `inbuf` already. The head must be complete by `head_deadline`, or header_timeout after
    /// its first byte.
    pub(super) async fn read_request_head(
        &mut self,
        head_deadline: Option<Instant>,
        mut progress: HeadProgress,
    ) -> Result<(), NoRequest> {
        let deadline =
            head_deadline.unwrap_or_else(|| Instant::now() + self.shared.settings.header_timeout);
        loop {
            if let Some(head) = self.head_in_buffer(&mut progress) {
                return head;
            }
            // Not complete: the field table goes back to the thread while the client takes
            // its time (a slow client holds its buffer and little else).
            recycle::give_fields(&mut self.head.fields);
            self.inbuf.make_room_for_head(MAX_HEAD_BYTES);
            match read_some(&self.client, &mut self.inbuf, Limit::Until(deadline)).await {
                Ok(0) => return Err(NoRequest::Closed),
                Ok(_) => {}
                Err(e) => return Err(head_not_read(e)),
            }
        }
    }

    /// The request head if `inbuf` holds all of it (usually it came in one read), parsed
    /// without waiting for anything; `None` while more bytes are needed.
    pub(super) fn head_in_buffer(
        &mut self,
        progress: &mut HeadProgress,
    ) -> Option<Result<(), NoRequest>> {
        self.take_workspace();
        if !progress.worth_parsing(self.inbuf.filled()) {
            return None;
        }
        match parse_request(self.inbuf.filled_mut(), &mut self.head) {
            Ok(true) => {
                self.take_exchange_workspace();
                Some(self.check_received_body())
            }
            Ok(false) => None,
            Err(e) => Some(Err(NoRequest::Refuse(e.status, e.reason))),
        }
    }

    /// The head's field table, from the thread's free list (the buffer takes its storage at
    /// its first read).
    pub(super) fn take_workspace(&mut self) {
        if self.head.fields.capacity() == 0 {
            self.head.fields = recycle::take_fields();
        }
    }

    /// The memory the rest of the exchange uses, taken once the head is complete: a client
    /// still sending its head holds only its buffer and the head's field table.
    pub(super) fn take_exchange_workspace(&mut self) {
        if self.response.fields.capacity() == 0 {
            self.response.fields = recycle::take_fields();
        }
        if self.upstream_head.capacity() == 0 {
            self.upstream_head = recycle::take_bytes();
        }
        if self.out.capacity() == 0 {
            self.out = recycle::take_bytes();
        }
    }

    /// Gives the per-request memory back while the connection waits for its next request.
    pub(super) fn give_back_workspace(&mut self) {
        self.inbuf.release();
        self.server_buf.release();
        recycle::give_fields(&mut self.head.fields);
        recycle::give_fields(&mut self.response.fields);
        recycle::give_bytes(&mut self.upstream_head);
        recycle::give_bytes(&mut self.out);
        recycle::give_bytes(&mut self.chunk_scratch);
        // Cleared, not freed: a client that waits for each answer comes back within the
        // burst grace, and freeing them made every such request allocate them again. They go
        // when the burst ends (run).
        self.tried.clear();
        self.log_request.clear();
    }

    /// A chunked body whose framing is already visibly broken in what was received with the
    /// head is refused before any server sees the request.
    pub(super) fn check_received_body(&self) -> Result<(), NoRequest> {
        if self.head.framing == BodyFraming::Chunked {
            let received = self.inbuf.filled().get(self.head.len..).unwrap_or_default();
            if chunked::check_received(received).is_err() {
                return Err(NoRequest::Refuse(400, "invalid chunked body"));
            }
        }
        Ok(())
    }
}
