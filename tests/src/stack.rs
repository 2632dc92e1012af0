//! The whole local path in one value: an agent and an Envoy running the filter
//! against it, started in that order and ready only once every worker's filter
//! holds the agent's rules.

use std::time::Duration;

use crate::{eventually, get, Agent, AgentOptions, Envoy, EnvoyConfig, Response};

/// An agent plus an Envoy with the filter.
pub struct Stack {
    pub agent: Agent,
    pub envoy: Envoy,
}

impl Stack {
    /// Agent (in-memory store) with `rules`, Envoy with the default plugin config.
    pub fn start(rules: &str) -> Stack {
        Stack::start_with(AgentOptions::new(rules), |c| c)
    }

    /// Custom agent options; `envoy` adjusts the Envoy config (plugin settings).
    pub fn start_with(
        agent: AgentOptions,
        envoy: impl FnOnce(EnvoyConfig) -> EnvoyConfig,
    ) -> Stack {
        let agent = Agent::start_with(agent);
        let config = envoy(EnvoyConfig::new(agent.port()));
        // One VM per worker thread, plus one on the main thread.
        let vms = u64::from(config.concurrency) + 1;
        let envoy = Envoy::start_with(config);
        let stack = Stack { agent, envoy };
        stack.wait_filter_rules(vms);
        stack
    }

    /// Waits until `vms` filter VMs hold rules (Envoy is ready before its filters
    /// have synced with the agent, and a worker whose VM has no rules yet lets
    /// every request through).
    pub fn wait_filter_rules(&self, vms: u64) {
        eventually(
            Duration::from_secs(10),
            "every filter VM to hold the agent's rules",
            || self.filter_stat("rules_ready_vms").unwrap_or(0) >= vms,
        );
    }

    /// One of the filter's own Envoy stats ([`Envoy::filter_stat`]).
    pub fn filter_stat(&self, name: &str) -> Option<u64> {
        self.envoy.filter_stat(name)
    }

    /// The filter's count of `outcome` decisions for `rule`.
    pub fn decisions(&self, rule: &str, outcome: &str) -> u64 {
        self.filter_stat(&format!("rule.{rule}.{outcome}"))
            .unwrap_or(0)
    }

    /// `GET path` through Envoy with these headers.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        get(&self.envoy.url(path), headers)
    }

    /// Sends `n` requests and returns their statuses.
    pub fn statuses(&self, n: usize, path: &str, headers: &[(&str, &str)]) -> Vec<u16> {
        (0..n).map(|_| self.get(path, headers).status).collect()
    }
}

/// How many of `statuses` are `status`.
pub fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}
