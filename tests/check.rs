//! `tcpvs check`: a valid file gets a one-line summary and exit 0; a wrong one exit 1 and each
//! error as FILE:LINE:COL: message, pointing at the offending token.

mod common;

use common::position_of;
use std::path::PathBuf;
use std::process::Command;

struct Checked {
    code: i32,
    stdout: String,
    stderr: String,
    file: String,
}

fn check(name: &str, text: &str) -> Checked {
    let dir = std::env::temp_dir().join(format!("tcpvs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    Checked {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        file: path.display().to_string(),
    }
}

const VALID: &str = r#"[switch]
workers = 2
header_timeout = "5s"

[virtual.web]
listen = "127.0.0.1:18555"
default_pool = "static"

[[virtual.web.rule]]
path = "^/cgi-bin/"
pool = "cgi"

[[virtual.web.rule]]
host = '^img\.'
method = "GET"
header = { name = "X-Pool", value = "^images$" }
pool = "static"

[pool.static]
scheduler = "wlc"
servers = [{ addr = "127.0.0.1:9001", weight = 1 }, { addr = "127.0.0.1:9002", weight = 2 }]

[pool.cgi]
scheduler = "rr"
servers = [{ addr = "127.0.0.1:9021" }]
"#;

#[test]
fn a_valid_file_gets_a_summary() {
    let c = check("valid.toml", VALID);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert_eq!(
        c.stdout.trim(),
        format!(
            "{}: ok: 1 virtual service, 2 pools, 3 servers, 2 rules",
            c.file
        )
    );
}

#[test]
fn the_shipped_rule_files_are_valid() {
    for file in [
        "rules/demo.toml",
        "rules/static-image-cgi.toml",
        "rules/locality.toml",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
            .arg("check")
            .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{file}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Each case: a broken variant of VALID (original, replacement), the token the error must point
/// at in the broken text, and words the message must contain.
#[test]
fn each_error_names_file_line_and_column() {
    let cases: &[(&str, &str, &str, &str, &str)] = &[
        (
            "toml syntax",
            "workers = 2",
            "workers = = 2",
            "= 2",
            "expected",
        ),
        (
            "unknown key",
            "workers = 2",
            "wrokers = 2",
            "wrokers",
            "unknown field `wrokers`",
        ),
        (
            "unknown key in a server",
            "weight = 2 }",
            "weigth = 2 }",
            "weigth",
            "unknown field `weigth`",
        ),
        (
            "unknown pool in a rule",
            "pool = \"cgi\"",
            "pool = \"cgy\"",
            "\"cgy\"",
            "unknown pool `cgy`",
        ),
        (
            "unknown default pool",
            "default_pool = \"static\"",
            "default_pool = \"statik\"",
            "\"statik\"",
            "unknown pool `statik`",
        ),
        (
            "invalid regex",
            "path = \"^/cgi-bin/\"",
            "path = \"^/cgi-bin/(\"",
            "\"^/cgi-bin/(\"",
            "invalid regex",
        ),
        (
            "unknown scheduler",
            "scheduler = \"rr\"",
            "scheduler = \"fastest\"",
            "\"fastest\"",
            "unknown scheduler `fastest`",
        ),
        (
            "weight out of range",
            "weight = 2 }",
            "weight = 70000 }",
            "70000",
            "out of range 0..=65535",
        ),
        (
            "negative weight",
            "weight = 2 }",
            "weight = -1 }",
            "-1",
            "out of range 0..=65535",
        ),
        (
            "bad server address",
            "127.0.0.1:9021",
            "127.0.0.1:90210",
            "\"127.0.0.1:90210\"",
            "invalid server address",
        ),
        (
            "bad listen address",
            "listen = \"127.0.0.1:18555\"",
            "listen = \"localhost\"",
            "\"localhost\"",
            "invalid listen address",
        ),
        (
            "empty pool",
            "servers = [{ addr = \"127.0.0.1:9021\" }]",
            "servers = []",
            "[]",
            "is empty",
        ),
        (
            "bad duration",
            "header_timeout = \"5s\"",
            "header_timeout = \"5 parsecs\"",
            "\"5 parsecs\"",
            "invalid duration",
        ),
        (
            "defer_accept not a boolean",
            "default_pool = \"static\"",
            "default_pool = \"static\"\ndefer_accept = \"yes\"",
            "\"yes\"",
            "expected a boolean",
        ),
        (
            "unknown module option",
            "scheduler = \"rr\"",
            "scheduler = \"rr\"\nt_low = 3",
            "t_low",
            "unknown option `t_low`",
        ),
    ];
    for (what, from, to, token, words) in cases {
        assert!(VALID.contains(from), "{what}: case does not apply");
        let broken = VALID.replacen(from, to, 1);
        let c = check("broken.toml", &broken);
        assert_eq!(c.code, 1, "{what}: must be refused\n{}", c.stdout);
        let (line, col) = position_of(&broken, token);
        let prefix = format!("{}:{line}:{col}: ", c.file);
        let first = c.stderr.lines().next().unwrap_or("");
        assert!(
            first.starts_with(&prefix),
            "{what}: expected {prefix}..., got {first:?}"
        );
        assert!(first.contains(words), "{what}: {first:?} lacks {words:?}");
    }
}

#[test]
fn duplicate_listen_addresses_are_refused() {
    let text =
        format!("{VALID}\n[virtual.other]\nlisten = \"127.0.0.1:18555\"\ndefault_pool = \"cgi\"\n");
    let c = check("dup.toml", &text);
    assert_eq!(c.code, 1);
    let (line, col) = position_of(
        &text[text.find("[virtual.other]").unwrap()..],
        "\"127.0.0.1:18555\"",
    );
    let base_line = text[..text.find("[virtual.other]").unwrap()]
        .matches('\n')
        .count();
    let expected = format!("{}:{}:{col}: listen address 127.0.0.1:18555 is already used by virtual service `web` (line 6)", c.file, base_line + line);
    assert_eq!(c.stderr.trim(), expected);
}

#[test]
fn every_error_is_reported_not_only_the_first() {
    let broken = VALID
        .replacen("pool = \"cgi\"", "pool = \"nope\"", 1)
        .replacen("weight = 2 }", "weight = 99999 }", 1)
        .replacen("scheduler = \"rr\"", "scheduler = \"zz\"", 1);
    let c = check("many.toml", &broken);
    assert_eq!(c.code, 1);
    let lines: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(lines.len(), 3, "{}", c.stderr);
    // In file order.
    let line_numbers: Vec<usize> = lines
        .iter()
        .map(|l| {
            l.strip_prefix(&format!("{}:", c.file))
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    let mut sorted = line_numbers.clone();
    sorted.sort_unstable();
    assert_eq!(line_numbers, sorted);
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(["check", "/nonexistent/rules.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("/nonexistent/rules.toml: cannot read:"),
        "{err}"
    );
}

/// `[admin] listen` is checked like a service's: a valid address, not one a service listens on.
/// (Served once the admin endpoint lands; until then the switch logs that it is not.)
#[test]
fn the_admin_listen_address_is_checked() {
    let ok = check(
        "admin.toml",
        &format!("{VALID}\n[admin]\nlisten = \"127.0.0.1:19090\"\n"),
    );
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    for (listen, message) in [
        (
            "127.0.0.1:18555",
            "listen address 127.0.0.1:18555 is already used by virtual service `web` (line 6)",
        ),
        ("localhost", "invalid listen address"),
    ] {
        let text = format!("{VALID}\n[admin]\nlisten = \"{listen}\"\n");
        let c = check("admin.toml", &text);
        assert_eq!(c.code, 1);
        let (line, col) = position_of(
            &text[text.find("[admin]").unwrap()..],
            &format!("\"{listen}\""),
        );
        let base = text[..text.find("[admin]").unwrap()].matches('\n').count();
        let expected = format!("{}:{}:{col}: {message}", c.file, base + line);
        assert!(
            c.stderr.trim().starts_with(&expected),
            "{}\nexpected: {expected}",
            c.stderr
        );
    }
}
