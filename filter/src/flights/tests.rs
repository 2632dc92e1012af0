use std::rc::Rc;

use meshlimit_core::rules::RulesConfig;
use meshlimit_core::wire::LeaseAnswer;
use meshlimit_core::{RequestInfo, RuleSet, Verdict};

use super::*;
use crate::testing::MemoryHost;

const MS: u64 = 1_000_000;

fn rules(accuracy: &str) -> Rc<RuleSet> {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
        {"name": "r", "key": [{"header": "x-k"}], "limit": {"requests": 1000, "per": "1s"},
         "accuracy": accuracy, "on_failure": "closed"},
    ]}))
    .unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

fn eval(rs: &Rc<RuleSet>, host: &MemoryHost, cfg: &FilterConfig, key: &str) -> Evaluation {
    let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), key.to_string())]);
    let mut e = Evaluation::new(Rc::clone(rs), &req, cfg).unwrap().unwrap();
    e.local_pass(host, cfg);
    e
}

fn rs_fp(_rs: &Rc<RuleSet>, cfg: &FilterConfig) -> u64 {
    let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), "a".to_string())]);
    let rs = rules("fast");
    let a = rs.applicable(&req).unwrap().into_iter().next().unwrap();
    cfg.slot_hasher.fingerprint(&a.key)
}

fn grant(tokens: u32) -> LeaseAnswer {
    LeaseAnswer::Grant {
        tokens,
        ttl_ms: 300,
        remaining: 100,
        reset_ms: 10,
        local: false,
        from: None,
        next_ask_ms: None,
    }
}

#[test]
fn requests_for_a_busy_key_wait_on_its_one_call() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("fast"),
    );
    let mut f = Flights::default();
    for id in 1..=3 {
        assert!(f
            .admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"))
            .is_none());
    }
    assert!(f
        .admit(&host, &cfg, 4, eval(&rs, &host, &cfg, "b"))
        .is_none());
    let (req, items) = f.take_batch("v").unwrap();
    // One item per key, in one call; two requests waited.
    assert_eq!(req.items.len(), 2);
    f.sent(7, items);
    assert_eq!(
        f.stats,
        FlightStats {
            calls: 1,
            refills: 0,
            waits: 2,
            ..FlightStats::default()
        }
    );
    let decided = f.answered(&host, &cfg, Call::Sent(7), Some(vec![grant(3), grant(1)]));
    let ids: Vec<u32> = decided.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(decided
        .iter()
        .all(|(_, e)| matches!(e.verdict(), Verdict::Allow { .. })));
    assert_eq!(f.parked(), 0);
    assert!(!f.has_queued());
    // Each request counts once in the key's demand, though the three that
    // waited looked at the slot twice.
    let fp = rs_fp(&rs, &cfg);
    let (bytes, _) = host.shared_get(&crate::slots::slot_key(fp, cfg.slots));
    let slot = meshlimit_core::slot::SlotState::claim(bytes.as_deref(), fp, 0).unwrap();
    assert_eq!(slot.lease.demand, 3.0);
}

#[test]
fn a_grant_too_small_for_every_waiter_sends_another_call_for_the_rest() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("fast"),
    );
    let mut f = Flights::default();
    for id in 1..=3 {
        f.admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"));
    }
    let (_, items) = f.take_batch("v").unwrap();
    f.sent(1, items);
    let decided = f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(2)]));
    assert_eq!(decided.len(), 2);
    assert_eq!(f.parked(), 1);
    let (req, items) = f.take_batch("v").unwrap();
    assert_eq!(req.items.len(), 1, "one call for the one still waiting");
    f.sent(2, items);
    let decided = f.answered(
        &host,
        &cfg,
        Call::Sent(2),
        Some(vec![LeaseAnswer::Deny {
            retry_after_ms: 5,
            local: false,
            from: None,
        }]),
    );
    assert!(matches!(decided[0].1.verdict(), Verdict::Deny { .. }));
}

#[test]
fn a_request_that_keeps_losing_its_grant_takes_its_policy_after_max_rounds() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("fast"),
    );
    let mut f = Flights::default();
    f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
    let mut calls = 0;
    let decided = loop {
        let (_, items) = f.take_batch("v").unwrap();
        calls += 1;
        // Every answer's tokens are gone before the request looks.
        let decided = f.answered(&host, &cfg, Call::Unsent(items), Some(vec![grant(0)]));
        if !decided.is_empty() {
            break decided;
        }
    };
    assert_eq!(calls, usize::from(MAX_ROUNDS));
    assert!(matches!(
        decided[0].1.verdict(),
        Verdict::Unavailable { .. }
    ));
}

#[test]
fn a_failed_call_decides_its_waiters_by_their_policy_and_frees_the_key() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("fast"),
    );
    let mut f = Flights::default();
    f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
    f.admit(&host, &cfg, 2, eval(&rs, &host, &cfg, "a"));
    let (_, items) = f.take_batch("v").unwrap();
    f.sent(1, items);
    let decided = f.answered(&host, &cfg, Call::Sent(1), None);
    assert_eq!(decided.len(), 2);
    assert!(decided
        .iter()
        .all(|(_, e)| matches!(e.verdict(), Verdict::Unavailable { .. })));
    // The key is free: the next request calls again.
    f.admit(&host, &cfg, 3, eval(&rs, &host, &cfg, "a"));
    assert!(f.has_queued());
}

#[test]
fn each_request_of_an_exact_rule_asks_for_itself() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("exact"),
    );
    let mut f = Flights::default();
    f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
    f.admit(&host, &cfg, 2, eval(&rs, &host, &cfg, "a"));
    let (req, items) = f.take_batch("v").unwrap();
    assert_eq!(req.items.len(), 2);
    assert_eq!(f.stats.waits, 0);
    f.sent(1, items);
    let decided = f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(1), grant(1)]));
    assert_eq!(decided.len(), 2);
    assert!(decided
        .iter()
        .all(|(_, e)| matches!(e.verdict(), Verdict::Allow { .. })));
}

#[test]
fn a_request_that_crosses_the_mark_is_served_and_its_refill_queued() {
    let (host, cfg, rs) = (
        MemoryHost::default(),
        FilterConfig::default(),
        rules("fast"),
    );
    let mut f = Flights::default();
    // A first grant, spent at 1,000/s, gives the key a spend rate.
    f.admit(&host, &cfg, 1, eval(&rs, &host, &cfg, "a"));
    let (_, items) = f.take_batch("v").unwrap();
    f.sent(1, items);
    f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(50)]));
    let mut id = 2;
    let mut refilled_at = None;
    for ms in 1..=300u64 {
        host.set_now(ms * MS);
        let decided = f.admit(&host, &cfg, id, eval(&rs, &host, &cfg, "a"));
        id += 1;
        if decided.is_none() {
            // Ran dry: ask again (this is the second grant, which measures the rate).
            let (_, items) = f.take_batch("v").unwrap();
            f.sent(id, items);
            f.answered(&host, &cfg, Call::Sent(id), Some(vec![grant(50)]));
            continue;
        }
        if f.has_queued() {
            refilled_at = Some(ms);
            break;
        }
    }
    let at = refilled_at.expect("a refill started ahead of need");
    assert_eq!(f.stats.refills, 1);
    assert_eq!(
        f.parked(),
        0,
        "the request that crossed the mark did not wait"
    );
    // It went out as a refill: nobody waits on it, the lease still had tokens.
    let (req, _) = f.take_batch("v").unwrap();
    assert_eq!(req.items.len(), 1);
    // Near the end of the first grant's 50 tokens, spent one a millisecond.
    assert!((40..50).contains(&at), "refill started at {at} ms");
    let (bytes, _) = host.shared_get(&crate::slots::slot_key(rs_fp(&rs, &cfg), cfg.slots));
    let slot =
        meshlimit_core::slot::SlotState::claim(bytes.as_deref(), rs_fp(&rs, &cfg), 0).unwrap();
    assert!(slot.lease.tokens > 0, "served from what was left");
    assert!(slot.lease.in_flight(host.now_ns()));
}

mod cold;

#[test]
fn a_lease_call_s_body_is_its_request_s_json() {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
        {"name": "search", "key": [{"header": "x-k"}], "limit": {"requests": 10, "per": "1s"}},
        {"name": "per-plan", "key": [{"header": "x-k"}], "limit": {"requests": 20, "per": "1s"}},
    ]}))
    .unwrap();
    let rs = Rc::new(RuleSet::compile(&config).unwrap());
    let item = |rule: &str, key: &str, plan: Option<&str>, want: Option<u32>| {
        let key = meshlimit_core::DescriptorKey::new(rule, [key]);
        Item::of(&rs, rule, key, plan, want)
    };
    let items = vec![
        item("search", "k1", None, None),
        item("per-plan", "a \"quoted\" \\ key", Some("gold"), Some(17)),
    ];
    let request = LeaseRequest {
        v: WIRE_VERSION,
        rules_version: "v\"1".into(),
        items: items.iter().map(Item::lease).collect(),
    };
    assert_eq!(
        String::from_utf8(meshlimit_core::wire::lease_request_json("v\"1", &items)).unwrap(),
        serde_json::to_string(&request).unwrap()
    );
    assert_eq!(
        meshlimit_core::wire::lease_request_json::<Item>("", &[]),
        serde_json::to_vec(&LeaseRequest {
            v: WIRE_VERSION,
            rules_version: String::new(),
            items: Vec::new()
        })
        .unwrap()
    );
}

#[test]
fn waiters_keep_their_order_and_come_once_on_either_side_of_the_set() {
    for n in [
        1,
        SCANNED_WAITERS - 1,
        SCANNED_WAITERS,
        SCANNED_WAITERS + 1,
        100,
    ] {
        let mut w: Waiting<u32> = Waiting::default();
        for id in (0..n as u32).chain((0..n as u32).rev()) {
            w.push(id);
        }
        let want: Vec<u32> = (0..n as u32).collect();
        assert_eq!(w.order.to_vec(), want, "{n}");
        assert!(w.contains(&0) && !w.contains(&(n as u32)), "{n}");
        assert_eq!(w.members.is_empty(), n < SCANNED_WAITERS, "{n}");
    }
}

/// A new key's request reads its slot once before its call (its miss marks
/// the call in the same write) and once after (the answer and the
/// request's take in one write); a miss that waits on a call already queued
/// marks nothing, and the call is still marked in flight in the slot.
#[test]
fn a_new_keys_slot_is_read_once_before_its_call_and_once_after() {
    let (host, cfg) = (MemoryHost::default(), FilterConfig::default());
    let rs = rules("fast");
    let fp = rs_fp(&rs, &cfg);
    host.count_reads(&crate::slots::slot_key(fp, cfg.slots));
    let mut flights: Flights<u32> = Flights::default();
    let request = |flights: &Flights<u32>| {
        let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), "a".to_string())]);
        let mut e = Evaluation::new(Rc::clone(&rs), &req, &cfg)
            .unwrap()
            .unwrap();
        let busy = |fp| flights.is_busy(fp);
        let step = e.local_step(&host, &cfg, None, Some(&busy));
        assert!(step.ask);
        e
    };
    let first = request(&flights);
    assert!(flights.admit(&host, &cfg, 1, first).is_none());
    assert_eq!(host.reads_counted(), 1, "one read before the call");
    let (bytes, _) = host.shared_get(&crate::slots::slot_key(fp, cfg.slots));
    let slot = meshlimit_core::slot::SlotState::claim(bytes.as_deref(), fp, 0).unwrap();
    assert!(slot.lease.in_flight(host.now_ns()), "the call is marked");
    // A second request waits on the queued call: one read, no second call.
    host.count_reads(&crate::slots::slot_key(fp, cfg.slots));
    let second = request(&flights);
    assert!(flights.admit(&host, &cfg, 2, second).is_none());
    assert_eq!(host.reads_counted(), 1);
    let items = flights.take_items("").unwrap();
    assert_eq!(items.len(), 1);
    assert!(items[0].marked);
    let decided = flights.answered(&host, &cfg, Call::Unsent(items), Some(vec![grant(10)]));
    assert_eq!(decided.len(), 2);
    assert_eq!(
        host.reads_counted(),
        2,
        "the answer and both takes: one read"
    );
    for (_, e) in &decided {
        assert!(matches!(e.verdict(), Verdict::Allow { .. }));
    }
    let (bytes, _) = host.shared_get(&crate::slots::slot_key(fp, cfg.slots));
    let slot = meshlimit_core::slot::SlotState::claim(bytes.as_deref(), fp, 0).unwrap();
    assert_eq!(slot.lease.tokens, 8, "10 granted, 2 taken");
}
