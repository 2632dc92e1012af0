//! Every interaction with the proxy, behind two traits: [`Host`] (the clock and
//! shared data, all the decision code needs) and [`Proxy`] (the rest: the
//! plugin configuration, properties, metrics, queues, agent calls and the
//! current stream's headers and local reply). [`ProxyHost`] is the one
//! implementation that calls proxy-wasm hostcalls; the in-memory host the tests
//! and the simulator run on is `crate::testing::MemoryHost` (feature
//! `test-util`). Hostcall errors are mapped, never unwrapped: a panic would trap
//! the whole VM.

use std::time::Duration;

use meshlimit_core::header_list::{HeaderList, MalformedHeaders};
use meshlimit_core::headers::{self, Answer};
use proxy_wasm::types::GrpcStatusCode;

use crate::config::FilterConfig;

/// Shared data and time, as the request path needs them.
pub trait Host {
    /// Wall-clock nanoseconds (the host's clock; lease expiries are short).
    fn now_ns(&self) -> u64;
    /// A shared-data value and its CAS token.
    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>);
    /// Sets a shared-data value if its CAS token still matches.
    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SharedError>;
}

/// Why a shared-data write did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SharedError {
    /// Another worker wrote first: read again and retry.
    CasMismatch,
    /// Any other host failure.
    Host,
}

/// A call to the node's agent, with the filter's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentCall<'a> {
    pub cluster: &'a str,
    pub authority: &'a str,
    /// The `authorization` header's value (none without a secret).
    pub auth: Option<&'a str>,
    pub path: &'a str,
    pub request: AgentRequest<'a>,
    /// The host's deadline; the call is never retried.
    pub timeout: Duration,
}

/// What a call to the agent sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentRequest<'a> {
    /// A `POST` of this JSON body.
    Post(&'a [u8]),
    /// A `GET`, accepting this content type.
    Get { accept: &'a str },
}

impl<'a> AgentCall<'a> {
    /// A call to the agent as `cfg` reaches it (cluster, authority, token).
    pub fn to_agent(
        cfg: &'a FilterConfig,
        path: &'a str,
        request: AgentRequest<'a>,
        timeout: Duration,
    ) -> Self {
        Self {
            cluster: &cfg.agent_cluster,
            authority: &cfg.agent_authority,
            auth: cfg.agent_auth.as_deref(),
            path,
            request,
            timeout,
        }
    }
}

/// A statistic the filter defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Counter,
    Gauge,
}

/// Everything else the proxy-wasm contexts ask of the proxy. Calls that act on
/// a stream act on the current context: the one the proxy called into, or the
/// one named by the last [`Proxy::act_for`].
pub trait Proxy: Host {
    /// The plugin configuration as given (`None`: none).
    fn plugin_configuration(&self) -> Option<Vec<u8>>;
    /// A variable of the VM's environment (`None`: unset or not UTF-8).
    fn env_var(&self, name: &str) -> Option<String>;
    /// A property as a string (`["node", "id"]`, `["source", "address"]`, ...).
    fn property(&self, path: &[&str]) -> Option<String> {
        self.property_bytes(path)
            .and_then(|b| String::from_utf8(b).ok())
    }
    /// A property as the bytes the proxy gives: a string's bytes, or Envoy's
    /// serialized form of anything else (for `["metadata"]`, the stream's
    /// dynamic metadata as a protobuf `envoy.config.core.v3.Metadata`).
    /// `None` when absent.
    fn property_bytes(&self, path: &[&str]) -> Option<Vec<u8>>;
    /// Sets a property of the stream; Envoy keeps it as filter state
    /// `wasm.<name>`, which an access log prints with
    /// `%FILTER_STATE(wasm.<name>:PLAIN)%`.
    fn set_property(&self, name: &str, value: &str);
    /// How often the root context's `on_tick` runs.
    fn set_tick_period(&self, ms: u64);

    /// Defines a statistic; `None` when the host refused it (then it is not kept).
    fn define_metric(&self, kind: Metric, name: &str) -> Option<u32>;
    fn increment(&self, metric: u32, by: i64);

    /// Registers this VM's queue; its root context is told when it is not empty.
    fn register_queue(&self, name: &str) -> Option<u32>;
    /// Wakes the queue's root context; false when the host refused.
    fn enqueue(&self, queue: u32) -> bool;
    /// Takes the one item a wake put in the queue: the host tells the root
    /// context once per item, so one call each keeps the queue empty.
    fn take_wake(&self, queue: u32);

    /// Dispatches a call; `None` when the host refused it (unknown cluster, bad
    /// headers): the caller applies the failure policy.
    fn dispatch(&self, call: AgentCall<'_>) -> Option<u32>;
    /// The status and body of the answer being delivered; no status means the
    /// call failed (timeout, reset, connection refused).
    fn call_response(&self, body_size: usize) -> (Option<u32>, Vec<u8>);

    /// The current request's headers. Values are bytes: Envoy lets non-UTF-8
    /// bytes through in header values. An error: the host's list could not
    /// be read (the request is refused, never decided without its headers).
    fn request_headers(&self) -> Result<HeaderList, MalformedHeaders>;
    fn add_response_header(&self, name: &str, value: &str);
    /// Answers the current request locally.
    fn send_answer(&self, answer: Answer);
    /// Lets the current (paused) request go on.
    fn resume_request(&self);
    /// Makes the following calls act for `context_id` (the root context
    /// finishing a request that waited on its call).
    fn act_for(&self, context_id: u32);
}

mod proxy;
pub use proxy::ProxyHost;

/// The gRPC status a local answer's code maps to.
pub(crate) fn grpc_code(status: u32) -> GrpcStatusCode {
    match status {
        headers::grpc_status::INVALID_ARGUMENT => GrpcStatusCode::InvalidArgument,
        headers::grpc_status::RESOURCE_EXHAUSTED => GrpcStatusCode::ResourceExhausted,
        headers::grpc_status::UNAVAILABLE => GrpcStatusCode::Unavailable,
        _ => GrpcStatusCode::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_their_grpc_codes() {
        let cases = [
            (
                headers::grpc_status::INVALID_ARGUMENT,
                GrpcStatusCode::InvalidArgument,
            ),
            (
                headers::grpc_status::RESOURCE_EXHAUSTED,
                GrpcStatusCode::ResourceExhausted,
            ),
            (
                headers::grpc_status::UNAVAILABLE,
                GrpcStatusCode::Unavailable,
            ),
            (999, GrpcStatusCode::Unknown),
        ];
        for (status, code) in cases {
            assert_eq!(grpc_code(status) as i32, code as i32, "status {status}");
        }
    }
}
