//! What the agent spends on the decision log, per record: a filter VM's batch
//! of 128 rejections (the most one `POST /v1/decisions` carries) parsed and
//! taken by the log kept in memory (ring and hot keys; written nowhere), beside
//! the same body parsed into a generic `serde_json::Value` in the same run
//! (the baseline: what reading the JSON alone costs).
//!
//! `cargo bench -p meshlimit-agent --bench decision_log`. Under overload every
//! rejection is a record (thousands a second on one node), so this is most of
//! the agent's CPU there.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use meshlimit_agent::decision_log::DecisionLog;
use meshlimit_agent::decision_log::DecisionLogMetrics;
use meshlimit_agent::metrics::Registry;
use meshlimit_core::wire::{DecisionsRequest, MAX_DECISION_RECORDS};

fn decision_log(c: &mut Criterion) {
    let bodies: Vec<Vec<u8>> = (0..16).map(meshlimit_tests::decision_batch_body).collect();
    let mut g = c.benchmark_group("decision_log");
    g.throughput(Throughput::Elements(MAX_DECISION_RECORDS as u64));
    let log = DecisionLog::in_memory(Arc::new(DecisionLogMetrics::new(&Registry::new()).unwrap()));
    let mut n = 0;
    g.bench_function("batch_128", |b| {
        b.iter(|| {
            n += 1;
            let batch: DecisionsRequest =
                serde_json::from_slice(black_box(&bodies[n % bodies.len()])).unwrap();
            log.accept(batch);
        })
    });
    g.bench_function("json_value_128", |b| {
        b.iter(|| {
            n += 1;
            let v: serde_json::Value =
                serde_json::from_slice(black_box(&bodies[n % bodies.len()])).unwrap();
            black_box(v)
        })
    });
    g.finish();
}

criterion_group!(benches, decision_log);
criterion_main!(benches);
