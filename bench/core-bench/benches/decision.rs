//! One rate-limit decision, meshlimit-core beside governor, in one binary so both
//! see the same CPU, compiler and allocator. Figures are read by the bench driver
//! from `target/criterion/<group>/<bench>/new/estimates.json`.
//!
//! * `core/bucket_take`: `Bucket::take` on one bucket, time passed in.
//! * `core/key_fingerprint`: building a `DescriptorKey` from a header value and
//!   fingerprinting it (what picks the shared-data slot in the filter).
//! * `core/key_id`: a key's id (the keyed hash that names it in metrics, logs,
//!   Redis and the access log; the filter forms one per decided request).
//! * `keyed/meshlimit` vs `keyed/governor`: a decision for one of 1,000 keys:
//!   read the clock, find the key's bucket, take a token. governor's
//!   `RateLimiter::keyed` (its default store and quanta clock) against a std
//!   `HashMap` of `Bucket`s read with the same quanta clock: meshlimit-core takes
//!   time as an argument, so both pay for the same clock and the figure compares
//!   the limiters, not the clocks.
//! * `single/meshlimit` vs `single/governor`: the same for one key
//!   (`RateLimiter::direct`).
//! * `clock/quanta` and `clock/std_instant`: what reading each clock costs here
//!   (in Envoy the filter's clock is a hostcall).
//! * `rules/applicable/N`: which of N rules apply to a typical request (one
//!   does: `path_prefix` + methods, keyed on a header); `rules/applicable_none/N`:
//!   the same for a request no rule matches.
//! * `rules_compile/N`: compiling N such rules (what a filter VM does when a new
//!   version arrives, in its root context, not on a request).
//! * `claims/namespace_and_claim`: finding jwt_authn's namespace in a stream's
//!   dynamic metadata (a 12-claim token's payload beside another filter's
//!   metadata, as Envoy serializes property `metadata`) and reading `sub`.
//!   `claims/applicable_claim` vs `claims/applicable_header`: one rule keyed on
//!   the `sub` claim, or on a header, applied to the same request.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::hint::black_box;
use std::num::{NonZeroU32, NonZeroU64};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use governor::{Quota, RateLimiter};
use meshlimit_core::secret::{KeyIds, Secret};
use meshlimit_core::{Bucket, DescriptorKey, Limit, RuleSet, Take};
use meshlimit_core_bench::{keys, request, request_none, rule_set, rule_set_config};

/// Far above what a benchmark takes, so every decision is a grant.
const RATE: u32 = 1_000_000_000;
const KEYS: usize = 1_000;

fn limit() -> Limit {
    let rate = NonZeroU32::new(RATE).unwrap();
    Limit::new(rate, NonZeroU64::new(1_000_000_000).unwrap(), rate)
}

/// Nanoseconds since `base` on governor's default clock source.
fn now_ns(clock: &quanta::Clock, base: quanta::Instant) -> u64 {
    clock.now().duration_since(base).as_nanos() as u64
}

fn core(c: &mut Criterion) {
    let mut g = c.benchmark_group("core");
    let limit = limit();
    let mut bucket = Bucket::full(&limit, 0);
    let mut now = 0u64;
    g.bench_function("bucket_take", |b| {
        b.iter(|| {
            now += 100;
            black_box(bucket.take(&limit, black_box(now), 1, 1))
        })
    });
    g.bench_function("key_fingerprint", |b| {
        b.iter(|| {
            let key = DescriptorKey::new("search-per-api-key", [black_box("k-0123456789abcdef")]);
            black_box(key.fingerprint())
        })
    });
    let ids = Secret::new(b"0123456789abcdef0123456789abcdef")
        .map(|s| s.key_ids())
        .unwrap_or_else(|_| KeyIds::placeholder());
    let key = DescriptorKey::new("search-per-api-key", ["k-0123456789abcdef"]);
    g.bench_function("key_id", |b| b.iter(|| black_box(ids.id(black_box(&key)))));
    g.finish();
}

fn keyed(c: &mut Criterion) {
    let mut g = c.benchmark_group("keyed");
    let limit = limit();
    let keys = keys(KEYS);
    let clock = quanta::Clock::new();
    let base = clock.now();
    let mut buckets: HashMap<DescriptorKey, Bucket> = keys
        .iter()
        .map(|k| (k.clone(), Bucket::full(&limit, 0)))
        .collect();
    let mut i = 0usize;
    g.bench_function("meshlimit", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let now = now_ns(&clock, base);
            let granted = match buckets.get_mut(black_box(&keys[i])) {
                Some(bucket) => matches!(bucket.take(&limit, now, 1, 1), Take::Granted { .. }),
                None => false,
            };
            black_box(granted)
        })
    });
    let governor = RateLimiter::keyed(Quota::per_second(NonZeroU32::new(RATE).unwrap()));
    for k in &keys {
        let _ = governor.check_key(k);
    }
    g.bench_function("governor", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(governor.check_key(black_box(&keys[i])).is_ok())
        })
    });
    g.finish();
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("single");
    let limit = limit();
    let clock = quanta::Clock::new();
    let base = clock.now();
    let mut bucket = Bucket::full(&limit, 0);
    g.bench_function("meshlimit", |b| {
        b.iter(|| {
            let now = now_ns(&clock, base);
            black_box(matches!(
                bucket.take(&limit, now, 1, 1),
                Take::Granted { .. }
            ))
        })
    });
    let governor = RateLimiter::direct(Quota::per_second(NonZeroU32::new(RATE).unwrap()));
    g.bench_function("governor", |b| {
        b.iter(|| black_box(governor.check().is_ok()))
    });
    g.finish();
}

fn clocks(c: &mut Criterion) {
    let mut g = c.benchmark_group("clock");
    let clock = quanta::Clock::new();
    g.bench_function("quanta", |b| b.iter(|| black_box(clock.now())));
    g.bench_function("std_instant", |b| b.iter(|| black_box(Instant::now())));
    g.finish();
}

fn rules(c: &mut Criterion) {
    let mut g = c.benchmark_group("rules");
    for n in RULE_COUNTS {
        let set = rule_set(n).unwrap();
        let req = request(n);
        assert_eq!(set.applicable(&req).map(|a| a.len()), Ok(1));
        g.bench_with_input(BenchmarkId::new("applicable", n), &n, |b, _| {
            b.iter(|| black_box(set.applicable(black_box(&req)).map(|a| a.len())))
        });
        let none = request_none();
        assert_eq!(set.applicable(&none).map(|a| a.len()), Ok(0));
        g.bench_with_input(BenchmarkId::new("applicable_none", n), &n, |b, _| {
            b.iter(|| black_box(set.applicable(black_box(&none)).map(|a| a.len())))
        });
    }
    g.finish();
    let mut g = c.benchmark_group("rules_compile");
    g.sample_size(10);
    let n = 20_000;
    let config = rule_set_config(n).unwrap();
    g.bench_with_input(BenchmarkId::from_parameter(n), &n, |b, _| {
        b.iter(|| black_box(RuleSet::compile(black_box(&config)).map(|s| s.rules().len())))
    });
    g.finish();
}

fn claims(c: &mut Criterion) {
    use meshlimit_core::metadata::{namespace, MetadataPath, JWT_AUTHN};
    let mut g = c.benchmark_group("claims");
    let req = meshlimit_core_bench::request_with_claims();
    let all = meshlimit_core_bench::metadata_of(&req);
    let sub = MetadataPath::claim("sub");
    assert!(namespace(&all, JWT_AUTHN)
        .and_then(|ns| sub.lookup(ns))
        .is_some());
    g.bench_function("namespace_and_claim", |b| {
        b.iter(|| {
            black_box(
                namespace(black_box(&all), JWT_AUTHN)
                    .and_then(|ns| sub.lookup(ns))
                    .map(|v| v.len()),
            )
        })
    });
    for (name, key) in [
        ("applicable_claim", serde_json::json!({"claim": "sub"})),
        (
            "applicable_header",
            serde_json::json!({"header": "x-api-key"}),
        ),
    ] {
        let set = meshlimit_core_bench::one_rule_keyed_on(key).unwrap();
        assert_eq!(set.applicable(&req).map(|a| a.len()), Ok(1));
        g.bench_function(name, |b| {
            b.iter(|| black_box(set.applicable(black_box(&req)).map(|a| a.len())))
        });
    }
    g.finish();
}

/// Rule-set sizes: a handful, a large service, a platform's whole rule set.
const RULE_COUNTS: [usize; 3] = [10, 1_000, 20_000];

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
        .without_plots()
}

criterion_group! {
    name = benches;
    config = config();
    targets = core, keyed, single, clocks, rules, claims
}
criterion_main!(benches);
