//! Encoding and sending spans over OTLP/HTTP (`otlp`).

pub mod encode;
pub mod export;
