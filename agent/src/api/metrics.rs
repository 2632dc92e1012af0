//! The API's own metrics: requests refused for the caller's mistake, and
//! connections closed on accept.

use prometheus::{IntCounter, IntCounterVec};

use crate::metrics::{inc, Factory, MetricsError, Registry};

/// The API's and the server's metrics.
pub struct ApiMetrics {
    bad_requests: IntCounterVec,
    connections_refused: IntCounter,
}

impl ApiMetrics {
    /// Registers the API's metrics in `registry`.
    pub fn new(registry: &Registry) -> Result<Self, MetricsError> {
        let f = Factory(registry);
        Ok(Self {
            bad_requests: f.counters(
                "meshlimit_bad_requests_total",
                "Requests refused with a 4xx, by reason.",
                &["reason"],
            )?,
            connections_refused: f.counter(
                "meshlimit_connections_refused_total",
                "Connections closed at once because --max-connections were open.",
            )?,
        })
    }

    /// A request refused for the caller's mistake; `reason` is a fixed word.
    pub(crate) fn bad_request(&self, reason: &str) {
        inc(&self.bad_requests, &[reason], 1);
    }

    /// A connection closed on accept: the agent had its maximum open.
    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render;
    use meshlimit_tests::sample;

    #[test]
    fn refusals_are_counted_by_reason_and_refused_connections_in_all() {
        let registry = Registry::new();
        let m = ApiMetrics::new(&registry).unwrap();
        m.bad_request("version");
        m.connection_refused();
        let text = render(&registry).unwrap();
        let reason = [("reason", "version")];
        assert_eq!(
            sample(&text, "meshlimit_bad_requests_total", &reason),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "meshlimit_connections_refused_total", &[]),
            Some(1.0)
        );
    }
}
