//! The real components a run needs: redis-server (one, or a Redis Cluster) and M
//! release agents on it, started through the test harness (`meshlimit-tests`), on
//! free loopback ports, stopped when the stack is dropped.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use meshlimit_tests::{Agent, AgentOptions, RedisCluster, RedisServer};

use crate::error::SimError;
use crate::scenario::{Scenario, Store};

/// Redis commands by name (`INFO commandstats` calls) on one node.
pub type CommandCounts = BTreeMap<String, u64>;

/// Redis and the agents.
pub struct Stack {
    redis: Redis,
    agents: Vec<Agent>,
    /// The agent command line's extra arguments, for the report.
    pub agent_args: Vec<String>,
}

enum Redis {
    Single(RedisServer),
    Cluster(RedisCluster),
}

/// Agent arguments every run gets unless the scenario sets them: a store
/// deadline that a loaded 2-core machine can meet (the default, 3 ms, is for a
/// production node), and quiet logs.
pub(crate) const AGENT_DEFAULTS: [(&str, &str); 2] =
    [("--store-deadline-ms", "500"), ("--log", "warn")];

impl Stack {
    /// Starts Redis and the scenario's agents; fails with the harness's message.
    pub fn start(s: &Scenario) -> Result<Stack, SimError> {
        let bin = meshlimit_tests::agent_bin();
        if !bin.exists() {
            return Err(SimError::Start {
                what: "the agents".into(),
                detail: format!("{} does not exist: run `make build` first", bin.display()),
            });
        }
        let redis = guarded("redis-server", || match s.store {
            Store::Redis => Redis::Single(RedisServer::start()),
            Store::Cluster(n) => Redis::Cluster(RedisCluster::start(n)),
        })?;
        let url = match &redis {
            Redis::Single(r) => r.url(),
            Redis::Cluster(c) => c.url(),
        };
        let mut agent_args = s.agent_args.clone();
        for (flag, value) in AGENT_DEFAULTS {
            if !agent_args.iter().any(|a| a == flag) {
                agent_args.extend([flag.to_string(), value.to_string()]);
            }
        }
        let mut agents = Vec::with_capacity(s.agents);
        for i in 0..s.agents {
            let opts = agent_args
                .iter()
                .fold(AgentOptions::new(&s.rules).store(url.clone()), |o, a| {
                    o.arg(a.clone())
                });
            agents.push(guarded(&format!("agent {i}"), || {
                let mut agent = Agent::start_with(opts);
                agent.wait_ready(std::time::Duration::from_secs(20));
                agent
            })?);
        }
        Ok(Stack {
            redis,
            agents,
            agent_args,
        })
    }

    /// The agents' listen ports.
    pub fn agent_ports(&self) -> Vec<u16> {
        self.agents.iter().map(Agent::port).collect()
    }

    /// Command counts of every Redis node, in node order.
    pub fn command_counts(&self) -> Result<Vec<CommandCounts>, SimError> {
        let nodes = match &self.redis {
            Redis::Single(_) => 1,
            Redis::Cluster(c) => c.ports().len(),
        };
        (0..nodes)
            .map(|node| {
                let text = guarded("INFO commandstats", || {
                    let reply = match &self.redis {
                        Redis::Single(r) => r.cmd(&["INFO", "commandstats"]),
                        Redis::Cluster(c) => c.cmd(node, &["INFO", "commandstats"]),
                    };
                    reply.text().unwrap_or_default()
                })?;
                Ok(parse_commandstats(&text))
            })
            .collect()
    }

    /// `/metrics` of every agent (empty text for one that does not answer).
    pub fn agent_metrics(&self) -> Vec<String> {
        self.agents
            .iter()
            .map(|a| guarded("agent metrics", || a.metrics()).unwrap_or_default())
            .collect()
    }

    /// A description of the store, for the report.
    pub fn store_line(&self) -> String {
        match &self.redis {
            Redis::Single(r) => format!("redis-server on {}", r.addr()),
            Redis::Cluster(c) => format!("Redis Cluster of {} masters", c.ports().len()),
        }
    }
}

/// Lease-script calls between two counts: EVALSHA (and its read-only form),
/// which the agent uses for the lease script alone. Its other scripts
/// (heartbeat, the false-limit SLI's peeks, the region exchange, trials) go as
/// EVAL and are not the lease path's cost; the lease script goes as EVAL only
/// after a NOSCRIPT, once per node and restart.
pub fn script_calls(before: &CommandCounts, after: &CommandCounts) -> u64 {
    ["evalsha", "evalsha_ro"]
        .iter()
        .map(|name| {
            let get = |c: &CommandCounts| c.get(*name).copied().unwrap_or(0);
            get(after).saturating_sub(get(before))
        })
        .sum()
}

/// The sum of every sample of the metric `name` (all label sets) in Prometheus text.
impl Stack {
    /// Waits until the agents have checked or skipped every 429 handed to
    /// them: their counts stand still for a second (at most 30 s).
    pub fn wait_for_false_limit_checks(&self) {
        let seen = || -> f64 {
            self.agent_metrics()
                .iter()
                .map(|m| {
                    metric_sum(m, "meshlimit_false_limit_checks_total")
                        + metric_sum(m, "meshlimit_false_limit_checks_skipped_total")
                })
                .sum()
        };
        let start = std::time::Instant::now();
        let mut last = seen();
        while start.elapsed() < std::time::Duration::from_secs(30) {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let now = seen();
            if now == last {
                return;
            }
            last = now;
        }
    }
}

pub fn metric_sum(text: &str, name: &str) -> f64 {
    metric_sum_of(text, name, "")
}

/// The sum of the samples of the metric `name` whose labels include `label`
/// (such as `kind="denied"`; empty: every sample).
pub fn metric_sum_of(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => {
                    let (labels, value) = labelled.split_once('}')?;
                    if !labels.split(',').any(|l| label.is_empty() || l == label) {
                        return None;
                    }
                    value
                }
                None if rest.starts_with(' ') && label.is_empty() => rest,
                None => return None,
            };
            value.trim().parse::<f64>().ok()
        })
        .sum()
}

/// `cmdstat_evalsha:calls=12,usec=...` lines into counts by command.
pub fn parse_commandstats(text: &str) -> CommandCounts {
    text.lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_string(), calls.parse().ok()?))
        })
        .collect()
}

/// Runs a harness call, turning its panic (how the harness reports a failed
/// start) into an error.
fn guarded<T>(what: &str, f: impl FnOnce() -> T) -> Result<T, SimError> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        let detail = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the harness panicked".into());
        SimError::Start {
            what: what.to_string(),
            detail,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_are_read_and_scripts_counted() {
        let before = parse_commandstats("# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5\r\n");
        let after = parse_commandstats(
            "cmdstat_evalsha:calls=25,usec=9,usec_per_call=1\r\ncmdstat_eval:calls=2,usec=1\r\ncmdstat_info:calls=3",
        );
        assert_eq!(after.get("info"), Some(&3));
        // The lease script only: the two EVALs (other scripts) are left out.
        assert_eq!(script_calls(&before, &after), 15);
    }

    #[test]
    fn metric_samples_are_summed_over_labels() {
        let text = "# HELP x\nmeshlimit_t_total{rule=\"a\"} 3\nmeshlimit_t_total{rule=\"b\"} 4.5\nmeshlimit_t_total_other 9\nmeshlimit_u 1\n";
        assert_eq!(metric_sum(text, "meshlimit_t_total"), 7.5);
        assert_eq!(metric_sum(text, "meshlimit_u"), 1.0);
        assert_eq!(metric_sum_of(text, "meshlimit_t_total", "rule=\"b\""), 4.5);
        assert_eq!(metric_sum_of(text, "meshlimit_u", "rule=\"b\""), 0.0);
    }
}
