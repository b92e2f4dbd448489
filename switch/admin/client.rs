//! The command line's side of the admin endpoint: `tcpvs list`, `set-weight`, `set-state` and
//! `reload` each send one request and read one answer.
//!
//! The HTTP/1.1 client is written by hand over a blocking `std::net::TcpStream` (or
//! `UnixStream`, for an endpoint on a Unix socket): the command
//! line sends a single request, with `Connection: close`, to an endpoint that is normally on
//! loopback, and reads a single JSON answer. An HTTP client crate (with its own runtime, pools,
//! TLS and redirects) would be a heavy dependency for that; `httparse`, already used by the
//! switch, parses the answer's head, and the body is framed by its `Content-Length`, which the
//! endpoint always sends (an answer without one, or with a `Transfer-Encoding`, is refused).
//!
//! Errors say what to do: the switch not running (or not serving `[admin] listen`), a token
//! refused, an unknown pool or server, a body refused, reload not supported.

mod error;
mod http;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use error::Error;
use http::{exchange, Verb};
pub use http::{parse_answer, request_bytes, Answer};

/// How long to wait for the connection to the endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long one read or write may wait.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the admin endpoint listens: `127.0.0.1:9090` or `unix:/run/tcpvs/admin.sock`, as
/// `[admin] listen` and `--admin` write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Address {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for Address {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Address::Tcp(addr) => write!(f, "{addr}"),
            Address::Unix(path) => write!(f, "unix:{}", path.display()),
        }
    }
}

impl std::str::FromStr for Address {
    type Err = String;

    fn from_str(text: &str) -> Result<Address, String> {
        match text.strip_prefix("unix:") {
            Some("") => {
                Err("`unix:` needs the socket's path, like unix:/run/tcpvs/admin.sock".into())
            }
            Some(path) => Ok(Address::Unix(PathBuf::from(path))),
            None => text
                .parse()
                .map(Address::Tcp)
                .map_err(|_| format!("{text:?} is neither IP:PORT (127.0.0.1:9090) nor unix:PATH")),
        }
    }
}

impl From<&crate::config::admin::AdminListen> for Address {
    fn from(listen: &crate::config::admin::AdminListen) -> Address {
        match listen {
            crate::config::admin::AdminListen::Tcp(addr) => Address::Tcp(*addr),
            crate::config::admin::AdminListen::Unix { path, .. } => Address::Unix(path.clone()),
        }
    }
}

/// Where the admin endpoint is, and the token for changes (`Authorization: Bearer <token>`).
#[derive(Clone)]
pub struct Endpoint {
    pub addr: Address,
    pub token: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // The token stays out of debug output.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("addr", &self.addr)
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// The states an operator can ask for (`PUT /pools/{pool}/servers/{addr}`, `state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdminState {
    /// Back in service (up, or down until its checks pass).
    Ready,
    /// Keeps its requests and persistent clients, gets no new ones.
    Drain,
    /// No new requests, not checked.
    Maint,
}

impl AdminState {
    pub fn as_str(self) -> &'static str {
        match self {
            AdminState::Ready => "ready",
            AdminState::Drain => "drain",
            AdminState::Maint => "maint",
        }
    }
}

// ---------------------------------------------------------------- the /stats document

pub use super::stats_json::{ServerJson, StatsJson};

// ---------------------------------------------------------------- the verbs

/// `GET /stats`, read into [`StatsJson`].
pub fn get_stats(endpoint: &Endpoint) -> Result<StatsJson, Error> {
    let text = get_stats_json(endpoint)?;
    serde_json::from_str(&text).map_err(|e| Error::Malformed {
        addr: endpoint.addr.clone(),
        what: format!("its /stats document does not have the expected shape: {e}"),
    })
}

/// `GET /stats` as the JSON text received (`tcpvs list --json`), checked to be JSON.
pub fn get_stats_json(endpoint: &Endpoint) -> Result<String, Error> {
    let answer = exchange(endpoint, "GET", "/stats", None)?;
    answer.success(endpoint, Verb::Read)?;
    answer.json(endpoint)?;
    String::from_utf8(answer.body).map_err(|_| Error::Malformed {
        addr: endpoint.addr.clone(),
        what: "the body is not UTF-8".into(),
    })
}

/// `PUT /pools/{pool}/servers/{addr}` with `{"weight":N}`; the server as it is now.
pub fn set_weight(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    weight: u16,
) -> Result<ServerJson, Error> {
    change_server(
        endpoint,
        pool,
        server,
        serde_json::json!({ "weight": weight }),
    )
}

/// `PUT /pools/{pool}/servers/{addr}` with `{"state":"ready"|"drain"|"maint"}`; the server as it
/// is now.
pub fn set_state(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    state: AdminState,
) -> Result<ServerJson, Error> {
    change_server(
        endpoint,
        pool,
        server,
        serde_json::json!({ "state": state.as_str() }),
    )
}

/// A reload that took effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reloaded {
    /// The generation now running.
    pub generation: u64,
    /// The file the switch read again (an older switch does not say).
    pub file: Option<String>,
}

/// `POST /reload`, with a JSON body as every change is sent (an endpoint without a token takes
/// no other).
pub fn reload(endpoint: &Endpoint) -> Result<Reloaded, Error> {
    let answer = exchange(endpoint, "POST", "/reload", Some(b"{}"))?;
    answer.success(endpoint, Verb::Reload)?;
    let value = answer.json(endpoint)?;
    let generation = value
        .get("generation")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| Error::Malformed {
            addr: endpoint.addr.clone(),
            what: "its answer to POST /reload has no `generation`".into(),
        })?;
    let file = value
        .get("file")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    Ok(Reloaded { generation, file })
}

/// `tcpvs reload -c FILE`: asks the switch which rule file it runs (`/stats` `rule_file`) and
/// refuses unless it is `file` (both canonical: symbolic links and `..` resolved), since a
/// reload re-reads the switch's own file whatever the command line names.
pub fn check_rule_file(endpoint: &Endpoint, file: &std::path::Path) -> Result<(), Error> {
    let asked = std::fs::canonicalize(file)
        .or_else(|_| std::path::absolute(file))
        .unwrap_or_else(|_| file.to_path_buf());
    let running = get_stats(endpoint)?.rule_file;
    let same = running.as_deref().is_some_and(|running| {
        let running = std::path::Path::new(running);
        running == asked || std::fs::canonicalize(running).is_ok_and(|resolved| resolved == asked)
    });
    if same {
        return Ok(());
    }
    Err(Error::OtherFile {
        addr: endpoint.addr.clone(),
        asked: asked.display().to_string(),
        running,
    })
}

/// The path of a server's resource: `/pools/{pool}/servers/{addr}`, each segment
/// percent-encoded where it must be.
pub fn server_path(pool: &str, server: SocketAddr) -> String {
    format!(
        "/pools/{}/servers/{}",
        encode_segment(pool),
        encode_segment(&server.to_string())
    )
}

fn change_server(
    endpoint: &Endpoint,
    pool: &str,
    server: SocketAddr,
    body: serde_json::Value,
) -> Result<ServerJson, Error> {
    let body = body.to_string();
    let answer = exchange(
        endpoint,
        "PUT",
        &server_path(pool, server),
        Some(body.as_bytes()),
    )?;
    answer.success(endpoint, Verb::Change)?;
    serde_json::from_value(answer.json(endpoint)?).map_err(|e| Error::Malformed {
        addr: endpoint.addr.clone(),
        what: format!("its answer is not a server: {e}"),
    })
}

/// Keeps the characters a path segment may hold as they are (letters, digits, `-._~`, and `:`,
/// `[`, `]`, `@` so that `127.0.0.1:9001` and `[::1]:80` go as written); the rest as `%XX`.
fn encode_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~:[]@".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

// ---------------------------------------------------------------- errors

// The `Error` type and its messages: `client/error.rs`.

// ---------------------------------------------------------------- HTTP/1.1

// Request writing and answer reading and framing: `client/http.rs`.

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(token: Option<&str>) -> Endpoint {
        Endpoint {
            addr: Address::Tcp("127.0.0.1:9090".parse().unwrap()),
            token: token.map(str::to_string),
        }
    }

    #[test]
    fn a_change_carries_a_json_body_and_every_request_the_token() {
        let ep = endpoint(Some("s3cret"));
        let put = request_bytes(
            &ep,
            "PUT",
            &server_path("static", "127.0.0.1:9001".parse().unwrap()),
            Some(br#"{"weight":5}"#),
        );
        assert_eq!(
            String::from_utf8(put).unwrap(),
            format!(
                "PUT /pools/static/servers/127.0.0.1:9001 HTTP/1.1\r\nHost: 127.0.0.1:9090\r\n\
                 User-Agent: tcpvs/{}\r\nAccept: application/json\r\n\
                 Authorization: Bearer s3cret\r\nContent-Type: application/json\r\n\
                 Content-Length: 12\r\nConnection: close\r\n\r\n{{\"weight\":5}}",
                env!("CARGO_PKG_VERSION")
            )
        );
        let get = String::from_utf8(request_bytes(&ep, "GET", "/stats", None)).unwrap();
        assert!(get.starts_with("GET /stats HTTP/1.1\r\n"), "{get}");
        assert!(get.contains("Authorization: Bearer s3cret\r\n"), "{get}");
        assert!(!get.contains("Content-Length"), "{get}");
        let reload = String::from_utf8(request_bytes(&ep, "POST", "/reload", Some(b"{}"))).unwrap();
        assert!(reload.contains("Content-Length: 2\r\n"), "{reload}");
        assert!(
            reload.contains("Content-Type: application/json\r\n"),
            "{reload}"
        );
        assert!(
            reload.contains("Authorization: Bearer s3cret\r\n"),
            "{reload}"
        );
    }

    #[test]
    fn addresses_are_ip_and_port_or_a_unix_path() {
        assert_eq!(
            "127.0.0.1:9090".parse::<Address>(),
            Ok(Address::Tcp("127.0.0.1:9090".parse().unwrap()))
        );
        assert_eq!(
            "unix:/run/tcpvs/admin.sock".parse::<Address>(),
            Ok(Address::Unix("/run/tcpvs/admin.sock".into()))
        );
        assert_eq!(
            Address::Unix("/run/tcpvs/admin.sock".into()).to_string(),
            "unix:/run/tcpvs/admin.sock"
        );
        assert!("unix:".parse::<Address>().is_err());
        assert!("localhost:9090".parse::<Address>().is_err());
        // Over a Unix socket the request names `localhost`, as curl does.
        let ep = Endpoint {
            addr: Address::Unix("/run/tcpvs/admin.sock".into()),
            token: None,
        };
        let get = String::from_utf8(request_bytes(&ep, "GET", "/stats", None)).unwrap();
        assert!(get.contains("\r\nHost: localhost\r\n"), "{get}");
    }

    #[test]
    fn path_segments_are_encoded_where_they_must_be() {
        assert_eq!(
            server_path("static", "[::1]:80".parse().unwrap()),
            "/pools/static/servers/[::1]:80"
        );
        assert_eq!(
            server_path("a b/c%", "10.0.0.1:80".parse().unwrap()),
            "/pools/a%20b%2Fc%25/servers/10.0.0.1:80"
        );
    }

    #[test]
    fn statuses_become_the_errors_an_operator_reads() {
        let answer = |status: u16, body: &str| Answer {
            status,
            reason: String::new(),
            headers: Vec::new(),
            body: body.as_bytes().to_vec(),
        };
        let with = endpoint(Some("t"));
        let without = endpoint(None);
        let message = |a: Answer, ep: &Endpoint, verb| a.success(ep, verb).unwrap_err().to_string();
        assert_eq!(
            message(answer(401, "{}"), &with, Verb::Change),
            "the admin endpoint refused the token: set TCPVS_ADMIN_TOKEN or --token-file"
        );
        assert!(message(answer(401, "{}"), &without, Verb::Change).contains("wants a token"));
        assert_eq!(
            message(answer(501, r#"{"error":"no"}"#), &with, Verb::Reload),
            "this tcpvs does not support reload yet"
        );
        assert_eq!(
            message(
                answer(422, r#"{"errors":["a.toml:1:2: x","a.toml:3:4: y"]}"#),
                &with,
                Verb::Reload
            ),
            "reload refused; the running configuration is unchanged:\na.toml:1:2: x\na.toml:3:4: y"
        );
        assert_eq!(
            message(
                answer(404, r#"{"error":"unknown pool `x`"}"#),
                &with,
                Verb::Change
            ),
            "the admin endpoint answered 404: unknown pool `x`"
        );
        assert_eq!(
            message(answer(500, "oops"), &with, Verb::Read),
            "the admin endpoint answered 500: oops"
        );
    }

    #[test]
    fn the_stats_document_of_the_spec_is_read_and_a_smaller_one_too() {
        let minimal = r#"{"generation": 1, "uptime_s": 12.5,
 "services": [{"name": "web", "listen": "127.0.0.1:8080", "connections": 3, "requests": 1234}],
 "pools": [{"name": "static", "scheduler": "wlc", "servers": [
   {"addr": "127.0.0.1:9001", "weight": 1, "state": "up", "backup": false,
    "active": 0, "requests": 600, "failures": 0, "bytes_in": 0, "bytes_out": 0}]}]}"#;
        let stats: StatsJson = serde_json::from_str(minimal).unwrap();
        assert_eq!(stats.pools[0].servers[0].requests, 600);
        let nulls = r#"{"pools":[{"servers":[{"latency_ms":null,
            "check":{"kind":"tcp","last":null,"age_s":null}}]}]}"#;
        let stats: StatsJson = serde_json::from_str(nulls).unwrap();
        assert_eq!(stats.pools[0].servers[0].check.last, None);
    }
}
