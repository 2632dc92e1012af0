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
    // (file, expected error line, exactly as `check-rules` prints it: the line
    // and column of the field, its path in the file, what is wrong)
    let table = [
        ("bad-unknown-field.yaml", "bad-unknown-field.yaml:5:14: rule search: field rules[0].limit.requets: unknown field `requets`, expected one of `requests`, `per`, `burst`"),
        ("bad-period.yaml", "bad-period.yaml:5:28: rule search: field rules[0].limit.per: `1 minute` is not a period: write a whole number and one of ms, s, m, h, d (e.g. 250ms, 1s, 1m)"),
        ("bad-duplicate.yaml", "bad-duplicate.yaml:4:7: rule twice: field rules[1].name: duplicate rule name: `twice` is already the name of the rule at line 3; names are unique in a file"),
        ("bad-name.yaml", "bad-name.yaml:3:7: rule Search API: field rules[0].name: `Search API` must be 1 to 64 characters of [a-z0-9._-]"),
        ("bad-plan-default.yaml", "bad-plan-default.yaml:5:30: rule plans: field rules[0].plans.default: plan `gold` is not in `plans.limits`"),
        ("bad-key.yaml", "bad-key.yaml:3:22: rule k: field rules[0].key[0]: unknown key part `ip`: expected one of `method`, `client_ip`, `path`, `route`, `authority`, `header: NAME`, `query: NAME`, `claim: NAME` or `metadata: {filter: NAME, path: [FIELD, ...]}`"),
        ("bad-cost.yaml", "bad-cost.yaml:3:35: rule heavy: field rules[0].cost: cost 50 is above the burst 10 of `limit`: no request could ever pass"),
        ("bad-no-limit.yaml", "bad-no-limit.yaml:3:5: rule nolimit: field rules[0].limit: a rule needs `limit` or `plans`"),
        ("bad-zero.yaml", "bad-zero.yaml:3:43: rule zero: field rules[0].limit.requests: must be at least 1"),
        ("bad-mode.yaml", "bad-mode.yaml:3:31: rule m: field rules[0].mode: unknown value `enforcing`, expected `enforce` or `shadow`"),
        ("bad-header-match.yaml", "bad-header-match.yaml:4:25: rule h: field rules[0].match.headers.x-env: give exactly one of `present` or `equals`"),
        ("bad-no-rules.yaml", "bad-no-rules.yaml:2:1: field rules: at least one rule is required"),
        ("bad-version.yaml", "bad-version.yaml:1:1: field version: unsupported schema version 2; this agent reads version 1"),
        ("bad-refill.yaml", "bad-refill.yaml:6:36: rule slow: field rules[0].limit.burst: a full burst of 400 takes 400 days to refill at 1 per `1d`; at most 366 days: raise `requests` or lower `burst`"),
        ("bad-refill-plan.yaml", "bad-refill-plan.yaml:10:39: rule plans: field rules[0].plans.limits.huge.burst: a full burst of 4000000000 takes 4000000000 days to refill at 1 per `1d`; at most 366 days: raise `requests` or lower `burst`"),
        ("bad-burst-range.yaml", "bad-burst-range.yaml:6:37: rule big: field rules[0].limit.burst: expected a whole number from 1 to 4294967295 (e.g. `burst: 200`); got the number 9007199254740993"),
        ("bad-period-overflow.yaml", "bad-period-overflow.yaml:5:27: rule long: field rules[0].limit.per: `99999999999999999999d` must be between 1ms and 366d"),
        ("bad-window-burst.yaml", "bad-window-burst.yaml:6:37: rule per-minute: field rules[0].limit.burst: `burst: 150` applies to `token_bucket` only: a `fixed_window` admits `requests` per `per` window and has no burst: remove `burst`"),
        ("bad-algorithm.yaml", "bad-algorithm.yaml:5:5: rule leaky: field rules[0].algorithm: unknown value `leaky_bucket`, expected one of `token_bucket`, `fixed_window`, `sliding_window`"),
        ("bad-top-level.yaml", "bad-top-level.yaml:2:1: field ruls: unknown field `ruls`, expected one of `version`, `defaults`, `rules`, `changes`"),
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
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/invalid/three-mistakes-in-two-rules.yaml"
    ));
    let errors = parse_rules("f", text)
        .err()
        .map(|e| e.errors.len())
        .unwrap_or_default();
    assert_eq!(errors, 3);
}

#[test]
fn nine_mistakes_are_reported_in_one_run_with_their_lines() {
    // Two rules that cannot be read and seven that do not validate: the first two
    // do not hide the other seven.
    let expected = [
        "bad-nine.yaml:11:5: rule search-per-api-key: field rules[0].limt: unknown field `limt`, expected one of `name`, `match`, `key`, `limit`, `plans`, `cost`, `mode`, `on_failure`, `accuracy`, `scope`, `algorithm`, `cold_start`, `owner`, `expires`, `log_sample`, `log_key`, `schedule`",
        "bad-nine.yaml:15:5: rule login-per-ip: field rules[1].mode: unknown value `enforcing`, expected `enforce` or `shadow`",
        "bad-nine.yaml:16:5: rule Checkout: field rules[2].name: `Checkout` must be 1 to 64 characters of [a-z0-9._-]",
        "bad-nine.yaml:21:28: rule per-path: field rules[3].limit.per: `1 minute` is not a period: write a whole number and one of ms, s, m, h, d (e.g. 250ms, 1s, 1m)",
        "bad-nine.yaml:22:5: rule per-path: field rules[4].name: duplicate rule name: `per-path` is already the name of the rule at line 19; names are unique in a file",
        "bad-nine.yaml:27:14: rule zero: field rules[5].limit.requests: must be at least 1",
        "bad-nine.yaml:30:5: rule heavy: field rules[6].cost: cost 50 is above the burst 10 of `limit`: no request could ever pass",
        "bad-nine.yaml:36:7: rule plans: field rules[7].plans.default: plan `gold` is not in `plans.limits`",
        "bad-nine.yaml:42:9: rule staging-only: field rules[8].match.headers.x-env: give exactly one of `present` or `equals`",
    ];
    let name = "bad-nine.yaml";
    let errors = parse_rules(name, &read(name))
        .err()
        .map(|e| e.errors.iter().map(ToString::to_string).collect::<Vec<_>>())
        .unwrap_or_default();
    assert_eq!(errors, expected, "got\n{}", errors.join("\n"));
}

#[test]
fn yaml_syntax_errors_have_line_and_column() {
    let name = "bad-yaml-syntax.yaml";
    let err = parse_rules(name, &read(name)).err().map(|e| e.errors);
    let errors = err.unwrap_or_default();
    assert_eq!(errors.len(), 1, "{errors:?}");
    let e = &errors[0];
    assert_eq!((e.line, e.column), (Some(5), Some(4)), "{e}");
    assert!(
        e.to_string()
            .starts_with("bad-yaml-syntax.yaml:5:4: not valid YAML or JSON: "),
        "{e}"
    );
}

#[test]
fn a_bad_top_level_hides_no_rule_error() {
    let text = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/rules/invalid/bad-top-level-and-a-bad-rule.yaml"
    ));
    let errors: Vec<String> = parse_rules("f", text)
        .err()
        .map(|e| e.errors.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    assert_eq!(
        errors,
        [
            "f:2:1: field limits: unknown field `limits`, expected one of `version`, `defaults`, `rules`, `changes`",
            "f:3:12: field defaults.mode: unknown value `strict`, expected `enforce` or `shadow`",
            "f:5:38: rule a: field rules[0].limit.requests: must be at least 1",
        ]
    );
}
