//! The per-key memory the agent's tables hold at worst (keys of `MAX_KEY_BYTES`),
//! measured as this process's RSS growth: one test alone in its binary, so no
//! other test allocates meanwhile. `cargo test -p meshlimit-agent --test
//! memory_bounds -- --nocapture` prints the figures the module docs of
//! `store::memory` state.

// Test helpers outside #[test] functions may unwrap too: a failure is the point.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::num::{NonZeroU32, NonZeroU64};

use meshlimit_agent::fail_local::FailLocal;
use meshlimit_agent::leases::DEFAULT_MAX_KEYS;
use meshlimit_agent::pool::{Pools, StoreGrant};
use meshlimit_core::wire::MAX_KEY_BYTES;
use meshlimit_core::{DescriptorKey, Limit, NANOS_PER_SEC};
use meshlimit_store::{Acquire, Buckets, MemoryStore};

/// The bound stated per key and table, in bytes.
const PER_KEY_BYTES: u64 = 1_300;

fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS")).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        * 1024
}

/// The `i`th key of the longest size the API accepts.
fn key(i: usize) -> DescriptorKey {
    let head = format!("r|{i}-");
    DescriptorKey::from_wire(format!("{head}{}", "x".repeat(MAX_KEY_BYTES - head.len())))
}

#[tokio::test]
async fn each_table_holds_at_most_max_keys_of_about_1_2_kib() {
    let n = DEFAULT_MAX_KEYS;
    // More keys than the cap arrive; the tables keep at most the cap.
    let arriving = n + n / 5;
    let limit = Limit::new(
        NonZeroU32::new(10).unwrap(),
        NonZeroU64::new(3_600 * NANOS_PER_SEC).unwrap(),
        NonZeroU32::new(10).unwrap(),
    );
    let mut per_key = Vec::new();

    let before = rss();
    let store = MemoryStore::with_max_keys(n);
    for chunk in (0..arriving).collect::<Vec<_>>().chunks(64) {
        let items: Vec<Acquire> = chunk
            .iter()
            .map(|&i| Acquire {
                key: key(i),
                limit,
                min: 1,
                max: 1,
                share: 1.0,
            })
            .collect();
        store.acquire(&items).await;
    }
    let held = store.len();
    assert!(held <= n + 15, "the store holds {held} buckets");
    per_key.push(("memory store", (rss() - before) / held as u64));

    let before = rss();
    let pools = Pools::new(
        n,
        meshlimit_core::policy::LeasePolicy::default().ask_period_ns(),
    );
    let grant = StoreGrant::under(limit, 4, 0, NANOS_PER_SEC);
    for i in 0..arriving {
        pools.fill(&key(i), 0, grant, 1, 300_000_000);
    }
    let held = pools.len();
    assert!(held <= n + 15, "the pool holds {held} keys");
    per_key.push(("node pool", (rss() - before) / held as u64));

    let before = rss();
    let fail_local = FailLocal::new(n);
    for i in 0..arriving {
        fail_local.take(&key(i), &limit, 0, 1, 0.0);
    }
    let held = fail_local.len();
    assert!(held <= n, "the fail-local table holds {held} keys");
    per_key.push(("fail-local buckets", (rss() - before) / held as u64));

    for (table, bytes) in &per_key {
        eprintln!("{table}: {bytes} bytes a key of {MAX_KEY_BYTES} bytes, {n} keys");
    }
    for (table, bytes) in per_key {
        assert!(
            bytes < PER_KEY_BYTES,
            "{table}: {bytes} bytes a key, more than the {PER_KEY_BYTES} stated"
        );
    }
}
