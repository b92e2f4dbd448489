//! The path as rules see it: the client's path in its normal form, so that `/x/../admin`,
//! `//admin` and `/%61dmin` meet the rules for `/admin` (they reach the same resource on
//! nearly every server, which would otherwise route around a `source` allow-list or a limit).
//!
//! The normal form: percent-encoded unreserved characters decoded (RFC 3986 section 6.2.2.2:
//! letters, digits, `-`, `.`, `_`, `~`), and `%2F`, `\` and `%5C` taken as `/` (RFC 3986 says
//! `%2F` is not `/`, but nginx decodes it before it resolves `..`, and IIS reads `\` as `/`:
//! a second attack round reached nginx's `/admin` with `/x/..%2Fadmin`); then dot segments
//! removed (section 5.2.4) and runs of `/` merged into one (as nginx's `merge_slashes` does).
//! Case is kept: paths are case-sensitive. A `;` stays: rules match it (KTCPVS patterns do),
//! so Tomcat's reading of `..;` as `..` is not followed.
//! Only rules see it (conditions, `$N`, `strip_prefix`, a redirect's path, a limit's `path`
//! key): the server gets the path as the client sent it unless a rule rewrites it, and the
//! access log shows it as sent.

/// Whether `path` may differ from its normal form: without `%`, `//` and `/.` it is normal
/// already (the common case: one pass over the bytes, nothing written).
pub fn may_need_normalizing(path: &[u8]) -> bool {
    // One pass: every request's path goes through here.
    let mut after_slash = false;
    for &b in path {
        if b == b'%' || b == b'\\' || (after_slash && (b == b'/' || b == b'.')) {
            return true;
        }
        after_slash = b == b'/';
    }
    false
}

/// The normal form of `path` in `out` (cleared first), when it differs from `path`.
pub fn normalize<'o>(path: &[u8], out: &'o mut Vec<u8>) -> Option<&'o [u8]> {
    if !path.starts_with(b"/") || !may_need_normalizing(path) {
        return None;
    }
    let mut decoded = Vec::with_capacity(path.len());
    decode_unreserved(path, &mut decoded);
    out.clear();
    remove_dot_segments(&decoded, out);
    (out[..] != *path).then_some(&out[..])
}

/// `%XX` of an unreserved character becomes the character, `%2F`, `%5C` and `\\` become `/`;
/// every other byte stays.
fn decode_unreserved(path: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            if let Some(byte) = path.get(i + 1..i + 3).and_then(hex_byte) {
                if byte.is_ascii_alphanumeric() || b"-._~/\\".contains(&byte) {
                    out.push(if byte == b'\\' { b'/' } else { byte });
                    i += 3;
                    continue;
                }
            }
        }
        out.push(if path[i] == b'\\' { b'/' } else { path[i] });
        i += 1;
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    let digit = |b: u8| (b as char).to_digit(16);
    Some((digit(two[0])? * 16 + digit(two[1])?) as u8)
}

/// `/a/./b/../c//d/` -> `/a/c/d/`: `.` dropped, `..` takes the segment before it (never past
/// the root), empty segments merged; a path that ended in a segment boundary (`/`, `/.`,
/// `/..`) keeps its final `/`.
fn remove_dot_segments(path: &[u8], out: &mut Vec<u8>) {
    let segments: Vec<&[u8]> = path[1..].split(|&b| b == b'/').collect();
    let ends_with_slash = matches!(segments.last(), Some(&(b"" | b"." | b"..")));
    let mut kept: Vec<&[u8]> = Vec::with_capacity(segments.len());
    for segment in segments {
        match segment {
            b"" | b"." => {}
            b".." => {
                kept.pop();
            }
            _ => kept.push(segment),
        }
    }
    for segment in &kept {
        out.push(b'/');
        out.extend_from_slice(segment);
    }
    if kept.is_empty() || ends_with_slash {
        out.push(b'/');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn normal(path: &str) -> String {
        let mut out = Vec::new();
        match normalize(path.as_bytes(), &mut out) {
            Some(n) => String::from_utf8(n.to_vec()).unwrap(),
            None => path.to_string(),
        }
    }

    #[test]
    fn the_forms_of_one_path_meet() {
        for path in [
            "/admin",
            "//admin",
            "/./admin",
            "/x/../admin",
            "/%61dmin",
            "/%2e/admin",
            "/x/%2E%2e/admin",
            "/../admin",
            "/a/b/../../admin",
            "/x/..%2Fadmin",
            "/%2Fadmin",
            "/x/%2e%2e%2fadmin",
            "/x/..\\admin",
            "/x/..%5Cadmin",
        ] {
            assert_eq!(normal(path), "/admin", "{path}");
        }
    }

    #[test]
    fn what_stays() {
        assert_eq!(normal("/admin/"), "/admin/");
        assert_eq!(normal("/a//"), "/a/");
        assert_eq!(normal("/a/."), "/a/");
        assert_eq!(normal("/a/b/.."), "/a/");
        assert_eq!(normal("/"), "/");
        assert_eq!(normal("//"), "/");
        assert_eq!(normal("/.."), "/");
        assert_eq!(normal("/a%2Fb"), "/a/b", "as nginx decodes it");
        assert_eq!(
            normal("/a%3Fb"),
            "/a%3Fb",
            "a reserved character stays encoded"
        );
        assert_eq!(normal("/a.jsp;jsessionid=1"), "/a.jsp;jsessionid=1");
        assert_eq!(normal("/a%20b"), "/a%20b");
        assert_eq!(normal("/a%zzb%"), "/a%zzb%");
        assert_eq!(normal("/ADMIN"), "/ADMIN");
        assert_eq!(normal("/a.b/.c/..d"), "/a.b/.c/..d");
        let mut out = Vec::new();
        assert_eq!(normalize(b"/plain/path.html", &mut out), None);
        assert_eq!(normalize(b"", &mut out), None);
    }

    #[test]
    fn the_quick_test_finds_every_path_that_may_change() {
        // Against its definition: a `%` or `\\` anywhere, or `/` followed by `/` or `.`.
        let by_definition = |p: &[u8]| {
            p.iter().any(|&b| b == b'%' || b == b'\\')
                || p.windows(2)
                    .any(|w| w[0] == b'/' && (w[1] == b'/' || w[1] == b'.'))
        };
        let alphabet = [b'/', b'.', b'a', b'%', b'\\', b';'];
        for n in 0..6u32 {
            for code in 0..alphabet.len().pow(n) {
                let mut c = code;
                let path: Vec<u8> = (0..n)
                    .map(|_| {
                        let b = alphabet[c % alphabet.len()];
                        c /= alphabet.len();
                        b
                    })
                    .collect();
                assert_eq!(
                    may_need_normalizing(&path),
                    by_definition(&path),
                    "{:?}",
                    String::from_utf8_lossy(&path)
                );
            }
        }
    }
}
