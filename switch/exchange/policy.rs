//! Policy: what the matched rule does before a server is picked (policy/ holds the rules'
//! actions, config/policy.rs reads them). A redirect or a `respond` answers here; a rate limit
//! counts the request and may refuse it; a path edit writes the path the server gets. What
//! goes on to the pool is the rule's [`Edits`], which the head writers apply on both sides.

use super::account::Outcome;
use super::client::ClientSide;
use super::{Buffers, Context};
use crate::http::fields::FieldRole;
use crate::http::host::{normal_host, HostScratch};
use crate::http::status::Answer;
use crate::http::RequestHead;
use crate::policy::headers::same_name;
use crate::policy::rate_limit::{now_micros, retry_after_seconds, Decision, LimitKey, Limiter};
use crate::policy::redirect::{Origin, Redirect};
use crate::policy::respond::Respond;
use crate::policy::{Action, Edits};
use crate::rules::Matched;
use crate::state::stats;
use std::net::IpAddr;
use std::time::Duration;
use tcpvs_modules::key::cookies_named;

/// What the rule leaves to the exchange.
pub(super) enum Step<'a> {
    /// On to the pool, with the rule's edits (the new path, if any, is in the buffers).
    Pool {
        pool: usize,
        edits: Option<&'a Edits>,
        /// A dry-run limit would have refused the request (named in the access log).
        would_limit: Option<usize>,
    },
    /// Answered by the switch.
    Answered(Outcome),
}

/// Applies the rule `matched` to the request `client` holds; `normal` is its path in normal
/// form when that differs (the path the rules saw, http/path.rs).
pub(super) async fn apply<'a, C: ClientSide>(
    cx: &Context<'a>,
    matched: Matched<'a>,
    normal: Option<&[u8]>,
    client: &mut C,
    work: &mut Buffers,
) -> Step<'a> {
    let (pool, edits) = match matched.action {
        Action::Pool { pool, edits } => (*pool, edits.as_deref()),
        Action::Redirect(redirect) => {
            let answered = answer_redirect(cx, matched, normal, redirect, client, work).await;
            return Step::Answered(answered);
        }
        Action::Respond(respond) => {
            return Step::Answered(answer_respond(cx, respond, client, work).await)
        }
    };
    let Some(edits) = edits else {
        return Step::Pool {
            pool,
            edits: None,
            would_limit: None,
        };
    };
    let mut would_limit = None;
    if let Some(index) = edits.limit {
        let limiter = &cx.generation.limits[index];
        match check_limit(cx, limiter, client.request(), normal) {
            Decision::Allowed => {}
            Decision::WouldLimit { .. } => would_limit = Some(index),
            Decision::Limited { retry_after } => {
                let mut outcome = refuse(cx, limiter, retry_after, client, work).await;
                outcome.pool = Some(pool);
                outcome.limited = Some(index);
                return Step::Answered(outcome);
            }
        }
    }
    if let Some(path_edit) = &edits.path {
        let (head, buf) = client.request();
        let path = normal.unwrap_or(head.path.get(buf));
        let captures = match (path_edit.uses_groups(), matched.path) {
            (true, Some(regex)) => regex.captures(path),
            _ => None,
        };
        path_edit.apply(path, captures.as_ref(), &mut work.policy_bytes);
    }
    Step::Pool {
        pool,
        edits: Some(edits),
        would_limit,
    }
}

/// A limit's key longer than this is held as its SHA-256 (in 65 bytes, a length no key held
/// as it is has): a path or a header value may be up to 64 KiB, and `max_keys` of those would
/// be gigabytes. A digest cannot collide by chance nor be made to collide with another client's
/// key (a second preimage), and every instance sharing a store names the key alike. A client
/// whose key is this long pays for the digest (about a microsecond per KiB).
const LONGEST_KEY: usize = 64;

/// Counts the request against `limiter` by its key. A request without the key's field is not
/// limited (design.md) and counts as allowed. A request that carries the key more than once
/// (two `X-Api-Key` fields, an `X_Api_Key` beside it, two `session` cookies) is counted under
/// each and refused if any is: servers differ on which one they read (the first, the last,
/// `_` as `-`), so a junk value first cannot shield the real one.
fn check_limit(
    cx: &Context<'_>,
    limiter: &Limiter,
    (head, buf): (&RequestHead, &[u8]),
    normal: Option<&[u8]>,
) -> Decision {
    let now = now_micros();
    match &limiter.spec().key {
        LimitKey::Source => {
            let mut address = [0u8; 16];
            check_value(limiter, address_key(cx.peer.ip(), &mut address), now)
        }
        // `/api//login` is `/api/login`'s bucket.
        LimitKey::Path => check_value(limiter, normal.unwrap_or(head.path.get(buf)), now),
        // `SHOP.example.` is `shop.example`'s bucket.
        LimitKey::Host => check_each(limiter, head.host.map(|h| h.get(buf)), now, check_host),
        LimitKey::Header(name) => {
            let values = head
                .fields
                .iter()
                .filter(|f| same_name(f.name.get(buf), name.as_bytes()))
                .map(|f| f.value.get(buf));
            check_each(limiter, values, now, check_value)
        }
        LimitKey::Cookie(name) => {
            check_each(limiter, cookie_values(head, buf, name), now, check_value)
        }
    }
}

/// The most values of its key one request may carry: servers differ on which they read, so
/// each distinct one is counted; past this many the request is refused as limited (a Cookie
/// field of 3000 crumbs would otherwise count 3000 times and churn the whole key table).
const MOST_KEY_VALUES: usize = 8;

/// The stricter verdict of the distinct keys in `keys`, each checked by `check`; none: not
/// limited. A value repeated counts once.
fn check_each<'k>(
    limiter: &Limiter,
    keys: impl IntoIterator<Item = &'k [u8]>,
    now: u64,
    check: fn(&Limiter, &[u8], u64) -> Decision,
) -> Decision {
    let mut distinct: [&[u8]; MOST_KEY_VALUES] = [&[]; MOST_KEY_VALUES];
    let mut count = 0;
    for key in keys {
        if distinct[..count].contains(&key) {
            continue;
        }
        if count == MOST_KEY_VALUES {
            return limiter.refuse_outright();
        }
        distinct[count] = key;
        count += 1;
    }
    let verdict = distinct[..count]
        .iter()
        .map(|key| check(limiter, key, now))
        .reduce(stricter);
    verdict.unwrap_or_else(|| {
        limiter.pass();
        Decision::Allowed
    })
}

/// One key's verdict; a key longer than [`LONGEST_KEY`] is held as its digest.
fn check_value(limiter: &Limiter, key: &[u8], now: u64) -> Decision {
    if key.len() <= LONGEST_KEY {
        return limiter.check(key, now);
    }
    // The digest in a key one byte longer than any key held as it is, so that no short key
    // can be made to equal it.
    let mut held = [0u8; LONGEST_KEY + 1];
    let digest = ring::digest::digest(&ring::digest::SHA256, key);
    held[..digest.as_ref().len()].copy_from_slice(digest.as_ref());
    limiter.check(&held, now)
}

/// The host as its key, in its normal form (http/host.rs): `Shop.Example.` is
/// `shop.example`'s bucket, as it is the same site to the server behind.
fn check_host(limiter: &Limiter, host: &[u8], now: u64) -> Decision {
    let mut scratch = HostScratch::default();
    check_value(limiter, normal_host(host, &mut scratch), now)
}

/// The value of every cookie `name` in every Cookie field (`a=1; a=2`), surrounding quotes
/// taken off as servers take them off.
fn cookie_values<'b>(
    head: &'b RequestHead,
    buf: &'b [u8],
    name: &'b str,
) -> impl Iterator<Item = &'b [u8]> + 'b {
    head.fields
        .iter()
        .filter(|f| f.name.get(buf).eq_ignore_ascii_case(b"cookie"))
        .flat_map(move |f| cookies_named(f.value.get(buf), name))
        .map(|value| match value {
            [b'"', inner @ .., b'"'] => inner,
            _ => value,
        })
}

/// The stricter of two verdicts: a refusal over a dry run's note over a pass; of two
/// refusals, the later retry.
fn stricter(a: Decision, b: Decision) -> Decision {
    use Decision::{Allowed, Limited, WouldLimit};
    match (a, b) {
        (Limited { retry_after: x }, Limited { retry_after: y }) => Limited {
            retry_after: x.max(y),
        },
        (Limited { .. }, _) => a,
        (_, Limited { .. }) => b,
        (WouldLimit { retry_after: x }, WouldLimit { retry_after: y }) => WouldLimit {
            retry_after: x.max(y),
        },
        (WouldLimit { .. }, _) => a,
        (_, WouldLimit { .. }) => b,
        (Allowed, Allowed) => Allowed,
    }
}

/// The client's address as a key: 4 bytes for IPv4 (mapped or not), 16 for IPv6.
fn address_key(ip: IpAddr, out: &mut [u8; 16]) -> &[u8] {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            out[..4].copy_from_slice(&v4.octets());
            &out[..4]
        }
        IpAddr::V6(v6) => {
            *out = v6.octets();
            &out[..]
        }
    }
}

/// The limit's refusal: its status with `Retry-After` (whole seconds, at least 1) and the
/// IETF RateLimit fields.
async fn refuse<C: ClientSide>(
    cx: &Context<'_>,
    limiter: &Limiter,
    retry_after: Duration,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    let spec = limiter.spec();
    let seconds = retry_after_seconds(retry_after);
    let mut seconds_text = itoa::Buffer::new();
    let seconds_text = seconds_text.format(seconds).as_bytes();
    let mut ratelimit = Vec::with_capacity(2);
    limiter.write_refusal_fields(&mut ratelimit, retry_after);
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b"Content-Type", b"text/plain"),
        (b"Retry-After", seconds_text),
    ];
    fields.extend(ratelimit.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())));
    work.policy_bytes.clear();
    crate::http::status::write_error_body(
        &mut work.policy_bytes,
        spec.status,
        "rate limit exceeded",
    );
    let answer = Answer {
        status: spec.status,
        fields: &fields,
        body: &work.policy_bytes,
    };
    client.release_head();
    let (bytes_out, keep_client) = client.answer(&mut work.out, &answer).await;
    stats::bump(&cx.service.stats.local_errors);
    Outcome::local(spec.status, bytes_out, keep_client, None)
}

async fn answer_redirect<C: ClientSide>(
    cx: &Context<'_>,
    matched: Matched<'_>,
    normal: Option<&[u8]>,
    redirect: &Redirect,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    {
        let (head, buf) = client.request();
        let path = normal.unwrap_or(head.path.get(buf));
        let authority = head.authority.or_else(|| {
            head.fields
                .iter()
                .find(|f| f.role == FieldRole::Host)
                .map(|f| f.value)
        });
        let origin = Origin {
            https: cx.service.tls.is_some(),
            authority: authority.map(|a| a.get(buf)),
            path,
            query: head.query.map(|q| q.get(buf)),
        };
        let captures = match (redirect.uses_groups(), matched.path) {
            (true, Some(regex)) => regex.captures(path),
            _ => None,
        };
        redirect.write_location(&origin, captures.as_ref(), &mut work.policy_bytes);
    }
    let fields: [(&[u8], &[u8]); 1] = [(b"Location", &work.policy_bytes)];
    let answer = Answer {
        status: redirect.code,
        fields: &fields,
        body: b"",
    };
    client.release_head();
    let (bytes_out, keep_client) = client.answer(&mut work.out, &answer).await;
    stats::bump(&cx.service.stats.redirects);
    Outcome::local(redirect.code, bytes_out, keep_client, None)
}

async fn answer_respond<C: ClientSide>(
    cx: &Context<'_>,
    respond: &Respond,
    client: &mut C,
    work: &mut Buffers,
) -> Outcome {
    let content_type = respond.content_type.as_deref().unwrap_or("");
    let fields: [(&[u8], &[u8]); 1] = [(b"Content-Type", content_type.as_bytes())];
    let answer = Answer {
        status: respond.status,
        fields: if content_type.is_empty() {
            &[]
        } else {
            &fields
        },
        body: &respond.body,
    };
    client.release_head();
    let (bytes_out, keep_client) = client.answer(&mut work.out, &answer).await;
    stats::bump(&cx.service.stats.responds);
    Outcome::local(respond.status, bytes_out, keep_client, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cookie_of_the_name_is_a_key() {
        let raw = b"GET / HTTP/1.1\r\nHost: x\r\nCookie: a=1; session=junk; b=2\r\ncookie: session=\"real\"; sessionx=no\r\n\r\n";
        let mut buf = raw.to_vec();
        let mut head = RequestHead::default();
        assert!(crate::http::parse_request(&mut buf, &mut head).unwrap());
        let values: Vec<&[u8]> = cookie_values(&head, &buf, "session").collect();
        assert_eq!(values, [&b"junk"[..], &b"real"[..]]);
        assert_eq!(cookie_values(&head, &buf, "none").count(), 0);
    }

    #[test]
    fn a_value_repeated_counts_once_and_too_many_are_refused() {
        use crate::policy::rate_limit::{LimitSpec, Rate};
        let limiter = Limiter::new(LimitSpec {
            name: "api".into(),
            key: LimitKey::Header("X-Api-Key".into()),
            rate: Rate {
                count: 1,
                per: Duration::from_secs(60),
            },
            burst: 5,
            status: 429,
            dry_run: false,
            max_keys: 100,
            store: None,
        });
        let now = 1_000_000;
        let dup: [&[u8]; 5] = [b"dup"; 5];
        assert_eq!(
            check_each(&limiter, dup, now, check_value),
            Decision::Allowed
        );
        assert_eq!(
            (limiter.allowed(), limiter.limited(), limiter.keys()),
            (1, 0, 1)
        );
        let many: Vec<Vec<u8>> = (0..9).map(|i| vec![b'k', i]).collect();
        let verdict = check_each(&limiter, many.iter().map(Vec::as_slice), now, check_value);
        assert!(matches!(verdict, Decision::Limited { .. }), "{verdict:?}");
        assert_eq!(
            (limiter.allowed(), limiter.limited(), limiter.keys()),
            (1, 1, 1)
        );
        let eight = many.iter().take(8).map(Vec::as_slice);
        assert_eq!(
            check_each(&limiter, eight, now, check_value),
            Decision::Allowed
        );
    }

    #[test]
    fn the_stricter_verdict_wins() {
        let limited = |s| Decision::Limited {
            retry_after: Duration::from_secs(s),
        };
        let would = Decision::WouldLimit {
            retry_after: Duration::from_secs(1),
        };
        assert_eq!(stricter(Decision::Allowed, limited(2)), limited(2));
        assert_eq!(stricter(limited(3), limited(2)), limited(3));
        assert_eq!(stricter(would, Decision::Allowed), would);
        assert_eq!(stricter(would, limited(1)), limited(1));
        assert_eq!(
            stricter(Decision::Allowed, Decision::Allowed),
            Decision::Allowed
        );
    }

    #[test]
    fn addresses_as_keys() {
        let mut buf = [0u8; 16];
        assert_eq!(
            address_key("10.0.0.1".parse().unwrap(), &mut buf),
            &[10, 0, 0, 1]
        );
        assert_eq!(
            address_key("::ffff:10.0.0.1".parse().unwrap(), &mut buf),
            &[10, 0, 0, 1]
        );
        assert_eq!(address_key("::1".parse().unwrap(), &mut buf).len(), 16);
    }
}
