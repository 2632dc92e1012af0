//! Control state in the store (the fleet override, trials, the versions
//! served): its audit history, on every backend; and, on the backends others
//! can write (Redis), what a record written without the deployment secret,
//! or too large to read, does: it is ignored.

use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_store::control::{MAX_PLAN_BYTES, MAX_VALUE_BYTES};
use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::trial::TrialAction;
use meshlimit_store::Refusal;
use meshlimit_tests::Resp;

use super::backends::Backend;
use super::Store;

fn shadow(by: &str) -> Override {
    Override {
        mode: OverrideMode::Shadow,
        set_by: by.into(),
        at: 1_700_000_000,
        version: None,
    }
}

fn plan(version: &str) -> TrialPlan {
    TrialPlan {
        version: version.into(),
        against: "0000000000000000".into(),
        shadowed: vec!["a".into()],
        kept: Vec::new(),
    }
}

/// Every change is in the history, newest first, with who made it and what
/// it was; a clear of the override keeps the history; a trial started again
/// by another agent, or the same versions recorded again, add nothing.
pub(crate) async fn every_change_is_audited_and_a_clear_keeps_the_history(store: &dyn Store) {
    assert!(store.control_history(10).await.unwrap().is_empty());
    store
        .set_fleet_override(Some(shadow("alice: incident 42")), "alice: incident 42")
        .await
        .unwrap();
    store.set_fleet_override(None, "bob").await.unwrap();
    for _ in 0..2 {
        store
            .trial("v1", Some((&plan("v1"), 60_000)), false)
            .await
            .unwrap();
        store.record_versions("v2", "v1").await.unwrap();
    }
    store
        .control_trial(TrialAction::Hold, "carol")
        .await
        .unwrap();
    let history: Vec<(String, String)> = store
        .control_history(10)
        .await
        .unwrap()
        .into_iter()
        .map(|e| {
            let e = e.unwrap();
            (e.by, e.what)
        })
        .collect();
    let entry = |by: &str, what: &str| (by.to_string(), what.to_string());
    assert_eq!(
        history,
        [
            entry("carol", "trial v1 held"),
            entry("agent", "rules versions: current v2, previous v1"),
            entry(
                "agent",
                "trial v1 started over 0000000000000000: 60000 ms, shadowed [a], kept []"
            ),
            entry("bob", "override clear"),
            entry("alice: incident 42", "override shadow"),
        ]
    );
    assert_eq!(store.fleet_override().await.unwrap(), None);
    assert_eq!(store.control_history(2).await.unwrap().len(), 2);
}

/// A write the others would refuse to read is refused: an override over its
/// cap (a `--reason` of 4 KiB).
pub(crate) async fn a_write_over_the_cap_is_refused(b: &Backend) {
    let store = b.store.as_ref();
    let long = shadow(&"x".repeat(MAX_VALUE_BYTES));
    assert!(store.set_fleet_override(Some(long), "x").await.is_err());
    assert_eq!(store.fleet_override().await.unwrap(), None);
}

fn text(r: Resp) -> String {
    r.text().unwrap_or_else(|| panic!("not text: {r:?}"))
}

/// An override written without the secret, or changed after it was signed,
/// is ignored (none is in force); the genuine one still reads back.
pub(crate) async fn a_forged_override_is_ignored(b: &Backend) {
    let store = b.store.as_ref();
    let key = "ml:{fleet}:override";
    store
        .set_fleet_override(Some(shadow("ops")), "ops")
        .await
        .unwrap();
    let genuine = text(b.raw(&["GET", key]).unwrap());
    let plain = r#"{"mode":"shadow","set_by":"mallory","at":1}"#;
    for forged in [plain.to_string(), genuine.replace("ops", "mallory")] {
        b.raw(&["SET", key, &forged]).unwrap();
        assert_eq!(store.fleet_override().await.unwrap(), None, "{forged}");
    }
    b.raw(&["SET", key, &"x".repeat(MAX_VALUE_BYTES + 1)])
        .unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), None, "over the cap");
    b.raw(&["SET", key, &genuine]).unwrap();
    assert_eq!(store.fleet_override().await.unwrap(), Some(shadow("ops")));
}

/// A trial whose plan (its kept rules), period or start was changed, or that
/// was written without the secret, is no trial; its plan over the cap too.
pub(crate) async fn a_forged_trial_is_ignored(b: &Backend) {
    let store = b.store.as_ref();
    let key = "ml:{fleet}:trial:v1";
    let started = store.trial("v1", Some((&plan("v1"), 60_000)), true).await;
    assert_eq!(started.unwrap().unwrap().plan, Some(plan("v1")));
    let genuine = text(b.raw(&["HGET", key, "plan"]).unwrap());
    let forged = r#"{"version":"v1","against":"0","kept":[{"name":"a","limit":{"requests":1000000,"per":"1s"}}]}"#;
    b.raw(&["HSET", key, "plan", forged]).unwrap();
    assert_eq!(store.trial("v1", None, true).await.unwrap(), None);
    b.raw(&["HSET", key, "plan", &"x".repeat(MAX_PLAN_BYTES + 1)])
        .unwrap();
    assert_eq!(store.trial("v1", None, true).await.unwrap(), None);
    // The clock alone (the agents' poll) does not read the plan.
    assert!(store.trial("v1", None, false).await.unwrap().is_some());
    b.raw(&["HSET", key, "plan", &genuine]).unwrap();
    b.raw(&["HSET", key, "period_ms", "999999999"]).unwrap();
    assert_eq!(store.trial("v1", None, false).await.unwrap(), None);
    // A record planted before the first agent starts the trial is not
    // taken for one, and the start does not write over it.
    let planted = [
        "HSET",
        "ml:{fleet}:trial:v2",
        "start_ms",
        "1",
        "period_ms",
        "1",
    ];
    b.raw(&planted).unwrap();
    b.raw(&["HSET", "ml:{fleet}:trial:v2", "plan", forged])
        .unwrap();
    let joined = store.trial("v2", Some((&plan("v2"), 60_000)), true).await;
    assert_eq!(joined.unwrap(), None);
}

/// A hold or an early end written without the secret is ignored: the trial
/// runs its recorded period. A genuine hold still holds.
pub(crate) async fn a_forged_hold_or_end_is_ignored(b: &Backend) {
    let store = b.store.as_ref();
    let key = "ml:{fleet}:trial:v1";
    store
        .trial("v1", Some((&plan("v1"), 60_000)), false)
        .await
        .unwrap();
    b.raw(&["HSET", key, "held", "1"]).unwrap();
    let read = store.trial("v1", None, false).await.unwrap().unwrap();
    assert!(!read.clock.held && read.left_ms().unwrap() <= 60_000);
    store.control_trial(TrialAction::Hold, "ops").await.unwrap();
    let read = store.trial("v1", None, false).await.unwrap().unwrap();
    assert_eq!(read.left_ms(), Some(u64::MAX));
    b.raw(&["HSET", key, "ended_ms", "1"]).unwrap();
    let read = store.trial("v1", None, false).await.unwrap().unwrap();
    assert_eq!((read.clock.ended_ms, read.clock.held), (None, false));
    // A forged pointer to the trial started last: nothing to act on.
    b.raw(&["SET", "ml:{fleet}:trial", "v1"]).unwrap();
    assert_eq!(
        store.control_trial(TrialAction::End, "ops").await.unwrap(),
        None
    );
}

/// Versions changed without the secret are none recorded (`override pin`
/// then asks for `--rules-version`).
pub(crate) async fn forged_versions_are_ignored(b: &Backend) {
    let store = b.store.as_ref();
    store.record_versions("v2", "v1").await.unwrap();
    assert_eq!(
        store.previous_version().await.unwrap().as_deref(),
        Some("v1")
    );
    b.raw(&["HSET", "ml:{fleet}:rules", "previous", "v0"])
        .unwrap();
    assert_eq!(store.previous_version().await.unwrap(), None);
    b.raw(&[
        "HSET",
        "ml:{fleet}:rules",
        "previous",
        &"x".repeat(MAX_VALUE_BYTES + 1),
    ])
    .unwrap();
    assert_eq!(store.previous_version().await.unwrap(), None);
}

/// An audit entry written without the secret shows as refused, never as a
/// change; the genuine ones around it read back.
pub(crate) async fn a_forged_audit_entry_shows_as_refused(b: &Backend) {
    let store = b.store.as_ref();
    store.set_fleet_override(None, "ops").await.unwrap();
    let forged = r#"{"at_ms":1,"by":"ops","what":"override clear"}"#;
    b.raw(&["LPUSH", "ml:{fleet}:audit", forged]).unwrap();
    b.raw(&[
        "LPUSH",
        "ml:{fleet}:audit",
        &"x".repeat(MAX_VALUE_BYTES + 1),
    ])
    .unwrap();
    let history = store.control_history(10).await.unwrap();
    assert_eq!(history.len(), 3);
    assert_eq!(history[0], Err(Refusal::Size));
    assert_eq!(history[1], Err(Refusal::Mac));
    assert_eq!(history[2].as_ref().unwrap().what, "override clear");
}
