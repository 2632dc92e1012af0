use serde_json::{json, Value};

use super::*;
use crate::rules::RulesConfig;

fn config(defaults: Value, rules: Value) -> RulesConfig {
    serde_json::from_value(json!({"version": 1, "defaults": defaults, "rules": rules})).unwrap()
}

fn set(c: &RulesConfig) -> RuleSet {
    RuleSet::compile(c).unwrap()
}

fn rule(name: &str, requests: u32, extra: Value) -> Value {
    let mut r =
        json!({"name": name, "key": ["method"], "limit": {"requests": requests, "per": "1s"}});
    if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        r.extend(extra.clone());
    }
    r
}

/// Each served rule: name, mode, requests per second.
fn served(c: &RulesConfig) -> Vec<(String, Mode, u32)> {
    let s = set(c);
    let mut out: Vec<_> = s
        .rules()
        .iter()
        .map(|r| (r.name.clone(), r.mode, r.limit_for_plan(None).0.requests()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn new_rules_are_shadowed_and_tightened_ones_keep_their_old_limit_beside_a_trial_copy() {
    let old = config(
        json!({"mode": "enforce"}),
        json!([
            rule("tight", 100, json!({})),
            rule("loose", 10, json!({})),
            rule("same", 10, json!({})),
            rule("was-shadow", 10, json!({"mode": "shadow"})),
            rule("gone", 10, json!({})),
        ]),
    );
    let new = config(
        json!({}),
        json!([
            rule("tight", 60, json!({})),
            rule("loose", 20, json!({})),
            rule("same", 10, json!({})),
            rule("was-shadow", 10, json!({})),
            rule("added", 5, json!({})),
            rule("added-in-shadow", 5, json!({"mode": "shadow"})),
        ]),
    );
    let p = plan(&set(&old), &set(&new));
    assert_eq!(p.version, set(&new).version());
    assert_eq!(p.against, set(&old).version());
    let mut shadowed = p.shadowed.clone();
    shadowed.sort();
    assert_eq!(shadowed, names(&["added", "was-shadow"]));
    assert_eq!(
        p.kept.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(),
        ["tight"]
    );
    // The old file's default mode is written into the kept rule.
    assert_eq!(p.kept[0].mode, Some(Mode::Enforce));
    let mut trial = p.trial_rules();
    trial.sort();
    assert_eq!(trial, names(&["added", "tight.trial", "was-shadow"]));

    assert_eq!(
        served(&compose(&new, &p)),
        [
            ("added".into(), Mode::Shadow, 5),
            ("added-in-shadow".into(), Mode::Shadow, 5),
            ("loose".into(), Mode::Enforce, 20),
            ("same".into(), Mode::Enforce, 10),
            // The old limit enforces, the new one is tried in shadow.
            ("tight".into(), Mode::Enforce, 100),
            ("tight.trial".into(), Mode::Shadow, 60),
            ("was-shadow".into(), Mode::Shadow, 10),
        ]
    );
}

#[test]
fn a_burst_cut_alone_is_a_tightening_and_a_loosening_or_a_move_to_shadow_is_not() {
    let old = config(
        json!({}),
        json!([
            rule(
                "a",
                10,
                json!({"limit": {"requests": 10, "per": "1s", "burst": 50}})
            ),
            rule("b", 10, json!({}))
        ]),
    );
    let new = config(
        json!({}),
        json!([
            rule(
                "a",
                10,
                json!({"limit": {"requests": 10, "per": "1s", "burst": 40}})
            ),
            rule("b", 5, json!({"mode": "shadow"}))
        ]),
    );
    let p = plan(&set(&old), &set(&new));
    assert_eq!(p.kept.len(), 1);
    assert_eq!(p.kept[0].name, "a");
    assert!(p.shadowed.is_empty());
    // Nothing changed: nothing on trial.
    assert!(plan(&set(&old), &set(&old)).is_empty());
}

#[test]
fn a_second_change_during_a_trial_is_tried_against_what_enforced() {
    let v0 = config(json!({}), json!([rule("tight", 100, json!({}))]));
    let v1 = config(
        json!({}),
        json!([rule("tight", 60, json!({})), rule("added", 5, json!({}))]),
    );
    let p1 = plan(&set(&v0), &set(&v1));
    let during = set(&compose(&v1, &p1));
    // v2 only loosens an unrelated detail: the rules on trial stay on trial.
    let v2 = config(
        json!({}),
        json!([
            rule("tight", 60, json!({})),
            rule("added", 5, json!({})),
            rule("other", 1, json!({"mode": "shadow"}))
        ]),
    );
    let p2 = plan(&during, &set(&v2));
    assert_eq!(p2.shadowed, names(&["added"]));
    assert_eq!(p2.kept.len(), 1);
    assert_eq!(p2.kept[0].limit.as_ref().map(|l| l.requests), Some(100));
}

#[cfg(feature = "yaml")]
#[test]
fn a_rules_file_may_not_use_a_trial_name() {
    let text =
        "version: 1\nrules:\n  - {name: api.trial, key: [method], limit: {requests: 1, per: 1s}}\n";
    let err = crate::rules::parse_rules("r.yaml", text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("rule api.trial") && err.contains("reserved"),
        "{err}"
    );
}

#[test]
fn the_trial_copy_of_the_longest_name_compiles() {
    let long = "a".repeat(crate::rules::MAX_RULE_NAME);
    let old = config(json!({}), json!([rule(&long, 10, json!({}))]));
    let new = config(json!({}), json!([rule(&long, 5, json!({}))]));
    let composed = compose(&new, &plan(&set(&old), &set(&new)));
    assert_eq!(set(&composed).rules().len(), 2);
}

#[test]
fn shadow_first_reads_a_period_and_zero_turns_it_off() {
    let with = |v: Option<&str>| crate::rules::ChangesConfig {
        shadow_first: v.map(str::to_string),
        ..Default::default()
    };
    assert_eq!(with(None).shadow_first_ms(), Ok(300_000));
    assert_eq!(with(Some("10m")).shadow_first_ms(), Ok(600_000));
    assert_eq!(with(Some("3s")).shadow_first_ms(), Ok(3_000));
    assert_eq!(with(Some("0s")).shadow_first_ms(), Ok(0));
    // A zero with a unit that is not one is refused as written.
    assert_eq!(
        with(Some("0x")).shadow_first_ms(),
        Err(crate::rules::PeriodError::Unreadable("0x".to_string()))
    );
}

#[cfg(feature = "yaml")]
#[test]
fn a_bad_shadow_first_is_refused_naming_the_field() {
    let text = "version: 1\nchanges: {shadow_first: soon}\nrules:\n  - {name: a, key: [method], limit: {requests: 1, per: 1s}}\n";
    let err = crate::rules::parse_rules("r.yaml", text)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("changes.shadow_first") && err.contains("soon"),
        "{err}"
    );
}
