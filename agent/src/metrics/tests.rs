use std::time::Duration;

use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{DecisionCount, SyncRequest, WIRE_VERSION};
use meshlimit_core::Outcome;

use super::*;

const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/rule-r-ten-per-second.yaml"
));

fn report(filter: &str, version: &str, decisions: &[(&str, Outcome, u64)]) -> SyncRequest {
    SyncRequest {
        v: WIRE_VERSION,
        fetches_rules: false,
        filter_id: filter.into(),
        rules_version: Some(version.into()),
        decisions: decisions
            .iter()
            .map(|(rule, outcome, count)| DecisionCount {
                rule: (*rule).into(),
                outcome: *outcome,
                count: *count,
            })
            .collect(),
    }
}

#[test]
fn only_the_current_rules_version_is_shown() {
    let m = Metrics::new("eu").unwrap();
    m.rules_applied("aaa");
    m.rules_applied("bbb");
    m.rules_refused();
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
    assert_eq!(
        sample(&text, "meshlimit_agent_info", &[("region", "eu")]),
        Some(1.0)
    );
}

#[test]
fn unknown_rules_fold_into_other() {
    let m = Metrics::new("eu").unwrap();
    let set = parse_rules("t", RULES).unwrap();
    m.record_sync(
        Some(&set),
        &report(
            "f",
            "v",
            &[
                ("r", Outcome::Allowed, 2),
                ("customer-123", Outcome::Limited, 7),
            ],
        ),
    );
    let text = m.render().unwrap();
    let decisions = |rule, outcome| {
        sample(
            &text,
            "meshlimit_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    };
    assert_eq!(decisions("r", "allowed"), Some(2.0));
    assert_eq!(decisions("other", "limited"), Some(7.0));
    assert!(!text.contains("customer-123"));
}

#[tokio::test(start_paused = true)]
async fn silent_filters_leave_the_version_metric() {
    let m = Metrics::new("eu").unwrap();
    m.record_sync(None, &report("a", "v1", &[]));
    m.record_sync(None, &report("b", "v1", &[]));
    tokio::time::advance(Duration::from_secs(30)).await;
    m.record_sync(None, &report("b", "v2", &[]));
    tokio::time::advance(Duration::from_secs(31)).await;
    m.refresh(None);
    let text = m.render().unwrap();
    let version = |filter, v| {
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", filter), ("version", v)],
        )
    };
    assert_eq!(version("a", "v1"), None, "a was silent for 61 s");
    assert_eq!(version("b", "v1"), None, "b moved on to v2");
    assert_eq!(version("b", "v2"), Some(1.0));
    assert_eq!(
        sample(&text, "meshlimit_filter_syncs_total", &[]),
        Some(3.0)
    );
}

#[test]
fn sample_reads_labelled_and_bare_series() {
    let text = "# HELP x y\nm_total{a=\"1\",b=\"2\"} 3\nn 4.5\n";
    assert_eq!(sample(text, "m_total", &[("b", "2")]), Some(3.0));
    assert_eq!(sample(text, "n", &[]), Some(4.5));
    assert_eq!(sample(text, "m", &[]), None);
}

#[test]
fn long_filter_ids_become_bounded_labels() {
    let m = Metrics::new("eu").unwrap();
    let long = format!(
        "sidecar~10.0.0.1~{}~ns.svc.cluster.local/vm1",
        "p".repeat(300)
    );
    m.record_sync(None, &report(&long, "v", &[]));
    m.record_sync(None, &report("", "v", &[]));
    let text = m.render().unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("meshlimit_filter_rules_version_info{filter=\"sidecar"))
        .unwrap();
    assert!(line.len() < 260, "{line}");
    assert!(line.contains('#'), "{line}");
    assert_eq!(
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", "unknown")]
        ),
        Some(1.0)
    );
}

#[test]
fn each_rule_and_plan_shows_its_limit_and_old_ones_go() {
    let m = Metrics::new("eu").unwrap();
    let first = parse_rules(
        "r.yaml",
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../tests/fixtures/rules/per-ip-and-api-plans.yaml"
        )),
    )
    .unwrap();
    m.rule_limits(&first);
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
    m.rule_limits(&second);
    let text = m.render().unwrap();
    assert_eq!(limit(&text, "per-ip", "", "rate_per_second"), None);
    assert_eq!(limit(&text, "api", "gold", "burst"), None);
    assert_eq!(limit(&text, "api", "free", "rate_per_second"), Some(20.0));
    assert_eq!(limit(&text, "api", "free", "burst"), Some(20.0));
}

#[tokio::test(start_paused = true)]
async fn propagation_is_timed_and_filters_are_counted_per_version() {
    let m = Metrics::new("eu").unwrap();
    m.record_sync(None, &report("f1", "v1", &[]));
    m.rules_applied("v2");
    tokio::time::advance(Duration::from_millis(1_500)).await;
    m.record_sync(None, &report("f1", "v2", &[]));
    // A second report of the same version is not a new arrival.
    tokio::time::advance(Duration::from_millis(1_000)).await;
    m.record_sync(None, &report("f1", "v2", &[]));
    m.record_sync(None, &report("f2", "v1", &[]));
    m.refresh(None);
    let text = m.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_rules_propagation_seconds_count", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_propagation_seconds_sum", &[]),
        Some(1.5)
    );
    assert_eq!(
        sample(&text, "meshlimit_filters_on_version", &[("version", "v2")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_filters_on_version", &[("version", "v1")]),
        Some(1.0)
    );
    // f2 moves on: v1 has no filter left and its label goes.
    m.record_sync(None, &report("f2", "v2", &[]));
    m.refresh(None);
    let text = m.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_filters_on_version", &[("version", "v2")]),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_filters_on_version", &[("version", "v1")]),
        None
    );
    assert_eq!(
        sample(&text, "meshlimit_rules_propagation_seconds_count", &[]),
        Some(2.0)
    );
}

#[test]
fn a_large_set_shows_series_only_for_its_active_rules_failing_open_first() {
    let m = Metrics::new("eu").unwrap();
    let n = reports::MAX_RULE_SERIES + 5;
    let mut text = String::from("version: 1\nrules:\n");
    for i in 0..n {
        text.push_str(&format!(
            "  - {{name: r-{i}, key: [method], limit: {{requests: 10, per: 1s}}}}\n"
        ));
    }
    let set = parse_rules("r.yaml", &text).unwrap();
    m.rule_limits(&set);
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
    m.record_sync(Some(&set), &report("f1", set.version(), &decisions));
    m.refresh(Some(&set));
    let rendered = m.render().unwrap();
    let count = |name: &str| {
        rendered
            .lines()
            .filter(|l| l.starts_with(&format!("{name}{{")))
            .count()
    };
    assert_eq!(count("meshlimit_fail_open_ratio"), reports::MAX_RULE_SERIES);
    assert_eq!(count("meshlimit_rule_limit"), 2 * reports::MAX_RULE_SERIES);
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
