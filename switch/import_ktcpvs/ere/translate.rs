//! A parsed POSIX extended regex written in the syntax of the Rust `regex` crate, so that it
//! matches what regcomp's matched.

use super::{ClassItem, Node};

/// The same expression in the syntax of the Rust `regex` crate. Capture groups keep their
/// numbers. `.` does not match a newline there; a request-target has none.
pub(in crate::import_ktcpvs) fn to_rust(node: &Node) -> String {
    let mut out = String::new();
    emit(node, &mut out);
    out
}

fn emit(node: &Node, out: &mut String) {
    match node {
        Node::Empty => {}
        Node::Lit(c) => literal(*c, out),
        Node::Any => out.push('.'),
        Node::Class { negated, items } => {
            out.push('[');
            if *negated {
                out.push('^');
            }
            for item in items {
                match item {
                    ClassItem::Char(c) => class_char(*c, out),
                    ClassItem::Range(a, b) => {
                        class_char(*a, out);
                        out.push('-');
                        class_char(*b, out);
                    }
                    ClassItem::Named(n) => {
                        out.push_str("[:");
                        out.push_str(n);
                        out.push_str(":]");
                    }
                }
            }
            out.push(']');
        }
        Node::Bol => out.push('^'),
        Node::Eol => out.push('$'),
        // Spencer's words are ASCII letters, digits and `_`.
        Node::WordStart => out.push_str(r"(?-u:\b{start})"),
        Node::WordEnd => out.push_str(r"(?-u:\b{end})"),
        Node::Group(inner) => {
            out.push('(');
            emit(inner, out);
            out.push(')');
        }
        Node::Concat(items) => items.iter().for_each(|n| emit(n, out)),
        Node::Alt(branches) => {
            for (i, b) in branches.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                emit(b, out);
            }
        }
        Node::Repeat { node, min, max } => {
            if matches!(
                **node,
                Node::Bol | Node::Eol | Node::WordStart | Node::WordEnd | Node::Empty
            ) {
                out.push_str("(?:");
                emit(node, out);
                out.push(')');
            } else {
                emit(node, out);
            }
            match (min, max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => out.push_str(&format!("{{{m},}}")),
                (m, Some(n)) if m == n => out.push_str(&format!("{{{m}}}")),
                (m, Some(n)) => out.push_str(&format!("{{{m},{n}}}")),
            }
        }
    }
}

fn literal(c: char, out: &mut String) {
    if c.is_control() {
        out.push_str(&format!("\\x{{{:x}}}", c as u32));
    } else {
        // The characters that are syntax outside `[...]` (`-`, `&`, `~` are only inside).
        if matches!(
            c,
            '\\' | '.' | '+' | '*' | '?' | '(' | ')' | '|' | '[' | ']' | '{' | '}' | '^' | '$'
        ) {
            out.push('\\');
        }
        out.push(c);
    }
}

fn class_char(c: char, out: &mut String) {
    if c.is_control() {
        out.push_str(&format!("\\x{{{:x}}}", c as u32));
    } else {
        if matches!(c, '\\' | '[' | ']' | '^' | '-' | '&' | '~') {
            out.push('\\');
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use crate::import_ktcpvs::ere;

    fn rust(pattern: &str) -> String {
        ere::to_rust(&ere::parse(pattern).unwrap().node)
    }

    #[test]
    fn posix_patterns_become_rust_regexes_that_match_the_same() {
        assert_eq!(rust("^/cgi-bin/"), r"^/cgi-bin/");
        assert_eq!(rust(r"\.(gif|jpe?g)$"), r"\.(gif|jpe?g)$");
        assert_eq!(rust("/users/([^/]+)/.*"), "/users/([^/]+)/.*");
        // Spencer reads `\d` as `d`, and a backslash in brackets as itself.
        assert_eq!(rust(r"\d"), "d");
        assert_eq!(rust(r"[\.]"), r"[\\.]");
        // `{` not followed by a digit is a character.
        assert_eq!(rust("a{b"), r"a\{b");
        assert_eq!(rust("a{2,3}b{1,}c{4}"), "a{2,3}b+c{4}");
        assert_eq!(rust("[]a-]"), r"[\]a\-]");
        assert_eq!(rust("[^]]"), r"[^\]]");
        assert_eq!(rust("[[:alpha:]_-]"), r"[[:alpha:]_\-]");
        assert_eq!(rust("[[.hyphen.]a]"), r"[\-a]");
        assert_eq!(rust("[[=a=]]"), "[a]");
        assert_eq!(rust("[[:<:]]img"), r"(?-u:\b{start})img");
        assert_eq!(rust("$*"), "(?:$)*");
        assert_eq!(rust("()a"), "()a");
        assert_eq!(rust("a&b~c#"), r"a&b~c#");
        for p in [
            "^/cgi-bin/",
            "[[:<:]]a[[:>:]]",
            "$*",
            "()a",
            "[]a-]",
            "a&b~c#",
            r"[\.]",
        ] {
            regex::bytes::Regex::new(&rust(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        }
        let same = |p: &str, yes: &[&str], no: &[&str]| {
            let r = regex::bytes::Regex::new(&rust(p)).unwrap();
            for s in yes {
                assert!(r.is_match(s.as_bytes()), "{p} should match {s}");
            }
            for s in no {
                assert!(!r.is_match(s.as_bytes()), "{p} should not match {s}");
            }
        };
        same(r"\d+", &["/ddd"], &["/123"]);
        same("[[:digit:]]{3}", &["/a123"], &["/a12"]);
        same(r"[\.]x", &["\\x", ".x"], &["ax"]);
    }
}
