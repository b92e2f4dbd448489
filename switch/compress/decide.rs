//! Whether one response is compressed, from its head (design.md, "Compression"): a final
//! answer with content (not `204`, `206` nor `304`; HEAD was ruled out with the request), not
//! already encoded, of a listed type, not marked `no-transform`, and not known to be smaller
//! than `min_size`.

use super::{CompressConfig, Compression, Offer};
use crate::http::fields::{list_items, trim_ows, FieldRole};
use crate::http::{BodyFraming, ResponseHead};

impl Offer<'_> {
    /// How `head` (its spans index `raw`) is compressed, or `None` when it goes as it is.
    pub fn decide(&self, head: &ResponseHead, raw: &[u8]) -> Option<Compression> {
        let config = self.config;
        if head.status < 200 || matches!(head.status, 204 | 206 | 304) {
            return None;
        }
        match head.framing {
            BodyFraming::Empty => return None,
            BodyFraming::Length(n) if n < config.min_size.max(1) => return None,
            _ => {}
        }
        let mut typed = false;
        let mut add_vary = true;
        for field in &head.fields {
            let (name, value) = (field.name.get(raw), field.value.get(raw));
            match field.role {
                // A transfer coding other than chunked would reach the encoder undone.
                FieldRole::TransferEncoding => {
                    if list_items(value).any(|c| !c.eq_ignore_ascii_case(b"chunked")) {
                        return None;
                    }
                }
                FieldRole::Forward => {}
                _ => continue,
            }
            if name.eq_ignore_ascii_case(b"content-type") {
                typed = is_listed(config, value);
                if !typed {
                    return None;
                }
            } else if name.eq_ignore_ascii_case(b"content-encoding") {
                // Even empty: it would go on beside the switch's, one more coding to undo
                // for some clients.
                return None;
            } else if name.eq_ignore_ascii_case(b"cache-control") {
                if list_items(value).any(|d| d.eq_ignore_ascii_case(b"no-transform")) {
                    return None;
                }
            } else if name.eq_ignore_ascii_case(b"vary") {
                add_vary &= !list_items(value)
                    .any(|v| v == b"*" || v.eq_ignore_ascii_case(b"accept-encoding"));
            }
        }
        typed.then_some(Compression {
            coding: self.coding,
            add_vary,
        })
    }
}

/// Whether a `Content-Type` value's media type (its parameters left out) is listed.
fn is_listed(config: &CompressConfig, value: &[u8]) -> bool {
    let media = value.split(|&b| b == b';').next().unwrap_or_default();
    let media = trim_ows(media);
    config
        .types
        .iter()
        .any(|t| media.eq_ignore_ascii_case(t.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compress::{Coding, Levels};
    use crate::http::response::{parse_response, RequestKind};
    use crate::state::stats::ServiceStats;

    fn config() -> CompressConfig {
        CompressConfig {
            types: vec!["text/html".into(), "application/json".into()],
            min_size: 1024,
            algorithms: vec![Coding::Gzip],
            levels: Levels::default(),
        }
    }

    /// The decision on a response head written out in full.
    fn decide(head: &str) -> Option<Compression> {
        let config = config();
        let stats = ServiceStats::default();
        let memory = crate::buffering::BufferMemory::new(0);
        let offer = Offer {
            coding: Some(Coding::Gzip),
            config: &config,
            stats: &stats,
            memory: &memory,
        };
        let raw = head.as_bytes();
        let mut parsed = ResponseHead::default();
        let get = RequestKind {
            is_head: false,
            is_connect: false,
        };
        assert_eq!(parse_response(raw, get, &mut parsed), Ok(true), "{head}");
        offer.decide(&parsed, raw)
    }

    const GZIP: Option<Compression> = Some(Compression {
        coding: Some(Coding::Gzip),
        add_vary: true,
    });

    #[test]
    fn a_listed_type_at_or_above_min_size_is_compressed() {
        let ok = "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: 1024\r\n\r\n";
        assert_eq!(decide(ok), GZIP);
        let json = "HTTP/1.1 404 Not Found\r\ncontent-type: APPLICATION/JSON\r\nContent-Length: 5000\r\n\r\n";
        assert_eq!(decide(json), GZIP);
    }

    #[test]
    fn an_unknown_length_is_compressed_whatever_min_size() {
        let chunked =
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(decide(chunked), GZIP);
        let until_close = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n";
        assert_eq!(decide(until_close), GZIP);
    }

    #[test]
    fn small_untyped_unlisted_or_encoded_responses_go_as_they_are() {
        for head in [
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 1023\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/htmlx\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: identity\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: \r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nCache-Control: public, No-Transform\r\nContent-Length: 5000\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        ] {
            assert_eq!(decide(head), None, "{head}");
        }
    }

    #[test]
    fn no_content_statuses_and_partial_content_are_never_compressed() {
        for status in ["204 No Content", "206 Partial Content", "304 Not Modified"] {
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: 5000\r\n\r\n"
            );
            assert_eq!(decide(&head), None, "{head}");
        }
        let empty = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 0\r\n\r\n";
        assert_eq!(decide(empty), None);
    }

    #[test]
    fn vary_is_added_unless_the_server_already_varies_on_the_encoding() {
        let mut once = GZIP;
        if let Some(c) = once.as_mut() {
            c.add_vary = false;
        }
        let named = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: Cookie, accept-encoding\r\nContent-Length: 5000\r\n\r\n";
        assert_eq!(decide(named), once);
        let star =
            "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: *\r\nContent-Length: 5000\r\n\r\n";
        assert_eq!(decide(star), once);
        let other = "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nVary: Cookie\r\nContent-Length: 5000\r\n\r\n";
        assert_eq!(decide(other), GZIP);
    }
}
