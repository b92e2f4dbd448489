//! Compression of responses (`[virtual.NAME.compress]`, issue 47): gzip, brotli and zstd
//! chosen by the client's `Accept-Encoding` q-values, over HTTP/1.1 and HTTP/2; every answer
//! that must go as the server made it goes byte for byte; a compressed body decodes to the
//! server's byte for byte, with `Vary`, a weak `ETag` and no stale `Content-Length`. The
//! bodies are decoded by the coding crates' own decoders, not by the switch's code.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::*;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// About 100 KiB of HTML-like text (compressible, as real pages are), the same every run.
fn page() -> Vec<u8> {
    let words: [&[u8]; 8] = [
        b"<div class=\"row\">",
        b"tcpvs ",
        b"routes ",
        b"<a href=\"/static/app.css\">",
        b"requests ",
        b"</div>\n",
        b"to pools ",
        b"<p>",
    ];
    let noise = pattern(100_000, 7);
    let mut out = Vec::new();
    for byte in noise {
        out.extend_from_slice(words[usize::from(byte) % words.len()]);
        if out.len() >= 100 * 1024 {
            break;
        }
    }
    out
}

/// What the test origin answers, by path. Every answer keeps the connection but `/close`.
async fn answer(stream: &mut TcpStream, path: &str, page: &[u8], go_on: &Notify) -> bool {
    let html = "Content-Type: text/html; charset=utf-8";
    let fixed = |extra: &str, body: &[u8]| {
        let mut out = format!(
            "HTTP/1.1 200 OK\r\n{extra}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(body);
        out
    };
    let wire = match path {
        "/page" => fixed(&format!("{html}\r\nETag: \"v1\""), page),
        "/varied" => fixed(&format!("{html}\r\nVary: Accept-Encoding, Cookie"), page),
        "/small" => fixed(html, &page[..1000]),
        "/png" => fixed("Content-Type: image/png", page),
        "/untyped" => fixed("X-Kind: none", page),
        "/encoded" => fixed(&format!("{html}\r\nContent-Encoding: gzip"), page),
        "/no-transform" => fixed(&format!("{html}\r\nCache-Control: public, no-transform"), page),
        "/partial" => format!("HTTP/1.1 206 Partial Content\r\n{html}\r\nContent-Range: bytes 0-1999/{}\r\nContent-Length: 2000\r\n\r\n", page.len())
            .into_bytes()
            .into_iter()
            .chain(page[..2000].iter().copied())
            .collect(),
        "/not-modified" => format!("HTTP/1.1 304 Not Modified\r\n{html}\r\nETag: \"v1\"\r\n\r\n").into_bytes(),
        "/no-content" => format!("HTTP/1.1 204 No Content\r\n{html}\r\n\r\n").into_bytes(),
        "/chunked" => {
            let mut out = format!("HTTP/1.1 200 OK\r\n{html}\r\nTransfer-Encoding: chunked\r\nTrailer: x-sum\r\n\r\n").into_bytes();
            for piece in page.chunks(7_000) {
                out.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
                out.extend_from_slice(piece);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"0\r\nx-sum: done\r\n\r\n");
            out
        }
        "/close" => {
            let mut out = format!("HTTP/1.1 200 OK\r\n{html}\r\nConnection: close\r\n\r\n").into_bytes();
            out.extend_from_slice(page);
            let _ = stream.write_all(&out).await;
            return false;
        }
        "/pause" => {
            // The first half, then nothing until the test has decoded it.
            let head = format!("HTTP/1.1 200 OK\r\n{html}\r\nTransfer-Encoding: chunked\r\n\r\n");
            let half = &page[..page.len() / 2];
            let first = format!("{}{:x}\r\n", head, half.len());
            let _ = stream.write_all(first.as_bytes()).await;
            let _ = stream.write_all(half).await;
            let _ = stream.write_all(b"\r\n").await;
            go_on.notified().await;
            let rest = &page[page.len() / 2..];
            let _ = stream.write_all(format!("{:x}\r\n", rest.len()).as_bytes()).await;
            let _ = stream.write_all(rest).await;
            let _ = stream.write_all(b"\r\n0\r\n\r\n").await;
            return true;
        }
        _ => fixed(html, b"missing\n"),
    };
    stream.write_all(&wire).await.is_ok()
}

/// The origin: keeps connections, answers [`answer`]'s paths; `go_on` lets `/pause` finish.
async fn origin() -> (SocketAddr, Arc<Notify>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let go_on = Arc::new(Notify::new());
    let notify = go_on.clone();
    tokio::spawn(async move {
        let page = Arc::new(page());
        while let Ok((mut stream, _)) = listener.accept().await {
            let (page, go_on) = (page.clone(), go_on.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Some(end) = read_head(&mut stream, &mut buf).await {
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    if !answer(&mut stream, &path, &page, &go_on).await {
                        return;
                    }
                }
            });
        }
    });
    (addr, notify)
}

const RULES: &str = r#"
[switch]
access_log = false
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[virtual.web.compress]
types = ["text/html", "application/json"]
min_size = "1KiB"
[[virtual.web.rule]]
path = "^/raw/"
strip_prefix = "/raw"
pool = "p"
compress = false
[[virtual.web.rule]]
path = "^/ahead/"
strip_prefix = "/ahead"
pool = "ahead"
[pool.p]
servers = [{ addr = "{origin}" }]
[pool.ahead]
servers = [{ addr = "{origin}" }]
response_buffer = "1MiB"
"#;

async fn switch_and_origin() -> (tcpvs::Switch, SocketAddr, Arc<Notify>) {
    let (origin, go_on) = origin().await;
    let switch = start_switch(RULES, &[("origin", origin.to_string())]).await;
    let addr = switch.local_addr("web").unwrap();
    (switch, addr, go_on)
}

fn decode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    match coding {
        "gzip" => flate2::read::GzDecoder::new(bytes).read_to_end(&mut out),
        "br" => brotli::Decompressor::new(bytes, 4096).read_to_end(&mut out),
        "zstd" => zstd::stream::read::Decoder::new(bytes).and_then(|mut d| d.read_to_end(&mut out)),
        other => panic!("unexpected coding {other}"),
    }
    .unwrap_or_else(|e| panic!("{coding} does not decode: {e}"));
    out
}

/// Sends `GET path` over HTTP/1.1 with `Accept-Encoding: accept` (none when empty).
async fn get(client: &mut Client, path: &str, accept: &str) -> Response {
    let field = match accept {
        "-" => String::new(),
        accept => format!("Accept-Encoding: {accept}\r\n"),
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nTE: trailers\r\n{field}\r\n");
    client.send(request.as_bytes()).await;
    client.response(false).await
}

/// Which coding each `Accept-Encoding` gets from a service whose `algorithms` are the default
/// (zstd, then br, then gzip); `None`: sent as it is.
const NEGOTIATED: &[(&str, Option<&str>)] = &[
    ("gzip", Some("gzip")),
    ("br", Some("br")),
    ("zstd", Some("zstd")),
    ("gzip, deflate, br, zstd", Some("zstd")),
    ("gzip, deflate, br", Some("br")),
    ("gzip;q=1.0, br;q=0.5, zstd;q=0.1", Some("gzip")),
    ("*", Some("zstd")),
    ("*, zstd;q=0", Some("br")),
    ("x-gzip", Some("gzip")),
    ("gzip;q=0", None),
    ("*;q=0", None),
    ("identity", None),
    ("deflate", None),
    ("", None),
    ("-", None),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coding_is_chosen_by_q_values_and_decodes_byte_exact_over_http1() {
    let (switch, addr, _) = switch_and_origin().await;
    let page = page();
    let mut client = Client::connect(addr).await;
    let mut sent_out = 0;
    let mut compressed = 0;
    for &(accept, expected) in NEGOTIATED {
        let r = get(&mut client, "/page", accept).await;
        assert_eq!(r.status, 200, "{accept}");
        assert_eq!(r.header("content-encoding"), expected, "{accept}");
        match expected {
            Some(coding) => {
                compressed += 1;
                sent_out += r.body.len() as u64;
                assert_eq!(decode(coding, &r.body), page, "{accept}");
                assert!(r.body.len() < page.len() / 3, "{accept}: {}", r.body.len());
                assert_eq!(r.header("content-length"), None, "{accept}");
                assert_eq!(r.header("transfer-encoding"), Some("chunked"), "{accept}");
                assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
                assert_eq!(r.header("etag"), Some("W/\"v1\""), "{accept}");
            }
            None => {
                assert_eq!(r.body, page, "{accept}");
                let length = page.len().to_string();
                assert_eq!(
                    r.header("content-length"),
                    Some(length.as_str()),
                    "{accept}"
                );
                // It could have been compressed: a cache must know it varies.
                assert_eq!(r.header("vary"), Some("Accept-Encoding"), "{accept}");
                assert_eq!(r.header("etag"), Some("\"v1\""), "{accept}");
            }
        }
    }
    // Counted per service: responses, bytes in (the server's) and out (the encoder's).
    let snap = switch.stats();
    let web = &snap.services[0];
    assert_eq!(web.compressed, compressed);
    assert_eq!(web.compress_bytes_in, compressed * page.len() as u64);
    assert_eq!(web.compress_bytes_out, sent_out);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coding_is_chosen_by_q_values_and_decodes_byte_exact_over_http2() {
    let (_switch, addr, _) = switch_and_origin().await;
    let page = page();
    let h2 = h2c::H2::plain(addr).await;
    for &(accept, expected) in NEGOTIATED {
        let fields: &[(&str, &str)] = match accept {
            "-" => &[],
            accept => &[("accept-encoding", accept)],
        };
        let request = h2c::request("GET", "test", "/page", fields);
        let r = h2.exchange(request, h2c::Upload::None).await.unwrap();
        assert_eq!(r.status, 200, "{accept}");
        let header = |name: &str| r.headers.get(name).map(|v| v.to_str().unwrap().to_string());
        assert_eq!(header("content-encoding").as_deref(), expected, "{accept}");
        match expected {
            Some(coding) => {
                assert_eq!(decode(coding, &r.body), page, "{accept}");
                assert_eq!(header("content-length"), None, "{accept}");
                assert_eq!(
                    header("vary").as_deref(),
                    Some("Accept-Encoding"),
                    "{accept}"
                );
                assert_eq!(header("etag").as_deref(), Some("W/\"v1\""), "{accept}");
            }
            None => {
                assert_eq!(r.body, page, "{accept}");
                assert_eq!(
                    header("content-length"),
                    Some(page.len().to_string()),
                    "{accept}"
                );
                assert_eq!(header("etag").as_deref(), Some("\"v1\""), "{accept}");
                assert_eq!(
                    header("vary").as_deref(),
                    Some("Accept-Encoding"),
                    "{accept}"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_that_must_not_change_go_byte_for_byte() {
    let (switch, addr, _) = switch_and_origin().await;
    let page = page();
    let mut client = Client::connect(addr).await;
    let all = "zstd, br, gzip";
    let same = [
        ("/small", &page[..1000]),
        ("/png", &page[..]),
        ("/untyped", &page[..]),
        ("/encoded", &page[..]),
        ("/no-transform", &page[..]),
        ("/partial", &page[..2000]),
        ("/raw/page", &page[..]),
    ];
    for (path, body) in same {
        let r = get(&mut client, path, all).await;
        assert_eq!(r.body, body, "{path}");
        assert_eq!(r.header("vary"), None, "{path}");
        let encoding = (path == "/encoded").then_some("gzip");
        assert_eq!(r.header("content-encoding"), encoding, "{path}");
        let length = body.len().to_string();
        assert_eq!(r.header("content-length"), Some(length.as_str()), "{path}");
    }
    for (path, status) in [("/not-modified", 304), ("/no-content", 204)] {
        let r = get(&mut client, path, all).await;
        assert_eq!((r.status, r.body.len()), (status, 0), "{path}");
        assert_eq!(r.header("content-encoding"), None, "{path}");
    }
    // HEAD: the head the server wrote, its length included.
    client
        .send(b"HEAD /page HTTP/1.1\r\nHost: test\r\nAccept-Encoding: gzip\r\n\r\n")
        .await;
    let r = client.response(true).await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(
        r.header("content-length"),
        Some(page.len().to_string().as_str())
    );
    // A server's own Vary that names the coding is not said twice.
    let r = get(&mut client, "/varied", "gzip").await;
    let varies: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("vary"))
        .collect();
    assert_eq!(varies.len(), 1, "{varies:?}");
    assert_eq!(decode("gzip", &r.body), page);
    assert_eq!(switch.stats().services[0].compressed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_until_close_and_read_ahead_bodies_are_compressed_whole() {
    let (_switch, addr, _) = switch_and_origin().await;
    let page = page();
    let mut client = Client::connect(addr).await;
    for path in ["/chunked", "/ahead/chunked"] {
        let r = get(&mut client, path, "gzip").await;
        assert_eq!(decode("gzip", &r.body), page, "{path}");
        // The server's trailers follow the compressed data.
        assert_eq!(r.trailers, b"x-sum: done\r\n", "{path}");
    }
    for path in ["/ahead/page", "/ahead/close"] {
        for coding in ["gzip", "br", "zstd"] {
            let mut client = Client::connect(addr).await;
            let r = get(&mut client, path, coding).await;
            assert_eq!(r.header("content-encoding"), Some(coding), "{path}");
            assert_eq!(decode(coding, &r.body), page, "{path} {coding}");
        }
    }
    // An HTTP/1.0 client gets the answer as it is, as from nginx (`gzip_http_version 1.1`)
    // and HAProxy, told that it varies.
    for path in ["/close", "/page"] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!("GET {path} HTTP/1.0\r\nAccept-Encoding: br\r\n\r\n");
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut wire = Vec::new();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut wire))
            .await
            .expect("the whole answer within PATIENCE")
            .unwrap();
        let end = wire.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let head = String::from_utf8_lossy(&wire[..end]).to_ascii_lowercase();
        assert!(!head.contains("content-encoding"), "{path}: {head}");
        assert!(head.contains("vary: accept-encoding\r\n"), "{path}: {head}");
        assert_eq!(&wire[end..], &page[..], "{path}");
    }
}

/// The data of the chunks `wire` holds so far (the last one perhaps cut), as a client reading
/// a chunked body as it comes sees it.
fn dechunked_prefix(mut wire: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(line) = wire.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&wire[..line]).ok();
        let Some(size) = size.and_then(|s| usize::from_str_radix(s, 16).ok()) else {
            break;
        };
        let rest = &wire[line + 2..];
        data.extend_from_slice(&rest[..size.min(rest.len())]);
        if size == 0 || rest.len() < size + 2 {
            break;
        }
        wire = &rest[size + 2..];
    }
    data
}

/// A server that pauses mid-stream: what it sent reaches the client decodable (the encoder is
/// flushed when the next part would wait), so the test's origin goes on only once the client
/// has decoded the first half. Without the flush the client would wait for `PATIENCE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_pausing_server_sent_reaches_the_client_decodable() {
    let (_switch, addr, go_on) = switch_and_origin().await;
    let page = page();
    for coding in ["gzip", "br", "zstd"] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = format!(
            "GET /pause HTTP/1.1\r\nHost: test\r\nConnection: close\r\nAccept-Encoding: {coding}\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let end = read_head(&mut stream, &mut head).await.expect("a head");
        let mut body = head.split_off(end);
        let half = page.len() / 2;
        let mut chunk = vec![0; 16 * 1024];
        while decoded_prefix(coding, &dechunked_prefix(&body)).len() < half {
            let n = tokio::time::timeout(PATIENCE, stream.read(&mut chunk))
                .await
                .unwrap_or_else(|_| panic!("{coding}: the first half decodable within PATIENCE"))
                .unwrap();
            assert!(n > 0, "{coding}: closed early");
            body.extend_from_slice(&chunk[..n]);
        }
        go_on.notify_one();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut body))
            .await
            .expect("the rest")
            .unwrap();
        assert!(
            body.ends_with(b"0\r\n\r\n"),
            "{coding}: a chunked body's end"
        );
        assert_eq!(decode(coding, &dechunked_prefix(&body)), page, "{coding}");
    }
    // Over HTTP/2 as well, compressed or not: the switch's h2 side sends what it has when the
    // server pauses (it gathers small parts only while more is already here).
    let h2 = h2c::H2::plain(addr).await;
    for coding in ["identity", "gzip"] {
        let request = h2c::request("GET", "test", "/pause", &[("accept-encoding", coding)]);
        let (response, _) = h2.send.clone().send_request(request, true).unwrap();
        let response = tokio::time::timeout(PATIENCE, response)
            .await
            .unwrap()
            .unwrap();
        let mut body = response.into_body();
        let decoded = |wire: &[u8]| match coding {
            "gzip" => decoded_prefix(coding, wire),
            _ => wire.to_vec(),
        };
        let mut wire = Vec::new();
        let mut went_on = false;
        loop {
            let got = if went_on || decoded(&wire).len() < page.len() / 2 {
                tokio::time::timeout(PATIENCE, body.data())
                    .await
                    .unwrap_or_else(|_| {
                        panic!(
                            "h2 {coding}: the first half within PATIENCE ({} bytes)",
                            wire.len()
                        )
                    })
            } else {
                go_on.notify_one();
                went_on = true;
                continue;
            };
            let Some(data) = got else { break };
            let data = data.unwrap();
            let _ = body.flow_control().release_capacity(data.len());
            wire.extend_from_slice(&data);
        }
        assert!(went_on, "h2 {coding}");
        let whole = match coding {
            "gzip" => decode(coding, &wire),
            _ => wire,
        };
        assert_eq!(whole, page, "h2 {coding}");
    }
}

/// What `bytes` (the start of a body in `coding`, perhaps cut anywhere) decode to: the coding
/// crate's reader gives what it can, then stops at the cut.
fn decoded_prefix(coding: &str, bytes: &[u8]) -> Vec<u8> {
    let mut reader: Box<dyn Read + '_> = match coding {
        "gzip" => Box::new(flate2::read::GzDecoder::new(bytes)),
        "br" => Box::new(brotli::Decompressor::new(bytes, 4096)),
        _ => Box::new(zstd::stream::read::Decoder::new(bytes).unwrap()),
    };
    let mut out = Vec::new();
    let mut chunk = vec![0; 4096];
    while let Ok(n @ 1..) = reader.read(&mut chunk) {
        out.extend_from_slice(&chunk[..n]);
    }
    out
}

#[test]
fn mistakes_in_the_compress_table_are_reported_at_their_place() {
    let text = r#"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[virtual.web.compress]
types = ["text/html", "html"]
algorithms = ["gzip", "deflate", "gzip"]
gzip_level = 10
br_level = 5
zstd_level = 7
min_size = "lots"
level = 3
[pool.p]
servers = [{ addr = "127.0.0.1:9" }]
"#;
    let errors = tcpvs::Config::parse("t.toml", text)
        .unwrap_err()
        .to_string();
    for expected in [
        "t.toml:6:23: `types`: \"html\" is not a media type",
        "t.toml:7:23: `algorithms`: unknown coding \"deflate\"",
        "t.toml:7:34: `algorithms`: \"gzip\" is listed twice",
        "t.toml:8:14: gzip_level = 10 is out of range 1..=9",
        "t.toml:9:12: br_level = 5 is out of range 0..=4",
        "t.toml:10:14: zstd_level = 7 is out of range 1..=6",
        "t.toml:11:12:",
        "t.toml:12:1: unknown field `level` in [virtual.web.compress]",
    ] {
        assert!(
            errors.contains(expected),
            "missing {expected:?} in:\n{errors}"
        );
    }
    // A rule's `compress` beside a service without the table is said to do nothing.
    let warned = r#"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[[virtual.web.rule]]
path = "^/"
pool = "p"
compress = false
[pool.p]
servers = [{ addr = "127.0.0.1:9" }]
"#;
    let config = tcpvs::Config::parse("w.toml", warned).unwrap();
    let warnings: Vec<String> = config
        .warnings
        .iter()
        .map(|w| w.as_error().to_string())
        .collect();
    let warnings = warnings.join("\n");
    assert!(
        warnings.contains("w.toml:8:12: `compress` has no effect"),
        "{warnings}"
    );
}

/// Encoders at work take at most `compress_memory` (each is charged its coding's bound, 512
/// KiB for gzip): past it a response goes as it is, counted, and the room comes back as
/// encoders finish.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_compress_memory_answers_go_uncompressed_until_encoders_finish() {
    let (origin, go_on) = origin().await;
    let rules = RULES.replace(
        "access_log = false",
        "access_log = false\ncompress_memory = \"1100KiB\"",
    );
    let switch = start_switch(&rules, &[("origin", origin.to_string())]).await;
    let addr = switch.local_addr("web").unwrap();
    let page = page();
    // Two answers held open mid-body (the origin pauses): two gzip encoders, 1 MiB.
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"GET /pause HTTP/1.1\r\nHost: test\r\nConnection: close\r\nAccept-Encoding: gzip\r\n\r\n",
            )
            .await
            .unwrap();
        let mut got = Vec::new();
        read_head(&mut stream, &mut got).await.expect("a head");
        assert!(String::from_utf8_lossy(&got).contains("Content-Encoding: gzip"));
        held.push((stream, got));
    }
    let mut client = Client::connect(addr).await;
    let r = get(&mut client, "/page", "gzip").await;
    assert_eq!(r.header("content-encoding"), None);
    assert_eq!(r.body, page);
    let snap = switch.stats();
    assert_eq!(
        (
            snap.services[0].compressed,
            snap.services[0].compress_skipped
        ),
        (2, 1)
    );
    // The held answers end; their encoders' room comes back.
    for (mut stream, mut got) in held {
        go_on.notify_one();
        tokio::time::timeout(PATIENCE, stream.read_to_end(&mut got))
            .await
            .expect("the rest")
            .unwrap();
        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(decode("gzip", &dechunked_prefix(&got[end..])), page);
    }
    let r = get(&mut client, "/page", "gzip").await;
    assert_eq!(r.header("content-encoding"), Some("gzip"));
    assert_eq!(decode("gzip", &r.body), page);
}
