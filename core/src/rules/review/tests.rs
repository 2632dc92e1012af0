use super::*;
use crate::rules::RulesConfig;

fn set(rules: serde_json::Value, changes: Option<serde_json::Value>) -> RuleSet {
    let mut file = serde_json::json!({"version": 1, "rules": rules});
    if let Some(c) = changes {
        file["changes"] = c;
    }
    let config: RulesConfig = serde_json::from_value(file).unwrap();
    RuleSet::compile(&config).unwrap()
}

fn rule(name: &str, requests: u32, extra: serde_json::Value) -> serde_json::Value {
    let mut r = serde_json::json!({"name": name, "key": ["method"],
        "limit": {"requests": requests, "per": "1s"}});
    if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        r.extend(extra.clone());
    }
    r
}

#[test]
fn a_tenfold_cut_is_refused_unless_approved_against_the_running_version() {
    let old = set(
        serde_json::json!([rule("api", 100, serde_json::json!({}))]),
        None,
    );
    let cut = serde_json::json!([rule("api", 10, serde_json::json!({}))]);
    let changes = review(&old, &set(cut.clone(), None));
    assert_eq!(changes.len(), 1);
    assert!(changes[0].refused);
    assert!(
        matches!(changes[0].change, Change::Limit { factor, .. } if (factor - 0.1).abs() < 1e-9)
    );
    // Approved against the running version: accepted.
    let approval = serde_json::json!({"approve": [{"rule": "api", "against": old.version()}]});
    assert!(!review(&old, &set(cut.clone(), Some(approval)))[0].refused);
    // An approval for another version (a stale one) does not count.
    let stale = serde_json::json!({"approve": [{"rule": "api", "against": "0000"}]});
    assert!(review(&old, &set(cut.clone(), Some(stale)))[0].refused);
    // Within the maximum, or in shadow, or loosened: not refused.
    let half = serde_json::json!([rule("api", 50, serde_json::json!({}))]);
    assert!(!review(&old, &set(half, None))[0].refused);
    let shadow = serde_json::json!([rule("api", 10, serde_json::json!({"mode": "shadow"}))]);
    assert!(review(&old, &set(shadow, None)).iter().all(|c| !c.refused));
    let loose = serde_json::json!([rule("api", 1000, serde_json::json!({}))]);
    assert!(!review(&old, &set(loose, None))[0].refused);
    // The running maximum guards the change: a stricter one running refuses
    // a cut the default allows.
    let strict = serde_json::json!({"max_tightening": 0.9});
    let ninety = serde_json::json!([rule("api", 80, serde_json::json!({}))]);
    let old_strict = set(
        serde_json::json!([rule("api", 100, serde_json::json!({}))]),
        Some(strict.clone()),
    );
    assert!(review(&old_strict, &set(ninety.clone(), None))[0].refused);
    // A stricter maximum in the new file guards the next change, not its own.
    assert!(!review(&old, &set(ninety, Some(strict)))[0].refused);
}

#[test]
fn a_change_that_loosens_its_own_guard_is_held_to_the_running_one() {
    let old = set(
        serde_json::json!([rule("api", 100, serde_json::json!({}))]),
        None,
    );
    // The attack: cut tenfold and, in the same file, let any cut through.
    let loose = serde_json::json!({"max_tightening": 0.0});
    let cut = serde_json::json!([rule("api", 10, serde_json::json!({}))]);
    assert!(review(&old, &set(cut, Some(loose)))[0].refused);
}

#[test]
fn added_removed_mode_and_match_changes_are_listed() {
    let old = set(
        serde_json::json!([
            rule(
                "a",
                10,
                serde_json::json!({"match": {"path_prefix": "/v1/search"}})
            ),
            rule("b", 10, serde_json::json!({"match": {"methods": ["GET"]}})),
            rule("gone", 10, serde_json::json!({})),
        ]),
        None,
    );
    let new = set(
        serde_json::json!([
            rule(
                "a",
                10,
                serde_json::json!({"match": {"path_prefix": "/v1"}})
            ),
            rule(
                "b",
                10,
                serde_json::json!({"match": {"methods": ["GET"], "headers": {"x-env": {"equals": "prod"}}}, "mode": "shadow"})
            ),
            rule("c", 10, serde_json::json!({})),
        ]),
        None,
    );
    let got: Vec<(String, Change)> = review(&old, &new)
        .into_iter()
        .map(|c| (c.rule, c.change))
        .collect();
    assert_eq!(
        got,
        [
            ("a".to_string(), Change::MatchWidened),
            (
                "b".to_string(),
                Change::Mode {
                    old: Mode::Enforce,
                    new: Mode::Shadow
                }
            ),
            ("b".to_string(), Change::MatchNarrowed),
            (
                "c".to_string(),
                Change::Added {
                    mode: Mode::Enforce
                }
            ),
            ("gone".to_string(), Change::Removed),
        ]
    );
}

#[test]
fn a_schedule_that_tightens_an_enforced_limit_is_refused_like_any_tightening() {
    let rush = |burst: u32, days: serde_json::Value| {
        rule(
            "api",
            100,
            serde_json::json!({"schedule": [
                {"name": "rush", "minutes": "00m00s-00m30s", "burst": burst, "days": days}
            ]}),
        )
    };
    let old = set(
        serde_json::json!([rush(1000, serde_json::json!(["mon"]))]),
        None,
    );
    // The window dropped: during the rush the burst goes from 1000 to 100.
    let plain = set(
        serde_json::json!([rule("api", 100, serde_json::json!({}))]),
        None,
    );
    let c = review(&old, &plain);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].refused);
    let Change::Schedule { factor, at, .. } = &c[0].change else {
        panic!("{c:?}")
    };
    assert!((factor - 0.1).abs() < 1e-9, "{factor}");
    assert_eq!(at, "Mon 00:00:00 UTC");
    let text = c[0].to_string();
    assert!(
        text.starts_with("~ rule api: schedule [rush: minutes 00m00s-00m30s UTC on mon: 100 per 1 s (burst 1000)] → [none]; tightest at Mon 00:00:00 UTC: 100 per 1 s (burst 1000) → 100 per 1 s (burst 100), ×0.10 — refused"),
        "{text}"
    );
    // A smaller rush burst, within the maximum: listed, not refused.
    let c = review(
        &old,
        &set(
            serde_json::json!([rush(600, serde_json::json!(["mon"]))]),
            None,
        ),
    );
    assert!(!c[0].refused, "{c:?}");
    // The rush moved from Monday to Tuesday: Monday's rush is lost.
    let c = review(
        &old,
        &set(
            serde_json::json!([rush(1000, serde_json::json!(["tue"]))]),
            None,
        ),
    );
    assert!(c[0].refused, "{c:?}");
    assert!(matches!(&c[0].change, Change::Schedule { at, .. } if at == "Mon 00:00:00 UTC"));
    // A window added that only loosens (the burst ×10, the rate ×1: the
    // smaller ratio counts), or a tightening approved: accepted.
    let c = review(&plain, &old);
    assert!(matches!(c[0].change, Change::Schedule { factor, .. } if (factor - 1.0).abs() < 1e-9));
    assert!(!c[0].refused);
    let approval = serde_json::json!({"approve": [{"rule": "api", "against": old.version()}]});
    let approved = set(
        serde_json::json!([rule("api", 100, serde_json::json!({}))]),
        Some(approval),
    );
    assert!(!review(&old, &approved)[0].refused);
    // A window that tightens the limit in force, added to a running rule.
    let quiet = set(
        serde_json::json!([rule(
            "api",
            100,
            serde_json::json!({"schedule": [{"hours": "02:00-03:00", "requests": 5}]})
        )]),
        None,
    );
    let c = review(&plain, &quiet);
    assert!(c[0].refused, "{c:?}");
    assert!(matches!(&c[0].change, Change::Schedule { at, .. } if at == "Mon 02:00:00 UTC"));
}

/// Whether rule `a`'s conditions cover every request rule `b`'s match.
fn covering(a: serde_json::Value, b: serde_json::Value) -> bool {
    let s = set(
        serde_json::json!([rule("a", 10, a), rule("b", 10, b)]),
        None,
    );
    let (a, b) = (s.rule("a").unwrap(), s.rule("b").unwrap());
    covers(&a.matcher, &b.matcher)
}

#[test]
fn a_condition_covers_what_it_matches_and_no_more() {
    let m = |m: serde_json::Value| serde_json::json!({"match": m});
    let none = serde_json::json!({});
    let cases = [
        // Hosts: none covers all; a suffix covers its hosts and deeper
        // suffixes, a host no suffix.
        (
            none.clone(),
            m(serde_json::json!({"authority": "api.example.com"})),
            true,
        ),
        (
            m(serde_json::json!({"authority": "api.example.com"})),
            none.clone(),
            false,
        ),
        (
            m(serde_json::json!({"authority": "*.example.com"})),
            m(serde_json::json!({"authority": "api.example.com"})),
            true,
        ),
        (
            m(serde_json::json!({"authority": "*.example.com"})),
            m(serde_json::json!({"authority": "api.other.com"})),
            false,
        ),
        (
            m(serde_json::json!({"authority": "api.example.com"})),
            m(serde_json::json!({"authority": "*.example.com"})),
            false,
        ),
        (
            m(serde_json::json!({"authority": "*.example.com"})),
            m(serde_json::json!({"authority": "*.api.example.com"})),
            true,
        ),
        (
            m(serde_json::json!({"authority": "*.api.example.com"})),
            m(serde_json::json!({"authority": "*.example.com"})),
            false,
        ),
        // Headers: `present: true` covers `equals`; equal conditions cover
        // each other; other values or presence do not.
        (
            m(serde_json::json!({"headers": {"x-tier": {"present": true}}})),
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            true,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            m(serde_json::json!({"headers": {"x-tier": {"present": true}}})),
            false,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            true,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            m(serde_json::json!({"headers": {"x-tier": {"equals": "silver"}}})),
            false,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"present": false}}})),
            m(serde_json::json!({"headers": {"x-tier": {"present": false}}})),
            true,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"present": true}}})),
            m(serde_json::json!({"headers": {"x-tier": {"present": false}}})),
            false,
        ),
        (
            m(serde_json::json!({"headers": {"x-tier": {"present": false}}})),
            m(serde_json::json!({"headers": {"x-tier": {"equals": "gold"}}})),
            false,
        ),
        // Paths: a prefix covers the paths below it, an exact path only itself.
        (
            m(serde_json::json!({"path_prefix": "/v1"})),
            m(serde_json::json!({"path": "/v1/x"})),
            true,
        ),
        (
            m(serde_json::json!({"path": "/v1/x"})),
            m(serde_json::json!({"path": "/v1/y"})),
            false,
        ),
        (
            m(serde_json::json!({"path": "/v1/x"})),
            m(serde_json::json!({"path": "/v1/x"})),
            true,
        ),
    ];
    for (a, b, want) in cases {
        assert_eq!(covering(a.clone(), b.clone()), want, "{a} covers {b}");
    }
}
