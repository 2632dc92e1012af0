//! What the sim's tests share: running a scenario's short version.

use std::path::PathBuf;
use std::sync::Mutex;

use meshlimit_sim::report::markdown;
use meshlimit_sim::{Overrides, RunOptions, RunReport, Scenario};

/// The runs go one at a time, so one run's load does not disturb another's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs the short version of `scenarios/<name>.yaml`, its report written to
/// `target/tmp/<out>/` and printed.
pub fn run_short(name: &str, out: &str) -> RunReport {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let file = meshlimit_tests::repo_root()
        .join("scenarios")
        .join(format!("{name}.yaml"));
    let plan = Scenario::load(&file)
        .unwrap()
        .plan(&Overrides {
            short: true,
            ..Overrides::default()
        })
        .unwrap();
    let opts = RunOptions {
        out: Some(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(out)),
        ..RunOptions::default()
    };
    let report = meshlimit_sim::run(&plan, &opts).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{}", markdown::scenario(&report));
    report
}
