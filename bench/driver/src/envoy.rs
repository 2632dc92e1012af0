//! Envoy per configuration: the repository's `envoy.yaml`, rendered by the test
//! harness's `render_envoy_config` (ports, plugin configuration, module path, or
//! the wasm filter removed), with Envoy's `local_ratelimit` put in its place for
//! (b). One worker thread, pinned to the Envoy CPU.

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
        Filter::None | Filter::NativeLocal { .. } => config.without_filter(),
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
    let filters = doc
        .get_mut("static_resources")
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
        .and_then(|t| t.get_mut("http_filters"))
        .and_then(Yaml::as_array_mut)
        .ok_or_else(|| BenchError::new("envoy.yaml: no ingress listener with http_filters"))?;
    filters.insert(0, filter);
    serde_saphyr::to_string(&doc).context("render local_ratelimit config")
}

impl Envoy {
    /// Starts Envoy for `scenario` on `cpu` and waits until it is ready: admin
    /// `/ready`, the listener accepting, and (meshlimit) the worker's filter
    /// holding the agent's rules.
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
