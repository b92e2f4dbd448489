//! tcpvs: a layer-7 content switch, the user-space heir of KTCPVS.
//!
//! The data path, in the order a request takes it: [`listener`] (accept) -> `connection` (the
//! client connection: PROXY header, TLS, then a protocol front-end, `connection/h1.rs` for
//! HTTP/1, `connection/h2.rs` for HTTP/2 (one task per stream) or `connection/tunnel.rs` for
//! TLS passthrough, which reads each request's head) -> `exchange` (one request carried out:
//! route -> pick -> connect or reuse -> relay -> account, every failure classified in
//! `exchange/failure.rs`; the server's protocol spoken by `upstream`, HTTP/1.1 in
//! `upstream/h1/`, the two sides meeting in `exchange/client.rs` and `exchange/server.rs`) with [`http`] for framing, [`rules`] for routing, [`state`] for
//! pools, servers and counters and the scheduling modules of `tcpvs-modules`, [`relay`] for
//! bodies (spliced: `relay/splice.rs`), [`stream`] for socket I/O. [`gateway::Switch`] starts
//! and stops it all; [`config`] reads rule files.

pub mod access_log;
pub mod admin;
pub mod buffer;
pub mod buffering;
pub mod capacity;
pub mod compress;
pub mod config;
mod connection;
pub mod discovery;
pub mod edge;
mod exchange;
pub mod gateway;
pub mod health;
pub mod http;
pub mod import_ktcpvs;
pub mod listener;
pub mod policy;
pub mod recycle;
pub mod relay;
pub mod reload;
pub mod rules;
pub mod shared;
pub mod socket;
pub mod state;
pub mod stream;
pub mod supervisor;
pub mod throttled;
pub mod timeouts;
pub mod tls;
pub mod trace;
pub mod upgrade;
pub mod upstream;

pub use config::Config;
pub use gateway::Switch;
