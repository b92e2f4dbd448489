//! A `virtual NAME { ... }` block (`parse_service`): its name, its `{`, and the statements of
//! its body up to a word beginning with `}`.

use super::{Parser, CLOSE, KEYWORDS, OPEN};
use crate::import_ktcpvs::lex::Token;
use crate::import_ktcpvs::model::KService;

impl Parser<'_> {
    /// The block after its `virtual`; `None` when it has no name (its body is still read, for
    /// its errors).
    pub(super) fn service(&mut self, keyword: &Token) -> Option<KService> {
        let name = self.service_name(keyword)?;
        let mut service = KService {
            name: name.text.clone(),
            at: keyword.pos(),
            name_at: name.pos(),
            listen: None,
            scheduler: None,
            redirect: None,
            knobs: Vec::new(),
            servers: Vec::new(),
            rules: Vec::new(),
            overridden: Vec::new(),
            broken: Vec::new(),
        };
        self.opening_brace(keyword, &name, &mut service);
        // A missing opening brace was reported; the body is read anyway, for its errors.
        self.body(keyword, &mut service);
        (!name.text.is_empty()).then_some(service)
    }

    /// The name after `virtual`: an empty one when `{` follows at once (reported); `None` when
    /// neither a name nor `{` follows (reported, and the line skipped).
    fn service_name(&mut self, keyword: &Token) -> Option<Token> {
        match self.peek() {
            Some(t) if t.text != OPEN && !(t.line != keyword.line && Self::starts_statement(t)) => {
                self.bump()
            }
            Some(t) if t.text == OPEN => {
                // Read the body anyway, for its errors; the service itself is dropped.
                self.d.error(
                    keyword.pos(),
                    format!("`virtual` needs a name before `{OPEN}`: `virtual NAME {OPEN}`"),
                );
                let mut nameless = keyword.clone();
                nameless.text.clear();
                Some(nameless)
            }
            _ => {
                self.d.error(
                    keyword.pos(),
                    format!("`virtual` needs a name and `{OPEN}`: `virtual NAME {OPEN}`"),
                );
                self.skip_line(keyword.line);
                None
            }
        }
    }

    /// The `{` after the name, or the error for its absence. `virtual NAME{` is one word to
    /// tcpvsadm: an error too, and the service keeps the name without its `{`.
    fn opening_brace(&mut self, keyword: &Token, name: &Token, service: &mut KService) {
        match self.peek() {
            Some(t) if t.text == OPEN => {
                self.bump();
                self.statement_read(keyword);
            }
            Some(t) if t.line == name.line => {
                let t = t.clone();
                self.d.error(
                    t.pos(),
                    format!(
                        "expected `{OPEN}` after `virtual {}`, found `{}`",
                        name.text, t.text
                    ),
                );
                self.skip_line(t.line);
            }
            _ if name.text.ends_with(OPEN) => {
                self.d.error(
                    name.pos(),
                    format!(
                        "write `virtual {} {OPEN}` with a space before `{OPEN}`: tcpvsadm reads `{}` as one word",
                        name.text.trim_end_matches(OPEN),
                        name.text
                    ),
                );
                service.name = name.text.trim_end_matches(OPEN).to_string();
            }
            _ => {
                self.d.error(
                    name.pos(),
                    format!("expected `{OPEN}` after `virtual {}`", name.text),
                );
            }
        }
    }

    /// The statements up to the word beginning with `}` that closes the block.
    fn body(&mut self, keyword: &Token, service: &mut KService) {
        loop {
            let Some(t) = self.peek().cloned() else {
                self.d.error(
                    keyword.pos(),
                    format!("`virtual {}` is not closed by `{CLOSE}`", service.name),
                );
                return;
            };
            if t.is_separator() {
                self.bump();
                continue;
            }
            if t.text.starts_with(CLOSE) && !t.quoted {
                self.bump();
                if t.text.len() > 1 {
                    self.d.warn(
                        t.line,
                        format!("tcpvsadm ignored `{}` after `{CLOSE}`", &t.text[1..]),
                    );
                }
                return;
            }
            if t.text.eq_ignore_ascii_case("virtual") && !t.quoted {
                self.d.error(
                    keyword.pos(),
                    format!(
                        "`virtual {}` is not closed by `{CLOSE}` before the `virtual` of line {}",
                        service.name, t.line
                    ),
                );
                return;
            }
            self.bump();
            self.setting(&t, service);
        }
    }

    /// The statement `t` begins (`t` read): a known setting, else an error.
    fn setting(&mut self, t: &Token, service: &mut KService) {
        let lower = t.text.to_ascii_lowercase();
        let Some(&key) = KEYWORDS.iter().find(|k| **k == lower) else {
            self.unknown_setting(t, &service.name);
            self.skip_statement(t.line);
            return;
        };
        if self.statement(key, t, service).is_err() {
            let line = self.last_line();
            self.skip_statement(line);
        } else {
            self.statement_read(t);
        }
    }

    fn unknown_setting(&mut self, t: &Token, service: &str) {
        let glued = t
            .text
            .split_once('=')
            .filter(|(k, _)| KEYWORDS.iter().any(|w| k.eq_ignore_ascii_case(w)));
        let message = match glued {
            Some((key, value)) => format!(
                "write `{key} = {value}` with spaces around `=`: tcpvsadm reads `{}` as one word",
                t.text
            ),
            None => format!(
                "unknown setting `{}` in `virtual {service}` (KTCPVS knows {})",
                t.text,
                KEYWORDS.join(", ")
            ),
        };
        self.d.error(t.pos(), message);
    }
}
