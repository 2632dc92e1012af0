//! The store's integration tests, one binary: the conformance suite every
//! backend passes (`conformance::memory::…`, `conformance::redis::…`,
//! `conformance::redis_cluster::…`), the Lua bucket against core's
//! (`redis_script`), Redis over TLS (`redis_tls`), the connections calls off
//! the lease path open (`redis_connections`) and a Redis Cluster hash slot
//! moving under the store (`redis_reshard`).
//! `cargo nextest run -p meshlimit-store --test it MODULE::` runs one part.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod conformance;
mod redis_connections;
mod redis_reshard;
mod redis_script;
mod redis_tls;
