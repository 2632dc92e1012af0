//! meshlimit-agent: the per-node agent. It answers the filters' lease requests from
//! an authoritative store, serves them the rules file (watched and validated here),
//! collects their decision reports, and exports Prometheus metrics.
//!
//! `main.rs` only wires: parse the command line ([`config`]), then [`run`].
//! The operator's offline commands are the `meshlimit` binary's (`cli/`),
//! built on this library's rules loading, store and secret.

#![forbid(unsafe_code)]

pub mod api;
pub mod config;
pub mod decision_log;
pub mod fail_local;
pub mod false_limits;
pub mod fleet_override;
pub mod leases;
pub mod metrics;
pub mod pool;
pub mod regions;
pub mod reports;
pub mod rules_watch;
pub mod run;
pub(crate) mod server;
pub mod shutdown;
#[cfg(test)]
mod test_support;
pub mod trial;
pub(crate) mod window;

pub use api::App;
pub use leases::LeaseSettings;
pub use rules_watch::CurrentRules;
