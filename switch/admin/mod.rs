//! The admin endpoint: HTTP/1.1 on `[admin] listen`, on a thread of its own so that it never
//! takes a worker's time. It reads snapshots of the shared counters and states (`/stats`,
//! `/metrics`, the monitor page) and writes only through `control::apply` (`PUT
//! /pools/{pool}/servers/{addr}`). The `tcpvs list`/`set-weight`/`set-state`/`reload`
//! commands talk to it through [`client`].

pub mod client;
