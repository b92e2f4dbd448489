//! Runs every seed of fuzz/corpus/<target>/ (and fuzz/regressions/<target>/, if any) through
//! its target's checks, without AFL: `cargo test --release` in fuzz/.

use std::path::Path;

tcpvs_fuzz::no_dns!();

#[global_allocator]
static ALLOC: tcpvs_fuzz::alloc_guard::Counting = tcpvs_fuzz::alloc_guard::Counting;

fn run(target: &str, check: fn(&[u8])) {
    assert_no_dns();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            eprintln!("{}", path.display());
            check(&data);
            n += 1;
        }
    }
    assert!(n > 0, "no seeds for {target}");
}

#[test]
fn request_head() {
    run("request_head", tcpvs_fuzz::targets::check_request_head);
}

#[test]
fn differential_head() {
    run("differential_head", tcpvs_fuzz::targets::check_differential);
}

#[test]
fn chunked() {
    run("chunked", tcpvs_fuzz::targets::check_chunked);
}

#[test]
fn response_head() {
    run("response_head", tcpvs_fuzz::targets::check_response_head);
}

#[test]
fn rule_file() {
    run("rule_file", tcpvs_fuzz::targets::check_rule_file);
}

#[test]
fn import_ktcpvs() {
    run("import_ktcpvs", tcpvs_fuzz::targets::check_import_ktcpvs);
}

#[test]
fn proxy_header() {
    run("proxy_header", tcpvs_fuzz::targets::check_proxy_header);
}

#[test]
fn client_hello() {
    run("client_hello", tcpvs_fuzz::targets::check_client_hello);
}

/// The guard sees a parser's growth on its own thread, and not another thread's meanwhile.
#[test]
fn the_alloc_guard_counts_this_thread_only() {
    let (_, grown) = tcpvs_fuzz::alloc_guard::measure(|| std::hint::black_box(vec![0u8; 1 << 20]));
    assert!(grown >= 1 << 20, "a 1 MiB vector grew the heap by {grown}");
    let (_, grown) = tcpvs_fuzz::alloc_guard::measure(|| {
        std::thread::spawn(|| drop(std::hint::black_box(vec![0u8; 1 << 20])))
            .join()
            .unwrap()
    });
    assert!(
        grown < 1 << 20,
        "another thread's vector counted here: {grown}"
    );
}
