//! A limit's refusal as the client gets it: the limit's `status` (429 by default) with
//! `Retry-After` and the IETF RateLimit fields (draft-ietf-httpapi-ratelimit-headers-11), and a
//! short text body. The exchange sends it as it sends any answer of the switch's own.

use super::{LimitSpec, Limiter};
use crate::http::status::write_error_body;
use std::time::Duration;

/// One refusal, its field values written once.
pub struct Refusal {
    pub status: u16,
    /// `Retry-After`'s value: [`retry_after_seconds`].
    retry_after: String,
    /// `RateLimit-Policy` and `RateLimit`, as (name, value).
    rate_limit: Vec<(&'static str, String)>,
}

impl Refusal {
    /// The refusal of a request by `limiter` that would pass after `retry_after`.
    pub fn new(limiter: &Limiter, retry_after: Duration) -> Refusal {
        let mut rate_limit = Vec::with_capacity(2);
        limiter.write_refusal_fields(&mut rate_limit, retry_after);
        let seconds = retry_after_seconds(retry_after);
        Refusal {
            status: limiter.spec().status,
            retry_after: itoa::Buffer::new().format(seconds).to_owned(),
            rate_limit,
        }
    }

    /// The answer's fields besides its framing: `Content-Type`, `Retry-After`, then the
    /// RateLimit fields.
    pub fn fields(&self) -> Vec<(&[u8], &[u8])> {
        let mut fields: Vec<(&[u8], &[u8])> = vec![
            (b"Content-Type", b"text/plain"),
            (b"Retry-After", self.retry_after.as_bytes()),
        ];
        let rate_limit = self.rate_limit.iter();
        fields.extend(rate_limit.map(|(n, v)| (n.as_bytes(), v.as_bytes())));
        fields
    }

    /// Writes the answer's body in place of what `body` held.
    pub fn write_body(&self, body: &mut Vec<u8>) {
        body.clear();
        write_error_body(body, self.status, "rate limit exceeded");
    }
}

/// `Retry-After` (and the `t` of `RateLimit`) for a refusal: whole seconds, rounded up, at
/// least 1 (a client told 0 would come back at once).
pub fn retry_after_seconds(retry_after: Duration) -> u64 {
    let whole = retry_after.as_secs();
    let seconds = if retry_after.subsec_nanos() > 0 {
        whole.saturating_add(1)
    } else {
        whole
    };
    seconds.max(1)
}

impl Limiter {
    /// `RateLimit-Policy`'s value for this limit (draft-ietf-httpapi-ratelimit-headers-11,
    /// section 3): `"NAME";q=COUNT;w=SECONDS`, the sustained rate as a quota per window.
    pub fn policy_field(&self) -> &str {
        &self.policy_field
    }

    /// Appends the fields of a refusal after `retry_after` to `out`, as (name, value):
    /// `RateLimit-Policy` ([`Limiter::policy_field`]) and `RateLimit: "NAME";r=0;t=SECONDS`
    /// (section 4: nothing left, for `t` seconds). `t` is [`retry_after_seconds`], the value
    /// [`Refusal`] gives `Retry-After`, as section 6 asks: a
    /// `Retry-After` not earlier than the end of the effective window.
    fn write_refusal_fields(&self, out: &mut Vec<(&'static str, String)>, retry_after: Duration) {
        out.push(("RateLimit-Policy", self.policy_field.clone()));
        let mut limit = String::with_capacity(self.policy_field.len() + 16);
        push_sf_string(&mut limit, &self.spec.name);
        limit.push_str(";r=0;t=");
        limit.push_str(itoa::Buffer::new().format(retry_after_seconds(retry_after)));
        out.push(("RateLimit", limit));
    }
}

/// `"NAME";q=COUNT;w=SECONDS`: the window in whole seconds (the draft has no fractions;
/// `N/s`, `N/m` and `N/h` are whole), at least 1.
pub(super) fn policy_field(spec: &LimitSpec) -> String {
    let mut field = String::with_capacity(spec.name.len() + 24);
    push_sf_string(&mut field, &spec.name);
    field.push_str(";q=");
    field.push_str(itoa::Buffer::new().format(spec.rate.count));
    field.push_str(";w=");
    field.push_str(itoa::Buffer::new().format(retry_after_seconds(spec.rate.per)));
    field
}

/// `text` as a Structured Field String (RFC 9651, 3.3.3): quoted, `"` and `\` escaped; the
/// type holds printable ASCII only, so any other character becomes `?`.
fn push_sf_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::super::tests::spec;
    use super::*;

    #[test]
    fn refusal_fields_follow_the_ratelimit_draft() {
        let limiter = Limiter::new(spec("20/s", 40));
        assert_eq!(limiter.policy_field(), "\"api\";q=20;w=1");
        let mut fields = Vec::new();
        limiter.write_refusal_fields(&mut fields, Duration::from_millis(2_100));
        assert_eq!(
            fields,
            [
                ("RateLimit-Policy", "\"api\";q=20;w=1".to_string()),
                ("RateLimit", "\"api\";r=0;t=3".to_string()),
            ]
        );
        let hourly = Limiter::new(LimitSpec {
            name: "odd \"name\" \\ é".to_string(),
            ..spec("100/h", 1)
        });
        assert_eq!(
            hourly.policy_field(),
            "\"odd \\\"name\\\" \\\\ ?\";q=100;w=3600"
        );
        let mut fields = Vec::new();
        hourly.write_refusal_fields(&mut fields, Duration::from_millis(1));
        assert_eq!(fields[1].1, "\"odd \\\"name\\\" \\\\ ?\";r=0;t=1");
    }
}
