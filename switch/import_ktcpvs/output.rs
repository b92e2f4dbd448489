//! The tcpvs rule file written as TOML text.

use super::model::Out;

// ---------------------------------------------------------------- rendering

/// A TOML literal string (no escapes: regexes stay readable) when it can be one.
pub(super) fn toml_literal(s: &str) -> String {
    if !s.contains('\'') && !s.chars().any(char::is_control) {
        return format!("'{s}'");
    }
    toml_string(s)
}

/// A TOML basic string.
pub(super) fn toml_string(s: &str) -> String {
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

pub(super) fn render(o: &Out) -> String {
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
