//! The filter's plugin configuration (the JSON string in Envoy's wasm filter
//! `configuration`, or an Istio WasmPlugin's `pluginConfig`). Every field has a
//! default so that `{}` is a working configuration next to a local agent.

use meshlimit_core::headers::HeaderStyle;
use meshlimit_core::secret::{KeyIds, Secret, SlotHasher};
use serde::Deserialize;

/// Plugin configuration.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilterConfig {
    /// The Envoy cluster that reaches the node's agent.
    pub agent_cluster: String,
    /// The `:authority` sent to the agent.
    pub agent_authority: String,
    /// Hard deadline of a lease call; never retried.
    pub timeout_ms: u64,
    /// Deadline of the once-a-second rules sync (off the request path).
    pub sync_timeout_ms: u64,
    /// How often each VM syncs rules and reports its decisions.
    pub sync_interval_ms: u64,
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
    pub agent_backoff_ms: u64,
    /// Shared-data slots for per-key state: bounds the filter's memory whatever
    /// the key cardinality.
    pub slots: u32,
    /// A path (e.g. `/.well-known/ratelimit`) where the filter answers a GET
    /// itself with the caller's limits and what is left of them, as far as
    /// this Envoy knows; `None`: no such path.
    pub usage_path: Option<String>,
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
            timeout_ms: 5,
            sync_timeout_ms: 500,
            sync_interval_ms: 1_000,
            trusted_hops: 0,
            response_headers: HeaderStyle::Ietf,
            expected_nodes: 1,
            local_safety_factor: 2.0,
            agent_backoff_ms: 500,
            slots: 16_384,
            usage_path: None,
            agent_auth: None,
            slot_hasher: SlotHasher::UNKEYED,
            key_ids: KeyIds::placeholder(),
        }
    }
}

impl FilterConfig {
    /// Parses the plugin configuration; empty means defaults.
    pub fn parse(bytes: Option<&[u8]>) -> Result<Self, String> {
        let mut config: Self = match bytes {
            None => Self::default(),
            Some(b) if b.iter().all(u8::is_ascii_whitespace) => Self::default(),
            Some(b) => {
                serde_json::from_slice(b).map_err(|e| format!("plugin configuration: {e}"))?
            }
        };
        if config.timeout_ms == 0
            || config.slots == 0
            || config.expected_nodes == 0
            || config.sync_interval_ms == 0
        {
            return Err("plugin configuration: timeout_ms, sync_interval_ms, slots and expected_nodes must be at least 1".into());
        }
        if !(config.local_safety_factor.is_finite() && config.local_safety_factor > 0.0) {
            return Err("plugin configuration: local_safety_factor must be above 0".into());
        }
        if let Some(p) = &config.usage_path {
            if !p.starts_with('/') || p.contains(['?', '#']) {
                return Err(format!(
                    "plugin configuration: usage_path `{p}` must be a path starting with `/`, without `?` or `#`"
                ));
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
    fn empty_means_defaults_and_typos_are_refused() {
        assert_eq!(FilterConfig::parse(None), Ok(FilterConfig::default()));
        assert_eq!(
            FilterConfig::parse(Some(b"  ")),
            Ok(FilterConfig::default())
        );
        let c = FilterConfig::parse(Some(br#"{"timeout_ms": 7, "response_headers": "legacy"}"#))
            .unwrap();
        assert_eq!((c.timeout_ms, c.response_headers), (7, HeaderStyle::Legacy));
        assert!(FilterConfig::parse(Some(br#"{"timeout": 7}"#)).is_err());
        assert!(FilterConfig::parse(Some(br#"{"slots": 0}"#)).is_err());
        let c = FilterConfig::parse(Some(br#"{"usage_path": "/.well-known/ratelimit"}"#)).unwrap();
        assert_eq!(c.usage_path.as_deref(), Some("/.well-known/ratelimit"));
        let e = FilterConfig::parse(Some(br#"{"usage_path": "usage"}"#)).unwrap_err();
        assert!(e.contains("usage_path `usage`"), "{e}");
    }
}
