//! `POST /v1/decisions`: a filter VM's batch of decision records, behind the
//! filters' token. Every meshed namespace can present that token, so a record
//! is checked as if a stranger wrote it before it reaches the decision log,
//! the recent ring, the hot keys or the false-limit SLI:
//!
//! - refused (400, the whole batch, nothing kept) when no filter would send it:
//!   more than [`MAX_DECISION_RECORDS`] records, a field past its bound (so a
//!   record holds at most [`MAX_RECORD_TEXT`] bytes of text), a key id that is
//!   not 32 lowercase hex digits, a key in clear whose id is not `key_id`
//!   (the filter derives both from the same key), a sample rate outside
//!   (0, 1] or below 1 for a rejection, or a source and outcome no decision
//!   has (a failure outcome not from a failure policy, a cold start that
//!   rejected, a rejection without its retry time);
//! - neutered when a filter on other rules could send it: a record of a rule
//!   not in force is dropped (counted in
//!   `meshlimit_decision_log_dropped_total{at="refused"}`), a key in clear of
//!   a rule without `log_key: clear` loses the key, and a request id of other
//!   than visible ASCII is left out.
//!
//! The filter id is bounded and printable, not proven: any holder of the
//! filters' token can name any filter.

use hyper::StatusCode;
use meshlimit_core::rules::{LogKey, MAX_RULE_NAME};
use meshlimit_core::secret::KeyIds;
use meshlimit_core::wire::{
    DecisionRecord, DecisionSource, DecisionsRequest, MAX_DECISION_RECORDS, MAX_KEY_BYTES,
    MAX_VERSION_LABEL,
};
use meshlimit_core::{DescriptorKey, Outcome, RuleSet};
use serde_json::json;

use super::{check_version, json, ApiError, ApiResponse, App};

/// The longest filter id (an Istio node id and the VM's number).
pub const MAX_FILTER_ID_BYTES: usize = 256;
/// The longest request id; the filter cuts longer ones to this.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// The longest rule name a record names: a rule's, or its `NAME.trial` copy's.
const MAX_RECORD_RULE: usize = MAX_RULE_NAME + meshlimit_core::rules::trial::TRIAL_SUFFIX.len();
/// The most text one record holds: its rule, rules version, key id, key and
/// request id at their bounds (1,318 bytes).
pub const MAX_RECORD_TEXT: usize =
    MAX_RECORD_RULE + MAX_VERSION_LABEL + 32 + MAX_KEY_BYTES + MAX_REQUEST_ID_BYTES;
// The figure the docs state.
const _: () = assert!(MAX_RECORD_TEXT == 1_318);

pub(super) fn decisions(app: &App, mut req: DecisionsRequest) -> Result<ApiResponse, ApiError> {
    check_version(req.v)?;
    check_batch(&req, app.key_ids())?;
    let refused = match app.inner.parts.rules.get() {
        Some(set) => neuter(&mut req.records, &set),
        // Nothing to check them against: none is kept.
        None => std::mem::take(&mut req.records).len(),
    };
    if refused > 0 {
        app.inner
            .parts
            .declog
            .refused(u64::try_from(refused).unwrap_or(u64::MAX));
    }
    app.inner.parts.false_limits.observe(&req.records);
    app.inner.parts.declog.accept(req);
    json(StatusCode::OK, &json!({ "refused": refused }))
}

/// What no filter sends: the batch is refused whole.
fn check_batch(req: &DecisionsRequest, ids: &KeyIds) -> Result<(), ApiError> {
    if req.records.len() > MAX_DECISION_RECORDS {
        return Err(ApiError::InvalidField(format!(
            "{} records; at most {MAX_DECISION_RECORDS} per request",
            req.records.len()
        )));
    }
    let id = &req.filter_id;
    if id.is_empty() || id.len() > MAX_FILTER_ID_BYTES || id.chars().any(char::is_control) {
        return Err(ApiError::InvalidField(format!(
            "filter_id: 1 to {MAX_FILTER_ID_BYTES} bytes without control characters"
        )));
    }
    for (i, r) in req.records.iter().enumerate() {
        check_record(r, ids)
            .map_err(|why| ApiError::InvalidField(format!("records[{i}].{why}")))?;
    }
    Ok(())
}

/// Why a record is one no filter sends; shown after `records[I].`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum RecordError {
    #[error("{field}: {len} bytes; at most {max}")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("key_id: not a key id (32 lowercase hex digits)")]
    KeyId,
    #[error("key: its id is not key_id")]
    KeyNotItsId,
    #[error("sample_rate: {0} (above 0 and at most 1; 1 for a rejection)")]
    SampleRate(f64),
    #[error("decision: `{decision}` from source `{from}` {} retry_after_ms is no decision a filter makes", if *retry { "with" } else { "without" })]
    Inconsistent {
        decision: &'static str,
        from: &'static str,
        retry: bool,
    },
}

fn check_record(r: &DecisionRecord, ids: &KeyIds) -> Result<(), RecordError> {
    let bounds = [
        ("rule", r.rule.len(), MAX_RECORD_RULE),
        ("rules_version", r.rules_version.len(), MAX_VERSION_LABEL),
        ("key", r.key.as_ref().map_or(0, String::len), MAX_KEY_BYTES),
        (
            "request_id",
            r.request_id.as_ref().map_or(0, String::len),
            MAX_REQUEST_ID_BYTES,
        ),
    ];
    if let Some((field, len, max)) = bounds.into_iter().find(|(_, len, max)| len > max) {
        return Err(RecordError::TooLong { field, len, max });
    }
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    if r.key_id.len() != 32 || !r.key_id.bytes().all(hex) {
        return Err(RecordError::KeyId);
    }
    if let Some(key) = &r.key {
        if ids.id(&DescriptorKey::from_wire(key.clone())).to_string() != r.key_id {
            return Err(RecordError::KeyNotItsId);
        }
    }
    // As the filter keeps them: a denial, or a failure that refused.
    let rejected = r.retry_after_ms.is_some()
        || matches!(
            r.decision,
            Outcome::Limited | Outcome::ShadowLimited | Outcome::FailedClosed
        );
    if !(r.sample_rate > 0.0 && r.sample_rate <= 1.0) || (rejected && r.sample_rate != 1.0) {
        return Err(RecordError::SampleRate(r.sample_rate));
    }
    consistent(r)
}

/// Whether some decision has this outcome from this source.
fn consistent(r: &DecisionRecord) -> Result<(), RecordError> {
    use DecisionSource as S;
    let ok = match r.decision {
        Outcome::FailedOpen => r.source == S::FailurePolicy && r.retry_after_ms.is_none(),
        Outcome::FailedClosed => r.source == S::FailurePolicy,
        Outcome::FailedLocal => matches!(r.source, S::FailurePolicy | S::AgentLocal),
        Outcome::Allowed => {
            r.retry_after_ms.is_none()
                && !matches!(r.source, S::FailurePolicy | S::AgentLocal | S::DenialCache)
        }
        Outcome::Limited | Outcome::ShadowLimited => {
            r.retry_after_ms.is_some()
                && !matches!(r.source, S::FailurePolicy | S::AgentLocal | S::ColdStart)
        }
    };
    if ok {
        Ok(())
    } else {
        Err(RecordError::Inconsistent {
            decision: r.decision.as_str(),
            from: r.source.as_str(),
            retry: r.retry_after_ms.is_some(),
        })
    }
}

/// What a filter on other rules may send, made harmless against `set`; returns
/// the records dropped.
fn neuter(records: &mut Vec<DecisionRecord>, set: &RuleSet) -> usize {
    let before = records.len();
    records.retain_mut(|r| {
        let Some(rule) = set.rule(&r.rule) else {
            return false;
        };
        if rule.log_key != LogKey::Clear {
            r.key = None;
        }
        if r.request_id
            .as_ref()
            .is_some_and(|id| !id.bytes().all(|b| b.is_ascii_graphic()))
        {
            r.request_id = None;
        }
        true
    });
    before - records.len()
}

#[cfg(test)]
mod tests {
    use super::RecordError;

    #[test]
    fn a_refused_record_says_which_field_and_why() {
        let said = |e: RecordError| e.to_string();
        assert_eq!(
            said(RecordError::TooLong {
                field: "key",
                len: 300,
                max: 256
            }),
            "key: 300 bytes; at most 256"
        );
        assert_eq!(
            said(RecordError::SampleRate(0.5)),
            "sample_rate: 0.5 (above 0 and at most 1; 1 for a rejection)"
        );
        assert_eq!(
            said(RecordError::Inconsistent {
                decision: "allowed",
                from: "failure_policy",
                retry: true
            }),
            "decision: `allowed` from source `failure_policy` with retry_after_ms \
             is no decision a filter makes"
        );
        assert_eq!(
            said(RecordError::Inconsistent {
                decision: "limited",
                from: "filter_lease",
                retry: false
            }),
            "decision: `limited` from source `filter_lease` without retry_after_ms \
             is no decision a filter makes"
        );
    }
}
