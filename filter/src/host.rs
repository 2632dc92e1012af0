//! The one place that calls proxy-wasm hostcalls. Everything else reaches the host
//! through the [`Host`] trait, so the request path is tested natively with a fake.
//! Hostcall errors are mapped, never unwrapped: a panic would trap the whole VM.

use std::time::{Duration, UNIX_EPOCH};

use meshlimit_core::headers::{self, Answer};
use proxy_wasm::hostcalls;
use proxy_wasm::types::{GrpcStatusCode, MetricType, Status};

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

/// The real host: proxy-wasm hostcalls.
pub struct ProxyHost;

impl Host for ProxyHost {
    fn now_ns(&self) -> u64 {
        hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }

    fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
        hostcalls::get_shared_data(key).unwrap_or((None, None))
    }

    fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SharedError> {
        hostcalls::set_shared_data(key, Some(value), cas).map_err(|s| match s {
            Status::CasMismatch => SharedError::CasMismatch,
            _ => SharedError::Host,
        })
    }
}

/// A request to dispatch an HTTP call to the agent; `None` when the host refused
/// it (unknown cluster, bad headers): the caller applies the failure policy.
pub fn dispatch(
    cluster: &str,
    authority: &str,
    auth: Option<&str>,
    path: &str,
    body: &[u8],
    timeout_ms: u64,
) -> Option<u32> {
    let headers = agent_headers(
        "POST",
        path,
        authority,
        auth,
        ("content-type", "application/json"),
    );
    call_agent(cluster, headers, Some(body), timeout_ms)
}

/// A `GET` of `path` from the agent, accepting `accept`; `None` when the host
/// refused to send it.
pub fn fetch(
    cluster: &str,
    authority: &str,
    auth: Option<&str>,
    path: &str,
    accept: &str,
    timeout_ms: u64,
) -> Option<u32> {
    let headers = agent_headers("GET", path, authority, auth, ("accept", accept));
    call_agent(cluster, headers, None, timeout_ms)
}

fn agent_headers<'a>(
    method: &'a str,
    path: &'a str,
    authority: &'a str,
    auth: Option<&'a str>,
    content: (&'a str, &'a str),
) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![
        (":method", method),
        (":path", path),
        (":authority", authority),
        content,
    ];
    if let Some(auth) = auth {
        headers.push((meshlimit_core::secret::AUTH_HEADER, auth));
    }
    headers
}

fn call_agent(
    cluster: &str,
    headers: Vec<(&str, &str)>,
    body: Option<&[u8]>,
    timeout_ms: u64,
) -> Option<u32> {
    hostcalls::dispatch_http_call(
        cluster,
        headers,
        body,
        vec![],
        Duration::from_millis(timeout_ms),
    )
    .ok()
}

/// The status and body of the agent's answer; no status means the call failed
/// (timeout, reset, connection refused).
pub fn call_response(body_size: usize) -> (Option<u32>, Vec<u8>) {
    let status = hostcalls::get_map_value_bytes(
        proxy_wasm::types::MapType::HttpCallResponseHeaders,
        ":status",
    )
    .ok()
    .flatten()
    .and_then(|s| std::str::from_utf8(&s).ok()?.parse().ok());
    let body = hostcalls::get_buffer(
        proxy_wasm::types::BufferType::HttpCallResponseBody,
        0,
        body_size,
    )
    .ok()
    .flatten()
    .unwrap_or_default();
    (status, body)
}

/// A property of the stream as a string (`["source", "address"]`, ...).
pub fn property(path: Vec<&str>) -> Option<String> {
    hostcalls::get_property(path)
        .ok()
        .flatten()
        .and_then(|b| String::from_utf8(b).ok())
}

/// The request headers. Values are read as bytes: Envoy lets non-UTF-8 bytes
/// through in header values, and the SDK's string variant unwraps the conversion,
/// so one hostile header would trap the VM. Names are tokens (ASCII) by then.
pub fn request_headers() -> Vec<(String, Vec<u8>)> {
    hostcalls::get_map_bytes(proxy_wasm::types::MapType::HttpRequestHeaders).unwrap_or_default()
}

pub fn add_response_header(name: &str, value: &str) {
    let _ = hostcalls::add_map_value(proxy_wasm::types::MapType::HttpResponseHeaders, name, value);
}

/// Answers the request locally. A gRPC answer goes through the gRPC form of the
/// hostcall: Envoy's local reply to a gRPC request is then trailers-only (HTTP
/// 200, `content-type: application/grpc`, this `grpc-status`, the message as
/// `grpc-message`, the fields as metadata). Given an HTTP status instead, Envoy
/// would map it (429 becomes UNAVAILABLE) and send the JSON body as the message.
pub fn send_answer(answer: Answer) {
    match answer {
        Answer::Http {
            status,
            fields,
            body,
        } => {
            let headers: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let _ = hostcalls::send_http_response(status, headers, Some(body.as_bytes()));
        }
        Answer::Grpc {
            status,
            message,
            fields,
        } => {
            let metadata: Vec<(&str, &[u8])> =
                fields.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
            let _ = hostcalls::send_grpc_response(grpc_code(status), Some(&message), metadata);
        }
    }
}

fn grpc_code(status: u32) -> GrpcStatusCode {
    match status {
        headers::grpc_status::INVALID_ARGUMENT => GrpcStatusCode::InvalidArgument,
        headers::grpc_status::RESOURCE_EXHAUSTED => GrpcStatusCode::ResourceExhausted,
        headers::grpc_status::UNAVAILABLE => GrpcStatusCode::Unavailable,
        _ => GrpcStatusCode::Unknown,
    }
}

/// Sets a property of the stream; Envoy keeps it as filter state
/// `wasm.<name>`, which an access log prints with `%FILTER_STATE(wasm.<name>:PLAIN)%`.
pub fn set_property(name: &str, value: &str) {
    let _ = hostcalls::set_property(vec![name], Some(value.as_bytes()));
}

pub fn resume_request() {
    let _ = hostcalls::resume_http_request();
}

/// Makes the following hostcalls act for `context_id` (the root context
/// finishing a request that waited on its call).
pub fn act_for(context_id: u32) {
    let _ = hostcalls::set_effective_context(context_id);
}

/// Registers this VM's queue; its root context is told when it is not empty.
pub fn register_queue(name: &str) -> Option<u32> {
    hostcalls::register_shared_queue(name).ok()
}

/// Wakes the queue's root context.
pub fn enqueue(queue: u32) -> bool {
    hostcalls::enqueue_shared_queue(queue, Some(&[1])).is_ok()
}

/// Empties the queue.
pub fn drain_queue(queue: u32) {
    while let Ok(Some(_)) = hostcalls::dequeue_shared_queue(queue) {}
}

pub fn define_counter(name: &str) -> Option<u32> {
    hostcalls::define_metric(MetricType::Counter, name).ok()
}

pub fn define_gauge(name: &str) -> Option<u32> {
    hostcalls::define_metric(MetricType::Gauge, name).ok()
}

pub fn increment(metric: u32, by: i64) {
    let _ = hostcalls::increment_metric(metric, by);
}

pub fn set_tick_period(ms: u64) {
    let _ = hostcalls::set_tick_period(Duration::from_millis(ms));
}

pub fn plugin_configuration() -> Option<Vec<u8>> {
    hostcalls::get_buffer(
        proxy_wasm::types::BufferType::PluginConfiguration,
        0,
        usize::MAX,
    )
    .ok()
    .flatten()
}

/// An in-memory host for native tests, with a hook that simulates another
/// worker writing between a read and a write.
#[cfg(test)]
pub mod fake {
    use std::cell::{Cell, RefCell};
    use std::collections::HashMap;

    use super::{Host, SharedError};

    type Interference = (String, Box<dyn Fn(&[u8]) -> Vec<u8>>);

    #[derive(Default)]
    pub struct FakeHost {
        pub now: Cell<u64>,
        data: RefCell<HashMap<String, (Vec<u8>, u32)>>,
        interfere: RefCell<Option<Interference>>,
    }

    impl FakeHost {
        pub fn interfere_once(&self, key: String, f: impl Fn(&[u8]) -> Vec<u8> + 'static) {
            *self.interfere.borrow_mut() = Some((key, Box::new(f)));
        }

        pub fn slot_count(&self) -> usize {
            self.data.borrow().len()
        }
    }

    impl Host for FakeHost {
        fn now_ns(&self) -> u64 {
            self.now.get()
        }

        fn shared_get(&self, key: &str) -> (Option<Vec<u8>>, Option<u32>) {
            let found = self.data.borrow().get(key).cloned();
            if let Some((k, f)) = self.interfere.borrow_mut().take_if(|(k, _)| k == key) {
                let mut data = self.data.borrow_mut();
                let entry = data.entry(k).or_insert((Vec::new(), 0));
                entry.0 = f(&entry.0);
                entry.1 += 1;
            }
            match found {
                Some((v, cas)) => (Some(v), Some(cas)),
                None => (None, None),
            }
        }

        fn shared_set(&self, key: &str, value: &[u8], cas: Option<u32>) -> Result<(), SharedError> {
            let mut data = self.data.borrow_mut();
            let current = data.get(key).map(|(_, c)| *c);
            if cas.is_some() && cas != current {
                return Err(SharedError::CasMismatch);
            }
            data.insert(key.to_string(), (value.to_vec(), current.unwrap_or(0) + 1));
            Ok(())
        }
    }
}
