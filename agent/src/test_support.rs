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
