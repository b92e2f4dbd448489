//! What the operating system lends the switch and can run out of: open-file descriptors, and
//! how the clients share them.
//!
//! - [`descriptors`]: at start, the soft `RLIMIT_NOFILE` is raised to what `max_clients` and the
//!   pools need (at most to the hard limit), and `max_clients` is lowered to what fits when it
//!   cannot be, so that the limit is met at the door (503) and not in the middle of requests.
//! - [`exhaustion`]: when a descriptor cannot be had anyway (other processes share the system
//!   table; idle server connections are not budgeted), accept and connect back off instead of
//!   spinning or blaming a server, and say so at most once a second.
//! - [`share`]: who may take the last quarter of `max_clients` (light sources only).

pub mod descriptors;
pub mod exhaustion;
pub mod share;
