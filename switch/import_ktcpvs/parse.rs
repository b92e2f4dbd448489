//! The grammar of a KTCPVS file (`tcpvs_config.c`: `parse_service`, `parse_server`,
//! `parse_rule`, the process knobs) over its words (lex.rs), into services: the parser's
//! cursor and the file's top level here; a `virtual` block in `service.rs`, its `KEY = VALUE`
//! settings in `setting.rs`, and `rule = ...` in `rule.rs`.

use super::address::parse_addrport;
use super::lex::Token;
use super::model::{Addr, KService};
use super::{Diags, Pos};

mod rule;
mod service;
mod setting;

/// The settings of a `virtual` block (`servicecmds` in tcpvs_config.c).
const KEYWORDS: &[&str] = &[
    "listen",
    "scheduler",
    "startservers",
    "maxclients",
    "minspareservers",
    "maxspareservers",
    "redirect",
    "server",
    "rule",
];
/// The braces of a `virtual` block. Named rather than written inside literals, where they
/// would unbalance tools that find a function's end by counting braces.
const OPEN: &str = "{";
const CLOSE: char = '}';

/// The cursor over the file's words and where its problems are reported; each kind of
/// statement is one method.
pub(super) struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    d: &'a mut Diags,
    /// Where each statement read is written: its first word and the column after its last,
    /// on its first line (`virtual NAME {` is one too).
    statements: Vec<(Pos, usize)>,
}

/// Statements skip the rest of their line after an error, so one mistake is reported once.
type Parsed<T> = Result<T, ()>;

impl<'a> Parser<'a> {
    pub(super) fn new(tokens: &'a [Token], d: &'a mut Diags) -> Self {
        Parser {
            tokens,
            pos: 0,
            d,
            statements: Vec::new(),
        }
    }
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn bump(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        if t.is_some() {
            self.pos += 1;
        }
        t
    }

    /// Whether `t` begins a statement: a setting's name, `}` or `virtual`.
    fn starts_statement(t: &Token) -> bool {
        !t.quoted
            && (KEYWORDS.iter().any(|k| t.text.eq_ignore_ascii_case(k))
                || t.text.starts_with(CLOSE)
                || t.text.eq_ignore_ascii_case("virtual"))
    }

    /// Skips the rest of `line`.
    fn skip_line(&mut self, line: usize) {
        while self.peek().is_some_and(|t| t.line == line) {
            self.pos += 1;
        }
    }

    /// Skips the rest of a statement that has an error: the rest of `line`, or up to its `;`
    /// where one ends it (the statements after it on the line are read as usual).
    fn skip_statement(&mut self, line: usize) {
        while let Some(t) = self.peek() {
            if t.line != line || t.is_separator() {
                return;
            }
            self.pos += 1;
        }
    }

    fn last_line(&self) -> usize {
        self.tokens
            .get(self.pos.saturating_sub(1))
            .map_or(1, |t| t.line)
    }

    /// The next word, unless the file ends, a `;` ends the statement, or a later line begins a
    /// new statement there (the value is missing; tcpvsadm would have taken that word and
    /// failed on it).
    fn value(&mut self, after: &Token, missing: &str) -> Parsed<Token> {
        match self.peek() {
            Some(t) if t.is_separator() => {
                self.d
                    .error(after.pos(), format!("{missing} (`;` ends the statement)"));
                Err(())
            }
            Some(t) if t.line == after.line || !Self::starts_statement(t) => {
                Ok(self.bump().expect("peeked"))
            }
            _ => {
                self.d.error(after.pos(), missing.to_string());
                Err(())
            }
        }
    }

    /// The services of the file, and where its statements are written.
    pub(super) fn file(mut self) -> (Vec<KService>, Vec<(Pos, usize)>) {
        let mut services = Vec::new();
        while let Some(t) = self.bump() {
            if t.is_separator() {
                // After a block closed on the line: `virtual a { ... }; virtual b { ... }`.
                continue;
            }
            if t.text.eq_ignore_ascii_case("virtual") && !t.quoted {
                if let Some(s) = self.service(&t) {
                    services.push(s);
                }
            } else {
                self.d.error(
                    t.pos(),
                    format!("expected `virtual NAME {OPEN}`, found `{}`", t.text),
                );
                self.skip_line(t.line);
            }
        }
        (services, self.statements)
    }

    /// Notes the statement that began with `first` and ended with the last word read.
    fn statement_read(&mut self, first: &Token) {
        if let Some(last) = self.tokens.get(self.pos.saturating_sub(1)) {
            if last.line == first.line && self.pos > 0 {
                self.statements.push((first.pos(), last.end_col()));
            }
        }
    }

    /// An address word, `HOST[:PORT]`, with a warning for each way KTCPVS read it unlike
    /// its text.
    fn addr(&mut self, t: &Token) -> Parsed<Addr> {
        match parse_addrport(&t.text) {
            Ok((addr, notes)) => {
                for note in notes {
                    self.d.warn(t.line, note);
                }
                Ok(addr)
            }
            Err(message) => {
                self.d.error(t.pos(), message);
                Err(())
            }
        }
    }
}
