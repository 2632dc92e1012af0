use std::rc::Rc;

use meshlimit_core::rules::RulesConfig;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::{AnsweredFrom, DecisionSource, LeaseAnswer, MAX_DECISION_RECORDS};
use meshlimit_core::{DescriptorKey, Outcome, RequestInfo, RuleSet};

use super::*;
use crate::config::FilterConfig;
use crate::testing::MemoryHost;

fn rules(log: serde_json::Value) -> Rc<RuleSet> {
    let mut rule = serde_json::json!({"name": "per-key", "key": [{"header": "x-api-key"}],
        "limit": {"requests": 1000, "per": "1s"}});
    if let (Some(r), Some(extra)) = (rule.as_object_mut(), log.as_object()) {
        r.extend(extra.clone());
    }
    let config: RulesConfig =
        serde_json::from_value(serde_json::json!({"version": 1, "rules": [rule]})).unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

fn req(key: &str) -> RequestInfo {
    RequestInfo::new(
        "/x",
        "GET",
        vec![("x-api-key".to_string(), key.to_string())],
    )
}

/// One request decided by the agent's answer.
fn answered(rs: &Rc<RuleSet>, host: &MemoryHost, answer: LeaseAnswer) -> Evaluation {
    let cfg = FilterConfig::default();
    let mut e = Evaluation::new(Rc::clone(rs), &req("customer-42"), &cfg)
        .unwrap()
        .unwrap();
    e.local_pass(host, &cfg);
    e.apply_answers(host, &cfg, vec![answer]);
    e
}

fn deny() -> LeaseAnswer {
    LeaseAnswer::Deny {
        retry_after_ms: 1500,
        local: false,
        from: Some(AnsweredFrom::Store),
    }
}

#[test]
fn a_rejection_is_recorded_with_its_source_key_id_and_request_id_never_the_key() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({"log_sample": 0.0}));
    let e = answered(&rs, &host, deny());
    let ids = KeyIds::placeholder();
    let mut log = DecisionLog::default();
    log.record(&ids, &e, None, Some("req-1"), 5_000_000_000);
    let batch = log.take_batch("node/vm1").unwrap();
    assert_eq!(batch.records.len(), 1);
    let r = &batch.records[0];
    assert_eq!(r.decision, Outcome::Limited);
    assert_eq!(r.source, DecisionSource::Store);
    assert_eq!(r.rule, "per-key");
    assert_eq!(r.rules_version, rs.version());
    assert_eq!(r.retry_after_ms, Some(1500));
    assert_eq!(r.request_id.as_deref(), Some("req-1"));
    assert_eq!(r.at_ms, 5_000);
    assert_eq!(
        r.key_id,
        ids.id(&DescriptorKey::new("per-key", ["customer-42"]))
            .to_string()
    );
    assert_eq!(r.key, None);
    let text = serde_json::to_string(&batch).unwrap();
    assert!(!text.contains("customer-42"), "{text}");

    // The next request meets the cached denial: recorded as such.
    let cfg = FilterConfig::default();
    let mut e = Evaluation::new(Rc::clone(&rs), &req("customer-42"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg));
    log.record(&ids, &e, None, None, 0);
    let batch = log.take_batch("node/vm1").unwrap();
    assert_eq!(batch.records[0].source, DecisionSource::DenialCache);
    assert_eq!(batch.records[0].request_id, None);
}

#[test]
fn the_key_is_in_clear_only_where_the_rule_opts_in() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({"log_key": "clear"}));
    let e = answered(&rs, &host, deny());
    let mut log = DecisionLog::default();
    log.record(&KeyIds::placeholder(), &e, None, None, 0);
    let batch = log.take_batch("f").unwrap();
    assert_eq!(
        batch.records[0].key.as_deref(),
        Some(DescriptorKey::new("per-key", ["customer-42"]).as_str())
    );
}

#[test]
fn allowed_decisions_are_kept_at_the_rules_sample_rate() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = rules(serde_json::json!({"log_sample": 0.1}));
    let grant = LeaseAnswer::Grant {
        tokens: 1_000,
        ttl_ms: 60_000,
        remaining: 0,
        reset_ms: 0,
        local: false,
        from: Some(AnsweredFrom::Pool),
    };
    let first = answered(&rs, &host, grant.clone());
    let mut log = DecisionLog::default();
    let ids = KeyIds::placeholder();
    let mut kept = 0;
    let n = 20_000;
    let mut sources = Vec::new();
    log.record(&ids, &first, None, None, 1);
    for i in 1..n {
        let mut e = Evaluation::new(Rc::clone(&rs), &req("customer-42"), &cfg)
            .unwrap()
            .unwrap();
        if e.local_pass(&host, &cfg) {
            e.apply_answers(&host, &cfg, vec![grant.clone()]);
        }
        log.record(&ids, &e, None, None, 1 + i);
        while let Some(b) = log.take_batch("f") {
            kept += b.records.len();
            sources.extend(b.records.iter().map(|r| (r.source, r.sample_rate)));
        }
    }
    // Binomial(20,000, 0.1): mean 2,000, sigma 42; 4 sigma either side.
    assert!((1_830..=2_170).contains(&kept), "{kept} of {n} kept");
    assert!(sources.iter().all(|(_, rate)| *rate == 0.1));
    assert!(sources
        .iter()
        .any(|(s, _)| *s == DecisionSource::FilterLease));
}

#[test]
fn a_full_buffer_drops_and_counts_and_batches_stay_bounded() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({}));
    let e = answered(&rs, &host, deny());
    let mut log = DecisionLog::default();
    let ids = KeyIds::placeholder();
    for _ in 0..BUFFER_RECORDS + 10 {
        log.record(&ids, &e, None, Some("r"), 0);
    }
    assert_eq!(log.len(), BUFFER_RECORDS);
    assert_eq!(log.take_uncounted(), 10);
    assert_eq!(log.take_uncounted(), 0);
    let first = log.take_batch("f").unwrap();
    assert_eq!(first.dropped, 10);
    let mut sent = first.records.len();
    while let Some(b) = log.take_batch("f") {
        // Each batch within the record count and the agent's body cap.
        assert!((1..=MAX_DECISION_RECORDS).contains(&b.records.len()));
        assert!(serde_json::to_vec(&b).unwrap().len() <= MAX_BODY_BYTES / 2);
        assert_eq!(b.dropped, 0);
        sent += b.records.len();
    }
    assert_eq!(sent, BUFFER_RECORDS);
    log.lost(3);
    assert_eq!(log.take_uncounted(), 3);
    assert_eq!(log.take_batch("f").unwrap().dropped, 3);
}
