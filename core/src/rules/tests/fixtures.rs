//! The table of good and bad rules files under `core/tests/fixtures/`: each bad
//! file is listed with the error it must produce (rule and field named).

use super::parse_rules;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn good_files_compile() {
    for name in [
        "good-full.yaml",
        "good-minimal.yaml",
        "good.json",
        "good-edge.yaml",
    ] {
        if let Err(e) = parse_rules(name, &read(name)) {
            panic!("{name} should be valid:\n{e}");
        }
    }
}

#[test]
fn bad_files_name_the_rule_and_field() {
    // (file, expected error line, exactly as `check-rules` prints it)
    let table = [
        ("bad-unknown-field.yaml", "bad-unknown-field.yaml: rule search: field limit.requets: unknown field `requets`, expected one of `requests`, `per`, `burst`"),
        ("bad-period.yaml", "bad-period.yaml: rule search: field limit.per: `1 minute` is not a period: write a whole number and one of ms, s, m, h, d (e.g. 250ms, 1s, 1m)"),
        ("bad-duplicate.yaml", "bad-duplicate.yaml: rule twice: field name: duplicate rule name"),
        ("bad-name.yaml", "bad-name.yaml: rule Search API: field name: `Search API` must be 1 to 64 characters of [a-z0-9._-]"),
        ("bad-plan-default.yaml", "bad-plan-default.yaml: rule plans: field plans.default: plan `gold` is not in `plans.limits`"),
        ("bad-key.yaml", "bad-key.yaml: rule k: field key[0]: unknown key part `ip`: expected one of `method`, `client_ip`, `path`, `route` or `header: NAME`"),
        ("bad-cost.yaml", "bad-cost.yaml: rule heavy: field cost: cost 50 is above the burst 10 of `limit`: no request could ever pass"),
        ("bad-no-limit.yaml", "bad-no-limit.yaml: rule nolimit: field limit: a rule needs `limit` or `plans`"),
        ("bad-zero.yaml", "bad-zero.yaml: rule zero: field limit.requests: must be at least 1"),
        ("bad-mode.yaml", "bad-mode.yaml: rule m: field mode: unknown variant `enforcing`, expected `enforce` or `shadow`"),
        ("bad-header-match.yaml", "bad-header-match.yaml: rule h: field match.headers.x-env: give exactly one of `present` or `equals`"),
        ("bad-no-rules.yaml", "bad-no-rules.yaml: field rules: at least one rule is required"),
        ("bad-version.yaml", "bad-version.yaml: field version: unsupported schema version 2; this agent reads version 1"),
        ("bad-refill.yaml", "bad-refill.yaml: rule slow: field limit.burst: a full burst of 400 takes 400 days to refill at 1 per `1d`; at most 366 days: raise `requests` or lower `burst`"),
        ("bad-refill-plan.yaml", "bad-refill-plan.yaml: rule plans: field plans.limits.huge.burst: a full burst of 4000000000 takes 4000000000 days to refill at 1 per `1d`; at most 366 days: raise `requests` or lower `burst`"),
        ("bad-burst-range.yaml", "bad-burst-range.yaml: rule big: field limit.burst: invalid value: integer `9007199254740993`, expected u32"),
        ("bad-period-overflow.yaml", "bad-period-overflow.yaml: rule long: field limit.per: `99999999999999999999d` must be between 1ms and 366d"),
        ("bad-top-level.yaml", "bad-top-level.yaml: field ruls: unknown field `ruls`, expected one of `version`, `defaults`, `rules`"),
    ];
    for (name, expected) in table {
        match parse_rules(name, &read(name)) {
            Ok(_) => panic!("{name} should be refused"),
            Err(e) => {
                let lines: Vec<String> = e.errors.iter().map(ToString::to_string).collect();
                assert!(
                    lines.iter().any(|l| l == expected),
                    "{name}: expected\n  {expected}\ngot\n  {}",
                    lines.join("\n  ")
                );
            }
        }
    }
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = "version: 1\nrules:\n  - {name: a, key: [method], limit: {requests: 0, per: 1x}}\n  - {name: b, key: [], limit: {requests: 1, per: 1s}}\n";
    let errors = parse_rules("f", text)
        .err()
        .map(|e| e.errors.len())
        .unwrap_or_default();
    assert_eq!(errors, 3);
}
