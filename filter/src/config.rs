//! The filter's plugin configuration (the JSON string in Envoy's wasm filter
//! `configuration`, or an Istio WasmPlugin's `pluginConfig`). Every field has a
//! default so that `{}` is a working configuration next to a local agent.

use std::time::Duration;

use meshlimit_core::headers::HeaderStyle;
use meshlimit_core::secret::{KeyIds, Secret, SlotHasher};
use serde::{Deserialize, Deserializer};

/// Plugin configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// The Envoy cluster that reaches the node's agent.
    pub agent_cluster: String,
    /// The `:authority` sent to the agent.
    pub agent_authority: String,
    /// Hard deadline of a lease call; never retried. `timeout_ms` in the JSON.
    #[serde(rename = "timeout_ms", deserialize_with = "millis_field")]
    pub timeout: Duration,
    /// Deadline of the once-a-second rules sync (off the request path).
    /// `sync_timeout_ms` in the JSON.
    #[serde(rename = "sync_timeout_ms", deserialize_with = "millis_field")]
    pub sync_timeout: Duration,
    /// How often each VM syncs rules and reports its decisions.
    /// `sync_interval_ms` in the JSON.
    #[serde(rename = "sync_interval_ms", deserialize_with = "millis_field")]
    pub sync_interval: Duration,
    /// Proxies in front of Envoy that append to X-Forwarded-For (0: use the
    /// downstream address only).
    pub trusted_hops: u32,
    /// Which quota fields responses carry.
    pub response_headers: HeaderStyle,
    /// Nodes sharing each limit; the fail-local bucket is the limit × safety
    /// factor / expected nodes. Replaced by the live count the agent reports
    /// (from its region's heartbeats) once it reports one.
    pub expected_nodes: u32,
    pub local_safety_factor: f64,
    /// After a failed agent call, misses skip the agent for this long and take the
    /// failure policy at once (no request waits for a dead agent).
    /// `agent_backoff_ms` in the JSON.
    #[serde(rename = "agent_backoff_ms", deserialize_with = "millis_field")]
    pub agent_backoff: Duration,
    /// Shared-data slots for per-key state: bounds the filter's memory whatever
    /// the key cardinality.
    pub slots: u32,
    /// Cold starts (rules with `cold_start: admit`) a worker may make a
    /// second, as many at once; past it a cold key waits for the agent. 0:
    /// none.
    pub cold_starts_per_second: u32,
    /// A path (e.g. `/.well-known/ratelimit`) where the filter answers a GET
    /// itself with the caller's limits and what is left of them, as far as
    /// this Envoy knows; `None`: no such path.
    pub usage_path: Option<String>,
    /// Usage answers a worker gives a second, as many at once; past it the
    /// usage path answers 429. Each answer reads shared data once per limit
    /// it lists, so this bounds what callers can make the filter do there.
    pub usage_per_second: u32,
    /// Whether this filter hands decision records to the agent's decision log
    /// (default true; false: none are kept, whatever the rules' `log_sample`).
    pub decision_log: bool,
    /// From the deployment's secret (the VM's `MESHLIMIT_SECRET`), never from the
    /// plugin configuration, which Envoy's admin interface shows to anyone on the
    /// pod: the agent's bearer token, and the key of the slot hash.
    #[serde(skip)]
    pub agent_auth: Option<String>,
    #[serde(skip)]
    pub slot_hasher: SlotHasher,
    /// The keyed hash that names keys in the access log, as the agent names
    /// them in metrics.
    #[serde(skip)]
    pub key_ids: KeyIds,
}

impl Default for FilterConfig {
    fn default() -> Self {
        Self {
            agent_cluster: "meshlimit_agent".into(),
            agent_authority: "meshlimit-agent".into(),
            timeout: Duration::from_millis(5),
            sync_timeout: Duration::from_millis(500),
            sync_interval: Duration::from_millis(1_000),
            trusted_hops: 0,
            response_headers: HeaderStyle::Ietf,
            expected_nodes: 1,
            local_safety_factor: meshlimit_core::policy::FAIL_LOCAL_SAFETY,
            agent_backoff: Duration::from_millis(500),
            slots: 16_384,
            cold_starts_per_second: 1_000,
            usage_path: None,
            usage_per_second: 20,
            decision_log: true,
            agent_auth: None,
            slot_hasher: SlotHasher::UNKEYED,
            key_ids: KeyIds::placeholder(),
        }
    }
}

/// Why a plugin configuration is refused: the field, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Not a JSON object, an unknown field, or a field of the wrong type;
    /// `field` is `-` when the text as a whole is wrong.
    #[error("plugin configuration: field {field}: {why}")]
    Json { field: String, why: String },
    /// A count or a duration that must not be zero.
    #[error("plugin configuration: field {field}: must be at least 1")]
    Zero { field: &'static str },
    /// `local_safety_factor` not a finite number above 0.
    #[error("plugin configuration: field local_safety_factor: {value} must be a number above 0")]
    SafetyFactor { value: f64 },
    /// `usage_path` not an absolute path without query or fragment.
    #[error(
        "plugin configuration: field usage_path: `{path}` must be a path starting with `/`, \
         without `?` or `#`"
    )]
    UsagePath { path: String },
}

/// A field given in whole milliseconds (`timeout_ms: 5`).
fn millis_field<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    u64::deserialize(d).map(Duration::from_millis)
}

/// `d` in whole milliseconds, as the host's calls take it (saturating).
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` in nanoseconds, as the filter's clock counts (saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl FilterConfig {
    /// Parses the plugin configuration; empty means defaults.
    pub fn parse(bytes: Option<&[u8]>) -> Result<Self, ConfigError> {
        let mut config: Self = match bytes {
            None => Self::default(),
            Some(b) if b.iter().all(u8::is_ascii_whitespace) => Self::default(),
            Some(b) => {
                let de = &mut serde_json::Deserializer::from_slice(b);
                serde_path_to_error::deserialize(de).map_err(|e| {
                    let field = match e.path().to_string() {
                        p if p == "." => "-".to_string(),
                        p => p,
                    };
                    ConfigError::Json {
                        field,
                        why: e.into_inner().to_string(),
                    }
                })?
            }
        };
        let zero = [
            ("timeout_ms", config.timeout.is_zero()),
            ("sync_interval_ms", config.sync_interval.is_zero()),
            ("slots", config.slots == 0),
            ("expected_nodes", config.expected_nodes == 0),
        ];
        if let Some((field, _)) = zero.into_iter().find(|(_, is_zero)| *is_zero) {
            return Err(ConfigError::Zero { field });
        }
        if !(config.local_safety_factor.is_finite() && config.local_safety_factor > 0.0) {
            return Err(ConfigError::SafetyFactor {
                value: config.local_safety_factor,
            });
        }
        if let Some(p) = &config.usage_path {
            if !p.starts_with('/') || p.contains(['?', '#']) {
                return Err(ConfigError::UsagePath { path: p.clone() });
            }
            // Compared with the request's normalised path.
            config.usage_path = Some(meshlimit_core::path::normalize(p.as_bytes()));
        }
        Ok(config)
    }

    /// Takes what the deployment's secret gives: the agent's bearer token and the
    /// slot hash's key.
    pub fn with_secret(mut self, secret: &Secret) -> Self {
        self.agent_auth = Some(format!("Bearer {}", secret.agent_token()));
        self.slot_hasher = secret.slot_hasher();
        self.key_ids = secret.key_ids();
        self
    }

    /// The share of a rule's limit this node may admit on its own when the
    /// limiter is unreachable.
    pub fn local_share(&self) -> f64 {
        self.local_safety_factor / f64::from(self.expected_nodes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_share_is_the_safety_factor_over_the_expected_nodes() {
        let c = FilterConfig::parse(Some(
            br#"{"local_safety_factor": 2.0, "expected_nodes": 8}"#,
        ))
        .unwrap();
        assert_eq!(c.local_share(), 0.25);
    }

    #[test]
    fn empty_means_defaults_and_typos_are_refused() {
        assert_eq!(FilterConfig::parse(None), Ok(FilterConfig::default()));
        assert_eq!(
            FilterConfig::parse(Some(b"  ")),
            Ok(FilterConfig::default())
        );
        let c = FilterConfig::parse(Some(br#"{"timeout_ms": 7, "response_headers": "legacy"}"#))
            .unwrap();
        assert_eq!(
            (c.timeout, c.response_headers),
            (Duration::from_millis(7), HeaderStyle::Legacy)
        );
        let c = FilterConfig::parse(Some(br#"{"usage_path": "/.well-known/ratelimit"}"#)).unwrap();
        assert_eq!(c.usage_path.as_deref(), Some("/.well-known/ratelimit"));
        assert!(FilterConfig::default().decision_log);
        let c = FilterConfig::parse(Some(br#"{"decision_log": false}"#)).unwrap();
        assert!(!c.decision_log);
    }

    #[test]
    fn the_deployed_millisecond_fields_become_durations() {
        let c = FilterConfig::parse(Some(
            br#"{"timeout_ms": 50, "sync_timeout_ms": 250, "sync_interval_ms": 2000, "agent_backoff_ms": 1500}"#,
        ))
        .unwrap();
        assert_eq!(
            (c.timeout, c.sync_timeout, c.sync_interval, c.agent_backoff),
            (
                Duration::from_millis(50),
                Duration::from_millis(250),
                Duration::from_secs(2),
                Duration::from_millis(1_500)
            )
        );
        // The Rust names are not the configuration's.
        assert!(FilterConfig::parse(Some(br#"{"timeout": 50}"#)).is_err());
        assert_eq!(
            (millis(c.sync_interval), nanos(c.timeout)),
            (2_000, 50_000_000)
        );
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    #[test]
    fn each_refusal_names_its_field_and_why() {
        let err = |text: &str| FilterConfig::parse(Some(text.as_bytes())).unwrap_err();
        // The JSON names, as deployed configurations spell them.
        assert_eq!(
            err(r#"{"timeout": 7}"#).to_string(),
            "plugin configuration: field timeout: unknown field `timeout`, expected one of \
             `agent_cluster`, `agent_authority`, `timeout_ms`, `sync_timeout_ms`, \
             `sync_interval_ms`, `trusted_hops`, `response_headers`, `expected_nodes`, \
             `local_safety_factor`, `agent_backoff_ms`, `slots`, `cold_starts_per_second`, `usage_path`, `usage_per_second`, `decision_log` at line 1 column 10"
        );
        assert_eq!(
            err(r#"{"timeout_ms": "5ms"}"#).to_string(),
            "plugin configuration: field timeout_ms: invalid type: string \"5ms\", expected u64 at line 1 column 20"
        );
        assert_eq!(err("true").to_string().split(':').nth(1), Some(" field -"));
        for (text, field) in [
            (r#"{"timeout_ms": 0}"#, "timeout_ms"),
            (r#"{"sync_interval_ms": 0}"#, "sync_interval_ms"),
            (r#"{"slots": 0}"#, "slots"),
            (r#"{"expected_nodes": 0}"#, "expected_nodes"),
        ] {
            assert_eq!(err(text), ConfigError::Zero { field }, "{text}");
        }
        assert_eq!(
            err(r#"{"local_safety_factor": 0}"#).to_string(),
            "plugin configuration: field local_safety_factor: 0 must be a number above 0"
        );
        assert_eq!(
            err(r#"{"usage_path": "usage"}"#),
            ConfigError::UsagePath {
                path: "usage".into()
            }
        );
        assert_eq!(
            err(r#"{"usage_path": "/u?x"}"#).to_string(),
            "plugin configuration: field usage_path: `/u?x` must be a path starting with `/`, without `?` or `#`"
        );
    }
}
