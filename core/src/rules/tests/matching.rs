//! Which rules apply to a request, found by name and position, and keyed by a caller.

use super::*;

#[test]
fn a_set_knows_which_key_parts_it_uses() {
    let s = set();
    assert!(s.uses(&KeyPart::Method));
    assert!(!s.uses(&KeyPart::ClientIp));
    assert!(!s.uses(&KeyPart::Route));
}

#[test]
fn matching_checks_path_method_and_headers() {
    let s = set();
    let hit = request(
        "/v1/search?q=1",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    let names: Vec<String> = s
        .applicable(&hit)
        .unwrap()
        .iter()
        .map(|a| a.key.to_string())
        .collect();
    assert_eq!(names, ["per-key|k1", "loose|GET"]);
    for miss in [
        request(
            "/v2/search",
            "GET",
            &[("x-env", "prod"), ("x-api-key", "k1")],
        ),
        request(
            "/v1/search",
            "POST",
            &[("x-env", "prod"), ("x-api-key", "k1")],
        ),
        request(
            "/v1/search",
            "GET",
            &[("x-env", "dev"), ("x-api-key", "k1")],
        ),
        // The key cannot be formed: the rule does not apply.
        request("/v1/search", "GET", &[("x-env", "prod")]),
    ] {
        assert!(
            s.applicable(&miss)
                .unwrap()
                .iter()
                .all(|a| a.rule.name != "per-key"),
            "{miss:?}"
        );
    }
}

#[test]
fn header_conditions_hold_for_any_value_sent() {
    let s = set();
    // `x-env: dev` beside `x-env: prod` does not hide the prod condition.
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "dev"), ("x-env", "prod"), ("x-api-key", "k1")],
    );
    assert!(keys(&s, &req).contains(&"per-key|k1".to_string()));
}

#[test]
fn rules_are_found_by_name() {
    let s = set();
    for (i, r) in s.rules().iter().enumerate() {
        assert!(s
            .rule(&r.name)
            .is_some_and(|f| std::ptr::eq(f, &s.rules()[i])));
    }
    assert!(s.rule("nope").is_none());
    assert!(s.rule("").is_none());
}

#[test]
fn applicable_gives_each_rule_its_position() {
    let s = set();
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    for a in s.applicable(&req).unwrap() {
        assert!(std::ptr::eq(a.rule, &s.rules()[a.index]));
    }
}

#[test]
fn one_rule_is_applied_by_name() {
    let s = set();
    let req = request(
        "/v1/search",
        "GET",
        &[("x-env", "prod"), ("x-api-key", "k1")],
    );
    let a = s.applicable_rule("per-key", &req).unwrap();
    assert_eq!(a.key, DescriptorKey::new("per-key", ["k1"]));
    assert_eq!(a.index, s.position("per-key").unwrap());
    // A rule that does not apply, and one that does not exist.
    assert!(s.applicable_rule("plans", &req).is_none());
    assert!(s.applicable_rule("nope", &req).is_none());
}

#[test]
fn a_method_in_any_case_is_matched_and_keyed_in_upper_case() {
    let s = set();
    for (sent, keyed) in [
        ("get", "GET"),
        ("GeT", "GET"),
        ("GET", "GET"),
        ("purge", "PURGE"),
    ] {
        let req = request(
            "/v1/search",
            sent,
            &[("x-env", "prod"), ("x-api-key", "k1")],
        );
        assert_eq!(req.method, keyed, "{sent}");
        let keys: Vec<String> = s
            .applicable(&req)
            .unwrap()
            .iter()
            .map(|a| a.key.to_string())
            .collect();
        // `per-key` matches GET only.
        let expected = if keyed == "GET" {
            vec!["per-key|k1".to_string(), format!("loose|{keyed}")]
        } else {
            vec![format!("loose|{keyed}")]
        };
        assert_eq!(keys, expected, "{sent}");
    }
}
