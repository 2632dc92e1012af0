//! The region exchange: leader, peers, rebalances, refreshes and the published shares.

use super::*;

#[test]
fn the_region_exchange_shows_its_leader_peers_rebalances_and_refreshes() {
    let m = Fixture::new();
    m.regions.region_leader(true, Some("agent-a"));
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
    m.regions.region_leader(false, Some("agent-b"));
    m.regions.region_peer("us", true);
    m.regions.region_peer("ap", false);
    m.regions.region_rebalance("ok", Duration::from_millis(20));
    m.regions
        .region_rebalance("stale", Duration::from_millis(5));
    m.regions.region_flush(true);
    m.regions.region_flush(false);
    m.regions.region_flush(true);
    m.regions.region_refresh("ok", 1_700_000_000_500);
    m.regions.region_refresh("unchanged", 1_700_000_009_000);
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
    let m = Fixture::new();
    let table = |period, fields: &[(&str, &str)]| {
        ShareTable::from_fields(
            Some(period),
            fields.iter().map(|(k, v)| (k.to_string(), v.to_string())),
        )
    };
    let key = |rule, part| DescriptorKey::new(rule, [part]).as_str().to_string();
    let (a1, a2, a3, b1) = (key("a", "1"), key("a", "2"), key("a", "3"), key("b", "1"));
    m.regions.region_shares(
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
    m.regions
        .region_shares(&table(101, &[(&a1, "0.6 300"), (&a3, "0.4 20")]), 103_000);
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
