//! The hot path of one request without its I/O: parse the head, route it through 50 rules,
//! pick a server, rebuild the head for the server. Reports time per request (criterion) and
//! heap allocations per request (a counting global allocator; the goal is none on the steady
//! keep-alive path).
//!
//! Run: `cargo bench --bench hot_path`

use criterion::{criterion_group, Criterion};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tcpvs::config::Config;
use tcpvs::http::rewrite::{forwarded_for, write_request_head, ForwardedFor};
use tcpvs::http::{parse_request, RequestHead};
use tcpvs::upstream::Pool;
use tcpvs_modules::{MonotonicClock, RequestView};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
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

/// 50 rules of the kinds a site uses: path prefixes, extensions, hosts, methods, a header.
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
    for p in ["static", "p0", "p1", "p2", "p3", "p4"] {
        text += &format!(
            "[pool.{p}]\nscheduler = \"wlc\"\nservers = [{{ addr = \"10.0.0.1:80\" }}, {{ addr = \"10.0.0.2:80\", weight = 2 }}, {{ addr = \"10.0.0.3:80\" }}]\n"
        );
    }
    text
}

const BROWSER_REQUEST: &[u8] = b"GET /static/img/12345/photo.jpg?size=large HTTP/1.1\r\n\
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

/// Everything a session keeps from request to request.
struct HotPath {
    pools: Vec<Pool>,
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
            .map(|p| Pool::new(p, Arc::clone(&clock), 1).unwrap())
            .collect();
        HotPath {
            pools,
            config,
            buffer: Vec::with_capacity(4096),
            head: RequestHead::default(),
            out: Vec::with_capacity(1024),
            client: forwarded_for(IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7))),
        }
    }

    /// One request: returns the chosen server index (so nothing is optimised away).
    fn request(&mut self, raw: &[u8]) -> usize {
        self.buffer.clear();
        self.buffer.extend_from_slice(raw);
        let complete = parse_request(&mut self.buffer, &mut self.head).expect("valid request");
        assert!(complete);
        let buf = &self.buffer[..];
        let headers = self.head.lookup(buf);
        let view = RequestView {
            method: self.head.method(buf),
            path: self.head.path.get(buf),
            query: self.head.query.map(|q| q.get(buf)),
            host: self.head.host.map(|h| h.get(buf)),
            headers: &headers,
            client: IpAddr::V4(Ipv4Addr::new(198, 51, 100, 7)),
        };
        let pool = &self.pools[self.config.services[0].rules.route(&view).expect("a pool")];
        let server = pool.pick(&view, &[]).expect("a server");
        write_request_head(
            &mut self.out,
            &self.head,
            buf,
            self.client.as_bytes(),
            b"10.0.0.1:80",
        );
        server
    }
}

fn hot_path(c: &mut Criterion) {
    let mut path = HotPath::new();
    // Matches no rule: all 50 are tried before the default pool.
    c.bench_function("hot_path/no_rule_matches", |b| {
        b.iter(|| black_box(path.request(BROWSER_REQUEST)))
    });
    let section =
        String::from_utf8_lossy(BROWSER_REQUEST).replacen("/static/img/", "/section7/img/", 1);
    c.bench_function("hot_path/rule_8_matches", |b| {
        b.iter(|| black_box(path.request(section.as_bytes())))
    });
}

fn allocations_per_request() {
    let mut path = HotPath::new();
    for _ in 0..1000 {
        path.request(BROWSER_REQUEST);
    }
    const N: u64 = 100_000;
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..N {
        black_box(path.request(BROWSER_REQUEST));
    }
    let after = ALLOCATIONS.load(Ordering::Relaxed);
    println!(
        "hot_path allocations: {} in {N} requests ({:.3} per request)",
        after - before,
        (after - before) as f64 / N as f64
    );
}

criterion_group!(benches, hot_path);

fn main() {
    allocations_per_request();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
