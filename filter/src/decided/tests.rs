use meshlimit_core::decision::decide;
use meshlimit_core::rules::Mode;
use meshlimit_core::{Limit, RuleVerdict};
use std::num::{NonZeroU32, NonZeroU64};

use super::*;

fn result(
    rule: &str,
    mode: Mode,
    verdict: RuleVerdict,
    failure: Option<Outcome>,
) -> RuleResult<'_> {
    let n = NonZeroU32::MIN;
    RuleResult {
        rule,
        mode,
        limit: Limit::new(n, NonZeroU64::MIN, n),
        verdict,
        failure,
        quota_unknown: false,
    }
}

fn allow(remaining: u32) -> RuleVerdict {
    RuleVerdict::Allow {
        remaining,
        reset_ns: 0,
    }
}

fn named(results: &[RuleResult<'_>]) -> Option<(String, Outcome)> {
    deciding(&decide(results), results).map(|(r, o)| (r.to_string(), o))
}

#[test]
fn the_rejecting_rule_decides_else_the_tightest_allowing_one() {
    let deny = RuleVerdict::Deny { retry_after_ns: 5 };
    let rs = [
        result("roomy", Mode::Enforce, allow(9), None),
        result("tight", Mode::Enforce, allow(1), None),
        result("shadow", Mode::Shadow, deny, None),
    ];
    assert_eq!(named(&rs), Some(("tight".into(), Outcome::Allowed)));
    let rs = [
        result("roomy", Mode::Enforce, allow(9), None),
        result("over", Mode::Enforce, deny, None),
    ];
    assert_eq!(named(&rs), Some(("over".into(), Outcome::Limited)));
    let rs = [
        result("roomy", Mode::Enforce, allow(9), None),
        result("local", Mode::Enforce, deny, Some(Outcome::FailedLocal)),
    ];
    assert_eq!(named(&rs), Some(("local".into(), Outcome::FailedLocal)));
    let rs = [result(
        "closed",
        Mode::Enforce,
        RuleVerdict::Unavailable,
        Some(Outcome::FailedClosed),
    )];
    assert_eq!(named(&rs), Some(("closed".into(), Outcome::FailedClosed)));
}

#[test]
fn the_key_is_named_by_its_id_never_in_clear() {
    use meshlimit_core::DescriptorKey;
    let key = DescriptorKey::new("per-key", ["secret-customer"]);
    let other = DescriptorKey::new("per-key", ["secret-customer"]);
    let rs = [result(
        "per-key",
        Mode::Enforce,
        RuleVerdict::Deny { retry_after_ns: 1 },
        None,
    )];
    let ids = KeyIds::placeholder();
    let verdict = decide(&rs);
    let decided = Decided::of(
        &verdict,
        &rs,
        |rule| (rule == "per-key").then_some((&key, 7)),
        |k, _| ids.id(k).text(),
    )
    .unwrap();
    let id = ids.id(&key).to_string();
    assert_eq!(
        value(&decided),
        format!("rule=per-key decision=limited key_id={id}")
    );
    assert!(!id.contains("secret-customer"));
    // The id is handed on only for the very key it was computed from.
    assert_eq!(decided.id_of(&key), Some(id.as_str()));
    assert_eq!(decided.id_of(&other), None);
    let none = decide(&[]);
    assert!(Decided::of(&none, &[], |_| None, |k, _| ids.id(k).text()).is_none());
}

#[test]
fn without_a_quota_a_policy_or_shadow_decision_is_named() {
    let rs = [
        result("open", Mode::Enforce, allow(0), Some(Outcome::FailedOpen)),
        result(
            "shadow",
            Mode::Shadow,
            RuleVerdict::Deny { retry_after_ns: 1 },
            None,
        ),
    ];
    assert_eq!(named(&rs), Some(("open".into(), Outcome::FailedOpen)));
    // A shadow rule's allowance is no quota: the policy's decision names it.
    let rs = [
        result("s", Mode::Shadow, allow(3), None),
        result("open", Mode::Enforce, allow(0), Some(Outcome::FailedOpen)),
    ];
    assert_eq!(named(&rs), Some(("open".into(), Outcome::FailedOpen)));
    let rs = [result("s", Mode::Shadow, allow(3), None)];
    assert_eq!(named(&rs), Some(("s".into(), Outcome::Allowed)));
    assert_eq!(named(&[]), None);
}

#[test]
fn a_cached_id_is_the_keys_own_and_a_newer_key_in_its_entry_takes_it_over() {
    use meshlimit_core::DescriptorKey;
    let ids = KeyIds::placeholder();
    let (a, b) = (
        DescriptorKey::new("per-key", ["a"]),
        DescriptorKey::new("per-key", ["b"]),
    );
    let mut cache = IdCache::default();
    assert_eq!(cache.id(&ids, 3, &a), ids.id(&a).text());
    // Found by fingerprint: a hit does not look at the key again.
    assert_eq!(cache.id(&ids, 3, &b), ids.id(&a).text());
    // Another fingerprint in the same entry (256 apart) replaces it.
    assert_eq!(cache.id(&ids, 3 + 256, &b), ids.id(&b).text());
    assert_eq!(cache.id(&ids, 3, &a), ids.id(&a).text());
    // Other entries are other keys'.
    assert_eq!(cache.id(&ids, 4, &b), ids.id(&b).text());
}

/// The value, written into a buffer a request before used, as the VM's is.
fn value(decided: &Decided<'_>) -> String {
    let mut buf = "rule=an-earlier-rule decision=limited key_id=-".to_string();
    let mut out = String::new();
    decided.with_value(&mut buf, |v| out = v.to_string());
    out
}

#[test]
fn one_value_names_a_decision_without_a_key_and_one_past_the_stack_room() {
    let ids = KeyIds::placeholder();
    let long = "r".repeat(300);
    for (rule, want) in [
        (
            "open",
            "rule=open decision=failed_open key_id=-".to_string(),
        ),
        (&long, format!("rule={long} decision=failed_open key_id=-")),
    ] {
        let rs = [result(
            rule,
            Mode::Enforce,
            allow(5),
            Some(Outcome::FailedOpen),
        )];
        let verdict = decide(&rs);
        let decided = Decided::of(&verdict, &rs, |_| None, |k, _| ids.id(k).text()).unwrap();
        assert_eq!(value(&decided), want);
    }
}
