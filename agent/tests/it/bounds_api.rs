//! What a caller can make the agent hold, in process (`App::handle`): keys are
//! bounded in length, per-key tables in number and swept on a schedule, and
//! metric labels from sync reports in size.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use meshlimit_agent::{App, CurrentRules, LeaseSettings};
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::*;
use meshlimit_core::DescriptorKey;
use meshlimit_store::MemoryStore;
use meshlimit_tests::sample;

use common::*;

const PER_IP: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/per-ip.yaml"
));

fn bounded_app(max_keys: usize) -> (App, Arc<MemoryStore>) {
    let current = Arc::new(CurrentRules::empty());
    current.install(Arc::new(parse_rules("rules.yaml", PER_IP).unwrap()));
    let store = Arc::new(MemoryStore::with_max_keys(max_keys));
    let app = App::standalone(
        current,
        store.clone(),
        LeaseSettings {
            max_keys,
            ..LeaseSettings::default()
        },
        meshlimit_agent::api::Auth::new(&secret()),
    )
    .unwrap();
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
    let (app, store) = bounded_app(100_000);
    // 1,000 lease requests of 62 KB keys would make the agent hold 62 MB of
    // keys if it kept them. Each item is refused alone, and nothing is kept.
    for i in 0..1_000 {
        let key = format!("per-ip|{i}-{}", "x".repeat(62_000));
        let answers = lease(&app, vec![wire_item(key)]).await;
        assert_eq!(
            answers,
            [LeaseAnswer::Unavailable {
                reason: "key_too_long".into()
            }]
        );
    }
    assert_eq!(store.len(), 0);
    assert_eq!(app.pooled_keys(), 0);
    let text = metrics(&app).await;
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "key_too_long")]
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

#[tokio::test(start_paused = true)]
async fn a_flood_of_keys_stays_within_max_keys_and_is_swept_on_schedule() {
    let (app, store) = bounded_app(1_000);
    let (trigger, shutdown) = meshlimit_agent::shutdown::channel();
    let sweeper = tokio::spawn(meshlimit_agent::run::sweep_pools(
        app.clone(),
        meshlimit_agent::run::POOL_SWEEP_EVERY,
        shutdown,
    ));
    // 5,000 client IPs, a request each, all within the same instant.
    let mut refused = 0;
    for i in 0..5_000u32 {
        let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff);
        match lease(&app, vec![item("per-ip", &ip, 1)]).await[..] {
            [LeaseAnswer::Grant { local: false, .. }] => {}
            // At the store's cap: the rule's failure policy (fail-local here).
            [LeaseAnswer::Grant { local: true, .. }] | [LeaseAnswer::Deny { local: true, .. }] => {
                refused += 1
            }
            ref other => panic!("unexpected {other:?}"),
        }
    }
    // Per shard caps: at most max_keys + 15 in each table.
    assert!(store.len() <= 1_015, "store holds {}", store.len());
    assert!(
        app.pooled_keys() <= 1_015,
        "pool holds {}",
        app.pooled_keys()
    );
    assert!(refused >= 3_900, "only {refused} keys found the store full");
    let text = metrics(&app).await;
    let errors = sample(
        &text,
        "meshlimit_store_requests_total",
        &[("result", "error")],
    );
    assert_eq!(errors, Some(f64::from(refused)), "counted as store errors");
    // Nobody asks again: within a few seconds the pool's entries are swept
    // (without any new key pushing them out) and the buckets, full again, too.
    // `run` sweeps the store every 5 s (its own unit test checks the
    // schedule); here the test sweeps it until the buckets have refilled.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let mut swept = 0;
    while app.pooled_keys() > 0 || !store.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "after 10 s the pool holds {} keys and the store {}",
            app.pooled_keys(),
            store.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        swept += store.sweep();
    }
    assert!(swept > 0, "the store's buckets are forgotten by its sweep");
    trigger.trigger();
    sweeper.await.unwrap();
}

#[tokio::test]
async fn forged_versions_and_filter_ids_keep_metrics_small() {
    let app = app(Some(RULES));
    // 200 syncs with a 60 KB rules version each would put 12 MB of labels in
    // /metrics if every version were shown.
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
    assert_eq!(filters, meshlimit_agent::reports::MAX_FILTERS);
}
