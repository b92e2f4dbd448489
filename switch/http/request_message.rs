//! The request as a server gets it, in no protocol's wire form: method, target, authority and
//! fields, as HAProxy's HTX start line and header blocks or Pingora's `RequestHeader` carry
//! them. The one writer of the head for servers (rewrite.rs, `write_request_head`) fills it
//! for the server sides that speak something other than HTTP/1.1 (HTTP/2: upstream/h2/
//! request.rs), so that their request is made with no HTTP/1.1 text written and parsed
//! again; the HTTP/1.1 side gets the same writer's text, sent as it is.
//!
//! What belongs to one HTTP/1.1 connection stays out (RFC 9113 section 8.2.2: `Connection`,
//! `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, `TE`): a message's body
//! is framed by the protocol that carries it, and what the request asks of a hop (`te:
//! trailers`) the exchange reads from the client's head (exchange/attempt.rs, `Asks`). `Host`
//! becomes the authority.

use super::fields::{role_of, FieldRole, Span};
use super::head_writer::HeadWriter;

/// A request head for servers, over one buffer of its bytes.
#[derive(Debug, Default)]
pub struct RequestMessage {
    bytes: Vec<u8>,
    method: Span,
    /// Origin form (`/path?query`), or `*`, or an authority for CONNECT.
    target: Span,
    authority: Option<Span>,
    fields: Vec<(Span, Span)>,
}

impl RequestMessage {
    pub fn method(&self) -> &[u8] {
        self.method.get(&self.bytes)
    }

    pub fn target(&self) -> &[u8] {
        self.target.get(&self.bytes)
    }

    /// The request's authority (its `Host`), if it has one.
    pub fn authority(&self) -> Option<&[u8]> {
        self.authority.map(|span| span.get(&self.bytes))
    }

    /// Each field's name and value, in their order.
    pub fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.fields
            .iter()
            .map(|(name, value)| (name.get(&self.bytes), value.get(&self.bytes)))
    }

    /// The head's size as HTTP/1.1 text would carry it (request line, `Host` and field lines,
    /// the empty line), so that a request counts alike whatever protocol takes it to a server
    /// (the response side counts its head the same way: connection/h2/response.rs).
    pub fn http1_size(&self) -> usize {
        let line = self.method.range().len() + 1 + self.target.range().len() + 11;
        let host = self.authority.map_or(0, |a| 8 + a.range().len());
        let fields: usize = self
            .fields
            .iter()
            .map(|(name, value)| name.range().len() + value.range().len() + 4)
            .sum();
        line + host + fields + 2
    }

    /// Appends `pieces` to the buffer, as one span.
    fn put(&mut self, pieces: &[&[u8]]) -> Span {
        let start = self.bytes.len();
        for piece in pieces {
            self.bytes.extend_from_slice(piece);
        }
        Span {
            start: start as u32,
            end: self.bytes.len() as u32,
        }
    }
}

impl HeadWriter for RequestMessage {
    fn request_line(&mut self, method: &[u8], target: [&[u8]; 3]) {
        self.bytes.clear();
        self.fields.clear();
        self.authority = None;
        self.method = self.put(&[method]);
        self.target = self.put(&target);
    }

    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.field_joined(name, [value, b"", b""]);
    }

    fn field_joined(&mut self, name: &[u8], value: [&[u8]; 3]) {
        match role_of(name) {
            // One connection's own (the module's header says which): left out.
            FieldRole::Drop | FieldRole::Upgrade | FieldRole::TransferEncoding => return,
            FieldRole::Host => {
                // One authority: the writer sends one Host.
                let value = self.put(&value);
                self.authority.get_or_insert(value);
                return;
            }
            _ => {}
        }
        let name = self.put(&[name]);
        let value = self.put(&value);
        self.fields.push((name, value));
    }

    fn end(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::parse_request;
    use crate::http::rewrite::{write_request_head, RequestEdit, Scheme};
    use crate::http::RequestHead;

    fn both(raw: &[u8], scheme: Scheme) -> (Vec<u8>, RequestMessage) {
        let mut raw = raw.to_vec();
        let mut head = RequestHead::default();
        assert!(matches!(parse_request(&mut raw, &mut head), Ok(true)));
        let edit = RequestEdit::default();
        let mut text = Vec::new();
        write_request_head(&mut text, &head, &raw, b"10.0.0.9", b"dflt", scheme, edit);
        let mut message = RequestMessage::default();
        write_request_head(
            &mut message,
            &head,
            &raw,
            b"10.0.0.9",
            b"dflt",
            scheme,
            edit,
        );
        (text, message)
    }

    fn fields(message: &RequestMessage) -> Vec<(String, String)> {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        message
            .fields()
            .map(|(name, value)| (text(name), text(value)))
            .collect()
    }

    #[test]
    fn the_message_holds_what_the_text_says_but_the_connections_own() {
        let raw = b"POST http://api.example/upload?x=1 HTTP/1.1\r\nHost: api.example\r\n\
            Connection: keep-alive, X-Hop\r\nX-Hop: 1\r\nTransfer-Encoding: chunked\r\n\
            X-Forwarded-For: 10.0.0.1\r\nContent-Type: text/plain\r\nKeep-Alive: 5\r\n\
            TE: trailers\r\n\r\n";
        let (text, message) = both(raw, Scheme::Https);
        assert_eq!(
            String::from_utf8_lossy(&text),
            "POST /upload?x=1 HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\
             X-Forwarded-For: 10.0.0.1, 10.0.0.9\r\nContent-Type: text/plain\r\n\
             X-Forwarded-Proto: https\r\n\r\n"
        );
        assert_eq!(message.method(), b"POST");
        assert_eq!(message.target(), b"/upload?x=1");
        assert_eq!(message.authority(), Some(&b"api.example"[..]));
        let expected = [
            ("X-Forwarded-For", "10.0.0.1, 10.0.0.9"),
            ("Content-Type", "text/plain"),
            ("X-Forwarded-Proto", "https"),
        ];
        let expected: Vec<(String, String)> = expected
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        assert_eq!(fields(&message), expected);
        // Counted as the HTTP/1.1 text would be, less its connection's own field.
        assert_eq!(
            message.http1_size(),
            text.len() - "Transfer-Encoding: chunked\r\n".len()
        );
    }

    #[test]
    fn a_request_without_host_gets_the_default_and_one_written_again_starts_anew() {
        let (_, mut message) = both(b"GET / HTTP/1.0\r\n\r\n", Scheme::Http);
        assert_eq!(message.authority(), Some(&b"dflt"[..]));
        assert_eq!(
            fields(&message),
            [("X-Forwarded-For".to_string(), "10.0.0.9".to_string())]
        );
        let mut raw = b"GET /b HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: \r\n\r\n".to_vec();
        let mut head = RequestHead::default();
        assert!(matches!(parse_request(&mut raw, &mut head), Ok(true)));
        let edit = RequestEdit::default();
        write_request_head(&mut message, &head, &raw, b"::1", b"d", Scheme::Http, edit);
        assert_eq!(
            (message.target(), message.authority()),
            (&b"/b"[..], Some(&b"h"[..]))
        );
        // An empty X-Forwarded-For gets the client's address alone.
        assert_eq!(
            fields(&message),
            [("X-Forwarded-For".to_string(), "::1".to_string())]
        );
    }
}
