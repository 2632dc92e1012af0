//! What the access log says of a request's decision: the rule that decided it,
//! how, and the id of the key it counted (never the key in clear).

use meshlimit_core::decision::RuleResult;
use meshlimit_core::secret::{KeyIdText, KeyIds};
use meshlimit_core::{DescriptorKey, Outcome, Verdict};

/// The filter-state name the decision is set under (Envoy shows it to an
/// access log as `wasm.meshlimit`). One value holds the three fields, so
/// naming a request's decision is one host call.
pub const PROPERTY: &str = "meshlimit";

/// Room for the value of every valid rule's decision (a rule name of at most
/// 76 bytes, an outcome, a 32-digit id and the field names): the buffer's
/// one allocation.
const VALUE_MAX: usize = 160;

/// The decision a request is known by: the deciding rule, its outcome, and
/// the id of the key it counted (hashed once, for the access log and the
/// decision log alike).
pub struct Decided<'e> {
    pub rule: &'e str,
    pub outcome: Outcome,
    key: Option<&'e DescriptorKey>,
    key_id: Option<KeyIdText>,
}

impl<'e> Decided<'e> {
    /// The request's decision ([`deciding`]); `key_of` gives the key the
    /// evaluation formed for a rule and its fingerprint, `id` its id. `None`
    /// when no rule was decided.
    pub fn of(
        verdict: &Verdict<'e>,
        results: &[RuleResult<'e>],
        key_of: impl FnOnce(&str) -> Option<(&'e DescriptorKey, u64)>,
        id: impl FnOnce(&DescriptorKey, u64) -> KeyIdText,
    ) -> Option<Self> {
        let (rule, outcome) = deciding(verdict, results)?;
        let keyed = key_of(rule);
        Some(Decided {
            rule,
            outcome,
            key: keyed.map(|(k, _)| k),
            key_id: keyed.map(|(k, fingerprint)| id(k, fingerprint)),
        })
    }

    /// The id already computed for `key`, when it is the deciding rule's key
    /// (the same key the evaluation holds, compared by address).
    pub fn id_of(&self, key: &DescriptorKey) -> Option<&str> {
        match (self.key, &self.key_id) {
            (Some(k), Some(id)) if std::ptr::eq(k, key) => Some(id.as_str()),
            _ => None,
        }
    }

    /// Hands `emit` the request's value for the access log:
    /// `rule=<rule> decision=<outcome> key_id=<id>`, the deciding
    /// rule, its outcome and its key's id (the keyed hash metrics name keys
    /// by; `-` without a key). Rule names and outcomes hold no space, so the
    /// fields split on spaces. Written into `buf` (emptied first), which
    /// the VM keeps from request to request: no allocation once it has
    /// room.
    pub fn with_value(&self, buf: &mut String, emit: impl FnOnce(&str)) {
        buf.clear();
        buf.reserve(VALUE_MAX);
        self.write_value(buf);
        emit(buf);
    }

    fn write_value(&self, out: &mut String) {
        let key_id = self.key_id.as_ref().map_or("-", KeyIdText::as_str);
        for part in [
            "rule=",
            self.rule,
            " decision=",
            self.outcome.as_str(),
            " key_id=",
            key_id,
        ] {
            out.push_str(part);
        }
    }
}

/// Entries of [`IdCache`]: 12 KiB a VM.
const CACHED_IDS: usize = 256;

/// The ids of the keys a VM decided lately, by their slot fingerprint. An id
/// is an HMAC-SHA-256 of the key: in the Wasm module that is a large part of
/// a request's own work when its lease decides it, and a hot key asks for the
/// same id on every request. Direct-mapped (a key's entry is its fingerprint
/// modulo the size; a newer key there takes it over), so its memory is fixed.
/// Two keys are told apart by their 64-bit keyed fingerprint alone, the same
/// identity a shared-data slot trusts to tell its owner. An id is kept as its
/// text, which the access log prints on every request.
pub struct IdCache {
    entries: Box<[Option<(u64, KeyIdText)>]>,
}

impl Default for IdCache {
    fn default() -> Self {
        IdCache {
            entries: vec![None; CACHED_IDS].into_boxed_slice(),
        }
    }
}

impl IdCache {
    /// The id of `key`, whose fingerprint is `fingerprint`, by `ids`.
    pub fn id(&mut self, ids: &KeyIds, fingerprint: u64, key: &DescriptorKey) -> KeyIdText {
        let at = usize::try_from(fingerprint % CACHED_IDS as u64).unwrap_or(0);
        match self.entries.get_mut(at) {
            Some(Some((cached, id))) if *cached == fingerprint => *id,
            Some(entry) => {
                let id = ids.id(key).text();
                *entry = Some((fingerprint, id));
                id
            }
            None => ids.id(key).text(),
        }
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
        Some(rule) => results.iter().find(|r| same_name(r.rule, rule)),
        None => results
            .iter()
            .find(|r| r.outcome() != Outcome::Allowed)
            .or_else(|| results.first()),
    };
    found.map(|r| (r.rule, r.outcome()))
}

/// Whether two rule names are one: the same text in the rule set (one
/// address), else compared.
pub(crate) fn same_name(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

#[cfg(test)]
mod tests;
