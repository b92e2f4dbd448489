//! The locality harness in quick mode (issue 15), through the real `tcpvs` binary: four
//! emulated cache-limited servers whose caches each hold 40% of the working set, closed-loop
//! clients replaying one seeded Zipf trace, `wlc` then `lard`. LARD keeps each object on one
//! server, so the four caches together hold the working set, while under wlc every cache sees
//! every object. This test is about that ordering. Its verdict rests on counts, not on time:
//! the hit rate (cache hits over requests, as the emulated servers count them) and the copies
//! of each cached object; throughput (measured: lard about 4x wlc's) is printed, never
//! judged, as it moves with whatever else the machine runs (the suite's other tests).
//!
//! The harness's own unit tests (cache, costs, queues, workload, log parsing) run here too.

// The command line (benches/locality/main.rs) uses the experiments this test does not.
#[allow(dead_code)]
#[path = "../benches/locality/mod.rs"]
mod harness;

use harness::experiments::{find, quick, Experiment};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lard_beats_wlc_when_the_working_set_exceeds_one_cache() {
    let (workload, common) = quick();
    let binary = Path::new(env!("CARGO_BIN_EXE_tcpvs"));
    let results = harness::run_experiment(Experiment::Quick, &common, &workload, binary, &[])
        .await
        .unwrap_or_else(|e| panic!("the quick run failed: {e}"));
    let wlc = find(&results, "wlc", 1).expect("a wlc run");
    let lard = find(&results, "lard", 1).expect("a lard run");
    for run in [wlc, lard] {
        assert!(
            run.spec.cache_bytes * 2 < common.working_set,
            "each cache holds less than half the working set: {:?}",
            run.spec
        );
    }
    let summary = format!(
        "wlc: {:.0} req/s, {:.1}% hits, {:.2} copies per cached object; \
         lard: {:.0} req/s, {:.1}% hits, {:.2} copies",
        wlc.requests_per_s,
        wlc.hit_rate * 100.0,
        wlc.copies_per_object,
        lard.requests_per_s,
        lard.hit_rate * 100.0,
        lard.copies_per_object
    );
    println!("{summary}");
    assert!(wlc.requests_per_s > 0.0, "{summary}");
    assert!(lard.requests_per_s > 0.0, "{summary}");
    assert!(
        lard.hit_rate >= wlc.hit_rate + 0.08,
        "lard's hit rate at least 8 points above wlc's: {summary}"
    );
    assert!(lard.hit_rate >= 0.9, "{summary}");
    assert!(
        lard.copies_per_object < wlc.copies_per_object,
        "lard keeps fewer copies of each object than wlc: {summary}"
    );
    // The report a user reads: one table row per run.
    let table = harness::report::table(&results);
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| lard |")).count(),
        1,
        "{table}"
    );
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| wlc |")).count(),
        1,
        "{table}"
    );
}
