//! Triage for `differential_head` crashes: for each file named, the strict parser's verdict,
//! without any tolerance, on the head tcpvs rebuilds from it.
//! `cargo run --example classify -- artifacts/differential_head/default/crashes/id:*`

use tcpvs::http::rewrite::{write_request_head, RequestEdit, Scheme};
use tcpvs::http::{parse_request, RequestHead};
use tcpvs_fuzz::strict;
use tcpvs_fuzz::targets::{CLIENT, DEFAULT_HOST};

fn main() {
    for file in std::env::args().skip(1) {
        let mut buf = std::fs::read(&file).unwrap();
        let mut head = RequestHead::default();
        let verdict = match parse_request(&mut buf, &mut head) {
            Ok(true) => {
                let mut out = Vec::new();
                write_request_head(&mut out, &head, &buf, CLIENT, DEFAULT_HOST, Scheme::Http, RequestEdit::default());
                match strict::parse(&out) {
                    Ok(_) => "strict: ok".to_string(),
                    Err(e) => format!("strict: {e}"),
                }
            }
            other => format!("tcpvs: {other:?}"),
        };
        println!("{verdict}\t{file}");
    }
}
