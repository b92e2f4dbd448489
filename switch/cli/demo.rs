//! `tcpvs demo`: small in-process web servers standing in for the demo pools, so content
//! switching is visible at once. Every answer carries `X-Served-By: <addr>`.
//!
//! - a pool named `images` answers with real PNG pictures, coloured by server;
//! - a pool named `cgi` computes its answer per request, sent chunked like CGI output;
//! - any other pool serves an HTML page that names pool, server and path, and pulls images and
//!   CGI output from the other pools.

use rustls::sign::CertifiedKey;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tcpvs::buffer::IoBuf;
use tcpvs::config::Config;
use tcpvs::edge::tls::Certificate;
use tcpvs::http::{parse_request, BodyFraming, RequestHead};
use tcpvs::listener;
use tcpvs::socket::{Listener, Socket};
use tcpvs::stream::{read_some, write_all, TimeLimit};
use tcpvs::timeouts::{Timeouts, SESSION_TIMER};
use tokio::task::JoinHandle;

/// The built-in demo rule file.
pub const DEMO_RULES: &str = include_str!("../../rules/demo.toml");

/// The names the certificate of `tcpvs demo --tls` is for: the demo listens on loopback.
const CERTIFICATE_NAMES: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// How long that certificate is valid from now (a day back, for clocks a little behind).
const CERTIFICATE_DAYS: u32 = 30;

/// A self-signed certificate (ECDSA P-256) and its key for `tcpvs demo --tls`, made in memory
/// now: browsers speak HTTP/2 only over TLS, and the demo should need no files to show it.
/// Nobody vouches for it, so a browser warns until the user accepts it.
pub fn self_signed_certificate() -> Result<Certificate, String> {
    use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};
    const DAY: Duration = Duration::from_secs(24 * 60 * 60);
    let names: Vec<String> = CERTIFICATE_NAMES.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tcpvs demo (self-signed)");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| format!("the clock is before 1970: {e}"))?;
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + now.saturating_sub(DAY);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + now + DAY * CERTIFICATE_DAYS;
    let key_pair = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let certificate = params.self_signed(&key_pair).map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
    let signing =
        rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| e.to_string())?;
    Ok(Certificate {
        key: Arc::new(CertifiedKey::new(vec![certificate.der().clone()], signing)),
        // What SNI is matched against: its DNS name (the only certificate serves every name).
        names: vec![CERTIFICATE_NAMES[0].to_string()],
        cert_path: "(self-signed, made by tcpvs demo --tls)".into(),
        not_after: params.not_after.unix_timestamp(),
    })
}

/// Refuses to start when an address the demo needs is taken: its service (`listen`), its
/// monitor (`admin`), or one of its servers' (fixed by rules/demo.toml). The switch's own
/// message for a taken address suggests `--take-over`, which hands a running `tcpvs run`'s
/// listeners over and which the demo has no use for; here the advice is the demo's options.
/// A probe binds each address and lets go of it at once (std sets SO_REUSEADDR, so only a
/// listener there, not connections closing, makes it fail). The error is the message to print.
pub fn ensure_addresses_free(
    config: &Config,
    listen: SocketAddr,
    admin: SocketAddr,
) -> Result<(), String> {
    let taken = |addr: SocketAddr| {
        addr.port() != 0
            && matches!(std::net::TcpListener::bind(addr),
                Err(e) if e.kind() == io::ErrorKind::AddrInUse)
    };
    const WHO: &str = "another process listens there already (another tcpvs demo?)";
    if taken(listen) {
        return Err(format!(
            "tcpvs demo: cannot listen on {listen}: {WHO}: stop it, or give the demo another \
             address with --listen ADDR (127.0.0.1:0 takes a free port)"
        ));
    }
    if taken(admin) {
        return Err(format!(
            "tcpvs demo: cannot put the monitor on {admin}: {WHO}: stop it, or give the monitor \
             another address with --admin ADDR (127.0.0.1:0 takes a free port)"
        ));
    }
    let servers = config.pools.iter().flat_map(|pool| {
        pool.servers
            .iter()
            .map(move |server| (pool.name.as_str(), server.addr))
    });
    for (pool, addr) in servers.filter(|(_, addr)| addr.ip().is_loopback()) {
        if taken(addr) {
            return Err(format!(
                "tcpvs demo: cannot start the demo server of pool `{pool}` on {addr}: {WHO}: \
                 stop it (the demo's servers have fixed addresses, those of rules/demo.toml)"
            ));
        }
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Pages,
    Images,
    Cgi,
}

struct DemoServer {
    pool: String,
    addr: SocketAddr,
    /// Position in the pool, which picks the picture colour.
    index: usize,
    kind: Kind,
    requests: AtomicU64,
}

/// Starts a demo server on every loopback server address of `config`'s pools. Addresses that
/// are not loopback are left alone: they belong to real servers.
pub async fn start_demo_servers(config: &Config) -> io::Result<Vec<JoinHandle<()>>> {
    let timeouts = Timeouts::new();
    let mut tasks = vec![tokio::spawn(Arc::clone(&timeouts).run_sweeper())];
    for pool in &config.pools {
        let kind = match pool.name.as_str() {
            "images" => Kind::Images,
            "cgi" => Kind::Cgi,
            _ => Kind::Pages,
        };
        for (index, server) in pool.servers.iter().enumerate() {
            if !server.addr.ip().is_loopback() {
                continue;
            }
            let listener = listener::bind(server.addr, false, false).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "demo server for pool `{}` on {}: {e}",
                        pool.name, server.addr
                    ),
                )
            })?;
            let demo = Arc::new(DemoServer {
                pool: pool.name.clone(),
                addr: server.addr,
                index,
                kind,
                requests: AtomicU64::new(0),
            });
            tasks.push(tokio::spawn(serve(listener, demo, Arc::clone(&timeouts))));
        }
    }
    Ok(tasks)
}

async fn serve(listener: Listener, demo: Arc<DemoServer>, timeouts: Arc<Timeouts>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let demo = Arc::clone(&demo);
                tokio::spawn(SESSION_TIMER.scope(timeouts.register(), async move {
                    let _ = handle_connection(stream, &demo).await;
                }));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

async fn handle_connection(stream: Socket, demo: &DemoServer) -> io::Result<()> {
    let limit = TimeLimit::Idle(Duration::from_secs(60));
    let mut buf = IoBuf::with_capacity(64 * 1024);
    let mut head = RequestHead::default();
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        while !parse_request(buf.filled_mut(), &mut head)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
        {
            if read_some(&stream, &mut buf, limit).await? == 0 {
                return Ok(());
            }
        }
        let bytes = buf.filled();
        let path = String::from_utf8_lossy(head.path.get(bytes)).into_owned();
        let query = head
            .query
            .map(|q| String::from_utf8_lossy(q.get(bytes)).into_owned());
        let is_head = head.is_head;
        let keep_alive = head.keep_alive;
        let body_len = match head.framing {
            BodyFraming::Length(n) => n,
            BodyFraming::Empty => 0,
            // The demo pages take no uploads.
            _ => return Ok(()),
        };
        buf.consume(head.len);
        let mut left = body_len;
        while left > 0 {
            if buf.is_empty() && read_some(&stream, &mut buf, limit).await? == 0 {
                return Ok(());
            }
            let n = (buf.len() as u64).min(left) as usize;
            buf.consume(n);
            left -= n as u64;
        }
        let number = demo.requests.fetch_add(1, Ordering::Relaxed) + 1;
        out.clear();
        respond(demo, &path, query.as_deref(), number, is_head, &mut out);
        write_all(&stream, &out, limit).await?;
        if !keep_alive {
            return Ok(());
        }
    }
}

fn respond(
    demo: &DemoServer,
    path: &str,
    query: Option<&str>,
    number: u64,
    is_head: bool,
    out: &mut Vec<u8>,
) {
    match demo.kind {
        Kind::Images if path.ends_with(".svg") => {
            let body = svg_picture(demo, path);
            fixed_response(out, demo, "image/svg+xml", body.as_bytes(), is_head);
        }
        Kind::Images => {
            let body = png_picture(demo.index, path);
            fixed_response(out, demo, "image/png", &body, is_head);
        }
        Kind::Cgi => cgi_response(out, demo, path, query, number, is_head),
        Kind::Pages => {
            let body = html_page(demo, path, number);
            fixed_response(
                out,
                demo,
                "text/html; charset=utf-8",
                body.as_bytes(),
                is_head,
            );
        }
    }
}

fn fixed_response(
    out: &mut Vec<u8>,
    demo: &DemoServer,
    content_type: &str,
    body: &[u8],
    is_head: bool,
) {
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nX-Served-By: {}\r\nCache-Control: no-store\r\n\r\n",
        body.len(),
        demo.addr
    );
    if !is_head {
        out.extend_from_slice(body);
    }
}

fn html_page(demo: &DemoServer, path: &str, number: u64) -> String {
    let path = escape_html(path);
    let images: String = (1..=6)
        .map(|i| {
            format!(
                "<img src=\"/images/tile{i}.png\" width=\"64\" height=\"64\" alt=\"tile {i}\"> "
            )
        })
        .collect();
    format!(
        "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>tcpvs demo: {path}</title>\n\
         <style>body{{font-family:sans-serif;max-width:46em;margin:2em auto}}code{{background:#eee;padding:0 .3em}}</style></head>\n\
         <body><h1>tcpvs content switching demo</h1>\n\
         <p>This page <code>{path}</code> came from pool <b>{pool}</b>, server <b>{addr}</b> (its request #{number}).</p>\n\
         <p>Each picture below is a separate request, routed by the rule on its path to pool <b>images</b>; \
         its colour tells which image server drew it. The pool's LARD module keeps each picture on one server \
         (so that server's cache holds it) and spreads the pictures over both; reload and the colours stay:</p>\n<p>{images}</p>\n\
         <p>The CGI pool computes an answer per request: <a href=\"/cgi-bin/hello?name=visitor\">/cgi-bin/hello?name=visitor</a>.</p>\n\
         <p>Other pages: <a href=\"/about.html\">/about.html</a>, <a href=\"/images/logo.svg\">/images/logo.svg</a>. \
         Reload to watch the static pool's servers take turns by weight (1:2).</p>\n</body></html>\n",
        pool = escape_html(&demo.pool),
        addr = demo.addr,
    )
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// CGI-like output: computed now, length unknown in advance, so sent chunked.
fn cgi_response(
    out: &mut Vec<u8>,
    demo: &DemoServer,
    path: &str,
    query: Option<&str>,
    number: u64,
    is_head: bool,
) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let name = query
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("name=")))
        .filter(|n| !n.is_empty())
        .unwrap_or("world");
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(40)
        .collect();
    let body = format!(
        "Hello, {name}!\npool: {}\nserver: {}\npath: {path}\nquery: {}\nrequest number at this server: {number}\nunix time: {}.{:03}\n",
        demo.pool,
        demo.addr,
        query.unwrap_or(""),
        now.as_secs(),
        now.subsec_millis()
    );
    let _ = write!(
        out,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nTransfer-Encoding: chunked\r\nX-Served-By: {}\r\nCache-Control: no-store\r\n\r\n",
        demo.addr
    );
    if is_head {
        return;
    }
    for line in body.split_inclusive('\n') {
        let _ = write!(out, "{:x}\r\n{line}\r\n", line.len());
    }
    out.extend_from_slice(b"0\r\n\r\n");
}

/// Colours by server position, so two image servers are told apart at a glance.
const PALETTE: [[u8; 3]; 6] = [
    [0x1f, 0x77, 0xb4],
    [0xff, 0x7f, 0x0e],
    [0x2c, 0xa0, 0x2c],
    [0xd6, 0x27, 0x28],
    [0x94, 0x67, 0xbd],
    [0x8c, 0x56, 0x4b],
];

fn svg_picture(demo: &DemoServer, path: &str) -> String {
    let [r, g, b] = PALETTE[demo.index % PALETTE.len()];
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"240\" height=\"60\"><rect width=\"240\" height=\"60\" fill=\"#{r:02x}{g:02x}{b:02x}\"/>\
         <text x=\"10\" y=\"36\" fill=\"white\" font-family=\"sans-serif\" font-size=\"16\">{} {}</text></svg>\n",
        escape_html(path),
        demo.addr
    )
}

/// A 64x64 PNG in the server's colour with a diagonal stripe whose position depends on the path.
pub fn png_picture(server_index: usize, path: &str) -> Vec<u8> {
    const SIZE: usize = 64;
    let [r, g, b] = PALETTE[server_index % PALETTE.len()];
    let offset = path
        .bytes()
        .fold(0usize, |h, c| h.wrapping_mul(31).wrapping_add(c as usize))
        % SIZE;
    let mut pixels = Vec::with_capacity(SIZE * (1 + 3 * SIZE));
    for y in 0..SIZE {
        pixels.push(0); // filter type "none" for this row
        for x in 0..SIZE {
            let stripe = (x + y + offset) % SIZE < 8;
            let colour = if stripe { [255, 255, 255] } else { [r, g, b] };
            pixels.extend_from_slice(&colour);
        }
    }
    png::encode_rgb(SIZE as u32, SIZE as u32, &pixels)
}

/// A minimal PNG writer: uncompressed ("stored") deflate blocks inside zlib, CRC-32 and Adler-32.
/// Written by hand because the demo needs only a few solid pictures; an image crate would be a
/// large dependency for that.
mod png {
    pub fn encode_rgb(width: u32, height: u32, filtered_rows: &[u8]) -> Vec<u8> {
        let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
        let mut ihdr = Vec::with_capacity(13);
        ihdr.extend_from_slice(&width.to_be_bytes());
        ihdr.extend_from_slice(&height.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]); // 8 bits per channel, RGB, deflate, no filter, no interlace
        chunk(&mut out, b"IHDR", &ihdr);
        chunk(&mut out, b"IDAT", &zlib_stored(filtered_rows));
        chunk(&mut out, b"IEND", &[]);
        out
    }

    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let start = out.len();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let crc = crc32(&out[start..]);
        out.extend_from_slice(&crc.to_be_bytes());
    }

    fn zlib_stored(data: &[u8]) -> Vec<u8> {
        let mut out = vec![0x78, 0x01];
        let blocks: Vec<&[u8]> = if data.is_empty() {
            vec![&[][..]]
        } else {
            data.chunks(65_535).collect()
        };
        for (i, block) in blocks.iter().enumerate() {
            out.push(u8::from(i + 1 == blocks.len()));
            let len = block.len() as u16;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(&(!len).to_le_bytes());
            out.extend_from_slice(block);
        }
        out.extend_from_slice(&adler32(data).to_be_bytes());
        out
    }

    pub fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &byte in data {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    fn adler32(data: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in data {
            a = (a + u32::from(byte)) % 65_521;
            b = (b + a) % 65_521;
        }
        b << 16 | a
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn checksums_match_known_values() {
            assert_eq!(super::crc32(b"IEND"), 0xae42_6082);
            assert_eq!(super::crc32(b"123456789"), 0xcbf4_3926);
            assert_eq!(super::adler32(b"Wikipedia"), 0x11e6_0398);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_rules_load() {
        let config = Config::parse("rules/demo.toml", DEMO_RULES)
            .expect("the built-in demo rules are valid");
        let names: Vec<&str> = config.pools.iter().map(|p| p.name.as_str()).collect();
        for pool in ["static", "images", "cgi"] {
            assert!(names.contains(&pool), "demo has pool {pool}");
        }
    }

    #[test]
    fn the_self_signed_certificate_fits_its_key_and_is_valid_now() {
        let certificate = self_signed_certificate().expect("a certificate");
        assert!(certificate.key.keys_match().is_ok());
        assert!(!certificate.expired());
        assert_eq!(certificate.names, ["localhost"]);
        let (_, x509) = x509_parser::parse_x509_certificate(certificate.key.cert[0].as_ref())
            .expect("valid X.509");
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64;
        assert!(x509.validity().not_before.timestamp() < now);
        assert!(x509.validity().not_after.timestamp() > now + 29 * 24 * 3600);
    }

    #[test]
    fn png_has_signature_and_end() {
        let png = png_picture(1, "/images/a.png");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"));
        assert!(png.ends_with(&[0xae, 0x42, 0x60, 0x82]));
    }
}
