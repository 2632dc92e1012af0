//! `POST /v1/sync`, `GET /v1/rules` and the probes in process (`App::handle`, no
//! socket). Time is tokio's paused clock where the fail-open window matters.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use bytes::Bytes;
use hyper::StatusCode;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::*;
use meshlimit_core::Outcome;
use meshlimit_tests::sample;

use common::*;

#[tokio::test]
async fn sync_sends_rules_only_on_a_version_mismatch_and_counts_decisions() {
    let app = app(Some(RULES));
    let first = sync(&app, &sync_request("node-1/vm-0", None, &[])).await;
    assert!(first.rules.is_some(), "a filter without rules gets them");
    let version = first.version.clone();
    assert_eq!(version, parse_rules("x", RULES).unwrap().version());

    let counts = [
        ("search", Outcome::Allowed, 7),
        ("search", Outcome::Limited, 2),
        ("gone", Outcome::Allowed, 4),
    ];
    let second = sync(&app, &sync_request("node-1/vm-0", Some(&version), &counts)).await;
    assert_eq!(
        (second.version.as_str(), second.rules),
        (version.as_str(), None)
    );
    let stale = sync(
        &app,
        &sync_request(
            "node-1/vm-1",
            Some("old"),
            &[("search", Outcome::Allowed, 1)],
        ),
    )
    .await;
    assert!(stale.rules.is_some());

    let text = metrics(&app).await;
    let decisions = |rule, outcome| {
        sample(
            &text,
            "meshlimit_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    };
    assert_eq!(decisions("search", "allowed"), Some(8.0));
    assert_eq!(decisions("search", "limited"), Some(2.0));
    assert_eq!(decisions("other", "allowed"), Some(4.0));
    assert_eq!(
        sample(&text, "meshlimit_filter_syncs_total", &[]),
        Some(3.0)
    );
    let filter_version = |filter, v| {
        sample(
            &text,
            "meshlimit_filter_rules_version_info",
            &[("filter", filter), ("version", v)],
        )
    };
    assert_eq!(filter_version("node-1/vm-0", &version), Some(1.0));
    assert_eq!(filter_version("node-1/vm-1", "old"), Some(1.0));
}

#[tokio::test(start_paused = true)]
async fn the_fail_open_ratio_covers_the_last_sixty_seconds() {
    let app = app(Some(RULES));
    let ratio = |text: &str, rule| sample(text, "meshlimit_fail_open_ratio", &[("rule", rule)]);
    assert_eq!(
        ratio(&metrics(&app).await, "search"),
        Some(0.0),
        "0 without decisions"
    );

    sync(
        &app,
        &sync_request(
            "f",
            None,
            &[
                ("search", Outcome::FailedOpen, 3),
                ("search", Outcome::Allowed, 1),
            ],
        ),
    )
    .await;
    assert_eq!(ratio(&metrics(&app).await, "search"), Some(0.75));

    tokio::time::advance(Duration::from_secs(30)).await;
    sync(
        &app,
        &sync_request("f", None, &[("search", Outcome::Allowed, 4)]),
    )
    .await;
    assert_eq!(ratio(&metrics(&app).await, "search"), Some(3.0 / 8.0));

    tokio::time::advance(Duration::from_secs(31)).await;
    let text = metrics(&app).await;
    assert_eq!(
        ratio(&text, "search"),
        Some(0.0),
        "the failed-open second has left the window"
    );
    assert_eq!(ratio(&text, "login"), Some(0.0));

    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(ratio(&metrics(&app).await, "search"), Some(0.0));
}

#[tokio::test]
async fn rules_carry_an_etag_and_answer_304_when_unchanged() {
    let app = app(Some(RULES));
    let reply = get(&app, RULES_PATH).await;
    assert_eq!(reply.status, StatusCode::OK);
    let body: SyncResponse = serde_json::from_str(&reply.body).unwrap();
    let etag = reply.headers["etag"].to_str().unwrap().to_string();
    assert_eq!(etag, format!("\"{}\"", body.version));
    assert_eq!(body.rules.unwrap().rules.len(), 2);

    let same = call(
        &app,
        "GET",
        RULES_PATH,
        Bytes::new(),
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(same.status, StatusCode::NOT_MODIFIED);
    assert_eq!(same.headers["etag"].to_str().unwrap(), etag);
    assert!(same.body.is_empty());
    let other = call(
        &app,
        "GET",
        RULES_PATH,
        Bytes::new(),
        &[("if-none-match", "\"0000\"")],
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);

    let empty = self::app(None);
    assert_eq!(
        get(&empty, RULES_PATH).await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn a_filter_that_fetches_its_rules_gets_them_as_lines_not_in_the_sync() {
    let app = app(Some(RULES));
    let mut request = sync_request("node-1/vm-0", None, &[]);
    request.fetches_rules = true;
    let answer = sync(&app, &request).await;
    assert_eq!(answer.rules, None, "only the version");
    assert_eq!(answer.version, parse_rules("x", RULES).unwrap().version());

    let reply = call(
        &app,
        "GET",
        RULES_PATH,
        Bytes::new(),
        &[("accept", "application/jsonl")],
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.headers["content-type"], "application/jsonl");
    assert_eq!(
        reply.headers["etag"].to_str().unwrap(),
        format!("\"{}\"", answer.version)
    );
    let (set, _) =
        meshlimit_core::rules::lines::RulesLoad::run(reply.body.clone().into_bytes()).unwrap();
    assert_eq!(set.version(), answer.version);
    let names =
        |s: &meshlimit_core::RuleSet| s.rules().iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&set), names(&parse_rules("x", RULES).unwrap()));
}

#[tokio::test]
async fn ready_only_with_rules() {
    let empty = app(None);
    assert_eq!(get(&empty, "/healthz").await.status, StatusCode::OK);
    let not_ready = get(&empty, "/readyz").await;
    assert_eq!(not_ready.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        not_ready
            .body
            .starts_with("not ready: no valid rules loaded"),
        "{}",
        not_ready.body
    );
    assert_eq!(not_ready.body.trim_end().lines().count(), 1);

    let ready = app(Some(RULES));
    assert_eq!(get(&ready, "/readyz").await.status, StatusCode::OK);
}
