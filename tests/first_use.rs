//! What a new user meets first (issue 47's paper cuts), the binary run as they run it over
//! loopback: the admin verbs finding the endpoint without `-c` (`TCPVS_ADMIN`, the usual rule
//! file, the default) and saying where they looked when it is not there; a server named as the
//! rule file writes it (`localhost:9102`); `tcpvs demo` on a taken port advising its own
//! options; and the README's examples of error text being the binary's words.
//! tests/check.rs checks every shipped rule file under `--strict`.

mod common;

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};

/// Runs `tcpvs ARGS` with the environment variables `env` set, and none of the admin verbs'
/// others (so that the caller's own `TCPVS_ADMIN` cannot decide a test).
fn tcpvs(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tcpvs"));
    command
        .args(args)
        .env_remove("TCPVS_ADMIN")
        .env_remove("TCPVS_ADMIN_TOKEN");
    for (name, value) in env {
        command.env(name, value);
    }
    command.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The same, from an async test.
async fn tcpvs_async(args: &[&str], env: &[(&str, &str)]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        tcpvs(&args, &env)
    })
    .await
    .unwrap()
}

/// The weight and state of `addr` in `pool`, as `tcpvs list --json` prints them.
fn weight_and_state(stats: &str, pool: &str, addr: &str) -> (u64, String) {
    let stats: serde_json::Value = serde_json::from_str(stats).unwrap();
    let server = stats["pools"]
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["servers"].as_array())
        .and_then(|servers| servers.iter().find(|s| s["addr"] == addr))
        .unwrap_or_else(|| panic!("no server {addr} in pool {pool}: {stats}"))
        .clone();
    (
        server["weight"].as_u64().unwrap(),
        server["state"].as_str().unwrap().to_string(),
    )
}

/// A switch whose endpoint is on a Unix socket, reached with no option but `TCPVS_ADMIN`, and
/// whose server is written `localhost:PORT`: `set-weight` and `set-state` take that name. The
/// command line's `--admin` and `-c` come before the variable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcpvs_admin_finds_the_endpoint_and_servers_go_by_their_names() {
    let backend = common::backend().await;
    let port = backend.addr.port();
    let scratch = common::Scratch::new("first_use_names");
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[switch]\nworkers = 1\naccess_log = false\n\
             [admin]\nlisten = \"unix:admin.sock\"\n\
             [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
             [pool.p]\nservers = [{{ addr = \"localhost:{port}\" }}]\n"
        ),
    );
    let socket = format!("unix:{}", scratch.0.join("admin.sock").display());
    let switch = common::Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (switch, _, _) = common::line_with(switch, "admin endpoint on ").await;
    let by_variable = [("TCPVS_ADMIN", socket.as_str())];
    // A name resolves to its first IPv4 address, in the rule file and on the command line.
    let server = format!("127.0.0.1:{port}");
    let named = format!("localhost:{port}");

    let out = tcpvs_async(&["set-weight", "p", &named, "7"], &by_variable).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains(&server), "{}", text(&out.stdout));
    let out = tcpvs_async(&["set-state", "p", &named, "drain"], &by_variable).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = tcpvs_async(&["list", "--json"], &by_variable).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        weight_and_state(&text(&out.stdout), "p", &server),
        (7, "drain".to_string())
    );

    // `--admin` and `-c` come first: a variable naming nothing does not stop them.
    let nowhere = [("TCPVS_ADMIN", "unix:/nonexistent/admin.sock")];
    let rules_arg = rules.display().to_string();
    for args in [
        vec!["set-state", "p", &named, "ready", "--admin", &socket],
        vec!["set-weight", "p", &named, "3", "-c", &rules_arg],
    ] {
        let out = tcpvs_async(&args, &nowhere).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
    let out = tcpvs_async(&["list", "--json"], &by_variable).await;
    assert_eq!(
        weight_and_state(&text(&out.stdout), "p", &server),
        (3, "up".to_string())
    );
    let (lines, status) = common::stop(switch).await;
    assert!(status.success(), "{lines:?}");
}

/// An endpoint not reached: the error names each place looked at, in order, and what was
/// there, down to the one tried. `--admin` names the only place, so its error stays one line
/// (tests/admin_cli.rs).
#[tokio::test]
async fn an_endpoint_not_reached_says_where_it_was_looked_for() {
    let dead = common::dead_address().await;
    let variable = format!("localhost:{}", dead.port());
    let out = tcpvs(&["list"], &[("TCPVS_ADMIN", &variable)]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        format!(
            "tcpvs: cannot reach the admin endpoint at {dead}: connection refused - is tcpvs \
             running with [admin] listen = \"{dead}\"?\n\
             tcpvs: looked for the admin endpoint, in this order:\n  \
             --admin: not given\n  -c FILE: not given\n  TCPVS_ADMIN: {variable}, tried\n"
        )
    );

    let scratch = common::Scratch::new("first_use_trail");
    let rules = scratch.file(
        "rules.toml",
        &format!("[admin]\nlisten = \"{dead}\"\ntoken = \"t\"\n"),
    );
    let out = tcpvs(
        &[
            "set-state",
            "p",
            "127.0.0.1:1",
            "drain",
            "-c",
            &rules.display().to_string(),
        ],
        &[("TCPVS_ADMIN", "unix:/nonexistent/admin.sock")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).ends_with(&format!(
            "tcpvs: looked for the admin endpoint, in this order:\n  --admin: not given\n  \
             -c {}: [admin] listen = \"{dead}\", tried\n",
            rules.display()
        )),
        "{}",
        text(&out.stderr)
    );

    // Nothing named: the usual rule file, then the default, which this test holds (bound,
    // never listening, so that connections are refused) unless another process has it.
    let default = tokio::net::TcpSocket::new_v4().unwrap();
    if default.bind("127.0.0.1:9090".parse().unwrap()).is_err() {
        eprintln!("127.0.0.1:9090 is taken here: the default's step is not checked");
        return;
    }
    let out = tcpvs(&["list"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    let usual = if Path::new("/etc/tcpvs/rules.toml").exists() {
        // A machine with a switch installed: what was found there varies.
        stderr
            .lines()
            .find(|l| l.starts_with("  /etc/tcpvs/rules.toml: "))
            .unwrap_or_else(|| panic!("{stderr}"))
            .to_string()
    } else {
        "  /etc/tcpvs/rules.toml: no such file".to_string()
    };
    assert!(
        stderr.ends_with(&format!(
            "tcpvs: looked for the admin endpoint, in this order:\n  --admin: not given\n  \
             -c FILE: not given\n  TCPVS_ADMIN: not set\n{usual}\n  \
             the default: 127.0.0.1:9090, tried\n"
        )),
        "{stderr}"
    );
}

/// What the verbs refuse before sending anything: a `TCPVS_ADMIN` that is no address (exit 1,
/// naming the variable), a server name that does not resolve (exit 1), a server that is
/// neither `IP:PORT` nor `NAME:PORT` (clap's exit 2).
#[test]
fn words_that_name_nothing_are_refused_with_their_reason() {
    let out = tcpvs(&["list"], &[("TCPVS_ADMIN", "admin-host")]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "tcpvs: TCPVS_ADMIN: \"admin-host\" is neither HOST:PORT (127.0.0.1:9090, \
         localhost:9090) nor unix:PATH\n"
    );
    // RFC 6761: `.invalid` never resolves.
    let out = tcpvs(
        &["set-weight", "p", "web1.invalid:9102", "2"],
        &[("TCPVS_ADMIN", "unix:/nonexistent/admin.sock")],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.starts_with("tcpvs: server web1.invalid:9102: the name does not resolve ("),
        "{stderr}"
    );
    let out = tcpvs(&["set-state", "p", "web1", "drain"], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("\"web1\" is neither IP:PORT nor NAME:PORT"),
        "{}",
        text(&out.stderr)
    );
}

/// `tcpvs demo` on an address another process listens on says so and points at its own
/// `--listen` and `--admin`, not at `--take-over` (an option of `tcpvs run` alone).
#[test]
fn the_demo_on_a_taken_port_names_its_own_options() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (args, advice) in [
        (
            ["demo", "--listen", &addr, "--admin", "127.0.0.1:0"],
            format!("tcpvs demo: cannot listen on {addr}: another process listens there already (another tcpvs demo?): stop it, or give the demo another address with --listen ADDR (127.0.0.1:0 takes a free port)\n"),
        ),
        (
            ["demo", "--listen", "127.0.0.1:0", "--admin", &addr],
            format!("tcpvs demo: cannot put the monitor on {addr}: another process listens there already (another tcpvs demo?): stop it, or give the monitor another address with --admin ADDR (127.0.0.1:0 takes a free port)\n"),
        ),
    ] {
        let out = tcpvs(&args, &[]);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stderr), advice, "{args:?}");
    }
}

/// Each example of an error message in the README's "Rule files" section, with a file that
/// makes it: the README must quote it and `tcpvs check` must print it. An example added to
/// that paragraph without a case here fails the test, so the two cannot drift apart unseen.
#[test]
fn the_readme_quotes_the_binarys_error_messages() {
    const SERVICE: &str = "[virtual.web]\nlisten = \"127.0.0.1:8080\"\ndefault_pool = \"p\"\n";
    const POOL: &str = "[pool.p]\nservers = [{ addr = \"127.0.0.1:9000\" }]\n";
    let cases: Vec<(&str, String)> = vec![
        (
            "unknown field `wrokers` in [switch]: did you mean `workers`?",
            format!("[switch]\nwrokers = 1\n{SERVICE}{POOL}"),
        ),
        (
            "`header_timeout`: expected a duration like \"30s\", found the number 30",
            format!("[switch]\nheader_timeout = 30\n{SERVICE}{POOL}"),
        ),
        (
            "unknown option `t_hihg` for scheduler `lard`: did you mean `t_high`?",
            format!(
                "{SERVICE}{}",
                POOL.replace("[pool.p]\n", "[pool.p]\nscheduler = \"lard\"\nt_hihg = 3\n")
            ),
        ),
        (
            "invalid listen address \"127.0.0.1:70000\": port 70000 is out of range 0..=65535",
            format!("{}{POOL}", SERVICE.replace("8080", "70000")),
        ),
        (
            "invalid server address \"127.0.0.1:70000\": port 70000 is out of range 1..=65535",
            format!("{SERVICE}{}", POOL.replace("9000", "70000")),
        ),
    ];
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme_errors_paragraph(&readme);
    let examples = code_spans(section);
    let scratch = common::Scratch::new("first_use_readme");
    for (example, file) in &cases {
        assert!(
            examples.iter().any(|span| span == example),
            "the README's \"Rule files\" no longer quotes {example:?}: {examples:#?}"
        );
        let path = scratch.file("broken.toml", file);
        let out = tcpvs(&["check", &path.display().to_string()], &[]);
        assert_eq!(out.status.code(), Some(1), "{file}");
        // Errors are printed on stderr.
        assert!(
            text(&out.stderr).contains(example),
            "README: {example:?}\ntcpvs check: {}",
            text(&out.stderr)
        );
    }
    // Spans that read as messages (a reason after a colon, a range, a suggestion).
    for span in &examples {
        let message = span.contains("did you mean")
            || span.contains("out of range")
            || span.contains(": expected");
        assert!(
            !message || cases.iter().any(|(example, _)| example == span),
            "the README quotes {span:?} with no case in this test"
        );
    }
}

/// The README's paragraph on what `tcpvs check` reports, from "## Rule files" to the warnings.
fn readme_errors_paragraph(readme: &str) -> &str {
    let start = readme
        .find("\n## Rule files\n")
        .expect("a \"Rule files\" section");
    let rest = &readme[start..];
    let end = rest
        .find("Some things are valid but almost surely not meant")
        .expect("the warnings' paragraph");
    &rest[..end]
}

/// The code spans of Markdown text: `x` and ``x `y` `` (their content trimmed of the one space
/// that double backticks allow around it).
fn code_spans(text: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].len() - rest[open..].trim_start_matches('`').len();
        let fence = "`".repeat(ticks);
        let body_start = open + ticks;
        let Some(close) = rest[body_start..].find(&fence) else {
            break;
        };
        let body = rest[body_start..body_start + close].replace('\n', " ");
        spans.push(body.trim().to_string());
        rest = &rest[body_start + close + ticks..];
    }
    spans
}

#[test]
fn code_spans_are_read_as_markdown_writes_them() {
    assert_eq!(
        code_spans("a `b` and ``c `d` e`` then `` `f` `` end"),
        ["b", "c `d` e", "`f`"]
    );
}
