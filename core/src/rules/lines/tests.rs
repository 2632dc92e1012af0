use super::*;

fn config(n: usize) -> RulesConfig {
    let rules: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            serde_json::json!({
                "name": format!("r-{i}"),
                "match": {"path_prefix": format!("/api/{i}/"), "headers": {"x-note": {"equals": "line\nbreak"}}},
                "key": [{"header": "x-api-key"}],
                "limit": {"requests": 10 + i, "per": "1s"},
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "version": 1,
        "defaults": {"mode": "shadow"},
        "rules": rules,
    }))
    .unwrap()
}

#[test]
fn lines_loaded_in_slices_give_the_set_compiled_at_once() {
    let config = config(50);
    let whole = RuleSet::compile(&config).unwrap();
    let body = encode(&whole).unwrap();
    assert_eq!(
        body.iter().filter(|b| **b == b'\n').count(),
        50,
        "a head line and one line per rule"
    );
    let mut load = RulesLoad::start(body.clone()).unwrap();
    assert_eq!(load.version(), whole.version());
    let mut steps = 1;
    while !load.step(7).unwrap() {
        steps += 1;
    }
    // 50 rules, 7 a step; then finishing: the order checked, the paths
    // sorted, then indexed, the names sorted, then kept.
    assert_eq!(steps, 8 + 5);
    let (set, back) = load.finish().unwrap();
    assert_eq!(back, body);
    assert_eq!(set.version(), whole.version());
    let names = |s: &RuleSet| s.rules().iter().map(|r| r.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&set), names(&whole));
    assert!(set
        .rules()
        .iter()
        .all(|r| r.mode == crate::rules::Mode::Shadow));
    assert!(
        set.config().is_none(),
        "a loaded set keeps no copy of the file"
    );
}

#[test]
fn lines_come_in_the_sets_strictest_first_order() {
    let mut config = config(4);
    config.rules.reverse();
    let set = RuleSet::compile(&config).unwrap();
    let text = String::from_utf8(encode(&set).unwrap()).unwrap();
    let order: Vec<String> = text
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<RuleConfig>(l).unwrap().name)
        .collect();
    assert_eq!(order, ["r-0", "r-1", "r-2", "r-3"]);
    assert!(encode(&RuleSet::compile_unserved(&config).unwrap()).is_none());
}

#[test]
fn a_broken_or_truncated_body_is_refused_naming_the_line() {
    let body = encode(&RuleSet::compile(&config(3)).unwrap()).unwrap();
    let text = String::from_utf8(body.clone()).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines[2] = "{\"name\": ";
    let broken = lines.join("\n").into_bytes();
    assert!(matches!(
        RulesLoad::run(broken),
        Err(LoadError::Rule { line: 3, .. })
    ));
    let cut = body[..text.rfind('\n').unwrap()].to_vec();
    assert_eq!(
        RulesLoad::run(cut).unwrap_err(),
        LoadError::Count {
            expected: 3,
            found: 2
        }
    );
    assert!(matches!(
        RulesLoad::run(b"not json".to_vec()),
        Err(LoadError::Head(_))
    ));
    assert!(matches!(
        RulesLoad::run(Vec::new()),
        Err(LoadError::Head(_))
    ));
}

#[test]
fn an_invalid_rule_in_the_lines_is_refused_as_a_compile_would() {
    let body = encode(&RuleSet::compile(&config(2)).unwrap()).unwrap();
    let text = String::from_utf8(body)
        .unwrap()
        .replacen("\"r-1\"", "\"Bad Name\"", 1);
    let body = text.into_bytes();
    match RulesLoad::run(body) {
        Err(LoadError::Rules(e)) => {
            assert_eq!(e.errors.len(), 1);
            assert_eq!(e.errors[0].field, "name");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}
