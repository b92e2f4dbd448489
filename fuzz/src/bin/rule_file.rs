//! AFL++ target `rule_file`: see `tcpvs_fuzz::targets::check_rule_file`. Host names never resolve here.

#[global_allocator]
static ALLOC: tcpvs_fuzz::alloc_guard::Counting = tcpvs_fuzz::alloc_guard::Counting;

tcpvs_fuzz::no_dns!();

fn main() {
    assert_no_dns();
    #[cfg(fuzzing)]
    afl::fuzz!(|data: &[u8]| {
        tcpvs_fuzz::targets::check_rule_file(data);
    });
    // Built without cargo-afl (`cargo build --release`): replay the files named as arguments,
    // or stdin, once each.
    #[cfg(not(fuzzing))]
    tcpvs_fuzz::replay(tcpvs_fuzz::targets::check_rule_file);
}
