//! The agent's integration tests, one binary: a module per area.
//! `cargo nextest run -p meshlimit-agent --test it MODULE::` runs one.
//! Two tests measure their process and stay binaries of their own:
//! `decision_log_allocations` installs a counting global allocator, and
//! `memory_bounds` reads the process's RSS growth per key.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

mod api_lease;
mod api_sync;
mod api_trust;
mod bounds_api;
mod bounds_process;
mod cli;
mod region_credentials;
mod region_reconnect;
mod regions_lease;
mod rules_fixtures;
