//! TLS termination (`tls = [{ cert, key }, ...]`): the certificate chosen by SNI, every HTTP
//! behaviour of the plain listener over TLS, TLS 1.2 and 1.3, resumption, refusals, reloads of
//! certificates, the PROXY protocol before TLS, and bad certificate files in the rule file.
//! Certificates come from a CA the test makes (rcgen); the clients are tokio-rustls.

mod common;

use common::tls::{self, Leaf, TestCa};
use common::*;
use rustls::version::{TLS12, TLS13};
use std::path::PathBuf;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Writes a certificate and its key into `scratch` and returns the `tls` list entry naming
/// them (absolute paths).
fn entry(scratch: &Scratch, name: &str, leaf: &Leaf) -> String {
    let cert = scratch.file(&format!("{name}.pem"), &leaf.cert_pem);
    let key = scratch.file(&format!("{name}.key"), &leaf.key_pem);
    format!(
        "{{ cert = {:?}, key = {:?} }}",
        path_text(&cert),
        path_text(&key)
    )
}

fn path_text(path: &std::path::Path) -> String {
    path.to_str().expect("a UTF-8 temporary path").to_string()
}

/// A TLS service `secure` with these `tls` entries: `.png` to the `images` pool, the rest to
/// `web`.
fn secure_rules(tls_entries: &[String], web: &Backend, images: &Backend, extra: &str) -> String {
    format!(
        r#"
[switch]
access_log = false
header_timeout = "2s"

[virtual.secure]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{}]
{extra}

[[virtual.secure.rule]]
path = '\.png$'
pool = "images"

[pool.web]
servers = [{{ addr = "{}" }}]

[pool.images]
servers = [{{ addr = "{}" }}]
"#,
        tls_entries.join(", "),
        web.addr,
        images.addr
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_chosen_by_server_name_and_the_first_is_the_default() {
    let ca = TestCa::new();
    let first = ca.issue(&["default.test"]);
    let wildcard = ca.issue(&["*.example.test"]);
    let exact = ca.issue(&["www.example.test", "api.test"]);
    let scratch = Scratch::new("tls-sni");
    let (web, images) = (backend().await, backend().await);
    let entries = [
        entry(&scratch, "first", &first),
        entry(&scratch, "wildcard", &wildcard),
        entry(&scratch, "exact", &exact),
    ];
    let switch = start_switch(&secure_rules(&entries, &web, &images, ""), &[]).await;
    let addr = switch.local_addr("secure").unwrap();
    let any = tls::any_certificate_client();
    let cases: [(&str, &Leaf); 8] = [
        ("www.example.test", &exact),
        ("api.test", &exact),
        ("API.Test", &exact),
        ("img.example.test", &wildcard),
        ("example.test", &first),
        ("a.b.example.test", &first),
        ("unknown.test", &first),
        // An IP address: the client sends no server name.
        ("127.0.0.1", &first),
    ];
    for (name, expected) in cases {
        let client = tls::connect(addr, name, &any).await;
        assert!(
            tls::presented(&client) == expected.der,
            "{name}: another certificate"
        );
    }
    // A client that verifies: the chosen certificate is valid for the wildcard name.
    let verifying = ca.client_config(&[&TLS13]);
    let mut client = tls::connect(addr, "img.example.test", &verifying).await;
    let response = client.get("/index.html").await;
    assert_eq!(response.status, 200);
    assert_eq!(response.served_by(), web.addr.to_string());
    assert_eq!(switch.stats().services[0].tls_handshakes, 9);
}

/// A switch with one ECDSA certificate for `www.example.test`, and a client that verifies it.
struct Secure {
    switch: tcpvs::Switch,
    web: Backend,
    images: Backend,
    ca: TestCa,
    _scratch: Scratch,
}

impl Secure {
    async fn start(extra: &str) -> Secure {
        let ca = TestCa::new();
        let leaf = ca.issue(&["www.example.test"]);
        let scratch = Scratch::new(&format!(
            "tls-{}",
            std::thread::current()
                .name()
                .unwrap_or("t")
                .replace("::", "-")
        ));
        let (web, images) = (backend().await, backend().await);
        let entries = [entry(&scratch, "site", &leaf)];
        let mut rules = secure_rules(&entries, &web, &images, extra);
        rules.push_str("\n[admin]\nlisten = \"127.0.0.1:0\"\n");
        let switch = start_switch(&rules, &[]).await;
        Secure {
            switch,
            web,
            images,
            ca,
            _scratch: scratch,
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        self.switch.local_addr("secure").unwrap()
    }

    async fn client(&self) -> tls::TlsClient {
        tls::connect(
            self.addr(),
            "www.example.test",
            &self.ca.client_config(&[&TLS13, &TLS12]),
        )
        .await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_over_tls_routes_every_request_and_keeps_the_connection() {
    let site = Secure::start("").await;
    let mut client = site.client().await;
    {
        let (_, connection) = client.stream.get_ref();
        assert_eq!(connection.alpn_protocol(), Some(&b"http/1.1"[..]));
    }
    for _ in 0..3 {
        let page = client.get("/index.html").await;
        assert_eq!(page.served_by(), site.web.addr.to_string());
        let picture = client.get("/logo.png").await;
        assert_eq!(picture.served_by(), site.images.addr.to_string());
    }
    // 1 MiB down, Content-Length and chunked, byte-exact.
    let n = 1 << 20;
    let body = client.get(&format!("/bytes/{n}")).await.body;
    assert_eq!(sha256_hex(&body), sha256_hex(&pattern(n, n as u64)));
    let body = client.get(&format!("/chunked/{n}")).await.body;
    assert_eq!(sha256_hex(&body), sha256_hex(&pattern(n, n as u64)));
    // 1 MiB up, Content-Length then chunked.
    let upload = pattern(n, 5);
    let mut request =
        format!("POST /sha256 HTTP/1.1\r\nHost: www.example.test\r\nContent-Length: {n}\r\n\r\n")
            .into_bytes();
    request.extend_from_slice(&upload);
    client.send(&request).await;
    let answer = client.response(false).await.text();
    assert!(answer.contains(&sha256_hex(&upload)), "{answer}");
    let mut chunked =
        b"POST /sha256 HTTP/1.1\r\nHost: www.example.test\r\nTransfer-Encoding: chunked\r\n\r\n"
            .to_vec();
    for piece in upload.chunks(100_000) {
        chunked.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
        chunked.extend_from_slice(piece);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    client.send(&chunked).await;
    let answer = client.response(false).await.text();
    assert!(answer.contains(&sha256_hex(&upload)), "{answer}");
    // Two pipelined requests in one write: two answers, in order.
    client
        .send(b"GET /a.png HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    let first = client.response(false).await;
    let second = client.response(false).await;
    assert_eq!(first.served_by(), site.images.addr.to_string());
    assert_eq!(second.served_by(), site.web.addr.to_string());
    assert!(second.text().contains("/b"), "{}", second.text());
    let snap = site.switch.stats();
    assert_eq!(
        snap.services[0].tls_handshakes, 1,
        "one connection carried it all"
    );
    assert_eq!(snap.services[0].accepted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_over_tls_say_https_and_cannot_claim_it() {
    let site = Secure::start("").await;
    let mut client = site.client().await;
    client
        .send(b"GET /headers HTTP/1.1\r\nHost: www.example.test\r\nX-Forwarded-Proto: http\r\nX-Forwarded-proto: gopher\r\n\r\n")
        .await;
    let head = client.response(false).await.text();
    let protos: Vec<&str> = head
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("x-forwarded-proto:"))
        .collect();
    assert_eq!(protos, ["X-Forwarded-Proto: https"], "{head}");
    assert!(head.contains("X-Forwarded-For: 127.0.0.1\r\n"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_delimited_by_the_close_ends_with_a_close_notify() {
    let site = Secure::start("").await;
    let mut client = site.client().await;
    let n = 300_000;
    // `/close/N` has no length: its end is the close, which over TLS must be a close_notify
    // (tokio-rustls reads a close without one as an UnexpectedEof error, which `Client`
    // reports as a panic).
    client
        .send(format!("GET /close/{n} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
        .await;
    let response = client.response(false).await;
    assert_eq!(response.body.len(), n);
    assert_eq!(
        sha256_hex(&response.body),
        sha256_hex(&pattern(n, n as u64))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_over_tls_becomes_a_tunnel() {
    let site = Secure::start("").await;
    let mut client = site.client().await;
    client
        .send(b"GET /upgrade HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.status, 101);
    let already = client.take_buffered();
    let data = pattern(1 << 20, 99);
    let expected: Vec<u8> = [b"early".as_slice(), &data].concat();
    // The read ends without error only with a close_notify (tokio-rustls reads a close
    // without one as UnexpectedEof).
    let got = through_tunnel(client.stream, already, &data).await;
    assert_eq!(got.len(), expected.len());
    assert_eq!(sha256_hex(&got), sha256_hex(&expected));
    settle(&site.switch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_1_2_and_1_3_both_resume_sessions() {
    let site = Secure::start("").await;
    for (version, config) in [
        ("TLS 1.3", site.ca.client_config(&[&TLS13])),
        ("TLS 1.2", site.ca.client_config(&[&TLS12])),
    ] {
        // The same client configuration keeps the sessions (tickets) it was given.
        let mut first = tls::connect(site.addr(), "www.example.test", &config).await;
        assert_eq!(first.get("/one").await.status, 200, "{version}");
        assert!(
            !tls::resumed(&first),
            "{version}: a first handshake is a full one"
        );
        drop(first);
        let mut second = tls::connect(site.addr(), "www.example.test", &config).await;
        assert!(
            tls::resumed(&second),
            "{version}: the second connection resumes"
        );
        assert_eq!(second.get("/two").await.status, 200, "{version}");
    }
    let service = &site.switch.stats().services[0];
    assert_eq!(service.tls_handshakes, 4);
    assert_eq!(service.tls_resumed, 2);
    assert_eq!(service.tls_handshake_failures, 0);
    // The same counts on the admin endpoint, in JSON and for Prometheus.
    let admin = site.switch.admin_addr().expect("an admin endpoint");
    let mut reader = Client::connect(admin).await;
    let stats = reader.get_local("/stats").await.text();
    let json: serde_json::Value = serde_json::from_str(&stats).unwrap();
    let secure = &json["services"][0];
    assert_eq!(secure["tls_handshakes"], 4, "{stats}");
    assert_eq!(secure["tls_resumed"], 2, "{stats}");
    assert_eq!(secure["tls_handshake_failures"], 0, "{stats}");
    let metrics = reader.get_local("/metrics").await.text();
    for line in [
        "tcpvs_service_tls_handshakes_total{service=\"secure\"} 4\n",
        "tcpvs_service_tls_resumed_total{service=\"secure\"} 2\n",
        "tcpvs_service_tls_handshake_failures_total{service=\"secure\"} 0\n",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handshake_is_counted_and_never_routed() {
    let site = Secure::start("").await;
    // Plain HTTP on the TLS port: refused with an alert.
    let mut plain = Client::connect(site.addr()).await;
    plain
        .send(b"GET / HTTP/1.1\r\nHost: www.example.test\r\n\r\n")
        .await;
    let mut reply = Vec::new();
    let _ = tokio::time::timeout(PATIENCE, plain.stream.read_to_end(&mut reply))
        .await
        .expect("closed");
    assert!(
        reply.is_empty() || reply[0] == 0x15,
        "a TLS alert or nothing, not HTTP: {reply:?}"
    );
    // A client that offers only protocols the switch does not speak: none in common.
    let mut foreign = (*site.ca.client_config(&[&TLS13])).clone();
    foreign.alpn_protocols = vec![b"spdy/3.1".to_vec(), b"h3".to_vec()];
    let refused = tls::try_connect(
        site.addr(),
        "www.example.test",
        &std::sync::Arc::new(foreign),
    )
    .await;
    assert!(
        refused.is_err(),
        "a client with no protocol in common is refused"
    );
    // A client that connects and says nothing is closed at header_timeout, and counted.
    let mut silent = Client::connect(site.addr()).await;
    assert!(silent.is_closed().await);
    // A client that closes before finishing is no TLS failure.
    drop(Client::connect(site.addr()).await);
    let snap = wait_until(&site.switch, "three handshake failures", |s| {
        s.services[0].tls_handshake_failures == 3 && s.clients == 0
    })
    .await;
    assert_eq!(snap.services[0].requests, 0);
    assert_eq!(site.web.requests() + site.images.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_protocol_comes_before_tls() {
    let site = Secure::start("proxy_protocol = true").await;
    let mut tcp = tokio::net::TcpStream::connect(site.addr()).await.unwrap();
    // A PROXY v1 line naming 192.0.2.7, then the TLS handshake on the same connection.
    tcp.write_all(b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 443\r\n")
        .await
        .unwrap();
    let config = site.ca.client_config(&[&TLS13]);
    let mut client = tls::over(tcp, "www.example.test", &config).await.unwrap();
    client
        .send(b"GET /headers HTTP/1.1\r\nHost: www.example.test\r\n\r\n")
        .await;
    let head = client.response(false).await.text();
    assert!(head.contains("X-Forwarded-For: 192.0.2.7\r\n"), "{head}");
    assert!(head.contains("X-Forwarded-Proto: https\r\n"), "{head}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsa_and_traditional_keys_are_read() {
    let ca = TestCa::new();
    let rsa = ca.issue_rsa(&["rsa.test"]);
    let rsa_pkcs1 = Leaf {
        key_pem: tls::traditional_key_pem(&rsa.key_pem),
        ..rsa.clone()
    };
    let ec = ca.issue(&["ec.test"]);
    let ec_sec1 = Leaf {
        key_pem: tls::traditional_key_pem(&ec.key_pem),
        ..ec.clone()
    };
    assert!(rsa_pkcs1.key_pem.contains("BEGIN RSA PRIVATE KEY"));
    assert!(ec_sec1.key_pem.contains("BEGIN EC PRIVATE KEY"));
    let scratch = Scratch::new("tls-keys");
    let (web, images) = (backend().await, backend().await);
    let entries = [
        entry(&scratch, "rsa", &rsa_pkcs1),
        entry(&scratch, "ec", &ec_sec1),
    ];
    let switch = start_switch(&secure_rules(&entries, &web, &images, ""), &[]).await;
    let addr = switch.local_addr("secure").unwrap();
    let config = ca.client_config(&[&TLS13, &TLS12]);
    for name in ["rsa.test", "ec.test"] {
        let mut client = tls::connect(addr, name, &config).await;
        assert_eq!(client.get("/").await.status, 200, "{name}");
    }
    let tls12 = ca.client_config(&[&TLS12]);
    let mut client = tls::connect(addr, "rsa.test", &tls12).await;
    assert_eq!(client.get("/").await.status, 200, "RSA over TLS 1.2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_brings_new_certificates_and_keeps_connections_and_sessions() {
    let ca = TestCa::new();
    let old = ca.issue(&["www.example.test"]);
    let new = ca.issue(&["www.example.test"]);
    let scratch = Scratch::new("tls-reload");
    let (web, images) = (backend().await, backend().await);
    let rules_path = scratch.file(
        "rules.toml",
        &secure_rules(&[entry(&scratch, "site", &old)], &web, &images, ""),
    );
    let config = tcpvs::Config::load(&rules_path).unwrap();
    let switch = tcpvs::Switch::start(config).await.unwrap();
    let addr = switch.local_addr("secure").unwrap();
    let client_config = ca.client_config(&[&TLS13]);
    let mut kept = tls::connect(addr, "www.example.test", &client_config).await;
    assert_eq!(kept.get("/before").await.status, 200);
    assert!(tls::presented(&kept) == old.der);

    // The same files, new contents; and a broken file refused first.
    std::fs::write(scratch.0.join("site.key"), "not a key").unwrap();
    let refused = switch
        .reload()
        .expect_err("a broken key refuses the reload");
    assert!(
        refused.to_string().contains("site.key"),
        "names the key file: {refused}"
    );
    std::fs::write(scratch.0.join("site.pem"), &new.cert_pem).unwrap();
    std::fs::write(scratch.0.join("site.key"), &new.key_pem).unwrap();
    let reloaded = switch.reload().expect("a good reload");
    assert_eq!(reloaded.generation, 2);

    // The connection open before goes on; a new one gets the new certificate, and resumes
    // the session of before (the ticket keys outlive the reload).
    assert_eq!(kept.get("/after").await.status, 200);
    let mut fresh = tls::connect(addr, "www.example.test", &client_config).await;
    assert_eq!(fresh.get("/new").await.status, 200);
    assert!(tls::resumed(&fresh), "resumed across the reload");
    let full = ca.client_config(&[&TLS13]);
    let fresh = tls::connect(addr, "www.example.test", &full).await;
    assert!(
        tls::presented(&fresh) == new.der,
        "a full handshake shows the new certificate"
    );
    assert!(!tls::resumed(&fresh));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_max_clients_a_tls_connection_is_closed_without_plain_text() {
    let ca = TestCa::new();
    let leaf = ca.issue(&["www.example.test"]);
    let scratch = Scratch::new("tls-busy");
    let (web, images) = (backend().await, backend().await);
    let rules = secure_rules(&[entry(&scratch, "site", &leaf)], &web, &images, "")
        .replace("[switch]\n", "[switch]\nmax_clients = 1\n");
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("secure").unwrap();
    let config = ca.client_config(&[&TLS13]);
    let mut holder = tls::connect(addr, "www.example.test", &config).await;
    assert_eq!(holder.get("/").await.status, 200);
    let mut over = Client::connect(addr).await;
    assert!(
        over.is_closed().await,
        "closed, with no HTTP 503 in plain text"
    );
    assert_eq!(switch.stats().services[0].refused, 1);
}

// ---------------------------------------------------------------- the rule file

/// `tcpvs check` of a rule file beside its certificate files: the messages.
fn check_messages(scratch: &Scratch, rules: &str) -> Vec<String> {
    let path: PathBuf = scratch.file("rules.toml", rules);
    match tcpvs::Config::check_file(&path).unwrap().config {
        Ok(_) => Vec::new(),
        Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
    }
}

#[test]
fn bad_certificate_files_are_errors_at_their_place_in_the_rule_file() {
    let ca = TestCa::new();
    let good = ca.issue(&["good.test"]);
    let other = ca.issue(&["other.test"]);
    let scratch = Scratch::new("tls-check");
    scratch.file("good.pem", &good.cert_pem);
    scratch.file("good.key", &good.key_pem);
    scratch.file("other.key", &other.key_pem);
    scratch.file("garbage.pem", "hello\n");
    scratch.file("cert-as-key.pem", &good.cert_pem);
    let rules = r#"[virtual.secure]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [
  { cert = "missing.pem", key = "good.key" },
  { cert = "garbage.pem", key = "good.key" },
  { cert = "good.pem", key = "other.key" },
  { cert = "good.pem", key = "cert-as-key.pem" },
  { cert = "good.pem" },
]

[pool.web]
servers = [{ addr = "127.0.0.1:9" }]
"#;
    let messages = check_messages(&scratch, rules);
    let file = scratch.0.join("rules.toml").display().to_string();
    let at = |needle: &str| {
        let (line, col) = position_of(rules, needle);
        format!("{file}:{line}:{col}: ")
    };
    let expect = [
        (at("\"missing.pem\""), "cannot read certificate file"),
        (at("\"garbage.pem\""), "holds no certificate"),
        (at("\"other.key\""), "does not belong to the certificate"),
        (at("\"cert-as-key.pem\""), "holds no private key"),
        (at("{ cert = \"good.pem\" }"), "has no `key`"),
    ];
    assert_eq!(messages.len(), expect.len(), "{messages:#?}");
    for ((place, words), message) in expect.iter().zip(&messages) {
        assert!(
            message.starts_with(place.as_str()) && message.contains(words),
            "expected {place}...{words}, got {message}"
        );
    }
    // Relative to the rule file's folder, wherever tcpvs runs.
    let fine = rules.replace(
        &rules[rules.find("tls = [").unwrap()..rules.find("]\n\n[pool").unwrap() + 1],
        r#"tls = [{ cert = "good.pem", key = "good.key" }]"#,
    );
    assert_eq!(check_messages(&scratch, &fine), Vec::<String>::new());
}

#[test]
fn an_expired_certificate_and_a_nameless_one_after_the_first_are_warnings() {
    let ca = TestCa::new();
    let expired = ca.issue_expired(&["old.test"]);
    let nameless = ca.issue(&[]);
    let scratch = Scratch::new("tls-warnings");
    scratch.file("old.pem", &expired.cert_pem);
    scratch.file("old.key", &expired.key_pem);
    scratch.file("nameless.pem", &nameless.cert_pem);
    scratch.file("nameless.key", &nameless.key_pem);
    let rules = r#"[virtual.secure]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{ cert = "old.pem", key = "old.key" }, { cert = "nameless.pem", key = "nameless.key" }]

[pool.web]
servers = [{ addr = "127.0.0.1:9" }]
"#;
    let path = scratch.file("rules.toml", rules);
    let checked = tcpvs::Config::check_file(&path).unwrap();
    assert!(checked.config.is_ok(), "warnings only");
    let warnings: Vec<String> = checked.warnings.iter().map(|w| w.to_string()).collect();
    let file = path.display().to_string();
    let (line, col) = position_of(rules, "\"old.pem\"");
    let (nline, ncol) = position_of(rules, "{ cert = \"nameless.pem\"");
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].starts_with(&format!("{file}:{line}:{col}: warning: "))
            && warnings[0].contains("has expired"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].starts_with(&format!("{file}:{nline}:{ncol}: warning: "))
            && warnings[1].contains("never chosen"),
        "{warnings:#?}"
    );
}

#[test]
fn tls_keys_that_do_not_fit_the_service_are_refused() {
    let scratch = Scratch::new("tls-keys-misused");
    let ca = TestCa::new();
    let leaf = ca.issue(&["a.test"]);
    scratch.file("a.pem", &leaf.cert_pem);
    scratch.file("a.key", &leaf.key_pem);
    let cases = [
        // sni on a plain service
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[[virtual.web.rule]]\nsni = \"^a\"\npool = \"p\"\n",
            "this service takes no TLS",
        ),
        // tls and passthrough at once
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\nmode = \"tls-passthrough\"\ntls = [{ cert = \"a.pem\", key = \"a.key\" }]\n",
            "exclude each other",
        ),
        // an empty list
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\ntls = []\n",
            "lists no certificate",
        ),
        // an unknown mode
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\nmode = \"tcp\"\n",
            "unknown mode \"tcp\"",
        ),
        // HTTP conditions on passthrough
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\nmode = \"tls-passthrough\"\n[[virtual.web.rule]]\npath = \"^/\"\npool = \"p\"\n",
            "sees no HTTP request",
        ),
        // one pool for HTTP and passthrough
        (
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n[virtual.raw]\nlisten = \"127.0.0.1:0\"\nmode = \"tls-passthrough\"\ndefault_pool = \"p\"\n",
            "its servers speak one protocol",
        ),
    ];
    for (service, words) in cases {
        let rules = format!("{service}\n[pool.p]\nservers = [{{ addr = \"127.0.0.1:9\" }}]\n");
        let messages = check_messages(&scratch, &rules);
        assert!(
            messages.len() == 1 && messages[0].contains(words),
            "{rules}\n=> {messages:#?}"
        );
    }
    let checked_by_http = "[virtual.raw]\nlisten = \"127.0.0.1:0\"\nmode = \"tls-passthrough\"\ndefault_pool = \"p\"\n[pool.p]\nservers = [{ addr = \"127.0.0.1:9\" }]\n[pool.p.health]\ncheck = \"http\"\n";
    let messages = check_messages(&scratch, checked_by_http);
    assert!(
        messages.len() == 1 && messages[0].contains("check = \"tcp\""),
        "{messages:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_resumes_only_on_the_service_that_made_it() {
    let ca = TestCa::new();
    let admin = ca.issue(&["admin.example.test"]);
    let public = ca.issue(&["www.example.test"]);
    let scratch = Scratch::new("tls-sessions");
    let (web, images) = (backend().await, backend().await);
    let rules = format!(
        r#"
[virtual.admin]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{}]

[virtual.public]
listen = "127.0.0.1:0"
default_pool = "images"
tls = [{}]

[pool.web]
servers = [{{ addr = "{}" }}]

[pool.images]
servers = [{{ addr = "{}" }}]
"#,
        entry(&scratch, "admin", &admin),
        entry(&scratch, "public", &public),
        web.addr,
        images.addr
    );
    let switch = start_switch(&rules, &[]).await;
    let config = ca.client_config(&[&TLS13]);
    let mut first = tls::connect(
        switch.local_addr("admin").unwrap(),
        "admin.example.test",
        &config,
    )
    .await;
    assert_eq!(first.get("/").await.served_by(), web.addr.to_string());
    drop(first);
    // Sent to the other service's port (as someone on the path could), the client must see that
    // service's certificate, which is not for its name: no resumption into the other pool.
    let redirected = tls::try_connect(
        switch.local_addr("public").unwrap(),
        "admin.example.test",
        &config,
    )
    .await;
    assert!(
        redirected.is_err(),
        "a session of `admin` resumed on `public`, past its certificate"
    );
    // On its own service it resumes.
    let again = tls::connect(
        switch.local_addr("admin").unwrap(),
        "admin.example.test",
        &config,
    )
    .await;
    assert!(tls::resumed(&again));
}

/// A rule's `sni` routes by the server name of the connection's handshake: case-insensitive,
/// whatever `Host` the requests name, and a connection without a server name (the client
/// connected by IP address) does not match. A switch that dropped the server name, or the
/// rule's `sni` condition, sends every connection to one pool and fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sni_rule_routes_by_the_handshakes_server_name() {
    let ca = TestCa::new();
    let leaf = ca.issue(&["*.example.test", "example.test"]);
    let scratch = Scratch::new("tls-sni-rule");
    let (web, api) = (backend().await, backend().await);
    let rules = format!(
        r#"
[switch]
access_log = false

[virtual.secure]
listen = "127.0.0.1:0"
default_pool = "web"
tls = [{}]

[[virtual.secure.rule]]
sni = '^api\.'
pool = "api"

[pool.web]
servers = [{{ addr = "{}" }}]

[pool.api]
servers = [{{ addr = "{}" }}]
"#,
        entry(&scratch, "site", &leaf),
        web.addr,
        api.addr
    );
    let switch = start_switch(&rules, &[]).await;
    let addr = switch.local_addr("secure").unwrap();
    let verifying = ca.client_config(&[&TLS13, &TLS12]);
    let any = tls::any_certificate_client();
    let request =
        |host: &str| format!("GET /v1/items HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
    // (server name sent, Host of the requests, the pool that must answer)
    let cases = [
        ("api.example.test", "www.example.test", &api),
        ("API.Example.Test", "www.example.test", &api),
        ("www.example.test", "api.example.test", &web),
        ("example.test", "api.example.test", &web),
        ("myapi.example.test", "api.example.test", &web),
    ];
    for (name, host, pool) in cases {
        let mut client = tls::connect(addr, name, &verifying).await;
        // Every request of the connection: the handshake's name decides, not Host.
        for _ in 0..3 {
            client.send(&request(host)).await;
            let response = client.response(false).await;
            assert_eq!(response.status, 200);
            assert_eq!(
                response.served_by(),
                pool.addr.to_string(),
                "server name {name}, Host {host}"
            );
        }
    }
    // By IP address: no server name, so the rule does not match, whatever Host says.
    let mut client = tls::connect(addr, "127.0.0.1", &any).await;
    client.send(&request("api.example.test")).await;
    assert_eq!(
        client.response(false).await.served_by(),
        web.addr.to_string(),
        "no server name"
    );
    assert_eq!(api.requests(), 6);
    assert_eq!(web.requests(), 10);
}

#[test]
fn modules_that_look_for_http_on_a_passthrough_pool_are_warned_of() {
    let scratch = Scratch::new("tls-passthrough-modules");
    let rules = r#"[virtual.raw]
listen = "127.0.0.1:0"
mode = "tls-passthrough"
default_pool = "keyed"

[[virtual.raw.rule]]
sni = "^a"
pool = "cookies"

[[virtual.raw.rule]]
sni = "^b"
pool = "hosts"

[pool.keyed]
scheduler = "hash"
servers = [{ addr = "127.0.0.1:9" }]

[pool.cookies]
scheduler = "cookie"
servers = [{ addr = "127.0.0.1:9" }]

[pool.hosts]
scheduler = "hash"
key = "host"
servers = [{ addr = "127.0.0.1:9" }]
"#;
    let path = scratch.file("rules.toml", rules);
    let checked = tcpvs::Config::check_file(&path).unwrap();
    assert!(checked.config.is_ok());
    let warnings: Vec<String> = checked.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].contains("pool `keyed` keys `hash` by \"path\""),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].contains("pool `cookies` uses `cookie`"),
        "{warnings:#?}"
    );
}
