//! The server name of a TLS ClientHello, read without decrypting anything, for
//! `mode = "tls-passthrough"`: the connection is routed by it, then its bytes (the hello
//! included) go to the server untouched.
//!
//! Why rustls' `Acceptor` and no parser of our own: it reassembles a hello split over records
//! and reads, and it is fuzzed with the rest of rustls. It is stricter than a server may be
//! (a hello without `signature_algorithms`, sent only by clients older than TLS 1.2, is
//! refused), which is the safe side for a switch that must not misread a hello.

use rustls::server::Acceptor;

/// What the bytes received so far say.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed.
    Incomplete,
    /// A complete ClientHello; the server name it asks for, lower case, if it names one.
    Complete { server_name: Option<Box<str>> },
    /// Not a TLS ClientHello (or a broken one).
    Invalid(String),
}

/// Reads a ClientHello from the bytes a connection sends, as they come.
#[derive(Default)]
pub struct HelloReader {
    acceptor: Acceptor,
    /// How many of the connection's bytes the acceptor has seen.
    fed: usize,
    done: bool,
}

impl HelloReader {
    /// `received` is everything the connection sent so far (a longer slice each call, the
    /// earlier bytes unchanged).
    pub fn offer(&mut self, received: &[u8]) -> Hello {
        if self.done {
            return Hello::Invalid("the hello was read already".into());
        }
        let Some(mut new) = received.get(self.fed..) else {
            return Hello::Invalid("bytes went missing".into());
        };
        // A record at a time: rustls holds at most one record's worth of unread input
        // (MAX_WIRE_SIZE) outside a handshake message it is joining, so everything at once
        // would refuse a large hello, or a hello with early data behind it, that fits.
        loop {
            if !new.is_empty() {
                match self.acceptor.read_tls(&mut new) {
                    // Bytes left that rustls takes no more of: no hello will come of them
                    // (and the loop must not spin on them).
                    Ok(0) => {
                        self.done = true;
                        return Hello::Invalid("bytes the hello reader takes no more of".into());
                    }
                    Ok(_) => {}
                    Err(e) => {
                        self.done = true;
                        return Hello::Invalid(e.to_string());
                    }
                }
            }
            self.fed = received.len() - new.len();
            match self.acceptor.accept() {
                Ok(None) if new.is_empty() => return Hello::Incomplete,
                Ok(None) => {}
                Ok(Some(accepted)) => {
                    self.done = true;
                    return Hello::Complete {
                        server_name: accepted.client_hello().server_name().map(Box::from),
                    };
                }
                Err((e, _alert)) => {
                    self.done = true;
                    return Hello::Invalid(e.to_string());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello as a real client makes it, for `name`.
    fn client_hello(name: &str) -> Vec<u8> {
        let roots = rustls::RootCertStore::empty();
        let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let server = rustls::pki_types::ServerName::try_from(name.to_string()).expect("name");
        let mut client =
            rustls::ClientConnection::new(std::sync::Arc::new(config), server).expect("client");
        let mut out = Vec::new();
        while client.wants_write() {
            client.write_tls(&mut out).expect("hello");
        }
        out
    }

    #[test]
    fn the_name_of_a_hello_in_one_piece() {
        let hello = client_hello("api.example.com");
        assert_eq!(
            HelloReader::default().offer(&hello),
            Hello::Complete {
                server_name: Some("api.example.com".into())
            }
        );
    }

    #[test]
    fn a_hello_byte_by_byte() {
        let hello = client_hello("Www.Example.COM");
        let mut reader = HelloReader::default();
        for end in 1..hello.len() {
            assert_eq!(reader.offer(&hello[..end]), Hello::Incomplete, "at {end}");
        }
        assert_eq!(
            reader.offer(&hello),
            Hello::Complete {
                server_name: Some("www.example.com".into())
            }
        );
    }

    #[test]
    fn a_hello_with_early_records_behind_it_is_read_one_record_at_a_time() {
        let mut bytes = client_hello("api.example.com");
        // Two 12 KiB records after the hello (0-RTT data would look so): more than rustls
        // takes unread at once.
        for _ in 0..2 {
            bytes.extend_from_slice(&[0x17, 0x03, 0x03, 0x30, 0x00]);
            bytes.extend(std::iter::repeat_n(0u8, 0x3000));
        }
        assert_eq!(
            HelloReader::default().offer(&bytes),
            Hello::Complete {
                server_name: Some("api.example.com".into())
            }
        );
    }

    #[test]
    fn plain_http_is_no_hello() {
        let verdict = HelloReader::default().offer(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert!(matches!(verdict, Hello::Invalid(_)), "{verdict:?}");
    }
}
