//! Fuzz targets for tcpvs. Each `src/bin/*.rs` is one AFL++ target (cargo-afl) calling one of
//! the `check_*` functions below, which panic on any violated property; AFL++ records a panic
//! as a crash. The functions are plain Rust, so a crash input can be replayed without AFL:
//! `target/release/NAME < FILE` (the afl crate runs the body once on stdin outside afl-fuzz).

pub mod alloc_guard;
pub mod strict;
pub mod targets;

/// Defines `getaddrinfo` in the calling binary, answering "name not known" for every name, so
/// that a fuzzed rule file or KTCPVS file never sends a DNS query (the loaders resolve
/// `NAME:PORT` server addresses with the system resolver). The executable's own definition
/// wins over libc's: std's resolver calls are bound to it at link time. Only host-name
/// resolution is replaced; IP literals never reach the resolver in tcpvs.
#[macro_export]
macro_rules! no_dns {
    () => {
        /// See `tcpvs_fuzz::no_dns!`.
        ///
        /// # Safety
        /// Touches none of its pointer arguments but `res`, which the caller must pass valid.
        #[no_mangle]
        pub unsafe extern "C" fn getaddrinfo(
            _node: *const ::std::ffi::c_char,
            _service: *const ::std::ffi::c_char,
            _hints: *const ::std::ffi::c_void,
            res: *mut *mut ::std::ffi::c_void,
        ) -> ::std::ffi::c_int {
            if !res.is_null() {
                *res = ::std::ptr::null_mut();
            }
            // EAI_NONAME (glibc): "Name or service not known".
            -2
        }

        /// Panics unless the resolver above is the one in use.
        fn assert_no_dns() {
            use ::std::net::ToSocketAddrs;
            assert!(
                ("localhost", 80).to_socket_addrs().is_err(),
                "getaddrinfo was not replaced: the fuzzer would resolve names"
            );
        }
    };
}

/// Runs `check` on each file named on the command line (or on stdin without arguments),
/// printing each name first: the replay mode of the targets built without cargo-afl.
pub fn replay(check: fn(&[u8])) {
    use std::io::Read;
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        let mut data = Vec::new();
        std::io::stdin()
            .read_to_end(&mut data)
            .expect("reading stdin");
        check(&data);
        return;
    }
    for file in files {
        eprintln!("{file}");
        let data = std::fs::read(&file).unwrap_or_else(|e| panic!("{file}: {e}"));
        check(&data);
    }
}
