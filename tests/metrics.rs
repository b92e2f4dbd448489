//! `/metrics` beside the switch's own families: the standard process metrics of the Prometheus
//! client libraries (read from /proc/self), `tcpvs_build_info`, and a guard that every metric
//! name the README mentions is scraped exactly as written.
//!
//! The switch runs in the test's process, so the process figures are this process's: they are
//! checked against what the test itself does (files it opens), never against a duration.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const RULES: &str = r#"
[switch]
access_log = false
[admin]
listen = "127.0.0.1:0"
[virtual.web]
listen = "127.0.0.1:0"
default_pool = "p"
[[virtual.web.rule]]
path = "^/limited"
pool = "p"
limit = "api"
[limit.api]
key = "source"
rate = "10/s"
[pool.p]
servers = [{ addr = "{a}" }]
"#;

/// `GET path` on the admin endpoint with `fields`: the body of a 200.
async fn scrape(admin: SocketAddr, fields: &str) -> String {
    let mut stream = TcpStream::connect(admin).await.unwrap();
    let request =
        format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\n{fields}Connection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("the endpoint answers and closes")
        .unwrap();
    let text = String::from_utf8(raw).expect("the answer is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    body.to_string()
}

/// The value of the sample `name` (no labels) in the Prometheus text.
fn value(text: &str, name: &str) -> f64 {
    let prefix = format!("{name} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&prefix))
        .unwrap_or_else(|| panic!("no sample {name} in\n{text}"));
    line[prefix.len()..].parse().unwrap()
}

/// Every name in the text: families of `# TYPE` lines and samples.
fn names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if line.starts_with('#') => None,
            None => line.split(['{', ' ']).next(),
        };
        names.extend(name.map(str::to_string));
    }
    names
}

/// Held while a test counts the process's descriptors, and by every other test of this file
/// from before it starts its switch until that switch is gone.
static DESCRIPTORS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn switch_with_admin() -> (tcpvs::Switch, SocketAddr, Backend) {
    let a = backend().await;
    let switch = start_switch(RULES, &[("a", a.addr.to_string())]).await;
    let admin = switch.admin_addr().expect("[admin] listen is set");
    (switch, admin, a)
}

#[tokio::test]
async fn process_metrics_and_build_info_are_scraped_under_their_standard_names() {
    let (_switch, admin, _a) = switch_with_admin().await;
    let text = scrape(admin, "").await;
    for (name, kind) in [
        ("process_cpu_seconds_total", "counter"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("tcpvs_build_info", "gauge"),
    ] {
        assert!(
            text.contains(&format!("\n# TYPE {name} {kind}\n")),
            "no {name} {kind} in\n{text}"
        );
    }
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        text.contains(&format!("\ntcpvs_build_info{{version=\"{version}\"}} 1\n")),
        "{text}"
    );

    // The figures are this process's, read at each scrape.
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    assert_eq!(
        value(&text, "process_max_fds"),
        limit.current.expect("a finite soft limit") as f64
    );
    let resident = value(&text, "process_resident_memory_bytes");
    assert!(resident > 0.0 && resident <= value(&text, "process_virtual_memory_bytes"));
    assert!(value(&text, "process_cpu_seconds_total") >= 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = value(&text, "process_start_time_seconds");
    // /proc counts in clock ticks (1/100 s) from a boot time in whole seconds.
    assert!(start <= now + 1.0, "started at {start}, now {now}");
    // Descriptors are the whole process's: the other test of this file, running beside this
    // one, opens and closes its own. It waits while this part counts (see `DESCRIPTORS`),
    // but its runtime's own few (an epoll, an eventfd) come and go outside the lock: hence 30
    // of the 40, which a figure not read at each scrape could not show either.
    let counting = DESCRIPTORS.lock().await;
    let open = value(&scrape(admin, "").await, "process_open_fds");
    let files: Vec<std::fs::File> = (0..40)
        .map(|_| std::fs::File::open("/dev/null").unwrap())
        .collect();
    let more = value(&scrape(admin, "").await, "process_open_fds");
    assert!(more >= open + 30.0, "{open} open, then {more} with 40 more");
    drop(files);
    drop(counting);

    // OpenMetrics: the info type, and the counter's family without `_total`.
    let open_metrics = scrape(
        admin,
        "Accept: application/openmetrics-text;version=1.0.0\r\n",
    )
    .await;
    assert!(
        open_metrics.contains("\n# TYPE tcpvs_build info\n"),
        "{open_metrics}"
    );
    assert!(
        open_metrics.contains(&format!("\ntcpvs_build_info{{version=\"{version}\"}} 1\n")),
        "{open_metrics}"
    );
    assert!(open_metrics.contains("\n# TYPE process_cpu_seconds counter\n"));
    assert!(open_metrics.contains("\nprocess_cpu_seconds_total "));
}

/// Every metric name the README mentions (in backquotes, `tcpvs_...` or `process_...`) is
/// scraped exactly as written, so the README cannot name a metric that does not exist (a
/// counter without its `_total`, a renamed family). A name with `*` stands for the names it
/// matches, of which there must be one.
#[tokio::test]
async fn every_metric_the_readme_names_is_scraped_as_written() {
    // Dropped last: the switch below is gone before the other test may count descriptors.
    let _counting = DESCRIPTORS.lock().await;
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"))
        .expect("README.md");
    let quoted = regex::Regex::new(r"`([^`]*)`").unwrap();
    let metric = regex::Regex::new(r"\b(?:tcpvs|process)_[a-z0-9_*]*[a-z0-9*]").unwrap();
    let mut mentioned = BTreeSet::new();
    for span in quoted.captures_iter(&readme) {
        for name in metric.find_iter(&span[1]) {
            mentioned.insert(name.as_str().to_string());
        }
    }
    for expected in [
        "tcpvs_request_duration_seconds",
        "process_open_fds",
        "tcpvs_build_info",
        "tcpvs_service_proxy_refused_total",
    ] {
        assert!(
            mentioned.contains(expected),
            "{expected} not found in the README: {mentioned:?}"
        );
    }

    let (_switch, admin, _a) = switch_with_admin().await;
    let scraped = names(&scrape(admin, "").await);
    let missing: Vec<&String> = mentioned
        .iter()
        .filter(|name| {
            if name.contains('*') {
                let pattern = format!("^{}$", regex::escape(name).replace(r"\*", "[a-z0-9_]+"));
                let pattern = regex::Regex::new(&pattern).unwrap();
                !scraped.iter().any(|s| pattern.is_match(s))
            } else {
                !scraped.contains(*name)
            }
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the README names metrics that /metrics does not have: {missing:?}\nscraped: {scraped:?}"
    );
}
