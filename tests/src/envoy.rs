//! Real Envoy, started from a copy of the repository's `envoy.yaml` with its
//! ports (and, if asked, the plugin configuration) rewritten.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use serde_json::{Map, Value as Json};

use crate::http::{get, try_request};
use crate::process::Proc;
use crate::wait::{wait_for, Probe};
use crate::{envoy_bin, filter_wasm, free_port, repo_root, temp_dir};

mod render;

pub use render::render_envoy_config;

/// The access log's file name in an Envoy's directory.
const ACCESS_LOG: &str = "access.log";
const REPLAY_LOG: &str = "replay.log";
/// The listeners' file when they come from a file ([`EnvoyConfig::listeners_from_file`]).
const LDS_FILE: &str = "lds.yaml";

/// Where one Envoy listens and where it finds the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EnvoyPorts {
    /// The proxy listener (10000 in `envoy.yaml`).
    pub listener: u16,
    /// The stand-in backend listener (10001).
    pub backend: u16,
    /// The admin interface (9901).
    pub admin: u16,
    /// The agent, cluster `meshlimit_agent` (8081).
    pub agent: u16,
}

impl EnvoyPorts {
    /// Free ports for Envoy's own listeners; the agent's is given.
    pub fn free(agent: u16) -> EnvoyPorts {
        EnvoyPorts {
            listener: free_port(),
            backend: free_port(),
            admin: free_port(),
            agent,
        }
    }
}

/// The filter's lease deadline in the harness (`timeout_ms`), unless a test
/// sets its own. `envoy.yaml` ships 5 ms, which a loaded 2-core CI machine
/// misses now and then; a missed call is decided by the rule's failure policy,
/// and a test that counts admissions exactly would take that for a wrong
/// limit. The harness's deadline is one only a broken (or stopped) agent
/// misses, whatever runs beside the suite. Tests of deadlines and failures
/// set theirs, or take the shipped one with [`EnvoyConfig::shipped_deadline`].
pub const TEST_TIMEOUT_MS: u64 = 5_000;

/// How to start an Envoy. `EnvoyConfig::new(agent.port()).plugin("timeout_ms", 50)`.
#[derive(Debug, Clone)]
pub struct EnvoyConfig {
    pub agent_port: u16,
    /// Fields set over the plugin configuration JSON of `envoy.yaml`
    /// (`agent_authority` already points at `agent_port`).
    pub plugin: Map<String, Json>,
    /// Replaces the plugin configuration string whole (for malformed-config tests).
    pub plugin_raw: Option<String>,
    /// The filter module; `MESHLIMIT_FILTER_WASM` or the release build by default.
    pub wasm: Option<PathBuf>,
    /// `false` removes the wasm filter: plain Envoy, the baseline.
    pub filter: bool,
    pub concurrency: u32,
    /// The bootstrap to start from, relative to the repository root: `envoy.yaml`
    /// by default; `tests/envoy/istio-*.yaml` reproduce Istio's listeners.
    pub bootstrap: PathBuf,
    /// `MESHLIMIT_SECRET` in Envoy's environment (the filter's VM reads it);
    /// `None` leaves it unset.
    pub secret: Option<String>,
    /// More Envoy arguments (e.g. `["-l", "debug"]`).
    pub args: Vec<String>,
    pub start_timeout: Duration,
    /// The listeners served from a file Envoy watches (its LDS), so a test can
    /// change them while Envoy runs ([`Envoy::roll_filter`]), as a control
    /// plane rolls a new filter out.
    pub listeners_from_file: bool,
    /// Where the file access logs of the bootstrap write (`None`: where it says).
    pub access_log: Option<PathBuf>,
    /// Request headers for a second access log on the listener that has one,
    /// in the JSON lines `meshlimit replay` reads (docs/guide/replay.md);
    /// `None`: no such log.
    pub replay_log_headers: Option<Vec<String>>,
    /// Where that log writes (set by [`Envoy::start_with`]: `replay.log` in
    /// Envoy's directory).
    pub replay_log_path: Option<PathBuf>,
}

impl EnvoyConfig {
    /// The bootstrap's plugin configuration with the harness's lease deadline
    /// ([`TEST_TIMEOUT_MS`]).
    pub fn new(agent_port: u16) -> EnvoyConfig {
        let mut plugin = Map::new();
        plugin.insert("timeout_ms".to_string(), TEST_TIMEOUT_MS.into());
        EnvoyConfig {
            agent_port,
            plugin,
            plugin_raw: None,
            wasm: None,
            filter: true,
            concurrency: 2,
            bootstrap: PathBuf::from("envoy.yaml"),
            secret: Some(crate::TEST_SECRET.to_string()),
            args: Vec::new(),
            start_timeout: Duration::from_secs(30),
            listeners_from_file: false,
            access_log: None,
            replay_log_headers: None,
            replay_log_path: None,
        }
    }

    pub fn plugin(mut self, key: &str, value: impl Into<Json>) -> Self {
        self.plugin.insert(key.to_string(), value.into());
        self
    }

    pub fn plugin_raw(mut self, configuration: impl Into<String>) -> Self {
        self.plugin_raw = Some(configuration.into());
        self
    }

    pub fn wasm(mut self, path: impl Into<PathBuf>) -> Self {
        self.wasm = Some(path.into());
        self
    }

    pub fn without_filter(mut self) -> Self {
        self.filter = false;
        self
    }

    /// Starts from another bootstrap (see [`EnvoyConfig::bootstrap`]).
    pub fn bootstrap(mut self, path: impl Into<PathBuf>) -> Self {
        self.bootstrap = path.into();
        self
    }

    /// Another secret, or none, in the filter's environment.
    pub fn secret(mut self, secret: Option<&str>) -> Self {
        self.secret = secret.map(str::to_string);
        self
    }

    /// The lease deadline the bootstrap ships (`envoy.yaml`: 5 ms), not the
    /// harness's: for tests of what a slow agent or store costs a request.
    pub fn shipped_deadline(mut self) -> Self {
        self.plugin.remove("timeout_ms");
        self
    }

    /// Serves the listeners from a file Envoy watches (see
    /// [`EnvoyConfig::listeners_from_file`]).
    pub fn listeners_from_file(mut self) -> Self {
        self.listeners_from_file = true;
        self
    }

    pub fn concurrency(mut self, workers: u32) -> Self {
        self.concurrency = workers;
        self
    }

    /// Adds the access log `meshlimit replay` reads, with these request
    /// headers (see [`Envoy::replay_log`]).
    pub fn replay_log(mut self, headers: &[&str]) -> Self {
        self.replay_log_headers = Some(headers.iter().map(|h| h.to_string()).collect());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// The module this config loads: `wasm`, else the default, made absolute.
    pub fn wasm_path(&self) -> PathBuf {
        let path = self.wasm.clone().unwrap_or_else(filter_wasm);
        repo_root().join(path)
    }
}

/// A running Envoy, killed on drop. Its config and log (`envoy.stderr.log`) are
/// in its temporary directory.
#[derive(Debug)]
pub struct Envoy {
    ports: EnvoyPorts,
    config_path: PathBuf,
    proc: Proc,
    // Last: removed after the process is killed.
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Envoy from `envoy.yaml` with the filter, talking to the agent on `agent_port`.
    pub fn start(agent_port: u16) -> Envoy {
        Envoy::start_with(EnvoyConfig::new(agent_port))
    }

    /// Starts Envoy; its access log goes to `access.log` in its directory (see
    /// [`Envoy::access_log`]).
    pub fn start_with(mut config: EnvoyConfig) -> Envoy {
        let binary = envoy_bin();
        assert!(
            binary.exists(),
            "Envoy binary {} does not exist: run `make tools` (or set MESHLIMIT_ENVOY)",
            binary.display()
        );
        if config.filter {
            let wasm = config.wasm_path();
            assert!(
                wasm.exists(),
                "filter module {} does not exist: run `make build`",
                wasm.display()
            );
        }
        let base_path = repo_root().join(&config.bootstrap);
        let base = std::fs::read_to_string(&base_path)
            .unwrap_or_else(|e| panic!("read {}: {e}", base_path.display()));
        let ports = EnvoyPorts::free(config.agent_port);
        let dir = temp_dir("envoy");
        config.access_log = Some(dir.path().join(ACCESS_LOG));
        config.replay_log_path = Some(dir.path().join(REPLAY_LOG));
        let yaml = render_envoy_config(&base, &ports, &config)
            .unwrap_or_else(|e| panic!("{}: {e}", base_path.display()));
        let yaml = if config.listeners_from_file {
            listeners_to_file(&yaml, &dir.path().join(LDS_FILE))
        } else {
            yaml
        };
        let config_path = dir.path().join("envoy.yaml");
        std::fs::write(&config_path, yaml).expect("write the Envoy config");

        let mut cmd = Command::new(&binary);
        cmd.arg("-c")
            .arg(&config_path)
            .args(["--concurrency", &config.concurrency.to_string()])
            // No hot restart: no shared memory or domain socket keyed by base id,
            // so any number of Envoys can run side by side.
            .arg("--disable-hot-restart")
            .args(&config.args)
            .env_remove("MESHLIMIT_SECRET")
            .current_dir(repo_root());
        if let Some(secret) = &config.secret {
            cmd.env("MESHLIMIT_SECRET", secret);
        }
        let proc = Proc::spawn("envoy", cmd, dir.path());
        let mut envoy = Envoy {
            ports,
            config_path,
            proc,
            dir,
        };
        envoy.wait_ready(config.start_timeout);
        envoy
    }

    pub fn ports(&self) -> EnvoyPorts {
        self.ports
    }

    /// The proxy listener's port.
    pub fn port(&self) -> u16 {
        self.ports.listener
    }

    pub fn admin_port(&self) -> u16 {
        self.ports.admin
    }

    /// `http://127.0.0.1:<listener><path>`
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.listener)
    }

    /// `http://127.0.0.1:<admin><path>`
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.ports.admin)
    }

    /// Admin `GET /stats` (text, `name: value` per line).
    pub fn stats(&self) -> String {
        let resp = get(&self.admin_url("/stats"), &[]);
        assert_eq!(resp.status, 200, "GET /stats: {resp:?}");
        resp.body
    }

    /// One counter or gauge from [`Envoy::stats`], by its full name.
    pub fn stat(&self, name: &str) -> Option<u64> {
        let stats = self.stats();
        let prefix = format!("{name}: ");
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok())
    }

    /// One of the filter's own stats, by its name after `meshlimit.`
    /// (Envoy shows custom Wasm stats under a `wasmcustom.` prefix).
    pub fn filter_stat(&self, name: &str) -> Option<u64> {
        self.stat(&format!("wasmcustom.meshlimit.{name}"))
    }

    /// Rolls the filter's module out to `wasm` on the listeners of a file
    /// ([`EnvoyConfig::listeners_from_file`]), the way a control plane pushes a
    /// new version: the listeners file is replaced whole (a rename, which
    /// Envoy's watch sees), naming the new module where it named the old.
    pub fn roll_filter(&self, old: &Path, new: &Path) {
        let path = self.dir.path().join(LDS_FILE);
        let text = std::fs::read_to_string(&path).expect("the listeners file");
        let (old, new) = (old.display().to_string(), new.display().to_string());
        assert!(
            text.contains(&old),
            "{} does not name {old}",
            path.display()
        );
        let staged = self.dir.path().join("lds.yaml.next");
        std::fs::write(&staged, text.replace(&old, &new)).expect("write the listeners");
        std::fs::rename(&staged, &path).expect("replace the listeners file");
    }

    /// The generated config file.
    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The access log's lines so far (empty before the first).
    pub fn access_log(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join(ACCESS_LOG))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The file of the access log [`EnvoyConfig::replay_log`] adds.
    pub fn replay_log(&self) -> PathBuf {
        self.dir.path().join(REPLAY_LOG)
    }

    /// Envoy's process id.
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// Envoy's log (its stderr).
    pub fn log(&self) -> String {
        self.proc.stderr()
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.exit_status().is_none()
    }

    /// SIGTERM, then SIGKILL after 5 s.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.proc.terminate(Duration::from_secs(5))
    }

    /// Waits for admin `/ready` to say LIVE and the listener to accept connections.
    fn wait_ready(&mut self, timeout: Duration) {
        let ready_url = self.admin_url("/ready");
        let listener = ("127.0.0.1", self.ports.listener);
        let proc = &mut self.proc;
        let what = format!("Envoy {ready_url} = 200 LIVE");
        let result = wait_for(timeout, &what, || {
            if let Some(failed) = proc.exited_probe() {
                return failed;
            }
            match try_request("GET", &ready_url, &[], None) {
                Ok(r) if r.status == 200 && TcpStream::connect(listener).is_ok() => {
                    Probe::Ready(())
                }
                _ => Probe::Pending,
            }
        });
        if let Err(why) = result {
            let exited = proc.exit_status().is_some();
            let log = proc.stderr_tail(40);
            proc.kill();
            if exited {
                panic!("{why}");
            }
            panic!("{why}\nEnvoy log (last 40 lines):\n{log}");
        }
    }
}

/// Moves the listeners of bootstrap `yaml` to an LDS file at `lds` that Envoy
/// watches, and returns the bootstrap that points at it.
fn listeners_to_file(yaml: &str, lds: &Path) -> String {
    const LISTENER: &str = "type.googleapis.com/envoy.config.listener.v3.Listener";
    let mut doc: Json = serde_saphyr::from_str(yaml).expect("the rendered bootstrap");
    let listeners = doc
        .get_mut("static_resources")
        .and_then(|s| s.as_object_mut())
        .and_then(|s| s.remove("listeners"))
        .expect("static_resources.listeners");
    let resources: Vec<Json> = listeners
        .as_array()
        .expect("a list of listeners")
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["@type"] = LISTENER.into();
            l
        })
        .collect();
    let file = serde_json::json!({ "resources": resources });
    std::fs::write(lds, serde_saphyr::to_string(&file).expect("yaml"))
        .expect("write the listeners");
    // Envoy names itself to a config source: a node id and cluster are needed.
    for field in ["id", "cluster"] {
        if doc["node"][field].is_null() {
            doc["node"][field] = "meshlimit-test".into();
        }
    }
    doc["dynamic_resources"] = serde_json::json!({
        "lds_config": {
            "path_config_source": { "path": lds.display().to_string() },
            "resource_api_version": "V3",
        }
    });
    serde_saphyr::to_string(&doc).expect("yaml")
}

/// `module` with a custom section named `tag` appended, written into `dir`:
/// the same filter, but another module to Envoy (its bytes, so its hash,
/// differ), as a new build is. Envoy picks a plugin's VMs by `vm_id` and the
/// module's hash, so identical bytes would make no new VM.
pub fn rebuilt_module(module: &Path, dir: &Path, tag: &str) -> PathBuf {
    const NAME: &[u8] = b"meshlimit-rollout";
    let mut bytes = std::fs::read(module).expect("the filter module");
    // Section id 0 (custom), its size, then the name's length and the name:
    // every length under 128 is one LEB128 byte.
    assert!(1 + NAME.len() + tag.len() < 128, "tag {tag:?} too long");
    bytes.push(0);
    bytes.push((1 + NAME.len() + tag.len()) as u8);
    bytes.push(NAME.len() as u8);
    bytes.extend_from_slice(NAME);
    bytes.extend_from_slice(tag.as_bytes());
    let path = dir.join(format!("meshlimit_filter-{tag}.wasm"));
    std::fs::write(&path, bytes).expect("write the rebuilt module");
    path
}
