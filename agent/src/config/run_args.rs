//! What `run`'s flags give each part of the agent: durations, lease settings,
//! the server's limits, the store's batching and its Redis credentials.

use std::time::Duration;

use super::{ConfigError, Password, RunArgs, StoreSpec};
use crate::leases::LeaseSettings;
use crate::server::ServerLimits;
use meshlimit_core::policy::{self, LeasePolicy};
use meshlimit_store::redis::client::{Connect, TlsFiles};
use meshlimit_store::redis::BatchConfig;

impl RunArgs {
    pub(crate) fn store_deadline(&self) -> Duration {
        Duration::from_millis(self.store_deadline_ms)
    }

    /// Where the decision log goes (`--decision-log` and its file flags).
    pub(crate) fn decision_log(&self) -> Option<crate::decision_log::Target> {
        use crate::decision_log::Target;
        self.decision_log.as_deref().map(|to| match to {
            "stdout" | "-" => Target::Stdout,
            path => Target::Files {
                path: path.into(),
                max_bytes: self.decision_log_max_bytes,
                files: self.decision_log_files,
            },
        })
    }

    pub(crate) fn rules_poll(&self) -> Duration {
        Duration::from_millis(self.rules_poll_ms)
    }

    pub(crate) fn override_poll(&self) -> Duration {
        Duration::from_millis(self.override_poll_ms)
    }

    pub(crate) fn shutdown_delay(&self) -> Duration {
        Duration::from_millis(self.shutdown_delay_ms)
    }

    pub(crate) fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    /// Lease sizing and handling, from `--lease-ttl-ms`, `--lease-target-ms`,
    /// `--max-inflight` and `--max-keys`.
    pub(crate) fn lease_settings(&self) -> LeaseSettings {
        LeaseSettings {
            policy: LeasePolicy {
                ttl_ns: policy::ms_to_ns(self.lease_ttl_ms),
                period_ns: policy::ms_to_ns(self.lease_target_ms),
            },
            max_inflight: usize::try_from(self.max_inflight).unwrap_or(usize::MAX),
            max_keys: self.max_keys(),
            store_deadline: self.store_deadline(),
        }
    }

    /// What a peer can hold of the server: `--max-connections`, `--header-timeout-ms`.
    pub(crate) fn server_limits(&self) -> ServerLimits {
        ServerLimits {
            max_connections: usize::try_from(self.max_connections).unwrap_or(usize::MAX),
            header_timeout: self.header_timeout(),
        }
    }

    /// The store's Redis pipelines: `--max-batch`, `--store-deadline-ms`.
    pub(crate) fn batch(&self) -> BatchConfig {
        BatchConfig {
            max_batch: usize::try_from(self.max_batch).unwrap_or(usize::MAX),
            deadline: self.store_deadline(),
        }
    }

    pub(crate) fn max_keys(&self) -> usize {
        usize::try_from(self.max_keys).unwrap_or(usize::MAX)
    }

    /// How to reach this region's Redis (`--store`): `--redis-username`, the
    /// password (flag or file) and the TLS files. Files are read now, so a
    /// missing one stops the agent at start.
    pub fn redis_connect(&self) -> Result<Connect, ConfigError> {
        let password = match (&self.redis_password, &self.redis_password_file) {
            (_, Some(path)) => Some(meshlimit_store::spec::read_password_file(path)?),
            (password, None) => password.clone(),
        };
        Ok(Connect {
            username: self.redis_username.clone(),
            password,
            tls: self.store.redis().is_some_and(|t| t.tls),
            tls_files: self.tls_files()?,
        })
    }

    /// How to reach peer region `region` at `spec`: its own credentials
    /// (`--region-credentials-dir`, else `MESHLIMIT_REDIS_*_<REGION>` from `env`),
    /// the shared TLS files.
    pub fn region_connect(
        &self,
        region: &str,
        spec: &StoreSpec,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Connect, ConfigError> {
        let suffix: String = region
            .chars()
            .map(|c| match c {
                '-' | '.' => '_',
                c => c.to_ascii_uppercase(),
            })
            .collect();
        let file = |ext: &str| {
            self.region_credentials_dir
                .as_ref()
                .map(|dir| dir.join(format!("{region}.{ext}")))
                .filter(|p| p.exists())
        };
        let password = match file("password") {
            Some(path) => Some(meshlimit_store::spec::read_password_file(&path)?),
            None => env(&format!("MESHLIMIT_REDIS_PASSWORD_{suffix}"))
                .map(|p| Password::parse(&p))
                .transpose()
                .map_err(|e| ConfigError::Redis(format!("region {region}: {e}")))?,
        };
        let username = match file("username") {
            Some(path) => Some(
                std::fs::read_to_string(&path)
                    .map_err(|e| ConfigError::Redis(format!("{}: {e}", path.display())))?
                    .trim()
                    .to_string(),
            ),
            None => env(&format!("MESHLIMIT_REDIS_USERNAME_{suffix}")),
        };
        Ok(Connect {
            username,
            password,
            tls: spec.redis().is_some_and(|t| t.tls),
            tls_files: self.tls_files()?,
        })
    }

    fn tls_files(&self) -> Result<Option<TlsFiles>, ConfigError> {
        TlsFiles::load(
            self.redis_ca.as_deref(),
            self.redis_cert.as_deref(),
            self.redis_key.as_deref(),
        )
        .map_err(|e| ConfigError::Redis(e.to_string()))
    }
}
