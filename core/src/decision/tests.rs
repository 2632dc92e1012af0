use super::*;
use crate::limit::limit;

#[test]
fn each_decision_is_counted_under_its_outcome() {
    let deny = RuleVerdict::Deny { retry_after_ns: 1 };
    let allow = RuleVerdict::Allow {
        remaining: 1,
        reset_ns: 1,
    };
    let outcome = |mode, verdict| result("r", mode, verdict).outcome();
    assert_eq!(outcome(Mode::Enforce, deny), Outcome::Limited);
    assert_eq!(outcome(Mode::Shadow, deny), Outcome::ShadowLimited);
    assert_eq!(outcome(Mode::Enforce, allow), Outcome::Allowed);
    assert_eq!(outcome(Mode::Shadow, allow), Outcome::Allowed);
    let mut failed = result("r", Mode::Enforce, deny);
    failed.failure = Some(Outcome::FailedLocal);
    assert_eq!(failed.outcome(), Outcome::FailedLocal);
}

#[test]
fn outcomes_are_counted_under_their_metric_names() {
    let names: Vec<&str> = Outcome::ALL.iter().map(|o| o.as_str()).collect();
    assert_eq!(
        names,
        [
            "allowed",
            "limited",
            "shadow_limited",
            "failed_open",
            "failed_closed",
            "failed_local"
        ]
    );
}

fn result(rule: &str, mode: Mode, verdict: RuleVerdict) -> RuleResult<'_> {
    RuleResult {
        rule,
        mode,
        limit: limit(10, 1_000_000_000, 10),
        verdict,
        failure: None,
        quota_unknown: false,
    }
}

#[test]
fn the_denial_that_clears_last_names_the_rejection() {
    let rs = [
        result("a", Mode::Enforce, RuleVerdict::Deny { retry_after_ns: 1 }),
        result("b", Mode::Enforce, RuleVerdict::Deny { retry_after_ns: 9 }),
        result(
            "c",
            Mode::Enforce,
            RuleVerdict::Allow {
                remaining: 3,
                reset_ns: 0,
            },
        ),
    ];
    assert!(matches!(
        decide(&rs),
        Verdict::Deny {
            rule: "b",
            retry_after_ns: 9,
            ..
        }
    ));
}

#[test]
fn shadow_denials_change_nothing_but_are_counted() {
    let rs = [result(
        "s",
        Mode::Shadow,
        RuleVerdict::Deny { retry_after_ns: 5 },
    )];
    assert_eq!(decide(&rs), Verdict::Allow { tightest: None });
    assert_eq!(rs[0].outcome(), Outcome::ShadowLimited);
}

#[test]
fn a_denial_wins_over_fail_closed() {
    let rs = [
        result("closed", Mode::Enforce, RuleVerdict::Unavailable),
        result("d", Mode::Enforce, RuleVerdict::Deny { retry_after_ns: 1 }),
    ];
    assert!(matches!(decide(&rs), Verdict::Deny { rule: "d", .. }));
    assert!(matches!(
        decide(&rs[..1]),
        Verdict::Unavailable { rule: "closed" }
    ));
}

#[test]
fn allowed_responses_show_the_tightest_rule() {
    let rs = [
        result(
            "roomy",
            Mode::Enforce,
            RuleVerdict::Allow {
                remaining: 50,
                reset_ns: 0,
            },
        ),
        result(
            "tight",
            Mode::Enforce,
            RuleVerdict::Allow {
                remaining: 2,
                reset_ns: 0,
            },
        ),
    ];
    match decide(&rs) {
        Verdict::Allow { tightest: Some(q) } => assert_eq!(q.rule, "tight"),
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn a_rule_admitted_before_anything_counted_it_shows_no_quota() {
    let allow = |remaining| RuleVerdict::Allow {
        remaining,
        reset_ns: 0,
    };
    let mut cold = result("cold", Mode::Enforce, allow(0));
    cold.quota_unknown = true;
    let roomy = result("roomy", Mode::Enforce, allow(50));
    match decide(&[cold.clone(), roomy]) {
        Verdict::Allow { tightest: Some(q) } => assert_eq!(q.rule, "roomy"),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(decide(&[cold]), Verdict::Allow { tightest: None });
}

#[test]
fn a_held_quota_gives_back_the_quota_it_kept_for_every_valid_name_length() {
    let longest = "a".repeat(crate::rules::MAX_RULE_NAME) + crate::rules::trial::TRIAL_SUFFIX;
    for name in ["r", "search-per-api-key", longest.as_str()] {
        let quota = Quota {
            rule: name,
            limit: limit(100, 1_000_000_000, 100),
            remaining: 7,
            reset_ns: 250_000_000,
        };
        let held = HeldQuota::keep(&quota).expect("a valid name fits");
        assert_eq!(held.quota(), quota);
    }
    let too_long = longest + "x";
    let quota = Quota {
        rule: &too_long,
        limit: limit(100, 1_000_000_000, 100),
        remaining: 7,
        reset_ns: 1,
    };
    assert_eq!(HeldQuota::keep(&quota), None);
}
