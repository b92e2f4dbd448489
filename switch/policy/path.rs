//! `path_rewrite` and `strip_prefix`: the path the server gets. The query goes on as the
//! client sent it; the access log keeps the target as the client sent it too.

use super::template::Template;

/// How a rule changes the path sent to the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathEdit {
    /// `path_rewrite = "/img/$1"`.
    Rewrite(Template),
    /// `strip_prefix = "/images"`: without its trailing slash; only on a segment boundary.
    StripPrefix(Box<[u8]>),
}

impl PathEdit {
    /// A `strip_prefix` value: a path of at least one segment; a trailing `/` is ignored.
    pub fn strip_prefix(prefix: &str) -> Result<PathEdit, String> {
        let trimmed = prefix.trim_end_matches('/');
        if !prefix.starts_with('/') || trimmed.is_empty() {
            return Err(format!(
                "strip_prefix {prefix:?} must be a path of at least one segment, like \"/images\""
            ));
        }
        if let Some(b) = trimmed.bytes().find(|b| !is_path_byte(*b)) {
            return Err(format!(
                "strip_prefix {prefix:?} holds {:?}, which a path cannot",
                b as char
            ));
        }
        Ok(PathEdit::StripPrefix(trimmed.as_bytes().into()))
    }

    /// Whether the path regex must be run for its captures.
    pub fn uses_groups(&self) -> bool {
        matches!(self, PathEdit::Rewrite(t) if t.uses_groups())
    }

    /// Writes the new path for `path` into `out` (cleared first).
    pub fn apply(
        &self,
        path: &[u8],
        captures: Option<&regex::bytes::Captures<'_>>,
        out: &mut Vec<u8>,
    ) {
        out.clear();
        match self {
            PathEdit::Rewrite(template) => {
                template.expand(captures, out);
                if out.first() != Some(&b'/') {
                    out.insert(0, b'/');
                }
            }
            PathEdit::StripPrefix(prefix) => match path.strip_prefix(&**prefix) {
                Some([]) => out.push(b'/'),
                Some(rest) if rest.starts_with(b"/") => out.extend_from_slice(rest),
                // `/static` does not strip `/staticfoo`.
                _ => out.extend_from_slice(path),
            },
        }
    }
}

/// Bytes a path may hold as written (RFC 3986 `pchar`, `/` and `%`): what a literal part of a
/// rewritten path may hold, so that the request line stays one line of one target.
pub fn is_path_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::bytes::Regex;

    fn strip(prefix: &str, path: &[u8]) -> String {
        let mut out = Vec::new();
        PathEdit::strip_prefix(prefix)
            .unwrap()
            .apply(path, None, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strips_on_segment_boundaries_only() {
        assert_eq!(strip("/static", b"/static"), "/");
        assert_eq!(strip("/static", b"/static/"), "/");
        assert_eq!(strip("/static", b"/static/a/b.css"), "/a/b.css");
        assert_eq!(strip("/static/", b"/static/a"), "/a");
        assert_eq!(strip("/static", b"/staticfoo"), "/staticfoo");
        assert_eq!(strip("/static", b"/other"), "/other");
        assert!(PathEdit::strip_prefix("/").is_err());
        assert!(PathEdit::strip_prefix("static").is_err());
        assert!(PathEdit::strip_prefix("/a b").is_err());
    }

    #[test]
    fn rewrites_with_captures() {
        let re = Regex::new("^/images/(.*)").unwrap();
        let edit = PathEdit::Rewrite(Template::parse("/img/$1", Some(1)).unwrap());
        let captures = re.captures(b"/images/a.png");
        let mut out = Vec::new();
        edit.apply(b"/images/a.png", captures.as_ref(), &mut out);
        assert_eq!(out, b"/img/a.png");
        // A template that expands to no leading slash still sends a path.
        let edit = PathEdit::Rewrite(Template::parse("$1", Some(1)).unwrap());
        edit.apply(b"/images/a.png", captures.as_ref(), &mut out);
        assert_eq!(out, b"/a.png");
    }
}
