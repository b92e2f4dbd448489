//! AFL++ target `response_head`: see `tcpvs_fuzz::targets::check_response_head`.

#[global_allocator]
static ALLOC: tcpvs_fuzz::alloc_guard::Counting = tcpvs_fuzz::alloc_guard::Counting;

fn main() {
    #[cfg(fuzzing)]
    afl::fuzz!(|data: &[u8]| {
        tcpvs_fuzz::targets::check_response_head(data);
    });
    // Built without cargo-afl (`cargo build --release`): replay the files named as arguments,
    // or stdin, once each.
    #[cfg(not(fuzzing))]
    tcpvs_fuzz::replay(tcpvs_fuzz::targets::check_response_head);
}
