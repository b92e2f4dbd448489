//! A service's own policy (README, `[virtual.NAME]` `request_headers`, `response_headers`,
//! `error_pages`), checked as a rule's field actions are, and made ready for the data path:
//! the field actions composed into every rule that goes to a pool and into the default pool's
//! action (the service's first, then the rule's: policy/headers.rs `then`), so a request pays
//! for one set of actions and a service without them pays nothing; `response_headers` and the
//! pages kept for the switch's own answers (policy/own_answers.rs). Page paths are relative to
//! the rule file's folder, read now: `tcpvs check` and a reload see a missing file.

use super::error::ErrorSink;
use super::policy::build_header_actions;
use super::raw::{RawErrorPages, RawHeaderActions, RawService};
use super::ServiceMode;
use crate::policy::headers::HeaderActions;
use crate::policy::own_answers::{OwnAnswers, MAX_PAGE_BYTES, PAGE_STATUSES};
use crate::policy::{Action, Edits};
use std::io::Read;
use std::path::Path;
use toml::Spanned;

/// What a service does to all its requests and answers.
#[derive(Default)]
pub(super) struct ServicePolicy {
    /// `request_headers`.
    request: Option<HeaderActions>,
    /// `response_headers` and `error_pages`.
    pub own_answers: OwnAnswers,
}

impl ServicePolicy {
    /// The service's keys, checked; what is wrong is reported and left out.
    pub(super) fn build(
        service: &RawService,
        mode: ServiceMode,
        file: &str,
        sink: &mut ErrorSink<'_>,
    ) -> ServicePolicy {
        if mode == ServiceMode::TlsPassthrough {
            refuse_on_passthrough(service, sink);
            return ServicePolicy::default();
        }
        let headers = |raw: &Option<Spanned<RawHeaderActions>>, key, sink: &mut ErrorSink<'_>| {
            raw.as_ref()
                .and_then(|actions| build_header_actions(actions, key, sink))
        };
        ServicePolicy {
            request: headers(&service.request_headers, "request_headers", sink),
            own_answers: OwnAnswers {
                headers: headers(&service.response_headers, "response_headers", sink),
                pages: service
                    .error_pages
                    .as_ref()
                    .map(|pages| read_pages(pages, file, sink))
                    .unwrap_or_default(),
            },
        }
    }

    /// Puts the service's field actions before those of `action`, a rule's (or the default
    /// pool's): nothing changes for a redirect or a `respond`, which send nothing to a server
    /// and whose answers get `response_headers` from [`OwnAnswers::dress`].
    pub(super) fn compose_into(&self, action: &mut Action) {
        let Action::Pool { edits, .. } = action else {
            return;
        };
        let response = self.own_answers.headers.as_ref();
        if self.request.is_none() && response.is_none() {
            return;
        }
        let mut composed = edits.take().map(|e| *e).unwrap_or_default();
        composed.request_headers = before(self.request.as_ref(), composed.request_headers);
        composed.response_headers = before(response, composed.response_headers);
        *edits = Some(Box::new(composed));
    }

    /// The default pool's edits: the service's field actions alone.
    pub(super) fn default_edits(&self) -> Option<Box<Edits>> {
        let mut action = Action::Pool {
            pool: 0,
            edits: None,
        };
        self.compose_into(&mut action);
        match action {
            Action::Pool { edits, .. } => edits,
            _ => None,
        }
    }
}

/// `first`'s actions, then `then`'s.
fn before(first: Option<&HeaderActions>, then: Option<HeaderActions>) -> Option<HeaderActions> {
    match (first, then) {
        (None, then) => then,
        (Some(first), None) => Some(first.clone()),
        (Some(first), Some(then)) => Some(first.then(&then)),
    }
}

fn refuse_on_passthrough(service: &RawService, sink: &mut ErrorSink<'_>) {
    let keys = [
        (
            "request_headers",
            service.request_headers.as_ref().map(Spanned::span),
        ),
        (
            "response_headers",
            service.response_headers.as_ref().map(Spanned::span),
        ),
        (
            "error_pages",
            service.error_pages.as_ref().map(Spanned::span),
        ),
    ];
    for (key, span) in keys {
        if let Some(span) = span {
            sink.at(
                span,
                format!(
                    "`{key}`: a tls-passthrough service sees no HTTP request and gives no \
                     answer of its own (it does not decrypt)"
                ),
            );
        }
    }
}

/// Each page of `error_pages` read, its status checked.
fn read_pages(
    pages: &Spanned<RawErrorPages>,
    file: &str,
    sink: &mut ErrorSink<'_>,
) -> Vec<(u16, Box<[u8]>)> {
    let folder = Path::new(file).parent().unwrap_or(Path::new(""));
    let mut read: Vec<(u16, Box<[u8]>)> = Vec::new();
    for (status, path) in pages.get_ref() {
        let code = match status.get_ref().parse::<u16>() {
            Ok(code) if PAGE_STATUSES.contains(&code) => code,
            _ => {
                sink.at(
                    status.span(),
                    format!(
                        "`error_pages`: {:?} is not a status the switch answers with a page: \
                         502, 503 or 504 (a rule's `respond` gives its own body)",
                        status.get_ref()
                    ),
                );
                continue;
            }
        };
        if read.iter().any(|(s, _)| *s == code) {
            sink.at(
                status.span(),
                format!("`error_pages`: {code} is given twice"),
            );
            continue;
        }
        match read_page(&folder.join(path.get_ref())) {
            Ok(page) => read.push((code, page)),
            Err(why) => sink.at(
                path.span(),
                format!("`error_pages`: {}: {why}", path.get_ref()),
            ),
        }
    }
    read
}

/// A page's bytes, at most [`MAX_PAGE_BYTES`] of them.
fn read_page(path: &Path) -> Result<Box<[u8]>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read it: {e}"))?;
    let mut page = Vec::new();
    file.take(MAX_PAGE_BYTES as u64 + 1)
        .read_to_end(&mut page)
        .map_err(|e| format!("cannot read it: {e}"))?;
    if page.len() > MAX_PAGE_BYTES {
        return Err(format!(
            "larger than {} KiB: an error page is held in memory and sent whole",
            MAX_PAGE_BYTES / 1024
        ));
    }
    Ok(page.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_past_the_bound_is_refused() {
        let dir = std::env::temp_dir().join(format!("tcpvs-page-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.html");
        std::fs::write(&big, vec![b'x'; MAX_PAGE_BYTES + 1]).unwrap();
        assert!(read_page(&big)
            .unwrap_err()
            .contains("larger than 1024 KiB"));
        let fits = dir.join("fits.html");
        std::fs::write(&fits, vec![b'x'; MAX_PAGE_BYTES]).unwrap();
        assert_eq!(read_page(&fits).unwrap().len(), MAX_PAGE_BYTES);
        assert!(read_page(&dir.join("missing.html"))
            .unwrap_err()
            .starts_with("cannot read it"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_default_pool_gets_the_services_actions_alone() {
        let policy = ServicePolicy::default();
        assert!(policy.default_edits().is_none(), "nothing to compose");
        let policy = ServicePolicy {
            request: Some(HeaderActions::new(&["Cookie".into()], &[], &[])),
            own_answers: OwnAnswers::default(),
        };
        let edits = policy.default_edits().unwrap();
        assert!(edits.request_headers.as_ref().unwrap().drops(b"cookie"));
        assert!(edits.response_headers.is_none() && edits.path.is_none());
        let mut respond = Action::Respond(Box::new(crate::policy::respond::Respond {
            status: 403,
            body: Box::default(),
            content_type: None,
        }));
        policy.compose_into(&mut respond);
        assert!(matches!(respond, Action::Respond(_)));
    }
}
