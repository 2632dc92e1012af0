//! The set served: a trial's composition (which rules are on trial, which
//! keep their old limit), its end, and the pin.

use meshlimit_core::rules::config::Mode;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::rules::trial::plan;

use super::*;
use meshlimit_store::fleet::OverrideMode;

const V1: &str = r"
version: 1
rules:
  - {name: tight, key: [method], limit: {requests: 100, per: 1s}}
  - {name: loose, key: [path], limit: {requests: 10, per: 1s}}
";

const V2: &str = r"
version: 1
changes: {shadow_first: 1m}
rules:
  - {name: tight, key: [method], limit: {requests: 60, per: 1s}}
  - {name: loose, key: [path], limit: {requests: 20, per: 1s}}
  - {name: added, key: [client_ip], limit: {requests: 5, per: 1s}}
";

const V3: &str = r"
version: 1
rules:
  - {name: other, key: [method], limit: {requests: 1, per: 1s}}
";

fn set(text: &str) -> Arc<RuleSet> {
    Arc::new(parse_rules("rules.yaml", text).unwrap())
}

/// The served rules: name, mode, requests per second, sorted by name.
fn served(rules: &CurrentRules) -> Vec<(String, Mode, u32)> {
    let mut out: Vec<_> = rules
        .get()
        .unwrap()
        .rules()
        .iter()
        .map(|r| {
            (
                r.name.clone(),
                r.mode,
                r.limit_in_force(None, 0).limit.requests(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn stored(running: &RuleSet, new: &RuleSet, clock: TrialClock, now_ms: u64) -> StoredTrial {
    StoredTrial {
        plan: Some(plan(running, new)),
        clock,
        now_ms,
    }
}

fn clock(start_ms: u64) -> TrialClock {
    TrialClock {
        start_ms,
        period_ms: 60_000,
        ended_ms: None,
        held: false,
    }
}

fn pin(version: &str) -> Option<Override> {
    Some(Override {
        mode: OverrideMode::Pin,
        set_by: "ops".into(),
        at: 1,
        version: Some(version.into()),
    })
}

#[test]
fn a_trial_serves_new_rules_in_shadow_and_a_tightened_rules_old_limit_beside_its_new_one() {
    let rules = CurrentRules::empty();
    let (v1, v2) = (set(V1), set(V2));
    rules.install(v1.clone());
    let trial = stored(&rules.in_force().unwrap(), &v2, clock(1_000), 1_000);
    let version = rules.install_trial(v2.clone(), Some(trial));
    assert_ne!(
        version,
        v2.version(),
        "the trial's set has a version of its own"
    );
    assert_eq!(rules.lines().unwrap().version, version);
    assert_eq!(
        served(&rules),
        [
            ("added".into(), Mode::Shadow, 5),
            ("loose".into(), Mode::Enforce, 20),
            ("tight".into(), Mode::Enforce, 100),
            ("tight.trial".into(), Mode::Shadow, 60),
        ]
    );
    let view = rules.trial().unwrap();
    assert_eq!(view.version, v2.version());
    assert_eq!(view.rules, ["added", "tight.trial"]);
    assert!(rules.trial_deadline().is_some());

    // Still on at the store's next reading; over at the one after.
    assert_eq!(rules.update_trial(v2.version(), clock(1_000), 30_000), None);
    assert_eq!(
        rules
            .update_trial(v2.version(), clock(1_000), 61_000)
            .as_deref(),
        Some(v2.version())
    );
    assert_eq!(
        served(&rules),
        [
            ("added".into(), Mode::Enforce, 5),
            ("loose".into(), Mode::Enforce, 20),
            ("tight".into(), Mode::Enforce, 60),
        ]
    );
    assert_eq!(rules.trial(), None);
    assert_eq!(rules.file_set().unwrap().version(), v2.version());
}

#[test]
fn a_trial_ends_at_its_deadline_and_a_held_one_has_none() {
    let rules = CurrentRules::empty();
    rules.install(set(V1));
    let v2 = set(V2);
    // 1 ms left at the reading.
    let trial = stored(&rules.in_force().unwrap(), &v2, clock(0), 59_999);
    rules.install_trial(v2.clone(), Some(trial));
    let due = rules.trial_deadline().unwrap();
    assert_eq!(rules.end_trial_if_due(due - Duration::from_millis(1)), None);
    let held = TrialClock {
        held: true,
        ..clock(0)
    };
    assert_eq!(rules.update_trial(v2.version(), held, 70_000), None);
    assert_eq!(rules.trial_deadline(), None);
    assert_eq!(
        rules.end_trial_if_due(due + Duration::from_secs(3_600)),
        None
    );
    // Ended by an operator.
    let ended = TrialClock {
        ended_ms: Some(80_000),
        ..clock(0)
    };
    assert_eq!(
        rules.update_trial(v2.version(), ended, 80_001).as_deref(),
        Some(v2.version())
    );
}

#[test]
fn a_trial_over_when_read_or_for_another_version_is_not_served() {
    let rules = CurrentRules::empty();
    rules.install(set(V1));
    let (v2, v3) = (set(V2), set(V3));
    let over = stored(&rules.in_force().unwrap(), &v2, clock(0), 60_000);
    assert_eq!(rules.install_trial(v2.clone(), Some(over)), v2.version());
    let other = stored(&rules.in_force().unwrap(), &v2, clock(0), 1);
    assert_eq!(rules.install_trial(v3.clone(), Some(other)), v3.version());
    assert_eq!(rules.trial(), None);
}

#[test]
fn a_pin_serves_the_previous_version_through_reloads_and_a_missing_one_shadows_every_rule() {
    let rules = CurrentRules::empty();
    let (v1, v2, v3) = (set(V1), set(V2), set(V3));
    rules.install(v1.clone());
    rules.install(v2.clone());
    assert_eq!(
        rules.set_fleet_override(pin(v1.version())).as_deref(),
        Some(v1.version())
    );
    assert!(!rules.pin_missing());
    // A reload while pinned: still the pinned version.
    assert_eq!(rules.install(v3.clone()), v1.version());
    assert_eq!(rules.lines().unwrap().version, v1.version());
    // Cleared: the file's latest.
    assert_eq!(
        rules.set_fleet_override(None).as_deref(),
        Some(v3.version())
    );
    // A version this agent never had: every rule of the set in force in shadow.
    let shadowed = rules.set_fleet_override(pin("0123456789abcdef")).unwrap();
    assert_ne!(shadowed, v3.version());
    assert!(rules.pin_missing());
    assert_eq!(served(&rules), [("other".into(), Mode::Shadow, 1)]);
    rules.set_fleet_override(None);
    assert!(!rules.pin_missing());
    assert_eq!(rules.get().unwrap().version(), v3.version());
}

#[test]
fn the_same_file_read_again_keeps_its_trial_going() {
    let rules = CurrentRules::empty();
    let (v1, v2) = (set(V1), set(V2));
    rules.install(v1);
    let trial = stored(&rules.in_force().unwrap(), &v2, clock(1_000), 1_000);
    let version = rules.install_trial(v2.clone(), Some(trial));
    // Read again with no trial in the store's answer (a rule expired, say).
    assert_eq!(rules.install_trial(v2.clone(), None), version);
    assert_eq!(rules.trial().unwrap().version, v2.version());
    assert!(served(&rules)
        .iter()
        .any(|(name, _, _)| name == "tight.trial"));
}
