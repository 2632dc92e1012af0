//! The command line (README.md, "Command line, ports, metrics"). Every flag also reads a
//! `MESHLIMIT_*` environment variable, so a DaemonSet can configure the agent without
//! rewriting its arguments. Parsing never exits the process itself: it returns what
//! to print and the exit code, so `main` stays the only place that exits.

use std::ffi::OsString;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use meshlimit_core::secret::Secret;

use crate::store::redis::client::{Connect, TlsFiles};

/// The exit code for a bad flag or configuration (BSD `EX_USAGE`).
pub const EXIT_USAGE: u8 = 64;

/// `meshlimit-agent`: the per-node rate limit agent.
#[derive(Debug, Parser)]
#[command(name = "meshlimit-agent", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve leases, rules and metrics to the node's filters.
    Run(Box<RunArgs>),
    /// Validate a rules file: exit 0 when it is valid, else print every error and exit 1.
    CheckRules(CheckRulesArgs),
    /// Print the rules file's JSON Schema (the one published as docs/rules.schema.json).
    Schema,
    /// Print the id that metrics, logs and Redis key names use for a key (a keyed
    /// hash: only holders of the deployment's secret can map a key to its id).
    KeyId(KeyIdArgs),
    /// Replay recorded traffic (JSON lines, as Envoy's access log writes them)
    /// through NEW (and OLD) offline: per rule what each would reject, and the
    /// keys NEW would newly limit.
    Replay(ReplayArgs),
    /// Which rules a request meets, in evaluation order, each with its key,
    /// limit and mode, and why each other rule does not apply (offline).
    Explain(ExplainArgs),
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
    pub method: String,
    /// The request's path, as the client sent it (normalised as the filter does).
    #[arg(long)]
    pub path: String,
    /// A request header, `name: value`; repeatable.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE", value_parser = parse_header)]
    pub headers: Vec<(String, String)>,
    /// The client IP the filter would key `client_ip` on.
    #[arg(long, value_name = "IP")]
    pub client_ip: Option<String>,
    /// The Envoy route name, for rules keyed on `route`.
    #[arg(long, value_name = "NAME")]
    pub route: Option<String>,
    /// `text` for people, `json` for scripts.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
}

/// Where the deployment's secret comes from.
#[derive(Debug, Clone, Args)]
pub struct SecretArgs {
    /// The deployment's secret, at least 32 bytes (`openssl rand -hex 32`). Set
    /// it through the environment (from a Kubernetes Secret), not on the command
    /// line, where other users of the host can read it.
    #[arg(
        long = "secret",
        env = "MESHLIMIT_SECRET",
        hide_env_values = true,
        hide = true
    )]
    pub secret: Option<String>,
    /// A file holding the deployment's secret (a mounted Kubernetes Secret); used
    /// when MESHLIMIT_SECRET is not set.
    #[arg(long, env = "MESHLIMIT_SECRET_FILE", value_name = "PATH")]
    pub secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Args)]
pub struct KeyIdArgs {
    /// The rule whose key it is.
    #[arg(long)]
    pub rule: String,
    /// The key's parts, in the rule's `key` order (e.g. the API key, then the method).
    #[arg(value_name = "PART", required = true)]
    pub parts: Vec<String>,
    #[command(flatten)]
    pub secret: SecretArgs,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The rules file (YAML or JSON), usually a ConfigMap mount; watched for
    /// changes. A directory: every `*.yaml`, `*.yml` and `*.json` in it (one per
    /// team), each validated on its own and merged; a broken file keeps its last
    /// good version, a rule name defined twice leaves the later file out.
    #[arg(long, env = "MESHLIMIT_RULES", value_name = "PATH")]
    pub rules: PathBuf,
    /// Address to serve the filters' API, /metrics and the probes on.
    #[arg(
        long,
        env = "MESHLIMIT_LISTEN",
        value_name = "ADDR",
        default_value = "127.0.0.1:8081"
    )]
    pub listen: SocketAddr,
    /// Where buckets live: memory, redis://HOST:PORT or redis+cluster://HOST:PORT,…;
    /// rediss://HOST:PORT or rediss+cluster://HOST:PORT,… for TLS (see --redis-ca).
    #[arg(long, env = "MESHLIMIT_STORE", default_value = "memory", value_parser = StoreSpec::parse)]
    pub store: StoreSpec,
    /// This agent's region (a metric label; regions share `global` rules).
    #[arg(long, env = "MESHLIMIT_REGION", default_value = "local", value_parser = parse_region)]
    pub region: String,
    /// How long a granted lease may be spent, in milliseconds. A store lease is
    /// 100 ms of the node's demand and the pool may hold two; a filter asks for
    /// half a TTL of its own spend. 300 ms lets both be spent before they expire
    /// (the accuracy harness measured 0.54 of the limit at 100 ms before the
    /// filter sized its asks, 0.98 after, 0.99 with 300 ms).
    #[arg(long, env = "MESHLIMIT_LEASE_TTL_MS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lease_ttl_ms: u64,
    /// A lease holds about this much of the rule's rate, in milliseconds.
    #[arg(long, env = "MESHLIMIT_LEASE_TARGET_MS", default_value_t = 100,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub lease_target_ms: u64,
    /// Rules slower than this many requests per second get leases of one request.
    #[arg(long, env = "MESHLIMIT_EXACT_BELOW_RPS", default_value_t = 0.0, value_parser = parse_rate)]
    pub exact_below_rps: f64,
    /// How often the rules file is read for changes, in milliseconds.
    #[arg(long, env = "MESHLIMIT_RULES_POLL_MS", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub rules_poll_ms: u64,
    /// Lease requests served at once; more are shed (the failure policy applies).
    #[arg(long, env = "MESHLIMIT_MAX_INFLIGHT", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_inflight: u32,
    /// Deadline of one Redis pipeline, in milliseconds; never retried. Keep it
    /// below the filter's lease timeout (5 ms) so an answer can still arrive.
    #[arg(long, env = "MESHLIMIT_STORE_DEADLINE_MS", default_value_t = 3,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub store_deadline_ms: u64,
    /// Lease misses bound for one Redis node are gathered for at most this long
    /// (microseconds) and sent as one pipeline; 0 sends what is queued at once.
    #[arg(long, env = "MESHLIMIT_BATCH_WINDOW_US", default_value_t = 500,
          value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub batch_window_us: u64,
    /// The most lease items in one pipeline.
    #[arg(long, env = "MESHLIMIT_MAX_BATCH", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_batch: u32,
    /// Redis ACL user (from a Secret; never on the command line in a pod).
    #[arg(long, env = "MESHLIMIT_REDIS_USERNAME", hide_env_values = true)]
    pub redis_username: Option<String>,
    /// Redis password (from a Secret). Never logged. Prefer --redis-password-file:
    /// a value here is visible in the process's arguments or environment.
    #[arg(long, env = "MESHLIMIT_REDIS_PASSWORD", hide_env_values = true,
          value_parser = Password::parse, conflicts_with = "redis_password_file")]
    pub redis_password: Option<Password>,
    /// A file holding the Redis password (a mounted Secret; one trailing newline
    /// is ignored), read at start.
    #[arg(long, env = "MESHLIMIT_REDIS_PASSWORD_FILE", value_name = "PATH")]
    pub redis_password_file: Option<PathBuf>,
    /// TLS (rediss:// stores and peers): the PEM file of the CA the Redis
    /// servers' certificates must chain to; without it, the system's roots. The
    /// server's name (or IP address) in the URL is verified.
    #[arg(long, env = "MESHLIMIT_REDIS_CA", value_name = "PATH")]
    pub redis_ca: Option<PathBuf>,
    /// TLS: a client certificate (PEM) for Redis servers that ask for one
    /// (`tls-auth-clients`); with --redis-key.
    #[arg(
        long,
        env = "MESHLIMIT_REDIS_CERT",
        value_name = "PATH",
        requires = "redis_key"
    )]
    pub redis_cert: Option<PathBuf>,
    /// TLS: the client certificate's private key (PEM); with --redis-cert.
    #[arg(
        long,
        env = "MESHLIMIT_REDIS_KEY",
        value_name = "PATH",
        requires = "redis_cert"
    )]
    pub redis_key: Option<PathBuf>,
    /// Each peer region's own Redis credentials, so that no region's Redis ever
    /// sees another's password: a directory (a mounted Secret) holding, for a peer
    /// region NAME, `NAME.password` and optionally `NAME.username`. Without
    /// these files, the variables MESHLIMIT_REDIS_PASSWORD_<NAME> and
    /// MESHLIMIT_REDIS_USERNAME_<NAME> (NAME upper-cased, `-` and `.` as `_`);
    /// without either, the peer is reached with no credentials. --redis-username
    /// and --redis-password are this region's only.
    #[arg(long, env = "MESHLIMIT_REGION_CREDENTIALS_DIR", value_name = "DIR")]
    pub region_credentials_dir: Option<PathBuf>,
    /// Log filter, in `tracing_subscriber::EnvFilter` syntax (e.g. `info,meshlimit_agent=debug`).
    #[arg(long, env = "MESHLIMIT_LOG", default_value = "info")]
    pub log: String,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// Another region sharing the `global` rules, and its Redis: NAME=redis://HOST:PORT
    /// or NAME=redis+cluster://HOST:PORT,…; repeatable (`;` between them in the
    /// variable). Reached only by background tasks.
    #[arg(long = "peer-region", env = "MESHLIMIT_PEER_REGIONS", value_name = "NAME=URL",
          value_delimiter = ';', value_parser = crate::regions::setup::parse_peer)]
    pub peer_regions: Vec<(String, StoreSpec)>,
    /// A file of peer regions, one NAME=URL a line (`#` comments), read at start.
    #[arg(long, env = "MESHLIMIT_PEER_REGIONS_FILE", value_name = "PATH")]
    pub peer_regions_file: Option<PathBuf>,
    /// The least share of a `global` limit any region holds (at most 1 / regions).
    #[arg(long, env = "MESHLIMIT_REGION_FLOOR", default_value_t = 0.1, value_parser = parse_floor)]
    pub region_floor: f64,
    /// Deadline of each call the region tasks make to a region's Redis, in
    /// milliseconds; also how long a rebalancer waits for another region's demand.
    #[arg(long, env = "MESHLIMIT_REGION_TIMEOUT_MS", default_value_t = 250,
          value_parser = clap::value_parser!(u64).range(10..=5_000))]
    pub region_timeout_ms: u64,
    /// Keys held at most in each per-key table: the node pool, the fail-local
    /// buckets and the embedded store's buckets (each about 1.3 KiB a key at worst,
    /// keys being at most 1 KiB: see `crate::store::memory`). Past it, a new key
    /// is served unpooled, or by the rule's failure policy; never by evicting a
    /// live bucket.
    #[arg(long, env = "MESHLIMIT_MAX_KEYS", default_value_t = 25_000,
          value_parser = clap::value_parser!(u32).range(16..=10_000_000))]
    pub max_keys: u32,
    /// Connections open at once; past it new ones are closed at once (counted in
    /// `meshlimit_connections_refused_total`), not queued.
    #[arg(long, env = "MESHLIMIT_MAX_CONNECTIONS", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: u32,
    /// A connection that has not sent a request's whole header this long after
    /// opening or after its last response (so also an idle keep-alive connection)
    /// is closed, in milliseconds; a request's body must then arrive, and be
    /// answered, within as long (else 408).
    #[arg(long, env = "MESHLIMIT_HEADER_TIMEOUT_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub header_timeout_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub struct CheckRulesArgs {
    /// The rules file to check.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// `text`: `PATH:LINE: rule NAME: field FIELD: message` lines on stderr. `json`:
    /// one JSON object on stdout, `{"file", "valid", "rules", "version", "errors":
    /// [{"file", "line", "rule", "field", "message"}]}`, for CI annotations and
    /// admission checks. The exit code is the same either way.
    #[arg(long, value_enum, default_value_t = CheckFormat::Text)]
    pub format: CheckFormat,
    /// The rules running now: also list every rule's change (added, removed,
    /// limit ×factor, mode, match widened) and exit 1 when an enforced limit is
    /// cut beyond `changes.max_tightening` without an approval in the new file.
    #[arg(long, value_name = "OLD")]
    pub against: Option<PathBuf>,
}

/// `name: value` as curl's `-H` takes it; the name is lowercased, as Envoy
/// hands headers to the filter.
fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_ascii_lowercase(), value.trim().to_string()))
        }
        _ => Err(format!("`{text}`: expected `name: value`")),
    }
}

/// How `check-rules` and `explain` print.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckFormat {
    Text,
    Json,
}

/// Which store backend `--store` names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreSpec {
    Memory,
    Redis(String),
    RedisCluster(Vec<String>),
    /// `rediss://`: a single Redis over TLS.
    RedisTls(String),
    /// `rediss+cluster://`: a Redis Cluster over TLS (every node, and the nodes
    /// `CLUSTER SLOTS` names: run the cluster with `tls-cluster yes`).
    RedisClusterTls(Vec<String>),
}

/// A Redis deployment named by a [`StoreSpec`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisTarget {
    /// The single Redis, or the cluster's seeds (`host:port`).
    pub nodes: Vec<String>,
    pub cluster: bool,
    pub tls: bool,
}

/// A secret (a Redis password): its `Debug` and `Display` print `<redacted>`,
/// so no log line, error or config dump can carry it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// clap's parser: any non-empty text.
    pub fn parse(text: &str) -> Result<Password, String> {
        if text.is_empty() {
            return Err("an empty password".into());
        }
        Ok(Password(text.to_string()))
    }

    /// Reads a password file: its text without one trailing newline.
    pub fn read_file(path: &std::path::Path) -> Result<Password, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        Password::parse(text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The secret itself, for the AUTH command only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Password {
    fn from(text: &str) -> Self {
        Password(text.to_string())
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What to do instead of running: print `message` (on stdout for help and version,
/// on stderr otherwise) and exit with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliExit {
    pub code: u8,
    pub message: String,
    pub to_stdout: bool,
}

/// A configuration the flags accepted but this build cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid --log filter `{filter}`: {reason}")]
    LogFilter { filter: String, reason: String },
    #[error("regions: {0}")]
    Regions(String),
    #[error("secret: {0}")]
    Secret(String),
    #[error("redis: {0}")]
    Redis(String),
}

impl Cli {
    /// Parses `args` (program name first). Help and version give exit code 0; every
    /// mistake gives [`EXIT_USAGE`] and a single line saying why.
    pub fn parse_from_args<I, T>(args: I) -> Result<Cli, CliExit>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Cli::try_parse_from(args).map_err(|err| match err.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => CliExit {
                code: 0,
                message: err.render().to_string(),
                to_stdout: true,
            },
            // Without a subcommand clap renders the whole help as the "error".
            ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
                CliExit {
                    code: EXIT_USAGE,
                    message:
                        "meshlimit-agent: a subcommand is required: run, check-rules or key-id (see --help)"
                            .into(),
                    to_stdout: false,
                }
            }
            _ => CliExit {
                code: EXIT_USAGE,
                message: format!("meshlimit-agent: {}", one_line(&err.render().to_string())),
                to_stdout: false,
            },
        })
    }
}

impl RunArgs {
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms)
    }

    pub fn lease_target(&self) -> Duration {
        Duration::from_millis(self.lease_target_ms)
    }

    pub fn store_deadline(&self) -> Duration {
        Duration::from_millis(self.store_deadline_ms)
    }

    pub fn batch_window(&self) -> Duration {
        Duration::from_micros(self.batch_window_us)
    }

    pub fn rules_poll(&self) -> Duration {
        Duration::from_millis(self.rules_poll_ms)
    }

    pub fn header_timeout(&self) -> Duration {
        Duration::from_millis(self.header_timeout_ms)
    }

    /// How to reach this region's Redis (`--store`): `--redis-username`, the
    /// password (flag or file) and the TLS files. Files are read now, so a
    /// missing one stops the agent at start.
    pub fn redis_connect(&self) -> Result<Connect, ConfigError> {
        let password = match (&self.redis_password, &self.redis_password_file) {
            (_, Some(path)) => Some(Password::read_file(path).map_err(ConfigError::Redis)?),
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
            Some(path) => Some(Password::read_file(&path).map_err(ConfigError::Redis)?),
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
        .map_err(ConfigError::Redis)
    }
}

impl SecretArgs {
    /// The secret, from MESHLIMIT_SECRET or else the file. Refused when absent or
    /// too short: an agent without one would serve any caller.
    pub fn load(&self) -> Result<Secret, ConfigError> {
        let bytes = match (&self.secret, &self.secret_file) {
            (Some(s), _) => s.clone().into_bytes(),
            (None, Some(path)) => std::fs::read(path)
                .map_err(|e| ConfigError::Secret(format!("cannot read {}: {e}", path.display())))?,
            (None, None) => {
                return Err(ConfigError::Secret(
                    "none given: set MESHLIMIT_SECRET or --secret-file (see deploy/README.md)"
                        .into(),
                ))
            }
        };
        Secret::new(&bytes).map_err(|e| ConfigError::Secret(e.to_string()))
    }
}

impl StoreSpec {
    /// Parses `--store`. Only the shape is checked here; reaching Redis is the
    /// store's business.
    pub fn parse(text: &str) -> Result<StoreSpec, String> {
        let text = text.trim();
        if text == "memory" {
            return Ok(StoreSpec::Memory);
        }
        if let Some(nodes) = text.strip_prefix("redis+cluster://") {
            let nodes: Vec<String> = nodes.split(',').map(|n| n.trim().to_string()).collect();
            if nodes.iter().any(|n| !is_host_port(n)) {
                return Err(format!(
                    "`{text}`: expected redis+cluster://HOST:PORT,HOST:PORT,…"
                ));
            }
            return Ok(StoreSpec::RedisCluster(nodes));
        }
        if let Some(nodes) = text.strip_prefix("rediss+cluster://") {
            let nodes: Vec<String> = nodes.split(',').map(|n| n.trim().to_string()).collect();
            if nodes.iter().any(|n| !is_host_port(n)) {
                return Err(format!(
                    "`{text}`: expected rediss+cluster://HOST:PORT,HOST:PORT,…"
                ));
            }
            return Ok(StoreSpec::RedisClusterTls(nodes));
        }
        for (scheme, tls) in [("redis://", false), ("rediss://", true)] {
            if let Some(rest) = text.strip_prefix(scheme) {
                let node = rest.trim_end_matches('/');
                if !is_host_port(node) {
                    return Err(format!("`{text}`: expected {scheme}HOST:PORT"));
                }
                return Ok(if tls {
                    StoreSpec::RedisTls(node.to_string())
                } else {
                    StoreSpec::Redis(node.to_string())
                });
            }
        }
        Err(format!(
            "unknown store `{text}`: expected memory, redis://HOST:PORT or redis+cluster://HOST:PORT,… (rediss for TLS)"
        ))
    }

    /// The Redis deployment named, or `None` for the memory store.
    pub fn redis(&self) -> Option<RedisTarget> {
        let (nodes, cluster, tls) = match self {
            StoreSpec::Memory => return None,
            StoreSpec::Redis(n) => (vec![n.clone()], false, false),
            StoreSpec::RedisTls(n) => (vec![n.clone()], false, true),
            StoreSpec::RedisCluster(n) => (n.clone(), true, false),
            StoreSpec::RedisClusterTls(n) => (n.clone(), true, true),
        };
        Some(RedisTarget {
            nodes,
            cluster,
            tls,
        })
    }
}

impl fmt::Display for StoreSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreSpec::Memory => f.write_str("memory"),
            StoreSpec::Redis(node) => write!(f, "redis://{node}"),
            StoreSpec::RedisCluster(nodes) => write!(f, "redis+cluster://{}", nodes.join(",")),
            StoreSpec::RedisTls(node) => write!(f, "rediss://{node}"),
            StoreSpec::RedisClusterTls(nodes) => {
                write!(f, "rediss+cluster://{}", nodes.join(","))
            }
        }
    }
}

/// clap renders errors over several lines (message, tip, usage); the contract wants
/// one. Keeps the first paragraph (the message and, for missing arguments, the list
/// of them), joined by spaces.
fn one_line(rendered: &str) -> String {
    let first: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    let line = first.join(" ");
    line.strip_prefix("error: ").unwrap_or(&line).to_string()
}

fn is_host_port(node: &str) -> bool {
    match node.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
        None => false,
    }
}

fn parse_region(text: &str) -> Result<String, String> {
    let ok = (1..=63).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(text.to_string())
    } else {
        Err("a region is 1 to 63 characters of [A-Za-z0-9._-]".into())
    }
}

fn parse_floor(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 0.5 => Ok(v),
        _ => Err("expected a share above 0 and at most 0.5 (e.g. 0.1)".into()),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err("expected a number of requests per second, 0 or more".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, CliExit> {
        Cli::parse_from_args(std::iter::once("meshlimit-agent").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_follow_the_contract() {
        let cli = parse(&["run", "--rules", "r.yaml"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(args.listen.to_string(), "127.0.0.1:8081");
        assert_eq!(args.store, StoreSpec::Memory);
        assert_eq!((args.lease_ttl_ms, args.lease_target_ms), (300, 100));
        assert_eq!(args.rules_poll_ms, 500);
    }

    #[test]
    fn mistakes_are_one_line_and_exit_64() {
        for args in [
            &["run", "--rules", "r", "--bogus"][..],
            &["run"],
            &["run", "--rules", "r", "--listen", "nope"],
            &["run", "--rules", "r", "--store", "etcd://x"],
            &["run", "--rules", "r", "--lease-ttl-ms", "0"],
            &[],
            &["check-rules"],
        ] {
            let exit = parse(args).unwrap_err();
            assert_eq!(exit.code, EXIT_USAGE, "{args:?}");
            assert!(!exit.message.contains('\n'), "{args:?}: {}", exit.message);
        }
        let missing = parse(&["run"]).unwrap_err().message;
        assert!(missing.contains("--rules"), "{missing}");
        let none = parse(&[]).unwrap_err().message;
        assert!(none.contains("subcommand is required"), "{none}");
    }

    #[test]
    fn help_and_version_exit_0() {
        assert_eq!(parse(&["--help"]).unwrap_err().code, 0);
        assert_eq!(parse(&["--version"]).unwrap_err().code, 0);
        assert_eq!(parse(&["run", "--help"]).unwrap_err().code, 0);
    }

    #[test]
    fn store_specs() {
        assert_eq!(
            StoreSpec::parse("redis+cluster://a:1,b:2"),
            Ok(StoreSpec::RedisCluster(vec!["a:1".into(), "b:2".into()]))
        );
        assert!(StoreSpec::parse("redis+cluster://a").is_err());
        let cli = parse(&[
            "run",
            "--rules",
            "r",
            "--peer-region",
            "us=redis://a:1",
            "--peer-region",
            "ap=redis+cluster://b:1,c:2",
            "--region-floor",
            "0.2",
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("expected run");
        };
        assert_eq!(args.peer_regions.len(), 2);
        assert_eq!(args.peer_regions[1].0, "ap");
        assert_eq!(args.region_floor, 0.2);
        for bad in [&["--peer-region", "us"][..], &["--region-floor", "0.7"]] {
            let args = [&["run", "--rules", "r"][..], bad].concat();
            assert_eq!(parse(&args).unwrap_err().code, EXIT_USAGE, "{bad:?}");
        }
        assert_eq!(
            StoreSpec::parse("redis://127.0.0.1:6379").map(|s| s.to_string()),
            Ok("redis://127.0.0.1:6379".to_string())
        );
    }

    fn run_args(args: &[&str]) -> RunArgs {
        let all = [&["run", "--rules", "r"][..], args].concat();
        match parse(&all).map(|c| c.command) {
            Ok(Command::Run(args)) => *args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tls_schemes() {
        assert_eq!(
            StoreSpec::parse("rediss://a:1"),
            Ok(StoreSpec::RedisTls("a:1".into()))
        );
        let cluster = StoreSpec::parse("rediss+cluster://a:1,b:2").unwrap();
        assert_eq!(cluster.to_string(), "rediss+cluster://a:1,b:2");
        let target = cluster.redis().unwrap();
        assert!(target.cluster && target.tls);
        assert!(
            !StoreSpec::parse("redis://a:1")
                .unwrap()
                .redis()
                .unwrap()
                .tls
        );
        assert!(StoreSpec::parse("rediss://a").is_err());
        // A client certificate needs its key.
        let exit = parse(&["run", "--rules", "r", "--redis-cert", "c.pem"]).unwrap_err();
        assert_eq!(exit.code, EXIT_USAGE);
    }

    #[test]
    fn passwords_never_print() {
        let args = run_args(&["--redis-password", "hunter2", "--store", "redis://a:1"]);
        let dump = format!("{args:?}");
        assert!(!dump.contains("hunter2"), "{dump}");
        assert!(dump.contains("<redacted>"), "{dump}");
        let connect = args.redis_connect().unwrap();
        assert_eq!(
            connect.password.as_ref().map(Password::expose),
            Some("hunter2")
        );
        assert!(!format!("{connect:?}").contains("hunter2"));
        assert_eq!(Password::from("x").to_string(), "<redacted>");
    }

    #[test]
    fn each_region_has_its_own_credentials() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("us-east.password"), "from-file\n").unwrap();
        std::fs::write(dir.path().join("us-east.username"), "us-user\n").unwrap();
        let own = dir.path().join("own.password");
        std::fs::write(&own, "own-secret\n").unwrap();
        let dir_arg = dir.path().to_str().unwrap();
        let own_arg = own.to_str().unwrap();
        let args = run_args(&[
            "--store",
            "redis://a:1",
            "--redis-password-file",
            own_arg,
            "--region-credentials-dir",
            dir_arg,
        ]);
        let env = |name: &str| match name {
            "MESHLIMIT_REDIS_PASSWORD_AP_SOUTH_1" => Some("from-env".to_string()),
            _ => None,
        };
        let spec = StoreSpec::parse("rediss://b:2").unwrap();
        let password = |region: &str| {
            args.region_connect(region, &spec, env)
                .unwrap()
                .password
                .map(|p| p.expose().to_string())
        };
        assert_eq!(
            args.redis_connect().unwrap().password.unwrap().expose(),
            "own-secret"
        );
        assert_eq!(password("us-east").as_deref(), Some("from-file"));
        assert_eq!(password("ap-south.1").as_deref(), Some("from-env"));
        // Never this region's password.
        assert_eq!(password("eu"), None);
        let us = args.region_connect("us-east", &spec, env).unwrap();
        assert_eq!(us.username.as_deref(), Some("us-user"));
        assert!(us.tls);
        // A password flag and a password file conflict.
        let both = [
            "run",
            "--rules",
            "r",
            "--redis-password",
            "x",
            "--redis-password-file",
            own_arg,
        ];
        assert_eq!(parse(&both).unwrap_err().code, EXIT_USAGE);
    }
}
