//! `meshlimit-agent run`: wires the store, the rules watcher, the metrics refresher
//! and the server together, then waits for SIGTERM or SIGINT and shuts down in
//! order (stop accepting, hand the connections over and drain them, hand the
//! node pool's unspent tokens back to the store, stop the background tasks).

use meshlimit_core::secret::{KeyIds, Secret};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;

use crate::api::{ApiMetrics, App, AppParts, Auth};
use crate::config::{ConfigError, LogFormat, RunArgs, EXIT_USAGE};
use crate::decision_log::{DecisionLog, DecisionLogMetrics};
use crate::false_limits::{FalseLimitMetrics, FalseLimits};
use crate::fleet_override;
use crate::leases::{LeaseMetrics, LeaseService};
use crate::metrics::{Factory, MetricInfo, MetricsError, Registry};
use crate::regions::{self, metrics::RegionMetrics};
use crate::reports::ReportMetrics;
use crate::rules_watch::{CurrentRules, RulesMetrics, RulesWatcher};
use crate::server;
use crate::shutdown::{self, Shutdown, Signals};
use crate::trial::metrics::TrialMetrics;
use meshlimit_store::memory::SWEEP_EVERY;
use meshlimit_store::redis::{RedisConfig, RedisStore, StoreEvent};
use meshlimit_store::{Buckets, FleetState, MemoryStore};

/// How often the time-dependent gauges (fail-open ratios, filter versions) are
/// refreshed between scrapes.
const REFRESH_EVERY: Duration = Duration::from_secs(1);
/// How often the agent announces itself in the store.
const HEARTBEAT_EVERY: Duration = Duration::from_secs(1);
/// How often the node pool drops idle keys: pooled tokens live a lease TTL
/// (300 ms), so once a second keeps at most about a second of one-off keys.
pub const POOL_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Why the agent could not run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot register metrics: {0}")]
    Metrics(#[from] MetricsError),
    #[error("cannot install the signal handlers: {0}")]
    Signals(std::io::Error),
    #[error("cannot start the runtime: {0}")]
    Runtime(std::io::Error),
}

impl RunError {
    /// 64 for what the operator must fix in the configuration, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Config(_) | RunError::Bind { .. } => EXIT_USAGE,
            RunError::Metrics(_) | RunError::Signals(_) | RunError::Runtime(_) => 1,
        }
    }
}

/// Logs to stderr, filtered by `--log`, as text or JSON lines (`--log-format`).
pub fn init_logging(filter: &str, format: LogFormat) -> Result<(), ConfigError> {
    let env_filter =
        tracing_subscriber::EnvFilter::try_new(filter).map_err(|e| ConfigError::LogFilter {
            filter: filter.to_string(),
            reason: e.to_string(),
        })?;
    let fmt = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr);
    // A subscriber already set (tests) is not an error worth stopping for.
    let _ = match format {
        // Colours only on a terminal: in a pod the log goes to a file or a collector.
        LogFormat::Text => fmt
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init(),
        // The event's fields beside `message` at the top level, as collectors
        // index them.
        LogFormat::Json => fmt.json().flatten_event(true).try_init(),
    };
    Ok(())
}

/// Runs the agent until SIGTERM or SIGINT.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let (trigger, shutdown) = shutdown::channel();
    let mut tasks = JoinSet::new();
    // Configuration problems first, before anything binds or logs.
    let Checked {
        secret,
        auth,
        m,
        region_setup,
    } = Checked::load(&args)?;
    let stores = start_store(&args, &m, &secret, &mut tasks, &shutdown)?;
    let mut signals = Signals::install().map_err(RunError::Signals)?;
    let rules = Arc::new(CurrentRules::empty());
    start_rules(&args, &rules, &m.rules, stores.fleet, &mut tasks, &shutdown).await?;
    let app = build_app(&args, &m, auth, rules, &stores.buckets, secret.key_ids())?;
    tasks.spawn(refresh_gauges(app.clone(), shutdown.clone()));
    if let Some(cfg) = &region_setup {
        regions::start(cfg, &app.shares_handle(), &m.regions, &mut tasks, &shutdown)
            .map_err(|e| ConfigError::Regions(e.to_string()))?;
    }
    let leaving = Leaving {
        store: stores.buckets.clone(),
        agent_id: agent_id(&args),
    };
    tasks.spawn(heartbeat(
        stores.buckets,
        agent_id(&args),
        app.live_nodes_handle(),
        m.leases,
        shutdown.clone(),
    ));
    tasks.spawn(sweep_pools(app.clone(), POOL_SWEEP_EVERY, shutdown.clone()));
    let server = start_server(&args, &app, &shutdown)?;
    log_serving(&args);
    let signal = signals.recv().await;
    serve_on(&mut signals, signal, args.shutdown_delay()).await;
    tracing::info!("{signal}: shutting down");
    trigger.trigger();
    stop(&app, server, tasks, leaving).await;
    Ok(())
}

/// Serves on for `delay` after `signal` (`--shutdown-delay-ms`), or until a
/// second signal: time for the node-local Service to stop sending new
/// connections to a terminating pod, which stopping at once would refuse.
async fn serve_on(signals: &mut Signals, signal: &str, delay: Duration) {
    if delay.is_zero() {
        return;
    }
    tracing::info!("{signal}: serving {delay:?} more before shutting down");
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        again = signals.recv() => tracing::info!("{again}: not waiting any longer"),
    }
}

/// What a stopping agent leaves the region's live agents with.
struct Leaving {
    store: Arc<dyn Buckets>,
    agent_id: String,
}

/// Binds the listen address and serves the API on it. Bound last, once the
/// agent can answer: beside an agent still serving the port (an upgrade),
/// connections the kernel gives this one from the moment it binds would
/// otherwise wait for the rules to load.
fn start_server(
    args: &RunArgs,
    app: &App,
    shutdown: &Shutdown,
) -> Result<tokio::task::JoinHandle<()>, RunError> {
    let listener = server::bind(args.listen).map_err(|source| RunError::Bind {
        addr: args.listen,
        source,
    })?;
    let limits = args.server_limits();
    Ok(tokio::spawn(server::serve_with(
        listener,
        app.clone(),
        shutdown.clone(),
        limits,
    )))
}

/// Shuts down in order, once triggered: hands the node pool back to the
/// store and leaves the region's live agents (the heartbeat has stopped), so
/// the agents left take the whole share at their next heartbeat, while the
/// server hands its connections over and drains them; then hands back what
/// the last asks left and waits for the background tasks.
async fn stop(
    app: &App,
    server: tokio::task::JoinHandle<()>,
    mut tasks: JoinSet<()>,
    leaving: Leaving,
) {
    let first = app.hand_back_pool().await;
    if let Err(e) = leaving.store.leave(&leaving.agent_id).await {
        tracing::warn!("cannot leave the live agents (the count drops within 5 s): {e}");
    }
    let _ = server.await;
    let done = first.and(app.hand_back_pool().await);
    log_handed_back(done);
    while tasks.join_next().await.is_some() {}
    tracing::info!("stopped");
}

/// Logs what the node pool handed back to the store: the figures of
/// `meshlimit_pool_handed_back_tokens_total`, which no scrape reads once the
/// listener has closed.
fn log_handed_back(done: crate::leases::HandedBack) {
    tracing::info!(
        keys = done.keys,
        tokens = done.tokens,
        capped = done.capped,
        failed = done.failed,
        "node pool handed back to the store"
    );
}

/// What `run` reads and checks of its configuration before anything binds or
/// logs: the secret, the API's authentication, the services' metrics and the
/// regions' setup.
struct Checked {
    secret: Secret,
    auth: Auth,
    m: ServiceMetrics,
    region_setup: Option<regions::RegionsConfig>,
}

impl Checked {
    fn load(args: &RunArgs) -> Result<Checked, RunError> {
        let secret = args.secret.load()?;
        let auth = match &args.operator_token {
            Some(token) => Auth::with_operator(&secret, token).map_err(ConfigError::from)?,
            None => Auth::new(&secret),
        };
        let m = ServiceMetrics::new(&args.region, secret.key_ids())?;
        let region_setup = regions::regions_config(args, &agent_id(args), &secret.key_ids())?;
        check_tls_flags(args, region_setup.as_ref())?;
        Ok(Checked {
            secret,
            auth,
            m,
            region_setup,
        })
    }
}

/// Loads the rules in force into `rules` once, then starts the tasks that
/// keep them current: the rules watcher and the fleet override's poll.
async fn start_rules(
    args: &RunArgs,
    rules: &Arc<CurrentRules>,
    metrics: &Arc<RulesMetrics>,
    fleet: Arc<dyn FleetState>,
    tasks: &mut JoinSet<()>,
    shutdown: &Shutdown,
) -> Result<(), RunError> {
    let mut watcher = RulesWatcher::new(&args.rules, rules.clone(), metrics.clone())
        .with_store(fleet.clone(), tokio::runtime::Handle::current());
    // A bad file at start is logged and leaves /readyz at 503 until a good one
    // appears; the agent keeps serving /healthz and /metrics meanwhile. Off the
    // runtime's threads: the first load may ask the store for a trial running.
    let watcher = tokio::task::spawn_blocking(move || {
        watcher.poll();
        watcher
    })
    .await
    .map_err(|e| RunError::Runtime(std::io::Error::other(e)))?;
    tasks.spawn(watcher.run(args.rules_poll(), shutdown.clone()));
    tasks.spawn(fleet_override::poll(
        fleet,
        rules.clone(),
        metrics.clone(),
        args.override_poll(),
        shutdown.clone(),
    ));
    Ok(())
}

/// The API and the services behind it: the decision log, the false-limit
/// check and the lease service, answering from `buckets` under `rules`.
fn build_app(
    args: &RunArgs,
    m: &ServiceMetrics,
    auth: Auth,
    rules: Arc<CurrentRules>,
    buckets: &Arc<dyn Buckets>,
    key_ids: KeyIds,
) -> Result<App, RunError> {
    let declog = DecisionLog::start(args.decision_log(), &agent_id(args), m.declog.clone())
        .map_err(|e| ConfigError::DecisionLog(e.to_string()))?;
    let false_limits = FalseLimits::start(
        rules.clone(),
        buckets.clone(),
        m.false_limits.clone(),
        key_ids,
    );
    false_limits.set_budget(args.false_limit_checks);
    let leases = LeaseService::new(
        rules.clone(),
        buckets.clone(),
        m.leases.clone(),
        args.lease_settings(),
        Some(false_limits.clone()),
    );
    Ok(App::new(AppParts {
        rules,
        leases,
        false_limits,
        declog,
        reports: m.reports.clone(),
        registry: m.registry.clone(),
        auth,
    })?)
}

/// Says what the agent serves, and warns when the operator views refuse
/// every caller.
fn log_serving(args: &RunArgs) {
    if args.operator_token.is_none() {
        tracing::info!("no --operator-token: /v1/explain and /v1/hot refuse every caller");
    }
    tracing::info!(
        listen = %args.listen,
        store = %args.store,
        region = %args.region,
        rules = %args.rules.display(),
        "meshlimit-agent serving"
    );
}

/// The services' metrics, each registered in the one registry `/metrics`
/// renders, built before the services so that the store's callbacks can feed
/// them.
struct ServiceMetrics {
    registry: Registry,
    leases: Arc<LeaseMetrics>,
    rules: Arc<RulesMetrics>,
    reports: Arc<ReportMetrics>,
    false_limits: Arc<FalseLimitMetrics>,
    regions: Arc<RegionMetrics>,
    declog: Arc<DecisionLogMetrics>,
}

impl ServiceMetrics {
    /// Registers every service's metrics, and `meshlimit_agent_info` for `region`.
    fn new(region: &str, key_ids: KeyIds) -> Result<ServiceMetrics, MetricsError> {
        let registry = Registry::new();
        let info = Factory(&registry).gauges(
            "meshlimit_agent_info",
            "The agent's build and region (always 1).",
            &["version", "region"],
        )?;
        if let Ok(g) = info.get_metric_with_label_values(&[env!("CARGO_PKG_VERSION"), region]) {
            g.set(1);
        }
        let trial = Arc::new(TrialMetrics::new(&registry)?);
        let reports = Arc::new(ReportMetrics::new(&registry)?);
        Ok(ServiceMetrics {
            leases: Arc::new(LeaseMetrics::new(&registry, key_ids, trial.clone())?),
            rules: Arc::new(RulesMetrics::new(&registry, reports.clone(), trial)?),
            reports,
            false_limits: Arc::new(FalseLimitMetrics::new(&registry)?),
            regions: Arc::new(RegionMetrics::new(&registry)?),
            declog: Arc::new(DecisionLogMetrics::new(&registry)?),
            registry,
        })
    }
}

/// Every metric `/metrics` can show, described: the services' metrics as
/// `run` registers them, and the API's, which [`App::new`] adds to the same
/// registry. docs/reference/metrics.md is made from this list.
pub fn metric_catalogue() -> Result<Vec<MetricInfo>, MetricsError> {
    let m = ServiceMetrics::new("", KeyIds::placeholder())?;
    ApiMetrics::new(&m.registry)?;
    Ok(m.registry.described())
}

/// The one backend `--store` names, as each part of the agent uses it: the
/// lease path, the heartbeat and the false-limit check its buckets; the rules
/// watcher and the override poll its fleet state.
struct Stores {
    buckets: Arc<dyn Buckets>,
    fleet: Arc<dyn FleetState>,
}

impl Stores {
    fn of<S: Buckets + FleetState>(store: Arc<S>) -> Stores {
        Stores {
            buckets: store.clone(),
            fleet: store,
        }
    }
}

/// Builds the configured store and starts its background work. Redis stores
/// connect lazily: an agent whose Redis is down starts, serves its failure
/// answers and reports not ready until Redis answers.
fn start_store(
    args: &RunArgs,
    metrics: &ServiceMetrics,
    secret: &Secret,
    tasks: &mut JoinSet<()>,
    shutdown: &Shutdown,
) -> Result<Stores, ConfigError> {
    let Some(target) = args.store.redis() else {
        let store = Arc::new(MemoryStore::with_max_keys(args.max_keys()));
        let mut stop = shutdown.clone();
        tasks.spawn(
            store
                .clone()
                .run_sweeper(SWEEP_EVERY, async move { stop.wait().await }),
        );
        return Ok(Stores::of(store));
    };
    let config = RedisConfig {
        nodes: target.nodes,
        cluster: target.cluster,
        connect: args.redis_connect()?,
        batch: args.batch(),
        key_ids: secret.key_ids(),
        control: secret.control_mac(),
    };
    let observer = metrics.leases.clone();
    let (events, control) = (metrics.leases.clone(), metrics.rules.clone());
    Ok(Stores::of(Arc::new(
        RedisStore::new(
            config,
            Arc::new(move |size, latency, _| observer.store_pipeline(size, latency)),
        )
        .with_events(Arc::new(move |e| match e {
            StoreEvent::HashSlotMapChanged => events.store_topology("slot_map_changed", None),
            StoreEvent::NodeDown => events.store_topology("node_down", None),
            StoreEvent::NodeUp(d) => events.store_topology("node_up", Some(d)),
            StoreEvent::NodeReplaced(d) => events.store_topology("node_replaced", Some(d)),
            StoreEvent::ControlRefused(record, why) => control.control_refused(record, why),
            StoreEvent::Redirected(kind) => events.store_redirect(kind.as_str()),
        })),
    )))
}

/// TLS files given while no Redis is reached over TLS are a mistake an operator
/// would not notice (the traffic would be plaintext): refused.
fn check_tls_flags(
    args: &RunArgs,
    regions: Option<&regions::RegionsConfig>,
) -> Result<(), ConfigError> {
    let tls = |spec: &crate::config::StoreSpec| spec.redis().is_some_and(|t| t.tls);
    let any_tls = tls(&args.store) || regions.is_some_and(|r| r.peers.iter().any(|(_, s)| tls(s)));
    let files = args.redis_ca.is_some() || args.redis_cert.is_some() || args.redis_key.is_some();
    if files && !any_tls {
        return Err(ConfigError::Redis(
            "--redis-ca, --redis-cert and --redis-key are for TLS, but no store or peer region is rediss://".into(),
        ));
    }
    // Read the files now, so that a missing one stops the agent at start.
    if any_tls {
        args.redis_connect()?;
    }
    Ok(())
}

/// A name for this agent among the region's: host, process and port.
fn agent_id(args: &RunArgs) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "agent".into());
    format!("{host}/{}/{}", std::process::id(), args.listen.port())
}

/// Announces this agent in the store every second and keeps the region's count
/// of live agents (which sizes the filters' fail-local buckets). When the store
/// cannot answer, the last count stays: that is when the filters need it.
async fn heartbeat(
    store: Arc<dyn Buckets>,
    id: String,
    live: Arc<AtomicU32>,
    metrics: Arc<LeaseMetrics>,
    mut shutdown: Shutdown,
) {
    let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                if let Ok(Some(n)) = store.heartbeat(&id).await {
                    live.store(n, Ordering::Relaxed);
                    metrics.live_nodes(n);
                }
            }
            _ = shutdown.wait() => return,
        }
    }
}

/// Forgets the node pool's idle keys every `every` (`run` uses
/// [`POOL_SWEEP_EVERY`]; see [`crate::pool::Pools::sweep`]) until shutdown: what a
/// flood of one-off keys left behind goes within about a TTL and a few seconds of
/// demand decay, not only when the pool is full.
pub async fn sweep_pools(app: App, every: Duration, mut shutdown: Shutdown) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => app.sweep_pools(),
            _ = shutdown.wait() => return,
        }
    }
}

async fn refresh_gauges(app: App, mut shutdown: Shutdown) {
    let mut tick = tokio::time::interval(REFRESH_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => app.refresh_metrics(),
            _ = shutdown.wait() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render;
    use meshlimit_tests::sample;

    #[test]
    fn every_service_registers_in_one_registry_with_the_agents_region() {
        let secret = Secret::new(&[7; 32]).unwrap();
        let m = ServiceMetrics::new("eu", secret.key_ids()).unwrap();
        let text = render(&m.registry).unwrap();
        let info = [("region", "eu"), ("version", env!("CARGO_PKG_VERSION"))];
        assert_eq!(sample(&text, "meshlimit_agent_info", &info), Some(1.0));
    }

    #[test]
    fn the_catalogue_describes_labelled_metrics_before_their_first_sample() {
        let all = metric_catalogue().unwrap();
        let names: Vec<&str> = all.iter().map(|m| m.name.as_str()).collect();
        assert!(names.windows(2).all(|w| w[0] < w[1]), "sorted, unique");
        let bad = all
            .iter()
            .find(|m| m.name == "meshlimit_bad_requests_total")
            .unwrap();
        assert_eq!(bad.labels, ["reason"]);
        assert_eq!(bad.kind.as_str(), "counter");
        let latency = all
            .iter()
            .find(|m| m.name == "meshlimit_store_latency_seconds")
            .unwrap();
        assert_eq!(latency.kind.as_str(), "histogram");
        assert!(!latency.buckets.is_empty());
    }
}
