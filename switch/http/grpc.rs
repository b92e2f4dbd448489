//! gRPC as the switch sees it (design.md, "Servers over TLS and HTTP/2; gRPC end to end"):
//! a request is gRPC by its `content-type` (`application/grpc`, `application/grpc+proto`,
//! ...); it passes end to end over HTTP/2 like any request (te: trailers, trailers), and what
//! the switch answers such a request itself is said the gRPC way: `200` with no body and the
//! status in `grpc-status` and `grpc-message` ("Trailers-Only", one HEADERS frame), which a
//! gRPC client reads as the call's outcome, where an HTTP error status would read as a broken
//! protocol.

use super::status::Given;
use super::RequestHead;

/// Whether a request with this head is a gRPC call.
pub fn is_grpc((head, bytes): (&RequestHead, &[u8])) -> bool {
    head.fields.iter().any(|f| {
        f.name.get(bytes).eq_ignore_ascii_case(b"content-type") && is_grpc_type(f.value.get(bytes))
    })
}

/// The status in a `grpc-status` value: one to three ASCII digits, 0..=255 (gRPC's codes are
/// 0..=16); anything else is no status.
pub fn status_of(value: &[u8]) -> Option<u8> {
    if value.is_empty() || value.len() > 3 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// `application/grpc`, alone or with a `+codec` or parameters.
fn is_grpc_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+' | b';'))
}

/// The gRPC status for an answer of the switch with this HTTP status: the three design.md
/// fixes (no server: UNAVAILABLE, a rate limit: RESOURCE_EXHAUSTED, a timeout:
/// DEADLINE_EXCEEDED), the others as gRPC's own mapping of HTTP statuses has them.
pub fn status_for(http_status: u16) -> u8 {
    match http_status {
        429 | 413 => 8,        // RESOURCE_EXHAUSTED
        504 | 408 => 4,        // DEADLINE_EXCEEDED
        502 | 503 => 14,       // UNAVAILABLE
        401 => 16,             // UNAUTHENTICATED
        403 => 7,              // PERMISSION_DENIED
        404 | 405 | 501 => 12, // UNIMPLEMENTED
        _ => 13,               // INTERNAL
    }
}

/// The fields of a Trailers-Only answer, and the storage its values borrow.
pub struct GrpcAnswer {
    status: String,
    /// `grpc-message`, percent-encoded as gRPC says.
    message: Vec<u8>,
}

impl GrpcAnswer {
    /// The answer to a gRPC call that the switch answers with `http_status` for `why`.
    pub fn new(http_status: u16, why: &str) -> GrpcAnswer {
        let mut message = Vec::with_capacity(why.len());
        for &b in why.as_bytes() {
            if (b' '..=b'~').contains(&b) && b != b'%' {
                message.push(b);
            } else {
                message.extend_from_slice(format!("%{b:02X}").as_bytes());
            }
        }
        GrpcAnswer {
            status: status_for(http_status).to_string(),
            message,
        }
    }

    /// The answer's fields (with `fields` as their storage).
    pub fn given<'a>(&'a self, fields: &'a mut [(&'a [u8], &'a [u8]); 3]) -> Given<'a> {
        *fields = [
            (b"content-type", b"application/grpc"),
            (b"grpc-status", self.status.as_bytes()),
            (b"grpc-message", &self.message),
        ];
        Given {
            status: 200,
            fields,
            body: b"",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_types_are_told_from_their_neighbours() {
        assert!(is_grpc_type(b"application/grpc"));
        assert!(is_grpc_type(b"application/grpc+proto"));
        assert!(is_grpc_type(b"Application/GRPC; charset=utf-8"));
        assert!(!is_grpc_type(b"application/grpc-web"));
        assert!(!is_grpc_type(b"application/json"));
    }

    #[test]
    fn the_switchs_own_failures_have_the_statuses_design_md_fixes() {
        assert_eq!(status_for(503), 14);
        assert_eq!(status_for(502), 14);
        assert_eq!(status_for(429), 8);
        assert_eq!(status_for(504), 4);
    }

    #[test]
    fn a_status_is_one_to_three_digits() {
        assert_eq!(status_of(b"0"), Some(0));
        assert_eq!(status_of(b"14"), Some(14));
        for odd in [&b""[..], b"+0", b" 0", b"0 ", b"1000", b"256", b"x"] {
            assert_eq!(status_of(odd), None, "{odd:?}");
        }
    }

    #[test]
    fn the_message_is_percent_encoded() {
        let answer = GrpcAnswer::new(503, "no server: 100% busy\n");
        let mut fields = [(&b""[..], &b""[..]); 3];
        let given = answer.given(&mut fields);
        assert_eq!(given.status, 200);
        assert!(given.body.is_empty());
        assert_eq!(given.fields[1], (&b"grpc-status"[..], &b"14"[..]));
        assert_eq!(given.fields[2].1, b"no server: 100%25 busy%0A");
    }
}
