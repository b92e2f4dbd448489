//! The request for servers has two forms, written by one writer (rewrite.rs,
//! `write_request_head`) that decides what the server gets: HTTP/1.1 text, which the HTTP/1.1
//! server side sends as it is, and a message (request_message.rs) for the server sides of
//! other protocols. [`HeadWriter`] is what the writer says each through.

/// Where the head for servers goes, field by field: as HTTP/1.1 text (`Vec<u8>`) or as a
/// `RequestMessage` (request_message.rs: HTTP/2's, no HTTP/1.1 text made or parsed). The
/// writer decides what the server gets; each form only says it.
pub trait HeadWriter {
    /// Begins a new head: the request line's method and target (origin form, in pieces).
    fn request_line(&mut self, method: &[u8], target: [&[u8]; 3]);
    /// One field.
    fn field(&mut self, name: &[u8], value: &[u8]);
    /// One field whose value comes in pieces, joined as they are.
    fn field_joined(&mut self, name: &[u8], value: [&[u8]; 3]);
    /// The head is whole.
    fn end(&mut self);
}

/// HTTP/1.1 text: the request line, `name: value` lines and the empty line.
impl HeadWriter for Vec<u8> {
    #[inline]
    fn request_line(&mut self, method: &[u8], target: [&[u8]; 3]) {
        self.clear();
        self.extend_from_slice(method);
        self.push(b' ');
        self.extend_from_slice(target[0]);
        // An origin-form target comes whole: the other pieces are for rewritten paths.
        if !target[1].is_empty() || !target[2].is_empty() {
            self.extend_from_slice(target[1]);
            self.extend_from_slice(target[2]);
        }
        self.extend_from_slice(b" HTTP/1.1\r\n");
    }

    #[inline]
    fn field(&mut self, name: &[u8], value: &[u8]) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        self.extend_from_slice(value);
        self.extend_from_slice(b"\r\n");
    }

    fn field_joined(&mut self, name: &[u8], value: [&[u8]; 3]) {
        self.extend_from_slice(name);
        self.extend_from_slice(b": ");
        for piece in value {
            self.extend_from_slice(piece);
        }
        self.extend_from_slice(b"\r\n");
    }

    #[inline]
    fn end(&mut self) {
        self.extend_from_slice(b"\r\n");
    }
}
