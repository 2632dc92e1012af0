//! Unit tests of the lease service: the fake store and helpers they share, and one module per concept.

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{AnsweredFrom, LeaseAnswer, LeaseItem};
use meshlimit_core::{DescriptorKey, Take};

use meshlimit_store::{Acquire, Acquired, Backend, StoreError};

use super::*;
use crate::test_support::Registered;
use crate::trial::metrics::TrialMetrics;
use meshlimit_tests::sample;

mod answers;
mod handles;
mod holds;
mod refills;
mod single_flight;
mod sizing;
mod store_errors;

// Most rules here fail closed, so store errors show as `unavailable` answers;
// `local` fails to the node's own bucket.
const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/one-rule-per-lease-behaviour.yaml"
));

const MS: Duration = Duration::from_millis(1);

/// A store that fails every item, or answers too few, or waits a second first.
struct FakeStore {
    mode: Mode,
    calls: AtomicUsize,
    /// Set: `Delayed` answers every item `unavailable` instead.
    failing: std::sync::atomic::AtomicBool,
    /// The limit of every item asked for, in order.
    limits: std::sync::Mutex<Vec<meshlimit_core::Limit>>,
    /// The most tokens every item asked for (`Acquire::max`), in order.
    maxes: std::sync::Mutex<Vec<u32>>,
}

enum Mode {
    Fail(StoreError),
    Short,
    Slow,
    /// Grants every ask its whole lease and reports the bucket then empty.
    Drained,
    /// Grants every ask its whole lease after this long, plenty left.
    Delayed(Duration),
    /// Denies every ask for half an hour.
    Denied,
    /// Grants every ask its whole lease, plenty left, the store's window (or
    /// bucket's refill) ending this long after.
    EndsIn(Duration),
}

/// Every item granted its whole lease (`max`), leaving `remaining`, the
/// store's bucket or window full again `reset_ns` later.
fn whole_leases(items: &[Acquire], remaining: u32, reset_ns: u64) -> Vec<Acquired> {
    items
        .iter()
        .map(|a| {
            Ok(Take::Granted {
                tokens: a.max,
                remaining,
                reset_ns,
            })
        })
        .collect()
}

#[async_trait]
impl Buckets for FakeStore {
    async fn acquire(&self, items: &[Acquire]) -> Vec<Acquired> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.limits
            .lock()
            .unwrap()
            .extend(items.iter().map(|a| a.limit));
        self.maxes
            .lock()
            .unwrap()
            .extend(items.iter().map(|a| a.max));
        match &self.mode {
            Mode::Fail(e) => vec![Err(e.clone()); items.len()],
            Mode::Short => Vec::new(),
            Mode::Slow => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                vec![Ok(Take::Denied { retry_after_ns: 1 }); items.len()]
            }
            Mode::Delayed(took) => {
                tokio::time::sleep(*took).await;
                if self.failing.load(Ordering::SeqCst) {
                    return vec![Err(StoreError::Unavailable("refused".into())); items.len()];
                }
                whole_leases(items, 900, NANOS_PER_SEC)
            }
            Mode::Denied => vec![
                Ok(Take::Denied {
                    retry_after_ns: 1_800 * NANOS_PER_SEC
                });
                items.len()
            ],
            Mode::EndsIn(reset) => {
                whole_leases(items, 900, u64::try_from(reset.as_nanos()).unwrap())
            }
            Mode::Drained => whole_leases(items, 0, 60 * NANOS_PER_SEC),
        }
    }
}

#[async_trait]
impl Backend for FakeStore {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }
}

impl FakeStore {
    fn new(mode: Mode) -> FakeStore {
        FakeStore {
            mode,
            calls: AtomicUsize::new(0),
            failing: std::sync::atomic::AtomicBool::new(false),
            limits: std::sync::Mutex::default(),
            maxes: std::sync::Mutex::default(),
        }
    }
}

fn service(mode: Mode, max_inflight: usize) -> (Arc<LeaseService>, Registered<LeaseMetrics>) {
    let (service, metrics, _) = service_and_store(mode, max_inflight);
    (service, metrics)
}

fn service_and_store(
    mode: Mode,
    max_inflight: usize,
) -> (Arc<LeaseService>, Registered<LeaseMetrics>, Arc<FakeStore>) {
    service_with_rules(RULES, mode, max_inflight)
}

fn service_with_rules(
    text: &str,
    mode: Mode,
    max_inflight: usize,
) -> (Arc<LeaseService>, Registered<LeaseMetrics>, Arc<FakeStore>) {
    let settings = LeaseSettings {
        max_inflight,
        ..LeaseSettings::default()
    };
    service_with_settings(text, mode, settings)
}

fn service_with_settings(
    text: &str,
    mode: Mode,
    settings: LeaseSettings,
) -> (Arc<LeaseService>, Registered<LeaseMetrics>, Arc<FakeStore>) {
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("t", text).unwrap()));
    let metrics = lease_metrics();
    let store = Arc::new(FakeStore::new(mode));
    let service = LeaseService::new(rules, store.clone(), metrics.clone(), settings, None);
    (service, metrics, store)
}

/// The lease path's metrics (keys named by the placeholder ids), in a registry
/// of their own.
fn lease_metrics() -> Registered<LeaseMetrics> {
    Registered::new(|r| {
        let trial = Arc::new(TrialMetrics::new(r)?);
        LeaseMetrics::new(r, meshlimit_core::secret::KeyIds::placeholder(), trial)
    })
}

fn request(rules: &[&str]) -> LeaseRequest {
    LeaseRequest {
        v: WIRE_VERSION,
        rules_version: String::new(),
        items: rules
            .iter()
            .map(|rule| LeaseItem {
                rule: (*rule).into(),
                key: DescriptorKey::new(rule, ["GET"]),
                cost: 1,
                plan: None,
                want: None,
            })
            .collect(),
    }
}

/// What the lease path counted so far: (store calls, background refills,
/// asks that waited on a call in flight, store results `ok`, `error`).
fn counted(metrics: &Registered<LeaseMetrics>, store: &FakeStore) -> (usize, f64, f64, f64, f64) {
    let text = metrics.render().unwrap();
    let kind = |k| sample(&text, "meshlimit_pool_calls_total", &[("kind", k)]).unwrap_or(0.0);
    let result =
        |r| sample(&text, "meshlimit_store_requests_total", &[("result", r)]).unwrap_or(0.0);
    (
        store.calls.load(Ordering::SeqCst),
        kind("refill"),
        kind("wait"),
        result("ok"),
        result("error"),
    )
}

/// One ask for `fast` a millisecond, `n` times, then 10 ms without asks (on
/// the paused clock) so that every call they started has answered; the
/// answers.
async fn ask_every_ms(svc: &Arc<LeaseService>, n: usize) -> Vec<LeaseAnswer> {
    let mut answers = Vec::with_capacity(n);
    for _ in 0..n {
        answers.extend(svc.lease(&request(&["fast"])).await.items);
        tokio::time::sleep(MS).await;
    }
    tokio::time::sleep(10 * MS).await;
    answers
}

/// The most tokens the store was asked for on each call, for `fast` (1,000 a
/// second) asked 400 times at 500 a second by one of `live` nodes.
async fn maxes_asked(mode: Mode, live: u32) -> Vec<u32> {
    let (svc, _, store) = service_and_store(mode, 8);
    svc.live_nodes_handle().store(live, Ordering::Relaxed);
    for _ in 0..400 {
        svc.lease(&request(&["fast"])).await;
        tokio::time::sleep(2 * MS).await;
    }
    let maxes = store.maxes.lock().unwrap().clone();
    maxes
}
