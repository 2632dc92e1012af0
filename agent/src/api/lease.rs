//! `POST /v1/lease`: validates the request, then hands it to the lease service.
//!
//! The request's shape (its version, its item count) is checked whole: a
//! filter never sends more than [`MAX_LEASE_ITEMS`] items. Each item is then
//! checked on its own, and an item the protocol does not allow is answered
//! `unavailable` (its rule's failure policy) while the others of the call are
//! leased as usual: one client's odd key never decides another client's
//! request.

use hyper::StatusCode;
use meshlimit_core::wire::{LeaseAnswer, LeaseItem, LeaseRequest, MAX_KEY_BYTES, MAX_LEASE_ITEMS};
use meshlimit_core::RuleSet;

use super::{check_version, json, ApiError, ApiResponse, App};

pub(super) async fn handle(app: &App, req: LeaseRequest) -> Result<ApiResponse, ApiError> {
    check_version(req.v)?;
    if req.items.len() > MAX_LEASE_ITEMS {
        return Err(ApiError::TooManyItems(req.items.len()));
    }
    let rules = app.inner.parts.rules.get();
    let refused: Vec<Option<&'static str>> = req
        .items
        .iter()
        .map(|item| refusal(item, rules.as_deref()))
        .collect();
    if refused.iter().all(Option::is_none) {
        let resp = app.inner.parts.leases.lease(&req).await;
        return json(StatusCode::OK, &resp);
    }
    let valid = LeaseRequest {
        v: req.v,
        rules_version: req.rules_version,
        items: req
            .items
            .into_iter()
            .zip(&refused)
            .filter(|(_, r)| r.is_none())
            .map(|(item, _)| item)
            .collect(),
    };
    let mut resp = app.inner.parts.leases.lease(&valid).await;
    let mut leased = std::mem::take(&mut resp.items).into_iter();
    resp.items = refused
        .into_iter()
        .map(|r| match r {
            Some(reason) => app.inner.parts.leases.unavailable(reason),
            None => leased.next().unwrap_or_else(|| LeaseAnswer::Unavailable {
                reason: "internal".into(),
            }),
        })
        .collect();
    json(StatusCode::OK, &resp)
}

/// Why `item` may not be leased, as the `reason` its answer and
/// `meshlimit_lease_unavailable_total` carry; `None` when it may. What serde
/// cannot check: a zero cost, a key's length (bounded so that no caller can
/// grow the agent's per-key tables by more than `MAX_KEY_BYTES` a key), that
/// the key belongs to the rule it is leased under (else a caller could drain
/// one rule's buckets under another rule's limit), and that a request costs
/// what its rule says (a caller cannot spend a victim's burst at once, nor
/// book inflated demand for its region; a filter on an older rules version
/// may send a rule's former cost, and that item takes its failure policy for
/// the second until its rules sync).
fn refusal(item: &LeaseItem, rules: Option<&RuleSet>) -> Option<&'static str> {
    if item.cost == 0 {
        return Some("invalid_cost");
    }
    if item.key.as_str().len() > MAX_KEY_BYTES {
        return Some("key_too_long");
    }
    if item.key.rule() != item.rule {
        return Some("key_of_another_rule");
    }
    let rule = rules.and_then(|set| set.rule(&item.rule))?;
    (item.cost != rule.cost.get()).then_some("invalid_cost")
}
