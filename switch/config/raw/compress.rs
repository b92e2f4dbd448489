//! `[virtual.NAME.compress]` as written (switch/compress/).

use super::super::error::ErrorSink;
use super::super::walk::{Scalar, Table};
use super::policy::read_string_list;
use toml::Spanned;

const COMPRESS_KEYS: &[&str] = &[
    "types",
    "min_size",
    "algorithms",
    "gzip_level",
    "br_level",
    "zstd_level",
];

pub(crate) struct RawCompress {
    pub types: Option<Spanned<Vec<Spanned<String>>>>,
    /// A number of bytes or a size string.
    pub min_size: Option<Spanned<Scalar>>,
    pub algorithms: Option<Spanned<Vec<Spanned<String>>>>,
    pub gzip_level: Option<Spanned<i64>>,
    pub br_level: Option<Spanned<i64>>,
    pub zstd_level: Option<Spanned<i64>>,
}

pub(crate) fn read_compress(t: &Table<'_, '_>, sink: &mut ErrorSink<'_>) -> RawCompress {
    t.check_keys(COMPRESS_KEYS, sink);
    let types = "a list of media types like [\"text/html\", \"application/json\"]";
    let algorithms = "a list like [\"zstd\", \"br\", \"gzip\"]";
    RawCompress {
        types: read_string_list(t, "types", types, sink),
        min_size: t.scalar("min_size", sink),
        algorithms: read_string_list(t, "algorithms", algorithms, sink),
        gzip_level: t.integer("gzip_level", sink),
        br_level: t.integer("br_level", sink),
        zstd_level: t.integer("zstd_level", sink),
    }
}
