//! Host names as server addresses (`{ addr = "localhost:9001" }`): resolved with the system
//! resolver when the file is read (start, `tcpvs check`, each reload); the server is the address
//! the name resolved to. A name that does not resolve is an error of the file, reported with
//! every other error in one run. `nowhere.invalid` never resolves (RFC 6761 reserves `.invalid`).
//!
//! `localhost` resolves through /etc/hosts to 127.0.0.1 or ::1 depending on the machine; the
//! tests work out which address the switch will use (the first IPv4 one, else the first) and
//! put a backend there.

mod common;

use common::*;
use std::net::{SocketAddr, ToSocketAddrs};
use std::process::Command;

/// The address tcpvs uses for `localhost:port`: the first IPv4 address, else the first.
fn localhost(port: u16) -> SocketAddr {
    let all: Vec<SocketAddr> = ("localhost", port).to_socket_addrs().unwrap().collect();
    all.iter()
        .find(|a| a.is_ipv4())
        .or(all.first())
        .copied()
        .expect("localhost resolves")
}

/// A port on which `localhost` reaches `backend`: the backend's own when localhost is
/// 127.0.0.1, else a forwarder's on localhost's address (::1) that relays to the backend.
async fn localhost_port(backend: &Backend) -> (u16, Option<tokio::task::JoinHandle<()>>) {
    if localhost(backend.addr.port()) == backend.addr {
        return (backend.addr.port(), None);
    }
    let listener = tokio::net::TcpListener::bind((localhost(0).ip(), 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let target = backend.addr;
    let task = tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut server = tokio::net::TcpStream::connect(target).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            });
        }
    });
    (port, Some(task))
}

fn rules(servers: &str) -> String {
    format!(
        "[switch]\naccess_log = false\n\n[virtual.web]\nlisten = \"127.0.0.1:0\"\n\
         default_pool = \"app\"\n\n[pool.app]\nscheduler = \"rr\"\nservers = [{servers}]\n"
    )
}

#[tokio::test]
async fn a_server_named_localhost_gets_the_requests() {
    let backend = backend().await;
    let (port, _forwarder) = localhost_port(&backend).await;
    let switch = start_switch(
        &rules("{ addr = \"localhost:{port}\" }"),
        &[("port", port.to_string())],
    )
    .await;
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    for i in 0..3 {
        let response = client.get(&format!("/page{i}")).await;
        assert_eq!(response.status, 200);
        assert_eq!(response.served_by(), backend.addr.to_string());
    }
    drop(client);
    let snapshot = settle(&switch).await;
    // The server is the address the name resolved to.
    assert_eq!(snapshot.servers.len(), 1);
    assert_eq!(snapshot.servers[0].addr, localhost(port));
    assert_eq!(snapshot.servers[0].requests, 3);
    backend.wait_for_requests(3).await;
}

/// The reason the resolver gives for `nowhere.invalid`, as tcpvs words it.
fn why_nowhere_does_not_resolve() -> String {
    let e = ("nowhere.invalid", 80)
        .to_socket_addrs()
        .expect_err("nowhere.invalid must not resolve");
    let text = e.to_string();
    text.strip_prefix("failed to lookup address information: ")
        .unwrap_or(&text)
        .to_string()
}

/// Line and column (1-based) of the first `needle` in `text`, as `LINE:COL`.
fn place(text: &str, needle: &str) -> String {
    let (line, col) = position_of(text, needle);
    format!("{line}:{col}")
}

const UNRESOLVABLE: &str = r#"[switch]
workers = 2
wrokers = 4

[virtual.web]
listen = "127.0.0.1:0"
default_pool = "app"

[[virtual.web.rule]]
path = "^/x"
pool = "nope"

[pool.app]
servers = [
  { addr = "127.0.0.1:9001" },
  { addr = "nowhere.invalid:80", weight = 99999 },
  { addr = "app1.internal" },
  { addr = "nowhere.invalid:99999" },
]
"#;

/// Every error of the file in file order, the unresolvable name among them.
fn unresolvable_errors(file: &str) -> Vec<String> {
    let t = UNRESOLVABLE;
    vec![
        format!("{file}:{}: unknown field `wrokers` in [switch]: did you mean `workers`?", place(t, "wrokers")),
        format!("{file}:{}: unknown pool `nope` (pools: app)", place(t, "\"nope\"")),
        format!(
            "{file}:{}: server address \"nowhere.invalid:80\": the name does not resolve ({})",
            place(t, "\"nowhere.invalid:80\""),
            why_nowhere_does_not_resolve()
        ),
        format!("{file}:{}: weight 99999 is out of range 0..=65535", place(t, "99999 }")),
        format!(
            "{file}:{}: invalid server address \"app1.internal\": a port is required, like \"app1.internal:8080\"",
            place(t, "\"app1.internal\"")
        ),
        // The port is checked before any lookup.
        format!(
            "{file}:{}: invalid server address \"nowhere.invalid:99999\": port 99999 is out of range 1..=65535",
            place(t, "\"nowhere.invalid:99999\"")
        ),
    ]
}

#[test]
fn a_name_that_does_not_resolve_is_an_error_of_tcpvs_check_among_the_others() {
    let scratch = Scratch::new("hostnames-check");
    let path = scratch.file("unresolvable.toml", UNRESOLVABLE);
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let got: Vec<&str> = stderr.lines().collect();
    assert_eq!(
        got,
        unresolvable_errors(&path.display().to_string()),
        "\n{stderr}"
    );
}

#[test]
fn a_name_that_does_not_resolve_is_an_error_of_the_library() {
    let errors = tcpvs::Config::parse("lib.toml", UNRESOLVABLE).unwrap_err();
    let got: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    assert_eq!(got, unresolvable_errors("lib.toml"));
}

#[test]
fn a_valid_file_with_names_passes_tcpvs_check() {
    let scratch = Scratch::new("hostnames-valid");
    let text = rules("{ addr = \"localhost:9001\" }, { addr = \"127.0.0.1:9002\", weight = 2 }");
    let path = scratch.file("names.toml", &text);
    let out = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .arg("check")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Where /etc/hosts gives localhost both 127.0.0.1 and ::1, only one is used, with a warning.
    let mut all: Vec<SocketAddr> = Vec::new();
    for a in ("localhost", 9001).to_socket_addrs().unwrap() {
        if !all.contains(&a) {
            all.push(a);
        }
    }
    let warnings = if all.len() == 1 {
        String::new()
    } else {
        let chosen = localhost(9001);
        let others: Vec<String> = all
            .iter()
            .filter(|a| **a != chosen)
            .map(ToString::to_string)
            .collect();
        format!(
            "{}:{}: warning: server address \"localhost:9001\": the name resolves to {} \
             addresses; only {chosen} is used, not {} (give each address its own server to use \
             them all)\n",
            path.display(),
            place(&text, "\"localhost:9001\""),
            all.len(),
            others.join(", ")
        )
    };
    assert_eq!(String::from_utf8_lossy(&out.stderr), warnings);
    let config = tcpvs::Config::parse("names.toml", &text).unwrap();
    let addrs: Vec<SocketAddr> = config.pools[0].servers.iter().map(|s| s.addr).collect();
    assert_eq!(addrs, [localhost(9001), "127.0.0.1:9002".parse().unwrap()]);
}

#[test]
fn a_name_and_the_address_it_resolves_to_are_one_server() {
    let literal = localhost(9001);
    let text = rules(&format!(
        "{{ addr = \"{literal}\" }}, {{ addr = \"localhost:9001\" }}"
    ));
    let errors = tcpvs::Config::parse("twice.toml", &text).unwrap_err();
    let got: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [format!(
            "twice.toml:{}: server localhost:9001 ({literal}) is listed twice in pool `app`",
            place(&text, "\"localhost:9001\"")
        )]
    );
}

/// The server is the resolved address: writing the name instead of the address it resolves to
/// keeps the server (and its counters) across a reload.
#[tokio::test]
async fn a_reload_resolves_again_and_keeps_a_server_whose_address_stays() {
    let backend = backend().await;
    let (port, _forwarder) = localhost_port(&backend).await;
    let scratch = Scratch::new("hostnames-reload");
    let literal = localhost(port);
    let file = scratch.file("rules.toml", &rules(&format!("{{ addr = \"{literal}\" }}")));
    let config = tcpvs::Config::load(&file).unwrap_or_else(|e| panic!("{e}"));
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(
        client.get("/before").await.served_by(),
        backend.addr.to_string()
    );

    std::fs::write(&file, rules(&format!("{{ addr = \"localhost:{port}\" }}"))).unwrap();
    let done = switch.reload().expect("the file with the name is valid");
    assert_eq!(done.generation, 2);
    assert_eq!(
        client.get("/after").await.served_by(),
        backend.addr.to_string()
    );
    drop(client);
    let snapshot = settle(&switch).await;
    assert_eq!(snapshot.generation, 2);
    assert_eq!(snapshot.servers.len(), 1);
    assert_eq!(snapshot.servers[0].addr, literal);
    // One request before the reload, one after: the same server's counters went on.
    assert_eq!(snapshot.servers[0].requests, 2);

    // A name that stops resolving refuses the reload; the running rules stay.
    std::fs::write(&file, rules("{ addr = \"nowhere.invalid:80\" }")).unwrap();
    let refused = switch
        .reload()
        .expect_err("an unresolvable name is refused");
    let messages = refused.messages();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert!(
        messages[0].contains("server address \"nowhere.invalid:80\": the name does not resolve ("),
        "{messages:?}"
    );
    let mut client = Client::connect(switch.local_addr("web").unwrap()).await;
    assert_eq!(
        client.get("/still").await.served_by(),
        backend.addr.to_string()
    );
    drop(client);
    assert_eq!(settle(&switch).await.generation, 2);
}
