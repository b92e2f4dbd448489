//! The key of a request: which bucket of a limit a request counts in (the client's address,
//! a field's or a cookie's value, the host, the path), taken from the parsed head without an
//! allocation (the hot path's benchmark counts them), and the verdict over every value of the
//! key the request carries.

use super::{now_micros, Decision, LimitKey, Limiter};
use crate::http::host::{normal_host, HostScratch};
use crate::http::RequestHead;
use crate::policy::headers::same_name;
use std::net::IpAddr;
use tcpvs_modules::key::cookies_named;

/// A limit's key longer than this is held as its SHA-256 (in 65 bytes, a length no key held
/// as it is has): a path or a header value may be up to 64 KiB, and `max_keys` of those would
/// be gigabytes. A digest cannot collide by chance nor be made to collide with another client's
/// key (a second preimage), and every instance sharing a store names the key alike. A client
/// whose key is this long pays for the digest (about a microsecond per KiB).
const LONGEST_KEY: usize = 64;

impl Limiter {
    /// Counts the request `head` (in `buf`) of the client at `client` against this limit by
    /// its key; `normal_path` is its path in normal form when that differs (the path the rules
    /// saw, http/path.rs). A request without the key's field is not limited and counts as
    /// allowed (README, `[limit.NAME]`). A request that carries the key more than once (two
    /// `X-Api-Key` fields, an `X_Api_Key` beside it, two `session` cookies) is counted under
    /// each and refused if any is: servers differ on which one they read (the first, the last,
    /// `_` as `-`), so a junk value first cannot shield the real one.
    pub fn check_request(
        &self,
        (head, buf): (&RequestHead, &[u8]),
        normal_path: Option<&[u8]>,
        client: IpAddr,
    ) -> Decision {
        let now = now_micros();
        match &self.spec().key {
            LimitKey::Source => {
                let mut address = [0u8; 16];
                check_value(self, address_key(client, &mut address), now)
            }
            // `/api//login` is `/api/login`'s bucket.
            LimitKey::Path => check_value(self, normal_path.unwrap_or(head.path.get(buf)), now),
            // `SHOP.example.` is `shop.example`'s bucket.
            LimitKey::Host => check_each(self, head.host.map(|h| h.get(buf)), now, check_host),
            LimitKey::Header(name) => {
                let values = head
                    .fields
                    .iter()
                    .filter(|f| same_name(f.name.get(buf), name.as_bytes()))
                    .map(|f| f.value.get(buf));
                check_each(self, values, now, check_value)
            }
            LimitKey::Cookie(name) => {
                check_each(self, cookie_values(head, buf, name), now, check_value)
            }
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
        use super::super::{LimitSpec, Rate};
        use std::time::Duration;
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
        use std::time::Duration;
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
