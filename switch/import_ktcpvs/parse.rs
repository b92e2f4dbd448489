//! The KTCPVS file read as tcpvsadm reads it: words (`lex`), then the grammar (`Parser`) into
//! services, and addresses as `inet_aton` and `getservbyname` read them.

use std::net::{Ipv4Addr, ToSocketAddrs};

use super::model::{Addr, KRule, KServer, KService, Knob, Setting};
use super::{Diags, Pos};

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

// ---------------------------------------------------------------- words

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Token {
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

// ---------------------------------------------------------------- parser

pub(super) struct Parser<'a> {
    pub(super) tokens: &'a [Token],
    pub(super) pos: usize,
    pub(super) d: &'a mut Diags,
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

    pub(super) fn file(mut self) -> Vec<KService> {
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
}
