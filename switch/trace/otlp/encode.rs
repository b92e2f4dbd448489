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

use crate::trace::request::MethodName;
use crate::trace::span::Span;
use std::net::SocketAddr;

/// Protobuf wire types (protobuf's encoding guide).
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;

/// `SPAN_KIND_SERVER`: the switch serving a client's request.
const SPAN_KIND_SERVER: u64 = 2;

/// Encodes batches; what it keeps between them is only capacity (its buffers), never bytes.
#[derive(Default)]
pub struct Encoder {
    /// The heads of the messages around the batch's spans, written once their lengths are known.
    heads: Vec<u8>,
    /// The `ScopeSpans` message: the scope and the batch's spans.
    scope_spans: Vec<u8>,
    /// The encoded parts that repeat from span to span, for this batch.
    blocks: Blocks,
}

impl Encoder {
    /// The request body for `spans`, in two parts sent one after the other: the heads of the
    /// messages that hold the spans, then the scope and its spans. A message's length comes
    /// before it: each span's is counted beforehand ([`span_len`]) and the span written once,
    /// into the scope's buffer, whose length the heads then tell; the body is never copied
    /// whole to put those heads in front of it.
    pub fn export_request(&mut self, spans: &[Span]) -> [&[u8]; 2] {
        self.blocks.clear();
        let scope_spans = &mut self.scope_spans;
        scope_spans.clear();
        let mut scope = Vec::new();
        length_delimited(&mut scope, 1, b"tcpvs");
        length_delimited(&mut scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
        length_delimited(scope_spans, 1, &scope);
        for span in spans {
            let repeated = self.blocks.of(span);
            span_message(scope_spans, span, repeated);
        }
        let heads = &mut self.heads;
        heads.clear();
        let mut resource = Vec::new();
        key_value(&mut resource, 1, "service.name", Value::Text("tcpvs"));
        let resource_spans_len = field_len(resource.len()) + field_len(scope_spans.len());
        // ExportTraceServiceRequest.resource_spans > ResourceSpans.resource, .scope_spans
        tag(heads, 1, LENGTH_DELIMITED);
        varint(heads, resource_spans_len as u64);
        length_delimited(heads, 1, &resource);
        tag(heads, 2, LENGTH_DELIMITED);
        varint(heads, scope_spans.len() as u64);
        [heads, scope_spans]
    }
}

/// What a span shares with others of its batch, encoded once: its name and kind, and the
/// attributes that name its method, protocol, service, pool and server. Encoding them is most
/// of a span's cost (BENCHMARKS.md, "Tracing"), and a batch has few of them: a busy switch
/// sends hundreds of spans a batch through a handful of pools and servers.
#[derive(Default)]
struct Blocks {
    blocks: Vec<Block>,
    /// The block the last span used: the next one most often uses it too.
    last: usize,
    /// The slot the next new block takes once all are used.
    next_victim: usize,
}

/// The most blocks a batch keeps: a batch through more combinations encodes the rest anew
/// over the oldest slots, right but slower.
const BLOCKS_MAX: usize = 64;

struct Block {
    key: BlockKey,
    bytes: Vec<u8>,
}

/// What a block is made of. The names are told apart by the generation they are read from
/// (`Arc::as_ptr`): each span of the batch holds its generation, so no address is reused
/// while the batch is encoded, and the blocks are cleared before the next.
#[derive(PartialEq)]
struct BlockKey {
    names: *const (),
    service: usize,
    pool: Option<usize>,
    server: Option<SocketAddr>,
    protocol: &'static str,
    method: MethodName,
}

impl BlockKey {
    fn of(span: &Span) -> BlockKey {
        BlockKey {
            names: std::sync::Arc::as_ptr(&span.names).cast::<()>(),
            service: span.service,
            pool: span.pool,
            server: span.server,
            protocol: span.protocol,
            method: span.method,
        }
    }
}

impl Blocks {
    fn clear(&mut self) {
        self.blocks.clear();
        self.last = 0;
        self.next_victim = 0;
    }

    /// The encoded block for `span`'s shared parts, made now if the batch has none yet.
    fn of(&mut self, span: &Span) -> &[u8] {
        let key = BlockKey::of(span);
        let found = match self.blocks.get(self.last) {
            Some(block) if block.key == key => Some(self.last),
            _ => self.blocks.iter().position(|block| block.key == key),
        };
        let at = match found {
            Some(at) => at,
            None => {
                let mut bytes = Vec::with_capacity(192);
                shared_fields(&mut bytes, span);
                let block = Block { key, bytes };
                if self.blocks.len() < BLOCKS_MAX {
                    self.blocks.push(block);
                    self.blocks.len() - 1
                } else {
                    let at = self.next_victim;
                    self.next_victim = (at + 1) % BLOCKS_MAX;
                    self.blocks[at] = block;
                    at
                }
            }
        };
        self.last = at;
        &self.blocks[at].bytes
    }
}

/// The fields of a `Span` message that many spans share: name, kind and the attributes that
/// name where the request went.
fn shared_fields(out: &mut Vec<u8>, span: &Span) {
    let mut name = String::with_capacity(16);
    span.write_name(&mut name);
    length_delimited(out, 5, name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, SPAN_KIND_SERVER);
    key_value(
        out,
        9,
        "http.request.method",
        Value::Text(span.method.as_str()),
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
        key_value(out, 9, "tcpvs.server", Value::Text(&server.to_string()));
    }
}

const STATUS_CODE_KEY: &str = "http.response.status_code";
const RESPONSE_BYTES_KEY: &str = "tcpvs.response_bytes";
/// `Status { code = ERROR }` as span field 15: tag, length 2, then `code`'s tag and value.
const ERROR_STATUS: [u8; 4] = [15 << 3 | LENGTH_DELIMITED as u8, 2, 3 << 3, 2];

/// The bytes of `span`'s `Span` message, `repeated` being its shared fields.
fn span_len(span: &Span, repeated: &[u8]) -> usize {
    field_len(16)
        + field_len(8)
        + span.parent_span_id.map_or(0, |_| field_len(8))
        + 2 * (1 + 8)
        + repeated.len()
        + key_value_len(STATUS_CODE_KEY, &Value::Int(span.status.into()))
        + key_value_len(RESPONSE_BYTES_KEY, &Value::Int(response_bytes(span)))
        + if span.status >= 500 {
            ERROR_STATUS.len()
        } else {
            0
        }
}

/// An int64 attribute's value for the bytes sent.
fn response_bytes(span: &Span) -> i64 {
    i64::try_from(span.response_bytes).unwrap_or(i64::MAX)
}

/// One `Span` message as field 2 of `ScopeSpans`, its length counted beforehand; `repeated`
/// is its shared fields, encoded once a batch ([`Blocks`]). The span's own fields are put
/// together in two small arrays ([`Own`]) and appended with `repeated` between them: three
/// copies into `out` instead of a capacity check for every byte (callgrind: the export
/// thread's instructions a span went from 1 050 to 920 with this; BENCHMARKS.md "Tracing").
fn span_message(out: &mut Vec<u8>, span: &Span, repeated: &[u8]) {
    let len = span_len(span, repeated);
    let mut head = Own::default();
    head.byte(2 << 3 | LENGTH_DELIMITED as u8);
    head.varint(len as u64);
    let body = head.len;
    head.byte(1 << 3 | LENGTH_DELIMITED as u8);
    head.byte(16);
    head.put(&span.trace_id);
    head.byte(2 << 3 | LENGTH_DELIMITED as u8);
    head.byte(8);
    head.put(&span.span_id);
    if let Some(parent) = &span.parent_span_id {
        head.byte(4 << 3 | LENGTH_DELIMITED as u8);
        head.byte(8);
        head.put(parent);
    }
    head.byte(7 << 3 | FIXED64 as u8);
    head.put(&span.start_unix_nanos.to_le_bytes());
    head.byte(8 << 3 | FIXED64 as u8);
    head.put(&span.end_unix_nanos.to_le_bytes());
    let mut tail = Own::default();
    tail.int_attribute(STATUS_CODE_KEY, span.status.into());
    tail.int_attribute(RESPONSE_BYTES_KEY, response_bytes(span));
    if span.status >= 500 {
        tail.put(&ERROR_STATUS);
    }
    debug_assert_eq!(head.len - body + repeated.len() + tail.len, len);
    out.reserve(head.len + repeated.len() + tail.len);
    out.extend_from_slice(head.written());
    out.extend_from_slice(repeated);
    out.extend_from_slice(tail.written());
}

/// Room for a span's own fields on either side of its shared ones: at most 59 bytes before
/// (its tag and length, the ids and times) and 83 after (two int attributes with keys under
/// 30 bytes, the error status).
const OWN_MAX: usize = 96;

/// Bytes written into an array of [`OWN_MAX`]; writing past it panics (a bug: the sizes
/// above are fixed by the code, not by any input).
struct Own {
    bytes: [u8; OWN_MAX],
    len: usize,
}

impl Default for Own {
    fn default() -> Own {
        Own {
            bytes: [0; OWN_MAX],
            len: 0,
        }
    }
}

impl Own {
    fn written(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    #[inline(always)]
    fn byte(&mut self, byte: u8) {
        self.bytes[self.len] = byte;
        self.len += 1;
    }

    #[inline(always)]
    fn put(&mut self, bytes: &[u8]) {
        self.bytes[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }

    #[inline(always)]
    fn varint(&mut self, mut n: u64) {
        while n >= 0x80 {
            self.byte((n as u8 & 0x7f) | 0x80);
            n >>= 7;
        }
        self.byte(n as u8);
    }

    /// A `KeyValue` with an int64 value as span field 9 (what [`key_value`] writes).
    #[inline(always)]
    fn int_attribute(&mut self, key: &str, n: i64) {
        let (any_len, pair_len) = key_value_lens(key, &Value::Int(n));
        self.byte(9 << 3 | LENGTH_DELIMITED as u8);
        self.varint(pair_len as u64);
        self.byte(1 << 3 | LENGTH_DELIMITED as u8);
        self.varint(key.len() as u64);
        self.put(key.as_bytes());
        self.byte(2 << 3 | LENGTH_DELIMITED as u8);
        self.varint(any_len as u64);
        self.byte(3 << 3 | VARINT as u8);
        self.varint(n as u64);
    }
}

/// The bytes of a length-delimited field of `len` bytes with a one-byte tag.
#[inline]
fn field_len(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

/// An attribute's value (`AnyValue`).
enum Value<'v> {
    Text(&'v str),
    Int(i64),
}

/// The lengths of a `KeyValue`'s `AnyValue` and of the pair itself.
#[inline]
fn key_value_lens(key: &str, value: &Value<'_>) -> (usize, usize) {
    let any_len = match value {
        Value::Text(text) => field_len(text.len()),
        // int64: two's complement as a 64-bit varint.
        Value::Int(n) => 1 + varint_len(*n as u64),
    };
    (any_len, field_len(key.len()) + field_len(any_len))
}

/// The bytes [`key_value`] writes.
#[inline]
fn key_value_len(key: &str, value: &Value<'_>) -> usize {
    field_len(key_value_lens(key, value).1)
}

/// A `KeyValue` as field `field` of the message in `out`, its lengths counted beforehand
/// (every tag here is one byte: field numbers below 16).
#[inline]
fn key_value(out: &mut Vec<u8>, field: u32, key: &str, value: Value<'_>) {
    let (any_len, pair_len) = key_value_lens(key, &value);
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
    /// Names a service and pools `p0`, `p1`, ... after `tag`.
    #[derive(Debug)]
    struct Names(&'static str);

    impl crate::trace::span::SpanNames for Names {
        fn service_name(&self, service: usize) -> Option<&str> {
            (service == 0).then_some(self.0)
        }

        fn pool_name(&self, pool: usize) -> Option<&str> {
            ["p0", "p1", "p2"].get(pool).copied()
        }
    }

    /// The length-delimited fields numbered `number` of a message (what these tests read).
    fn bytes_fields(mut buf: &[u8], number: u64) -> Vec<&[u8]> {
        fn read_varint(buf: &mut &[u8]) -> u64 {
            let mut value = 0;
            for shift in (0..64).step_by(7) {
                let (&byte, rest) = buf.split_first().expect("a varint's byte");
                *buf = rest;
                value |= u64::from(byte & 0x7f) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            value
        }
        let mut found = Vec::new();
        while !buf.is_empty() {
            let tag = read_varint(&mut buf);
            match tag & 7 {
                VARINT_WIRE => {
                    read_varint(&mut buf);
                }
                FIXED64_WIRE => buf = &buf[8..],
                _ => {
                    let len = read_varint(&mut buf) as usize;
                    let (field, rest) = buf.split_at(len);
                    if tag >> 3 == number {
                        found.push(field);
                    }
                    buf = rest;
                }
            }
        }
        found
    }

    const VARINT_WIRE: u64 = VARINT as u64;
    const FIXED64_WIRE: u64 = FIXED64 as u64;

    /// A span's attributes as `key=value` text (an int's varint bytes in hex).
    fn attribute_text(span: &[u8]) -> Vec<String> {
        bytes_fields(span, 9)
            .into_iter()
            .map(|pair| {
                let key = String::from_utf8_lossy(bytes_fields(pair, 1)[0]).into_owned();
                let any = bytes_fields(pair, 2)[0];
                let value = match bytes_fields(any, 1).first() {
                    Some(text) => String::from_utf8_lossy(text).into_owned(),
                    None => any[1..].iter().map(|b| format!("{b:02x}")).collect(),
                };
                format!("{key}={value}")
            })
            .collect()
    }

    #[test]
    fn a_batch_of_many_servers_encodes_each_span_as_its_own() {
        let (one, two) = (
            std::sync::Arc::new(Names("front")),
            std::sync::Arc::new(Names("other")),
        );
        let spans: Vec<Span> = (0..300u16)
            .map(|i| Span {
                trace_id: [i as u8; 16],
                span_id: [(i >> 8) as u8 + 1; 8],
                parent_span_id: (i % 3 == 0).then_some([7; 8]),
                start_unix_nanos: u64::from(i),
                end_unix_nanos: u64::from(i) + 1,
                method: MethodName::new(if i % 5 == 0 { b"POST" } else { b"GET" }),
                status: if i % 7 == 0 { 503 } else { 200 },
                names: if i % 2 == 0 {
                    one.clone() as std::sync::Arc<dyn crate::trace::span::SpanNames>
                } else {
                    two.clone()
                },
                service: 0,
                pool: (i % 11 != 0).then_some(usize::from(i % 3)),
                // 100 servers: more than a batch keeps blocks for.
                server: (i % 13 != 0).then(|| SocketAddr::from(([127, 0, 0, 1], 8000 + i % 100))),
                response_bytes: u64::from(i) * 1000,
                protocol: if i % 4 == 0 { "2" } else { "1.1" },
            })
            .collect();
        let mut encoder = Encoder::default();
        // Twice with one encoder: the second batch starts from cleared blocks.
        for _ in 0..2 {
            let body = encoder.export_request(&spans).concat();
            let resource_spans = bytes_fields(&body, 1);
            assert_eq!(resource_spans.len(), 1);
            let scope_spans = bytes_fields(resource_spans[0], 2);
            let decoded = bytes_fields(scope_spans[0], 2);
            assert_eq!(decoded.len(), spans.len());
            for (span, bytes) in spans.iter().zip(decoded) {
                assert_eq!(bytes_fields(bytes, 1), [&span.trace_id[..]]);
                assert_eq!(bytes_fields(bytes, 2), [&span.span_id[..]]);
                let parent = span.parent_span_id.as_ref().map(|p| &p[..]);
                assert_eq!(bytes_fields(bytes, 4).first().copied(), parent);
                let name = format!("HTTP {}", span.method.as_str());
                assert_eq!(bytes_fields(bytes, 5), [name.as_bytes()]);
                let mut want = vec![
                    format!("http.request.method={}", span.method.as_str()),
                    format!("network.protocol.version={}", span.protocol),
                    format!("tcpvs.service={}", span.service_name()),
                ];
                if let Some(pool) = span.pool_name() {
                    want.push(format!("tcpvs.pool={pool}"));
                }
                if let Some(server) = span.server {
                    want.push(format!("tcpvs.server={server}"));
                }
                let mut int = Vec::new();
                varint(&mut int, span.status.into());
                want.push(format!("http.response.status_code={}", hexed(&int)));
                int.clear();
                varint(&mut int, span.response_bytes);
                want.push(format!("tcpvs.response_bytes={}", hexed(&int)));
                assert_eq!(attribute_text(bytes), want);
                let error = bytes_fields(bytes, 15);
                assert_eq!(error.len(), usize::from(span.status >= 500));
            }
        }
    }

    #[test]
    fn a_spans_own_int_attribute_is_what_key_value_writes() {
        for n in [0, 1, 200, 503, 1 << 40, i64::MAX, -1] {
            let (mut own, mut out) = (Own::default(), Vec::new());
            own.int_attribute(RESPONSE_BYTES_KEY, n);
            key_value(&mut out, 9, RESPONSE_BYTES_KEY, Value::Int(n));
            assert_eq!(own.written(), out, "{n}");
            assert_eq!(key_value_len(RESPONSE_BYTES_KEY, &Value::Int(n)), out.len());
        }
    }

    fn hexed(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }
}
