//! AFL++ target `client_hello`: see `tcpvs_fuzz::targets::check_client_hello`.

#[global_allocator]
static ALLOC: tcpvs_fuzz::alloc_guard::Counting = tcpvs_fuzz::alloc_guard::Counting;

fn main() {
    #[cfg(fuzzing)]
    afl::fuzz!(|data: &[u8]| {
        tcpvs_fuzz::targets::check_client_hello(data);
    });
    #[cfg(not(fuzzing))]
    tcpvs_fuzz::replay(tcpvs_fuzz::targets::check_client_hello);
}
