//! Spans as an OTLP/HTTP request body: an `ExportTraceServiceRequest` in protobuf.
//!
//! Written by hand rather than with the `opentelemetry` and `opentelemetry-otlp` crates: the
//! switch needs one message shape (one resource, one scope, its spans with a few attributes),
//! which is some varints and length-delimited fields, while those crates bring an SDK, a
//! batch processor and an HTTP client stack (reqwest or tonic over hyper) of their own beside
//! the switch's, and build each span through their generic API. BENCHMARKS.md, "Tracing",
//! has the cost measured with this encoder.
//!
//! The field numbers are those of opentelemetry-proto (`opentelemetry/proto/...`):
//! - collector/trace/v1/trace_service.proto: `ExportTraceServiceRequest.resource_spans = 1`
//! - trace/v1/trace.proto: `ResourceSpans { resource = 1; scope_spans = 2 }`,
//!   `ScopeSpans { scope = 1; spans = 2 }`, `Span { trace_id = 1 (bytes); span_id = 2;
//!   parent_span_id = 4; name = 5; kind = 6 (enum, SERVER = 2); start_time_unix_nano = 7
//!   (fixed64); end_time_unix_nano = 8 (fixed64); attributes = 9; status = 15 }`,
//!   `Status { code = 3 (ERROR = 2) }`
//! - resource/v1/resource.proto: `Resource { attributes = 1 }`
//! - common/v1/common.proto: `KeyValue { key = 1; value = 2 }`, `AnyValue { string_value = 1;
//!   int_value = 3 (int64) }`, `InstrumentationScope { name = 1; version = 2 }`
//!
//! Attribute names follow OpenTelemetry's HTTP semantic conventions where one fits
//! (`http.request.method`, `http.response.status_code`, `network.protocol.version`), and are
//! `tcpvs.*` for what is the switch's own (service, pool, server, bytes sent).

use crate::trace::span::Span;
use std::net::SocketAddr;

/// Protobuf wire types (protobuf's encoding guide).
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;

/// `SPAN_KIND_SERVER`: the switch serving a client's request.
const SPAN_KIND_SERVER: u64 = 2;
/// `STATUS_CODE_ERROR`, for a 5xx answer (a server span's 4xx is the client's, not an error).
const STATUS_CODE_ERROR: u64 = 2;

/// The whole request body for `spans`, appended to `out`. A message's length comes before it,
/// so each level is written into a buffer of its own and copied into its parent: three copies
/// of a batch, and no allocation per span or per attribute.
pub fn export_request(out: &mut Vec<u8>, spans: &[Span]) {
    let mut resource_spans = Vec::new();
    let mut resource = Vec::new();
    key_value(&mut resource, 1, "service.name", Value::Text("tcpvs"));
    length_delimited(&mut resource_spans, 1, &resource);
    let mut scope_spans = Vec::with_capacity(spans.len() * 256);
    let mut scope = Vec::new();
    length_delimited(&mut scope, 1, b"tcpvs");
    length_delimited(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
    length_delimited(&mut scope_spans, 1, &scope);
    let (mut encoded, mut text) = (Vec::new(), Scratch::default());
    for span in spans {
        encoded.clear();
        span_message(&mut encoded, span, &mut text);
        length_delimited(&mut scope_spans, 2, &encoded);
    }
    length_delimited(&mut resource_spans, 2, &scope_spans);
    length_delimited(out, 1, &resource_spans);
}

/// What formatting a batch reuses: a span's name, and the last server's address as text
/// (`SocketAddr`'s `Display` costs more than the rest of a span; a batch has few servers).
#[derive(Default)]
struct Scratch {
    name: String,
    server: Option<(SocketAddr, String)>,
}

impl Scratch {
    fn server_text(&mut self, server: SocketAddr) -> &str {
        if self.server.as_ref().is_none_or(|(last, _)| *last != server) {
            self.server = Some((server, server.to_string()));
        }
        self.server.as_ref().map_or("", |(_, text)| text.as_str())
    }
}

/// One `Span` message; `text` is scratch for what is formatted.
fn span_message(out: &mut Vec<u8>, span: &Span, text: &mut Scratch) {
    length_delimited(out, 1, &span.trace_id);
    length_delimited(out, 2, &span.span_id);
    if let Some(parent) = &span.parent_span_id {
        length_delimited(out, 4, parent);
    }
    text.name.clear();
    span.write_name(&mut text.name);
    length_delimited(out, 5, text.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, SPAN_KIND_SERVER);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&span.start_unix_nanos.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&span.end_unix_nanos.to_le_bytes());
    key_value(
        out,
        9,
        "http.request.method",
        Value::Text(span.method.as_str()),
    );
    key_value(
        out,
        9,
        "http.response.status_code",
        Value::Int(span.status.into()),
    );
    key_value(
        out,
        9,
        "network.protocol.version",
        Value::Text(span.protocol),
    );
    key_value(out, 9, "tcpvs.service", Value::Text(span.service_name()));
    if let Some(pool) = span.pool_name() {
        key_value(out, 9, "tcpvs.pool", Value::Text(pool));
    }
    if let Some(server) = span.server {
        key_value(
            out,
            9,
            "tcpvs.server",
            Value::Text(text.server_text(server)),
        );
    }
    let bytes = i64::try_from(span.response_bytes).unwrap_or(i64::MAX);
    key_value(out, 9, "tcpvs.response_bytes", Value::Int(bytes));
    if span.status >= 500 {
        let mut status = Vec::new();
        tag(&mut status, 3, VARINT);
        varint(&mut status, STATUS_CODE_ERROR);
        length_delimited(out, 15, &status);
    }
}

/// An attribute's value (`AnyValue`).
enum Value<'v> {
    Text(&'v str),
    Int(i64),
}

/// A `KeyValue` as field `field` of the message in `out`, its lengths counted beforehand
/// (every tag here is one byte: field numbers below 16).
#[inline]
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: Value<'_>) {
    let any_len = match value {
        Value::Text(text) => 1 + varint_len(text.len() as u64) + text.len(),
        // int64: two's complement as a 64-bit varint.
        Value::Int(n) => 1 + varint_len(n as u64),
    };
    let pair_len =
        1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any_len as u64) + any_len;
    tag(out, field, LENGTH_DELIMITED);
    varint(out, pair_len as u64);
    length_delimited(out, 1, key.as_bytes());
    tag(out, 2, LENGTH_DELIMITED);
    varint(out, any_len as u64);
    match value {
        Value::Text(text) => length_delimited(out, 1, text.as_bytes()),
        Value::Int(n) => {
            tag(out, 3, VARINT);
            varint(out, n as u64);
        }
    }
}

/// The bytes [`varint`] writes for `n`.
#[inline]
fn varint_len(n: u64) -> usize {
    (64 - (n | 1).leading_zeros() as usize).div_ceil(7)
}

#[inline]
fn length_delimited(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, LENGTH_DELIMITED);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[inline]
fn tag(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

/// Base-128, least significant group first, the high bit saying more follows.
#[inline]
fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_as_the_protobuf_guide_shows_them() {
        for (n, bytes) in [
            (0u64, &[0x00][..]),
            (1, &[0x01]),
            (150, &[0x96, 0x01]),
            (300, &[0xac, 0x02]),
            (
                u64::MAX,
                &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            ),
        ] {
            let mut out = Vec::new();
            varint(&mut out, n);
            assert_eq!(out, bytes, "{n}");
        }
    }

    #[test]
    fn a_tag_holds_field_and_wire_type() {
        // The guide's example: field 1, varint 150 is 08 96 01.
        let mut out = Vec::new();
        tag(&mut out, 1, VARINT);
        varint(&mut out, 150);
        assert_eq!(out, [0x08, 0x96, 0x01]);
        out.clear();
        tag(&mut out, 15, LENGTH_DELIMITED);
        assert_eq!(out, [0x7a]);
    }

    #[test]
    fn an_attribute_is_a_key_value_message() {
        let mut out = Vec::new();
        key_value(&mut out, 9, "k", Value::Text("v"));
        // 4a (field 9, bytes) len 8: [0a 01 'k'] [12 03 [0a 01 'v']]
        assert_eq!(
            out,
            [0x4a, 0x08, 0x0a, 0x01, b'k', 0x12, 0x03, 0x0a, 0x01, b'v']
        );
        out.clear();
        key_value(&mut out, 9, "k", Value::Int(200));
        assert_eq!(
            out,
            [0x4a, 0x08, 0x0a, 0x01, b'k', 0x12, 0x03, 0x18, 0xc8, 0x01]
        );
        out.clear();
        // A negative int64 is ten varint bytes.
        key_value(&mut out, 9, "k", Value::Int(-1));
        assert_eq!(out.len(), 2 + 3 + 2 + 1 + 10);
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for n in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            varint(&mut out, n);
            assert_eq!(varint_len(n), out.len(), "{n}");
        }
    }
}
