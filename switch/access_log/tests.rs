//! The access log's lines, byte for byte: escaping, times, and each format.

use super::entry::{End, Entry, Request};
use super::escape::{json_string, push_quoted, Quoted};
use super::format::{write_combined, write_json, Text};
use super::time::{civil_from_days, write_clf_time, write_time};
use std::time::{Duration, UNIX_EPOCH};

fn json(text: &[u8]) -> String {
    let mut out = Vec::new();
    json_string(&mut out, text);
    String::from_utf8(out).expect("JSON output is UTF-8")
}

#[test]
fn json_strings_escape_quotes_backslashes_and_control_bytes() {
    assert_eq!(json(b"/plain"), r#""/plain""#);
    assert_eq!(json(br#"/q?a="x"&b=\y"#), r#""/q?a=\"x\"&b=\\y""#);
    assert_eq!(json(b"\n\r\t\x08\x0c"), r#""\n\r\t\b\f""#);
    assert_eq!(json(b"\x00\x01\x1f\x7f"), r#""\u0000\u0001\u001f\u007f""#);
}

#[test]
fn json_strings_are_ascii_and_give_the_text_back() {
    // Every character beyond ASCII escaped (a surrogate pair beyond U+FFFF); bytes that
    // are not UTF-8 become U+FFFD, one per bad sequence.
    assert_eq!(json("/é€😀".as_bytes()), r#""/\u00e9\u20ac\ud83d\ude00""#);
    assert_eq!(json(b"/a\xffb\xc3"), r#""/a\ufffdb\ufffd""#);
    assert_eq!(json(b"/\xe2\x82"), r#""/\ufffd""#);
    // What spoofs a viewer: U+202E turns the line around, U+2028 and U+2029 end it.
    let spoof = "/a\u{202e}gpj.exe\u{2028}\u{2029}\u{200b}\u{85}";
    let written = json(spoof.as_bytes());
    assert_eq!(written, r#""/a\u202egpj.exe\u2028\u2029\u200b\u0085""#);
    assert!(written.bytes().all(|b| (b' '..=b'~').contains(&b)));
    let back: String = serde_json::from_str(&written).unwrap();
    assert_eq!(back, spoof);
}

fn time(secs: u64, millis: u64) -> String {
    let mut out = Vec::new();
    let at = UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis);
    write_time(&mut out, at);
    String::from_utf8(out).unwrap()
}

#[test]
fn times_are_rfc3339_utc_with_milliseconds() {
    assert_eq!(time(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(time(951_782_400, 7), "2000-02-29T00:00:00.007Z");
    assert_eq!(time(1_709_251_199, 999), "2024-02-29T23:59:59.999Z");
    assert_eq!(time(1_709_251_200, 40), "2024-03-01T00:00:00.040Z");
    assert_eq!(time(4_102_444_800 - 1, 120), "2099-12-31T23:59:59.120Z");
    // Every day of 400 years against a plain count of days.
    let mut days = 0i64;
    for year in 1970..2370i64 {
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        let lengths = [
            31,
            if leap { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        for (month, &length) in lengths.iter().enumerate() {
            for day in 1..=length {
                assert_eq!(
                    civil_from_days(days),
                    (year, month as u64 + 1, day),
                    "day {days}"
                );
                days += 1;
            }
        }
    }
}

/// A request as captured from a head with `line` (`METHOD target`), HTTP/1.1.
fn request(line: &[u8]) -> Request {
    let mut request = Request::default();
    request.line.extend_from_slice(line);
    request.protocol = Some("HTTP/1.1");
    request
}

fn entry<'a>(request: Option<&'a Request>, end: End<'a>) -> Entry<'a> {
    Entry {
        service: "web",
        client: "127.0.0.1:5000".parse().unwrap(),
        request,
        status: 200,
        bytes: 120,
        pool: Some("images"),
        server: Some("10.0.0.1:80".parse().unwrap()),
        end,
        limit: None,
        grpc: None,
        trace: None,
    }
}

#[test]
fn a_limit_is_named_after_the_other_fields() {
    let get = request(b"GET /api");
    let mut limited = entry(Some(&get), End::Took(Duration::from_micros(12)));
    limited.status = 429;
    limited.limit = Some("per-client");
    assert_eq!(
        Text(&limited).to_string(),
        "web 127.0.0.1:5000 \"GET /api HTTP/1.1\" 429 120 images/10.0.0.1:80 12us limit=per-client"
    );
    let mut json = Vec::new();
    write_json(&mut json, &limited, std::time::SystemTime::UNIX_EPOCH);
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.ends_with(",\"duration_us\":12,\"limit\":\"per-client\"}"),
        "{text}"
    );
}

#[test]
fn a_grpc_status_comes_last_in_both_formats() {
    let call = request(b"POST /pkg.Svc/Method");
    let mut answered = entry(Some(&call), End::Took(Duration::from_micros(7)));
    answered.grpc = Some(14);
    assert_eq!(
        Text(&answered).to_string(),
        "web 127.0.0.1:5000 \"POST /pkg.Svc/Method HTTP/1.1\" 200 120 images/10.0.0.1:80 7us grpc=14"
    );
    answered.limit = Some("per-client");
    let mut json = Vec::new();
    write_json(&mut json, &answered, std::time::SystemTime::UNIX_EPOCH);
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.ends_with(",\"limit\":\"per-client\",\"grpc_status\":14}"),
        "{text}"
    );
}

#[test]
fn text_lines_name_every_field_and_a_dash_for_what_is_missing() {
    let get = request(b"GET /x");
    let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
    assert_eq!(
        Text(&served).to_string(),
        "web 127.0.0.1:5000 \"GET /x HTTP/1.1\" 200 120 images/10.0.0.1:80 345us"
    );
    let mut refused = entry(None, End::Refused("malformed request head"));
    (refused.status, refused.pool, refused.server) = (400, None, None);
    assert_eq!(
        Text(&refused).to_string(),
        "web 127.0.0.1:5000 \"-\" 400 120 -/- malformed request head"
    );
}

#[test]
fn the_protocol_is_named_in_the_text_and_json_lines() {
    let mut stream = request(b"GET /x");
    stream.protocol = Some("HTTP/2.0");
    let served = entry(Some(&stream), End::Took(Duration::from_micros(9)));
    assert_eq!(
        Text(&served).to_string(),
        "web 127.0.0.1:5000 \"GET /x HTTP/2.0\" 200 120 images/10.0.0.1:80 9us"
    );
    let mut json = Vec::new();
    write_json(&mut json, &served, std::time::SystemTime::UNIX_EPOCH);
    let text = String::from_utf8(json).unwrap();
    assert!(
        text.contains(",\"target\":\"/x\",\"protocol\":\"HTTP/2.0\","),
        "{text}"
    );
}

fn quoted(bytes: &[u8]) -> String {
    let shown = Quoted(bytes).to_string();
    // The line buffer's writer escapes alike.
    let mut pushed = Vec::new();
    push_quoted(&mut pushed, bytes);
    assert_eq!(pushed, shown.as_bytes());
    shown
}

#[test]
fn text_lines_escape_quotes_backslashes_and_control_bytes_in_the_request() {
    assert_eq!(quoted(b"GET /plain?a=1"), "GET /plain?a=1");
    assert_eq!(quoted(br#"GET /q?a="b\c""#), r"GET /q?a=\x22b\x5Cc\x22");
    assert_eq!(quoted(b"\x00\n\x1f\x7f"), r"\x00\x0A\x1F\x7F");
    // A target that tries to close the quotes and forge the fields after them.
    let forged = request(b"GET /x\" 200 1 web/10.0.0.9:80 1us\nweb 10.6.6.6:1 \"GET /");
    let line = Text(&entry(Some(&forged), End::Took(Duration::from_micros(7)))).to_string();
    assert_eq!(
        line,
        r#"web 127.0.0.1:5000 "GET /x\x22 200 1 web/10.0.0.9:80 1us\x0Aweb 10.6.6.6:1 \x22GET / HTTP/1.1" 200 120 images/10.0.0.1:80 7us"#
    );
    assert_eq!(line.matches('"').count(), 2, "{line}");
}

#[test]
fn every_byte_from_0x80_is_escaped_as_nginx_does() {
    // UTF-8 byte by byte, upper case hex: é, €, U+202E RIGHT-TO-LEFT OVERRIDE, U+2028
    // LINE SEPARATOR; bytes that are not UTF-8 alike.
    assert_eq!(quoted("/é€".as_bytes()), r"/\xC3\xA9\xE2\x82\xAC");
    assert_eq!(
        quoted("/a\u{202e}gpj.exe\u{2028}x".as_bytes()),
        r"/a\xE2\x80\xAEgpj.exe\xE2\x80\xA8x"
    );
    assert_eq!(quoted(b"/\x80\xff\xc3\""), r"/\x80\xFF\xC3\x22");
    // Every byte: printable ASCII but `"` and `\\` as it is, the rest escaped.
    let all: Vec<u8> = (0..=255).collect();
    let shown = quoted(&all);
    let mut expected = String::new();
    for b in 0..=255u8 {
        if (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\' {
            expected.push(char::from(b));
        } else {
            expected.push_str(&format!("\\x{b:02X}"));
        }
    }
    assert_eq!(shown, expected);
}

#[test]
fn combined_lines_have_the_ncsa_shape() {
    let at = UNIX_EPOCH + Duration::from_millis(1_709_251_200_040);
    let combined = |e: &Entry<'_>| {
        let mut out = Vec::new();
        write_combined(&mut out, e, at);
        String::from_utf8(out).unwrap()
    };
    let mut get = request(b"GET /a?b=\"c\"");
    get.fields
        .extend_from_slice(b"https://example.com/\xe2\x80\xaeMozilla/5.0 \"x\"");
    get.referer = Some(0..23);
    get.user_agent = Some(23..38);
    let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
    assert_eq!(
        combined(&served),
        r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "GET /a?b=\x22c\x22 HTTP/1.1" 200 120 "https://example.com/\xE2\x80\xAE" "Mozilla/5.0 \x22x\x22""#
    );
    // No fields: `-`; an empty one: `""`; HTTP/1.0; IPv6 without brackets or port.
    let mut old = request(b"HEAD /");
    old.protocol = Some("HTTP/1.0");
    old.user_agent = Some(0..0);
    let mut e = entry(Some(&old), End::Took(Duration::from_micros(1)));
    e.client = "[2001:db8::1]:4000".parse().unwrap();
    assert_eq!(
        combined(&e),
        r#"2001:db8::1 - - [01/Mar/2024:00:00:00 +0000] "HEAD / HTTP/1.0" 200 120 "-" """#
    );
    // Refused before a request was read.
    let mut refused = entry(None, End::Refused("request head too large"));
    (refused.status, refused.bytes) = (431, 0);
    assert_eq!(
        combined(&refused),
        r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "-" 431 0 "-" "-""#
    );
    // The client left before any answer: 499, as nginx writes it.
    let mut gone = entry(Some(&get), End::Took(Duration::from_micros(1)));
    (gone.status, gone.bytes) = (0, 0);
    assert!(combined(&gone).contains(r#"HTTP/1.1" 499 0 "#));
    // A passthrough tunnel: no protocol, no HTTP status.
    let mut tunnel = Request::default();
    tunnel.push_str("TLS example.com");
    let mut e = entry(Some(&tunnel), End::Took(Duration::from_micros(1)));
    e.status = 0;
    assert_eq!(
        combined(&e),
        r#"127.0.0.1 - - [01/Mar/2024:00:00:00 +0000] "TLS example.com" 0 120 "-" "-""#
    );
}

#[test]
fn clf_times_name_the_month_in_utc() {
    let clf = |secs: u64| {
        let mut out = Vec::new();
        write_clf_time(&mut out, UNIX_EPOCH + Duration::from_secs(secs));
        String::from_utf8(out).unwrap()
    };
    assert_eq!(clf(0), "01/Jan/1970:00:00:00 +0000");
    assert_eq!(clf(951_782_400), "29/Feb/2000:00:00:00 +0000");
    assert_eq!(clf(1_704_067_199), "31/Dec/2023:23:59:59 +0000");
    assert_eq!(clf(971_186_136), "10/Oct/2000:13:55:36 +0000");
}

#[test]
fn json_lines_hold_every_field() {
    let at = UNIX_EPOCH + Duration::from_millis(1_709_251_200_040);
    let mut out = Vec::new();
    let get = request(b"GET /a\"b");
    let served = entry(Some(&get), End::Took(Duration::from_micros(345)));
    write_json(&mut out, &served, at);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"time":"2024-03-01T00:00:00.040Z","service":"web","client":"127.0.0.1:5000","method":"GET","target":"/a\"b","protocol":"HTTP/1.1","status":200,"bytes":120,"pool":"images","server":"10.0.0.1:80","duration_us":345}"#
    );
    let mut out = Vec::new();
    let mut refused = entry(None, End::Refused("request head \"too\" large"));
    (refused.status, refused.pool, refused.server) = (431, None, None);
    write_json(&mut out, &refused, at);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        r#"{"time":"2024-03-01T00:00:00.040Z","service":"web","client":"127.0.0.1:5000","method":null,"target":null,"protocol":null,"status":431,"bytes":120,"pool":null,"server":null,"duration_us":null,"error":"request head \"too\" large"}"#
    );
}

#[test]
fn a_clients_request_id_cannot_forge_a_quoted_field() {
    let raw = b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\"b\\c\r\n\r\n";
    let mut head = crate::http::request::RequestHead::default();
    assert!(crate::http::request::parse_request(&mut raw.to_vec(), &mut head).unwrap());
    let trace = crate::trace::RequestTrace::begin((false, true, false), (&head, raw), "1.1");
    let get = request(b"GET /");
    let mut traced = entry(Some(&get), End::Took(Duration::from_micros(5)));
    traced.trace = Some(&trace);
    let line = Text(&traced).to_string();
    assert!(line.ends_with(r" 5us request_id=a\x22b\x5Cc"), "{line}");
}
