//! When a head that arrives in pieces is worth parsing again.
//!
//! httparse parses from the first byte every time. Parsing after every read would let a peer
//! that sends a 64 KiB head a byte per segment cost about 64 K parses of up to 64 KiB each
//! (gigabytes scanned per connection within header_timeout). So after the first look, a head is
//! parsed again only when the bytes added since could end it (an empty line) or the size limit
//! is reached: each byte is scanned a bounded number of times.

use super::MAX_HEAD_BYTES;

#[derive(Debug, Default)]
pub struct HeadProgress {
    /// Bytes of the head looked at so far.
    seen: usize,
}

impl HeadProgress {
    /// `head`: the bytes received so far, from the head's first byte (it may have moved in the
    /// buffer; only its length matters).
    pub fn worth_parsing(&mut self, head: &[u8]) -> bool {
        let first_look = self.seen == 0;
        // An empty line may start up to two bytes before the new ones ("\n" + "\r\n").
        let from = self.seen.saturating_sub(2).min(head.len());
        self.seen = head.len();
        first_look || head.len() >= MAX_HEAD_BYTES || ends_a_head(&head[from..])
    }
}

/// Whether `bytes` hold the end of a head: an empty line, with CRLF or bare LF endings.
fn ends_a_head(bytes: &[u8]) -> bool {
    bytes
        .windows(2)
        .enumerate()
        .any(|(i, w)| w == b"\n\n" || (w == b"\n\r" && bytes.get(i + 2) == Some(&b'\n')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_first_then_only_when_a_head_may_have_ended() {
        let mut progress = HeadProgress::default();
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(progress.worth_parsing(&head[..3]), "the first look parses");
        for end in 4..head.len() - 1 {
            assert!(
                !progress.worth_parsing(&head[..end]),
                "no empty line in {end} bytes"
            );
        }
        assert!(progress.worth_parsing(head), "the empty line arrived");
    }

    #[test]
    fn an_empty_line_split_across_reads_is_seen() {
        let head = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
        for split in 17..head.len() {
            let mut progress = HeadProgress::default();
            progress.worth_parsing(&head[..1]);
            progress.worth_parsing(&head[..split]);
            let last = progress.worth_parsing(head);
            assert!(
                last || ends_a_head(&head[..split]),
                "split at {split}: the end must be seen in one of the looks"
            );
        }
        let mut progress = HeadProgress::default();
        progress.worth_parsing(b"GET / HTTP/1.1\n");
        assert!(
            progress.worth_parsing(b"GET / HTTP/1.1\n\n"),
            "bare LF endings"
        );
    }

    #[test]
    fn a_full_buffer_is_parsed_to_be_refused() {
        let mut progress = HeadProgress::default();
        progress.worth_parsing(b"GET / HTTP/1.1\r\n");
        assert!(progress.worth_parsing(&vec![b'a'; MAX_HEAD_BYTES]));
    }
}
