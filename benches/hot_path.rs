//! The hot path of one request without its I/O: parse the head, route it through 52 rules,
//! pick a server, rebuild the head for the server. Reports time per request (criterion) and
//! heap allocations per steady request (a counting global allocator), for several requests:
//! one that no rule matches (all 52 rules tried, default pool), and ones matching an early path
//! rule, a middle one (rule 8 of 50), a host rule (also spelled `Shop2.Example.COM.:80`: its
//! normal form is made on the stack), a method + path rule and the header rule,
//! a rule that sets, adds and removes fields, and one with a rate limit (issue 26); and, apart, the statistics the admin endpoint reads, as each request records them, and what
//! the access log keeps of each request's head (`access_log_capture/text`: the text and JSON
//! formats; `/combined`: the combined format, which also copies Referer and User-Agent).
//!
//! The steady keep-alive path must not allocate: after a warm-up (the session's vectors grown,
//! the regex caches built), every case runs many requests under the counting allocator, prints
//! `hot_path: <case>: N allocations per request`, and the program exits with status 1, naming
//! the cases that allocated, if any of them did (before any timing).
//!
//! Run:
//!   `cargo bench --bench hot_path`                          allocation check, then criterion
//!   `cargo bench --bench hot_path -- --allocations-only`    the allocation check alone (seconds;
//!                                                           also `HOT_PATH_ALLOCATIONS_ONLY=1`)

use criterion::Criterion;
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tcpvs::access_log::{AccessLog, Request};
use tcpvs::config::{AccessLogFormat, AccessLogTarget, Config};
use tcpvs::http::host::{normal_host, HostScratch};
use tcpvs::http::path::normalize;
use tcpvs::http::rewrite::{forwarded_for, write_request_head, ForwardedFor, RequestEdit, Scheme};
use tcpvs::http::{parse_request, RequestHead};
use tcpvs::policy::rate_limit::Limiter;
use tcpvs::policy::Action;
use tcpvs::state::pool::Pool;
use tcpvs_modules::{MonotonicClock, RequestView};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// 50 rules of the kinds a site uses: 40 path prefixes (rules 1-40), 5 hosts (41-45), 4
/// methods with an extension (46-49), a header (50); then two with policy: field actions (51)
/// and a rate limit (52).
fn rules() -> String {
    let mut text =
        String::from("[virtual.web]\nlisten = \"127.0.0.1:0\"\ndefault_pool = \"static\"\n");
    for i in 0..40 {
        text += &format!(
            "[[virtual.web.rule]]\npath = \"^/section{i}/\"\npool = \"p{}\"\n",
            i % 4
        );
    }
    for i in 0..5 {
        text +=
            &format!("[[virtual.web.rule]]\nhost = '^shop{i}\\.example\\.com$'\npool = \"p{i}\"\n");
    }
    for (i, ext) in ["php", "cgi", "pl", "py"].iter().enumerate() {
        text += &format!(
            "[[virtual.web.rule]]\nmethod = \"POST\"\npath = '\\.{ext}$'\npool = \"p{i}\"\n"
        );
    }
    text += "[[virtual.web.rule]]\nheader = { name = \"X-Pool\", value = \"^images$\" }\npool = \"p1\"\n";
    // Policy (issue 26): field actions on both sides, and a rate limit whose bucket never
    // empties here (the check is what is measured, not a refusal).
    text += "[[virtual.web.rule]]\npath = \"^/policy/headers/\"\npool = \"p2\"\n\
             request_headers = { set = { \"X-Pool\" = \"images\" }, add = { \"Via\" = \"1.1 tcpvs\" }, remove = [\"Cookie\"] }\n\
             response_headers = { set = { \"Strict-Transport-Security\" = \"max-age=31536000\" }, remove = [\"Server\"] }\n";
    text += "[[virtual.web.rule]]\npath = \"^/policy/limit/\"\npool = \"p3\"\nlimit = \"bench\"\n";
    text += "[limit.bench]\nkey = \"source\"\nrate = \"1000000/s\"\nburst = 1000000\n";
    for p in ["static", "p0", "p1", "p2", "p3", "p4"] {
        text += &format!(
            "[pool.{p}]\nscheduler = \"wlc\"\nservers = [{{ addr = \"10.0.0.1:80\" }}, {{ addr = \"10.0.0.2:80\", weight = 2 }}, {{ addr = \"10.0.0.3:80\" }}]\n"
        );
    }
    text
}

const BROWSER_REQUEST: &str = "GET /static/img/12345/photo.jpg?size=large HTTP/1.1\r\n\
Host: www.example.com\r\n\
User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0\r\n\
Accept: image/avif,image/webp,image/png,image/svg+xml,image/*;q=0.8,*/*;q=0.5\r\n\
Accept-Language: en-US,en;q=0.5\r\n\
Accept-Encoding: gzip, deflate, br, zstd\r\n\
Referer: https://www.example.com/gallery/index.html\r\n\
Cookie: session=8f14e45fceea167a5a36dedd4bea2543; theme=dark\r\n\
Connection: keep-alive\r\n\
Sec-Fetch-Dest: image\r\n\
Sec-Fetch-Mode: no-cors\r\n\
Priority: u=5, i\r\n\r\n";

/// One request of the bench: the browser request above with one thing changed.
struct Case {
    /// Printed in the allocation lines.
    name: &'static str,
    /// Criterion's id, `hot_path/<id>`.
    id: &'static str,
    request: Vec<u8>,
    /// The rule (1-based, in file order) that must decide it; `None`: the default pool.
    rule: Option<usize>,
}

fn cases() -> Vec<Case> {
    let case = |name, id, from: &str, to: &str, rule| Case {
        name,
        id,
        request: BROWSER_REQUEST.replacen(from, to, 1).into_bytes(),
        rule,
    };
    vec![
        case(
            "no rule matches (52 tried, default pool)",
            "no_rule_matches",
            "",
            "",
            None,
        ),
        case(
            "rule 1 of 50 (path)",
            "rule_1_matches",
            "/static/img/",
            "/section0/img/",
            Some(1),
        ),
        case(
            "rule 8 of 50 (path)",
            "rule_8_matches",
            "/static/img/",
            "/section7/img/",
            Some(8),
        ),
        case(
            "rule 43 of 50 (host)",
            "host_rule_43_matches",
            "Host: www.example.com",
            "Host: shop2.example.com",
            Some(43),
        ),
        case(
            "rule 43 of 50 (host, upper case, a trailing dot and a port)",
            "host_rule_43_matches_spelled_otherwise",
            "Host: www.example.com",
            "Host: Shop2.Example.COM.:80",
            Some(43),
        ),
        case(
            "rule 46 of 50 (method and path)",
            "method_rule_46_matches",
            "GET /static/img/12345/photo.jpg",
            "POST /cgi-bin/form.php",
            Some(46),
        ),
        case(
            "rule 50 of 50 (header)",
            "header_rule_50_matches",
            "Priority: u=5, i\r\n",
            "Priority: u=5, i\r\nX-Pool: images\r\n",
            Some(50),
        ),
        case(
            "rule 51 (fields set, added and removed both ways)",
            "policy_headers_rule_51",
            "/static/img/",
            "/policy/headers/img/",
            Some(51),
        ),
        case(
            "rule 52 (a rate limit by source)",
            "policy_limit_rule_52",
            "/static/img/",
            "/policy/limit/img/",
            Some(52),
        ),
    ]
}

/// Everything a session keeps from request to request.
struct HotPath {
    pools: Vec<Pool>,
    /// The rule file's `[limit.NAME]`, as a generation holds them.
    limits: Vec<Limiter>,
    /// A path in normal form, when the request's is not (http/path.rs).
    normal_path: Vec<u8>,
    config: Config,
    buffer: Vec<u8>,
    head: RequestHead,
    out: Vec<u8>,
    client: ForwardedFor,
}

impl HotPath {
    fn new() -> Self {
        let config = Config::parse("bench.toml", &rules()).expect("bench rules");
        let clock: Arc<dyn tcpvs_modules::Clock> = Arc::new(MonotonicClock::new());
        let pools = config
            .pools
            .iter()
            .map(|p| Pool::new(p, Arc::clone(&clock), 1).expect("bench pool"))
            .collect();
        let limits = config.limits.iter().cloned().map(Limiter::new).collect();
        HotPath {
            pools,
            limits,
            normal_path: Vec::new(),
            config,
            buffer: Vec::with_capacity(4096),
            head: RequestHead::default(),
            out: Vec::with_capacity(1024),
            client: forwarded_for(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))),
        }
    }

    /// One request: parse, route, pick, rebuild the head. Returns the chosen pool and server
    /// (so nothing is optimised away).
    fn request(&mut self, raw: &[u8]) -> (usize, usize) {
        self.buffer.clear();
        self.buffer.extend_from_slice(raw);
        let complete = parse_request(&mut self.buffer, &mut self.head).expect("valid request");
        assert!(complete);
        let buf = &self.buffer[..];
        let headers = self.head.lookup(buf);
        // The rules see the path in its normal form (exchange/mod.rs `decide`).
        let raw_path = self.head.path.get(buf);
        let normal = normalize(raw_path, &mut self.normal_path);
        let path = normal.unwrap_or(raw_path);
        // And the host in its normal form (exchange/route.rs `request_view`).
        let mut host = HostScratch::default();
        let view = RequestView {
            method: self.head.method(buf),
            path,
            query: self.head.query.map(|q| q.get(buf)),
            host: self.head.host.map(|h| normal_host(h.get(buf), &mut host)),
            headers: &headers,
            client: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
        };
        let matched = self.config.services[0]
            .rules
            .route(&view, None)
            .expect("a rule or the default pool");
        let (pool_index, edits) = match matched.action {
            Action::Pool { pool, edits } => (*pool, edits.as_deref()),
            _ => panic!("the bench's rules all name pools"),
        };
        let mut edit = RequestEdit::default();
        if let Some(edits) = edits {
            if let Some(limit) = edits.limit {
                // Keyed from the request as the exchange keys it (exchange/policy.rs). Allowed
                // through the allocation check (fewer requests than the burst); the timing runs
                // past the bucket, and a refusal costs the same check.
                let request = (&self.head, buf);
                black_box(self.limits[limit].check_request(request, normal, view.client));
            }
            edit.headers = edits.request_headers.as_ref();
        }
        let (server, _ticket) = self.pools[pool_index].pick(&view, &[]).expect("a server");
        write_request_head(
            &mut self.out,
            &self.head,
            buf,
            self.client.as_bytes(),
            b"10.0.0.1:80",
            Scheme::Http,
            edit,
        );
        (pool_index, server)
    }

    /// Outside the measured loop: the 1-based number of the first rule `raw` matches, and
    /// whether `route` gave that rule's pool (or the default pool when none matches).
    fn deciding_rule(&mut self, raw: &[u8]) -> (Option<usize>, bool) {
        let (pool, _) = self.request(raw);
        let buf = &self.buffer[..];
        let headers = self.head.lookup(buf);
        let mut host = HostScratch::default();
        let view = RequestView {
            method: self.head.method(buf),
            path: self.head.path.get(buf),
            query: self.head.query.map(|q| q.get(buf)),
            host: self.head.host.map(|h| normal_host(h.get(buf), &mut host)),
            headers: &headers,
            client: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
        };
        let rules = &self.config.services[0].rules;
        let rule = rules.rules().iter().position(|r| r.matches(&view, None));
        let expected_pool = match rule {
            Some(i) => rules.rules()[i].action.pool(),
            None => rules.default_pool(),
        };
        (rule.map(|i| i + 1), expected_pool == Some(pool))
    }
}

const WARM_UP: u64 = 1_000;
const STEADY: u64 = 100_000;

/// Heap allocations per steady request of every case; exits with status 1 when a case's
/// request is not decided by the rule it names, or when any steady request allocates.
fn allocation_check(path: &mut HotPath, cases: &[Case]) {
    let mut allocating = Vec::new();
    for case in cases {
        let (rule, same_pool) = path.deciding_rule(&case.request);
        if rule != case.rule || !same_pool {
            eprintln!(
                "hot_path: {}: decided by rule {rule:?} (route agrees: {same_pool}), expected {:?}",
                case.name, case.rule
            );
            std::process::exit(1);
        }
        for _ in 0..WARM_UP {
            black_box(path.request(black_box(&case.request)));
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..STEADY {
            black_box(path.request(black_box(&case.request)));
        }
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        let per_request = allocations as f64 / STEADY as f64;
        if allocations == 0 {
            println!(
                "hot_path: {}: 0 allocations per request (0 in {STEADY} requests)",
                case.name
            );
        } else {
            println!(
                "hot_path: {}: {per_request:.3} allocations per request ({allocations} in {STEADY} requests)",
                case.name
            );
            allocating.push(case.name);
        }
    }
    // What the access log keeps of a head, in each format, on the browser request.
    for (name, log) in access_logs(path) {
        let mut kept = Request::default();
        let buf = &path.buffer[..];
        for _ in 0..WARM_UP {
            log.capture(&mut kept, &path.head, buf);
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        for _ in 0..STEADY {
            log.capture(black_box(&mut kept), black_box(&path.head), buf);
        }
        let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
        println!(
            "hot_path: access log capture ({name}): {} allocations per request ({allocations} in {STEADY} requests)",
            allocations as f64 / STEADY as f64
        );
        if allocations != 0 {
            allocating.push(name);
        }
    }
    if !allocating.is_empty() {
        eprintln!(
            "hot_path: FAILED: steady requests allocate: {}",
            allocating.join("; ")
        );
        std::process::exit(1);
    }
}

/// An access log of each format (on stderr: capturing writes nothing), with the browser
/// request parsed into `path`'s head.
fn access_logs(path: &mut HotPath) -> [(&'static str, AccessLog); 2] {
    path.request(BROWSER_REQUEST.as_bytes());
    let mut settings = path.config.switch.clone();
    settings.access_log = AccessLogTarget::Stderr;
    let mut log = |format| {
        settings.access_log_format = format;
        AccessLog::new(&settings).expect("an access log on stderr")
    };
    [
        ("text", log(AccessLogFormat::Text)),
        ("combined", log(AccessLogFormat::Combined)),
    ]
}

fn timing(path: &mut HotPath, cases: &[Case]) {
    let mut c = Criterion::default().configure_from_args();
    for case in cases {
        c.bench_function(&format!("hot_path/{}", case.id), |b| {
            b.iter(|| black_box(path.request(black_box(&case.request))))
        });
    }
    // What the admin statistics add to each request (exchange/account.rs): the clock read for
    // the request's duration, its class and histogram at the service, the response's latency
    // and class at the server.
    let service = tcpvs::state::stats::ServiceStats::default();
    let server = tcpvs::state::stats::ServerStats::default();
    let started = std::time::Instant::now();
    c.bench_function("hot_path/statistics_per_request", |b| {
        b.iter(|| {
            let elapsed = black_box(started).elapsed();
            service.classes.count(black_box(200));
            service.duration.record(elapsed);
            server.latency.record(elapsed);
            server.classes.count(black_box(200));
        })
    });
    for (name, log) in access_logs(path) {
        let mut kept = Request::default();
        let (head, buf) = (&path.head, &path.buffer[..]);
        c.bench_function(&format!("hot_path/access_log_capture/{name}"), |b| {
            b.iter(|| log.capture(black_box(&mut kept), black_box(head), black_box(buf)))
        });
    }
    c.final_summary();
}

fn main() {
    let allocations_only = std::env::args().any(|a| a == "--allocations-only")
        || std::env::var_os("HOT_PATH_ALLOCATIONS_ONLY").is_some_and(|v| !v.is_empty() && v != "0");
    let cases = cases();
    let mut path = HotPath::new();
    allocation_check(&mut path, &cases);
    if !allocations_only {
        timing(&mut path, &cases);
    }
}
