//! The store conformance suite: what every [`Store`] backend must do, written
//! once and run against each of them, the embedded memory store, a real single
//! redis-server and a real three-master Redis Cluster. A new backend adds a
//! module at the end that hands [`behaviours`] its start (in `backends.rs`).
//!
//! Each behaviour is a function over `&dyn Store` (every store trait at
//! once), in a module per concept (`buckets`, `asks`, `windows`, `fleet`,
//! `control`, `peek`, `stopping`); the macros at the end run each against
//! every backend, with a fresh store each: a test per behaviour on the
//! memory store and on redis-server (`memory::…`, `redis::…`), and one test
//! for all of them on one Redis Cluster, emptied between behaviours
//! (`redis_cluster::every_behaviour_on_one_cluster`). Time passes on the
//! store's own clock (tokio's for
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

/// Every behaviour, handed to `$then!` as `concept::behaviour, …` after
/// `$args`: the one list each backend runs.
macro_rules! behaviours {
    ($then:ident!($($args:tt)*)) => {
        $then!($($args)*
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
    };
}

/// What someone with write access to the store but not the deployment
/// secret can do (`control.rs`), handed to `$then!` like [`behaviours`].
macro_rules! tamperings {
    ($then:ident!($($args:tt)*)) => {
        $then!($($args)*
            control::a_write_over_the_cap_is_refused,
            control::a_forged_override_is_ignored,
            control::a_forged_trial_is_ignored,
            control::a_forged_hold_or_end_is_ignored,
            control::forged_versions_are_ignored,
            control::a_forged_audit_entry_shows_as_refused,
        );
    };
}

/// A test per behaviour, each against a fresh store that `$make` starts.
/// `$arg` is what a behaviour takes of the [`backends::Backend`]: its
/// `store` (every store trait) or, for a tampering, the backend itself.
macro_rules! each {
    ($make:expr, $arg:ident; $($concept:ident::$behaviour:ident,)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $behaviour() {
                let backend = $make.await;
                crate::conformance::$concept::$behaviour(each!(@arg backend, $arg)).await;
            }
        )*
    };
    (@arg $backend:ident, store) => { $backend.store.as_ref() };
    (@arg $backend:ident, backend) => { &$backend };
}

/// Every behaviour in one test, one after another on one Redis Cluster,
/// each against a fresh store over the emptied cluster
/// ([`backends::redis_cluster_on`]). A cluster's primaries refuse writes for
/// their first 2 s (Redis's `CLUSTER_WRITABLE_DELAY`), so a cluster per
/// behaviour would hold a test slot 2 s longer for each. A behaviour that
/// fails does not stop the others: the test fails at the end, naming each
/// that failed with its message.
macro_rules! on_one_cluster {
    ($test:ident, $arg:ident; $($concept:ident::$behaviour:ident,)*) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let cluster = std::sync::Arc::new(meshlimit_tests::RedisCluster::start(3));
            let mut failed: Vec<String> = Vec::new();
            $(
                let backend = crate::conformance::backends::redis_cluster_on(&cluster).await;
                eprintln!("{}", stringify!($behaviour));
                let run = tokio::spawn(async move {
                    crate::conformance::$concept::$behaviour(each!(@arg backend, $arg)).await;
                });
                if let Err(e) = run.await {
                    failed.push(format!("{}: {}", stringify!($behaviour), crate::conformance::panic_text(e)));
                }
            )*
            assert!(failed.is_empty(), "{} failed:\n{}", failed.len(), failed.join("\n"));
        }
    };
}

/// A spawned behaviour's panic message.
fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic without a message".into()),
        Err(e) => e.to_string(),
    }
}

mod memory {
    behaviours!(each!(super::backends::memory(), store;));
}

mod redis {
    behaviours!(each!(super::backends::redis(), store;));
}

mod redis_cluster {
    behaviours!(on_one_cluster!(every_behaviour_on_one_cluster, store;));
}

/// The tamperings, against each backend others can write (the memory
/// store is the agent's own).
mod tampered {
    mod redis {
        tamperings!(each!(crate::conformance::backends::redis(), backend;));
    }

    mod redis_cluster {
        tamperings!(on_one_cluster!(every_tampering_on_one_cluster, backend;));
    }
}
