//! Listen addresses: parsed, and claimed once each across the services and the admin endpoint.

use super::error::{self, ErrorSink};
use std::net::SocketAddr;
use std::ops::Range;
use toml::Spanned;

/// Listen addresses claimed so far, to refuse two listeners on one address.
#[derive(Default)]
pub(super) struct ListenRegistry {
    claimed: Vec<(SocketAddr, String, usize)>,
}

impl ListenRegistry {
    pub(super) fn claim(
        &mut self,
        addr: SocketAddr,
        owner: &str,
        span: Range<usize>,
        text: &str,
        sink: &mut ErrorSink<'_>,
    ) {
        // Port 0 asks the kernel for a fresh port each time; two of them never collide.
        if addr.port() != 0 {
            if let Some((_, other, line)) = self.claimed.iter().find(|(a, _, _)| *a == addr) {
                sink.at(
                    span,
                    format!("listen address {addr} is already used by {other} (line {line})"),
                );
                return;
            }
        }
        let (line, _) = error::line_and_column(text, span.start);
        self.claimed.push((addr, owner.to_string(), line));
    }
}

pub(super) fn parse_listen(
    listen: &Spanned<String>,
    sink: &mut ErrorSink<'_>,
) -> Option<SocketAddr> {
    let text = listen.get_ref();
    match text.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            let why = match super::server_addr::port_above_65535(text) {
                // A name is no listen address either way: that is the message it needs.
                Some(port) if !text.starts_with(|c: char| c.is_ascii_alphabetic()) => {
                    format!("port {port} is out of range 0..=65535")
                }
                _ => "expected IP:PORT like \"127.0.0.1:8080\"".to_string(),
            };
            sink.at(
                listen.span(),
                format!("invalid listen address {text:?}: {why}"),
            );
            None
        }
    }
}
