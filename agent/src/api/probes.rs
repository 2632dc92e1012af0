//! `GET /healthz` (the process serves), `GET /readyz` (rules loaded and the store
//! answers) and `GET /metrics`.

use std::time::Duration;

use hyper::StatusCode;

use super::{respond, ApiError, ApiResponse, App};

/// How long `/readyz` waits for the store: well under a kubelet probe's timeout.
const PING_TIMEOUT: Duration = Duration::from_millis(500);
const TEXT: &str = "text/plain; charset=utf-8";

pub(super) fn healthz() -> ApiResponse {
    respond(StatusCode::OK, TEXT, "ok\n")
}

pub(super) async fn readyz(app: &App) -> ApiResponse {
    match not_ready(app).await {
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
    app.inner.metrics.refresh(app.inner.rules.get().as_deref());
    let text = app
        .inner
        .metrics
        .render()
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(respond(
        StatusCode::OK,
        "text/plain; version=0.0.4; charset=utf-8",
        text,
    ))
}

/// Why the agent is not ready, in one line; `None` when it is.
async fn not_ready(app: &App) -> Option<String> {
    if app.inner.rules.get().is_none() {
        let why = app.inner.rules.last_error().map_or_else(
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
        return Some(format!("no valid rules loaded: {why}"));
    }
    let store = &app.inner.store;
    match tokio::time::timeout(PING_TIMEOUT, store.ping()).await {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(format!("store {}: {e}", store.name())),
        Err(_) => Some(format!(
            "store {}: no answer within {PING_TIMEOUT:?}",
            store.name()
        )),
    }
}
