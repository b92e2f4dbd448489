//! The request going up as HTTP/2: made from the head written for servers (HTTP/1.1 text:
//! http/rewrite.rs, with X-Forwarded-For, the rule's changes and Host), so that an HTTP/2
//! server gets the same fields an HTTP/1.1 one would, less those HTTP/2 forbids.

use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};

/// Fields that are about one HTTP/1.1 connection and must not go in HTTP/2 (RFC 9113 section
/// 8.2.2); Host becomes `:authority`.
fn is_connection_specific(name: &[u8]) -> bool {
    const NAMES: [&[u8]; 7] = [
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"transfer-encoding",
        b"upgrade",
        b"te",
        b"host",
    ];
    NAMES.iter().any(|n| n.eq_ignore_ascii_case(name))
}

/// The HTTP/2 request for `head` (a whole HTTP/1.1 request head) over `scheme` (`:scheme`, the
/// scheme of the connection to the server); `te: trailers` when the client said it takes
/// trailers (gRPC needs it). `Err`: why the head cannot be said in HTTP/2.
pub(crate) fn request_of(
    head: &[u8],
    scheme: &'static str,
    te_trailers: bool,
) -> Result<Request<()>, String> {
    let lines = head.windows(2).filter(|w| w == b"\r\n").count();
    let mut fields = vec![httparse::EMPTY_HEADER; lines];
    let mut parsed = httparse::Request::new(&mut fields);
    match parsed.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("incomplete request head".into()),
        Err(e) => return Err(format!("request head: {e}")),
    }
    let method = parsed.method.unwrap_or("GET");
    let path = parsed.path.unwrap_or("/");
    if !path.starts_with('/') {
        return Err(format!("a request for {path:?} has no HTTP/2 form here"));
    }
    let authority = parsed
        .headers
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case("host"))
        .map(|f| f.value)
        .unwrap_or_default();
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(http::uri::Authority::try_from(authority).map_err(|e| format!("Host: {e}"))?)
        .path_and_query(path)
        .build()
        .map_err(|e| format!("request target: {e}"))?;
    let mut request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).map_err(|e| e.to_string())?)
        .uri(uri)
        .body(())
        .map_err(|e| e.to_string())?;
    let headers = request.headers_mut();
    for field in parsed.headers.iter() {
        if is_connection_specific(field.name.as_bytes()) {
            continue;
        }
        let name = HeaderName::from_bytes(field.name.as_bytes()).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_bytes(field.value).map_err(|e| e.to_string())?;
        headers.append(name, value);
    }
    if te_trailers {
        headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_the_connection_stay_behind_and_host_becomes_the_authority() {
        let head = b"POST /upload?x=1 HTTP/1.1\r\nHost: api.example\r\nConnection: keep-alive\r\n\
            Transfer-Encoding: chunked\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Type: text/plain\r\n\
            Keep-Alive: 5\r\nTE: trailers\r\n\r\n";
        let request = request_of(head, "http", false).unwrap();
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri().to_string(), "http://api.example/upload?x=1");
        let names: Vec<&str> = request.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-forwarded-for", "content-type"]);
    }

    #[test]
    fn te_trailers_is_said_when_the_client_takes_trailers() {
        let head =
            b"POST /svc/Method HTTP/1.1\r\nHost: grpc\r\ncontent-type: application/grpc\r\n\r\n";
        let request = request_of(head, "https", true).unwrap();
        assert_eq!(request.uri().scheme_str(), Some("https"));
        assert_eq!(request.headers()["te"], "trailers");
    }

    #[test]
    fn a_target_without_a_path_is_refused() {
        let head = b"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n";
        assert!(request_of(head, "http", false).is_err());
    }
}
