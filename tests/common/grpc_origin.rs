//! A gRPC origin for the tests of gRPC end to end (issue 44, third slice), on the h2 crate's
//! server side over TCP with prior knowledge (h2c), written independently of the switch's own
//! gRPC code (its health check's protobuf is by hand too, but not this one).
//!
//! It serves:
//! - `POST /grpc.health.v1.Health/Check`: reads the one length-prefixed `HealthCheckRequest`
//!   (`string service = 1`) and answers from a map the test sets ([`GrpcOrigin::set`]): a known
//!   service gets `HealthCheckResponse { status }` (`SERVING` = 1, `NOT_SERVING` = 2) and the
//!   trailers `grpc-status: 0`; an unknown one a Trailers-Only `grpc-status: 5` (NOT_FOUND), one
//!   HEADERS frame with END_STREAM. The server as a whole (`""`) starts SERVING.
//! - `POST /grpc.testing.Echo/Echo`: the request body back verbatim, then `grpc-status: 0`.
//! - anything else: Trailers-Only `grpc-status: 12` (UNIMPLEMENTED).
//!
//! Every call is recorded: its path, the service asked (Check), `te` and `content-type` as they
//! came, the body's length and SHA-256.

use super::{sha256_hex, PATIENCE};
use bytes::Bytes;
use h2::server::SendResponse;
use h2::{Reason, RecvStream, SendStream};
use http::{HeaderMap, HeaderValue, Request, Response};
use std::collections::HashMap;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// `ServingStatus` values of grpc.health.v1.
pub const SERVING: u64 = 1;
pub const NOT_SERVING: u64 = 2;

pub const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
pub const ECHO_PATH: &str = "/grpc.testing.Echo/Echo";

/// One call the origin read whole.
#[derive(Clone, Debug)]
pub struct Call {
    pub path: String,
    /// The `service` of a `HealthCheckRequest` (`Some("")` when the field was left out);
    /// `None` for other calls, or a request that was no `HealthCheckRequest`.
    pub service: Option<String>,
    pub te: Option<String>,
    pub content_type: Option<String>,
    pub body_len: usize,
    pub body_sha256: String,
    /// The trailers that ended the request, if any.
    pub trailers: Option<Vec<(String, String)>>,
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    statuses: HashMap<String, u64>,
    failures: Vec<String>,
}

struct Record {
    state: Mutex<State>,
    changed: watch::Sender<u64>,
}

impl Record {
    fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let out = f(&mut self.state.lock().unwrap());
        self.changed.send_modify(|n| *n += 1);
        out
    }
}

pub struct GrpcOrigin {
    pub addr: SocketAddr,
    record: Arc<Record>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl GrpcOrigin {
    /// A gRPC origin with prior knowledge (h2c) on 127.0.0.1; `""` is SERVING.
    pub async fn start() -> GrpcOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut state = State::default();
        state.statuses.insert(String::new(), SERVING);
        let record = Arc::new(Record {
            state: Mutex::new(state),
            changed: watch::channel(0).0,
        });
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (rec, tasks2) = (Arc::clone(&record), Arc::clone(&tasks));
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                spawn(
                    &rec,
                    &tasks2,
                    serve(tcp, Arc::clone(&rec), Arc::clone(&tasks2)),
                );
            }
        });
        GrpcOrigin {
            addr,
            record,
            tasks,
            task,
        }
    }

    /// Sets what Check answers for `service` (`""`: the server as a whole).
    pub fn set(&self, service: &str, status: u64) {
        self.record.update(|s| {
            s.statuses.insert(service.to_string(), status);
        });
    }

    /// Every call read whole so far, in order.
    pub fn calls(&self) -> Vec<Call> {
        self.record.state.lock().unwrap().calls.clone()
    }

    /// Waits until `reached` holds for the calls; panics after [`PATIENCE`] with `what`.
    pub async fn wait_for(&self, what: &str, reached: impl Fn(&[Call]) -> bool) {
        let mut changed = self.record.changed.subscribe();
        let done = tokio::time::timeout(PATIENCE, async {
            loop {
                if reached(&self.record.state.lock().unwrap().calls) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        if done.is_err() {
            panic!(
                "grpc origin {}: `{what}` not reached within {PATIENCE:?}: {:#?}",
                self.addr,
                self.calls()
            );
        }
    }

    /// Panics if a task of the origin panicked.
    pub fn check(&self) {
        let state = self.record.state.lock().unwrap();
        if !state.failures.is_empty() {
            panic!("grpc origin {} failed: {:?}", self.addr, state.failures);
        }
    }
}

impl Drop for GrpcOrigin {
    fn drop(&mut self) {
        self.task.abort();
        for t in self.tasks.lock().unwrap().iter() {
            t.abort();
        }
        if !std::thread::panicking() {
            self.check();
        }
    }
}

/// Spawns `work`, aborted when the origin is dropped; its panic fails the test.
fn spawn(
    record: &Arc<Record>,
    tasks: &Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    work: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let handle = tokio::spawn(work);
    tasks.lock().unwrap().push(handle.abort_handle());
    let record = Arc::clone(record);
    tokio::spawn(async move {
        if let Err(e) = handle.await {
            if e.is_panic() {
                let text = super::panic_text(e);
                record.update(|s| s.failures.push(text));
            }
        }
    });
}

async fn serve(
    tcp: TcpStream,
    record: Arc<Record>,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
) {
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(1 << 20)
        .initial_connection_window_size(4 << 20);
    let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
        return;
    };
    while let Some(Ok((request, respond))) = connection.accept().await {
        let record2 = Arc::clone(&record);
        spawn(&record, &tasks, async move {
            // An h2 error is the client's doing; a panic the test's failure.
            let _ = answer(request, respond, record2).await;
        });
    }
}

fn field(map: &HeaderMap, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

async fn answer(
    request: Request<RecvStream>,
    mut respond: SendResponse<Bytes>,
    record: Arc<Record>,
) -> Result<(), h2::Error> {
    let (parts, mut body) = request.into_parts();
    let path = parts.uri.path().to_string();
    let mut data = Vec::new();
    while let Some(piece) = body.data().await {
        let piece = piece?;
        data.extend_from_slice(&piece);
        let _ = body.flow_control().release_capacity(piece.len());
    }
    let trailers = body.trailers().await?.map(|t| {
        t.iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect()
    });
    let service = (path == CHECK_PATH)
        .then(|| health_request_service(&data))
        .flatten();
    let known = service
        .as_ref()
        .and_then(|s| record.state.lock().unwrap().statuses.get(s).copied());
    record.update(|s| {
        s.calls.push(Call {
            path: path.clone(),
            service: service.clone(),
            te: field(&parts.headers, "te"),
            content_type: field(&parts.headers, "content-type"),
            body_len: data.len(),
            body_sha256: sha256_hex(&data),
            trailers,
        })
    });
    match (path.as_str(), known) {
        (CHECK_PATH, Some(status)) => {
            let mut message = vec![0x08];
            put_varint(&mut message, status);
            send_unary(&mut respond, framed(&message), 0).await
        }
        (CHECK_PATH, None) => trailers_only(&mut respond, 5, "unknown service"),
        (ECHO_PATH, _) => send_unary(&mut respond, data, 0).await,
        _ => trailers_only(&mut respond, 12, "unknown method"),
    }
}

/// A gRPC response head: 200, `content-type: application/grpc`.
fn head() -> http::response::Builder {
    Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
}

/// The status alone, in one HEADERS frame that ends the stream.
fn trailers_only(
    respond: &mut SendResponse<Bytes>,
    status: u32,
    message: &str,
) -> Result<(), h2::Error> {
    let head = head()
        .header("grpc-status", status.to_string())
        .header("grpc-message", message.replace(' ', "%20"))
        .body(())
        .unwrap();
    respond.send_response(head, true).map(|_| ())
}

/// A head, `data` as the peer's windows allow, then the trailers `grpc-status: status`.
async fn send_unary(
    respond: &mut SendResponse<Bytes>,
    data: Vec<u8>,
    status: u32,
) -> Result<(), h2::Error> {
    let mut send: SendStream<Bytes> = respond.send_response(head().body(()).unwrap(), false)?;
    let mut left = Bytes::from(data);
    while !left.is_empty() {
        send.reserve_capacity(left.len().min(256 * 1024));
        let granted = match poll_fn(|cx| send.poll_capacity(cx)).await {
            Some(granted) => granted?,
            None => return Err(h2::Error::from(Reason::STREAM_CLOSED)),
        };
        if granted == 0 {
            continue;
        }
        let chunk = left.split_to(granted.min(left.len()));
        send.send_data(chunk, false)?;
    }
    let mut trailers = HeaderMap::new();
    trailers.insert(
        "grpc-status",
        HeaderValue::from_str(&status.to_string()).unwrap(),
    );
    send.send_trailers(trailers)
}

// ---------------------------------------------------------------- protobuf by hand

/// A gRPC message on the wire: not compressed, its length (big endian), itself.
pub fn framed(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The one framed message of `body`, if `body` is exactly one uncompressed message.
pub fn unframed(body: &[u8]) -> Option<&[u8]> {
    if body.len() < 5 || body[0] != 0 {
        return None;
    }
    let len = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
    (body.len() == 5 + len).then(|| &body[5..])
}

pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*at)?;
        *at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// `HealthCheckRequest { string service = 1; }` framed, for the tests' own calls.
pub fn health_request(service: &str) -> Vec<u8> {
    let mut message = Vec::new();
    if !service.is_empty() {
        message.push(0x0a);
        put_varint(&mut message, service.len() as u64);
        message.extend_from_slice(service.as_bytes());
    }
    framed(&message)
}

/// The `service` of the framed `HealthCheckRequest` `body` (`""` when left out); `None` if
/// `body` is not one.
pub fn health_request_service(body: &[u8]) -> Option<String> {
    let message = unframed(body)?;
    let mut at = 0;
    let mut service = String::new();
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match key & 7 {
            0 => {
                varint(message, &mut at)?;
            }
            2 => {
                let len = usize::try_from(varint(message, &mut at)?).ok()?;
                let value = message.get(at..at.checked_add(len)?)?;
                at += len;
                if key >> 3 == 1 {
                    service = String::from_utf8(value.to_vec()).ok()?;
                }
            }
            _ => return None,
        }
    }
    Some(service)
}

/// The `status` (field 1) of the framed `HealthCheckResponse` `body`; 0 when left out.
pub fn health_response_status(body: &[u8]) -> Option<u64> {
    let message = unframed(body)?;
    let mut at = 0;
    let mut status = 0;
    while at < message.len() {
        let key = varint(message, &mut at)?;
        match key & 7 {
            0 => {
                let value = varint(message, &mut at)?;
                if key >> 3 == 1 {
                    status = value;
                }
            }
            _ => return None,
        }
    }
    Some(status)
}
