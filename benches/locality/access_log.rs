//! A real access log as the workload: Common or Combined Log Format lines (`host ident user
//! [date] "METHOD target VERSION" status bytes ...`), replayed in their order. Each distinct
//! path (query excluded, as `lard`'s default key) becomes an object whose size is the largest
//! body the log shows for it. Only successful GETs with a body are kept (200, bytes > 0): a 304
//! or a 404 says nothing about what a cache would hold.

use super::workload::Workload;
use std::collections::HashMap;

pub struct Parsed {
    pub workload: Workload,
    pub skipped: usize,
}

/// The path and body size of one line, if it is a successful GET with a body.
fn parse_line(line: &str) -> Option<(&str, u64)> {
    let open = line.find('"')?;
    let rest = &line[open + 1..];
    let close = rest.find('"')?;
    let mut request = rest[..close].split(' ');
    let (method, target) = (request.next()?, request.next()?);
    let mut after = rest[close + 1..].split_whitespace();
    let (status, bytes) = (after.next()?, after.next()?);
    if method != "GET" || status != "200" {
        return None;
    }
    let bytes: u64 = bytes.parse().ok().filter(|&b| b > 0)?;
    let path = target.split('?').next()?;
    Some((path, bytes))
}

pub fn parse(text: &str, source: &str) -> Parsed {
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut sizes: Vec<u64> = Vec::new();
    let mut trace = Vec::new();
    let mut skipped = 0;
    for line in text.lines() {
        let Some((path, bytes)) = parse_line(line) else {
            skipped += 1;
            continue;
        };
        let next = sizes.len() as u32;
        let id = *ids.entry(path).or_insert(next);
        if id == next {
            sizes.push(bytes);
        }
        let size = &mut sizes[id as usize];
        *size = (*size).max(bytes);
        trace.push(id);
    }
    Parsed {
        workload: Workload {
            description: format!(
                "access log {source}: {} requests for {} objects ({skipped} lines skipped)",
                trace.len(),
                sizes.len()
            ),
            sizes,
            trace,
        },
        skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn common_and_combined_lines() {
        let log = concat!(
            "127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] \"GET /a.gif HTTP/1.0\" 200 2326\n",
            "127.0.0.1 - frank [10/Oct/2000:13:55:37 -0700] \"GET /b.html?x=1 HTTP/1.1\" 200 100 \"http://ref/\" \"Mozilla\"\n",
            "127.0.0.1 - - [10/Oct/2000:13:55:38 -0700] \"GET /a.gif HTTP/1.0\" 304 -\n",
            "127.0.0.1 - - [10/Oct/2000:13:55:39 -0700] \"POST /form HTTP/1.0\" 200 10\n",
            "garbage\n",
            "127.0.0.1 - - [10/Oct/2000:13:55:40 -0700] \"GET /a.gif HTTP/1.0\" 200 3000\n",
        );
        let parsed = parse(log, "test");
        assert_eq!(parsed.workload.trace, vec![0, 1, 0]);
        assert_eq!(parsed.workload.sizes, vec![3000, 100]);
        assert_eq!(parsed.skipped, 3);
    }
}
