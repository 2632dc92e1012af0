//! `POST /v1/lease` in process (`App::handle`, no socket), and how every endpoint
//! refuses bad requests. Time is tokio's paused clock wherever refill matters.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use meshlimit_core::wire::*;
use meshlimit_core::DescriptorKey;
use meshlimit_tests::sample;

use common::*;

#[tokio::test(start_paused = true)]
async fn an_exact_rule_grants_its_burst_one_by_one_then_denies_with_the_retry_time() {
    let app = app(Some(RULES));
    let mut grants = 0;
    for i in 0..30 {
        match lease(&app, vec![item("login", "10.0.0.1", 1)]).await[..] {
            [LeaseAnswer::Grant {
                tokens,
                ttl_ms,
                remaining,
                ..
            }] => {
                assert_eq!((tokens, ttl_ms), (1, 300));
                assert_eq!(remaining, 9 - i);
                grants += 1;
            }
            // 10 per minute: one token every 6 s.
            [LeaseAnswer::Deny {
                retry_after_ms,
                local: false,
                from: Some(AnsweredFrom::Store),
            }] => assert_eq!(retry_after_ms, 6_000),
            ref other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(grants, 10);
    let text = metrics(&app).await;
    let login = [("rule", "login")];
    assert_eq!(
        sample(&text, "meshlimit_leases_granted_total", &login),
        Some(10.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_lease_tokens_granted_total", &login),
        Some(10.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_lease_denials_total", &login),
        Some(20.0)
    );
    // The most rejected key, by its keyed-hash id (never in clear).
    let id = meshlimit_core::secret::KeyIds::placeholder()
        .id(&meshlimit_core::DescriptorKey::new("login", ["10.0.0.1"]))
        .to_string();
    let top = [("rank", "1"), ("rule", "login"), ("key", id.as_str())];
    assert_eq!(
        sample(&text, "meshlimit_top_rejected_keys", &top),
        Some(20.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_store_requests_total", &[("result", "ok")]),
        Some(30.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_store_latency_seconds_count", &[]),
        Some(30.0)
    );
    // Decisions come from the filters' reports only, never from leases.
    assert_eq!(sample(&text, "meshlimit_decisions_total", &[]), None);
    // 6 s later one token is back.
    tokio::time::advance(Duration::from_secs(6)).await;
    assert!(matches!(
        lease(&app, vec![item("login", "10.0.0.1", 1)]).await[0],
        LeaseAnswer::Grant { tokens: 1, .. }
    ));
}

/// The tokens of a single grant, or a panic naming what came instead.
async fn granted(app: &meshlimit_agent::api::App) -> u32 {
    granted_wanting(app, None).await
}

/// Tokens granted to one ask that says it will spend `want`.
async fn granted_wanting(app: &meshlimit_agent::api::App, want: Option<u32>) -> u32 {
    let mut ask = item("search", "GET", 1);
    ask.want = want;
    match lease(app, vec![ask]).await[..] {
        [LeaseAnswer::Grant { tokens, .. }] => tokens,
        ref other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_fast_rule_gets_leases_sized_by_the_nodes_demand() {
    let app = app(Some(RULES));
    // A cold key starts at one token: every request is checked in the store.
    assert_eq!(granted(&app).await, 1);
    // The node then spends 500 tokens a second (half what the rule allows),
    // its filter asking for 40 at a time (what it says it spends): each lease
    // is spent before the next ask. Within a few seconds a store lease is 100
    // ms of that demand (50 tokens, up to twice that), so the filter gets its
    // 40 from the pool, and most asks never reach the store.
    let mut late = Vec::new();
    for i in 0..3_000 {
        let last = granted_wanting(&app, Some(40)).await;
        tokio::time::advance(Duration::from_millis(2 * u64::from(last))).await;
        if i >= 2_500 {
            late.push(last);
        }
    }
    let mean = f64::from(late.iter().sum::<u32>()) / late.len() as f64;
    assert!(late.iter().all(|&t| t <= 40), "never more than it wants");
    assert!(mean >= 30.0, "mean grant {mean} of the 40 wanted");
    let text = metrics(&app).await;
    let store_calls = sample(&text, "meshlimit_store_requests_total", &[]).unwrap();
    let asks = sample(&text, "meshlimit_leases_granted_total", &[]).unwrap();
    // Asks served from the node pool never reach the store.
    assert!(
        store_calls < asks * 0.6,
        "{store_calls} store calls for {asks} asks"
    );
}

#[tokio::test(start_paused = true)]
async fn unknown_rules_are_unavailable_and_answers_keep_their_order() {
    let app = app(Some(RULES));
    let answers = lease(&app, vec![item("nope", "x", 1), item("search", "GET", 1)]).await;
    assert_eq!(
        answers[0],
        LeaseAnswer::Unavailable {
            reason: "unknown_rule".into()
        }
    );
    assert!(matches!(answers[1], LeaseAnswer::Grant { .. }));
    let text = metrics(&app).await;
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "unknown_rule")]
        ),
        Some(1.0)
    );

    let no_rules = self::app(None);
    let answers = lease(&no_rules, vec![item("search", "GET", 1)]).await;
    assert_eq!(
        answers[0],
        LeaseAnswer::Unavailable {
            reason: "no_rules".into()
        }
    );
}

#[tokio::test]
async fn bad_requests_get_their_status_and_are_counted() {
    let app = app(Some(RULES));
    let wrong_v = serde_json::to_vec(&LeaseRequest {
        v: 2,
        ..lease_request(vec![])
    })
    .unwrap();
    let too_many = lease_request(
        (0..=MAX_LEASE_ITEMS)
            .map(|i| item("search", &i.to_string(), 1))
            .collect(),
    );
    let cases: Vec<(&str, &str, Bytes, StatusCode, &str)> = vec![
        (
            "POST",
            LEASE_PATH,
            Bytes::from_static(b"{not json"),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "POST",
            LEASE_PATH,
            wrong_v.into(),
            StatusCode::BAD_REQUEST,
            "wrong_version",
        ),
        (
            "POST",
            LEASE_PATH,
            vec![b' '; MAX_BODY_BYTES + 1].into(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
        ),
        (
            "POST",
            LEASE_PATH,
            serde_json::to_vec(&too_many).unwrap().into(),
            StatusCode::BAD_REQUEST,
            "too_many_items",
        ),
        (
            "GET",
            LEASE_PATH,
            Bytes::new(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
        (
            "POST",
            SYNC_PATH,
            Bytes::from_static(b"[]"),
            StatusCode::BAD_REQUEST,
            "malformed_json",
        ),
        (
            "GET",
            "/v2/nothing",
            Bytes::new(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ];
    for (method, path, body, status, code) in cases {
        let reply = call(&app, method, path, body, &[]).await;
        assert_eq!(reply.status, status, "{method} {path}: {}", reply.body);
        let error: ErrorBody = serde_json::from_str(&reply.body).unwrap();
        assert_eq!(error.error, code, "{}", error.detail);
    }
    let get = call(&app, "GET", LEASE_PATH, Bytes::new(), &[]).await;
    assert_eq!(get.headers["allow"], "POST");
    // A declared length over the cap is refused without reading the body.
    let declared = call(
        &app,
        "POST",
        LEASE_PATH,
        Bytes::from_static(b"{}"),
        &[("content-length", "1000000")],
    )
    .await;
    assert_eq!(declared.status, StatusCode::PAYLOAD_TOO_LARGE);
    let text = metrics(&app).await;
    let bad = |reason| sample(&text, "meshlimit_bad_requests_total", &[("reason", reason)]);
    assert_eq!(bad("malformed_json"), Some(2.0));
    assert_eq!(bad("body_too_large"), Some(2.0));
    assert_eq!(bad("method_not_allowed"), Some(2.0));
}

/// One bad item never decides the requests batched with it: it is answered
/// `unavailable` on its own, the call's others are leased.
#[tokio::test]
async fn a_bad_item_is_refused_alone_and_its_neighbours_are_leased() {
    let app = app(Some(RULES));
    let mut foreign_key = item("search", "GET", 1);
    foreign_key.key = DescriptorKey::new("login", ["10.0.0.1"]);
    let mut too_long = item("search", "GET", 1);
    too_long.key = DescriptorKey::from_wire(format!("search|{}", "x".repeat(MAX_KEY_BYTES)));
    let items = vec![
        item("search", "GET", 1),
        item("search", "GET", 0),
        foreign_key,
        item("login", "10.0.0.2", 1),
        too_long,
        item("login", "10.0.0.3", 7),
        item("search", "POST", 1),
    ];
    let answers = lease(&app, items).await;
    let reasons: Vec<Option<&str>> = answers
        .iter()
        .map(|a| match a {
            LeaseAnswer::Unavailable { reason } => Some(reason.as_str()),
            LeaseAnswer::Grant { .. } => None,
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        reasons,
        [
            None,
            Some("invalid_cost"),
            Some("key_of_another_rule"),
            None,
            Some("key_too_long"),
            Some("invalid_cost"),
            None
        ]
    );
    let text = metrics(&app).await;
    let refused = |reason| {
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", reason)],
        )
    };
    assert_eq!(refused("invalid_cost"), Some(2.0));
    assert_eq!(refused("key_of_another_rule"), Some(1.0));
    assert_eq!(refused("key_too_long"), Some(1.0));
}
