//! `tcpvs import-ktcpvs FILE`: a KTCPVS configuration, as `tcpvsadm -f FILE` reads it, printed
//! as an equivalent tcpvs rule file, with a warning (and a comment in the output) for each part
//! that has no equivalent, and every error of a broken file as `FILE:LINE:COL: message`.
//!
//! The parser is written by hand: the format is tcpvsadm's own small grammar (white-space
//! separated words, one-line quoted words, `#` comments at the start of a word, `virtual NAME {
//! KEY = VALUE ... }`), which no parser crate reads, and reproducing tcpvsadm's quirks (the `=`
//! must stand alone, `\"` keeps its backslash) matters more than the grammar's size.
//!
//! What KTCPVS did, read from its sources (github.com/yubo/ktcpvs-matrix; file:function):
//! - Grammar, `userspace/tcpvs_config.c`: `get_next_token` (words, quotes, comments),
//!   `parse_service` (`virtual NAME {` ... a word beginning with `}`), `parse_server` (`server =
//!   ADDR WEIGHT`, weight 1..65535 and required), `parse_rule` (`rule = pattern "ERE" [match N]
//!   use server ADDR`, N 0..10 and anything else read as 0), the process knobs (1..65535);
//!   keywords compare case-insensitively (`find_command`: strcasecmp). A setting left out is 0:
//!   the file's services start from a zeroed struct, none of tcpvsadm's command-line defaults.
//! - Addresses, `userspace/helper.c:parse_addrport`: `HOST[:PORT]`, the host by `inet_aton`
//!   (`010.0.0.1` is octal, `10.1` fills the last part) or the first IPv4 address of the name;
//!   the port a number or a name from /etc/services (`getservbyname(name, "tcp")`).
//! - Loading, `userspace/tcpvsadm.c:load_configfile`: per service, every server, then every rule
//!   in file order (`tcp_vs_ctl.c:tcp_vs_add_rule`). A rule's server must be a server of the
//!   service (ENOENT) and in no other rule (EBUSY). A rule whose pattern begins with the whole
//!   pattern of an existing rule joins that rule (`strncmp` over the existing pattern's length),
//!   its own pattern unused. A new rule goes to the front of the list, except `.*` and `^/.*`,
//!   which go to the back: rules are tried from the last written to the first, those two last.
//! - Matching, `tcp_vs_http.c:tcp_vs_http_matchrule` (the others alike): the request-target as the
//!   client sent it, query included, not decoded, against each rule's POSIX extended regex
//!   (`regcomp(REG_EXTENDED)`, Henry Spencer's `regex/regcomp.c`, matched anywhere unless
//!   anchored); the first rule that matches decides; among its servers, the fewest connections
//!   per weight (weight 0 never). `http` and `hhttp` decide once per connection, `chttp` and
//!   `phttp` per request. No rule matched, or no server: `tcp_vs.c:tcp_vs_conn_handle` hands the
//!   connection to the `redirect` address (`redirect.c`, a local listener) when there is one,
//!   else closes it (`chttp` always closes it). `fault.c:fault_redirect` first tries the first
//!   server marked active, which only `phttp` marks.
//! - `hhttp`, `tcp_vs_hhttp.c:tcp_vs_hhttp_matchrule`: the byte sum of capture `match N` of the
//!   first matching rule, modulo the rule's servers, picks one (weights ignored); a capture that
//!   starts at the URI's first byte gets no server (`if (start && end)`).
//! - `chttp`, `tcp_vs_chttp.c`: the rules as `http`, but a request with a known `KTCPVS_SID`
//!   cookie goes to that session's server before any rule; the cookie is set on responses that set
//!   a cookie of their own.
//! - `phttp`, `tcp_vs_phttp.c`: per request on keep-alive connections; this tree selects with
//!   `tcp_vs_hhttp_matchrule` (hash of match N), upstream KTCPVS with least connections.
//! - `wlc`, `tcp_vs_wlc.c`: least connections per weight over all servers; rules unused.
//! - `maxclients` bounds a service's kernel threads, one client connection each (`tcp_vs.c`);
//!   more connections wait in the listen queue. `startservers`, `minspareservers` and
//!   `maxspareservers` size that thread pool.
//!
//! How it maps: see [`import`] and README "Coming from KTCPVS".

mod address;
mod convert;
mod ere;
mod lex;
mod model;
mod output;
mod parse;

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use convert::Lowering;
use lex::lex;
use output::render;
use parse::Parser;

// ---------------------------------------------------------------- diagnostics

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    Error,
    Warning,
}

/// A problem in the KTCPVS file. Errors point at a column, warnings at a line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub line: usize,
    pub column: Option<usize>,
    pub severity: Severity,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.severity, self.column) {
            (Severity::Error, Some(column)) => {
                write!(
                    f,
                    "{}:{}:{}: {}",
                    self.file, self.line, column, self.message
                )
            }
            (Severity::Error, None) => write!(f, "{}:{}: {}", self.file, self.line, self.message),
            (Severity::Warning, _) => {
                write!(f, "{}:{}: warning: {}", self.file, self.line, self.message)
            }
        }
    }
}

/// What `import` made of a KTCPVS file.
#[derive(Debug)]
pub struct Report {
    /// The tcpvs rule file; empty when there are errors.
    pub rules: String,
    /// Every error, in file order; none means `rules` is complete and passes `tcpvs check`.
    pub errors: Vec<Diagnostic>,
    /// What has no tcpvs equivalent or behaves differently, in file order; each is also a
    /// comment in `rules`. None when there are errors.
    pub warnings: Vec<Diagnostic>,
}

impl Report {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// Errors and warnings together, in file order.
    pub fn diagnostics(&self) -> Vec<&Diagnostic> {
        let mut all: Vec<&Diagnostic> = self.errors.iter().chain(&self.warnings).collect();
        all.sort_by_key(|d| (d.line, d.column.unwrap_or(0)));
        all
    }
}

struct Diags {
    file: String,
    list: Vec<Diagnostic>,
    /// Lines whose words could not be read: later errors there would only echo that one.
    quiet: HashSet<usize>,
}

impl Diags {
    fn error(&mut self, at: Pos, message: impl Into<String>) {
        if self.quiet.contains(&at.line) {
            return;
        }
        self.list.push(Diagnostic {
            file: self.file.clone(),
            line: at.line,
            column: Some(at.col),
            severity: Severity::Error,
            message: message.into(),
        });
    }

    fn warn(&mut self, line: usize, message: impl Into<String>) {
        self.list.push(Diagnostic {
            file: self.file.clone(),
            line,
            column: None,
            severity: Severity::Warning,
            message: message.into(),
        });
    }

    fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }
}

/// 1-based line and character column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pos {
    line: usize,
    col: usize,
}

// ---------------------------------------------------------------- entry points

/// Reads `path` and converts it; `Err` is the message when the file cannot be read.
pub fn import_file(path: &Path) -> Result<Report, String> {
    let name = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
    Ok(import(&name, &String::from_utf8_lossy(&bytes)))
}

/// Converts the KTCPVS configuration `source`, naming it `file` in messages.
///
/// Each `virtual NAME` becomes `[virtual.NAME]` with its `listen`. With `http`, `hhttp`,
/// `chttp` and `phttp`, each rule's servers become a pool and the rule a `path` rule, listed in
/// the order KTCPVS tried them; `.*` or `^/.*` becomes `default_pool`, else the `redirect`
/// address does. Pools schedule as KTCPVS did: `wlc` (`http`, `phttp` without `match`), `hash`
/// on capture N with no load bound (`hhttp`, `phttp` with `match N`), `cookie` named `KTCPVS_SID`
/// over `wlc` (`chttp`). `wlc`, `lc`, `rr` and `wrr` make one pool of every server. Weights carry
/// over (KTCPVS 1..65535 fits tcpvs 0..=65535); `redirect` becomes a backup server of each pool;
/// `maxclients` becomes `[switch] max_clients` (summed over the services).
pub fn import(file: &str, source: &str) -> Report {
    let mut d = Diags {
        file: file.to_string(),
        list: Vec::new(),
        quiet: HashSet::new(),
    };
    let tokens = lex(source, &mut d);
    let (services, statements) = Parser::new(&tokens, &mut d).file();
    let lines: Vec<&str> = source.split('\n').collect();
    let out = Lowering::new(&lines, &statements, &mut d).run(&services);
    if services.is_empty() && !d.has_errors() {
        // An empty file, or comments only: nothing to convert (found by fuzzing, I1).
        d.error(
            Pos { line: 1, col: 1 },
            "no virtual service: a KTCPVS configuration has at least one `virtual NAME { ... }`"
                .to_string(),
        );
    }
    let mut rules = String::new();
    if !d.has_errors() {
        rules = render(&out);
        // The contract: what we print, `tcpvs check` accepts. A refusal is our bug.
        if let Err(errors) = crate::config::Config::parse("(generated rule file)", &rules) {
            for e in errors.0 {
                d.error(
                    Pos { line: 1, col: 1 },
                    format!("internal error, the generated rule file is refused: {e}"),
                );
            }
            rules.clear();
        }
    }
    let (mut errors, mut warnings): (Vec<_>, Vec<_>) = d
        .list
        .into_iter()
        .partition(|x| x.severity == Severity::Error);
    errors.sort_by_key(|e| (e.line, e.column));
    warnings.sort_by_key(|w| w.line);
    // Warnings about a file that is refused would describe a conversion that did not happen
    // (a server "in no rule" because its rule's pattern was refused): the errors come first.
    if !errors.is_empty() {
        warnings.clear();
    }
    Report {
        rules,
        errors,
        warnings,
    }
}

// ---------------------------------------------------------------- tests

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_of_a_broken_file_is_reported_with_line_and_column() {
        let report = import(
            "bad.conf",
            "virtual web {\n\
             listen=0.0.0.0:80\n\
             scheduler = http\n\
             server = 10.0.0.1:80\n\
             server = 10.0.0.2:80 x\n\
             rule = pattern \"*oops\" use server 10.0.0.2:80\n\
             rule = pattern \"^/a\" use server 10.0.0.9:80\n\
             colour = blue\n\
             }\n\
             bogus\n",
        );
        let errors: Vec<String> = report.errors.iter().map(|e| e.to_string()).collect();
        assert!(
            errors[0].starts_with("bad.conf:2:1: write `listen = 0.0.0.0:80` with spaces"),
            "{errors:#?}"
        );
        assert!(
            errors[1].starts_with("bad.conf:4:10: `server = ADDRESS WEIGHT` needs the weight"),
            "{errors:#?}"
        );
        assert!(
            errors[2].starts_with("bad.conf:5:22: weight `x`"),
            "{errors:#?}"
        );
        assert!(
            errors[3].starts_with("bad.conf:7:33: server 10.0.0.9:80 is not a `server`"),
            "{errors:#?}"
        );
        assert!(
            errors[4].starts_with("bad.conf:8:1: unknown setting `colour`"),
            "{errors:#?}"
        );
        assert!(
            errors[5].starts_with("bad.conf:10:1: expected `virtual NAME {`"),
            "{errors:#?}"
        );
        assert_eq!(errors.len(), 6, "{errors:#?}");
        assert!(report.rules.is_empty());
        // Server 10.0.0.2 was refused, so its rule's regex was never compiled: fix the weight
        // and the pattern error appears, at the pattern's first character.
        let report = import(
            "bad.conf",
            "virtual web {\nlisten = 0.0.0.0:80\nscheduler = http\nserver = 10.0.0.2:80 1\n\
             rule = pattern \"*oops\" use server 10.0.0.2:80\n}\n",
        );
        assert_eq!(
            report.errors[0].to_string(),
            "bad.conf:5:17: invalid pattern \"*oops\": `*` repeats nothing (REG_BADRPT)"
        );
    }

    #[test]
    fn a_missing_brace_or_scheduler_is_an_error() {
        let r = import("k", "virtual web {\n listen = 1.2.3.4:80\n");
        assert!(r.errors[0].message.contains("not closed"), "{:?}", r.errors);
        let r = import(
            "k",
            "virtual web{\n listen = 1.2.3.4:80\n scheduler = wlc\n server = 1.2.3.5:80 1\n}\n",
        );
        assert!(
            r.errors[0].message.contains("space before `{`"),
            "{:?}",
            r.errors
        );
        let r = import(
            "k",
            "virtual web {\n listen = 1.2.3.4:80\n server = 1.2.3.5:80 1\n}\n",
        );
        assert!(
            r.errors[0].message.contains("no `scheduler`"),
            "{:?}",
            r.errors
        );
        let r = import("k", "virtual web {\n scheduler = HTTP\n}\n");
        assert!(
            r.errors[0].message.contains("unknown scheduler `HTTP`"),
            "{:?}",
            r.errors
        );
    }
}
