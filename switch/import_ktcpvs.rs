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

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4, ToSocketAddrs};
use std::path::Path;

/// tcpvsadm reads lines with `fgets(line, 512)`: longer lines are split into pieces.
const MAX_LINE: usize = 511;
/// `KTCPVS_PATTERN_MAXLEN` (tcp_vs.h): a longer pattern is cut without its terminating NUL.
const MAX_PATTERN: usize = 255;
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
/// The schedulers KTCPVS ships (userspace/SCHEDULERS) and the tcpvs modules of the same name.
const SCHEDULERS: &str = "wlc, http, hhttp, chttp, phttp (and lc, rr, wrr, as tcpvs has them)";
/// The cookie `chttp` set (tcp_vs_chttp.c:inject_session_id_cookie).
const KTCPVS_COOKIE: &str = "KTCPVS_SID";

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
    let services = Parser {
        tokens: &tokens,
        pos: 0,
        d: &mut d,
    }
    .file();
    let lines: Vec<&str> = source.split('\n').collect();
    let out = Lowering {
        lines: &lines,
        d: &mut d,
        pool_names: HashSet::new(),
        service_names: HashSet::new(),
    }
    .run(&services);
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

// ---------------------------------------------------------------- words

#[derive(Clone, Debug, PartialEq, Eq)]
struct Token {
    text: String,
    line: usize,
    col: usize,
    quoted: bool,
}

impl Token {
    fn pos(&self) -> Pos {
        Pos {
            line: self.line,
            col: self.col,
        }
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// The words of the file, as `get_next_token` cuts them.
fn lex(source: &str, d: &mut Diags) -> Vec<Token> {
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
            if c == '"' {
                let mut text = String::new();
                let mut j = i + 1;
                let mut closed = false;
                while j < chars.len() {
                    let c = chars[j];
                    j += 1;
                    if c == '"' {
                        closed = true;
                        break;
                    }
                    text.push(c);
                    // `\"` does not end the word; tcpvsadm keeps both characters.
                    if c == '\\' && chars.get(j) == Some(&'"') {
                        text.push('"');
                        j += 1;
                    }
                }
                if !closed {
                    d.error(
                        Pos { line: number, col },
                        "unterminated quoted word: tcpvsadm reads a quoted word within one line",
                    );
                    d.quiet.insert(number);
                    break;
                }
                tokens.push(Token {
                    text,
                    line: number,
                    col,
                    quoted: true,
                });
                i = j;
            } else {
                let start = i;
                while i < chars.len() && !is_c_space(chars[i]) {
                    i += 1;
                }
                tokens.push(Token {
                    text: chars[start..i].iter().collect(),
                    line: number,
                    col,
                    quoted: false,
                });
            }
        }
    }
    tokens
}

// ---------------------------------------------------------------- the file's structure

/// `HOST[:PORT]` as KTCPVS resolved it; `port` is `None` when none was written (0 to KTCPVS).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Addr {
    ip: Ipv4Addr,
    port: Option<u16>,
    text: String,
}

impl Addr {
    /// The address KTCPVS compared: a missing port is 0.
    fn key(&self) -> (Ipv4Addr, u16) {
        (self.ip, self.port.unwrap_or(0))
    }

    /// As written, and as read when that differs: `web1:www (10.0.0.1:80)`.
    fn shown(&self) -> String {
        let read = self.to_string();
        if read == self.text {
            read
        } else {
            format!("{} ({read})", self.text)
        }
    }
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ip, self.port.unwrap_or(0))
    }
}

#[derive(Debug)]
struct Setting<T> {
    value: T,
    /// Where the value is written.
    at: Pos,
}

#[derive(Debug)]
struct Knob {
    key: &'static str,
    value: u32,
    line: usize,
}

#[derive(Debug)]
struct KServer {
    addr: Addr,
    at: Pos,
    weight: u32,
    line: usize,
}

#[derive(Debug)]
struct KRule {
    pattern: String,
    pattern_at: Pos,
    /// `match N`, and the line it is on.
    match_num: Option<u32>,
    target: Addr,
    target_at: Pos,
    line: usize,
}

#[derive(Debug)]
struct KService {
    name: String,
    at: Pos,
    name_at: Pos,
    listen: Option<Setting<Addr>>,
    scheduler: Option<Setting<String>>,
    redirect: Option<Setting<Addr>>,
    knobs: Vec<Knob>,
    servers: Vec<KServer>,
    rules: Vec<KRule>,
    /// Lines of settings a later line of the same key replaced.
    overridden: Vec<usize>,
    /// Servers whose line has an error: rules naming them are not checked further.
    broken: Vec<(Ipv4Addr, u16)>,
}

// ---------------------------------------------------------------- parser

struct Parser<'a> {
    tokens: &'a [Token],
    pos: usize,
    d: &'a mut Diags,
}

/// Statements skip the rest of their line after an error, so one mistake is reported once.
type Parsed<T> = Result<T, ()>;

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
                || t.text.starts_with('}')
                || t.text.eq_ignore_ascii_case("virtual"))
    }

    /// Skips the rest of `line`.
    fn skip_line(&mut self, line: usize) {
        while self.peek().is_some_and(|t| t.line == line) {
            self.pos += 1;
        }
    }

    fn last_line(&self) -> usize {
        self.tokens
            .get(self.pos.saturating_sub(1))
            .map_or(1, |t| t.line)
    }

    /// The next word, unless the file ends or a later line begins a new statement there (the
    /// value is missing; tcpvsadm would have taken that word and failed on it).
    fn value(&mut self, after: &Token, missing: &str) -> Parsed<Token> {
        match self.peek() {
            Some(t) if t.line == after.line || !Self::starts_statement(t) => {
                Ok(self.bump().expect("peeked"))
            }
            _ => {
                self.d.error(after.pos(), missing.to_string());
                Err(())
            }
        }
    }

    fn file(mut self) -> Vec<KService> {
        let mut services = Vec::new();
        while let Some(t) = self.bump() {
            if t.text.eq_ignore_ascii_case("virtual") && !t.quoted {
                if let Some(s) = self.service(&t) {
                    services.push(s);
                }
            } else {
                self.d.error(
                    t.pos(),
                    format!("expected `virtual NAME {{`, found `{}`", t.text),
                );
                self.skip_line(t.line);
            }
        }
        services
    }

    fn service(&mut self, keyword: &Token) -> Option<KService> {
        let name = match self.peek() {
            Some(t) if t.text != "{" && !(t.line != keyword.line && Self::starts_statement(t)) => {
                self.bump().expect("peeked")
            }
            Some(t) if t.text == "{" => {
                // Read the body anyway, for its errors; the service itself is dropped.
                self.d.error(
                    keyword.pos(),
                    "`virtual` needs a name before `{`: `virtual NAME {`",
                );
                let mut nameless = keyword.clone();
                nameless.text.clear();
                nameless
            }
            _ => {
                self.d.error(
                    keyword.pos(),
                    "`virtual` needs a name and `{`: `virtual NAME {`",
                );
                self.skip_line(keyword.line);
                return None;
            }
        };
        let mut service = KService {
            name: name.text.clone(),
            at: keyword.pos(),
            name_at: name.pos(),
            listen: None,
            scheduler: None,
            redirect: None,
            knobs: Vec::new(),
            servers: Vec::new(),
            rules: Vec::new(),
            overridden: Vec::new(),
            broken: Vec::new(),
        };
        match self.peek() {
            Some(t) if t.text == "{" => {
                self.bump();
            }
            Some(t) if t.line == name.line => {
                let t = t.clone();
                self.d.error(
                    t.pos(),
                    format!(
                        "expected `{{` after `virtual {}`, found `{}`",
                        name.text, t.text
                    ),
                );
                self.skip_line(t.line);
            }
            _ if name.text.ends_with('{') => {
                self.d.error(
                    name.pos(),
                    format!(
                        "write `virtual {} {{` with a space before `{{`: tcpvsadm reads `{}` as one word",
                        name.text.trim_end_matches('{'),
                        name.text
                    ),
                );
                service.name = name.text.trim_end_matches('{').to_string();
            }
            _ => {
                self.d.error(
                    name.pos(),
                    format!("expected `{{` after `virtual {}`", name.text),
                );
            }
        }
        // The body; a missing `{` was reported, and the body is read anyway for its errors.
        loop {
            let Some(t) = self.peek().cloned() else {
                self.d.error(
                    keyword.pos(),
                    format!("`virtual {}` is not closed by `}}`", service.name),
                );
                break;
            };
            if t.text.starts_with('}') && !t.quoted {
                self.bump();
                if t.text.len() > 1 {
                    self.d.warn(
                        t.line,
                        format!("tcpvsadm ignored `{}` after `}}`", &t.text[1..]),
                    );
                }
                break;
            }
            if t.text.eq_ignore_ascii_case("virtual") && !t.quoted {
                self.d.error(
                    keyword.pos(),
                    format!(
                        "`virtual {}` is not closed by `}}` before the `virtual` of line {}",
                        service.name, t.line
                    ),
                );
                break;
            }
            self.bump();
            let lower = t.text.to_ascii_lowercase();
            let Some(&key) = KEYWORDS.iter().find(|k| **k == lower) else {
                self.unknown_setting(&t, &service.name);
                self.skip_line(t.line);
                continue;
            };
            if self.statement(key, &t, &mut service).is_err() {
                let line = self.last_line();
                self.skip_line(line);
            }
        }
        (!name.text.is_empty()).then_some(service)
    }

    fn unknown_setting(&mut self, t: &Token, service: &str) {
        let glued = t
            .text
            .split_once('=')
            .filter(|(k, _)| KEYWORDS.iter().any(|w| k.eq_ignore_ascii_case(w)));
        let message = match glued {
            Some((key, value)) => format!(
                "write `{key} = {value}` with spaces around `=`: tcpvsadm reads `{}` as one word",
                t.text
            ),
            None => format!(
                "unknown setting `{}` in `virtual {service}` (KTCPVS knows {})",
                t.text,
                KEYWORDS.join(", ")
            ),
        };
        self.d.error(t.pos(), message);
    }

    fn statement(&mut self, key: &'static str, t: &Token, service: &mut KService) -> Parsed<()> {
        let eq = self.value(t, &format!("`{key}` needs ` = ` and a value"))?;
        if eq.text != "=" {
            let message = if eq.text.starts_with('=') {
                format!(
                    "put a space after `=`: tcpvsadm reads `{}` as one word",
                    eq.text
                )
            } else {
                format!("expected `=` after `{key}`, found `{}`", eq.text)
            };
            self.d.error(eq.pos(), message);
            return Err(());
        }
        match key {
            "listen" | "redirect" => {
                let v = self.value(&eq, &format!("`{key} =` needs an address, HOST:PORT"))?;
                let addr = self.addr(&v)?;
                let slot = if key == "listen" {
                    &mut service.listen
                } else {
                    &mut service.redirect
                };
                if let Some(old) = slot.replace(Setting {
                    value: addr,
                    at: v.pos(),
                }) {
                    service.overridden.push(old.at.line);
                }
            }
            "scheduler" => {
                let v = self.value(&eq, "`scheduler =` needs a name such as `http`")?;
                if let Some(old) = service.scheduler.replace(Setting {
                    value: v.text.clone(),
                    at: v.pos(),
                }) {
                    service.overridden.push(old.at.line);
                }
            }
            "server" => {
                let v = self.value(&eq, "`server =` needs an address and a weight")?;
                let addr = self.addr(&v)?;
                let Ok(w) = self.value(
                    &v,
                    "`server = ADDRESS WEIGHT` needs the weight, 1..65535 (tcpvsadm -f has no default)",
                ) else {
                    service.broken.push(addr.key());
                    return Err(());
                };
                let Some(weight) = c_number(&w.text, 1, 65535) else {
                    service.broken.push(addr.key());
                    self.d.error(
                        w.pos(),
                        format!(
                            "weight `{}` is not a number 1..65535 (tcpvsadm -f refuses it)",
                            w.text
                        ),
                    );
                    return Err(());
                };
                service.servers.push(KServer {
                    addr,
                    at: v.pos(),
                    weight: weight as u32,
                    line: t.line,
                });
            }
            "rule" => {
                let rule = self.rule(t, &eq)?;
                service.rules.push(rule);
            }
            knob => {
                let v = self.value(&eq, &format!("`{knob} =` needs a number 1..65535"))?;
                let Some(n) = c_number(&v.text, 1, 65535) else {
                    self.d.error(
                        v.pos(),
                        format!("{knob} `{}` is not a number 1..65535", v.text),
                    );
                    return Err(());
                };
                if let Some(old) = service.knobs.iter().position(|k| k.key == knob) {
                    let old = service.knobs.remove(old);
                    service.overridden.push(old.line);
                }
                service.knobs.push(Knob {
                    key: knob,
                    value: n as u32,
                    line: t.line,
                });
            }
        }
        Ok(())
    }

    fn rule(&mut self, key: &Token, eq: &Token) -> Parsed<KRule> {
        const SHAPE: &str = "`rule = pattern \"REGEX\" [match N] use server ADDRESS`";
        let word = self.value(eq, &format!("expected {SHAPE}"))?;
        if !word.text.eq_ignore_ascii_case("pattern") || word.quoted {
            self.d.error(
                word.pos(),
                format!(
                    "expected `pattern` after `rule =`, found `{}`: {SHAPE}",
                    word.text
                ),
            );
            return Err(());
        }
        let pattern = self.value(&word, &format!("`pattern` needs a regex: {SHAPE}"))?;
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
        let mut next = self.value(
            &pattern,
            &format!("the pattern needs `use server ADDRESS`: {SHAPE}"),
        )?;
        let mut match_num = None;
        if next.text.eq_ignore_ascii_case("match") && !next.quoted {
            let n = self.value(&next, "`match` needs a number 0..9")?;
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
            match_num = Some(value);
            next = self.value(
                &n,
                &format!("`match N` needs `use server ADDRESS` after it: {SHAPE}"),
            )?;
        }
        if !next.text.eq_ignore_ascii_case("use") || next.quoted {
            self.d.error(
                next.pos(),
                format!(
                    "expected `use server ADDRESS`, found `{}`: {SHAPE}",
                    next.text
                ),
            );
            return Err(());
        }
        let server = self.value(&next, &format!("`use` needs `server ADDRESS`: {SHAPE}"))?;
        if !server.text.eq_ignore_ascii_case("server") || server.quoted {
            self.d.error(
                server.pos(),
                format!(
                    "expected `server` after `use`, found `{}`: {SHAPE}",
                    server.text
                ),
            );
            return Err(());
        }
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

/// `string_to_number`: a whole decimal number (sign allowed, as strtol) in `min..=max`.
fn c_number(s: &str, min: i64, max: i64) -> Option<i64> {
    let v: i64 = s.parse().ok()?;
    (min..=max).contains(&v).then_some(v)
}

// ---------------------------------------------------------------- addresses

/// `parse_addrport`: the address and warnings about how it was read, or the error.
fn parse_addrport(text: &str) -> Result<(Addr, Vec<String>), String> {
    let (host, port) = match text.split_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (text, None),
    };
    let mut notes = Vec::new();
    let ip = match inet_aton(host) {
        Some(ip) => {
            if ip.to_string() != host {
                notes.push(format!(
                    "KTCPVS read the address `{host}` as {ip} (inet_aton: a leading 0 is octal, 0x hexadecimal, missing parts fill the last one)"
                ));
            }
            ip
        }
        None => match resolve(host) {
            Some(ip) => {
                notes.push(format!(
                    "host name `{host}` resolves to {ip} now; KTCPVS resolved it when tcpvsadm loaded the file, and the rule file holds the address"
                ));
                ip
            }
            None => {
                return Err(format!(
                    "cannot resolve `{host}` to an IPv4 address (KTCPVS takes an IPv4 address or a host name)"
                ))
            }
        },
    };
    let port = match port {
        None => None,
        Some(p) => Some(match c_number(p, 0, 65535) {
            Some(n) => n as u16,
            None => service_port(p).ok_or_else(|| {
                format!("unknown port `{p}`: a number 0..65535 or a service name such as `www`")
            })?,
        }),
    };
    Ok((
        Addr {
            ip,
            port,
            text: text.to_string(),
        },
        notes,
    ))
}

/// glibc `inet_aton`: one to four parts, each decimal, octal (leading 0) or hexadecimal (0x);
/// the last part fills the remaining bytes.
fn inet_aton(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<u64> = s.split('.').map(c_unsigned).collect::<Option<_>>()?;
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let (last, init) = parts.split_last()?;
    let room = [0xffff_ffff, 0xff_ffff, 0xffff, 0xff][init.len()];
    if *last > room || init.iter().any(|&p| p > 0xff) {
        return None;
    }
    let mut value = *last;
    for (i, part) in init.iter().enumerate() {
        value |= part << (24 - 8 * i);
    }
    Some(Ipv4Addr::from(value as u32))
}

fn c_unsigned(part: &str) -> Option<u64> {
    let (digits, radix) =
        if let Some(hex) = part.strip_prefix("0x").or_else(|| part.strip_prefix("0X")) {
            (hex, 16)
        } else if part.len() > 1 && part.starts_with('0') {
            (&part[1..], 8)
        } else {
            (part, 10)
        };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|&v| v <= u64::from(u32::MAX))
}

/// The first IPv4 address of a host name (gethostbyname takes AF_INET only).
fn resolve(host: &str) -> Option<Ipv4Addr> {
    if host.is_empty() {
        return None;
    }
    (host, 0).to_socket_addrs().ok()?.find_map(|a| match a {
        std::net::SocketAddr::V4(v4) => Some(*v4.ip()),
        std::net::SocketAddr::V6(_) => None,
    })
}

/// Port names of web services, as Debian's /etc/services (netbase) has them for TCP; names
/// not here are looked up in this machine's /etc/services, as getservbyname did.
const PORT_NAMES: &[(&str, u16)] = &[
    ("http", 80),
    ("www", 80),
    ("www-http", 80),
    ("https", 443),
    ("http-alt", 8080),
    ("webcache", 8080),
    ("tproxy", 8081),
];

fn service_port(name: &str) -> Option<u16> {
    if let Some(&(_, port)) = PORT_NAMES.iter().find(|(n, _)| *n == name) {
        return Some(port);
    }
    let services = std::fs::read_to_string("/etc/services").ok()?;
    services_lookup(&services, name)
}

/// `name` (or an alias) for TCP in the text of an /etc/services file.
fn services_lookup(services: &str, name: &str) -> Option<u16> {
    services.lines().find_map(|line| {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let first = words.next()?;
        let (port, proto) = words.next()?.split_once('/')?;
        let named = first == name || words.any(|alias| alias == name);
        (named && proto == "tcp")
            .then(|| port.parse().ok())
            .flatten()
    })
}

// ---------------------------------------------------------------- POSIX extended regexes

/// POSIX extended regular expressions as Henry Spencer's regcomp (KTCPVS regex/regcomp.c)
/// reads them, translated into the syntax of the Rust `regex` crate, which tcpvs uses.
mod ere {
    /// Spencer's RE_DUP_MAX.
    const DUP_MAX: u32 = 255;

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
                Some('{') => self.peek2().is_some_and(|c| c.is_ascii_digit()),
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
                '{' if self.peek().is_some_and(|c| c.is_ascii_digit()) => {
                    return err(at, "`{` repeats nothing (REG_BADRPT)");
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
                            format!(
                                "{{{min},{max}}}: the minimum is above the maximum (REG_BADBR)"
                            ),
                        );
                    }
                    Some(max)
                } else {
                    None
                }
            } else {
                Some(min)
            };
            if self.eat('}') {
                return Ok((min, max));
            }
            if self.chars[self.i..].contains(&'}') {
                err(at, "invalid repetition count (REG_BADBR)")
            } else {
                err(at, "unclosed `{` (REG_EBRACE)")
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
                        Some('-' | ']') => {
                            return err(here, "invalid character class (REG_ECTYPE)")
                        }
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
            while self.peek().is_some() && !(self.peek() == Some(end) && self.peek2() == Some(']'))
            {
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

    // ------------------------------------------------------------ translation

    /// The same expression in the syntax of the Rust `regex` crate. Capture groups keep their
    /// numbers. `.` does not match a newline there; a request-target has none.
    pub(super) fn to_rust(node: &Node) -> String {
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

    // ------------------------------------------------------------ analysis

    impl Node {
        /// Some character the expression consumes can be `c`.
        pub(super) fn can_match(&self, c: char) -> bool {
            match self {
                Node::Lit(l) => *l == c,
                Node::Any => c != '\n',
                Node::Class { negated, items } => {
                    items.iter().any(|item| match item {
                        ClassItem::Char(x) => *x == c,
                        ClassItem::Range(a, b) => (*a..=*b).contains(&c),
                        ClassItem::Named(n) => in_class(n, c),
                    }) != *negated
                }
                Node::Group(inner) => inner.can_match(c),
                Node::Concat(items) | Node::Alt(items) => items.iter().any(|n| n.can_match(c)),
                Node::Repeat { node, max, .. } => *max != Some(0) && node.can_match(c),
                Node::Empty | Node::Bol | Node::Eol | Node::WordStart | Node::WordEnd => false,
            }
        }

        /// The expression uses `$`.
        pub(super) fn has_eol(&self) -> bool {
            match self {
                Node::Eol => true,
                Node::Group(inner) => inner.has_eol(),
                Node::Concat(items) | Node::Alt(items) => items.iter().any(Node::has_eol),
                Node::Repeat { node, .. } => node.has_eol(),
                _ => false,
            }
        }

        /// Every match starts at the first character (a `^` it cannot avoid).
        pub(super) fn anchored(&self) -> bool {
            match self {
                Node::Bol => true,
                Node::Group(inner) => inner.anchored(),
                // A `^` anywhere in a concatenation pins the whole match to the start.
                Node::Concat(items) => items.iter().any(Node::anchored),
                Node::Alt(branches) => branches.iter().all(Node::anchored),
                Node::Repeat { node, min, .. } => *min > 0 && node.anchored(),
                _ => false,
            }
        }

        /// Whether this is `.*`.
        fn is_dot_star(&self) -> bool {
            matches!(self, Node::Repeat { node, min: 0, max: None } if **node == Node::Any)
        }

        /// The expression without a leading and a trailing `.*`, which change no decision of
        /// whether a string matches somewhere (without `$`); `None` if nothing is left.
        pub(super) fn trimmed(&self) -> Option<Node> {
            let items: Vec<Node> = match self {
                Node::Concat(items) => items.clone(),
                other => vec![other.clone()],
            };
            let mut items = &items[..];
            while items.first().is_some_and(Node::is_dot_star) {
                items = &items[1..];
            }
            while items.last().is_some_and(Node::is_dot_star) {
                items = &items[..items.len() - 1];
            }
            match items {
                [] => None,
                [one] => Some(one.clone()),
                many => Some(Node::Concat(many.to_vec())),
            }
        }

        /// Whether capture `group` (0 = the whole match) can begin where the match begins,
        /// approximated: group 0 always, group 1 when it opens the expression.
        pub(super) fn group_opens(&self, group: usize) -> bool {
            if group == 0 {
                return true;
            }
            let first = match self {
                Node::Concat(items) => items.iter().find(|n| **n != Node::Bol),
                other => Some(other),
            };
            group == 1 && matches!(first, Some(Node::Group(_)))
        }
    }

    fn in_class(name: &str, c: char) -> bool {
        let b = c;
        match name {
            "alnum" => b.is_ascii_alphanumeric(),
            "alpha" => b.is_ascii_alphabetic(),
            "blank" => b == ' ' || b == '\t',
            "cntrl" => b.is_ascii_control(),
            "digit" => b.is_ascii_digit(),
            "graph" => b.is_ascii_graphic(),
            "lower" => b.is_ascii_lowercase(),
            "print" => b.is_ascii_graphic() || b == ' ',
            "punct" => b.is_ascii_punctuation(),
            "space" => b.is_ascii_whitespace() || b == '\x0b',
            "upper" => b.is_ascii_uppercase(),
            "xdigit" => b.is_ascii_hexdigit(),
            _ => false,
        }
    }
}

// ---------------------------------------------------------------- the tcpvs side

#[derive(Default)]
struct Out {
    /// `[switch] max_clients` and its comment.
    max_clients: Option<(u64, String)>,
    services: Vec<OutService>,
    pools: Vec<OutPool>,
}

struct OutService {
    name: String,
    comment: String,
    listen: String,
    default_pool: Option<(String, String)>,
    /// Comment lines in the service's table: what has no equivalent, how rules are ordered.
    notes: Vec<String>,
    rules: Vec<OutRule>,
}

struct OutRule {
    comment: String,
    path: String,
    pool: String,
}

struct OutPool {
    name: String,
    notes: Vec<String>,
    scheduler: &'static str,
    /// Module options, each value already TOML.
    options: Vec<(&'static str, String)>,
    servers: Vec<OutServer>,
}

struct OutServer {
    addr: SocketAddrV4,
    weight: u32,
    backup: bool,
    comment: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    /// `wlc`, `lc`, `rr`, `wrr`: one pool of every server.
    Plain(&'static str),
    Http,
    Hhttp,
    Chttp,
    Phttp,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Plain(n) => n,
            Kind::Http => "http",
            Kind::Hhttp => "hhttp",
            Kind::Chttp => "chttp",
            Kind::Phttp => "phttp",
        }
    }
}

/// A rule as KTCPVS keeps it: rules that joined it by pattern prefix add their servers.
struct KtRule<'a> {
    first: &'a KRule,
    regex: ere::Regex,
    rust: String,
    match_num: u32,
    /// Indices into the service's servers, in the order the rules added them.
    members: Vec<usize>,
    /// The rule lines that joined this rule after the first.
    joined: Vec<usize>,
    catch_all: bool,
}

struct Lowering<'a> {
    lines: &'a [&'a str],
    d: &'a mut Diags,
    pool_names: HashSet<String>,
    service_names: HashSet<String>,
}

impl Lowering<'_> {
    /// `# ktcpvs line N: <the line>`: where a part came from.
    fn source(&self, line: usize) -> String {
        let text = self.lines.get(line - 1).map_or("", |l| l.trim());
        let text: String = text
            .chars()
            .map(|c| if c.is_control() && c != '\t' { '?' } else { c })
            .collect();
        format!("ktcpvs line {line}: {text}")
    }

    fn run(mut self, services: &[KService]) -> Out {
        let mut out = Out::default();
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut listens: Vec<(SocketAddrV4, &str, usize)> = Vec::new();
        // Per service: its thread limit (the larger of maxclients and startservers: a service
        // without maxclients kept its startservers threads), and the maxclients line if any.
        let mut limits: Vec<(&str, u32, Option<usize>)> = Vec::new();
        for svc in services {
            if let Some(line) = names.get(svc.name.as_str()) {
                self.d.error(
                    svc.name_at,
                    format!(
                        "`virtual {}` is already defined on line {line}: KTCPVS refuses the second (EEXIST)",
                        svc.name
                    ),
                );
                continue;
            }
            names.insert(&svc.name, svc.at.line);
            let listen = match &svc.listen {
                Some(l) => SocketAddrV4::new(l.value.ip, l.value.port.unwrap_or(0)),
                None => SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            };
            if listen.port() != 0 {
                if let Some((_, other, line)) = listens.iter().find(|(a, _, _)| *a == listen) {
                    let at = svc.listen.as_ref().map_or(svc.at, |l| l.at);
                    self.d.error(
                        at,
                        format!(
                            "listen address {listen} is also the address of `virtual {other}` (line {line}): only one of them could listen"
                        ),
                    );
                    continue;
                }
                listens.push((listen, &svc.name, svc.at.line));
            }
            let knob = |key: &str| svc.knobs.iter().find(|k| k.key == key);
            let max = knob("maxclients");
            let start = knob("startservers").map_or(0, |k| k.value);
            let limit = max.map_or(0, |m| m.value).max(start);
            if limit > 0 {
                limits.push((&svc.name, limit, max.map(|m| m.line)));
            }
            if let Some(service) = self.service(svc, listen, &mut out) {
                out.services.push(service);
            }
        }
        // Only a file that sets maxclients somewhere gets a max_clients.
        if limits.iter().any(|(_, _, line)| line.is_some()) {
            let total: u64 = limits.iter().map(|(_, v, _)| u64::from(*v)).sum();
            let parts: Vec<String> = limits
                .iter()
                .map(|(name, v, line)| match line {
                    Some(line) => format!("`{name}` {v} (line {line})"),
                    None => format!("`{name}` {v} (startservers, no maxclients)"),
                })
                .collect();
            for (name, value, line) in &limits {
                let Some(line) = line else { continue };
                let shared = if limits.len() > 1 {
                    format!(", the sum over the virtual services ({})", parts.join(", "))
                } else {
                    String::new()
                };
                self.d.warn(
                    *line,
                    format!(
                        "maxclients becomes [switch] max_clients = {total}{shared}: KTCPVS ran at most {value} threads for `{name}`, one client connection each, and left more connections waiting in the listen queue; tcpvs needs no thread per client and answers 503 beyond max_clients, which counts the clients of all virtual services"
                    ),
                );
            }
            out.max_clients = Some((total, format!("KTCPVS threads: {}", parts.join(", "))));
        }
        out
    }

    fn unique_pool(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut n = 2;
        while !self.pool_names.insert(name.clone()) {
            name = format!("{wanted}-{n}");
            n += 1;
        }
        name
    }

    fn service(
        &mut self,
        svc: &KService,
        listen: SocketAddrV4,
        out: &mut Out,
    ) -> Option<OutService> {
        let Some(scheduler) = &svc.scheduler else {
            self.d.error(
                svc.at,
                format!(
                    "`virtual {}` has no `scheduler`: tcpvsadm -f has no default and KTCPVS refuses it (known: {SCHEDULERS})",
                    svc.name
                ),
            );
            return None;
        };
        let kind = match scheduler.value.as_str() {
            "wlc" => Kind::Plain("wlc"),
            "lc" => Kind::Plain("lc"),
            "rr" => Kind::Plain("rr"),
            "wrr" => Kind::Plain("wrr"),
            "http" => Kind::Http,
            "hhttp" => Kind::Hhttp,
            "chttp" => Kind::Chttp,
            "phttp" => Kind::Phttp,
            other => {
                self.d.error(
                    scheduler.at,
                    format!(
                        "unknown scheduler `{other}` (known: {SCHEDULERS}; names are lowercase)"
                    ),
                );
                return None;
            }
        };
        // The tcpvs name: letters, digits, `-`, `_`, `.`.
        let mut name: String = svc
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if name != svc.name {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` is `[virtual.{name}]`: tcpvs names are letters, digits, `-`, `_` and `.`",
                    svc.name
                ),
            );
        }
        let base = name.clone();
        let mut n = 2;
        while !self.service_names.insert(name.clone()) {
            name = format!("{base}-{n}");
            n += 1;
        }
        let mut service = OutService {
            name: name.clone(),
            comment: format!("{} (scheduler {})", self.source(svc.at.line), kind.name()),
            listen: listen.to_string(),
            default_pool: None,
            notes: Vec::new(),
            rules: Vec::new(),
        };
        if svc.listen.is_none() {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` has no `listen`: KTCPVS listened on 0.0.0.0 port 0 (a port the kernel picks), and so does this",
                    svc.name
                ),
            );
        } else if svc.listen.as_ref().is_some_and(|l| l.value.port.is_none()) {
            let line = svc.listen.as_ref().map_or(svc.at.line, |l| l.at.line);
            self.d.warn(
                line,
                "listen address without a port: KTCPVS listened on port 0 (a port the kernel picks), and so does this",
            );
        }
        for &line in &svc.overridden {
            self.d.warn(
                line,
                "replaced by a later line with the same setting, as in KTCPVS (kept as a comment)",
            );
            service
                .notes
                .push(format!("{} -- replaced by a later line", self.source(line)));
        }
        // Process knobs.
        for knob in &svc.knobs {
            if knob.key == "maxclients" {
                service.notes.push(format!(
                    "{} -- [switch] max_clients",
                    self.source(knob.line)
                ));
                continue;
            }
            self.d.warn(
                knob.line,
                format!(
                    "{} = {} has no equivalent: it sized KTCPVS's pool of kernel threads, and tcpvs runs no thread per connection (kept as a comment)",
                    knob.key, knob.value
                ),
            );
            service.notes.push(format!(
                "{} -- no equivalent: tcpvs runs no thread per connection",
                self.source(knob.line)
            ));
        }
        let knob = |key: &str| {
            svc.knobs
                .iter()
                .find(|k| k.key == key)
                .map_or(0, |k| k.value)
        };
        if knob("startservers") == 0 && (knob("minspareservers") == 0 || knob("maxclients") == 0) {
            self.d.warn(
                svc.at.line,
                format!(
                    "KTCPVS started no thread for `virtual {}` (tcpvsadm -f sets what is left out to 0: no startservers, and no minspareservers with maxclients), so it accepted no connection; tcpvs serves it",
                    svc.name
                ),
            );
        }
        // Servers: KTCPVS refused a second server with the same address (EEXIST).
        let mut servers: Vec<&KServer> = Vec::new();
        for s in &svc.servers {
            if let Some(first) = servers.iter().find(|p| p.addr.key() == s.addr.key()) {
                self.d.error(
                    s.at,
                    format!(
                        "server {} is already declared on line {}: KTCPVS refuses the second (EEXIST)",
                        s.addr.shown(), first.line
                    ),
                );
                continue;
            }
            servers.push(s);
        }
        // A server without a port: port 0 to KTCPVS, which could not connect to it; the man
        // page promises the listen port, which is taken here.
        let mut addrs = Vec::with_capacity(servers.len());
        for s in &servers {
            let port = match s.addr.port {
                Some(p) if p != 0 => p,
                _ if listen.port() != 0 => {
                    self.d.warn(
                        s.line,
                        format!(
                            "server `{}` has no port: KTCPVS used port 0 and could not connect; the rule file uses the listen port {}, as tcpvsadm(8) describes",
                            s.addr.text,
                            listen.port()
                        ),
                    );
                    listen.port()
                }
                _ => {
                    self.d.error(
                        s.at,
                        format!(
                            "server `{}` has no port (or port 0), and the listen port is 0 too: give it a port",
                            s.addr.text
                        ),
                    );
                    0
                }
            };
            addrs.push(SocketAddrV4::new(s.addr.ip, port));
        }
        let redirect = svc.redirect.as_ref().and_then(|r| match r.value.port {
            Some(p) if p != 0 => Some(SocketAddrV4::new(r.value.ip, p)),
            _ => {
                self.d.error(
                    r.at,
                    "redirect address without a port: KTCPVS never redirected to it (it checks the port)",
                );
                None
            }
        });
        match kind {
            Kind::Plain(module) => {
                self.plain(svc, module, &servers, &addrs, redirect, &mut service, out)
            }
            _ => self.ruled(svc, kind, &servers, &addrs, redirect, &mut service, out),
        }
        Some(service)
    }

    /// `wlc` (and `lc`, `rr`, `wrr`): one pool of every server; rules are unused.
    #[allow(clippy::too_many_arguments)]
    fn plain(
        &mut self,
        svc: &KService,
        module: &'static str,
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
        redirect: Option<SocketAddrV4>,
        service: &mut OutService,
        out: &mut Out,
    ) {
        for rule in &svc.rules {
            self.d.warn(
                rule.line,
                format!("the {module} scheduler uses no rules: this one had no effect in KTCPVS (kept as a comment)"),
            );
            service.notes.push(format!(
                "{} -- no effect: the {module} scheduler uses no rules",
                self.source(rule.line)
            ));
        }
        if servers.is_empty() && redirect.is_none() {
            self.d.warn(
                svc.at.line,
                format!(
                    "`virtual {}` has no server: KTCPVS closed every connection; tcpvs answers 503",
                    svc.name
                ),
            );
            return;
        }
        let pool = self.unique_pool(slug(&service.name));
        let members: Vec<usize> = (0..servers.len()).collect();
        let mut list = self.pool_servers(&members, servers, addrs);
        if let Some(r) = redirect {
            list.push(self.redirect_backup(svc, r));
        }
        service.default_pool = Some((
            pool.clone(),
            "every request: KTCPVS's scheduler picked among all servers".into(),
        ));
        out.pools.push(OutPool {
            name: pool,
            notes: Vec::new(),
            scheduler: module,
            options: Vec::new(),
            servers: list,
        });
    }

    fn pool_servers(
        &self,
        members: &[usize],
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
    ) -> Vec<OutServer> {
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        sorted
            .into_iter()
            .map(|i| OutServer {
                addr: addrs[i],
                weight: servers[i].weight,
                backup: false,
                comment: self.source(servers[i].line),
            })
            .collect()
    }

    fn redirect_backup(&self, svc: &KService, addr: SocketAddrV4) -> OutServer {
        let line = svc.redirect.as_ref().map_or(svc.at.line, |r| r.at.line);
        OutServer {
            addr,
            weight: 1,
            backup: true,
            comment: format!(
                "{} -- used when no server of the pool is usable",
                self.source(line)
            ),
        }
    }

    /// Builds KTCPVS's rule list: merged by pattern prefix, in matching order.
    fn rule_list<'r>(
        &mut self,
        svc: &'r KService,
        kind: Kind,
        servers: &[&KServer],
    ) -> (Vec<KtRule<'r>>, Vec<usize>) {
        let mut rules: Vec<KtRule<'r>> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        // Which rule line took each server (a server is in one rule at most: EBUSY).
        let mut taken: HashMap<usize, usize> = HashMap::new();
        let hashing = matches!(kind, Kind::Hhttp | Kind::Phttp);
        for rule in &svc.rules {
            if svc.broken.contains(&rule.target.key()) {
                continue;
            }
            let Some(server) = servers
                .iter()
                .position(|s| s.addr.key() == rule.target.key())
            else {
                self.d.error(
                    rule.target_at,
                    format!(
                        "server {} is not a `server` of `virtual {}`: KTCPVS refuses the rule (ENOENT)",
                        rule.target.shown(), svc.name
                    ),
                );
                continue;
            };
            if let Some(line) = taken.get(&server) {
                self.d.error(
                    rule.target_at,
                    format!(
                        "server {} is already used by the rule on line {line}: KTCPVS puts a server in one rule only (EBUSY)",
                        rule.target.text
                    ),
                );
                continue;
            }
            taken.insert(server, rule.line);
            if rule.match_num.is_some() && !hashing {
                self.d.warn(
                    rule.line,
                    format!("`match` has no effect with the {} scheduler", kind.name()),
                );
            }
            let joined = order
                .iter()
                .copied()
                .find(|&k| rule.pattern.starts_with(rules[k].first.pattern.as_str()));
            if let Some(k) = joined {
                let existing = &mut rules[k];
                existing.members.push(server);
                existing.joined.push(rule.line);
                let first_line = existing.first.line;
                let first_pattern = existing.first.pattern.clone();
                let first_match = existing.match_num;
                if rule.pattern != first_pattern {
                    self.d.warn(
                        rule.line,
                        format!(
                            "KTCPVS added this rule's server to the rule of line {first_line}, whose pattern \"{first_pattern}\" begins this one's (it compares that many characters): this pattern \"{}\" was never used, and neither is it here",
                            rule.pattern
                        ),
                    );
                }
                if hashing && rule.match_num.unwrap_or(0) != first_match {
                    self.d.warn(
                        rule.line,
                        format!(
                            "match {} has no effect: this server joined the rule of line {first_line}, which hashes match {first_match}",
                            rule.match_num.unwrap_or(0)
                        ),
                    );
                }
                continue;
            }
            let parsed = match ere::parse(&rule.pattern) {
                Ok(r) => r,
                Err(e) => {
                    self.d.error(
                        Pos {
                            line: rule.pattern_at.line,
                            col: rule.pattern_at.col + e.at,
                        },
                        format!("invalid pattern \"{}\": {}", rule.pattern, e.message),
                    );
                    continue;
                }
            };
            let rust = ere::to_rust(&parsed.node);
            if let Err(e) = regex::bytes::Regex::new(&rust) {
                let why = e.to_string();
                let last = why.lines().last().unwrap_or("invalid").trim().to_string();
                self.d.error(
                    rule.pattern_at,
                    format!(
                        "pattern \"{}\" has no equivalent in tcpvs's regex syntax (as `{rust}`: {last})",
                        rule.pattern
                    ),
                );
                continue;
            }
            let catch_all = rule.pattern == ".*" || rule.pattern == "^/.*";
            rules.push(KtRule {
                first: rule,
                regex: parsed,
                rust,
                match_num: rule.match_num.unwrap_or(0),
                members: vec![server],
                joined: Vec::new(),
                catch_all,
            });
            let index = rules.len() - 1;
            if catch_all {
                order.push(index);
            } else {
                order.insert(0, index);
            }
        }
        (rules, order)
    }

    /// `http`, `hhttp`, `chttp`, `phttp`: a pool per rule, rules in KTCPVS's order.
    #[allow(clippy::too_many_arguments)]
    fn ruled(
        &mut self,
        svc: &KService,
        kind: Kind,
        servers: &[&KServer],
        addrs: &[SocketAddrV4],
        redirect: Option<SocketAddrV4>,
        service: &mut OutService,
        out: &mut Out,
    ) {
        let (rules, order) = self.rule_list(svc, kind, servers);
        let redirect = if kind == Kind::Chttp {
            if let Some(r) = &svc.redirect {
                self.d.warn(
                    r.at.line,
                    "redirect has no effect with chttp: KTCPVS closed the connections chttp found no server for (kept as a comment)",
                );
                service.notes.push(format!(
                    "{} -- no effect with chttp",
                    self.source(r.at.line)
                ));
            }
            None
        } else {
            redirect
        };
        // Servers in no rule: KTCPVS's rule-based schedulers never chose them.
        let used: HashSet<usize> = rules
            .iter()
            .flat_map(|r| r.members.iter().copied())
            .collect();
        for (i, s) in servers.iter().enumerate() {
            if !used.contains(&i) {
                self.d.warn(
                    s.line,
                    format!(
                        "server {} is in no rule: KTCPVS's {} scheduler never sent it a request (kept as a comment)",
                        s.addr.text,
                        kind.name()
                    ),
                );
                service
                    .notes
                    .push(format!("{} -- in no rule: never used", self.source(s.line)));
            }
        }
        let plain_rules = order.iter().filter(|&&k| !rules[k].catch_all).count();
        let in_file_order = order
            .iter()
            .filter(|&&k| !rules[k].catch_all)
            .map(|&k| rules[k].first.line)
            .collect::<Vec<_>>()
            .windows(2)
            .all(|w| w[0] < w[1]);
        if plain_rules > 1 && !in_file_order {
            service.notes.push(
                "The rules are in the order KTCPVS tried them: the last written first (each new rule went to the front of its list), `.*` and `^/.*` after all others."
                    .to_string(),
            );
        }
        let mut query_lines: Vec<usize> = Vec::new();
        let mut default_taken = false;
        for &k in &order {
            let rule = &rules[k];
            let regex = &rule.regex;
            if rule.catch_all && default_taken {
                self.d.warn(
                    rule.first.line,
                    "never matched: an earlier `.*` or `^/.*` rule took every request (kept as a comment)",
                );
                service.notes.push(format!(
                    "{} -- never matched after the first catch-all",
                    self.source(rule.first.line)
                ));
                continue;
            }
            // The pool.
            let hint = if rule.catch_all {
                "default".to_string()
            } else {
                pattern_slug(&rule.first.pattern)
                    .unwrap_or_else(|| format!("line{}", rule.first.line))
            };
            let pool_name = self.unique_pool(format!("{}-{}", slug(&service.name), hint));
            let mut pool = OutPool {
                name: pool_name.clone(),
                notes: Vec::new(),
                scheduler: "wlc",
                options: Vec::new(),
                servers: self.pool_servers(&rule.members, servers, addrs),
            };
            for &line in &rule.joined {
                pool.notes
                    .push(format!("{} -- joined this rule", self.source(line)));
            }
            let hash_it = match kind {
                Kind::Hhttp => true,
                Kind::Phttp => rule.match_num > 0,
                _ => false,
            };
            if hash_it {
                self.hash_pool(kind, rule, servers, &mut pool);
            } else if kind == Kind::Chttp {
                pool.scheduler = "cookie";
                pool.options = vec![
                    ("name", toml_string(KTCPVS_COOKIE)),
                    ("inner", toml_string("wlc")),
                ];
                pool.notes.push(
                    "Persistence as chttp: a client keeps its server by cookie. Add `secret = \"...\"` so cookies survive restarts."
                        .to_string(),
                );
            }
            if let Some(r) = redirect {
                pool.servers.push(self.redirect_backup(svc, r));
            }
            // Query: KTCPVS matched the whole request-target, tcpvs's `path` excludes the query.
            if !rule.catch_all {
                if regex.node.has_eol() {
                    self.d.warn(
                        rule.first.line,
                        format!(
                            "`$` in \"{}\" ended the match at the end of the whole request URI in KTCPVS, query included, so a request with a query (`?v=2`) did not match; tcpvs matches `path`, which excludes the query, so such requests match here",
                            rule.first.pattern
                        ),
                    );
                }
                let rest = regex.node.trimmed();
                let crosses = rest.as_ref().is_some_and(|n| n.can_match('?'));
                let floats = rest.as_ref().is_some_and(|n| !n.anchored());
                if crosses || floats {
                    query_lines.push(rule.first.line);
                }
            }
            let comment = self.source(rule.first.line);
            if rule.catch_all {
                default_taken = true;
                service.default_pool = Some((
                    pool_name.clone(),
                    format!(
                        "{comment} -- KTCPVS tried it after every other rule{}",
                        if rule.first.pattern == "^/.*" {
                            " (it did not match absolute-form targets; this takes them too)"
                        } else {
                            ""
                        }
                    ),
                ));
            } else {
                service.rules.push(OutRule {
                    comment,
                    path: rule.rust.clone(),
                    pool: pool_name.clone(),
                });
            }
            out.pools.push(pool);
        }
        if !query_lines.is_empty() {
            let lines: Vec<String> = query_lines.iter().map(|l| l.to_string()).collect();
            self.d.warn(
                query_lines[0],
                format!(
                    "KTCPVS matched the pattern{} on line{} {} against the whole request URI, query included; tcpvs's `path` excludes the query, so a request whose match lies in the query or runs into it (`/?from=/users/x/`) is routed differently",
                    if lines.len() > 1 { "s" } else { "" },
                    if lines.len() > 1 { "s" } else { "" },
                    lines.join(", ")
                ),
            );
        }
        if default_taken {
            return;
        }
        // No catch-all: what KTCPVS did with requests that matched no rule.
        if let Some(r) = redirect {
            let pool_name = self.unique_pool(format!("{}-redirect", slug(&service.name)));
            let line = svc.redirect.as_ref().map_or(svc.at.line, |r| r.at.line);
            service.default_pool = Some((
                pool_name.clone(),
                format!("{} -- requests that match no rule", self.source(line)),
            ));
            out.pools.push(OutPool {
                name: pool_name,
                notes: Vec::new(),
                scheduler: "wlc",
                options: Vec::new(),
                servers: vec![OutServer {
                    addr: r,
                    weight: 1,
                    backup: false,
                    comment: self.source(line),
                }],
            });
        } else if kind == Kind::Phttp && !service.rules.is_empty() {
            let first = service.rules[0].pool.clone();
            self.d.warn(
                svc.at.line,
                format!(
                    "phttp sent requests that match no rule to the first server it had connected to, in rule order (fault.c:fault_redirect); here they go to the pool of the first rule, `{first}`"
                ),
            );
            service.default_pool = Some((first, "requests that match no rule (fault.c)".into()));
        } else {
            let why = if kind == Kind::Chttp {
                "chttp never redirects"
            } else {
                "there is no `.*` rule and no `redirect`"
            };
            self.d.warn(
                svc.at.line,
                format!(
                    "requests that match no rule of `virtual {}`: KTCPVS closed their connection without an answer ({why}); tcpvs answers them 503",
                    svc.name
                ),
            );
        }
        if kind == Kind::Chttp && !rules.is_empty() {
            self.d.warn(
                svc.at.line,
                "chttp looked the KTCPVS_SID cookie up before the rules, so a client stayed on its server whatever the URI, and set the cookie only on responses that set a cookie of their own; tcpvs's cookie keeps a client on its server within each rule's pool and sets the cookie on every new client's first response",
            );
        }
        if kind == Kind::Phttp {
            self.d.warn(
                svc.at.line,
                "phttp: rules with `match N` (N > 0) hash capture N, as tcp_vs_phttp.c of ktcpvs-matrix does; the others pick by least connections, as upstream KTCPVS did",
            );
        }
    }

    /// The pool of an `hhttp` rule (or a `phttp` rule with `match N`): `hash` on capture N.
    fn hash_pool(
        &mut self,
        kind: Kind,
        rule: &KtRule<'_>,
        servers: &[&KServer],
        pool: &mut OutPool,
    ) {
        let regex = &rule.regex;
        let n = rule.match_num as usize;
        let line = rule.first.line;
        if n > regex.groups {
            // regexec leaves such a slot at -1: the sum is 0, the first server of the rule's
            // list (the last one a rule added) takes every request.
            let chosen = *rule.members.last().expect("a rule has a server");
            self.d.warn(
                line,
                format!(
                    "match {n}, but \"{}\" has {} capture group{}: KTCPVS hashed nothing and sent every request of the rule to {}, and so does this (the others kept as comments)",
                    rule.first.pattern,
                    regex.groups,
                    if regex.groups == 1 { "" } else { "s" },
                    servers[chosen].addr
                ),
            );
            let keep = self.source(servers[chosen].line);
            pool.servers.retain(|s| s.comment == keep);
            for &m in &rule.members {
                if m != chosen {
                    pool.notes.push(format!(
                        "{} -- never chosen: match {n} does not exist",
                        self.source(servers[m].line)
                    ));
                }
            }
            return;
        }
        let (pattern, group) = if n == 0 {
            (format!("({})", rule.rust), 1)
        } else {
            (rule.rust.clone(), n)
        };
        pool.scheduler = "hash";
        pool.options = vec![
            ("key", toml_string("regex")),
            ("pattern", toml_literal(&pattern)),
            ("group", group.to_string()),
            ("balance_factor", "0".to_string()),
        ];
        pool.notes.push(format!(
            "As {}: requests with the same match {n} go to the same server (consistent hashing; no load bound, like KTCPVS).",
            kind.name()
        ));
        if regex.node.group_opens(n) {
            self.d.warn(
                line,
                format!(
                    "KTCPVS gave no server to a request whose match {n} begins at the URI's first byte (tcp_vs_hhttp.c tests `start && end`), and such requests went to the redirect address or were closed; tcpvs hashes them like the others"
                ),
            );
        }
        let weights: HashSet<u32> = rule.members.iter().map(|&m| servers[m].weight).collect();
        if weights.len() > 1 {
            self.d.warn(
                line,
                format!(
                    "{} ignored weights (each server of the rule got an equal share of the keys); tcpvs's hash gives each server a share by its weight: set equal weights to keep KTCPVS's split",
                    kind.name()
                ),
            );
        }
        if matches!(regex.node, ere::Node::Alt(_)) || rule.first.pattern.contains('|') {
            self.d.warn(
                line,
                format!(
                    "\"{}\" has alternatives: POSIX regexes capture the leftmost-longest match, tcpvs's the leftmost-first, so a capture can differ",
                    rule.first.pattern
                ),
            );
        }
    }
}

/// A pool-name piece from a service name: lowercase letters, digits and `-`.
fn slug(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    let s = s.trim_matches('-').to_string();
    if s.is_empty() {
        "service".to_string()
    } else {
        s
    }
}

/// A pool-name piece from a pattern: its first words (`^/cgi-bin/` -> `cgi-bin`).
fn pattern_slug(pattern: &str) -> Option<String> {
    let words: Vec<String> = pattern
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| w.len() >= 2)
        .take(3)
        .map(str::to_ascii_lowercase)
        .collect();
    (!words.is_empty()).then(|| words.join("-"))
}

// ---------------------------------------------------------------- rendering

/// A TOML literal string (no escapes: regexes stay readable) when it can be one.
fn toml_literal(s: &str) -> String {
    if !s.contains('\'') && !s.chars().any(char::is_control) {
        return format!("'{s}'");
    }
    toml_string(s)
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML key: bare when it can be.
fn toml_key(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        s.to_string()
    } else {
        format!("\"{s}\"")
    }
}

fn comment_lines(out: &mut String, notes: &[String]) {
    for note in notes {
        out.push_str("# ");
        out.push_str(note);
        out.push('\n');
    }
}

fn render(o: &Out) -> String {
    let mut s = String::new();
    s.push_str(
        "# Converted from a KTCPVS configuration by `tcpvs import-ktcpvs`; check with `tcpvs check`.\n\
         # `ktcpvs line N:` comments name the KTCPVS line each part comes from; a part with no\n\
         # tcpvs equivalent is such a comment, and was reported as a warning.\n\
         # Unlike KTCPVS's http and hhttp schedulers, tcpvs routes every request of a keep-alive\n\
         # connection, not only the first. keepalive_timeout (30s) and idle_timeout (180s) are\n\
         # KTCPVS's default keepalive_timeout and read_timeout sysctls.\n",
    );
    if let Some((n, comment)) = &o.max_clients {
        s.push_str(&format!("\n[switch]\nmax_clients = {n}  # {comment}\n"));
    }
    for svc in &o.services {
        let key = toml_key(&svc.name);
        s.push_str(&format!("\n[virtual.{key}]  # {}\n", svc.comment));
        s.push_str(&format!("listen = {}\n", toml_string(&svc.listen)));
        if let Some((pool, comment)) = &svc.default_pool {
            s.push_str(&format!(
                "default_pool = {}  # {comment}\n",
                toml_string(pool)
            ));
        }
        comment_lines(&mut s, &svc.notes);
        for rule in &svc.rules {
            s.push_str(&format!("\n[[virtual.{key}.rule]]  # {}\n", rule.comment));
            s.push_str(&format!("path = {}\n", toml_literal(&rule.path)));
            s.push_str(&format!("pool = {}\n", toml_string(&rule.pool)));
        }
    }
    for pool in &o.pools {
        s.push_str(&format!("\n[pool.{}]\n", toml_key(&pool.name)));
        comment_lines(&mut s, &pool.notes);
        s.push_str(&format!("scheduler = {}\n", toml_string(pool.scheduler)));
        for (key, value) in &pool.options {
            s.push_str(&format!("{key} = {value}\n"));
        }
        s.push_str("servers = [\n");
        for server in &pool.servers {
            let backup = if server.backup { ", backup = true" } else { "" };
            s.push_str(&format!(
                "  {{ addr = {}, weight = {}{backup} }},  # {}\n",
                toml_string(&server.addr.to_string()),
                server.weight,
                server.comment
            ));
        }
        s.push_str("]\n");
    }
    s
}

// ---------------------------------------------------------------- tests

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn addresses_are_read_as_inet_aton_and_getservbyname_read_them() {
        let a = |s: &str| parse_addrport(s).map(|(a, _)| a.to_string());
        assert_eq!(a("10.0.0.1:80").unwrap(), "10.0.0.1:80");
        assert_eq!(a("127.0.0.1:www").unwrap(), "127.0.0.1:80");
        assert_eq!(a("0.0.0.0:webcache").unwrap(), "0.0.0.0:8080");
        assert_eq!(a("0.0.0.0:http-alt").unwrap(), "0.0.0.0:8080");
        assert_eq!(a("10.1:443").unwrap(), "10.0.0.1:443");
        assert_eq!(a("010.0.0.1:1").unwrap(), "8.0.0.1:1");
        assert_eq!(a("0x7f.1:2").unwrap(), "127.0.0.1:2");
        assert_eq!(a("localhost:3").unwrap(), "127.0.0.1:3");
        assert_eq!(a("10.0.0.1").unwrap(), "10.0.0.1:0");
        assert!(a("10.0.0.1:80000").is_err());
        assert!(a("10.0.0.1:no-such-port-name").is_err());
        assert_eq!(inet_aton("256.0.0.1"), None);
        assert_eq!(inet_aton("1.2.3.4.5"), None);
        assert_eq!(inet_aton("08.1.1.1"), None);
        let (_, notes) = parse_addrport("010.0.0.1:1").unwrap();
        assert!(notes[0].contains("as 8.0.0.1"), "{notes:?}");
        assert_eq!(
            services_lookup(
                "http-alt\t8080/tcp\twebcache  # caching\nfoo 1/udp\n",
                "webcache"
            ),
            Some(8080)
        );
        assert_eq!(services_lookup("foo 1/udp bar\n", "bar"), None);
    }

    fn rust(pattern: &str) -> String {
        ere::to_rust(&ere::parse(pattern).unwrap().node)
    }

    fn ere_error(pattern: &str) -> (usize, String) {
        let e = ere::parse(pattern).unwrap_err();
        (e.at, e.message)
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

    #[test]
    fn patterns_know_where_the_query_matters() {
        let node = |p: &str| ere::parse(p).unwrap().node;
        assert!(node(r"\.gif$").has_eol());
        assert!(!node("^/img/").has_eol());
        assert!(node("^/img/").anchored());
        assert!(!node("/img/").anchored());
        assert!(node("^a|^b").anchored());
        assert!(!node("^a|b").anchored());
        assert!(node("[^/]").can_match('?'));
        assert!(!node("[a-z]").can_match('?'));
        assert!(node("[[:punct:]]").can_match('?'));
        assert!(node(".*").trimmed().is_none());
        assert_eq!(node("/images/.*").trimmed(), Some(node("/images/")));
        assert!(node("(/x)").group_opens(1));
        assert!(!node("/(x)").group_opens(1));
    }

    const MAN_PAGE: &str = "virtual web {
    listen = 0.0.0.0:80
    scheduler = http
    startservers = 8
    maxclients = 256
    minspareservers = 6
    maxspareservers = 18
    server = 192.168.10.3:80 1
    server = 192.168.10.2:80 1
    server = 192.168.10.1:80 1
    rule = pattern \"^/cgi-bin/\"  use server 192.168.10.1:80
    rule = pattern \"^/images/\"  use server 192.168.10.2:80
    rule = pattern \".*\"  use server 192.168.10.3:80
}
";

    #[test]
    fn the_man_page_example_converts_with_its_rules_in_ktcpvs_order() {
        let report = import("ktcpvs.conf", MAN_PAGE);
        assert!(report.is_ok(), "{:?}", report.errors);
        let r = &report.rules;
        let images = r.find("path = '^/images/'").expect(r);
        let cgi = r.find("path = '^/cgi-bin/'").expect(r);
        assert!(images < cgi, "the later rule is tried first:\n{r}");
        assert!(r.contains("default_pool = \"web-default\""), "{r}");
        assert!(r.contains("max_clients = 256"), "{r}");
        assert!(
            r.contains("# ktcpvs line 4: startservers = 8 -- no equivalent"),
            "{r}"
        );
        let warned: Vec<usize> = report.warnings.iter().map(|w| w.line).collect();
        for line in [4, 5, 6, 7] {
            assert!(
                warned.contains(&line),
                "no warning for line {line}: {warned:?}"
            );
        }
        assert!(report.warnings[0]
            .to_string()
            .starts_with("ktcpvs.conf:4: warning: startservers = 8"));
        crate::config::Config::parse("out.toml", r).unwrap();
    }

    #[test]
    fn rules_join_by_pattern_prefix_as_tcp_vs_add_rule_compares() {
        let report = import(
            "k",
            "virtual web {\n listen = 127.0.0.1:80\n scheduler = http\n\
             server = 10.0.0.1:80 1\n server = 10.0.0.2:80 2\n\
             rule = pattern \"^/img\" use server 10.0.0.1:80\n\
             rule = pattern \"^/img/big\" use server 10.0.0.2:80\n}\n",
        );
        assert!(report.is_ok(), "{:?}", report.errors);
        assert_eq!(
            report.rules.matches("[[virtual.web.rule]]").count(),
            1,
            "{}",
            report.rules
        );
        assert!(
            report.rules.contains("10.0.0.2:80\", weight = 2"),
            "{}",
            report.rules
        );
        assert!(
            report
                .warnings
                .iter()
                .any(|w| w.line == 7 && w.message.contains("never used")),
            "{:?}",
            report.warnings
        );
    }

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

    #[test]
    fn hhttp_hashes_the_capture_without_a_load_bound() {
        let report = import(
            "k",
            "Virtual web {\n    listen = 0.0.0.0:webcache\n    scheduler = hhttp\n\
                 server = 192.168.0.12:www 1\n    server = 192.168.0.11:www 1\n\
                 rule = pattern \"/users/([^/]+)/.*\" match 1 use server 192.168.0.12:www\n\
                 rule = pattern \"/users/([^/]+)/.*\" match 1 use server 192.168.0.11:www\n}\n",
        );
        assert!(report.is_ok(), "{:?}", report.errors);
        let r = &report.rules;
        assert!(r.contains("listen = \"0.0.0.0:8080\""), "{r}");
        assert!(r.contains("scheduler = \"hash\"\nkey = \"regex\"\npattern = '/users/([^/]+)/.*'\ngroup = 1\nbalance_factor = 0"), "{r}");
        assert!(r.contains("192.168.0.11:80"), "{r}");
    }
}
