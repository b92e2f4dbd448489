//! A message body as any protocol carries it: a sequence of [`BodyPart`]s, data then trailers
//! then the end (Pingora's `HttpTask`, HAProxy's HTX blocks). The two sides of an exchange
//! speak it to each other (exchange/server.rs); each protocol turns its own framing into it
//! and back (HTTP/1: relay/parts.rs; HTTP/2: connection/h2/).

use super::chunked::for_each_trailer;

/// One part of a message body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyPart<'b> {
    /// Body bytes.
    Data(&'b [u8]),
    /// The trailer section, which ends the body ([`BodyPart::End`] follows).
    Trailers(Trailers<'b>),
    /// The end of the body.
    End,
}

/// A trailer section as field lines (`name: value`, each ended by CRLF: the form HTTP/1.1's
/// chunked encoding carries them in), read with [`Trailers::for_each`], which leaves out the
/// fields that must not be trailers (`chunked::may_be_trailer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Trailers<'b>(pub &'b [u8]);

impl Trailers<'_> {
    /// Calls `field` with each name and value that may be a trailer.
    pub fn for_each(&self, field: impl FnMut(&[u8], &[u8])) {
        for_each_trailer(self.0, field);
    }
}
