//! POSIX extended regular expressions as Henry Spencer's regcomp (KTCPVS regex/regcomp.c)
//! reads them: the expression tree and its parser, here; its translation into the syntax of the
//! Rust `regex` crate, which tcpvs uses (`translate.rs`); what the converter asks of a pattern
//! (`analysis.rs`: anchored? does the query matter? where does a group open?).

mod analysis;
mod translate;

pub(super) use translate::to_rust;

/// Spencer's RE_DUP_MAX.
const DUP_MAX: u32 = 255;
/// The braces of a bound, `{m,n}`. Named rather than written inside literals, where they
/// would unbalance tools that find a function's end by counting braces.
const BOUND_OPEN: char = '{';
const BOUND_CLOSE: char = '}';

#[derive(Clone, Debug, PartialEq)]
pub(super) enum Node {
    /// `()`.
    Empty,
    Lit(char),
    Any,
    Class {
        negated: bool,
        items: Vec<ClassItem>,
    },
    Bol,
    Eol,
    /// `[[:<:]]`, `[[:>:]]`.
    WordStart,
    WordEnd,
    Group(Box<Node>),
    Concat(Vec<Node>),
    Alt(Vec<Node>),
    Repeat {
        node: Box<Node>,
        min: u32,
        max: Option<u32>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub(super) enum ClassItem {
    Char(char),
    Range(char, char),
    Named(&'static str),
}

#[derive(Debug)]
pub(super) struct Regex {
    pub node: Node,
    /// Capture groups (`re_nsub`).
    pub groups: usize,
}

#[derive(Debug, PartialEq)]
pub(super) struct Error {
    /// Character index in the pattern.
    pub at: usize,
    pub message: String,
}

const CLASSES: &[&str] = &[
    "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "xdigit",
];

/// Collating-element names (cname.h) of the ASCII characters a URI pattern may name.
const NAMES: &[(&str, char)] = &[
    ("NUL", '\0'),
    ("tab", '\t'),
    ("newline", '\n'),
    ("vertical-tab", '\x0b'),
    ("form-feed", '\x0c'),
    ("carriage-return", '\r'),
    ("space", ' '),
    ("exclamation-mark", '!'),
    ("quotation-mark", '"'),
    ("number-sign", '#'),
    ("dollar-sign", '$'),
    ("percent-sign", '%'),
    ("ampersand", '&'),
    ("apostrophe", '\''),
    ("left-parenthesis", '('),
    ("right-parenthesis", ')'),
    ("asterisk", '*'),
    ("plus-sign", '+'),
    ("comma", ','),
    ("hyphen", '-'),
    ("hyphen-minus", '-'),
    ("period", '.'),
    ("full-stop", '.'),
    ("slash", '/'),
    ("solidus", '/'),
    ("zero", '0'),
    ("one", '1'),
    ("two", '2'),
    ("three", '3'),
    ("four", '4'),
    ("five", '5'),
    ("six", '6'),
    ("seven", '7'),
    ("eight", '8'),
    ("nine", '9'),
    ("colon", ':'),
    ("semicolon", ';'),
    ("less-than-sign", '<'),
    ("equals-sign", '='),
    ("greater-than-sign", '>'),
    ("question-mark", '?'),
    ("commercial-at", '@'),
    ("left-square-bracket", '['),
    ("backslash", '\\'),
    ("reverse-solidus", '\\'),
    ("right-square-bracket", ']'),
    ("circumflex", '^'),
    ("circumflex-accent", '^'),
    ("underscore", '_'),
    ("low-line", '_'),
    ("grave-accent", '`'),
    ("left-brace", '{'),
    ("left-curly-bracket", '{'),
    ("vertical-line", '|'),
    ("right-brace", '}'),
    ("right-curly-bracket", '}'),
    ("tilde", '~'),
    ("DEL", '\x7f'),
];

pub(super) fn parse(pattern: &str) -> Result<Regex, Error> {
    let mut p = P {
        chars: pattern.chars().collect(),
        i: 0,
        groups: 0,
    };
    let node = p.ere(None)?;
    Ok(Regex {
        node,
        groups: p.groups,
    })
}

struct P {
    chars: Vec<char>,
    i: usize,
    groups: usize,
}

fn err<T>(at: usize, message: impl Into<String>) -> Result<T, Error> {
    Err(Error {
        at,
        message: message.into(),
    })
}

impl P {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek2(&self) -> Option<char> {
        self.chars.get(self.i + 1).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }

    fn eat_two(&mut self, a: char, b: char) -> bool {
        if self.peek() == Some(a) && self.peek2() == Some(b) {
            self.i += 2;
            true
        } else {
            false
        }
    }

    fn starts_repetition(&self) -> bool {
        match self.peek() {
            Some('*' | '+' | '?') => true,
            Some(BOUND_OPEN) => self.peek2().is_some_and(|c| c.is_ascii_digit()),
            _ => false,
        }
    }

    /// `p_ere`: alternatives of concatenations, up to `stop` (not eaten).
    fn ere(&mut self, stop: Option<char>) -> Result<Node, Error> {
        let mut branches = Vec::new();
        loop {
            let start = self.i;
            let mut items = Vec::new();
            while let Some(c) = self.peek() {
                if c == '|' || Some(c) == stop {
                    break;
                }
                items.push(self.exp()?);
            }
            if items.is_empty() {
                return err(start, "empty alternative (REG_EMPTY)");
            }
            branches.push(if items.len() == 1 {
                items.pop().expect("one item")
            } else {
                Node::Concat(items)
            });
            if !self.eat('|') {
                break;
            }
        }
        Ok(if branches.len() == 1 {
            branches.pop().expect("one branch")
        } else {
            Node::Alt(branches)
        })
    }

    /// `p_ere_exp`: an atom and its repetition.
    fn exp(&mut self) -> Result<Node, Error> {
        let at = self.i;
        let c = self.chars[self.i];
        self.i += 1;
        let mut caret = false;
        let atom = match c {
            '(' => {
                if self.peek().is_none() {
                    return err(at, "unmatched `(` (REG_EPAREN)");
                }
                self.groups += 1;
                let inner = if self.peek() == Some(')') {
                    Node::Empty
                } else {
                    self.ere(Some(')'))?
                };
                if !self.eat(')') {
                    return err(at, "unmatched `(` (REG_EPAREN)");
                }
                Node::Group(Box::new(inner))
            }
            ')' => return err(at, "unmatched `)` (REG_EPAREN)"),
            '^' => {
                caret = true;
                Node::Bol
            }
            '$' => Node::Eol,
            '*' | '+' | '?' => {
                return err(at, format!("`{c}` repeats nothing (REG_BADRPT)"));
            }
            '.' => Node::Any,
            '[' => self.bracket(at)?,
            '\\' => match self.peek() {
                // Any escaped character is itself: `\d` is `d`, `\.` is `.`.
                Some(e) => {
                    self.i += 1;
                    Node::Lit(e)
                }
                None => return err(at, "trailing backslash (REG_EESCAPE)"),
            },
            BOUND_OPEN if self.peek().is_some_and(|c| c.is_ascii_digit()) => {
                return err(at, format!("`{BOUND_OPEN}` repeats nothing (REG_BADRPT)"));
            }
            c => Node::Lit(c),
        };
        if !self.starts_repetition() {
            return Ok(atom);
        }
        let op_at = self.i;
        let op = self.chars[self.i];
        self.i += 1;
        if caret {
            return err(op_at, format!("`{op}` after `^` (REG_BADRPT)"));
        }
        let (min, max) = match op {
            '*' => (0, None),
            '+' => (1, None),
            '?' => (0, Some(1)),
            _ => self.bounds(op_at)?,
        };
        if self.starts_repetition() {
            return err(self.i, "a repetition of a repetition (REG_BADRPT)");
        }
        Ok(Node::Repeat {
            node: Box::new(atom),
            min,
            max,
        })
    }

    /// `{m}`, `{m,}`, `{m,n}` after the `{`.
    fn bounds(&mut self, at: usize) -> Result<(u32, Option<u32>), Error> {
        let min = self.count(at)?;
        let max = if self.eat(',') {
            if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                let max = self.count(at)?;
                if min > max {
                    return err(
                        at,
                        format!("{{{min},{max}}}: the minimum is above the maximum (REG_BADBR)"),
                    );
                }
                Some(max)
            } else {
                None
            }
        } else {
            Some(min)
        };
        if self.eat(BOUND_CLOSE) {
            return Ok((min, max));
        }
        if self.chars[self.i..].contains(&BOUND_CLOSE) {
            err(at, "invalid repetition count (REG_BADBR)")
        } else {
            err(at, format!("unclosed `{BOUND_OPEN}` (REG_EBRACE)"))
        }
    }

    fn count(&mut self, at: usize) -> Result<u32, Error> {
        let mut count: u32 = 0;
        let mut digits = 0;
        while let Some(d) = self.peek().and_then(|c| c.to_digit(10)) {
            if count > DUP_MAX {
                break;
            }
            count = count * 10 + d;
            digits += 1;
            self.i += 1;
        }
        if digits == 0 || count > DUP_MAX {
            return err(
                at,
                format!("invalid repetition count: at most {DUP_MAX} (REG_BADBR)"),
            );
        }
        Ok(count)
    }

    /// `p_bracket`, after the `[`.
    fn bracket(&mut self, at: usize) -> Result<Node, Error> {
        let rest: String = self.chars[self.i..].iter().take(6).collect();
        if rest == "[:<:]]" {
            self.i += 6;
            return Ok(Node::WordStart);
        }
        if rest == "[:>:]]" {
            self.i += 6;
            return Ok(Node::WordEnd);
        }
        let negated = self.eat('^');
        let mut items = Vec::new();
        if self.eat(']') {
            items.push(ClassItem::Char(']'));
        } else if self.eat('-') {
            items.push(ClassItem::Char('-'));
        }
        while let Some(c) = self.peek() {
            if c == ']' || (c == '-' && self.peek2() == Some(']')) {
                break;
            }
            self.term(at, &mut items)?;
        }
        if self.eat('-') {
            items.push(ClassItem::Char('-'));
        }
        if !self.eat(']') {
            return err(at, "unclosed `[` (REG_EBRACK)");
        }
        Ok(Node::Class { negated, items })
    }

    /// `p_b_term`: a class, an equivalence class, a character or a range.
    fn term(&mut self, at: usize, items: &mut Vec<ClassItem>) -> Result<(), Error> {
        let here = self.i;
        match (self.peek(), self.peek2()) {
            (Some('['), Some(':')) => {
                self.i += 2;
                match self.peek() {
                    None => return err(at, "unclosed `[` (REG_EBRACK)"),
                    Some('-' | ']') => return err(here, "invalid character class (REG_ECTYPE)"),
                    _ => {}
                }
                let start = self.i;
                while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
                    self.i += 1;
                }
                let name: String = self.chars[start..self.i].iter().collect();
                let Some(&class) = CLASSES.iter().find(|c| **c == name) else {
                    return err(
                        here,
                        format!("unknown character class `[:{name}:]` (REG_ECTYPE)"),
                    );
                };
                if self.peek().is_none() {
                    return err(at, "unclosed `[` (REG_EBRACK)");
                }
                if !self.eat_two(':', ']') {
                    return err(here, "character class not closed by `:]` (REG_ECTYPE)");
                }
                items.push(ClassItem::Named(class));
            }
            (Some('['), Some('=')) => {
                self.i += 2;
                match self.peek() {
                    None => return err(at, "unclosed `[` (REG_EBRACK)"),
                    Some('-' | ']') => {
                        return err(here, "invalid equivalence class (REG_ECOLLATE)")
                    }
                    _ => {}
                }
                let c = self.element('=', here, at)?;
                if self.peek().is_none() {
                    return err(at, "unclosed `[` (REG_EBRACK)");
                }
                if !self.eat_two('=', ']') {
                    return err(here, "equivalence class not closed by `=]` (REG_ECOLLATE)");
                }
                items.push(ClassItem::Char(c));
            }
            (Some('-'), _) => {
                return err(
                    here,
                    "`-` inside `[...]` must come first, last or end a range (REG_ERANGE)",
                )
            }
            _ => {
                let start = self.symbol(at)?;
                if self.peek() == Some('-') && self.peek2().is_some_and(|c| c != ']') {
                    self.i += 1;
                    let end = if self.eat('-') { '-' } else { self.symbol(at)? };
                    if start > end {
                        return err(
                            here,
                            format!("range `{start}-{end}` runs backwards (REG_ERANGE)"),
                        );
                    }
                    items.push(ClassItem::Range(start, end));
                } else {
                    items.push(ClassItem::Char(start));
                }
            }
        }
        Ok(())
    }

    /// `p_b_symbol`: a character or `[.name.]`.
    fn symbol(&mut self, at: usize) -> Result<char, Error> {
        let here = self.i;
        if self.eat_two('[', '.') {
            let c = self.element('.', here, at)?;
            if !self.eat_two('.', ']') {
                return err(here, "collating symbol not closed by `.]` (REG_ECOLLATE)");
            }
            return Ok(c);
        }
        match self.peek() {
            Some(c) => {
                self.i += 1;
                Ok(c)
            }
            None => err(at, "unclosed `[` (REG_EBRACK)"),
        }
    }

    /// `p_b_coll_elem`: a collating element's name up to `end]`.
    fn element(&mut self, end: char, here: usize, at: usize) -> Result<char, Error> {
        let start = self.i;
        while self.peek().is_some() && !(self.peek() == Some(end) && self.peek2() == Some(']')) {
            self.i += 1;
        }
        if self.peek().is_none() {
            return err(at, "unclosed `[` (REG_EBRACK)");
        }
        let name: String = self.chars[start..self.i].iter().collect();
        if let Some(&(_, c)) = NAMES.iter().find(|(n, _)| *n == name) {
            return Ok(c);
        }
        let mut chars = name.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => Ok(c),
            _ => err(
                here,
                format!("unknown collating element `{name}` (REG_ECOLLATE)"),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::import_ktcpvs::ere;

    fn ere_error(pattern: &str) -> (usize, String) {
        let e = ere::parse(pattern).unwrap_err();
        (e.at, e.message)
    }

    #[test]
    fn broken_patterns_are_refused_where_regcomp_refused_them() {
        assert_eq!(ere_error("*a").0, 0);
        assert!(ere_error("*a").1.contains("REG_BADRPT"));
        assert!(ere_error("a**").1.contains("REG_BADRPT"));
        assert!(ere_error("^*").1.contains("REG_BADRPT"));
        assert!(ere_error("a{1").1.contains("REG_EBRACE"));
        assert!(ere_error("a{2,1}").1.contains("REG_BADBR"));
        assert!(ere_error("a{256}").1.contains("REG_BADBR"));
        assert!(ere_error("{1}").1.contains("REG_BADRPT"));
        assert_eq!(ere_error("ab(c").0, 2);
        assert!(ere_error("ab(c").1.contains("REG_EPAREN"));
        assert!(ere_error("a)").1.contains("REG_EPAREN"));
        assert!(ere_error("a|").1.contains("REG_EMPTY"));
        assert!(ere_error("(|a)").1.contains("REG_EMPTY"));
        assert!(ere_error("").1.contains("REG_EMPTY"));
        assert!(ere_error("[abc").1.contains("REG_EBRACK"));
        assert!(ere_error("[z-a]").1.contains("REG_ERANGE"));
        assert!(ere_error("[[:word:]]").1.contains("REG_ECTYPE"));
        assert!(ere_error(r"a\").1.contains("REG_EESCAPE"));
    }
}
