//! The line of one request in each format: text, NCSA combined, JSON.

use super::entry::{End, Entry};
use super::escape::{json_string, push_quoted, Quoted};
use super::time::{write_clf_time, write_time};
use crate::trace::RequestTrace;
use std::fmt;
use std::io::Write;
use std::time::SystemTime;

/// The text line after its time: `service client "METHOD target PROTOCOL" status bytes
/// pool/server duration`, with `-` for what is missing, and the reason instead of the duration
/// for a refusal; then `limit=NAME` when a rate limit refused the request (or would have, under
/// `dry_run`), `grpc=N` when a gRPC call's status came back, and `trace=TRACE_ID` (`trace =
/// "w3c"`) and `request_id=ID` (`request_id = true`): `key=value` words after the fixed fields,
/// so a reader of the fields before them reads the line as before. The request is escaped
/// ([`Quoted`]); its protocol (`HTTP/1.1`, `HTTP/2.0`) follows it inside the quotes, as
/// nginx's `$request` and HAProxy's `%r` write it.
pub(super) struct Text<'a, 'e>(pub(super) &'a Entry<'e>);

impl fmt::Display for Text<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = self.0;
        write!(
            f,
            "{} {} \"{}",
            e.service,
            e.client,
            Quoted(e.request.map_or(b"-", |r| &r.line)),
        )?;
        if let Some(protocol) = e.request.and_then(|r| r.protocol) {
            write!(f, " {protocol}")?;
        }
        write!(
            f,
            "\" {} {} {}/{} ",
            e.status,
            e.bytes,
            e.pool.unwrap_or("-"),
            Dash(e.server),
        )?;
        match e.end {
            End::Took(elapsed) => write!(f, "{}us", elapsed.as_micros())?,
            End::Refused(why) => f.write_str(why)?,
        }
        if let Some(limit) = e.limit {
            write!(f, " limit={limit}")?;
        }
        if let Some(status) = e.grpc {
            write!(f, " grpc={status}")?;
        }
        match e.trace {
            Some(trace) => write_trace_words(f, trace),
            None => Ok(()),
        }
    }
}

/// ` trace=HEX request_id=ID`, each when on. The request id has only visible ASCII (a client's
/// with anything else was replaced: trace/request_id.rs), so it stays one word; a client's `"`
/// and `\` in it are written `\xHH`, as in the quoted fields, so that no reader splitting the
/// line on quotes sees a field the client made.
fn write_trace_words(f: &mut fmt::Formatter<'_>, trace: &RequestTrace) -> fmt::Result {
    if let Some(hex) = trace.trace_id_hex() {
        f.write_str(" trace=")?;
        f.write_str(std::str::from_utf8(&hex).unwrap_or("-"))?;
    }
    if let Some(id) = &trace.request_id {
        f.write_str(" request_id=")?;
        write!(f, "{}", Quoted(id.as_bytes()))?;
    }
    Ok(())
}

/// The line of the combined format (without the newline): `host ident authuser [date]
/// "request" status bytes "referer" "user-agent"`, with `-` for an unknown ident and user, a
/// request refused before it was read, and an absent field (a field present but empty is `""`,
/// as nginx writes it).
pub(super) fn write_combined(out: &mut Vec<u8>, e: &Entry<'_>, now: SystemTime) {
    let _ = write!(out, "{} - - [", e.client.ip());
    write_clf_time(out, now);
    out.extend_from_slice(b"] \"");
    match e.request {
        Some(request) => {
            push_quoted(out, &request.line);
            if let Some(protocol) = request.protocol {
                out.push(b' ');
                out.extend_from_slice(protocol.as_bytes());
            }
        }
        None => out.push(b'-'),
    }
    out.extend_from_slice(b"\" ");
    // Status 0 is a request whose client left before any answer: nginx's 499 (readers of the
    // format refuse a status 0 line). A passthrough tunnel (no protocol) has no HTTP status.
    let status = match e.request {
        Some(request) if e.status == 0 && request.protocol.is_some() => 499,
        _ => e.status,
    };
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(number.format(status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(number.format(e.bytes).as_bytes());
    for field in [
        e.request.and_then(|r| r.field(&r.referer)),
        e.request.and_then(|r| r.field(&r.user_agent)),
    ] {
        out.extend_from_slice(b" \"");
        match field {
            Some(value) => push_quoted(out, value),
            None => out.push(b'-'),
        }
        out.push(b'"');
    }
}

/// An optional value, `-` when absent.
struct Dash<T>(Option<T>);

impl<T: fmt::Display> fmt::Display for Dash<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

/// The JSON object of one entry (without the newline).
pub(super) fn write_json(out: &mut Vec<u8>, e: &Entry<'_>, now: SystemTime) {
    let (method, target) = match e.request.map(|r| r.line.as_slice()) {
        Some(line) => match line.iter().position(|&b| b == b' ') {
            Some(space) => (Some(&line[..space]), Some(&line[space + 1..])),
            None => (Some(line), None),
        },
        None => (None, None),
    };
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"{\"time\":\"");
    write_time(out, now);
    out.extend_from_slice(b"\",\"service\":");
    json_string(out, e.service.as_bytes());
    out.extend_from_slice(b",\"client\":\"");
    let _ = write!(out, "{}", e.client);
    out.extend_from_slice(b"\",\"method\":");
    json_option(out, method);
    out.extend_from_slice(b",\"target\":");
    json_option(out, target);
    out.extend_from_slice(b",\"protocol\":");
    json_option(out, e.request.and_then(|r| r.protocol).map(str::as_bytes));
    out.extend_from_slice(b",\"status\":");
    out.extend_from_slice(number.format(e.status).as_bytes());
    out.extend_from_slice(b",\"bytes\":");
    out.extend_from_slice(number.format(e.bytes).as_bytes());
    out.extend_from_slice(b",\"pool\":");
    json_option(out, e.pool.map(str::as_bytes));
    out.extend_from_slice(b",\"server\":");
    match e.server {
        Some(server) => {
            out.push(b'"');
            let _ = write!(out, "{server}");
            out.push(b'"');
        }
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"duration_us\":");
    match e.end {
        End::Took(elapsed) => {
            out.extend_from_slice(number.format(elapsed.as_micros()).as_bytes());
        }
        End::Refused(why) => {
            out.extend_from_slice(b"null,\"error\":");
            json_string(out, why.as_bytes());
        }
    }
    if let Some(limit) = e.limit {
        out.extend_from_slice(b",\"limit\":");
        json_string(out, limit.as_bytes());
    }
    if let Some(status) = e.grpc {
        let _ = write!(out, ",\"grpc_status\":{status}");
    }
    // Present only when on: a reader that does not know them sees the object as before.
    if let Some(trace) = e.trace {
        if let Some(hex) = trace.trace_id_hex() {
            out.extend_from_slice(b",\"trace_id\":");
            json_string(out, &hex);
        }
        if let Some(id) = &trace.request_id {
            out.extend_from_slice(b",\"request_id\":");
            json_string(out, id.as_bytes());
        }
    }
    out.push(b'}');
}

fn json_option(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(text) => json_string(out, text),
        None => out.extend_from_slice(b"null"),
    }
}
