//! The grammar of a KTCPVS file (`tcpvs_config.c`: `parse_service`, `parse_server`,
//! `parse_rule`, the process knobs) over its words (lex.rs), into services.

use super::address::parse_addrport;
use super::lex::{c_number, Token};
use super::model::{Addr, KRule, KServer, KService, Knob, Setting};
use super::{Diags, Pos};

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

pub(super) struct Parser<'a> {
    pub(super) tokens: &'a [Token],
    pub(super) pos: usize,
    pub(super) d: &'a mut Diags,
    /// Where each statement read is written: its first word and the column after its last,
    /// on its first line (`virtual NAME {` is one too).
    pub(super) statements: Vec<(Pos, usize)>,
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

    /// Skips the rest of a statement that has an error: the rest of `line`, or up to its `;`
    /// where one ends it (the statements after it on the line are read as usual).
    fn skip_statement(&mut self, line: usize) {
        while let Some(t) = self.peek() {
            if t.line != line || t.is_separator() {
                return;
            }
            self.pos += 1;
        }
    }

    fn last_line(&self) -> usize {
        self.tokens
            .get(self.pos.saturating_sub(1))
            .map_or(1, |t| t.line)
    }

    /// The next word, unless the file ends, a `;` ends the statement, or a later line begins a
    /// new statement there (the value is missing; tcpvsadm would have taken that word and
    /// failed on it).
    fn value(&mut self, after: &Token, missing: &str) -> Parsed<Token> {
        match self.peek() {
            Some(t) if t.is_separator() => {
                self.d
                    .error(after.pos(), format!("{missing} (`;` ends the statement)"));
                Err(())
            }
            Some(t) if t.line == after.line || !Self::starts_statement(t) => {
                Ok(self.bump().expect("peeked"))
            }
            _ => {
                self.d.error(after.pos(), missing.to_string());
                Err(())
            }
        }
    }

    /// The services of the file, and where its statements are written.
    pub(super) fn file(mut self) -> (Vec<KService>, Vec<(Pos, usize)>) {
        let mut services = Vec::new();
        while let Some(t) = self.bump() {
            if t.is_separator() {
                // After a `}` on one line: `virtual a { ... }; virtual b { ... }`.
                continue;
            }
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
        (services, self.statements)
    }

    /// Notes the statement that began with `first` and ended with the last word read.
    fn statement_read(&mut self, first: &Token) {
        if let Some(last) = self.tokens.get(self.pos.saturating_sub(1)) {
            if last.line == first.line && self.pos > 0 {
                self.statements.push((first.pos(), last.end_col()));
            }
        }
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
                self.statement_read(keyword);
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
            if t.is_separator() {
                self.bump();
                continue;
            }
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
                self.skip_statement(t.line);
                continue;
            };
            if self.statement(key, &t, &mut service).is_err() {
                let line = self.last_line();
                self.skip_statement(line);
            } else {
                self.statement_read(&t);
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
                    service.overridden.push(old.at);
                }
            }
            "scheduler" => {
                let v = self.value(&eq, "`scheduler =` needs a name such as `http`")?;
                if let Some(old) = service.scheduler.replace(Setting {
                    value: v.text.clone(),
                    at: v.pos(),
                }) {
                    service.overridden.push(old.at);
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
                    service.overridden.push(old.at);
                }
                service.knobs.push(Knob {
                    key: knob,
                    value: n as u32,
                    line: t.line,
                    at: t.pos(),
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
        let mut pattern = self.value(&word, &format!("`pattern` needs a regex: {SHAPE}"))?;
        // A `;` cut from the end of an unquoted pattern is the pattern's own: the statement
        // goes on after it (`rule = pattern ^/a; use server ...`), as tcpvsadm read it.
        while !pattern.quoted
            && self.peek().is_some_and(|t| {
                t.is_separator() && t.line == pattern.line && t.col == pattern.end_col()
            })
        {
            self.pos += 1;
            pattern.text.push(';');
        }
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
