//! The command line of `meshlimit`, the operator's tool: the offline
//! commands (`check-rules`, `schema`, `key-id`, `replay`, `explain`,
//! `import`) and `override`, which acts on a region's agents through their store.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, Parser, Subcommand};
use meshlimit_agent::config::defaults;
use meshlimit_agent::config::{ConfigError, Password, SecretArgs};
use meshlimit_core::secret::KeyIds;
use meshlimit_store::fleet::{Override, OverrideMode};
use meshlimit_store::redis::client::Connect;
use meshlimit_store::redis::{BatchConfig, RedisConfig, RedisStore};
use meshlimit_store::spec::StoreSpec;
use meshlimit_store::FleetState;

/// `meshlimit`: the operator's tool for meshlimit's rules and agents.
#[derive(Debug, Parser)]
#[command(name = "meshlimit", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands, as `--help` lists them.
pub const COMMANDS: &str = "check-rules, schema, key-id, replay, explain, import or override";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a rules file, or a directory of them as the agent loads it:
    /// exit 0 when valid, else print the errors and exit 1 (every check a
    /// rule fails; the first error of a rule that cannot be read at all).
    CheckRules(CheckRulesArgs),
    /// Print the rules file's JSON Schema (the one published as docs/rules.schema.json).
    Schema,
    /// Print the id that metrics, logs and Redis key names use for a key (a keyed
    /// hash: only holders of the deployment's secret can map a key to its id).
    KeyId(KeyIdArgs),
    /// Replay recorded traffic (JSON lines: Envoy's access log, or the agent's decision log)
    /// through NEW (and OLD) offline: per rule what each would reject, and the
    /// keys NEW would newly limit.
    Replay(ReplayArgs),
    /// Which rules a request meets, in evaluation order, each with its key,
    /// limit and mode, and why each other rule does not apply (offline).
    Explain(ExplainArgs),
    /// Convert a peer's rate limit configuration (envoyproxy/ratelimit,
    /// Kuadrant Limitador) to a rules file: refuses what meshlimit cannot
    /// express, lists every approximation it makes.
    Import(ImportArgs),
    /// Act on every agent of a region through the store they share: `shadow`
    /// puts every rule in shadow (counted, never refused), `pin` serves the
    /// rules version before the current one, each until `clear`; `end-trial`
    /// and `hold-trial` end or hold a rules change's trial in shadow. Every
    /// agent applies it within a second or so. Exit 0 done, 1 the store could
    /// not do it or had nothing to act on.
    Override(OverrideArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// The rules to try.
    #[arg(long, value_name = "NEW")]
    pub rules: PathBuf,
    /// The rules running now, to compare with.
    #[arg(long, value_name = "OLD")]
    pub baseline: Option<PathBuf>,
    /// The recorded traffic; `-` reads standard input.
    #[arg(value_name = "LOG")]
    pub log: PathBuf,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
    /// Names keys by the deployment's ids when the secret is given (else by
    /// placeholder ids, which only this report uses).
    #[command(flatten)]
    pub secret: SecretArgs,
}

#[derive(Debug, Clone, Args)]
pub struct ExplainArgs {
    /// The rules file (YAML or JSON).
    #[arg(long, value_name = "PATH")]
    pub rules: PathBuf,
    /// The request's method.
    #[arg(long, default_value = "GET")]
    pub(crate) method: String,
    /// The request's path, as the client sent it (normalised as the filter
    /// does), with its query for `query:` key parts.
    #[arg(long)]
    pub path: String,
    /// A request header, `name: value`; repeatable. `host: NAME` is the
    /// request's authority (for `authority` and `match.authority`).
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub(crate) headers: Vec<(String, String)>,
    /// The client IP the filter would key `client_ip` on.
    #[arg(long, value_name = "IP")]
    pub(crate) client_ip: Option<String>,
    /// The Envoy route name, for rules keyed on `route` or with `match.route`.
    #[arg(long, value_name = "NAME")]
    pub(crate) route: Option<String>,
    /// When the request is decided (UTC, `2026-12-01T09:00:10Z` or
    /// `2026-12-01`), for the schedule window in force; default now.
    #[arg(long, value_name = "INSTANT", value_parser = parse_at)]
    pub(crate) at: Option<u64>,
    /// The upstream cluster's name, for rules with `match.cluster`.
    #[arg(long, value_name = "NAME")]
    pub(crate) cluster: Option<String>,
    /// A claim of the verified JWT, `NAME=VALUE` (`org.id=7`: the claim `id`
    /// inside `org`, as `claim: org.id` reads it), for `claim:` key parts and
    /// plans (as Envoy's jwt_authn filter with `payload_in_metadata: payload`
    /// hands it over); repeatable.
    #[arg(long = "claim", value_name = "NAME=VALUE", value_parser = parse_claim)]
    pub(crate) claims: Vec<(String, String)>,
    /// A dynamic metadata value, `FILTER:FIELD.FIELD=VALUE`
    /// (`envoy.filters.http.jwt_authn:payload.sub=alice`), for `metadata:` key
    /// parts and plans; repeatable.
    #[arg(long = "metadata", value_name = "FILTER:PATH=VALUE", value_parser = parse_metadata)]
    pub(crate) metadata: Vec<(meshlimit_core::metadata::MetadataPath, String)>,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
}

/// Why a value of `explain`'s flags was refused; clap shows it after the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    #[error("`{0}` is not a UTC instant: write 2026-12-01T09:00:10Z or 2026-12-01")]
    Instant(String),
    #[error("`{0}` is not NAME=VALUE (e.g. sub=alice)")]
    Claim(String),
    #[error("`{0}` is not FILTER:FIELD.FIELD=VALUE (e.g. envoy.filters.http.jwt_authn:payload.sub=alice)")]
    Metadata(String),
    /// Of that shape, but a path no filter reads: `why` says what is wrong.
    #[error("`{text}` is not FILTER:FIELD.FIELD=VALUE (e.g. envoy.filters.http.jwt_authn:payload.sub=alice): {why}")]
    MetadataPath {
        text: String,
        why: meshlimit_core::metadata::MetadataPathError,
    },
    #[error("`{0}`: expected `name: value`")]
    Header(String),
}

/// `--at`: a UTC instant as rules files write `expires`, in Unix seconds.
fn parse_at(text: &str) -> Result<u64, FlagValueError> {
    meshlimit_core::rules::expiry::parse_instant(text)
        .ok_or_else(|| FlagValueError::Instant(text.to_string()))
}

/// `--claim NAME=VALUE`.
fn parse_claim(text: &str) -> Result<(String, String), FlagValueError> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_string(), value.to_string())),
        _ => Err(FlagValueError::Claim(text.to_string())),
    }
}

/// `--metadata FILTER:FIELD.FIELD=VALUE`.
fn parse_metadata(
    text: &str,
) -> Result<(meshlimit_core::metadata::MetadataPath, String), FlagValueError> {
    let bad = || FlagValueError::Metadata(text.to_string());
    let (at, value) = text.split_once('=').ok_or_else(bad)?;
    let (filter, path) = at.split_once(':').ok_or_else(bad)?;
    let path = meshlimit_core::metadata::MetadataPath {
        filter: filter.to_string(),
        path: path.split('.').map(str::to_string).collect(),
    };
    path.check().map_err(|why| FlagValueError::MetadataPath {
        text: text.to_string(),
        why,
    })?;
    Ok((path, value.to_string()))
}

#[derive(Debug, Clone, Args)]
pub struct ImportArgs {
    /// The peer whose configuration FILE is.
    #[arg(long, value_enum)]
    pub(crate) from: ImportFormat,
    /// What a descriptor key stands for: `KEY=TARGET` (client_ip, method, path,
    /// authority, route, cluster, header:NAME, query:NAME, claim:NAME), e.g.
    /// `user=header:x-user-id`;
    /// or what one constant value stands for: `KEY:VALUE=CONDITION` (path:/P,
    /// path_prefix:/P, method:M, authority:HOST, header:NAME, header:NAME=VALUE,
    /// any), e.g. `generic_key:slow=path_prefix:/reports/`. `remote_address`
    /// is client_ip and `destination_cluster` cluster unless mapped. Repeatable.
    #[arg(long = "map", value_name = "MAPPING")]
    pub(crate) map: Vec<String>,
    /// Write the rules here instead of standard output.
    #[arg(long, value_name = "PATH")]
    pub(crate) out: Option<PathBuf>,
    /// The peer's configuration file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

/// The configurations `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ImportFormat {
    /// envoyproxy/ratelimit's service configuration (`domain`, `descriptors`).
    EnvoyRatelimit,
    /// Kuadrant Limitador's limits file (a list of `namespace`, `max_value`,
    /// `seconds`, `conditions`, `variables`).
    Limitador,
}

impl ImportFormat {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::EnvoyRatelimit => "envoy-ratelimit",
            Self::Limitador => "limitador",
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct KeyIdArgs {
    /// The rules file (or directory) the rule is in: a rule it does not hold,
    /// or a number of parts its key does not have, is refused.
    #[arg(long, value_name = "PATH")]
    pub rules: PathBuf,
    /// The rule whose key it is; `NAME.trial` for the copy of rule NAME that a
    /// rules change on trial runs in shadow (its metrics and decision-log
    /// lines name keys by that copy's ids).
    #[arg(long)]
    pub rule: String,
    /// The key's parts, in the rule's `key` order (e.g. the API key, then the
    /// method); none for a rule with `key: []`.
    #[arg(value_name = "PART")]
    pub parts: Vec<String>,
    #[command(flatten)]
    pub secret: SecretArgs,
}

#[derive(Debug, Clone, Args)]
pub struct OverrideArgs {
    /// What to do on every agent of the store (see the actions).
    #[arg(value_enum)]
    pub action: OverrideAction,
    /// With `pin`: the rules version to serve, instead of the one the region
    /// served before the current one.
    #[arg(long, value_name = "VERSION")]
    pub rules_version: Option<String>,
    /// The store the region's agents share, as their --store: redis://HOST:PORT,
    /// redis+cluster://HOST:PORT,… (rediss… for TLS, trusting the system's roots).
    #[arg(long, value_parser = StoreSpec::parse)]
    pub store: StoreSpec,
    /// Who sets it and why, shown in every agent's log (default: $USER).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Redis ACL user.
    #[arg(long, env = "MESHLIMIT_REDIS_USERNAME", hide_env_values = true)]
    pub(crate) redis_username: Option<String>,
    /// Redis password (prefer the environment: a value here is visible in the
    /// process's arguments).
    #[arg(long, env = "MESHLIMIT_REDIS_PASSWORD", hide_env_values = true, value_parser = Password::parse)]
    pub(crate) redis_password: Option<Password>,
    /// The deployment's secret: agents obey only control state signed with it.
    #[command(flatten)]
    pub secret: SecretArgs,
}

/// What `override` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OverrideAction {
    /// Every rule in shadow: counted, never refused.
    Shadow,
    /// Serve the rules version the region ran before the current one (an agent
    /// that no longer has it serves every rule in shadow).
    Pin,
    /// Undo `shadow` or `pin`: the rules file's set again.
    Clear,
    /// End the running trial of a rules change now: its new and tightened
    /// rules enforce as written.
    EndTrial,
    /// Keep the running trial on past its period, until `end-trial`.
    HoldTrial,
    /// Print the last changes to the override, trials and versions served,
    /// newest first, with who made each.
    History,
}

impl OverrideArgs {
    /// The override `mode` to store (pinning `version`), set at `now` (Unix seconds).
    pub(crate) fn state(&self, mode: OverrideMode, version: Option<String>, now: u64) -> Override {
        Override {
            mode,
            set_by: self.by(),
            at: now,
            version,
        }
    }

    /// Who acts, as declared: `--reason`, else `$USER`.
    pub(crate) fn by(&self) -> String {
        self.reason
            .clone()
            .or_else(|| std::env::var("USER").ok())
            .unwrap_or_else(|| "unknown".into())
    }

    /// The store `--store` names. The embedded store is each agent's own: no
    /// command can reach it.
    pub(crate) fn store(&self) -> Result<Box<dyn FleetState>, ConfigError> {
        let Some(target) = self.store.redis() else {
            return Err(ConfigError::Redis(
                "--store memory is each agent's own: give the Redis the agents share (redis://HOST:PORT or redis+cluster://HOST:PORT,…)".into(),
            ));
        };
        let config = RedisConfig {
            nodes: target.nodes,
            cluster: target.cluster,
            connect: Connect {
                username: self.redis_username.clone(),
                password: self.redis_password.clone(),
                tls: target.tls,
                tls_files: None,
            },
            // No lease goes through this store: only the override's own call.
            batch: BatchConfig {
                max_batch: 1,
                deadline: std::time::Duration::from_millis(defaults::STORE_DEADLINE_MS),
            },
            key_ids: KeyIds::placeholder(),
            control: self.secret.load()?.control_mac(),
        };
        Ok(Box::new(RedisStore::new(config, Arc::new(|_, _, _| {}))))
    }
}

#[derive(Debug, Clone, Args)]
pub struct CheckRulesArgs {
    /// The rules file to check, or a directory of them: checked as the agent's
    /// `run --rules DIR` loads it, reporting what the agent would (each broken
    /// file, each rule name two files define).
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// `text`: `PATH:LINE:COLUMN: rule NAME: field rules[N].FIELD: message` lines
    /// on stderr, at the offending field. `json`: one JSON object on stdout,
    /// `{"file", "valid", "rules", "version", "errors": [{"file", "line",
    /// "column", "rule", "field", "path", "message"}]}`, for CI annotations and
    /// admission checks. The exit code is the same either way.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
    /// The rules running now: also list every rule's change (added, removed,
    /// limit ×factor, mode, match widened) and exit 1 when an enforced limit is
    /// cut beyond OLD's `changes.max_tightening` (the guard in force, not the new
    /// file's) without an approval in the new file.
    #[arg(long, value_name = "OLD")]
    pub against: Option<PathBuf>,
    /// Where the rules run, to refuse what cannot work there: `gateway` (Envoy
    /// at the edge, an ingress gateway: client_ip is the client's address) or
    /// `sidecar` (a sidecar's inbound side: client_ip is the calling pod, the
    /// cluster is inbound|PORT||). Without it, neither is checked.
    #[arg(long, value_enum, value_name = "PLACE")]
    pub profile: Option<Profile>,
}

/// `name: value` as curl's `-H` takes it; the name is lowercased, as Envoy
/// hands headers to the filter.
fn parse_header(text: &str) -> Result<(String, String), FlagValueError> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        }
        _ => Err(FlagValueError::Header(text.to_string())),
    }
}

/// How `check-rules` and `explain` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    Text,
    Json,
}

/// Where the rules run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Envoy at the edge or an ingress gateway: `client_ip` is the client's
    /// address, clusters are outbound ones.
    Gateway,
    /// A sidecar's inbound side (Istio's WasmPlugin `mode: SERVER`):
    /// `client_ip` is the calling pod, the cluster is `inbound|PORT||`.
    Sidecar,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_flag_value_says_what_to_write() {
        let said = |e: FlagValueError| e.to_string();
        assert_eq!(
            said(parse_at("10am").unwrap_err()),
            "`10am` is not a UTC instant: write 2026-12-01T09:00:10Z or 2026-12-01"
        );
        assert_eq!(
            said(parse_claim("=alice").unwrap_err()),
            "`=alice` is not NAME=VALUE (e.g. sub=alice)"
        );
        assert_eq!(
            said(parse_header("x-user").unwrap_err()),
            "`x-user`: expected `name: value`"
        );
        let shape = "is not FILTER:FIELD.FIELD=VALUE \
                     (e.g. envoy.filters.http.jwt_authn:payload.sub=alice)";
        assert_eq!(
            said(parse_metadata("payload.sub=alice").unwrap_err()),
            format!("`payload.sub=alice` {shape}")
        );
        assert_eq!(
            said(parse_metadata("f:a..b=1").unwrap_err()),
            format!(
                "`f:a..b=1` {shape}: field `` is not a field name: 1 to 128 printable \
                 characters (`claim: a.b` is the claim `b` inside `a`; no field is empty)"
            )
        );
    }
}
