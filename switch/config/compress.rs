//! `[virtual.NAME.compress]` checked into the service's [`CompressConfig`]: every mistake
//! reported at its place, as the rest of the file's.

use super::error::ErrorSink;
use super::raw::RawCompress;
use crate::compress::{Coding, CompressConfig, Levels};
use toml::Spanned;

/// The service's compression, or `None` (with every error reported) when the table is wrong.
pub(super) fn build_compress(
    raw: &RawCompress,
    sink: &mut ErrorSink<'_>,
) -> Option<CompressConfig> {
    let types = match &raw.types {
        None => Some(
            CompressConfig::DEFAULT_TYPES
                .iter()
                .map(|&t| t.into())
                .collect(),
        ),
        Some(list) => build_types(list, sink),
    };
    let min_size = match &raw.min_size {
        None => Some(CompressConfig::DEFAULT_MIN_SIZE),
        given => super::size_of(given.as_ref(), "min_size", sink),
    };
    let algorithms = match &raw.algorithms {
        None => Some(CompressConfig::DEFAULT_ALGORITHMS.to_vec()),
        Some(list) => build_algorithms(list, sink),
    };
    let defaults = Levels::default();
    let gzip = level(&raw.gzip_level, "gzip_level", 1..=9, sink);
    // Past these, an encoder's memory grows to tens of MiB (compress/encoder.rs).
    let brotli = level(&raw.br_level, "br_level", 0..=4, sink);
    let zstd = level(&raw.zstd_level, "zstd_level", 1..=6, sink);
    Some(CompressConfig {
        types: types?,
        min_size: min_size?,
        algorithms: algorithms?,
        levels: Levels {
            gzip: gzip?.map_or(defaults.gzip, |l| l as u32),
            brotli: brotli?.map_or(defaults.brotli, |l| l as u32),
            zstd: zstd?.map_or(defaults.zstd, |l| l as i32),
        },
    })
}

/// `types`: media types (`type/subtype`, no parameters), compared without case.
fn build_types(
    list: &Spanned<Vec<Spanned<String>>>,
    sink: &mut ErrorSink<'_>,
) -> Option<Vec<Box<str>>> {
    if list.get_ref().is_empty() {
        sink.at(
            list.span(),
            "`types` is empty: list the media types to compress, like [\"text/html\"] (or \
             leave the key out for the usual text types)",
        );
        return None;
    }
    let mut ok = true;
    let mut types = Vec::with_capacity(list.get_ref().len());
    for entry in list.get_ref() {
        let text = entry.get_ref().trim();
        let token = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
        };
        match text.split_once('/') {
            Some((kind, sub)) if token(kind) && token(sub) => {
                types.push(text.to_ascii_lowercase().into())
            }
            _ => {
                sink.at(
                    entry.span(),
                    format!(
                        "`types`: \"{}\" is not a media type: write it as type/subtype, like \
                         \"text/html\", without parameters",
                        entry.get_ref()
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(types)
}

/// `algorithms`: the codings the switch applies, its preference first, each once.
fn build_algorithms(
    list: &Spanned<Vec<Spanned<String>>>,
    sink: &mut ErrorSink<'_>,
) -> Option<Vec<Coding>> {
    if list.get_ref().is_empty() {
        sink.at(
            list.span(),
            "`algorithms` is empty: list one or more of \"zstd\", \"br\", \"gzip\" (or remove \
             the [compress] table to compress nothing)",
        );
        return None;
    }
    let mut ok = true;
    let mut codings: Vec<Coding> = Vec::new();
    for entry in list.get_ref() {
        match Coding::from_token(entry.get_ref().as_bytes()) {
            Some(coding) if codings.contains(&coding) => {
                sink.at(
                    entry.span(),
                    format!("`algorithms`: \"{}\" is listed twice", entry.get_ref()),
                );
                ok = false;
            }
            Some(coding) => codings.push(coding),
            None => {
                sink.at(
                    entry.span(),
                    format!(
                        "`algorithms`: unknown coding \"{}\" (known: \"zstd\", \"br\", \"gzip\")",
                        entry.get_ref()
                    ),
                );
                ok = false;
            }
        }
    }
    ok.then_some(codings)
}

/// A level key in `range`; `Some(None)` when absent, `None` when wrong (reported).
fn level(
    raw: &Option<Spanned<i64>>,
    key: &str,
    range: std::ops::RangeInclusive<i64>,
    sink: &mut ErrorSink<'_>,
) -> Option<Option<i64>> {
    let Some(given) = raw else {
        return Some(None);
    };
    let n = *given.get_ref();
    if range.contains(&n) {
        return Some(Some(n));
    }
    sink.at(
        given.span(),
        format!(
            "{key} = {n} is out of range {}..={}",
            range.start(),
            range.end()
        ),
    );
    None
}
