//! What the access log says of a request's decision: the rule that decided it,
//! how, and the id of the key it counted (never the key in clear).

use meshlimit_core::decision::RuleResult;
use meshlimit_core::secret::KeyIds;
use meshlimit_core::{DescriptorKey, Outcome, Verdict};

/// The filter-state names the decision is set under (Envoy shows them to an
/// access log as `wasm.<name>`).
pub const RULE: &str = "meshlimit_rule";
pub const DECISION: &str = "meshlimit_decision";
pub const KEY_ID: &str = "meshlimit_key_id";

/// The decision a request is known by: the deciding rule, its outcome, and
/// the id of the key it counted (hashed once, for the access log and the
/// decision log alike).
pub struct Decided<'e> {
    pub rule: &'e str,
    pub outcome: Outcome,
    key: Option<&'e DescriptorKey>,
    key_id: Option<String>,
}

impl<'e> Decided<'e> {
    /// The request's decision ([`deciding`]); `key_of` gives the key the
    /// evaluation formed for a rule. `None` when no rule was decided.
    pub fn of(
        key_ids: &KeyIds,
        verdict: &Verdict<'e>,
        results: &[RuleResult<'e>],
        key_of: impl FnOnce(&str) -> Option<&'e DescriptorKey>,
    ) -> Option<Self> {
        let (rule, outcome) = deciding(verdict, results)?;
        let key = key_of(rule);
        Some(Decided {
            rule,
            outcome,
            key,
            key_id: key.map(|k| key_ids.id(k).to_string()),
        })
    }

    /// The id already computed for `key`, when it is the deciding rule's key
    /// (the same key the evaluation holds, compared by address).
    pub fn id_of(&self, key: &DescriptorKey) -> Option<&str> {
        match (self.key, &self.key_id) {
            (Some(k), Some(id)) if std::ptr::eq(k, key) => Some(id),
            _ => None,
        }
    }

    /// The request's properties for the access log: the deciding rule, its
    /// outcome and its key's id (the keyed hash metrics name keys by).
    pub fn properties(&self) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (RULE, self.rule.to_string()),
            (DECISION, self.outcome.as_str().to_string()),
        ];
        if let Some(id) = &self.key_id {
            out.push((KEY_ID, id.clone()));
        }
        out
    }
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
mod tests;
