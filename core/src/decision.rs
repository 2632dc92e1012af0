//! Turning each applicable rule's answer into one verdict for the request. A denial
//! is an outcome, not an error, so `?` can never swallow a rejection.

use serde::{Deserialize, Serialize};

use crate::limit::Limit;
use crate::rules::Mode;

/// How one rule's decision is counted (the `outcome` label of
/// `meshlimit_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Allowed,
    Limited,
    ShadowLimited,
    FailedOpen,
    FailedClosed,
    FailedLocal,
}

/// What one rule said about one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RuleVerdict {
    /// Admitted; `remaining` tokens are left, the bucket is full after `reset_ns`.
    Allow { remaining: u32, reset_ns: u64 },
    /// Over the limit until `retry_after_ns` from now.
    Deny { retry_after_ns: u64 },
    /// The limiter could not decide and the rule fails closed.
    Unavailable,
}

/// One applicable rule's answer, with what the verdict needs to know of the rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleResult<'a> {
    pub rule: &'a str,
    pub mode: Mode,
    pub limit: Limit,
    pub verdict: RuleVerdict,
    /// How this decision was reached (for counting): `Allowed`/`Limited` when the
    /// limiter answered, `Failed*` when a failure policy decided.
    pub failure: Option<Outcome>,
}

/// The request's verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict<'a> {
    /// Let it through; `tightest` is the enforcing rule with the fewest tokens left
    /// (for the RateLimit response fields), if any rule applied.
    Allow { tightest: Option<Quota<'a>> },
    /// 429: `rule` is the rejecting rule that clears last.
    Deny {
        rule: &'a str,
        limit: Limit,
        retry_after_ns: u64,
    },
    /// 503: a fail-closed rule could not be checked.
    Unavailable { rule: &'a str },
}

/// A rule's quota as the RateLimit fields show it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Quota<'a> {
    pub rule: &'a str,
    pub limit: Limit,
    pub remaining: u32,
    pub reset_ns: u64,
}

impl Outcome {
    pub const ALL: [Outcome; 6] = [
        Outcome::Allowed,
        Outcome::Limited,
        Outcome::ShadowLimited,
        Outcome::FailedOpen,
        Outcome::FailedClosed,
        Outcome::FailedLocal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Limited => "limited",
            Outcome::ShadowLimited => "shadow_limited",
            Outcome::FailedOpen => "failed_open",
            Outcome::FailedClosed => "failed_closed",
            Outcome::FailedLocal => "failed_local",
        }
    }
}

impl RuleResult<'_> {
    /// The outcome this rule's decision is counted under.
    pub fn outcome(&self) -> Outcome {
        if let Some(failure) = self.failure {
            return failure;
        }
        match (self.verdict, self.mode) {
            (RuleVerdict::Deny { .. }, Mode::Shadow) => Outcome::ShadowLimited,
            (RuleVerdict::Deny { .. }, Mode::Enforce) => Outcome::Limited,
            _ => Outcome::Allowed,
        }
    }
}

/// Combines the rules' answers: any enforcing denial rejects (429, with the
/// Retry-After of the denial that clears last); otherwise any enforcing rule that
/// failed closed answers 503; otherwise the request is allowed. Shadow rules are
/// counted by the caller and change nothing here.
pub fn decide<'a>(results: &[RuleResult<'a>]) -> Verdict<'a> {
    let enforcing = || results.iter().filter(|r| r.mode == Mode::Enforce);
    let last_to_clear = enforcing()
        .filter_map(|r| match r.verdict {
            RuleVerdict::Deny { retry_after_ns } => Some((r, retry_after_ns)),
            _ => None,
        })
        .max_by_key(|(_, retry)| *retry);
    if let Some((r, retry_after_ns)) = last_to_clear {
        return Verdict::Deny {
            rule: r.rule,
            limit: r.limit,
            retry_after_ns,
        };
    }
    if let Some(r) = enforcing().find(|r| r.verdict == RuleVerdict::Unavailable) {
        return Verdict::Unavailable { rule: r.rule };
    }
    // A rule decided by a failure policy knows nothing reliable of its quota.
    let tightest = enforcing()
        .filter(|r| r.failure.is_none())
        .filter_map(|r| match r.verdict {
            RuleVerdict::Allow {
                remaining,
                reset_ns,
            } => Some(Quota {
                rule: r.rule,
                limit: r.limit,
                remaining,
                reset_ns,
            }),
            _ => None,
        })
        .min_by_key(|q| q.remaining);
    Verdict::Allow { tightest }
}

#[cfg(test)]
mod tests {
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
}
