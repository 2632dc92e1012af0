//! A scenario file (YAML): the rules, the stack to run them on (gateways, agents,
//! Redis or Redis Cluster, agent flags), the offered load over time, how it is
//! spread over keys and gateways, and a shorter variant for `make test`.

mod load;
mod time;
pub mod virtual_model;

use std::path::Path;
use std::rc::Rc;

use meshlimit_core::rules::{parse_rules, RuleSet};
use meshlimit_filter::config::FilterConfig;
use serde::Deserialize;

pub use load::{Arrivals, Popularity, Rate, Shift, Spread, Traffic};
pub use time::{DurationError, Secs};

use crate::error::{ScenarioError, SimError};

/// What a scenario is, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// Which accuracy target (docs/performance/accuracy.md) the run is checked against.
    #[serde(default)]
    pub target: Target,
    #[serde(default)]
    pub kind: Kind,
    pub duration: Secs,
    /// The start of the steady part: admitted/limit is computed after it.
    #[serde(default = "Scenario::default_warmup")]
    pub warmup: Secs,
    #[serde(default = "Scenario::default_gateways")]
    pub gateways: usize,
    #[serde(default = "Scenario::default_agents")]
    pub agents: usize,
    #[serde(default)]
    pub store: Store,
    /// More `meshlimit-agent run` arguments (`--lease-target-ms 50`, ...).
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// The filter's plugin configuration (JSON fields of `FilterConfig`); the
    /// harness's defaults are a 1 s lease timeout, since accuracy, not latency,
    /// is measured here on a loaded machine.
    #[serde(default)]
    pub filter: serde_json::Map<String, serde_json::Value>,
    #[serde(default = "Scenario::default_seed")]
    pub seed: u64,
    /// The rules file the agents load and the gateways compile, verbatim.
    pub rules: String,
    #[serde(default)]
    pub traffic: Traffic,
    /// The short variant run by `make test`.
    #[serde(default)]
    pub short: Option<Short>,
    /// What only the virtual fleet models (`meshlimit-sim virtual`): its
    /// network and faults. The real-time harness ignores it.
    #[serde(default, rename = "virtual")]
    pub virtual_fleet: virtual_model::Model,
}

/// Overrides for the short variant.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Short {
    pub duration: Option<Secs>,
    pub warmup: Option<Secs>,
    pub gateways: Option<usize>,
    pub agents: Option<usize>,
    pub traffic: Option<Traffic>,
}

/// The accuracy target a scenario is checked against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    /// Admitted within [0.99, 1.005] × limit.
    Exact,
    /// Admitted within ±2% of the limit.
    Leased,
    /// A sliding window: admitted within ±6% of the exact sliding log (the
    /// two-counter window's published average error); wrong decisions, judged
    /// against that log, are stated rather than bounded.
    Sliding,
    /// Only the wrong-decision bound.
    #[default]
    None,
}

/// Load over time, or the race (many parallel asks for one token).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    #[default]
    Load,
    /// `traffic.race_asks` asks at once for a bucket holding one token.
    Race,
}

/// The store the agents use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Store {
    #[default]
    Redis,
    /// A Redis Cluster of this many masters.
    Cluster(usize),
}

/// Overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub short: bool,
    pub duration: Option<f64>,
    pub gateways: Option<usize>,
    pub agents: Option<usize>,
    /// Agent arguments added after the scenario's own.
    pub agent_args: Vec<String>,
}

/// A scenario ready to run: validated, overrides applied, rules compiled.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    pub rules: Rc<RuleSet>,
    pub filter: FilterConfig,
    /// True for the short variant.
    pub short: bool,
}

impl Scenario {
    fn default_warmup() -> Secs {
        Secs(5.0)
    }
    fn default_gateways() -> usize {
        50
    }
    fn default_agents() -> usize {
        4
    }
    fn default_seed() -> u64 {
        1
    }

    /// Reads a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|e| SimError::io(path, e))?;
        Scenario::parse(&text).map_err(|detail| SimError::Scenario {
            file: path.display().to_string(),
            detail,
        })
    }

    /// Parses a scenario's text. Enums are written as YAML maps
    /// (`rate: { steady: 3000 }`), not tags.
    pub fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        serde_saphyr::from_str(text).map_err(|e| ScenarioError::Syntax(Box::new(e)))
    }

    /// Applies the overrides, compiles the rules and checks what the run needs.
    pub fn plan(mut self, o: &Overrides) -> Result<Plan, SimError> {
        if o.short {
            if let Some(s) = self.short.clone() {
                self.duration = s.duration.unwrap_or(self.duration);
                self.warmup = s.warmup.unwrap_or(self.warmup);
                self.gateways = s.gateways.unwrap_or(self.gateways);
                self.agents = s.agents.unwrap_or(self.agents);
                self.traffic = s.traffic.unwrap_or(self.traffic);
            }
        }
        self.duration = o.duration.map(Secs).unwrap_or(self.duration);
        self.gateways = o.gateways.unwrap_or(self.gateways);
        self.agents = o.agents.unwrap_or(self.agents);
        self.agent_args.extend(o.agent_args.iter().cloned());
        let bad = |detail: ScenarioError| SimError::Scenario {
            file: self.name.clone(),
            detail,
        };
        if self.gateways == 0 || self.agents == 0 || self.gateways > u16::MAX.into() {
            return Err(bad(ScenarioError::Fleet));
        }
        if self.duration.0 <= 0.0 || self.warmup.0 >= self.duration.0 {
            return Err(bad(ScenarioError::Duration));
        }
        if matches!(self.store, Store::Cluster(0)) {
            return Err(bad(ScenarioError::EmptyCluster));
        }
        self.traffic.validate().map_err(bad)?;
        let rules = parse_rules(&self.name, &self.rules).map_err(|e| bad(e.into()))?;
        let filter = self.filter_config().map_err(bad)?;
        Ok(Plan {
            scenario: self,
            rules: Rc::new(rules),
            filter,
            short: o.short,
        })
    }

    fn filter_config(&self) -> Result<FilterConfig, ScenarioError> {
        let mut fields = serde_json::Map::new();
        fields.insert("timeout_ms".into(), 1_000.into());
        fields.insert("expected_nodes".into(), self.gateways.into());
        fields.extend(self.filter.clone());
        let text = serde_json::Value::Object(fields).to_string();
        // The harness's deployment secret, as the filter's VM would have it.
        let secret = meshlimit_core::secret::Secret::new(meshlimit_tests::TEST_SECRET.as_bytes())?;
        Ok(FilterConfig::parse(Some(text.as_bytes()))?.with_secret(&secret))
    }
}

#[cfg(test)]
mod tests;
