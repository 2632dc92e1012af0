//! `POST /v1/sync`: a filter reports its decisions and rules version; the answer
//! carries the agent's version (a filter that differs fetches the rules as lines
//! from `GET /v1/rules`; a filter of an earlier release gets them inside the
//! answer), so the once-a-second sync costs a few bytes when nothing changed.

use hyper::StatusCode;
use meshlimit_core::wire::{SyncRequest, SyncResponse, WIRE_VERSION};

use super::{check_version, json, ApiError, ApiResponse, App};

pub(super) fn handle(app: &App, req: SyncRequest) -> Result<ApiResponse, ApiError> {
    check_version(req.v)?;
    // Any filter id is accepted (a long Istio node id included): refusing a sync
    // would cut the filter off from rule updates. Metrics bound the label instead.
    let rules = app.inner.parts.rules.get();
    app.inner.parts.reports.record_sync(rules.as_deref(), &req);
    let resp = match rules {
        Some(set) => SyncResponse {
            v: WIRE_VERSION,
            version: set.version().to_string(),
            // A filter that fetches its rules gets the version only.
            rules: (!req.fetches_rules && req.rules_version.as_deref() != Some(set.version()))
                .then(|| set.config().cloned())
                .flatten(),
            live_nodes: app.live_nodes(),
        },
        // Nothing to hand out: the filter keeps its last good rules.
        None => SyncResponse {
            v: WIRE_VERSION,
            version: String::new(),
            rules: None,
            live_nodes: app.live_nodes(),
        },
    };
    json(StatusCode::OK, &resp)
}
