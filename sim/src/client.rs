//! A gateway's HTTP/1.1 client to its agent: `POST /v1/lease` with the
//! pipeline's lease request as JSON, and `POST /v1/decisions` with the VM's
//! decision records, pooled keep-alive connections (as Envoy's cluster keeps
//! them), one deadline per call, never retried.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Uri;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use meshlimit_core::wire::{
    DecisionsRequest, LeaseRequest, LeaseResponse, DECISIONS_PATH, LEASE_PATH, WIRE_VERSION,
};

use crate::error::SimError;
use crate::record::CallFailure;

/// One gateway's connection pool to one agent.
pub struct AgentClient {
    client: Client<HttpConnector, Full<Bytes>>,
    uri: Uri,
    decisions_uri: Uri,
    timeout: Duration,
    /// The node's credentials (the harness's agents share one secret).
    auth: String,
}

impl AgentClient {
    /// A client for the agent on 127.0.0.1:`port`; each call has `timeout`.
    pub fn new(port: u16, timeout: Duration) -> Result<AgentClient, SimError> {
        let parse = |path: &str| format!("http://127.0.0.1:{port}{path}").parse::<Uri>();
        let (uri, decisions_uri) = (parse(LEASE_PATH)?, parse(DECISIONS_PATH)?);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(AgentClient {
            client,
            uri,
            decisions_uri,
            timeout,
            auth: meshlimit_tests::agent_auth(),
        })
    }

    /// Sends one lease request; the answer, or why there is none.
    pub async fn lease(&self, req: &LeaseRequest) -> Result<LeaseResponse, CallFailure> {
        let bytes = self.post(&self.uri, req).await?;
        serde_json::from_slice::<LeaseResponse>(&bytes)
            .ok()
            .filter(|r| r.v == WIRE_VERSION)
            .ok_or(CallFailure::Body)
    }

    /// Hands one batch of decision records to the agent.
    pub async fn decisions(&self, req: &DecisionsRequest) -> Result<(), CallFailure> {
        self.post(&self.decisions_uri, req).await.map(|_| ())
    }

    /// POSTs `req` as JSON to `uri` with the node's credentials; the body of a
    /// 200 answer, within the deadline.
    async fn post(&self, uri: &Uri, req: &impl serde::Serialize) -> Result<Bytes, CallFailure> {
        let body = serde_json::to_vec(req).map_err(|_| CallFailure::Body)?;
        let request = hyper::Request::post(uri.clone())
            .header("content-type", "application/json")
            .header("authorization", &self.auth)
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| CallFailure::Transport)?;
        let call = async {
            let resp = self
                .client
                .request(request)
                .await
                .map_err(|_| CallFailure::Transport)?;
            if resp.status() != hyper::StatusCode::OK {
                return Err(CallFailure::Status);
            }
            Ok(resp
                .into_body()
                .collect()
                .await
                .map_err(|_| CallFailure::Transport)?
                .to_bytes())
        };
        tokio::time::timeout(self.timeout, call)
            .await
            .map_err(|_| CallFailure::Timeout)?
    }
}
