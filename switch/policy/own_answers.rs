//! A service's own policy on the answers the switch gives for it (README, `[virtual.NAME]`
//! `response_headers` and `error_pages`): its redirects, `respond`s, a limit's 429, its own
//! errors (502, 503, 504...). The answers it relays from servers get the same
//! `response_headers` another way: composed into each rule's actions when the file is read
//! (config/service_policy.rs), so that the relay path does not change.
//!
//! Every front-end answers through [`OwnAnswers::dress`] first (exchange/, the refusals of
//! connection/), so HTTP/1 and HTTP/2 say the same. A service without either key has
//! [`OwnAnswers::default`], and `dress` gives the answer back as it was.

use super::headers::HeaderActions;
use crate::http::status::{write_error_body, Answer, Given};

/// The statuses `error_pages` may give a page: the switch's own answers when no server
/// answered (nginx's and HAProxy's usual `error_page`/`errorfile` set for a proxy).
pub const PAGE_STATUSES: [u16; 3] = [502, 503, 504];

/// An error page is held whole in memory for the service's life, once per generation.
pub const MAX_PAGE_BYTES: usize = 1024 * 1024;

/// A field of an answer: its name and value.
type Field<'a> = (&'a [u8], &'a [u8]);

/// The fields of the switch's own error in plain text, as http/status.rs writes them.
const TEXT_FIELDS: [Field<'static>; 2] = [
    (b"Content-Type", b"text/plain"),
    (b"Cache-Control", b"no-store"),
];

/// The fields of an error answered with the service's page.
const PAGE_FIELDS: [Field<'static>; 2] = [
    (b"Content-Type", b"text/html"),
    (b"Cache-Control", b"no-store"),
];

/// What a service does to the answers the switch gives for it.
#[derive(Debug, Default)]
pub struct OwnAnswers {
    /// The service's `response_headers`.
    pub headers: Option<HeaderActions>,
    /// `error_pages`: a status of [`PAGE_STATUSES`] and the page's bytes, read with the file.
    pub pages: Vec<(u16, Box<[u8]>)>,
}

impl OwnAnswers {
    /// The page of `status`, if the service has one.
    pub fn page(&self, status: u16) -> Option<&[u8]> {
        self.pages
            .iter()
            .find(|(s, _)| *s == status)
            .map(|(_, page)| &**page)
    }

    /// `answer` as the service gives it: an error of the switch's own with the service's page
    /// for its status as `text/html` (its plain text otherwise), and the fields with the
    /// service's `response_headers` applied. `text` holds an error's text and `fields` the
    /// answer's fields when they change; the answer itself when nothing does.
    ///
    /// gRPC calls never reach here as an `Answer::Error` (exchange/ answers them the gRPC way
    /// first), so they keep their form: no HTML, only the fields.
    pub fn dress<'a>(
        &'a self,
        answer: &Answer<'a>,
        text: &'a mut Vec<u8>,
        fields: &'a mut Vec<Field<'a>>,
    ) -> Answer<'a> {
        self.dressed(answer, true, text, fields)
    }

    /// As [`OwnAnswers::dress`], but an error keeps its text: for the refusals sent at once,
    /// before the request is read or without waiting for the client's window (a stream or a
    /// connection over a cap), which must stay a few dozen bytes.
    pub fn dress_short<'a>(
        &'a self,
        answer: &Answer<'a>,
        text: &'a mut Vec<u8>,
        fields: &'a mut Vec<Field<'a>>,
    ) -> Answer<'a> {
        self.dressed(answer, false, text, fields)
    }

    fn dressed<'a>(
        &'a self,
        answer: &Answer<'a>,
        with_page: bool,
        text: &'a mut Vec<u8>,
        fields: &'a mut Vec<Field<'a>>,
    ) -> Answer<'a> {
        let (status, own, body): (u16, &[Field<'_>], &'a [u8]) = match *answer {
            Answer::Given(given) if self.headers.is_some() => {
                (given.status, given.fields, given.body)
            }
            Answer::Given(_) => return *answer,
            Answer::Error { status, why } => match self.page(status).filter(|_| with_page) {
                Some(page) => (status, &PAGE_FIELDS, page),
                None if self.headers.is_none() => return *answer,
                None => {
                    text.clear();
                    write_error_body(text, status, why);
                    let text: &'a [u8] = text;
                    (status, &TEXT_FIELDS, text)
                }
            },
        };
        fields.clear();
        match &self.headers {
            Some(headers) => {
                fields.extend(own.iter().filter(|(name, _)| !headers.drops(name)));
                fields.extend(headers.appended());
            }
            None => fields.extend_from_slice(own),
        }
        let fields: &'a [Field<'a>] = fields;
        Answer::Given(Given {
            status,
            fields,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::rewrite::ClientConnection;
    use crate::http::status::write_answer;

    fn written(answer: &Answer<'_>, with_body: bool) -> String {
        let mut out = Vec::new();
        write_answer(&mut out, answer, ClientConnection::Close, with_body);
        String::from_utf8(out).unwrap()
    }

    fn headers() -> HeaderActions {
        HeaderActions::new(
            &["Cache-Control".to_string()],
            &[("Strict-Transport-Security".into(), "max-age=60".into())],
            &[("Via".into(), "tcpvs".into())],
        )
    }

    #[test]
    fn without_policy_an_answer_is_as_it_was() {
        let own = OwnAnswers::default();
        let error = Answer::Error {
            status: 502,
            why: "bad gateway",
        };
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let dressed = own.dress(&error, &mut text, &mut fields);
        assert_eq!(written(&dressed, true), written(&error, true));
    }

    #[test]
    fn an_error_gets_its_page_and_the_services_fields() {
        let own = OwnAnswers {
            headers: Some(headers()),
            pages: vec![(503, b"<h1>down</h1>\n"[..].into())],
        };
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let error = Answer::Error {
            status: 503,
            why: "no server",
        };
        let dressed = own.dress(&error, &mut text, &mut fields);
        assert_eq!(
            written(&dressed, true),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\n\
             Strict-Transport-Security: max-age=60\r\nVia: tcpvs\r\nContent-Length: 14\r\n\
             Connection: close\r\n\r\n<h1>down</h1>\n"
        );
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let head_only = own.dress(&error, &mut text, &mut fields);
        assert!(
            written(&head_only, false).ends_with("Content-Length: 14\r\nConnection: close\r\n\r\n")
        );
    }

    #[test]
    fn an_error_without_a_page_keeps_its_text() {
        let own = OwnAnswers {
            headers: Some(headers()),
            pages: vec![(503, b"page"[..].into())],
        };
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let error = Answer::Error {
            status: 502,
            why: "bad gateway",
        };
        let dressed = own.dress(&error, &mut text, &mut fields);
        assert_eq!(
            written(&dressed, true),
            "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\
             Strict-Transport-Security: max-age=60\r\nVia: tcpvs\r\nContent-Length: 29\r\n\
             Connection: close\r\n\r\n502 Bad Gateway: bad gateway\n"
        );
    }

    #[test]
    fn a_given_answer_gets_the_fields_only() {
        let own = OwnAnswers {
            headers: Some(headers()),
            pages: vec![(503, b"page"[..].into())],
        };
        let location: [(&[u8], &[u8]); 1] = [(b"Location", b"https://a/")];
        let given = Answer::Given(Given {
            status: 503,
            fields: &location,
            body: b"by the rule",
        });
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let dressed = own.dress(&given, &mut text, &mut fields);
        let out = written(&dressed, true);
        assert!(out.starts_with(
            "HTTP/1.1 503 Service Unavailable\r\nLocation: https://a/\r\n\
             Strict-Transport-Security: max-age=60\r\nVia: tcpvs\r\n"
        ));
        assert!(out.ends_with("\r\n\r\nby the rule"), "{out}");
        let pages_only = OwnAnswers {
            headers: None,
            pages: vec![(503, b"page"[..].into())],
        };
        let (mut text, mut fields) = (Vec::new(), Vec::new());
        let same = pages_only.dress(&given, &mut text, &mut fields);
        assert_eq!(written(&same, true), written(&given, true));
    }
}
