//! `respond = { status, body, content_type }`: the switch answers by itself, as nginx's
//! `return 403 "forbidden"` and HAProxy's `http-request return` do.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Respond {
    pub status: u16,
    pub body: Box<[u8]>,
    /// `Content-Type`, when the answer has a body.
    pub content_type: Option<Box<str>>,
}

/// Statuses whose answers carry no body (RFC 9110 sections 15.3.5, 15.4.5).
pub fn has_no_content(status: u16) -> bool {
    matches!(status, 204 | 304)
}
