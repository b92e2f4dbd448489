//! Pools that follow DNS: a pool with `discover = { dns = "NAME:PORT" }` or `{ srv = "NAME" }`
//! has, beside the servers its file lists, one server per address the name has now (SRV: per
//! record, with its port and weight). KTCPVS and HAProxy without `resolvers` read a name once;
//! here it is asked again every `interval` (sooner when the answer's TTL is shorter).
//!
//! An answer never changes a pool by a way of its own: it becomes the pool's server list as a
//! reload would write it, and goes through the reload's plan and commit (reload/plan.rs
//! `Builder::plan_found`, supervisor/mod.rs `Supervisor::apply_found`). So a server found joins
//! as a server added to the file does (health checks, slow start), and one gone leaves as a
//! removed one does (its requests in flight finish under the generation they started with).
//!
//! - [`lookup`]: one question to the resolver and its answer as servers;
//! - [`found`]: a pool's list of servers with an answer in it;
//! - [`once`]: every pool asked at once, at start, at a reload and by `tcpvs check`;
//! - [`watch`]: the task per pool that asks again and hands changes to the supervisor.
//!
//! A lookup that fails or answers nothing keeps the last answer (a warning once, until it
//! answers again): a DNS server that stops must not empty a pool.

pub mod found;
pub mod lookup;
pub mod once;
pub mod watch;
