use std::time::Duration;

use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{DecisionCount, SyncRequest, WIRE_VERSION};
use meshlimit_core::{DescriptorKey, Outcome};

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

/// A sample that must be there: its value.
fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in\n{text}"))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn the_lease_path_and_the_store_show_what_they_counted() {
    let m = Metrics::new("eu").unwrap();
    m.lease_granted("r", 5);
    m.lease_granted("r", 3);
    m.lease_unavailable("shed");
    m.store_results("ok", 4);
    m.store_results("timeout", 1);
    m.store_call(3, Duration::from_millis(2));
    // Two Redis pipelines: 7 scripts in 3 ms, 2 in 1 ms.
    m.store_pipeline(7, Duration::from_millis(3));
    m.store_pipeline(2, Duration::from_millis(1));
    m.pool_refill();
    m.pool_waits(4);
    m.pool_denied();
    m.pool_denied();
    m.tokens_dropped("r", 6);
    m.live_nodes(3);
    m.decision_log_written(10);
    m.decision_log_dropped("agent", 2);
    m.bad_request("version");
    m.connection_refused();
    let text = m.render().unwrap();
    let rule = [("rule", "r")];
    for (name, labels, want) in [
        ("meshlimit_leases_granted_total", &rule[..], 2.0),
        ("meshlimit_lease_tokens_granted_total", &rule, 8.0),
        ("meshlimit_lease_tokens_dropped_total", &rule, 6.0),
        (
            "meshlimit_lease_unavailable_total",
            &[("reason", "shed")],
            1.0,
        ),
        ("meshlimit_store_requests_total", &[("result", "ok")], 4.0),
        (
            "meshlimit_store_requests_total",
            &[("result", "timeout")],
            1.0,
        ),
        ("meshlimit_store_batch_size_sum", &[], 3.0),
        ("meshlimit_store_latency_seconds_sum", &[], 0.002),
        // The pipelines' sizes: 2 of them, 9 scripts, the one of 2 scripts
        // alone in the bucket `le="2"`.
        ("meshlimit_store_pipeline_size_count", &[], 2.0),
        ("meshlimit_store_pipeline_size_sum", &[], 9.0),
        ("meshlimit_store_pipeline_size_bucket", &[("le", "2")], 1.0),
        ("meshlimit_store_pipeline_size_bucket", &[("le", "8")], 2.0),
        ("meshlimit_store_pipeline_seconds_sum", &[], 0.004),
        ("meshlimit_pool_calls_total", &[("kind", "refill")], 1.0),
        ("meshlimit_pool_calls_total", &[("kind", "wait")], 4.0),
        ("meshlimit_pool_calls_total", &[("kind", "denied")], 2.0),
        ("meshlimit_live_nodes", &[], 3.0),
        ("meshlimit_decision_log_records_total", &[], 10.0),
        (
            "meshlimit_decision_log_dropped_total",
            &[("at", "agent")],
            2.0,
        ),
        (
            "meshlimit_bad_requests_total",
            &[("reason", "version")],
            1.0,
        ),
        ("meshlimit_connections_refused_total", &[], 1.0),
    ] {
        let got = value(&text, name, labels);
        assert!(close(got, want), "{name}{labels:?}: {got}, not {want}");
    }
}

#[test]
fn a_redis_node_counts_as_down_from_its_event_until_it_is_back() {
    let m = Metrics::new("eu").unwrap();
    m.store_topology("node_down", None);
    m.store_topology("node_down", None);
    m.store_topology("slot_map_changed", None);
    m.store_topology("node_up", Some(Duration::from_millis(1_500)));
    let text = m.render().unwrap();
    let event = |e| {
        value(
            &text,
            "meshlimit_store_topology_events_total",
            &[("event", e)],
        )
    };
    assert_eq!(
        (
            event("node_down"),
            event("slot_map_changed"),
            event("node_up")
        ),
        (2.0, 1.0, 1.0)
    );
    assert_eq!(value(&text, "meshlimit_store_nodes_down", &[]), 1.0);
    assert_eq!(
        value(&text, "meshlimit_store_node_down_milliseconds_total", &[]),
        1_500.0
    );
}

#[test]
fn the_most_rejected_keys_are_ranked_by_id_never_in_clear() {
    let m = Metrics::new("eu").unwrap();
    let (a, b) = (
        DescriptorKey::new("r", ["customer-a"]),
        DescriptorKey::new("r", ["customer-b"]),
    );
    for _ in 0..3 {
        m.lease_denied("r", &a);
    }
    m.lease_denied("r", &b);
    m.refresh_top_keys();
    let text = m.render().unwrap();
    assert_eq!(
        value(&text, "meshlimit_lease_denials_total", &[("rule", "r")]),
        4.0
    );
    let (id_a, id_b) = (m.key_id(&a).to_string(), m.key_id(&b).to_string());
    let rank = |r, id: &str| {
        sample(
            &text,
            "meshlimit_top_rejected_keys",
            &[("rank", r), ("rule", "r"), ("key", id)],
        )
    };
    assert_eq!(rank("1", &id_a), Some(3.0));
    assert_eq!(rank("2", &id_b), Some(1.0));
    assert!(!text.contains("customer-"), "{text}");
}

#[test]
fn a_trial_shows_its_end_and_the_keys_its_rules_would_reject_most() {
    use crate::rules_watch::TrialView;
    use crate::trial::TrialClock;
    let m = Metrics::new("eu").unwrap();
    let mut trial = TrialView {
        version: "v2".into(),
        clock: TrialClock {
            start_ms: 1_000_000,
            period_ms: 600_500,
            ended_ms: None,
            held: false,
        },
        rules: vec!["r".into()],
    };
    m.trial(Some(&trial));
    let key = DescriptorKey::new("r", ["customer-a"]);
    m.lease_denied("r", &key);
    m.lease_denied("r", &key);
    m.lease_denied("other", &key);
    m.refresh_top_keys();
    let text = m.render().unwrap();
    let id = m.key_id(&key).to_string();
    assert_eq!(
        value(&text, "meshlimit_rules_trial", &[("version", "v2")]),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "meshlimit_rules_trial_end_seconds",
            &[("version", "v2")]
        ),
        1_600.5
    );
    let top = |rule, rank| {
        sample(
            &text,
            "meshlimit_trial_top_keys",
            &[("rule", rule), ("rank", rank), ("key", &id)],
        )
    };
    assert_eq!(top("r", "1"), Some(2.0));
    assert_eq!(top("other", "1"), None, "not on trial");
    // Held: it ends when an operator ends it.
    trial.clock.held = true;
    m.trial(Some(&trial));
    let text = m.render().unwrap();
    assert_eq!(
        value(
            &text,
            "meshlimit_rules_trial_end_seconds",
            &[("version", "v2")]
        ),
        f64::INFINITY
    );
    // Over: its series go.
    m.trial(None);
    m.refresh_top_keys();
    let text = m.render().unwrap();
    assert_eq!(sample(&text, "meshlimit_rules_trial", &[]), None);
    assert_eq!(sample(&text, "meshlimit_trial_top_keys", &[]), None);
}

#[test]
fn the_region_exchange_shows_its_leader_peers_rebalances_and_refreshes() {
    let m = Metrics::new("eu").unwrap();
    m.region_leader(true, Some("agent-a"));
    let text = m.render().unwrap();
    assert_eq!(value(&text, "meshlimit_region_leader", &[]), 1.0);
    assert_eq!(
        value(
            &text,
            "meshlimit_region_leader_info",
            &[("leader", "agent-a")]
        ),
        1.0
    );
    m.region_leader(false, Some("agent-b"));
    m.region_peer("us", true);
    m.region_peer("ap", false);
    m.region_rebalance("ok", Duration::from_millis(20));
    m.region_rebalance("stale", Duration::from_millis(5));
    m.region_flush(true);
    m.region_flush(false);
    m.region_flush(true);
    m.region_refresh("ok", 1_700_000_000_500);
    m.region_refresh("unchanged", 1_700_000_009_000);
    let text = m.render().unwrap();
    let v = |name, labels: &[(&str, &str)]| value(&text, name, labels);
    assert_eq!(v("meshlimit_region_leader", &[]), 0.0);
    assert_eq!(
        sample(
            &text,
            "meshlimit_region_leader_info",
            &[("leader", "agent-a")]
        ),
        None,
        "the old holder's label goes"
    );
    assert_eq!(
        v("meshlimit_region_leader_info", &[("leader", "agent-b")]),
        1.0
    );
    let up = |r| v("meshlimit_region_up", &[("region", r)]);
    assert_eq!((up("us"), up("ap")), (1.0, 0.0));
    let rebalances = |r| v("meshlimit_region_rebalances_total", &[("result", r)]);
    assert_eq!((rebalances("ok"), rebalances("stale")), (1.0, 1.0));
    assert_eq!(
        v("meshlimit_region_rebalance_duration_seconds_count", &[]),
        2.0
    );
    assert!(close(
        v("meshlimit_region_rebalance_duration_seconds_sum", &[]),
        0.025
    ));
    let flushes = |r| v("meshlimit_region_demand_flushes_total", &[("result", r)]);
    assert_eq!((flushes("ok"), flushes("error")), (2.0, 1.0));
    let refreshes = |r| v("meshlimit_region_share_refreshes_total", &[("result", r)]);
    assert_eq!((refreshes("ok"), refreshes("unchanged")), (1.0, 1.0));
    assert_eq!(
        v("meshlimit_region_shares_refreshed_timestamp_seconds", &[]),
        1_700_000_000.5,
        "when the last new shares came in force, not the unchanged read"
    );
}

#[test]
fn the_region_shares_are_shown_per_rule_and_for_the_keys_with_the_most_demand() {
    use crate::regions::table::ShareTable;
    let m = Metrics::new("eu").unwrap();
    let table = |period, fields: &[(&str, &str)]| {
        ShareTable::from_fields(
            Some(period),
            fields.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    };
    let key = |rule, part| DescriptorKey::new(rule, [part]).as_str().to_string();
    let (a1, a2, a3, b1) = (key("a", "1"), key("a", "2"), key("a", "3"), key("b", "1"));
    m.region_shares(
        &table(100, &[(&a1, "0.8 300"), (&a2, "0.2 10"), (&b1, "0.5 50")]),
        102_500,
    );
    let text = m.render().unwrap();
    let v = |name, labels: &[(&str, &str)]| value(&text, name, labels);
    assert_eq!(v("meshlimit_region_shares_period", &[]), 100.0);
    assert_eq!(
        v("meshlimit_region_shares_age_seconds", &[]),
        1.5,
        "the period's second ended at 101 s; read at 102.5 s"
    );
    assert_eq!(v("meshlimit_region_share_keys", &[("rule", "a")]), 2.0);
    assert!(close(
        v("meshlimit_region_share_mean", &[("rule", "a")]),
        0.5
    ));
    assert_eq!(v("meshlimit_region_share_keys", &[("rule", "b")]), 1.0);
    assert_eq!(
        v("meshlimit_region_share", &[("rule", "a"), ("key", &a1)]),
        0.8
    );
    assert_eq!(
        v("meshlimit_region_share", &[("rule", "b"), ("key", &b1)]),
        0.5
    );
    // The next table: rule b and key a2 gone, a3 new.
    m.region_shares(&table(101, &[(&a1, "0.6 300"), (&a3, "0.4 20")]), 103_000);
    let text = m.render().unwrap();
    let share = |rule, key: &str| {
        sample(
            &text,
            "meshlimit_region_share",
            &[("rule", rule), ("key", key)],
        )
    };
    assert_eq!(share("a", &a1), Some(0.6));
    assert_eq!(share("a", &a3), Some(0.4));
    assert_eq!(share("a", &a2), None, "a key no longer published goes");
    assert_eq!(share("b", &b1), None);
    assert_eq!(
        sample(&text, "meshlimit_region_share_keys", &[("rule", "b")]),
        None,
        "a rule no longer published goes"
    );
    assert_eq!(
        sample(&text, "meshlimit_region_share_mean", &[("rule", "b")]),
        None
    );
    assert_eq!(
        value(&text, "meshlimit_region_shares_age_seconds", &[]),
        1.0
    );
}

#[test]
fn a_reported_version_is_shown_as_sent_only_when_it_is_short_and_printable() {
    let m = Metrics::new("eu").unwrap();
    let set = parse_rules("t", RULES).unwrap();
    let long = "v".repeat(meshlimit_core::wire::MAX_VERSION_LABEL + 1);
    for (filter, version) in [
        ("none", ""),
        ("own", set.version()),
        ("older", "0123abcd"),
        ("long", long.as_str()),
        ("spaced", "v 1"),
    ] {
        m.record_sync(Some(&set), &report(filter, version, &[]));
    }
    let text = m.render().unwrap();
    let shown = |filter, version| {
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", filter), ("version", version)],
        )
    };
    assert_eq!(shown("none", "none"), Some(1.0));
    assert_eq!(shown("own", set.version()), Some(1.0));
    assert_eq!(shown("older", "0123abcd"), Some(1.0));
    assert_eq!(shown("long", reports::INVALID_VERSION), Some(1.0));
    assert_eq!(shown("spaced", reports::INVALID_VERSION), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn the_fail_open_ratio_is_the_share_of_a_rules_decisions_that_failed_open() {
    let m = Metrics::new("eu").unwrap();
    let set = parse_rules("t", RULES).unwrap();
    m.record_sync(
        Some(&set),
        &report(
            "f",
            set.version(),
            &[
                ("r", Outcome::Allowed, 6),
                ("r", Outcome::FailedOpen, 3),
                ("r", Outcome::Limited, 1),
                ("r", Outcome::FailedClosed, 0),
            ],
        ),
    );
    m.refresh(Some(&set));
    let text = m.render().unwrap();
    assert!(close(
        value(&text, "meshlimit_fail_open_ratio", &[("rule", "r")]),
        0.3
    ));
    let decisions = |outcome| {
        sample(
            &text,
            "meshlimit_decisions_total",
            &[("rule", "r"), ("outcome", outcome)],
        )
    };
    assert_eq!(decisions("failed_open"), Some(3.0));
    assert_eq!(
        decisions("failed_closed"),
        None,
        "a count of 0 adds nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn a_filter_is_shown_until_it_has_been_silent_for_a_minute() {
    let m = Metrics::new("eu").unwrap();
    m.record_sync(None, &report("a", "v1", &[]));
    m.record_sync(None, &report("b", "v1", &[]));
    tokio::time::advance(FILTER_TTL - Duration::from_millis(1)).await;
    m.record_sync(None, &report("b", "v1", &[]));
    m.refresh(None);
    let text = m.render().unwrap();
    let version = |text: &str, filter| {
        sample(
            text,
            "meshlimit_filter_rules_version_info",
            &[("filter", filter), ("version", "v1")],
        )
    };
    assert_eq!(version(&text, "a"), Some(1.0), "silent for 59.999 s");
    assert_eq!(
        value(&text, "meshlimit_filters_on_version", &[("version", "v1")]),
        2.0
    );
    tokio::time::advance(Duration::from_millis(1)).await;
    m.refresh(None);
    let text = m.render().unwrap();
    assert_eq!(version(&text, "a"), None, "silent for 60 s");
    assert_eq!(version(&text, "b"), Some(1.0));
    assert_eq!(
        value(&text, "meshlimit_filters_on_version", &[("version", "v1")]),
        1.0
    );
}

#[test]
fn past_the_most_filters_shown_a_new_filter_is_not_added_but_known_ones_move_on() {
    let m = Metrics::new("eu").unwrap();
    for i in 0..MAX_FILTERS {
        m.record_sync(None, &report(&format!("f{i}"), "v1", &[]));
    }
    m.record_sync(None, &report("one-more", "v1", &[]));
    m.record_sync(None, &report("f0", "v2", &[]));
    m.refresh(None);
    let text = m.render().unwrap();
    let version = |filter, v| {
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", filter), ("version", v)],
        )
    };
    assert_eq!(version("one-more", "v1"), None);
    assert_eq!(version("f0", "v2"), Some(1.0));
    assert_eq!(version("f0", "v1"), None);
    let on = |v| value(&text, "meshlimit_filters_on_version", &[("version", v)]);
    assert_eq!((on("v1"), on("v2")), ((MAX_FILTERS - 1) as f64, 1.0));
}

#[test]
fn keys_are_named_by_the_deployments_keyed_hash_once_it_is_set() {
    let m = Metrics::new("eu").unwrap();
    let ids = meshlimit_core::secret::Secret::new(&[7; 32])
        .unwrap()
        .key_ids();
    m.set_key_ids(ids.clone());
    let key = DescriptorKey::new("r", ["customer-a"]);
    m.lease_denied("r", &key);
    m.refresh_top_keys();
    let text = m.render().unwrap();
    let shown = |id: String| {
        sample(
            &text,
            "meshlimit_top_rejected_keys",
            &[("rule", "r"), ("key", &id)],
        )
    };
    assert_eq!(shown(ids.id(&key).to_string()), Some(1.0));
    assert_eq!(
        shown(
            meshlimit_core::secret::KeyIds::placeholder()
                .id(&key)
                .to_string()
        ),
        None
    );
}

#[tokio::test(start_paused = true)]
async fn the_fail_open_ratio_counts_the_last_minute_only() {
    let m = Metrics::new("eu").unwrap();
    let set = parse_rules("t", RULES).unwrap();
    let decisions = |outcome| report("f", set.version(), &[("r", outcome, 10)]);
    m.record_sync(Some(&set), &decisions(Outcome::FailedOpen));
    tokio::time::advance(Duration::from_secs(30)).await;
    m.record_sync(Some(&set), &decisions(Outcome::Allowed));
    m.refresh(Some(&set));
    let ratio = |m: &Metrics| {
        let text = m.render().unwrap();
        value(&text, "meshlimit_fail_open_ratio", &[("rule", "r")])
    };
    assert!(close(ratio(&m), 0.5));
    // A minute after the failures: only the allowed decisions are left.
    tokio::time::advance(Duration::from_secs(31)).await;
    m.refresh(Some(&set));
    assert_eq!(ratio(&m), 0.0);
}
