//! [`ProxyHost`]: the [`Host`] and [`Proxy`] traits over proxy-wasm hostcalls,
//! the only code that calls them. It runs only inside a proxy (a native test
//! binary cannot call hostcalls), so the end-to-end tests through Envoy are its
//! tests, and `make mutants` leaves this file out (`.cargo/mutants.toml`).

use std::time::Duration;

use meshlimit_core::header_list::{HeaderList, MalformedHeaders};
use meshlimit_core::headers::Answer;
use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType, MetricType, Status};

use super::{grpc_code, AgentCall, AgentRequest, Host, Metric, Proxy, SharedError};

/// The hostcalls whose SDK wrappers are not used on the request path (see
/// `ProxyHost::request_headers`, `ProxyHost::set_property` and an HTTP
/// answer in `ProxyHost::send_answer`), declared as the SDK declares them.
mod raw {
    use proxy_wasm::types::{MapType, Status};

    #[link(wasm_import_module = "env")]
    extern "C" {
        pub(super) fn proxy_get_header_map_pairs(
            map_type: MapType,
            return_map_data: *mut *mut u8,
            return_map_size: *mut usize,
        ) -> Status;

        #[allow(clippy::too_many_arguments)]
        pub(super) fn proxy_send_local_response(
            status_code: u32,
            status_code_details_data: *const u8,
            status_code_details_size: usize,
            body_data: *const u8,
            body_size: usize,
            headers_data: *const u8,
            headers_size: usize,
            grpc_status: i32,
        ) -> Status;

        pub(super) fn proxy_get_current_time_nanoseconds(return_time: *mut u64) -> Status;

        pub(super) fn proxy_set_property(
            path_data: *const u8,
            path_size: usize,
            value_data: *const u8,
            value_size: usize,
        ) -> Status;
    }
}

/// The real host: proxy-wasm hostcalls.
pub struct ProxyHost;

impl Host for ProxyHost {
    /// The host's nanoseconds as it gives them (0 if it fails): the SDK's
    /// wrapper makes them a `SystemTime`, which this would turn back into
    /// nanoseconds, on every request and three times on a new key's.
    fn now_ns(&self) -> u64 {
        let mut now: u64 = 0;
        // SAFETY: the host writes one u64 through the pointer, to a local
        // that outlives the call.
        #[allow(unsafe_code)]
        match unsafe { raw::proxy_get_current_time_nanoseconds(&mut now) } {
            Status::Ok => now,
            _ => 0,
        }
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

impl Proxy for ProxyHost {
    fn plugin_configuration(&self) -> Option<Vec<u8>> {
        hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
            .ok()
            .flatten()
    }

    fn env_var(&self, name: &str) -> Option<String> {
        // Envoy's `vm_config.environment_variables`, through WASI.
        std::env::var(name).ok()
    }

    fn property_bytes(&self, path: &[&str]) -> Option<Vec<u8>> {
        hostcalls::get_property(path.to_vec()).ok().flatten()
    }

    /// A one-part path is the name itself (the SDK's serialized path joins
    /// parts with NULs), so nothing is allocated; called directly because the
    /// SDK's `set_property` allocates the path twice and panics on any status
    /// but `Ok` (Envoy answers `NotFound` where no stream is in effect).
    fn set_property(&self, name: &str, value: &str) {
        // SAFETY: both pointers and lengths describe slices borrowed for the
        // whole call; the host copies what it keeps.
        #[allow(unsafe_code)]
        let _ = unsafe {
            raw::proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len())
        };
    }

    fn set_tick_period(&self, ms: u64) {
        let _ = hostcalls::set_tick_period(Duration::from_millis(ms));
    }

    fn define_metric(&self, kind: Metric, name: &str) -> Option<u32> {
        let kind = match kind {
            Metric::Counter => MetricType::Counter,
            Metric::Gauge => MetricType::Gauge,
        };
        hostcalls::define_metric(kind, name).ok()
    }

    fn increment(&self, metric: u32, by: i64) {
        let _ = hostcalls::increment_metric(metric, by);
    }

    fn register_queue(&self, name: &str) -> Option<u32> {
        hostcalls::register_shared_queue(name).ok()
    }

    fn enqueue(&self, queue: u32) -> bool {
        hostcalls::enqueue_shared_queue(queue, Some(&[1])).is_ok()
    }

    fn take_wake(&self, queue: u32) {
        let _ = hostcalls::dequeue_shared_queue(queue);
    }

    fn dispatch(&self, call: AgentCall<'_>) -> Option<u32> {
        let (method, content, body) = match call.request {
            AgentRequest::Post(body) => ("POST", ("content-type", "application/json"), Some(body)),
            AgentRequest::Get { accept } => ("GET", ("accept", accept), None),
        };
        // Room for the token too, so adding it does not move the list.
        let mut headers = Vec::with_capacity(5);
        headers.extend([
            (":method", method),
            (":path", call.path),
            (":authority", call.authority),
            content,
        ]);
        if let Some(auth) = call.auth {
            headers.push((meshlimit_core::secret::AUTH_HEADER, auth));
        }
        hostcalls::dispatch_http_call(call.cluster, headers, body, vec![], call.timeout).ok()
    }

    fn call_response(&self, body_size: usize) -> (Option<u32>, Vec<u8>) {
        let status = hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
            .ok()
            .flatten()
            .and_then(|s| meshlimit_core::text::utf8(&s)?.parse().ok());
        let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
            .ok()
            .flatten()
            .unwrap_or_default();
        (status, body)
    }

    /// The host's one buffer, kept and read in place. The SDK's
    /// `get_map_bytes` would copy every name and value into allocations of
    /// their own (two a header, on every request), and it panics on a status
    /// it does not expect or a name that is not UTF-8; here either is a
    /// refused request.
    fn request_headers(&self) -> Result<HeaderList, MalformedHeaders> {
        let mut data: *mut u8 = std::ptr::null_mut();
        let mut size: usize = 0;
        // SAFETY: on `Ok` the host has written the map into memory it took
        // from this module's `proxy_on_memory_allocate` (the SDK's: a boxed
        // slice of exactly `size` bytes, leaked), so taking it back as a Vec
        // of that length and capacity frees it as it was made. The SDK's own
        // `get_map_bytes` does the same.
        #[allow(unsafe_code)]
        let buf = unsafe {
            match raw::proxy_get_header_map_pairs(MapType::HttpRequestHeaders, &mut data, &mut size)
            {
                Status::Ok if data.is_null() => Vec::new(),
                Status::Ok => Vec::from_raw_parts(data, size, size),
                _ => return Err(MalformedHeaders),
            }
        };
        HeaderList::from_serialized(buf)
    }

    fn add_response_header(&self, name: &str, value: &str) {
        let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value);
    }

    /// A gRPC answer goes through the gRPC form of the hostcall: Envoy's local
    /// reply to a gRPC request is then trailers-only (HTTP 200, `content-type:
    /// application/grpc`, this `grpc-status`, the message as `grpc-message`, the
    /// fields as metadata). Given an HTTP status instead, Envoy would map it (429
    /// becomes UNAVAILABLE) and send the JSON body as the message.
    fn send_answer(&self, answer: Answer) {
        match answer {
            Answer::Http {
                status,
                fields,
                body,
            } => {
                // The fields are already in the form the host reads: handed
                // over as they are, with no copy, and no SDK panic on a
                // status but `Ok`.
                let headers = fields.serialized();
                // SAFETY: the body and the header list are borrowed for the
                // whole call, pointers and lengths taken from the same
                // slices; the host copies them. No details string (null, 0)
                // and no gRPC status (-1), as the SDK's own wrapper sends.
                #[allow(unsafe_code)]
                let _ = unsafe {
                    raw::proxy_send_local_response(
                        status,
                        std::ptr::null(),
                        0,
                        body.as_ptr(),
                        body.len(),
                        headers.as_ptr(),
                        headers.len(),
                        -1,
                    )
                };
            }
            Answer::Grpc {
                status,
                message,
                fields,
            } => {
                let metadata: Vec<(&str, &[u8])> = fields.iter().collect();
                let _ = hostcalls::send_grpc_response(grpc_code(status), Some(&message), metadata);
            }
        }
    }

    fn resume_request(&self) {
        let _ = hostcalls::resume_http_request();
    }

    fn act_for(&self, context_id: u32) {
        let _ = hostcalls::set_effective_context(context_id);
    }
}
