//! Adversarial protocol-edge tests for the tcpvs HTTP/1.x content switch.
//!
//! Expectations come from RFC 9110 / RFC 9112 and the switch's written spec, not from
//! the implementation. Every helper lives in this file on purpose (tests/common is
//! maintained separately).
//!
//! Pieces:
//! * `Backend`: a recording origin server. It keeps every raw byte received per
//!   connection, parses requests (CRLF or bare LF heads, Content-Length or chunked
//!   bodies) and answers with a scripted `Reply`.
//! * `Client`: a raw-socket client that writes arbitrary bytes and parses responses
//!   strictly, with a 5 s timeout on every read.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};

/// Generous upper bound for anything we wait for; only used to avoid hangs.
const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------
// Panic accounting: a panic whose location is not in this file came from the switch
// (or a library it uses) and is a bug whatever the input was.
// ---------------------------------------------------------------------------------

static FOREIGN_PANICS: AtomicUsize = AtomicUsize::new(0);

fn install_panic_counter() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let ours = info
                .location()
                .map(|l| l.file().ends_with("protocol_edges.rs"))
                .unwrap_or(false);
            if !ours {
                FOREIGN_PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
}

// ---------------------------------------------------------------------------------
// Byte helpers
// ---------------------------------------------------------------------------------

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || hay.len() < needle.len() {
        return None;
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

fn lossy(b: &[u8]) -> String {
    let shown = &b[..b.len().min(400)];
    let mut s = String::new();
    for &c in shown {
        match c {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    if b.len() > shown.len() {
        s.push_str(&format!("...(+{} bytes)", b.len() - shown.len()));
    }
    s
}

/// End of a header section (index just after the empty line), accepting CRLF or LF.
fn head_end(buf: &[u8]) -> Option<usize> {
    let crlf = find(buf, b"\r\n\r\n").map(|i| i + 4);
    let lf = find(buf, b"\n\n").map(|i| i + 2);
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

type Fields = Vec<(String, Vec<u8>)>;

/// Lenient head parser: first line plus `name: value` fields (value OWS-trimmed).
fn parse_head(head: &[u8]) -> Option<(String, Fields)> {
    let mut lines = head
        .split(|&c| c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = String::from_utf8_lossy(lines.next()?).into_owned();
    let mut fields = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let colon = line.iter().position(|&c| c == b':')?;
        let name = String::from_utf8_lossy(&line[..colon]).into_owned();
        let mut value = &line[colon + 1..];
        while let [b' ' | b'\t', rest @ ..] = value {
            value = rest;
        }
        while let [rest @ .., b' ' | b'\t'] = value {
            value = rest;
        }
        fields.push((name, value.to_vec()));
    }
    Some((first, fields))
}

fn field_values<'a>(fields: &'a Fields, name: &str) -> Vec<&'a [u8]> {
    fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_slice())
        .collect()
}

/// All comma-separated tokens of every field with this name, lower-cased.
fn field_tokens(fields: &Fields, name: &str) -> Vec<String> {
    field_values(fields, name)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        })
        .collect()
}

fn is_chunked(fields: &Fields) -> bool {
    field_tokens(fields, "transfer-encoding")
        .last()
        .map(String::as_str)
        == Some("chunked")
}

fn content_length(fields: &Fields) -> Option<usize> {
    field_values(fields, "content-length")
        .first()
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.trim().parse().ok())
}

/// Strict chunked decoder. Ok(None): need more bytes. Ok(Some((body, consumed))).
fn decode_chunked(b: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        let Some(le) = find(&b[pos..], b"\r\n") else {
            if b.len() - pos > 1024 {
                return Err("chunk-size line too long".into());
            }
            return Ok(None);
        };
        let line = &b[pos..pos + le];
        let size_part = line.split(|&c| c == b';').next().unwrap_or(b"");
        let mut size_part = size_part;
        while let [rest @ .., b' ' | b'\t'] = size_part {
            size_part = rest;
        }
        if size_part.is_empty() || !size_part.iter().all(u8::is_ascii_hexdigit) {
            return Err(format!("bad chunk-size line {:?}", lossy(line)));
        }
        let size = usize::from_str_radix(std::str::from_utf8(size_part).unwrap(), 16)
            .map_err(|e| format!("chunk size: {e}"))?;
        pos += le + 2;
        if size == 0 {
            loop {
                let Some(le) = find(&b[pos..], b"\r\n") else {
                    return Ok(None);
                };
                pos += le + 2;
                if le == 0 {
                    return Ok(Some((out, pos)));
                }
            }
        }
        if b.len() < pos + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&b[pos..pos + size]);
        if &b[pos + size..pos + size + 2] != b"\r\n" {
            return Err("chunk data not followed by CRLF".into());
        }
        pos += size + 2;
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + seed as usize) % 26) as u8)
        .collect()
}

fn ok_response(body: &[u8]) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

// ---------------------------------------------------------------------------------
// Recording backend
// ---------------------------------------------------------------------------------

#[derive(Clone, Debug)]
#[allow(dead_code)]
struct Req {
    conn: usize,
    /// Raw head bytes exactly as received, including the terminating empty line.
    head: Vec<u8>,
    method: String,
    target: String,
    version: String,
    fields: Fields,
    /// Decoded body.
    body: Vec<u8>,
}

#[allow(dead_code)]
enum Reply {
    Send(Vec<u8>),
    SendClose(Vec<u8>),
    Delay(Duration, Vec<u8>),
    /// Keep reading, never answer.
    Silent,
    Close,
}

type Script = Arc<dyn Fn(&Req) -> Reply + Send + Sync>;

struct Backend {
    addr: SocketAddr,
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
    reqs: Arc<Mutex<Vec<Req>>>,
}

impl Backend {
    async fn start(script: Script) -> Backend {
        Self::start_with(script, false).await
    }

    /// `send_continue`: answer `Expect: 100-continue` with an interim 100 before
    /// reading the body, as an origin server would.
    async fn start_with(script: Script, send_continue: bool) -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let raw: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let reqs: Arc<Mutex<Vec<Req>>> = Arc::default();
        let (raw2, reqs2) = (raw.clone(), reqs.clone());
        tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let id = {
                    let mut g = raw2.lock().unwrap();
                    g.push(Vec::new());
                    g.len() - 1
                };
                tokio::spawn(serve_backend_conn(
                    s,
                    id,
                    raw2.clone(),
                    reqs2.clone(),
                    script.clone(),
                    send_continue,
                ));
            }
        });
        Backend { addr, raw, reqs }
    }

    fn total_bytes(&self) -> usize {
        self.raw.lock().unwrap().iter().map(Vec::len).sum()
    }

    fn all_bytes(&self) -> Vec<u8> {
        self.raw.lock().unwrap().concat()
    }

    fn requests(&self) -> Vec<Req> {
        self.reqs.lock().unwrap().clone()
    }
}

async fn backend_read(
    s: &mut TcpStream,
    buf: &mut Vec<u8>,
    id: usize,
    raw: &Mutex<Vec<Vec<u8>>>,
) -> bool {
    let mut tmp = vec![0u8; 65536];
    match s.read(&mut tmp).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&tmp[..n]);
            raw.lock().unwrap()[id].extend_from_slice(&tmp[..n]);
            true
        }
    }
}

async fn serve_backend_conn(
    mut s: TcpStream,
    id: usize,
    raw: Arc<Mutex<Vec<Vec<u8>>>>,
    reqs: Arc<Mutex<Vec<Req>>>,
    script: Script,
    send_continue: bool,
) {
    let _ = s.set_nodelay(true);
    let mut buf = Vec::new();
    loop {
        let end = loop {
            if let Some(e) = head_end(&buf) {
                break e;
            }
            if !backend_read(&mut s, &mut buf, id, &raw).await {
                return;
            }
        };
        let head: Vec<u8> = buf.drain(..end).collect();
        let Some((line, fields)) = parse_head(&head) else {
            return;
        };
        let parts: Vec<&str> = line.split(' ').collect();
        let [method, target, version] = parts[..] else {
            return;
        };
        let (method, target, version) =
            (method.to_string(), target.to_string(), version.to_string());
        if send_continue
            && field_tokens(&fields, "expect")
                .iter()
                .any(|t| t == "100-continue")
            && s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        let body = if is_chunked(&fields) {
            loop {
                match decode_chunked(&buf) {
                    Err(_) => return,
                    Ok(Some((body, used))) => {
                        buf.drain(..used);
                        break body;
                    }
                    Ok(None) => {
                        if !backend_read(&mut s, &mut buf, id, &raw).await {
                            return;
                        }
                    }
                }
            }
        } else if let Some(n) = content_length(&fields) {
            while buf.len() < n {
                if !backend_read(&mut s, &mut buf, id, &raw).await {
                    return;
                }
            }
            buf.drain(..n).collect()
        } else {
            Vec::new()
        };
        let req = Req {
            conn: id,
            head,
            method,
            target,
            version,
            fields,
            body,
        };
        let reply = script(&req);
        reqs.lock().unwrap().push(req);
        match reply {
            Reply::Send(b) => {
                if s.write_all(&b).await.is_err() {
                    return;
                }
            }
            Reply::Delay(d, b) => {
                tokio::time::sleep(d).await;
                if s.write_all(&b).await.is_err() {
                    return;
                }
            }
            Reply::SendClose(b) => {
                let _ = s.write_all(&b).await;
                let _ = s.shutdown().await;
                return;
            }
            Reply::Silent => {
                while backend_read(&mut s, &mut buf, id, &raw).await {}
                return;
            }
            Reply::Close => return,
        }
    }
}

/// Answers `200` with body "METHOD TARGET BODYLEN".
fn echo() -> Script {
    Arc::new(|r: &Req| {
        Reply::Send(ok_response(
            format!("{} {} {}", r.method, r.target, r.body.len()).as_bytes(),
        ))
    })
}

// ---------------------------------------------------------------------------------
// Raw client
// ---------------------------------------------------------------------------------

#[derive(Debug)]
#[allow(dead_code)]
struct Resp {
    version: String,
    status: u16,
    head: Vec<u8>,
    fields: Fields,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&[u8]> {
        field_values(&self.fields, name).first().copied()
    }
}

fn parse_status_head(head: &[u8]) -> Option<(String, u16, Fields)> {
    let (line, fields) = parse_head(head)?;
    let (version, rest) = line.split_once(' ')?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = rest.get(..3)?;
    if !code.bytes().all(|c| c.is_ascii_digit()) || !(rest.len() == 3 || rest.as_bytes()[3] == b' ')
    {
        return None;
    }
    Some((version.to_string(), code.parse().ok()?, fields))
}

struct Client {
    rd: OwnedReadHalf,
    wr: Option<OwnedWriteHalf>,
    buf: Vec<u8>,
    eof: bool,
}

impl Client {
    async fn connect(addr: SocketAddr) -> Client {
        let s = tokio::time::timeout(WAIT, TcpStream::connect(addr))
            .await
            .expect("connect timed out")
            .expect("connect");
        let _ = s.set_nodelay(true);
        let (rd, wr) = s.into_split();
        Client {
            rd,
            wr: Some(wr),
            buf: Vec::new(),
            eof: false,
        }
    }

    async fn send(&mut self, b: &[u8]) -> std::io::Result<()> {
        let wr = self.wr.as_mut().expect("write half taken");
        tokio::time::timeout(WAIT, wr.write_all(b))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "write timed out"))?
    }

    /// Read more bytes; Ok(false) at end of stream (FIN or reset).
    async fn fill(&mut self) -> Result<bool, String> {
        if self.eof {
            return Ok(false);
        }
        let mut tmp = vec![0u8; 65536];
        match tokio::time::timeout(WAIT, self.rd.read(&mut tmp)).await {
            Err(_) => Err(format!(
                "timed out after {WAIT:?} waiting for the switch (have {:?})",
                lossy(&self.buf)
            )),
            Ok(Ok(0)) => {
                self.eof = true;
                Ok(false)
            }
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(true)
            }
            Ok(Err(e)) => match e.kind() {
                std::io::ErrorKind::ConnectionReset
                | std::io::ErrorKind::ConnectionAborted
                | std::io::ErrorKind::BrokenPipe => {
                    self.eof = true;
                    Ok(false)
                }
                _ => Err(e.to_string()),
            },
        }
    }

    async fn try_response(&mut self, head_request: bool) -> Result<Resp, String> {
        let end = loop {
            if let Some(e) = head_end(&self.buf) {
                break e;
            }
            if !self.fill().await? {
                return Err(format!(
                    "connection closed before a complete response head (got {:?})",
                    lossy(&self.buf)
                ));
            }
        };
        let head: Vec<u8> = self.buf.drain(..end).collect();
        let (version, status, fields) = parse_status_head(&head)
            .ok_or_else(|| format!("unparsable response head {:?}", lossy(&head)))?;
        let mut resp = Resp {
            version,
            status,
            head,
            fields,
            body: Vec::new(),
        };
        if head_request || (100..200).contains(&status) || status == 204 || status == 304 {
            return Ok(resp);
        }
        if is_chunked(&resp.fields) {
            loop {
                match decode_chunked(&self.buf) {
                    Err(e) => return Err(format!("switch sent a bad chunked body: {e}")),
                    Ok(Some((body, used))) => {
                        self.buf.drain(..used);
                        resp.body = body;
                        return Ok(resp);
                    }
                    Ok(None) => {
                        if !self.fill().await? {
                            return Err("connection closed inside a chunked body".into());
                        }
                    }
                }
            }
        } else if let Some(n) = content_length(&resp.fields) {
            while self.buf.len() < n {
                if !self.fill().await? {
                    return Err(format!(
                        "connection closed after {} of {n} body bytes",
                        self.buf.len()
                    ));
                }
            }
            resp.body = self.buf.drain(..n).collect();
        } else {
            while self.fill().await? {}
            resp.body = std::mem::take(&mut self.buf);
        }
        Ok(resp)
    }

    async fn response(&mut self, head_request: bool) -> Resp {
        match self.try_response(head_request).await {
            Ok(r) => r,
            Err(e) => panic!("no valid response: {e}"),
        }
    }

    /// Everything until the switch closes the connection.
    async fn rest_until_close(&mut self) -> Result<Vec<u8>, String> {
        while self.fill().await? {}
        Ok(std::mem::take(&mut self.buf))
    }

    async fn expect_closed(&mut self) {
        match self.rest_until_close().await {
            Ok(rest) => assert!(
                rest.is_empty(),
                "unexpected bytes before close: {:?}",
                lossy(&rest)
            ),
            Err(e) => panic!("connection not closed by the switch: {e}"),
        }
    }
}

// ---------------------------------------------------------------------------------
// Switch setup
// ---------------------------------------------------------------------------------

struct Opts {
    header_timeout: &'static str,
    idle_timeout: &'static str,
    keepalive_timeout: &'static str,
}

const OPTS: Opts = Opts {
    header_timeout: "3s",
    idle_timeout: "4s",
    keepalive_timeout: "5s",
};

fn server_list(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs
        .iter()
        .map(|a| format!("{{ addr = \"{a}\", weight = 1 }}"))
        .collect();
    list.join(", ")
}

fn switch_section(o: &Opts) -> String {
    format!(
        "[switch]\nheader_timeout = \"{}\"\nidle_timeout = \"{}\"\nkeepalive_timeout = \"{}\"\n\
         connect_timeout = \"2s\"\naccess_log = false\nsplice_threshold = 65536\n\n",
        o.header_timeout, o.idle_timeout, o.keepalive_timeout
    )
}

/// One pool with passive failure detection off: these tests script a server that misbehaves
/// on purpose, request after request, to see each answer the switch makes of it; taking that
/// server out after three failures is what tests/health.rs checks.
fn config_one_pool(servers: &[SocketAddr], o: &Opts) -> String {
    format!(
        "{}[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"a\"\n\n\
         [pool.a]\nscheduler = \"wlc\"\nservers = [{}]\n[pool.a.health]\nmax_fails = 0\n",
        switch_section(o),
        server_list(servers)
    )
}

async fn start_switch(toml: &str) -> (tcpvs::Switch, SocketAddr) {
    install_panic_counter();
    let config = match tcpvs::Config::parse("protocol_edges.toml", toml) {
        Ok(c) => c,
        Err(e) => panic!("config rejected: {e}\n{toml}"),
    };
    let switch = tcpvs::Switch::start(config).await.expect("switch start");
    let addr = switch
        .local_addr("web")
        .expect("bound address of virtual.web");
    (switch, addr)
}

async fn simple_switch(backend: &Backend, o: &Opts) -> (tcpvs::Switch, SocketAddr) {
    start_switch(&config_one_pool(&[backend.addr], o)).await
}

/// Switch-generated errors must be short text/plain documents.
fn check_error_body(r: &Resp) -> Result<(), String> {
    let ct = r
        .header("content-type")
        .map(|v| String::from_utf8_lossy(v).to_ascii_lowercase());
    if !ct.as_deref().is_some_and(|c| c.starts_with("text/plain")) {
        return Err(format!(
            "error {} has Content-Type {ct:?}, expected text/plain",
            r.status
        ));
    }
    if r.body.is_empty() || r.body.len() > 1024 {
        return Err(format!(
            "error {} body is {} bytes, expected a short text",
            r.status,
            r.body.len()
        ));
    }
    Ok(())
}

/// Waits until the switch has no client connection left (every session ended, so every write
/// it made to a server is done); panics after [`WAIT`]. Then what the switch forwarded can be
/// read off its counters without sleeping.
async fn sessions_ended(switch: &tcpvs::Switch) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while switch.stats().clients != 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the switch still has client connections after {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Requests the switch has sent to servers, all servers together.
fn forwarded(switch: &tcpvs::Switch) -> u64 {
    switch.stats().servers.iter().map(|s| s.requests).sum()
}

/// Send `req` on a fresh connection; expect `status`, a short text/plain body, the
/// connection closed, and nothing at all reaching the backend. Failures are collected.
async fn expect_refused(
    switch: &tcpvs::Switch,
    backend: &Backend,
    name: &str,
    req: &[u8],
    status: u16,
    failures: &mut Vec<String>,
) {
    let addr = switch.local_addr("web").expect("virtual.web");
    let before = backend.total_bytes();
    let sent_before = forwarded(switch);
    let mut c = Client::connect(addr).await;
    let _ = c.send(req).await;
    match c.try_response(false).await {
        Err(e) => failures.push(format!("{name}: no response ({e})")),
        Ok(r) if r.status != status => failures.push(format!(
            "{name}: got {} {:?}, expected {status}",
            r.status,
            lossy(&r.body)
        )),
        Ok(r) => {
            if let Err(e) = check_error_body(&r) {
                failures.push(format!("{name}: {e}"));
            }
            match c.rest_until_close().await {
                Ok(rest) if rest.is_empty() => {}
                Ok(rest) => failures.push(format!(
                    "{name}: extra bytes after {status}: {:?}",
                    lossy(&rest)
                )),
                Err(e) => {
                    failures.push(format!("{name}: connection not closed after {status}: {e}"))
                }
            }
        }
    }
    // The switch's own count is exact once the session has ended; the backend's bytes are a
    // second witness.
    drop(c);
    sessions_ended(switch).await;
    let sent = forwarded(switch) - sent_before;
    if sent != 0 {
        failures.push(format!(
            "{name}: the switch sent {sent} request(s) to the server"
        ));
    }
    let all = backend.all_bytes();
    if all.len() != before {
        failures.push(format!(
            "{name}: backend received {} bytes: {:?}",
            all.len() - before,
            lossy(&all[before..])
        ));
    }
}

async fn run_refused(cases: &[(&str, Vec<u8>)], status: u16) {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut failures = Vec::new();
    for (name, req) in cases {
        expect_refused(&switch, &backend, name, req, status, &mut failures).await;
    }
    // The switch must still serve a normal request afterwards.
    let mut c = Client::connect(addr).await;
    c.send(b"GET /alive HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    match c.try_response(false).await {
        Ok(r) if r.status == 200 => {}
        other => failures.push(format!("normal request afterwards: {other:?}")),
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn post(fields: &str, body: &str) -> Vec<u8> {
    format!("POST /submit HTTP/1.1\r\nHost: h\r\n{fields}\r\n{body}").into_bytes()
}

// ---------------------------------------------------------------------------------
// Ambiguous / malformed requests: 400 (or 431/505) and never reach a backend
// ---------------------------------------------------------------------------------

/// RFC 9112 §6.3 (3): CL together with TE must be treated as an error by a proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_with_transfer_encoding_is_400() {
    run_refused(
        &[
            (
                "CL then TE",
                post(
                    "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
            ),
            (
                "TE then CL",
                post(
                    "Transfer-Encoding: chunked\r\nContent-Length: 3\r\n",
                    "0\r\n\r\n",
                ),
            ),
            (
                "CL 0 with TE",
                post(
                    "Content-Length: 0\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
            ),
            (
                "lower-case names",
                post(
                    "content-length: 5\r\ntransfer-encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §6.3 (5) / RFC 9110 §8.6: differing Content-Length values.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_content_lengths_are_400() {
    run_refused(
        &[
            (
                "two fields",
                post("Content-Length: 1\r\nContent-Length: 2\r\n", "ab"),
            ),
            ("list in one field", post("Content-Length: 1, 2\r\n", "ab")),
            ("list without space", post("Content-Length: 2,3\r\n", "abc")),
            (
                "names differ in case",
                post("Content-Length: 2\r\ncontent-length: 3\r\n", "abc"),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9110 §8.6: Content-Length = 1*DIGIT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_content_length_is_400() {
    run_refused(
        &[
            ("negative", post("Content-Length: -1\r\n", "hello")),
            ("hex", post("Content-Length: 0x5\r\n", "hello")),
            (
                "space inside",
                post("Content-Length: 1 0\r\n", "helloworld"),
            ),
            ("plus sign", post("Content-Length: +5\r\n", "hello")),
            ("trailing letters", post("Content-Length: 5a\r\n", "hello")),
            ("empty", post("Content-Length: \r\n", "hello")),
            (
                "overflow",
                post("Content-Length: 99999999999999999999999\r\n", "hello"),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §6.3 (4): request whose final transfer coding is not chunked -> 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_not_ending_in_chunked_is_400() {
    run_refused(
        &[
            ("gzip", post("Transfer-Encoding: gzip\r\n", "hello")),
            ("identity", post("Transfer-Encoding: identity\r\n", "hello")),
            (
                "chunked, gzip",
                post("Transfer-Encoding: chunked, gzip\r\n", "0\r\n\r\n"),
            ),
            (
                "chunked then gzip field",
                post(
                    "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
                    "0\r\n\r\n",
                ),
            ),
            (
                "xchunked",
                post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"),
            ),
            (
                "vertical tab",
                post("Transfer-Encoding: \x0bchunked\r\n", "0\r\n\r\n"),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §6.1: chunked MUST NOT be applied more than once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_twice_is_400() {
    run_refused(
        &[
            (
                "one field",
                post(
                    "Transfer-Encoding: chunked, chunked\r\n",
                    "0\r\n\r\n0\r\n\r\n",
                ),
            ),
            (
                "two fields",
                post(
                    "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n0\r\n\r\n",
                ),
            ),
            (
                "mixed case",
                post(
                    "Transfer-Encoding: Chunked,chunked\r\n",
                    "0\r\n\r\n0\r\n\r\n",
                ),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §7.1: chunk-size = 1*HEXDIG, chunk = chunk-size CRLF chunk-data CRLF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_chunk_framing_is_400() {
    let te = "Transfer-Encoding: chunked\r\n";
    run_refused(
        &[
            ("non-hex size", post(te, "zz\r\nhello\r\n0\r\n\r\n")),
            ("negative size", post(te, "-5\r\nhello\r\n0\r\n\r\n")),
            ("0x prefix", post(te, "0x5\r\nhello\r\n0\r\n\r\n")),
            ("empty size", post(te, "\r\nhello\r\n0\r\n\r\n")),
            ("leading space", post(te, " 5\r\nhello\r\n0\r\n\r\n")),
            (
                "too many digits",
                post(te, "fffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
            ),
            ("missing CRLF after data", post(te, "5\r\nhelloXX0\r\n\r\n")),
            ("bare LF framing", post(te, "5\nhello\n0\n\n")),
            ("bare LF after data", post(te, "5\r\nhello\n0\r\n\r\n")),
            (
                "bad size after a valid chunk",
                post(te, "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n"),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §3: invalid request-line -> 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_request_line_is_400() {
    let h = "\r\nHost: h\r\n\r\n";
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("method only", format!("GET{h}").into_bytes()),
        ("no version", format!("GET /{h}").into_bytes()),
        ("double space", format!("GET  / HTTP/1.1{h}").into_bytes()),
        (
            "trailing token",
            format!("GET / HTTP/1.1 x{h}").into_bytes(),
        ),
        ("leading space", format!(" GET / HTTP/1.1{h}").into_bytes()),
        (
            "space in target",
            format!("GET /a b HTTP/1.1{h}").into_bytes(),
        ),
        (
            "bad protocol name",
            format!("GET / HTTX/1.1{h}").into_bytes(),
        ),
        (
            "lower-case protocol",
            format!("GET / http/1.1{h}").into_bytes(),
        ),
        ("no minor version", format!("GET / HTTP/1{h}").into_bytes()),
        ("bad method char", format!("G(T / HTTP/1.1{h}").into_bytes()),
        (
            "relative target",
            format!("GET foo HTTP/1.1{h}").into_bytes(),
        ),
        (
            "NUL in target",
            format!("GET /a\0b HTTP/1.1{h}").into_bytes(),
        ),
        (
            "bare CR in line",
            format!("GET / HTTP/1.1\rX: y{h}").into_bytes(),
        ),
        ("tab separator", format!("GET\t/ HTTP/1.1{h}").into_bytes()),
    ];
    run_refused(&cases, 400).await;
}

/// RFC 9112 §5.2: obs-fold in a request -> 400 (the spec chooses rejection).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs_fold_is_400() {
    run_refused(
        &[
            (
                "SP continuation",
                b"GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n two\r\n\r\n".to_vec(),
            ),
            (
                "HTAB continuation",
                b"GET / HTTP/1.1\r\nHost: h\r\nX-A: one\r\n\ttwo\r\n\r\n".to_vec(),
            ),
            (
                "folded Host",
                b"GET / HTTP/1.1\r\nHost:\r\n h\r\n\r\n".to_vec(),
            ),
            (
                "folded Transfer-Encoding",
                b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n"
                    .to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §5.1: whitespace between field name and colon MUST be rejected with 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whitespace_before_colon_is_400() {
    run_refused(
        &[
            ("Host SP colon", b"GET / HTTP/1.1\r\nHost : h\r\n\r\n".to_vec()),
            ("other field SP", b"GET / HTTP/1.1\r\nHost: h\r\nX-A : b\r\n\r\n".to_vec()),
            ("HTAB before colon", b"GET / HTTP/1.1\r\nHost: h\r\nX-A\t: b\r\n\r\n".to_vec()),
            (
                "Transfer-Encoding SP colon",
                b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n"
                    .to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9110 §5.1 field-name = token; a field line needs a colon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_field_lines_are_400() {
    run_refused(
        &[
            (
                "no colon",
                b"GET / HTTP/1.1\r\nHost: h\r\nX-A\r\n\r\n".to_vec(),
            ),
            (
                "empty name",
                b"GET / HTTP/1.1\r\nHost: h\r\n: b\r\n\r\n".to_vec(),
            ),
            (
                "bad name char",
                b"GET / HTTP/1.1\r\nHost: h\r\nX@A: b\r\n\r\n".to_vec(),
            ),
            (
                "space in name",
                b"GET / HTTP/1.1\r\nHost: h\r\nX A: b\r\n\r\n".to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §3.2: HTTP/1.1 without Host, with two Host fields, or an invalid Host -> 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_missing_duplicated_or_invalid_is_400() {
    run_refused(
        &[
            ("missing", b"GET / HTTP/1.1\r\nX-A: b\r\n\r\n".to_vec()),
            (
                "two different",
                b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(),
            ),
            (
                "two identical",
                b"GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n".to_vec(),
            ),
            (
                "list in one field",
                b"GET / HTTP/1.1\r\nHost: a, b\r\n\r\n".to_vec(),
            ),
            (
                "space in value",
                b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n".to_vec(),
            ),
            // RFC 9110 §4.2.3: an empty host is invalid, in the target or in Host.
            (
                "empty host in an absolute target",
                b"GET http://:80/ HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
            ),
            (
                "empty host with a port",
                b"GET / HTTP/1.1\r\nHost: :80\r\n\r\n".to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding has faulty framing (spec: 400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_in_http10_is_400() {
    run_refused(
        &[
            (
                "with Host",
                b"POST / HTTP/1.0\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(),
            ),
            (
                "without Host",
                b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9110 §15.6.6: 505 for a major version the server does not support.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_and_http3_request_lines_are_505() {
    run_refused(
        &[
            ("HTTP/2.0", b"GET / HTTP/2.0\r\nHost: h\r\n\r\n".to_vec()),
            ("HTTP/3.0", b"GET / HTTP/3.0\r\nHost: h\r\n\r\n".to_vec()),
        ],
        505,
    )
    .await;
}

/// RFC 9110 §2.5: a higher minor version SHOULD be processed as the highest minor
/// version the recipient implements (HTTP/1.1). nginx does so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_1_2_is_processed_as_http_1_1() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /minor HTTP/1.2\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200, "body {:?}", lossy(&r.body));
    let reqs = backend.requests();
    assert_eq!(reqs.len(), 1);
    assert!(
        reqs[0].head.starts_with(b"GET /minor HTTP/1.1\r\n"),
        "{:?}",
        lossy(&reqs[0].head)
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

/// Spec: request head at most 64 KiB and 100 fields, else 431 and close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_heads_are_431() {
    let fields = |n: usize| -> Vec<u8> {
        let mut r = b"GET /many HTTP/1.1\r\nHost: h\r\n".to_vec();
        for i in 1..n {
            r.extend_from_slice(format!("X-F{i}: v{i}\r\n").as_bytes());
        }
        r.extend_from_slice(b"\r\n");
        r
    };
    let big = |len: usize, terminated: bool| -> Vec<u8> {
        let mut r = b"GET /big HTTP/1.1\r\nHost: h\r\nX-Big: ".to_vec();
        r.extend(std::iter::repeat_n(b'a', len));
        if terminated {
            r.extend_from_slice(b"\r\n\r\n");
        } else {
            r.extend_from_slice(b"\r\nX-More: ");
        }
        r
    };
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut failures = Vec::new();
    for (name, req) in [
        ("101 fields", fields(101)),
        ("150 fields", fields(150)),
        ("70 KiB head", big(70 * 1024, true)),
        ("70 KiB head, never terminated", big(70 * 1024, false)),
    ] {
        expect_refused(&switch, &backend, name, &req, 431, &mut failures).await;
    }
    // Boundary controls: within the limits the request goes through.
    for (name, req) in [
        ("100 fields", fields(100)),
        ("60 KiB head", big(60 * 1024, true)),
    ] {
        let mut c = Client::connect(addr).await;
        c.send(&req).await.unwrap();
        match c.try_response(false).await {
            Ok(r) if r.status == 200 => {}
            other => failures.push(format!("{name}: expected 200, got {other:?}")),
        }
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// RFC 9112 §2.2 / RFC 9110 §5.5: bare CR and NUL in field values must be rejected or
/// replaced by SP; they must never reach the server as-is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_cr_and_nul_in_field_values_never_forwarded() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut failures = Vec::new();
    for (name, req) in [
        (
            "bare CR",
            &b"GET /cr HTTP/1.1\r\nHost: h\r\nX-A: a\rb\r\n\r\n"[..],
        ),
        (
            "NUL",
            &b"GET /nul HTTP/1.1\r\nHost: h\r\nX-A: a\0b\r\n\r\n"[..],
        ),
        (
            "bare CR smuggling a field",
            &b"GET /crf HTTP/1.1\r\nHost: h\r\nX-A: a\rX-Evil: 1\r\n\r\n"[..],
        ),
    ] {
        let before = backend.total_bytes();
        let sent_before = forwarded(&switch);
        let mut c = Client::connect(addr).await;
        let _ = c.send(req).await;
        let r = c.try_response(false).await;
        // A 200 comes after the backend read the whole head; after a 400 the switch's own
        // count says whether anything went up. Either way no wait is needed.
        drop(c);
        sessions_ended(&switch).await;
        let got = backend.all_bytes()[before..].to_vec();
        let bare_cr = got
            .iter()
            .enumerate()
            .any(|(i, &b)| b == b'\r' && got.get(i + 1) != Some(&b'\n'));
        if bare_cr || got.contains(&0) {
            failures.push(format!("{name}: forwarded to backend as {:?}", lossy(&got)));
        }
        match r {
            Ok(r) if r.status == 400 && forwarded(&switch) != sent_before => {
                failures.push(format!("{name}: refused with 400 yet sent to the server"))
            }
            Ok(r) if r.status == 400 || r.status == 200 => {}
            other => failures.push(format!(
                "{name}: expected 400 (or 200 after SP replacement), got {other:?}"
            )),
        }
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// If the switch streams a chunked request and only then finds a framing error, the
/// half-sent server connection must never carry another request (that would splice
/// the next request into the aborted body: request smuggling).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_chunked_request_never_poisons_a_server_connection() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    let _ = c
        .send(&post(
            "Transfer-Encoding: chunked\r\n",
            "5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n",
        ))
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status, 400);
    c.expect_closed().await;
    for i in 0..4 {
        let mut c = Client::connect(addr).await;
        c.send(format!("GET /next{i} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(
            String::from_utf8_lossy(&r.body),
            format!("GET /next{i} 0"),
            "request {i} after the aborted body"
        );
    }
    for conn in backend.raw.lock().unwrap().iter() {
        assert!(
            !(contains(conn, b"POST /submit") && contains(conn, b"GET /next")),
            "a request was sent on the connection carrying the aborted body: {:?}",
            lossy(conn)
        );
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

// ---------------------------------------------------------------------------------
// Valid-but-unusual framing must be accepted (no over-strictness)
// ---------------------------------------------------------------------------------

/// RFC 9112 §7.1.1 (chunk extensions, incl. BWS), §7.1.2 (trailers), §7 (coding
/// names are case-insensitive), RFC 9110 §8.6 (leading zeros), HEXDIG upper case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_framing_variants_are_accepted() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let hw = "hello world";
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "chunk extensions",
            post(
                "Transfer-Encoding: chunked\r\n",
                "5;a=b\r\nhello\r\n6;c=\"d\"\r\n world\r\n0\r\n\r\n",
            ),
            hw,
        ),
        (
            "chunk ext with BWS",
            post(
                "Transfer-Encoding: chunked\r\n",
                "5 ;a=b\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            ),
            hw,
        ),
        (
            "trailer fields",
            post(
                "Transfer-Encoding: chunked\r\n",
                "b\r\nhello world\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n",
            ),
            hw,
        ),
        (
            "upper-case hex size",
            post(
                "Transfer-Encoding: chunked\r\n",
                "B\r\nhello world\r\n0\r\n\r\n",
            ),
            hw,
        ),
        (
            "leading-zero size",
            post(
                "Transfer-Encoding: chunked\r\n",
                "000b\r\nhello world\r\n0000\r\n\r\n",
            ),
            hw,
        ),
        (
            "coding name case",
            post(
                "Transfer-Encoding: Chunked\r\n",
                "b\r\nhello world\r\n0\r\n\r\n",
            ),
            hw,
        ),
        (
            "OWS around coding",
            post(
                "Transfer-Encoding: \t chunked \t\r\n",
                "b\r\nhello world\r\n0\r\n\r\n",
            ),
            hw,
        ),
        (
            "CL leading zeros",
            post("Content-Length: 007\r\n", "abcdefg"),
            "abcdefg",
        ),
        ("CL zero", post("Content-Length: 0\r\n", ""), ""),
        (
            "header value OWS",
            post("Content-Length:\t 11 \t\r\n", hw),
            hw,
        ),
    ];
    let mut failures = Vec::new();
    for (name, req, expect) in cases {
        let before = backend.requests().len();
        let mut c = Client::connect(addr).await;
        c.send(&req).await.unwrap();
        match c.try_response(false).await {
            Ok(r) if r.status == 200 => {
                let reqs = backend.requests();
                match reqs.get(before) {
                    Some(q) if q.body == expect.as_bytes() => {}
                    Some(q) => failures.push(format!("{name}: backend body {:?}", lossy(&q.body))),
                    None => failures.push(format!("{name}: backend saw no request")),
                }
            }
            other => failures.push(format!("{name}: expected 200, got {other:?}")),
        }
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the request
/// line (HAProxy and nginx do).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leading_empty_line_is_ignored() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"\r\nGET /lead HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200, "{:?}", lossy(&r.body));
    assert_eq!(r.body, b"GET /lead 0");
    let reqs = backend.requests();
    assert!(reqs[0].head.starts_with(b"GET /lead HTTP/1.1\r\n"));
    switch.shutdown(Duration::from_millis(200)).await;
}

// ---------------------------------------------------------------------------------
// Head rebuilding
// ---------------------------------------------------------------------------------

fn assert_crlf_only(head: &[u8]) {
    for (i, &c) in head.iter().enumerate() {
        if c == b'\n' {
            assert!(
                i > 0 && head[i - 1] == b'\r',
                "bare LF at {i} in {:?}",
                lossy(head)
            );
        }
        if c == b'\r' {
            assert_eq!(
                head.get(i + 1),
                Some(&b'\n'),
                "bare CR at {i} in {:?}",
                lossy(head)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_lf_client_head_reaches_backend_with_crlf() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /p/a?x=1&y=%2F&z HTTP/1.1\nHost: example.test\nX-Obs: caf\xe9\xffbar\nUser-Agent: edge/1.0\n\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"GET /p/a?x=1&y=%2F&z 0");
    let reqs = backend.requests();
    assert_eq!(reqs.len(), 1);
    let head = &reqs[0].head;
    assert!(
        head.starts_with(b"GET /p/a?x=1&y=%2F&z HTTP/1.1\r\n"),
        "{:?}",
        lossy(head)
    );
    assert!(head.ends_with(b"\r\n\r\n"), "{:?}", lossy(head));
    assert_crlf_only(head);
    for line in [
        &b"\r\nHost: example.test\r\n"[..],
        b"\r\nX-Obs: caf\xe9\xffbar\r\n",
        b"\r\nUser-Agent: edge/1.0\r\n",
    ] {
        assert!(
            contains(head, line),
            "{:?} missing in {:?}",
            lossy(line),
            lossy(head)
        );
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_and_field_bytes_pass_unchanged() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let target = "/a/../b/%2e%2E/c;p=1?q=a%20b&&s=/x?y=%2F+z";
    let mut c = Client::connect(addr).await;
    let req = format!(
        "GET {target} HTTP/1.1\r\nHost: Example.TEST:8080\r\nX-Mixed-CASE: A  b\tc\r\nCookie: a=1; b=2\r\nX-Empty:\r\n\
         X-Quote: \"q,\\\"x\"\r\nAccept: */*\r\n\r\n"
    );
    let mut bytes = req.into_bytes();
    // obs-text (RFC 9110 §5.5) in a value, inserted before the final CRLF CRLF.
    let at = bytes.len() - 2;
    bytes.splice(at..at, b"X-Latin: \xc0\xff\x80 end\r\n".iter().copied());
    c.send(&bytes).await.unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    let reqs = backend.requests();
    let head = &reqs[0].head;
    assert!(
        head.starts_with(format!("GET {target} HTTP/1.1\r\n").as_bytes()),
        "{:?}",
        lossy(head)
    );
    for line in [
        &b"\r\nHost: Example.TEST:8080\r\n"[..],
        b"\r\nX-Mixed-CASE: A  b\tc\r\n",
        b"\r\nCookie: a=1; b=2\r\n",
        b"\r\nX-Quote: \"q,\\\"x\"\r\n",
        b"\r\nAccept: */*\r\n",
        b"\r\nX-Latin: \xc0\xff\x80 end\r\n",
    ] {
        assert!(
            contains(head, line),
            "{:?} missing in {:?}",
            lossy(line),
            lossy(head)
        );
    }
    assert_eq!(
        field_values(&reqs[0].fields, "x-empty"),
        vec![&b""[..]],
        "{:?}",
        lossy(head)
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §7.6.1: Connection, the fields it names, Keep-Alive, Proxy-Connection, TE
/// are removed before forwarding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_request_fields_removed() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(
        b"GET /hop HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-SECRET\r\nKeep-Alive: timeout=5\r\n\
          Proxy-Connection: keep-alive\r\nTE: trailers, deflate\r\nx-secret: s1\r\nconnection: Foo\r\n\
          FOO: f\r\nX-Keep: yes\r\n\r\n",
    )
    .await
    .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    let reqs = backend.requests();
    let q = &reqs[0];
    for gone in ["keep-alive", "proxy-connection", "te", "x-secret", "foo"] {
        assert!(
            field_values(&q.fields, gone).is_empty(),
            "{gone} forwarded: {:?}",
            lossy(&q.head)
        );
    }
    for t in field_tokens(&q.fields, "connection") {
        assert!(
            t == "keep-alive" || t == "close",
            "Connection option {t:?} forwarded: {:?}",
            lossy(&q.head)
        );
    }
    assert_eq!(field_values(&q.fields, "x-keep"), vec![&b"yes"[..]]);
    // The client connection stays usable (HTTP/1.1 keep-alive).
    c.send(b"GET /again HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.body, b"GET /again 0");
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_appended() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let cases: [(&[u8], &str); 3] = [
        (b"GET /x1 HTTP/1.1\r\nHost: h\r\n\r\n", "127.0.0.1"),
        (b"GET /x2 HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 10.1.2.3\r\n\r\n", "10.1.2.3, 127.0.0.1"),
        (
            b"GET /x3 HTTP/1.1\r\nHost: h\r\nx-forwarded-for: 1.1.1.1\r\nX-Forwarded-For: 2.2.2.2, 3.3.3.3\r\n\r\n",
            "1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1",
        ),
    ];
    let mut c = Client::connect(addr).await;
    for (i, (req, want)) in cases.iter().enumerate() {
        c.send(req).await.unwrap();
        assert_eq!(c.response(false).await.status, 200);
        let reqs = backend.requests();
        let q = &reqs[i];
        let joined: Vec<String> = field_values(&q.fields, "x-forwarded-for")
            .iter()
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        assert_eq!(joined.join(", "), *want, "head {:?}", lossy(&q.head));
    }
    // The simple case must be exactly one appended field.
    assert!(contains(
        &backend.requests()[0].head,
        b"\r\nX-Forwarded-For: 127.0.0.1\r\n"
    ));
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_request_forwarded_as_http11_and_closed() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /ten?a=b HTTP/1.0\r\nHost: h\r\nUser-Agent: old\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"GET /ten?a=b 0");
    // RFC 9112 §9.3: HTTP/1.0 without keep-alive -> close after the response.
    c.expect_closed().await;
    let reqs = backend.requests();
    assert!(
        reqs[0].head.starts_with(b"GET /ten?a=b HTTP/1.1\r\n"),
        "{:?}",
        lossy(&reqs[0].head)
    );
    assert_crlf_only(&reqs[0].head);
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §3.2: a client MUST send Host in every HTTP/1.1 request; when the switch
/// upgrades an HTTP/1.0 request without Host it has to supply one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_without_host_gets_one_host_when_forwarded_as_http11() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /nohost HTTP/1.0\r\n\r\n").await.unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    let reqs = backend.requests();
    assert!(reqs[0].head.starts_with(b"GET /nohost HTTP/1.1\r\n"));
    assert_eq!(
        field_values(&reqs[0].fields, "host").len(),
        1,
        "HTTP/1.1 request without exactly one Host: {:?}",
        lossy(&reqs[0].head)
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

/// Sends each target on one connection through a switch whose only rule sends paths under
/// `/b/` to backend "B" (everything else to "A"), and checks which backend answered.
async fn expect_path_routing(cases: &[(&str, &str)]) {
    let a = Backend::start(Arc::new(|_: &Req| Reply::Send(ok_response(b"A")))).await;
    let b = Backend::start(Arc::new(|_: &Req| Reply::Send(ok_response(b"B")))).await;
    let toml = format!(
        "{}[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"a\"\n\n\
         [[virtual.web.rule]]\npath = \"^/b/\"\npool = \"b\"\n\n\
         [pool.a]\nscheduler = \"wlc\"\nservers = [{}]\n\n[pool.b]\nscheduler = \"rr\"\nservers = [{}]\n",
        switch_section(&OPTS),
        server_list(&[a.addr]),
        server_list(&[b.addr])
    );
    let (switch, addr) = start_switch(&toml).await;
    let mut c = Client::connect(addr).await;
    for &(target, want) in cases {
        c.send(format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200, "target {target}: {:?}", lossy(&r.body));
        assert_eq!(String::from_utf8_lossy(&r.body), want, "target {target}");
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

/// Spec: path rules match the path only, query excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_rule_ignores_query() {
    expect_path_routing(&[
        ("/b/x", "B"),
        ("/x?/b/", "A"),
        ("/b/?q=1", "B"),
        ("/bb/", "A"),
        ("/x?p=/b/", "A"),
    ])
    .await;
}

/// RFC 9112 §3.2.2: a server MUST accept the absolute-form; the path rule applies to
/// the path component of the target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_form_target_accepted_and_routed_by_path() {
    expect_path_routing(&[
        ("http://h/b/x?q=1", "B"),
        ("http://h/x?/b/", "A"),
        ("HTTP://h:80/b/", "B"),
    ])
    .await;
}

// ---------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------

/// Backend answering by target; unknown targets get "ok".
fn by_target(map: Vec<(&'static str, Vec<u8>)>) -> Script {
    Arc::new(move |r: &Req| {
        for (t, resp) in &map {
            if r.target == *t {
                return Reply::Send(resp.clone());
            }
        }
        Reply::Send(ok_response(format!("{} {}", r.method, r.target).as_bytes()))
    })
}

/// RFC 9112 §6.3 (1): HEAD, 1xx, 204, 304 responses end at the header section.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodyless_responses_end_at_head() {
    let backend = Backend::start(by_target(vec![
        (
            "/h1",
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n".to_vec(),
        ),
        (
            "/h2",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
        ),
        (
            "/204",
            b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n".to_vec(),
        ),
        (
            "/304",
            b"HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\nETag: \"e\"\r\n\r\n".to_vec(),
        ),
    ]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    for (req, head_req, status) in [
        (&b"HEAD /h1 HTTP/1.1\r\nHost: h\r\n\r\n"[..], true, 200),
        (b"HEAD /h2 HTTP/1.1\r\nHost: h\r\n\r\n", true, 200),
        (b"GET /204 HTTP/1.1\r\nHost: h\r\n\r\n", false, 204),
        (b"GET /304 HTTP/1.1\r\nHost: h\r\n\r\n", false, 304),
    ] {
        c.send(req).await.unwrap();
        let r = c.response(head_req).await;
        assert_eq!(r.status, status, "{}", lossy(req));
        // Next request on the same connection must get its own, clean response.
        c.send(b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200, "after {}", lossy(req));
        assert_eq!(r.body, b"GET /after", "after {}", lossy(req));
    }
    // Same thing pipelined in one write.
    let mut c = Client::connect(addr).await;
    c.send(b"HEAD /h1 HTTP/1.1\r\nHost: h\r\n\r\nGET /304 HTTP/1.1\r\nHost: h\r\n\r\nGET /204 HTTP/1.1\r\nHost: h\r\n\r\nGET /end HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(true).await.status, 200);
    assert_eq!(c.response(false).await.status, 304);
    assert_eq!(c.response(false).await.status, 204);
    assert_eq!(c.response(false).await.body, b"GET /end");
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §10.1.1 / §15.2.1: 100 Continue reaches an HTTP/1.1 client that waits
/// for it before sending the body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn continue_100_relayed_to_http11_client() {
    let backend = Backend::start_with(echo(), true).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(
        r.status, 100,
        "expected interim 100 before the body is sent"
    );
    assert!(r.body.is_empty());
    c.send(b"hello").await.unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"POST /up 5");
    assert_eq!(backend.requests()[0].body, b"hello");
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §15.2: a proxy MUST forward 1xx responses (here 103 then 200).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interim_103_relayed_then_final_response() {
    let backend = Backend::start(by_target(vec![(
        "/early",
        b"HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    )]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /early HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 103);
    assert_eq!(r.header("link"), Some(&b"</s.css>; rel=preload"[..]));
    let r = c.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"ok"[..]));
    c.send(b"GET /next HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.body, b"GET /next");
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §15.2: a server MUST NOT send a 1xx response to an HTTP/1.0 client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_interim_response_to_http10_client() {
    let backend = Backend::start(by_target(vec![(
        "/early",
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    )]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /early HTTP/1.0\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(
        r.status,
        200,
        "first response to an HTTP/1.0 client: {:?}",
        lossy(&r.head)
    );
    assert_eq!(r.body, b"ok");
    c.expect_closed().await;
    switch.shutdown(Duration::from_millis(200)).await;
}

const CHUNKED_RESPONSE: &[u8] =
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_response_dechunked_for_http10_client() {
    let backend = Backend::start(by_target(vec![("/chunked", CHUNKED_RESPONSE.to_vec())])).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /chunked HTTP/1.0\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let raw = c
        .rest_until_close()
        .await
        .expect("switch must close the HTTP/1.0 connection");
    let end = head_end(&raw).unwrap_or_else(|| panic!("no head in {:?}", lossy(&raw)));
    let (_, status, fields) = parse_status_head(&raw[..end]).expect("status line");
    assert_eq!(status, 200);
    assert!(
        field_values(&fields, "transfer-encoding").is_empty(),
        "Transfer-Encoding sent to an HTTP/1.0 client: {:?}",
        lossy(&raw)
    );
    assert_eq!(field_values(&fields, "x-up"), vec![&b"1"[..]]);
    let body = &raw[end..];
    assert_eq!(body, b"hello world", "raw {:?}", lossy(&raw));
    if let Some(cl) = content_length(&fields) {
        assert_eq!(cl, 11);
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_response_relayed_to_http11_client() {
    let backend = Backend::start(by_target(vec![("/chunked", CHUNKED_RESPONSE.to_vec())])).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /chunked HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"hello world"[..]));
    c.send(b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.body, b"GET /after");
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §6.3 (8): close-delimited response; the switch relays until the server
/// closes, then closes the client connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_without_length_relayed_until_close() {
    let body = pattern(200_000, 3);
    let mut resp = b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n".to_vec();
    resp.extend_from_slice(&body);
    let backend = Backend::start(Arc::new(move |_: &Req| Reply::SendClose(resp.clone()))).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    for version in ["1.1", "1.0"] {
        let mut c = Client::connect(addr).await;
        c.send(format!("GET /stream HTTP/{version}\r\nHost: h\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert!(
            r.body == body,
            "HTTP/{version}: body differs ({} bytes)",
            r.body.len()
        );
        c.expect_closed().await;
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §7.6.1 applies to responses too: fields named in Connection and
/// Keep-Alive are not forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_response_fields_removed() {
    let backend = Backend::start(by_target(vec![(
        "/hop",
        b"HTTP/1.1 200 OK\r\nConnection: X-Internal\r\nX-Internal: secret\r\nKeep-Alive: timeout=99\r\nX-Public: p\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    )]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /hop HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.body, b"ok");
    assert!(r.header("x-internal").is_none(), "{:?}", lossy(&r.head));
    assert!(!contains(&r.head, b"timeout=99"), "{:?}", lossy(&r.head));
    assert!(!field_tokens(&r.fields, "connection").contains(&"x-internal".to_string()));
    assert_eq!(r.header("x-public"), Some(&b"p"[..]));
    switch.shutdown(Duration::from_millis(200)).await;
}

/// A response cut short must not be completed by the switch: the client sees the
/// connection closed before the declared end of the body (or a 502).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_or_broken_response_bodies_are_not_completed() {
    let backend = Backend::start(Arc::new(|r: &Req| match r.target.as_str() {
        "/short" => Reply::SendClose(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789".to_vec()),
        "/shortchunk" => Reply::SendClose(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n".to_vec()),
        // Invalid chunk size, and the server keeps the connection open.
        _ => Reply::Send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\nmore\r\n0\r\n\r\n".to_vec()),
    }))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut failures = Vec::new();
    for target in ["/short", "/shortchunk", "/badchunk"] {
        let mut c = Client::connect(addr).await;
        c.send(format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let raw = match c.rest_until_close().await {
            Ok(raw) => raw,
            Err(e) => {
                failures.push(format!("{target}: client connection not closed: {e}"));
                continue;
            }
        };
        let Some(end) = head_end(&raw) else {
            continue; // closed without a response: acceptable
        };
        let Some((_, status, fields)) = parse_status_head(&raw[..end]) else {
            failures.push(format!("{target}: garbage to client {:?}", lossy(&raw)));
            continue;
        };
        let body = &raw[end..];
        if status == 502 {
            continue;
        }
        if is_chunked(&fields) {
            if let Ok(Some(_)) = decode_chunked(body) {
                failures.push(format!(
                    "{target}: switch completed the chunked body: {:?}",
                    lossy(&raw)
                ));
            }
        } else if let Some(n) = content_length(&fields) {
            if body.len() >= n {
                failures.push(format!(
                    "{target}: switch completed Content-Length body: {:?}",
                    lossy(&raw)
                ));
            }
        } else {
            failures.push(format!(
                "{target}: truncated response re-framed as close-delimited, client cannot detect it: {:?}",
                lossy(&raw)
            ));
        }
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// RFC 9112 §6.3: data after a complete response MUST NOT be forwarded as a separate
/// response (cache-poisoning / response-splitting defence).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extra_bytes_after_response_never_forwarded_as_response() {
    let backend = Backend::start(by_target(vec![
        (
            "/first",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nspoofd".to_vec(),
        ),
        ("/second", ok_response(b"second")),
    ]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /first HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(c.response(false).await.body, b"first");
    tokio::time::sleep(Duration::from_millis(100)).await;
    for round in 0..2 {
        let sent = c.send(b"GET /second HTTP/1.1\r\nHost: h\r\n\r\n").await;
        let r = match (sent, c.try_response(false).await) {
            (Ok(()), Ok(r)) => r,
            _ => {
                // The switch may close the client connection; retry on a new one.
                c = Client::connect(addr).await;
                c.send(b"GET /second HTTP/1.1\r\nHost: h\r\n\r\n")
                    .await
                    .unwrap();
                c.response(false).await
            }
        };
        assert_eq!(String::from_utf8_lossy(&r.body), "second", "round {round}");
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §6.3 (3): a response with both Transfer-Encoding and Content-Length is
/// an error; an intermediary forwarding it MUST drop Content-Length and use chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_with_cl_and_te_not_relayed_ambiguously() {
    let backend = Backend::start(by_target(vec![(
        "/both",
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n".to_vec(),
    )]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /both HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    if r.status != 502 {
        assert_eq!(r.status, 200);
        assert!(
            !(r.header("content-length").is_some() && r.header("transfer-encoding").is_some()),
            "forwarded with both CL and TE: {:?}",
            lossy(&r.head)
        );
        assert_eq!(r.body, b"hello", "head {:?}", lossy(&r.head));
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §5.2: obs-fold in a response: a proxy MUST either answer 502 or replace
/// each obs-fold with SP before forwarding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_obs_fold_rejected_or_unfolded() {
    let backend = Backend::start(by_target(vec![(
        "/fold",
        b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok".to_vec(),
    )]))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /fold HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    if r.status != 502 {
        assert_eq!(r.status, 200);
        assert!(
            !contains(&r.head, b"\n ") && !contains(&r.head, b"\n\t"),
            "obs-fold forwarded: {:?}",
            lossy(&r.head)
        );
        assert_eq!(r.body, b"ok");
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

// ---------------------------------------------------------------------------------
// Switch errors
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_backend_connection_is_502() {
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (switch, addr) = start_switch(&config_one_pool(&[dead], &OPTS)).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").await.unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 502, "{:?}", lossy(&r.head));
    check_error_body(&r).unwrap();
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §4, §6.3 (5): invalid server responses -> 502 to the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_backend_responses_are_502() {
    let cases: Vec<(&'static str, Vec<u8>)> = vec![
        ("/garbage", b"garbage\r\n\r\n".to_vec()),
        ("/icy", b"ICY 200 OK\r\n\r\nstream".to_vec()),
        (
            "/http2",
            b"HTTP/2.0 200 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        ),
        (
            "/status",
            b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        ),
        (
            "/twocl",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab".to_vec(),
        ),
        (
            "/listcl",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\nab".to_vec(),
        ),
        (
            "/negcl",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nab".to_vec(),
        ),
        ("/binary", vec![0u8, 159, 146, 150, 255, 13, 10, 13, 10]),
        ("/empty", Vec::new()),
    ];
    let backend = Backend::start(Arc::new({
        let cases = cases.clone();
        move |r: &Req| {
            let resp = cases
                .iter()
                .find(|(t, _)| *t == r.target)
                .map(|(_, b)| b.clone());
            Reply::SendClose(resp.unwrap_or_default())
        }
    }))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut failures = Vec::new();
    for (target, _) in &cases {
        let mut c = Client::connect(addr).await;
        c.send(format!("GET {target} HTTP/1.1\r\nHost: h\r\n\r\n").as_bytes())
            .await
            .unwrap();
        match c.try_response(false).await {
            Ok(r) if r.status == 502 => {
                if let Err(e) = check_error_body(&r) {
                    failures.push(format!("{target}: {e}"));
                }
            }
            other => failures.push(format!("{target}: expected 502, got {other:?}")),
        }
    }
    switch.shutdown(Duration::from_millis(200)).await;
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Spec: 503 when no server is usable (all servers quiesced with weight 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_usable_server_is_503() {
    let backend = Backend::start(echo()).await;
    let toml = format!(
        "{}[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"a\"\n\n\
         [pool.a]\nscheduler = \"wlc\"\nservers = [{{ addr = \"{}\", weight = 0 }}]\n",
        switch_section(&OPTS),
        backend.addr
    );
    let (switch, addr) = start_switch(&toml).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n").await.unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 503, "{:?}", lossy(&r.head));
    check_error_body(&r).unwrap();
    assert_eq!(backend.total_bytes(), 0);
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_backend_is_504() {
    let backend = Backend::start(Arc::new(|_: &Req| Reply::Silent)).await;
    let opts = Opts {
        idle_timeout: "1s",
        ..OPTS
    };
    let (switch, addr) = simple_switch(&backend, &opts).await;
    let mut c = Client::connect(addr).await;
    c.send(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 504, "{:?}", lossy(&r.head));
    check_error_body(&r).unwrap();
    assert_eq!(backend.requests().len(), 1);
    switch.shutdown(Duration::from_millis(200)).await;
}

/// Spec: header_timeout bounds the whole request head (also against slowloris).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_head_is_408() {
    let backend = Backend::start(echo()).await;
    let opts = Opts {
        header_timeout: "1s",
        ..OPTS
    };
    let (switch, addr) = simple_switch(&backend, &opts).await;

    let mut c = Client::connect(addr).await;
    c.send(b"GET /partial HTTP/1.1\r\nHost: h\r\n")
        .await
        .unwrap();
    let r = c.response(false).await;
    assert_eq!(r.status, 408);
    check_error_body(&r).unwrap();
    c.expect_closed().await;

    // One byte every 150 ms: each gap is short, the head never completes.
    let mut c = Client::connect(addr).await;
    let mut wr = c.wr.take().unwrap();
    let dribble = tokio::spawn(async move {
        let line = b"GET /slow HTTP/1.1\r\nHost: h\r\nX-Slow: ";
        for i in 0..40 {
            let byte = line.get(i).copied().unwrap_or(b'z');
            if wr.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
    });
    let r = c.response(false).await;
    assert_eq!(r.status, 408, "slowloris");
    dribble.abort();
    assert_eq!(backend.total_bytes(), 0);
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §9.6: after "close" from the client, the final response carries
/// Connection: close and the connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_connection_close_honoured() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    for value in ["close", "CLOSE", "foo, Close"] {
        let mut c = Client::connect(addr).await;
        c.send(format!("GET /c HTTP/1.1\r\nHost: h\r\nConnection: {value}\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert!(
            field_tokens(&r.fields, "connection").contains(&"close".to_string()),
            "Connection: {value} -> response head {:?}",
            lossy(&r.head)
        );
        c.expect_closed().await;
    }
    switch.shutdown(Duration::from_millis(200)).await;
}

// ---------------------------------------------------------------------------------
// Pipelining
// ---------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_answered_in_order() {
    let backend = Backend::start(Arc::new(|r: &Req| {
        let body = ok_response(
            format!(
                "{} {} {}",
                r.method,
                r.target,
                String::from_utf8_lossy(&r.body)
            )
            .as_bytes(),
        );
        if r.target == "/1" {
            Reply::Delay(Duration::from_millis(300), body)
        } else {
            Reply::Send(body)
        }
    }))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(
        b"GET /1 HTTP/1.1\r\nHost: h\r\n\r\nGET /2 HTTP/1.1\r\nHost: h\r\n\r\nPOST /3 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc\
          POST /4 HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nde\r\n0\r\n\r\nHEAD /5 HTTP/1.1\r\nHost: h\r\n\r\nGET /6 HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for i in 1..=6 {
        let r = c.response(i == 5).await;
        assert_eq!(r.status, 200);
        got.push(String::from_utf8_lossy(&r.body).into_owned());
    }
    assert_eq!(
        got,
        [
            "GET /1 ",
            "GET /2 ",
            "POST /3 abc",
            "POST /4 de",
            "",
            "GET /6 "
        ]
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9112 §9.6: a server that receives "close" MUST NOT process further requests
/// on that connection; HTTP/1.0 without keep-alive likewise ends after one response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_pipelined_after_close_are_not_processed() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    for first in [
        &b"GET /first HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"[..],
        b"GET /first HTTP/1.0\r\nHost: h\r\n\r\n",
    ] {
        let mut c = Client::connect(addr).await;
        let mut req = first.to_vec();
        req.extend_from_slice(b"GET /second HTTP/1.1\r\nHost: h\r\n\r\n");
        c.send(&req).await.unwrap();
        let r = c.response(false).await;
        assert_eq!(r.body, b"GET /first 0");
        c.expect_closed().await;
    }
    sessions_ended(&switch).await;
    assert_eq!(forwarded(&switch), 2, "only the two first requests went up");
    let all = backend.all_bytes();
    assert!(
        !contains(&all, b"/second"),
        "processed after close: {:?}",
        lossy(&all)
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_ambiguous_request_never_reaches_backend() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(
        b"GET /ok1 HTTP/1.1\r\nHost: h\r\n\r\n\
          POST /amb HTTP/1.1\r\nHost: h\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
          GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n",
    )
    .await
    .unwrap();
    let r = c.response(false).await;
    assert_eq!((r.status, r.body.as_slice()), (200, &b"GET /ok1 0"[..]));
    let r = c.response(false).await;
    assert_eq!(r.status, 400);
    c.expect_closed().await;
    sessions_ended(&switch).await;
    assert_eq!(forwarded(&switch), 1, "only /ok1 went up");
    let all = backend.all_bytes();
    assert!(
        !contains(&all, b"/amb") && !contains(&all, b"/smuggled"),
        "{:?}",
        lossy(&all)
    );
    assert_eq!(backend.requests().len(), 1);
    switch.shutdown(Duration::from_millis(200)).await;
}

/// Bodies at and above splice_threshold (64 KiB) in both directions, with a request
/// pipelined right behind the large body: exact byte accounting at both ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_with_pipelined_follower_stay_framed() {
    let up = pattern(100_000, 1);
    let down = pattern(150_000, 2);
    let down2 = down.clone();
    let backend = Backend::start(Arc::new(move |r: &Req| {
        if r.target == "/big" {
            Reply::Send(ok_response(&down2))
        } else {
            Reply::Send(ok_response(
                format!("{} {} {}", r.method, r.target, r.body.len()).as_bytes(),
            ))
        }
    }))
    .await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    let mut req = format!(
        "POST /big HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
        up.len()
    )
    .into_bytes();
    req.extend_from_slice(&up);
    req.extend_from_slice(b"GET /after HTTP/1.1\r\nHost: h\r\n\r\n");
    req.extend_from_slice(
        format!(
            "POST /exact HTTP/1.1\r\nHost: h\r\nContent-Length: {}\r\n\r\n",
            65536
        )
        .as_bytes(),
    );
    req.extend_from_slice(&pattern(65536, 9));
    req.extend_from_slice(b"GET /last HTTP/1.1\r\nHost: h\r\n\r\n");
    let mut wr = c.wr.take().unwrap();
    let writer = tokio::spawn(async move {
        wr.write_all(&req).await.unwrap();
        wr
    });
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body == down,
        "large response body differs ({} bytes)",
        r.body.len()
    );
    assert_eq!(c.response(false).await.body, b"GET /after 0");
    assert_eq!(c.response(false).await.body, b"POST /exact 65536");
    assert_eq!(c.response(false).await.body, b"GET /last 0");
    c.wr = Some(writer.await.unwrap());
    let reqs = backend.requests();
    let targets: Vec<&str> = reqs.iter().map(|q| q.target.as_str()).collect();
    assert_eq!(targets, ["/big", "/after", "/exact", "/last"]);
    assert!(reqs[0].body == up, "large request body differs");
    assert!(
        reqs[2].body == pattern(65536, 9),
        "64 KiB request body differs"
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

// ---------------------------------------------------------------------------------
// Fuzz-ish robustness
// ---------------------------------------------------------------------------------

struct Prng(u64);

impl Prng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn fuzz_input(rng: &mut Prng, i: usize) -> Vec<u8> {
    const TEMPLATES: [&[u8]; 5] = [
        b"GET /a?b=c HTTP/1.1\r\nHost: h\r\nX-A: b\r\n\r\n",
        b"POST /p HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\n",
        b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\nHost: h\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive, X-A\r\nX-A: 1\r\nExpect: 100-continue\r\n\r\n",
        b"HEAD /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\nX-Forwarded-For: 1.2.3.4\r\n\r\n",
    ];
    const PIECES: [&[u8]; 22] = [
        b"GET ",
        b"POST ",
        b"HTTP/1.1",
        b"HTTP/1.0",
        b"HTTP/2.0",
        b"\r\n",
        b"\n",
        b"\r",
        b":",
        b" ",
        b"\t",
        b"Host: h",
        b"Content-Length: ",
        b"Transfer-Encoding: chunked",
        b"Connection: close",
        b"0",
        b"ffffffff",
        b";",
        b",",
        b"/",
        b"\r\n\r\n",
        b"\x80\xff\x00",
    ];
    match i % 4 {
        0 => (0..rng.below(600)).map(|_| rng.next() as u8).collect(),
        1 => {
            let mut v = Vec::new();
            for _ in 0..rng.below(40) {
                v.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
            v
        }
        _ => {
            let mut v = TEMPLATES[rng.below(TEMPLATES.len())].to_vec();
            for _ in 0..1 + rng.below(4) {
                if v.is_empty() {
                    break;
                }
                let at = rng.below(v.len());
                match rng.below(6) {
                    0 => v[at] ^= 1 << rng.below(8),
                    1 => v[at] = rng.next() as u8,
                    2 => {
                        let end = (at + rng.below(8)).min(v.len());
                        v.drain(at..end);
                    }
                    3 => v.insert(at, [b'\r', b'\n', b' ', b':', b'\0', 0xff][rng.below(6)]),
                    4 => v.truncate(at),
                    _ => {
                        let end = (at + rng.below(16)).min(v.len());
                        let dup = v[at..end].to_vec();
                        v.splice(at..at, dup);
                    }
                }
            }
            v
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_inputs_no_panic_no_leak() {
    let backend = Backend::start(echo()).await;
    let opts = Opts {
        header_timeout: "1s",
        idle_timeout: "2s",
        keepalive_timeout: "1s",
    };
    let (switch, addr) = simple_switch(&backend, &opts).await;
    let mut rng = Prng(0x9e37_79b9_7f4a_7c15);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..200 {
        let input = fuzz_input(&mut rng, i);
        let half_close = rng.below(2) == 0;
        tasks.spawn(async move {
            let Ok(Ok(s)) = tokio::time::timeout(WAIT, TcpStream::connect(addr)).await else {
                return Err(format!("input {i}: connect failed"));
            };
            let (mut rd, mut wr) = s.into_split();
            let _ = wr.write_all(&input).await;
            if half_close {
                let _ = wr.shutdown().await;
            }
            let mut sink = vec![0u8; 65536];
            let _ = tokio::time::timeout(Duration::from_secs(4), async {
                loop {
                    match rd.read(&mut sink).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            Ok(())
        });
    }
    let mut failures = Vec::new();
    while let Some(res) = tasks.join_next().await {
        match res {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failures.push(e),
            Err(e) => failures.push(format!("a fuzz client task failed: {e}")),
        }
    }
    // Still serving.
    let mut c = Client::connect(addr).await;
    c.send(b"GET /alive HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    match c.try_response(false).await {
        Ok(r) if r.status == 200 && r.body == b"GET /alive 0" => {}
        other => failures.push(format!("normal GET after fuzzing: {other:?}")),
    }
    drop(c);
    // No leaked client connections.
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut clients = switch.stats().clients;
    while clients != 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clients = switch.stats().clients;
    }
    if clients != 0 {
        failures.push(format!(
            "stats().clients still {clients} 5 s after all clients left"
        ));
    }
    let panics = FOREIGN_PANICS.load(Ordering::SeqCst);
    if panics != 0 {
        failures.push(format!("{panics} panic(s) outside the test code"));
    }
    let left = switch.shutdown(Duration::from_secs(1)).await;
    if left != 0 {
        failures.push(format!("shutdown left {left} connection(s) open"));
    }
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------------------------
// Framing nobody can misread (issue 13): what a strict or a lenient server could read
// differently from the switch is refused, or goes on in its one canonical form
// ---------------------------------------------------------------------------------

/// RFC 9110 §5.6.1.1 (no empty list elements), RFC 9112 §7.1 (chunked has no parameters),
/// RFC 9110 §8.6 (lengths a server cannot hold), RFC 9110 §9.3.6 (CONNECT has no content),
/// and field names a CGI-style server reads as framing or forwarding fields.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_a_server_could_misread_is_400() {
    run_refused(
        &[
            ("chunked,", post("Transfer-Encoding: chunked,\r\n", "0\r\n\r\n")),
            (", chunked", post("Transfer-Encoding: , chunked\r\n", "0\r\n\r\n")),
            ("chunked;q=1", post("Transfer-Encoding: chunked;q=1\r\n", "0\r\n\r\n")),
            (
                "CL 2^63",
                post("Content-Length: 9223372036854775808\r\n", ""),
            ),
            (
                "CL 20 digits",
                post("Content-Length: 18446744073709551615\r\n", ""),
            ),
            ("Content_Length", post("Content_Length: 5\r\n", "hello")),
            (
                "Transfer_Encoding",
                post("Transfer_Encoding: chunked\r\n", "0\r\n\r\n"),
            ),
            // A forwarding field too: a CGI-style server would read a forged client address
            // beside the one the switch appends.
            (
                "X_Forwarded_For",
                b"GET /submit HTTP/1.1\r\nHost: h\r\nX_Forwarded_For: 6.6.6.6\r\n\r\n".to_vec(),
            ),
            (
                "x_forwarded_proto",
                b"GET /submit HTTP/1.1\r\nHost: h\r\nx_forwarded_proto: https\r\n\r\n".to_vec(),
            ),
            (
                "CONNECT with a body",
                b"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\nContent-Length: 5\r\n\r\nhello"
                    .to_vec(),
            ),
        ],
        400,
    )
    .await;
}

/// RFC 9112 §6.1: a coding the switch does not decode is 501 (as nginx answers), not
/// forwarded for a server that may ignore it and read the chunked body as requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_codings_other_than_chunked_are_501() {
    run_refused(
        &[
            (
                "gzip, chunked",
                post("Transfer-Encoding: gzip, chunked\r\n", "0\r\n\r\n"),
            ),
            (
                "two fields",
                post(
                    "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
                    "0\r\n\r\n",
                ),
            ),
        ],
        501,
    )
    .await;
}

/// What the server receives: `Transfer-Encoding: chunked` in that one form whatever the
/// client's spelling, and trailer fields rebuilt without the ones that must not be trailers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_and_trailers_reach_the_server_rebuilt() {
    let backend = Backend::start(echo()).await;
    let (switch, addr) = simple_switch(&backend, &OPTS).await;
    let mut c = Client::connect(addr).await;
    c.send(&post(
        "Transfer-Encoding: \t CHUNKED \t\r\n",
        "b\r\nhello world\r\n0\r\nX-Sum:  7 \r\nHost: evil.example\r\nX-Forwarded-For: 6.6.6.6\r\nContent-Length: 99\r\n\r\n",
    ))
    .await
    .unwrap();
    let r = c.try_response(false).await.expect("a response");
    assert_eq!(r.status, 200);
    let seen = backend.all_bytes();
    let head_end = find(&seen, b"\r\n\r\n").expect("a head") + 4;
    let head = &seen[..head_end];
    assert!(
        contains(head, b"\r\nTransfer-Encoding: chunked\r\n"),
        "{}",
        lossy(head)
    );
    assert!(!contains(head, b"CHUNKED"), "{}", lossy(head));
    let body = &seen[head_end..];
    assert_eq!(
        body,
        b"b\r\nhello world\r\n0\r\nX-Sum: 7\r\n\r\n",
        "{}",
        lossy(body)
    );
    switch.shutdown(Duration::from_millis(200)).await;
}

/// RFC 9110 §10.1.1: a server that answers before it has the whole request body may not
/// read the rest as this request's; the switch does not reuse that connection, even when
/// the upload ends while the answer is still coming down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_answered_before_the_body_is_not_reused() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    // A head: answered at once, its body (if any) not waited for; the answer's
                    // last bytes go once 20 more bytes have come.
                    while find(&buf, b"\r\n\r\n").is_none() {
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    let end = find(&buf, b"\r\n\r\n").unwrap() + 4;
                    let early = buf.starts_with(b"POST");
                    buf.drain(..end);
                    if !early {
                        let _ = s.write_all(&ok_response(b"second")).await;
                        continue;
                    }
                    let _ = s
                        .write_all(
                            b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 10\r\n\r\n01234",
                        )
                        .await;
                    while buf.len() < 20 {
                        match s.read(&mut tmp).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&tmp[..n]),
                        }
                    }
                    buf.drain(..20);
                    let _ = s.write_all(b"56789").await;
                }
            });
        }
    });
    let (switch, addr) = start_switch(&config_one_pool(&[server], &OPTS)).await;
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"POST /up HTTP/1.1\r\nHost: h\r\nContent-Length: 20\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut tmp = [0u8; 4096];
    while find(&answer, b"\r\n\r\n").is_none_or(|at| answer.len() < at + 4 + 5) {
        let n = tokio::time::timeout(WAIT, client.read(&mut tmp))
            .await
            .expect("the early answer")
            .unwrap();
        assert!(n > 0, "closed early: {}", lossy(&answer));
        answer.extend_from_slice(&tmp[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 413"), "{}", lossy(&answer));
    client
        .write_all(b"GET /smuggled HTTP/1.1\r\nH: x\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    let _ = tokio::time::timeout(WAIT, client.read_to_end(&mut rest))
        .await
        .expect("the rest, then the close");
    answer.extend_from_slice(&rest);
    assert!(answer.ends_with(b"0123456789"), "{}", lossy(&answer));
    sessions_ended(&switch).await;

    let mut second = Client::connect(addr).await;
    second
        .send(b"GET /second HTTP/1.1\r\nHost: h\r\n\r\n")
        .await
        .unwrap();
    let r = second.try_response(false).await.expect("a response");
    assert_eq!((r.status, &r.body[..]), (200, &b"second"[..]));
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the second request went on a new server connection"
    );
    switch.shutdown(Duration::from_millis(200)).await;
}
