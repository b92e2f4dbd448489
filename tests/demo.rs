//! `tcpvs demo` as a newcomer meets it: the binary, its built-in rules and demo servers.
//! Pages, images and CGI come from three pools; SIGTERM stops it cleanly.

mod common;

use common::{Client, Process};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_switches_pages_images_and_cgi() {
    let demo = Process::start(&[
        "demo".as_ref(),
        "--listen".as_ref(),
        "127.0.0.1:0".as_ref(),
        "--admin".as_ref(),
        "127.0.0.1:0".as_ref(),
    ]);
    let (addr, _) = demo.address_after("open ");
    let (monitor, _) = demo.address_after("the monitor: ");

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

    // The monitor's figures: each pool answered what was sent to it.
    let mut admin = Client::connect(monitor).await;
    assert!(admin.get_local("/").await.text().contains("<html"));
    let stats: serde_json::Value =
        serde_json::from_slice(&admin.get_local("/stats").await.body).unwrap();
    let requests = |pool: &str| -> u64 {
        stats["pools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == pool)
            .map(|p| p["requests"].as_u64().unwrap())
            .unwrap()
    };
    assert_eq!(
        (requests("static"), requests("images"), requests("cgi")),
        (1, 1, 2),
        "{stats}"
    );

    // SIGTERM: the demo stops and exits 0.
    let (demo, status) = tokio::task::spawn_blocking(move || {
        let mut demo = demo;
        let status = demo.terminate();
        (demo, status)
    })
    .await
    .unwrap();
    assert!(status.success(), "{status:?}");
    // The access log named the three pools.
    let log: Vec<String> = demo.log.try_iter().collect();
    for pool in ["static/", "images/", "cgi/"] {
        assert!(
            log.iter().any(|l| l.contains(pool)),
            "no access-log line for {pool}: {log:?}"
        );
    }
}
