//! The response head: read from the server until a final (or 101) head is in, interim (1xx)
//! responses passed on to the client as they come.

use super::attempt::Attempt;
use super::client::ResponseSink;
use super::failure::ExchangeError;
use crate::http::{parse_response, HeadProgress, MAX_HEAD_BYTES};
use crate::relay::Meter;
use crate::state::control::Failure;
use crate::stream::{read_some, TimeLimit};
use std::io;

/// Interim (1xx) responses relayed before a final one, at most. Each moves bytes, so the idle
/// timeout never ends a server that streams `100 Continue` forever; a long operation's
/// `102 Processing` every few seconds, or a few `103 Early Hints`, stay far below this.
const MAX_INTERIM_RESPONSES: usize = 100;

/// How one parse of what the server sent so far ended.
enum Parsed {
    /// A final (or 101) response head is in `work.response`.
    Final,
    /// An interim response went on to the client (or was dropped): look for the next head.
    Interim,
    /// More bytes are needed.
    Incomplete,
}

impl<S: ResponseSink> Attempt<'_, S> {
    /// Reads the server's answer until a final (or 101) response head is in
    /// `work.response`. Interim 1xx responses go on to the client as they arrive.
    ///
    /// The server may stay silent for `idle` at most, counting only time in which no byte
    /// moved either way: while the request body is still going up (`upload` advancing),
    /// silence is fine.
    pub(super) async fn read_response_head(&mut self, upload: &Meter) -> Result<(), ExchangeError> {
        let idle = self.relay.idle;
        let mut received_any = false;
        let mut uploaded = upload.get();
        let mut progress = HeadProgress::default();
        let mut interim = 0;
        loop {
            let work = &mut *self.work;
            if !work.server_buf.is_empty() {
                received_any = true;
            }
            if !work.server_buf.is_empty() && progress.worth_parsing(work.server_buf.filled()) {
                match self.parse(&mut interim).await? {
                    Parsed::Final => return Ok(()),
                    Parsed::Interim => {
                        progress = HeadProgress::default();
                        continue;
                    }
                    Parsed::Incomplete => {}
                }
            }
            let work = &mut *self.work;
            work.server_buf.make_room_for_head(MAX_HEAD_BYTES);
            let reused = self.reused;
            match read_some(self.server, &mut work.server_buf, TimeLimit::Idle(idle)).await {
                Ok(0) if reused && !received_any => return Err(ExchangeError::Stale),
                Ok(0) if !received_any => {
                    return Err(ExchangeError::Unanswered(Failure::broken(
                        "server closed before any response byte",
                    )))
                }
                Ok(0) => {
                    return Err(ExchangeError::server(
                        502,
                        "server closed before a complete response head",
                    ))
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                    let now = upload.get();
                    if now == uploaded {
                        return Err(ExchangeError::server(504, "no response in time"));
                    }
                    uploaded = now;
                }
                Err(_) if reused && !received_any => return Err(ExchangeError::Stale),
                Err(e) if !received_any => {
                    return Err(ExchangeError::Unanswered(Failure::broken(format!(
                        "reading the response: {e}"
                    ))))
                }
                Err(e) => return Err(ExchangeError::server(502, format!("reading response: {e}"))),
            }
        }
    }

    /// Parses what the server sent so far; an interim response goes on to the client (the
    /// `interim`-th of this request).
    async fn parse(&mut self, interim: &mut usize) -> Result<Parsed, ExchangeError> {
        let work = &mut *self.work;
        match parse_response(work.server_buf.filled(), self.kind, &mut work.response) {
            Ok(true) if work.response.is_informational() && work.response.status != 101 => {
                *interim += 1;
                if *interim > MAX_INTERIM_RESPONSES {
                    return Err(ExchangeError::server(
                        502,
                        format!("more than {MAX_INTERIM_RESPONSES} interim responses"),
                    ));
                }
                self.sink
                    .interim(&mut work.out, &work.response, work.server_buf.filled())
                    .await
                    .map_err(|_| ExchangeError::Client {
                        status: 0,
                        why: "client closed".into(),
                    })?;
                work.server_buf.consume(work.response.len);
                Ok(Parsed::Interim)
            }
            Ok(true) => Ok(Parsed::Final),
            Ok(false) => Ok(Parsed::Incomplete),
            Err(bad) => Err(ExchangeError::bad_response(bad)),
        }
    }
}
