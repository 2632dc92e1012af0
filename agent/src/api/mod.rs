//! The agent's HTTP API as a plain value: [`App::handle`] takes a request and returns
//! a response, so tests call it directly, without a socket (the server module only
//! feeds it connections).
//!
//! Routes: `POST /v1/lease`, `POST /v1/sync`, `GET /v1/rules`,
//! `POST /v1/decisions` (behind the filters' token), `GET /v1/explain`,
//! `GET /v1/hot` (behind the operator token; see [`Auth`]), `GET /metrics`,
//! `GET /healthz`, `GET /readyz`. Every refusal is an [`ApiError`] with its status,
//! an `ErrorBody`, and (for the caller's mistakes) a count in
//! `meshlimit_bad_requests_total{reason}`.

mod auth;
mod decisions;
mod error;
mod explain;
mod lease;
mod probes;
mod rules;
mod sync;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Body;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response, StatusCode};
use meshlimit_core::wire::{self, MAX_BODY_BYTES, WIRE_VERSION};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use auth::Auth;
pub use decisions::{MAX_FILTER_ID_BYTES, MAX_RECORD_TEXT, MAX_REQUEST_ID_BYTES};
pub(crate) use error::ApiError;

use crate::decision_log::DecisionLog;
use crate::false_limits::FalseLimits;
use crate::leases::{LeaseService, LeaseSettings};
use crate::metrics::Metrics;
use crate::rules_watch::CurrentRules;
use meshlimit_store::Buckets;

/// One key now: its bucket, the node pool's share, its recent decisions.
pub const EXPLAIN_PATH: &str = "/v1/explain";
/// A rule's hottest keys on this node.
pub const HOT_PATH: &str = "/v1/hot";

/// The response type of every route.
pub(crate) type ApiResponse = Response<Full<Bytes>>;

/// The agent's request handler; cheap to clone (one per connection).
#[derive(Clone)]
pub struct App {
    inner: Arc<AppState>,
}

struct AppState {
    rules: Arc<CurrentRules>,
    metrics: Arc<Metrics>,
    leases: Arc<LeaseService>,
    auth: Auth,
    declog: Arc<DecisionLog>,
    false_limits: Arc<FalseLimits>,
}

impl App {
    pub fn new(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        metrics: Arc<Metrics>,
        settings: LeaseSettings,
        auth: Auth,
    ) -> App {
        // Kept in memory only (explain, hot keys); written nowhere.
        let declog = DecisionLog::in_memory(metrics.clone());
        Self::with_decision_log(rules, store, metrics, settings, auth, declog)
    }

    /// [`App::new`] writing the filters' decision records to `declog`.
    pub fn with_decision_log(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        metrics: Arc<Metrics>,
        settings: LeaseSettings,
        auth: Auth,
        declog: Arc<DecisionLog>,
    ) -> App {
        let leases = LeaseService::new(rules.clone(), store.clone(), metrics.clone(), settings);
        let false_limits = FalseLimits::start(rules.clone(), store, metrics.clone());
        leases.check_false_limits(false_limits.clone());
        App {
            inner: Arc::new(AppState {
                rules,
                metrics,
                leases,
                auth,
                declog,
                false_limits,
            }),
        }
    }

    /// Suspect 429s checked a second at most (`--false-limit-checks`).
    pub fn set_false_limit_checks(&self, per_second: u32) {
        self.inner.false_limits.set_budget(per_second);
    }

    /// The count the heartbeat task keeps up to date (shared with it).
    pub(crate) fn live_nodes_handle(&self) -> Arc<AtomicU32> {
        self.inner.leases.live_nodes_handle()
    }

    /// The lease service's region shares (the region tasks turn them on).
    pub fn shares_handle(&self) -> crate::regions::Shares {
        self.inner.leases.shares()
    }

    /// Agents alive in the region, when known.
    pub(crate) fn live_nodes(&self) -> Option<u32> {
        Some(
            self.inner
                .leases
                .live_nodes_handle()
                .load(Ordering::Relaxed),
        )
        .filter(|n| *n > 0)
    }

    /// Drops the node pool's idle keys (run every second by `run`).
    pub fn sweep_pools(&self) {
        self.inner.leases.sweep_pools();
    }

    /// Keys the node pool holds (for tests).
    pub fn pooled_keys(&self) -> usize {
        self.inner.leases.pooled_keys()
    }

    pub(crate) fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// Serves one request. Never fails: every error becomes its response.
    pub async fn handle<B>(&self, req: Request<B>) -> ApiResponse
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        match self.route(req).await {
            Ok(resp) => resp,
            Err(e) => {
                if let Some(reason) = e.bad_request_reason() {
                    self.inner.metrics.bad_request(reason);
                }
                e.into_response()
            }
        }
    }

    async fn route<B>(&self, req: Request<B>) -> Result<ApiResponse, ApiError>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = req.into_parts();
        let path = parts.uri.path();
        match path {
            wire::LEASE_PATH => {
                allow(&parts, &[Method::POST])?;
                self.inner.auth.check(&parts)?;
                lease::handle(self, decode(&read_body(&parts, body).await?)?).await
            }
            wire::SYNC_PATH => {
                allow(&parts, &[Method::POST])?;
                self.inner.auth.check(&parts)?;
                sync::handle(self, decode(&read_body(&parts, body).await?)?)
            }
            wire::RULES_PATH => {
                allow(&parts, &[Method::GET, Method::HEAD])?;
                self.inner.auth.check(&parts)?;
                rules::handle(self, &parts)
            }
            wire::DECISIONS_PATH => {
                allow(&parts, &[Method::POST])?;
                self.inner.auth.check(&parts)?;
                decisions::decisions(self, decode(&read_body(&parts, body).await?)?)
            }
            EXPLAIN_PATH => {
                allow(&parts, &[Method::GET])?;
                self.inner.auth.check_operator(&parts)?;
                explain::explain(self, &parts).await
            }
            HOT_PATH => {
                allow(&parts, &[Method::GET])?;
                self.inner.auth.check_operator(&parts)?;
                explain::hot(self, &parts)
            }
            "/metrics" => {
                allow(&parts, &[Method::GET, Method::HEAD])?;
                probes::metrics(self)
            }
            "/healthz" => {
                allow(&parts, &[Method::GET, Method::HEAD])?;
                Ok(probes::healthz())
            }
            "/readyz" => {
                allow(&parts, &[Method::GET, Method::HEAD])?;
                Ok(probes::readyz(self))
            }
            _ => Err(ApiError::NotFound(path.to_string())),
        }
    }
}

fn allow(parts: &Parts, methods: &'static [Method]) -> Result<(), ApiError> {
    if methods.contains(&parts.method) {
        Ok(())
    } else {
        Err(ApiError::MethodNotAllowed {
            method: parts.method.to_string(),
            allowed: methods,
        })
    }
}

/// Reads a body of at most `MAX_BODY_BYTES`. A declared length over the cap is
/// refused before reading; an undeclared one is cut off at the cap, so a client
/// can never make the agent buffer more.
async fn read_body<B>(parts: &Parts, body: B) -> Result<Bytes, ApiError>
where
    B: Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(ApiError::TooLarge);
    }
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::TooLarge),
        Err(e) => Err(ApiError::BodyRead(e.to_string())),
    }
}

/// Parses a wire body. When it does not parse, a readable `v` of another version
/// is named as such: the filter and agent are then of different releases, which
/// is worth a clearer message than "malformed".
fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    #[derive(Deserialize)]
    struct VersionOnly {
        v: u32,
    }
    serde_json::from_slice(bytes).map_err(|e| match serde_json::from_slice::<VersionOnly>(bytes) {
        Ok(VersionOnly { v }) if v != WIRE_VERSION => ApiError::WrongVersion(v),
        _ => ApiError::MalformedJson(e.to_string()),
    })
}

fn check_version(v: u32) -> Result<(), ApiError> {
    if v == WIRE_VERSION {
        Ok(())
    } else {
        Err(ApiError::WrongVersion(v))
    }
}

/// A JSON response.
fn json<T: Serialize>(status: StatusCode, value: &T) -> Result<ApiResponse, ApiError> {
    let body = serde_json::to_vec(value).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(respond(status, "application/json", body))
}

fn respond(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> ApiResponse {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    resp
}
