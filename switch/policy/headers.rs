//! `request_headers` and `response_headers`: fields a rule removes, sets and adds, applied in
//! that order (the README's `request_headers`): `remove` drops every field of a name, `set`
//! drops them too and writes its one field, `add` appends beside whatever remains. Names
//! compare without case.
//!
//! The rewriting itself is the head writer's (http/rewrite.rs, connection/h2/response.rs):
//! each field of the message is asked [`HeaderActions::drops`], and [`HeaderActions::appended`]
//! follows the message's own fields. A rule without header actions passes `None` and costs
//! nothing per field.

/// Field names no rule may set, add or remove: they frame the message or manage the
/// connection, which the switch rebuilds itself (RFC 9110 section 7.6.1, RFC 9112 sections 6
/// and 7), and `Host` decides which site a server serves (a rule changes the path or redirects
/// instead).
pub const RESERVED: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "trailer",
    "keep-alive",
];

/// A field a rule writes: its name and value.
type Field = (Box<[u8]>, Box<[u8]>);

/// What one rule does to a message's fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderActions {
    /// The names `remove` and `set` take away from the message, lower-cased.
    dropped: Vec<Box<[u8]>>,
    /// `set`'s fields, then `add`'s, in file order, as written after the message's own.
    appended: Vec<Field>,
}

impl HeaderActions {
    /// `remove`, `set` and `add` as the rule file has them (names already checked).
    pub fn new(remove: &[String], set: &[(String, String)], add: &[(String, String)]) -> Self {
        let mut dropped: Vec<Box<[u8]>> = Vec::new();
        for name in remove.iter().chain(set.iter().map(|(name, _)| name)) {
            let lower: Box<[u8]> = name.to_ascii_lowercase().into_bytes().into();
            if !dropped.contains(&lower) {
                dropped.push(lower);
            }
        }
        let appended = set
            .iter()
            .chain(add)
            .map(|(name, value)| {
                (
                    name.as_bytes().to_vec().into_boxed_slice(),
                    value.as_bytes().to_vec().into_boxed_slice(),
                )
            })
            .collect();
        HeaderActions { dropped, appended }
    }

    /// Whether the message's own field named `name` is left out: the names compare without
    /// case, and `_` as `-`, so that a client's `X_User` does not ride beside the `X-User` a
    /// rule set (CGI, PHP and WSGI servers read both as `HTTP_X_USER`).
    #[inline]
    pub fn drops(&self, name: &[u8]) -> bool {
        self.dropped.iter().any(|d| same_name(d, name))
    }

    /// The fields written after the message's own, in order.
    pub fn appended(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.appended.iter().map(|(n, v)| (&**n, &**v))
    }

    /// `self` (a service's actions) followed by `later` (a rule's), as one set of actions
    /// computed when the rule file is read, so that a request pays for one pass, not two.
    /// Applying them in turn leaves the message's own fields that neither drops, then the
    /// fields `self` appends that `later` does not drop, then `later`'s: so a rule's `remove`
    /// takes away what the service `set`, a rule's `set` replaces it, and the `add`s of both
    /// stay, the service's first.
    pub fn then(&self, later: &HeaderActions) -> HeaderActions {
        let mut dropped = self.dropped.clone();
        for name in &later.dropped {
            if !dropped.contains(name) {
                dropped.push(name.clone());
            }
        }
        let appended = self
            .appended
            .iter()
            .filter(|(name, _)| !later.drops(name))
            .chain(&later.appended)
            .cloned()
            .collect();
        HeaderActions { dropped, appended }
    }

    /// Whether the rule writes a field named `name` itself (`set` or `add`): the switch then
    /// writes none of its own by that name (X-Forwarded-For, X-Forwarded-Proto).
    pub fn writes(&self, name: &[u8]) -> bool {
        self.appended
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

/// Field names equal without case, `_` and `-` alike.
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    let fold = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.iter().zip(b).all(|(&x, &y)| fold(x) == fold(y))
}

/// Why `name` cannot be a field a rule handles: `None` when it can.
pub fn refusal(name: &str) -> Option<String> {
    if name.is_empty() || !name.bytes().all(crate::http::fields::is_token_byte) {
        return Some(format!(
            "{name:?} cannot be a field name (a token: letters, digits and !#$%&'*+-.^_`|~)"
        ));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED.contains(&lower.as_str()) {
        return Some(format!(
            "rules may not change `{name}`: the switch writes the framing and connection fields \
             itself, and Host names the site (use `redirect`, `path_rewrite` or `strip_prefix`)"
        ));
    }
    None
}

/// Why `value` cannot be a field value: `None` when it can (visible ASCII, spaces and tabs
/// inside, nothing around; no CR, LF or NUL: RFC 9110 section 5.5).
pub fn value_refusal(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    if bytes.iter().any(|&b| b < 0x20 && b != b'\t' || b == 0x7f) {
        return Some(format!(
            "{value:?} cannot be a field value: no control characters (CR, LF, NUL)"
        ));
    }
    if bytes.first().is_some_and(|b| matches!(b, b' ' | b'\t'))
        || bytes.last().is_some_and(|b| matches!(b, b' ' | b'\t'))
    {
        return Some(format!(
            "{value:?}: a field value has no white space around it"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn remove_then_set_then_add() {
        let actions = HeaderActions::new(
            &strings(&["Cookie"]),
            &pairs(&[("X-Pool", "images")]),
            &pairs(&[("Via", "1.1 tcpvs"), ("x-pool", "second")]),
        );
        assert!(actions.drops(b"cookie"));
        assert!(actions.drops(b"X-POOL"));
        assert!(actions.drops(b"X_Pool"), "an underscore look-alike");
        assert!(!actions.drops(b"X-Poo"));
        assert!(!actions.drops(b"Via"));
        let appended: Vec<_> = actions.appended().collect();
        assert_eq!(
            appended,
            vec![
                (&b"X-Pool"[..], &b"images"[..]),
                (&b"Via"[..], &b"1.1 tcpvs"[..]),
                (&b"x-pool"[..], &b"second"[..]),
            ]
        );
        assert!(actions.writes(b"via"));
        assert!(!actions.writes(b"cookie"));
    }

    /// The fields a message ends with after `actions`: its own (`message`) minus those
    /// dropped, then those appended.
    fn applied(actions: &HeaderActions, message: &[(&str, &str)]) -> Vec<(String, String)> {
        let own = message
            .iter()
            .filter(|(name, _)| !actions.drops(name.as_bytes()))
            .map(|(n, v)| (n.to_string(), v.to_string()));
        let appended = actions.appended().map(|(n, v)| {
            (
                String::from_utf8_lossy(n).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            )
        });
        own.chain(appended).collect()
    }

    fn service() -> HeaderActions {
        HeaderActions::new(
            &strings(&["Server"]),
            &pairs(&[("Strict-Transport-Security", "max-age=60"), ("X-Site", "s")]),
            &pairs(&[("Via", "service")]),
        )
    }

    #[test]
    fn a_rules_remove_takes_away_what_the_service_set() {
        let rule = HeaderActions::new(&strings(&["x-site"]), &[], &[]);
        let both = service().then(&rule);
        assert_eq!(
            applied(
                &both,
                &[("Server", "origin"), ("X-Site", "origin"), ("A", "1")]
            ),
            vec![
                ("A".into(), "1".into()),
                ("Strict-Transport-Security".into(), "max-age=60".into()),
                ("Via".into(), "service".into()),
            ]
        );
    }

    #[test]
    fn a_rules_set_replaces_the_services() {
        let rule = HeaderActions::new(&[], &pairs(&[("strict-transport-security", "0")]), &[]);
        let both = service().then(&rule);
        assert_eq!(
            applied(&both, &[("Strict-Transport-Security", "origin")]),
            vec![
                ("X-Site".into(), "s".into()),
                ("Via".into(), "service".into()),
                ("strict-transport-security".into(), "0".into()),
            ]
        );
    }

    #[test]
    fn the_adds_of_both_stay_in_order() {
        let rule = HeaderActions::new(&[], &[], &pairs(&[("Via", "rule"), ("X-Rule", "r")]));
        let both = service().then(&rule);
        let via: Vec<_> = applied(&both, &[("Via", "origin")])
            .into_iter()
            .filter(|(n, _)| n == "Via")
            .map(|(_, v)| v)
            .collect();
        assert_eq!(via, vec!["origin", "service", "rule"]);
        assert!(both.writes(b"x-rule") && both.writes(b"x-site"));
    }

    #[test]
    fn composed_equals_applying_each_in_turn() {
        let rule = HeaderActions::new(
            &strings(&["Via"]),
            &pairs(&[("Server", "tcpvs")]),
            &pairs(&[("X-Site", "rule")]),
        );
        let message = [("Server", "origin"), ("Via", "1.1 a"), ("X-Other", "o")];
        let in_turn = {
            let after_service = applied(&service(), &message);
            let fields: Vec<(&str, &str)> = after_service
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            applied(&rule, &fields)
        };
        assert_eq!(applied(&service().then(&rule), &message), in_turn);
        let nothing = HeaderActions::default();
        assert_eq!(service().then(&nothing), service());
        assert_eq!(nothing.then(&service()), service());
    }

    #[test]
    fn reserved_and_malformed_names() {
        for name in [
            "Host",
            "content-length",
            "Transfer-Encoding",
            "TE",
            "Keep-Alive",
        ] {
            assert!(refusal(name).is_some(), "{name}");
        }
        for name in ["", "X Pool", "X-Pool:", "Ünï"] {
            assert!(refusal(name).is_some(), "{name:?}");
        }
        assert_eq!(refusal("Strict-Transport-Security"), None);
        assert!(value_refusal("a\r\nInjected: 1").is_some());
        assert!(value_refusal(" padded").is_some());
        assert_eq!(value_refusal("max-age=31536000; includeSubDomains"), None);
    }
}
