//! What each admin path answers. Reads take a snapshot; the one change (`PUT
//! /pools/{pool}/servers/{addr}`) goes through `control::apply_latest`, like checks and the agent.

use super::endpoint::{bearer, same_secret, Endpoint};
use super::http::{percent_decode, Request, Response};
use super::listener::Peer;
use super::rates::Counters;
use super::stats_json::{server_json, stats_json};
use crate::state::control::{self, Change};
use crate::state::status::AdminState;
use serde::Deserialize;
use std::net::SocketAddr;
use std::sync::Arc;

/// The monitor page: one document, no external assets (it must work offline).
const MONITOR_PAGE: &str = include_str!("monitor.html");

pub async fn answer(endpoint: &Arc<Endpoint>, request: Request, peer: Peer) -> Response {
    if let Err(refused) = named_as_local(&request, peer) {
        return refused;
    }
    let method = request.method.as_str();
    let path = request.path.as_str();
    let reads = matches!(method, "GET" | "HEAD");
    match path {
        "/" | "/index.html" if reads => {
            Response::new(200, "text/html; charset=utf-8", MONITOR_PAGE)
        }
        "/stats" if reads => stats(endpoint),
        "/metrics" if reads => metrics(endpoint, &request),
        "/reload" if method == "POST" => match authorize(endpoint, &request, peer) {
            Err(refused) => refused,
            // Without a token, as a change of a server: a page of another site cannot send
            // JSON without the browser asking first (a CORS preflight), which we never allow.
            Ok(()) if endpoint.token.is_none() && !is_json(&request.content_type) => {
                Response::error(
                    415,
                    "send the reload as JSON, with `Content-Type: application/json` (the body may be `{}`)",
                )
            }
            Ok(()) => {
                tracing::info!("reload asked through the admin endpoint by {peer}");
                reload(endpoint).await
            }
        },
        "/" | "/index.html" | "/stats" | "/metrics" => not_allowed("GET, HEAD"),
        "/reload" => not_allowed("POST"),
        _ => match server_path(path) {
            Some(_) if method != "PUT" => not_allowed("PUT"),
            Some((pool, addr)) => match authorize(endpoint, &request, peer) {
                Err(refused) => refused,
                Ok(()) if !is_json(&request.content_type) => Response::error(
                    415,
                    "send the change as JSON, with `Content-Type: application/json`",
                ),
                Ok(()) => change_server(endpoint, pool, addr, &request.body, peer),
            },
            None => Response::error(404, &format!("no such path: {path}")),
        },
    }
}

/// `POST /reload`: 200 `{"generation": N, "restart_needed": [...]}`, or 422 `{"errors": [...]}`
/// with the running configuration unchanged (409 when there is no file to read: the demo).
async fn reload(endpoint: &Endpoint) -> Response {
    // Off this thread: resolving server names may wait on DNS, and with one worker the
    // endpoint shares the worker's thread.
    let reloads = endpoint.reloads.clone();
    let reloaded = match tokio::task::spawn_blocking(move || reloads.reload()).await {
        Ok(reloaded) => reloaded,
        Err(e) => return Response::error(500, &format!("the reload did not finish: {e}")),
    };
    match reloaded {
        Ok(done) => Response::json(
            200,
            &serde_json::json!({
                "generation": done.generation,
                "restart_needed": done.restart_needed,
                // The file read, so that the caller knows which one it was.
                "file": endpoint.rule_file_shown(),
            }),
        ),
        Err(e @ (crate::reload::ReloadError::NoFile | crate::reload::ReloadError::NotRunning)) => {
            Response::error(409, &e.to_string())
        }
        Err(e) => Response::json(422, &serde_json::json!({ "errors": e.messages() })),
    }
}

fn not_allowed(allow: &str) -> Response {
    Response::error(405, &format!("method not allowed here; use {allow}"))
        .with_field(format!("Allow: {allow}"))
}

fn stats(endpoint: &Endpoint) -> Response {
    let shared = &endpoint.shared;
    let snapshot = shared.snapshot();
    let now = std::time::Instant::now();
    let rates = endpoint.sampler.rates(now, &Counters::read(shared));
    let mut json = stats_json(
        &snapshot,
        &rates,
        snapshot.generation,
        now.saturating_duration_since(shared.started),
    );
    json.rule_file = endpoint.rule_file_shown();
    Response::json(200, &json)
}

fn metrics(endpoint: &Endpoint, request: &Request) -> Response {
    let shared = &endpoint.shared;
    let openmetrics = request.accept.contains("application/openmetrics-text");
    let uptime = shared.started.elapsed().as_secs_f64();
    let snapshot = shared.snapshot();
    let generation = snapshot.generation;
    let text = super::metrics::render(snapshot, generation, uptime, openmetrics);
    let content_type = if openmetrics {
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    } else {
        "text/plain; version=0.0.4; charset=utf-8"
    };
    Response::new(200, content_type, text)
}

/// `/pools/{pool}/servers/{addr}` split into its two names (still %-encoded).
fn server_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/pools/")?;
    let (pool, rest) = rest.split_once('/')?;
    let addr = rest.strip_prefix("servers/")?;
    (!pool.is_empty() && !addr.is_empty() && !addr.contains('/')).then_some((pool, addr))
}

/// A request from this machine (a loopback peer, or the Unix socket, which `ssh -L` may forward
/// to a port) must name this machine in `Host` (or name nothing, as HTTP/1.0 may): a web page
/// behind DNS rebinding reaches the endpoint through the browser with its own host name in
/// `Host`, and would otherwise read the statistics and, without a token, make changes. A page
/// cannot choose the `Host` its browser sends.
fn named_as_local(request: &Request, peer: Peer) -> Result<(), Response> {
    let local = match peer {
        Peer::Tcp(addr) => addr.ip().is_loopback(),
        Peer::Unix { .. } => true,
    };
    if local && !request.host.is_empty() && !is_loopback_host(&request.host) {
        return Err(Response::error(
            403,
            "requests from this machine must name a loopback Host (127.0.0.1, [::1], localhost): \
             a page behind DNS rebinding names its own",
        ));
    }
    Ok(())
}

/// Changes need the token when one is set. Without one, they are taken from peers that the
/// listener lets in only: loopback peers of a loopback listener (the rule file cannot put one
/// elsewhere) and whoever the Unix socket's permissions let connect; and never from a web page
/// of another site: a browser on this host would otherwise carry them for any page (a request
/// made cross-site names its page's `Origin`; a page behind DNS rebinding names its own host in
/// `Host`, refused before this). Such a page cannot send a token it does not know.
fn authorize(endpoint: &Endpoint, request: &Request, peer: Peer) -> Result<(), Response> {
    let unauthorized = |why: &str| {
        Response::error(401, why).with_field("WWW-Authenticate: Bearer realm=\"tcpvs\"".into())
    };
    let forbidden = |why: &str| Err(Response::error(403, why));
    let Some(token) = &endpoint.token else {
        // A loopback peer named this machine in `Host` (see `named_as_local`).
        if let Peer::Tcp(addr) = peer {
            if !addr.ip().is_loopback() {
                return forbidden("changes without a token are accepted only from loopback");
            }
        }
        if !request.origin.is_empty() && request.origin != format!("http://{}", request.host) {
            return forbidden("changes without a token are not accepted from another site's page");
        }
        return Ok(());
    };
    match bearer(request) {
        None => Err(unauthorized(
            "changes need `Authorization: Bearer <token>` (the [admin] token)",
        )),
        Some(given) if same_secret(given.as_bytes(), token.as_bytes()) => Ok(()),
        Some(_) => Err(unauthorized("wrong token")),
    }
}

/// `Host` names this machine's loopback: `127.0.0.1`, `[::1]` or `localhost`, with a port or
/// not.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(name, _port)| name),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `application/json`, parameters (`; charset=utf-8`) allowed.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// The body of a change: either key or both.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ServerChange {
    weight: Option<serde_json::Value>,
    state: Option<String>,
}

fn change_server(
    endpoint: &Endpoint,
    pool_name: &str,
    addr: &str,
    body: &[u8],
    peer: Peer,
) -> Response {
    let Some(pool_name) = percent_decode(pool_name) else {
        return Response::error(400, "the pool name is not valid %-encoded UTF-8");
    };
    let Some(addr_text) = percent_decode(addr) else {
        return Response::error(400, "the server address is not valid %-encoded UTF-8");
    };
    let shared = &endpoint.shared;
    let generation = shared.generation.load();
    let Some(pool) = generation.pool(&pool_name) else {
        return Response::error(404, &format!("no pool `{pool_name}`"));
    };
    let Ok(addr) = addr_text.parse::<SocketAddr>() else {
        return Response::error(
            404,
            &format!("`{addr_text}` is not a server address (IP:PORT) of pool `{pool_name}`"),
        );
    };
    let Some(index) = pool.backends.iter().position(|b| b.addr == addr) else {
        return Response::error(404, &format!("no server {addr} in pool `{pool_name}`"));
    };
    let change = match parse_change(body) {
        Ok(change) => change,
        Err(why) => return Response::error(400, &why),
    };
    if let Change::Admin { state, weight } = &change {
        tracing::info!(
            "the admin endpoint sets server {addr} of pool `{pool_name}` {} (asked by {peer})",
            describe_change(*state, *weight)
        );
    }
    control::apply_latest(&shared.generation, pool, index, change);
    let snapshot = shared.snapshot();
    let now = std::time::Instant::now();
    let rates = endpoint.sampler.rates(now, &Counters::read(shared));
    match snapshot
        .servers
        .iter()
        .find(|s| s.pool == pool_name && s.addr == addr)
    {
        Some(server) => Response::json(200, &server_json(server, &rates)),
        None => Response::error(404, &format!("no server {addr} in pool `{pool_name}`")),
    }
}

/// A change in words: `to drain`, `to weight 5`, `ready, with weight 0`.
fn describe_change(state: Option<AdminState>, weight: Option<u32>) -> String {
    let state = state.map(|state| match state {
        AdminState::Ready => "ready",
        AdminState::Drain => "to drain",
        AdminState::Maint => "to maintenance",
    });
    match (state, weight) {
        (Some(state), Some(weight)) => format!("{state}, with weight {weight}"),
        (Some(state), None) => state.to_string(),
        (None, Some(weight)) => format!("to weight {weight}"),
        (None, None) => "as it was".to_string(),
    }
}

fn parse_change(body: &[u8]) -> Result<Change, String> {
    const USAGE: &str =
        "send JSON with `weight` (0..=65535) and/or `state` (\"ready\", \"drain\", \"maint\")";
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(format!("empty body: {USAGE}"));
    }
    let change: ServerChange =
        serde_json::from_slice(body).map_err(|e| format!("invalid body ({e}): {USAGE}"))?;
    let weight = match change.weight {
        None => None,
        Some(value) => match value.as_u64() {
            Some(w) if w <= 65_535 => Some(w as u32),
            _ => {
                return Err(format!(
                    "weight must be an integer in 0..=65535, not {value}"
                ))
            }
        },
    };
    let state = match change.state.as_deref() {
        None => None,
        Some("ready") => Some(AdminState::Ready),
        Some("drain") => Some(AdminState::Drain),
        Some("maint") => Some(AdminState::Maint),
        Some(other) => {
            return Err(format!(
                "state must be \"ready\", \"drain\" or \"maint\", not \"{other}\""
            ))
        }
    };
    if weight.is_none() && state.is_none() {
        return Err(format!("nothing to change: {USAGE}"));
    }
    Ok(Change::Admin { state, weight })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_paths_split_into_pool_and_address() {
        assert_eq!(
            server_path("/pools/static/servers/127.0.0.1:9001"),
            Some(("static", "127.0.0.1:9001"))
        );
        assert_eq!(server_path("/pools/static/servers/"), None);
        assert_eq!(server_path("/pools//servers/x"), None);
        assert_eq!(server_path("/pools/static/servers/a/b"), None);
        assert_eq!(server_path("/pools/static"), None);
    }

    #[test]
    fn change_bodies_are_checked() {
        assert!(matches!(
            parse_change(br#"{"weight": 5}"#),
            Ok(Change::Admin {
                state: None,
                weight: Some(5)
            })
        ));
        assert!(matches!(
            parse_change(br#"{"state": "drain", "weight": 0}"#),
            Ok(Change::Admin {
                state: Some(AdminState::Drain),
                weight: Some(0)
            })
        ));
        for bad in [
            &b""[..],
            b"{}",
            b"{\"weight\": 65536}",
            b"{\"weight\": -1}",
            b"{\"weight\": 1.5}",
            b"{\"weight\": \"3\"}",
            b"{\"state\": \"up\"}",
            b"{\"colour\": 1}",
            b"[1]",
            b"{",
        ] {
            assert!(
                parse_change(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn loopback_hosts_and_json_types_are_recognised() {
        for host in [
            "127.0.0.1:9090",
            "127.0.0.1",
            "[::1]:9090",
            "localhost:9090",
            "LOCALHOST",
            "127.1.2.3:80",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
        for host in [
            "",
            "evil.example:9090",
            "10.0.0.1:9090",
            "[::2]:9090",
            "localhost.evil.example",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
        assert!(!is_json(""));
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abd", b"abc"));
        assert!(!same_secret(b"ab", b"abc"));
    }

    #[test]
    fn changes_are_logged_in_words() {
        assert_eq!(describe_change(Some(AdminState::Drain), None), "to drain");
        assert_eq!(
            describe_change(Some(AdminState::Ready), Some(0)),
            "ready, with weight 0"
        );
        assert_eq!(
            describe_change(Some(AdminState::Maint), Some(3)),
            "to maintenance, with weight 3"
        );
        assert_eq!(describe_change(None, Some(5)), "to weight 5");
    }
}
