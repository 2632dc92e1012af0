//! What the lease path and the store counted, and a Redis node counted down until it is back.

use super::*;

#[test]
fn the_lease_path_and_the_store_show_what_they_counted() {
    let m = Fixture::new();
    m.leases.lease_granted("r", 5);
    m.leases.lease_granted("r", 3);
    m.leases.lease_unavailable("shed");
    m.leases.store_results("ok", 4);
    m.leases.store_results("timeout", 1);
    m.leases.store_call(3, Duration::from_millis(2));
    // Two Redis pipelines: 7 scripts in 3 ms, 2 in 1 ms.
    m.leases.store_pipeline(7, Duration::from_millis(3));
    m.leases.store_pipeline(2, Duration::from_millis(1));
    m.leases.pool_refill();
    m.leases.pool_waits(4);
    m.leases.pool_denied();
    m.leases.pool_denied();
    m.leases.tokens_dropped("r", 6);
    m.leases.live_nodes(3);
    m.declog.decision_log_written(10);
    m.declog.decision_log_dropped("agent", 2);
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
    ] {
        let got = value(&text, name, labels);
        assert!(close(got, want), "{name}{labels:?}: {got}, not {want}");
    }
}

#[test]
fn a_redis_node_counts_as_down_from_its_event_until_it_is_back() {
    let m = Fixture::new();
    m.leases.store_topology("node_down", None);
    m.leases.store_topology("node_down", None);
    m.leases.store_topology("slot_map_changed", None);
    m.leases
        .store_topology("node_up", Some(Duration::from_millis(1_500)));
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
fn store_redirects_count_by_kind_from_zero() {
    let m = Fixture::new();
    let redirects = |kind| {
        sample(
            &m.render().unwrap(),
            "meshlimit_store_redirects_total",
            &[("kind", kind)],
        )
    };
    assert_eq!(
        (redirects("moved"), redirects("ask")),
        (Some(0.0), Some(0.0))
    );
    m.leases.store_redirect("ask");
    m.leases.store_redirect("ask");
    m.leases.store_redirect("moved");
    assert_eq!(
        (redirects("moved"), redirects("ask")),
        (Some(1.0), Some(2.0))
    );
}

#[test]
fn refused_control_reads_count_by_record_and_reason_from_zero() {
    use meshlimit_store::control::{Record, Refusal};
    let m = Fixture::new();
    let refused = |record: &str, reason: &str| {
        let labels = [("record", record), ("reason", reason)];
        sample(
            &m.render().unwrap(),
            "meshlimit_control_refused_total",
            &labels,
        )
    };
    // Every series is there at 0 before any refusal (the alert reads it).
    assert_eq!(refused("audit", "parse"), Some(0.0));
    m.rules.control_refused(Record::Override, Refusal::Mac);
    m.rules.control_refused(Record::Override, Refusal::Mac);
    m.rules.control_refused(Record::Versions, Refusal::Size);
    assert_eq!(refused("override", "mac"), Some(2.0));
    assert_eq!(refused("versions", "size"), Some(1.0));
}
