//! `tcpvs demo` as a newcomer meets it: the binary, its built-in rules and demo servers.
//! Pages, images and CGI come from three pools; SIGTERM stops it cleanly.

mod common;

use common::Client;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_switches_pages_images_and_cgi() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tcpvs"))
        .args(["demo", "--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut addr: Option<SocketAddr> = None;
    let mut seen = Vec::new();
    while addr.is_none() {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no banner from the demo: {seen:?}"));
        if let Some(rest) = line.split("open http://").nth(1) {
            addr = rest.split('/').next().and_then(|a| a.parse().ok());
        }
        seen.push(line);
    }
    let addr = addr.unwrap();

    let mut client = Client::connect(addr).await;
    let page = client.get("/").await;
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(
        page.text().contains("pool <b>static</b>"),
        "{}",
        page.text()
    );

    let image = client.get("/images/tile1.png").await;
    assert_eq!(image.header("content-type"), Some("image/png"));
    assert!(image.body.starts_with(b"\x89PNG\r\n\x1a\n"));

    let cgi = client.get("/cgi-bin/hello?name=tester").await;
    assert!(
        cgi.text().starts_with("Hello, tester!\npool: cgi\n"),
        "{}",
        cgi.text()
    );
    let again = client.get("/cgi-bin/hello?name=tester").await;
    assert_ne!(
        cgi.text(),
        again.text(),
        "CGI answers are computed per request"
    );

    let servers = [page.served_by(), image.served_by(), cgi.served_by()];
    assert!(
        servers[0] != servers[1] && servers[1] != servers[2] && servers[0] != servers[2],
        "{servers:?}"
    );

    // SIGTERM: the demo stops and exits 0.
    let pid = rustix::process::Pid::from_child(&child);
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    // The access log named the three pools.
    let log: Vec<String> = rx.try_iter().collect();
    for pool in ["static/", "images/", "cgi/"] {
        assert!(
            log.iter().any(|l| l.contains(pool)),
            "no access-log line for {pool}: {log:?}"
        );
    }
}
