//! The reference filters for `make bench`, in one module chosen by the plugin
//! configuration (`{"mode": "empty"}`, `{"mode": "floor", "header": "x-bench-key"}`, …):
//!
//! * `empty` (configuration (f)): every callback returns `Continue`. What any
//!   proxy-wasm filter costs Envoy before it does anything.
//! * `floor` (configuration (e)): reads one request header, then one shared-data
//!   get and one CAS set of a counter keyed by that header's value, then
//!   `Continue`. The least a Wasm limiter that keeps shared state can do per
//!   request, so meshlimit's filter is measured against it.
//! * `all_headers`, `properties`, `response_headers`, `filter_state`
//!   (attribution runs): the floor plus one more thing meshlimit's filter does
//!   per request: fetching every request header (not one), reading the two
//!   stream properties it uses (`source.address`, `xds.route_name`), adding
//!   two response headers (the RateLimit fields), or setting the three
//!   filter-state properties the access log prints (rule, decision, key id).
//!   Each one's cost is its difference from the floor.
//! * `callout` (configuration (kf)): the floor, then one HTTP call a request to
//!   `cluster` (`GET path`, by default the agent's `/healthz`), the request
//!   paused until the answer comes. What any filter that waits on a local
//!   service pays in Envoy and on the loopback before it does any work of its
//!   own: the floor of a cold key's wait.
//!
//! Hostcalls are called directly (not through the SDK's trait helpers, which
//! unwrap): a panic would trap the VM and turn the benchmark into an error test.

use std::rc::Rc;
use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, MapType};
use serde::Deserialize;

/// The plugin configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FloorConfig {
    pub mode: Mode,
    /// The request header the `floor` mode reads.
    pub header: String,
    /// The cluster the `callout` mode calls.
    pub cluster: String,
    /// The path it asks for (`GET`).
    pub path: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    Empty,
    Floor,
    AllHeaders,
    Properties,
    ResponseHeaders,
    FilterState,
    Callout,
}

struct Root {
    config: Rc<FloorConfig>,
}

struct Http {
    /// The header's name, copied for each request: the one allocation a
    /// request the floor has made since its first run, kept so its counts
    /// stay comparable with the results measured against it.
    header: String,
    config: Rc<FloorConfig>,
}

/// A plugin configuration that is not a [`FloorConfig`].
#[derive(Debug, thiserror::Error)]
#[error("floor filter configuration: {0}")]
pub struct ConfigError(serde_json::Error);

/// Shared-data keys are this prefix plus the header's value.
const KEY_PREFIX: &str = "bench.floor.";

impl Default for FloorConfig {
    fn default() -> Self {
        Self {
            mode: Mode::Floor,
            header: "x-bench-key".into(),
            cluster: "meshlimit_agent".into(),
            path: "/healthz".into(),
        }
    }
}

impl FloorConfig {
    /// Parses the plugin configuration; empty means the default (`floor`).
    pub fn parse(bytes: Option<&[u8]>) -> Result<Self, ConfigError> {
        match bytes {
            Some(b) if !b.iter().all(u8::is_ascii_whitespace) => {
                serde_json::from_slice(b).map_err(ConfigError)
            }
            _ => Ok(Self::default()),
        }
    }
}

impl Context for Root {}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        let bytes = hostcalls::get_buffer(BufferType::PluginConfiguration, 0, usize::MAX)
            .ok()
            .flatten();
        match FloorConfig::parse(bytes.as_deref()) {
            Ok(config) => {
                self.config = Rc::new(config);
                true
            }
            Err(e) => {
                let _ = hostcalls::log(proxy_wasm::types::LogLevel::Error, &e.to_string());
                false
            }
        }
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Http {
            header: self.config.header.clone(),
            config: Rc::clone(&self.config),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// The `callout` mode's deadline: far above a loopback round trip, so a
/// request is never let go early.
const CALLOUT_TIMEOUT: Duration = Duration::from_secs(1);

impl Context for Http {
    /// The `callout` mode's answer (or its timeout): the request goes on.
    fn on_http_call_response(
        &mut self,
        _token: u32,
        _headers: usize,
        _body: usize,
        _trailers: usize,
    ) {
        let _ = hostcalls::resume_http_request();
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let header = self.header.as_str();
        match self.config.mode {
            Mode::Empty => {}
            Mode::Floor | Mode::ResponseHeaders => floor(one_header(header)),
            Mode::AllHeaders => {
                let all = hostcalls::get_map_bytes(MapType::HttpRequestHeaders).unwrap_or_default();
                let value = all.into_iter().find(|(n, _)| n == header).map(|(_, v)| v);
                floor(value.unwrap_or_default());
            }
            Mode::Properties => {
                for path in [vec!["source", "address"], vec!["xds", "route_name"]] {
                    let _ = hostcalls::get_property(path);
                }
                floor(one_header(header));
            }
            Mode::Callout => {
                floor(one_header(header));
                let headers = vec![
                    (":method", "GET"),
                    (":path", self.config.path.as_str()),
                    (":authority", "meshlimit-agent"),
                ];
                let sent = hostcalls::dispatch_http_call(
                    &self.config.cluster,
                    headers,
                    None,
                    Vec::new(),
                    CALLOUT_TIMEOUT,
                );
                // A call Envoy refused lets the request go on, unwaited.
                if sent.is_ok() {
                    return Action::Pause;
                }
            }
            Mode::FilterState => {
                floor(one_header(header));
                // As meshlimit's filter names a decision: values of the same
                // lengths (a rule name, an outcome, a 32-hex-digit key id).
                let state = [
                    ("meshlimit_rule", "bench-lease"),
                    ("meshlimit_decision", "allowed"),
                    ("meshlimit_key_id", "0123456789abcdef0123456789abcdef"),
                ];
                for (name, value) in state {
                    let _ = hostcalls::set_property(vec![name], Some(value.as_bytes()));
                }
            }
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if self.config.mode == Mode::ResponseHeaders {
            let fields = [
                ("ratelimit-policy", "\"bench\";q=10000000;w=1"),
                ("ratelimit", "\"bench\";r=9999999;t=1"),
            ];
            for (name, value) in fields {
                let _ = hostcalls::add_map_value(MapType::HttpResponseHeaders, name, value);
            }
        }
        Action::Continue
    }
}

fn one_header(name: &str) -> Vec<u8> {
    hostcalls::get_map_value_bytes(MapType::HttpRequestHeaders, name)
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// One shared-data get and one CAS set of a counter keyed by the header's
/// value. A lost CAS race is not retried: the floor is one round of each.
fn floor(value: Vec<u8>) {
    let mut key = String::with_capacity(KEY_PREFIX.len() + value.len());
    key.push_str(KEY_PREFIX);
    key.push_str(&String::from_utf8_lossy(&value));
    let (bytes, cas) = hostcalls::get_shared_data(&key).unwrap_or((None, None));
    let count = bytes
        .and_then(|b| <[u8; 8]>::try_from(b.as_slice()).ok())
        .map_or(0, u64::from_le_bytes);
    let _ = hostcalls::set_shared_data(&key, Some(&count.wrapping_add(1).to_le_bytes()), cas);
}

// The SDK's entry point exports `_initialize` (`#[no_mangle]`) and calls the WASI
// constructors in an `unsafe` block; that is the only unsafe code here.
#[allow(unsafe_code)]
mod entry {
    use proxy_wasm::traits::RootContext;
    use proxy_wasm::types::LogLevel;

    proxy_wasm::main! {{
        proxy_wasm::set_log_level(LogLevel::Warn);
        proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> {
            Box::new(crate::Root {
                config: std::rc::Rc::new(crate::FloorConfig::default()),
            })
        });
    }}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_selects_the_mode() {
        let parse = |text: Option<&[u8]>| FloorConfig::parse(text).ok();
        assert_eq!(parse(None), Some(FloorConfig::default()));
        let empty = parse(Some(br#"{"mode": "empty"}"#));
        assert_eq!(empty.map(|c| c.mode), Some(Mode::Empty));
        let floor = parse(Some(br#"{"mode": "floor", "header": "x-k"}"#));
        assert_eq!(floor.map(|c| c.header), Some("x-k".to_string()));
        let state = parse(Some(br#"{"mode": "filter_state"}"#));
        assert_eq!(state.map(|c| c.mode), Some(Mode::FilterState));
        let callout = parse(Some(br#"{"mode": "callout"}"#));
        assert_eq!(
            callout.map(|c| (c.mode, c.cluster, c.path)),
            Some((Mode::Callout, "meshlimit_agent".into(), "/healthz".into()))
        );
        assert!(FloorConfig::parse(Some(br#"{"mode": "fast"}"#)).is_err());
    }
}
