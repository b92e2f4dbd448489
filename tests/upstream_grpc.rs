//! gRPC end to end (issue 44, third slice; design.md "Servers over TLS and HTTP/2; gRPC end to
//! end"): a gRPC call (`content-type: application/grpc*` from an HTTP/2 client) to a pool with
//! `protocol = "h2"` passes whole: `te: trailers`, the framed messages byte-exact (4 MiB each
//! way), request and response trailers, a server's Trailers-Only answer. The switch's own
//! answers to a call are Trailers-Only (one HEADERS frame with END_STREAM: `200`,
//! `content-type: application/grpc`, `grpc-status`, `grpc-message`): 14 when no server can be
//! had, 8 for a rate limit, 4 for a timeout; a call routed to an HTTP/1.1 pool is refused so and
//! never reaches its server. `check = "grpc"` asks grpc.health.v1 `Health/Check`, with the
//! pool's `service`, and follows SERVING / NOT_SERVING; on an HTTP/1.1 pool it is a rule-file
//! error at its value.
//!
//! The servers are `common::h2_origin::H2Origin` (records fields, bodies and trailers) and
//! `common::grpc_origin::GrpcOrigin` (health and echo), which is first tested alone with the
//! HTTP/2 client of `common/h2.rs`. Waits are on events or polled state with generous bounds
//! (`PATIENCE`), never on a duration deciding a verdict.

mod common;
#[path = "common/h2.rs"]
mod h2c;

use common::grpc_origin::{
    framed, health_request, health_response_status, GrpcOrigin, CHECK_PATH, ECHO_PATH, NOT_SERVING,
    SERVING,
};
use common::h2_origin::{H2Options, H2Origin};
use common::*;
use h2c::{request, Reply, Upload, H2};
use http::{HeaderMap, HeaderValue};
use std::net::SocketAddr;
use tcpvs::state::status::State;

/// The `:authority` of every call.
const HOST: &str = "grpc.example";

/// The fields of a gRPC call.
const GRPC: [(&str, &str); 2] = [("content-type", "application/grpc"), ("te", "trailers")];

/// END_STREAM in a HEADERS frame's flags.
const END_STREAM: u8 = 0x1;

/// A rule file: `[switch]` with `switch_keys`, an admin endpoint, service `web` sending
/// everything to pool `api` of `servers` with `pool_keys`, then `more`.
fn rules(switch_keys: &str, servers: &[SocketAddr], pool_keys: &str, more: &str) -> String {
    let servers: Vec<String> = servers
        .iter()
        .map(|a| format!("{{ addr = \"{a}\" }}"))
        .collect();
    format!(
        "[switch]\naccess_log = false\n{switch_keys}\n\n[admin]\nlisten = \"127.0.0.1:0\"\n\n\
         [virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
         [pool.api]\nservers = [{}]\n{pool_keys}\n\n{more}\n",
        servers.join(", ")
    )
}

const PROTOCOL_H2: &str = "protocol = \"h2\"";

/// A call of `path` with `message` (already framed) on `h2`.
async fn call(h2: &H2, path: &str, message: &[u8]) -> Reply {
    h2.exchange(
        request("POST", HOST, path, &GRPC),
        Upload::Body {
            data: message,
            piece: 16 * 1024,
        },
    )
    .await
    .unwrap_or_else(|e| panic!("POST {path}: {e}"))
}

/// (kind, flags) of the frames the switch sent on `stream` so far.
fn frames_of(h2: &H2, stream: u32) -> Vec<(u8, u8)> {
    h2.frames()
        .iter()
        .filter(|f| f.stream == stream)
        .map(|f| (f.kind, f.flags))
        .collect()
}

/// The trailers of a reply, names lower case, sorted.
fn sorted(map: &Option<HeaderMap>) -> Vec<(String, String)> {
    let mut fields: Vec<(String, String)> = map
        .iter()
        .flat_map(|m| m.iter())
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap().to_string()))
        .collect();
    fields.sort();
    fields
}

fn digest_of(body: &[u8]) -> String {
    format!("{} {}\n", sha256_hex(body), body.len())
}

/// A call as a gRPC client makes it: HEADERS, then the whole `message` with END_STREAM at once
/// (queued whatever the windows: the h2 crate sends it as they allow), then the answer read
/// whole. The switch may answer before it has read the message and then reset the stream with
/// NO_ERROR (RFC 9113 section 8.1), which the queued message does not survive: that is not an
/// error of the call. Returns the reply and the stream's id.
async fn grpc_call(h2: &H2, path: &str, fields: &[(&str, &str)], message: &[u8]) -> (Reply, u32) {
    let mut send = h2.send.clone().ready().await.expect("a stream");
    let (response, mut body) = send
        .send_request(request("POST", HOST, path, fields), false)
        .expect("the request goes");
    let id = response.stream_id().as_u32();
    let _ = body.send_data(bytes::Bytes::copy_from_slice(message), true);
    let read = async {
        let (parts, mut answer) = response.await?.into_parts();
        let ended_with_headers = answer.is_end_stream();
        let mut data = Vec::new();
        while let Some(piece) = answer.data().await {
            let piece = piece?;
            data.extend_from_slice(&piece);
            let _ = answer.flow_control().release_capacity(piece.len());
        }
        let trailers = answer.trailers().await?;
        Ok::<Reply, h2::Error>(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body: data,
            trailers,
            informational: Vec::new(),
            ended_with_headers,
        })
    };
    let reply = tokio::time::timeout(PATIENCE, read)
        .await
        .unwrap_or_else(|_| panic!("POST {path}: no answer within {PATIENCE:?}"))
        .unwrap_or_else(|e| {
            panic!(
                "POST {path}: {e}; frames on stream {id}: {:?}",
                h2.frames()
                    .iter()
                    .filter(|f| f.stream == id)
                    .collect::<Vec<_>>()
            )
        });
    (reply, id)
}

/// `r`, the answer on `stream` of `h2`, is a Trailers-Only answer of `grpc_status`: 200,
/// `content-type: application/grpc`, a non-empty `grpc-message`, no body, no trailers, and on
/// the wire one HEADERS frame with END_STREAM (then at most an RST_STREAM NO_ERROR, the
/// switch's word that it needs no more of the request).
fn assert_trailers_only(h2: &H2, stream: u32, r: &Reply, grpc_status: &str, what: &str) {
    let frames: Vec<h2c::Frame> = h2
        .frames()
        .into_iter()
        .filter(|f| f.stream == stream)
        .collect();
    let seen = format!(
        "{what}: status {}, fields {:?}, body {:?}, trailers {:?}, frames {frames:?}",
        r.status,
        r.headers,
        r.text(),
        r.trailers,
    );
    assert_eq!(r.status, 200, "{seen}");
    assert_eq!(r.header("content-type"), Some("application/grpc"), "{seen}");
    assert_eq!(r.header("grpc-status"), Some(grpc_status), "{seen}");
    assert!(
        r.header("grpc-message").is_some_and(|m| !m.is_empty()),
        "{seen}"
    );
    assert!(r.body.is_empty() && r.trailers.is_none(), "{seen}");
    assert!(r.ended_with_headers, "{seen}");
    let answer: Vec<(u8, u8)> = frames
        .iter()
        .filter(|f| f.kind != h2c::RST_STREAM)
        .map(|f| (f.kind, f.flags & END_STREAM))
        .collect();
    assert_eq!(answer, [(h2c::HEADERS, END_STREAM)], "{seen}");
    for f in frames.iter().filter(|f| f.kind == h2c::RST_STREAM) {
        assert_eq!(f.error_code(), Some(h2c::NO_ERROR), "{seen}");
    }
}

// ---------------------------------------------------------------- the gRPC origin alone

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_origin_alone_answers_health_checks_and_echoes() {
    let origin = GrpcOrigin::start().await;
    origin.set("pkg.Svc", NOT_SERVING);
    let h2 = H2::plain(origin.addr).await;

    // "" (the field left out): SERVING, then trailers grpc-status 0.
    let r = call(&h2, CHECK_PATH, &health_request("")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("application/grpc"));
    assert_eq!(r.body, b"\x00\x00\x00\x00\x02\x08\x01");
    assert_eq!(health_response_status(&r.body), Some(SERVING));
    assert_eq!(sorted(&r.trailers), [("grpc-status".into(), "0".into())]);

    let r = call(&h2, CHECK_PATH, &health_request("pkg.Svc")).await;
    assert_eq!(health_response_status(&r.body), Some(NOT_SERVING));
    assert_eq!(sorted(&r.trailers), [("grpc-status".into(), "0".into())]);

    // Unknown: Trailers-Only NOT_FOUND, one HEADERS frame with END_STREAM (stream 5).
    let r = call(&h2, CHECK_PATH, &health_request("pkg.Missing")).await;
    assert_eq!(r.header("grpc-status"), Some("5"));
    assert!(r.ended_with_headers && r.body.is_empty() && r.trailers.is_none());
    assert_eq!(frames_of(&h2, 5), [(h2c::HEADERS, 0x5)]);

    // The status can change.
    origin.set("", NOT_SERVING);
    let r = call(&h2, CHECK_PATH, &health_request("")).await;
    assert_eq!(health_response_status(&r.body), Some(NOT_SERVING));

    let message = framed(&pattern(300_000, 5));
    let r = call(&h2, ECHO_PATH, &message).await;
    assert!(r.body == message, "echo");
    assert_eq!(sorted(&r.trailers), [("grpc-status".into(), "0".into())]);

    let calls = origin.calls();
    let services: Vec<Option<&str>> = calls.iter().map(|c| c.service.as_deref()).collect();
    assert_eq!(
        services,
        [
            Some(""),
            Some("pkg.Svc"),
            Some("pkg.Missing"),
            Some(""),
            None
        ]
    );
    for c in &calls {
        assert_eq!(c.te.as_deref(), Some("trailers"), "{c:?}");
        assert_eq!(c.content_type.as_deref(), Some("application/grpc"), "{c:?}");
    }
    assert_eq!(calls[4].path, ECHO_PATH);
    assert_eq!(calls[4].body_sha256, sha256_hex(&message));
    assert_eq!(calls[1].body_len, health_request("pkg.Svc").len());
}

// ---------------------------------------------------------------- end to end

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_passes_end_to_end_with_te_trailers_and_trailers_both_ways() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = start_switch(&rules("", &[origin.addr], PROTOCOL_H2, ""), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;

    let message = framed(&pattern(70_001, 3));
    let mut trailers = HeaderMap::new();
    trailers.insert("x-client-trailer", HeaderValue::from_static("sent"));
    let fields = [
        ("content-type", "application/grpc+proto"),
        ("te", "trailers"),
        ("grpc-timeout", "5S"),
    ];
    // Stream 1: a body and trailers up, a body and trailers down.
    let r = h2
        .exchange(
            request("POST", HOST, "/trailers", &fields),
            Upload::WithTrailers {
                data: &message,
                trailers,
            },
        )
        .await
        .unwrap();
    assert_eq!((r.status, r.text()), (200, digest_of(&message)));
    assert_eq!(
        sorted(&r.trailers),
        [
            ("grpc-status".into(), "0".into()),
            ("x-t".into(), "1".into())
        ]
    );
    let requests = origin.requests();
    assert_eq!(requests.len(), 1);
    let seen = &requests[0];
    assert_eq!(seen.header("te"), Some("trailers"), "{seen:#?}");
    assert_eq!(
        seen.header("content-type"),
        Some("application/grpc+proto"),
        "{seen:#?}"
    );
    assert_eq!(seen.header("grpc-timeout"), Some("5S"), "{seen:#?}");
    assert_eq!(
        (seen.body_len, seen.body_sha256.as_str()),
        (message.len(), sha256_hex(&message).as_str()),
        "byte-exact"
    );
    assert_eq!(seen.trailer("x-client-trailer"), Some("sent"), "{seen:#?}");
    assert_eq!(seen.path, "/trailers");
    assert_eq!(seen.method, "POST");

    // Stream 3: `/trailers-only` (the origin sends a head, then the trailers, no DATA).
    let r = call(&h2, "/trailers-only", &framed(b"")).await;
    let frames = frames_of(&h2, 3);
    assert_eq!(r.status, 200, "frames {frames:?}");
    assert!(r.body.is_empty(), "{r:?}");
    assert!(
        !frames.iter().any(|f| f.0 == h2c::DATA),
        "no DATA frame: {frames:?}"
    );
    let status = r
        .header("grpc-status")
        .or_else(|| r.trailers.as_ref()?.get("grpc-status")?.to_str().ok());
    assert_eq!(status, Some("0"), "{r:?}, frames {frames:?}");
    let last = frames.last().expect("a frame");
    assert_eq!(
        (last.0, last.1 & END_STREAM),
        (h2c::HEADERS, END_STREAM),
        "{frames:?}"
    );
    origin.wait_for_requests(2).await;
    let seen = &origin.requests()[1];
    assert_eq!(seen.header("te"), Some("trailers"), "{seen:#?}");
}

/// A server's Trailers-Only answer (one HEADERS frame with END_STREAM carrying `grpc-status`)
/// must reach the client so: a gRPC client reads a HEADERS frame without END_STREAM as the
/// response head, and a stream that then ends without trailers as a broken call (INTERNAL).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_trailers_only_answer_passes_as_one_headers_frame() {
    let origin = GrpcOrigin::start().await;
    let switch = start_switch(&rules("", &[origin.addr], PROTOCOL_H2, ""), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    // Stream 1: NOT_FOUND, said by the server in one HEADERS frame with END_STREAM.
    let r = call(&h2, CHECK_PATH, &health_request("pkg.Missing")).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("grpc-status"), Some("5"), "{r:?}");
    assert_eq!(r.header("grpc-message"), Some("unknown%20service"), "{r:?}");
    // The server's fields alone: no length the server did not say (one a head written as
    // HTTP/1.1 text on the way used to gain).
    assert_eq!(r.header("content-length"), None, "{r:?}");
    let frames = frames_of(&h2, 1);
    assert!(
        r.ended_with_headers && r.body.is_empty() && r.trailers.is_none(),
        "{r:?}, frames {frames:?}"
    );
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(
        (frames[0].0, frames[0].1 & END_STREAM),
        (h2c::HEADERS, END_STREAM),
        "{frames:?}"
    );
    // Stream 3: a known service, its message and trailers.
    let r = call(&h2, CHECK_PATH, &health_request("")).await;
    assert_eq!(health_response_status(&r.body), Some(SERVING), "{r:?}");
    assert_eq!(sorted(&r.trailers), [("grpc-status".into(), "0".into())]);
    let calls = origin.calls();
    assert_eq!(calls.len(), 2);
    for c in &calls {
        assert_eq!(c.te.as_deref(), Some("trailers"), "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_mib_messages_pass_each_way_byte_exact() {
    let origin = GrpcOrigin::start().await;
    let switch = start_switch(&rules("", &[origin.addr], PROTOCOL_H2, ""), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    for seed in [1, 2] {
        let message = framed(&pattern(4 << 20, seed));
        let r = call(&h2, ECHO_PATH, &message).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), message.len(), "echoed length");
        assert!(r.body == message, "echoed bytes differ");
        assert_eq!(sorted(&r.trailers), [("grpc-status".into(), "0".into())]);
    }
    let calls = origin.calls();
    assert_eq!(calls.len(), 2);
    for (c, seed) in calls.iter().zip([1, 2]) {
        let message = framed(&pattern(4 << 20, seed));
        assert_eq!(
            (c.body_len, c.body_sha256.as_str()),
            (message.len(), sha256_hex(&message).as_str())
        );
    }
}

// ---------------------------------------------------------------- the switch's own answers

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_is_unavailable_14_trailers_only() {
    let dead = dead_address().await;
    let switch = start_switch(&rules("", &[dead], PROTOCOL_H2, ""), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    let (r, id) = grpc_call(&h2, "/pkg.Svc/Method", &GRPC, &framed(b"\x0a\x01a")).await;
    assert_trailers_only(&h2, id, &r, "14", "a dead server");
    // Again, now that the server may be down: still 14 (503 rather than 502).
    let (r, id) = grpc_call(&h2, "/pkg.Svc/Method", &GRPC, &framed(b"")).await;
    assert_trailers_only(&h2, id, &r, "14", "a dead server, again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_refusal_is_resource_exhausted_8_trailers_only() {
    let origin = H2Origin::start(H2Options::default()).await;
    let limit = "[[virtual.web.rule]]\npath = \"^/\"\npool = \"api\"\nlimit = \"calls\"\n\n\
                 [limit.calls]\nkey = \"source\"\nrate = \"1/m\"\nburst = 1\n";
    let switch = start_switch(&rules("", &[origin.addr], PROTOCOL_H2, limit), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    let message = framed(b"\x0a\x01a");
    let r = call(&h2, "/trailers", &message).await;
    assert_eq!((r.status, r.text()), (200, digest_of(&message)));
    let (r, id) = grpc_call(&h2, "/trailers", &GRPC, &message).await;
    assert_trailers_only(&h2, id, &r, "8", "the second call within the burst of 1");
    assert_eq!(
        origin.requests().len(),
        1,
        "a refused call reaches no server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_is_deadline_exceeded_4_trailers_only() {
    let origin = H2Origin::start(H2Options::default()).await;
    let switch = start_switch(
        &rules("idle_timeout = \"1s\"", &[origin.addr], PROTOCOL_H2, ""),
        &[],
    )
    .await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    // `/hold` answers only when the test releases it: never, here.
    let (r, id) = grpc_call(&h2, "/hold", &GRPC, &framed(b"\x0a\x01a")).await;
    assert_trailers_only(&h2, id, &r, "4", "a server silent past idle_timeout");
    let requests = origin.requests();
    assert_eq!(requests.len(), 1, "the call reached the server");
    assert_eq!(requests[0].header("te"), Some("trailers"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_to_an_http11_pool_is_refused_unavailable_and_never_sent() {
    let backend = backend().await;
    let switch = start_switch(&rules("", &[backend.addr], "", ""), &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    let (r, id) = grpc_call(&h2, "/pkg.Svc/Method", &GRPC, &framed(b"\x0a\x01a")).await;
    assert_trailers_only(&h2, id, &r, "14", "a gRPC call to an HTTP/1.1 pool");
    // `application/grpc+proto` and parameters are gRPC too.
    let fields = [
        ("content-type", "application/grpc+proto; charset=utf-8"),
        ("te", "trailers"),
    ];
    let (r, id) = grpc_call(&h2, "/pkg.Svc/Method", &fields, &framed(b"")).await;
    assert_trailers_only(&h2, id, &r, "14", "application/grpc+proto; charset=utf-8");
    assert_eq!(backend.requests(), 0, "the HTTP/1.1 server saw a request");
    // A request that is not gRPC, to the same pool, is served.
    let r = h2.get(HOST, "/bytes/1000").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.body == pattern(1000, 1000), "GET /bytes/1000");
    assert_eq!(r.served_by(), backend.addr.to_string());
    assert_eq!(backend.requests(), 1);
    // `application/grpc-web` is not gRPC: it goes to the server as any request.
    let r = h2
        .exchange(
            request(
                "POST",
                HOST,
                "/sha256",
                &[("content-type", "application/grpc-web")],
            ),
            Upload::Body {
                data: b"abc",
                piece: 16 * 1024,
            },
        )
        .await
        .unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(backend.requests(), 2);
}

// ---------------------------------------------------------------- health

/// A switch whose pool `api` is `origin` alone over h2c, checked with `check = "grpc"` and
/// `service_key` every 100 ms.
async fn grpc_checked(origin: &GrpcOrigin, service_key: &str) -> tcpvs::Switch {
    let health = format!(
        "[pool.api.health]\ncheck = \"grpc\"\n{service_key}\ninterval = \"100ms\"\n\
         timeout = \"3s\"\npanic_threshold = 0\n"
    );
    start_switch(&rules("", &[origin.addr], PROTOCOL_H2, &health), &[]).await
}

/// Waits until the server `addr` is in `state` with its last check `passed`; the detail of that
/// check.
async fn wait_for_state(
    switch: &tcpvs::Switch,
    addr: SocketAddr,
    state: State,
    passed: bool,
) -> String {
    let snap = wait_until(
        switch,
        &format!("server {state:?}, last check passed: {passed}"),
        |s| {
            s.server(addr).is_some_and(|s| {
                s.state == state && matches!(&s.check.last, Some((p, _, _)) if *p == passed)
            })
        },
    )
    .await;
    let server = snap.server(addr).unwrap();
    assert_eq!(server.check.kind, "grpc");
    server.check.last.as_ref().unwrap().1.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_checks_follow_serving_and_not_serving() {
    let origin = GrpcOrigin::start().await;
    let switch = grpc_checked(&origin, "").await;
    wait_for_state(&switch, origin.addr, State::Up, true).await;

    origin.set("", NOT_SERVING);
    let detail = wait_for_state(&switch, origin.addr, State::Down, false).await;
    assert!(!detail.is_empty(), "a failed check says why");
    // Down: a call gets the switch's UNAVAILABLE.
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    let (r, id) = grpc_call(&h2, ECHO_PATH, &GRPC, &framed(b"x")).await;
    assert_trailers_only(&h2, id, &r, "14", "the only server down");

    origin.set("", SERVING);
    wait_for_state(&switch, origin.addr, State::Up, true).await;
    let r = call(&h2, ECHO_PATH, &framed(b"x")).await;
    assert_eq!((r.status, r.body.clone()), (200, framed(b"x")));

    let calls = origin.calls();
    let checks: Vec<_> = calls.iter().filter(|c| c.path == CHECK_PATH).collect();
    assert!(checks.len() >= 3, "{calls:#?}");
    for c in checks {
        assert_eq!(c.service.as_deref(), Some(""), "{c:?}");
        assert_eq!(c.te.as_deref(), Some("trailers"), "{c:?}");
        assert_eq!(c.content_type.as_deref(), Some("application/grpc"), "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_checks_ask_for_the_pools_service() {
    let origin = GrpcOrigin::start().await;
    origin.set("", NOT_SERVING);
    origin.set("pkg.Svc", SERVING);
    let switch = grpc_checked(&origin, "service = \"pkg.Svc\"").await;
    wait_for_state(&switch, origin.addr, State::Up, true).await;
    let calls = origin.calls();
    assert!(!calls.is_empty());
    for c in &calls {
        assert_eq!(c.path, CHECK_PATH, "{c:?}");
        assert_eq!(c.service.as_deref(), Some("pkg.Svc"), "{c:?}");
    }
    origin.set("pkg.Svc", NOT_SERVING);
    wait_for_state(&switch, origin.addr, State::Down, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_check_of_an_unknown_service_fails() {
    let origin = GrpcOrigin::start().await;
    let switch = grpc_checked(&origin, "service = \"pkg.Missing\"").await;
    let detail = wait_for_state(&switch, origin.addr, State::Down, false).await;
    assert!(
        detail.contains('5'),
        "the detail names grpc-status 5: {detail}"
    );
    origin
        .wait_for("a check of pkg.Missing", |calls| {
            calls
                .iter()
                .any(|c| c.service.as_deref() == Some("pkg.Missing"))
        })
        .await;
}

// ---------------------------------------------------------------- the rule file

#[test]
fn check_grpc_on_an_http11_pool_is_an_error_at_its_value() {
    let scratch = Scratch::new("upstream-grpc-check");
    let file_for = |pool_keys: &str| {
        format!(
            "[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"api\"\n\n\
             [pool.api]\nservers = [{{ addr = \"127.0.0.1:8443\" }}]\n{pool_keys}\n\n\
             [pool.api.health]\ncheck = \"grpc\"\nservice = \"pkg.Svc\"\n"
        )
    };
    let check = |text: &str| {
        let path = scratch.file("rules.toml", text);
        let checked = tcpvs::Config::check_file(&path).unwrap();
        let errors: Vec<String> = match checked.config {
            Ok(_) => Vec::new(),
            Err(errors) => errors.0.iter().map(|e| e.to_string()).collect(),
        };
        (path.display().to_string(), errors)
    };
    for pool_keys in ["", "protocol = \"http/1.1\""] {
        let text = file_for(pool_keys);
        let (file, errors) = check(&text);
        assert_eq!(errors.len(), 1, "{text}\n=> {errors:#?}");
        let (line, col) = position_of(&text, "\"grpc\"");
        let at = format!("{file}:{line}:{col}: ");
        assert!(
            errors[0].starts_with(&at),
            "expected {at}..., got {}",
            errors[0]
        );
        assert!(
            errors[0].to_ascii_lowercase().contains("h2")
                || errors[0].to_ascii_lowercase().contains("http/2"),
            "{}",
            errors[0]
        );
    }
    let text = file_for(PROTOCOL_H2);
    assert_eq!(check(&text).1, Vec::<String>::new(), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_access_log_says_each_calls_grpc_status() {
    let scratch = Scratch::new("grpc-access-log");
    let log = scratch.0.join("access.log");
    let origin = H2Origin::start(H2Options::default()).await;
    let dead = dead_address().await;
    let more = format!(
        "[[virtual.web.rule]]\npath = \"^/dead\"\npool = \"gone\"\n\n\
         [pool.gone]\nservers = [{{ addr = \"{dead}\" }}]\nprotocol = \"h2\"\n"
    );
    let text = rules("", &[origin.addr], PROTOCOL_H2, &more).replace(
        "access_log = false",
        &format!("access_log = {:?}", log.to_str().unwrap()),
    );
    let switch = start_switch(&text, &[]).await;
    let h2 = H2::plain(switch.local_addr("web").unwrap()).await;
    // The server's status in its trailers (`/trailers` ends with grpc-status 0).
    let message = framed(b"\x0a\x01a");
    assert_eq!(call(&h2, "/trailers", &message).await.status, 200);
    // The switch's own answer: no server (14).
    let (r, _) = grpc_call(&h2, "/dead/call", &GRPC, &framed(b"")).await;
    assert_eq!(r.status, 200);
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let lines = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.len() >= 2 || tokio::time::Instant::now() >= deadline {
            break lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let line_of = |target: &str| {
        lines
            .iter()
            .find(|l| l.contains(target))
            .unwrap_or_else(|| panic!("no line for {target} in {lines:#?}"))
            .clone()
    };
    assert!(
        line_of("\"POST /trailers HTTP/2.0\"").ends_with(" grpc=0"),
        "{lines:#?}"
    );
    assert!(
        line_of("\"POST /dead/call HTTP/2.0\"").ends_with(" grpc=14"),
        "{lines:#?}"
    );
}

/// A bidirectional streaming call: each message the client sends comes back before it sends
/// the next, through the switch both ways at once (full duplex, flow control on both sides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidirectional_stream_answers_each_message_before_the_next_is_sent() {
    use bytes::Bytes;
    // An h2c server that echoes each DATA chunk of a stream as it comes.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut connection) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    tokio::spawn(async move {
                        let mut body = request.into_body();
                        let head = http::Response::builder()
                            .header("content-type", "application/grpc")
                            .body(())
                            .unwrap();
                        let mut send = respond.send_response(head, false).unwrap();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            send.send_data(chunk, false).unwrap();
                        }
                        let mut trailers = HeaderMap::new();
                        trailers.insert("grpc-status", HeaderValue::from_static("0"));
                        send.send_trailers(trailers).unwrap();
                    });
                }
            });
        }
    });
    let switch = start_switch(&rules("", &[origin], PROTOCOL_H2, ""), &[]).await;
    let tcp = tokio::net::TcpStream::connect(switch.local_addr("web").unwrap())
        .await
        .unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let (response, mut send) = client
        .send_request(request("POST", HOST, "/pkg.Chat/Talk", &GRPC), false)
        .unwrap();
    let mut reply: Option<h2::RecvStream> = None;
    let mut response = Some(response);
    for i in 0..5u8 {
        let message = framed(&[b'm', i]);
        send.send_data(Bytes::from(message.clone()), false).unwrap();
        if let Some(response) = response.take() {
            let head = tokio::time::timeout(PATIENCE, response)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(head.status(), 200);
            reply = Some(head.into_body());
        }
        let body = reply.as_mut().unwrap();
        let mut echoed = Vec::new();
        while echoed.len() < message.len() {
            let chunk = tokio::time::timeout(PATIENCE, body.data())
                .await
                .unwrap_or_else(|_| panic!("message {i} not echoed before the next was sent"))
                .unwrap()
                .unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
            echoed.extend_from_slice(&chunk);
        }
        assert_eq!(echoed, message, "message {i}");
    }
    send.send_data(Bytes::new(), true).unwrap();
    let body = reply.as_mut().unwrap();
    assert!(tokio::time::timeout(PATIENCE, body.data())
        .await
        .unwrap()
        .is_none());
    let trailers = body.trailers().await.unwrap().unwrap();
    assert_eq!(trailers["grpc-status"], "0");
}
