//! What tracing keeps of one request, from its head to its access-log line: its trace context
//! (`trace = "w3c"`), its id (`request_id = true`), when it started and its method (for the
//! span). Made once per request before it is routed, so every server a retry tries gets the
//! same `traceparent` and `X-Request-Id`, and the log line and the span tell the same ids.

use super::context::TraceContext;
use super::ids;
use super::request_id::RequestId;
use crate::http::fields::FieldRole;
use crate::http::RequestHead;
use std::time::SystemTime;

#[derive(Debug)]
pub struct RequestTrace {
    /// `None` unless `trace = "w3c"`.
    pub context: Option<TraceContext>,
    /// `None` unless `request_id = true`.
    pub request_id: Option<RequestId>,
    /// When the switch began the request (the span's start); the clock is read only when
    /// spans are exported (`UNIX_EPOCH` otherwise).
    pub started: SystemTime,
    /// The client's protocol version (`1.0`, `1.1`, `2`), as the span says it.
    pub protocol: &'static str,
    pub method: MethodName,
}

/// A request's method as a span names it: one of the methods of RFC 9110 and PATCH, else
/// `_OTHER`, as OpenTelemetry's HTTP conventions name them (so a span names a method without
/// holding the client's bytes, and no client can fill a trace store with methods of its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MethodName(&'static str);

impl MethodName {
    pub fn new(method: &[u8]) -> MethodName {
        MethodName(match method {
            b"GET" => "GET",
            b"HEAD" => "HEAD",
            b"POST" => "POST",
            b"PUT" => "PUT",
            b"DELETE" => "DELETE",
            b"CONNECT" => "CONNECT",
            b"OPTIONS" => "OPTIONS",
            b"TRACE" => "TRACE",
            b"PATCH" => "PATCH",
            _ => "_OTHER",
        })
    }

    pub fn as_str(&self) -> &'static str {
        self.0
    }
}

/// The fields of the client's head tracing reads, and how many of each it sent.
#[derive(Default)]
struct Given<'b> {
    traceparent: Option<&'b [u8]>,
    traceparents: usize,
    request_id: Option<&'b [u8]>,
    request_ids: usize,
}

impl RequestTrace {
    /// The trace of the request `head` (its bytes in `buf`) that came in `protocol`, with
    /// what is switched on.
    pub fn begin(
        (w3c, request_id, timed): (bool, bool, bool),
        (head, buf): (&RequestHead, &[u8]),
        protocol: &'static str,
    ) -> RequestTrace {
        let mut given = Given::default();
        // A field the client named in `Connection` is hop-by-hop: dropped, never an id.
        let fields = head.fields.iter().filter(|f| f.role != FieldRole::Drop);
        for field in fields {
            let name = field.name.get(buf);
            // By length first, as the head parser dispatches names.
            match name.len() {
                11 if name.eq_ignore_ascii_case(b"traceparent") => {
                    given.traceparents += 1;
                    given.traceparent = Some(field.value.get(buf));
                }
                12 if name.eq_ignore_ascii_case(b"x-request-id") => {
                    given.request_ids += 1;
                    given.request_id = Some(field.value.get(buf));
                }
                _ => {}
            }
        }
        let context =
            w3c.then(|| TraceContext::continue_or_start(given.traceparent, given.traceparents));
        let request_id =
            request_id.then(|| RequestId::keep_or_make(given.request_id, given.request_ids));
        RequestTrace {
            context,
            request_id,
            started: match timed {
                true => SystemTime::now(),
                false => SystemTime::UNIX_EPOCH,
            },
            protocol,
            method: MethodName::new(head.method.get(buf)),
        }
    }

    /// Whether the client's field `name` is left out of the server's head: the switch writes
    /// its own in its place ([`RequestTrace::for_each_field`]).
    /// A trace the switch started leaves the client's `tracestate` out too: it belongs to no
    /// trace the server will see (W3C trace context, section 3.3.1: without a valid
    /// `traceparent`, `tracestate` is discarded).
    #[inline]
    pub fn replaces(&self, name: &[u8]) -> bool {
        match name.len() {
            10 => {
                self.context
                    .as_ref()
                    .is_some_and(|c| c.parent_span_id.is_none())
                    && name.eq_ignore_ascii_case(b"tracestate")
            }
            11 => self.context.is_some() && name.eq_ignore_ascii_case(b"traceparent"),
            12 => self.request_id.is_some() && name.eq_ignore_ascii_case(b"x-request-id"),
            _ => false,
        }
    }

    /// The fields the server gets: `traceparent` with the switch's span, `X-Request-Id`; each
    /// but those `ruled` (a rule's `request_headers` sets or removes the name: the rule's
    /// word is the last, as for `X-Forwarded-For`).
    pub fn for_each_field(
        &self,
        ruled: impl Fn(&[u8]) -> bool,
        mut field: impl FnMut(&[u8], &[u8]),
    ) {
        if let Some(context) = self.context.as_ref().filter(|_| !ruled(b"traceparent")) {
            field(b"traceparent", &context.traceparent());
        }
        if let Some(id) = self.request_id.as_ref().filter(|_| !ruled(b"x-request-id")) {
            field(b"X-Request-Id", id.as_bytes());
        }
    }

    /// The trace id in hex, as the log and trace viewers show it.
    pub fn trace_id_hex(&self) -> Option<[u8; 32]> {
        let context = self.context.as_ref()?;
        let mut hex = [0u8; 32];
        ids::write_hex(&context.trace_id, &mut hex);
        Some(hex)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::request::parse_request;

    fn put_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        out.extend_from_slice(&[name, b": ", value, b"\r\n"].concat());
    }

    fn traced(raw: &[u8], w3c: bool, request_id: bool) -> (RequestTrace, Vec<u8>) {
        let mut head = RequestHead::default();
        let mut raw = raw.to_vec();
        let parsed = parse_request(&mut raw, &mut head);
        assert!(matches!(parsed, Ok(true)), "{parsed:?}");
        let trace = RequestTrace::begin((w3c, request_id, false), (&head, &raw), "1.1");
        let mut out = Vec::new();
        trace.for_each_field(|_| false, |name, value| put_line(&mut out, name, value));
        (trace, out)
    }

    #[test]
    fn the_fields_written_follow_what_is_on() {
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\nTraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\nX-Request-Id: r1\r\n\r\n";
        let (trace, out) = traced(raw, true, true);
        let text = String::from_utf8(out).unwrap_or_default();
        assert!(
            text.starts_with("traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-"),
            "{text}"
        );
        assert!(text.ends_with("-01\r\nX-Request-Id: r1\r\n"), "{text}");
        assert!(trace.replaces(b"TRACEPARENT") && trace.replaces(b"x-request-id"));
        assert!(!trace.replaces(b"tracestate"));
        assert_eq!(trace.method.as_str(), "GET");
        assert_eq!(MethodName::new(b"PROPFIND").as_str(), "_OTHER");

        let (trace, out) = traced(raw, false, true);
        assert_eq!(out, b"X-Request-Id: r1\r\n");
        assert!(!trace.replaces(b"traceparent"));
        assert_eq!(trace.trace_id_hex(), None);

        let (_, out) = traced(raw, true, false);
        assert!(!String::from_utf8_lossy(&out).contains("X-Request-Id"));
    }

    #[test]
    fn an_attackers_review_what_the_server_gets() {
        // A trace the switch starts drops the client's tracestate; one it continues keeps it.
        let bad = b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: junk\r\ntracestate: v=forged\r\n\r\n";
        assert!(traced(bad, true, false).0.replaces(b"tracestate"));
        let good = b"GET / HTTP/1.1\r\nHost: x\r\ntraceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff\r\n\r\n";
        let (trace, out) = traced(good, true, false);
        assert!(!trace.replaces(b"tracestate"));
        // Flags other than `sampled` are zeroed.
        assert!(
            String::from_utf8_lossy(&out).ends_with("-01\r\n"),
            "{out:?}"
        );
        // A field the client made hop-by-hop is no id.
        let hop =
            b"GET / HTTP/1.1\r\nHost: x\r\nConnection: X-Request-Id\r\nX-Request-Id: hop\r\n\r\n";
        let (_, out) = traced(hop, false, true);
        assert!(!String::from_utf8_lossy(&out).contains("hop"), "{out:?}");
        // A rule that sets or removes a field has the last word.
        let mut ruled = Vec::new();
        let only = |name: &[u8]| name == b"traceparent";
        trace.for_each_field(only, |name, value| put_line(&mut ruled, name, value));
        assert!(ruled.is_empty());
    }
}
