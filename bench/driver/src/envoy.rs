//! Envoy per configuration: the repository's `envoy.yaml`, rendered by the test
//! harness's `render_envoy_config` (ports, plugin configuration, module path, or
//! the wasm filter removed), with Envoy's `local_ratelimit` put in its place for
//! (b), and its `ratelimit` filter with a gRPC cluster to `bench/rls` for the
//! remote check. One worker thread, pinned to the Envoy CPU.

use std::collections::BTreeMap;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use meshlimit_tests::{render_envoy_config, try_request, EnvoyConfig, EnvoyPorts};
use serde_json::Value as Yaml;

use crate::error::{BenchError, Context, Result};
use crate::procs::{wait_for, Pinned};
use crate::scenario::{Filter, Scenario};

/// A running Envoy for one configuration.
pub struct Envoy {
    pub proc: Pinned,
    pub ports: EnvoyPorts,
    /// The command line, for the report.
    pub command: String,
    /// The path the configuration's requests go to.
    path: &'static str,
}

/// The reference filter module (`bench/floor-filter`).
pub fn floor_wasm() -> PathBuf {
    meshlimit_tests::target_dir().join("wasm32-wasip1/release/meshlimit_bench_floor.wasm")
}

/// The config for `scenario`, with Envoy's ports and the agent's port filled in;
/// meshlimit's lease calls get `timeout_ms`.
pub fn render(scenario: &Scenario, ports: &EnvoyPorts, timeout_ms: u64) -> Result<String> {
    let base_path = meshlimit_tests::repo_root().join("envoy.yaml");
    let base = std::fs::read_to_string(&base_path).context(base_path.display())?;
    let config = EnvoyConfig::new(ports.agent);
    let config = match scenario.filter {
        Filter::None | Filter::NativeLocal { .. } | Filter::RemoteCheck(_) => {
            config.without_filter()
        }
        Filter::Meshlimit => config.plugin("timeout_ms", timeout_ms),
        Filter::MeshlimitUnlogged => config
            .plugin("timeout_ms", timeout_ms)
            .plugin("decision_log", false),
        Filter::Floor(mode) => config
            .wasm(floor_wasm())
            .plugin_raw(format!(r#"{{"mode":"{mode}","header":"x-bench-key"}}"#)),
    };
    let yaml = render_envoy_config(&base, ports, &config).context(base_path.display())?;
    match scenario.filter {
        Filter::NativeLocal { per_second } => with_local_ratelimit(&yaml, per_second),
        Filter::RemoteCheck(header) => with_remote_check(&yaml, header, ports.agent, timeout_ms),
        _ => Ok(yaml),
    }
}

/// Puts `envoy.filters.http.local_ratelimit` first in the ingress listener's
/// HTTP filters: a token bucket refilled every 100 ms, enabled and enforced for
/// every request.
fn with_local_ratelimit(yaml: &str, per_second: u64) -> Result<String> {
    let tokens = (per_second / 10).max(1);
    let filter: Yaml = serde_saphyr::from_str(&format!(
        r#"
name: envoy.filters.http.local_ratelimit
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
  stat_prefix: bench_local_ratelimit
  token_bucket: {{ max_tokens: {tokens}, tokens_per_fill: {tokens}, fill_interval: 0.1s }}
  filter_enabled:
    runtime_key: bench_local_ratelimit_enabled
    default_value: {{ numerator: 100, denominator: HUNDRED }}
  filter_enforced:
    runtime_key: bench_local_ratelimit_enforced
    default_value: {{ numerator: 100, denominator: HUNDRED }}
"#
    ))
    .context("local_ratelimit snippet")?;
    let mut doc: Yaml = serde_saphyr::from_str(yaml).context("rendered envoy.yaml")?;
    http_filters(&mut doc)?.insert(0, filter);
    serde_saphyr::to_string(&doc).context("render local_ratelimit config")
}

/// The ingress listener's HTTP connection manager.
fn ingress_manager(doc: &mut Yaml) -> Result<&mut Yaml> {
    doc.get_mut("static_resources")
        .and_then(|s| s.get_mut("listeners"))
        .and_then(Yaml::as_array_mut)
        .and_then(|ls| {
            ls.iter_mut()
                .find(|l| l.get("name").and_then(Yaml::as_str) == Some("ingress"))
        })
        .and_then(|l| l.get_mut("filter_chains"))
        .and_then(|c| c.get_mut(0))
        .and_then(|c| c.get_mut("filters"))
        .and_then(|f| f.get_mut(0))
        .and_then(|f| f.get_mut("typed_config"))
        .ok_or_else(|| BenchError::new("envoy.yaml: no ingress listener"))
}

fn http_filters(doc: &mut Yaml) -> Result<&mut Vec<Yaml>> {
    ingress_manager(doc)?
        .get_mut("http_filters")
        .and_then(Yaml::as_array_mut)
        .ok_or_else(|| BenchError::new("envoy.yaml: the ingress listener has no http_filters"))
}

/// The per-request remote check: `envoy.filters.http.ratelimit` first in the
/// ingress listener's HTTP filters, asking the gRPC service on `port` (cluster
/// `bench_ratelimit`, HTTP/2) about a descriptor `key` = the value of `header`
/// (the ingress route's `rate_limits`) within `timeout_ms`, as meshlimit's
/// lease calls. An error or a late answer admits the request
/// (`failure_mode_deny: false`), counted in `failure_mode_allowed`.
fn with_remote_check(yaml: &str, header: &str, port: u16, timeout_ms: u64) -> Result<String> {
    let snippet = |text: String| -> Result<Yaml> {
        serde_saphyr::from_str(&text).context("ratelimit snippet")
    };
    let filter = snippet(format!(
        r#"
name: envoy.filters.http.ratelimit
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
  domain: bench
  failure_mode_deny: false
  timeout: {secs}.{millis:03}s
  rate_limit_service:
    transport_api_version: V3
    grpc_service: {{ envoy_grpc: {{ cluster_name: bench_ratelimit }} }}
"#,
        secs = timeout_ms / 1000,
        millis = timeout_ms % 1000,
    ))?;
    let limits = snippet(format!(
        "[{{ actions: [{{ request_headers: {{ header_name: {header}, descriptor_key: key }} }}] }}]"
    ))?;
    let cluster = snippet(format!(
        r#"
name: bench_ratelimit
type: STATIC
connect_timeout: 0.25s
typed_extension_protocol_options:
  envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
    "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
    explicit_http_config: {{ http2_protocol_options: {{}} }}
load_assignment:
  cluster_name: bench_ratelimit
  endpoints:
    - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }} }}
"#
    ))?;
    let mut doc: Yaml = serde_saphyr::from_str(yaml).context("rendered envoy.yaml")?;
    http_filters(&mut doc)?.insert(0, filter);
    let route = ingress_manager(&mut doc)?
        .pointer_mut("/route_config/virtual_hosts/0/routes/0/route")
        .and_then(Yaml::as_object_mut)
        .ok_or_else(|| BenchError::new("envoy.yaml: the ingress listener has no route"))?;
    route.insert("rate_limits".into(), limits);
    doc.pointer_mut("/static_resources/clusters")
        .and_then(Yaml::as_array_mut)
        .ok_or_else(|| BenchError::new("envoy.yaml: no clusters"))?
        .push(cluster);
    serde_saphyr::to_string(&doc).context("render ratelimit config")
}

impl Envoy {
    /// Starts Envoy for `scenario` on `cpu` and waits until it is ready: admin
    /// `/ready`, the listener accepting, and (meshlimit) the worker's filter
    /// holding the agent's rules. `agent_port` is the service the filter calls:
    /// the agent, or for the remote check the rate limit service.
    pub fn start(
        scenario: &Scenario,
        agent_port: u16,
        timeout_ms: u64,
        cpu: &str,
        dir: &Path,
    ) -> Result<Envoy> {
        let ports = EnvoyPorts::free(agent_port);
        let config_path = dir.join(format!("envoy-{}.yaml", scenario.id));
        let config = render(scenario, &ports, timeout_ms)?;
        std::fs::write(&config_path, config).context(config_path.display())?;
        let args: Vec<String> = [
            "-c",
            &config_path.to_string_lossy(),
            "--concurrency",
            "1",
            "--disable-hot-restart",
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let binary = meshlimit_tests::envoy_bin();
        let command = format!("taskset -c {cpu} {} {}", binary.display(), args.join(" "));
        let proc = Pinned::spawn(
            &format!("envoy-{}", scenario.id),
            cpu,
            &binary,
            &args,
            &[],
            dir,
        )?;
        let mut envoy = Envoy {
            proc,
            ports,
            command,
            path: scenario.path,
        };
        envoy.wait_ready(scenario.uses_agent())?;
        Ok(envoy)
    }

    pub fn url(&self) -> String {
        self.url_to(self.path)
    }

    /// The listener's URL for `path` (the rules-at-scale runs send a second
    /// load to another path of the same Envoy).
    pub fn url_to(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
    }

    /// Counters and gauges whose name starts with `prefix`.
    pub fn stats(&self, prefix: &str) -> Result<BTreeMap<String, u64>> {
        let url = format!(
            "http://127.0.0.1:{}/stats?filter=^{prefix}",
            self.ports.admin
        );
        let resp = try_request("GET", &url, &[], None).map_err(BenchError::new)?;
        Ok(resp
            .body
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(": ")?;
                Some((name.to_string(), value.trim().parse().ok()?))
            })
            .collect())
    }

    fn wait_ready(&mut self, filter_rules: bool) -> Result<()> {
        let ready = format!("http://127.0.0.1:{}/ready", self.ports.admin);
        let listener = ("127.0.0.1", self.ports.listener);
        let proc = &mut self.proc;
        wait_for(
            Duration::from_secs(30),
            "Envoy /ready and its listener",
            || {
                proc.check_running()?;
                let live = try_request("GET", &ready, &[], None).is_ok_and(|r| r.status == 200);
                Ok((live && TcpStream::connect(listener).is_ok()).then_some(()))
            },
        )?;
        if filter_rules {
            // One VM per worker plus one on the main thread: two with one
            // worker. At least one must hold rules; the second gets a moment.
            let stat = "wasmcustom.meshlimit.rules_ready_vms";
            let ready = |want: u64| {
                move |envoy: &Envoy| -> Result<Option<()>> {
                    Ok(envoy
                        .stats(stat)?
                        .get(stat)
                        .is_some_and(|v| *v >= want)
                        .then_some(()))
                }
            };
            wait_for(
                Duration::from_secs(15),
                "the filter to hold the agent's rules",
                || ready(1)(self),
            )?;
            let _ = wait_for(
                Duration::from_secs(3),
                "every filter VM to hold rules",
                || ready(2)(self),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{remote_check, COLD_HEADER};

    #[test]
    fn the_remote_check_asks_the_service_about_the_cold_header_over_http2() {
        let ports = EnvoyPorts::free(4321);
        let yaml = render(&remote_check(), &ports, 50).unwrap();
        let doc: Yaml = serde_saphyr::from_str(&yaml).unwrap();
        let hcm = "/static_resources/listeners/0/filter_chains/0/filters/0/typed_config";
        let filters = doc.pointer(&format!("{hcm}/http_filters")).unwrap();
        let names: Vec<&str> = filters
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f.get("name")?.as_str())
            .collect();
        assert_eq!(
            names,
            ["envoy.filters.http.ratelimit", "envoy.filters.http.router"]
        );
        let rl = &filters[0]["typed_config"];
        assert_eq!(rl["failure_mode_deny"], false);
        assert_eq!(rl["timeout"], "0.050s");
        let action = format!("{hcm}/route_config/virtual_hosts/0/routes/0/route/rate_limits/0/actions/0/request_headers/header_name");
        assert_eq!(doc.pointer(&action).unwrap(), COLD_HEADER);
        let clusters = doc["static_resources"]["clusters"].as_array().unwrap();
        let rls = clusters
            .iter()
            .find(|c| c["name"] == "bench_ratelimit")
            .unwrap();
        let socket = "/load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address/port_value";
        assert_eq!(rls.pointer(socket).unwrap(), 4321);
        let h2 = "/typed_extension_protocol_options/envoy.extensions.upstreams.http.v3.HttpProtocolOptions/explicit_http_config/http2_protocol_options";
        assert!(rls.pointer(h2).is_some());
    }
}
