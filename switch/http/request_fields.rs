//! What a request's header fields say (RFC 9112 sections 3.2, 6, 9.3): its framing, whether the
//! connection persists or upgrades, its Host; and the field checks that refuse a request a
//! server could read otherwise.

use super::fields::{
    fold_content_length, is_underscore_lookalike, list_items, read_connection,
    request_transfer_coding, CodingRefusal, Field, FieldRole, Span, Version,
};
use super::host::host_without_port;
use super::request_head::RequestHead;
use super::{BodyFraming, HeadError};

/// Reads framing, connection options and Host from the fields of `head` (parsed from `buf`).
pub(super) fn read_fields(buf: &[u8], head: &mut RequestHead) -> Result<(), HeadError> {
    let facts = FieldFacts::scan(buf, &head.fields)?;
    read_host(buf, head, &facts)?;

    let (connection, persistent) = read_connection(&mut head.fields, buf, head.version);
    head.keep_alive = persistent;
    // Only WebSocket, and only from HTTP/1.1 clients (a server must ignore Upgrade in an
    // HTTP/1.0 request, RFC 9110 section 7.8): an `h2c` upgrade would tunnel HTTP/2 straight
    // to one server, past per-request routing, which every request must meet (README,
    // "What tcpvs does with HTTP"). Any other Upgrade field is dropped and the request served
    // as it is, as nginx does.
    head.upgrade = connection.upgrade
        && facts.upgrade_fields > 0
        && facts.upgrade_to_websocket
        && head.version == Version::Http11
        && !head.is_connect;

    head.framing = body_framing(buf, head, &facts)?;
    Ok(())
}

/// What one pass over the fields found of framing, Host and Upgrade.
struct FieldFacts<'b> {
    content_length: Option<u64>,
    has_transfer_encoding: bool,
    host_fields: usize,
    /// The value of the last Host field.
    host_value: &'b [u8],
    upgrade_fields: usize,
    /// Every Upgrade field names WebSocket alone.
    upgrade_to_websocket: bool,
}

impl<'b> FieldFacts<'b> {
    /// Goes over `fields` once; refuses Content-Length values that disagree and look-alikes of
    /// the fields the switch reads or writes.
    fn scan(buf: &'b [u8], fields: &[Field]) -> Result<Self, HeadError> {
        let mut facts = FieldFacts {
            content_length: None,
            has_transfer_encoding: false,
            host_fields: 0,
            host_value: &[],
            upgrade_fields: 0,
            upgrade_to_websocket: true,
        };
        for field in fields {
            let value = field.value.get(buf);
            match field.role {
                FieldRole::ContentLength => fold_content_length(&mut facts.content_length, value)
                    .map_err(HeadError::bad_request)?,
                FieldRole::TransferEncoding => facts.has_transfer_encoding = true,
                FieldRole::Host => {
                    facts.host_fields += 1;
                    facts.host_value = value;
                }
                FieldRole::Upgrade => {
                    facts.upgrade_fields += 1;
                    facts.upgrade_to_websocket &= is_websocket_only(value);
                }
                FieldRole::Forward if is_underscore_lookalike(field.name.get(buf)) => {
                    return Err(HeadError::bad_request(
                        "field name with `_` in place of `-` of a framing or forwarding field",
                    ));
                }
                _ => {}
            }
        }
        Ok(facts)
    }
}

/// One Host field, required from HTTP/1.1 clients; it names the host unless an absolute-form
/// target already did.
fn read_host(buf: &[u8], head: &mut RequestHead, facts: &FieldFacts) -> Result<(), HeadError> {
    if facts.host_fields > 1 {
        return Err(HeadError::bad_request("more than one Host field"));
    }
    if facts.host_fields == 0 && head.version == Version::Http11 {
        return Err(HeadError::bad_request("HTTP/1.1 request without Host"));
    }
    if facts.host_fields == 1 {
        let host =
            host_without_port(facts.host_value).ok_or(HeadError::bad_request("invalid Host"))?;
        if head.host.is_none() && !host.is_empty() {
            head.host = Some(Span::of(buf, host));
        }
    }
    Ok(())
}

/// How the request's body is delimited, or why the request is refused.
fn body_framing(
    buf: &[u8],
    head: &RequestHead,
    facts: &FieldFacts,
) -> Result<BodyFraming, HeadError> {
    if head.is_connect && (facts.has_transfer_encoding || facts.content_length.is_some()) {
        // A CONNECT request has no content (RFC 9110 section 9.3.6): bytes sent after its
        // head would be read by a server that refused the tunnel as its next request.
        return Err(HeadError::bad_request("CONNECT with a body"));
    }
    if !facts.has_transfer_encoding {
        return Ok(match facts.content_length {
            Some(0) | None => BodyFraming::Empty,
            Some(n) => BodyFraming::Length(n),
        });
    }
    if head.version == Version::Http10 {
        return Err(HeadError::bad_request(
            "Transfer-Encoding in an HTTP/1.0 request",
        ));
    }
    if facts.content_length.is_some() {
        return Err(HeadError::bad_request(
            "both Content-Length and Transfer-Encoding",
        ));
    }
    let codings = head
        .fields
        .iter()
        .filter(|f| f.role == FieldRole::TransferEncoding)
        .map(|f| f.value.get(buf));
    match request_transfer_coding(codings) {
        Ok(()) => Ok(BodyFraming::Chunked),
        Err(CodingRefusal::Malformed(why)) => Err(HeadError::bad_request(why)),
        Err(CodingRefusal::Unsupported) => Err(HeadError {
            status: 501,
            reason: "transfer coding not implemented",
        }),
    }
}

/// Whether an Upgrade value names WebSocket and nothing else (`websocket`, any case).
fn is_websocket_only(value: &[u8]) -> bool {
    let mut protocols = list_items(value).peekable();
    protocols.peek().is_some() && protocols.all(|p| p.eq_ignore_ascii_case(b"websocket"))
}
