//! The real agent binary ([`agent_bin`]: the test build's under `cargo test`),
//! started per test.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use crate::http::{get, try_request};
use crate::process::Proc;
use crate::rules_dir::RulesDir;
use crate::wait::{wait_for, Probe};
use crate::{agent_bin, free_port, temp_dir};

/// The agent's store deadline in the harness (`--store-deadline-ms`),
/// unless a test sets its own. The agent ships 3 ms, which a loaded 2-core
/// machine misses now and then; a missed store call is decided by the rule's
/// failure policy, and a test that counts admissions exactly would take that
/// for a wrong limit. It stays below the filter's [`crate::TEST_TIMEOUT_MS`],
/// so the agent answers (with the policy, if it must) before the filter gives
/// up on the call.
pub const TEST_STORE_DEADLINE_MS: u64 = 2_000;

/// How to start an agent. `AgentOptions::new(rules).store(url)`.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub rules: String,
    /// The rules file's name in the ConfigMap-like directory.
    pub rules_file_name: String,
    /// `--store` (none: the agent's default, the in-memory store).
    pub store: Option<String>,
    /// `--region`.
    pub region: Option<String>,
    /// More command-line arguments, after the ones above.
    pub args: Vec<String>,
    /// `--store-deadline-ms`: [`TEST_STORE_DEADLINE_MS`] unless the test's
    /// own arguments set it, or `None` for the agent's shipped deadline
    /// ([`AgentOptions::shipped_store_deadline`]).
    pub store_deadline_ms: Option<u64>,
    /// Environment variables for the agent. Every other `MESHLIMIT_*` variable of
    /// the test process is removed, so the agent sees only what the test chose
    /// (and `MESHLIMIT_SECRET` = [`crate::TEST_SECRET`], `MESHLIMIT_OPERATOR_TOKEN`
    /// = [`crate::TEST_OPERATOR_TOKEN`], which these override).
    pub env: Vec<(String, String)>,
    /// Listen port; a free one when `None`.
    pub port: Option<u16>,
    /// Another binary in place of the release agent (for harness tests).
    pub binary: Option<PathBuf>,
    /// How long `start` waits for `GET /healthz` to answer 200.
    pub start_timeout: Duration,
}

impl AgentOptions {
    pub fn new(rules_yaml: &str) -> AgentOptions {
        AgentOptions {
            rules: rules_yaml.to_string(),
            rules_file_name: "rules.yaml".to_string(),
            store: None,
            region: None,
            args: Vec::new(),
            store_deadline_ms: Some(TEST_STORE_DEADLINE_MS),
            env: Vec::new(),
            port: None,
            binary: None,
            start_timeout: Duration::from_secs(20),
        }
    }

    pub fn store(mut self, store: impl Into<String>) -> Self {
        self.store = Some(store.into());
        self
    }

    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.region = Some(region.into());
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// The agent's own store deadline (3 ms), not the harness's: for the
    /// tests of a store that stalls or fails over, where the deadline is
    /// what is tested.
    pub fn shipped_store_deadline(mut self) -> Self {
        self.store_deadline_ms = None;
        self
    }

    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    pub fn rules_file_name(mut self, name: impl Into<String>) -> Self {
        self.rules_file_name = name.into();
        self
    }
}

/// A running agent on 127.0.0.1, its rules in a ConfigMap-like directory, its
/// stdout and stderr in `agent.stdout.log` / `agent.stderr.log` beside them.
/// Killed on drop.
#[derive(Debug)]
pub struct Agent {
    opts: AgentOptions,
    port: u16,
    rules: RulesDir,
    proc: Option<Proc>,
    // Last: removed after the process is killed.
    dir: tempfile::TempDir,
}

impl Agent {
    /// Starts an agent with these rules and the default (in-memory) store.
    pub fn start(rules_yaml: &str) -> Agent {
        Agent::start_with(AgentOptions::new(rules_yaml))
    }

    pub fn start_with(opts: AgentOptions) -> Agent {
        let dir = temp_dir("agent");
        let rules_dir = dir.path().join("rules");
        std::fs::create_dir(&rules_dir).expect("create the rules directory");
        let rules = RulesDir::create(&rules_dir, &opts.rules_file_name, &opts.rules);
        let port = opts.port.unwrap_or_else(free_port);
        let mut agent = Agent {
            opts,
            port,
            rules,
            proc: None,
            dir,
        };
        agent.launch();
        agent
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port>`
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `base_url()` followed by `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url())
    }

    /// The `--rules` path (a symlink into the ConfigMap-like directory).
    pub fn rules_path(&self) -> PathBuf {
        self.rules.path()
    }

    /// The temporary directory holding the rules and the logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Replaces the rules file by an atomic symlink swap, as a ConfigMap update does.
    /// The agent notices on its own; poll its metrics or `/v1/rules` to see when.
    pub fn update_rules(&mut self, rules_yaml: &str) {
        self.rules.update(rules_yaml);
    }

    /// `GET /metrics` (Prometheus text); panics unless it answers 200.
    pub fn metrics(&self) -> String {
        let resp = get(&self.url("/metrics"), &[]);
        assert_eq!(resp.status, 200, "GET /metrics: {resp:?}");
        resp.body
    }

    /// Waits until `GET /readyz` answers 200 (rules loaded, store answering).
    pub fn wait_ready(&mut self, timeout: Duration) {
        self.wait_status("/readyz", timeout);
    }

    pub fn is_running(&mut self) -> bool {
        self.proc
            .as_mut()
            .is_some_and(|p| p.exit_status().is_none())
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Stops the agent: SIGTERM, then SIGKILL after 5 s. Returns how it exited.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        let status = self
            .proc
            .as_mut()
            .and_then(|p| p.terminate(Duration::from_secs(5)));
        status
    }

    /// Kills the agent at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(proc) = self.proc.as_mut() {
            proc.kill();
        }
    }

    /// Stops the agent if it runs, then starts it again on the same port with the
    /// same options and the current rules, and waits for `/healthz`.
    pub fn restart(&mut self) {
        self.stop();
        self.proc = None;
        self.launch();
    }

    /// Everything the agent wrote to stderr, over all its runs.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir().join("agent.stderr.log")).unwrap_or_default()
    }

    /// Everything the agent wrote to stdout, over all its runs.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir().join("agent.stdout.log")).unwrap_or_default()
    }

    fn launch(&mut self) {
        let binary = self.opts.binary.clone().unwrap_or_else(agent_bin);
        assert!(
            binary.exists(),
            "agent binary {} does not exist: run `make build` first",
            binary.display()
        );
        let mut cmd = Command::new(&binary);
        cmd.arg("run")
            .arg("--rules")
            .arg(self.rules.path())
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port));
        if let Some(store) = &self.opts.store {
            cmd.args(["--store", store]);
        }
        if let Some(region) = &self.opts.region {
            cmd.args(["--region", region]);
        }
        let own_deadline = self.opts.args.iter().any(|a| a == "--store-deadline-ms");
        if let (Some(ms), false) = (self.opts.store_deadline_ms, own_deadline) {
            cmd.args(["--store-deadline-ms", &ms.to_string()]);
        }
        cmd.args(&self.opts.args).current_dir(self.dir.path());
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("MESHLIMIT_") {
                cmd.env_remove(key);
            }
        }
        cmd.env("MESHLIMIT_SECRET", crate::TEST_SECRET);
        cmd.env("MESHLIMIT_OPERATOR_TOKEN", crate::TEST_OPERATOR_TOKEN);
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        self.proc = Some(Proc::spawn("agent", cmd, self.dir.path()));
        self.wait_status("/healthz", self.opts.start_timeout);
    }

    /// Waits until `GET path` answers 200; panics with the agent's stderr if the
    /// agent exits or the time runs out.
    fn wait_status(&mut self, path: &str, timeout: Duration) {
        let url = self.url(path);
        let proc = self.proc.as_mut().expect("agent launched");
        let result = wait_for(timeout, &format!("agent GET {url} = 200"), || {
            if let Some(failed) = proc.exited_probe() {
                return failed;
            }
            match try_request("GET", &url, &[], None) {
                Ok(resp) if resp.status == 200 => Probe::Ready(()),
                _ => Probe::Pending,
            }
        });
        if let Err(why) = result {
            if proc.exit_status().is_some() {
                panic!("{why}"); // already carries the stderr
            }
            let stderr = proc.stderr_tail(40);
            proc.kill();
            panic!("{why}\nagent stderr (last 40 lines):\n{stderr}");
        }
    }
}
