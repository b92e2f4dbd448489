//! `[switch] cpu_affinity`: whether worker threads are tied to CPUs.

/// Whether worker threads are tied to CPUs, `[switch] cpu_affinity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuAffinity {
    /// `"off"` (the default): the kernel places the worker threads, as HAProxy and nginx
    /// leave them unless told.
    Off,
    /// `"auto"`: with two workers or more, worker i runs only on the i-th CPU the process may
    /// use (supervisor/affinity.rs).
    Auto,
}
