use std::rc::Rc;

use meshlimit_core::rules::RulesConfig;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::{RequestInfo, RuleSet, Verdict, NANOS_PER_MS, NANOS_PER_SEC};

use super::Evaluation;
use crate::config::FilterConfig;
use crate::testing::MemoryHost;

fn rules(json: serde_json::Value) -> Rc<RuleSet> {
    let config: RulesConfig = serde_json::from_value(json).unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

fn two_rules(on_failure: &str) -> Rc<RuleSet> {
    rules(serde_json::json!({"version": 1, "rules": [
        {"name": "tight", "key": [{"header": "x-api-key"}], "limit": {"requests": 2, "per": "1s"}, "on_failure": on_failure},
        {"name": "loose", "key": ["method"], "limit": {"requests": 100, "per": "1s"}, "on_failure": "open"},
    ]}))
}

fn req(key: &str) -> RequestInfo {
    RequestInfo::new(
        "/x",
        "GET",
        vec![("x-api-key".to_string(), key.to_string())],
    )
}

fn grant(tokens: u32) -> LeaseAnswer {
    LeaseAnswer::Grant {
        tokens,
        ttl_ms: 100,
        remaining: 50,
        reset_ms: 10,
        local: false,
        from: None,
        next_ask_ms: None,
    }
}

fn deny(retry_after_ms: u64) -> LeaseAnswer {
    LeaseAnswer::Deny {
        retry_after_ms,
        local: false,
        from: None,
    }
}

#[test]
fn a_grant_fills_the_lease_and_later_requests_stay_local() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(e.local_pass(&host, &cfg));
    assert_eq!(e.lease_request().items.len(), 2);
    e.apply_answers(&host, &cfg, vec![grant(2), grant(10)]);
    assert!(matches!(e.verdict(), Verdict::Allow { .. }));

    // The next request spends the leftover lease tokens without asking.
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg));
    assert!(matches!(e.verdict(), Verdict::Allow { .. }));
    // The tight rule's lease (2 tokens, 1 per request) is now spent.
    let mut e = Evaluation::new(rs, &req("k"), &cfg).unwrap().unwrap();
    assert!(e.local_pass(&host, &cfg));
    assert_eq!(e.lease_request().items.len(), 1);
}

#[test]
fn a_grant_that_carries_a_turn_is_spent_then_rejects_until_it_without_asking() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(e.local_pass(&host, &cfg));
    let turn = LeaseAnswer::Grant {
        tokens: 2,
        ttl_ms: 100,
        remaining: 50,
        reset_ms: 10,
        local: false,
        from: None,
        next_ask_ms: Some(50),
    };
    e.apply_answers(&host, &cfg, vec![turn, grant(10)]);
    assert!(matches!(e.verdict(), Verdict::Allow { .. }));
    // The grant's second token...
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg));
    assert!(matches!(e.verdict(), Verdict::Allow { .. }));
    // ...then a local rejection until the turn, 50 ms after the grant...
    host.set_now(10 * NANOS_PER_MS);
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg), "no call before the turn");
    assert!(matches!(
        e.verdict(),
        Verdict::Deny {
            rule: "tight",
            retry_after_ns: 40_000_000,
            ..
        }
    ));
    assert!(e.take_refills().is_empty());
    // ...and at the turn, the key's call goes out (nobody waits on it, as at
    // any denial's end).
    host.set_now(50 * NANOS_PER_MS);
    let mut e = Evaluation::new(rs, &req("k"), &cfg).unwrap().unwrap();
    assert!(!e.local_pass(&host, &cfg));
    assert_eq!(e.take_refills().len(), 1);
}

#[test]
fn a_denial_is_cached_and_rejects_without_asking_or_spending() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    e.local_pass(&host, &cfg);
    e.apply_answers(&host, &cfg, vec![deny(1500), grant(10)]);
    assert!(matches!(
        e.verdict(),
        Verdict::Deny {
            rule: "tight",
            retry_after_ns: 1_500_000_000,
            ..
        }
    ));

    host.set_now(NANOS_PER_SEC);
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg), "the denial cache answers");
    assert!(matches!(
        e.verdict(),
        Verdict::Deny {
            retry_after_ns: 500_000_000,
            ..
        }
    ));
    // The loose rule was skipped: only the rejecting rule is counted.
    assert_eq!(e.results().len(), 1);
}

#[test]
fn failure_policies() {
    let cfg = FilterConfig::default();
    for (policy, expect_503) in [("open", false), ("closed", true), ("local", false)] {
        let host = MemoryHost::default();
        let mut e = Evaluation::new(two_rules(policy), &req("k"), &cfg)
            .unwrap()
            .unwrap();
        e.local_pass(&host, &cfg);
        e.fail_misses(&host, &cfg);
        assert_eq!(
            matches!(e.verdict(), Verdict::Unavailable { rule: "tight" }),
            expect_503,
            "{policy}"
        );
        let outcomes: Vec<&str> = e.results().iter().map(|r| r.outcome().as_str()).collect();
        assert_eq!(outcomes[0], format!("failed_{policy}"));
    }
}

#[test]
fn fail_local_admits_the_nodes_slice_then_rejects() {
    let host = MemoryHost::default();
    // Limit 2/s, safety factor 2, one node: the local bucket holds 4.
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut admitted = 0;
    for _ in 0..20 {
        let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
            .unwrap()
            .unwrap();
        if e.local_pass(&host, &cfg) {
            e.fail_misses(&host, &cfg);
        }
        admitted += u32::from(matches!(e.verdict(), Verdict::Allow { .. }));
    }
    assert_eq!(admitted, 4);
}

#[test]
fn key_cardinality_does_not_grow_shared_data_past_the_slots() {
    let host = MemoryHost::default();
    let cfg = FilterConfig {
        slots: 64,
        ..FilterConfig::default()
    };
    let rs = two_rules("local");
    for i in 0..5_000 {
        let mut e = Evaluation::new(Rc::clone(&rs), &req(&format!("key-{i}")), &cfg)
            .unwrap()
            .unwrap();
        e.local_pass(&host, &cfg);
        e.apply_answers(&host, &cfg, vec![grant(3), grant(3)]);
    }
    assert!(host.slot_count() <= 64, "{} slots used", host.slot_count());
}

#[test]
fn the_agents_fail_local_answers_count_as_the_policy_and_keep_no_lease() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    e.local_pass(&host, &cfg);
    let local_grant = LeaseAnswer::Grant {
        tokens: 1,
        ttl_ms: 0,
        remaining: 0,
        reset_ms: 0,
        local: true,
        from: None,
        next_ask_ms: None,
    };
    e.apply_answers(
        &host,
        &cfg,
        vec![
            local_grant,
            LeaseAnswer::Deny {
                retry_after_ms: 100,
                local: true,
                from: None,
            },
        ],
    );
    assert!(matches!(e.verdict(), Verdict::Deny { rule: "loose", .. }));
    let outcomes: Vec<&str> = e.results().iter().map(|r| r.outcome().as_str()).collect();
    assert_eq!(outcomes, ["failed_local", "failed_local"]);
    // Nothing was cached: the next request asks the agent again.
    let mut e = Evaluation::new(rs, &req("k"), &cfg).unwrap().unwrap();
    assert!(e.local_pass(&host, &cfg));
    assert_eq!(e.lease_request().items.len(), 2);
}

#[test]
fn a_cached_shadow_denial_does_not_stop_the_enforcing_rules() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = rules(serde_json::json!({"version": 1, "rules": [
        {"name": "tight", "key": [{"header": "x-api-key"}], "limit": {"requests": 2, "per": "1s"}, "mode": "shadow"},
        {"name": "loose", "key": ["method"], "limit": {"requests": 100, "per": "1s"}},
    ]}));
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(e.local_pass(&host, &cfg));
    e.apply_answers(&host, &cfg, vec![deny(1500), deny(700)]);
    // The shadow denial is only counted; the enforcing one rejects.
    assert!(matches!(
        e.verdict(),
        Verdict::Deny {
            rule: "loose",
            retry_after_ns: 700_000_000,
            ..
        }
    ));

    // Both denials are cached now. The shadow rule's cached denial comes first
    // (strictest first), yet the enforcing rule behind it is still evaluated.
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(!e.local_pass(&host, &cfg), "both denial caches answer");
    assert!(matches!(e.verdict(), Verdict::Deny { rule: "loose", .. }));
    assert_eq!(e.results().len(), 2, "the shadow rule is counted too");

    // Once the enforcing rule's denial has expired, the request goes to the
    // agent for that rule even though the shadow rule is still denying.
    host.set_now(800_000_000);
    let mut e = Evaluation::new(rs, &req("k"), &cfg).unwrap().unwrap();
    assert!(e.local_pass(&host, &cfg), "the enforcing rule is asked");
    let items = e.lease_request().items;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].rule, "loose");
    e.apply_answers(&host, &cfg, vec![grant(5)]);
    assert!(matches!(e.verdict(), Verdict::Allow { .. }));
    let outcomes: Vec<&str> = e.results().iter().map(|r| r.outcome().as_str()).collect();
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

#[test]
fn a_cached_denial_ends_at_the_rules_next_schedule_edge() {
    // 2 an hour; 100 a second from 00m10s to 00m20s of every hour.
    let rs = rules(serde_json::json!({"version": 1, "rules": [
        {"name": "sched", "key": [{"header": "x-api-key"}], "limit": {"requests": 2, "per": "1h"},
         "schedule": [{"minutes": "00m10s-00m20s", "requests": 100, "per": "1s"}]},
    ]}));
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    // 2026-12-01T10:00:05Z, five seconds before the window opens.
    let t0 = 1_796_119_205 * NANOS_PER_SEC;
    let at = |t: u64| {
        host.set_now(t);
        let mut r = req("k");
        r.now_ns = t;
        Evaluation::new(Rc::clone(&rs), &r, &cfg).unwrap().unwrap()
    };
    let mut e = at(t0);
    assert!(e.local_pass(&host, &cfg));
    // An answer as long as 2 an hour makes it: half an hour.
    e.apply_answers(&host, &cfg, vec![deny(1_800_000)]);
    // A second later the cached denial runs only to the window's opening.
    let mut e = at(t0 + NANOS_PER_SEC);
    assert!(!e.local_pass(&host, &cfg), "the denial cache answers");
    assert!(
        matches!(e.verdict(), Verdict::Deny { retry_after_ns, .. } if retry_after_ns == 4 * NANOS_PER_SEC),
        "{:?}",
        e.verdict()
    );
    // At the opening the key is asked again, under the window's limit.
    let mut e = at(t0 + 5 * NANOS_PER_SEC);
    assert!(e.local_pass(&host, &cfg), "the agent is asked");
}

#[test]
fn each_decision_names_where_it_was_made_and_the_key_it_counted() {
    use meshlimit_core::wire::{AnsweredFrom, DecisionSource};
    use meshlimit_core::DescriptorKey;
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let mut e = Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
        .unwrap()
        .unwrap();
    assert!(e.local_pass(&host, &cfg));
    e.apply_answers(
        &host,
        &cfg,
        vec![
            // The agent could not reach the store and denied from its own
            // fail-local bucket.
            LeaseAnswer::Deny {
                retry_after_ms: 1_000,
                local: true,
                from: None,
            },
            LeaseAnswer::Grant {
                tokens: 5,
                ttl_ms: 100,
                remaining: 50,
                reset_ms: 10,
                local: false,
                from: Some(AnsweredFrom::Store),
                next_ask_ms: None,
            },
        ],
    );
    let sources: Vec<_> = e
        .logged()
        .map(|l| (l.rule.name.clone(), l.source))
        .collect();
    assert_eq!(
        sources,
        [
            ("tight".to_string(), DecisionSource::AgentLocal),
            ("loose".to_string(), DecisionSource::Store),
        ]
    );
    let key = |rule: &str| e.key_of(rule).map(|(k, _)| k.clone());
    assert_eq!(key("tight"), Some(DescriptorKey::new("tight", ["k"])));
    assert_eq!(key("loose"), Some(DescriptorKey::new("loose", ["GET"])));
    assert_eq!(key("other"), None);
    // With the fingerprint its slot and its cached id go by.
    let tight = DescriptorKey::new("tight", ["k"]);
    assert_eq!(
        e.key_of("tight").map(|(_, f)| f),
        Some(cfg.slot_hasher.fingerprint(&tight))
    );
}

#[test]
fn a_request_reads_the_agents_back_off_only_when_it_would_call() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = two_rules("local");
    let down = crate::state::AGENT_DOWN_KEY;
    host.count_reads(down);
    let eval = || {
        Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
            .unwrap()
            .unwrap()
    };

    // A miss calls, so it reads the back-off first.
    let mut e = eval();
    let step = e.local_step(&host, &cfg, None, None);
    assert_eq!((step.ask, step.backed_off), (true, false));
    assert_eq!(host.reads_counted(), 1);
    e.apply_answers(&host, &cfg, vec![grant(3), grant(100)]);

    // Requests the lease decides alone never read it, and the back-off,
    // once running, does not stop them spending what they hold.
    for i in 0..3 {
        if i == 1 {
            let until = 10 * NANOS_PER_SEC;
            crate::host::Host::shared_set(&host, down, &until.to_le_bytes(), None).unwrap();
        }
        let mut e = eval();
        let step = e.local_step(&host, &cfg, None, None);
        if i < 2 {
            assert_eq!((step.ask, step.backed_off), (false, false), "{i}");
            assert!(matches!(e.verdict(), Verdict::Allow { .. }), "{i}");
            assert_eq!(host.reads_counted(), 1, "{i}");
        } else {
            // "tight" (3 tokens) is spent: its miss finds the agent backed
            // off and takes its failure policy, with nothing left to send.
            assert_eq!((step.ask, step.backed_off), (false, true));
            assert!(!e.has_misses());
            assert_eq!(host.reads_counted(), 2);
        }
    }
}

#[test]
fn at_a_denials_end_the_keys_call_goes_out_and_nobody_waits_on_it() {
    let host = MemoryHost::default();
    let cfg = FilterConfig::default();
    let rs = rules(serde_json::json!({"version": 1, "rules": [
        {"name": "tight", "key": [{"header": "x-api-key"}], "limit": {"requests": 2, "per": "1s"}},
    ]}));
    let eval = || {
        Evaluation::new(Rc::clone(&rs), &req("k"), &cfg)
            .unwrap()
            .unwrap()
    };
    let mut e = eval();
    assert!(e.local_pass(&host, &cfg));
    e.apply_answers(&host, &cfg, vec![deny(100)]);

    // The first request at the denial's end is denied and starts the key's
    // call as a refill; the next, with the call out, is denied and starts
    // nothing. Neither waits.
    host.set_now(100_000_000);
    for refills in [1, 0] {
        let mut e = eval();
        assert!(!e.local_pass(&host, &cfg), "nobody waits on the call");
        assert!(matches!(e.verdict(), Verdict::Deny { rule: "tight", .. }));
        assert_eq!(e.take_refills().len(), refills);
        assert_eq!(
            e.logged().next().unwrap().source,
            meshlimit_core::wire::DecisionSource::DenialCache
        );
    }
}
