//! `[limit.NAME]`: rate limits that rules name with `limit = "NAME"` (README, `[limit.NAME]`:
//! rate limits). Checked here; the buckets are policy/rate_limit/'s.

use super::error::ErrorSink;
use super::raw::RawLimit;
use crate::policy::rate_limit::{check_store_url, LimitKey, LimitSpec, Rate};
use toml::Spanned;

const DEFAULT_STATUS: u16 = 429;
const DEFAULT_MAX_KEYS: usize = 100_000;

/// Every limit of the file, in name order (rules name them by that index); `None` for one
/// with errors (reported, and the file refused).
pub(super) fn build_limits(
    raw: &[(Spanned<String>, RawLimit)],
    sink: &mut ErrorSink<'_>,
) -> Vec<Option<LimitSpec>> {
    raw.iter()
        .map(|(name, limit)| build_limit(name, limit, sink))
        .collect()
}

fn build_limit(
    name: &Spanned<String>,
    raw: &RawLimit,
    sink: &mut ErrorSink<'_>,
) -> Option<LimitSpec> {
    let limit_name = name.get_ref();
    if !super::valid_name(limit_name) {
        sink.at(name.span(), format!("invalid limit name `{limit_name}`"));
    }
    let key = build_key(raw, limit_name, sink);
    let rate = raw
        .rate
        .as_ref()
        .and_then(|r| match Rate::parse(r.get_ref()) {
            Ok(rate) => Some(rate),
            Err(why) => {
                sink.at(r.span(), why);
                None
            }
        });
    let burst = match &raw.burst {
        None => rate.as_ref().map(|r| r.count),
        Some(b) => match u32::try_from(*b.get_ref()) {
            Ok(n) if (1..=1_000_000).contains(&n) => Some(n),
            _ => {
                sink.at(
                    b.span(),
                    format!("burst = {} is out of range 1..=1000000", b.get_ref()),
                );
                None
            }
        },
    };
    let status = match &raw.status {
        None => Some(DEFAULT_STATUS),
        Some(s) => match u16::try_from(*s.get_ref()) {
            Ok(n) if (400..=599).contains(&n) => Some(n),
            _ => {
                sink.at(
                    s.span(),
                    format!(
                        "status = {} is out of range 400..=599 (a refusal: 429, 503, ...)",
                        s.get_ref()
                    ),
                );
                None
            }
        },
    };
    let max_keys = match &raw.max_keys {
        None => Some(DEFAULT_MAX_KEYS),
        Some(m) => match usize::try_from(*m.get_ref()) {
            Ok(n) if (1..=100_000_000).contains(&n) => Some(n),
            _ => {
                sink.at(
                    m.span(),
                    format!("max_keys = {} is out of range 1..=100000000", m.get_ref()),
                );
                None
            }
        },
    };
    let store = raw
        .store
        .as_ref()
        .and_then(|s| match check_store_url(s.get_ref()) {
            Ok(()) => Some(s.get_ref().clone()),
            Err(why) => {
                sink.at(s.span(), format!("store: {why}"));
                None
            }
        });
    if raw.store.is_some() && store.is_none() {
        return None;
    }
    Some(LimitSpec {
        name: limit_name.clone(),
        key: key?,
        rate: rate?,
        burst: burst?,
        status: status?,
        dry_run: raw.dry_run.unwrap_or(false),
        max_keys: max_keys?,
        store,
    })
}

/// `key`, with `header` or `cookie` where it needs one (and only there).
fn build_key(raw: &RawLimit, name: &str, sink: &mut ErrorSink<'_>) -> Option<LimitKey> {
    let Some(key) = &raw.key else {
        if raw.key.is_none() {
            sink.at(
                raw.span.clone(),
                format!(
                    "[limit.{name}] has no `key`: what requests are counted by: \"source\", \
                     \"header\", \"host\", \"path\" or \"cookie\""
                ),
            );
        }
        return None;
    };
    let needs = |field: &Option<Spanned<String>>, what: &str, sink: &mut ErrorSink<'_>| match field
    {
        Some(f)
            if !f.get_ref().is_empty()
                && f.get_ref().bytes().all(crate::http::fields::is_token_byte) =>
        {
            Some(f.get_ref().clone())
        }
        Some(f) => {
            sink.at(f.span(), format!("invalid {what} name {:?}", f.get_ref()));
            None
        }
        None => {
            sink.at(
                key.span(),
                format!(
                    "key = {:?} needs `{what}` beside it: the {what} to count by",
                    key.get_ref()
                ),
            );
            None
        }
    };
    let unused = |field: &Option<Spanned<String>>, what: &str, sink: &mut ErrorSink<'_>| {
        if let Some(f) = field {
            sink.at(
                f.span(),
                format!(
                    "`{what}` is read only with key = {what:?}: this limit counts by {:?}",
                    key.get_ref()
                ),
            );
        }
    };
    match key.get_ref().as_str() {
        "source" | "host" | "path" => {
            unused(&raw.header, "header", sink);
            unused(&raw.cookie, "cookie", sink);
            Some(match key.get_ref().as_str() {
                "source" => LimitKey::Source,
                "host" => LimitKey::Host,
                _ => LimitKey::Path,
            })
        }
        "header" => {
            unused(&raw.cookie, "cookie", sink);
            needs(&raw.header, "header", sink).map(LimitKey::Header)
        }
        "cookie" => {
            unused(&raw.header, "header", sink);
            needs(&raw.cookie, "cookie", sink).map(LimitKey::Cookie)
        }
        other => {
            sink.at(
                key.span(),
                format!(
                    "unknown key {other:?}: \"source\", \"header\", \"host\", \"path\" or \"cookie\""
                ),
            );
            None
        }
    }
}
