//! The whole local path in one value: an agent and an Envoy running the filter
//! against it, started in that order and ready only once every worker's filter
//! holds the agent's rules.

use std::time::{Duration, Instant};

use crate::{
    eventually, get, label, sample, within_by, Agent, AgentOptions, Envoy, EnvoyConfig, Response,
    FILTERS_WITHIN, FILTER_SYNC,
};

/// An agent plus an Envoy with the filter.
pub struct Stack {
    pub agent: Agent,
    pub envoy: Envoy,
    /// Filter VMs in the Envoy: one per worker thread, plus the main thread's.
    pub vms: u64,
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
        let stack = Stack { agent, envoy, vms };
        stack.wait_filter_rules();
        stack
    }

    /// Waits until every filter VM holds rules (Envoy is ready before its filters
    /// have synced with the agent, and a worker whose VM has no rules yet lets
    /// every request through).
    pub fn wait_filter_rules(&self) {
        eventually(
            Duration::from_secs(10),
            "every filter VM to hold the agent's rules",
            || self.filter_stat("rules_ready_vms").unwrap_or(0) >= self.vms,
        );
    }

    /// Waits until every filter VM runs the rules version the agent serves now
    /// and answers how long after `since` that was. Each worker's VM loads a new
    /// version at its own sync, so one request decided by the new rules says
    /// nothing of the next, which another worker may decide. The bound is the
    /// filters' ([`FILTERS_WITHIN`]: the agents' and the sync that takes the
    /// version) plus the sync that reports it.
    pub fn wait_filters_on_served_rules(&self, since: Instant, what: &str) -> Duration {
        let bound = FILTERS_WITHIN + FILTER_SYNC;
        within_by(bound, since, what, || {
            let metrics = self.agent.metrics();
            let Some(served) = label(&metrics, "meshlimit_rules_version_info", "version") else {
                return false;
            };
            let on = sample(
                &metrics,
                "meshlimit_filters_on_version",
                &[("version", &served)],
            );
            on == Some(self.vms as f64)
        })
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

    /// Decisions of `rule` by its failure policy, in every form.
    pub fn by_failure_policy(&self, rule: &str) -> u64 {
        ["failed_open", "failed_closed", "failed_local"]
            .iter()
            .map(|o| self.decisions(rule, o))
            .sum()
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
