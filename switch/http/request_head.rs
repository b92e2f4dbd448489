//! A parsed request head ([`parse_request`](super::request::parse_request) fills it): where its
//! parts lie in the connection's buffer, and the facts routing and relaying need.

use super::fields::{Field, Span, Version};
use super::BodyFraming;
use tcpvs_modules::HeaderLookup;

/// The form of the request target (RFC 9112 section 3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetForm {
    /// `/path?query`
    Origin,
    /// `http://authority/path?query`: sent on in origin form, Host taken from the authority.
    Absolute,
    /// `host:port`, for CONNECT only.
    Authority,
    /// `*`, for OPTIONS only.
    Asterisk,
}

/// A parsed request head. Spans point into the buffer given to [`parse_request`]; the field
/// vector keeps its capacity from request to request.
#[derive(Debug)]
pub struct RequestHead {
    /// Length of the head in the buffer, final empty line included.
    pub len: usize,
    pub method: Span,
    pub target: Span,
    pub target_form: TargetForm,
    /// Path part of the target (empty for absolute form without a path).
    pub path: Span,
    pub query: Option<Span>,
    /// Host without port: from the absolute-form target, else from the Host field.
    pub host: Option<Span>,
    /// Authority of an absolute-form target, which replaces the Host field when sent on.
    pub authority: Option<Span>,
    pub version: Version,
    pub fields: Vec<Field>,
    pub framing: BodyFraming,
    /// The client may send another request on this connection after this one.
    pub keep_alive: bool,
    /// Connection: upgrade with an Upgrade field.
    pub upgrade: bool,
    pub is_head: bool,
    pub is_connect: bool,
    /// Safe to send twice (RFC 9110 section 9.2.2).
    pub idempotent: bool,
}

impl Default for RequestHead {
    fn default() -> Self {
        RequestHead {
            len: 0,
            method: Span::default(),
            target: Span::default(),
            target_form: TargetForm::Origin,
            path: Span::default(),
            query: None,
            host: None,
            authority: None,
            version: Version::Http11,
            fields: Vec::new(),
            framing: BodyFraming::Empty,
            keep_alive: false,
            upgrade: false,
            is_head: false,
            is_connect: false,
            idempotent: false,
        }
    }
}

impl RequestHead {
    pub fn method<'b>(&self, buf: &'b [u8]) -> &'b str {
        // httparse admits only token bytes in a method, which are ASCII.
        std::str::from_utf8(self.method.get(buf)).unwrap_or("")
    }

    pub fn has_body(&self) -> bool {
        !matches!(self.framing, BodyFraming::Empty | BodyFraming::Length(0))
    }

    /// Safe to send again on a new connection if a reused one failed before any response:
    /// idempotent, and no body that may already be half consumed.
    pub fn retryable(&self) -> bool {
        self.idempotent && !self.has_body()
    }

    /// Header lookup over this head, for routing and modules.
    pub fn lookup<'a>(&'a self, buf: &'a [u8]) -> FieldLookup<'a> {
        FieldLookup {
            fields: &self.fields,
            buf,
        }
    }
}

/// [`HeaderLookup`] over a parsed head.
pub struct FieldLookup<'a> {
    fields: &'a [Field],
    buf: &'a [u8],
}

impl HeaderLookup for FieldLookup<'_> {
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.fields
            .iter()
            .find(|f| f.name.get(self.buf).eq_ignore_ascii_case(name.as_bytes()))
            .map(|f| f.value.get(self.buf))
    }
}
