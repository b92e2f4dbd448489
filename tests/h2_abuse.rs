//! HTTP/2 from clients under abuse: the MUSTs of RFC 9113 for requests, and the published
//! attacks on HTTP/2 servers, sent byte by byte by a raw client (tests/common/h2_frames.rs)
//! to a switch in this process, with a recording backend behind it that shows what got
//! through. The limits tested are those of the table in switch/connection/h2.rs:
//!
//! - a malformed request is reset (RST_STREAM or GOAWAY with PROTOCOL_ERROR) and never reaches
//!   a server; the connection (for a stream error) and the switch go on serving;
//! - streams beyond `SETTINGS_MAX_CONCURRENT_STREAMS` (100) get `REFUSED_STREAM`;
//! - Rapid Reset (CVE-2023-44487), CONTINUATION floods (CVE-2024-27316), HPACK bombs,
//!   MadeYouReset (CVE-2025-8671) and floods of the frames a client sends for free (SETTINGS,
//!   PING with or without ACK, WINDOW_UPDATE, PRIORITY, PRIORITY_UPDATE, unknown types, empty
//!   or padding-only DATA) end in `GOAWAY` (`ENHANCE_YOUR_CALM` when a budget is spent) with a
//!   bounded number of requests at the backend, others served meanwhile, and no line in the
//!   log of the binary; a client within the budget's burst and then its rate is never cut,
//!   nor are transfers larger than the budget whose client answers every DATA frame;
//! - a client that never opens its flow-control window holds a bounded part of a large
//!   response, and loses the stream after `idle_timeout`;
//! - `/stats` counts the protocol errors and GOAWAYs the clients saw.
//!
//! Verdicts never depend on elapsed time: every step waits for a frame, a response or the
//! switch's statistics; timeouts (`PATIENCE`) only turn hangs into failures. The budget's
//! refill is a rate, so two tests let time pass, and use it only in the direction that makes
//! a slow machine pass: as a client's own pace (more time, more frames allowed), and as an
//! upper bound measured around a connection's whole life.

mod common;
#[path = "common/h2_frames.rs"]
mod h2_frames;
#[path = "common/metered_backend.rs"]
mod metered_backend;

use common::{pattern, sha256_hex, start_switch, wait_until, Backend};
use h2_frames::*;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

/// `SETTINGS_MAX_CONCURRENT_STREAMS` of switch/connection/h2.rs.
const MAX_CONCURRENT_STREAMS: usize = 100;
/// The free frames a client may send at once, and each second after
/// (switch/connection/h2/frames.rs).
const OVERHEAD_BURST: usize = 1000;
const OVERHEAD_PER_SECOND: usize = 100;
/// Streams the switch may reset for the client's errors before `ENHANCE_YOUR_CALM`
/// (`MAX_LOCAL_ERROR_RESETS`, switch/connection/h2.rs).
const MAX_LOCAL_ERROR_RESETS: usize = 200;
/// Bytes of a response the h2 crate may hold for one stream beyond the client's window
/// (`MAX_SEND_BUFFER`, switch/connection/h2.rs).
const MAX_SEND_BUFFER: usize = 64 * 1024;

// ---------------------------------------------------------------- the switch

/// A switch with one plain service (HTTP/2 by prior knowledge) before `backend`, and an admin
/// endpoint; `switch_table` goes into `[switch]`.
async fn switch_before(backend: SocketAddr, switch_table: &str) -> tcpvs::Switch {
    let rules = format!(
        "[switch]\naccess_log = false\n{switch_table}\n\
         [admin]\nlisten = \"127.0.0.1:0\"\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
         [pool.p]\nservers = [{{ addr = \"{backend}\" }}]\n"
    );
    start_switch(&rules, &[]).await
}

fn web(switch: &tcpvs::Switch) -> SocketAddr {
    switch.local_addr("web").expect("the service listens")
}

/// The service's `h2_protocol_errors` and `h2_goaways_sent`.
fn h2_counters(switch: &tcpvs::Switch) -> (u64, u64) {
    let snap = switch.stats();
    let web = &snap.services[0];
    (web.h2_protocol_errors, web.h2_goaways_sent)
}

/// What the switch's counters must show for `frames` received by clients: RST_STREAMs with a
/// protocol-error code and GOAWAYs with any code but NO_ERROR are protocol errors (the
/// definition of `h2_protocol_errors`, switch/connection/h2/io.rs); every GOAWAY counts in
/// `h2_goaways_sent`.
fn counted(frames: &[Frame]) -> (u64, u64) {
    let mut errors = 0;
    let mut goaways = 0;
    for f in frames {
        match (f.kind, f.error_code()) {
            (GOAWAY, code) => {
                goaways += 1;
                if code != Some(NO_ERROR) {
                    errors += 1;
                }
            }
            (
                RST_STREAM,
                Some(
                    PROTOCOL_ERROR | FLOW_CONTROL_ERROR | STREAM_CLOSED | FRAME_SIZE_ERROR
                    | COMPRESSION_ERROR | ENHANCE_YOUR_CALM,
                ),
            ) => errors += 1,
            _ => {}
        }
    }
    (errors, goaways)
}

/// Waits until the counters reach `expected` (they are bumped as the frames leave, a moment
/// after a client may have read them), then checks they did not pass it.
async fn counters_are(switch: &tcpvs::Switch, expected: (u64, u64)) {
    wait_until(
        switch,
        "the h2 counters reach what the clients saw",
        |snap| {
            snap.services[0].h2_protocol_errors >= expected.0
                && snap.services[0].h2_goaways_sent >= expected.1
        },
    )
    .await;
    assert_eq!(
        h2_counters(switch),
        expected,
        "(h2_protocol_errors, h2_goaways_sent) equal what the clients received"
    );
}

/// GET `/bytes/N` on `stream` of `conn`: a 200 with the backend's N bytes.
async fn fetch(conn: &mut Conn, stream: u32, n: usize) {
    conn.send(&headers(
        stream,
        Block::get(&format!("/bytes/{n}")).bytes(),
        true,
    ))
    .await;
    let response = conn.response(stream).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        sha256_hex(&response.body),
        sha256_hex(&pattern(n, n as u64)),
        "the body of /bytes/{n}"
    );
}

/// A GET on a new connection succeeds: the switch goes on serving. Returns its frames.
async fn served_anew(addr: SocketAddr) -> Vec<Frame> {
    let mut conn = Conn::open(addr).await;
    fetch(&mut conn, 1, 1000).await;
    conn.seen
}

/// Waits until the switch has no client and no request in flight, then returns the number of
/// requests the backend received.
async fn settled_requests(switch: &tcpvs::Switch, backend: &Backend) -> usize {
    common::settle(switch).await;
    backend.requests()
}

// ---------------------------------------------------------------- 1. malformed requests

/// How a malformed request is written: the frames of stream 1 (HEADERS, and DATA or trailers
/// for the cases that need them), all in one write.
struct Malformed {
    name: &'static str,
    frames: Vec<u8>,
}

/// A POST to `/bad/PATH` with three bytes of body, then `trailers`, which end the stream.
fn posted_with_trailers(path: &str, trailers: Block) -> Vec<u8> {
    let post = Block::request("POST", &format!("/bad/{path}"), "h2.test");
    let mut frames = headers(1, post.bytes(), false);
    frames.extend(data(1, b"abc", false));
    frames.extend(headers(1, trailers.bytes(), true));
    frames
}

fn malformed_cases() -> Vec<Malformed> {
    let get = |path: &str| Block::get(&format!("/bad/{path}"));
    let one = |name, block: Block| Malformed {
        name,
        frames: headers(1, block.bytes(), true),
    };
    let with_body = |name, block: Block, body: &[u8]| {
        let mut frames = headers(1, block.bytes(), false);
        frames.extend(data(1, body, true));
        Malformed { name, frames }
    };
    let post = |path: &str| Block::request("POST", &format!("/bad/{path}"), "h2.test");
    let mut trailers = headers(1, post("trailers").bytes(), false);
    trailers.extend(data(1, b"abc", false));
    trailers.extend(headers(
        1,
        Block::new()
            .field("x-trailer", "1")
            .field(":path", "/bad/in-trailers")
            .bytes(),
        true,
    ));
    vec![
        one("uppercase field name", get("upper").field("X-Upper", "1")),
        one(
            "pseudo-header after a regular field",
            Block::new()
                .field(":method", "GET")
                .field(":scheme", "http")
                .field("x-early", "1")
                .field(":path", "/bad/order")
                .field(":authority", "h2.test"),
        ),
        one("duplicate :path", get("dup-path").field(":path", "/bad/2")),
        // RFC 9113 section 8.3.1: every request but a CONNECT has one :path.
        one(
            "no :path",
            Block::new()
                .field(":method", "GET")
                .field(":scheme", "http")
                .field(":authority", "h2.test"),
        ),
        one(
            "no :path, no :authority",
            Block::new()
                .field(":method", "GET")
                .field(":scheme", "http")
                .field("host", "h2.test"),
        ),
        one(
            "duplicate :method",
            get("dup-method").field(":method", "GET"),
        ),
        one(
            "unknown pseudo-header",
            get("unknown").field(":color", "red"),
        ),
        Malformed {
            name: "pseudo-header in trailers",
            frames: trailers,
        },
        // A trailer section that begins with a pseudo-header: the h2 crate once read it as
        // the section's pseudo-headers and dropped them silently (vendor/README.md).
        Malformed {
            name: "pseudo-header leading the trailers",
            frames: posted_with_trailers(
                "trailers-first",
                Block::new()
                    .field(":path", "/bad/x")
                    .field("x-trailer", "1"),
            ),
        },
        Malformed {
            name: "only a pseudo-header in the trailers",
            frames: posted_with_trailers("trailers-only", Block::new().field(":status", "200")),
        },
        one(
            "missing :method",
            Block::new()
                .field(":scheme", "http")
                .field(":path", "/bad/no-method")
                .field(":authority", "h2.test"),
        ),
        one(
            "missing :scheme",
            Block::new()
                .field(":method", "GET")
                .field(":path", "/bad/no-scheme")
                .field(":authority", "h2.test"),
        ),
        one(
            "missing :path",
            Block::new()
                .field(":method", "GET")
                .field(":scheme", "http")
                .field(":authority", "h2.test"),
        ),
        one("empty :path", Block::request("GET", "", "h2.test")),
        one("connection", get("connection").field("connection", "close")),
        one("keep-alive", get("keep-alive").field("keep-alive", "300")),
        one(
            "proxy-connection",
            get("proxy-connection").field("proxy-connection", "keep-alive"),
        ),
        with_body(
            "transfer-encoding",
            post("te-chunked").field("transfer-encoding", "chunked"),
            b"3\r\nabc\r\n0\r\n\r\n",
        ),
        one("upgrade", get("upgrade").field("upgrade", "websocket")),
        one("te: gzip", get("te-gzip").field("te", "gzip")),
        with_body(
            "content-length above the DATA",
            post("cl-above").field("content-length", "10"),
            b"abc",
        ),
        with_body(
            "content-length below the DATA",
            post("cl-below").field("content-length", "2"),
            b"abcdef",
        ),
        one("CR in a value", get("cr").field("x-v", "a\rb")),
        one("LF in a value", get("lf").field("x-v", "a\nb")),
        one("NUL in a value", get("nul").field("x-v", b"a\0b")),
        one("leading space in a value", get("lead").field("x-v", " v")),
        one("trailing space in a value", get("trail").field("x-v", "v ")),
        one(
            "Host disagreeing with :authority",
            get("host").field("host", "other.test"),
        ),
        // RFC 9113 section 8.5: a CONNECT request carries `:authority` and neither `:scheme`
        // nor `:path`; without `:authority` it is malformed (not a CONNECT to refuse with 501).
        one(
            "CONNECT without :authority",
            Block::new().field(":method", "CONNECT"),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_reset_and_never_reach_the_backend() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut frames = Vec::new();
    let mut good = 0;
    let mut stream_errors = 0;
    for case in malformed_cases() {
        let mut conn = Conn::open(addr).await;
        conn.send(&case.frames).await;
        match conn.outcome(1).await {
            Outcome::Reset(PROTOCOL_ERROR, None) => {
                // A stream error: the connection serves the next stream.
                println!("{}: RST_STREAM PROTOCOL_ERROR", case.name);
                stream_errors += 1;
                fetch(&mut conn, 3, 1000).await;
                good += 1;
            }
            Outcome::GoAway(PROTOCOL_ERROR) => {
                println!("{}: GOAWAY PROTOCOL_ERROR", case.name);
                let rest = conn.until_closed().await;
                assert!(
                    rest.iter().all(|f| f.kind != HEADERS),
                    "{}: no response after GOAWAY",
                    case.name
                );
            }
            other => panic!(
                "{}: expected RST_STREAM or GOAWAY with PROTOCOL_ERROR, got {other:?}",
                case.name
            ),
        }
        frames.extend(conn.seen);
        frames.extend(served_anew(addr).await);
        good += 1;
    }
    assert!(stream_errors > 0, "some malformations are stream errors");
    let total = settled_requests(&switch, &backend).await;
    let heads = backend.record.heads.lock().expect("heads").clone();
    let bad: Vec<&String> = heads.iter().filter(|h| h.contains("/bad/")).collect();
    assert!(
        bad.is_empty(),
        "malformed requests reached the backend: {bad:#?}"
    );
    assert_eq!(
        total, good,
        "only the well-formed requests reached the backend"
    );
    counters_are(&switch, counted(&frames)).await;
}

// ---------------------------------------------------------------- 2. concurrent streams

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_the_concurrency_limit_are_refused() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let mut conn = Conn::open(web(&switch)).await;
    let mut burst = Vec::new();
    for i in 0..MAX_CONCURRENT_STREAMS as u32 {
        burst.extend(headers(
            1 + 2 * i,
            Block::get(&format!("/hold?{i}")).bytes(),
            true,
        ));
    }
    conn.send(&burst).await;
    backend.wait_for_requests(MAX_CONCURRENT_STREAMS).await;
    let extra = 1 + 2 * MAX_CONCURRENT_STREAMS as u32;
    conn.send(&headers(extra, Block::get("/hold?extra").bytes(), true))
        .await;
    match conn.outcome(extra).await {
        Outcome::Reset(REFUSED_STREAM, None) => {}
        other => panic!("stream 101: expected RST_STREAM REFUSED_STREAM, got {other:?}"),
    }
    assert!(conn.round_trip(*b"refused!").await);
    assert_eq!(
        backend.requests(),
        MAX_CONCURRENT_STREAMS,
        "the refused stream never reached the backend"
    );
    backend.release(MAX_CONCURRENT_STREAMS);
    let held: Vec<u32> = (0..MAX_CONCURRENT_STREAMS as u32)
        .map(|i| 1 + 2 * i)
        .collect();
    for (id, end) in conn.outcomes(&held).await {
        match end {
            Outcome::Response(r) if r.status == 200 && r.body == b"0123456789" => {}
            other => panic!("stream {id}: {other:?}"),
        }
    }
    // Room again: the same connection goes on.
    fetch(&mut conn, extra + 2, 1000).await;
    let frames = conn.seen.clone();
    drop(conn);
    assert_eq!(
        settled_requests(&switch, &backend).await,
        MAX_CONCURRENT_STREAMS + 1
    );
    counters_are(&switch, counted(&frames)).await;
    assert_eq!(
        counted(&frames),
        (0, 0),
        "REFUSED_STREAM is no protocol error"
    );
}

// ---------------------------------------------------------------- 3. Rapid Reset

/// `pairs` streams opened (GET `path`) and reset by the client at once, in one write.
fn rapid_reset(pairs: u32, path: &str) -> Vec<u8> {
    let block = Block::get(path);
    let mut burst = Vec::new();
    for i in 0..pairs {
        let id = 1 + 2 * i;
        burst.extend(headers(id, block.bytes(), true));
        burst.extend(rst_stream(id, CANCEL));
    }
    burst
}

/// The connection ends for the flood: GOAWAY with ENHANCE_YOUR_CALM, or cut off. Returns all
/// the frames the client got.
async fn calmed(conn: &mut Conn, what: &str) -> Vec<Frame> {
    let rest = conn.until_closed().await;
    let goaways: Vec<Option<u32>> = rest
        .iter()
        .filter(|f| f.kind == GOAWAY)
        .map(Frame::error_code)
        .collect();
    assert!(
        goaways.iter().all(|&c| c == Some(ENHANCE_YOUR_CALM)),
        "{what}: GOAWAYs {goaways:?}"
    );
    assert!(
        !goaways.is_empty(),
        "{what}: GOAWAY ENHANCE_YOUR_CALM before the end"
    );
    conn.seen.clone()
}

/// Requests the backend holds. A stream reset before the switch serves it never reaches a
/// server (switch/connection/h2/stream.rs); one reset later keeps its place among the
/// connection's running streams until its exchange ends, and no new stream is accepted while
/// MAX_CONCURRENT_STREAMS run: so at most that many reach the backend, however many are reset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_of_held_requests_is_bounded_and_calmed() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut conn = Conn::open(addr).await;
    conn.send(&rapid_reset(10_000, "/hold")).await;
    let mut frames = calmed(&mut conn, "Rapid Reset of held requests").await;
    // Another client is served meanwhile.
    frames.extend(served_anew(addr).await);
    backend.release(100_000);
    let reset = settled_requests(&switch, &backend).await - 1;
    println!("Rapid Reset: {reset} held requests of 10000 reset streams reached the backend");
    assert!(
        reset <= MAX_CONCURRENT_STREAMS,
        "{reset} reset streams reached the backend"
    );
    counters_are(&switch, counted(&frames)).await;
}

/// Requests the backend answers at once, so streams end as fast as they start: the bound is
/// the RST_STREAM budget. Each pair carries one RST_STREAM, an overhead frame, and the
/// connection reads nothing past the frame that spends the budget (OVERHEAD_BURST), so at
/// most that many pairs are read and that many requests reach the backend (the h2 crate's
/// limit of streams reset before they are accepted usually ends it sooner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rapid_reset_of_quick_requests_is_bounded_and_calmed() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut conn = Conn::open(addr).await;
    conn.send(&rapid_reset(10_000, "/bytes/10")).await;
    let mut frames = calmed(&mut conn, "Rapid Reset of quick requests").await;
    frames.extend(served_anew(addr).await);
    let reset = settled_requests(&switch, &backend).await - 1;
    println!("Rapid Reset: {reset} quick requests of 10000 reset streams reached the backend");
    assert!(
        reset <= OVERHEAD_BURST,
        "{reset} of 10000 reset streams reached the backend"
    );
    counters_are(&switch, counted(&frames)).await;
}

// ---------------------------------------------------------------- 4. header blocks

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continuation_flood_is_cut_off() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut frames = Vec::new();
    // Fields in endless CONTINUATION frames, END_HEADERS never set.
    for payload in [Block::new().field("x-c", "v").0, Vec::new()] {
        let mut conn = Conn::open(addr).await;
        let mut flood = frame(HEADERS, END_STREAM, 1, Block::get("/bad/cont").bytes());
        for _ in 0..20_000 {
            flood.extend(frame(CONTINUATION, 0, 1, &payload));
        }
        conn.send(&flood).await;
        let rest = conn.until_closed().await;
        let goaway = rest
            .iter()
            .find(|f| f.kind == GOAWAY)
            .expect("GOAWAY before the end");
        assert_ne!(goaway.error_code(), Some(NO_ERROR), "{goaway:?}");
        assert!(rest.iter().all(|f| f.kind != HEADERS), "no response");
        frames.extend(conn.seen);
        frames.extend(served_anew(addr).await);
    }
    assert_eq!(settled_requests(&switch, &backend).await, 2);
    counters_are(&switch, counted(&frames)).await;
}

/// A header block that inserts a 4000-byte field in the dynamic table, then refers to it
/// `copies` times (one byte each): the decoded list grows 4032 bytes a byte.
fn hpack_bomb(copies: usize) -> Block {
    let mut block = Block::get("/bad/bomb").indexed_field("x-bomb", "b".repeat(4000));
    for _ in 0..copies {
        block = block.index(62);
    }
    block
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_header_lists_and_hpack_bombs_never_reach_the_backend() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut frames = Vec::new();

    // Over SETTINGS_MAX_HEADER_LIST_SIZE (64 KiB) and within the h2 crate's abuse limit
    // (4x): 431 or a reset of the stream, and the connection goes on.
    let mut plain = Block::get("/bad/big");
    for i in 0..80 {
        plain = plain.field(format!("x-f{i}"), "f".repeat(1000));
    }
    let plain_frames = {
        let bytes = plain.bytes();
        let pieces: Vec<&[u8]> = bytes.chunks(16_000).collect();
        let mut out = frame(HEADERS, END_STREAM, 1, pieces[0]);
        for (i, piece) in pieces[1..].iter().enumerate() {
            let last = i + 2 == pieces.len();
            out.extend(frame(
                CONTINUATION,
                if last { END_HEADERS } else { 0 },
                1,
                piece,
            ));
        }
        out
    };
    for (what, over) in [
        ("80 KB of literal fields", plain_frames),
        (
            "20 copies of a 4 KB field",
            headers(1, hpack_bomb(20).bytes(), true),
        ),
    ] {
        let mut conn = Conn::open(addr).await;
        conn.send(&over).await;
        match conn.outcome(1).await {
            Outcome::Response(r) => assert_eq!(r.status, 431, "{what}"),
            Outcome::Reset(_, None | Some(431)) => {}
            other => panic!("{what}: expected 431 or RST_STREAM, got {other:?}"),
        }
        fetch(&mut conn, 3, 1000).await;
        frames.extend(conn.seen);
    }

    // Thousands of copies: 20 MB decoded from 9 KB sent.
    let mut conn = Conn::open(addr).await;
    conn.send(&headers(1, hpack_bomb(5000).bytes(), true)).await;
    match conn.outcome(1).await {
        Outcome::GoAway(_) | Outcome::Reset(_, None | Some(431)) | Outcome::Closed => {}
        Outcome::Response(r) => assert_eq!(r.status, 431, "HPACK bomb"),
        other => panic!("HPACK bomb: got {other:?}"),
    }
    conn.until_closed().await;
    frames.extend(conn.seen);
    frames.extend(served_anew(addr).await);

    assert_eq!(
        settled_requests(&switch, &backend).await,
        3,
        "only the well-formed requests reached the backend"
    );
    let heads = backend.record.heads.lock().expect("heads").clone();
    assert!(heads.iter().all(|h| !h.contains("/bad/")), "{heads:#?}");
    counters_are(&switch, counted(&frames)).await;
}

// ---------------------------------------------------------------- 5. MadeYouReset

/// A provocation: its name, the frame on a stream (opened by a GET with END_STREAM) that
/// makes the server reset it, and the error code RFC 9113 gives that reset.
type Provocation = (&'static str, fn(u32) -> Vec<u8>, u32);

fn provocations() -> [Provocation; 3] {
    [
        (
            "WINDOW_UPDATE of 0 (section 6.9)",
            |id| window_update(id, 0),
            PROTOCOL_ERROR,
        ),
        (
            "DATA on a half-closed stream (section 5.1)",
            |id| data(id, b"x", false),
            STREAM_CLOSED,
        ),
        (
            "a window above 2^31-1 (section 6.9.1)",
            |id| window_update(id, 0x7fff_ffff),
            FLOW_CONTROL_ERROR,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn made_you_reset_is_bounded_and_calmed() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut frames = Vec::new();
    let mut fetched = 0;
    for (what, provoke, code) in provocations() {
        // Once: the stream is reset with the RFC's code, the connection goes on.
        let mut conn = Conn::open(addr).await;
        let mut once = headers(1, Block::get("/hold").bytes(), true);
        once.extend(provoke(1));
        conn.send(&once).await;
        let connection_error = match conn.outcome(1).await {
            Outcome::Reset(c, None) if c == code => {
                fetch(&mut conn, 3, 1000).await;
                fetched += 1;
                false
            }
            // A stream error may be treated as a connection error (RFC 9113 section 5.4): the
            // h2 crate does so for DATA on a half-closed stream and for a WINDOW_UPDATE of 0,
            // with PROTOCOL_ERROR for the former where the RFC's stream error is STREAM_CLOSED.
            Outcome::GoAway(c) if c == code || c == PROTOCOL_ERROR => {
                conn.until_closed().await;
                true
            }
            other => panic!("{what}: expected RST_STREAM or GOAWAY {code}, got {other:?}"),
        };
        frames.extend(conn.seen);

        // In a burst: GOAWAY ENHANCE_YOUR_CALM once MAX_LOCAL_ERROR_RESETS are spent.
        let mut conn = Conn::open(addr).await;
        let mut burst = Vec::new();
        for i in 0..(5 * MAX_LOCAL_ERROR_RESETS) as u32 {
            let id = 1 + 2 * i;
            burst.extend(headers(id, Block::get("/hold").bytes(), true));
            burst.extend(provoke(id));
        }
        conn.send(&burst).await;
        let seen = if connection_error {
            // The first provocation ends the connection.
            conn.until_closed().await;
            let goaways: Vec<_> = conn.seen.iter().filter(|f| f.kind == GOAWAY).collect();
            assert_eq!(goaways.len(), 1, "{what}");
            let c = goaways[0].error_code();
            assert!(
                c == Some(code) || c == Some(PROTOCOL_ERROR),
                "{what}: {c:?}"
            );
            conn.seen.clone()
        } else {
            calmed(&mut conn, what).await
        };
        fetched += 1;
        let resets = seen.iter().filter(|f| f.kind == RST_STREAM).count();
        assert!(
            resets <= MAX_LOCAL_ERROR_RESETS,
            "{what}: {resets} streams reset before GOAWAY"
        );
        frames.extend(seen);
        frames.extend(served_anew(addr).await);
    }
    // Provoked requests at the backend are those of streams reset after the switch served
    // them (reset before, they reach no server), each keeping its place among its
    // connection's running streams while held: at most MAX_CONCURRENT_STREAMS per connection.
    backend.release(100_000);
    let total = settled_requests(&switch, &backend).await;
    assert!(
        total - fetched <= provocations().len() * (1 + MAX_CONCURRENT_STREAMS),
        "{} provoked requests reached the backend",
        total - fetched
    );
    println!(
        "MadeYouReset: {} provoked requests reached the backend",
        total - fetched
    );
    counters_are(&switch, counted(&frames)).await;
}

// ---------------------------------------------------------------- 6. floods of free frames

/// The most free frames the switch may have read on a connection that lasted at most
/// `elapsed` (measured by the test around the connection's whole life, so no less than the
/// switch's own measure): the burst, and the rate for each whole second. A machine slower than
/// expected only raises the bound; a switch refilling faster than its rate passes it.
fn free_frames_within(elapsed: std::time::Duration) -> usize {
    OVERHEAD_BURST + (elapsed.as_millis() as usize) * OVERHEAD_PER_SECOND / 1000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered_until_a_flood_is_calmed() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let opened = std::time::Instant::now();
    let mut conn = Conn::open(addr).await;
    let mut pings = Vec::new();
    for i in 0..10u8 {
        pings.extend(ping([i, 1, 2, 3, 4, 5, 6, i]));
    }
    conn.send(&pings).await;
    for i in 0..10u8 {
        let ack = conn.until(|f| f.kind == PING).await.expect("a PING ACK");
        assert!(ack.has(ACK) && ack.stream == 0, "{ack:?}");
        assert_eq!(
            ack.payload,
            [i, 1, 2, 3, 4, 5, 6, i],
            "ACKs in order, payload echoed"
        );
    }
    let mut flood = Vec::new();
    for i in 0..20_000u32 {
        let mut payload = [0xf1; 8];
        payload[4..].copy_from_slice(&i.to_be_bytes());
        flood.extend(ping(payload));
    }
    conn.send(&flood).await;
    let frames = calmed(&mut conn, "PING flood").await;
    let bound = free_frames_within(opened.elapsed());
    let acks: Vec<&Frame> = frames.iter().filter(|f| f.kind == PING).collect();
    assert!(
        acks.len() <= bound,
        "{} PINGs answered of a budget of {bound}",
        acks.len()
    );
    for ack in &acks[10..] {
        assert!(ack.has(ACK) && ack.payload[..4] == [0xf1; 4], "{ack:?}");
    }
    let mut all = frames;
    all.extend(served_anew(addr).await);
    assert_eq!(settled_requests(&switch, &backend).await, 1);
    counters_are(&switch, counted(&all)).await;
}

/// The burst, then the rate, by events: a client that spends exactly the burst is not cut;
/// one that then lets the time of 30 frames pass (timed by the test from a moment the switch's
/// budget already existed) may send 20 more. A switch that never refills cuts it; one with a
/// smaller burst cuts it sooner. The client's pace is its own: a slower machine lets more time
/// pass, which only adds to what it may send, so the verdict never rests on speed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_within_the_burst_and_then_the_rate_is_never_cut() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let mut conn = Conn::open(web(&switch)).await;
    // Free frames so far: the client's SETTINGS, its SETTINGS ACK (sent when the switch's
    // SETTINGS is read, before any PING ACK), this PING.
    assert!(conn.round_trip(*b"budget-1").await);
    // The switch's budget was made before it sent anything: before now.
    let budget_made_before = std::time::Instant::now();
    let switch_settings = conn
        .seen
        .iter()
        .filter(|f| f.kind == SETTINGS && !f.has(ACK))
        .count();
    assert_eq!(
        switch_settings, 1,
        "one SETTINGS from the switch, so one ACK"
    );
    let spent = 3;
    let rest = OVERHEAD_BURST - spent;
    let mut pings = Vec::new();
    for i in 0..rest as u32 {
        let mut payload = [0xb0; 8];
        payload[4..].copy_from_slice(&i.to_be_bytes());
        pings.extend(ping(payload));
    }
    conn.send(&pings).await;
    let mut answered = 0;
    for _ in 0..rest {
        let ack = conn.until(|f| f.kind == PING || f.kind == GOAWAY).await;
        match ack {
            Some(f) if f.kind == PING && f.payload[..4] == [0xb0; 4] => answered += 1,
            other => panic!("after {answered} of {rest} PINGs within the burst: {other:?}"),
        }
    }
    // The burst is spent. The time of 30 frames at the rate, then 20 frames.
    let interval = std::time::Duration::from_millis(1000 / OVERHEAD_PER_SECOND as u64);
    tokio::time::sleep_until((budget_made_before + 30 * interval).into()).await;
    let mut paced = Vec::new();
    for i in 0..19u32 {
        let mut payload = [0xc0; 8];
        payload[4..].copy_from_slice(&i.to_be_bytes());
        paced.extend(ping(payload));
    }
    conn.send(&paced).await;
    assert!(
        conn.round_trip(*b"budget-2").await,
        "the budget refilled: 20 frames after the time of 30"
    );
    let cut: Vec<&Frame> = conn.seen.iter().filter(|f| f.kind == GOAWAY).collect();
    assert!(cut.is_empty(), "{cut:?}");
    fetch(&mut conn, 1, 1000).await;
    drop(conn);
    assert_eq!(settled_requests(&switch, &backend).await, 1);
    counters_are(&switch, (0, 0)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_empty_data_and_priority_floods_are_calmed() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut frames = Vec::new();
    let post = Block::request("POST", "/sha256", "h2.test");
    let floods: [(&str, Vec<u8>, Vec<u8>); 3] = [
        (
            "SETTINGS",
            Vec::new(),
            settings(&[(SETTINGS_ENABLE_PUSH, 0)]),
        ),
        (
            "empty DATA",
            headers(1, post.bytes(), false),
            data(1, b"", false),
        ),
        ("PRIORITY", Vec::new(), priority(3, 0, 16)),
    ];
    for (what, opening, one) in floods {
        let mut conn = Conn::open(addr).await;
        let mut flood = opening;
        for _ in 0..20_000 {
            flood.extend_from_slice(&one);
        }
        conn.send(&flood).await;
        frames.extend(calmed(&mut conn, what).await);
        frames.extend(served_anew(addr).await);
    }
    // The empty-DATA flood's upload may have reached the backend; nothing else did.
    let total = settled_requests(&switch, &backend).await;
    assert!((3..=4).contains(&total), "{total} requests at the backend");
    counters_are(&switch, counted(&frames)).await;
}

/// PRIORITY_UPDATE (RFC 9218, type 0x10) for `stream`: urgency 3.
fn priority_update(stream: u32) -> Vec<u8> {
    let mut payload = stream.to_be_bytes().to_vec();
    payload.extend_from_slice(b"u=3");
    frame(0x10, 0, 0, &payload)
}

/// DATA on `stream` holding nothing but its Pad Length byte (no data, no padding).
fn padding_only(stream: u32) -> Vec<u8> {
    const PADDED: u8 = 0x8;
    frame(DATA, PADDED, stream, &[0])
}

/// Floods of frames a client sends for free, each: what opens the connection's flood (a
/// stream it needs), and the frame repeated.
fn free_floods() -> Vec<(&'static str, Vec<u8>, Vec<u8>)> {
    let post = Block::request("POST", "/sha256", "h2.test");
    vec![
        ("PING ACK", Vec::new(), frame(PING, ACK, 0, &[0xa5; 8])),
        (
            "WINDOW_UPDATE (connection)",
            Vec::new(),
            window_update(0, 1),
        ),
        (
            "WINDOW_UPDATE (stream)",
            headers(1, Block::get("/hold").bytes(), true),
            window_update(1, 1),
        ),
        ("PRIORITY_UPDATE", Vec::new(), priority_update(1)),
        (
            "unknown type 0xfa",
            Vec::new(),
            frame(0xfa, 0, 0, b"unknown!"),
        ),
        (
            "DATA of padding only",
            headers(1, post.bytes(), false),
            padding_only(1),
        ),
    ]
}

/// Frames in each flood of [`free_floods`].
const FLOOD: usize = 100_000;

/// Sends each of [`free_floods`] on a connection of its own to `addr`, and expects
/// `GOAWAY ENHANCE_YOUR_CALM` and the connection closed; an honest client on another
/// connection, opened before, is served meanwhile and after. Returns every frame the clients
/// got.
async fn floods_are_calmed(addr: SocketAddr) -> Vec<Frame> {
    let mut frames = Vec::new();
    let mut honest = Conn::open(addr).await;
    let mut stream = 1;
    for (what, opening, one) in free_floods() {
        let mut conn = Conn::open(addr).await;
        let mut flood = opening;
        for _ in 0..FLOOD {
            flood.extend_from_slice(&one);
        }
        let flooding = tokio::spawn(async move {
            conn.send(&flood).await;
            calmed(&mut conn, what).await
        });
        fetch(&mut honest, stream, 1000).await;
        let seen = flooding
            .await
            .unwrap_or_else(|e| panic!("{}", common::panic_text(e)));
        println!("{what}: calmed after {} frames from the switch", seen.len());
        frames.extend(seen);
        fetch(&mut honest, stream + 2, 1000).await;
        stream += 4;
    }
    drop(honest);
    frames
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_free_frames_are_calmed_while_others_are_served() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let frames = floods_are_calmed(web(&switch)).await;
    backend.release(100);
    // The honest client's two requests a flood; the floods' own streams (a held GET, an
    // upload never finished) may have reached the backend.
    let total = settled_requests(&switch, &backend).await;
    let honest = 2 * free_floods().len();
    assert!(
        (honest..=honest + 2).contains(&total),
        "{total} requests at the backend"
    );
    counters_are(&switch, counted(&frames)).await;
}

/// The same floods against the binary run as an operator runs it (`RUST_LOG=info`, as
/// `Process` sets it, one worker): the log gets no line from them. The h2 crate wrote one WARN
/// line for each unsolicited PING ACK, and nothing cut the connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn floods_of_free_frames_leave_the_log_quiet() {
    let backend = common::backend().await;
    let scratch = common::Scratch::new("h2_free_floods_log");
    let rules = scratch.file(
        "rules.toml",
        &format!(
            "[switch]\nworkers = 1\naccess_log = false\n\
             [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"p\"\n\
             [pool.p]\nservers = [{{ addr = \"{}\" }}]\n",
            backend.addr
        ),
    );
    let switch = common::Process::start(&["run".as_ref(), "-c".as_ref(), rules.as_os_str()]);
    let (addr, _) = switch.address_after("listening on ");
    floods_are_calmed(addr).await;
    backend.release(100);
    let (lines, status) = common::stop(switch).await;
    assert!(status.success(), "{status:?}");
    // The log is read to its end: the stop's own line is there.
    assert!(lines.iter().any(|l| l.contains("stopping: ")), "{lines:#?}");
    // What the stop itself says (SIGTERM): not the floods'.
    let flood_lines: Vec<&String> = lines.iter().filter(|l| !l.contains("stopping: ")).collect();
    println!(
        "{} floods of {FLOOD} frames: {} log lines",
        free_floods().len(),
        flood_lines.len()
    );
    assert!(
        flood_lines.is_empty(),
        "{} log lines from {} floods of {FLOOD} free frames, the first: {:#?}",
        flood_lines.len(),
        free_floods().len(),
        &flood_lines[..flood_lines.len().min(5)]
    );
}

/// Honest transfers larger than the budget: a download whose client answers every DATA frame
/// with two WINDOW_UPDATEs (stream and connection: 4096 for 32 MiB, four times the burst,
/// forty times what 10 s of the rate add), and an upload of 2048 DATA frames within the
/// windows the switch grants. Neither is cut: WINDOW_UPDATEs that answer DATA frames are
/// credited by the DATA sent, and frames that carry data are never charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_transfers_answering_every_frame_are_never_cut() {
    const SIZE: usize = 32 * 1024 * 1024;
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "").await;
    let addr = web(&switch);
    let mut conn = Conn::open(addr).await;
    fetch(&mut conn, 1, SIZE).await;
    let updates = conn.seen.iter().filter(|f| f.kind == DATA).count() * 2;
    assert!(
        updates >= 4 * OVERHEAD_BURST,
        "{updates} WINDOW_UPDATEs sent"
    );
    assert!(conn.seen.iter().all(|f| f.kind != GOAWAY), "no GOAWAY");
    drop(conn);
    let mut conn = Conn::open(addr).await;
    let body = pattern(SIZE, 42);
    let response = upload(&mut conn, 1, &body).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        String::from_utf8_lossy(&response.body),
        format!("{} {SIZE}\n", sha256_hex(&body))
    );
    assert!(conn.seen.iter().all(|f| f.kind != GOAWAY), "no GOAWAY");
    drop(conn);
    assert_eq!(settled_requests(&switch, &backend).await, 2);
    counters_are(&switch, (0, 0)).await;
}

/// POSTs `body` to `/sha256` on `stream` of `conn` in DATA frames of 16 KiB, each sent only
/// within the windows the switch has granted (RFC 9113 section 6.9), and returns the response.
/// The windows start from what `conn` has seen so far (all it got from the switch).
async fn upload(conn: &mut Conn, stream: u32, body: &[u8]) -> Response {
    const FRAME: usize = 16 * 1024;
    let increment = |f: &Frame| {
        let p = &f.payload;
        i64::from(u32::from_be_bytes([p[0], p[1], p[2], p[3]]) & 0x7fff_ffff)
    };
    if !conn.seen.iter().any(|f| f.kind == SETTINGS && !f.has(ACK)) {
        conn.until(|f| f.kind == SETTINGS && !f.has(ACK))
            .await
            .expect("the switch's SETTINGS");
    }
    // The stream's window: SETTINGS_INITIAL_WINDOW_SIZE, the last the switch said.
    let mut stream_window = 65_535;
    for f in conn
        .seen
        .iter()
        .filter(|f| f.kind == SETTINGS && !f.has(ACK))
    {
        for pair in f.payload.chunks_exact(6) {
            if u16::from_be_bytes([pair[0], pair[1]]) == SETTINGS_INITIAL_WINDOW_SIZE {
                stream_window = i64::from(u32::from_be_bytes([pair[2], pair[3], pair[4], pair[5]]));
            }
        }
    }
    let mut windows = (
        65_535
            + conn
                .seen
                .iter()
                .filter(|f| f.is(WINDOW_UPDATE, 0))
                .map(increment)
                .sum::<i64>(),
        stream_window,
    );
    let block = Block::request("POST", "/sha256", "h2.test")
        .field("content-length", body.len().to_string());
    conn.send(&headers(stream, block.bytes(), false)).await;
    let mut sent = 0;
    for _ in 0..1_000_000 {
        if sent == body.len() {
            return conn.response(stream).await;
        }
        let room = windows.0.min(windows.1).min(FRAME as i64);
        if room > 0 {
            let n = (room as usize).min(body.len() - sent);
            conn.send(&data(stream, &body[sent..sent + n], sent + n == body.len()))
                .await;
            sent += n;
            windows.0 -= n as i64;
            windows.1 -= n as i64;
            continue;
        }
        let f = conn
            .next()
            .await
            .expect("the connection stays open during the upload");
        assert_ne!(
            f.kind, GOAWAY,
            "an honest upload cut after {sent} bytes: {f:?}"
        );
        if f.is(WINDOW_UPDATE, 0) {
            windows.0 += increment(&f);
        } else if f.is(WINDOW_UPDATE, stream) {
            windows.1 += increment(&f);
        }
    }
    panic!("a million steps and the upload not sent");
}

// ---------------------------------------------------------------- 7. zero-window readers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_never_opens_its_window_holds_a_bounded_part_of_a_large_response() {
    const BIG: usize = 50 * 1024 * 1024;
    let backend = metered_backend::MeteredBackend::start().await;
    let switch = switch_before(backend.addr, "idle_timeout = \"1s\"").await;
    let addr = web(&switch);

    // One client with a stream window of 0, one that keeps the default 65535 and never sends
    // a WINDOW_UPDATE.
    let mut zero = Conn::open_with(addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]).await;
    zero.open_windows = false;
    zero.send(&headers(
        1,
        Block::get(&format!("/big/{BIG}?zero")).bytes(),
        true,
    ))
    .await;
    let mut stingy = Conn::open(addr).await;
    stingy.open_windows = false;
    stingy
        .send(&headers(
            1,
            Block::get(&format!("/big/{BIG}?stingy")).bytes(),
            true,
        ))
        .await;
    let zero_server = backend.connection_with("?zero").await;
    let stingy_server = backend.connection_with("?stingy").await;

    // Others are served meanwhile, a megabyte included.
    let mut other = Conn::open(addr).await;
    other
        .send(&headers(1, Block::get("/big/1048576").bytes(), true))
        .await;
    let response = other.response(1).await;
    assert_eq!(response.status, 200);
    assert_eq!(
        sha256_hex(&response.body),
        sha256_hex(&pattern(1 << 20, 1 << 20))
    );

    // The switch cuts both streams after idle_timeout, having sent no more than the windows.
    for (name, conn, window) in [("zero", &mut zero, 0), ("stingy", &mut stingy, 65_535)] {
        match conn.outcome(1).await {
            Outcome::Reset(..) | Outcome::GoAway(_) | Outcome::Closed => {}
            Outcome::Response(r) => panic!("{name}: a whole response of {}", r.body.len()),
        }
        let sent: usize = conn
            .seen
            .iter()
            .filter(|f| f.kind == DATA)
            .map(|f| f.payload.len())
            .sum();
        assert!(
            sent <= window,
            "{name}: {sent} bytes past a window of {window}"
        );
    }
    // Once the switch lets go of the server connections, what the backend managed to write
    // is final: the switch's part (at most MAX_SEND_BUFFER in the h2 crate, its 16 KiB
    // server buffer and one read of it) plus the kernel's socket buffers between them (the
    // backend's send buffer is set small, the switch's receive buffer grows only as fast as
    // the switch reads) — a few hundred KiB, far from the 50 MiB asked.
    backend.wait_for_ended(2).await;
    let bound = 8 * 1024 * 1024;
    for (name, server) in [("zero", &zero_server), ("stingy", &stingy_server)] {
        let written = server.written.load(Ordering::SeqCst) as usize;
        println!("{name}: the backend wrote {written} bytes of {BIG} (switch's part <= {MAX_SEND_BUFFER} + buffers)");
        assert!(
            written <= bound,
            "{name}: the backend wrote {written} bytes for a client that read none"
        );
    }
    // And after: the switch still serves.
    other
        .send(&headers(3, Block::get("/after").bytes(), true))
        .await;
    assert_eq!(other.response(3).await.body, b"path /after\n");
}

// ---------------------------------------------------------------- 8. /stats

/// `/stats` of the admin endpoint, as JSON.
async fn stats_json(admin: SocketAddr) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(admin).await.expect("admin");
    stream
        .write_all(
            format!("GET /stats HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .expect("request");
    let mut answer = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut answer))
        .await
        .expect("the admin endpoint answers within PATIENCE")
        .expect("read");
    let text = String::from_utf8(answer).expect("text");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 "), "{text}");
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_protocol_errors_and_goaways_exactly() {
    let backend = common::backend().await;
    let switch = switch_before(backend.addr, "keepalive_timeout = \"1s\"").await;
    let addr = web(&switch);

    // A stream error of the switch's own (a value with surrounding space), then a connection
    // error of the h2 crate (an uppercase name) on the same connection.
    let mut conn = Conn::open(addr).await;
    conn.send(&headers(
        1,
        Block::get("/bad/space").field("x-v", " v").bytes(),
        true,
    ))
    .await;
    let o = conn.outcome(1).await;
    assert!(matches!(o, Outcome::Reset(PROTOCOL_ERROR, None)), "{o:?}");
    conn.send(&headers(
        3,
        Block::get("/bad/upper").field("X-V", "v").bytes(),
        true,
    ))
    .await;
    assert!(matches!(
        conn.outcome(3).await,
        Outcome::GoAway(PROTOCOL_ERROR)
    ));
    conn.until_closed().await;
    // A stream reset by the h2 crate: its send window pushed past 2^31-1.
    let mut conn = Conn::open(addr).await;
    let mut frames = headers(1, Block::get("/hold").bytes(), true);
    frames.extend(window_update(1, 0x7fff_ffff));
    conn.send(&frames).await;
    let end = conn.outcome(1).await;
    assert!(
        matches!(end, Outcome::Reset(FLOW_CONTROL_ERROR, None)),
        "{end:?}"
    );
    drop(conn);
    // A flood: GOAWAY ENHANCE_YOUR_CALM.
    let mut conn = Conn::open(addr).await;
    conn.send(&ping([7; 8]).repeat(5000)).await;
    calmed(&mut conn, "PING flood").await;
    // A well-behaved client left idle: a graceful shutdown (NO_ERROR), no protocol error. It
    // takes two GOAWAYs (RFC 9113 section 6.8): one naming the largest stream id, then, after
    // a PING round trip, one naming the last stream processed.
    let mut conn = Conn::open(addr).await;
    fetch(&mut conn, 1, 10).await;
    let rest = conn.until_closed().await;
    let goaways: Vec<(Option<u32>, Option<u32>)> = rest
        .iter()
        .filter(|f| f.kind == GOAWAY)
        .map(|f| (f.error_code(), f.last_stream()))
        .collect();
    assert_eq!(
        goaways,
        [
            (Some(NO_ERROR), Some(0x7fff_ffff)),
            (Some(NO_ERROR), Some(1))
        ],
        "a graceful shutdown for the idle client"
    );

    // 4 protocol errors (RST, GOAWAY, RST, GOAWAY) and 4 GOAWAYs (2 of them graceful).
    counters_are(&switch, (4, 4)).await;
    let stats = stats_json(switch.admin_addr().expect("admin")).await;
    let web = &stats["services"][0];
    assert_eq!(web["name"], "web");
    assert_eq!(web["h2_protocol_errors"], 4, "{web}");
    assert_eq!(web["h2_goaways_sent"], 4, "{web}");
    assert_eq!(web["h2_connections"], 4, "{web}");
    backend.release(100);
}

// ---------------------------------------------------------------- the raw client itself

/// The raw client's HPACK decoder reads what the h2 crate encodes (Huffman strings, the
/// dynamic table across responses), and its Huffman codes are those of RFC 7541.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_client_decodes_what_the_h2_crate_encodes() {
    let codes = huffman_codes();
    // RFC 7541 C.4.1: "www.example.com".
    let www = [
        0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
    ];
    assert_eq!(huffman_decode(&codes, &www), b"www.example.com");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("address");
    let server = tokio::spawn(async move {
        let (socket, _) = listener.accept().await.expect("accept");
        let mut h2 = h2::server::handshake(socket).await.expect("handshake");
        for status in [431u16, 431, 200] {
            let (_, mut respond) = h2.accept().await.expect("a stream").expect("ok");
            let response = http::Response::builder()
                .status(status)
                .header("x-text", "Hello, wörld! ~{|}")
                .header("content-type", "text/plain")
                .body(())
                .expect("response");
            let mut send = respond.send_response(response, false).expect("send");
            send.send_data(bytes::Bytes::from_static(b"body"), true)
                .expect("data");
        }
        // Drive the connection until the client leaves.
        let _ = h2.accept().await;
    });
    let mut conn = Conn::open(addr).await;
    for (stream, status) in [(1, 431), (3, 431), (5, 200)] {
        conn.send(&headers(stream, Block::get("/").bytes(), true))
            .await;
        let r = conn.response(stream).await;
        assert_eq!(r.status, status);
        assert_eq!(r.field("x-text"), Some("Hello, wörld! ~{|}"));
        assert_eq!(r.field("content-type"), Some("text/plain"));
        assert_eq!(r.body, b"body");
    }
    drop(conn);
    server.await.expect("the h2 server");
}
