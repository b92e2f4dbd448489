//! What the `tcpvs` command does for each verb; `main.rs` only reads the command line and
//! picks one of these.

mod admin_endpoint;
pub mod admin_verbs;
pub mod check;
mod demo;
pub mod host_port;
pub mod import_ktcpvs;
pub mod run;
mod signals;
