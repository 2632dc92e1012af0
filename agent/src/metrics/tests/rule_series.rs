//! Per-rule series: the rules version in force, each rule's and plan's limit, and the cap on a large set.

use super::*;

#[test]
fn only_the_current_rules_version_is_shown() {
    let m = Fixture::new();
    m.rules.rules_applied("aaa");
    m.rules.rules_applied("bbb");
    m.rules.rules_refused();
    let text = m.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_rules_version_info", &[("version", "aaa")]),
        None
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_version_info", &[("version", "bbb")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_reloads_total", &[("result", "ok")]),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "meshlimit_rules_reloads_total",
            &[("result", "error")]
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_last_reload_success", &[]),
        Some(0.0)
    );
}

#[test]
fn each_rule_and_plan_shows_its_limit_and_old_ones_go() {
    let m = Fixture::new();
    let first = parse_rules(
        "r.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/per-ip-and-api-plans.yaml"
        )),
    )
    .unwrap();
    m.rules.rule_limits(&first);
    let text = m.render().unwrap();
    let limit = |text: &str, rule: &str, plan: &str, what: &str| {
        sample(
            text,
            "meshlimit_rule_limit",
            &[("rule", rule), ("plan", plan), ("what", what)],
        )
    };
    assert_eq!(limit(&text, "per-ip", "", "rate_per_second"), Some(2.0));
    assert_eq!(limit(&text, "per-ip", "", "burst"), Some(30.0));
    assert_eq!(limit(&text, "api", "free", "rate_per_second"), Some(10.0));
    assert_eq!(limit(&text, "api", "gold", "burst"), Some(500.0));

    // A new set: the rule and the plan it dropped leave the metric.
    let second = parse_rules(
        "r.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/api-plans-free-only.yaml"
        )),
    )
    .unwrap();
    m.rules.rule_limits(&second);
    let text = m.render().unwrap();
    assert_eq!(limit(&text, "per-ip", "", "rate_per_second"), None);
    assert_eq!(limit(&text, "api", "gold", "burst"), None);
    assert_eq!(limit(&text, "api", "free", "rate_per_second"), Some(20.0));
    assert_eq!(limit(&text, "api", "free", "burst"), Some(20.0));
}

#[test]
fn a_large_set_shows_series_only_for_its_active_rules_failing_open_first() {
    let m = Fixture::new();
    let n = crate::reports::MAX_RULE_SERIES + 5;
    let mut text = String::from("version: 1\nrules:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - {{name: r-{i}, key: [method], limit: {{requests: 10, per: 1s}}}}\n"
        ));
    }
    let set = parse_rules("r.yaml", &text).unwrap();
    m.rules.rule_limits(&set);
    let rendered = m.render().unwrap();
    assert_eq!(sample(&rendered, "meshlimit_rule_limit", &[]), None);
    assert_eq!(sample(&rendered, "meshlimit_fail_open_ratio", &[]), None);

    // Every rule busy: the busiest shown, and the one failing open however quiet.
    let mut decisions: Vec<(String, Outcome, u64)> = (0..n)
        .map(|i| (format!("r-{i}"), Outcome::Allowed, 10 + i as u64))
        .collect();
    decisions.push(("r-0".into(), Outcome::FailedOpen, 1));
    let decisions: Vec<(&str, Outcome, u64)> = decisions
        .iter()
        .map(|(r, o, c)| (r.as_str(), *o, *c))
        .collect();
    m.reports
        .record_sync(Some(&set), &report("f1", set.version(), &decisions));
    m.refresh(Some(&set));
    let rendered = m.render().unwrap();
    let count = |name: &str| {
        rendered
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .count()
    };
    assert_eq!(
        count("meshlimit_fail_open_ratio"),
        crate::reports::MAX_RULE_SERIES
    );
    assert_eq!(
        count("meshlimit_rule_limit"),
        2 * crate::reports::MAX_RULE_SERIES
    );
    let ratio = |rule: &str| sample(&rendered, "meshlimit_fail_open_ratio", &[("rule", rule)]);
    assert!(ratio("r-0").is_some_and(|r| r > 0.0), "failing open: shown");
    let last = format!("r-{}", n - 1);
    assert_eq!(ratio(&last), Some(0.0), "the busiest: shown");
    assert_eq!(ratio("r-1"), None, "among the quietest: left out");
    assert_eq!(
        sample(
            &rendered,
            "meshlimit_rule_limit",
            &[("rule", &last), ("what", "rate_per_second")]
        ),
        Some(10.0)
    );
}
