//! Heap bytes per remembered target in the `lard` and `lard-r` maps, counted by a wrapping
//! global allocator. Run: `cargo bench --bench lard_memory`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tcpvs_modules::{
    build, BuildContext, HeaderLookup, MonotonicClock, PoolView, RequestView, ServerState,
};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

struct NoHeaders;
impl HeaderLookup for NoHeaders {
    fn header(&self, _name: &str) -> Option<&[u8]> {
        None
    }
}

fn main() {
    const TARGETS: usize = 100_000;
    let paths: Vec<Vec<u8>> = (0..TARGETS)
        .map(|i| format!("/static/img/{i}/photo.jpg").into_bytes())
        .collect();
    let servers: Vec<ServerState> = (0..8).map(|_| ServerState::new(1)).collect();
    let ids: Vec<String> = (0..8).map(|i| format!("10.0.0.{i}:80")).collect();
    for module in ["lard", "lard-r"] {
        let before = LIVE.load(Ordering::Relaxed);
        let context = BuildContext {
            pool: PoolView { servers: &servers },
            server_ids: &ids,
            clock: Arc::new(MonotonicClock::new()),
        };
        let scheduler = build(module, &[], &context).unwrap();
        let pool = PoolView { servers: &servers };
        for p in &paths {
            let r = RequestView {
                method: "GET",
                path: p,
                query: None,
                host: None,
                headers: &NoHeaders,
                client: IpAddr::V4(Ipv4Addr::LOCALHOST),
            };
            scheduler.pick(&r, &pool, &[]);
        }
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        println!(
            "{module}: {TARGETS} targets, {bytes} heap bytes, {:.1} bytes per target",
            bytes as f64 / TARGETS as f64
        );
        drop(scheduler);
    }
}
