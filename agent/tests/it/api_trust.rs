//! The filter API as an attacker on another pod meets it: without the node's
//! credentials nothing can be taken, reported or read, and what the node's own
//! filters send is validated so no single request can skew what others see.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;

use bytes::Bytes;
use common::*;
use hyper::StatusCode;
use meshlimit_agent::api::{
    Auth, EXPLAIN_PATH, HOT_PATH, MAX_FILTER_ID_BYTES, MAX_REQUEST_ID_BYTES,
};
use meshlimit_agent::decision_log::{DecisionLog, DecisionLogMetrics, RECENT_BYTES};
use meshlimit_agent::metrics::Registry;
use meshlimit_agent::{App, CurrentRules, LeaseSettings};
use meshlimit_core::rules::parse_rules;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::*;
use meshlimit_core::{DescriptorKey, Outcome};
use meshlimit_store::MemoryStore;

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
        2 * meshlimit_agent::reports::MAX_REPORTED_COUNT
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

/// Two rules: `ids` logs key ids only, `clear` opts in to keys in clear.
const LOGGED_RULES: &str = "version: 1
rules:
  - name: ids
    key: [{ header: x-api-key }]
    limit: { requests: 100, per: 1m }
  - name: clear
    key: [{ header: x-api-key }]
    limit: { requests: 100, per: 1m }
    log_key: clear
";

/// An agent with an operator token, whose decision log is `declog`.
fn operated_app(rules: &str, declog: Arc<DecisionLog>) -> App {
    let current = Arc::new(CurrentRules::empty());
    current.install(Arc::new(parse_rules("rules.yaml", rules).unwrap()));
    App::standalone_with_decision_log(
        current,
        Arc::new(MemoryStore::new()),
        LeaseSettings::default(),
        Auth::with_operator(&secret(), OPERATOR_TOKEN).unwrap(),
        declog,
    )
    .unwrap()
}

/// The key ids of the agents these tests build (their metrics are not given
/// the deployment's).
fn ids() -> KeyIds {
    KeyIds::placeholder()
}

fn in_memory_log() -> Arc<DecisionLog> {
    DecisionLog::in_memory(Arc::new(DecisionLogMetrics::new(&Registry::new()).unwrap()))
}

/// A record as a filter of this deployment writes it for `part` under `rule`.
fn decision(rule: &str, part: &str, decision: Outcome) -> DecisionRecord {
    let key = DescriptorKey::new(rule, [part]);
    DecisionRecord {
        at_ms: 1_796_133_723_123,
        rule: rule.into(),
        rules_version: "v".into(),
        decision,
        key_id: ids().id(&key).to_string(),
        key: Some(key.as_str().to_string()),
        source: DecisionSource::Store,
        tokens: Some(0),
        retry_after_ms: (decision == Outcome::Limited).then_some(900),
        sample_rate: 1.0,
        request_id: Some("req-1".into()),
    }
}

fn decisions(records: Vec<DecisionRecord>) -> DecisionsRequest {
    DecisionsRequest {
        v: WIRE_VERSION,
        filter_id: "sidecar~10.0.0.1~pod.ns~ns.svc.cluster.local/1".into(),
        records,
        dropped: 0,
    }
}

#[tokio::test]
async fn the_filters_token_opens_no_operator_view() {
    let app = operated_app(LOGGED_RULES, in_memory_log());
    let id = decision("ids", "victim", Outcome::Limited).key_id;
    let views = [
        format!("{EXPLAIN_PATH}?rule=ids&key_id={id}"),
        format!("{HOT_PATH}?rule=ids"),
    ];
    let (filters, operator) = (bearer(), operator_bearer());
    for view in &views {
        let as_filter = call_raw(
            &app,
            "GET",
            view,
            Bytes::new(),
            &[("authorization", &filters)],
        )
        .await;
        assert_eq!(
            as_filter.status,
            StatusCode::FORBIDDEN,
            "{view}: {}",
            as_filter.body
        );
        let anonymous = call_raw(&app, "GET", view, Bytes::new(), &[]).await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED, "{view}");
        let as_operator = call_raw(
            &app,
            "GET",
            view,
            Bytes::new(),
            &[("authorization", &operator)],
        )
        .await;
        assert_eq!(
            as_operator.status,
            StatusCode::OK,
            "{view}: {}",
            as_operator.body
        );
    }
    // Nor does the operator token open the filters' routes.
    let theft = serde_json::to_vec(&lease_request(vec![item("ids", "victim", 1)])).unwrap();
    let lease = call_raw(
        &app,
        "POST",
        LEASE_PATH,
        Bytes::from(theft),
        &[("authorization", &operator)],
    )
    .await;
    assert_eq!(lease.status, StatusCode::FORBIDDEN, "{}", lease.body);
    // An agent given no operator token serves the views to nobody.
    let closed = app_with_rules(LOGGED_RULES);
    for view in &views {
        for token in [&filters, &operator] {
            let r = call_raw(
                &closed,
                "GET",
                view,
                Bytes::new(),
                &[("authorization", token)],
            )
            .await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{view}: {}", r.body);
        }
    }
    // And no operator token may be one every namespace can derive.
    let s = secret();
    for shared in [
        s.agent_token(),
        common::SECRET.to_string(),
        "short".to_string(),
    ] {
        assert!(Auth::with_operator(&s, &shared).is_err(), "{shared}");
    }
}

fn app_with_rules(rules: &str) -> App {
    app(Some(rules))
}

#[tokio::test]
async fn a_forged_decision_record_is_refused_or_neutered() {
    let app = operated_app(LOGGED_RULES, in_memory_log());
    let good = decision("ids", "victim", Outcome::Limited);
    // What no filter sends: each refuses its whole batch.
    let forged: Vec<(&str, DecisionRecord)> = vec![
        (
            "key_id",
            DecisionRecord {
                key_id: "victim".into(),
                ..good.clone()
            },
        ),
        (
            "key",
            DecisionRecord {
                key: Some("ids|someone-else".into()),
                ..good.clone()
            },
        ),
        (
            "request_id",
            DecisionRecord {
                request_id: Some("r".repeat(129)),
                ..good.clone()
            },
        ),
        (
            "rules_version",
            DecisionRecord {
                rules_version: "v".repeat(65),
                ..good.clone()
            },
        ),
        (
            "decision",
            DecisionRecord {
                decision: Outcome::FailedOpen,
                ..good.clone()
            },
        ),
        (
            "decision",
            DecisionRecord {
                source: DecisionSource::ColdStart,
                ..good.clone()
            },
        ),
        (
            "decision",
            DecisionRecord {
                retry_after_ms: None,
                ..good.clone()
            },
        ),
        (
            "sample_rate",
            DecisionRecord {
                sample_rate: 1e-300,
                ..good.clone()
            },
        ),
        (
            "sample_rate",
            DecisionRecord {
                decision: Outcome::Allowed,
                retry_after_ms: None,
                sample_rate: 2.0,
                ..good.clone()
            },
        ),
    ];
    for (field, record) in forged {
        let reply = post(&app, DECISIONS_PATH, &decisions(vec![good.clone(), record])).await;
        assert_eq!(
            reply.status,
            StatusCode::BAD_REQUEST,
            "{field}: {}",
            reply.body
        );
        assert!(
            reply.body.contains(&format!("records[1].{field}")),
            "{}",
            reply.body
        );
    }
    let long_filter = DecisionsRequest {
        filter_id: "f".repeat(257),
        ..decisions(vec![good.clone()])
    };
    let reply = post(&app, DECISIONS_PATH, &long_filter).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.body);
    let too_many = decisions(vec![good.clone(); MAX_DECISION_RECORDS + 1]);
    assert_eq!(
        post(&app, DECISIONS_PATH, &too_many).await.status,
        StatusCode::BAD_REQUEST
    );
    // What a filter on other rules could send: kept harmless. The key in
    // clear of a rule that logs ids is dropped, a rule not in force is not
    // kept, a request id of control characters is left out.
    let unknown = DecisionRecord {
        rule: "gone".into(),
        ..decision("gone", "x", Outcome::Limited)
    };
    let odd_id = DecisionRecord {
        request_id: Some("a\u{1b}[2J".into()),
        ..good.clone()
    };
    let reply = post(
        &app,
        DECISIONS_PATH,
        &decisions(vec![good.clone(), unknown, odd_id]),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(reply.body.contains(r#""refused":1"#), "{}", reply.body);
    let view = format!("{EXPLAIN_PATH}?rule=ids&key_id={}", good.key_id);
    let seen = call(
        &app,
        "GET",
        &view,
        Bytes::new(),
        &[("authorization", &operator_bearer())],
    )
    .await;
    let seen: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
    let recent = seen["recent"].as_array().unwrap();
    assert_eq!(recent.len(), 2, "{seen}");
    assert!(recent.iter().all(|r| r.get("key").is_none()), "{seen}");
    assert!(recent[0].get("request_id").is_none(), "{seen}");
    assert!(!seen.to_string().contains("victim"), "{seen}");
    // Nothing counted any forged record: only the two kept.
    let hot = call(
        &app,
        "GET",
        &format!("{HOT_PATH}?rule=ids"),
        Bytes::new(),
        &[("authorization", &operator_bearer())],
    )
    .await;
    assert!(hot.body.contains(r#""rejections":2"#), "{}", hot.body);
    // A rule that opts in keeps its key in clear.
    let clear = decision("clear", "customer-7", Outcome::Limited);
    assert_eq!(
        post(&app, DECISIONS_PATH, &decisions(vec![clear.clone()]))
            .await
            .status,
        StatusCode::OK
    );
    let view = format!("{EXPLAIN_PATH}?rule=clear&key_id={}", clear.key_id);
    let seen = call(
        &app,
        "GET",
        &view,
        Bytes::new(),
        &[("authorization", &operator_bearer())],
    )
    .await;
    assert!(seen.body.contains("customer-7"), "{}", seen.body);
}

#[tokio::test]
async fn a_flood_of_maximal_records_stays_within_the_stated_bounds() {
    let declog = in_memory_log();
    let app = operated_app(LOGGED_RULES, declog.clone());
    // Every field at its bound, on the rule that keeps keys in clear.
    let key = DescriptorKey::from_wire(format!("clear|{}", "k".repeat(MAX_KEY_BYTES - 6)));
    let maximal = DecisionRecord {
        rules_version: "v".repeat(MAX_VERSION_LABEL),
        key_id: ids().id(&key).to_string(),
        key: Some(key.as_str().to_string()),
        request_id: Some("q".repeat(MAX_REQUEST_ID_BYTES)),
        ..decision("clear", "x", Outcome::Limited)
    };
    let batch = DecisionsRequest {
        filter_id: "f".repeat(MAX_FILTER_ID_BYTES),
        // As many as the body cap lets through.
        ..decisions(vec![maximal; 40])
    };
    for _ in 0..200 {
        let reply = post(&app, DECISIONS_PATH, &batch).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    let held = declog.held_bytes();
    assert!(held.recent <= RECENT_BYTES, "{held:?}");
}
