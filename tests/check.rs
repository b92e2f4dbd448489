//! `tcpvs check`: a valid file gets a one-line summary and exit 0; a wrong one exit 1 and each
//! error as FILE:LINE:COL: message, pointing at the offending token, every one in one run and in
//! file order. Warnings (rules that never match, unused pools) go to stderr as
//! FILE:LINE:COL: warning: message with exit 0, or refuse the file under `--strict`.

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
    check_with(&[], name, text)
}

/// `tcpvs check ARGS... FILE` on `text` written to a scratch file called `name`.
fn check_with(args: &[&str], name: &str, text: &str) -> Checked {
    let dir = std::env::temp_dir().join(format!("tcpvs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path: PathBuf = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .args(args)
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
    // Strict: a shipped file teaches by example, so it carries no warning either, as checked
    // out (the file in place, and a copy readable by all, as a checkout with any umask leaves
    // it) and installed as README says (mode 600). Every rule file of rules/ and deploy/.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut shipped = Vec::new();
    for folder in ["rules", "deploy"] {
        for entry in std::fs::read_dir(root.join(folder)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                shipped.push(path);
            }
        }
    }
    shipped.sort();
    let names: Vec<String> = shipped
        .iter()
        .map(|p| p.strip_prefix(root).unwrap().display().to_string())
        .collect();
    for file in [
        "rules/demo.toml",
        "rules/locality.toml",
        "rules/site-policy.toml",
        "rules/static-image-cgi.toml",
        "deploy/rules.toml",
    ] {
        assert!(names.iter().any(|n| n == file), "{file} in {names:?}");
    }
    // `tcpvs check --strict FILE`: its exit code and stderr.
    let strict = |path: &std::path::Path| {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
            .args(["check", "--strict"])
            .arg(path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    for (path, file) in shipped.iter().zip(&names) {
        assert_eq!(strict(path), (Some(0), String::new()), "{file}");
    }
    // Copies of each folder (site-policy.toml's certificate goes along), readable by all and
    // then as installed.
    let copies = std::env::temp_dir().join(format!("tcpvs-check-shipped-{}", std::process::id()));
    for folder in ["rules", "deploy"] {
        copy_folder(&root.join(folder), &copies.join(folder));
    }
    for mode in [0o644, 0o600] {
        for file in &names {
            let copy = copies.join(file);
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(mode)).unwrap();
            assert_eq!(
                strict(&copy),
                (Some(0), String::new()),
                "{file} mode {mode:o}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&copies);
    // The deploy example's secret is commented out, not the warning weakened: set in a copy
    // readable by all, it is warned about, and --strict refuses it.
    let deploy = std::fs::read_to_string(root.join("deploy/rules.toml")).unwrap();
    let secret_line = "#   secret = \"the same long random string on every instance\"\n";
    assert!(deploy.contains(secret_line), "{deploy}");
    let with_secret = deploy.replace(
        secret_line,
        "secret = \"the same long random string on every instance\"\n",
    );
    let readable = check_mode(&[], "deploy-rules-644.toml", &with_secret, 0o644);
    assert_eq!(readable.code, 0);
    assert_eq!(
        readable.stderr.trim(),
        at(&readable.file, &with_secret, "\"the same long random string", 0, "warning: pool `app`'s cookie `secret` is in this rule file, which its group and every other user can read (mode 0644): whoever reads it can make cookies that choose a server; make the file mode 600")
    );
    let strict = check_mode(&["--strict"], "deploy-rules-644.toml", &with_secret, 0o644);
    assert_eq!(strict.code, 1, "{}", strict.stderr);
}

/// Copies the folder `from`, with its subfolders, to `to`.
fn copy_folder(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// [`check_with`] on a file of permissions `mode` (writing a file anew keeps its mode).
fn check_mode(args: &[&str], name: &str, text: &str, mode: u32) -> Checked {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("tcpvs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    check_with(args, name, text)
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
            "server name without a port",
            "127.0.0.1:9021",
            "app1.internal",
            "\"app1.internal\"",
            "invalid server address \"app1.internal\": a port is required",
        ),
        (
            "server name that does not resolve",
            "127.0.0.1:9021",
            "nowhere.invalid:80",
            "\"nowhere.invalid:80\"",
            "server address \"nowhere.invalid:80\": the name does not resolve (",
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
            "`defer_accept`: expected true or false, found the string \"yes\"",
        ),
        (
            "request_buffer not a size",
            "scheduler = \"rr\"",
            "scheduler = \"rr\"\nrequest_buffer = \"1MB!\"",
            "\"1MB!\"",
            "invalid size \"1MB!\"",
        ),
        (
            "buffer_memory negative",
            "workers = 2",
            "workers = 2\nbuffer_memory = -1",
            "-1",
            "buffer_memory cannot be negative",
        ),
        (
            "min_body_rate not a rate",
            "workers = 2",
            "workers = 2\nmin_body_rate = \"fast\"",
            "\"fast\"",
            "invalid rate \"fast\": expected bytes a second",
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

/// `FILE:LINE:COL: message` with the position of the first `token` in `text` (after `skip`
/// characters of the token, to point inside it).
fn at(file: &str, text: &str, token: &str, skip: usize, message: &str) -> String {
    let (line, col) = position_of(text, token);
    format!("{file}:{line}:{}: {message}", col + skip)
}

/// The file of issue 12: mistakes of every kind at once. serde stopped at the first
/// parse-level one (four rounds for four mistakes); now one run shows them all, in file order.
const MANY_MISTAKES: &str = r#"[switch]
workers = 2
wrokers = 4
max_clients = "many"
header_timeout = "5 parsecs"

[virtual.web]
listen = "127.0.0.1:18557"
default_pool = "static"
defer_accept = "yes"

[[virtual.web.rule]]
path = "^/cgi-bin/"
pool = "cgy"

[pool.static]
scheduler = 3
servers = [{ addr = "127.0.0.1:9001", weigth = 1 }, { addr = "127.0.0.1:9002", weight = "2" }]

[pool.cgi]
slow_start = 10
servers = "127.0.0.1:9021"
"#;

#[test]
fn every_mistake_is_reported_in_one_run_in_file_order() {
    let text = MANY_MISTAKES;
    let c = check("many-mistakes.toml", text);
    assert_eq!(c.code, 1);
    assert_eq!(c.stdout, "", "no summary for a refused file");
    let f = c.file.as_str();
    let expected = [
        at(f, text, "wrokers", 0, "unknown field `wrokers` in [switch]: did you mean `workers`?"),
        at(f, text, "\"many\"", 0, "`max_clients`: expected a whole number, found the string \"many\""),
        at(f, text, "\"5 parsecs\"", 0, "invalid duration \"5 parsecs\": expected a number and a unit (ms, s, m, h), like \"10s\" or \"250ms\""),
        at(f, text, "\"yes\"", 0, "`defer_accept`: expected true or false, found the string \"yes\""),
        at(f, text, "\"cgy\"", 0, "unknown pool `cgy` (pools: cgi, static)"),
        at(f, text, "3\n", 0, "`scheduler`: expected a module name like \"wlc\", found the number 3"),
        at(f, text, "weigth", 0, "unknown field `weigth` in a server of [pool.static]: did you mean `weight`?"),
        at(f, text, "\"2\"", 0, "`weight`: expected a whole number, found the string \"2\""),
        at(f, text, "10\n", 0, "`slow_start`: expected a duration like \"30s\", found the number 10"),
        at(f, text, "\"127.0.0.1:9021\"", 0, "`servers`: expected a list of servers like [{ addr = \"127.0.0.1:9001\" }], found the string \"127.0.0.1:9021\""),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}

#[test]
fn type_errors_speak_the_files_language_not_rusts() {
    let text = r#"[switch]
workers = "2"
header_timeout = 30
splice = 1
access_log_format = true

[admin]
listen = 9090

[virtual.web]
listen = "127.0.0.1:18558"
default_pool = ["static"]
rule = { path = "^/", pool = "static" }

[pool.static]
servers = [{ addr = "127.0.0.1:9001", backup = "no", max_conns = 1.5 }, "127.0.0.1:9002"]
health = "http"
"#;
    let c = check("types.toml", text);
    assert_eq!(c.code, 1);
    let f = c.file.as_str();
    let expected = [
        at(f, text, "\"2\"", 0, "`workers`: expected a whole number, found the string \"2\""),
        at(f, text, "30", 0, "`header_timeout`: expected a duration like \"30s\", found the number 30"),
        at(f, text, "1\n", 0, "`splice`: expected true or false, found the number 1"),
        at(f, text, "true", 0, "`access_log_format`: expected \"text\", \"json\" or \"combined\", found true"),
        at(f, text, "9090", 0, "`listen`: expected an address like \"127.0.0.1:9090\" or a Unix socket like \"unix:/run/tcpvs/admin.sock\", found the number 9090"),
        at(f, text, "[\"static\"]", 0, "`default_pool`: expected a pool name like \"static\", found a list"),
        at(f, text, "{ path", 0, "`rule`: expected rules written as [[virtual.web.rule]] tables, found a table"),
        at(f, text, "\"no\"", 0, "`backup`: expected true or false, found the string \"no\""),
        at(f, text, "1.5", 0, "`max_conns`: expected a whole number, found the number 1.5"),
        at(f, text, "\"127.0.0.1:9002\"", 0, "`servers`: expected a server like { addr = \"127.0.0.1:9001\" }, found the string \"127.0.0.1:9002\""),
        at(f, text, "\"http\"", 0, "`health`: expected a table [pool.NAME.health], found the string \"http\""),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
    for rust in [
        "invalid type",
        "integer `",
        "sequence",
        "map",
        "i64",
        "u32",
        "String",
        "bool",
    ] {
        assert!(!c.stderr.contains(rust), "{rust:?} in {}", c.stderr);
    }
}

#[test]
fn unknown_keys_and_missing_ones_are_all_named() {
    let text = r#"workers = 2

[servers]
x = 1

[virtual.web]
default_pool = "static"

[[virtual.web.rule]]
paht = "^/x"
pool = "static"

[[virtual.web.rule]]
header = { name = "X-Pool" }
pool = "static"

[[virtual.web.rule]]
path = "^/y"

[pool.static]
schedular = "rr"
servers = [{ weight = 1 }]
"#;
    let c = check("unknown-missing.toml", text);
    assert_eq!(c.code, 1);
    let f = c.file.as_str();
    let expected = [
        at(f, text, "workers", 0, "unknown field `workers` at the top of the file: it belongs in [switch]"),
        at(f, text, "servers]", 0, "unknown table `[servers]` at the top of the file (a rule file has [switch], [admin], [virtual.NAME], [pool.NAME] and [limit.NAME])"),
        at(f, text, "[virtual.web]", 0, "[virtual.web] has no `listen`: add the address to accept clients on, like \"127.0.0.1:8080\""),
        at(f, text, "paht", 0, "unknown field `paht` in a rule of [virtual.web]: did you mean `path`?"),
        at(f, text, "{ name", 0, "`header` has no `value`: write { name = \"X-Pool\", value = \"^images$\" }"),
        at(f, text, "[[virtual.web.rule]]\npath", 0, "a rule of [virtual.web] has no `pool`: name the pool its requests go to (or answer them with `redirect` or `respond`)"),
        at(f, text, "schedular", 0, "unknown option `schedular` for scheduler `wlc` (it takes no options): did you mean `scheduler`?"),
        at(f, text, "{ weight", 0, "a server has no `addr`: write it like { addr = \"127.0.0.1:9001\" }"),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}

#[test]
fn a_syntax_error_stops_the_check_and_is_pinned_to_its_place() {
    // After a syntax error the rest cannot be trusted: only the TOML errors (one per line).
    let text = "[switch]\nworkers = = 2\nwrokers = 3\n";
    let c = check("syntax.toml", text);
    assert_eq!(c.code, 1);
    assert_eq!(
        c.stderr.trim(),
        at(&c.file, text, "= 2", 0, "extra `=`, expected nothing")
    );
    let text = format!("{VALID}\n[pool.cgi]\nscheduler = \"wlc\"\n");
    let c = check("duplicate.toml", &text);
    assert_eq!(c.code, 1);
    let (line, _) = position_of(&text, "\n[pool.cgi]\nscheduler = \"wlc\"");
    // The table again, then its `scheduler` again: nothing beyond TOML's own errors.
    assert_eq!(
        c.stderr.lines().collect::<Vec<_>>(),
        [
            format!(
                "{}:{}:7: duplicate key `cgi`: already defined above",
                c.file,
                line + 1
            ),
            format!(
                "{}:{}:1: duplicate key `scheduler`: already defined above",
                c.file,
                line + 2
            ),
        ]
    );
}

/// VALID with one more rule, pool or key: exit 0, the summary on stdout, one warning on stderr.
fn warns(name: &str, text: &str, token: &str, skip: usize, message: &str) {
    let c = check(name, text);
    assert_eq!(c.code, 0, "warnings leave the file valid: {}", c.stderr);
    assert!(
        c.stdout.starts_with(&format!("{}: ok: ", c.file)),
        "{}",
        c.stdout
    );
    let expected = at(&c.file, text, token, skip, &format!("warning: {message}"));
    assert_eq!(c.stderr.trim(), expected);
}

#[test]
fn a_lowercase_method_is_a_warning() {
    let text = VALID.replacen("method = \"GET\"", "method = \"get\"", 1);
    warns(
        "method.toml",
        &text,
        "\"get\"",
        0,
        "method \"get\" is not upper case: methods are case-sensitive, so this rule never matches a normal request (write \"GET\")",
    );
}

#[test]
fn a_rule_after_a_catch_all_is_a_warning() {
    for catch_all in [
        "",
        "path = \"\"\n",
        "path = \".\"\n",
        "path = \"^\"\n",
        "path = \"^/\"\n",
        "path = \".*\"\n",
    ] {
        let text = VALID.replacen(
            "[[virtual.web.rule]]\npath = \"^/cgi-bin/\"\n",
            &format!("[[virtual.web.rule]]\n{catch_all}pool = \"static\"\n\n[[virtual.web.rule]]\npath = \"^/cgi-bin/\"\n"),
            1,
        );
        let why = match catch_all {
            "" => "it has no conditions".to_string(),
            _ => format!(
                "its path {} matches every path",
                &catch_all[7..catch_all.len() - 1]
            ),
        };
        let c = check("catch-all.toml", &text);
        assert_eq!(c.code, 0, "{}", c.stderr);
        let (line, _) = position_of(&text, "[[virtual.web.rule]]");
        let message = format!("warning: this rule is never reached: the rule at line {line} matches every request ({why})");
        // Both rules after it: the cgi one and the img one.
        let hidden: Vec<String> = text
            .match_indices("[[virtual.web.rule]]")
            .skip(1)
            .map(|(i, _)| {
                let l = text[..i].matches('\n').count() + 1;
                format!("{}:{l}:1: {message}", c.file)
            })
            .collect();
        assert_eq!(
            c.stderr.lines().collect::<Vec<_>>(),
            hidden,
            "{catch_all:?}"
        );
    }
    // A path that only looks general is not a catch-all.
    let text = VALID.replacen("\"^/cgi-bin/\"", "\"^/c\"", 1);
    let c = check("not-catch-all.toml", &text);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
}

#[test]
fn a_pool_nothing_uses_is_a_warning() {
    let text = format!("{VALID}\n[pool.spare]\nservers = [{{ addr = \"127.0.0.1:9031\" }}]\n");
    warns(
        "unused.toml",
        &text,
        "spare",
        0,
        "pool `spare` is not used: no rule and no default_pool names it",
    );
}

#[test]
fn a_rule_with_the_conditions_of_an_earlier_one_is_a_warning() {
    let text = VALID.replacen(
        "[pool.static]",
        "[[virtual.web.rule]]\nmethod = \"GET\"\nhost = '^img\\.'\nheader = { name = \"x-pool\", value = \"^images$\" }\npool = \"cgi\"\n\n[pool.static]",
        1,
    );
    let (line, _) = position_of(&text, "[[virtual.web.rule]]\nhost");
    warns(
        "duplicate-rule.toml",
        &text,
        "[[virtual.web.rule]]\nmethod",
        0,
        &format!("this rule is never reached: the rule at line {line} has the same conditions"),
    );
}

#[test]
fn strict_turns_warnings_into_errors() {
    let text = VALID.replacen("method = \"GET\"", "method = \"Get\"", 1)
        + "\n[pool.spare]\nservers = [{ addr = \"127.0.0.1:9031\" }]\n";
    let c = check("lenient.toml", &text);
    assert_eq!(c.code, 0);
    assert_eq!(c.stderr.lines().count(), 2, "{}", c.stderr);
    assert!(c.stderr.lines().all(|l| l.contains(": warning: ")));

    let c = check_with(&["--strict"], "strict.toml", &text);
    assert_eq!(c.code, 1);
    assert_eq!(c.stdout, "", "no summary for a refused file");
    let f = c.file.as_str();
    let expected = [
        at(f, &text, "\"Get\"", 0, "method \"Get\" is not upper case: methods are case-sensitive, so this rule never matches a normal request (write \"GET\")"),
        at(f, &text, "spare", 0, "pool `spare` is not used: no rule and no default_pool names it"),
    ];
    assert_eq!(c.stderr.lines().collect::<Vec<_>>(), expected);

    // A file without warnings passes --strict.
    let c = check_with(&["--strict"], "strict-valid.toml", VALID);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
    assert!(c.stdout.contains(": ok: "));
}

#[test]
fn a_refused_file_shows_its_warnings_among_the_errors_in_file_order() {
    let text = VALID
        .replacen("method = \"GET\"", "method = \"get\"", 1)
        .replacen("header_timeout = \"5s\"", "header_timeout = \"5\"", 1)
        .replacen("weight = 2 }", "weight = 70000 }", 1);
    let c = check("mixed.toml", &text);
    assert_eq!(c.code, 1);
    let f = c.file.as_str();
    let expected = [
        at(f, &text, "\"5\"", 0, "invalid duration \"5\": expected a number and a unit (ms, s, m, h), like \"10s\" or \"250ms\""),
        at(f, &text, "\"get\"", 0, "warning: method \"get\" is not upper case: methods are case-sensitive, so this rule never matches a normal request (write \"GET\")"),
        at(f, &text, "70000", 0, "weight 70000 is out of range 0..=65535"),
    ];
    assert_eq!(c.stderr.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn a_misspelt_condition_makes_no_catch_all_and_a_typo_in_a_pool_name_no_unused_pool() {
    // `paht` is an error; the rule is not taken for one without conditions, and `cgy` is an
    // error, not a reason to call `cgi` unused.
    let text = VALID
        .replacen("path = \"^/cgi-bin/\"", "paht = \"^/cgi-bin/\"", 1)
        .replacen("pool = \"cgi\"", "pool = \"cgy\"", 1);
    let c = check("no-echo.toml", &text);
    assert_eq!(c.code, 1);
    assert_eq!(c.stderr.lines().count(), 2, "{}", c.stderr);
    assert!(!c.stderr.contains("warning"), "{}", c.stderr);
}

#[test]
fn the_library_keeps_the_warnings_for_run_and_reload() {
    let text = format!("{VALID}\n[pool.spare]\nservers = [{{ addr = \"127.0.0.1:9031\" }}]\n");
    let config = tcpvs::Config::parse("lib.toml", &text).unwrap();
    let (line, col) = position_of(&text, "spare");
    assert_eq!(config.warnings.len(), 1);
    assert_eq!(
        config.warnings[0].to_string(),
        format!("lib.toml:{line}:{col}: warning: pool `spare` is not used: no rule and no default_pool names it")
    );
    assert_eq!(
        config.warnings[0].as_error().to_string(),
        format!(
            "lib.toml:{line}:{col}: pool `spare` is not used: no rule and no default_pool names it"
        )
    );
    // A refused file keeps its warnings beside its errors.
    let broken = text.replacen("workers = 2", "workers = -1", 1);
    let checked = tcpvs::config::Config::check("lib.toml", &broken);
    assert_eq!(checked.config.unwrap_err().0.len(), 1);
    assert_eq!(checked.warnings.len(), 1);
}

/// Misspelt scheduler options, option values and scheduler names get the word probably meant,
/// as unknown keys do; an option read only with another `key` says so.
#[test]
fn misspelt_scheduler_options_get_did_you_mean() {
    let text = r#"[virtual.web]
listen = "127.0.0.1:18561"
default_pool = "a"

[[virtual.web.rule]]
path = "^/b"
pool = "b"

[[virtual.web.rule]]
path = "^/c"
pool = "c"

[[virtual.web.rule]]
path = "^/d"
pool = "d"

[[virtual.web.rule]]
path = "^/e"
pool = "e"

[[virtual.web.rule]]
path = "^/f"
pool = "f"

[[virtual.web.rule]]
path = "^/g"
pool = "g"

[[virtual.web.rule]]
path = "^/h"
pool = "h"

[pool.a]
scheduler = "lard"
t_hihg = 80
servers = [{ addr = "127.0.0.1:9001" }]

[pool.b]
scheduler = "hash"
key = "regx"
servers = [{ addr = "127.0.0.1:9001" }]

[pool.c]
scheduler = "lrad"
servers = [{ addr = "127.0.0.1:9001" }]

[pool.d]
scheduler = "hash"
pattern = "^/d/(.*)"
servers = [{ addr = "127.0.0.1:9001" }]

[pool.e]
scheduler = "cookie"
inner = "wcl"
servers = [{ addr = "127.0.0.1:9001" }]

[pool.f]
scheduler = "lard-r"
thresholds = "auto"
t_low = 3
servers = [{ addr = "127.0.0.1:9001" }]

[pool.g]
scheduler = "lard"
thresholds = "adaptive"
servers = [{ addr = "127.0.0.1:9001" }]

[pool.h]
scheduler = "lard-r"
spill = "measure"
servers = [{ addr = "127.0.0.1:9001" }]
"#;
    let c = check("options.toml", text);
    assert_eq!(c.code, 1, "{}", c.stdout);
    let f = c.file.as_str();
    let expected = [
        at(f, text, "t_hihg", 0, "unknown option `t_hihg` for scheduler `lard`: did you mean `t_high`?"),
        at(f, text, "key = \"regx\"", 0, "key = \"regx\" is not one of path, uri, regex, host, header, cookie, source: did you mean \"regex\"?"),
        at(f, text, "\"lrad\"", 0, "unknown scheduler `lrad` (known: wlc, lc, rr, wrr, lard, lard-r, hash, source-hash, cookie): did you mean `lard`?"),
        at(f, text, "pattern = ", 0, "option `pattern` of scheduler `hash` is read only with key = \"regex\""),
        at(f, text, "inner", 0, "unknown inner scheduler `wcl`: did you mean `wlc`?"),
        at(f, text, "t_low = 3", 0, "t_low and t_high are fixed thresholds, and thresholds = \"auto\" computes them from the pool's load: remove them, or set thresholds = \"fixed\""),
        at(f, text, "thresholds = \"adaptive\"", 0, "thresholds = \"adaptive\" is not one of auto, fixed"),
        at(f, text, "spill = ", 0, "spill = \"measure\" is not one of measured, off: did you mean \"measured\"?"),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}

/// A port above 65535 is named as the fault, in listen and server addresses alike.
#[test]
fn a_port_out_of_range_is_said_so() {
    let text = r#"[admin]
listen = "127.0.0.1:90900"

[virtual.web]
listen = "127.0.0.1:70000"
default_pool = "p"

[virtual.six]
listen = "[::1]:65536"
default_pool = "p"

[pool.p]
servers = [{ addr = "127.0.0.1:99999" }, { addr = "[::1]:123456" }, { addr = "localhost:65536" }, { addr = "127.0.0.1:9001" }]
"#;
    let c = check("ports.toml", text);
    assert_eq!(c.code, 1, "{}", c.stdout);
    let f = c.file.as_str();
    let expected = [
        at(
            f,
            text,
            "\"127.0.0.1:90900\"",
            0,
            "invalid listen address \"127.0.0.1:90900\": port 90900 is out of range 0..=65535",
        ),
        at(
            f,
            text,
            "\"127.0.0.1:70000\"",
            0,
            "invalid listen address \"127.0.0.1:70000\": port 70000 is out of range 0..=65535",
        ),
        at(
            f,
            text,
            "\"[::1]:65536\"",
            0,
            "invalid listen address \"[::1]:65536\": port 65536 is out of range 0..=65535",
        ),
        at(
            f,
            text,
            "\"127.0.0.1:99999\"",
            0,
            "invalid server address \"127.0.0.1:99999\": port 99999 is out of range 1..=65535",
        ),
        at(
            f,
            text,
            "\"[::1]:123456\"",
            0,
            "invalid server address \"[::1]:123456\": port 123456 is out of range 1..=65535",
        ),
        at(
            f,
            text,
            "\"localhost:65536\"",
            0,
            "invalid server address \"localhost:65536\": port 65536 is out of range 1..=65535",
        ),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}

/// A virtual service that can route no request (no rule and no default_pool, or only pools of
/// weight-0 servers) is a warning at its name: it would answer every request with 503.
#[test]
fn a_service_that_routes_nowhere_is_a_warning() {
    let text = format!("{VALID}\n[virtual.api]\nlisten = \"127.0.0.1:18562\"\n");
    warns(
        "nowhere.toml",
        &text,
        "api]",
        0,
        "virtual service `api` routes nowhere: it has no rules and no default_pool, so every \
         request gets 503",
    );
    let text = format!(
        "{VALID}\n[virtual.quiet]\nlisten = \"127.0.0.1:18563\"\ndefault_pool = \"zero\"\n\n\
         [[virtual.quiet.rule]]\npath = \"^/old/\"\npool = \"zero2\"\n\n\
         [pool.zero]\nservers = [{{ addr = \"127.0.0.1:9001\", weight = 0 }}]\n\n\
         [pool.zero2]\nservers = [{{ addr = \"127.0.0.1:9002\", weight = 0 }}, \
         {{ addr = \"127.0.0.1:9003\", weight = 0, backup = true }}]\n"
    );
    warns(
        "quiescent.toml",
        &text,
        "quiet]",
        0,
        "virtual service `quiet` routes nowhere: every pool it routes to (`zero2`, `zero`) has \
         only servers of weight 0, which take no new requests, so every request gets 503",
    );
    // One server of weight 1 anywhere it routes: no warning.
    let text = text.replacen("9003\", weight = 0", "9003\", weight = 1", 1);
    let c = check("routes.toml", &text);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
}

// ---------------------------------------------------------------- [admin] on a shared host

/// VALID with an `[admin]` table of `keys` first, checked from a file of mode `mode`.
fn with_admin(name: &str, keys: &str, mode: u32) -> (Checked, String) {
    let text = format!("[admin]\n{keys}\n{VALID}");
    (check_mode(&[], name, &text, mode), text)
}

#[test]
fn a_bad_admin_socket_is_refused_at_its_key() {
    let long = format!("/run/{}.sock", "x".repeat(100));
    let cases: &[(&str, &str, String)] = &[
        (
            "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"0680\"",
            "\"0680\"",
            "mode \"0680\" is not an octal permission like \"0600\" (owner) or \"0660\" (owner and group)".into(),
        ),
        (
            "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"rw-rw----\"",
            "\"rw-rw----\"",
            "mode \"rw-rw----\" is not an octal permission like \"0600\" (owner) or \"0660\" (owner and group)".into(),
        ),
        (
            "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"\"",
            "\"\"",
            "mode \"\" is not an octal permission like \"0600\" (owner) or \"0660\" (owner and group)".into(),
        ),
        (
            "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"4770\"",
            "\"4770\"",
            "mode 4770 has setuid, setgid or sticky bits, which mean nothing for a socket: give the permission bits only, like \"0660\"".into(),
        ),
        (
            "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = 660",
            "660",
            "`mode`: expected an octal string like \"0600\", found the number 660".into(),
        ),
        (
            "listen = \"127.0.0.1:9090\"\ntoken_file = \"/dev/null/x\"\nmode = \"0600\"",
            "\"0600\"",
            "`mode` sets the permissions of a Unix socket: it needs `listen = \"unix:PATH\"`".into(),
        ),
        (
            "listen = \"unix:\"",
            "\"unix:\"",
            "`unix:` needs the socket's path, like \"unix:/run/tcpvs/admin.sock\"".into(),
        ),
        (
            &*Box::leak(format!("listen = \"unix:{long}\"").into_boxed_str()),
            "\"unix:",
            format!("the socket's path {long} is 110 bytes long; a Unix socket's path holds at most 107"),
        ),
    ];
    for (i, (keys, token, message)) in cases.iter().enumerate() {
        let (c, text) = with_admin(&format!("admin-mode-{i}.toml"), keys, 0o600);
        assert_eq!(c.code, 1, "{keys}: {}", c.stderr);
        let expected = at(&c.file, &text, token, 0, message);
        let errors: Vec<&str> = c
            .stderr
            .lines()
            .filter(|l| !l.contains("token_file"))
            .collect();
        assert_eq!(errors, [expected.as_str()], "{keys}");
    }
    // What is right: an octal mode of 3 or 4 digits (or 0o...), a path relative to the file.
    for (i, mode) in ["0660", "600", "0o640", "0000"].iter().enumerate() {
        let keys = format!("listen = \"unix:admin.sock\"\nmode = \"{mode}\"");
        let (c, _) = with_admin(&format!("admin-mode-ok-{i}.toml"), &keys, 0o600);
        assert_eq!((c.code, c.stderr.as_str()), (0, ""), "{mode}");
    }
}

#[test]
fn secrets_other_users_can_read_and_changes_any_local_user_can_make_are_warnings() {
    let warns_at = |name: &str, keys: &str, mode: u32, token: &str, message: &str| {
        let (c, text) = with_admin(name, keys, mode);
        assert_eq!(c.code, 0, "{}", c.stderr);
        assert!(c.stdout.contains(": ok: "), "{}", c.stdout);
        let expected = at(&c.file, &text, token, 0, &format!("warning: {message}"));
        assert_eq!(c.stderr.trim(), expected);
    };
    let quiet = |name: &str, keys: &str, mode: u32| {
        let (c, _) = with_admin(name, keys, mode);
        assert_eq!((c.code, c.stderr.as_str()), (0, ""), "{keys}");
    };
    let inline = "listen = \"127.0.0.1:9090\"\ntoken = \"s3cret\"";
    warns_at(
        "token-644.toml",
        inline,
        0o644,
        "\"s3cret\"",
        "the admin token is in this rule file, which its group and every other user can read (mode 0644): move it to a `token_file` of mode 600, or make this file mode 600",
    );
    warns_at(
        "token-640.toml",
        inline,
        0o640,
        "\"s3cret\"",
        "the admin token is in this rule file, which its group can read (mode 0640): move it to a `token_file` of mode 600, or make this file mode 600",
    );
    quiet("token-600.toml", inline, 0o600);

    // A token file: its own mode counts, the rule file's does not.
    let dir = std::env::temp_dir().join(format!("tcpvs-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, "from-a-file\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let by_file = "listen = \"127.0.0.1:9090\"\ntoken_file = \"admin-token\"";
    warns_at(
        "token-file-640.toml",
        by_file,
        0o644,
        "\"admin-token\"",
        &format!(
            "the admin token is in {} (token_file), which its group can read (mode 0640): chmod 600 {}",
            token_file.display(),
            token_file.display()
        ),
    );
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    quiet("token-file-600.toml", by_file, 0o644);

    // No token on loopback: any local user may change servers.
    warns_at(
        "loopback.toml",
        "listen = \"127.0.0.1:9090\"",
        0o600,
        "\"127.0.0.1:9090\"",
        "any local user can change servers and reload through the admin endpoint on 127.0.0.1:9090 (it has no token): set `token_file`, or listen on a Unix socket (\"unix:/run/tcpvs/admin.sock\") whose `mode` says who may",
    );
    // A socket any local user can connect to, without a token: the same.
    warns_at(
        "socket-666.toml",
        "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"0666\"",
        0o600,
        "\"0666\"",
        "mode 0666 lets any local user connect to the admin socket, and without a token that means change servers and reload: take `o+w` away (\"0660\": its owner and group) or set `token_file`",
    );
    quiet(
        "socket-660.toml",
        "listen = \"unix:/run/tcpvs/admin.sock\"\nmode = \"0660\"",
        0o644,
    );
    quiet(
        "socket-default.toml",
        "listen = \"unix:/run/tcpvs/admin.sock\"",
        0o644,
    );
    // A socket in a folder any local user can write (/tmp is 1777): its path can be taken.
    warns_at(
        "socket-in-tmp.toml",
        "listen = \"unix:/tmp/tcpvs-admin.sock\"\ntoken_file = \"admin-token\"",
        0o600,
        "\"unix:/tmp/tcpvs-admin.sock\"",
        "every local user can create files in /tmp (mode 1777): one could take the admin socket's path first (the switch then cannot start) or listen there in its place (the admin verbs would send it the token): put the socket in a folder only the switch's user can write, such as /run/tcpvs",
    );

    // A pool's cookie secret.
    let text = VALID.replacen(
        "[pool.static]\nscheduler = \"wlc\"",
        "[pool.static]\nscheduler = \"cookie\"\nsecret = \"keyed-hash-key\"",
        1,
    );
    let c = check_mode(&[], "cookie-604.toml", &text, 0o604);
    assert_eq!(c.code, 0, "{}", c.stderr);
    assert_eq!(
        c.stderr.trim(),
        at(&c.file, &text, "\"keyed-hash-key\"", 0, "warning: pool `static`'s cookie `secret` is in this rule file, which every other user can read (mode 0604): whoever reads it can make cookies that choose a server; make the file mode 600")
    );
    let c = check_mode(&["--strict"], "cookie-600.toml", &text, 0o600);
    assert_eq!((c.code, c.stderr.as_str()), (0, ""));
}

/// Every mistake in the policy keys of issue 26 at once, each pinned to its place.
#[test]
fn policy_mistakes_are_all_named_at_their_place() {
    let text = r#"[virtual.web]
listen = "127.0.0.1:8080"
default_pool = "static"

[[virtual.web.rule]]
path = "^/old/(.*)/(.*)$"
redirect = { path = "/new/$3", code = 301 }

[[virtual.web.rule]]
path = "^/a"
source = ["10.0.0.0/8", "10.0.0.300/8"]
pool = "static"

[[virtual.web.rule]]
path = "^/b"
pool = "static"
request_headers = { set = { "X Pool" = "1", "Host" = "other" }, remove = ["Content-Length"] }
response_headers = { add = { "Transfer-Encoding" = "chunked" } }

[[virtual.web.rule]]
path = "^/c"
pool = "static"
redirect = { scheme = "https" }

[[virtual.web.rule]]
path = "^/d"
pool = "static"
limit = "nosuch"

[[virtual.web.rule]]
path = "^/e"
respond = { status = 700 }

[[virtual.web.rule]]
path = "^/f"
pool = "static"
strip_prefix = "images"

[[virtual.web.rule]]
path = "^/g"
redirect = { scheme = "gopher", code = 200 }

[limit.api]
key = "header"
rate = "20 per second"
burst = 0

[pool.static]
servers = [{ addr = "127.0.0.1:9001" }]
"#;
    let c = check("policy-mistakes.toml", text);
    assert_eq!(c.code, 1, "{}", c.stderr);
    let f = c.file.as_str();
    let expected = [
        at(f, text, "$3", 0, "redirect `path`: `$3` names no group: the rule's `path` regex has 2 groups"),
        at(f, text, "\"10.0.0.300/8\"", 0, "`source`: \"10.0.0.300/8\" is not an address or network like \"10.0.0.0/8\" or \"::1\""),
        at(f, text, "\"X Pool\"", 0, "`request_headers`: \"X Pool\" cannot be a field name (a token: letters, digits and !#$%&'*+-.^_`|~)"),
        at(f, text, "\"Host\"", 0, "`request_headers`: rules may not change `Host`: the switch writes the framing and connection fields itself, and Host names the site (use `redirect`, `path_rewrite` or `strip_prefix`)"),
        at(f, text, "\"Content-Length\"", 0, "`request_headers`: rules may not change `Content-Length`: the switch writes the framing and connection fields itself, and Host names the site (use `redirect`, `path_rewrite` or `strip_prefix`)"),
        at(f, text, "\"Transfer-Encoding\"", 0, "`response_headers`: rules may not change `Transfer-Encoding`: the switch writes the framing and connection fields itself, and Host names the site (use `redirect`, `path_rewrite` or `strip_prefix`)"),
        at(f, text, "{ scheme = \"https\" }", 0, "a rule has one action: `pool` and `redirect` exclude each other"),
        at(f, text, "\"nosuch\"", 0, "unknown limit `nosuch` (limits: api)"),
        at(f, text, "700", 0, "respond status 700 is out of range 200..=599"),
        at(f, text, "\"images\"", 0, "strip_prefix \"images\" must be a path of at least one segment, like \"/images\""),
        at(f, text, "\"gopher\"", 0, "redirect scheme \"gopher\": \"http\" or \"https\""),
        at(f, text, "200 }", 0, "redirect code 200 is not a redirect: 301, 302, 303, 307 or 308"),
        at(f, text, "\"header\"", 0, "key = \"header\" needs `header` beside it: the header to count by"),
        at(f, text, "\"20 per second\"", 0, "rate \"20 per second\": expected N/s, N/m or N/h"),
        at(f, text, "0\n\n[pool", 0, "burst = 0 is out of range 1..=1000000"),
    ];
    let got: Vec<&str> = c.stderr.lines().collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}

/// `discover`, `interval` and `resolvers`: every mistake at its place in one run.
#[test]
fn discovery_mistakes_are_each_pinned_to_their_place() {
    let text = r#"[virtual.web]
listen = "127.0.0.1:18561"
default_pool = "a"

[pool.a]
discover = { dns = "10.0.0.1:80" }
interval = "500ms"

[pool.b]
discover = { dns = "api.internal" }
resolvers = ["127.0.0.1:8600", "dns.internal", "127.0.0.1:8600" ]

[pool.c]
discover = { srv = "_http._tcp.api:80", dsn = "x" }

[pool.d]
discover = {}

[pool.e]
servers = [{ addr = "127.0.0.1:9001" }]
interval = "5s"

[pool.f]
discover = { dns = "api.internal:80", srv = "_http._tcp.api" }
resolvers = []
"#;
    let c = check("discovery-mistakes.toml", text);
    assert_eq!(c.code, 1, "{}", c.stderr);
    let f = c.file.as_str();
    let expected = [
        at(f, text, "\"10.0.0.1:80\"", 0, "`discover.dns` takes a name to look up; 10.0.0.1:80 is an address: list it in `servers`"),
        at(f, text, "\"500ms\"", 0, "`interval` must be 1s to 24h"),
        at(f, text, "\"api.internal\" }", 0, "`discover.dns`: invalid server address \"api.internal\": a port is required, like \"api.internal:8080\""),
        at(f, text, "\"dns.internal\"", 0, "invalid resolver \"dns.internal\": expected IP or IP:PORT like \"127.0.0.1:8600\" (port 53 when left out)"),
        at(f, text, "\"127.0.0.1:8600\" ]", 0, "resolver 127.0.0.1:8600 is listed twice"),
        at(f, text, "\"_http._tcp.api:80\"", 0, "`discover.srv`: \"_http._tcp.api:80\" is not a DNS name like \"_http._tcp.api.service.consul\" (no port: the records give it)"),
        at(f, text, "dsn", 0, "unknown field `dsn` in `discover` of [pool.c]: did you mean `dns`?"),
        at(f, text, "{}", 0, "`discover` needs `dns = \"NAME:PORT\"` or `srv = \"NAME\"`"),
        at(f, text, "\"5s\"", 0, "`interval` is read only beside `discover = { dns = ... }` or `{ srv = ... }`"),
        at(f, text, "\"_http._tcp.api\" }", 0, "`discover` takes `dns` or `srv`, not both"),
        at(f, text, "[]\n", 0, "`resolvers` is empty: leave it out to ask those of /etc/resolv.conf"),
    ];
    // Only pool `a` is used: the others' warnings say so, and are not what this checks.
    let got: Vec<&str> = c
        .stderr
        .lines()
        .filter(|l| !l.contains(": warning: pool"))
        .collect();
    assert_eq!(got, expected, "\n{}", c.stderr);
}
