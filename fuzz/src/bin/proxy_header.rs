//! AFL++ target `proxy_header`: see `tcpvs_fuzz::targets::check_proxy_header`.

#[global_allocator]
static ALLOC: tcpvs_fuzz::alloc_guard::Counting = tcpvs_fuzz::alloc_guard::Counting;

fn main() {
    #[cfg(fuzzing)]
    afl::fuzz!(|data: &[u8]| {
        tcpvs_fuzz::targets::check_proxy_header(data);
    });
    #[cfg(not(fuzzing))]
    tcpvs_fuzz::replay(tcpvs_fuzz::targets::check_proxy_header);
}
