//! `rule = pattern "ERE" [match N] use server ADDR` (`parse_rule`).

use super::{Parsed, Parser};
use crate::import_ktcpvs::lex::{c_number, Token};
use crate::import_ktcpvs::model::KRule;
use crate::import_ktcpvs::Pos;

/// `KTCPVS_PATTERN_MAXLEN` (tcp_vs.h): a longer pattern is cut without its terminating NUL.
const MAX_PATTERN: usize = 255;
/// The statement's shape, quoted in its errors.
const SHAPE: &str = "`rule = pattern \"REGEX\" [match N] use server ADDRESS`";

impl Parser<'_> {
    /// The rule after `rule =`; `key` is its `rule`.
    pub(super) fn rule(&mut self, key: &Token, eq: &Token) -> Parsed<KRule> {
        let word = self.value(eq, &format!("expected {SHAPE}"))?;
        self.keyword(&word, "pattern", "`pattern` after `rule =`")?;
        let pattern = self.pattern(&word)?;
        let mut next = self.value(
            &pattern,
            &format!("the pattern needs `use server ADDRESS`: {SHAPE}"),
        )?;
        let mut match_num = None;
        if next.text.eq_ignore_ascii_case("match") && !next.quoted {
            let (value, n) = self.match_num(&next)?;
            match_num = Some(value);
            next = self.value(
                &n,
                &format!("`match N` needs `use server ADDRESS` after it: {SHAPE}"),
            )?;
        }
        self.keyword(&next, "use", "`use server ADDRESS`")?;
        let server = self.value(&next, &format!("`use` needs `server ADDRESS`: {SHAPE}"))?;
        self.keyword(&server, "server", "`server` after `use`")?;
        let target = self.value(&server, &format!("`use server` needs an address: {SHAPE}"))?;
        let addr = self.addr(&target)?;
        Ok(KRule {
            pattern: pattern.text.clone(),
            pattern_at: Pos {
                line: pattern.line,
                // The pattern's first character, after a quote.
                col: pattern.col + usize::from(pattern.quoted),
            },
            match_num,
            target: addr,
            target_at: target.pos(),
            line: key.line,
        })
    }

    /// `word` must be the unquoted `keyword` (in any case); else the error says what was
    /// `expected` there.
    fn keyword(&mut self, word: &Token, keyword: &str, expected: &str) -> Parsed<()> {
        if word.text.eq_ignore_ascii_case(keyword) && !word.quoted {
            return Ok(());
        }
        self.d.error(
            word.pos(),
            format!("expected {expected}, found `{}`: {SHAPE}", word.text),
        );
        Err(())
    }

    /// The pattern after `pattern`, at most `MAX_PATTERN` bytes.
    fn pattern(&mut self, word: &Token) -> Parsed<Token> {
        let mut pattern = self.value(word, &format!("`pattern` needs a regex: {SHAPE}"))?;
        // A `;` cut from the end of an unquoted pattern is the pattern's own: the statement
        // goes on after it (`rule = pattern ^/a; use server ...`), as tcpvsadm read it.
        while !pattern.quoted
            && self.peek().is_some_and(|t| {
                t.is_separator() && t.line == pattern.line && t.col == pattern.end_col()
            })
        {
            self.pos += 1;
            pattern.text.push(';');
        }
        if pattern.text.len() > MAX_PATTERN {
            self.d.error(
                pattern.pos(),
                format!(
                    "pattern is {} bytes long: KTCPVS keeps at most {MAX_PATTERN} (KTCPVS_PATTERN_MAXLEN)",
                    pattern.text.len()
                ),
            );
            return Err(());
        }
        Ok(pattern)
    }

    /// The number after `match` (read as KTCPVS did), and its word.
    fn match_num(&mut self, word: &Token) -> Parsed<(u32, Token)> {
        let n = self.value(word, "`match` needs a number 0..9")?;
        let value = match c_number(&n.text, 0, 10) {
            Some(10) => {
                self.d.error(
                    n.pos(),
                    "match 10 is past KTCPVS's ten match slots (0..9): it read outside them",
                );
                return Err(());
            }
            Some(v) => v as u32,
            None => {
                self.d.warn(
                    n.line,
                    format!(
                        "match `{}` is not a number 0..10: KTCPVS used match 0",
                        n.text
                    ),
                );
                0
            }
        };
        Ok((value, n))
    }
}
