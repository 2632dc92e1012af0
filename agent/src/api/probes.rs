//! `GET /healthz` (the process serves), `GET /readyz` (a valid rules set is
//! loaded) and `GET /metrics`.
//!
//! Readiness never depends on the store: while Redis is down the node's fail-local
//! ceiling lives in this agent, so the agent must stay in the node-local Service
//! (an unready agent would send every Envoy of the node to its own, separate
//! fail-local bucket). Store health is in the metrics. The probe reads memory only,
//! so any caller may poll it as often as it likes.

use hyper::StatusCode;

use super::{respond, ApiError, ApiResponse, App};

const TEXT: &str = "text/plain; charset=utf-8";

pub(super) fn healthz() -> ApiResponse {
    respond(StatusCode::OK, TEXT, "ok\n")
}

pub(super) fn readyz(app: &App) -> ApiResponse {
    match not_ready(app) {
        None => respond(StatusCode::OK, TEXT, "ready\n"),
        Some(reason) => respond(
            StatusCode::SERVICE_UNAVAILABLE,
            TEXT,
            format!("not ready: {}\n", reason.replace('\n', " ")),
        ),
    }
}

pub(super) fn metrics(app: &App) -> Result<ApiResponse, ApiError> {
    // The fail-open ratios and filter versions depend on time: bring them up to
    // date for this scrape, not only at the next once-a-second refresh.
    app.refresh_metrics();
    let text = crate::metrics::render(&app.inner.parts.registry)
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(respond(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        text,
    ))
}

/// Why the agent is not ready, in one line; `None` when it is.
fn not_ready(app: &App) -> Option<String> {
    if app.inner.parts.rules.get().is_some() {
        return None;
    }
    let why = app.inner.parts.rules.last_error().map_or_else(
        || "the rules file was not read yet".to_string(),
        |e| {
            let mut lines = e.lines();
            let first = lines.next().unwrap_or_default().to_string();
            match lines.count() {
                0 => first,
                more => format!("{first} (and {more} more)"),
            }
        },
    );
    Some(format!("no valid rules loaded: {why}"))
}
