//! `POST /v1/lease`: validates the request, then hands it to the lease service.

use hyper::StatusCode;
use meshlimit_core::wire::{LeaseRequest, MAX_KEY_BYTES, MAX_LEASE_ITEMS};
use meshlimit_core::RuleSet;

use super::{check_version, json, ApiError, ApiResponse, App};

pub(super) async fn handle(app: &App, req: LeaseRequest) -> Result<ApiResponse, ApiError> {
    check_version(req.v)?;
    validate(&req)?;
    if let Some(rules) = app.inner.rules.get() {
        validate_costs(&req, &rules)?;
    }
    let resp = app.inner.leases.lease(&req).await;
    json(StatusCode::OK, &resp)
}

/// What serde cannot check: the item count, a zero cost, a key's length (bounded
/// so that no caller can grow the agent's per-key tables by more than
/// `MAX_KEY_BYTES` a key), and that each key belongs
/// to the rule it is leased under (else a caller could drain one rule's buckets
/// under another rule's limit).
fn validate(req: &LeaseRequest) -> Result<(), ApiError> {
    if req.items.len() > MAX_LEASE_ITEMS {
        return Err(ApiError::TooManyItems(req.items.len()));
    }
    for (i, item) in req.items.iter().enumerate() {
        if item.cost == 0 {
            return Err(ApiError::InvalidField(format!(
                "items[{i}].cost: must be at least 1"
            )));
        }
        let len = item.key.as_str().len();
        if len > MAX_KEY_BYTES {
            return Err(ApiError::InvalidField(format!(
                "items[{i}].key: {len} bytes; at most {MAX_KEY_BYTES}"
            )));
        }
        if item.key.rule() != item.rule {
            return Err(ApiError::InvalidField(format!(
                "items[{i}].key: not a key of rule `{}`",
                item.rule
            )));
        }
    }
    Ok(())
}

/// A request costs what its rule says, nothing else: a caller cannot spend a
/// victim's burst at once, nor book inflated demand for its region. (A filter
/// on an older rules version may send a rule's former cost; it is refused like
/// any other mismatch and that request takes its failure policy, for the one
/// second until its rules sync.)
fn validate_costs(req: &LeaseRequest, rules: &RuleSet) -> Result<(), ApiError> {
    for (i, item) in req.items.iter().enumerate() {
        if let Some(rule) = rules.rule(&item.rule) {
            if item.cost != rule.cost.get() {
                return Err(ApiError::InvalidField(format!(
                    "items[{i}].cost: rule `{}` costs {}",
                    item.rule, rule.cost
                )));
            }
        }
    }
    Ok(())
}
