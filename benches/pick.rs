//! One pick of a scheduling module, with 8 and 64 servers and 100 000 live targets.
//! Run: `cargo bench --bench pick`. Goals (issue 3): wlc and hash under 200 ns, lard and
//! lard-r under 500 ns.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use tcpvs_modules::{
    build, BuildContext, HeaderLookup, MonotonicClock, PoolView, RequestView, ServerState,
};

const TARGETS: usize = 100_000;

struct NoHeaders;
impl HeaderLookup for NoHeaders {
    fn header(&self, _name: &str) -> Option<&[u8]> {
        None
    }
}

fn request(path: &[u8]) -> RequestView<'_> {
    RequestView {
        method: "GET",
        path,
        query: None,
        host: None,
        headers: &NoHeaders,
        client: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
    }
}

fn picks(c: &mut Criterion) {
    let paths: Vec<Vec<u8>> = (0..TARGETS)
        .map(|i| format!("/static/img/{i}/photo.jpg").into_bytes())
        .collect();
    let mut group = c.benchmark_group("pick");
    for servers_count in [8usize, 64] {
        // Some load, unevenly spread, as on a busy pool.
        let servers: Vec<ServerState> = (0..servers_count)
            .map(|i| {
                let s = ServerState::new(1 + (i % 3) as u32);
                for _ in 0..(i * 7 % 23) {
                    s.add_active();
                }
                s
            })
            .collect();
        let ids: Vec<String> = (0..servers_count)
            .map(|i| format!("10.0.{}.{}:80", i / 250, i % 250))
            .collect();
        for module in ["wlc", "hash", "lard", "lard-r"] {
            let context = BuildContext {
                pool: PoolView { servers: &servers },
                server_ids: &ids,
                clock: Arc::new(MonotonicClock::new()),
            };
            let scheduler = build(module, &[], &context).unwrap();
            let pool = PoolView { servers: &servers };
            // Fill the module's target map (where it has one) with 100 000 live targets.
            for p in &paths {
                scheduler.pick(&request(p), &pool, &[]);
            }
            let mut i = 0usize;
            group.bench_with_input(
                BenchmarkId::new(module, servers_count),
                &servers_count,
                |b, _| {
                    b.iter(|| {
                        i = (i + 7919) % TARGETS;
                        black_box(scheduler.pick(&request(&paths[i]), &pool, &[]))
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, picks);
criterion_main!(benches);
