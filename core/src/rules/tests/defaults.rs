//! What `defaults:` and a rule choose: mode, failure policy, algorithm, log sample.

use super::*;

#[test]
fn defaults_apply_where_rules_are_silent() {
    let s = compile(serde_json::json!({
        "version": 1,
        "defaults": {"mode": "shadow", "on_failure": "open"},
        "rules": [
            {"name": "a", "key": ["client_ip"], "limit": {"requests": 1, "per": "1s"}},
            {"name": "b", "key": ["client_ip"], "limit": {"requests": 2, "per": "1s"}, "mode": "enforce", "accuracy": "exact"},
        ]
    }));
    let s = s.unwrap_or_else(|e| panic!("{e}"));
    let a = s.rule("a").unwrap_or_else(|| panic!("rule a"));
    let b = s.rule("b").unwrap_or_else(|| panic!("rule b"));
    assert_eq!(
        (a.mode, a.on_failure, a.accuracy, a.scope),
        (
            Mode::Shadow,
            FailurePolicy::Open,
            Accuracy::Fast,
            Scope::Region
        )
    );
    assert_eq!(
        (b.mode, b.on_failure, b.accuracy),
        (Mode::Enforce, FailurePolicy::Open, Accuracy::Exact)
    );
    assert_eq!(a.limits, Limits::Single(limit(1, NANOS_PER_SEC, 1)));
}

#[test]
fn a_rule_or_the_defaults_choose_the_algorithm_and_a_window_refuses_a_burst() {
    let s = compile(serde_json::json!({
        "version": 1,
        "defaults": {"algorithm": "sliding_window"},
        "rules": [
            {"name": "bucket", "key": ["client_ip"], "algorithm": "token_bucket", "limit": {"requests": 1, "per": "1s", "burst": 3}},
            {"name": "sliding", "key": ["client_ip"], "limit": {"requests": 2, "per": "1s"}},
            {"name": "fixed", "key": ["client_ip"], "algorithm": "fixed_window",
             "plans": {"header": "x-plan", "default": "free", "limits": {"free": {"requests": 3, "per": "1m"}}}},
        ]
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    let limit_of = |name: &str| {
        s.rule(name)
            .unwrap_or_else(|| panic!("rule {name}"))
            .limits
            .strictest()
    };
    assert_eq!(limit_of("bucket"), limit(1, NANOS_PER_SEC, 3));
    assert_eq!(
        limit_of("sliding"),
        limit(2, NANOS_PER_SEC, 2).with_algorithm(Algorithm::SlidingWindow)
    );
    assert_eq!(limit_of("fixed").algorithm(), Algorithm::FixedWindow);
    // Without an algorithm anywhere, a token bucket.
    let plain = compile(serde_json::json!({"version": 1, "rules": [
        {"name": "x", "key": ["method"], "limit": {"requests": 1, "per": "1s"}}]}))
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        plain.rule("x").map(|r| r.limits.strictest().algorithm()),
        Some(Algorithm::TokenBucket)
    );
    // A burst on a window, written on the rule or reached through the defaults
    // or a plan, is refused naming the field.
    let refused = compile(serde_json::json!({
        "version": 1,
        "defaults": {"algorithm": "fixed_window"},
        "rules": [
            {"name": "a", "key": ["method"], "limit": {"requests": 5, "per": "1s", "burst": 9}},
            {"name": "b", "key": ["method"], "algorithm": "sliding_window",
             "plans": {"header": "x-plan", "default": "free", "limits": {"free": {"requests": 3, "per": "1m", "burst": 4}}}},
        ]
    }));
    let errors: Vec<String> = match refused {
        Ok(_) => panic!("a window with a burst was accepted"),
        Err(e) => e.errors.iter().map(ToString::to_string).collect(),
    };
    assert!(
        errors.iter().any(|e| e.contains(
            "rule a: field rules[0].limit.burst: `burst: 9` applies to `token_bucket` only"
        )),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(
            |e| e.contains("rule b: field rules[1].plans.limits.free.burst:")
                && e.contains("`sliding_window`")
        ),
        "{errors:?}"
    );
}

#[test]
fn the_log_sample_comes_from_the_rule_then_the_defaults_and_is_a_share() {
    let rule = |extra: serde_json::Value| {
        let mut r = serde_json::json!({"name": "r", "key": ["method"], "limit": {"requests": 1, "per": "1s"}});
        r.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        r
    };
    let s =
        compile(serde_json::json!({"version": 1, "rules": [rule(serde_json::json!({}))]})).unwrap();
    assert_eq!(s.rules()[0].log_sample, DEFAULT_LOG_SAMPLE);
    assert_eq!(s.rules()[0].log_key, LogKey::Id);
    let s = compile(serde_json::json!({"version": 1, "defaults": {"log_sample": 0.5},
        "rules": [rule(serde_json::json!({})), {"name": "s", "key": ["method"], "limit": {"requests": 1, "per": "1s"}, "log_sample": 1, "log_key": "clear"}]}))
    .unwrap();
    assert_eq!(s.rule("r").unwrap().log_sample, 0.5);
    assert_eq!(s.rule("s").unwrap().log_sample, 1.0);
    assert_eq!(s.rule("s").unwrap().log_key, LogKey::Clear);
    let e = compile(
        serde_json::json!({"version": 1, "rules": [rule(serde_json::json!({"log_sample": 1.5}))]}),
    )
    .unwrap_err();
    assert_eq!(e.errors[0].rule.as_deref(), Some("r"));
    assert_eq!(e.errors[0].field, "log_sample");
    let e = compile(serde_json::json!({"version": 1, "defaults": {"log_sample": -0.1}, "rules": [rule(serde_json::json!({}))]})).unwrap_err();
    assert_eq!(e.errors[0].field, "defaults.log_sample");
}
