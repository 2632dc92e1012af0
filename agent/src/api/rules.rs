//! `GET /v1/rules`: the rules in force, versioned by ETag so pollers get a 304 when
//! nothing changed: as one JSON document, or, with `Accept: application/jsonl`,
//! as the lines filters load a slice at a time (`meshlimit_core::rules::lines`).

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ACCEPT, CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_NONE_MATCH};
use hyper::http::request::Parts;
use hyper::{Response, StatusCode};
use meshlimit_core::rules::lines::RULES_LINES_TYPE;
use meshlimit_core::wire::{SyncResponse, WIRE_VERSION};

use super::{json, ApiError, ApiResponse, App};

pub(super) fn handle(app: &App, parts: &Parts) -> Result<ApiResponse, ApiError> {
    let set = app.inner.parts.rules.get().ok_or(ApiError::NoRules)?;
    let etag = format!("\"{}\"", set.version());
    let mut resp = if if_none_match(parts, &etag) {
        let mut resp = Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
        resp
    } else if accepts_lines(parts) {
        let lines = app.inner.parts.rules.lines().ok_or(ApiError::NoRules)?;
        let mut resp = Response::new(Full::new(lines.body.clone()));
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(RULES_LINES_TYPE));
        resp
    } else {
        json(
            StatusCode::OK,
            &SyncResponse {
                v: WIRE_VERSION,
                version: set.version().to_string(),
                rules: set.config().cloned(),
                live_nodes: None,
            },
        )?
    };
    let headers = resp.headers_mut();
    // The version is hex, so the header value is always valid.
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(ETAG, v);
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// True when any `If-None-Match` entry is `*` or names `etag` (weak or strong: a
/// content hash compares equal either way).
fn if_none_match(parts: &Parts, etag: &str) -> bool {
    parts
        .headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .any(|tag| tag == "*" || tag.trim_start_matches("W/") == etag)
}

/// Whether the caller asked for the rules as lines.
fn accepts_lines(parts: &Parts) -> bool {
    parts
        .headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().map(str::trim) == Some(RULES_LINES_TYPE))
}
