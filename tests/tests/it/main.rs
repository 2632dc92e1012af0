//! The end-to-end and chaos tests, one module per area, linked as one test
//! binary (`cargo test -p meshlimit-tests --test it <module>::`): each test
//! starts real Envoy, the real agent and, where it says so, real
//! redis-server processes through the harness (`meshlimit_tests`).
//! Under `make test` cargo-nextest runs every test in its own process.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod chaos_agent;
mod chaos_cluster;
mod chaos_failover;
mod chaos_redis;
mod chaos_reshard;
mod chaos_rollout;
mod chaos_upgrade;
mod e2e_aggregate;
mod e2e_cold_start;
mod e2e_declog;
mod e2e_explain;
mod e2e_failures;
mod e2e_false_limits;
mod e2e_grpc;
mod e2e_hostile;
mod e2e_import;
mod e2e_jwt;
mod e2e_limits;
mod e2e_override;
mod e2e_profiles;
mod e2e_redis;
mod e2e_replay;
mod e2e_request_path;
mod e2e_rules;
mod e2e_rules_at_scale;
mod e2e_schedule;
mod e2e_scope;
mod e2e_trial;
mod e2e_trust;
mod e2e_windows;
mod harness;
mod ops_hour;
mod ops_soak;
mod redis_store;
mod regions;
