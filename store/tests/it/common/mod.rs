//! Helpers shared by the store's tests: a Redis store's configuration.

// Each test binary uses a different subset of these helpers.
#![allow(dead_code, clippy::unwrap_used)]

/// A Redis store's configuration for tests: `nodes` (a single Redis, or a
/// cluster's seeds) and a 2 s deadline (the tests check
/// correctness, not latency, on a loaded machine), placeholder key ids.
pub fn redis_store_config(
    nodes: Vec<String>,
    cluster: bool,
) -> meshlimit_store::redis::RedisConfig {
    meshlimit_store::redis::RedisConfig {
        nodes,
        cluster,
        connect: Default::default(),
        key_ids: meshlimit_core::secret::KeyIds::placeholder(),
        control: test_secret().control_mac(),
        batch: meshlimit_store::redis::BatchConfig {
            max_batch: 16,
            deadline: std::time::Duration::from_secs(2),
        },
    }
}

/// The deployment secret the tests' stores sign control state with.
pub fn test_secret() -> meshlimit_core::secret::Secret {
    meshlimit_core::secret::Secret::new(b"meshlimit-agent-tests-secret-0123456789").unwrap()
}

/// Waits until `condition` holds, checking every 10 ms; panics naming `what`
/// once `deadline` has passed.
pub async fn eventually(
    deadline: std::time::Duration,
    what: &str,
    mut condition: impl FnMut() -> bool,
) {
    let start = tokio::time::Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < deadline,
            "{what}: not within {deadline:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
