//! The words of a KTCPVS file, as tcpvsadm's `get_next_token` cuts them (white space, one-line
//! quoted words, `#` comments at the start of a word), each with its line and column, and the
//! numbers in them as its `string_to_number` reads them.

use super::{Diags, Pos};

/// tcpvsadm reads lines with `fgets(line, 512)`: longer lines are split into pieces.
const MAX_LINE: usize = 511;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
    pub(super) text: String,
    pub(super) line: usize,
    pub(super) col: usize,
    pub(super) quoted: bool,
}

impl Token {
    pub(super) fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }

    /// The column just after the word (after its closing quote).
    pub(super) fn end_col(&self) -> usize {
        self.col + self.text.chars().count() + if self.quoted { 2 } else { 0 }
    }

    /// A `;` between statements, as the README writes a service on one line (`virtual web {
    /// listen = ...; server = ...; }`). tcpvsadm had no separator but white space: it read
    /// `80;` as a port and refused it, so no file it loaded has a word ending in `;` where a
    /// statement ends, and reading `;` there as the end changes nothing it accepted. Inside a
    /// statement (an unquoted pattern such as `^/a;`) the parser glues it back.
    pub(super) fn is_separator(&self) -> bool {
        !self.quoted && self.text == ";"
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The words of the file, as `get_next_token` cuts them.
pub(super) fn lex(source: &str, d: &mut Diags) -> Vec<Token> {
    let mut tokens = Vec::new();
    for (index, line) in source.split('\n').enumerate() {
        let number = index + 1;
        if line.len() + 1 > MAX_LINE && !line.trim().is_empty() {
            d.error(
                Pos {
                    line: number,
                    col: 1,
                },
                format!(
                    "line is {} bytes long: tcpvsadm reads at most {MAX_LINE} bytes of a line at a time and would cut it",
                    line.len() + 1
                ),
            );
        }
        line_words(line, number, &mut tokens, d);
    }
    tokens
}

/// The words of `line` (line `number`), up to its end or a `#` comment, added to `tokens`.
fn line_words(line: &str, number: usize, tokens: &mut Vec<Token>, d: &mut Diags) {
    let chars: Vec<char> = line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if is_c_space(c) {
            i += 1;
            continue;
        }
        if c == '#' {
            break;
        }
        let col = i + 1;
        if c != '"' {
            i = bare_word(&chars, i, number, tokens);
            continue;
        }
        let Some((text, end)) = quoted_word(&chars, i + 1) else {
            d.error(
                Pos { line: number, col },
                "unterminated quoted word: tcpvsadm reads a quoted word within one line",
            );
            d.quiet.insert(number);
            break;
        };
        tokens.push(Token {
            text,
            line: number,
            col,
            quoted: true,
        });
        i = end;
    }
}

/// The text of the quoted word whose opening quote is before `start`, and the index after its
/// closing quote; `None` when the line ends first.
fn quoted_word(chars: &[char], start: usize) -> Option<(String, usize)> {
    let mut text = String::new();
    let mut j = start;
    while j < chars.len() {
        let c = chars[j];
        j += 1;
        if c == '"' {
            return Some((text, j));
        }
        text.push(c);
        // `\"` does not end the word; tcpvsadm keeps both characters.
        if c == '\\' && chars.get(j) == Some(&'"') {
            text.push('"');
            j += 1;
        }
    }
    None
}

/// The unquoted word at `start` (of line `number`) added to `tokens`; the index after it.
fn bare_word(chars: &[char], start: usize, number: usize, tokens: &mut Vec<Token>) -> usize {
    let mut i = start;
    while i < chars.len() && !is_c_space(chars[i]) {
        i += 1;
    }
    // `;` ending a word is a word of its own: the statement separator of the README's
    // one-line form (see [`Token::is_separator`]).
    let mut end = i;
    while end > start && chars[end - 1] == ';' {
        end -= 1;
    }
    if end > start {
        tokens.push(Token {
            text: chars[start..end].iter().collect(),
            line: number,
            col: start + 1,
            quoted: false,
        });
    }
    for at in end..i {
        tokens.push(Token {
            text: ";".to_string(),
            line: number,
            col: at + 1,
            quoted: false,
        });
    }
    i
}

/// `string_to_number`: a whole decimal number (sign allowed, as strtol) in `min..=max`.
pub(super) fn c_number(s: &str, min: i64, max: i64) -> Option<i64> {
    let v: i64 = s.parse().ok()?;
    (min..=max).contains(&v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import_ktcpvs::import;
    use std::collections::HashSet;

    fn words(source: &str) -> Vec<(String, usize, usize, bool)> {
        let mut d = Diags {
            file: "t".into(),
            list: Vec::new(),
            quiet: HashSet::new(),
        };
        let tokens = lex(source, &mut d);
        assert!(d.list.is_empty(), "{:?}", d.list);
        tokens
            .into_iter()
            .map(|t| (t.text, t.line, t.col, t.quoted))
            .collect()
    }

    fn texts(source: &str) -> Vec<String> {
        words(source).into_iter().map(|w| w.0).collect()
    }

    #[test]
    fn words_are_cut_as_tcpvsadm_cuts_them() {
        assert_eq!(
            texts("virtual web {\n\tlisten = 0.0.0.0:80 # the front\n}"),
            ["virtual", "web", "{", "listen", "=", "0.0.0.0:80", "}"]
        );
        // `#` comments only at the start of a word; inside a word it is a character.
        assert_eq!(texts("a#b #c d\n# all\ne"), ["a#b", "e"]);
        // A quoted word ends at its quote, even inside a word; `\"` keeps both characters.
        assert_eq!(texts(r#""a b"c "x\"y" "#), ["a b", "c", r#"x\"y"#]);
        assert_eq!(texts(r#""""#), [""]);
        // A `;` ending a word is a word of its own (the README's one-line form); elsewhere in
        // a word it is a character.
        assert_eq!(
            texts("a; b;; ;c \"x\";"),
            ["a", ";", "b", ";", ";", ";c", "x", ";"]
        );
        assert_eq!(words("80;")[1], (";".to_string(), 1, 3, false));
        // An unquoted word keeps its quotes.
        assert_eq!(texts(r#"ab"c"#), [r#"ab"c"#]);
        // Positions: lines from 1, columns in characters.
        assert_eq!(
            words("  rule = pattern \"^/é\" use")[3],
            ("^/é".to_string(), 1, 18, true)
        );
        assert_eq!(words("\r\nx\r\n")[0], ("x".to_string(), 2, 1, false));
    }

    #[test]
    fn an_unterminated_quote_is_an_error_at_its_column() {
        let report = import(
            "k.conf",
            "virtual web {\n  scheduler = http\n  rule = pattern \"^/img/ use server 1.2.3.4:80\n}\n",
        );
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        assert_eq!(
            report.errors[0].to_string(),
            "k.conf:3:18: unterminated quoted word: tcpvsadm reads a quoted word within one line"
        );
    }
}
