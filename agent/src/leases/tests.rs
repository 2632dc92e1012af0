use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use meshlimit_core::rules::parse_rules;
use meshlimit_core::wire::{AnsweredFrom, LeaseItem};
use meshlimit_core::{DescriptorKey, Take};

use crate::store::{Acquire, Acquired, StoreError};

use super::*;
use crate::metrics::sample;

// Most rules here fail closed, so store errors show as `unavailable` answers;
// `local` fails to the node's own bucket.
const RULES: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/rules/one-rule-per-lease-behaviour.yaml"
));

/// The store lease for one ask of `cost`, when the node spends 1,000 tokens/s.
fn size(settings: &LeaseSettings, rule: &str, cost: u32) -> u32 {
    let set = parse_rules("t", RULES).unwrap();
    let rule = set.rule(rule).unwrap();
    let limit = rule.limit_in_force(None, 0).limit;
    settings.lease_size(rule, &limit, cost, 1_000.0)
}

#[test]
fn sizing() {
    let s = LeaseSettings::default();
    assert_eq!(size(&s, "exact", 1), 1);
    assert_eq!(size(&s, "exact", 3), 3);
    assert_eq!(size(&s, "fast", 1), 100, "100 ms of 1000/s");
    assert_eq!(size(&s, "tiny-burst", 1), 5, "a tenth of the burst");
    assert_eq!(
        size(&s, "slow", 1),
        1,
        "a tenth of a burst of 5 rounds to one"
    );
    assert_eq!(size(&s, "heavy", 200), 200, "never below the cost");
    let exact_below = LeaseSettings {
        exact_below_rps: 1001.0,
        ..s
    };
    assert_eq!(size(&exact_below, "fast", 2), 2);
    // A rule at exactly the rate is not slower than it: pooled.
    let at_the_rate = LeaseSettings {
        exact_below_rps: 1000.0,
        ..s
    };
    assert_eq!(size(&at_the_rate, "fast", 2), 100);
}

#[test]
fn a_pool_takes_no_more_than_its_node_spends_before_the_tokens_expire() {
    // Leases live 300 ms: the pool keeps at most 150 ms of the node's demand.
    // (lease, the filter's tokens, the node's demand per second, the most taken)
    let s = LeaseSettings::default();
    for (lease, filter, demand, max, why) in [
        (1, 1, 0.0, 1, "a cold key takes its cost only"),
        (
            1,
            1,
            6.0,
            1,
            "0.9 tokens in 150 ms: a spare would mostly expire",
        ),
        (2, 1, 14.0, 3, "one filter's token and 2 spare"),
        (10, 1, 100.0, 16, "the cost and 15 spare"),
        (100, 1, 1_000.0, 151, "the cost and 150 spare"),
        (100, 100, 1_000.0, 200, "two leases at most"),
        (100, 0, 1_000.0, 150, "a refill: no filter's share"),
        (8, 1, 0.0, 8, "never below the lease"),
    ] {
        assert_eq!(s.store_max(lease, filter, demand), max, "{why}");
    }
}

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
}

#[async_trait]
impl Store for FakeStore {
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
                items
                    .iter()
                    .map(|a| {
                        Ok(Take::Granted {
                            tokens: a.max,
                            remaining: 900,
                            reset_ns: NANOS_PER_SEC,
                        })
                    })
                    .collect()
            }
            Mode::Denied => vec![
                Ok(Take::Denied {
                    retry_after_ns: 1_800 * NANOS_PER_SEC
                });
                items.len()
            ],
            Mode::Drained => items
                .iter()
                .map(|a| {
                    Ok(Take::Granted {
                        tokens: a.max,
                        remaining: 0,
                        reset_ns: 60 * NANOS_PER_SEC,
                    })
                })
                .collect(),
        }
    }

    async fn ping(&self) -> Result<(), StoreError> {
        Ok(())
    }

    fn name(&self) -> &'static str {
        "fake"
    }

    async fn fleet_override(&self) -> Result<Option<crate::fleet_override::Override>, StoreError> {
        Ok(None)
    }

    async fn set_fleet_override(
        &self,
        _: Option<crate::fleet_override::Override>,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    async fn trial(
        &self,
        _: &str,
        _: Option<(&meshlimit_core::rules::trial::TrialPlan, u64)>,
        _: bool,
    ) -> Result<Option<crate::trial::StoredTrial>, StoreError> {
        Ok(None)
    }

    async fn control_trial(
        &self,
        _: crate::trial::TrialAction,
    ) -> Result<Option<String>, StoreError> {
        Ok(None)
    }

    async fn record_versions(&self, _: &str, _: &str) -> Result<(), StoreError> {
        Ok(())
    }

    async fn previous_version(&self) -> Result<Option<String>, StoreError> {
        Ok(None)
    }
}

fn service(mode: Mode, max_inflight: usize) -> (Arc<LeaseService>, Arc<Metrics>) {
    let (service, metrics, _) = service_and_store(mode, max_inflight);
    (service, metrics)
}

fn service_and_store(
    mode: Mode,
    max_inflight: usize,
) -> (Arc<LeaseService>, Arc<Metrics>, Arc<FakeStore>) {
    service_with_rules(RULES, mode, max_inflight)
}

fn service_with_rules(
    text: &str,
    mode: Mode,
    max_inflight: usize,
) -> (Arc<LeaseService>, Arc<Metrics>, Arc<FakeStore>) {
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("t", text).unwrap()));
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let store = Arc::new(FakeStore {
        mode,
        calls: AtomicUsize::new(0),
        failing: std::sync::atomic::AtomicBool::new(false),
        limits: std::sync::Mutex::default(),
        maxes: std::sync::Mutex::default(),
    });
    let settings = LeaseSettings {
        max_inflight,
        ..LeaseSettings::default()
    };
    let service = LeaseService::new(rules, store.clone(), metrics.clone(), settings);
    (service, metrics, store)
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

fn reasons(resp: &LeaseResponse) -> Vec<String> {
    resp.items
        .iter()
        .map(|a| match a {
            LeaseAnswer::Unavailable { reason } => reason.clone(),
            other => format!("{other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn store_errors_become_unavailable_answers_and_are_counted() {
    let (svc, metrics) = service(Mode::Fail(StoreError::Timeout(Duration::from_millis(5))), 8);
    let resp = svc.lease(&request(&["fast", "exact"])).await;
    assert_eq!(reasons(&resp), ["store_timeout", "store_timeout"]);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_store_requests_total",
            &[("result", "timeout")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "meshlimit_store_batch_size_count", &[]),
        Some(1.0),
        "one call for the batch"
    );

    let (svc, _) = service(Mode::Fail(StoreError::Unavailable("refused".into())), 8);
    assert_eq!(
        reasons(&svc.lease(&request(&["fast"])).await),
        ["store_unavailable"]
    );
}

#[tokio::test]
async fn a_denial_is_held_and_answered_no_longer_than_the_next_schedule_edge() {
    // A pooled rule whose window opens 5 s from now (UTC, the agent's clock).
    let opens = crate::regions::clock::now_secs() + 5;
    let mm_ss = |t: u64| format!("{:02}:{:02}", t % 3_600 / 60, t % 60);
    let rules = format!(
        "version: 1\nrules:\n  - name: sched\n    key: [method]\n    limit: {{ requests: 1000, per: 1s }}\n    schedule:\n      - {{ minutes: \"{}-{}\", burst: 5000 }}\n",
        mm_ss(opens),
        mm_ss(opens + 5)
    );
    let (svc, _, store) = service_with_rules(&rules, Mode::Denied, 8);
    // The store's half hour becomes the time to the edge, for the filter and
    // for the node's pool, which answers the next ask without the store.
    for _ in 0..2 {
        let before_ms = crate::regions::clock::now_ms();
        let resp = svc.lease(&request(&["sched"])).await;
        match &resp.items[..] {
            [LeaseAnswer::Deny { retry_after_ms, .. }] => assert!(
                before_ms + retry_after_ms <= opens * 1_000 + 1,
                "{retry_after_ms} ms from {before_ms}, the edge at {opens} s"
            ),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        store.calls.load(Ordering::SeqCst),
        1,
        "the pool held the denial"
    );
}

#[tokio::test]
async fn a_short_store_answer_never_shifts_answers() {
    let (svc, _) = service(Mode::Short, 8);
    let resp = svc.lease(&request(&["fast", "nope", "slow"])).await;
    assert_eq!(
        reasons(&resp),
        ["store_error", "unknown_rule", "store_error"]
    );
}

#[tokio::test(start_paused = true)]
async fn work_past_the_inflight_cap_is_shed_not_queued() {
    let (svc, metrics) = service(Mode::Slow, 1);
    let first = {
        let svc = svc.clone();
        tokio::spawn(async move { svc.lease(&request(&["fast"])).await })
    };
    // Let the first request take the only permit and wait in the store.
    tokio::task::yield_now().await;
    let second = svc.lease(&request(&["fast", "slow"])).await;
    assert_eq!(reasons(&second), ["shed", "shed"]);
    assert!(matches!(
        first.await.unwrap().items[0],
        LeaseAnswer::Deny { .. }
    ));
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_store_requests_total",
            &[("result", "shed")]
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "shed")]
        ),
        Some(2.0)
    );
}

#[tokio::test]
async fn with_the_store_down_a_fail_local_rule_gets_the_nodes_ceiling() {
    let (svc, metrics) = service(Mode::Fail(StoreError::Unavailable("refused".into())), 8);
    // 2 per hour, one live node, safety factor 2: the node admits 4.
    let mut granted = 0;
    for _ in 0..10 {
        match &svc.lease(&request(&["local"])).await.items[0] {
            LeaseAnswer::Grant {
                tokens: 1,
                local: true,
                ..
            } => granted += 1,
            LeaseAnswer::Deny { local: true, .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(granted, 4);
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(
            &text,
            "meshlimit_lease_unavailable_total",
            &[("reason", "store_unavailable")]
        ),
        Some(10.0)
    );
    // With four live nodes in the region, a fresh key's slice is 2 × 2 / 4 = 1.
    svc.live_nodes_handle()
        .store(4, std::sync::atomic::Ordering::Relaxed);
    let mut req = request(&["local"]);
    req.items[0].key = DescriptorKey::new("local", ["POST"]);
    let grants = futures_count(&svc, &req, 5).await;
    assert_eq!(grants, 1);
}

async fn futures_count(svc: &Arc<LeaseService>, req: &LeaseRequest, n: usize) -> usize {
    let mut grants = 0;
    for _ in 0..n {
        grants += usize::from(matches!(
            svc.lease(req).await.items[0],
            LeaseAnswer::Grant { .. }
        ));
    }
    grants
}

#[tokio::test(start_paused = true)]
async fn after_a_drained_grant_the_key_holds_at_the_node_until_a_lease_has_refilled() {
    let (svc, metrics, store) = service_and_store(Mode::Drained, 8);
    let calls = || store.calls.load(Ordering::SeqCst);
    // `slow` is 5 per minute: a lease of one token, which takes 12 s to refill.
    let req = request(&["slow"]);
    assert!(matches!(
        svc.lease(&req).await.items[0],
        LeaseAnswer::Grant { tokens: 1, .. }
    ));
    assert_eq!(calls(), 1);
    // The store kept nothing: the node denies without asking it...
    tokio::time::advance(Duration::from_secs(11)).await;
    match &svc.lease(&req).await.items[0] {
        LeaseAnswer::Deny {
            retry_after_ms,
            local: false,
            from: Some(AnsweredFrom::Pool),
        } => assert!((999..=1_000).contains(retry_after_ms), "{retry_after_ms}"),
        other => panic!("expected a node denial, got {other:?}"),
    }
    assert_eq!(calls(), 1, "held at the node");
    let text = metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_pool_calls_total", &[("kind", "denied")]),
        Some(1.0)
    );
    // ...until a lease's worth has refilled.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(matches!(
        svc.lease(&req).await.items[0],
        LeaseAnswer::Grant { .. }
    ));
    assert_eq!(calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn asks_for_one_key_share_the_one_store_call_in_flight() {
    // A store answering in a millisecond, then one taking the whole deadline
    // (3 ms): an ask waits on the call in flight as long as the call may take.
    for took in [MS, LeaseSettings::default().store_deadline] {
        let (svc, metrics, store) = service_and_store(Mode::Delayed(took), 8);
        let asks: Vec<_> = (0..8)
            .map(|_| {
                let svc = Arc::clone(&svc);
                tokio::spawn(async move { svc.lease(&request(&["fast"])).await })
            })
            .collect();
        for ask in asks {
            let resp = ask.await.unwrap();
            assert!(
                matches!(resp.items[0], LeaseAnswer::Grant { local: false, .. }),
                "{took:?}: {resp:?}"
            );
        }
        // The first ask's call went to the store, its lease sized for a cold
        // key (one token, none to pool); the seven others waited on it, and
        // the one call that followed was sized for the six it had left waiting.
        assert_eq!(store.calls.load(Ordering::SeqCst), 2, "{took:?}");
        let text = metrics.render().unwrap();
        assert_eq!(
            sample(&text, "meshlimit_pool_calls_total", &[("kind", "wait")]),
            Some(7.0 + 6.0),
            "{took:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_fixed_window_holds_a_drained_key_until_the_window_ends_and_no_longer() {
    use meshlimit_core::Algorithm;
    let (svc, _, _) = service_and_store(Mode::Drained, 8);
    let acquire = |algorithm| Acquire {
        key: DescriptorKey::new("w", ["a"]),
        limit: meshlimit_core::Limit::new(
            std::num::NonZeroU32::new(100).unwrap(),
            std::num::NonZeroU64::new(10_000_000_000).unwrap(),
            std::num::NonZeroU32::new(100).unwrap(),
        )
        .with_algorithm(algorithm),
        min: 1,
        max: 20,
        share: 1.0,
    };
    let (fixed, bucket) = (
        acquire(Algorithm::FixedWindow),
        acquire(Algorithm::TokenBucket),
    );
    // A grant leaving 2 of a lease of 10, the window ending in 4 s: nothing
    // comes back before it ends, and everything then.
    for far_over in [true, false] {
        assert_eq!(
            svc.hold_ns(10, 2, 4_000_000_000, &fixed, far_over),
            4_000_000_000
        );
        assert_eq!(svc.hold_ns(10, 10, 4_000_000_000, &fixed, far_over), 0);
        // A denial: the window's end, with no refill added after it.
        assert_eq!(
            svc.denial_hold_ns(10, 4_000_000_000, &fixed, far_over),
            4_000_000_000
        );
    }
    // A bucket (and a sliding window) of a node far over its share holds
    // until 8 have refilled at 10/s; a denial adds a lease's refill (9 tokens).
    assert_eq!(
        svc.hold_ns(10, 2, 4_000_000_000, &bucket, true),
        800_000_000
    );
    assert_eq!(
        svc.denial_hold_ns(10, 4_000_000_000, &bucket, true),
        4_900_000_000
    );
    // Nearer its share, the store's word alone: no hold after a grant, and a
    // denial held for its own wait.
    assert_eq!(svc.hold_ns(10, 2, 4_000_000_000, &bucket, false), 0);
    assert_eq!(
        svc.denial_hold_ns(10, 4_000_000_000, &bucket, false),
        4_000_000_000
    );
}

/// What the lease path counted so far: (store calls, background refills,
/// asks that waited on a call in flight, store results `ok`, `error`).
fn counted(metrics: &Metrics, store: &FakeStore) -> (usize, f64, f64, f64, f64) {
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

#[tokio::test(start_paused = true)]
async fn a_busy_key_is_refilled_in_the_background_before_its_pool_runs_dry() {
    let (svc, metrics, store) = service_and_store(Mode::Delayed(MS), 8);
    // 1,000 asks a second: once the key's demand shows, it is thick at the
    // node and every store call is a refill started by an ask that was served.
    ask_every_ms(&svc, 100).await;
    let (calls, refills, waits, ok, _) = counted(&metrics, &store);
    let answers = ask_every_ms(&svc, 300).await;
    assert!(
        answers
            .iter()
            .all(|a| matches!(a, LeaseAnswer::Grant { tokens: 1, .. })),
        "{answers:?}"
    );
    let (calls_after, refills_after, waits_after, ok_after, _) = counted(&metrics, &store);
    let new_calls = calls_after - calls;
    assert!(
        new_calls >= 2,
        "about 150 asks a refill (two leases of 100 ms at 1,000/s, as the node spends in half a lease's life): {new_calls} calls"
    );
    assert_eq!(
        refills_after - refills,
        new_calls as f64,
        "every store call was a background refill"
    );
    assert_eq!(waits_after, waits, "no ask waited for a store call");
    assert_eq!(
        ok_after - ok,
        new_calls as f64,
        "each refill's answer was counted and filled the pool"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_refill_ends_its_call_so_the_next_ask_calls_the_store_itself() {
    let (svc, metrics, store) = service_and_store(Mode::Delayed(MS), 8);
    ask_every_ms(&svc, 100).await;
    let (_, refills, waits, _, errors) = counted(&metrics, &store);
    assert_eq!(errors, 0.0);
    store.failing.store(true, Ordering::SeqCst);
    // The pool serves what it holds while its refills fail, each ending its
    // call; the ask that finds it empty then asks the store itself, at once.
    let answers = ask_every_ms(&svc, 300).await;
    let (_, refills_after, waits_after, _, errors_after) = counted(&metrics, &store);
    let failed_refills = refills_after - refills;
    assert!(failed_refills >= 1.0, "the pool's refills failed");
    assert_eq!(waits_after, waits, "no ask waited on the failed call");
    let unavailable = answers
        .iter()
        .filter(|a| matches!(a, LeaseAnswer::Unavailable { .. }))
        .count();
    assert!(unavailable > 0, "the asks past the pool reached the store");
    assert_eq!(
        errors_after - errors,
        failed_refills + unavailable as f64,
        "the refills' failures are counted with the asks'"
    );
}

#[tokio::test(start_paused = true)]
async fn the_services_sweep_drops_the_pools_idle_keys() {
    let (svc, _, _) = service_and_store(Mode::Delayed(MS), 8);
    svc.lease(&request(&["fast"])).await;
    assert_eq!(svc.pooled_keys(), 1);
    svc.sweep_pools();
    assert_eq!(svc.pooled_keys(), 1, "just asked for");
    // Nothing pooled, no denial, its demand decayed: dropped.
    tokio::time::advance(Duration::from_secs(10)).await;
    svc.sweep_pools();
    assert_eq!(svc.pooled_keys(), 0);
}

#[test]
fn the_region_tasks_set_the_services_own_shares() {
    let (svc, _) = service(Mode::Delayed(MS), 8);
    // What the region tasks do with the handle, each call its own.
    assert!(svc
        .shares()
        .enable(0.1, meshlimit_core::secret::KeyIds::placeholder()));
    svc.shares().install(crate::regions::table::ShareTable::new(
        Some(7),
        Default::default(),
    ));
    assert_eq!(svc.shares().table().period, Some(7));
}

#[tokio::test(start_paused = true)]
async fn a_plan_key_held_after_a_drained_grant_refills_under_its_plans_limit() {
    let rules = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/per-ip-and-api-plans.yaml"
    ));
    let (svc, metrics, store) = service_with_rules(rules, Mode::Drained, 8);
    let mut req = request(&["api"]);
    req.items[0].key = DescriptorKey::new("api", ["k"]);
    req.items[0].plan = Some("gold".into());
    // 1,000 asks a second make the key thick at the node, and after 300 of
    // them its demand (a count decaying over a second: about 260 a second)
    // is far over twice gold's 100 a second; each grant then drains the
    // store and holds the key. Then no asks: the last hold ends in a refill
    // by the clock.
    for _ in 0..300 {
        svc.lease(&req).await;
        tokio::time::sleep(MS).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = metrics.render().unwrap();
    assert!(
        sample(&text, "meshlimit_pool_calls_total", &[("kind", "refill")]).unwrap_or(0.0) > 0.0,
        "{text}"
    );
    let gold = parse_rules("t", rules)
        .unwrap()
        .rule("api")
        .unwrap()
        .limit_in_force(Some("gold"), 0)
        .limit;
    let limits = store.limits.lock().unwrap();
    assert!(limits.iter().all(|l| *l == gold), "{limits:?}");
}

#[tokio::test(start_paused = true)]
async fn a_grant_says_what_the_store_and_the_pool_have_left() {
    // 1,000 a second; `want` 10: the store grants two leases' worth, 10 go to
    // the filter, the rest to the pool, and 900 are left in the store.
    let (svc, _, _) = service_and_store(Mode::Delayed(MS), 8);
    let mut req = request(&["fast"]);
    req.items[0].want = Some(10);
    match &svc.lease(&req).await.items[0] {
        LeaseAnswer::Grant {
            tokens, remaining, ..
        } => {
            let pooled = svc
                .pool_view(|_| true)
                .iter()
                .map(|v| v.tokens)
                .sum::<u32>();
            assert_eq!(*remaining, 900 + pooled, "tokens {tokens}, pooled {pooled}");
        }
        other => panic!("{other:?}"),
    }
    // Nothing pooled expired: nothing dropped is said.
    let text = svc.metrics.render().unwrap();
    assert_eq!(
        sample(&text, "meshlimit_lease_tokens_dropped_total", &[]),
        None
    );
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

#[tokio::test(start_paused = true)]
async fn a_nearly_empty_bucket_is_taken_an_ask_at_a_time_unless_the_node_is_far_over() {
    // 500 asks a second of `fast` (1,000 a second) at the only node: under
    // twice its share. Every grant leaves the store's bucket empty, so the
    // pool never takes a token beyond the ask: a spare would sit here while
    // other nodes found the bucket empty.
    let drained = maxes_asked(Mode::Drained, 1).await;
    assert_eq!(drained.len(), 400, "no ask was served from the pool");
    assert!(drained.iter().all(|m| *m == 1), "{drained:?}");
    // The same demand with 900 left after every grant: the pool takes spares.
    let plenty = maxes_asked(Mode::Delayed(MS), 1).await;
    assert!(plenty.iter().any(|m| *m > 1), "{plenty:?}");
    assert!(plenty.len() < 400, "the pool served asks: {}", plenty.len());
    // One of ten nodes: its share is 100 a second, and 500 is far over it,
    // so even a drained bucket's grant takes a spare (the node's 429s are the
    // limit working; the spare saves a store call).
    let over = maxes_asked(Mode::Drained, 10).await;
    assert!(over.iter().any(|m| *m > 1), "{over:?}");
}

#[tokio::test(start_paused = true)]
async fn after_a_burst_the_pool_takes_what_the_node_spends_not_what_it_asked() {
    // One of ten nodes asks for `fast` (1,000 a second) at 1,000 a second:
    // far over its share, every grant drains the store's bucket, and the key
    // is held and refilled by the clock.
    let (svc, _, store) = service_and_store(Mode::Drained, 8);
    svc.live_nodes_handle().store(10, Ordering::Relaxed);
    for _ in 0..300 {
        svc.lease(&request(&["fast"])).await;
        tokio::time::sleep(MS).await;
    }
    let before = store.maxes.lock().unwrap().len();
    // The burst ends: 100 asks a second for half a second. The demand
    // estimate still reads the burst for a while; the pool must not keep
    // fetching it, by the clock or ahead of need, while it holds tokens
    // nobody spends (they would expire here while other nodes find the
    // bucket empty).
    let mut served = 0;
    for _ in 0..50 {
        let answer = &svc.lease(&request(&["fast"])).await.items[0];
        served += u32::from(matches!(answer, LeaseAnswer::Grant { .. }));
        tokio::time::sleep(10 * MS).await;
    }
    let taken: u32 = store.maxes.lock().unwrap()[before..].iter().sum();
    assert!(served >= 45, "the node served its asks: {served} of 50");
    // What the node served, and at most one pool's worth beyond it
    // (`store_max` at the burst's demand: two leases of 100).
    assert!(
        taken <= served + 200,
        "the store handed out {taken} tokens for {served} served"
    );
}

#[tokio::test(start_paused = true)]
async fn a_node_far_over_its_share_calls_the_store_once_a_lease_period() {
    // One of ten nodes asks for `fast` (1,000 a second) 500 times a second,
    // five times its share of 100, on the memory store (a real bucket, on
    // the paused clock). The bucket starts drained, and the other nine take
    // up to two tokens every 3 ms, so this node's grants are what refilled
    // since the last taker: about a third of the rate. Its lease is about 50
    // tokens (100 ms of its demand), which the bucket refills in 50 ms: held
    // only for that, it called the store 26 times a second. It is held a
    // whole lease period (100 ms) after each drained grant or denial instead,
    // and gets as much.
    use crate::store::memory::MemoryStore;
    let rules = Arc::new(CurrentRules::empty());
    rules.install(Arc::new(parse_rules("t", RULES).unwrap()));
    let metrics = Arc::new(Metrics::new("test").unwrap());
    let store = Arc::new(MemoryStore::new());
    let svc = LeaseService::new(
        rules,
        store.clone(),
        metrics.clone(),
        LeaseSettings::default(),
    );
    svc.live_nodes_handle().store(10, Ordering::Relaxed);
    let rule = svc.rules.get().unwrap();
    let limit = rule.rule("fast").unwrap().limit_in_force(None, 0).limit;
    let take = move |max| Acquire {
        key: DescriptorKey::new("fast", ["GET"]),
        limit,
        min: 1,
        max,
        share: 1.0,
    };
    store.acquire(&[take(limit.burst())]).await;
    let others = {
        let store = store.clone();
        tokio::spawn(async move {
            loop {
                store.acquire(&[take(2)]).await;
                tokio::time::sleep(3 * MS).await;
            }
        })
    };
    let calls = || {
        let text = metrics.render().unwrap();
        sample(&text, "meshlimit_store_requests_total", &[("result", "ok")]).unwrap_or(0.0)
    };
    let mut admitted = 0;
    for round in 0..2 {
        let before = calls();
        for _ in 0..500 {
            let answer = &svc.lease(&request(&["fast"])).await.items[0];
            admitted += u32::from(round == 1 && matches!(answer, LeaseAnswer::Grant { .. }));
            tokio::time::sleep(2 * MS).await;
        }
        if round == 1 {
            let per_second = calls() - before;
            assert!(
                (8.0..=12.0).contains(&per_second),
                "{per_second} store calls in a second, against one a lease period"
            );
        }
    }
    others.abort();
    // Held, not starved: the node still gets what the others leave.
    assert!(
        (280..=400).contains(&admitted),
        "{admitted} of 500 asks granted, against about 340 left by the others"
    );
}
