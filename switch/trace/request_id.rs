//! `X-Request-Id`: one id per request that the client, the switch's log and the server share
//! (`[switch] request_id = true`), as nginx's `$request_id` and Heroku's router give it. The
//! client's is kept when it is sane, so a caller that already numbers its requests keeps its
//! numbers; one that is too long or holds anything but visible ASCII is replaced, since it
//! goes into log lines and other services' heads unescaped.

use super::ids;

/// The longest id kept from a client (nginx users' ids are 32 hex digits, UUIDs 36).
pub const MAX_LEN: usize = 128;

/// A request's id, held inline (no allocation per request).
#[derive(Clone, Copy)]
pub struct RequestId {
    bytes: [u8; MAX_LEN],
    len: u8,
}

impl std::fmt::Debug for RequestId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.as_bytes()))
    }
}

impl RequestId {
    /// The client's id when it is sane (1 to [`MAX_LEN`] visible ASCII bytes) and the only
    /// one it sent; else one made here, 16 random bytes in hex (nginx's `$request_id` form),
    /// new for every request. Not the trace id: the requests of one trace would share it, and
    /// a client would choose it by the `traceparent` it sends (RELIABILITY.md); the log names
    /// both, so a request is found from its trace all the same.
    pub fn keep_or_make(given: Option<&[u8]>, fields_seen: usize) -> RequestId {
        let sane = given
            .filter(|_| fields_seen == 1)
            .map(<[u8]>::trim_ascii)
            .filter(|id| !id.is_empty() && id.len() <= MAX_LEN)
            .filter(|id| id.iter().all(|b| b.is_ascii_graphic()));
        let mut bytes = [0u8; MAX_LEN];
        let len = match sane {
            Some(id) => {
                bytes[..id.len()].copy_from_slice(id);
                id.len()
            }
            None => {
                ids::write_hex(&ids::trace_id(), &mut bytes[..32]);
                32
            }
        };
        RequestId {
            bytes,
            len: len as u8,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sane_id_is_kept() {
        let id = RequestId::keep_or_make(Some(b"abc-123_XYZ"), 1);
        assert_eq!(id.as_bytes(), b"abc-123_XYZ");
        let longest = [b'a'; MAX_LEN];
        assert_eq!(
            RequestId::keep_or_make(Some(&longest), 1).as_bytes(),
            longest
        );
    }

    #[test]
    fn a_bad_id_is_replaced() {
        let too_long = [b'a'; MAX_LEN + 1];
        for given in [
            &b""[..],
            b"has space",
            b"tab\there",
            "é".as_bytes(),
            &too_long,
        ] {
            let id = RequestId::keep_or_make(Some(given), 1);
            assert_eq!(id.as_bytes().len(), 32, "{given:?}");
            assert!(id.as_bytes().iter().all(u8::is_ascii_hexdigit));
        }
        // Two ids: which one the client meant is unknown.
        let id = RequestId::keep_or_make(Some(b"first"), 2);
        assert_ne!(id.as_bytes(), b"first");
    }

    #[test]
    fn every_request_without_one_gets_a_new_id() {
        let first = RequestId::keep_or_make(None, 0);
        let second = RequestId::keep_or_make(None, 0);
        assert_ne!(first.as_bytes(), second.as_bytes());
        assert_eq!(first.as_bytes().len(), 32);
    }
}
