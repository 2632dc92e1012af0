//! What the sim's tests share: running a scenario's short version.

use std::path::PathBuf;
use std::sync::Mutex;

use meshlimit_sim::report::markdown;
use meshlimit_sim::{Overrides, RunOptions, RunReport, Scenario};

/// |SLI − wrongly limited|, as a share of the 429s, at most: the stranded
/// tokens' share (see [`assert_sli_agrees`]) with room for a run's spread,
/// plus twice the SLI's sampling error ([`sli_sampling_error`]).
pub const SLI_MARGIN: f64 = 0.015;

/// The SLI's sampling error: it counts k checks found false, each weighing
/// for the suspects skipped before it, so it moves by about SLI ÷ √k from
/// run to run. Under a full check budget (a key's onset) one check stands for
/// a hundred 429s and more, so a few false checks can put the SLI well above
/// the judge by chance. With four false checks or fewer, an SLI above the
/// judge is within its error and passes; the SLIs this guards against (a
/// check without its drained-bucket test, for one) find dozens of false
/// checks and more.
fn sli_sampling_error(f: &meshlimit_sim::FalseLimitSli) -> f64 {
    if f.false_limits == 0 {
        return 0.0;
    }
    f.ratio() / (f.false_limits as f64).sqrt()
}

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

/// The judge's wrongly limited, as a share of the run's 429s.
fn wrongly_limited_share(r: &RunReport) -> f64 {
    let t = &r.figures.totals;
    t.wrongly_limited as f64 / t.limited.max(1) as f64
}

/// The agents' false-limit SLI agrees with the judge's wrongly limited within
/// [`SLI_MARGIN`] plus twice its sampling error (both shares of the run's
/// 429s), and it is a ratio over
/// every 429 (the checks weigh for the suspects skipped for the budget), not
/// over the few checked.
///
/// The SLI counts a 429 false only when the store's bucket proves it, and the
/// store cannot see tokens it handed out in leases and pools that nobody
/// spent: the judge's wrong 429s all come while a grant had drained the
/// store's bucket for a key under its limit (a small share of the 429s over
/// these scenarios: docs/guide/false-limits.md). So the SLI is never above the
/// truth by more than its sampling error.
pub fn assert_sli_agrees(r: &RunReport) {
    let (sli, truth) = (r.setup.false_limits.ratio(), wrongly_limited_share(r));
    let margin = SLI_MARGIN + 2.0 * sli_sampling_error(&r.setup.false_limits);
    let report = markdown::scenario(r);
    assert!(
        (sli - truth).abs() <= margin,
        "{}: SLI {:.4}% against wrongly limited {:.4}% of the 429s, margin {:.2} points\n{report}",
        r.name,
        sli * 100.0,
        truth * 100.0,
        margin * 100.0
    );
    let (weighed, limited) = (
        r.setup.false_limits.weighed as f64,
        r.figures.totals.limited as f64,
    );
    assert!(
        (weighed - limited).abs() <= 0.1 * limited,
        "{}: the SLI weighs {weighed} 429s, the run had {limited}\n{report}",
        r.name
    );
}

/// Where the judge finds no wrong 429, the SLI finds none either.
pub fn assert_sli_zero(r: &RunReport) {
    assert_eq!(r.figures.totals.wrongly_limited, 0);
    let sli = &r.setup.false_limits;
    assert_eq!(sli.weighed_false, 0, "{}", markdown::scenario(r));
    assert_eq!(sli.false_limits, 0, "{}", markdown::scenario(r));
}
