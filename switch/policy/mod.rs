//! Traffic policy in rules (issue 26): rate limits.

pub mod limit;
