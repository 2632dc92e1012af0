//! The filter API as an attacker on another pod meets it: without the node's
//! credentials nothing can be taken, reported or read, and what the node's own
//! filters send is validated so no single request can skew what others see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use bytes::Bytes;
use common::*;
use hyper::StatusCode;
use meshlimit_core::wire::*;
use meshlimit_core::Outcome;

const VICTIM_RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/exact-per-customer.yaml"
));

#[tokio::test]
async fn without_credentials_nothing_is_taken_reported_or_read() {
    let app = app(Some(VICTIM_RULES));
    // The attack: a lease of the victim's whole burst.
    let theft = serde_json::to_vec(&lease_request(vec![item("customer", "victim", 100)])).unwrap();
    let forged_sync = serde_json::to_vec(&sync_request(
        "attacker",
        Some("fake"),
        &[("customer", Outcome::FailedOpen, 1_000_000)],
    ))
    .unwrap();
    let wrong = format!("Bearer {}", "0".repeat(64));
    for (method, path, body) in [
        ("POST", LEASE_PATH, theft.clone()),
        ("POST", SYNC_PATH, forged_sync.clone()),
        ("GET", RULES_PATH, Vec::new()),
    ] {
        let none = call_raw(&app, method, path, Bytes::from(body.clone()), &[]).await;
        assert_eq!(
            none.status,
            StatusCode::UNAUTHORIZED,
            "{path}: {}",
            none.body
        );
        let bad = call_raw(
            &app,
            method,
            path,
            Bytes::from(body),
            &[("authorization", &wrong)],
        )
        .await;
        assert_eq!(bad.status, StatusCode::FORBIDDEN, "{path}: {}", bad.body);
        assert!(
            !bad.body.contains("customer"),
            "{path} leaked rules: {}",
            bad.body
        );
    }
    // Nothing changed: the victim's next lease is granted in full, no decision
    // was counted and the fail-open ratio is untouched.
    let answers = lease(&app, vec![item("customer", "victim", 1)]).await;
    assert!(
        matches!(answers[..], [LeaseAnswer::Grant { remaining: 99, .. }]),
        "{answers:?}"
    );
    let text = metrics(&app).await;
    assert!(!text.contains("meshlimit_decisions_total{"), "{text}");
    assert!(
        text.contains("meshlimit_fail_open_ratio{rule=\"customer\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("meshlimit_bad_requests_total{reason=\"unauthorized\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("meshlimit_bad_requests_total{reason=\"forbidden\"} 3"),
        "{text}"
    );
    // The probes and /metrics need no credentials.
    for path in ["/metrics", "/healthz", "/readyz"] {
        let open = call_raw(&app, "GET", path, Bytes::new(), &[]).await;
        assert_eq!(open.status, StatusCode::OK, "{path}");
    }
}

#[tokio::test]
async fn a_lease_costs_what_its_rule_says() {
    let app = app(Some(VICTIM_RULES));
    let reply = post(
        &app,
        LEASE_PATH,
        &lease_request(vec![item("customer", "victim", 100)]),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let refused: LeaseResponse = serde_json::from_str(&reply.body).unwrap();
    assert_eq!(
        refused.items,
        [LeaseAnswer::Unavailable {
            reason: "invalid_cost".into()
        }]
    );
    let answers = lease(&app, vec![item("customer", "victim", 1)]).await;
    assert!(
        matches!(answers[..], [LeaseAnswer::Grant { remaining: 99, .. }]),
        "{answers:?}"
    );
}

#[tokio::test]
async fn one_report_can_neither_wrap_a_counter_nor_bury_a_ratio() {
    let app = app(Some(VICTIM_RULES));
    sync(
        &app,
        &sync_request("f", None, &[("customer", Outcome::FailedOpen, 1_000)]),
    )
    .await;
    sync(
        &app,
        &sync_request("f", None, &[("customer", Outcome::Allowed, u64::MAX)]),
    )
    .await;
    sync(
        &app,
        &sync_request("f", None, &[("customer", Outcome::Allowed, u64::MAX)]),
    )
    .await;
    let text = metrics(&app).await;
    // Two u64::MAX reports would wrap the counter to a small number; each is
    // capped at MAX_REPORTED_COUNT instead.
    let allowed = format!(
        "meshlimit_decisions_total{{outcome=\"allowed\",rule=\"customer\"}} {}",
        2 * meshlimit_agent::metrics::MAX_REPORTED_COUNT
    );
    assert!(text.contains(&allowed), "{text}");
    // 1,000 failed open of 2e8 + 1,000: the ratio is small but not hidden at 5e-14.
    let ratio: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("meshlimit_fail_open_ratio{rule=\"customer\"} "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(ratio > 1e-6, "{ratio}");
}

#[tokio::test]
async fn the_most_rejected_keys_are_named_by_id_never_in_clear() {
    let app = app(Some(include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/one-per-hour-per-api-key.yaml"
    ))));
    let secret_key = "sk_live_do_not_leak";
    for _ in 0..3 {
        lease(&app, vec![item("tiny", secret_key, 1)]).await;
    }
    let text = metrics(&app).await;
    assert!(text.contains("meshlimit_top_rejected_keys"), "{text}");
    assert!(!text.contains(secret_key), "{text}");
}
