//! Encoding and sending spans over OTLP/HTTP (`otlp`).

pub mod collector;
pub mod encode;
pub mod export;
pub mod post;
