//! The switch's run-time state, apart from the connections that read it: the servers
//! ([`server`], with their recorded [`status`], [`stats`] and the order of their connects'
//! [`handshakes`]), the pools that group them ([`pool`]), the generation a reload swaps in whole
//! ([`generation`]), the one writer of a server's state ([`control`]) and the reading of it all
//! at once ([`snapshot`]).

pub mod control;
pub mod generation;
pub mod handshakes;
pub mod pool;
pub mod server;
pub mod snapshot;
pub mod stats;
pub mod status;
