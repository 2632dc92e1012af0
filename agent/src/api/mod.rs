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
mod metrics;
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

pub use metrics::ApiMetrics;

use crate::decision_log::{DecisionLog, DecisionLogMetrics};
use crate::false_limits::{FalseLimitMetrics, FalseLimits};
use crate::leases::{LeaseMetrics, LeaseService, LeaseSettings};
use crate::metrics::{MetricsError, Registry};
use crate::reports::ReportMetrics;
use crate::rules_watch::CurrentRules;
use crate::trial::metrics::TrialMetrics;
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
    parts: AppParts,
    metrics: ApiMetrics,
}

/// What an [`App`] serves from: the services `run` wires over one registry.
pub struct AppParts {
    pub rules: Arc<CurrentRules>,
    pub leases: Arc<LeaseService>,
    pub false_limits: Arc<FalseLimits>,
    pub declog: Arc<DecisionLog>,
    /// What the filters' sync reports feed.
    pub reports: Arc<ReportMetrics>,
    /// Where every service registered its metrics: `/metrics` renders it.
    pub registry: Registry,
    pub auth: Auth,
}

impl App {
    /// Serves `parts`, registering the API's own metrics in their registry.
    pub fn new(parts: AppParts) -> Result<App, MetricsError> {
        let metrics = ApiMetrics::new(&parts.registry)?;
        Ok(App {
            inner: Arc::new(AppState { parts, metrics }),
        })
    }

    /// An App over services of its own, their metrics in a registry of its
    /// own, the decision log kept in memory only (explain, hot keys), and keys
    /// named by the placeholder ids: for tests and tools without a secret.
    pub fn standalone(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        settings: LeaseSettings,
        auth: Auth,
    ) -> Result<App, MetricsError> {
        let registry = Registry::new();
        let declog = DecisionLog::in_memory(Arc::new(DecisionLogMetrics::new(&registry)?));
        Self::standalone_parts(rules, store, settings, auth, declog, registry)
    }

    /// [`App::standalone`] writing the filters' decision records to `declog`
    /// (whose metrics are in a registry of their own).
    pub fn standalone_with_decision_log(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        settings: LeaseSettings,
        auth: Auth,
        declog: Arc<DecisionLog>,
    ) -> Result<App, MetricsError> {
        Self::standalone_parts(rules, store, settings, auth, declog, Registry::new())
    }

    fn standalone_parts(
        rules: Arc<CurrentRules>,
        store: Arc<dyn Buckets>,
        settings: LeaseSettings,
        auth: Auth,
        declog: Arc<DecisionLog>,
        registry: Registry,
    ) -> Result<App, MetricsError> {
        let key_ids = meshlimit_core::secret::KeyIds::placeholder();
        let trial = Arc::new(TrialMetrics::new(&registry)?);
        let lease_metrics = Arc::new(LeaseMetrics::new(&registry, key_ids.clone(), trial)?);
        let fl_metrics = Arc::new(FalseLimitMetrics::new(&registry)?);
        let false_limits = FalseLimits::start(rules.clone(), store.clone(), fl_metrics, key_ids);
        let checker = Some(false_limits.clone());
        let leases = LeaseService::new(rules.clone(), store, lease_metrics, settings, checker);
        crate::regions::metrics::RegionMetrics::new(&registry)?;
        App::new(AppParts {
            reports: Arc::new(ReportMetrics::new(&registry)?),
            rules,
            leases,
            false_limits,
            declog,
            registry,
            auth,
        })
    }

    /// The count the heartbeat task keeps up to date (shared with it).
    pub(crate) fn live_nodes_handle(&self) -> Arc<AtomicU32> {
        self.inner.parts.leases.live_nodes_handle()
    }

    /// The lease service's region shares (the region tasks turn them on).
    pub fn shares_handle(&self) -> crate::regions::Shares {
        self.inner.parts.leases.shares()
    }

    /// Agents alive in the region, when known.
    pub(crate) fn live_nodes(&self) -> Option<u32> {
        Some(
            self.inner
                .parts
                .leases
                .live_nodes_handle()
                .load(Ordering::Relaxed),
        )
        .filter(|n| *n > 0)
    }

    /// Drops the node pool's idle keys (run every second by `run`).
    pub fn sweep_pools(&self) {
        self.inner.parts.leases.sweep_pools();
    }

    /// Hands the node pool's unspent tokens back to the store (`run`, as
    /// shutdown begins, then once the server has drained).
    pub async fn hand_back_pool(&self) -> crate::leases::HandedBack {
        self.inner.parts.leases.hand_back().await
    }

    /// Keys the node pool holds (for tests).
    pub fn pooled_keys(&self) -> usize {
        self.inner.parts.leases.pooled_keys()
    }

    /// The keyed hash that names keys (in labels, the decision log, explain).
    pub(crate) fn key_ids(&self) -> &meshlimit_core::secret::KeyIds {
        self.inner.parts.leases.metrics().key_ids()
    }

    /// The API's own metrics.
    pub(crate) fn metrics(&self) -> &ApiMetrics {
        &self.inner.metrics
    }

    /// Brings the time-dependent gauges up to date (every scrape and every
    /// second): the most rejected keys, the trial's, the false-limit ratios,
    /// and what the filters' reports feed.
    pub fn refresh_metrics(&self) {
        let parts = &self.inner.parts;
        parts.leases.metrics().refresh_top_keys();
        parts.false_limits.metrics().refresh();
        parts.reports.refresh(parts.rules.get().as_deref());
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
                self.inner.parts.auth.check(&parts)?;
                lease::handle(self, decode(&read_body(&parts, body).await?)?).await
            }
            wire::SYNC_PATH => {
                allow(&parts, &[Method::POST])?;
                self.inner.parts.auth.check(&parts)?;
                sync::handle(self, decode(&read_body(&parts, body).await?)?)
            }
            wire::RULES_PATH => {
                allow(&parts, &[Method::GET, Method::HEAD])?;
                self.inner.parts.auth.check(&parts)?;
                rules::handle(self, &parts)
            }
            wire::DECISIONS_PATH => {
                allow(&parts, &[Method::POST])?;
                self.inner.parts.auth.check(&parts)?;
                decisions::decisions(self, decode(&read_body(&parts, body).await?)?)
            }
            EXPLAIN_PATH => {
                allow(&parts, &[Method::GET])?;
                self.inner.parts.auth.check_operator(&parts)?;
                explain::explain(self, &parts).await
            }
            HOT_PATH => {
                allow(&parts, &[Method::GET])?;
                self.inner.parts.auth.check_operator(&parts)?;
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
