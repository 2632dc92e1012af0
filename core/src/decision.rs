//! Turning each applicable rule's answer into one verdict for the request. A denial
//! is an outcome, not an error, so `?` can never swallow a rejection.

use serde::{Deserialize, Serialize};

use crate::limit::Limit;
use crate::rules::Mode;
use crate::stack_text::StackText;

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
    /// Admitted before anything counted it (a cold start, whose lease call
    /// goes out behind it): what is left of its quota is not known yet.
    pub quota_unknown: bool,
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

/// The longest rule name a [`HeldQuota`] holds: a rule's, or its trial copy's.
const HELD_NAME: usize = crate::rules::MAX_RULE_NAME + crate::rules::trial::TRIAL_SUFFIX.len();

/// A [`Quota`] kept past the rules it was read from (from the request's
/// decision to its response's headers) without an allocation: a rule's name is
/// validated to at most [`HELD_NAME`] bytes, so it is held inline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeldQuota {
    name: StackText<HELD_NAME>,
    limit: Limit,
    remaining: u32,
    reset_ns: u64,
}

impl HeldQuota {
    /// `None` for a name longer than a valid rule's (never, for compiled rules).
    pub fn keep(quota: &Quota<'_>) -> Option<HeldQuota> {
        Some(HeldQuota {
            name: StackText::of(quota.rule)?,
            limit: quota.limit,
            remaining: quota.remaining,
            reset_ns: quota.reset_ns,
        })
    }

    pub fn quota(&self) -> Quota<'_> {
        Quota {
            // Kept only when it fitted, so always whole.
            rule: self.name.as_str().unwrap_or_default(),
            limit: self.limit,
            remaining: self.remaining,
            reset_ns: self.reset_ns,
        }
    }
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
    // A rule decided by a failure policy, or admitted cold, knows nothing
    // reliable of its quota: its fields would tell the client it has none.
    let tightest = enforcing()
        .filter(|r| r.failure.is_none() && !r.quota_unknown)
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
mod tests;
