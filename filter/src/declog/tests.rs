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
    log.record(&ids, &e, None, || Some("req-1"), 5_000_000_000);
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
    log.record(&ids, &e, None, || None, 0);
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
    log.record(&KeyIds::placeholder(), &e, None, || None, 0);
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
        next_ask_ms: None,
    };
    let first = answered(&rs, &host, grant.clone());
    let mut log = DecisionLog::default();
    let ids = KeyIds::placeholder();
    let mut kept = 0;
    let n = 20_000;
    let mut sources = Vec::new();
    log.record(&ids, &first, None, || None, 1);
    for i in 1..n {
        let mut e = Evaluation::new(Rc::clone(&rs), &req("customer-42"), &cfg)
            .unwrap()
            .unwrap();
        if e.local_pass(&host, &cfg) {
            e.apply_answers(&host, &cfg, vec![grant.clone()]);
        }
        log.record(&ids, &e, None, || None, 1 + i);
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
        log.record(&ids, &e, None, || Some("r"), 0);
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

#[test]
fn the_sampler_draws_splitmix64_seeded_from_the_first_samples_time() {
    // The log's sampler is core's SplitMix64, seeded once with the time (odd).
    let mut log = DecisionLog::default();
    log.sampled(0.5, 1_234_567);
    assert_eq!(log.rng, 1_234_567u64.wrapping_add(0x9e37_79b9_7f4a_7c15));
    log.sampled(0.5, 99);
    assert_eq!(
        log.rng,
        1_234_567u64.wrapping_add(0x9e37_79b9_7f4a_7c15_u64.wrapping_mul(2))
    );
}

#[test]
fn a_failed_open_decision_carries_no_tokens_and_an_allowed_one_its_remaining() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({"log_sample": 1.0, "on_failure": "open"}));
    let cfg = FilterConfig::default();
    let mut failed = Evaluation::new(Rc::clone(&rs), &req("customer-42"), &cfg)
        .unwrap()
        .unwrap();
    failed.local_pass(&host, &cfg);
    failed.fail_misses(&host, &cfg);
    let granted = answered(
        &rs,
        &host,
        LeaseAnswer::Grant {
            tokens: 5,
            ttl_ms: 300,
            remaining: 40,
            reset_ms: 100,
            local: false,
            from: Some(AnsweredFrom::Store),
            next_ask_ms: None,
        },
    );
    let mut log = DecisionLog::default();
    let ids = KeyIds::placeholder();
    log.record(&ids, &failed, None, || None, 0);
    log.record(&ids, &granted, None, || None, 0);
    let batch = log.take_batch("f").unwrap();
    let seen: Vec<_> = batch
        .records
        .iter()
        .map(|r| (r.decision, r.tokens))
        .collect();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0], (Outcome::FailedOpen, None));
    assert!(matches!(seen[1], (Outcome::Allowed, Some(_))), "{seen:?}");
}

#[test]
fn long_request_ids_fill_a_batch_to_half_the_body_cap_before_its_record_count() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({}));
    let e = answered(&rs, &host, deny());
    let mut log = DecisionLog::default();
    let ids = KeyIds::placeholder();
    let long_id = "r".repeat(MAX_REQUEST_ID);
    for _ in 0..MAX_DECISION_RECORDS {
        log.record(&ids, &e, None, || Some(&long_id), 0);
    }
    let first = log.take_batch("f").unwrap();
    // The bytes bind first: fewer than the record cap, within half the body cap.
    assert!(first.records.len() < MAX_DECISION_RECORDS);
    assert!(serde_json::to_vec(&first).unwrap().len() <= MAX_BODY_BYTES / 2);
    let mut sent = first.records.len();
    while let Some(b) = log.take_batch("f") {
        sent += b.records.len();
    }
    assert_eq!(sent, MAX_DECISION_RECORDS);
}

#[test]
fn a_long_request_id_is_cut_on_a_character_boundary() {
    let host = MemoryHost::default();
    let rs = rules(serde_json::json!({}));
    let e = answered(&rs, &host, deny());
    let mut log = DecisionLog::default();
    // 127 ASCII bytes then two-byte characters: byte 128 falls inside one.
    let id = format!("{}{}", "r".repeat(MAX_REQUEST_ID - 1), "é".repeat(100));
    log.record(&KeyIds::placeholder(), &e, None, || Some(&id), 0);
    log.record(&KeyIds::placeholder(), &e, None, || Some("short"), 0);
    let batch = log.take_batch("f").unwrap();
    let ids: Vec<_> = batch
        .records
        .iter()
        .map(|r| r.request_id.clone().unwrap())
        .collect();
    assert_eq!(ids[0], "r".repeat(MAX_REQUEST_ID - 1));
    assert_eq!(ids[1], "short");
}

#[test]
fn a_records_size_estimate_bounds_its_json_even_when_every_character_escapes() {
    let record = |rule: &str, key: Option<&str>, request_id: Option<&str>| DecisionRecord {
        at_ms: u64::MAX,
        rule: rule.to_string(),
        rules_version: "0123456789abcdef0123456789abcdef".to_string(),
        decision: Outcome::ShadowLimited,
        key_id: "0123456789abcdef0123456789abcdef".to_string(),
        key: key.map(str::to_string),
        source: DecisionSource::DenialCache,
        tokens: Some(u32::MAX),
        retry_after_ms: Some(u64::MAX),
        sample_rate: 0.123_456_789,
        request_id: request_id.map(str::to_string),
    };
    let quotes = "\"".repeat(128);
    for r in [
        record("r", None, None),
        record(&"r".repeat(64), Some(&quotes), None),
        record("r", None, Some(&quotes)),
        record(&"r".repeat(64), Some(&quotes), Some(&quotes)),
    ] {
        let json = serde_json::to_vec(&r).unwrap().len();
        // An upper bound, and not a loose one: within 200 bytes.
        assert!(size(&r) >= json, "estimate {} < {json}", size(&r));
        assert!(size(&r) <= json + 200, "estimate {} for {json}", size(&r));
    }
}
