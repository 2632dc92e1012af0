//! Helpers the agent's unit tests share.

use std::time::{Duration, Instant};

/// Polls `done` every 5 ms of real time for at most 5 s.
pub(crate) async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A service's metrics and the registry they are in, so that a test can
/// scrape them; derefs to the metrics.
pub(crate) struct Registered<M> {
    registry: crate::metrics::Registry,
    metrics: std::sync::Arc<M>,
}

impl<M> Registered<M> {
    /// Registers the metrics `new` makes in a fresh registry.
    pub(crate) fn new(
        new: impl FnOnce(&crate::metrics::Registry) -> Result<M, crate::metrics::MetricsError>,
    ) -> Registered<M> {
        let registry = crate::metrics::Registry::new();
        let metrics = std::sync::Arc::new(new(&registry).unwrap());
        Registered { registry, metrics }
    }

    /// The Prometheus text of the registry.
    pub(crate) fn render(&self) -> Result<String, crate::metrics::MetricsError> {
        crate::metrics::render(&self.registry)
    }
}

impl<M> std::ops::Deref for Registered<M> {
    type Target = std::sync::Arc<M>;

    fn deref(&self) -> &Self::Target {
        &self.metrics
    }
}
