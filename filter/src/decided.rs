//! What the access log says of a request's decision: the rule that decided it,
//! how, and the id of the key it counted (never the key in clear).

use meshlimit_core::decision::RuleResult;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{Outcome, RequestInfo, RuleSet, Verdict};

/// The filter-state names the decision is set under (Envoy shows them to an
/// access log as `wasm.<name>`).
pub const RULE: &str = "meshlimit_rule";
pub const DECISION: &str = "meshlimit_decision";
pub const KEY_ID: &str = "meshlimit_key_id";

/// The request's properties for the access log: the deciding rule, its
/// outcome and its key's id (the keyed hash metrics name keys by). Empty when
/// no rule was decided.
pub fn properties(
    key_ids: &KeyIds,
    rules: &RuleSet,
    req: &RequestInfo,
    verdict: &Verdict<'_>,
    results: &[RuleResult<'_>],
) -> Vec<(&'static str, String)> {
    let Some((rule, outcome)) = deciding(verdict, results) else {
        return Vec::new();
    };
    let mut out = vec![
        (RULE, rule.to_string()),
        (DECISION, outcome.as_str().to_string()),
    ];
    // The key is formed again for this one rule: the evaluation keeps its keys
    // to itself.
    if let Some(a) = rules.applicable_rule(rule, req) {
        out.push((KEY_ID, key_ids.id(&a.key).to_string()));
    }
    out
}

/// The rule that decided the request and the outcome it was counted under: the
/// rule that rejected it (or failed closed), else the tightest allowing rule,
/// else the first rule a failure policy or shadow mode decided, else the first
/// rule that applied. `None` when no rule was decided.
pub fn deciding<'a>(
    verdict: &Verdict<'a>,
    results: &[RuleResult<'a>],
) -> Option<(&'a str, Outcome)> {
    let named = match verdict {
        Verdict::Deny { rule, .. } | Verdict::Unavailable { rule } => Some(*rule),
        Verdict::Allow { tightest } => tightest.map(|q| q.rule),
    };
    let found = match named {
        Some(rule) => results.iter().find(|r| r.rule == rule),
        None => results
            .iter()
            .find(|r| r.outcome() != Outcome::Allowed)
            .or_else(|| results.first()),
    };
    found.map(|r| (r.rule, r.outcome()))
}

#[cfg(test)]
mod tests {
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
        use meshlimit_core::rules::RulesConfig;
        use meshlimit_core::DescriptorKey;
        let config: RulesConfig = serde_json::from_value(serde_json::json!({"version": 1, "rules": [
            {"name": "per-key", "key": [{"header": "x-api-key"}], "limit": {"requests": 1, "per": "1s"}},
        ]}))
        .unwrap();
        let rules = RuleSet::compile(&config).unwrap();
        let req = RequestInfo::new(
            "/",
            "GET",
            vec![("x-api-key".to_string(), "secret-customer".to_string())],
        );
        let rs = [result(
            "per-key",
            Mode::Enforce,
            RuleVerdict::Deny { retry_after_ns: 1 },
            None,
        )];
        let ids = KeyIds::placeholder();
        let props = properties(&ids, &rules, &req, &decide(&rs), &rs);
        let id = ids
            .id(&DescriptorKey::new("per-key", ["secret-customer"]))
            .to_string();
        assert_eq!(
            props,
            [
                (RULE, "per-key".to_string()),
                (DECISION, "limited".to_string()),
                (KEY_ID, id.clone())
            ]
        );
        assert!(!id.contains("secret-customer"));
        assert!(properties(&ids, &rules, &req, &decide(&[]), &[]).is_empty());
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
        let rs = [result("s", Mode::Shadow, allow(3), None)];
        assert_eq!(named(&rs), Some(("s".into(), Outcome::Allowed)));
        assert_eq!(named(&[]), None);
    }
}
