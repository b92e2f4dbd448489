//! The HTTP/1.1 framing both drivers of the prototype share, so that the A/B between them measures
//! how the kernel is entered and nothing else: a request head is parsed (httparse), forwarded with
//! its `Connection` and `Keep-Alive` headers dropped (the server connection stays kept-alive even
//! when the client's does not, as tcpvs and HAProxy's `http-reuse` keep it); a response head gives
//! the length of the body that follows.

/// What the client's bytes held.
pub enum Request {
    /// More bytes are needed.
    Partial,
    /// A whole request: `consumed` bytes of the input, written (rewritten) into the output.
    Complete { consumed: usize, close_after: bool },
    /// Not a request this prototype relays (a parse error, a chunked body, one too large).
    Refused,
}

/// Parses a request at the start of `input`; when whole, writes what goes to the server into `out`.
pub fn request(input: &[u8], out: &mut Vec<u8>) -> Request {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let head_len = match req.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Request::Partial,
        Err(_) => return Request::Refused,
    };
    let mut body_len = 0usize;
    let mut close_after = req.version == Some(0);
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            match std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
            {
                Some(n) => body_len = n,
                None => return Request::Refused,
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Request::Refused;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = h.value.to_ascii_lowercase();
            close_after = v.windows(5).any(|w| w == b"close");
        }
    }
    let consumed = head_len + body_len;
    if consumed > input.len() {
        return Request::Partial;
    }
    let (Some(method), Some(path)) = (req.method, req.path) else {
        return Request::Refused;
    };
    out.clear();
    out.extend_from_slice(method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for h in req.headers.iter() {
        if h.name.eq_ignore_ascii_case("connection") || h.name.eq_ignore_ascii_case("keep-alive") {
            continue;
        }
        out.extend_from_slice(h.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(h.value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&input[head_len..consumed]);
    Request::Complete {
        consumed,
        close_after,
    }
}

/// What the server's bytes held.
pub enum Response {
    Partial,
    /// The head ends at `head_len`; `body_len` bytes of body follow it; `reusable` is false when the
    /// server closes after it; `connection` is where the value of its `Connection` header lies.
    Head {
        head_len: usize,
        body_len: u64,
        reusable: bool,
        connection: Option<std::ops::Range<usize>>,
    },
    /// Not a response this prototype relays (a parse error, chunked or close-delimited bodies).
    Refused,
}

pub fn response(input: &[u8]) -> Response {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let head_len = match resp.parse(input) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Response::Partial,
        Err(_) => return Response::Refused,
    };
    let code = resp.code.unwrap_or(0);
    let mut body_len = None;
    let mut reusable = resp.version == Some(1);
    let mut connection = None;
    for h in resp.headers.iter() {
        if h.name.eq_ignore_ascii_case("content-length") {
            body_len = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok());
            if body_len.is_none() {
                return Response::Refused;
            }
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Response::Refused;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = h.value.to_ascii_lowercase();
            if v.windows(5).any(|w| w == b"close") {
                reusable = false;
            }
            // httparse's values are slices of the input.
            let start = h.value.as_ptr() as usize - input.as_ptr() as usize;
            connection = Some(start..start + h.value.len());
        }
    }
    let body_len = match (code, body_len) {
        (100..=199 | 204 | 304, _) => 0,
        (_, Some(n)) => n,
        (_, None) => return Response::Refused,
    };
    Response::Head {
        head_len,
        body_len,
        reusable,
        connection,
    }
}

/// Tells the client its connection closes after this answer, as tcpvs and HAProxy do when the
/// client asked for it (else the client sends its next request into a closed socket): the
/// server's `Connection` value (`keep-alive`, as nginx sends it) is overwritten in place with
/// `close` and spaces, which HTTP trims. An answer without the header is left as it is: every
/// answer of the benchmark's backend carries one.
pub fn mark_close(head: &mut [u8], connection: Option<std::ops::Range<usize>>) {
    let Some(range) = connection else { return };
    let Some(value) = head.get_mut(range) else {
        return;
    };
    if value.len() < 5 {
        return;
    }
    value.fill(b' ');
    value[..5].copy_from_slice(b"close");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_goes_to_the_server_without_its_connection_headers() {
        let input = b"GET /a?b HTTP/1.1\r\nHost: x\r\nConnection: close\r\nKeep-Alive: 5\r\nX: y\r\n\r\nGET /next";
        let mut out = Vec::new();
        let Request::Complete {
            consumed,
            close_after,
        } = request(input, &mut out)
        else {
            panic!("a whole request");
        };
        assert_eq!(consumed, input.len() - b"GET /next".len());
        assert!(close_after);
        assert_eq!(out, b"GET /a?b HTTP/1.1\r\nHost: x\r\nX: y\r\n\r\n");
    }

    #[test]
    fn a_body_is_waited_for_and_forwarded_and_chunked_bodies_are_refused() {
        let mut out = Vec::new();
        assert!(matches!(
            request(b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nab", &mut out),
            Request::Partial
        ));
        let Request::Complete {
            consumed,
            close_after,
        } = request(b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", &mut out)
        else {
            panic!("a whole request");
        };
        assert_eq!((consumed, close_after), (41, true));
        assert_eq!(out, b"POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
        assert!(matches!(
            request(
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
                &mut out
            ),
            Request::Refused
        ));
        assert!(matches!(
            request(b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", &mut out),
            Request::Refused
        ));
    }

    #[test]
    fn an_answer_gives_its_body_length_and_is_told_to_close_in_place() {
        let mut head =
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: keep-alive\r\n\r\n".to_vec();
        let Response::Head {
            head_len,
            body_len,
            reusable,
            connection,
        } = response(&head)
        else {
            panic!("a whole head");
        };
        assert_eq!((head_len, body_len, reusable), (head.len(), 100, true));
        mark_close(&mut head, connection);
        assert_eq!(
            head,
            b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close     \r\n\r\n"
        );
        let Response::Head { reusable, .. } = response(&head) else {
            panic!("still a head")
        };
        assert!(!reusable);
        assert!(matches!(
            response(b"HTTP/1.1 204 No Content\r\n\r\n"),
            Response::Head { body_len: 0, .. }
        ));
        assert!(matches!(
            response(b"HTTP/1.1 200 OK\r\n\r\n"),
            Response::Refused
        ));
        assert!(matches!(
            response(b"HTTP/1.1 200 OK\r\nContent-Le"),
            Response::Partial
        ));
    }
}
