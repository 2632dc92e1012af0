//! Schedules: the limit in force at a time, windows over the limit, and their checks.

use super::*;
use crate::rules::expiry::parse_instant;

// The fixtures are YAML, read with the `yaml` feature (not under WASI).
#[cfg(feature = "yaml")]
const RUSH: &str = include_str!("../../../../tests/fixtures/rules/top-of-the-hour-rush.yaml");
#[cfg(feature = "yaml")]
const BROKEN: &str =
    include_str!("../../../../tests/fixtures/rules/invalid/schedule-span-in-words.yaml");

fn ns(t: &str) -> u64 {
    parse_instant(t).unwrap() * NANOS_PER_SEC
}

#[cfg(feature = "yaml")]
#[test]
fn the_limit_in_force_follows_the_schedule() {
    let s = crate::rules::parse_rules("rush.yaml", RUSH).unwrap();
    let rule = s.rule("reports-per-api-key").unwrap();
    let in_force = |t: &str| {
        let f = rule.limit_in_force(None, ns(t));
        (f.window, f.limit.requests(), f.limit.burst())
    };
    // Tuesday: the first 30 s of the hour, then business hours, then none.
    assert_eq!(in_force("2026-12-01T10:00:00Z"), (Some(0), 100, 1000));
    assert_eq!(in_force("2026-12-01T10:00:29Z"), (Some(0), 100, 1000));
    assert_eq!(in_force("2026-12-01T10:00:30Z"), (Some(1), 200, 200));
    assert_eq!(in_force("2026-12-01T16:59:59Z"), (Some(1), 200, 200));
    assert_eq!(in_force("2026-12-01T17:00:30Z"), (None, 100, 100));
    // Saturday: the rush only.
    assert_eq!(in_force("2026-12-05T10:00:10Z"), (Some(0), 100, 1000));
    assert_eq!(in_force("2026-12-05T10:00:30Z"), (None, 100, 100));
    // A request is counted against the limit in force at its time.
    let mut req = request("/v1/reports/x", "GET", &[("x-api-key", "k")]);
    req.now_ns = ns("2026-12-05T10:00:10Z");
    let a = &s.applicable(&req).unwrap()[0];
    assert_eq!((a.window, a.limit.burst()), (Some(0), 1000));
    req.now_ns = ns("2026-12-05T10:00:40Z");
    let a = &s.applicable(&req).unwrap()[0];
    assert_eq!((a.window, a.limit.burst()), (None, 100));
}

#[test]
fn a_window_writes_its_fields_over_the_rules_limit() {
    let s = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "implicit", "key": ["method"], "limit": {"requests": 10, "per": "1s"},
         "schedule": [{"minutes": "00:00-60:00", "requests": 50}]},
        {"name": "explicit", "key": ["method"], "limit": {"requests": 10, "per": "1s", "burst": 20},
         "schedule": [{"hours": "00:00-24:00", "per": "1m"}]},
    ]}))
    .unwrap();
    let got = |name: &str| {
        let l = s
            .rule(name)
            .unwrap()
            .limit_in_force(None, ns("2026-12-01T10:00:00Z"))
            .limit;
        (l.requests(), l.per_ns() / NANOS_PER_SEC, l.burst())
    };
    // The burst still defaults to the requests when the rule wrote none.
    assert_eq!(got("implicit"), (50, 1, 50));
    assert_eq!(got("explicit"), (10, 60, 20));
}

#[cfg(feature = "yaml")]
#[test]
fn a_broken_schedule_is_refused_naming_the_rule_and_field() {
    let e = crate::rules::parse_rules("s.yaml", BROKEN).unwrap_err();
    let lines: Vec<String> = e.errors.iter().map(ToString::to_string).collect();
    for want in [
        "s.yaml:9:9: rule reports-per-api-key: field rules[0].schedule[0].minutes: `first 30 seconds` is not a span: write FROM-TO as `00-30` (minutes MM-MM within every hour, up to 60), or to the second `00m00s-00m30s`",
        "s.yaml:11:16: rule reports-per-api-key: field rules[0].schedule[1].days[0]: `monday` is not a day: write mon, tue, wed, thu, fri, sat or sun",
        "s.yaml:21:5: rule by-plan: field rules[1].schedule: a rule with `plans` cannot have a schedule: give it `limit`, or write the windowed limit as a rule of its own",
    ] {
        assert!(lines.iter().any(|l| l == want), "want {want}\ngot {lines:#?}");
    }
    assert_eq!(lines.len(), 3, "{lines:#?}");
    // Each window's limit is checked as a rule's is.
    for (window, field, message) in [
        (
            serde_json::json!({"minutes": "00m00s-00m30s"}),
            "schedule[0]",
            "a window changes nothing",
        ),
        (
            serde_json::json!({"burst": 5}),
            "schedule[0]",
            "a window needs `minutes",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "hours": "09:00-10:00", "burst": 5}),
            "schedule[0]",
            "not both",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "burst": 0}),
            "schedule[0].burst",
            "must be at least 1",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "per": "1 hour"}),
            "schedule[0].per",
            "is not a period",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "burst": 1}),
            "cost",
            "above the burst 1 of `schedule[0]`",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "days": [], "burst": 5}),
            "schedule[0].days",
            "opens on no day",
        ),
        (
            serde_json::json!({"minutes": "00m00s-00m30s", "name": "Top", "burst": 5}),
            "schedule[0].name",
            "[a-z0-9._-]",
        ),
    ] {
        let e = compile(serde_json::json!({"version": 1, "rules": [
            {"name": "r", "key": ["method"], "cost": 2, "limit": {"requests": 10, "per": "1s"},
             "schedule": [window.clone()]},
        ]}))
        .unwrap_err();
        assert!(
            e.errors
                .iter()
                .any(|x| x.field == field && x.message.contains(message)),
            "{window}: want {field}: {message}, got {e:?}"
        );
    }
}

#[test]
fn a_rule_has_at_most_32_windows() {
    let with = |n: usize| {
        let windows: Vec<_> = (0..n)
            .map(|i| serde_json::json!({"minutes": format!("{i:02}m00s-{i:02}m30s"), "requests": 50}))
            .collect();
        compile(serde_json::json!({"version": 1, "rules": [
            {"name": "many", "key": ["method"], "limit": {"requests": 10, "per": "1s"},
             "schedule": windows},
        ]}))
    };
    let s = with(32).unwrap();
    assert_eq!(
        s.rule("many")
            .unwrap()
            .limit_in_force(None, ns("2026-12-01T10:31:10Z"))
            .window,
        Some(31)
    );
    let e = with(33).unwrap_err();
    assert_eq!(e.errors.len(), 1, "{e:?}");
    let x = &e.errors[0];
    assert_eq!(x.field, "schedule");
    assert_eq!(x.message, "33 windows; at most 32");
    assert_eq!(x.rule.as_deref(), Some("many"));
}

#[test]
fn a_rule_without_a_schedule_keeps_its_version() {
    // `schedule` is left out of the normalised file when empty: files written
    // before schedules keep their versions.
    let s = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "a", "key": ["method"], "limit": {"requests": 1, "per": "1s"}, "schedule": []},
    ]}))
    .unwrap();
    let t = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "a", "key": ["method"], "limit": {"requests": 1, "per": "1s"}},
    ]}))
    .unwrap();
    assert_eq!(s.version(), t.version());
}

#[test]
fn a_rule_without_a_schedule_never_changes_its_limit() {
    let s = set();
    for r in s.rules() {
        assert_eq!(
            r.until_change_ns(1_000 * NANOS_PER_SEC),
            u64::MAX,
            "{}",
            r.name
        );
    }
}
