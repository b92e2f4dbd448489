//! The request going up as HTTP/2: made from the request's message (http/request_message.rs,
//! written by the same writer as the HTTP/1.1 head: X-Forwarded-For, the rule's changes,
//! Host as the authority), so that an HTTP/2 server gets the same fields an HTTP/1.1 one
//! would, less those HTTP/2 forbids, with no HTTP/1.1 text made or parsed.

use crate::http::request_message::RequestMessage;
use http::header::{HeaderName, HeaderValue};
use http::{Method, Request, Uri};

/// The HTTP/2 request for `message` over `scheme` (`:scheme`, the scheme of the connection
/// to the server); `te: trailers` when the client said it takes trailers (gRPC needs it).
/// `Err`: why the head cannot be said in HTTP/2.
pub(crate) fn request_of(
    message: &RequestMessage,
    scheme: &'static str,
    te_trailers: bool,
) -> Result<Request<()>, String> {
    let path = message.target();
    if !path.starts_with(b"/") {
        return Err(format!(
            "a request for {:?} has no HTTP/2 form here",
            String::from_utf8_lossy(path)
        ));
    }
    let authority = message.authority().unwrap_or_default();
    let uri = Uri::builder()
        .scheme(scheme)
        .authority(http::uri::Authority::try_from(authority).map_err(|e| format!("Host: {e}"))?)
        .path_and_query(path)
        .build()
        .map_err(|e| format!("request target: {e}"))?;
    let mut request = Request::builder()
        .method(Method::from_bytes(message.method()).map_err(|e| e.to_string())?)
        .uri(uri)
        .body(())
        .map_err(|e| e.to_string())?;
    let headers = request.headers_mut();
    for (name, value) in message.fields() {
        let name = HeaderName::from_bytes(name).map_err(|e| e.to_string())?;
        let value = HeaderValue::from_bytes(value).map_err(|e| e.to_string())?;
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
    use crate::http::request::parse_request;
    use crate::http::rewrite::{write_request_head, HeadWriter, RequestEdit, Scheme};
    use crate::http::RequestHead;

    /// The message the writer makes for the client's head `raw`.
    fn message_of(raw: &[u8]) -> RequestMessage {
        let mut raw = raw.to_vec();
        let mut head = RequestHead::default();
        assert!(matches!(parse_request(&mut raw, &mut head), Ok(true)));
        let mut message = RequestMessage::default();
        let edit = RequestEdit::default();
        write_request_head(
            &mut message,
            &head,
            &raw,
            b"10.0.0.9",
            b"d",
            Scheme::Http,
            edit,
        );
        message
    }

    #[test]
    fn fields_of_the_connection_stay_behind_and_host_becomes_the_authority() {
        let head = message_of(
            b"POST /upload?x=1 HTTP/1.1\r\nHost: api.example\r\nConnection: keep-alive\r\n\
            Transfer-Encoding: chunked\r\nX-Forwarded-For: 10.0.0.1\r\nContent-Type: text/plain\r\n\
            Keep-Alive: 5\r\nTE: trailers\r\n\r\n",
        );
        let request = request_of(&head, "http", false).unwrap();
        assert_eq!(request.method(), Method::POST);
        assert_eq!(request.uri().to_string(), "http://api.example/upload?x=1");
        let names: Vec<&str> = request.headers().keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-forwarded-for", "content-type"]);
        assert_eq!(request.headers()["x-forwarded-for"], "10.0.0.1, 10.0.0.9");
    }

    #[test]
    fn te_trailers_is_said_when_the_client_takes_trailers() {
        let head = message_of(
            b"POST /svc/Method HTTP/1.1\r\nHost: grpc\r\ncontent-type: application/grpc\r\n\r\n",
        );
        let request = request_of(&head, "https", true).unwrap();
        assert_eq!(request.uri().scheme_str(), Some("https"));
        assert_eq!(request.headers()["te"], "trailers");
    }

    #[test]
    fn a_target_without_a_path_is_refused() {
        let mut head = RequestMessage::default();
        head.request_line(b"OPTIONS", [b"*", b"", b""]);
        head.field(b"Host", b"a");
        assert!(request_of(&head, "http", false).is_err());
    }
}
