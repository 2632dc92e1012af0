//! Decision counts per rule and outcome, and the fail-open ratio over the last minute.

use super::*;

#[test]
fn unknown_rules_fold_into_other() {
    let m = Fixture::new();
    let set = parse_rules("t", RULES).unwrap();
    m.reports.record_sync(
        Some(&set),
        &report(
            "f",
            "v",
            &[
                ("r", Outcome::Allowed, 2),
                ("customer-123", Outcome::Limited, 7),
            ],
        ),
    );
    let text = m.render().unwrap();
    let decisions = |rule, outcome| {
        sample(
            &text,
            "meshlimit_decisions_total",
            &[("rule", rule), ("outcome", outcome)],
        )
    };
    assert_eq!(decisions("r", "allowed"), Some(2.0));
    assert_eq!(decisions("other", "limited"), Some(7.0));
    assert!(!text.contains("customer-123"));
}

#[tokio::test(start_paused = true)]
async fn the_fail_open_ratio_is_the_share_of_a_rules_decisions_that_failed_open() {
    let m = Fixture::new();
    let set = parse_rules("t", RULES).unwrap();
    m.reports.record_sync(
        Some(&set),
        &report(
            "f",
            set.version(),
            &[
                ("r", Outcome::Allowed, 6),
                ("r", Outcome::FailedOpen, 3),
                ("r", Outcome::Limited, 1),
                ("r", Outcome::FailedClosed, 0),
            ],
        ),
    );
    m.refresh(Some(&set));
    let text = m.render().unwrap();
    assert!(close(
        value(&text, "meshlimit_fail_open_ratio", &[("rule", "r")]),
        0.3
    ));
    let decisions = |outcome| {
        sample(
            &text,
            "meshlimit_decisions_total",
            &[("rule", "r"), ("outcome", outcome)],
        )
    };
    assert_eq!(decisions("failed_open"), Some(3.0));
    assert_eq!(
        decisions("failed_closed"),
        None,
        "a count of 0 adds nothing"
    );
}

#[tokio::test(start_paused = true)]
async fn the_fail_open_ratio_counts_the_last_minute_only() {
    let m = Fixture::new();
    let set = parse_rules("t", RULES).unwrap();
    let decisions = |outcome| report("f", set.version(), &[("r", outcome, 10)]);
    m.reports
        .record_sync(Some(&set), &decisions(Outcome::FailedOpen));
    tokio::time::advance(Duration::from_secs(30)).await;
    m.reports
        .record_sync(Some(&set), &decisions(Outcome::Allowed));
    m.refresh(Some(&set));
    let ratio = |m: &Fixture| {
        let text = m.render().unwrap();
        value(&text, "meshlimit_fail_open_ratio", &[("rule", "r")])
    };
    assert!(close(ratio(&m), 0.5));
    // A minute after the failures: only the allowed decisions are left.
    tokio::time::advance(Duration::from_secs(31)).await;
    m.refresh(Some(&set));
    assert_eq!(ratio(&m), 0.0);
}
