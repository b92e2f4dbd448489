//! Active checks: `tcp` (a connection opens) and `http` (`GET path` answered with a status in
//! `expect`), each bounded by `timeout`, one at a time per server. To the servers of a pool
//! with `[pool.NAME.tls]`, a check is made over TLS as requests are: a connection opens only
//! once its handshake is done, so a certificate that does not verify fails the check. An
//! `http` check speaks what the pool's requests speak: HTTP/2 to a pool with `protocol =
//! "h2"` (or `"auto"` when the server chose it), else HTTP/1.1.

use super::Place;
use crate::config::health::{CheckKind, HealthConfig};
use crate::config::ServerProtocol;
use crate::http::response::{parse_response, RequestKind, ResponseHead};
use crate::state::control::{Change, Evidence, Failure};
use crate::state::status::AdminState;
use crate::upstream::tls::PoolTls;
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// TLS for a check: the pool's settings and the name the server is asked for.
pub struct CheckTls {
    pub tls: Arc<PoolTls>,
    pub name: ServerName<'static>,
}

/// How a check reaches a server: over TLS or not, and in which protocol.
pub struct CheckWay {
    pub tls: Option<CheckTls>,
    pub protocol: ServerProtocol,
}

/// Checks one server every `interval`, after `offset`, until the switch goes.
pub async fn run(mut place: Place, offset: Duration) {
    if !place.sleep(offset).await {
        return;
    }
    loop {
        let Some(pool) = place.get() else { return };
        let server = &pool.backends[place.server];
        let config = pool.health.health.clone();
        let in_maint = server
            .status
            .lock()
            .is_ok_and(|s| s.admin == AdminState::Maint);
        let addr = server.addr;
        let protocol = pool.config.protocol;
        let tls = pool.config.tls.as_ref().map(|tls| {
            let host = pool
                .config
                .servers
                .get(place.server)
                .and_then(|s| s.host.as_deref());
            CheckTls {
                tls: Arc::clone(tls),
                name: tls.server_name(host, addr),
            }
        });
        // Responses the server gave through the switch so far: a check that times out while
        // the server goes on answering requests (or moving their bodies) shows it busy, not
        // dead.
        let answered = crate::state::stats::read(&server.stats.responses);
        drop(pool);
        if !in_maint {
            let way = CheckWay { tls, protocol };
            let change = match probe(addr, &config, &way).await {
                Probe::Passed => Some(Change::CheckPassed),
                Probe::Failed(why) => Some(Change::CheckFailed(Failure::broken(why))),
                Probe::TimedOut(why) => {
                    let Some(pool) = place.get() else { return };
                    let alive = pool.backends[place.server].stats.alive_since(answered);
                    Some(Change::CheckFailed(Failure {
                        why,
                        evidence: Evidence::of_timeout(alive),
                    }))
                }
                Probe::NotMade(why) => {
                    crate::capacity::exhaustion::CONNECT.warn(|held| {
                        tracing::warn!(server = %addr, "check not made: {why}{}", crate::capacity::exhaustion::held_back(held));
                    });
                    None
                }
            };
            if let Some(change) = change {
                if !place.apply(change) {
                    return;
                }
            }
        }
        if !place.sleep(config.interval).await {
            return;
        }
    }
}

/// What came of one check.
pub enum Probe {
    Passed,
    /// The server failed it; why.
    Failed(String),
    /// The server did not answer within `timeout` (connect or response); why.
    TimedOut(String),
    /// This process could not open a socket (out of descriptors): no verdict on the server.
    NotMade(String),
}

/// One check of `addr`, made the `way` requests go.
pub async fn probe(addr: SocketAddr, config: &HealthConfig, way: &CheckWay) -> Probe {
    match tokio::time::timeout(config.timeout, probe_unbounded(addr, config, way)).await {
        Ok(Ok(())) => Probe::Passed,
        Ok(Err(probe)) => probe,
        Err(_) => Probe::TimedOut(format!("no answer within {:?}", config.timeout)),
    }
}

async fn probe_unbounded(
    addr: SocketAddr,
    config: &HealthConfig,
    way: &CheckWay,
) -> Result<(), Probe> {
    let stream = TcpStream::connect(addr).await.map_err(|e| {
        if crate::capacity::exhaustion::is_exhaustion(&e) {
            Probe::NotMade(format!("connect: {e}"))
        } else {
            Probe::Failed(format!("connect: {e}"))
        }
    })?;
    let Some(tls) = &way.tls else {
        return match way.protocol {
            ServerProtocol::H2 => ask_h2(stream, addr, config, "http").await,
            _ => ask(stream, addr, config).await,
        };
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::clone(tls.tls.client()));
    let stream = connector
        .connect(tls.name.clone(), stream)
        .await
        .map_err(|e| Probe::Failed(format!("TLS handshake: {e}")))?;
    let chose_h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
    match (way.protocol, chose_h2) {
        (ServerProtocol::H2, _) | (ServerProtocol::Auto, true) => {
            ask_h2(stream, addr, config, "https").await
        }
        _ => ask(stream, addr, config).await,
    }
}

/// An `http` check over HTTP/2 (the h2 crate's client, as requests to such a pool go): `GET
/// path`, its status judged as over HTTP/1.1.
async fn ask_h2(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    addr: SocketAddr,
    config: &HealthConfig,
    scheme: &str,
) -> Result<(), Probe> {
    let host = config.host.clone().unwrap_or_else(|| addr.to_string());
    match config.check {
        CheckKind::Http => {}
        CheckKind::Grpc => {
            return super::grpc::check(stream, scheme, &host, &config.service)
                .await
                .map_err(Probe::Failed)
        }
        CheckKind::Tcp | CheckKind::None => return Ok(()),
    }
    let request = http::Request::get(format!("{scheme}://{host}{}", config.path))
        .header(http::header::USER_AGENT, "tcpvs-check")
        .body(())
        .map_err(|e| Probe::Failed(format!("the check's request: {e}")))?;
    let ask = |send: h2::client::SendRequest<bytes::Bytes>| async move {
        let failed = |what: &str, e: h2::Error| format!("{what}: {e}");
        let mut send = send.ready().await.map_err(|e| failed("HTTP/2", e))?;
        let (response, _) = send
            .send_request(request, true)
            .map_err(|e| failed("sending the check", e))?;
        response.await.map_err(|e| failed("reading the answer", e))
    };
    let answered = super::grpc::on_h2(stream, ask).await.map_err(Probe::Failed);
    let status = answered?.status().as_u16();
    if config.expect.contains(status) {
        Ok(())
    } else {
        Err(Probe::Failed(format!("status {status}")))
    }
}

/// The rest of a check on an open connection: nothing more for `tcp`, the request for `http`.
async fn ask(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    addr: SocketAddr,
    config: &HealthConfig,
) -> Result<(), Probe> {
    match config.check {
        CheckKind::Http => {}
        CheckKind::Grpc => {
            return Err(Probe::Failed(
                "the server chose HTTP/1.1, and gRPC runs over HTTP/2".into(),
            ))
        }
        CheckKind::Tcp | CheckKind::None => return Ok(()),
    }
    let host = config.host.clone().unwrap_or_else(|| addr.to_string());
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: tcpvs-check\r\nConnection: close\r\n\r\n",
        config.path
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| Probe::Failed(format!("sending the check: {e}")))?;
    let status = read_status(&mut stream).await.map_err(Probe::Failed)?;
    if config.expect.contains(status) {
        Ok(())
    } else {
        Err(Probe::Failed(format!("status {status}")))
    }
}

/// The longest response head a check reads: a health page needs no big head, and a check
/// should not hold much memory per server.
const MAX_CHECK_HEAD_BYTES: usize = 16 * 1024;

/// The check's request, as the data path's response parser needs to know it: a plain GET.
const CHECK_REQUEST: RequestKind = RequestKind {
    is_head: false,
    is_connect: false,
};

/// The status of the response's status line (interim 1xx responses skipped). The head is
/// parsed as the data path parses a server's response ([`parse_response`]), so a server that
/// passes its check gives answers the switch can relay.
async fn read_status(stream: &mut (impl AsyncRead + Unpin)) -> Result<u16, String> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 512];
    let mut head = ResponseHead::default();
    loop {
        match parse_response(&buf, CHECK_REQUEST, &mut head) {
            Ok(true) => {
                if head.is_informational() && head.status != 101 {
                    buf.drain(..head.len);
                    continue;
                }
                return Ok(head.status);
            }
            Ok(false) if buf.len() < MAX_CHECK_HEAD_BYTES => {}
            Ok(false) => return Err("response head too long".into()),
            Err(why) => return Err(format!("invalid response: {why}")),
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("reading the answer: {e}"))?;
        if n == 0 {
            return Err("closed before a response head".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
