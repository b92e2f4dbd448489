//! The admin endpoint on a shared host: a Unix socket whose mode says who may connect (a stale
//! socket replaced, anything else refused, the file removed when the switch stops), the token
//! still required over it when one is set; changes with the token getting through a house full
//! of idle, slow and reading connections, and the bound that still holds when every connection
//! is a token holder's; `POST /reload` as JSON without a token; the log lines of changes.
//!
//! Verdicts never depend on elapsed time: each step waits for an answer, an EOF or a log line.

mod common;

use common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

// ---------------------------------------------------------------- talking to the endpoint

#[derive(Debug)]
struct Answer {
    status: u16,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// One answer from `raw`, when it is complete: the answer and its length.
fn parse_answer(raw: &[u8]) -> Option<(Answer, usize)> {
    let mut fields = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut fields);
    let httparse::Status::Complete(head_len) = response.parse(raw).expect("a valid answer") else {
        return None;
    };
    let length: usize = response
        .headers
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("content-length"))
        .map(|f| std::str::from_utf8(f.value).unwrap().parse().unwrap())
        .expect("every admin answer has a Content-Length");
    if raw.len() < head_len + length {
        return None;
    }
    let answer = Answer {
        status: response.code.expect("a status"),
        body: String::from_utf8_lossy(&raw[head_len..head_len + length]).into_owned(),
    };
    Some((answer, head_len + length))
}

/// A request's bytes: `fields` are whole lines; a body gets its Content-Length.
fn request(method: &str, path: &str, host: &str, fields: &[&str], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n");
    for field in fields {
        text.push_str(field);
        text.push_str("\r\n");
    }
    if !body.is_empty() || method == "PUT" || method == "POST" {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

/// Sends `bytes` (a request with `Connection: close`) and reads the answer to the end.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, bytes: &str) -> Answer {
    stream.write_all(bytes.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the endpoint answers and closes")
        .unwrap();
    parse_answer(&raw)
        .unwrap_or_else(|| panic!("incomplete answer: {}", String::from_utf8_lossy(&raw)))
        .0
}

/// One request over the Unix socket at `path`, `Connection: close`.
async fn unix_call(path: &Path, method: &str, target: &str, fields: &[&str], body: &str) -> Answer {
    let stream = UnixStream::connect(path)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", path.display()));
    let mut fields = fields.to_vec();
    fields.push("Connection: close");
    exchange(stream, &request(method, target, "localhost", &fields, body)).await
}

/// One request over TCP, `Connection: close`.
async fn tcp_call(
    admin: SocketAddr,
    method: &str,
    target: &str,
    fields: &[&str],
    body: &str,
) -> Answer {
    let stream = TcpStream::connect(admin).await.unwrap();
    let mut fields = fields.to_vec();
    fields.push("Connection: close");
    exchange(
        stream,
        &request(method, target, &admin.to_string(), &fields, body),
    )
    .await
}

/// Reads one answer on a kept-alive connection.
async fn read_one<S: AsyncRead + Unpin>(stream: &mut S) -> Answer {
    let mut raw = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        if let Some((answer, used)) = parse_answer(&raw) {
            assert_eq!(used, raw.len(), "nothing after the answer");
            return answer;
        }
        let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
            .await
            .expect("an answer")
            .unwrap();
        assert!(n > 0, "closed before answering");
        raw.extend_from_slice(&chunk[..n]);
    }
}

/// Whether the endpoint closed `stream` (EOF or reset); a stream that gets bytes instead
/// panics, and so does one that neither closes nor sends within PATIENCE.
async fn closed_by_endpoint(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    match tokio::time::timeout(PATIENCE, stream.read(&mut byte)).await {
        Ok(Ok(0)) | Ok(Err(_)) => true,
        Ok(Ok(_)) => panic!("the endpoint sent bytes instead of closing"),
        Err(_) => panic!("the endpoint neither closed the connection nor sent within {PATIENCE:?}"),
    }
}

const RULES: &str = "[switch]\naccess_log = false\n[admin]\n{admin}\n\
    [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
    [pool.p]\nservers = [{ addr = \"{server}\" }]\n";

/// A rule file in `scratch` with `admin` as the `[admin]` keys, and the switch run from it.
async fn start_from_file(
    scratch: &Scratch,
    admin: &str,
    server: SocketAddr,
) -> (tcpvs::Switch, PathBuf) {
    let text = RULES
        .replace("{admin}", admin)
        .replace("{server}", &server.to_string());
    let rules = scratch.file("rules.toml", &text);
    let config = tcpvs::Config::load(&rules).unwrap_or_else(|e| panic!("{text}\n{e}"));
    (tcpvs::Switch::start(config).await.unwrap(), rules)
}

fn server_state(stats: &Value, addr: SocketAddr) -> (String, u64) {
    let server = stats["pools"][0]["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["addr"] == addr.to_string())
        .unwrap_or_else(|| panic!("no server {addr}"));
    (
        server["state"].as_str().unwrap().to_string(),
        server["weight"].as_u64().unwrap(),
    )
}

// ---------------------------------------------------------------- the Unix socket

#[tokio::test]
async fn a_unix_socket_serves_the_endpoint_with_its_mode_and_goes_when_the_switch_stops() {
    let live = backend().await;
    let scratch = Scratch::new("admin_unix");
    let socket = scratch.0.join("admin.sock");
    // A crashed run's socket: the file stays, nobody listens.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    let stale = std::fs::metadata(&socket).unwrap().ino();

    // A relative path is taken from the rule file's folder.
    let (switch, rules) = start_from_file(
        &scratch,
        "listen = \"unix:admin.sock\"\nmode = \"0640\"",
        live.addr,
    )
    .await;
    let metadata = std::fs::symlink_metadata(&socket).unwrap();
    assert!(metadata.file_type().is_socket());
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o640);
    assert_ne!(metadata.ino(), stale, "the stale socket was replaced");
    assert_eq!(switch.admin_addr(), None, "no TCP address");

    let stats = unix_call(&socket, "GET", "/stats", &[], "").await;
    assert_eq!(stats.status, 200, "{}", stats.body);
    let canonical = std::fs::canonicalize(&rules).unwrap();
    assert_eq!(stats.json()["rule_file"], canonical.display().to_string());

    // No token: the socket's permissions decide, and this process may connect.
    let path = format!("/pools/p/servers/{}", live.addr);
    let json = "Content-Type: application/json";
    let changed = unix_call(
        &socket,
        "PUT",
        &path,
        &[json],
        r#"{"state":"drain","weight":3}"#,
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(changed.json()["reason"], "set to drain by the admin");
    let stats = unix_call(&socket, "GET", "/stats", &[], "").await.json();
    assert_eq!(server_state(&stats, live.addr), ("drain".to_string(), 3));
    // A page of another site, through some proxy to the socket, is still refused.
    let cross = unix_call(
        &socket,
        "PUT",
        &path,
        &[json, "Origin: http://evil.example"],
        r#"{"state":"ready"}"#,
    )
    .await;
    assert_eq!(cross.status, 403, "{}", cross.body);

    // A reload without a token is JSON, as a change is; it names the file it read.
    let form = unix_call(&socket, "POST", "/reload", &[], "").await;
    assert_eq!(form.status, 415, "{}", form.body);
    let reloaded = unix_call(&socket, "POST", "/reload", &[json], "{}").await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(reloaded.json()["generation"], 2);
    assert_eq!(reloaded.json()["file"], canonical.display().to_string());

    switch.shutdown(std::time::Duration::from_secs(1)).await;
    assert!(
        std::fs::symlink_metadata(&socket).is_err(),
        "the socket file is removed when the switch stops"
    );
}

#[tokio::test]
async fn the_default_mode_is_the_owners_alone_and_a_token_is_still_required() {
    let live = backend().await;
    let scratch = Scratch::new("admin_unix_token");
    let socket = scratch.0.join("admin.sock");
    let (switch, _) = start_from_file(
        &scratch,
        &format!(
            "listen = \"unix:{}\"\ntoken = \"over-the-socket\"",
            socket.display()
        ),
        live.addr,
    )
    .await;
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    let path = format!("/pools/p/servers/{}", live.addr);
    let json = "Content-Type: application/json";
    let missing = unix_call(&socket, "PUT", &path, &[json], r#"{"weight":7}"#).await;
    assert_eq!(missing.status, 401, "{}", missing.body);
    let wrong = unix_call(
        &socket,
        "PUT",
        &path,
        &[json, "Authorization: Bearer not-it"],
        r#"{"weight":7}"#,
    )
    .await;
    assert_eq!(wrong.status, 401, "{}", wrong.body);
    let right = unix_call(
        &socket,
        "PUT",
        &path,
        &[json, "Authorization: Bearer over-the-socket"],
        r#"{"weight":7}"#,
    )
    .await;
    assert_eq!(right.status, 200, "{}", right.body);
    assert_eq!(right.json()["weight"], 7);
    // With a token, a reload need not be labelled JSON: a page cannot send the token.
    let reload = unix_call(
        &socket,
        "POST",
        "/reload",
        &["Authorization: Bearer over-the-socket"],
        "",
    )
    .await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    switch.shutdown(std::time::Duration::from_secs(1)).await;
    assert!(std::fs::symlink_metadata(&socket).is_err());
}

#[tokio::test]
async fn a_reload_that_changes_the_socket_keeps_the_running_one() {
    let live = backend().await;
    let scratch = Scratch::new("admin_unix_reload");
    let socket = scratch.0.join("admin.sock");
    let (switch, rules) =
        start_from_file(&scratch, "listen = \"unix:admin.sock\"", live.addr).await;
    let identity = std::fs::metadata(&socket).unwrap().ino();
    // The mode and the path change in the file: both need a restart; the socket stays as it is.
    let text = std::fs::read_to_string(&rules).unwrap().replace(
        "listen = \"unix:admin.sock\"",
        "listen = \"unix:other.sock\"\nmode = \"0666\"",
    );
    std::fs::write(&rules, text).unwrap();
    let json = "Content-Type: application/json";
    let reloaded = unix_call(&socket, "POST", "/reload", &[json], "{}").await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(
        reloaded.json()["restart_needed"],
        serde_json::json!(["[admin]"])
    );
    let metadata = std::fs::metadata(&socket).unwrap();
    assert_eq!(metadata.ino(), identity);
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o600);
    assert!(std::fs::symlink_metadata(scratch.0.join("other.sock")).is_err());
    assert_eq!(
        unix_call(&socket, "GET", "/stats", &[], "").await.json()["generation"],
        2
    );
    switch.shutdown(std::time::Duration::from_secs(1)).await;
    assert!(std::fs::symlink_metadata(&socket).is_err());
}

#[tokio::test]
async fn a_path_that_is_not_a_stale_socket_is_refused_and_left_alone() {
    let live = backend().await;
    let scratch = Scratch::new("admin_unix_taken");
    let start = |listen: &str| {
        let text = RULES
            .replace("{admin}", &format!("listen = \"unix:{listen}\""))
            .replace("{server}", &live.addr.to_string());
        let rules = scratch.file("rules.toml", &text);
        let config = tcpvs::Config::load(&rules).unwrap();
        async move { tcpvs::Switch::start(config).await }
    };

    let file = scratch.file("regular", "not a socket\n");
    let error = start(&file.display().to_string())
        .await
        .err()
        .expect("refused");
    assert!(error.to_string().contains("is a regular file"), "{error}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a socket\n");

    // A socket somebody serves: in use, as a TCP address would be.
    let busy = scratch.0.join("busy.sock");
    let serving = std::os::unix::net::UnixListener::bind(&busy).unwrap();
    let error = start(&busy.display().to_string())
        .await
        .err()
        .expect("refused");
    assert!(
        error.to_string().contains("another process serves"),
        "{error}"
    );
    let identity = std::fs::metadata(&busy).unwrap().ino();
    assert_eq!(std::fs::metadata(&busy).unwrap().ino(), identity);
    drop(serving);
}

// ---------------------------------------------------------------- a full house

/// Opens a connection to `admin` and sends it `bytes` (possibly a partial request).
async fn open_with(admin: SocketAddr, bytes: &str) -> TcpStream {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    stream.write_all(bytes.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn changes_with_the_token_get_through_a_house_full_of_idle_slow_and_reading_connections() {
    let live = backend().await;
    let scratch = Scratch::new("admin_lockout");
    let (switch, _) = start_from_file(
        &scratch,
        "listen = \"127.0.0.1:0\"\ntoken = \"operator\"",
        live.addr,
    )
    .await;
    let admin = switch.admin_addr().unwrap();
    let host = admin.to_string();
    // 64 connections, as any local user can open them: 22 that never send a byte, 21 that
    // send a head a piece at a time (slowloris), 21 that read /stats and stay, to read again.
    let mut idle = Vec::new();
    for _ in 0..22 {
        idle.push(open_with(admin, "").await);
    }
    let mut slow = Vec::new();
    for _ in 0..21 {
        slow.push(
            open_with(
                admin,
                &format!("GET /stats HTTP/1.1\r\nHost: {host}\r\nX-Slow"),
            )
            .await,
        );
    }
    let mut readers = Vec::new();
    for _ in 0..21 {
        let mut stream = open_with(admin, &request("GET", "/stats", &host, &[], "")).await;
        assert_eq!(read_one(&mut stream).await.status, 200);
        readers.push(stream);
    }
    // Every one of them was accepted: the readers, connected last, were answered (the
    // endpoint accepts in order).

    let path = format!("/pools/p/servers/{}", live.addr);
    let token = "Authorization: Bearer operator";
    let json = "Content-Type: application/json";
    let change = tcp_call(admin, "PUT", &path, &[token, json], r#"{"state":"maint"}"#).await;
    assert_eq!(change.status, 200, "{}", change.body);
    let reload = tcp_call(admin, "POST", "/reload", &[token, json], "{}").await;
    assert_eq!(reload.status, 200, "{}", reload.body);
    assert_eq!(reload.json()["generation"], 2);
    // The change made room by closing the connection that had waited longest for a request,
    // the first idle one; the reload found the change's slot free again.
    assert!(closed_by_endpoint(&mut idle[0]).await);
    // The readers still read: they had waited less.
    for reader in &mut readers {
        reader
            .write_all(request("GET", "/stats", &host, &[], "").as_bytes())
            .await
            .unwrap();
        let answer = read_one(reader).await;
        assert_eq!(answer.status, 200);
        assert_eq!(
            server_state(&answer.json(), live.addr).0,
            "maint",
            "the change took effect"
        );
    }
    drop((idle, slow));
}

#[tokio::test]
async fn without_a_token_too_the_newcomer_gets_in_and_the_longest_waiting_makes_room() {
    let live = backend().await;
    let scratch = Scratch::new("admin_full_no_token");
    let (switch, _) = start_from_file(&scratch, "listen = \"127.0.0.1:0\"", live.addr).await;
    let admin = switch.admin_addr().unwrap();
    let host = admin.to_string();
    let mut readers = Vec::new();
    for _ in 0..tcpvs::admin::MAX_CONNECTIONS {
        let mut stream = open_with(admin, &request("GET", "/stats", &host, &[], "")).await;
        assert_eq!(read_one(&mut stream).await.status, 200);
        readers.push(stream);
    }
    let path = format!("/pools/p/servers/{}", live.addr);
    let change = tcp_call(
        admin,
        "PUT",
        &path,
        &["Content-Type: application/json"],
        r#"{"weight":9}"#,
    )
    .await;
    assert_eq!(change.status, 200, "{}", change.body);
    assert!(
        closed_by_endpoint(&mut readers[0]).await,
        "the first reader waited longest"
    );
}

#[tokio::test]
async fn when_every_connection_is_a_token_holders_a_newcomer_gets_503_and_the_house_stays_bounded()
{
    let live = backend().await;
    let scratch = Scratch::new("admin_all_kept");
    let (switch, _) = start_from_file(
        &scratch,
        "listen = \"127.0.0.1:0\"\ntoken = \"operator\"",
        live.addr,
    )
    .await;
    let admin = switch.admin_addr().unwrap();
    let host = admin.to_string();
    let token = "Authorization: Bearer operator";
    let path = format!("/pools/p/servers/{}", live.addr);
    let body = r#"{"weight": 2}"#;
    // Each connection: a read with the token, answered, and behind it (in the same write) a
    // change with the token whose body is still arriving: the endpoint parses that head as soon
    // as the answer is written, and keeps the connection for it.
    let mut held = Vec::new();
    for _ in 0..tcpvs::admin::MAX_CONNECTIONS {
        let read = request("GET", "/stats", &host, &[token], "");
        let change = request(
            "PUT",
            &path,
            &host,
            &[token, "Content-Type: application/json"],
            body,
        );
        let partial = &change[..change.len() - 4];
        let mut stream = open_with(admin, &format!("{read}{partial}")).await;
        assert_eq!(read_one(&mut stream).await.status, 200);
        held.push(stream);
    }
    let busy = tcp_call(admin, "GET", "/stats", &[], "").await;
    assert_eq!(busy.status, 503, "{}", busy.body);
    // One change completes; its connection then waits for a request like any other, and makes
    // room for the next newcomer.
    let first = &mut held[0];
    first
        .write_all(&body.as_bytes()[body.len() - 4..])
        .await
        .unwrap();
    let answer = read_one(first).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["weight"], 2);
    let served = tcp_call(admin, "GET", "/stats", &[], "").await;
    assert_eq!(served.status, 200, "{}", served.body);
    assert!(closed_by_endpoint(&mut held[0]).await);
}

// ---------------------------------------------------------------- POST /reload and the log

#[tokio::test]
async fn a_reload_without_a_token_must_be_json() {
    let live = backend().await;
    let scratch = Scratch::new("admin_reload_json");
    let (switch, _) = start_from_file(&scratch, "listen = \"127.0.0.1:0\"", live.addr).await;
    let admin = switch.admin_addr().unwrap();
    for fields in [
        &[][..],
        &["Content-Type: text/plain"],
        &["Content-Type: application/x-www-form-urlencoded"],
    ] {
        let refused = tcp_call(admin, "POST", "/reload", fields, "").await;
        assert_eq!(refused.status, 415, "{fields:?}: {}", refused.body);
    }
    let generation = tcp_call(admin, "GET", "/stats", &[], "").await.json()["generation"].clone();
    assert_eq!(generation, 1, "nothing was reloaded");
    let reloaded = tcp_call(
        admin,
        "POST",
        "/reload",
        &["Content-Type: application/json; charset=utf-8"],
        "{}",
    )
    .await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.body);
    assert_eq!(reloaded.json()["generation"], 2);
}

#[tokio::test]
async fn changes_are_logged_as_sentences() {
    let live = backend().await;
    let scratch = Scratch::new("admin_log_words");
    let socket = scratch.0.join("admin.sock");
    let rules = scratch.file(
        "rules.toml",
        &RULES
            .replace("{admin}", "listen = \"unix:admin.sock\"")
            .replace("{server}", &live.addr.to_string()),
    );
    let switch = Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (switch, _, _) = line_with(switch, "admin endpoint on unix:").await;
    let path = format!("/pools/p/servers/{}", live.addr);
    let json = "Content-Type: application/json";
    let answer = unix_call(&socket, "PUT", &path, &[json], r#"{"state":"drain"}"#).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (switch, line, _) = line_with(switch, "the admin endpoint sets").await;
    let uid = rustix::process::getuid().as_raw();
    let expected = format!(
        "the admin endpoint sets server {} of pool `p` to drain (asked by uid {uid}, pid ",
        live.addr
    );
    assert!(line.contains(&expected), "{line}");
    assert!(!line.contains("Some("), "{line}");
    let (switch, line, _) = line_with(switch, "server up -> drain").await;
    assert!(
        line.contains("server up -> drain: set to drain by the admin"),
        "{line}"
    );
    let answer = unix_call(
        &socket,
        "PUT",
        &path,
        &[json],
        r#"{"state":"ready","weight":4}"#,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let (switch, line, _) = line_with(switch, "the admin endpoint sets").await;
    assert!(
        line.contains(&format!(
            "sets server {} of pool `p` ready, with weight 4 (asked by uid {uid}",
            live.addr
        )),
        "{line}"
    );
    let (switch, line, _) = line_with(switch, "server drain -> up").await;
    assert!(
        line.contains("server drain -> up: made ready by the admin"),
        "{line}"
    );
    let (lines, status) = stop(switch).await;
    assert!(status.success(), "{lines:?}");
    assert!(
        std::fs::symlink_metadata(&socket).is_err(),
        "tcpvs run removes its socket when it stops: {lines:?}"
    );
}

/// A page behind DNS rebinding reaches the endpoint through its browser, with its own host name
/// in `Host`: over `ssh -L` to the Unix socket, or on a loopback port. From this machine only
/// loopback names are answered, reads included (the statistics name every server), token or
/// not; a forwarded port named as `127.0.0.1:PORT` or `localhost` still works.
#[tokio::test]
async fn requests_from_this_machine_naming_another_host_are_refused() {
    let live = backend().await;
    let scratch = Scratch::new("admin_rebinding");
    let socket = scratch.0.join("admin.sock");
    let (switch, _) = start_from_file(
        &scratch,
        &format!("listen = \"unix:{}\"", socket.display()),
        live.addr,
    )
    .await;
    let path = format!("/pools/p/servers/{}", live.addr);
    let json = "Content-Type: application/json\r\nConnection: close";
    for (method, target, body) in [
        ("GET", "/stats", ""),
        ("GET", "/metrics", ""),
        ("GET", "/", ""),
        ("PUT", path.as_str(), r#"{"state":"maint"}"#),
        ("POST", "/reload", "{}"),
    ] {
        let stream = UnixStream::connect(&socket).await.unwrap();
        let refused = exchange(
            stream,
            &request(method, target, "rebound.example:8022", &[json], body),
        )
        .await;
        assert_eq!(refused.status, 403, "{method} {target}: {}", refused.body);
        assert!(refused.body.contains("loopback Host"), "{}", refused.body);
    }
    let stats = unix_call(&socket, "GET", "/stats", &[], "").await.json();
    assert_eq!(server_state(&stats, live.addr).0, "up", "nothing changed");
    for host in ["127.0.0.1:8022", "localhost:8022", "[::1]:8022"] {
        let stream = UnixStream::connect(&socket).await.unwrap();
        let forwarded = exchange(
            stream,
            &request("GET", "/stats", host, &["Connection: close"], ""),
        )
        .await;
        assert_eq!(forwarded.status, 200, "{host}: {}", forwarded.body);
    }
    switch.shutdown(std::time::Duration::from_secs(1)).await;

    // A loopback port with a token: reads too.
    let (switch, _) = start_from_file(
        &scratch,
        "listen = \"127.0.0.1:0\"\ntoken = \"t0ken-for-reads\"",
        live.addr,
    )
    .await;
    let admin = switch.admin_addr().unwrap();
    let stream = TcpStream::connect(admin).await.unwrap();
    let read = exchange(
        stream,
        &request(
            "GET",
            "/stats",
            "rebound.example",
            &["Connection: close"],
            "",
        ),
    )
    .await;
    assert_eq!(read.status, 403, "{}", read.body);
    assert_eq!(tcp_call(admin, "GET", "/stats", &[], "").await.status, 200);
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}

/// RFC 9112 section 3.2: a request with two `Host` fields is a `400`, as on the data path
/// (`protocol_edges.rs` `host_missing_duplicated_or_invalid_is_400`). The endpoint took the
/// last one, so a request naming another host first and `localhost` last passed the check of
/// `requests_from_this_machine_naming_another_host_are_refused`, changes included.
#[tokio::test]
async fn two_host_fields_are_refused() {
    let live = backend().await;
    let scratch = Scratch::new("admin_two_hosts");
    let (switch, _) = start_from_file(&scratch, "listen = \"127.0.0.1:0\"", live.addr).await;
    let admin = switch.admin_addr().unwrap();
    let path = format!("/pools/p/servers/{}", live.addr);
    let json = "Content-Type: application/json";
    for (method, target, first, body) in [
        ("GET", "/stats", "rebound.example", ""),
        ("GET", "/stats", "localhost", ""),
        (
            "PUT",
            path.as_str(),
            "rebound.example:8022",
            r#"{"state":"maint"}"#,
        ),
    ] {
        let stream = TcpStream::connect(admin).await.unwrap();
        let fields = [json, "Host: localhost", "Connection: close"];
        let refused = exchange(stream, &request(method, target, first, &fields, body)).await;
        assert_eq!(
            (refused.status, refused.json()["error"].as_str()),
            (400, Some("more than one Host field")),
            "{method} {target} naming {first} and localhost: {}",
            refused.body
        );
    }
    let stats = tcp_call(admin, "GET", "/stats", &[], "").await.json();
    assert_eq!(server_state(&stats, live.addr).0, "up", "nothing changed");
    switch.shutdown(std::time::Duration::from_secs(1)).await;
}
