//! `$N` in a redirect's `path` and in `path_rewrite`: the rule's path captures, filled in per
//! request. Parsed once when the rule file is read, so a request only copies bytes.

/// A piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(Box<[u8]>),
    /// `$N`: group N of the rule's path regex (`$0`: the whole match).
    Group(usize),
}

/// A text with `$N` references (`$$` is a `$`; a `$` not followed by a digit is itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// A `$N` that names a group the path regex does not have.
#[derive(Debug, PartialEq, Eq)]
pub struct NoSuchGroup {
    pub group: usize,
    /// Byte offset of the `$` in the template text.
    pub at: usize,
}

impl Template {
    /// Parses `text`; every `$N` is checked against `groups`, the number of capture groups of
    /// the rule's path regex (`None`: the rule has no `path`, so no group at all, not even
    /// `$0`).
    pub fn parse(text: &str, groups: Option<usize>) -> Result<Template, NoSuchGroup> {
        let bytes = text.as_bytes();
        let mut parts = Vec::new();
        let mut literal = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b != b'$' {
                literal.push(b);
                i += 1;
                continue;
            }
            if bytes.get(i + 1) == Some(&b'$') {
                literal.push(b'$');
                i += 2;
                continue;
            }
            let digits = bytes[i + 1..]
                .iter()
                .take_while(|d| d.is_ascii_digit())
                .count();
            if digits == 0 {
                literal.push(b'$');
                i += 1;
                continue;
            }
            let number = &text[i + 1..i + 1 + digits];
            // More digits than any regex has groups: out of range like any other.
            let group = number.parse::<usize>().unwrap_or(usize::MAX);
            match groups {
                Some(n) if group <= n => {}
                _ => return Err(NoSuchGroup { group, at: i }),
            }
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal).into()));
            }
            parts.push(Part::Group(group));
            i += 1 + digits;
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal.into()));
        }
        Ok(Template { parts })
    }

    /// Whether `text` has a `$` before a name or a brace (`$name`, `${1}`), which is taken
    /// literally, though it was likely meant as a group (named groups are not supported).
    pub fn looks_like_a_named_group(text: &str) -> bool {
        let bytes = text.as_bytes();
        let mut i = 0;
        while i + 1 < bytes.len() {
            match (bytes[i], bytes[i + 1]) {
                (b'$', b'$') => i += 2,
                (b'$', next) if next.is_ascii_alphabetic() || next == b'{' || next == b'_' => {
                    return true
                }
                _ => i += 1,
            }
        }
        false
    }

    /// Whether any part is a `$N` (the request's path must then be matched for captures).
    pub fn uses_groups(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Group(_)))
    }

    /// The literal bytes of the template, for checks of what it may contain.
    pub fn literals(&self) -> impl Iterator<Item = u8> + '_ {
        self.parts.iter().flat_map(|p| match p {
            Part::Literal(bytes) => bytes.iter().copied(),
            Part::Group(_) => [].iter().copied(),
        })
    }

    /// Appends the template to `out`, `$N` replaced by group N of `captures` (empty when the
    /// group did not take part in the match, or there are no captures).
    pub fn expand(&self, captures: Option<&regex::bytes::Captures<'_>>, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Literal(bytes) => out.extend_from_slice(bytes),
                Part::Group(n) => {
                    if let Some(group) = captures.and_then(|c| c.get(*n)) {
                        out.extend_from_slice(group.as_bytes());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::bytes::Regex;

    fn expand(template: &str, regex: &str, path: &[u8]) -> String {
        let re = Regex::new(regex).unwrap();
        let t = Template::parse(template, Some(re.captures_len() - 1)).unwrap();
        let captures = re.captures(path);
        let mut out = Vec::new();
        t.expand(captures.as_ref(), &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn groups_are_filled_in() {
        assert_eq!(expand("/new/$1", "^/old/(.*)$", b"/old/a/b"), "/new/a/b");
        assert_eq!(expand("/$2/$1", "^/(a)/(b)", b"/a/b"), "/b/a");
        assert_eq!(expand("$0!", "^/x", b"/x/y"), "/x!");
        // An optional group that did not match is empty.
        assert_eq!(expand("/p$1", "^/q(z)?", b"/q"), "/p");
    }

    #[test]
    fn dollars_that_are_not_groups() {
        assert_eq!(expand("/a$$1", "^/(x)", b"/x"), "/a$1");
        assert_eq!(expand("/a$b$", "^/(x)", b"/x"), "/a$b$");
    }

    #[test]
    fn named_groups_are_noticed() {
        assert!(Template::looks_like_a_named_group("/x/$name"));
        assert!(Template::looks_like_a_named_group("/x/${1}"));
        assert!(!Template::looks_like_a_named_group("/x/$1/$$name"));
        assert!(!Template::looks_like_a_named_group("/x/$"));
    }

    #[test]
    fn groups_past_the_regex_are_refused() {
        assert_eq!(
            Template::parse("/$3", Some(2)),
            Err(NoSuchGroup { group: 3, at: 1 })
        );
        assert_eq!(
            Template::parse("/x/$1", None),
            Err(NoSuchGroup { group: 1, at: 3 })
        );
        assert!(Template::parse("/$99999999999999999999999", Some(2)).is_err());
        assert!(Template::parse("/plain", None).is_ok());
    }
}
