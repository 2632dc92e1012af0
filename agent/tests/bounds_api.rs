//! What a caller can make the agent hold, in process (`App::handle`): keys are
//! bounded in length and metric labels from sync reports in size.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

mod common;

use std::sync::Arc;

use hyper::StatusCode;
use meshlimit_agent::metrics::sample;
use meshlimit_agent::store::MemoryStore;
use meshlimit_agent::{App, CurrentRules, LeaseSettings, Metrics};
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::*;
use meshlimit_core::DescriptorKey;

use common::*;

const PER_IP: &str = "version: 1
rules:
  - name: per-ip
    key: [client_ip]
    limit: { requests: 100, per: 1s }
";

fn per_ip_app() -> (App, Arc<MemoryStore>) {
    let current = Arc::new(CurrentRules::empty());
    current.install(Arc::new(parse_rules("rules.yaml", PER_IP).unwrap()));
    let store = Arc::new(MemoryStore::new());
    let app = App::new(
        current,
        store.clone(),
        Arc::new(Metrics::new("test").unwrap()),
        LeaseSettings::default(),
    );
    (app, store)
}

fn wire_item(key: String) -> LeaseItem {
    LeaseItem {
        rule: "per-ip".into(),
        key: DescriptorKey::from_wire(key),
        cost: 1,
        plan: None,
        want: None,
    }
}

#[tokio::test(start_paused = true)]
async fn keys_longer_than_the_cap_are_refused_before_anything_is_stored() {
    let (app, store) = per_ip_app();
    // The finding: 1,000 lease requests of 62 KB keys took the agent from 30 to
    // 154 MB. Each is now a 400, and nothing is kept.
    for i in 0..1_000 {
        let key = format!("per-ip|{i}-{}", "x".repeat(62_000));
        let reply = post(&app, LEASE_PATH, &lease_request(vec![wire_item(key)])).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
        assert!(
            reply.body.contains("invalid_field") && reply.body.contains("at most 1024"),
            "{}",
            reply.body
        );
    }
    assert_eq!(store.len(), 0);
    let text = metrics(&app).await;
    assert_eq!(
        sample(
            &text,
            "meshlimit_bad_requests_total",
            &[("reason", "invalid_field")]
        ),
        Some(1_000.0)
    );
    // A key of exactly the cap is a key like any other.
    let key = format!("per-ip|{}", "x".repeat(MAX_KEY_BYTES - "per-ip|".len()));
    assert_eq!(key.len(), MAX_KEY_BYTES);
    let answers = lease(&app, vec![wire_item(key)]).await;
    assert!(
        matches!(answers[..], [LeaseAnswer::Grant { .. }]),
        "{answers:?}"
    );
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn forged_versions_and_filter_ids_keep_metrics_small() {
    let app = app(Some(RULES));
    // The finding: 200 syncs with a 60 KB rules version made /metrics 12 MB.
    for i in 0..200 {
        let version = format!("{i}{}", "v".repeat(60_000));
        let filter = format!("envoy-{i}");
        sync(&app, &sync_request(&filter, Some(&version), &[])).await;
    }
    // And as many distinct 60 KB filter ids as a flood can send.
    for i in 0..1_500 {
        let filter = format!("{i}{}", "f".repeat(60_000));
        sync(&app, &sync_request(&filter, Some("v1"), &[])).await;
    }
    let text = metrics(&app).await;
    assert!(
        text.len() < 512 * 1024,
        "/metrics is {} bytes after the flood",
        text.len()
    );
    assert_eq!(
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", "envoy-7"), ("version", "invalid")]
        ),
        Some(1.0)
    );
    let filters = text
        .lines()
        .filter(|l| l.starts_with("meshlimit_filter_rules_version_info{"))
        .count();
    assert_eq!(filters, meshlimit_agent::metrics::MAX_FILTERS);
}
