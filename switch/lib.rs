//! tcpvs: a layer-7 content switch, the user-space heir of KTCPVS.
//!
//! The data path, in the order a request takes it:
//! [`listener`] (accept) -> [`session`] (read head, route, pick, connect or reuse, relay,
//! account) with [`http`] for framing, [`rules`] for routing, [`upstream`] for pools and the
//! scheduling modules of `tcpvs-modules`, [`relay`] and [`splice`] for bodies, [`stats`] for
//! counters. [`gateway::Switch`] starts and stops it all; [`config`] reads rule files.

pub mod access_log;
pub mod admin;
pub mod buffer;
pub mod config;
pub mod edge;
pub mod gateway;
pub mod health;
pub mod http;
pub mod import_ktcpvs;
pub mod limits;
pub mod listener;
pub mod recycle;
pub mod relay;
pub mod reload;
pub mod rules;
mod session;
pub mod shared;
pub mod socket;
pub mod state;
pub mod stream;
pub mod supervisor;
pub mod timeouts;
pub mod upgrade;

pub use config::Config;
pub use gateway::Switch;
