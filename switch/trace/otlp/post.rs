//! One batch POSTed to the collector over a connection kept from batch to batch, as the
//! OpenTelemetry SDKs' HTTP exporters keep theirs: a connection a batch cost the switch a
//! connect, an accept at the collector and a close each time, and on a 2-core machine the
//! collector's share slowed everything beside it (BENCHMARKS.md, "Tracing"). The answer is
//! read whole (head, then a `Content-Length` body) so the next batch finds the connection
//! clean; an answer that cannot be read to its end that way (chunked, no length, too long,
//! `Connection: close`, HTTP/1.0) ends the connection after it. A kept connection the
//! collector closed while idle is noticed before it is used, and a batch that fails on one
//! before any answer came is sent once more on a new connection (so a collector that took a
//! batch and closed without answering gets it twice: delivery is at least once, as the
//! OpenTelemetry exporters' retries make it).

use super::collector::Collector;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long one batch may take to reach the collector and be answered.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(2);

/// The longest answer head read, and the longest answer body read and thrown away; an
/// answer beyond either is not waited for and its connection not kept.
const ANSWER_HEAD_MAX: usize = 8 * 1024;
const ANSWER_BODY_MAX: usize = 64 * 1024;

/// The export thread's connection to the collector, if one is open.
#[derive(Default)]
pub struct CollectorLink {
    kept: Option<TcpStream>,
}

/// What one exchange with the collector gave, and whether its connection can serve again.
struct Answer {
    status: u16,
    reusable: bool,
}

impl CollectorLink {
    /// POSTs `body` (its parts one after the other) to `collector`; the answer's status.
    /// Everything within [`EXPORT_TIMEOUT`], the retry on a new connection included.
    pub fn post(&mut self, collector: &Collector, body: [&[u8]; 2]) -> io::Result<u16> {
        let deadline = Instant::now() + EXPORT_TIMEOUT;
        if let Some(stream) = self.kept.take().filter(still_open) {
            match exchange(&stream, collector, body, deadline) {
                Ok(answer) => return Ok(self.keep_if(stream, answer)),
                // Closed under us before anything came back: once more, on a new connection.
                Err(Failure::BeforeAnswer(e)) if e.kind() != io::ErrorKind::TimedOut => {}
                Err(Failure::BeforeAnswer(e) | Failure::InAnswer(e)) => return Err(e),
            }
        }
        let stream = connect(collector, deadline)?;
        match exchange(&stream, collector, body, deadline) {
            Ok(answer) => Ok(self.keep_if(stream, answer)),
            Err(Failure::BeforeAnswer(e) | Failure::InAnswer(e)) => Err(e),
        }
    }

    fn keep_if(&mut self, stream: TcpStream, answer: Answer) -> u16 {
        if answer.reusable {
            self.kept = Some(stream);
        }
        answer.status
    }
}

/// Why an exchange failed: before any byte of the answer (the request may be sent again), or
/// within it.
enum Failure {
    BeforeAnswer(io::Error),
    InAnswer(io::Error),
}

/// A new connection to the collector (its name looked up now: a collector that moves is
/// followed).
fn connect(collector: &Collector, deadline: Instant) -> io::Result<TcpStream> {
    let address = collector
        .authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other("the collector's name has no address"))?;
    let stream = TcpStream::connect_timeout(&address, left(deadline)?)?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Whether a kept connection is still usable: nothing to read on it, and not closed (the
/// collector closes idle connections after its own timeout).
fn still_open(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let mut byte = [0u8; 1];
    let open = matches!(stream.peek(&mut byte), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    open && stream.set_nonblocking(false).is_ok()
}

/// The request written and its answer read.
fn exchange(
    mut stream: &TcpStream,
    collector: &Collector,
    body: [&[u8]; 2],
    deadline: Instant,
) -> Result<Answer, Failure> {
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
        collector.path,
        collector.authority,
        body.iter().map(|part| part.len()).sum::<usize>()
    );
    // The HTTP head and the body's few bytes of message heads in one write, the spans in another.
    let mut first = head.into_bytes();
    first.extend_from_slice(body[0]);
    write_by(stream, &first, deadline).map_err(Failure::BeforeAnswer)?;
    write_by(stream, body[1], deadline).map_err(Failure::BeforeAnswer)?;
    read_answer(&mut stream, deadline)
}

/// Writes all of `bytes` by `deadline`: the timeout is set again before each write, so a
/// collector that takes a little at a time cannot stretch a batch past it.
fn write_by(mut stream: &TcpStream, mut bytes: &[u8], deadline: Instant) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.set_write_timeout(Some(left(deadline)?))?;
        match stream.write(bytes) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An answer's head as far as the exchange needs it.
struct AnswerHead {
    status: u16,
    reusable: bool,
    body_len: Option<usize>,
    /// Its bytes, the empty line included.
    len: usize,
}

/// Reads the final answer's head (interim 1xx ones are read and passed over, RFC 9110
/// section 15.2), and its body when it has a length within [`ANSWER_BODY_MAX`].
fn read_answer(stream: &mut &TcpStream, deadline: Instant) -> Result<Answer, Failure> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 4096];
    let mut answered = false;
    let head = loop {
        match parse_head(&buf)? {
            Some(head) if (100..200).contains(&head.status) => {
                buf.drain(..head.len);
                continue;
            }
            Some(head) => break head,
            None if buf.len() >= ANSWER_HEAD_MAX => {
                return Err(in_answer("an answer head too long"))
            }
            None => {}
        }
        let n = read_some(stream, &mut chunk, deadline).map_err(|e| match answered {
            false => Failure::BeforeAnswer(e),
            true => Failure::InAnswer(e),
        })?;
        answered = true;
        buf.extend_from_slice(&chunk[..n]);
    };
    let Some(body_len) = head.body_len.filter(|_| head.reusable) else {
        return Ok(Answer {
            status: head.status,
            reusable: false,
        });
    };
    let already = buf.len() - head.len;
    let mut body_left = body_len.saturating_sub(already);
    while body_left > 0 {
        let n = read_some(stream, &mut chunk, deadline).map_err(Failure::InAnswer)?;
        body_left = body_left.saturating_sub(n);
    }
    Ok(Answer {
        status: head.status,
        reusable: already <= body_len,
    })
}

/// The head at the start of `buf`, `None` while it is incomplete. A head of more fields than
/// are parsed is still read for its status; its connection is not kept.
fn parse_head(buf: &[u8]) -> Result<Option<AnswerHead>, Failure> {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut fields);
    match response.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            let status = response.code.unwrap_or(0);
            let (reusable, body_len) = reuse_of(&response);
            // 1xx, 204 and 304 answers have no body, whatever they say (RFC 9112 section 6.3).
            let body_len = match status {
                100..=199 | 204 | 304 => Some(0),
                _ => body_len,
            };
            Ok(Some(AnswerHead {
                status,
                reusable,
                body_len,
                len,
            }))
        }
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                return Ok(None);
            };
            let status = status_of(buf).ok_or_else(|| in_answer("an answer without a status"))?;
            Ok(Some(AnswerHead {
                status,
                reusable: false,
                body_len: None,
                len: end + 4,
            }))
        }
        Err(e) => Err(in_answer(&format!("an answer that is not HTTP: {e}"))),
    }
}

/// The status of an HTTP/1.x status line: `HTTP/1.1 200 OK`.
fn status_of(line: &[u8]) -> Option<u16> {
    let digits = line.strip_prefix(b"HTTP/1.")?.get(2..5)?;
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// Whether the connection may serve another request after this answer, and the body's
/// length when it is told by `Content-Length` (and short enough to read and throw away).
fn reuse_of(response: &httparse::Response<'_, '_>) -> (bool, Option<usize>) {
    let mut reusable = response.version == Some(1);
    let mut body_len = None;
    for field in response.headers.iter() {
        if field.name.eq_ignore_ascii_case("content-length") {
            let length = std::str::from_utf8(field.value)
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok());
            match (body_len, length) {
                (None, Some(n)) if n <= ANSWER_BODY_MAX => body_len = Some(n),
                _ => reusable = false,
            }
        } else if field.name.eq_ignore_ascii_case("transfer-encoding")
            || (field.name.eq_ignore_ascii_case("connection")
                && field.value.eq_ignore_ascii_case(b"close"))
        {
            reusable = false;
        }
    }
    (reusable && body_len.is_some(), body_len)
}

/// One read within what is left of the deadline; the end of the stream is an error here.
fn read_some(stream: &mut &TcpStream, into: &mut [u8], deadline: Instant) -> io::Result<usize> {
    stream.set_read_timeout(Some(left(deadline)?))?;
    match stream.read(into)? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the collector closed the connection",
        )),
        n => Ok(n),
    }
}

fn in_answer(what: &str) -> Failure {
    Failure::InAnswer(io::Error::other(what.to_string()))
}

/// The time left until `deadline`, an error once it passed (a zero timeout means none).
fn left(deadline: Instant) -> io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(io::ErrorKind::TimedOut.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::mpsc;

    /// A collector on 127.0.0.1 that answers each request it reads with the next of
    /// `answers`, closing after those marked so; sends back, per connection accepted, how
    /// many requests it read there.
    /// `n` batches of `body` posted over one link to a collector giving `answers`: the status
    /// of each (0 for a failure), and the collector's count of requests per connection (the
    /// link is closed first, so that its last connection's count comes).
    fn posted(
        answers: Vec<(&'static str, bool)>,
        n: usize,
        body: [&[u8]; 2],
    ) -> (Vec<u16>, mpsc::Receiver<usize>) {
        let (collector, served) = collector(answers);
        let mut link = CollectorLink::default();
        let statuses = (0..n)
            .map(|_| link.post(&collector, body).unwrap_or(0))
            .collect();
        drop(link);
        (statuses, served)
    }

    fn collector(answers: Vec<(&'static str, bool)>) -> (Collector, mpsc::Receiver<usize>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let authority = listener.local_addr().expect("address").to_string();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut answers = answers.into_iter();
            while let Ok((mut stream, _)) = listener.accept() {
                let mut served = 0;
                loop {
                    if read_request(&mut stream).is_none() {
                        break;
                    }
                    served += 1;
                    let Some((answer, close)) = answers.next() else {
                        break;
                    };
                    let _ = stream.write_all(answer.as_bytes());
                    if close {
                        break;
                    }
                }
                let _ = tx.send(served);
            }
        });
        let collector = Collector::parse(&format!("http://{authority}")).expect("url");
        (collector, rx)
    }

    /// Reads one request with a Content-Length body; `None` at the end of the stream.
    fn read_request(stream: &mut TcpStream) -> Option<()> {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            (stream.read(&mut byte).ok()? == 1).then_some(())?;
            buf.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        let length: usize = head
            .split("content-length: ")
            .nth(1)?
            .split("\r\n")
            .next()?
            .parse()
            .ok()?;
        let mut body = vec![0u8; length];
        stream.read_exact(&mut body).ok()
    }

    const OK: &str = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

    #[test]
    fn batches_share_one_connection_while_the_answers_allow_it() {
        let answers = vec![
            (OK, false),
            (OK, false),
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                false,
            ),
            (
                "HTTP/1.1 503 Busy\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                false,
            ),
            (OK, false),
        ];
        let (statuses, served) = posted(answers, 5, [b"ab", b"cd"]);
        assert_eq!(statuses, [200, 200, 200, 503, 200]);
        // Three on the first connection (its third answer said close), the chunked answer
        // alone on the second, the last on a third.
        let per_connection: Vec<usize> = served.iter().take(3).collect();
        assert_eq!(per_connection, [3, 1, 1]);
    }

    #[test]
    fn a_connection_the_collector_closed_is_replaced() {
        // Each answer closes its connection without saying so, as the test collectors do.
        let (collector, served) = collector(vec![(OK, true), (OK, true), (OK, true)]);
        let mut link = CollectorLink::default();
        for _ in 0..3 {
            assert_eq!(link.post(&collector, [b"", b"x"]).ok(), Some(200));
            // The close has reached this side before the next batch (as between batches).
            std::thread::sleep(Duration::from_millis(50));
        }
        let per_connection: Vec<usize> = served.iter().take(3).collect();
        assert_eq!(per_connection, [1, 1, 1]);
    }

    #[test]
    fn interim_answers_bodiless_statuses_and_long_heads() {
        let many_fields: &'static str = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\n{}Content-Length: 0\r\n\r\n",
                "X-F: 1\r\n".repeat(70)
            )
            .into_boxed_str(),
        );
        let answers = vec![
            (
                "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
                false,
            ),
            // A 204 that names a length has no body all the same: not waited for.
            (
                "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n",
                false,
            ),
            (many_fields, false),
            (OK, false),
        ];
        let (statuses, served) = posted(answers, 4, [b"", b"x"]);
        // A 204's phantom body waited for would end in the deadline's error: 0 here.
        assert_eq!(statuses, [200, 204, 200, 200]);
        // The first three on one connection; the head of 70 fields ends it.
        let per_connection: Vec<usize> = served.iter().take(2).collect();
        assert_eq!(per_connection, [3, 1]);
    }

    #[test]
    fn answers_that_end_the_connection() {
        let parse = |raw: &[u8]| {
            let mut fields = [httparse::EMPTY_HEADER; 8];
            let mut response = httparse::Response::new(&mut fields);
            let _ = response.parse(raw);
            reuse_of(&response)
        };
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"),
            (true, Some(5))
        );
        assert!(!parse(b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n").0);
        assert!(!parse(b"HTTP/1.1 200 OK\r\n\r\n").0);
        assert!(!parse(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n").0);
        assert!(!parse(b"HTTP/1.1 200 OK\r\nContent-Length: 999999\r\n\r\n").0);
        assert!(!parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: Close\r\n\r\n").0);
    }
}
