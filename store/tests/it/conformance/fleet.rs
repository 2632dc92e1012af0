//! What the fleet's agents share through the store: the fleet override, a rules
//! trial's start, hold and end, and the rules versions served now and before.

use std::time::Duration;

use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::trial::TrialAction;

use super::Store;

/// The fleet override reads back as set, replaced, then cleared; off at first.
pub(crate) async fn the_fleet_override_reads_back_as_set(store: &dyn Store) {
    assert_eq!(store.fleet_override().await.unwrap(), None);
    let on = |by: &str| Override {
        mode: OverrideMode::Shadow,
        set_by: by.into(),
        at: 1_700_000_000,
        version: None,
    };
    store
        .set_fleet_override(Some(on("ops")), "ops")
        .await
        .unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), Some(on("ops")));
    store
        .set_fleet_override(Some(on("oncall")), "oncall")
        .await
        .unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), Some(on("oncall")));
    store.set_fleet_override(None, "ops").await.unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), None);
    // Clearing what is off is no error.
    store.set_fleet_override(None, "ops").await.unwrap();
}

fn plan(version: &str, shadowed: &str) -> TrialPlan {
    TrialPlan {
        version: version.into(),
        against: "0000000000000000".into(),
        shadowed: vec![shadowed.into()],
        kept: Vec::new(),
    }
}

/// The first start of a version's trial stays: a second start (another agent)
/// gets the first plan and start, by the store's clock; a read alone starts
/// nothing; the plan is answered only when asked for.
pub(crate) async fn the_first_trial_start_of_a_version_stays(store: &dyn Store) {
    assert_eq!(store.trial("v1", None, true).await.unwrap(), None);
    assert_eq!(
        store.control_trial(TrialAction::End, "ops").await.unwrap(),
        None
    );
    let first = store
        .trial("v1", Some((&plan("v1", "a"), 60_000)), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.plan, Some(plan("v1", "a")));
    assert_eq!(first.clock.period_ms, 60_000);
    assert!(first.clock.start_ms <= first.now_ms && first.now_ms - first.clock.start_ms < 1_000);
    let left = first.left_ms().unwrap();
    assert!((59_000..=60_000).contains(&left), "{left}");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store
        .trial("v1", Some((&plan("v1", "b"), 1_000)), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(second.plan, Some(plan("v1", "a")), "the first plan stays");
    assert_eq!(second.clock, first.clock, "the first start stays");
    assert!(second.now_ms >= first.now_ms + 20);
    let read = store.trial("v1", None, false).await.unwrap().unwrap();
    assert_eq!((read.plan, read.clock), (None, first.clock));
    // Another version is a trial of its own.
    assert_eq!(store.trial("v2", None, true).await.unwrap(), None);
}

/// `hold` keeps the last trial started on past its period; `end` ends it now.
pub(crate) async fn a_trial_is_held_then_ended(store: &dyn Store) {
    store
        .trial("v1", Some((&plan("v1", "a"), 1)), false)
        .await
        .unwrap();
    store
        .trial("v2", Some((&plan("v2", "a"), 60_000)), false)
        .await
        .unwrap();
    assert_eq!(
        store
            .control_trial(TrialAction::Hold, "ops")
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    let held = store.trial("v2", None, false).await.unwrap().unwrap();
    assert!(held.clock.held);
    assert_eq!(held.left_ms(), Some(u64::MAX));
    assert_eq!(
        store
            .control_trial(TrialAction::End, "ops")
            .await
            .unwrap()
            .as_deref(),
        Some("v2")
    );
    let ended = store.trial("v2", None, false).await.unwrap().unwrap();
    assert!(!ended.clock.held);
    assert_eq!(ended.left_ms(), None);
    assert!(ended.clock.ended_ms.unwrap() <= ended.now_ms);
    // v1's own period (1 ms) is over.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(
        store
            .trial("v1", None, false)
            .await
            .unwrap()
            .unwrap()
            .left_ms(),
        None
    );
}

/// The versions served now and before read back (what `override pin` pins).
pub(crate) async fn the_previous_rules_version_reads_back(store: &dyn Store) {
    assert_eq!(store.previous_version().await.unwrap(), None);
    store.record_versions("v2", "v1").await.unwrap();
    store.record_versions("v2", "v1").await.unwrap();
    assert_eq!(
        store.previous_version().await.unwrap().as_deref(),
        Some("v1")
    );
    store.record_versions("v3", "v2").await.unwrap();
    assert_eq!(
        store.previous_version().await.unwrap().as_deref(),
        Some("v2")
    );
}
