//! Compression of responses on their way to the client (`[virtual.NAME.compress]`), as nginx's
//! `gzip`, HAProxy's `compression` and Caddy's `encode` do: gzip, brotli and zstd, each by a
//! well-kept crate (flate2 on zlib-rs, brotli, zstd).
//!
//! Three steps, each its own file: the client's `Accept-Encoding` is read once per request,
//! while its head is still here ([`negotiate`]: which coding, if any); the response head says
//! whether this answer may be compressed ([`decide`]: type, size, status, codings, HEAD); then
//! the body goes through an [`encoder`] as it comes, part by part ([`body`]). The head writers
//! (http/rewrite.rs for HTTP/1, connection/h2/response.rs) apply what the decision says to the
//! fields: no `Content-Length`, `Content-Encoding`, `Vary: Accept-Encoding`, a weak `ETag`.
//!
//! A response that is not compressed pays one branch: the exchange carries no offer for a
//! service without the table, and the body of an answer not compressed moves as before
//! (spliced where it was). A compressed one moves part by part, through the encoder.

pub(crate) mod body;
pub(crate) mod decide;
pub(crate) mod encoder;
pub(crate) mod negotiate;

use crate::buffering::BufferMemory;
use crate::http::rewrite::Recoded;
use crate::http::{RequestHead, Version};
use crate::state::stats::ServiceStats;

/// A content coding the switch can apply (RFC 9110 section 8.4.1; brotli: RFC 7932, zstd: RFC
/// 8878).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    Gzip,
    Brotli,
    Zstd,
}

impl Coding {
    /// The coding's token, as `Accept-Encoding` and `Content-Encoding` write it.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Gzip => "gzip",
            Coding::Brotli => "br",
            Coding::Zstd => "zstd",
        }
    }

    /// The coding a token names (without case), if the switch has it.
    pub fn from_token(token: &[u8]) -> Option<Coding> {
        [Coding::Gzip, Coding::Brotli, Coding::Zstd]
            .into_iter()
            .find(|c| token.eq_ignore_ascii_case(c.token().as_bytes()))
    }
}

/// A service's `[virtual.NAME.compress]`, read and checked.
#[derive(Clone, Debug, PartialEq)]
pub struct CompressConfig {
    /// Media types compressed (`type/subtype`, lower case, without parameters).
    pub types: Vec<Box<str>>,
    /// A response whose length is known and below this is sent as it is.
    pub min_size: u64,
    /// The codings the switch applies, its preference first (ties of the client's q-values).
    pub algorithms: Vec<Coding>,
    /// Each coding's level: gzip 1..=9, brotli 0..=4, zstd 1..=6 (past those an encoder takes
    /// tens of MiB: encoder.rs).
    pub levels: Levels,
}

/// The level each coding compresses at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Levels {
    pub gzip: u32,
    pub brotli: u32,
    pub zstd: i32,
}

impl Default for Levels {
    /// gzip 2, brotli 2, zstd 3: the cheapest level of each at about the ratio of zlib's level
    /// 1, nginx's default (BENCHMARKS.md, 100 KiB of HTML). zlib-rs's level 1 is deflate's
    /// quick strategy (static codes): 0.83x the CPU of its level 2 but 30% more bytes; brotli's
    /// 4 costs 1.6x its 2 for 2% fewer bytes.
    fn default() -> Self {
        Levels {
            gzip: 2,
            brotli: 2,
            zstd: 3,
        }
    }
}

impl CompressConfig {
    /// The types compressed when the table names none: text, and the text-like formats of
    /// the web (design.md's example).
    pub const DEFAULT_TYPES: &'static [&'static str] = &[
        "text/html",
        "text/css",
        "text/plain",
        "text/javascript",
        "application/javascript",
        "application/json",
        "image/svg+xml",
    ];
    /// `min_size` when not given: below about a kilobyte the coding's own framing and the
    /// CPU cost more than the bytes saved (nginx's `gzip_min_length` is 20 by default, and its
    /// documentation advises more).
    pub const DEFAULT_MIN_SIZE: u64 = 1024;
    /// `algorithms` when not given: zstd, then brotli, then gzip.
    pub const DEFAULT_ALGORITHMS: &'static [Coding] = &[Coding::Zstd, Coding::Brotli, Coding::Gzip];
}

/// What a request may get, decided while its head was here: the coding the client takes best
/// (`None`: none, though its answer still varies with `Accept-Encoding`), the service's table
/// and its counters.
#[derive(Clone, Copy)]
pub(crate) struct Offer<'c> {
    pub coding: Option<Coding>,
    pub config: &'c CompressConfig,
    pub stats: &'c ServiceStats,
    /// The switch's `compress_memory`, which each encoder is charged to.
    pub memory: &'c BufferMemory,
}

impl<'c> Offer<'c> {
    /// What a request to a service with `config` may get: `None` without the table, or for a
    /// `HEAD` (no body to compress; design.md leaves its head as the server wrote it, as
    /// nginx does).
    pub(crate) fn of(
        (config, stats, memory): (
            Option<&'c CompressConfig>,
            &'c ServiceStats,
            &'c BufferMemory,
        ),
        (head, buf): (&RequestHead, &[u8]),
    ) -> Option<Offer<'c>> {
        let config = config?;
        if head.method.get(buf) == b"HEAD" {
            return None;
        }
        let fields = head
            .fields
            .iter()
            .filter(|f| f.name.get(buf).eq_ignore_ascii_case(b"accept-encoding"))
            .map(|f| f.value.get(buf));
        // An HTTP/1.0 request gets no coding, as from nginx (`gzip_http_version 1.1`) and
        // HAProxy: its answer would lose its length and the connection with it, and old
        // clients and caches may not decode (the answer still says it varies).
        let coding = match head.version {
            Version::Http10 => None,
            Version::Http11 => negotiate::negotiate(fields, &config.algorithms),
        };
        Some(Offer {
            coding,
            config,
            stats,
            memory,
        })
    }
}

/// A response the service compresses for clients that accept it, as its head is rewritten:
/// the coding this client gets (`None`: none it accepts, or no room in `compress_memory`),
/// and whether `Vary: Accept-Encoding` is added (not when the server's `Vary` already names it,
/// or is `*`). The answer varies with `Accept-Encoding` either way, so a cache must be told
/// even when this one goes as it is (nginx's `gzip_vary` does the same).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compression {
    pub coding: Option<Coding>,
    pub add_vary: bool,
}

impl Compression {
    /// What the head writers change for it; `None`: nothing.
    pub fn recoded(self) -> Option<Recoded> {
        let content_encoding = self.coding.map(Coding::token);
        (content_encoding.is_some() || self.add_vary).then_some(Recoded {
            content_encoding,
            add_vary: self.add_vary,
        })
    }

    /// The same response sent as it is.
    pub fn as_it_is(self) -> Compression {
        Compression {
            coding: None,
            ..self
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_name_each_coding_both_ways() {
        for coding in [Coding::Gzip, Coding::Brotli, Coding::Zstd] {
            assert_eq!(Coding::from_token(coding.token().as_bytes()), Some(coding));
        }
        assert_eq!(Coding::from_token(b"GZIP"), Some(Coding::Gzip));
        assert_eq!(Coding::from_token(b"deflate"), None);
        assert_eq!(Coding::from_token(b"x-gzip"), None);
    }
}
