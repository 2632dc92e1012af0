//! What filters' syncs show: their rules versions, propagation, bounded labels and how many filters.

use super::*;

#[tokio::test(start_paused = true)]
async fn silent_filters_leave_the_version_metric() {
    let m = Fixture::new();
    m.reports.record_sync(None, &report("a", "v1", &[]));
    m.reports.record_sync(None, &report("b", "v1", &[]));
    tokio::time::advance(Duration::from_secs(30)).await;
    m.reports.record_sync(None, &report("b", "v2", &[]));
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
fn long_filter_ids_become_bounded_labels() {
    let m = Fixture::new();
    let long = format!(
        "sidecar~10.0.0.1~{}~ns.svc.cluster.local/vm1",
        "p".repeat(300)
    );
    m.reports.record_sync(None, &report(&long, "v", &[]));
    m.reports.record_sync(None, &report("", "v", &[]));
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

#[tokio::test(start_paused = true)]
async fn propagation_is_timed_and_filters_are_counted_per_version() {
    let m = Fixture::new();
    m.reports.record_sync(None, &report("f1", "v1", &[]));
    m.rules.rules_applied("v2");
    tokio::time::advance(Duration::from_millis(1_500)).await;
    m.reports.record_sync(None, &report("f1", "v2", &[]));
    // A second report of the same version is not a new arrival.
    tokio::time::advance(Duration::from_millis(1_000)).await;
    m.reports.record_sync(None, &report("f1", "v2", &[]));
    m.reports.record_sync(None, &report("f2", "v1", &[]));
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
    m.reports.record_sync(None, &report("f2", "v2", &[]));
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
fn a_reported_version_is_shown_as_sent_only_when_it_is_short_and_printable() {
    let m = Fixture::new();
    let set = parse_rules("t", RULES).unwrap();
    let long = "v".repeat(meshlimit_core::wire::MAX_VERSION_LABEL + 1);
    for (filter, version) in [
        ("none", ""),
        ("own", set.version()),
        ("older", "0123abcd"),
        ("long", long.as_str()),
        ("spaced", "v 1"),
    ] {
        m.reports
            .record_sync(Some(&set), &report(filter, version, &[]));
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
    assert_eq!(shown("long", crate::reports::INVALID_VERSION), Some(1.0));
    assert_eq!(shown("spaced", crate::reports::INVALID_VERSION), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn a_filter_is_shown_until_it_has_been_silent_for_a_minute() {
    let m = Fixture::new();
    m.reports.record_sync(None, &report("a", "v1", &[]));
    m.reports.record_sync(None, &report("b", "v1", &[]));
    tokio::time::advance(FILTER_TTL - Duration::from_millis(1)).await;
    m.reports.record_sync(None, &report("b", "v1", &[]));
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
    let m = Fixture::new();
    for i in 0..MAX_FILTERS {
        m.reports
            .record_sync(None, &report(&format!("f{i}"), "v1", &[]));
    }
    m.reports.record_sync(None, &report("one-more", "v1", &[]));
    m.reports.record_sync(None, &report("f0", "v2", &[]));
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
