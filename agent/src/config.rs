//! The command line (docs/reference/cli-agent.md is generated from it). Every flag also reads a
//! `MESHLIMIT_*` environment variable, so a DaemonSet can configure the agent without
//! rewriting its arguments. Parsing never exits the process itself: it returns what
//! to print and the exit code, so `main` stays the only place that exits.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use meshlimit_core::secret::MIN_SECRET_LEN;

pub mod defaults;
pub(crate) mod peers;
mod run_args;
mod secret;

pub use meshlimit_store::redis::client::Password;
use meshlimit_store::spec::PasswordFileError;
pub use meshlimit_store::spec::StoreSpec;
pub use peers::{PeerError, PeersFileError};
pub use secret::SecretArgs;

/// The exit code for a bad flag or configuration (BSD `EX_USAGE`).
pub const EXIT_USAGE: u8 = 64;

/// `meshlimit-agent`: the per-node rate limit agent, as a DaemonSet runs it.
/// The commands a person runs are the `meshlimit` binary's (the `cli/` crate).
#[derive(Debug, Parser)]
#[command(
    name = "meshlimit-agent",
    version,
    about,
    propagate_version = true,
    disable_help_subcommand = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve leases, rules and metrics to the node's filters.
    Run(Box<RunArgs>),
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The rules file (YAML or JSON), usually a ConfigMap mount; watched for
    /// changes. A directory: every `*.yaml`, `*.yml` and `*.json` in it (one per
    /// team), each validated on its own and merged; a broken file keeps its last
    /// good version, and a file defining a rule name another file owns is
    /// refused (it keeps its version in force). A change is held to the guards
    /// in force (each rule to its own file's), not to the new file's.
    #[arg(long, env = "MESHLIMIT_RULES", value_name = "PATH")]
    pub rules: PathBuf,
    /// Address to serve the filters' API, /metrics and the probes on.
    #[arg(
        long,
        env = "MESHLIMIT_LISTEN",
        value_name = "ADDR",
        default_value = defaults::LISTEN
    )]
    pub(crate) listen: SocketAddr,
    /// Where buckets live: memory, redis://HOST:PORT or redis+cluster://HOST:PORT,…;
    /// rediss://HOST:PORT or rediss+cluster://HOST:PORT,… for TLS (see --redis-ca).
    #[arg(long, env = "MESHLIMIT_STORE", default_value = defaults::STORE, value_parser = StoreSpec::parse)]
    pub(crate) store: StoreSpec,
    /// This agent's region (a metric label; regions share `global` rules).
    #[arg(long, env = "MESHLIMIT_REGION", default_value = defaults::REGION, value_parser = parse_region)]
    pub(crate) region: String,
    /// How long a granted lease may be spent, in milliseconds. A store lease is
    /// 100 ms of the node's demand and the pool may hold two; a filter asks for
    /// half a TTL of its own spend. 300 ms lets both be spent before they expire
    /// (a shorter TTL loses unspent tokens, and admits less than the limit:
    /// docs/performance/accuracy.md).
    #[arg(long, env = "MESHLIMIT_LEASE_TTL_MS", default_value_t = defaults::LEASE_TTL_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub(crate) lease_ttl_ms: u64,
    /// A lease holds about this much of the rule's rate, in milliseconds.
    #[arg(long, env = "MESHLIMIT_LEASE_TARGET_MS", default_value_t = defaults::LEASE_TARGET_MS,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub(crate) lease_target_ms: u64,
    /// How often the rules file is read for changes, in milliseconds.
    #[arg(long, env = "MESHLIMIT_RULES_POLL_MS", default_value_t = defaults::RULES_POLL_MS,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub(crate) rules_poll_ms: u64,
    /// How often the fleet override (`meshlimit override`) is read from the
    /// store, in milliseconds.
    #[arg(long, env = "MESHLIMIT_OVERRIDE_POLL_MS", default_value_t = defaults::OVERRIDE_POLL_MS,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub(crate) override_poll_ms: u64,
    /// Lease requests served at once; more are shed (the failure policy applies).
    #[arg(long, env = "MESHLIMIT_MAX_INFLIGHT", default_value_t = defaults::MAX_INFLIGHT,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) max_inflight: u32,
    /// Deadline of a lease item's Redis call, in milliseconds: its pipeline,
    /// and the one a MOVED or ASK redirect sends it on, together; never
    /// retried. Keep it below the filter's lease timeout (5 ms) so an answer
    /// can still arrive.
    #[arg(long, env = "MESHLIMIT_STORE_DEADLINE_MS", default_value_t = defaults::STORE_DEADLINE_MS,
          value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) store_deadline_ms: u64,
    /// The most lease items in one pipeline.
    #[arg(long, env = "MESHLIMIT_MAX_BATCH", default_value_t = defaults::MAX_BATCH,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) max_batch: u32,
    /// Redis ACL user (from a Secret; never on the command line in a pod).
    #[arg(long, env = "MESHLIMIT_REDIS_USERNAME", hide_env_values = true)]
    pub(crate) redis_username: Option<String>,
    /// Redis password (from a Secret). Never logged. Prefer --redis-password-file:
    /// a value here is visible in the process's arguments or environment.
    #[arg(long, env = "MESHLIMIT_REDIS_PASSWORD", hide_env_values = true,
          value_parser = Password::parse, conflicts_with = "redis_password_file")]
    pub(crate) redis_password: Option<Password>,
    /// A file holding the Redis password (a mounted Secret; one trailing newline
    /// is ignored), read at start.
    #[arg(long, env = "MESHLIMIT_REDIS_PASSWORD_FILE", value_name = "PATH")]
    pub(crate) redis_password_file: Option<PathBuf>,
    /// TLS (rediss:// stores and peers): the PEM file of the CA the Redis
    /// servers' certificates must chain to; without it, the system's roots. The
    /// server's name (or IP address) in the URL is verified.
    #[arg(long, env = "MESHLIMIT_REDIS_CA", value_name = "PATH")]
    pub(crate) redis_ca: Option<PathBuf>,
    /// TLS: a client certificate (PEM) for Redis servers that ask for one
    /// (`tls-auth-clients`); with --redis-key.
    #[arg(
        long,
        env = "MESHLIMIT_REDIS_CERT",
        value_name = "PATH",
        requires = "redis_key"
    )]
    pub(crate) redis_cert: Option<PathBuf>,
    /// TLS: the client certificate's private key (PEM); with --redis-cert.
    #[arg(
        long,
        env = "MESHLIMIT_REDIS_KEY",
        value_name = "PATH",
        requires = "redis_cert"
    )]
    pub(crate) redis_key: Option<PathBuf>,
    /// Each peer region's own Redis credentials, so that no region's Redis ever
    /// sees another's password: a directory (a mounted Secret) holding, for a peer
    /// region NAME, `NAME.password` and optionally `NAME.username`. Without
    /// these files, the variables MESHLIMIT_REDIS_PASSWORD_<NAME> and
    /// MESHLIMIT_REDIS_USERNAME_<NAME> (NAME upper-cased, `-` and `.` as `_`);
    /// without either, the peer is reached with no credentials. --redis-username
    /// and --redis-password are this region's only.
    #[arg(long, env = "MESHLIMIT_REGION_CREDENTIALS_DIR", value_name = "DIR")]
    pub(crate) region_credentials_dir: Option<PathBuf>,
    /// Log filter, in `tracing_subscriber::EnvFilter` syntax (e.g. `info,meshlimit_agent=debug`).
    #[arg(long, env = "MESHLIMIT_LOG", default_value = defaults::LOG)]
    pub log: String,
    /// How log lines are written to stderr: `text` for people, `json` for a log
    /// collector (one object a line: `timestamp`, `level`, `target`, `message`
    /// and the event's fields).
    #[arg(long, env = "MESHLIMIT_LOG_FORMAT", value_enum, default_value_t = defaults::LOG_FORMAT)]
    pub log_format: LogFormat,
    #[command(flatten)]
    pub secret: SecretArgs,
    /// The operator token: `GET /v1/explain` and `GET /v1/hot` take it as
    /// `authorization: Bearer <token>` (and refuse the filters' token). A
    /// random value of its own, at least 32 bytes, from a Secret only the
    /// agent's namespace holds (never the deployment's secret, which every
    /// meshed namespace holds). Without it those routes refuse everyone.
    #[arg(
        long,
        env = "MESHLIMIT_OPERATOR_TOKEN",
        hide_env_values = true,
        hide = true
    )]
    pub(crate) operator_token: Option<String>,
    /// Another region sharing the `global` rules, and its Redis: NAME=redis://HOST:PORT
    /// or NAME=redis+cluster://HOST:PORT,…; repeatable (`;` between them in the
    /// variable). Reached only by background tasks.
    #[arg(long = "peer-region", env = "MESHLIMIT_PEER_REGIONS", value_name = "NAME=URL",
          value_delimiter = ';', value_parser = peers::parse_peer)]
    pub(crate) peer_regions: Vec<(String, StoreSpec)>,
    /// A file of peer regions, one NAME=URL a line (`#` comments), read at start.
    #[arg(long, env = "MESHLIMIT_PEER_REGIONS_FILE", value_name = "PATH")]
    pub(crate) peer_regions_file: Option<PathBuf>,
    /// The least share of a `global` limit any region holds (at most 1 / regions).
    #[arg(long, env = "MESHLIMIT_REGION_FLOOR", default_value_t = defaults::REGION_FLOOR, value_parser = parse_floor)]
    pub(crate) region_floor: f64,
    /// Deadline of each call the region tasks make to a region's Redis, in
    /// milliseconds; also how long a rebalancer waits for another region's demand.
    #[arg(long, env = "MESHLIMIT_REGION_TIMEOUT_MS", default_value_t = defaults::REGION_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(10..=5_000))]
    pub(crate) region_timeout_ms: u64,
    /// Keys held at most in each per-key table: the node pool, the fail-local
    /// buckets and the embedded store's buckets (each about 1.3 KiB a key at worst,
    /// keys being at most 1 KiB: see `meshlimit_store::memory`). Past it, a new key
    /// is served unpooled, or by the rule's failure policy; never by evicting a
    /// live bucket.
    #[arg(long, env = "MESHLIMIT_MAX_KEYS", default_value_t = defaults::MAX_KEYS,
          value_parser = clap::value_parser!(u32).range(16..=10_000_000))]
    pub(crate) max_keys: u32,
    /// Connections open at once; past it new ones are closed at once (counted in
    /// `meshlimit_connections_refused_total`), not queued.
    #[arg(long, env = "MESHLIMIT_MAX_CONNECTIONS", default_value_t = defaults::MAX_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) max_connections: u32,
    /// A connection that has not sent a request's whole header this long after
    /// opening or after its last response (so also an idle keep-alive connection)
    /// is closed, in milliseconds; a request's body must then arrive, and be
    /// answered, within as long (else 408).
    #[arg(long, env = "MESHLIMIT_HEADER_TIMEOUT_MS", default_value_t = defaults::HEADER_TIMEOUT_MS,
          value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub(crate) header_timeout_ms: u64,
    /// After SIGTERM, go on serving this long, in milliseconds, before
    /// stopping: a terminating pod stays in the node-local Service until
    /// kube-proxy (or Istio) has heard of it, and a connection sent there
    /// after the agent stopped accepting would be refused. A second signal
    /// ends the wait. 0 stops at once.
    #[arg(long, env = "MESHLIMIT_SHUTDOWN_DELAY_MS", default_value_t = defaults::SHUTDOWN_DELAY_MS,
          value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub(crate) shutdown_delay_ms: u64,
    /// Where the decision log goes: `stdout`, or a file path (rotated by size).
    /// Every rejection the node's filters make and a sample of their allowed
    /// decisions (each rule's `log_sample`), one JSON object a line. Without
    /// it the records are kept in memory only, for `GET /v1/explain`.
    #[arg(long, env = "MESHLIMIT_DECISION_LOG", value_name = "stdout|PATH")]
    pub(crate) decision_log: Option<String>,
    /// The decision log file's size at most, in bytes, before it is rotated
    /// (PATH → PATH.1 → …).
    #[arg(long, env = "MESHLIMIT_DECISION_LOG_MAX_BYTES", default_value_t = defaults::DECISION_LOG_MAX_BYTES,
          value_parser = clap::value_parser!(u64).range(4_096..))]
    pub(crate) decision_log_max_bytes: u64,
    /// Decision log files kept, the current one included; the oldest is deleted.
    #[arg(long, env = "MESHLIMIT_DECISION_LOG_FILES", default_value_t = defaults::DECISION_LOG_FILES,
          value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub(crate) decision_log_files: u32,
    /// Suspect 429s (the node pool's holds, the filters' cached denials) the
    /// node checks against the store a second for the false-limit SLI, at
    /// most: each check is one read-only script call. Suspects are sampled
    /// uniformly within it.
    #[arg(long, env = "MESHLIMIT_FALSE_LIMIT_CHECKS", default_value_t = crate::false_limits::CHECKS_PER_SECOND,
          value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub(crate) false_limit_checks: u32,
}

/// How the agent writes its log (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
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
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid --log filter `{filter}`: {reason}")]
    LogFilter { filter: String, reason: String },
    #[error("regions: {0}")]
    Regions(String),
    #[error("regions: {0}")]
    RegionsSetup(#[from] peers::RegionsSetupError),
    #[error("secret: {0}")]
    Secret(String),
    #[error("redis: {0}")]
    Redis(String),
    #[error("redis: {0}")]
    PasswordFile(#[from] PasswordFileError),
    #[error("--decision-log: {0}")]
    DecisionLog(String),
    #[error("--operator-token: {0}")]
    OperatorToken(#[from] OperatorTokenError),
}

/// Why an operator token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OperatorTokenError {
    #[error("the operator token is {0} bytes; at least {MIN_SECRET_LEN} are needed (e.g. `openssl rand -hex 32`)")]
    TooShort(usize),
    #[error("the operator token is the deployment's secret or the filters' token, which every meshed namespace can read: use a value of its own")]
    SharedWithFilters,
}

impl Cli {
    /// Parses `args` (program name first). Help and version give exit code 0; every
    /// mistake gives [`EXIT_USAGE`] and a single line saying why.
    pub fn parse_from_args<I, T>(args: I) -> Result<Cli, CliExit>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        parse_args(args, "meshlimit-agent", "run")
    }
}

/// Parses `args` (program name first) into `P`, the command line of the binary
/// `program` whose subcommands are `commands`: help and version give exit code
/// 0 and go to stdout; every mistake gives [`EXIT_USAGE`] and one line saying why.
pub fn parse_args<P, I, T>(args: I, program: &str, commands: &str) -> Result<P, CliExit>
where
    P: Parser,
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    P::try_parse_from(args).map_err(|err| match err.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => CliExit {
            code: 0,
            message: err.render().to_string(),
            to_stdout: true,
        },
        // Without a subcommand clap renders the whole help as the "error".
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            CliExit {
                code: EXIT_USAGE,
                message: format!("{program}: a subcommand is required: {commands} (see --help)"),
                to_stdout: false,
            }
        }
        _ => CliExit {
            code: EXIT_USAGE,
            message: format!("{program}: {}", one_line(&err.render().to_string())),
            to_stdout: false,
        },
    })
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

/// Why a value of `--region` or `--region-floor` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum FlagValueError {
    #[error("a region is 1 to 63 characters of [A-Za-z0-9._-]")]
    Region,
    #[error("expected a share above 0 and at most 0.5 (e.g. 0.1)")]
    Floor,
}

fn parse_region(text: &str) -> Result<String, FlagValueError> {
    let ok = (1..=63).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(text.to_string())
    } else {
        Err(FlagValueError::Region)
    }
}

fn parse_floor(text: &str) -> Result<f64, FlagValueError> {
    match text.trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 0.5 => Ok(v),
        _ => Err(FlagValueError::Floor),
    }
}

#[cfg(test)]
mod tests;
