//! The fleet commands as an operator runs them (`meshlimit override …`),
//! and the bound they promise: every agent applies a change within 2 s.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::{cli_bin, sample, Agent};

/// The bound the fleet override and the trial controls promise: every agent,
/// and the filters behind it.
pub const FLEET_WITHIN: Duration = Duration::from_secs(2);

/// Runs `meshlimit override ARGS --store URL`, asserting exit 0; answers
/// what it printed.
pub fn run_override(args: &[&str], store: &str) -> String {
    let out = Command::new(cli_bin())
        .arg("override")
        .args(args)
        .args(["--store", store])
        .env("MESHLIMIT_SECRET", crate::TEST_SECRET)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "override {args:?}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// How often a filter VM syncs with the agent (the plugin's `sync_interval_ms`
/// in `envoy.yaml`).
pub const FILTER_SYNC: Duration = Duration::from_secs(1);

/// The filters' bound: the agents' and one sync of the filters.
pub const FILTERS_WITHIN: Duration = FLEET_WITHIN.saturating_add(FILTER_SYNC);

/// Polls `done` until it holds, up to [`FLEET_WITHIN`] after `since`; answers
/// how long it took.
pub fn within(since: Instant, what: &str, done: impl FnMut() -> bool) -> Duration {
    within_by(FLEET_WITHIN, since, what, done)
}

/// Polls `done` until it holds, up to `bound` after `since`; answers how long
/// it took.
pub fn within_by(
    bound: Duration,
    since: Instant,
    what: &str,
    mut done: impl FnMut() -> bool,
) -> Duration {
    loop {
        if done() {
            return since.elapsed();
        }
        assert!(since.elapsed() <= bound, "{what}: not within {bound:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `meshlimit_fleet_override{mode}` as `agent` shows it.
pub fn fleet_override_gauge(agent: &Agent, mode: &str) -> Option<f64> {
    sample(
        &agent.metrics(),
        "meshlimit_fleet_override",
        &[("mode", mode)],
    )
}
