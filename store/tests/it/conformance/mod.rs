//! The store conformance suite: what every [`Store`] backend must do, written
//! once and run against each of them, the embedded memory store, a real single
//! redis-server and a real three-master Redis Cluster. A new backend adds one
//! `conformance!` line (and its start in `backends.rs`).
//!
//! Each behaviour is a function over `&dyn Store` (every store trait at
//! once), in a module per concept (`buckets`, `asks`, `windows`, `fleet`,
//! `control`, `peek`, `stopping`); the macro at the end makes a test of it per backend (`memory::…`, `redis::…`, `redis_cluster::…`), each
//! with its own fresh store. Time passes on the store's own clock (tokio's for
//! the memory store, the Redis server's `TIME` for Redis), so bounds on waits
//! leave room for a loaded machine where they must, and are exact elsewhere:
//! limits slow enough (one token per 10 s) that no refill shows between two calls.
//!
//! What this suite leaves to others: the Lua bucket's arithmetic against core's
//! (`redis_script`, differential), hostile bucket state (same file),
//! races, failover and routing through the real agent (`tests/tests/it/redis_store.rs`,
//! the chaos tests), the memory store's key cap and sweeper (its unit tests).

use crate::common;

mod asks;
mod backends;
mod buckets;
mod control;
mod fleet;
mod peek;
mod stopping;
mod windows;

use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

use meshlimit_core::{DescriptorKey, Limit, Take};
use meshlimit_store::{Acquire, Buckets, FleetState};

/// A backend under test: every store trait at once.
pub(crate) trait Store: Buckets + FleetState {}

impl<T: Buckets + FleetState> Store for T {}

/// `requests` per `per`, with a burst of `burst`.
fn limit(requests: u32, per: Duration, burst: u32) -> Limit {
    Limit::new(
        NonZeroU32::new(requests).unwrap(),
        NonZeroU64::new(u64::try_from(per.as_nanos()).unwrap()).unwrap(),
        NonZeroU32::new(burst).unwrap(),
    )
}

/// One token per 10 s, a burst of 10: nothing refills between two calls.
fn slow() -> Limit {
    limit(10, Duration::from_secs(100), 10)
}

fn ask(rule: &str, parts: &[&str], limit: Limit, min: u32, max: u32) -> Acquire {
    Acquire {
        key: DescriptorKey::new(rule, parts),
        limit,
        min,
        max,
        share: 1.0,
    }
}

/// One item's answer; a store error fails the test.
async fn take(store: &dyn Store, item: Acquire) -> Take {
    let mut answers = store.acquire(std::slice::from_ref(&item)).await;
    assert_eq!(answers.len(), 1, "one answer per item");
    match answers.pop() {
        Some(Ok(take)) => take,
        other => panic!("{}: {item:?}: the store failed: {other:?}", store.name()),
    }
}

fn granted(take: &Take) -> (u32, u32) {
    match take {
        Take::Granted {
            tokens, remaining, ..
        } => (*tokens, *remaining),
        Take::Denied { .. } => panic!("expected a grant, got {take:?}"),
    }
}

fn retry_after(take: &Take) -> Duration {
    match take {
        Take::Denied { retry_after_ns } => Duration::from_nanos(*retry_after_ns),
        Take::Granted { .. } => panic!("expected a denial, got {take:?}"),
    }
}

/// `d` lies in `(full - slack, full]`: a wait measured a moment after the
/// bucket changed (Redis stamps in µs; the moment is well under `slack`).
fn assert_about(d: Duration, full: Duration, what: &str) {
    let slack = Duration::from_secs(1);
    assert!(
        d <= full && d > full.saturating_sub(slack),
        "{what}: {d:?}, expected just under {full:?}"
    );
}

/// Every behaviour, as a test against the backend `make` starts.
macro_rules! conformance {
    ($backend:ident, $make:expr) => {
        mod $backend {
            conformance!(@each $make;
                buckets::grants_up_to_the_limit_then_denies,
                buckets::a_denial_says_when_to_retry,
                buckets::tokens_refill_over_time,
                buckets::a_cost_takes_that_many_or_nothing,
                buckets::a_changed_limit_keeps_the_bucket_within_its_burst,
                asks::a_lease_is_between_its_min_and_max,
                asks::a_share_scales_the_limit,
                asks::a_batch_is_answered_in_order,
                asks::keys_are_isolated,
                windows::a_fixed_window_admits_its_requests_then_denies_until_it_ends,
                windows::a_sliding_window_weighs_the_previous_window,
                fleet::the_fleet_override_reads_back_as_set,
                fleet::the_first_trial_start_of_a_version_stays,
                fleet::a_trial_is_held_then_ended,
                fleet::the_previous_rules_version_reads_back,
                control::every_change_is_audited_and_a_clear_keeps_the_history,
                peek::a_peek_judges_a_rejection_at_its_moment_without_spending,
                stopping::given_back_tokens_refill_the_bucket_up_to_its_burst,
                stopping::a_leaving_agent_is_no_longer_counted,
            );
        }
    };
    (@each $make:expr; $($concept:ident::$behaviour:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $behaviour() {
                let backend = $make.await;
                super::$concept::$behaviour(backend.store.as_ref()).await;
            }
        )*
    };
}

/// What someone with write access to the store but not the deployment secret
/// can do, against each backend others can write (the memory store is the
/// agent's own).
macro_rules! tampering {
    ($backend:ident, $make:expr) => {
        mod $backend {
            tampering!(@each $make;
                a_write_over_the_cap_is_refused,
                a_forged_override_is_ignored,
                a_forged_trial_is_ignored,
                a_forged_hold_or_end_is_ignored,
                forged_versions_are_ignored,
                a_forged_audit_entry_shows_as_refused,
            );
        }
    };
    (@each $make:expr; $($behaviour:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $behaviour() {
                let backend = $make.await;
                super::super::control::$behaviour(&backend).await;
            }
        )*
    };
}

conformance!(memory, super::backends::memory());
conformance!(redis, super::backends::redis());
conformance!(redis_cluster, super::backends::redis_cluster());

mod tampered {
    tampering!(redis, super::super::backends::redis());
    tampering!(redis_cluster, super::super::backends::redis_cluster());
}
