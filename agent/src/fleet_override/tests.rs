use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::rules::trial::TrialPlan;
use meshlimit_store::trial::{StoredTrial, TrialAction};
use meshlimit_store::{Backend, MemoryStore, StoreError};

use super::*;
use crate::rules_watch::RulesMetrics;
use crate::shutdown;
use crate::test_support::wait_until;
use crate::test_support::Registered;
use meshlimit_tests::sample;

const RULES: &str = r"
version: 1
defaults: {mode: enforce}
rules:
  - {name: api, key: [method], limit: {requests: 10, per: 1s}}
  - {name: watched, key: [path], limit: {requests: 5, per: 1s}, mode: shadow}
  - {name: login, key: [client_ip], limit: {requests: 1, per: 1s}, mode: enforce}
";

const RULES_V2: &str = r"
version: 1
rules:
  - {name: api, key: [method], limit: {requests: 20, per: 1s}}
";

fn set(text: &str) -> Arc<RuleSet> {
    Arc::new(parse_rules("rules.yaml", text).unwrap())
}

fn on(by: &str) -> Option<Override> {
    Some(Override {
        mode: OverrideMode::Shadow,
        set_by: by.into(),
        at: 1_700_000_000,
        version: None,
    })
}

fn modes(set: &RuleSet) -> Vec<Mode> {
    set.rules().iter().map(|r| r.mode).collect()
}

fn override_gauge(metrics: &Registered<RulesMetrics>) -> Option<f64> {
    sample(
        &metrics.render().unwrap(),
        "meshlimit_fleet_override",
        &[("mode", "shadow")],
    )
}

fn override_errors(metrics: &Registered<RulesMetrics>) -> f64 {
    sample(
        &metrics.render().unwrap(),
        "meshlimit_fleet_override_errors_total",
        &[],
    )
    .unwrap_or(0.0)
}

#[test]
fn the_shadowed_set_has_every_rule_in_shadow_and_a_version_of_its_own() {
    let file = set(RULES);
    assert_eq!(modes(&file), [Mode::Enforce, Mode::Shadow, Mode::Enforce]);
    let shadow = shadowed(file.config().unwrap()).unwrap();
    assert_eq!(modes(&shadow), [Mode::Shadow; 3]);
    assert_ne!(shadow.version(), file.version());
    // Limits, keys and order are the file's.
    let rules = |s: &RuleSet| {
        s.rules()
            .iter()
            .map(|r| format!("{} {:?}", r.name, r.limits))
            .collect::<Vec<_>>()
    };
    assert_eq!(rules(&shadow), rules(&file));
    // The same file shadows to the same version on every agent.
    assert_eq!(
        shadowed(file.config().unwrap()).unwrap().version(),
        shadow.version()
    );
}

#[test]
fn the_override_shadows_the_set_in_force_and_clearing_gives_the_file_back() {
    let rules = CurrentRules::empty();
    // Nothing installed yet: the state is kept, nothing is served.
    assert_eq!(rules.set_fleet_override(on("early")), None);
    assert_eq!(rules.set_fleet_override(None), None);

    let file = set(RULES);
    let file_version = rules.install(file.clone());
    assert_eq!(file_version, file.version());
    assert_eq!(modes(&rules.get().unwrap()), modes(&file));

    let shadow_version = rules.set_fleet_override(on("ops")).unwrap();
    assert_ne!(shadow_version, file_version);
    assert_eq!(rules.get().unwrap().version(), shadow_version);
    assert_eq!(modes(&rules.get().unwrap()), [Mode::Shadow; 3]);
    // Filters load the shadowed set: its lines carry its version.
    assert_eq!(rules.lines().unwrap().version, shadow_version);
    assert_eq!(rules.file_set().unwrap().version(), file_version);
    assert_eq!(rules.fleet_override(), on("ops"));

    // Set again (another operator): the served set stays, nothing recompiled.
    assert_eq!(rules.set_fleet_override(on("someone else")), None);
    assert_eq!(rules.get().unwrap().version(), shadow_version);

    // A reload under the override is served shadowed too.
    let v2 = set(RULES_V2);
    let served = rules.install(v2.clone());
    assert_ne!(served, v2.version());
    assert_eq!(modes(&rules.get().unwrap()), [Mode::Shadow]);

    // Cleared: the file's latest set, with its own modes and version.
    assert_eq!(
        rules.set_fleet_override(None).as_deref(),
        Some(v2.version())
    );
    assert_eq!(rules.get().unwrap().version(), v2.version());
    assert_eq!(rules.lines().unwrap().version, v2.version());
    assert_eq!(modes(&rules.get().unwrap()), [Mode::Enforce]);
    assert_eq!(rules.fleet_override(), None);
}

#[test]
fn applying_a_change_sets_the_metric_and_the_served_version() {
    let metrics = Registered::new(RulesMetrics::standalone);
    let rules = CurrentRules::empty();
    rules.install(set(RULES));
    apply(&rules, &metrics, on("ops"));
    assert_eq!(override_gauge(&metrics), Some(1.0));
    let text = metrics.render().unwrap();
    let served = rules.get().unwrap().version().to_string();
    assert_eq!(
        sample(
            &text,
            "meshlimit_rules_version_info",
            &[("version", &served)]
        ),
        Some(1.0)
    );
    apply(&rules, &metrics, None);
    assert_eq!(override_gauge(&metrics), Some(0.0));
}

/// The memory store, whose override reads fail while `failing` is set.
#[derive(Default)]
struct FlakyStore {
    inner: MemoryStore,
    failing: AtomicBool,
}

#[async_trait]
impl Backend for FlakyStore {
    fn name(&self) -> &'static str {
        "flaky"
    }
    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl FleetState for FlakyStore {
    async fn fleet_override(&self) -> Result<Option<Override>, StoreError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::Unavailable("down".into()));
        }
        self.inner.fleet_override().await
    }
    async fn set_fleet_override(
        &self,
        state: Option<Override>,
        by: &str,
    ) -> Result<(), StoreError> {
        self.inner.set_fleet_override(state, by).await
    }
    async fn trial(
        &self,
        version: &str,
        start: Option<(&TrialPlan, u64)>,
        with_plan: bool,
    ) -> Result<Option<StoredTrial>, StoreError> {
        self.inner.trial(version, start, with_plan).await
    }
    async fn control_trial(
        &self,
        action: TrialAction,
        by: &str,
    ) -> Result<Option<String>, StoreError> {
        self.inner.control_trial(action, by).await
    }
    async fn record_versions(&self, current: &str, previous: &str) -> Result<(), StoreError> {
        self.inner.record_versions(current, previous).await
    }
    async fn previous_version(&self) -> Result<Option<String>, StoreError> {
        self.inner.previous_version().await
    }
}

#[tokio::test]
async fn the_poller_follows_the_store_and_a_store_error_keeps_the_last_state() {
    let store = Arc::new(FlakyStore::default());
    let rules = Arc::new(CurrentRules::empty());
    let metrics = Registered::new(RulesMetrics::standalone);
    let file = set(RULES);
    rules.install(file.clone());
    let (trigger, stop) = shutdown::channel();
    let task = tokio::spawn(poll(
        store.clone(),
        rules.clone(),
        metrics.clone(),
        Duration::from_millis(20),
        stop,
    ));
    let shadowed_now = |r: &CurrentRules| modes(&r.get().unwrap()) == [Mode::Shadow; 3];

    store.set_fleet_override(on("ops"), "ops").await.unwrap();
    wait_until("the override applied", || shadowed_now(&rules)).await;
    wait_until("the metric at 1", || override_gauge(&metrics) == Some(1.0)).await;

    // The store fails, then answers "cleared": while it fails the override stays.
    store.failing.store(true, Ordering::SeqCst);
    store.set_fleet_override(None, "ops").await.unwrap();
    wait_until("failed reads counted", || override_errors(&metrics) >= 3.0).await;
    assert!(shadowed_now(&rules), "a store error cleared the override");
    assert_eq!(override_gauge(&metrics), Some(1.0));

    store.failing.store(false, Ordering::SeqCst);
    wait_until("the override cleared", || {
        rules.get().unwrap().version() == file.version()
    })
    .await;
    assert_eq!(override_gauge(&metrics), Some(0.0));
    trigger.trigger();
    task.await.unwrap();
}
