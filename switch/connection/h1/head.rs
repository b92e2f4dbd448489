//! Reading a request head, with the memory each step holds while a slow client takes its time.

use super::{head_not_read, NoRequest};
use crate::connection::Connection;
use crate::http::chunked;
use crate::http::{parse_request, BodyFraming, HeadProgress, MAX_HEAD_BYTES};
use crate::recycle;
use crate::stream::{read_some, TimeLimit};
use tokio::time::Instant;

impl Connection {
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
            match read_some(&self.client, &mut self.inbuf, TimeLimit::Until(deadline)).await {
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
                // The memory the rest of the exchange uses, taken once the head is complete:
                // a client still sending its head holds only its buffer and the head's field
                // table.
                self.work.take();
                Some(self.check_received_body())
            }
            Ok(false) => None,
            Err(e) => Some(Err(NoRequest::Refuse(e.status, e.reason))),
        }
    }

    /// The head's field table, from the thread's free list (the buffer takes its storage at
    /// its first read).
    fn take_workspace(&mut self) {
        if self.head.fields.capacity() == 0 {
            self.head.fields = recycle::take_fields();
        }
    }

    /// A chunked body whose framing is already visibly broken in what was received with the
    /// head is refused before any server sees the request.
    fn check_received_body(&self) -> Result<(), NoRequest> {
        if self.head.framing == BodyFraming::Chunked {
            let received = self.inbuf.filled().get(self.head.len..).unwrap_or_default();
            if chunked::check_received(received).is_err() {
                return Err(NoRequest::Refuse(400, "invalid chunked body"));
            }
        }
        Ok(())
    }
}
