//! `check = "grpc"`: the standard gRPC health service (grpc.health.v1, as Kubernetes' gRPC
//! probes, Envoy and HAProxy speak it): `Health/Check` with the pool's `service`, over HTTP/2
//! (and TLS when the pool has it). Passed when the call ends with `grpc-status: 0` and the
//! answer says `SERVING`; any other status, a `NOT_SERVING` or `SERVICE_UNKNOWN` answer, or
//! no answer fails it.
//!
//! The two messages are written and read by hand: `HealthCheckRequest` is one string field and
//! `HealthCheckResponse` one enum field, a dozen bytes of protobuf, where a protobuf crate and
//! its code generation would be a build step for two fields.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderValue, CONTENT_TYPE, TE};
use std::future::Future;
use tokio::io::{AsyncRead, AsyncWrite};

/// `ServingStatus.SERVING`.
const SERVING: u64 = 1;
/// Answers longer than this are not health answers.
const MAX_ANSWER: usize = 4096;

/// One `Health/Check` call on `stream` for `service` (`authority` as `:authority`).
pub(super) async fn check(
    stream: impl AsyncRead + AsyncWrite + Unpin,
    scheme: &str,
    authority: &str,
    service: &str,
) -> Result<(), String> {
    on_h2(stream, |send| call(send, scheme, authority, service)).await
}

/// Runs `work` on an HTTP/2 connection over `stream`, the connection driven beside it in the
/// same future: when the check ends, or its timeout drops it, the connection and its socket go
/// with it. Never a task of its own: an attacker's review found that a server that stops
/// reading kept every abandoned check's connection task, and its socket, alive.
pub(super) async fn on_h2<T, F: Future<Output = Result<T, String>>>(
    stream: impl AsyncRead + AsyncWrite + Unpin,
    work: impl FnOnce(h2::client::SendRequest<Bytes>) -> F,
) -> Result<T, String> {
    let (send, connection) = h2::client::handshake(stream)
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    let work = std::pin::pin!(work(send));
    let connection = std::pin::pin!(connection);
    tokio::select! {
        biased;
        done = work => done,
        ended = connection => Err(match ended {
            Ok(()) => "the server closed the connection".to_string(),
            Err(e) => format!("HTTP/2: {e}"),
        }),
    }
}

async fn call(
    send: h2::client::SendRequest<Bytes>,
    scheme: &str,
    authority: &str,
    service: &str,
) -> Result<(), String> {
    let uri = format!("{scheme}://{authority}/grpc.health.v1.Health/Check");
    let mut request = http::Request::post(uri)
        .body(())
        .map_err(|e| format!("the check's request: {e}"))?;
    let fields = request.headers_mut();
    fields.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    fields.insert(TE, HeaderValue::from_static("trailers"));
    let mut send = send.ready().await.map_err(|e| format!("HTTP/2: {e}"))?;
    let (response, mut body) = send
        .send_request(request, false)
        .map_err(|e| format!("sending the check: {e}"))?;
    body.send_data(framed(&request_message(service)), true)
        .map_err(|e| format!("sending the check: {e}"))?;
    let response = response
        .await
        .map_err(|e| format!("reading the answer: {e}"))?;
    let (head, mut answer) = response.into_parts();
    if head.status != http::StatusCode::OK {
        return Err(format!("HTTP status {}", head.status.as_u16()));
    }
    // Trailers-Only: the status is in the head.
    if let Some(status) = head.headers.get("grpc-status") {
        return Err(format!(
            "grpc-status {}",
            String::from_utf8_lossy(status.as_bytes())
        ));
    }
    let mut message = BytesMut::new();
    while let Some(data) = answer.data().await {
        let data = data.map_err(|e| format!("reading the answer: {e}"))?;
        let _ = answer.flow_control().release_capacity(data.len());
        message.extend_from_slice(&data);
        if message.len() > MAX_ANSWER {
            return Err("answer too long for a health answer".into());
        }
    }
    let trailers = answer
        .trailers()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
        .unwrap_or_default();
    match trailers.get("grpc-status").map(|s| s.as_bytes()) {
        Some(b"0") => {}
        Some(other) => return Err(format!("grpc-status {}", String::from_utf8_lossy(other))),
        None => return Err("no grpc-status".into()),
    }
    match serving_status(message.freeze()) {
        Some(SERVING) => Ok(()),
        Some(status) => Err(format!("serving status {status} (not SERVING)")),
        None => Err("unreadable HealthCheckResponse".into()),
    }
}

/// `HealthCheckRequest { string service = 1; }`: the field left out when empty.
fn request_message(service: &str) -> Vec<u8> {
    let mut message = Vec::with_capacity(service.len() + 6);
    if !service.is_empty() {
        message.push(0x0a); // field 1, length-delimited
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    message
}

/// A gRPC message on the wire: not compressed, its length, itself.
fn framed(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint(bytes: &mut Bytes) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        if !bytes.has_remaining() {
            return None;
        }
        let b = bytes.get_u8();
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// The `status` field (1) of the one framed `HealthCheckResponse` in `answer`; 0 (UNKNOWN)
/// when the message leaves it out, as protobuf does for the default.
fn serving_status(mut answer: Bytes) -> Option<u64> {
    if answer.remaining() < 5 || answer.get_u8() != 0 {
        return None; // a compressed answer was never asked for
    }
    let len = answer.get_u32() as usize;
    if answer.remaining() < len {
        return None;
    }
    let mut message = answer.split_to(len);
    let mut status = 0;
    while message.has_remaining() {
        let key = varint(&mut message)?;
        match key & 7 {
            0 => {
                let value = varint(&mut message)?;
                if key >> 3 == 1 {
                    status = value;
                }
            }
            2 => {
                let len = usize::try_from(varint(&mut message)?).ok()?;
                if message.remaining() < len {
                    return None;
                }
                message.advance(len);
            }
            _ => return None,
        }
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_service_or_nothing() {
        assert_eq!(request_message(""), b"");
        assert_eq!(request_message("pkg.Svc"), b"\x0a\x07pkg.Svc");
        assert_eq!(&framed(b"\x0a\x01a")[..], b"\x00\x00\x00\x00\x03\x0a\x01a");
    }

    #[test]
    fn the_answer_s_status_is_read() {
        let serving = Bytes::from_static(b"\x00\x00\x00\x00\x02\x08\x01");
        assert_eq!(serving_status(serving), Some(SERVING));
        let not_serving = Bytes::from_static(b"\x00\x00\x00\x00\x02\x08\x02");
        assert_eq!(serving_status(not_serving), Some(2));
        // An empty message: the default, UNKNOWN.
        assert_eq!(
            serving_status(Bytes::from_static(b"\x00\x00\x00\x00\x00")),
            Some(0)
        );
        assert_eq!(
            serving_status(Bytes::from_static(b"\x01\x00\x00\x00\x00")),
            None
        );
        assert_eq!(
            serving_status(Bytes::from_static(b"\x00\x00\x00\x00\x05\x08")),
            None
        );
    }
}
