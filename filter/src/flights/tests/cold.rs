//! Cold starts (`cold_start: admit`): a key this Envoy knows nothing of is
//! admitted at once, its call goes out with the batch, and the grant pays for
//! the request.

use std::rc::Rc;

use meshlimit_core::rules::RulesConfig;
use meshlimit_core::slot::SlotState;
use meshlimit_core::wire::{DecisionSource, LeaseAnswer};
use meshlimit_core::{RequestInfo, RuleSet, Verdict};

use super::super::*;
use super::grant;
use crate::allowance::Allowance;
use crate::testing::MemoryHost;

fn rules(cold_start: &str) -> Rc<RuleSet> {
    let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
        {"name": "r", "key": [{"header": "x-k"}], "limit": {"requests": 1000, "per": "1s"},
         "cost": 2, "cold_start": cold_start},
    ]}))
    .unwrap();
    Rc::new(RuleSet::compile(&config).unwrap())
}

fn eval(
    rs: &Rc<RuleSet>,
    host: &MemoryHost,
    cfg: &FilterConfig,
    cold: &mut Allowance,
    key: &str,
) -> Evaluation {
    let mut req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), key.to_string())]);
    // As the HTTP context reads it, with the request's headers.
    req.now_ns = host.now_ns();
    let mut e = Evaluation::new(Rc::clone(rs), &req, cfg).unwrap().unwrap();
    e.local_pass_with(host, cfg, Some(cold), None);
    e
}

fn slot(host: &MemoryHost, cfg: &FilterConfig, rs: &Rc<RuleSet>, key: &str) -> SlotState {
    let req = RequestInfo::new("/", "GET", vec![("x-k".to_string(), key.to_string())]);
    let a = rs.applicable(&req).unwrap().into_iter().next().unwrap();
    let fp = cfg.slot_hasher.fingerprint(&a.key);
    let (bytes, _) = host.shared_get(&slots::slot_key(fp, cfg.slots));
    SlotState::claim(bytes.as_deref(), fp, 0).unwrap()
}

/// A host whose clock reads a real time (a slot's zero times mean "never").
fn host() -> MemoryHost {
    let host = MemoryHost::default();
    host.set_now(T0);
    host
}

const T0: u64 = 1_000_000_000_000;

fn source(e: &Evaluation) -> DecisionSource {
    e.logged().next().unwrap().source
}

#[test]
fn a_cold_key_is_admitted_at_once_and_its_grant_pays_for_it() {
    let (host, cfg, rs) = (host(), FilterConfig::default(), rules("admit"));
    let (mut f, mut cold) = (Flights::<u32>::default(), Allowance::default());
    let first = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(!first.has_misses());
    // Nothing counted it yet: the response tells no quota (not "0 left").
    assert!(matches!(first.verdict(), Verdict::Allow { tightest: None }));
    assert_eq!(source(&first), DecisionSource::ColdStart);
    assert!(f.admit(&host, &cfg, 1, first).is_some(), "nothing waits");
    assert_eq!(f.stats.cold_starts, 1);
    assert_eq!(f.stats.refills, 0);

    // The key's next request finds its call queued and waits on it.
    let second = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(second.has_misses());
    assert!(f.admit(&host, &cfg, 2, second).is_none());
    let (request, items) = f.take_batch("v").unwrap();
    assert_eq!(request.items.len(), 1, "one call for the key");
    assert_eq!(
        request.items[0].cost, 2,
        "the grant must cover the admitted request"
    );
    f.sent(9, items);

    // A grant of 10: 2 paid the cold start, 2 the waiting request, 6 are left.
    let decided = f.answered(&host, &cfg, Call::Sent(9), Some(vec![grant(10)]));
    assert_eq!(decided.len(), 1);
    // The waiting request, decided from the grant, shows the quota again.
    assert!(matches!(
        decided[0].1.verdict(),
        Verdict::Allow { tightest: Some(_) }
    ));
    assert_eq!(slot(&host, &cfg, &rs, "a").lease.tokens, 6);
    assert_eq!(f.stats.cold_starts_unpaid, 0);
}

#[test]
fn a_denied_or_unanswered_cold_start_is_counted_unpaid() {
    let (host, cfg, rs) = (host(), FilterConfig::default(), rules("admit"));
    let (mut f, mut cold) = (Flights::<u32>::default(), Allowance::default());
    for (id, key) in [(1, "a"), (2, "b")] {
        let e = eval(&rs, &host, &cfg, &mut cold, key);
        assert_eq!(source(&e), DecisionSource::ColdStart);
        assert!(f.admit(&host, &cfg, id, e).is_some());
    }
    let (_, items) = f.take_batch("v").unwrap();
    f.sent(1, items);
    let deny = LeaseAnswer::Deny {
        retry_after_ms: 500,
        local: false,
        from: None,
    };
    f.answered(&host, &cfg, Call::Sent(1), Some(vec![deny]));
    assert_eq!(
        f.stats.cold_starts_unpaid, 2,
        "one denied, one not answered"
    );
    // The denied key is known now: its next request is denied, not started.
    let e = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(matches!(e.verdict(), Verdict::Deny { .. }));
    assert_eq!(source(&e), DecisionSource::DenialCache);
}

#[test]
fn a_known_key_or_a_spent_allowance_waits_for_the_agent() {
    let (host, rs) = (host(), rules("admit"));
    let cfg = FilterConfig {
        cold_starts_per_second: 1,
        ..FilterConfig::default()
    };
    let (mut f, mut cold) = (Flights::<u32>::default(), Allowance::default());
    let e = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(f.admit(&host, &cfg, 1, e).is_some());
    // The allowance (one a second) is spent: another cold key waits.
    let e = eval(&rs, &host, &cfg, &mut cold, "b");
    assert!(e.has_misses());
    // Once "a" was answered and its tokens expired, it is known: it waits.
    let (_, items) = f.take_batch("v").unwrap();
    f.sent(1, items);
    f.answered(&host, &cfg, Call::Sent(1), Some(vec![grant(2)]));
    host.set_now(T0 + 2_000_000_000);
    let e = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(e.has_misses(), "a key with a past grant is not cold");
    let e = eval(&rs, &host, &cfg, &mut cold, "c");
    assert_eq!(
        source(&e),
        DecisionSource::ColdStart,
        "the allowance refilled"
    );
}

#[test]
fn a_rule_that_waits_never_starts_cold() {
    let (host, cfg, rs) = (host(), FilterConfig::default(), rules("wait"));
    let mut cold = Allowance::default();
    let e = eval(&rs, &host, &cfg, &mut cold, "a");
    assert!(e.has_misses());
    let mut e = Evaluation::new(
        Rc::clone(&rules("admit")),
        &RequestInfo::new("/", "GET", vec![("x-k".to_string(), "z".to_string())]),
        &cfg,
    )
    .unwrap()
    .unwrap();
    assert!(e.local_pass(&host, &cfg), "no allowance given: a miss");
}
